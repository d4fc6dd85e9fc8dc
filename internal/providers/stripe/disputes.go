package stripe

import (
	"context"
	"sort"
	"strings"

	stripego "github.com/stripe/stripe-go/v84"

	"github.com/gatehouse-pay/gatehouse/internal/providers"
)

var (
	_ providers.DisputeResponder = (*Provider)(nil)
	_ providers.ChargePayments   = (*Provider)(nil)
)

// evidenceText maps the gateway's evidence fields that Stripe takes as
// text to their place in Stripe's evidence parameters (the same names).
var evidenceText = map[string]func(*stripego.DisputeUpdateEvidenceParams) **string{
	"access_activity_log":            func(e *stripego.DisputeUpdateEvidenceParams) **string { return &e.AccessActivityLog },
	"billing_address":                func(e *stripego.DisputeUpdateEvidenceParams) **string { return &e.BillingAddress },
	"cancellation_policy_disclosure": func(e *stripego.DisputeUpdateEvidenceParams) **string { return &e.CancellationPolicyDisclosure },
	"cancellation_rebuttal":          func(e *stripego.DisputeUpdateEvidenceParams) **string { return &e.CancellationRebuttal },
	"customer_email_address":         func(e *stripego.DisputeUpdateEvidenceParams) **string { return &e.CustomerEmailAddress },
	"customer_name":                  func(e *stripego.DisputeUpdateEvidenceParams) **string { return &e.CustomerName },
	"customer_purchase_ip":           func(e *stripego.DisputeUpdateEvidenceParams) **string { return &e.CustomerPurchaseIP },
	"duplicate_charge_explanation":   func(e *stripego.DisputeUpdateEvidenceParams) **string { return &e.DuplicateChargeExplanation },
	"duplicate_charge_id":            func(e *stripego.DisputeUpdateEvidenceParams) **string { return &e.DuplicateChargeID },
	"product_description":            func(e *stripego.DisputeUpdateEvidenceParams) **string { return &e.ProductDescription },
	"refund_policy_disclosure":       func(e *stripego.DisputeUpdateEvidenceParams) **string { return &e.RefundPolicyDisclosure },
	"refund_refusal_explanation":     func(e *stripego.DisputeUpdateEvidenceParams) **string { return &e.RefundRefusalExplanation },
	"service_date":                   func(e *stripego.DisputeUpdateEvidenceParams) **string { return &e.ServiceDate },
	"shipping_address":               func(e *stripego.DisputeUpdateEvidenceParams) **string { return &e.ShippingAddress },
	"shipping_carrier":               func(e *stripego.DisputeUpdateEvidenceParams) **string { return &e.ShippingCarrier },
	"shipping_date":                  func(e *stripego.DisputeUpdateEvidenceParams) **string { return &e.ShippingDate },
	"shipping_tracking_number":       func(e *stripego.DisputeUpdateEvidenceParams) **string { return &e.ShippingTrackingNumber },
	"uncategorized_text":             func(e *stripego.DisputeUpdateEvidenceParams) **string { return &e.UncategorizedText },
}

// evidenceFileOnly are the gateway's evidence fields whose namesakes at
// Stripe take the id of an uploaded file, not text: their text goes into
// uncategorized_text, each under its heading, after the merchant's own
// uncategorized_text.
var evidenceFileOnly = map[string]string{
	"customer_communication": "Customer communication",
	"receipt":                "Receipt",
	"service_documentation":  "Service documentation",
	"shipping_documentation": "Shipping documentation",
}

// evidenceParams is Stripe's evidence of the gateway's evidence. Empty
// fields and fields the adapter does not know are left out.
func evidenceParams(evidence map[string]string) *stripego.DisputeUpdateEvidenceParams {
	e := &stripego.DisputeUpdateEvidenceParams{}
	for name, set := range evidenceText {
		if v := evidence[name]; v != "" {
			*set(e) = stripego.String(v)
		}
	}
	var sections []string
	if v := evidence["uncategorized_text"]; v != "" {
		sections = append(sections, v)
	}
	names := make([]string, 0, len(evidenceFileOnly))
	for n := range evidenceFileOnly {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		if v := evidence[n]; v != "" {
			sections = append(sections, evidenceFileOnly[n]+":\n"+v)
		}
	}
	if len(sections) > 0 {
		e.UncategorizedText = stripego.String(strings.Join(sections, "\n\n"))
	}
	return e
}

// disputeKey is the idempotency key of an answer to the dispute
// reference: a retried answer is the same request, which Stripe answers
// as it answered the first for 24 hours.
func disputeKey(reference, what string) string {
	key := "gatehouse-dispute-" + what + "-" + reference
	if len(key) > maxKey {
		key = paymentMethodKey(key)
	}
	return key
}

func checkReference(reference, what string) error {
	if strings.TrimSpace(reference) == "" {
		return &providers.Decline{Code: "invalid_request", Message: "A " + what + " reference is required."}
	}
	return nil
}

// SubmitDisputeEvidence submits the merchant's evidence on Stripe's
// dispute reference (POST /v1/disputes/{id} with evidence[...] and
// submit=true): Stripe sends it to the issuer at once. Fields Stripe takes
// as text are sent under their names; those Stripe takes only as uploaded
// files (customer_communication, receipt, service_documentation,
// shipping_documentation) are sent inside uncategorized_text. Stripe's
// refusal (the dispute is closed, its deadline passed, a field is over
// Stripe's length) is a *providers.Decline invalid_request; an outage
// wraps providers.ErrUnavailable.
func (p *Provider) SubmitDisputeEvidence(ctx context.Context, reference string, evidence map[string]string) error {
	if err := checkReference(reference, "dispute"); err != nil {
		return err
	}
	params := &stripego.DisputeUpdateParams{Evidence: evidenceParams(evidence), Submit: stripego.Bool(true)}
	params.SetIdempotencyKey(disputeKey(reference, "submit"))
	if _, err := p.client.V1Disputes.Update(ctx, reference, params); err != nil {
		return mapError(err)
	}
	return nil
}

// AcceptDispute closes Stripe's dispute reference (POST
// /v1/disputes/{id}/close): the merchant accepts the loss. Errors as for
// SubmitDisputeEvidence.
func (p *Provider) AcceptDispute(ctx context.Context, reference string) error {
	if err := checkReference(reference, "dispute"); err != nil {
		return err
	}
	params := &stripego.DisputeCloseParams{}
	params.SetIdempotencyKey(disputeKey(reference, "close"))
	if _, err := p.client.V1Disputes.Close(ctx, reference, params); err != nil {
		return mapError(err)
	}
	return nil
}

// PaymentOfCharge reads Stripe's charge chargeID (GET /v1/charges/{id})
// and returns its PaymentIntent's id, the reference the gateway keeps for
// a charge; the charge's own id when it has no PaymentIntent. No such
// charge is a *providers.Decline invalid_request; an outage wraps
// providers.ErrUnavailable.
func (p *Provider) PaymentOfCharge(ctx context.Context, chargeID string) (string, error) {
	if err := checkReference(chargeID, "charge"); err != nil {
		return "", err
	}
	ch, err := p.client.V1Charges.Retrieve(ctx, chargeID, nil)
	if err != nil {
		return "", mapError(err)
	}
	if ch.PaymentIntent != nil && ch.PaymentIntent.ID != "" {
		return ch.PaymentIntent.ID, nil
	}
	return ch.ID, nil
}
