package store_test

import (
	"context"
	"strings"
	"testing"

	"github.com/gatehouse-pay/gatehouse/internal/store"
	"github.com/gatehouse-pay/gatehouse/internal/testenv"
)

// TestDeliveryBatchPlans: with generic plans (the batch pool's mode), the
// worker's delivery statements find their rows by primary key, whatever the
// size of the tables: no sequential scan of deliveries or events, neither
// with 20,000 rows analyzed nor in a new database, where a generic plan made
// at the worker's start (and kept for the connection's life) would
// otherwise scan the tables once they have grown.
func TestDeliveryBatchPlans(t *testing.T) {
	t.Run("large", func(t *testing.T) { batchPlans(t, true) })
	t.Run("new", func(t *testing.T) { batchPlans(t, false) })
}

func batchPlans(t *testing.T, large bool) {
	db := testenv.NewDB(t)
	ctx := context.Background()
	f := newOutboxFixture(t, db.Pool)
	if large {
		fillDeliveries(t, f)
	}
	pool, err := store.Open(ctx, db.URL, store.GenericPlans(), store.MaxConns(1))
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	for name, sql := range store.DeliveryBatchStatements() {
		conn, err := pool.Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := conn.Exec(ctx, "PREPARE probe AS "+sql); err != nil {
			t.Fatalf("%s: prepare: %v", name, err)
		}
		rows, err := conn.Query(ctx, "EXPLAIN EXECUTE probe("+store.ExplainArgs(name)+")")
		if err != nil {
			t.Fatalf("%s: explain: %v", name, err)
		}
		var plan []string
		for rows.Next() {
			var line string
			if err := rows.Scan(&line); err != nil {
				t.Fatal(err)
			}
			plan = append(plan, line)
		}
		rows.Close()
		_, _ = conn.Exec(ctx, "DEALLOCATE probe")
		conn.Release()
		text := strings.Join(plan, "\n")
		for _, table := range []string{"webhook_deliveries", "events", "outbox", "webhook_endpoints"} {
			if strings.Contains(text, "Seq Scan on "+table) {
				t.Errorf("%s scans %s sequentially:\n%s", name, table, text)
			}
		}
	}
}

// fillDeliveries writes 20,000 events, each with a pending delivery and its
// outbox row, and analyzes the tables.
func fillDeliveries(t *testing.T, f outboxFixture) {
	f.exec(t, `
		WITH ev AS (
			INSERT INTO events (id, merchant_id, environment, type, body, created_at)
			SELECT gen_random_uuid(), $1, 'sandbox', 'charge.captured', '{}', now() FROM generate_series(1, 20000) RETURNING id
		)
		, d AS (
			INSERT INTO webhook_deliveries (id, endpoint_id, merchant_id, event_id, event_type, status, next_attempt_at, created_at, updated_at)
			SELECT gh_uuid_v7(), $2, $1, ev.id, 'charge.captured', 'pending', now(), now(), now() FROM ev RETURNING id
		)
		INSERT INTO outbox (task_id, task_type, ref_id) SELECT 'webhook:deliver:' || d.id, 'webhook:deliver', d.id FROM d`, f.merchantID, f.endpointID)
	f.exec(t, `ANALYZE events, webhook_deliveries, webhook_attempts, outbox`)
}
