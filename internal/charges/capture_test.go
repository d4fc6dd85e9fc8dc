package charges_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/gatehouse-pay/gatehouse/internal/charges"
	"github.com/gatehouse-pay/gatehouse/internal/events"
	"github.com/gatehouse-pay/gatehouse/internal/ids"
	"github.com/gatehouse-pay/gatehouse/internal/providers"
	"github.com/gatehouse-pay/gatehouse/internal/providers/providertest"
	"github.com/gatehouse-pay/gatehouse/internal/providers/sandbox"
	"github.com/gatehouse-pay/gatehouse/internal/store"
	"github.com/gatehouse-pay/gatehouse/internal/testenv"
)

// captureSandbox is the sandbox on its Postgres books with an authorization
// of 2000 booked, and a charge of it whose capture of amount (nil: all) was
// requested at testNow; lose decides which capture calls book and then lose
// their answer.
func captureSandbox(t *testing.T, amount *int64, lose func(sandbox.Operation, int64) bool) (testenv.DB, *sandbox.Provider, charges.Charge) {
	t.Helper()
	db := testenv.NewDB(t)
	sbx := sandbox.New(store.New(db.Pool).SandboxLedger(), sandbox.Options{LoseAnswer: lose})
	res, err := sbx.Authorize(context.Background(), providers.AuthorizeRequest{IdempotencyKey: "auth-" + ids.NewUUID(), Amount: 2000,
		Currency: "USD", Card: providers.Card{Token: "tok_visa"}})
	if err != nil {
		t.Fatal(err)
	}
	capture := charges.ActionCapture
	c := charges.Charge{ID: ids.NewUUID(), MerchantID: "mer_a", Environment: "sandbox", Amount: 2000, Currency: "USD",
		Status: charges.StatusAuthorized, PendingAction: &capture, CaptureAmount: amount, PaymentMethod: "card",
		Card: charges.Card{Brand: "visa"}, Provider: "sandbox", ProviderReference: &res.Reference, CreatedAt: testNow, UpdatedAt: testNow}
	return db, sbx, c
}

func captureWorker(t *testing.T, st *fakeStore, p providers.Provider, at time.Time, log *slog.Logger) *charges.Processor {
	t.Helper()
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return charges.NewProcessor(st, providers.Registry{"sandbox": p}, testKeyring(t), time.Second, func() time.Time { return at }, log, nil)
}

func count(t *testing.T, db testenv.DB, query string, args ...any) int {
	t.Helper()
	var n int
	if err := db.Pool.QueryRow(context.Background(), query, args...).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// A capture whose answer is lost (the provider captured, then the answer
// timed out) leaves the charge authorized with the capture pending (nothing
// is written, not even on the final attempt), is sent again under the same
// key, and ends captured with charge.captured once an answer arrives.
func TestLostCaptureIsResentUnderTheSameKey(t *testing.T) {
	db, sbx, c := captureSandbox(t, ptr(int64(1500)), func(op sandbox.Operation, calls int64) bool { return op == sandbox.OpCapture && calls <= 2 })
	st := &fakeStore{ChargeForWorkFn: func(context.Context, string) (charges.Charge, []byte, error) { return c, nil, nil }}
	p := captureWorker(t, st, sbx, testNow.Add(time.Minute), nil)
	ctx := context.Background()
	if err := p.Capture(ctx, c.ID, false); !errors.Is(err, charges.ErrRetry) {
		t.Fatalf("attempt 1: err = %v, want ErrRetry", err)
	}
	if err := p.Capture(ctx, c.ID, true); err == nil || errors.Is(err, charges.ErrRetry) {
		t.Fatalf("final attempt: err = %v, want a plain error (the row stays for the sweeper)", err)
	}
	if len(st.transitions) != 0 {
		t.Fatalf("transitions %+v while the outcome is unknown", st.transitions)
	}
	if err := p.Capture(ctx, c.ID, false); err != nil {
		t.Fatal(err)
	}
	key := "gh_" + c.ID + "_capture"
	if n := count(t, db, `SELECT calls FROM sandbox_ledger WHERE idempotency_key = $1 AND reference IS NOT NULL`, key); n != 3 {
		t.Errorf("calls with the key: %d, want 3, all under it", n)
	}
	if n := count(t, db, `SELECT count(*) FROM sandbox_ledger WHERE operation = 'capture'`); n != 1 {
		t.Errorf("capture keys at the provider: %d, want 1", n)
	}
	tr := st.transitions[0]
	if len(st.transitions) != 1 || tr.After.Status != charges.StatusCaptured || tr.After.AmountCaptured != 1500 || tr.After.PendingAction != nil ||
		tr.Event == nil || tr.Event.Type != events.ChargeCaptured {
		t.Errorf("transitions %+v", st.transitions)
	}
}

// After the idempotency window the capture is never sent again: the payment
// is looked up. Captured at the provider: the charge is captured with the
// provider's amount. Still authorized: the capture never happened, the
// request is cleared and the charge stays authorized.
func TestCapturePastTheWindowIsLookedUp(t *testing.T) {
	ctx := context.Background()
	for _, booked := range []bool{true, false} {
		t.Run(fmt.Sprintf("booked=%v", booked), func(t *testing.T) {
			db, sbx, c := captureSandbox(t, ptr(int64(1200)), func(op sandbox.Operation, _ int64) bool { return op == sandbox.OpCapture })
			key := "gh_" + c.ID + "_capture"
			if booked {
				if _, err := sbx.Capture(ctx, providers.CaptureRequest{IdempotencyKey: key, Reference: *c.ProviderReference, Amount: 1200}); err == nil {
					t.Fatal("the sandbox did not lose the answer")
				}
			}
			st := &fakeStore{ChargeForWorkFn: func(context.Context, string) (charges.Charge, []byte, error) { return c, nil, nil }}
			prov := providers.WithBreaker(sbx, providers.BreakerOptions{})
			if err := captureWorker(t, st, prov, testNow.Add(25*time.Hour), nil).Capture(ctx, c.ID, false); err != nil {
				t.Fatal(err)
			}
			wantCalls := 0
			if booked {
				wantCalls = 1
			}
			if n := count(t, db, `SELECT coalesce(sum(calls), 0) FROM sandbox_ledger WHERE idempotency_key = $1`, key); n != wantCalls {
				t.Errorf("calls with the key: %d, want %d (a lookup sends nothing)", n, wantCalls)
			}
			if len(st.transitions) != 1 {
				t.Fatalf("transitions %+v", st.transitions)
			}
			a := st.transitions[0].After
			switch {
			case booked && (a.Status != charges.StatusCaptured || a.AmountCaptured != 1200 || st.transitions[0].Event.Type != events.ChargeCaptured):
				t.Errorf("booked: after %+v", a)
			case !booked && (a.Status != charges.StatusAuthorized || a.PendingAction != nil || st.transitions[0].Event != nil || deref(a.FailureCode) != "provider_unavailable"):
				t.Errorf("not booked: after %+v", a)
			}
		})
	}
}

// A capture the provider answers as processing is followed with lookups
// until the payment is captured (or canceled: the charge is voided).
func TestProcessingCaptureIsFollowed(t *testing.T) {
	ctx := context.Background()
	for _, c := range []struct {
		final      providers.Payment
		wantStatus string
		wantEvent  string
	}{
		{providers.Payment{Reference: "ref_1", Status: providers.PaymentCaptured, Captured: 2000}, charges.StatusCaptured, events.ChargeCaptured},
		{providers.Payment{Reference: "ref_1", Status: providers.PaymentCanceled}, charges.StatusVoided, events.ChargeVoided},
	} {
		t.Run(c.wantStatus, func(t *testing.T) {
			capture := charges.ActionCapture
			ch := charges.Charge{ID: ids.NewUUID(), MerchantID: "mer_a", Environment: "sandbox", Amount: 2000, Currency: "USD",
				Status: charges.StatusAuthorized, PendingAction: &capture, Provider: "sandbox", ProviderReference: ptr("ref_1"),
				CreatedAt: testNow, UpdatedAt: testNow}
			prov := &providertest.FakeLookup{Fake: &providertest.Fake{CaptureFn: func(context.Context, providers.CaptureRequest) (providers.Result, error) {
				return providers.Result{Reference: "ref_1", Pending: true}, nil
			}}}
			prov.LookupPaymentFn = func(context.Context, string) (providers.Payment, error) {
				if len(prov.PaymentLookups()) < 3 {
					return providers.Payment{Reference: "ref_1", Status: providers.PaymentProcessing}, nil
				}
				return c.final, nil
			}
			st := &fakeStore{ChargeForWorkFn: func(context.Context, string) (charges.Charge, []byte, error) { return ch, nil, nil }}
			p := captureWorker(t, st, prov, testNow, nil)
			for i := range 2 {
				if err := p.Capture(ctx, ch.ID, i == 1); err == nil || len(st.transitions) != 0 {
					t.Fatalf("poll %d: err = %v, transitions %+v; want an error and nothing written", i+1, err, st.transitions)
				}
			}
			if err := p.Capture(ctx, ch.ID, false); err != nil {
				t.Fatal(err)
			}
			if len(st.transitions) != 1 || st.transitions[0].After.Status != c.wantStatus || st.transitions[0].Event == nil || st.transitions[0].Event.Type != c.wantEvent {
				t.Errorf("transitions %+v, want %s with %s", st.transitions, c.wantStatus, c.wantEvent)
			}
		})
	}
}

// A capture whose outcome is still unknown after the bound is surfaced: each
// attempt logs it at error level with the charge id, and nothing changes.
func TestUnknownCaptureAfterTheBoundIsSurfaced(t *testing.T) {
	ctx := context.Background()
	capture := charges.ActionCapture
	ch := charges.Charge{ID: ids.NewUUID(), MerchantID: "mer_a", Environment: "sandbox", Amount: 2000, Currency: "USD",
		Status: charges.StatusAuthorized, PendingAction: &capture, Provider: "sandbox", ProviderReference: ptr("ref_1"),
		CreatedAt: testNow, UpdatedAt: testNow}
	down := &providertest.Fake{CaptureFn: func(context.Context, providers.CaptureRequest) (providers.Result, error) {
		return providers.Result{}, fmt.Errorf("%w: %w", providers.ErrUnavailable, providers.ErrCircuitOpen)
	}}
	for _, c := range []struct {
		age     time.Duration
		surface bool
	}{{30 * time.Minute, false}, {2 * time.Hour, true}} {
		var buf bytes.Buffer
		log := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelError}))
		st := &fakeStore{ChargeForWorkFn: func(context.Context, string) (charges.Charge, []byte, error) { return ch, nil, nil }}
		p := captureWorker(t, st, down, testNow.Add(c.age), log).WithWindows(48*time.Hour, time.Hour)
		if err := p.Capture(ctx, ch.ID, true); err == nil || len(st.transitions) != 0 {
			t.Fatalf("age %v: err = %v, transitions %+v; want an error and the capture still pending", c.age, err, st.transitions)
		}
		got := strings.Contains(buf.String(), "charge_id="+ch.ID) && strings.Contains(buf.String(), "level=ERROR")
		if got != c.surface {
			t.Errorf("age %v: logged at error level = %v, want %v; log:\n%s", c.age, got, c.surface, buf.String())
		}
	}
}
