package httpapi

import (
	"net/url"
	"strings"

	"github.com/gofiber/fiber/v2"

	"github.com/gatehouse-pay/gatehouse/internal/apikeys"
	"github.com/gatehouse-pay/gatehouse/internal/apperr"
	"github.com/gatehouse-pay/gatehouse/internal/ids"
	"github.com/gatehouse-pay/gatehouse/internal/listing"
	"github.com/gatehouse-pay/gatehouse/internal/members"
	"github.com/gatehouse-pay/gatehouse/internal/resource"
)

// actor is the signed-in member making a change to the team.
func actor(c *fiber.Ctx) members.Actor {
	p := principal(c)
	return members.Actor{MerchantID: p.MerchantID, MemberID: p.MemberID, Role: p.Role}
}

// setupURL is the page where an invited member sets a password.
func (s *server) setupURL(token string) string {
	return s.Config.PublicURL + dashboardPath + "/setup?token=" + url.QueryEscape(token)
}

type inviteRequest struct {
	Email string `json:"email"`
	Role  string `json:"role"`
}

func (s *server) createMember(c *fiber.Ctx) error {
	var req inviteRequest
	if err := decodeJSON(c, &req); err != nil {
		return err
	}
	inv, err := s.Members.Invite(c.UserContext(), actor(c), req.Email, req.Role)
	if err != nil {
		return err
	}
	return writeJSON(c, fiber.StatusCreated, resource.Invitation{Member: presentMember(inv.Member), SetupURL: s.setupURL(inv.Token)})
}

func (s *server) listMembers(c *fiber.Ctx) error {
	p, err := listParams(c, validMemberID)
	if err != nil {
		return err
	}
	page, err := s.Members.List(c.UserContext(), principal(c).MerchantID, p)
	if err != nil {
		return err
	}
	return writeJSON(c, fiber.StatusOK, newList(page, presentMember))
}

func (s *server) getMember(c *fiber.Ctx) error {
	m, err := s.Members.Get(c.UserContext(), principal(c).MerchantID, strings.Clone(c.Params("id")))
	if err != nil {
		return err
	}
	if m.RemovedAt != nil {
		return errNoMember
	}
	return writeJSON(c, fiber.StatusOK, presentMember(m))
}

type roleRequest struct {
	Role string `json:"role"`
}

func (s *server) updateMember(c *fiber.Ctx) error {
	var req roleRequest
	if err := decodeJSON(c, &req); err != nil {
		return err
	}
	m, err := s.Members.SetRole(c.UserContext(), actor(c), strings.Clone(c.Params("id")), req.Role)
	if err != nil {
		return err
	}
	return writeJSON(c, fiber.StatusOK, presentMember(m))
}

// deleteMember removes a member and answers what remains of it with the
// keys it made that still work: a removal does not revoke them
// (integrations run on them), the owner reviews them.
func (s *server) deleteMember(c *fiber.Ctx) error {
	m, err := s.Members.Remove(c.UserContext(), actor(c), strings.Clone(c.Params("id")))
	if err != nil {
		return err
	}
	keys, err := s.keysToReview(c, m.ID)
	if err != nil {
		return err
	}
	return writeJSON(c, fiber.StatusOK, resource.RemovedMember{Deleted: true, ID: m.ID, Object: "member", APIKeys: newList(keys, presentKey)})
}

// keysToReview are the first listing.MaxLimit keys the member made that
// still work (neither revoked nor rolled), newest first, read from the
// primary; the rest, if any, are the pages of GET /v1/me/api_keys?created_by=.
// The member's sessions end with its removal, so none is added afterwards.
func (s *server) keysToReview(c *fiber.Ctx, memberID string) (listing.Page[apikeys.Key], error) {
	return s.Keys.List(c.UserContext(), principal(c).MerchantID, apikeys.Filter{CreatedBy: memberID, Active: true},
		listing.Params{Limit: listing.MaxLimit})
}

type setupRequest struct {
	Token    string `json:"token"`
	Password string `json:"password"`
}

// setup sets an invited member's password with the setup link's token.
func (s *server) setup(c *fiber.Ctx) error {
	var req setupRequest
	if err := decodeJSON(c, &req); err != nil {
		return err
	}
	m, err := s.Members.Setup(s.auditedSignIn(c, "member.setup"), req.Token, req.Password)
	if err != nil {
		return err
	}
	return writeJSON(c, fiber.StatusOK, presentMember(m))
}

var errNoMember = apperr.NotFound("member")

func validMemberID(id string) bool { return ids.Valid("mem", id) }
