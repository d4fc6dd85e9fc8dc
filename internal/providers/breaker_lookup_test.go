package providers_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/gatehouse-pay/gatehouse/internal/providers"
)

// lookupFake is a providers.Provider with a Lookup whose answers the test chooses.
type lookupFake struct {
	providers.Provider
	err   error
	calls int
}

func (l *lookupFake) LookupRefund(context.Context, providers.RefundLookup) (providers.Result, error) {
	l.calls++
	return providers.Result{Reference: "re_1"}, l.err
}

func (l *lookupFake) LookupPayment(context.Context, string) (providers.Payment, error) {
	l.calls++
	return providers.Payment{Reference: "pay_1", Status: providers.PaymentCaptured, Captured: 10}, l.err
}

// The breaker passes lookups through, counts a lookup that found nothing as
// an answer (the circuit stays closed), refuses lookups while open, and
// answers providers.ErrNoLookup for a provider that cannot look up.
func TestBreakerLookups(t *testing.T) {
	ctx := context.Background()
	inner := &lookupFake{Provider: &noLookup{}}
	b := providers.WithBreaker(inner, providers.BreakerOptions{Failures: 2, OpenFor: time.Hour})
	if p, err := b.LookupPayment(ctx, "pay_1"); err != nil || p.Captured != 10 || p.Status != providers.PaymentCaptured {
		t.Fatalf("LookupPayment = %+v, %v", p, err)
	}
	inner.err = fmt.Errorf("nothing: %w", providers.ErrNothingBooked)
	for range 3 {
		if _, err := b.LookupRefund(ctx, providers.RefundLookup{}); !providers.NothingBooked(err) {
			t.Fatalf("LookupRefund err = %v", err)
		}
	}
	if b.State() != "closed" {
		t.Errorf("state %s after lookups that found nothing, want closed", b.State())
	}
	inner.err = providers.ErrUnavailable
	for range 2 {
		_, _ = b.LookupRefund(ctx, providers.RefundLookup{})
	}
	calls := inner.calls
	if _, err := b.LookupPayment(ctx, "pay_1"); !errors.Is(err, providers.ErrCircuitOpen) || inner.calls != calls {
		t.Errorf("open: err %v, calls %d -> %d; want refused without a call", err, calls, inner.calls)
	}
	plain := providers.WithBreaker(&noLookup{}, providers.BreakerOptions{})
	if _, err := plain.LookupRefund(ctx, providers.RefundLookup{}); !errors.Is(err, providers.ErrNoLookup) || !errors.Is(err, providers.ErrUnavailable) {
		t.Errorf("no lookup: %v", err)
	}
	if _, err := plain.LookupPayment(ctx, "x"); !errors.Is(err, providers.ErrNoLookup) {
		t.Errorf("no lookup: %v", err)
	}
}

// noLookup is a providers.Provider without Lookup.
type noLookup struct{}

func (noLookup) Name() string { return "plain" }
func (noLookup) Authorize(context.Context, providers.AuthorizeRequest) (providers.Result, error) {
	return providers.Result{}, nil
}
func (noLookup) Capture(context.Context, providers.CaptureRequest) (providers.Result, error) {
	return providers.Result{}, nil
}
func (noLookup) Void(context.Context, providers.VoidRequest) (providers.Result, error) {
	return providers.Result{}, nil
}
func (noLookup) Refund(context.Context, providers.RefundRequest) (providers.Result, error) {
	return providers.Result{}, nil
}
