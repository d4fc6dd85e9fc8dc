package sandbox_test

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/gatehouse-pay/gatehouse/internal/providers"
	"github.com/gatehouse-pay/gatehouse/internal/providers/sandbox"
	"github.com/gatehouse-pay/gatehouse/internal/store"
	"github.com/gatehouse-pay/gatehouse/internal/testenv"
)

// onPostgres is the sandbox on the store's ledger of a fresh migrated
// database, and a count of a query on that database.
func onPostgres(t *testing.T) (*sandbox.Provider, func(t *testing.T, query string, args ...any) int) {
	t.Helper()
	db := testenv.NewDB(t)
	return newSandbox(store.New(db.Pool).SandboxLedger(), sandbox.Options{}), func(t *testing.T, query string, args ...any) int {
		t.Helper()
		var n int
		if err := db.Pool.QueryRow(context.Background(), query, args...).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
}

// The sandbox on its real books: the store's ledger on a migrated database.
// Calls and provider-side charges are counted with SQL, as the reliability
// checks count them.
func TestOnPostgresLedger(t *testing.T) {
	p, count := onPostgres(t)
	ctx := context.Background()
	calls := func(t *testing.T, key string) int {
		t.Helper()
		return count(t, `SELECT calls FROM sandbox_ledger WHERE idempotency_key = $1`, key)
	}
	charges := func(t *testing.T) int {
		t.Helper()
		return count(t, `SELECT count(*) FROM sandbox_ledger WHERE operation = 'authorize' AND reference IS NOT NULL`)
	}

	t.Run("concurrent calls with one key charge once", func(t *testing.T) {
		const n = 20
		refs := make([]string, n)
		errs := make([]error, n)
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() {
				res, err := p.Authorize(ctx, authorize(card("4242424242424242"), "pg-concurrent"))
				refs[i], errs[i] = res.Reference, err
			})
		}
		wg.Wait()
		for i := range n {
			if errs[i] != nil || refs[i] != refs[0] {
				t.Fatalf("call %d: %q %v, want %q", i, refs[i], errs[i], refs[0])
			}
		}
		if got := calls(t, "pg-concurrent"); got != n {
			t.Errorf("calls = %d, want %d", got, n)
		}
		if got := charges(t); got != 1 {
			t.Errorf("provider-side charges = %d, want 1", got)
		}
	})

	t.Run("the flaky card fails twice, then succeeds", func(t *testing.T) {
		var got []string
		for range 3 {
			res, err := p.Authorize(ctx, authorize(card("4000000000000507"), "pg-flaky"))
			got = append(got, classify(t, res, err))
		}
		if got[0] != "unavailable" || got[1] != "unavailable" || got[2] != "ok" {
			t.Errorf("attempts = %v, want unavailable, unavailable, ok", got)
		}
		if n := calls(t, "pg-flaky"); n != 3 {
			t.Errorf("calls = %d, want 3", n)
		}
	})

	t.Run("a decline books nothing", func(t *testing.T) {
		before := charges(t)
		_, err := p.Authorize(ctx, authorize(card("4000000000000002"), "pg-declined"))
		if d, ok := providers.AsDecline(err); !ok || d.Code != "card_declined" {
			t.Fatalf("err = %v, want card_declined", err)
		}
		if got := charges(t); got != before {
			t.Errorf("provider-side charges = %d, want %d", got, before)
		}
	})

	t.Run("a key reused for another request books nothing", func(t *testing.T) {
		before := charges(t)
		r := authorize(card("4242424242424242"), "pg-reused")
		r.Amount = 0
		if _, err := p.Authorize(ctx, r); !isInvalid(err) {
			t.Fatalf("amount 0: err = %v, want invalid_request", err)
		}
		r.Amount = 2000 // the same key, now a request that would succeed at once
		if _, err := p.Authorize(ctx, r); !isInvalid(err) {
			t.Fatalf("the key again with another amount: err = %v, want invalid_request", err)
		}
		if got := charges(t); got != before {
			t.Errorf("provider-side charges = %d, want %d", got, before)
		}
		if n := calls(t, "pg-reused"); n != 2 {
			t.Errorf("calls = %d, want 2", n)
		}
	})

	t.Run("capture, refund and an unknown reference", func(t *testing.T) {
		r := authorize(card("5555555555554444"), "pg-auth")
		r.Capture = false
		auth, err := p.Authorize(ctx, r)
		if err != nil {
			t.Fatal(err)
		}
		for range 2 {
			res, err := p.Capture(ctx, providers.CaptureRequest{IdempotencyKey: "pg-capture", Reference: auth.Reference, Amount: 2000})
			if err != nil || res.Reference != auth.Reference {
				t.Fatalf("Capture = %v %v, want %s", res, err, auth.Reference)
			}
		}
		ref1, err := p.Refund(ctx, providers.RefundRequest{IdempotencyKey: "pg-refund", Reference: auth.Reference, Amount: 500, Currency: "USD"})
		if err != nil {
			t.Fatal(err)
		}
		ref2, err := p.Refund(ctx, providers.RefundRequest{IdempotencyKey: "pg-refund", Reference: auth.Reference, Amount: 500, Currency: "USD"})
		if err != nil || ref2 != ref1 {
			t.Fatalf("repeated refund = %v %v, want %v", ref2, err, ref1)
		}
		if n := count(t, `SELECT count(*) FROM sandbox_ledger WHERE operation = 'refund' AND reference IS NOT NULL`); n != 1 {
			t.Errorf("refunds booked = %d, want 1", n)
		}
		_, err = p.Void(ctx, providers.VoidRequest{IdempotencyKey: "pg-void", Reference: "sbx_ch_unknown"})
		if d, ok := providers.AsDecline(err); !ok || d.Code != "invalid_request" {
			t.Errorf("void of an unknown reference: err = %v, want invalid_request", err)
		}
	})

	t.Run("a database that is gone is an outage", func(t *testing.T) {
		cctx, cancel := context.WithCancel(ctx)
		cancel()
		_, err := p.Authorize(cctx, authorize(card("4242424242424242"), "pg-cancelled"))
		if !errors.Is(err, providers.ErrUnavailable) {
			t.Errorf("err = %v, want ErrUnavailable", err)
		}
	})
}

// isInvalid reports whether err is the sandbox's invalid_request decline.
func isInvalid(err error) bool {
	d, ok := providers.AsDecline(err)
	return ok && d.Code == "invalid_request"
}
