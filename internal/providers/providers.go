// Package providers is the boundary to upstream payment providers: one
// interface for authorizing, capturing, voiding and refunding, with the result
// and error types every adapter returns. Every call carries an idempotency key
// derived from the charge or refund id, so a retried task never moves money
// twice. Adapters live in sub-packages (sandbox, stripe).
package providers

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Card is what the provider needs to charge a card: either the raw card data
// (decrypted only for the call) or a token the provider issued.
type Card struct {
	Number   string
	ExpMonth int
	ExpYear  int
	CVC      string
	Token    string // e.g. "pm_card_visa" for Stripe; when set the other fields are empty
}

// String never prints card data.
func (c Card) String() string { return "[card]" }

// GoString never prints card data.
func (c Card) GoString() string { return "[card]" }

// AuthorizeRequest asks the provider to authorize Amount on Card and, when
// Capture is true, to capture it in the same call.
type AuthorizeRequest struct {
	IdempotencyKey string
	Amount         int64
	Currency       string // upper-case ISO 4217
	Capture        bool
	Card           Card
	Description    string
	Metadata       map[string]string
	// ReturnURL is where the issuer's challenge page sends the cardholder
	// back to when the provider hosts one (Stripe's return_url); the
	// gateway's own return page, never the merchant's.
	ReturnURL string
	// OffSession: the cardholder is not present, so no challenge is
	// possible. An issuer that requires authentication makes it a decline
	// with code authentication_required.
	OffSession bool
	// Authenticated: the cardholder authenticated an earlier charge of this
	// saved card, which issuers take as a mandate for off-session charges.
	Authenticated bool
}

// stripeTestTokens are the test tokens and test PaymentMethods Stripe
// documents (https://docs.stripe.com/testing): they stand for test cards,
// exist in every Stripe account in test mode, and name nothing of anyone's.
var stripeTestTokens = func() map[string]bool {
	names := []string{
		// Cards by brand.
		"visa", "visa_debit", "visa_cartesBancaires", "mastercard", "mastercard_debit", "mastercard_prepaid",
		"mastercard_cartesBancaires", "amex", "discover", "diners", "jcb", "unionpay", "cartesBancaires", "interac",
		// Cards by country.
		"us", "ar", "br", "ca", "mx", "at", "be", "bg", "ch", "cy", "cz", "de", "dk", "ee", "es", "fi", "fr", "gb",
		"gr", "hr", "hu", "ie", "it", "li", "lt", "lu", "lv", "mt", "nl", "no", "pl", "pt", "ro", "se", "si", "sk",
		"ae", "au", "cn", "hk", "in", "jp", "my", "nz", "sg", "th",
		// Declines.
		"chargeDeclined", "chargeDeclinedInsufficientFunds", "chargeDeclinedLostCard", "chargeDeclinedStolenCard",
		"chargeDeclinedExpiredCard", "chargeDeclinedIncorrectCvc", "chargeDeclinedProcessingError",
		"chargeDeclinedFraudulent", "chargeDeclinedVelocityLimitExceeded", "visa_chargeDeclined",
		"visa_chargeDeclinedInsufficientFunds", "visa_chargeDeclinedLostCard", "visa_chargeDeclinedStolenCard",
		"chargeCustomerFail", "riskLevelElevated", "riskLevelHighest", "radarBlock", "cvcCheckFail", "avsFail",
		"avsLine1Fail", "avsZipFail", "avsUnchecked", "refundFail", "createDispute", "createDisputeProductNotReceived",
		"createDisputeInquiry", "createEarlyFraudWarning", "bypassPending", "bypassPendingInternational",
		// Authentication (3-D Secure).
		"authenticationRequired", "authenticationRequiredOnSetup", "authenticationRequiredChargeDeclinedInsufficientFunds",
		"authenticationRequiredSetupForOffSession", "threeDSecure2Required", "threeDSecureRequired",
		"threeDSecureOptional", "threeDSecureRequiredChargeDeclined", "threeDSecureRequiredProcessingError",
	}
	m := make(map[string]bool, 2*len(names))
	for _, n := range names {
		m["pm_card_"+n], m["tok_"+n] = true, true
	}
	return m
}()

// TestToken reports whether token is one of the test tokens a provider
// documents (Stripe's tok_visa, pm_card_visa, ...; the sandbox takes the
// same names). On the server's own account at a provider these are the only
// provider tokens a charge may name: any other (pm_..., tok_..., an id of
// the account's own objects) would let a merchant name objects of the
// operator's account.
func TestToken(token string) bool { return stripeTestTokens[token] }

// CaptureRequest captures Amount (at most the authorized amount) of an authorization.
type CaptureRequest struct {
	IdempotencyKey string
	Reference      string // the provider's id of the authorization
	Amount         int64
	// Currency is the authorization's currency (upper-case ISO 4217), for
	// providers whose capture names it (Adyen); Stripe and the sandbox
	// ignore it.
	Currency string
}

// VoidRequest releases an authorization.
type VoidRequest struct {
	IdempotencyKey string
	Reference      string
}

// RefundRequest returns Amount of a captured charge.
type RefundRequest struct {
	IdempotencyKey string
	Reference      string // the provider's id of the charge
	Amount         int64
	Currency       string
	Reason         string
	// RefundID is the gateway's id of the refund. The provider keeps it
	// with its refund (Stripe: metadata gatehouse_refund_id), so a lookup
	// finds the refund after the idempotency key has expired.
	RefundID string
}

// Result is the provider's answer to a call it completed.
type Result struct {
	Reference string // the provider's id of the payment or refund
	// Pending is true when the provider accepted the operation but has not
	// finished it (a Stripe refund that is pending, a PaymentIntent that is
	// processing). Money may still move either way: the caller follows the
	// object with a Lookup until it is final.
	Pending bool
	// Settlement, when not nil, is what the provider reported of a capture
	// it made: its fee and when its money is available (Stripe's balance
	// transaction). nil leaves the fee to the connector's terms, or to be
	// reported later.
	Settlement *Settlement
	// Action, when not nil, says the payment waits for the cardholder to
	// authenticate (3-D Secure): nothing is taken until the issuer's answer.
	// The caller records it and asks again with Authenticate once the
	// cardholder is done.
	Action *Action
}

// Action is the cardholder's authentication a payment waits for.
type Action struct {
	// RedirectURL is the issuer's challenge page when the provider names
	// one (Stripe); "" when the gateway serves the challenge itself (the
	// sandbox's emulated issuer).
	RedirectURL string
}

// Authentication answers.
const (
	AnswerSucceeded = "succeeded" // the cardholder completed the challenge
	AnswerFailed    = "failed"    // the cardholder failed or abandoned it
	// AnswerReturned: the cardholder came back from the provider's page;
	// only the provider knows the answer.
	AnswerReturned = "returned"
)

// AuthenticateRequest resumes a payment that waited for the cardholder.
type AuthenticateRequest struct {
	IdempotencyKey string
	Reference      string // the provider's id of the payment
	// Answer is one of the Answer* constants.
	Answer string
	// The authorization's own request, for providers that settle the
	// payment only now (the sandbox).
	Amount   int64
	Currency string
	Capture  bool
	Card     Card
	// Details are the query or form values the provider's page sent the
	// cardholder back to the return page with (Adyen's redirectResult), for
	// providers that read the outcome from them; nil when there are none.
	Details map[string]string
}

// Authenticator is a provider whose payments can wait for the cardholder's
// authentication. Authenticate answers like Authorize: a result (captured
// when the authorization asked for capture, else authorized), a pending
// result, a result with Action when the cardholder has not finished, a
// *Decline (authentication_failed, or the issuer's decline after it), or an
// error that leaves the outcome unknown.
type Authenticator interface {
	Authenticate(ctx context.Context, r AuthenticateRequest) (Result, error)
}

// Provider is an upstream payment provider.
//
// A method returns a *Decline when the provider refused the operation for good
// (a declined card, an expired card): the charge fails and is not retried.
// Any other error means the provider could not be reached or did not answer
// (ErrUnavailable, timeouts, 5xx): the caller retries with backoff, with the
// same idempotency key, so the provider performs the operation at most once.
type Provider interface {
	Name() string
	Authorize(ctx context.Context, r AuthorizeRequest) (Result, error)
	Capture(ctx context.Context, r CaptureRequest) (Result, error)
	Void(ctx context.Context, r VoidRequest) (Result, error)
	Refund(ctx context.Context, r RefundRequest) (Result, error)
}

// Decline is a final refusal by the provider. Code is one of the failure codes
// charges expose: card_declined, insufficient_funds, expired_card,
// incorrect_cvc, processing_error, invalid_request, ...
type Decline struct {
	Code    string
	Message string
}

func (d *Decline) Error() string { return fmt.Sprintf("provider declined: %s: %s", d.Code, d.Message) }

// AsDecline returns the *Decline in err's chain, if any.
func AsDecline(err error) (*Decline, bool) {
	var d *Decline
	if errors.As(err, &d) {
		return d, true
	}
	return nil, false
}

// ErrUnavailable is returned when the provider cannot be reached, does not
// answer in time, or its circuit breaker is open. It is always retryable.
var ErrUnavailable = errors.New("provider unavailable")

// ErrNothingBooked is in the chain of an error with which a provider vouches
// that it holds no payment under the call's idempotency key: no call with the
// key, this one or an earlier one, was booked. Only a provider that can read
// its own books says so (the sandbox does, for its flaky and silent cards).
//
// Every other error that is not a *Decline leaves the outcome of the key
// unknown: a timeout or a reset may have lost the answer to a booked payment,
// and even a call that was never sent (the circuit breaker is open, the
// connection was refused) says nothing about the earlier calls with the key,
// which may have been booked. The breaker opens precisely after such timeouts.
var ErrNothingBooked = errors.New("provider booked nothing under the key")

// NothingBooked reports whether err proves the provider holds no payment
// under the call's idempotency key (see ErrNothingBooked).
func NothingBooked(err error) bool { return errors.Is(err, ErrNothingBooked) }

// RefundLookup names the refund a lookup searches for.
type RefundLookup struct {
	Reference      string // the provider's id of the charge the refund returns
	RefundID       string // the gateway's id of the refund (see RefundRequest.RefundID)
	IdempotencyKey string // the key the refund was sent with
	// ProviderRefund is the provider's id of the refund when an earlier
	// answer named it (a pending refund); "" when no answer arrived.
	ProviderRefund string
}

// Payment statuses a lookup reports.
const (
	PaymentAuthorized = "authorized" // authorized and not captured
	PaymentProcessing = "processing" // a capture is under way
	PaymentCaptured   = "captured"
	PaymentCanceled   = "canceled" // released: nothing can be captured any more
	// PaymentFailed: the payment did not go through (a processing payment
	// the bank refused); nothing is held.
	PaymentFailed = "failed"
	// PaymentRequiresAction: waiting for the cardholder's authentication.
	PaymentRequiresAction = "requires_action"
)

// Payment is what a lookup reads of a payment (an authorization).
type Payment struct {
	Reference string
	Status    string // one of the Payment* statuses
	Captured  int64  // the amount captured, when Status is PaymentCaptured
	// Failure is the provider's reason when Status is PaymentFailed, if it gave one.
	Failure *Decline
	// Settlement: see Result.
	Settlement *Settlement
}

// Payout is a provider's payout of a merchant's balance to its bank, as the
// provider reports it.
type Payout struct {
	Reference   string
	Amount      int64
	Currency    string // upper case
	Status      string // pending, in_transit, paid, failed or canceled
	Automatic   bool
	ArrivalDate time.Time
	FailureCode string
}

// PayoutReader reads a payout from the provider's own books, by its
// reference; a provider that pays out on its own (Stripe) has one.
type PayoutReader interface {
	Payout(ctx context.Context, reference string) (Payout, error)
}

// DisputeResponder is a provider that takes a merchant's answer to a
// dispute through its API: the evidence, submitted for the provider to
// decide the dispute with, or the loss accepted. A *Decline is its refusal
// (the deadline passed, the dispute is decided).
type DisputeResponder interface {
	SubmitDisputeEvidence(ctx context.Context, reference string, evidence map[string]string) error
	AcceptDispute(ctx context.Context, reference string) error
}

// ChargePayments is a provider whose disputes may name its own charge
// object rather than the payment (Stripe): PaymentOfCharge reads which
// payment the charge belongs to.
type ChargePayments interface {
	PaymentOfCharge(ctx context.Context, chargeID string) (string, error)
}

// ErrNoDisputeAPI is in the chain of the error of a dispute answer or
// lookup a provider does not take through its API.
var ErrNoDisputeAPI = errors.New("the provider takes no dispute answers through its API")

// Settlement is a provider's account of a capture's money: the fee it kept,
// in its parts, and when the rest is available to pay out.
type Settlement struct {
	Fee         int64
	FeeDetails  []FeeLine
	AvailableOn time.Time
}

// FeeLine is one part of a provider's fee.
type FeeLine struct {
	Type        string
	Amount      int64
	Description string
}

// Lookup reads the provider's own books. The worker uses it when resending a
// request cannot tell the outcome: once the provider has forgotten the
// idempotency key (Stripe keeps keys 24 h; a resend after that would move
// money again under a new booking), and to follow an operation the provider
// answered as pending.
//
// LookupRefund answers a final refund with its Result, a refund that is
// still pending with Result.Pending, a failed or canceled one with a
// *Decline, and an error wrapping ErrNothingBooked (and not ErrUnavailable:
// it is an answer) when the provider holds no refund for r.RefundID. LookupPayment answers the state of the payment
// reference. Any other error leaves the outcome unknown.
type Lookup interface {
	LookupRefund(ctx context.Context, r RefundLookup) (Result, error)
	LookupPayment(ctx context.Context, reference string) (Payment, error)
}

// ErrNoLookup is in the chain of the error of a Lookup method of a provider
// that cannot read its books (with ErrUnavailable: the outcome stays unknown).
var ErrNoLookup = errors.New("provider has no lookup")

// notified are the providers whose captures, cancels and refunds are
// received first and settled by their notification (Adyen answers them
// "received"): a pending answer to one of these is final for the call, and
// the notification, not a lookup, settles the operation.
var notified = map[string]bool{"adyen": true}

// SettlesByNotification reports whether provider settles its captures,
// cancels and refunds by notification.
func SettlesByNotification(provider string) bool { return notified[provider] }

// Registry maps provider names to providers.
type Registry map[string]Provider

// Get returns the named provider.
func (r Registry) Get(name string) (Provider, bool) {
	p, ok := r[name]
	return p, ok
}

// ErrNotSent is in the chain of an error for a call that never reached the
// provider: the circuit breaker refused it, or the connection was refused.
// It proves nothing about earlier calls with the same idempotency key.
var ErrNotSent = errors.New("the call never reached the provider")

// NotSent reports whether err proves this call never reached the provider.
func NotSent(err error) bool { return errors.Is(err, ErrNotSent) }

// ErrNotConfigured is returned by a Resolver for a provider this process has
// no account with.
var ErrNotConfigured = errors.New("provider not configured on this worker")

// Resolver finds the provider that serves a connector: connectorID nil means
// the server's own account at the provider named provider (charges made
// before connectors).
type Resolver interface {
	Resolve(ctx context.Context, connectorID *string, provider string) (Provider, error)
}

// Resolve implements Resolver with the registry's providers alone.
func (r Registry) Resolve(_ context.Context, _ *string, provider string) (Provider, error) {
	p, ok := r[provider]
	if !ok {
		return nil, fmt.Errorf("%w: %q", ErrNotConfigured, provider)
	}
	return p, nil
}

// Types of the lines of a settlement report: the balance transaction types
// a provider reports.
const (
	SettlementCharge          = "charge"
	SettlementRefund          = "refund"
	SettlementDispute         = "dispute"
	SettlementDisputeReversal = "dispute_reversal"
	SettlementPayout          = "payout"
)

// SettlementTypes lists them in the order of api/openapi.yaml.
var SettlementTypes = []string{SettlementCharge, SettlementRefund, SettlementDispute, SettlementDisputeReversal, SettlementPayout}

// SettlementLine is one line of a provider's settlement report: money that
// became available in the merchant's account at the provider (or left it),
// as the provider's own books have it. Amounts are signed minor units; Net
// is Gross - Fee.
type SettlementLine struct {
	// Reference is the provider's id of the payment, refund, dispute or
	// payout: the one the gateway keeps as the object's provider_reference.
	Reference   string
	Type        string // one of the Settlement* types
	Currency    string // upper-case ISO 4217
	Gross       int64
	Fee         int64
	Net         int64
	AvailableOn time.Time
}
