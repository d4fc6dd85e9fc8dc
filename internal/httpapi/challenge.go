package httpapi

import (
	"bytes"
	"embed"
	"errors"
	"html/template"
	"net/url"
	"strings"
	"unicode/utf8"

	"github.com/gofiber/fiber/v2"

	"github.com/gatehouse-pay/gatehouse/internal/apperr"
	"github.com/gatehouse-pay/gatehouse/internal/charges"
	"github.com/gatehouse-pay/gatehouse/internal/money"
	"github.com/gatehouse-pay/gatehouse/internal/providers"
)

// The challenge pages of cardholder authentication (api/openapi.yaml,
// docs/authentication.md): the sandbox's emulated issuer page, with a
// Complete and a Fail form that work without script, and the return page
// a provider's own challenge page sends the cardholder back to. A link is
// bound to its charge by a keyed MAC and records one answer; after it the
// cardholder goes to the charge's return_url with ?charge=<id>, or, in the
// card field's frame (no return_url), the page tells the card field.
//
//go:embed challenge/challenge.html challenge/done.html challenge/challenge.js challenge/challenge.css
var challengeFiles embed.FS

var challengePages = template.Must(template.ParseFS(challengeFiles, "challenge/challenge.html", "challenge/done.html"))

// challengeCSP: no inline script; any page may frame it, since the card
// field shows it in a frame of the merchant's page. It is a constant: no
// text of a request or a charge ever enters it. The forms post to this
// origin, whose answer redirects to the merchant's return_url; browsers
// apply form-action to that redirect too, so it admits any http(s) target
// by scheme rather than naming the return_url's host.
const challengeCSP = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; " +
	"base-uri 'none'; frame-ancestors *; form-action 'self' http: https:"

func (s *server) challengeRoutes(app *fiber.App, limit fiber.Handler) {
	const js, css = "text/javascript; charset=utf-8", "text/css; charset=utf-8"
	app.Get(charges.ChallengePath+"challenge.js", staticFile(challengeFiles, "challenge/challenge.js", js))
	app.Get(charges.ChallengePath+"challenge.css", staticFile(challengeFiles, "challenge/challenge.css", css))
	app.Get(charges.ChallengePath+":id/:token", limit, s.challengePage)
	app.Post(charges.ChallengePath+":id/:token", limit, s.challengeAnswer)
	app.Get(charges.ChallengePath+":id/:token/return", limit, s.challengeReturn)
}

// staticFile serves one embedded file with its type and caching.
func staticFile(fs embed.FS, name, contentType string) fiber.Handler {
	body, err := fs.ReadFile(name)
	if err != nil {
		panic(err) // embedded at build time
	}
	return func(c *fiber.Ctx) error {
		c.Set(fiber.HeaderContentType, contentType)
		c.Set(fiber.HeaderContentSecurityPolicy, scriptCSP)
		c.Set(fiber.HeaderXContentTypeOptions, "nosniff")
		c.Set(fiber.HeaderCacheControl, "public, max-age=300")
		return c.Send(body)
	}
}

type challengeView struct {
	Amount, Brand, Last4, Action string
}

type doneView struct {
	Title, Message, ChargeID, Answer string
}

// challengePage shows the emulated issuer's page of a charge that waits.
func (s *server) challengePage(c *fiber.Ctx) error {
	ch, err := s.Charges.Challenge(c.UserContext(), strings.Clone(c.Params("id")), strings.Clone(c.Params("token")))
	if err == nil && !s.Charges.Emulated(ch) {
		err = apperr.NotFound("challenge")
	}
	if err != nil {
		return challengeError(err)
	}
	v := challengeView{Amount: money.Format(ch.Amount, ch.Currency), Brand: ch.Card.Brand, Last4: deref(ch.Card.Last4), Action: c.Path()}
	return s.renderChallenge(c, "challenge.html", v)
}

// challengeAnswer records the cardholder's Complete or Fail.
func (s *server) challengeAnswer(c *fiber.Ctx) error {
	answer := strings.Clone(c.FormValue("answer"))
	ch, err := s.Charges.Answer(c.UserContext(), strings.Clone(c.Params("id")), strings.Clone(c.Params("token")), answer)
	if err != nil {
		return challengeError(err)
	}
	return s.challengeOver(c, ch, answer)
}

// Bounds of what a provider's page may send the cardholder back with.
const (
	maxReturnDetails     = 8
	maxReturnDetailKey   = 64
	maxReturnDetailValue = 8 << 10
)

// returnDetails are the query parameters the provider's page sent the
// cardholder back with (Adyen's redirectResult), kept for the worker's
// call that settles the authentication; the adapter passes on only the
// names its provider takes. Parameters past the bounds are dropped.
func returnDetails(c *fiber.Ctx) map[string]string {
	out := map[string]string{}
	c.Context().QueryArgs().VisitAll(func(k, v []byte) {
		if len(out) < maxReturnDetails && len(k) > 0 && len(k) <= maxReturnDetailKey && len(v) <= maxReturnDetailValue &&
			utf8.Valid(k) && utf8.Valid(v) {
			out[string(k)] = string(v)
		}
	})
	if len(out) == 0 {
		return nil
	}
	return out
}

// challengeReturn is where a provider's challenge page sends the cardholder.
func (s *server) challengeReturn(c *fiber.Ctx) error {
	ch, err := s.Charges.Returned(c.UserContext(), strings.Clone(c.Params("id")), strings.Clone(c.Params("token")), returnDetails(c))
	if err != nil {
		return challengeError(err)
	}
	return s.challengeOver(c, ch, providers.AnswerReturned)
}

// challengeOver sends the cardholder on: to return_url with ?charge=<id>,
// or, without one (or with one stored before return_url was checked as it
// is now, which is not followed), to a page that tells the card field.
func (s *server) challengeOver(c *fiber.Ctx, ch charges.Charge, answer string) error {
	v := doneView{Title: "Authentication complete", Message: "You can close this window.", ChargeID: ch.ID, Answer: answer}
	if answer == providers.AnswerFailed {
		v.Title = "Authentication failed"
	}
	if ch.ReturnURL != nil && charges.ValidReturnURL(*ch.ReturnURL) {
		if to, err := withCharge(*ch.ReturnURL, ch.ID); err == nil && charges.ValidReturnURL(to) {
			c.Set(fiber.HeaderCacheControl, "no-store")
			return c.Redirect(to, fiber.StatusSeeOther)
		}
	}
	return s.renderChallenge(c, "done.html", v)
}

// withCharge adds charge=<id> to the query of u.
func withCharge(u, chargeID string) (string, error) {
	parsed, err := url.Parse(u)
	if err != nil {
		return "", err
	}
	q := parsed.Query()
	q.Set("charge", chargeID)
	parsed.RawQuery = q.Encode()
	return parsed.String(), nil
}

func (s *server) renderChallenge(c *fiber.Ctx, page string, v any) error {
	var buf bytes.Buffer
	if err := challengePages.ExecuteTemplate(&buf, page, v); err != nil {
		return apperr.Internal(err)
	}
	c.Set(fiber.HeaderContentType, fiber.MIMETextHTMLCharsetUTF8)
	c.Set(fiber.HeaderContentSecurityPolicy, challengeCSP)
	c.Set(fiber.HeaderXContentTypeOptions, "nosniff")
	c.Set(fiber.HeaderReferrerPolicy, "no-referrer")
	c.Set(fiber.HeaderCacheControl, "no-store")
	return c.Send(buf.Bytes())
}

// challengeError answers a link that is not one (404) or whose charge no
// longer waits for its cardholder (409 invalid_state).
func challengeError(err error) error {
	if errors.Is(err, charges.ErrChallengeClosed) {
		return charges.ErrInvalidState("This authentication is over: it was answered, it expired, or the charge was voided.")
	}
	return err
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// cardFieldActionPath is where the card field asks for the challenge of a
// charge whose card it collected (gatehouse.handleNextAction).
const cardFieldActionPath = "/elements/v1/next_action"

type cardFieldActionRequest struct {
	Charge *string  `json:"charge"`
	Tokens []string `json:"tokens"`
}

// maxCardFieldTokens bounds the tokens one card field may name.
const maxCardFieldTokens = 20

// cardFieldNextAction answers the card field (public key) for a charge of
// the merchant whose card it collected; any other charge is not found.
func (s *server) cardFieldNextAction(c *fiber.Ctx) error {
	var req cardFieldActionRequest
	if err := decodeJSON(c, &req); err != nil {
		return err
	}
	switch {
	case req.Charge == nil || *req.Charge == "":
		return apperr.Missing("charge")
	case len(req.Tokens) == 0:
		return apperr.Missing("tokens")
	case len(req.Tokens) > maxCardFieldTokens:
		return apperr.Invalid("tokens", "tokens can name at most %d card tokens.", maxCardFieldTokens)
	}
	pr := principal(c)
	ch, err := s.Charges.ForCardField(c.UserContext(), pr.MerchantID, pr.Environment, *req.Charge, req.Tokens)
	if err != nil {
		return err
	}
	c.Set(fiber.HeaderCacheControl, "no-store")
	return writeJSON(c, fiber.StatusOK, presentCardFieldAction(ch))
}
