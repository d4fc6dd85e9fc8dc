package httpapi

import (
	"crypto/rand"
	"encoding/hex"
	"net/url"
	"strings"
	"time"

	"github.com/gofiber/fiber/v2"

	"github.com/gatehouse-pay/gatehouse/internal/apikeys"
	"github.com/gatehouse-pay/gatehouse/internal/apperr"
	"github.com/gatehouse-pay/gatehouse/internal/authz"
	"github.com/gatehouse-pay/gatehouse/internal/members"
)

type teamView struct {
	Members []members.Member
	Roles   []string
	Self    string
	Invited *invitedView
	Pager   *pager
	// MFARequired is the account's two-factor policy (owners change it).
	MFARequired bool
	// Review is shown after a removal: the keys the removed member made
	// that still work.
	Review *reviewView
}

// reviewView is a removed member and the keys it made that still work,
// for the owner to review: a removal does not revoke them.
type reviewView struct {
	Member members.Member
	Keys   []apikeys.Key
	// More is set when the member made more such keys than are shown.
	More bool
}

type invitedView struct {
	Member members.Member
	URL    string
}

func (s *server) teamPage(c *fiber.Ctx) error { return s.renderTeam(c, nil) }

func (s *server) renderTeam(c *fiber.Ctx, invited *invitedView) error {
	return s.renderTeamWith(c, fiber.StatusOK, invited, "")
}

func (s *server) renderTeamWith(c *fiber.Ctx, status int, invited *invitedView, failure string) error {
	pg, err := newPager(c, dashboardPath+"/team", validMemberID, nil)
	if err != nil {
		return err
	}
	page, err := s.Members.List(c.UserContext(), principal(c).MerchantID, pg.params)
	if err != nil {
		return err
	}
	v, err := s.signedIn(c, "team", "Team")
	if err != nil {
		return err
	}
	var required bool
	if s.MFA != nil {
		if required, err = s.MFA.Required(c.UserContext(), principal(c).MerchantID); err != nil {
			return err
		}
	}
	review, err := s.review(c, strings.Clone(c.Query("review")))
	if err != nil {
		return err
	}
	v.Canonical = dashboardPath + "/team"
	v.Error = failure
	v.Data = teamView{Members: pageItems(pg, page, func(m members.Member) string { return m.ID }), Roles: authz.Roles,
		Self: principal(c).MemberID, Invited: invited, Pager: pg, MFARequired: required, Review: review}
	return s.render(c, status, "team", v)
}

// review is what the team page shows after the removal of the member id
// names: nil unless id is a removed member of the account.
func (s *server) review(c *fiber.Ctx, id string) (*reviewView, error) {
	if id == "" || !validMemberID(id) {
		return nil, nil
	}
	m, err := s.Members.Get(c.UserContext(), principal(c).MerchantID, id)
	switch {
	case apperr.KindOf(err) == apperr.KindNotFound:
		return nil, nil
	case err != nil:
		return nil, err
	case m.RemovedAt == nil:
		return nil, nil
	}
	keys, err := s.keysToReview(c, m.ID)
	if err != nil {
		return nil, err
	}
	return &reviewView{Member: m, Keys: keys.Items, More: keys.HasMore}, nil
}

// dashInvite invites a member and shows the setup link this once.
func (s *server) dashInvite(c *fiber.Ctx) error {
	inv, err := s.Members.Invite(c.UserContext(), actor(c), form(c, "email"), form(c, "role"))
	if err != nil {
		return err
	}
	return s.renderTeam(c, &invitedView{Member: inv.Member, URL: s.setupURL(inv.Token)})
}

func (s *server) dashMemberRole(c *fiber.Ctx) error {
	if _, err := s.Members.SetRole(c.UserContext(), actor(c), id(c), form(c, "role")); err != nil {
		return err
	}
	return redirectNotice(c, dashboardPath+"/team", "role_changed")
}

// dashRemoveMember removes a member and leads to the team page listing the
// keys it made that still work, for review.
func (s *server) dashRemoveMember(c *fiber.Ctx) error {
	m, err := s.Members.Remove(c.UserContext(), actor(c), id(c))
	if err != nil {
		return err
	}
	dashboardHeaders(c)
	return c.Redirect(dashboardPath+"/team?"+url.Values{"notice": {"member_removed"}, "review": {m.ID}}.Encode(), fiber.StatusSeeOther)
}

type setupView struct{ Token string }

// setupPage is the invitation link's page: a password form carrying the
// link's token, with a nonce cookie for its CSRF token as the sign-in page.
func (s *server) setupPage(c *fiber.Ctx) error {
	return s.renderSetup(c, fiber.StatusOK, strings.Clone(c.Query("token")), "")
}

func (s *server) renderSetup(c *fiber.Ctx, status int, token, failure string) error {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return apperr.Internal(err)
	}
	nonce := hex.EncodeToString(b[:])
	s.setCookie(c, loginCookie, nonce, dashboardPath+"/setup", time.Now().Add(time.Hour))
	v := view{Title: "Set your password", CSRF: s.loginToken(nonce), Error: failure, Data: setupView{Token: token}}
	return s.render(c, status, "setup", v)
}

// dashSetup sets the invited member's password, as POST /v1/auth/setup,
// and sends the browser to sign in.
func (s *server) dashSetup(c *fiber.Ctx) error {
	if _, err := s.signedOutForm(c); err != nil {
		return err
	}
	token := form(c, "token")
	if _, err := s.Members.Setup(s.auditedSignIn(c, "member.setup"), token, strings.Clone(c.FormValue("password"))); err != nil {
		ae, ok := apperr.As(err)
		if !ok || ae.Kind != apperr.KindInvalid {
			return err
		}
		return s.renderSetup(c, statusOf[ae.Kind], token, ae.Message)
	}
	s.clearCookie(c, loginCookie, dashboardPath+"/setup")
	return redirectNotice(c, dashboardPath+"/login", "password_set")
}
