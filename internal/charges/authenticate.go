package charges

import (
	"context"
	"crypto/hmac"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/gatehouse-pay/gatehouse/internal/events"
	"github.com/gatehouse-pay/gatehouse/internal/keyring"
	"github.com/gatehouse-pay/gatehouse/internal/outbox"
	"github.com/gatehouse-pay/gatehouse/internal/providers"
)

// Cardholder authentication (3-D Secure). When the issuer asks the
// cardholder to authenticate, the charge moves from created to
// requires_action and waits. Only three things move it on: the issuer's
// answer (the cardholder completed or failed the challenge, which the
// challenge page records for the worker, or the provider reports), a void,
// and AUTHENTICATION_TIMEOUT. Every other task, request or retry leaves it
// where it is.

// DefaultAuthenticationTimeout is how long a charge waits for the cardholder.
const DefaultAuthenticationTimeout = time.Hour

// ChallengePath is the path of the gateway's challenge pages.
const ChallengePath = "/authenticate/v1/"

// Links makes the challenge links of charges: unguessable (a keyed MAC of
// the charge's id), bound to their charge, and single-use because the
// answer they record can be recorded once.
type Links struct {
	base string
	keys *keyring.Keyring
}

// NewLinks returns the links of the gateway reachable at base (PUBLIC_URL).
func NewLinks(base string, keys *keyring.Keyring) Links {
	return Links{base: strings.TrimRight(base, "/"), keys: keys}
}

func (l Links) token(chargeID string) string {
	return base64.RawURLEncoding.EncodeToString(l.keys.MAC(keyring.PurposeChallenge, []byte(chargeID)))
}

// Challenge is the emulated issuer's challenge page of a charge.
func (l Links) Challenge(chargeID string) string {
	return l.base + ChallengePath + chargeID + "/" + l.token(chargeID)
}

// Return is where a provider's own challenge page sends the cardholder back.
func (l Links) Return(chargeID string) string { return l.Challenge(chargeID) + "/return" }

// Rebase points c's emulated challenge link at this gateway's base: the
// worker that wrote it may know the API by another address.
func (l Links) Rebase(c Charge) Charge {
	u := c.Authentication.NextActionURL
	if l.keys == nil || u == nil {
		return c
	}
	suffix := ChallengePath + c.ID + "/" + l.token(c.ID)
	if strings.HasSuffix(*u, suffix) && *u != l.base+suffix {
		rebased := l.base + suffix
		c.Authentication.NextActionURL = &rebased
	}
	return c
}

// Valid reports whether token is the challenge token of chargeID.
func (l Links) Valid(chargeID, token string) bool {
	return hmac.Equal([]byte(token), []byte(l.token(chargeID)))
}

// WithAuthentication sets how long a charge waits for the cardholder, the
// links of the challenge pages, and schedule, which enqueues the charge's
// timeout task for a time (may be nil: the sweeper then finds the charge
// once it expired).
func (p *Processor) WithAuthentication(timeout time.Duration, links Links, schedule func(ctx context.Context, t outbox.Task, at time.Time) error) *Processor {
	if timeout > 0 {
		p.authTimeout = timeout
	}
	p.links, p.schedule = links, schedule
	return p
}

// authorizeRequest is the provider request of c's authorization.
func (p *Processor) authorizeRequest(c Charge, card providers.Card) providers.AuthorizeRequest {
	r := providers.AuthorizeRequest{
		IdempotencyKey: c.AuthorizeKey(), Amount: c.Amount, Currency: c.Currency,
		Capture: c.Capture, Card: card, Description: deref(c.Description), Metadata: c.Metadata,
		OffSession: c.OffSession, Authenticated: c.SavedCardAuthenticated,
	}
	if !c.OffSession && p.links.keys != nil {
		r.ReturnURL = p.links.Return(c.ID)
	}
	return r
}

// requireAction records that the issuer asked the cardholder to
// authenticate: the charge waits in requires_action with its challenge link
// until the answer, a void or the timeout. An off-session charge has no
// cardholder to ask, so it fails authentication_required.
func (p *Processor) requireAction(ctx context.Context, c Charge, task outbox.Task, res providers.Result) error {
	if c.OffSession {
		return p.fail(ctx, c, task, "authentication_required", "The card's issuer requires the cardholder to authenticate, and the customer is not present.")
	}
	url := res.Action.RedirectURL
	if url == "" {
		url = p.links.Challenge(c.ID)
	}
	now := p.stamp()
	expires := now.Add(p.authTimeout)
	after := c
	after.Status = StatusRequiresAction
	after.ProviderReference = &res.Reference
	after.Authentication = Authentication{Status: AuthPending, NextActionURL: &url, ExpiresAt: &expires}
	after.UpdatedAt = now
	e, err := p.event(after, events.ChargeRequiresAction)
	if err != nil {
		return err
	}
	if err := p.apply(ctx, Transition{Before: c, After: after, Event: &e, DoneTask: task.ID()}); err != nil {
		return err
	}
	if p.schedule != nil {
		if err := p.schedule(ctx, outbox.Task{Type: outbox.ChargeAuthenticationTimeout, RefID: c.ID}, expires); err != nil {
			p.log.WarnContext(ctx, "authentication timeout not scheduled; the sweeper finds the charge when it expires", "charge_id", c.ID, "err", err)
		}
	}
	return nil
}

// Authenticate settles a charge that requires action: with the answer the
// challenge page recorded, through the provider; with none once the
// cardholder's time is up, by cancelling the payment at the provider and
// failing the charge authentication_expired. Before either, and for a charge
// that no longer requires action or whose void is pending, it does nothing.
// An answer the provider leaves unknown is tried again: the charge stays
// where it is.
func (p *Processor) Authenticate(ctx context.Context, id string, final bool) error {
	task := outbox.Task{Type: outbox.ChargeAuthenticate, RefID: id}
	c, sealed, prov, err := p.load(ctx, id)
	if err != nil {
		return err
	}
	if c.Status != StatusRequiresAction || c.PendingAction != nil || c.ProviderReference == nil {
		p.observe(c.Provider, "authenticate", OutcomeNoop, 0)
		return p.done(ctx, task)
	}
	if c.Authentication.Answer == nil {
		if exp := c.Authentication.ExpiresAt; exp != nil && p.now().Before(*exp) {
			return p.done(ctx, task) // not yet: the timeout task comes back
		}
	}
	release, err := p.slot(ctx, c)
	if err != nil {
		return err
	}
	defer release()
	if c.Authentication.Answer == nil {
		return p.expire(ctx, c, prov, task, final)
	}
	return p.resume(ctx, c, sealed, prov, task, *c.Authentication.Answer, final)
}

// resume asks the provider how the payment ended after the cardholder's
// answer, and moves the charge as the issuer's answer says.
func (p *Processor) resume(ctx context.Context, c Charge, sealed []byte, prov providers.Provider, task outbox.Task, answer string, final bool) error {
	auth, ok := prov.(providers.Authenticator)
	if !ok {
		return fmt.Errorf("charges: provider %s cannot resume an authentication", c.Provider)
	}
	card, err := p.card(c, sealed)
	if err != nil && answer != providers.AnswerReturned {
		return p.failAuthenticated(ctx, c, task, AuthFailed, "processing_error", "The card data could not be read.")
	}
	var details map[string]string
	if answer == providers.AnswerReturned {
		if details, err = p.store.ActionDetails(ctx, c.ID); err != nil {
			return err
		}
	}
	start := time.Now()
	cctx, cancel := context.WithTimeout(ctx, p.timeout)
	res, err := auth.Authenticate(cctx, providers.AuthenticateRequest{
		IdempotencyKey: IdempotencyKey(c.ID, "authenticate"), Reference: *c.ProviderReference, Answer: answer,
		Amount: c.Amount, Currency: c.Currency, Capture: c.Capture, Card: card, Details: details,
	})
	cancel()
	elapsed := time.Since(start)
	if d, ok := providers.AsDecline(err); ok {
		p.observe(c.Provider, "authenticate", OutcomeDeclined, elapsed)
		status := AuthSucceeded // the issuer declined after the cardholder authenticated
		if d.Code == "authentication_failed" || d.Code == "authentication_expired" {
			status = AuthFailed
		}
		return p.failAuthenticated(ctx, c, task, status, d.Code, authDeclineMessage(d))
	}
	if err != nil {
		p.observe(c.Provider, "authenticate", OutcomeRetry, elapsed)
		if !final {
			return fmt.Errorf("%w: %v", ErrRetry, err)
		}
		return fmt.Errorf("charges: the authentication of %s is still unknown at the provider after the last attempt; the sweeper sends it again: %w", c.ID, err)
	}
	switch {
	case res.Action != nil:
		// The cardholder came back without finishing: the link may be used again.
		p.observe(c.Provider, "authenticate", OutcomePending, elapsed)
		after := c
		after.Authentication.Answer = nil
		if res.Action.RedirectURL != "" {
			after.Authentication.NextActionURL = &res.Action.RedirectURL
		}
		after.UpdatedAt = p.stamp()
		return p.apply(ctx, Transition{Before: c, After: after, DoneTask: task.ID(), Cause: CauseIssuer})
	case res.Pending:
		p.observe(c.Provider, "authenticate", OutcomePending, elapsed)
		return fmt.Errorf("%w: %v", ErrRetry, errStillProcessing)
	}
	p.observe(c.Provider, "authenticate", OutcomeSucceeded, elapsed)
	now := p.stamp()
	after := c
	after.Authentication.Status, after.Authentication.CompletedAt = AuthSucceeded, &now
	after.Authentication.Answer = nil
	after.ProviderReference = ptr(res.Reference)
	after.UpdatedAt = now
	status := providers.PaymentAuthorized
	if c.Capture {
		status = providers.PaymentCaptured
	}
	t, err := p.settledTransition(c, after, task, status, c.Amount)
	if err != nil {
		return err
	}
	t.SavedCardAuthenticated, t.Cause = c.PaymentMethodID != nil, CauseIssuer
	if c.Capture {
		t.Settlement = res.Settlement
	}
	return p.apply(ctx, t)
}

// expire cancels at the provider a payment whose cardholder did not answer
// in time and fails the charge authentication_expired. A provider that
// refuses the cancellation may have had the cardholder's answer on its own
// page: then its answer settles the charge. An unknown outcome is tried again.
func (p *Processor) expire(ctx context.Context, c Charge, prov providers.Provider, task outbox.Task, final bool) error {
	start := time.Now()
	cctx, cancel := context.WithTimeout(ctx, p.timeout)
	_, err := prov.Void(cctx, providers.VoidRequest{IdempotencyKey: IdempotencyKey(c.ID, "expire"), Reference: *c.ProviderReference})
	cancel()
	elapsed := time.Since(start)
	if _, declined := providers.AsDecline(err); declined {
		p.observe(c.Provider, "authentication_timeout", OutcomeDeclined, elapsed)
		return p.resume(ctx, c, nil, prov, task, providers.AnswerReturned, final)
	}
	if err != nil {
		p.observe(c.Provider, "authentication_timeout", OutcomeRetry, elapsed)
		if !final {
			return fmt.Errorf("%w: %v", ErrRetry, err)
		}
		return fmt.Errorf("charges: the cancellation of %s is still unknown at the provider after the last attempt; the sweeper sends it again: %w", c.ID, err)
	}
	p.observe(c.Provider, "authentication_timeout", OutcomeSucceeded, elapsed)
	return p.failAuthenticated(ctx, c, task, AuthFailed, "authentication_expired", "The cardholder did not complete the authentication in time.")
}

// failAuthenticated fails a charge that required action, recording how
// the authentication ended.
func (p *Processor) failAuthenticated(ctx context.Context, c Charge, task outbox.Task, status, code, message string) error {
	now := p.stamp()
	after := c
	after.Status = StatusFailed
	after.FailureCode, after.FailureMessage = &code, &message
	after.Authentication.Status, after.Authentication.Answer = status, nil
	if code != "authentication_expired" {
		after.Authentication.CompletedAt = &now
	}
	after.UpdatedAt = now
	e, err := p.event(after, events.ChargeFailed)
	if err != nil {
		return err
	}
	cause := CauseIssuer
	if code == "authentication_expired" {
		cause = CauseTimeout
	}
	return p.apply(ctx, Transition{Before: c, After: after, Event: &e, DoneTask: task.ID(), PurgeCard: true, Cause: cause})
}

func authDeclineMessage(d *providers.Decline) string {
	switch {
	case d.Message != "":
		return d.Message
	case d.Code == "authentication_failed":
		return "The cardholder did not authenticate the payment."
	case d.Code == "authentication_expired":
		return "The cardholder did not complete the authentication in time."
	}
	return declineMessage(d)
}

// ErrChallengeClosed is the answer to a challenge link that can no longer be
// used: already answered, expired, or its charge moved on.
var ErrChallengeClosed = errors.New("charges: the challenge is closed")

// savedCardExpired reports whether a saved card's expiry has passed at now.
func savedCardExpired(c Charge, now time.Time) bool {
	if c.PaymentMethodID == nil || c.Card.ExpMonth == nil || c.Card.ExpYear == nil {
		return false
	}
	y, m := now.Year(), int(now.Month())
	return *c.Card.ExpYear < y || (*c.Card.ExpYear == y && *c.Card.ExpMonth < m)
}
