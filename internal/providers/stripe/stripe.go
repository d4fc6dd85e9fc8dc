// Package stripe is the Stripe adapter: authorizations are PaymentIntents
// confirmed on creation, captures and voids act on them, refunds are Refunds
// of a PaymentIntent. Every request carries the caller's idempotency key, so a
// retried call never moves money twice. Stripe's answers become the results
// and errors of package providers: card errors are declines, everything that
// may succeed on a later try wraps providers.ErrUnavailable.
//
// 3-D Secure: a card whose issuer asks the cardholder to authenticate leaves
// the PaymentIntent in requires_action. Authorize answers it with a result
// whose Action names Stripe's challenge page (next_action.redirect_to_url),
// which sends the cardholder back to the gateway's return page; Authenticate
// then reads the outcome from the PaymentIntent. Off session no challenge is
// possible and such a card is declined with authentication_required.
package stripe

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptrace"
	"strings"
	"sync/atomic"
	"time"

	stripego "github.com/stripe/stripe-go/v84"

	"github.com/gatehouse-pay/gatehouse/internal/providers"
)

// Name is the provider's name in requests and in the registry.
const Name = "stripe"

// DefaultTimeout bounds one request when New is given no HTTP client.
const DefaultTimeout = 30 * time.Second

// Provider is the Stripe adapter. It is safe for concurrent use.
type Provider struct {
	client *stripego.Client
}

var (
	_ providers.Provider      = (*Provider)(nil)
	_ providers.Authenticator = (*Provider)(nil)
)

// New returns an adapter that calls the Stripe API at apiBase ("" for
// https://api.stripe.com; stripe-mock's URL in tests) with secretKey, through
// httpClient (nil: one with DefaultTimeout).
//
// stripe-go's own retries are off (MaxNetworkRetries 0): the worker already
// retries provider outages with backoff and the same idempotency key, a
// breaker counts each failure, and stripe-go sleeps between its retries
// without watching the context. With its retries on, one task attempt could
// make three requests and outlive its deadline, and the breaker would see one
// failure for three. Its logger is silenced: it would print response bodies,
// and this package returns every error to the caller anyway.
func New(secretKey, apiBase string, httpClient *http.Client) *Provider {
	if httpClient == nil {
		httpClient = &http.Client{Timeout: DefaultTimeout}
	}
	cfg := &stripego.BackendConfig{
		HTTPClient:        httpClient,
		MaxNetworkRetries: stripego.Int64(0),
		LeveledLogger:     &stripego.LeveledLogger{Level: stripego.LevelNull},
	}
	if apiBase != "" {
		cfg.URL = stripego.String(strings.TrimRight(apiBase, "/"))
	}
	backends := stripego.NewBackendsWithConfig(cfg)
	return &Provider{client: stripego.NewClient(secretKey, stripego.WithBackends(backends))}
}

// Name returns "stripe".
func (p *Provider) Name() string { return Name }

// maxKey is the longest idempotency key Stripe accepts.
const maxKey = 255

func checkKey(key string) error {
	if strings.TrimSpace(key) == "" || len(key) > maxKey {
		return &providers.Decline{Code: "invalid_request", Message: "An idempotency key of 1 to 255 characters is required."}
	}
	return nil
}

// paymentMethodKey derives the key of the PaymentMethod created for raw card
// data from the authorization's key: stable across retries, distinct from it,
// and within Stripe's limit whatever the length of the original.
func paymentMethodKey(key string) string {
	sum := sha256.Sum256([]byte(key))
	return "gatehouse-payment-method-" + hex.EncodeToString(sum[:])
}

// paymentMethod turns c into the payment_method of a PaymentIntent. A pm_
// (or other payment method) id is used as it is. Raw card data and tok_
// tokens first become a PaymentMethod: Stripe's PaymentIntents take neither
// directly (stripe-go and stripe-mock have no payment_method_data[card]).
func (p *Provider) paymentMethod(ctx context.Context, key string, c providers.Card) (string, error) {
	if c.Token != "" && !strings.HasPrefix(c.Token, "tok_") {
		return c.Token, nil
	}
	params := &stripego.PaymentMethodCreateParams{Type: stripego.String("card")}
	if c.Token != "" {
		params.Card = &stripego.PaymentMethodCreateCardParams{Token: stripego.String(c.Token)}
	} else {
		params.Card = &stripego.PaymentMethodCreateCardParams{
			Number:   stripego.String(c.Number),
			ExpMonth: stripego.Int64(int64(c.ExpMonth)),
			ExpYear:  stripego.Int64(int64(c.ExpYear)),
		}
		if c.CVC != "" {
			params.Card.CVC = stripego.String(c.CVC)
		}
	}
	params.SetIdempotencyKey(paymentMethodKey(key))
	pm, err := p.client.V1PaymentMethods.Create(ctx, params)
	if err != nil {
		return "", mapError(err, c.Number, c.CVC)
	}
	return pm.ID, nil
}

// Authorize creates a PaymentIntent for r.Amount and confirms it with the
// card at once; with r.Capture false it only authorizes (capture_method
// manual). The reference is the PaymentIntent's id. A PaymentIntent left
// processing is a pending result: the caller follows it with LookupPayment
// until it is final.
//
// On session, r.ReturnURL is the PaymentIntent's return_url. A card whose
// issuer asks for 3-D Secure leaves the PaymentIntent in requires_action,
// and the result's Action names Stripe's challenge page
// (next_action.redirect_to_url.url), which sends the cardholder back to
// r.ReturnURL; the caller then asks Authenticate. A requires_action that
// names no such page (next_action use_stripe_sdk, Stripe's answer when it was
// given no return_url) leaves the cardholder nowhere to go and is declined
// with authentication_required.
//
// Off session (r.OffSession) the PaymentIntent is confirmed with
// off_session=true and no return_url: no challenge is possible, so Stripe
// answers a card that needs authentication with the card error
// authentication_required, a decline, and a PaymentIntent that still comes
// back in requires_action is declined alike. r.Authenticated is not sent:
// Stripe has no parameter for it, and learns of an earlier authentication
// only through a PaymentMethod saved with setup_future_usage.
func (p *Provider) Authorize(ctx context.Context, r providers.AuthorizeRequest) (providers.Result, error) {
	if err := checkKey(r.IdempotencyKey); err != nil {
		return providers.Result{}, err
	}
	pm, err := p.paymentMethod(ctx, r.IdempotencyKey, r.Card)
	if err != nil {
		// No PaymentIntent was asked for: nothing can have been taken.
		return providers.Result{}, notSent(err)
	}
	tctx, wrote := traceWrites(ctx)
	pi, err := p.client.V1PaymentIntents.Create(tctx, intentParams(r, pm))
	if err != nil {
		if !wrote() {
			return providers.Result{}, notSent(mapError(err))
		}
		return providers.Result{}, mapError(err)
	}
	return intentResult(pi, r.OffSession)
}

// traceWrites returns ctx with a trace of the HTTP requests written under
// it, and a function that reports whether any was, even in part: a request
// never written (the dial was refused, no connection was free) never
// reached Stripe. Go's transport may replay a request carrying an
// Idempotency-Key on a new connection; every write counts.
func traceWrites(ctx context.Context) (context.Context, func() bool) {
	var wrote atomic.Bool
	trace := &httptrace.ClientTrace{WroteHeaders: func() { wrote.Store(true) },
		WroteRequest: func(httptrace.WroteRequestInfo) { wrote.Store(true) }}
	return httptrace.WithClientTrace(ctx, trace), wrote.Load
}

// notSent marks an outage error as a call that never reached Stripe's
// PaymentIntents (a decline stays a decline).
func notSent(err error) error {
	if _, ok := providers.AsDecline(err); ok || !errors.Is(err, providers.ErrUnavailable) {
		return err
	}
	return fmt.Errorf("%w: %w", err, providers.ErrNotSent)
}

// intentParams is the confirming creation of the PaymentIntent of r, paid
// with the payment method pm.
func intentParams(r providers.AuthorizeRequest, pm string) *stripego.PaymentIntentCreateParams {
	params := &stripego.PaymentIntentCreateParams{
		Amount:             stripego.Int64(r.Amount),
		Currency:           stripego.String(strings.ToLower(r.Currency)),
		Confirm:            stripego.Bool(true),
		PaymentMethod:      stripego.String(pm),
		PaymentMethodTypes: stripego.StringSlice([]string{"card"}),
	}
	if !r.Capture {
		params.CaptureMethod = stripego.String(string(stripego.PaymentIntentCaptureMethodManual))
	} else {
		params.AddExpand(expandSettlement)
	}
	if r.OffSession {
		params.OffSession = stripego.Bool(true)
	} else if r.ReturnURL != "" {
		params.ReturnURL = stripego.String(r.ReturnURL)
	}
	if r.Description != "" {
		params.Description = stripego.String(r.Description)
	}
	for k, v := range r.Metadata {
		params.AddMetadata(k, v)
	}
	params.SetIdempotencyKey(r.IdempotencyKey)
	return params
}

// statusRequiresSourceAction is requires_action under Stripe API versions
// before 2019-02-11; stripe-go has no constant for it.
const statusRequiresSourceAction stripego.PaymentIntentStatus = "requires_source_action"

// intentResult reads a PaymentIntent that Stripe answered a confirmation
// with (200). Stripe answers a declined confirmation with a 402 card error
// instead, so besides success and processing this mostly sees 3-D Secure:
// requires_action is a challenge on session and a decline off session.
// requires_payment_method is a decline only with a card_error as its
// last_payment_error: stripe-mock answers every confirmation with that status
// and a meaningless idempotency_error.
func intentResult(pi *stripego.PaymentIntent, offSession bool) (providers.Result, error) {
	switch pi.Status {
	case stripego.PaymentIntentStatusRequiresAction, statusRequiresSourceAction:
		if offSession {
			return providers.Result{}, &providers.Decline{Code: "authentication_required",
				Message: "The card requires authentication, which is not possible with the cardholder absent."}
		}
		return challenge(pi)
	case stripego.PaymentIntentStatusRequiresConfirmation:
		return providers.Result{}, &providers.Decline{Code: "authentication_required", Message: "The card requires authentication."}
	case stripego.PaymentIntentStatusCanceled:
		return providers.Result{}, &providers.Decline{Code: "processing_error", Message: "The payment was canceled by the provider."}
	case stripego.PaymentIntentStatusRequiresPaymentMethod:
		if e := pi.LastPaymentError; e != nil && e.Type == stripego.ErrorTypeCard {
			return providers.Result{}, cardDecline(e)
		}
	}
	return providers.Result{Reference: pi.ID, Pending: pi.Status == stripego.PaymentIntentStatusProcessing,
		Settlement: captureSettlement(pi)}, nil
}

// expandSettlement asks Stripe to answer a capture with the balance
// transaction of its charge: the fee Stripe kept and when the money is
// available, in the same call.
const expandSettlement = "latest_charge.balance_transaction"

// captureSettlement reads the balance transaction of a captured PaymentIntent's
// charge, nil when Stripe gave none (not captured, not expanded, or not yet
// made: the fee is then booked when it is reported).
func captureSettlement(pi *stripego.PaymentIntent) *providers.Settlement {
	if pi.Status != stripego.PaymentIntentStatusSucceeded || pi.LatestCharge == nil || pi.LatestCharge.BalanceTransaction == nil {
		return nil
	}
	bt := pi.LatestCharge.BalanceTransaction
	if bt.ID == "" || bt.Object == "" { // an id alone: not expanded
		return nil
	}
	s := &providers.Settlement{Fee: bt.Fee}
	if bt.AvailableOn > 0 {
		s.AvailableOn = time.Unix(bt.AvailableOn, 0).UTC()
	}
	for _, d := range bt.FeeDetails {
		if d != nil {
			s.FeeDetails = append(s.FeeDetails, providers.FeeLine{Type: d.Type, Amount: d.Amount, Description: d.Description})
		}
	}
	return s
}

// challenge is the result of a PaymentIntent that waits for the cardholder:
// an Action with Stripe's challenge page, or, when Stripe names none, a
// decline authentication_required, as there is no page to send the
// cardholder to.
func challenge(pi *stripego.PaymentIntent) (providers.Result, error) {
	if na := pi.NextAction; na != nil && na.RedirectToURL != nil && na.RedirectToURL.URL != "" {
		return providers.Result{Reference: pi.ID, Action: &providers.Action{RedirectURL: na.RedirectToURL.URL}}, nil
	}
	return providers.Result{}, &providers.Decline{Code: "authentication_required",
		Message: "The card requires authentication and the provider named no challenge page."}
}

// Authenticate reads the outcome of the cardholder's authentication from the
// PaymentIntent r.Reference, whatever r.Answer says (AnswerReturned: the
// cardholder came back from Stripe's challenge page): only Stripe knows the
// issuer's answer. The read is a GET, which needs no idempotency key.
//
//   - succeeded: a result (captured, as the authorization asked for capture);
//   - requires_capture: a result (authorized);
//   - processing: a pending result, to follow with LookupPayment;
//   - requires_action: a result whose Action names the challenge page again,
//     as the cardholder has not finished (a decline authentication_required
//     when Stripe names no page, as in Authorize);
//   - requires_payment_method: the issuer's card decline when its
//     last_payment_error is one, else (payment_intent_authentication_failure,
//     or no error) a decline authentication_failed;
//   - canceled: a decline processing_error;
//   - any other status: an error wrapping providers.ErrUnavailable, as the
//     outcome is unknown.
func (p *Provider) Authenticate(ctx context.Context, r providers.AuthenticateRequest) (providers.Result, error) {
	if strings.TrimSpace(r.Reference) == "" {
		return providers.Result{}, &providers.Decline{Code: "invalid_request", Message: "A payment reference is required."}
	}
	params := &stripego.PaymentIntentRetrieveParams{}
	params.AddExpand(expandSettlement)
	pi, err := p.client.V1PaymentIntents.Retrieve(ctx, r.Reference, params)
	if err != nil {
		return providers.Result{}, mapError(err)
	}
	return authenticationResult(pi)
}

// authenticationResult reads a PaymentIntent after its challenge (see Authenticate).
func authenticationResult(pi *stripego.PaymentIntent) (providers.Result, error) {
	switch pi.Status {
	case stripego.PaymentIntentStatusSucceeded, stripego.PaymentIntentStatusRequiresCapture:
		return providers.Result{Reference: pi.ID, Settlement: captureSettlement(pi)}, nil
	case stripego.PaymentIntentStatusProcessing:
		return providers.Result{Reference: pi.ID, Pending: true}, nil
	case stripego.PaymentIntentStatusRequiresAction, statusRequiresSourceAction:
		return challenge(pi)
	case stripego.PaymentIntentStatusRequiresPaymentMethod:
		return providers.Result{}, authenticationDecline(pi.LastPaymentError)
	case stripego.PaymentIntentStatusCanceled:
		return providers.Result{}, &providers.Decline{Code: "processing_error", Message: "The payment was canceled."}
	}
	return providers.Result{}, fmt.Errorf("%w: stripe: payment intent %s is %s after authentication", providers.ErrUnavailable, pi.ID, pi.Status)
}

// authenticationDecline is the decline of a PaymentIntent sent back to
// requires_payment_method after its challenge, with e its last_payment_error:
// the issuer's refusal after a successful authentication is a card_error;
// anything else is a failed authentication.
func authenticationDecline(e *stripego.Error) *providers.Decline {
	if d := paymentFailure(e); d != nil {
		return d
	}
	return &providers.Decline{Code: "authentication_failed", Message: "The cardholder's authentication failed."}
}

// paymentFailure is the decline that e, the last_payment_error of a
// PaymentIntent, stands for, or nil: a card_error is the card's decline, and
// payment_intent_authentication_failure (an invalid_request_error for
// Stripe) is authentication_failed.
func paymentFailure(e *stripego.Error) *providers.Decline {
	switch {
	case e == nil:
		return nil
	case e.Code == stripego.ErrorCodePaymentIntentAuthenticationFailure:
		return &providers.Decline{Code: "authentication_failed", Message: "The cardholder's authentication failed."}
	case e.Type == stripego.ErrorTypeCard:
		return cardDecline(e)
	}
	return nil
}

// Capture captures r.Amount (0: all that is capturable) of the PaymentIntent
// r.Reference. A PaymentIntent left processing is a pending result: the
// caller follows it with LookupPayment.
func (p *Provider) Capture(ctx context.Context, r providers.CaptureRequest) (providers.Result, error) {
	if err := checkKey(r.IdempotencyKey); err != nil {
		return providers.Result{}, err
	}
	params := &stripego.PaymentIntentCaptureParams{}
	if r.Amount > 0 {
		params.AmountToCapture = stripego.Int64(r.Amount)
	}
	params.AddExpand(expandSettlement)
	params.SetIdempotencyKey(r.IdempotencyKey)
	pi, err := p.client.V1PaymentIntents.Capture(ctx, r.Reference, params)
	if err != nil {
		return providers.Result{}, mapError(err)
	}
	return providers.Result{Reference: pi.ID, Pending: pi.Status == stripego.PaymentIntentStatusProcessing,
		Settlement: captureSettlement(pi)}, nil
}

// Void cancels the PaymentIntent r.Reference, which releases its authorization.
func (p *Provider) Void(ctx context.Context, r providers.VoidRequest) (providers.Result, error) {
	if err := checkKey(r.IdempotencyKey); err != nil {
		return providers.Result{}, err
	}
	params := &stripego.PaymentIntentCancelParams{}
	params.SetIdempotencyKey(r.IdempotencyKey)
	pi, err := p.client.V1PaymentIntents.Cancel(ctx, r.Reference, params)
	if err != nil {
		return providers.Result{}, mapError(err)
	}
	return providers.Result{Reference: pi.ID}, nil
}

// RefundMetadataKey is the metadata key under which a Stripe refund carries
// the gateway's refund id, so LookupRefund can find it once its idempotency
// key has expired.
const RefundMetadataKey = "gatehouse_refund_id"

// Refund refunds r.Amount of the PaymentIntent r.Reference; the reference is
// the Refund's id. r.RefundID goes into the refund's metadata. A refund
// Stripe reports failed or canceled is a decline; one that is pending (or
// requires action) is a pending result.
func (p *Provider) Refund(ctx context.Context, r providers.RefundRequest) (providers.Result, error) {
	if err := checkKey(r.IdempotencyKey); err != nil {
		return providers.Result{}, err
	}
	params := &stripego.RefundCreateParams{
		PaymentIntent: stripego.String(r.Reference),
		Amount:        stripego.Int64(r.Amount),
	}
	if r.Reason != "" {
		params.Reason = stripego.String(r.Reason)
	}
	if r.RefundID != "" {
		params.AddMetadata(RefundMetadataKey, r.RefundID)
	}
	params.SetIdempotencyKey(r.IdempotencyKey)
	re, err := p.client.V1Refunds.Create(ctx, params)
	if err != nil {
		return providers.Result{}, mapError(err)
	}
	return refundResult(re)
}

var _ providers.Lookup = (*Provider)(nil)

// LookupRefund finds the refund of r: by its Stripe id when an earlier answer
// named it, else among the PaymentIntent's refunds by the gateway's refund id
// in its metadata. No such refund is an error wrapping
// providers.ErrNothingBooked.
func (p *Provider) LookupRefund(ctx context.Context, r providers.RefundLookup) (providers.Result, error) {
	if r.ProviderRefund != "" {
		re, err := p.client.V1Refunds.Retrieve(ctx, r.ProviderRefund, nil)
		if err != nil {
			return providers.Result{}, mapError(err)
		}
		return refundResult(re)
	}
	if r.RefundID == "" {
		return providers.Result{}, &providers.Decline{Code: "invalid_request", Message: "A refund id is required."}
	}
	params := &stripego.RefundListParams{PaymentIntent: stripego.String(r.Reference)}
	params.Limit = stripego.Int64(100)
	for re, err := range p.client.V1Refunds.List(ctx, params) {
		if err != nil {
			return providers.Result{}, mapError(err)
		}
		if re.Metadata[RefundMetadataKey] == r.RefundID {
			return refundResult(re)
		}
	}
	return providers.Result{}, fmt.Errorf("stripe: no refund of %s carries %s %s: %w", r.Reference, RefundMetadataKey, r.RefundID, providers.ErrNothingBooked)
}

// LookupPayment retrieves the PaymentIntent reference and reads its status
// and amount_received. A PaymentIntent back at requires_payment_method
// (a processing payment that failed, or a failed authentication) or canceled
// holds nothing; one in requires_action waits for the cardholder.
func (p *Provider) LookupPayment(ctx context.Context, reference string) (providers.Payment, error) {
	params := &stripego.PaymentIntentRetrieveParams{}
	params.AddExpand(expandSettlement)
	pi, err := p.client.V1PaymentIntents.Retrieve(ctx, reference, params)
	if err != nil {
		return providers.Payment{}, mapError(err)
	}
	out := providers.Payment{Reference: pi.ID}
	switch pi.Status {
	case stripego.PaymentIntentStatusSucceeded:
		out.Status, out.Captured, out.Settlement = providers.PaymentCaptured, pi.AmountReceived, captureSettlement(pi)
	case stripego.PaymentIntentStatusProcessing:
		out.Status = providers.PaymentProcessing
	case stripego.PaymentIntentStatusCanceled:
		out.Status = providers.PaymentCanceled
	case stripego.PaymentIntentStatusRequiresCapture:
		out.Status = providers.PaymentAuthorized
	case stripego.PaymentIntentStatusRequiresAction, statusRequiresSourceAction:
		out.Status = providers.PaymentRequiresAction
	case stripego.PaymentIntentStatusRequiresPaymentMethod:
		out.Status, out.Failure = providers.PaymentFailed, paymentFailure(pi.LastPaymentError)
	default:
		return providers.Payment{}, fmt.Errorf("%w: stripe: payment intent %s is %s", providers.ErrUnavailable, pi.ID, pi.Status)
	}
	return out, nil
}

// Payout reads one of the account's payouts: what the gateway books when
// Stripe reports that it paid out (payout.* events).
func (p *Provider) Payout(ctx context.Context, reference string) (providers.Payout, error) {
	if strings.TrimSpace(reference) == "" {
		return providers.Payout{}, &providers.Decline{Code: "invalid_request", Message: "A payout reference is required."}
	}
	po, err := p.client.V1Payouts.Retrieve(ctx, reference, nil)
	if err != nil {
		return providers.Payout{}, mapError(err)
	}
	out := providers.Payout{Reference: po.ID, Amount: po.Amount, Currency: strings.ToUpper(string(po.Currency)),
		Status: string(po.Status), Automatic: po.Automatic, FailureCode: string(po.FailureCode)}
	if po.ArrivalDate > 0 {
		out.ArrivalDate = time.Unix(po.ArrivalDate, 0).UTC()
	}
	return out, nil
}

// refundResult reads a Stripe refund: succeeded is a result, pending or
// requires_action a pending result, failed or canceled a decline.
func refundResult(re *stripego.Refund) (providers.Result, error) {
	switch re.Status {
	case stripego.RefundStatusPending, stripego.RefundStatusRequiresAction:
		return providers.Result{Reference: re.ID, Pending: true}, nil
	case stripego.RefundStatusFailed, stripego.RefundStatusCanceled:
		code := string(re.FailureReason)
		if code == "" {
			code = "refund_failed"
		}
		return providers.Result{}, &providers.Decline{Code: code, Message: "The refund failed."}
	}
	return providers.Result{Reference: re.ID}, nil
}

// cardDecline is the decline of a Stripe card error: its decline_code when
// that says more than the code (not for generic_decline), else its code.
func cardDecline(e *stripego.Error, hide ...string) *providers.Decline {
	code := string(e.Code)
	if dc := string(e.DeclineCode); dc != "" && dc != "generic_decline" {
		code = dc
	}
	if code == "" {
		code = "card_declined"
	}
	return &providers.Decline{Code: code, Message: scrub(e.Msg, hide)}
}

// scrub replaces every non-empty string of hide in s.
func scrub(s string, hide []string) string {
	for _, h := range hide {
		if h != "" {
			s = strings.ReplaceAll(s, h, "[redacted]")
		}
	}
	return s
}

// mapError sorts a stripe-go error into a decline or an outage:
//
//   - 429, 409 (a concurrent request with the same key), 5xx, api_error, and
//     401/403 (a bad or restricted secret key: Stripe is unusable until an
//     operator fixes it, so the breaker should open and the charge wait):
//     ErrUnavailable, whatever the body says;
//   - card_error: a *providers.Decline with its decline or error code;
//   - invalid_request_error and idempotency_error: Decline invalid_request
//     (retrying the same request cannot help);
//   - any other Stripe error and every error that is not Stripe's (network,
//     timeout, context, bad JSON): ErrUnavailable.
//
// The Stripe error itself is not wrapped: its text is the whole JSON body,
// which can hold payment details. The error keeps its type, code, status,
// request id and message (not for 401/403, whose message can quote the key),
// and the context's error when there is one.
//
// Strings in hide (the card data of the request) never reach the error's text.
func mapError(err error, hide ...string) error {
	var se *stripego.Error
	if !errors.As(err, &se) {
		if text := err.Error(); scrub(text, hide) != text {
			return fmt.Errorf("%w: stripe: %s", providers.ErrUnavailable, scrub(text, hide))
		}
		return fmt.Errorf("%w: stripe: %w", providers.ErrUnavailable, err)
	}
	status := se.HTTPStatusCode
	outage := status == http.StatusTooManyRequests || status == http.StatusConflict || status >= 500 ||
		status == http.StatusUnauthorized || status == http.StatusForbidden || se.Type == stripego.ErrorTypeAPI
	switch {
	case !outage && se.Type == stripego.ErrorTypeCard:
		return cardDecline(se, hide...)
	case !outage && (se.Type == stripego.ErrorTypeInvalidRequest || se.Type == stripego.ErrorTypeIdempotency):
		return &providers.Decline{Code: "invalid_request", Message: scrub(se.Msg, hide)}
	}
	msg := scrub(se.Msg, hide)
	if status == http.StatusUnauthorized || status == http.StatusForbidden {
		msg = "the secret key was refused" // the message can quote the key
	}
	return fmt.Errorf("%w: stripe: %s %s (status %d, request %s): %s",
		providers.ErrUnavailable, se.Type, se.Code, status, se.RequestID, msg)
}
