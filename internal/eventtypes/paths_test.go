package eventtypes_test

import (
	"testing"

	"github.com/gatehouse-pay/gatehouse/internal/eventtypes"
)

// TestHasPath: the paths of an event type's body, by its schema.
func TestHasPath(t *testing.T) {
	for _, tc := range []struct {
		typ, path string
		want      bool
	}{
		{"charge.captured", "data.charge.currency", true},
		{"charge.captured", "data.charge.amount", true},
		{"charge.captured", "event_type", true},
		{"charge.captured", "data.charge", true},
		{"charge.captured", "data.charge.metadata.order_id", true}, // metadata is free-form
		{"charge.captured", "data.charge.card.brand", true},        // through a nullable object
		{"charge.captured", "data.charge.currencyy", false},
		{"charge.captured", "data.refund.amount", false}, // not in a charge event
		{"charge.captured", "data.charge.currency.code", false},
		{"refund.succeeded", "data.refund.amount", true},
		{"refund.succeeded", "data.charge.amount", true},
		{"webhook_endpoint.failing", "data.webhook_endpoint.failing_since", true},
		{"webhook_endpoint.failing", "data.webhook_endpoint.events.0", true},
		{"webhook_endpoint.failing", "data.webhook_endpoint.events.first", false},
		{"charge.dispute.created", "data.dispute.reason", true},
		{"payout.paid", "data.payout.amount", true},
		{"no.such_type", "data", false},
	} {
		if got := eventtypes.HasPath(tc.typ, tc.path); got != tc.want {
			t.Errorf("HasPath(%s, %s) = %t, want %t", tc.typ, tc.path, got, tc.want)
		}
	}
}
