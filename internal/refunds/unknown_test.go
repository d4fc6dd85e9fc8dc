package refunds_test

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
	"github.com/gatehouse-pay/gatehouse/internal/refunds"
	"github.com/gatehouse-pay/gatehouse/internal/store"
	"github.com/gatehouse-pay/gatehouse/internal/testenv"
)

// ledgerCount runs a count on the sandbox's books.
func ledgerCount(t *testing.T, db testenv.DB, query string, args ...any) int {
	t.Helper()
	var n int
	if err := db.Pool.QueryRow(context.Background(), query, args...).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// bookedSandbox is the sandbox on its Postgres books with one authorization
// booked, whose charge the returned function makes; lose decides which
// refund calls book and then lose their answer.
func bookedSandbox(t *testing.T, lose func(sandbox.Operation, int64) bool) (testenv.DB, *sandbox.Provider, charges.Charge) {
	t.Helper()
	db := testenv.NewDB(t)
	sbx := sandbox.New(store.New(db.Pool).SandboxLedger(), sandbox.Options{LoseAnswer: lose})
	res, err := sbx.Authorize(context.Background(), providers.AuthorizeRequest{IdempotencyKey: "auth-" + ids.NewUUID(), Amount: 2000,
		Currency: "USD", Capture: true, Card: providers.Card{Token: "tok_visa"}})
	if err != nil {
		t.Fatal(err)
	}
	c := capturedCharge()
	c.ProviderReference = &res.Reference
	return db, sbx, c
}

// settleRecorder is a fakeStore whose SettleRefund also renders the events.
func settleRecorder(r refunds.Refund, c charges.Charge, evs *[]string) *fakeStore {
	return &fakeStore{
		RefundForWorkFn: func(context.Context, string) (refunds.Refund, charges.Charge, error) { return r, c, nil },
		SettleRefundFn: func(_ context.Context, after refunds.Refund, _ string, eventsFor func(refunds.Refund, charges.Charge) (refunds.Settlement, error)) (bool, error) {
			st, err := eventsFor(after, c)
			for _, e := range st.Events {
				*evs = append(*evs, e.Type)
			}
			return true, err
		},
	}
}

// A refund whose answer is lost (the provider booked it, then the answer
// timed out) is neither failed nor settled: it stays pending, is sent again
// under the same key, and succeeds with the provider's one booking once an
// answer arrives; the final attempt of a task does not change that.
func TestLostAnswerIsResentUnderTheSameKey(t *testing.T) {
	db, sbx, c := bookedSandbox(t, func(op sandbox.Operation, calls int64) bool { return op == sandbox.OpRefund && calls <= 2 })
	r := refunds.Refund{ID: ids.NewUUID(), MerchantID: "mer_a", ChargeID: chargeID, Amount: 500, Currency: "USD",
		Status: refunds.StatusPending, CreatedAt: testNow, UpdatedAt: testNow}
	var evs []string
	st := settleRecorder(r, c, &evs)
	p := refunds.NewProcessor(st, providers.Registry{"sandbox": sbx}, time.Second, func() time.Time { return testNow.Add(time.Minute) }, discard(), nil)
	ctx := context.Background()

	if err := p.Process(ctx, r.ID, false); !errors.Is(err, charges.ErrRetry) {
		t.Fatalf("attempt 1: err = %v, want ErrRetry", err)
	}
	err := p.Process(ctx, r.ID, true)
	if err == nil || errors.Is(err, charges.ErrRetry) {
		t.Fatalf("final attempt: err = %v, want a plain error (the row stays for the sweeper)", err)
	}
	if len(st.settled) != 0 {
		t.Fatalf("settled %+v while the outcome is unknown", st.settled)
	}
	if err := p.Process(ctx, r.ID, false); err != nil {
		t.Fatalf("attempt 3: %v", err)
	}
	key := "gh_" + r.ID + "_refund"
	if len(st.settled) != 1 || st.settled[0].Status != refunds.StatusSucceeded {
		t.Fatalf("settled %+v, want one succeeded", st.settled)
	}
	var ref string
	if err := db.Pool.QueryRow(ctx, `SELECT reference FROM sandbox_ledger WHERE idempotency_key = $1`, key).Scan(&ref); err != nil {
		t.Fatal(err)
	}
	if *st.settled[0].ProviderReference != ref {
		t.Errorf("provider reference %s, want the ledger's %s", *st.settled[0].ProviderReference, ref)
	}
	if n := ledgerCount(t, db, `SELECT count(*) FROM sandbox_ledger WHERE operation = 'refund' AND reference IS NOT NULL`); n != 1 {
		t.Errorf("refunds booked by the provider: %d, want 1", n)
	}
	if n := ledgerCount(t, db, `SELECT calls FROM sandbox_ledger WHERE idempotency_key = $1`, key); n != 3 {
		t.Errorf("calls with the key: %d, want 3", n)
	}
	if len(evs) != 1 || evs[0] != events.RefundSucceeded {
		t.Errorf("events %v, want only refund.succeeded once the outcome is known", evs)
	}
}

// After the idempotency window the refund is never sent again: it is looked
// up. A refund the provider booked succeeds, one it never booked fails, and
// neither lookup adds a call with the key.
func TestPastTheWindowIsLookedUp(t *testing.T) {
	ctx := context.Background()
	for _, booked := range []bool{true, false} {
		t.Run(fmt.Sprintf("booked=%v", booked), func(t *testing.T) {
			db, sbx, c := bookedSandbox(t, func(op sandbox.Operation, calls int64) bool { return op == sandbox.OpRefund })
			r := refunds.Refund{ID: ids.NewUUID(), MerchantID: "mer_a", ChargeID: chargeID, Amount: 500, Currency: "USD",
				Status: refunds.StatusPending, CreatedAt: testNow, UpdatedAt: testNow}
			key := "gh_" + r.ID + "_refund"
			if booked {
				// An earlier attempt booked it and lost the answer.
				if _, err := sbx.Refund(ctx, providers.RefundRequest{IdempotencyKey: key, Reference: *c.ProviderReference, Amount: 500, Currency: "USD", RefundID: r.ID}); err == nil {
					t.Fatal("the sandbox did not lose the answer")
				}
			}
			var evs []string
			st := settleRecorder(r, c, &evs)
			p := refunds.NewProcessor(st, providers.Registry{"sandbox": providers.WithBreaker(sbx, providers.BreakerOptions{})},
				time.Second, func() time.Time { return testNow.Add(25 * time.Hour) }, discard(), nil)
			if err := p.Process(ctx, r.ID, false); err != nil {
				t.Fatal(err)
			}
			want, wantCalls := refunds.StatusSucceeded, 1
			if !booked {
				want, wantCalls = refunds.StatusFailed, 0
			}
			if len(st.settled) != 1 || st.settled[0].Status != want {
				t.Fatalf("settled %+v, want %s", st.settled, want)
			}
			if n := ledgerCount(t, db, `SELECT coalesce(sum(calls), 0) FROM sandbox_ledger WHERE idempotency_key = $1`, key); n != wantCalls {
				t.Errorf("calls with the key: %d, want %d (a lookup sends nothing)", n, wantCalls)
			}
			if booked && (len(evs) != 1 || evs[0] != events.RefundSucceeded) {
				t.Errorf("events %v, want refund.succeeded", evs)
			}
			if !booked && len(evs) != 0 {
				t.Errorf("events %v for a refund that never moved money", evs)
			}
		})
	}
}

// A refund the provider answers as pending is followed, by its provider id,
// until it is final: pending keeps it pending (retry), succeeded settles it,
// failed fails it.
func TestPendingRefundIsFollowed(t *testing.T) {
	ctx := context.Background()
	r := refunds.Refund{ID: ids.NewUUID(), MerchantID: "mer_a", ChargeID: chargeID, Amount: 500, Currency: "USD",
		Status: refunds.StatusPending, CreatedAt: testNow, UpdatedAt: testNow}
	for _, c := range []struct {
		name  string
		final func() (providers.Result, error)
		want  string
	}{
		{"succeeds", func() (providers.Result, error) { return providers.Result{Reference: "re_p"}, nil }, refunds.StatusSucceeded},
		{"fails", func() (providers.Result, error) { return providers.Result{}, &providers.Decline{Code: "refund_failed"} }, refunds.StatusFailed},
	} {
		t.Run(c.name, func(t *testing.T) {
			polls := 0
			prov := &providertest.FakeLookup{Fake: &providertest.Fake{RefundFn: func(context.Context, providers.RefundRequest) (providers.Result, error) {
				return providers.Result{Reference: "re_p", Pending: true}, nil
			}}, LookupRefundFn: func(context.Context, providers.RefundLookup) (providers.Result, error) {
				polls++
				if polls < 3 {
					return providers.Result{Reference: "re_p", Pending: true}, nil
				}
				return c.final()
			}}
			var evs []string
			st := settleRecorder(r, capturedCharge(), &evs)
			p := refunds.NewProcessor(st, providers.Registry{"sandbox": prov}, time.Second, func() time.Time { return testNow }, discard(), nil)
			for i := range 2 {
				if err := p.Process(ctx, r.ID, i == 1); err == nil || len(st.settled) != 0 {
					t.Fatalf("poll %d: err = %v, settled %+v; want an error and nothing settled", i+1, err, st.settled)
				}
			}
			if err := p.Process(ctx, r.ID, false); err != nil {
				t.Fatal(err)
			}
			if len(st.settled) != 1 || st.settled[0].Status != c.want {
				t.Fatalf("settled %+v, want %s", st.settled, c.want)
			}
			for _, l := range prov.RefundLookups() {
				if l.ProviderRefund != "re_p" || l.RefundID != r.ID {
					t.Errorf("lookup %+v, want the provider's refund re_p of %s", l, r.ID)
				}
			}
			for _, q := range prov.Refunds() {
				if q.IdempotencyKey != "gh_"+r.ID+"_refund" {
					t.Errorf("sent with key %s", q.IdempotencyKey)
				}
			}
		})
	}
}

// A refund whose outcome is still unknown after the bound is surfaced: each
// attempt logs it at error level with its id, and it stays pending.
func TestStillUnknownAfterTheBoundIsSurfaced(t *testing.T) {
	ctx := context.Background()
	r := refunds.Refund{ID: ids.NewUUID(), MerchantID: "mer_a", ChargeID: chargeID, Amount: 500, Currency: "USD",
		Status: refunds.StatusPending, CreatedAt: testNow, UpdatedAt: testNow}
	down := &providertest.Fake{RefundFn: func(context.Context, providers.RefundRequest) (providers.Result, error) {
		return providers.Result{}, fmt.Errorf("%w: read: connection reset by peer", providers.ErrUnavailable)
	}}
	for _, c := range []struct {
		age     time.Duration
		surface bool
	}{{30 * time.Minute, false}, {2 * time.Hour, true}} {
		var buf bytes.Buffer
		log := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelError}))
		st := &fakeStore{RefundForWorkFn: func(context.Context, string) (refunds.Refund, charges.Charge, error) { return r, capturedCharge(), nil }}
		p := refunds.NewProcessor(st, providers.Registry{"sandbox": down}, time.Second, func() time.Time { return testNow.Add(c.age) }, log, nil).
			WithWindows(48*time.Hour, time.Hour)
		if err := p.Process(ctx, r.ID, true); err == nil || len(st.settled) != 0 {
			t.Fatalf("age %v: err = %v, settled %+v; want an error and the refund still pending", c.age, err, st.settled)
		}
		got := strings.Contains(buf.String(), "refund_id="+r.ID) && strings.Contains(buf.String(), "level=ERROR")
		if got != c.surface {
			t.Errorf("age %v: logged at error level = %v, want %v; log:\n%s", c.age, got, c.surface, buf.String())
		}
	}
}

func discard() *slog.Logger { return slog.New(slog.DiscardHandler) }
