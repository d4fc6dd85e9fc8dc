package store_test

import (
	"context"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/gatehouse-pay/gatehouse/internal/apperr"
	"github.com/gatehouse-pay/gatehouse/internal/store"
	"github.com/gatehouse-pay/gatehouse/internal/testenv"
)

// TestStatementDeadlineProperty: on a pool opened with Deadlines, any
// statement (Exec, a query's rows, a batch) that would run well past the
// deadline is cut by it, with an error the store reports as Unavailable
// (503), and one well within it (a tenth of it at most, room for a loaded
// machine) succeeds, whatever the mix, and the pool serves the next one.
// How soon a cut statement returns is logged. Randomized; the seed is
// logged.
func TestStatementDeadlineProperty(t *testing.T) {
	const deadline = time.Second
	db := testenv.NewDB(t)
	ctx := context.Background()
	pool, err := store.Open(ctx, db.URL, store.Deadlines(deadline, 2*time.Second), store.MaxConns(2))
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	r := rand.New(rand.NewPCG(seed, seed))
	kinds := map[int]func(sleep time.Duration) error{
		0: func(sleep time.Duration) error {
			_, err := pool.Exec(ctx, "SELECT pg_sleep($1)", sleep.Seconds())
			return err
		},
		1: func(sleep time.Duration) error {
			var n int
			return pool.QueryRow(ctx, "SELECT count(*) FROM (SELECT pg_sleep($1)) s", sleep.Seconds()).Scan(&n)
		},
		2: func(sleep time.Duration) error {
			b := &pgx.Batch{}
			b.Queue("SELECT 1")
			b.Queue("SELECT pg_sleep($1)", sleep.Seconds())
			return pool.SendBatch(ctx, b).Close()
		},
	}
	for i := range 12 {
		long := r.IntN(2) == 0
		sleep := time.Duration(r.Int64N(int64(100 * time.Millisecond))) // well within
		if long {
			sleep = 2*deadline + time.Duration(r.Int64N(int64(time.Second)))
		}
		kind := r.IntN(len(kinds))
		start := time.Now()
		err := kinds[kind](sleep)
		took := time.Since(start)
		switch {
		case !long && err != nil:
			t.Errorf("%d: kind %d, sleep %s: %v", i, kind, sleep, err)
		case long && (err == nil || apperr.KindOf(store.MapErr(err, "x")) != apperr.KindUnavailable):
			t.Errorf("%d: kind %d, sleep %s past the %s deadline: err %v (kind %v), want Unavailable", i, kind, sleep, deadline, err, apperr.KindOf(store.MapErr(err, "x")))
		case long:
			t.Logf("%d: kind %d, sleep %s: cut after %s", i, kind, sleep, took.Round(time.Millisecond))
		}
	}
	if _, err := pool.Exec(ctx, "SELECT 1"); err != nil {
		t.Errorf("the pool after the deadlines: %v", err)
	}
}
