package notifications

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/gatehouse-pay/gatehouse/internal/apperr"
	"github.com/gatehouse-pay/gatehouse/internal/connectors"
	"github.com/gatehouse-pay/gatehouse/internal/disputes"
	"github.com/gatehouse-pay/gatehouse/internal/providers"
	"github.com/gatehouse-pay/gatehouse/internal/providers/adyen"
)

// ProviderSandbox names the built-in sandbox, whose disputes arrive as
// notifications of its own, in the shape of Stripe's events.
const ProviderSandbox = "sandbox"

// DisputeApplier applies what a provider reports of a dispute
// (disputes.Processor): false when the gateway holds no charge with the
// report's payment reference.
type DisputeApplier interface {
	Apply(ctx context.Context, merchantID, connectorID, provider string, r disputes.Report) (res disputes.Applied, err error)
}

// WithDisputes makes the applier apply the disputes providers report.
func (a *Applier) WithDisputes(d DisputeApplier) *Applier {
	a.disputes = d
	return a
}

// isDispute reports whether a notification of provider and type is about a
// dispute.
func isDispute(provider, typ string) bool {
	switch provider {
	case connectors.ProviderStripe, ProviderSandbox:
		return strings.HasPrefix(typ, "charge.dispute.")
	case connectors.ProviderAdyen:
		_, ok := adyenDisputeCodes[typ]
		return ok
	}
	return false
}

// adyenDisputeCodes maps Adyen's dispute event codes to the stage and
// funds phase each reports; the others (NOTIFICATION_OF_FRAUD,
// ISSUER_COMMENTS, PREARBITRATION_OPEN) are recorded and change nothing.
var adyenDisputeCodes = map[string]struct {
	stage disputes.Stage
	funds int
}{
	"REQUEST_FOR_INFORMATION":    {disputes.InquiryOpen, disputes.FundsNone},
	"INFORMATION_SUPPLIED":       {disputes.InquiryReview, disputes.FundsNone},
	"NOTIFICATION_OF_CHARGEBACK": {disputes.Open, disputes.FundsNone},
	"CHARGEBACK":                 {disputes.Open, disputes.FundsWithdrawn},
	"CHARGEBACK_REVERSED":        {disputes.Won, disputes.FundsReinstated},
	// The merchant did not defend in time: the chargeback stands.
	"DISPUTE_DEFENSE_PERIOD_ENDED": {disputes.Lost, disputes.FundsWithdrawn},
	// The issuer accepted the defence, or did not answer it in time.
	"ISSUER_RESPONSE_TIMEFRAME_EXPIRED": {disputes.Won, disputes.FundsReinstated},
	"SECOND_CHARGEBACK":                 {disputes.SecondLost, 3},
	"PREARBITRATION_WON":                {disputes.ArbitrationWon, 4},
	"PREARBITRATION_LOST":               {disputes.ArbitrationLost, 3},
}

// stripeDispute is what the gateway reads of a Stripe dispute (and of the
// sandbox's, which has the same shape).
type stripeDispute struct {
	ID                  string          `json:"id"`
	Object              string          `json:"object"`
	Amount              int64           `json:"amount"`
	Currency            string          `json:"currency"`
	Charge              json.RawMessage `json:"charge"`
	PaymentIntent       json.RawMessage `json:"payment_intent"`
	Reason              string          `json:"reason"`
	Status              string          `json:"status"`
	BalanceTransactions []struct {
		Amount int64 `json:"amount"`
		Fee    int64 `json:"fee"`
	} `json:"balance_transactions"`
	EvidenceDetails struct {
		DueBy *int64 `json:"due_by"`
	} `json:"evidence_details"`
}

// idOf reads a field that is an id, or an expanded object with one.
func idOf(raw json.RawMessage) string {
	var id string
	if json.Unmarshal(raw, &id) == nil {
		return id
	}
	var obj struct {
		ID string `json:"id"`
	}
	if json.Unmarshal(raw, &obj) == nil {
		return obj.ID
	}
	return ""
}

// StripeDisputeReport reads the dispute a Stripe (or sandbox) charge.dispute.*
// event carries; ok is false for a payload that is not one. chargeID is
// the Stripe charge it names, for a dispute without its PaymentIntent.
func StripeDisputeReport(typ string, payload []byte) (r disputes.Report, chargeID string, ok bool) {
	var ev struct {
		Data struct {
			Object stripeDispute `json:"object"`
		} `json:"data"`
	}
	if json.Unmarshal(payload, &ev) != nil {
		return disputes.Report{}, "", false
	}
	d := ev.Data.Object
	stage, known := disputes.StageOf(d.Status)
	if d.Object != "dispute" || d.ID == "" || !known || d.Amount <= 0 || len(d.Currency) != 3 {
		return disputes.Report{}, "", false
	}
	r = disputes.Report{Reference: d.ID, PaymentReference: idOf(d.PaymentIntent), Amount: d.Amount,
		Currency: strings.ToUpper(d.Currency), Reason: d.Reason, Stage: stage}
	switch {
	case disputes.Inquiry(d.Status):
		r.FundsPhase = disputes.FundsNone
	case d.Status == disputes.StatusWon:
		r.FundsPhase = disputes.FundsReinstated
	default:
		r.FundsPhase = disputes.FundsWithdrawn
	}
	switch typ {
	case "charge.dispute.funds_withdrawn":
		r.FundsPhase = max(r.FundsPhase, disputes.FundsWithdrawn)
	case "charge.dispute.funds_reinstated":
		r.FundsPhase = max(r.FundsPhase, disputes.FundsReinstated)
	}
	for _, bt := range d.BalanceTransactions {
		if bt.Amount < 0 {
			fee := bt.Fee
			r.Fee = &fee
			break
		}
	}
	if d.EvidenceDetails.DueBy != nil && *d.EvidenceDetails.DueBy > 0 {
		r.DueBy = time.Unix(*d.EvidenceDetails.DueBy, 0).UTC()
	}
	return r, idOf(d.Charge), true
}

// AdyenDisputeReport reads a dispute notification item of Adyen's; ok is
// false for one that changes nothing (a code the table does not map, or
// an item without a dispute reference or amount). Every item about a
// dispute carries the dispute's pspReference; originalReference, the
// disputed payment's, comes with the items that open a dispute but not
// with all of the later ones (CHARGEBACK_REVERSED, SECOND_CHARGEBACK,
// PREARBITRATION_WON and _LOST in Adyen's own examples): the report of
// such an item names no payment, and changes only a dispute the gateway
// already holds.
func AdyenDisputeReport(item adyen.NotificationItem) (disputes.Report, bool) {
	m, mapped := adyenDisputeCodes[item.EventCode]
	if !mapped || item.PSPReference == "" {
		return disputes.Report{}, false
	}
	amount, currency, err := adyen.FromAdyen(item.Amount)
	if err != nil || amount <= 0 {
		return disputes.Report{}, false
	}
	r := disputes.Report{Reference: item.PSPReference, PaymentReference: item.OriginalReference, Amount: amount,
		Currency: currency, Reason: adyenReason(item), Stage: m.stage, FundsPhase: m.funds}
	zero := int64(0) // Adyen reports the dispute fee with settlement
	r.Fee = &zero
	if s, ok := item.AdditionalData["defensePeriodEndsAt"].(string); ok {
		if t, err := time.Parse(time.RFC3339, s); err == nil {
			r.DueBy = t.UTC()
		}
	}
	return r, true
}

// adyenReason is the dispute's reason: fraudulent when the scheme's reason
// says fraud, general otherwise.
func adyenReason(item adyen.NotificationItem) string {
	for _, k := range []string{"chargebackReasonCode", "chargebackSchemeCode", "disputeReason"} {
		if s, ok := item.AdditionalData[k].(string); ok && strings.Contains(strings.ToLower(s), "fraud") {
			return disputes.ReasonFraudulent
		}
	}
	if strings.Contains(strings.ToLower(item.Reason), "fraud") {
		return disputes.ReasonFraudulent
	}
	return disputes.ReasonGeneral
}

// DisputePaymentWait is how long a dispute notification about a payment
// the gateway does not hold is tried again before it is ignored.
const DisputePaymentWait = 10 * time.Minute

// dispute applies a dispute notification.
func (a *Applier) dispute(ctx context.Context, n Notification) (string, *string, error) {
	if a.disputes == nil {
		return OutcomeIgnored, nil, nil
	}
	var r disputes.Report
	switch n.Provider {
	case connectors.ProviderAdyen:
		var item adyen.NotificationItem
		if json.Unmarshal(n.Payload, &item) != nil {
			return OutcomeIgnored, nil, nil
		}
		var ok bool
		if r, ok = AdyenDisputeReport(item); !ok {
			return OutcomeIgnored, nil, nil
		}
	default:
		var chargeID string
		var ok bool
		if r, chargeID, ok = StripeDisputeReport(n.Type, n.Payload); !ok {
			return OutcomeIgnored, nil, nil
		}
		if r.PaymentReference == "" && chargeID != "" && a.providers != nil {
			// The dispute names the Stripe charge only: Stripe's books say
			// which payment it belongs to.
			p, err := a.providers.Resolve(ctx, &n.ConnectorID, n.Provider)
			if err != nil {
				return "", nil, err
			}
			if pc, ok := p.(providers.ChargePayments); ok {
				ref, err := pc.PaymentOfCharge(ctx, chargeID)
				if _, declined := providers.AsDecline(err); declined || errors.Is(err, providers.ErrNoDisputeAPI) {
					return OutcomeIgnored, nil, nil // no such charge at the provider
				}
				if err != nil {
					return "", nil, err
				}
				r.PaymentReference = ref
			}
		}
		if r.PaymentReference == "" {
			return OutcomeIgnored, nil, nil
		}
	}
	res, err := a.disputes.Apply(ctx, n.MerchantID, n.ConnectorID, n.Provider, r)
	if err != nil {
		return "", nil, err
	}
	if !res.Found {
		// A provider may report a dispute before the gateway has recorded
		// the payment's reference (the sandbox does at capture): for a
		// while, the notification is tried again.
		if a.now().Sub(n.ReceivedAt) < DisputePaymentWait {
			return "", nil, apperr.Unavailable(fmt.Errorf("notifications: the payment %s of dispute %s is not recorded yet", r.PaymentReference, r.Reference))
		}
		return OutcomeIgnored, nil, nil
	}
	if !res.Changed {
		return OutcomeDuplicate, &res.ChargeID, nil
	}
	return OutcomeApplied, &res.ChargeID, nil
}
