package refunds_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/gatehouse-pay/gatehouse/internal/charges"
	"github.com/gatehouse-pay/gatehouse/internal/providers"
	"github.com/gatehouse-pay/gatehouse/internal/providers/providertest"
	"github.com/gatehouse-pay/gatehouse/internal/refunds"
)

// outcome is one report to WithOutcomes.
type outcome struct{ Provider, Status string }

// outcomes records what WithOutcomes reports.
type outcomes struct {
	mu  sync.Mutex
	got []outcome
}

func (o *outcomes) report(provider, status string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.got = append(o.got, outcome{provider, status})
}

func (o *outcomes) list() []outcome {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]outcome{}, o.got...)
}

// TestProcessorReportsOutcomes: WithOutcomes is told (the charge's provider,
// the refund's new status) for each refund the store settles, and nothing
// when the store did not apply the settlement (another worker settled it
// first), when the store failed or when the queue retries.
func TestProcessorReportsOutcomes(t *testing.T) {
	const refundID = "0193a5d0-3c4e-7a5b-8c6d-7e8f9a0b1c2d"
	pending := refunds.Refund{ID: refundID, MerchantID: "mer_a", ChargeID: chargeID, Amount: 500, Currency: "USD",
		Status: refunds.StatusPending, CreatedAt: testNow, UpdatedAt: testNow}
	decline := func(context.Context, providers.RefundRequest) (providers.Result, error) {
		return providers.Result{}, &providers.Decline{Code: "charge_disputed"}
	}
	down := func(context.Context, providers.RefundRequest) (providers.Result, error) {
		return providers.Result{}, providers.ErrUnavailable
	}
	lostRace := func(context.Context, refunds.Refund, string, func(refunds.Refund, charges.Charge) (refunds.Settlement, error)) (bool, error) {
		return false, nil
	}
	storeDown := func(context.Context, refunds.Refund, string, func(refunds.Refund, charges.Charge) (refunds.Settlement, error)) (bool, error) {
		return false, errors.New("connection reset")
	}
	cases := []struct {
		name     string
		provider string // the charge's provider
		noRef    bool   // the charge has no provider reference
		refund   func(context.Context, providers.RefundRequest) (providers.Result, error)
		final    bool
		settle   func(context.Context, refunds.Refund, string, func(refunds.Refund, charges.Charge) (refunds.Settlement, error)) (bool, error)
		wantErr  bool
		want     []outcome
	}{
		{name: "succeeded", provider: "sandbox", want: []outcome{{"sandbox", refunds.StatusSucceeded}}},
		{name: "the charge's provider is reported", provider: "stripe", want: []outcome{{"stripe", refunds.StatusSucceeded}}},
		{name: "declined", provider: "sandbox", refund: decline, want: []outcome{{"sandbox", refunds.StatusFailed}}},
		{name: "provider down, final attempt: still pending", provider: "sandbox", refund: down, final: true, wantErr: true, want: []outcome{}},
		{name: "provider down, the queue retries", provider: "sandbox", refund: down, wantErr: true, want: []outcome{}},
		{name: "provider not configured on the worker: still pending", provider: "adyen", wantErr: true, want: []outcome{}},
		{name: "no provider reference", provider: "sandbox", noRef: true, want: []outcome{{"sandbox", refunds.StatusFailed}}},
		{name: "succeeded but lost the race", provider: "sandbox", settle: lostRace, want: []outcome{}},
		{name: "declined but lost the race", provider: "sandbox", refund: decline, settle: lostRace, want: []outcome{}},
		{name: "store error", provider: "sandbox", settle: storeDown, wantErr: true, want: []outcome{}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ch := capturedCharge()
			ch.Provider = c.provider
			if c.noRef {
				ch.ProviderReference = nil
			}
			st := &fakeStore{
				RefundForWorkFn: func(context.Context, string) (refunds.Refund, charges.Charge, error) { return pending, ch, nil },
				SettleRefundFn:  c.settle,
			}
			prov := &providertest.Fake{RefundFn: c.refund}
			reg := providers.Registry{"sandbox": prov, "stripe": prov}
			log := slog.New(slog.NewTextHandler(io.Discard, nil))
			got := &outcomes{}
			p := refunds.NewProcessor(st, reg, time.Second, func() time.Time { return testNow }, log, nil)
			if p.WithOutcomes(got.report) != p {
				t.Fatal("WithOutcomes does not return its Processor")
			}
			err := p.Process(context.Background(), refundID, c.final)
			if (err != nil) != c.wantErr {
				t.Fatalf("err = %v, want error %v", err, c.wantErr)
			}
			if len(st.settled) == 0 && !c.wantErr {
				t.Fatal("nothing was settled")
			}
			if diff := cmp.Diff(c.want, got.list()); diff != "" {
				t.Errorf("outcomes (-want +got):\n%s", diff)
			}
		})
	}
}

// TestProcessorWithoutOutcomes: a processor without WithOutcomes still
// settles refunds.
func TestProcessorWithoutOutcomes(t *testing.T) {
	st := &fakeStore{RefundForWorkFn: func(context.Context, string) (refunds.Refund, charges.Charge, error) {
		return refunds.Refund{ID: "0193a5d0-3c4e-7a5b-8c6d-7e8f9a0b1c2d", ChargeID: chargeID, Amount: 500, Currency: "USD",
			Status: refunds.StatusPending, CreatedAt: testNow}, capturedCharge(), nil
	}}
	if err := worker(st, &providertest.Fake{}).Process(context.Background(), "0193a5d0-3c4e-7a5b-8c6d-7e8f9a0b1c2d", false); err != nil {
		t.Fatal(err)
	}
	if len(st.settled) != 1 || st.settled[0].Status != refunds.StatusSucceeded {
		t.Errorf("settled %+v, want one succeeded", st.settled)
	}
}
