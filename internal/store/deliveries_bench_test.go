package store_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/gatehouse-pay/gatehouse/internal/store"
	"github.com/gatehouse-pay/gatehouse/internal/testenv"
	"github.com/gatehouse-pay/gatehouse/internal/webhooks"
)

// BenchmarkDeliveryStatements measures what the worker's two statements per
// delivery (read it, record its attempt) cost Postgres, by batch size and
// plan mode: the CPU of the one server process that runs them, read from
// /proc, per delivery ("pg-µs/delivery"), and the wall time per delivery.
// The pending deliveries and their events are written before the clock starts.
func BenchmarkDeliveryStatements(b *testing.B) {
	for _, generic := range []bool{false, true} {
		for _, size := range []int{1, 4, 16, 64} {
			plans := "custom"
			if generic {
				plans = "generic"
			}
			b.Run(fmt.Sprintf("plans=%s/batch=%d", plans, size), func(b *testing.B) {
				benchDeliveries(b, generic, size)
			})
		}
	}
}

func benchDeliveries(b *testing.B, generic bool, size int) {
	db := testenv.NewDB(b)
	ctx := context.Background()
	opts := []store.OpenOption{store.MaxConns(1)}
	if generic {
		opts = append(opts, store.GenericPlans())
	}
	pool, err := store.Open(ctx, db.URL, opts...)
	if err != nil {
		b.Fatal(err)
	}
	defer pool.Close()
	s := store.New(pool)
	f := newOutboxFixture(b, db.Pool)
	n := b.N * size
	var ids []string
	if err := db.Pool.QueryRow(ctx, `
		WITH ev AS (
			INSERT INTO events (id, merchant_id, environment, type, body, created_at)
			SELECT gen_random_uuid(), $1, 'sandbox', 'charge.captured', json_build_object('n', i, 'pad', repeat('x', 900)), now()
			FROM generate_series(1, $3) i RETURNING id
		), d AS (
			INSERT INTO webhook_deliveries (id, endpoint_id, merchant_id, event_id, event_type, status, next_attempt_at, created_at, updated_at)
			SELECT gh_uuid_v7(), $2, $1, ev.id, 'charge.captured', 'pending', now(), now(), now() FROM ev RETURNING id
		), o AS (
			INSERT INTO outbox (task_id, task_type, ref_id) SELECT 'webhook:deliver:' || d.id, 'webhook:deliver', d.id FROM d
		)
		SELECT array_agg(id::text ORDER BY id) FROM d`, f.merchantID, f.endpointID, n).Scan(&ids); err != nil {
		b.Fatal(err)
	}
	if _, err := db.Pool.Exec(ctx, `VACUUM ANALYZE webhook_deliveries, events, outbox`); err != nil {
		b.Fatal(err)
	}
	backend := backendCPU(b, pool)
	code := 200
	started := time.Now().UTC()
	before := backend()
	b.ResetTimer()
	for i := range b.N {
		batch := ids[i*size : (i+1)*size]
		if err := s.ReadBatch(ctx, batch); err != nil {
			b.Fatal(err)
		}
		rs := make([]webhooks.AttemptRecord, len(batch))
		for k, id := range batch {
			rs[k] = webhooks.AttemptRecord{DeliveryID: id, Status: webhooks.StatusSucceeded, ChainAttempts: 1,
				DoneTask: webhooks.Task(id).ID(), Attempt: webhooks.Attempt{Attempt: 1, StartedAt: started, DurationMS: 3, StatusCode: &code}}
		}
		applied, err := s.RecordBatch(ctx, rs)
		if err != nil {
			b.Fatal(err)
		}
		for k, ok := range applied {
			if !ok {
				b.Fatalf("record of %s not applied", batch[k])
			}
		}
	}
	b.StopTimer()
	cpu := backend() - before
	b.ReportMetric(float64(cpu.Microseconds())/float64(n), "pg-µs/delivery")
	b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(n), "wall-µs/delivery")
}

// backendCPU returns a reader of the CPU time of the pool's one server
// process, or skips the benchmark where /proc cannot show it.
// onePool is a pool of one connection to url, closed with the benchmark,
// so that one server process runs its statements (see backendCPU).
func onePool(b *testing.B, url string, opts ...store.OpenOption) *pgxpool.Pool {
	b.Helper()
	pool, err := store.Open(context.Background(), url, append([]store.OpenOption{store.MaxConns(1)}, opts...)...)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(pool.Close)
	return pool
}

func backendCPU(b *testing.B, pool *pgxpool.Pool) func() time.Duration {
	var pid int
	if err := pool.QueryRow(context.Background(), `SELECT pg_backend_pid()`).Scan(&pid); err != nil {
		b.Fatal(err)
	}
	read := func() (time.Duration, error) {
		raw, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
		if err != nil {
			return 0, err
		}
		f := strings.Fields(string(raw[strings.LastIndexByte(string(raw), ')')+2:]))
		if len(f) < 13 {
			return 0, fmt.Errorf("short stat line")
		}
		ut, _ := strconv.ParseInt(f[11], 10, 64)
		st, _ := strconv.ParseInt(f[12], 10, 64)
		return time.Duration(ut+st) * 10 * time.Millisecond, nil // USER_HZ is 100 on Linux
	}
	if _, err := read(); err != nil {
		b.Skipf("the server process's CPU is not readable here: %v", err)
	}
	return func() time.Duration {
		d, err := read()
		if err != nil {
			b.Fatal(err)
		}
		return d
	}
}
