package providers_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/gatehouse-pay/gatehouse/internal/providers"
	"github.com/gatehouse-pay/gatehouse/internal/providers/providertest"
)

// The breaker passes lookups through, counts a lookup that found nothing as
// an answer (the circuit stays closed), refuses lookups while open, and
// answers providers.ErrNoLookup for a provider that cannot look up.
func TestBreakerLookups(t *testing.T) {
	ctx := context.Background()
	var lookupErr error
	inner := &providertest.FakeLookup{Fake: &providertest.Fake{},
		LookupPaymentFn: func(context.Context, string) (providers.Payment, error) {
			return providers.Payment{Reference: "pay_1", Status: providers.PaymentCaptured, Captured: 10}, lookupErr
		},
		LookupRefundFn: func(context.Context, providers.RefundLookup) (providers.Result, error) {
			return providers.Result{Reference: "re_1"}, lookupErr
		},
	}
	b := providers.WithBreaker(inner, providers.BreakerOptions{Failures: 2, OpenFor: time.Hour})
	if p, err := b.LookupPayment(ctx, "pay_1"); err != nil || p.Captured != 10 || p.Status != providers.PaymentCaptured {
		t.Fatalf("LookupPayment = %+v, %v", p, err)
	}
	lookupErr = fmt.Errorf("nothing: %w", providers.ErrNothingBooked)
	for range 3 {
		if _, err := b.LookupRefund(ctx, providers.RefundLookup{}); !providers.NothingBooked(err) {
			t.Fatalf("LookupRefund err = %v", err)
		}
	}
	if b.State() != "closed" {
		t.Errorf("state %s after lookups that found nothing, want closed", b.State())
	}
	lookupErr = providers.ErrUnavailable
	for range 2 {
		_, _ = b.LookupRefund(ctx, providers.RefundLookup{})
	}
	calls := inner.Count()
	if _, err := b.LookupPayment(ctx, "pay_1"); !errors.Is(err, providers.ErrCircuitOpen) || inner.Count() != calls {
		t.Errorf("open: err %v, calls %d -> %d; want refused without a call", err, calls, inner.Count())
	}
	plain := providers.WithBreaker(&providertest.Fake{}, providers.BreakerOptions{})
	if _, err := plain.LookupRefund(ctx, providers.RefundLookup{}); !errors.Is(err, providers.ErrNoLookup) || !errors.Is(err, providers.ErrUnavailable) {
		t.Errorf("no lookup: %v", err)
	}
	if _, err := plain.LookupPayment(ctx, "x"); !errors.Is(err, providers.ErrNoLookup) {
		t.Errorf("no lookup: %v", err)
	}
}
