package httpapi

import (
	"encoding/base64"
	"html/template"

	"github.com/gofiber/fiber/v2"
	qrcode "github.com/skip2/go-qrcode"

	"github.com/gatehouse-pay/gatehouse/internal/apperr"
	"github.com/gatehouse-pay/gatehouse/internal/mfa"
)

// The dashboard's side of two-factor sign-in: the Security page, where a
// member sets it up, and the sign-in's second step.

type securityView struct {
	Email    string
	Enabled  bool
	Required bool
	// Pending is a setup waiting for its first code.
	Pending *pendingView
	// RecoveryCodes are shown once, right after the setup is confirmed.
	RecoveryCodes []string
	RecoveryLeft  int
}

type pendingView struct {
	Secret string
	URL    string
	QR     template.URL // a PNG data: URI
}

func (s *server) securityPage(c *fiber.Ctx) error {
	return s.renderSecurity(c, fiber.StatusOK, nil, "")
}

// renderSecurity renders the Security page; codes are the recovery codes
// of a setup just confirmed.
func (s *server) renderSecurity(c *fiber.Ctx, status int, codes []string, failure string) error {
	if s.MFA == nil {
		return errNoMFA
	}
	m, err := s.self(c)
	if err != nil {
		return err
	}
	data := securityView{Email: m.Email, Enabled: m.MFAEnabled, Required: m.MFARequired, RecoveryCodes: codes}
	ctx := c.UserContext()
	if m.MFAEnabled {
		if data.RecoveryLeft, err = s.MFA.RecoveryCodesLeft(ctx, m); err != nil {
			return err
		}
	} else {
		e, ok, err := s.MFA.Pending(ctx, m)
		if err != nil {
			return err
		}
		if ok {
			png, err := qrcode.Encode(e.URL, qrcode.Medium, 240)
			if err != nil {
				return apperr.Internal(err)
			}
			data.Pending = &pendingView{Secret: e.Secret, URL: e.URL,
				QR: template.URL("data:image/png;base64," + base64.StdEncoding.EncodeToString(png))}
		}
	}
	v, err := s.signedIn(c, "security", "Security")
	if err != nil {
		return err
	}
	v.Canonical = dashboardPath + "/security"
	v.Error = failure
	v.Data = data
	return s.render(c, status, "security", v)
}

// dashEnrollTOTP starts (or restarts) the setup and shows its QR code.
func (s *server) dashEnrollTOTP(c *fiber.Ctx) error {
	if s.MFA == nil {
		return errNoMFA
	}
	m, err := s.self(c)
	if err != nil {
		return err
	}
	if _, err := s.MFA.Enroll(c.UserContext(), m); err != nil {
		if apperr.KindOf(err) == apperr.KindConflict {
			return s.renderSecurity(c, fiber.StatusConflict, nil, err.Error())
		}
		return err
	}
	return s.renderSecurity(c, fiber.StatusOK, nil, "")
}

// dashConfirmTOTP turns two-factor sign-in on with a first code and shows
// the recovery codes this once.
func (s *server) dashConfirmTOTP(c *fiber.Ctx) error {
	if s.MFA == nil {
		return errNoMFA
	}
	m, err := s.self(c)
	if err != nil {
		return err
	}
	codes, err := s.MFA.Confirm(c.UserContext(), m, form(c, "code"))
	if err != nil {
		if ae, ok := apperr.As(err); ok && (ae.Kind == apperr.KindInvalid || ae.Kind == apperr.KindConflict) {
			return s.renderSecurity(c, statusOf[ae.Kind], nil, ae.Message)
		}
		return err
	}
	return s.renderSecurity(c, fiber.StatusOK, codes, "")
}

// dashTeamSettings sets whether every member must use two-factor sign-in
// (owners only, by the table).
func (s *server) dashTeamSettings(c *fiber.Ctx) error {
	if s.MFA == nil {
		return errNoMFA
	}
	m, err := s.self(c)
	if err != nil {
		return err
	}
	required := form(c, "mfa_required") == "on"
	if err := s.MFA.SetRequired(c.UserContext(), m, required); err != nil {
		if ae, ok := apperr.As(err); ok && ae.Kind == apperr.KindConflict {
			return s.renderTeamWith(c, fiber.StatusConflict, nil, ae.Message)
		}
		return err
	}
	if required {
		return redirectNotice(c, dashboardPath+"/team", "mfa_policy_on")
	}
	return redirectNotice(c, dashboardPath+"/team", "mfa_policy_off")
}

type loginMFAView struct {
	Challenge string
}

// renderLoginMFA is the sign-in's second step: a code form carrying the
// challenge, under the sign-in page's nonce cookie.
func (s *server) renderLoginMFA(c *fiber.Ctx, status int, nonce, challenge, failure string) error {
	v := view{Title: "Two-factor sign-in", CSRF: s.loginToken(nonce), Error: failure, Data: loginMFAView{Challenge: challenge}}
	return s.render(c, status, "login_mfa", v)
}

// dashLoginMFA completes a sign-in with a code, with the same limits and
// the same session as POST /v1/auth/mfa.
func (s *server) dashLoginMFA(c *fiber.Ctx) error {
	nonce, err := s.signedOutForm(c)
	if err != nil {
		return err
	}
	challenge, code := form(c, "challenge"), form(c, "code")
	if code == "" {
		return s.renderLoginMFA(c, fiber.StatusBadRequest, nonce, challenge, "Enter the code your authenticator app shows, or a recovery code.")
	}
	l, err := s.secondStep(c, challenge, code)
	if err != nil {
		switch apperr.CodeOf(err) {
		case apperr.CodeInvalidCredentials:
			return s.renderLoginMFA(c, fiber.StatusUnauthorized, nonce, challenge, mfa.ErrWrongCode.Message)
		case apperr.CodeInvalidToken:
			return s.renderLogin(c, fiber.StatusUnauthorized, loginView{}, mfa.ErrBadChallenge.Message)
		}
		return err
	}
	return s.signedInTo(c, l)
}
