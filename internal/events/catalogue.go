package events

// Kinds of object an event is about: its data.object.
const (
	ObjectCharge          = "charge"
	ObjectRefund          = "refund"
	ObjectPayout          = "payout"
	ObjectDispute         = "dispute"
	ObjectWebhookEndpoint = "webhook_endpoint"
)

// Definition describes one event type: the one source of its name, its
// one-line description (GET /v1/event_types, api/openapi.yaml and
// docs/webhooks.md show it; tests keep the last two equal to it) and the
// object its data carries.
type Definition struct {
	Name string
	// Description says what happened, in one line of Markdown without a
	// final period.
	Description string
	// Object is data.object of every event of the type.
	Object string
	// Deprecated types are still sent; new endpoints should not rely on them.
	Deprecated bool
}

// Data lists the members of data, besides object, that an event of the type
// carries, as New, NewPayout, NewDispute and NewEndpoint fill them: a refund
// event carries its charge as well.
func (d Definition) Data() []string {
	if d.Object == ObjectRefund {
		return []string{ObjectCharge, ObjectRefund}
	}
	return []string{d.Object}
}

// Catalogue lists every event type the gateway sends, in the order of
// api/openapi.yaml. Types and Known derive from it.
var Catalogue = []Definition{
	{Name: ChargeCreated, Object: ObjectCharge, Description: "a charge was created"},
	{Name: ChargeCaptured, Object: ObjectCharge, Description: "a charge was captured"},
	{Name: ChargeFailed, Object: ObjectCharge, Description: "a charge failed at the provider"},
	{Name: ChargeVoided, Object: ObjectCharge, Description: "an authorized charge was voided"},
	{Name: ChargeRefunded, Object: ObjectCharge, Description: "refunds of a charge reached its full amount"},
	{Name: RefundCreated, Object: ObjectRefund, Description: "a refund was created"},
	{Name: RefundSucceeded, Object: ObjectRefund, Description: "a refund settled at the provider"},
	{Name: ChargeRequiresAction, Object: ObjectCharge,
		Description: "a charge waits for the cardholder's authentication (3-D Secure)"},
	{Name: ChargeCaptureFailed, Object: ObjectCharge,
		Description: "a capture the provider had received failed (Adyen's notification); the charge is `authorized` again"},
	{Name: PayoutCreated, Object: ObjectPayout, Description: "a payout was made, by hand or by the payout schedule"},
	{Name: PayoutPaid, Object: ObjectPayout, Description: "a payout arrived at the merchant's bank"},
	{Name: PayoutFailed, Object: ObjectPayout, Description: "a payout failed; its money is back in the balance"},
	{Name: DisputeCreated, Object: ObjectDispute,
		Description: "a cardholder disputed a charge (a chargeback or an inquiry)"},
	{Name: DisputeUpdated, Object: ObjectDispute,
		Description: "a dispute changed: its status, its evidence (staged or submitted), or its deadline"},
	{Name: DisputeClosed, Object: ObjectDispute, Description: "a dispute ended: `won`, `lost`, or `warning_closed`"},
	{Name: DisputeFundsWithdrawn, Object: ObjectDispute,
		Description: "a dispute's amount and fee left the balance (a `dispute` balance transaction)"},
	{Name: DisputeFundsReinstated, Object: ObjectDispute,
		Description: "a won dispute's amount came back to the balance (a `dispute_reversal` balance transaction)"},
	{Name: EndpointFailing, Object: ObjectWebhookEndpoint,
		Description: "an endpoint's deliveries have failed for `WEBHOOK_FAILING_AFTER` (default 1 h)"},
	{Name: EndpointDisabled, Object: ObjectWebhookEndpoint, Description: "an endpoint was disabled"},
	{Name: EndpointRecovered, Object: ObjectWebhookEndpoint,
		Description: "an endpoint delivered again after failing or was enabled again"},
}

// Lookup returns the definition of the event type name.
func Lookup(name string) (Definition, bool) {
	for _, d := range Catalogue {
		if d.Name == name {
			return d, true
		}
	}
	return Definition{}, false
}

func catalogueNames() []string {
	out := make([]string, len(Catalogue))
	for i, d := range Catalogue {
		out[i] = d.Name
	}
	return out
}
