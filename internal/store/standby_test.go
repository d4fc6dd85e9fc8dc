package store_test

import (
	"context"
	"io"
	"log/slog"
	"math"
	"net/url"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/gatehouse-pay/gatehouse/internal/apikeys"
	"github.com/gatehouse-pay/gatehouse/internal/listing"
	"github.com/gatehouse-pay/gatehouse/internal/store"
	"github.com/gatehouse-pay/gatehouse/internal/testenv"
)

// standbyMetrics reads a standby's metrics: fallbacks by reason, lag, reads.
func standbyMetrics(sb *store.Standby) (fallbacks *prometheus.CounterVec, lag, reads prometheus.Collector) {
	cs := sb.Collectors()
	return cs[0].(*prometheus.CounterVec), cs[1], cs[2]
}

// TestStandbyReadsAndFallbacks: a list that may lag goes to a fresh
// standby, one that may not stays on the primary; a standby that does not
// answer, or fails the read, leaves every list answered by the primary,
// each fallback counted by reason.
func TestStandbyReadsAndFallbacks(t *testing.T) {
	db := testenv.NewDB(t)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	ctx := context.Background()
	m := newMerchant(t, store.New(db.Pool), "standby@example.com")
	lazy := func(raw string) *store.Standby {
		t.Helper()
		pool, err := store.OpenLazy(ctx, raw, store.ConnectTimeout(500*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(pool.Close)
		return store.NewStandby(pool, db.Pool, time.Second, log)
	}
	// The check bounds each of its queries to a second, which a busy test
	// machine may miss; a server that answers is checked again until it
	// is found fresh.
	checkFresh := func(sb *store.Standby) {
		t.Helper()
		for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
			sb.Check(ctx)
			if sb.Fresh() {
				return
			}
			if time.Now().After(deadline) {
				t.Fatal("the standby's check never found it fresh in 30 s")
			}
		}
	}
	list := func(s *store.Store, mayLag bool) {
		t.Helper()
		if _, err := s.ListKeys(ctx, m.ID, apikeys.Filter{}, listing.Params{Limit: 10, MayLag: mayLag}); err != nil {
			t.Fatalf("list (may lag %v): %v", mayLag, err)
		}
	}

	// The database itself as the standby: not in recovery, so current.
	fresh := lazy(db.URL)
	s := store.New(db.Pool).WithStandby(fresh)
	fallbacks, _, reads := standbyMetrics(fresh)
	list(s, true) // before the first check: the primary
	if n := testutil.ToFloat64(fallbacks.WithLabelValues("unchecked")); n != 1 {
		t.Errorf("unchecked fallbacks = %v, want 1", n)
	}
	checkFresh(fresh)
	list(s, true)
	list(s, false)
	if n := testutil.ToFloat64(reads); n != 1 {
		t.Errorf("standby reads = %v, want 1 (the list that may lag, not the other)", n)
	}

	// Nothing listens there.
	dead := lazy("postgres://postgres@127.0.0.1:1/gatehouse?sslmode=disable")
	s = store.New(db.Pool).WithStandby(dead)
	dead.Check(ctx)
	list(s, true)
	fallbacks, lag, _ := standbyMetrics(dead)
	if n := testutil.ToFloat64(fallbacks.WithLabelValues("unreachable")); n != 1 {
		t.Errorf("unreachable fallbacks = %v, want 1", n)
	}
	if v := testutil.ToFloat64(lag); !math.IsInf(v, 1) {
		t.Errorf("lag of an unreachable standby = %v, want +Inf", v)
	}

	// A server that answers the check but fails the read (no such table):
	// the primary reads again.
	u, err := url.Parse(db.URL)
	if err != nil {
		t.Fatal(err)
	}
	u.Path = "/postgres"
	failing := lazy(u.String())
	s = store.New(db.Pool).WithStandby(failing)
	checkFresh(failing)
	list(s, true)
	fallbacks, _, _ = standbyMetrics(failing)
	if n := testutil.ToFloat64(fallbacks.WithLabelValues("error")); n != 1 {
		t.Errorf("error fallbacks = %v, want 1", n)
	}
}
