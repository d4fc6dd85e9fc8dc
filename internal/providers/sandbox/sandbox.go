// Package sandbox is Gatehouse's built-in payment provider: deterministic, no
// network. The outcome of an authorization follows from the card (the test
// cards of api/openapi.yaml) and, for the flaky card, from how many times the same
// idempotency key was tried. Its books live behind the Ledger interface
// (PostgreSQL in production), which makes it idempotent the way a real
// provider is and lets tests count calls and provider-side charges.
package sandbox

import (
	"context"
	"crypto/rand"
	"fmt"
	"strings"
	"time"

	"github.com/gatehouse-pay/gatehouse/internal/apperr"
	"github.com/gatehouse-pay/gatehouse/internal/providers"
)

// Name is the provider's name in requests and in the registry.
const Name = "sandbox"

// Reference prefixes: authorizations (sbx_ch_...), authorizations that
// waited for the cardholder's authentication (sbx_pa_...) and refunds
// (sbx_re_...).
const (
	ChargePrefix    = "sbx_ch_"
	ChallengePrefix = "sbx_pa_"
	RefundPrefix    = "sbx_re_"
)

// LostAnswerAmount is the test amount of captures and refunds whose answer
// is lost: the sandbox books a capture or refund of exactly this amount and
// then, for the first LostAnswerFailures calls with its idempotency key,
// answers with an error wrapping providers.ErrUnavailable and
// context.DeadlineExceeded, as if the answer had timed out on its way back.
// The next call with the key answers with the booking.
const LostAnswerAmount = 1313

// LostAnswerFailures is how many calls with one key lose their answer (see
// LostAnswerAmount).
const LostAnswerFailures = 2

// FlakyFailures is how many calls with one idempotency key the flaky card
// (4000000000000507) answers with ErrUnavailable before it succeeds.
const FlakyFailures = 2

// Options tunes the sandbox.
type Options struct {
	// Latency is added to every call before it reaches the ledger, so load
	// tests can model a real provider's round trip. A context that ends
	// during the wait gives ErrUnavailable and nothing is recorded. 0 by default.
	Latency time.Duration
	// Now is the clock that decides whether a card has expired; time.Now when nil.
	Now func() time.Time
	// LoseAnswer, when set, is asked after every booked capture or refund
	// (a replay of an earlier booking too) with the operation and how many
	// calls were made with the key, this one included; true loses the
	// answer as LostAnswerAmount does. Tests use it to make every call
	// book and then time out.
	LoseAnswer func(op Operation, calls int64) bool
	// DisputeDecisionDelay is how long after test evidence is submitted a
	// dispute is decided (SANDBOX_DISPUTE_DECISION_DELAY).
	DisputeDecisionDelay time.Duration
	// Notified is told the id of every notification the sandbox stored
	// for the gateway, to apply it at once; nil leaves them to the
	// outbox's sweeper.
	Notified func(ctx context.Context, notificationID string)
}

// Provider is the sandbox provider. It is safe for concurrent use.
type Provider struct {
	ledger Ledger
	opts   Options
	// account is the connector its calls come through ("" for none).
	account string
}

// New returns the sandbox keeping its books in ledger, which must not be nil.
func New(ledger Ledger, opts Options) *Provider {
	if opts.Now == nil {
		opts.Now = time.Now
	}
	return &Provider{ledger: ledger, opts: opts}
}

var _ providers.Provider = (*Provider)(nil)

// ForAccount returns the sandbox as one connector's account: its books
// record the connector of every call, so the sandbox can report what it
// settled for each (Settled).
func (p *Provider) ForAccount(account string) providers.Provider {
	return &Provider{ledger: p.ledger, opts: p.opts, account: account}
}

// Name returns "sandbox".
func (p *Provider) Name() string { return Name }

// outcome is what the sandbox does with an authorization.
type outcome int

const (
	succeed outcome = iota
	decline         // a *providers.Decline with the rule's code
	flaky           // ErrUnavailable for the first FlakyFailures calls with a key, then succeed
	hang            // never answers: blocks until the context ends
	// challenge: the issuer asks the cardholder to authenticate (3-D
	// Secure); after the cardholder does, the rule's code (if any) is the
	// issuer's decline.
	challenge
)

// Off-session rules of the cards that ask for authentication.
const (
	offSessionRefused = iota // off session: authentication_required
	offSessionMandate        // off session: succeeds once the saved card was authenticated
)

type rule struct {
	outcome outcome
	code    string
	off     int // for challenge: what happens off session
	// dispute: the cardholder disputes the payment once it is captured
	// (DisputeFraudulent, ...).
	dispute string
}

// cards are the test card numbers of api/openapi.yaml; any other Luhn-valid number succeeds.
var cards = map[string]rule{
	"4242424242424242": {outcome: succeed, code: ""},
	"5555555555554444": {outcome: succeed, code: ""},
	"378282246310005":  {outcome: succeed, code: ""},
	"4000000000000002": {outcome: decline, code: "card_declined"},
	"4000000000009995": {outcome: decline, code: "insufficient_funds"},
	"4000000000000069": {outcome: decline, code: "expired_card"},
	"4000000000000119": {outcome: decline, code: "processing_error"},
	"4000000000000507": {outcome: flaky, code: ""},
	"4000000000000606": {outcome: hang, code: ""},
	// 3-D Secure (api/openapi.yaml).
	"4000002500003155": {outcome: challenge, off: offSessionMandate},
	"4000002760003184": {outcome: challenge, off: offSessionRefused},
	"4000008260003178": {outcome: challenge, code: "insufficient_funds", off: offSessionRefused},
	"4000000000003055": {outcome: succeed}, // supports 3-D Secure; frictionless
	// Disputed once captured (api/openapi.yaml, Disputes).
	"4000000000000259": {outcome: succeed, dispute: DisputeFraudulent},
	"4000000000002685": {outcome: succeed, dispute: DisputeProductNotReceived},
	"4000000000001976": {outcome: succeed, dispute: DisputeInquiry},
}

// tokens are the provider tokens the sandbox accepts, named like Stripe's test
// tokens and payment methods; any other token is an invalid request.
var tokens = map[string]rule{
	"tok_visa":                                {outcome: succeed, code: ""},
	"tok_mastercard":                          {outcome: succeed, code: ""},
	"tok_amex":                                {outcome: succeed, code: ""},
	"pm_card_visa":                            {outcome: succeed, code: ""},
	"pm_card_mastercard":                      {outcome: succeed, code: ""},
	"pm_card_amex":                            {outcome: succeed, code: ""},
	"tok_chargeDeclined":                      {outcome: decline, code: "card_declined"},
	"pm_card_chargeDeclined":                  {outcome: decline, code: "card_declined"},
	"tok_chargeDeclinedInsufficientFunds":     {outcome: decline, code: "insufficient_funds"},
	"pm_card_chargeDeclinedInsufficientFunds": {outcome: decline, code: "insufficient_funds"},
	"tok_chargeDeclinedExpiredCard":           {outcome: decline, code: "expired_card"},
	"pm_card_chargeDeclinedExpiredCard":       {outcome: decline, code: "expired_card"},
	"tok_chargeDeclinedProcessingError":       {outcome: decline, code: "processing_error"},
	"pm_card_chargeDeclinedProcessingError":   {outcome: decline, code: "processing_error"},
}

// messages are the texts of the sandbox's declines. None quotes the request.
var messages = map[string]string{
	"card_declined":           "Your card was declined.",
	"insufficient_funds":      "Your card has insufficient funds.",
	"expired_card":            "Your card has expired.",
	"processing_error":        "An error occurred while processing your card. Try again in a little bit.",
	"authentication_required": "The card's issuer requires the cardholder to authenticate this payment.",
	"authentication_failed":   "The cardholder did not authenticate the payment.",
	"authentication_expired":  "The payment was canceled before the cardholder authenticated it.",
	"incorrect_number":        "Your card number is incorrect.",
	"invalid_expiry_month":    "Your card's expiration month is invalid.",
}

func declineWith(code string) *providers.Decline {
	return &providers.Decline{Code: code, Message: messages[code]}
}

func invalid(format string, args ...any) *providers.Decline {
	return &providers.Decline{Code: "invalid_request", Message: fmt.Sprintf(format, args...)}
}

// judge decides what an authorization of c does, from the card alone.
func judge(c providers.Card, now time.Time) (rule, *providers.Decline) {
	if c.Token != "" {
		r, ok := tokens[c.Token]
		if !ok {
			return rule{}, invalid("No such token.")
		}
		return r, nil
	}
	if !luhn(c.Number) {
		return rule{}, declineWith("incorrect_number")
	}
	if c.ExpMonth < 1 || c.ExpMonth > 12 {
		return rule{}, declineWith("invalid_expiry_month")
	}
	// A card is good through the last day of its expiry month.
	if y, m := now.Year(), int(now.Month()); c.ExpYear < y || (c.ExpYear == y && c.ExpMonth < m) {
		return rule{}, declineWith("expired_card")
	}
	if r, ok := cards[c.Number]; ok {
		return r, nil
	}
	return rule{outcome: succeed, code: ""}, nil
}

// luhn reports whether number is all digits, 12 to 19 of them, with a valid check digit.
func luhn(number string) bool {
	if len(number) < 12 || len(number) > 19 {
		return false
	}
	sum := 0
	double := false
	for i := len(number) - 1; i >= 0; i-- {
		d := int(number[i] - '0')
		if d < 0 || d > 9 {
			return false
		}
		if double {
			d *= 2
			if d > 9 {
				d -= 9
			}
		}
		sum += d
		double = !double
	}
	return sum%10 == 0
}

func newReference(prefix string) string {
	return prefix + strings.ToLower(rand.Text())
}

// wait models the network round trip.
func (p *Provider) wait(ctx context.Context) error {
	if p.opts.Latency <= 0 {
		return nil
	}
	t := time.NewTimer(p.opts.Latency)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("%w: sandbox: %w", providers.ErrUnavailable, ctx.Err())
	}
}

// call waits out the latency and records the call, refusing a key reused
// for a different request the way real providers do. With book, a call
// that succeeds at once, it books that reference with the call (see
// Ledger.CallBooked).
func (p *Provider) call(ctx context.Context, e Entry, book string) (Record, error) {
	if e.IdempotencyKey == "" {
		return Record{}, invalid("An idempotency key is required.")
	}
	if err := p.wait(ctx); err != nil {
		return Record{}, err
	}
	e.Currency = strings.ToUpper(e.Currency)
	e.Account = p.account
	var rec Record
	var err error
	if book != "" {
		rec, err = p.ledger.CallBooked(ctx, e, book)
	} else {
		rec, err = p.ledger.Call(ctx, e)
	}
	if err != nil {
		return Record{}, fmt.Errorf("%w: sandbox ledger: %w", providers.ErrUnavailable, err)
	}
	if rec.Operation != e.Operation || rec.Parent != e.Parent || rec.Amount != e.Amount || !strings.EqualFold(rec.Currency, e.Currency) {
		return Record{}, invalid("Keys for idempotent requests can only be used with the same parameters they were first used with.")
	}
	return rec, nil
}

func (p *Provider) book(ctx context.Context, key, reference string) (providers.Result, error) {
	ref, err := p.ledger.Book(ctx, key, reference)
	if err != nil {
		return providers.Result{}, fmt.Errorf("%w: sandbox ledger: %w", providers.ErrUnavailable, err)
	}
	return providers.Result{Reference: ref}, nil
}

// authorization looks up the authorization a capture, void or refund acts on.
func (p *Provider) authorization(ctx context.Context, reference string) (Record, error) {
	if !strings.HasPrefix(reference, ChargePrefix) && !strings.HasPrefix(reference, ChallengePrefix) {
		return Record{}, invalid("No such payment.")
	}
	auth, err := p.ledger.Authorization(ctx, reference)
	if apperr.KindOf(err) == apperr.KindNotFound {
		return Record{}, invalid("No such payment.")
	}
	if err != nil {
		return Record{}, fmt.Errorf("%w: sandbox ledger: %w", providers.ErrUnavailable, err)
	}
	return auth, nil
}

// Authorize authorizes (and with Capture, captures) r.Amount on r.Card. The
// outcome follows from the card; a key that already succeeded answers with
// its reference again without moving money. It returns a *providers.Decline
// for a declined or malformed request, and an error wrapping
// providers.ErrUnavailable for the flaky and the silent test cards, an
// expired context or a ledger failure. The errors of the flaky and the silent
// cards also wrap providers.ErrNothingBooked: the sandbox read its books and
// no call with the key was booked (neither card ever books a failed call).
func (p *Provider) Authorize(ctx context.Context, r providers.AuthorizeRequest) (providers.Result, error) {
	rl, d := judge(r.Card, p.opts.Now())
	e := Entry{IdempotencyKey: r.IdempotencyKey, Operation: OpAuthorize, Amount: r.Amount, Currency: r.Currency,
		Capture: r.Capture, Dispute: rl.dispute}
	var book string // a call that succeeds at once books its reference with the call
	if d == nil && rl.outcome == succeed && r.Amount > 0 && len(r.Currency) == 3 {
		book = newReference(ChargePrefix)
	}
	rec, err := p.call(ctx, e, book)
	if err != nil {
		return providers.Result{}, err
	}
	if rec.Reference != "" {
		if r.Capture && rl.dispute != "" {
			// The dispute opens once, whichever call gets to it.
			err = p.openDispute(ctx, Record{Entry: Entry{Amount: rec.Amount, Currency: rec.Currency, Account: p.account,
				Dispute: rl.dispute}, Reference: rec.Reference})
		}
		return providers.Result{Reference: rec.Reference}, err
	}
	if r.Amount <= 0 {
		return providers.Result{}, invalid("The amount must be positive.")
	}
	if len(r.Currency) != 3 {
		return providers.Result{}, invalid("The currency must be a three-letter ISO code.")
	}
	if d != nil {
		return providers.Result{}, d
	}
	switch rl.outcome {
	case decline:
		return providers.Result{}, declineWith(rl.code)
	case flaky:
		if rec.Calls <= FlakyFailures {
			return providers.Result{}, fmt.Errorf("%w: sandbox: simulated outage on attempt %d: %w", providers.ErrUnavailable, rec.Calls, providers.ErrNothingBooked)
		}
	case hang:
		<-ctx.Done()
		return providers.Result{}, fmt.Errorf("%w: sandbox: no answer: %w: %w", providers.ErrUnavailable, ctx.Err(), providers.ErrNothingBooked)
	case challenge:
		if r.OffSession {
			if rl.off == offSessionMandate && r.Authenticated {
				break
			}
			return providers.Result{}, declineWith("authentication_required")
		}
		res, err := p.book(ctx, r.IdempotencyKey, newReference(ChallengePrefix))
		if err == nil {
			res.Action = &providers.Action{}
		}
		return res, err
	}
	res, err := p.book(ctx, r.IdempotencyKey, newReference(ChargePrefix))
	if err == nil && r.Capture && rl.dispute != "" {
		err = p.openDispute(ctx, Record{Entry: Entry{Amount: r.Amount, Currency: strings.ToUpper(r.Currency), Account: p.account,
			Dispute: rl.dispute}, Reference: res.Reference})
	}
	return res, err
}

var _ providers.Authenticator = (*Provider)(nil)

// Authenticate settles an authorization that waited for the cardholder:
// the gateway serves the sandbox's challenge page (the emulated issuer) and
// passes on the cardholder's answer. Succeeded books the authorization (the
// same reference, captured when r.Capture says so), unless the card's issuer
// then declines (4000008260003178: insufficient_funds); failed declines with
// authentication_failed; returned reads the books. A payment voided
// meanwhile declines with authentication_expired.
func (p *Provider) Authenticate(ctx context.Context, r providers.AuthenticateRequest) (providers.Result, error) {
	rec, err := p.call(ctx, Entry{IdempotencyKey: r.IdempotencyKey, Operation: OpAuthenticate, Parent: r.Reference, Amount: r.Amount,
		Currency: r.Currency, Capture: r.Capture}, "")
	if err != nil {
		return providers.Result{}, err
	}
	if rec.Reference != "" {
		return providers.Result{Reference: rec.Reference}, nil
	}
	if !strings.HasPrefix(r.Reference, ChallengePrefix) {
		return providers.Result{}, invalid("The payment %s did not ask for authentication.", r.Reference)
	}
	auth, err := p.authorization(ctx, r.Reference)
	if err != nil {
		return providers.Result{}, err
	}
	pay, err := p.state(ctx, auth)
	if err != nil {
		return providers.Result{}, err
	}
	if pay.Status == providers.PaymentCanceled {
		return providers.Result{}, declineWith("authentication_expired")
	}
	switch r.Answer {
	case providers.AnswerFailed, providers.AnswerReturned:
		return providers.Result{}, declineWith("authentication_failed")
	case providers.AnswerSucceeded:
	default:
		return providers.Result{}, invalid("Unknown authentication answer %q.", r.Answer)
	}
	rl, d := judge(r.Card, p.opts.Now())
	if d != nil {
		return providers.Result{}, d
	}
	if rl.outcome == challenge && rl.code != "" {
		return providers.Result{}, declineWith(rl.code)
	}
	return p.book(ctx, r.IdempotencyKey, auth.Reference)
}

// Capture captures r.Amount (0: all of it) of an authorization the sandbox
// issued and answers with the authorization's reference. It declines with
// invalid_request an unknown reference or an amount above the authorized one.
func (p *Provider) Capture(ctx context.Context, r providers.CaptureRequest) (providers.Result, error) {
	rec, err := p.call(ctx, Entry{IdempotencyKey: r.IdempotencyKey, Operation: OpCapture, Parent: r.Reference, Amount: r.Amount}, "")
	if err != nil {
		return providers.Result{}, err
	}
	if rec.Reference != "" {
		// A capture booked before: its dispute, if its card has one, opens
		// once, whichever call gets to it.
		auth, err := p.authorization(ctx, rec.Reference)
		if err == nil && auth.Dispute != "" {
			if r.Amount > 0 {
				auth.Amount = r.Amount
			}
			err = p.openDispute(ctx, auth)
		}
		if _, declined := providers.AsDecline(err); declined {
			err = nil
		}
		return p.answer(rec, providers.Result{Reference: rec.Reference}, err)
	}
	if r.Amount < 0 {
		return providers.Result{}, invalid("The amount to capture must not be negative.")
	}
	auth, err := p.authorization(ctx, r.Reference)
	if err != nil {
		return providers.Result{}, err
	}
	if r.Amount > auth.Amount {
		return providers.Result{}, invalid("The amount to capture exceeds the authorized amount.")
	}
	res, err := p.book(ctx, r.IdempotencyKey, auth.Reference)
	if err == nil && auth.Dispute != "" {
		if r.Amount > 0 {
			auth.Amount = r.Amount
		}
		err = p.openDispute(ctx, auth)
	}
	return p.answer(rec, res, err)
}

// Void releases an authorization the sandbox issued and answers with its
// reference. It declines with invalid_request an unknown reference.
func (p *Provider) Void(ctx context.Context, r providers.VoidRequest) (providers.Result, error) {
	rec, err := p.call(ctx, Entry{IdempotencyKey: r.IdempotencyKey, Operation: OpVoid, Parent: r.Reference}, "")
	if err != nil {
		return providers.Result{}, err
	}
	if rec.Reference != "" {
		return providers.Result{Reference: rec.Reference}, nil
	}
	auth, err := p.authorization(ctx, r.Reference)
	if err != nil {
		return providers.Result{}, err
	}
	return p.book(ctx, r.IdempotencyKey, auth.Reference)
}

// Refund returns r.Amount of a charge the sandbox issued and answers with a
// new sbx_re_ reference. It declines with invalid_request an amount that is
// not positive or above the charge's, another currency, or an unknown
// reference. Keeping the sum of refunds within the charge is the caller's
// job (it holds the charge's row lock).
func (p *Provider) Refund(ctx context.Context, r providers.RefundRequest) (providers.Result, error) {
	rec, err := p.call(ctx, Entry{IdempotencyKey: r.IdempotencyKey, Operation: OpRefund, Parent: r.Reference, Amount: r.Amount, Currency: r.Currency}, "")
	if err != nil {
		return providers.Result{}, err
	}
	if rec.Reference != "" {
		return p.answer(rec, providers.Result{Reference: rec.Reference}, nil)
	}
	if r.Amount <= 0 {
		return providers.Result{}, invalid("The refund amount must be positive.")
	}
	auth, err := p.authorization(ctx, r.Reference)
	if err != nil {
		return providers.Result{}, err
	}
	if r.Amount > auth.Amount {
		return providers.Result{}, invalid("The refund amount exceeds the charge amount.")
	}
	if r.Currency != "" && !strings.EqualFold(r.Currency, auth.Currency) {
		return providers.Result{}, invalid("The refund currency differs from the charge's.")
	}
	res, err := p.book(ctx, r.IdempotencyKey, newReference(RefundPrefix))
	return p.answer(rec, res, err)
}

// answer returns the answer to a capture or refund call, or loses it after
// the booking (see LostAnswerAmount and Options.LoseAnswer).
func (p *Provider) answer(rec Record, res providers.Result, err error) (providers.Result, error) {
	if err != nil {
		return res, err
	}
	lost := rec.Amount == LostAnswerAmount && rec.Calls <= LostAnswerFailures
	if p.opts.LoseAnswer != nil && p.opts.LoseAnswer(rec.Operation, rec.Calls) {
		lost = true
	}
	if lost {
		return providers.Result{}, fmt.Errorf("%w: sandbox: the answer to %s call %d was lost after booking: %w",
			providers.ErrUnavailable, rec.Operation, rec.Calls, context.DeadlineExceeded)
	}
	return res, nil
}

var _ providers.Lookup = (*Provider)(nil)

// LookupRefund reads the sandbox's books for the refund sent with
// r.IdempotencyKey (the sandbox keeps keys for ever, so the key names the
// refund as the gateway's refund id would). A refund it booked is a result;
// none is an error wrapping providers.ErrNothingBooked; a ledger failure
// wraps providers.ErrUnavailable. Lookups never lose their answer.
func (p *Provider) LookupRefund(ctx context.Context, r providers.RefundLookup) (providers.Result, error) {
	if err := p.wait(ctx); err != nil {
		return providers.Result{}, err
	}
	rec, err := p.ledger.Lookup(ctx, r.IdempotencyKey)
	switch {
	case apperr.KindOf(err) == apperr.KindNotFound:
		return providers.Result{}, fmt.Errorf("sandbox: no call with key %s: %w", r.IdempotencyKey, providers.ErrNothingBooked)
	case err != nil:
		return providers.Result{}, fmt.Errorf("%w: sandbox ledger: %w", providers.ErrUnavailable, err)
	case rec.Operation != OpRefund || rec.Parent != r.Reference:
		return providers.Result{}, invalid("The key %s is not a refund of %s.", r.IdempotencyKey, r.Reference)
	case rec.Reference == "":
		return providers.Result{}, fmt.Errorf("sandbox: the refund with key %s was never booked: %w", r.IdempotencyKey, providers.ErrNothingBooked)
	}
	return providers.Result{Reference: rec.Reference}, nil
}

// LookupPayment reads the sandbox's books for the authorization reference:
// requires_action while an authorization waits for the cardholder, canceled
// when a void was booked, captured (with the amount of the first
// booked capture; 0 in the capture is the whole amount) when a capture was,
// else authorized. An authorization captured by the authorize call itself
// also reads as authorized: the lookup reads the calls booked after it
// (the books record the capture, for Settled).
func (p *Provider) LookupPayment(ctx context.Context, reference string) (providers.Payment, error) {
	if err := p.wait(ctx); err != nil {
		return providers.Payment{}, err
	}
	auth, err := p.authorization(ctx, reference)
	if err != nil {
		return providers.Payment{}, err
	}
	return p.state(ctx, auth)
}

// state reads the books of the authorization auth.
func (p *Provider) state(ctx context.Context, auth Record) (providers.Payment, error) {
	reference := auth.Reference
	booked, err := p.ledger.Booked(ctx, reference)
	if err != nil {
		return providers.Payment{}, fmt.Errorf("%w: sandbox ledger: %w", providers.ErrUnavailable, err)
	}
	out := providers.Payment{Reference: reference, Status: providers.PaymentAuthorized}
	if strings.HasPrefix(reference, ChallengePrefix) {
		out.Status = providers.PaymentRequiresAction
	}
	for _, b := range booked {
		switch b.Operation {
		case OpVoid:
			return providers.Payment{Reference: reference, Status: providers.PaymentCanceled}, nil
		case OpAuthenticate:
			if out.Status == providers.PaymentRequiresAction {
				out.Status = providers.PaymentAuthorized
			}
		case OpCapture:
			if out.Status != providers.PaymentCaptured {
				out.Status, out.Captured = providers.PaymentCaptured, b.Amount
				if b.Amount == 0 {
					out.Captured = auth.Amount
				}
			}
		}
	}
	return out, nil
}
