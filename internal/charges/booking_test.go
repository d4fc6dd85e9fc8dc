package charges_test

import (
	"context"
	"testing"
	"time"

	"github.com/gatehouse-pay/gatehouse/internal/charges"
	"github.com/gatehouse-pay/gatehouse/internal/ledger"
	"github.com/gatehouse-pay/gatehouse/internal/providers"
	"github.com/gatehouse-pay/gatehouse/internal/providers/providertest"
)

// A capture is booked with its own transition: by the connector's fee
// schedule, or with the fee and availability the provider reported, or with
// its fee pending when the provider reports it later. An authorization
// alone books nothing.
func TestCaptureIsBookedWithItsTransition(t *testing.T) {
	ctx := context.Background()
	schedule := ledger.FeeSchedule{PercentBPS: 250, Fixed: 25}
	reported := &providers.Settlement{Fee: 61, AvailableOn: testNow.Add(72 * time.Hour),
		FeeDetails: []providers.FeeLine{{Type: "stripe_fee", Amount: 61, Description: "Stripe processing fees"}}}
	for _, tt := range []struct {
		name        string
		capture     bool
		terms       ledger.Terms
		settlement  *providers.Settlement
		wantFee     int64
		wantPending bool
		// wantAvail is available_on given the capture's time.
		wantAvail func(at time.Time) time.Time
	}{
		{"by the schedule", true, ledger.Terms{Fees: &schedule, SettlementDelay: time.Hour}, nil, 75, false,
			func(at time.Time) time.Time { return at.Add(time.Hour) }},
		{"as the provider reported", true, ledger.Terms{SettlementDelay: time.Hour}, reported, 61, false,
			func(time.Time) time.Time { return reported.AvailableOn }},
		{"reported later", true, ledger.Terms{SettlementDelay: 48 * time.Hour}, nil, 0, true,
			func(at time.Time) time.Time { return at.Add(48 * time.Hour) }},
		{"authorized only", false, ledger.Terms{Fees: &schedule}, nil, 0, false, nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ch, sealed := created(t, tt.capture)
			st := &fakeStore{ChargeForWorkFn: func(context.Context, string) (charges.Charge, []byte, error) { return ch, sealed, nil }}
			p := &providertest.Fake{AuthorizeFn: func(context.Context, providers.AuthorizeRequest) (providers.Result, error) {
				return providers.Result{Reference: "sbx_ch_1", Settlement: tt.settlement}, nil
			}}
			w := worker(t, st, p).WithLedger(func(context.Context, *string, string) (ledger.Terms, error) { return tt.terms, nil })
			if err := w.Authorize(ctx, ch.ID, false); err != nil {
				t.Fatal(err)
			}
			if len(st.transitions) != 1 {
				t.Fatalf("%d transitions", len(st.transitions))
			}
			b := st.transitions[0].Booking
			if !tt.capture {
				if b != nil {
					t.Fatalf("an authorization booked %+v", b)
				}
				return
			}
			if b == nil {
				t.Fatal("the capture booked nothing")
			}
			at := testNow.Truncate(time.Millisecond)
			if b.Type != ledger.TypeCharge || b.Source != ch.ID || b.Amount != 2000 || b.Fee != tt.wantFee ||
				b.FeePending != tt.wantPending || !b.AvailableOn.Equal(tt.wantAvail(at)) ||
				b.ProviderReference != "sbx_ch_1" || !b.CreatedAt.Equal(at) || b.Check() != nil {
				t.Fatalf("booked %+v (check %v)", b, b.Check())
			}
		})
	}
}
