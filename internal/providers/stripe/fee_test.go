package stripe_test

import (
	"context"
	"testing"
	"time"

	"github.com/gatehouse-pay/gatehouse/internal/providers"
	"github.com/gatehouse-pay/gatehouse/internal/providers/stripe"
)

// A capture's answer carries the fee Stripe kept and when the money is
// available, read from its charge's balance transaction; an answer without
// it (not expanded, or not yet made) carries none, and the fee waits.
func TestCaptureReadsTheBalanceTransaction(t *testing.T) {
	const expanded = `{"id":"pi_fee","object":"payment_intent","status":"succeeded","amount":2000,"amount_received":2000,
"latest_charge":{"id":"ch_fee","object":"charge","balance_transaction":{"id":"txn_fee","object":"balance_transaction",
"amount":2000,"fee":88,"net":1912,"available_on":1764547200,"fee_details":[{"amount":88,"currency":"usd",
"description":"Stripe processing fees","type":"stripe_fee"}]}}}`
	const idOnly = `{"id":"pi_fee","object":"payment_intent","status":"succeeded","amount":2000,"amount_received":2000,
"latest_charge":{"id":"ch_fee","object":"charge","balance_transaction":"txn_fee"}}`
	const processing = `{"id":"pi_fee","object":"payment_intent","status":"processing","amount":2000}`
	for _, tt := range []struct {
		name, body string
		want       *providers.Settlement
	}{
		{"expanded", expanded, &providers.Settlement{Fee: 88, AvailableOn: time.Unix(1764547200, 0).UTC(),
			FeeDetails: []providers.FeeLine{{Type: "stripe_fee", Amount: 88, Description: "Stripe processing fees"}}}},
		{"the balance transaction's id only", idOnly, nil},
		{"not captured yet", processing, nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			f := recordedStripe(t, 200, tt.body)
			res, err := stripe.New(secretKey, f.URL, nil).Capture(context.Background(),
				providers.CaptureRequest{IdempotencyKey: "cap-fee", Reference: "pi_fee"})
			if err != nil {
				t.Fatal(err)
			}
			got := res.Settlement
			switch {
			case tt.want == nil && got != nil:
				t.Fatalf("settlement %+v, want none", got)
			case tt.want != nil && (got == nil || got.Fee != tt.want.Fee || !got.AvailableOn.Equal(tt.want.AvailableOn) ||
				len(got.FeeDetails) != 1 || got.FeeDetails[0] != tt.want.FeeDetails[0]):
				t.Fatalf("settlement %+v, want %+v", got, tt.want)
			}
			if form := f.seen()[0].Form; form.Get("expand[0]") != "latest_charge.balance_transaction" {
				t.Fatalf("the capture did not ask for the balance transaction: %v", form)
			}
		})
	}
}
