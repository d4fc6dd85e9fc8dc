package store_test

import (
	"context"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/gatehouse-pay/gatehouse/internal/outbox"
	"github.com/gatehouse-pay/gatehouse/internal/store"
	"github.com/gatehouse-pay/gatehouse/internal/testenv"
)

// collectValues collects c once and returns each series' value keyed by
// name and, when it has one, its type label: "name{type}".
func collectValues(t *testing.T, c prometheus.Collector) map[string]float64 {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	if err := reg.Register(c); err != nil {
		t.Fatalf("register: %v", err)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatalf("gather: %v", err)
	}
	got := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			key := mf.GetName()
			for _, l := range m.GetLabel() {
				key += "{" + l.GetValue() + "}"
			}
			v := m.GetGauge().GetValue()
			if m.Counter != nil {
				v = m.GetCounter().GetValue()
			}
			got[key] = v
		}
	}
	return got
}

func TestPoolCollector(t *testing.T) {
	db := testenv.NewDB(t)
	ctx := context.Background()
	c := store.PoolCollector(db.Pool)

	if n := testutil.CollectAndCount(c); n != 8 {
		t.Errorf("series: %d, want 8", n)
	}
	problems, err := testutil.CollectAndLint(c)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("lint: %s: %s", p.Metric, p.Text)
	}

	before := collectValues(t, c)
	for _, name := range []string{"acquired_connections", "idle_connections", "total_connections", "max_connections",
		"acquires_total", "empty_acquires_total", "canceled_acquires_total", "acquire_wait_seconds_total"} {
		if _, ok := before["gatehouse_db_pool_"+name]; !ok {
			t.Errorf("gatehouse_db_pool_%s is missing", name)
		}
	}
	if got, want := before["gatehouse_db_pool_max_connections"], float64(db.Pool.Config().MaxConns); got != want {
		t.Errorf("max_connections %v, want the pool's %v", got, want)
	}

	conn, err := db.Pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	held := collectValues(t, c)
	conn.Release()
	for i := 0; i < 3; i++ {
		if _, err := db.Pool.Exec(ctx, "SELECT 1"); err != nil {
			t.Fatal(err)
		}
	}
	after := collectValues(t, c)

	if got := held["gatehouse_db_pool_acquired_connections"]; got != 1 {
		t.Errorf("acquired_connections while one is held: %v, want 1", got)
	}
	if got := after["gatehouse_db_pool_acquired_connections"]; got != 0 {
		t.Errorf("acquired_connections after release: %v, want 0", got)
	}
	if got, want := after["gatehouse_db_pool_acquires_total"], before["gatehouse_db_pool_acquires_total"]+4; got != want {
		t.Errorf("acquires_total after 1 Acquire and 3 queries: %v, want %v (was %v)", got, want, before["gatehouse_db_pool_acquires_total"])
	}
	if got := after["gatehouse_db_pool_total_connections"]; got < 1 || got > after["gatehouse_db_pool_max_connections"] {
		t.Errorf("total_connections %v, want between 1 and max", got)
	}
}

// outboxFixture is a merchant and a webhook endpoint to hang deliveries on.
type outboxFixture struct {
	pool       *pgxpool.Pool
	merchantID string
	endpointID string
}

func newOutboxFixture(t testing.TB, pool *pgxpool.Pool) outboxFixture {
	t.Helper()
	f := outboxFixture{pool: pool, merchantID: "mer_stats", endpointID: "we_stats"}
	f.exec(t, `INSERT INTO merchants (id, email, name, password_hash) VALUES ($1, 'stats@example.com', 'n', 'h')`, f.merchantID)
	f.exec(t, `INSERT INTO webhook_endpoints (id, merchant_id, environment, url, events, secret_sealed, created_at, updated_at)
		VALUES ($1, $2, 'sandbox', 'https://hooks.example.com/in', '{charge.captured}', '\x00', now(), now())`, f.endpointID, f.merchantID)
	return f
}

func (f outboxFixture) exec(t testing.TB, sql string, args ...any) {
	t.Helper()
	if _, err := f.pool.Exec(context.Background(), sql, args...); err != nil {
		t.Fatalf("%s: %v", strings.Join(strings.Fields(sql), " "), err)
	}
}

// task writes an outbox row of typ created age ago, and returns its ref id.
func (f outboxFixture) task(t *testing.T, typ string, age time.Duration) string {
	t.Helper()
	ref := uuid.NewString()
	f.exec(t, `INSERT INTO outbox (task_id, task_type, ref_id, created_at) VALUES ($1, $2, $3, now() - $4::interval)`,
		typ+":"+ref, typ, ref, age.String())
	return ref
}

// delivery writes a pending delivery created age ago whose next attempt is
// due at now()+next, and its outbox row (written with the delivery).
func (f outboxFixture) delivery(t *testing.T, age, next time.Duration) {
	t.Helper()
	id := f.task(t, outbox.WebhookDeliver, age)
	f.exec(t, `INSERT INTO webhook_deliveries (id, endpoint_id, merchant_id, event_id, event_type, status, attempts, chain_attempts,
			next_attempt_at, created_at, updated_at)
		VALUES ($1, $2, $3, $4, 'charge.captured', 'pending', 1, 1, now() + $5::interval, now() - $6::interval, now())`,
		id, f.endpointID, f.merchantID, uuid.NewString(), next.String(), age.String())
}

// outboxSeries splits collected outbox values into backlog and age by type.
func outboxSeries(t *testing.T, c prometheus.Collector) (backlog, age map[string]float64) {
	t.Helper()
	backlog, age = map[string]float64{}, map[string]float64{}
	for k, v := range collectValues(t, c) {
		name, typ, _ := strings.Cut(strings.TrimSuffix(k, "}"), "{")
		switch name {
		case "gatehouse_outbox_backlog":
			backlog[typ] = v
		case "gatehouse_outbox_oldest_age_seconds":
			age[typ] = v
		default:
			t.Errorf("unexpected series %s", k)
		}
	}
	return backlog, age
}

// perType is want for every task type, with the given exceptions.
func perType(base float64, except map[string]float64) map[string]float64 {
	m := map[string]float64{}
	for _, typ := range outbox.Types {
		m[typ] = base
	}
	for k, v := range except {
		m[k] = v
	}
	return m
}

// near compares ages within 5 s: the rows' times and the query's now()
// are a few milliseconds apart.
var near = cmp.Comparer(func(a, b float64) bool { return math.Abs(a-b) <= 5 })

func TestOutboxCollector(t *testing.T) {
	db := testenv.NewDB(t)
	f := newOutboxFixture(t, db.Pool)

	t.Run("empty outbox", func(t *testing.T) {
		c := store.OutboxCollector(db.Pool, 0)
		backlog, age := outboxSeries(t, c)
		if diff := cmp.Diff(perType(0, nil), backlog); diff != "" {
			t.Errorf("backlog (-want +got):\n%s", diff)
		}
		if diff := cmp.Diff(perType(0, nil), age); diff != "" {
			t.Errorf("age (-want +got):\n%s", diff)
		}
		problems, err := testutil.CollectAndLint(c)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range problems {
			t.Errorf("lint: %s: %s", p.Metric, p.Text)
		}
	})

	t.Run("rows by type; a delivery waiting for its retry is not due", func(t *testing.T) {
		f.task(t, outbox.ChargeAuthorize, 10*time.Minute)
		f.task(t, outbox.ChargeAuthorize, 0)
		f.task(t, outbox.RefundProcess, time.Minute)
		// A delivery written 20 minutes ago whose next attempt is in an hour.
		f.delivery(t, 20*time.Minute, time.Hour)

		backlog, age := outboxSeries(t, store.OutboxCollector(db.Pool, 0))
		wantBacklog := perType(0, map[string]float64{outbox.ChargeAuthorize: 2, outbox.RefundProcess: 1, outbox.WebhookDeliver: 1})
		if diff := cmp.Diff(wantBacklog, backlog); diff != "" {
			t.Errorf("backlog (-want +got):\n%s", diff)
		}
		wantAge := perType(0, map[string]float64{outbox.ChargeAuthorize: 600, outbox.RefundProcess: 60, outbox.WebhookDeliver: 0})
		if diff := cmp.Diff(wantAge, age, near); diff != "" {
			t.Errorf("age in seconds, within 5 s (-want +got):\n%s", diff)
		}
		if age[outbox.WebhookDeliver] != 0 {
			t.Errorf("age of webhook:deliver with only a future retry: %v, want exactly 0", age[outbox.WebhookDeliver])
		}
	})

	t.Run("a due delivery is as old as its next_attempt_at", func(t *testing.T) {
		// Written 20 minutes ago, its retry due 30 s ago: it has waited 30 s.
		f.delivery(t, 20*time.Minute, -30*time.Second)
		backlog, age := outboxSeries(t, store.OutboxCollector(db.Pool, 0))
		if got := backlog[outbox.WebhookDeliver]; got != 2 {
			t.Errorf("webhook:deliver backlog %v, want 2", got)
		}
		if diff := cmp.Diff(30.0, age[outbox.WebhookDeliver], near); diff != "" {
			t.Errorf("webhook:deliver age (-want +got):\n%s", diff)
		}
	})

	t.Run("a second scrape within minInterval reuses the first", func(t *testing.T) {
		cached := store.OutboxCollector(db.Pool, time.Hour)
		first, _ := outboxSeries(t, cached)
		f.task(t, outbox.ChargeCapture, 0)
		second, _ := outboxSeries(t, cached)
		if diff := cmp.Diff(first, second); diff != "" {
			t.Errorf("second scrape within minInterval differs from the first (-first +second):\n%s", diff)
		}
		if got := second[outbox.ChargeCapture]; got != 0 {
			t.Errorf("charge:capture within minInterval: %v, want the cached 0", got)
		}
		fresh, _ := outboxSeries(t, store.OutboxCollector(db.Pool, 0))
		if got := fresh[outbox.ChargeCapture]; got != 1 {
			t.Errorf("charge:capture with minInterval 0: %v, want 1", got)
		}
	})

	t.Run("a failed query leaves the metrics out", func(t *testing.T) {
		pool, err := pgxpool.New(context.Background(), db.URL)
		if err != nil {
			t.Fatal(err)
		}
		pool.Close()
		if n := testutil.CollectAndCount(store.OutboxCollector(pool, 0)); n != 0 {
			t.Errorf("series from a closed pool: %d, want 0", n)
		}
	})
}
