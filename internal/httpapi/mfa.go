package httpapi

import (
	"errors"

	"github.com/gofiber/fiber/v2"

	"github.com/gatehouse-pay/gatehouse/internal/apperr"
	"github.com/gatehouse-pay/gatehouse/internal/auth"
	"github.com/gatehouse-pay/gatehouse/internal/members"
	"github.com/gatehouse-pay/gatehouse/internal/mfa"
	"github.com/gatehouse-pay/gatehouse/internal/resource"
)

// Two-factor sign-in (internal/mfa, docs/team.md): enrollment, the second
// step of a sign-in, and the account's policy.

var (
	errNoMFA = apperr.Internal(errors.New("httpapi: two-factor sign-in is not wired"))
	// errMFAFirst is the answer to a member who must set up two-factor
	// sign-in before anything else.
	errMFAFirst = &apperr.Error{Kind: apperr.KindForbidden, Code: apperr.CodePermissionDenied,
		Message: "Your account requires two-factor sign-in: set it up first (POST /v1/me/mfa/totp, or the dashboard's Security page). Until then you can only set it up or sign out."}
)

// self is the signed-in member, read afresh.
func (s *server) self(c *fiber.Ctx) (members.Member, error) {
	p := principal(c)
	m, err := s.Members.Get(c.UserContext(), p.MerchantID, p.MemberID)
	if err == nil && m.RemovedAt != nil {
		err = errSignedOut
	}
	return m, err
}

// writeSession is the answer to a completed sign-in.
func (s *server) writeSession(c *fiber.Ctx, l auth.Login) error {
	m, err := s.Merchants.Get(c.UserContext(), l.Member.MerchantID)
	if err != nil {
		return err
	}
	c.Set(fiber.HeaderCacheControl, "no-store")
	return writeJSON(c, fiber.StatusOK, presentSession(l, m))
}

// challenge starts the second step of a sign-in whose password was right.
func (s *server) challenge(c *fiber.Ctx, m members.Member) (string, error) {
	if s.MFA == nil {
		return "", errNoMFA
	}
	token, _, err := s.MFA.Challenge(c.UserContext(), m)
	return token, err
}

// secondFactorDue is login's answer to the right password of a member with
// two-factor sign-in on: 401 mfa_required, with the challenge that
// POST /v1/auth/mfa completes in the error object. Login's 200 stays the
// session alone. It is not a failed sign-in: the caller does not count it
// as one (no failure metric, nothing charged to the account's budget) and,
// as the session is not open yet, does not make the address known either.
func secondFactorDue(challenge string) *apperr.Error {
	return &apperr.Error{Kind: apperr.KindUnauthenticated, Code: apperr.CodeMFARequired, Challenge: challenge,
		Message: "Two-factor sign-in is on: send this challenge and a code from the authenticator app (or a recovery code) to POST /v1/auth/mfa within 5 minutes."}
}

// secondStep completes a sign-in with its challenge and a code. Wrong codes
// are charged to the account's budget of failed sign-ins, as wrong
// passwords are, and the budget is checked first (429 with Retry-After
// once it is spent); only a completed sign-in makes the address known to
// the account.
func (s *server) secondStep(c *fiber.Ctx, challenge, code string) (auth.Login, error) {
	if s.MFA == nil {
		return auth.Login{}, errNoMFA
	}
	ctx := c.UserContext()
	ch, err := s.MFA.Challenged(ctx, challenge)
	if err != nil {
		s.countAuthFailure(err)
		return auth.Login{}, err
	}
	m, err := s.Members.Get(ctx, ch.MerchantID, ch.MemberID)
	if apperr.KindOf(err) == apperr.KindNotFound || err == nil && m.RemovedAt != nil {
		return auth.Login{}, mfa.ErrBadChallenge
	}
	if err != nil {
		return auth.Login{}, err
	}
	attempted, err := s.guardAccount(c, m.Email)
	if err != nil {
		return auth.Login{}, err
	}
	err = s.MFA.Redeem(ctx, ch, m, code)
	attempted(err)
	if err != nil {
		s.countAuthFailure(err)
		return auth.Login{}, err
	}
	return s.Auth.OpenSession(s.auditedSignIn(c, "session.create"), m)
}

func (s *server) countAuthFailure(err error) {
	if apperr.KindOf(err) == apperr.KindUnauthenticated {
		s.Metrics.AuthFailures.WithLabelValues(apperr.CodeOf(err)).Inc()
	}
}

type mfaLoginRequest struct {
	Challenge string `json:"challenge"`
	Code      string `json:"code"`
}

// loginMFA is POST /v1/auth/mfa: the second step of a sign-in.
func (s *server) loginMFA(c *fiber.Ctx) error {
	var req mfaLoginRequest
	if err := decodeJSON(c, &req); err != nil {
		return err
	}
	switch {
	case req.Challenge == "":
		return apperr.Missing("challenge")
	case req.Code == "":
		return apperr.Missing("code")
	}
	l, err := s.secondStep(c, req.Challenge, req.Code)
	if err != nil {
		return err
	}
	return s.writeSession(c, l)
}

// enrollTOTP is POST /v1/me/mfa/totp: a new pending secret for the caller.
func (s *server) enrollTOTP(c *fiber.Ctx) error {
	if s.MFA == nil {
		return errNoMFA
	}
	// No parameters: a body, when sent, must be an empty object.
	if err := decodeJSON(c, &struct{}{}); err != nil {
		return err
	}
	m, err := s.self(c)
	if err != nil {
		return err
	}
	e, err := s.MFA.Enroll(c.UserContext(), m)
	if err != nil {
		return err
	}
	c.Set(fiber.HeaderCacheControl, "no-store")
	return writeJSON(c, fiber.StatusOK, presentEnrollment(e))
}

type confirmTOTPRequest struct {
	Code string `json:"code"`
}

// confirmTOTP is POST /v1/me/mfa/totp/confirm: turns two-factor sign-in on
// and shows the recovery codes this once.
func (s *server) confirmTOTP(c *fiber.Ctx) error {
	if s.MFA == nil {
		return errNoMFA
	}
	var req confirmTOTPRequest
	if err := decodeJSON(c, &req); err != nil {
		return err
	}
	m, err := s.self(c)
	if err != nil {
		return err
	}
	codes, err := s.MFA.Confirm(c.UserContext(), m, req.Code)
	if err != nil {
		return err
	}
	m.MFAEnabled = true
	c.Set(fiber.HeaderCacheControl, "no-store")
	return writeJSON(c, fiber.StatusOK, resource.RecoveryCodes{Member: presentMember(m), RecoveryCodes: codes})
}

func (s *server) getSettings(c *fiber.Ctx) error {
	if s.MFA == nil {
		return errNoMFA
	}
	required, err := s.MFA.Required(c.UserContext(), principal(c).MerchantID)
	if err != nil {
		return err
	}
	return writeJSON(c, fiber.StatusOK, presentSettings(required))
}

type settingsRequest struct {
	MFARequired *bool `json:"mfa_required"`
}

// updateSettings is PATCH /v1/me/settings (owners only, by the table).
func (s *server) updateSettings(c *fiber.Ctx) error {
	if s.MFA == nil {
		return errNoMFA
	}
	var req settingsRequest
	if err := decodeJSON(c, &req); err != nil {
		return err
	}
	if req.MFARequired == nil {
		return apperr.Missing("mfa_required")
	}
	m, err := s.self(c)
	if err != nil {
		return err
	}
	if err := s.MFA.SetRequired(c.UserContext(), m, *req.MFARequired); err != nil {
		return err
	}
	return writeJSON(c, fiber.StatusOK, presentSettings(*req.MFARequired))
}
