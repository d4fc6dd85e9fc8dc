package adyen

import (
	"context"
	"fmt"
	"net/url"

	"github.com/gatehouse-pay/gatehouse/internal/providers"
)

func pathEscape(s string) string { return url.PathEscape(s) }

// modificationRequest is Adyen's PaymentCaptureRequest,
// PaymentCancelRequest and PaymentRefundRequest, as far as this adapter
// sends them.
type modificationRequest struct {
	MerchantAccount      string  `json:"merchantAccount"`
	Amount               *Amount `json:"amount,omitempty"`
	Reference            string  `json:"reference,omitempty"`
	MerchantRefundReason string  `json:"merchantRefundReason,omitempty"`
}

// modificationResponse is the part of Adyen's answer to a modification
// this adapter reads.
type modificationResponse struct {
	PSPReference        string `json:"pspReference"`
	PaymentPSPReference string `json:"paymentPspReference"`
	Status              string `json:"status"`
}

// modify sends a modification of the payment psp and reads Adyen's answer:
// status received is a pending result whose reference is the
// modification's own pspReference; any other answer leaves the outcome
// unknown (providers.ErrUnavailable).
func (a *Adyen) modify(ctx context.Context, psp, what, key string, body modificationRequest) (providers.Result, error) {
	k, err := idempotencyKey(key)
	if err != nil {
		return providers.Result{}, err
	}
	path, err := pspPath(psp, what)
	if err != nil {
		return providers.Result{}, err
	}
	body.MerchantAccount = a.merchant
	var res modificationResponse
	if err := a.post(ctx, path, k, body, &res); err != nil {
		return providers.Result{}, err
	}
	if res.Status != "received" || res.PSPReference == "" {
		return providers.Result{}, fmt.Errorf("%w: adyen: %s of %s answered status %q, pspReference %q",
			providers.ErrUnavailable, what, psp, res.Status, res.PSPReference)
	}
	return providers.Result{Reference: res.PSPReference, Pending: true}, nil
}

// Capture sends POST /payments/{r.Reference}/captures for r.Amount (at most
// what was authorized; less is a partial capture) in r.Currency, which
// Adyen requires. The answer is a pending result with the capture's
// pspReference: the CAPTURE (or CAPTURE_FAILED) notification settles it.
func (a *Adyen) Capture(ctx context.Context, r providers.CaptureRequest) (providers.Result, error) {
	if r.Amount <= 0 || r.Currency == "" {
		return providers.Result{}, &providers.Decline{Code: "invalid_request", Message: "Adyen captures need the amount and its currency."}
	}
	amount, err := toAdyen(r.Amount, r.Currency)
	if err != nil {
		return providers.Result{}, err
	}
	return a.modify(ctx, r.Reference, "captures", r.IdempotencyKey,
		modificationRequest{Amount: &amount, Reference: reference(r.IdempotencyKey)})
}

// Void sends POST /payments/{r.Reference}/cancels, which releases the
// authorization. The answer is a pending result with the cancel's
// pspReference: the CANCELLATION notification settles it.
func (a *Adyen) Void(ctx context.Context, r providers.VoidRequest) (providers.Result, error) {
	return a.modify(ctx, r.Reference, "cancels", r.IdempotencyKey, modificationRequest{Reference: reference(r.IdempotencyKey)})
}

// refundReasons maps Gatehouse's refund reasons to Adyen's merchantRefundReason.
var refundReasons = map[string]string{
	"duplicate":             "DUPLICATE",
	"fraudulent":            "FRAUD",
	"requested_by_customer": "CUSTOMER REQUEST",
}

// Refund sends POST /payments/{r.Reference}/refunds for r.Amount in
// r.Currency, with reference r.RefundID (the key when there is none), so
// that the REFUND or REFUND_FAILED notification, which carries it, can be
// matched to the refund. The answer is a pending result with the refund's
// pspReference.
func (a *Adyen) Refund(ctx context.Context, r providers.RefundRequest) (providers.Result, error) {
	amount, err := toAdyen(r.Amount, r.Currency)
	if err != nil {
		return providers.Result{}, err
	}
	ref := r.RefundID
	if ref == "" {
		ref = r.IdempotencyKey
	}
	return a.modify(ctx, r.Reference, "refunds", r.IdempotencyKey,
		modificationRequest{Amount: &amount, Reference: reference(ref), MerchantRefundReason: refundReasons[r.Reason]})
}

// LookupRefund cannot read Adyen's books: the Checkout API has no way to
// read a refund (or a payment) back; only notifications tell. The error
// wraps providers.ErrNoLookup and providers.ErrUnavailable.
func (a *Adyen) LookupRefund(_ context.Context, r providers.RefundLookup) (providers.Result, error) {
	return providers.Result{}, fmt.Errorf("adyen: refund %s of %s: %w: %w", r.RefundID, r.Reference, providers.ErrNoLookup, providers.ErrUnavailable)
}

// LookupPayment cannot read Adyen's books (see LookupRefund).
func (a *Adyen) LookupPayment(_ context.Context, reference string) (providers.Payment, error) {
	return providers.Payment{}, fmt.Errorf("adyen: payment %s: %w: %w", reference, providers.ErrNoLookup, providers.ErrUnavailable)
}
