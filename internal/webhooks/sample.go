package webhooks

import (
	"time"

	"github.com/gatehouse-pay/gatehouse/internal/charges"
	"github.com/gatehouse-pay/gatehouse/internal/connectors"
	"github.com/gatehouse-pay/gatehouse/internal/disputes"
	"github.com/gatehouse-pay/gatehouse/internal/events"
	"github.com/gatehouse-pay/gatehouse/internal/ids"
	"github.com/gatehouse-pay/gatehouse/internal/ledger"
	"github.com/gatehouse-pay/gatehouse/internal/refunds"
	"github.com/gatehouse-pay/gatehouse/internal/resource"
)

// SampleEvent returns the maker of a sample event for Test (and for
// gatehouse doctor, which plays the gateway): Sample with fresh ids. The
// error is the renderer's.
func SampleEvent(merchantID, environment string) func(typ string, at time.Time) (events.Event, error) {
	return func(typ string, at time.Time) (events.Event, error) {
		return Sample(typ, merchantID, environment, at, FreshID)
	}
}

// FreshID makes a new id: ids.New(prefix), or a UUID for prefix "".
func FreshID(prefix string) string {
	if prefix == "" {
		return ids.NewUUID()
	}
	return ids.New(prefix)
}

// Sample renders a made-up event of type typ at time at, in the shape a
// real event of that type has: the objects it is about are made up (a
// charge of 20.00 USD with metadata test=true, its refund, a payout, a
// dispute, an endpoint), their public forms rendered by the views and the
// event by the renderer that real events go through (events.New,
// NewPayout, NewDispute, NewEndpoint). newID makes every id (prefix "" for
// a UUID), so the examples of GET /v1/event_types are the same on every
// replica. An unknown type gets the sample charge.
func Sample(typ, merchantID, environment string, at time.Time, newID func(prefix string) string) (events.Event, error) {
	eventID := newID("")
	def, _ := events.Lookup(typ)
	switch def.Object {
	case events.ObjectPayout:
		return events.NewPayout(eventID, merchantID, environment, typ, at, samplePayout(typ, environment, at, newID).View())
	case events.ObjectDispute:
		return events.NewDispute(eventID, merchantID, environment, typ, at, sampleDispute(typ, environment, at, newID).View())
	case events.ObjectWebhookEndpoint:
		return events.NewEndpoint(eventID, merchantID, environment, typ, at, sampleEndpoint(typ, merchantID, environment, at, newID).View())
	}
	ch, refund := sampleCharge(typ, merchantID, environment, at, newID)
	return events.New(eventID, merchantID, environment, typ, at, ch.View(), refund)
}

// sampleCharge is the charge of a charge or refund event, and the refund of
// a refund event.
func sampleCharge(typ, merchantID, environment string, at time.Time, newID func(string) string) (charges.Charge, *resource.Refund) {
	last4, month, year, fingerprint := "4242", 12, at.Year()+3, "fp_sample"
	connector := newID(connectors.Prefix)
	ch := charges.Charge{ID: newID(""), MerchantID: merchantID, Environment: environment, Amount: 2000,
		Currency: "USD", Status: charges.StatusCreated, PaymentMethod: "card", Capture: true,
		Card:     charges.Card{Brand: "visa", Last4: &last4, ExpMonth: &month, ExpYear: &year, Fingerprint: &fingerprint},
		Provider: "sandbox", Metadata: map[string]string{"test": "true"}, ConnectorID: &connector,
		CreatedAt: at, UpdatedAt: at}
	settled := func(status string) {
		ref, ended := "sandbox_"+ch.ID, at
		ch.ProviderReference = &ref
		ch.Attempts = []charges.Attempt{{Connector: connector, Provider: ch.Provider, Status: status, ProviderReference: &ref, StartedAt: at, EndedAt: &ended}}
	}
	var refund *resource.Refund
	switch typ {
	case events.ChargeCaptured:
		ch.Status, ch.AmountCaptured = charges.StatusCaptured, ch.Amount
		settled("succeeded")
	case events.ChargeFailed:
		code, msg := "card_declined", "The card was declined."
		ch.Status, ch.FailureCode, ch.FailureMessage = charges.StatusFailed, &code, &msg
		settled("failed")
		ch.Attempts[0].FailureCode = &code
	case events.ChargeVoided:
		ch.Status = charges.StatusVoided
		settled("succeeded")
	case events.ChargeRequiresAction:
		page := "https://gateway.example.com/authenticate/v1/" + ch.ID + "/sample"
		ch.Status, ch.Authentication = charges.StatusRequiresAction, charges.Authentication{Status: charges.AuthPending, NextActionURL: &page}
	case events.ChargeCaptureFailed:
		ch.Status = charges.StatusAuthorized
		settled("succeeded")
	case events.ChargeRefunded, events.RefundCreated, events.RefundSucceeded:
		ch.Status, ch.AmountCaptured = charges.StatusCaptured, ch.Amount
		settled("succeeded")
		r := refunds.Refund{ID: newID(""), MerchantID: merchantID, ChargeID: ch.ID, Amount: ch.Amount,
			Currency: ch.Currency, Status: refunds.StatusPending, Metadata: map[string]string{}, CreatedAt: at, UpdatedAt: at}
		if typ != events.RefundCreated {
			r.Status, ch.AmountRefunded = refunds.StatusSucceeded, ch.Amount
		}
		if typ == events.ChargeRefunded {
			ch.Status = charges.StatusRefunded
		} else {
			view := r.View()
			refund = &view
		}
	}
	return ch, refund
}

func samplePayout(typ, environment string, at time.Time, newID func(string) string) ledger.Payout {
	p := ledger.Payout{ID: newID(ledger.PrefixPayout), Environment: environment, ConnectorID: newID(connectors.Prefix),
		Currency: "USD", Amount: 125000, Status: ledger.PayoutPending, ArrivalDate: at.Add(48 * time.Hour),
		CreatedAt: at, UpdatedAt: at}
	switch typ {
	case events.PayoutPaid:
		p.Status = ledger.PayoutPaid
	case events.PayoutFailed:
		code := "account_closed"
		msg := ledger.FailureMessage(code)
		p.Status, p.FailureCode, p.FailureMessage = ledger.PayoutFailed, &code, &msg
	}
	return p
}

func sampleDispute(typ, environment string, at time.Time, newID func(string) string) disputes.Dispute {
	d := disputes.Dispute{ID: newID(disputes.Prefix), Environment: environment, ChargeID: newID(""),
		ConnectorID: newID(connectors.Prefix), Provider: "sandbox", Amount: 2000, Currency: "USD",
		Reason: disputes.ReasonFraudulent, Status: disputes.StatusNeedsResponse, Fee: disputes.DefaultFee,
		EvidenceDueBy: at.Add(7 * 24 * time.Hour), CreatedAt: at, UpdatedAt: at}
	switch typ {
	case events.DisputeUpdated:
		submitted := at
		d.Status, d.Evidence, d.EvidenceSubmittedAt = disputes.StatusUnderReview,
			disputes.Evidence{"uncategorized_text": "The customer received the goods."}, &submitted
		d.FundsPhase = disputes.FundsWithdrawn
	case events.DisputeFundsWithdrawn:
		d.FundsPhase = disputes.FundsWithdrawn
	case events.DisputeClosed, events.DisputeFundsReinstated:
		submitted := at
		d.Status, d.Evidence, d.EvidenceSubmittedAt = disputes.StatusWon,
			disputes.Evidence{"uncategorized_text": "The customer received the goods."}, &submitted
		d.FundsPhase = disputes.FundsReinstated
	}
	return d
}

// sampleEndpoint is the endpoint an operational event is about: failing
// for an hour, then disabled for it, or delivering again.
func sampleEndpoint(typ, merchantID, environment string, at time.Time, newID func(string) string) Endpoint {
	since := at.Add(-time.Hour)
	e := Endpoint{ID: newID("we"), MerchantID: merchantID, Environment: environment,
		URL: "https://shop.example.com/webhooks/gatehouse", Events: []string{events.ChargeCaptured, events.RefundSucceeded},
		Active: true, CreatedAt: at.Add(-30 * 24 * time.Hour), UpdatedAt: at}
	switch typ {
	case events.EndpointFailing:
		e.FailingSince = &since
	case events.EndpointDisabled:
		reason := DisabledFailing
		e.Active, e.DisabledReason, e.DisabledAt, e.FailingSince = false, &reason, &at, &since
	}
	return e
}
