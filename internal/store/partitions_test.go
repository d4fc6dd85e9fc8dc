package store_test

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"

	"github.com/gatehouse-pay/gatehouse/internal/apperr"
	"github.com/gatehouse-pay/gatehouse/internal/events"
	"github.com/gatehouse-pay/gatehouse/internal/listing"
	"github.com/gatehouse-pay/gatehouse/internal/store"
	"github.com/gatehouse-pay/gatehouse/internal/testenv"
	"github.com/gatehouse-pay/gatehouse/migrations"
)

// idAt is a UUIDv7 of the millisecond of t.
func idAt(t time.Time) string {
	u := uuid.Must(uuid.NewV7())
	ms := t.UnixMilli()
	for i := 0; i < 6; i++ {
		u[i] = byte(ms >> (40 - 8*i))
	}
	return u.String()
}

type partRow struct {
	name, bound string
}

// partitionsOf lists a table's partitions with their bounds, by name.
func partitionsOf(t *testing.T, pool *pgxpool.Pool, table string) []partRow {
	t.Helper()
	rows, err := pool.Query(context.Background(), `SELECT c.relname, pg_get_expr(c.relpartbound, c.oid) FROM pg_inherits i
JOIN pg_class c ON c.oid = i.inhrelid WHERE i.inhparent = $1::regclass ORDER BY c.relname`, table)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []partRow
	for rows.Next() {
		var p partRow
		if err := rows.Scan(&p.name, &p.bound); err != nil {
			t.Fatal(err)
		}
		out = append(out, p)
	}
	return out
}

func count(t *testing.T, pool *pgxpool.Pool, sql string, args ...any) int {
	t.Helper()
	var n int
	if err := pool.QueryRow(context.Background(), sql, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return n
}

// partitionFixture writes an event, its delivery and an attempt at time at,
// through the tables (as the previous release's statements do), and returns
// the event's and the delivery's ids.
func (f outboxFixture) eventAt(t *testing.T, at time.Time) (string, string) {
	t.Helper()
	ev, dl := idAt(at), idAt(at)
	f.exec(t, `INSERT INTO events (id, merchant_id, environment, type, body, created_at) VALUES ($1, $2, 'sandbox', 'charge.captured', '{}', $3)`, ev, f.merchantID, at)
	f.exec(t, `INSERT INTO webhook_deliveries (id, endpoint_id, merchant_id, event_id, event_type, status, attempts, created_at, updated_at)
		VALUES ($1, $2, $3, $4, 'charge.captured', 'succeeded', 1, $5, $5)`, dl, f.endpointID, f.merchantID, ev, at)
	f.exec(t, `INSERT INTO webhook_attempts (delivery_id, attempt, started_at, duration_ms, status_code) VALUES ($1, 1, $2, 12, 200)`, dl, at)
	return ev, dl
}

// TestMaintainPartitions: the partitions are created from now to half the
// retention ahead, with the same bounds for deliveries and their
// attempts; a second run does nothing; rows the DEFAULT partitions took
// (the worker stopped) are moved into the partitions made for them; a
// partition past retention is dropped whole, its attempts with it.
func TestMaintainPartitions(t *testing.T) {
	ctx := context.Background()
	db := testenv.NewDB(t)
	r := store.Retention{Events: 30 * time.Minute, WebhookLog: 15 * time.Minute}
	s := store.New(db.Pool).WithRetention(r)
	f := newOutboxFixture(t, db.Pool)
	now := time.Now().UTC()

	// Written before any partition exists: the DEFAULT partitions take it.
	early, earlyDelivery := f.eventAt(t, now)
	if n := count(t, db.Pool, `SELECT count(*) FROM events_default`); n != 1 {
		t.Fatalf("events_default holds %d rows, want 1", n)
	}

	rep, err := s.MaintainPartitions(ctx, now)
	if err != nil {
		t.Fatal(err)
	}
	// events: 5-minute partitions 15 minutes ahead (3 or 4 and DEFAULT);
	// deliveries: 2 minutes (2.5 in whole minutes), 7.5 minutes ahead (4 or 5).
	if w := store.PartitionWidth(r.Events); w != 5*time.Minute {
		t.Fatalf("events width %s", w)
	}
	if w := store.PartitionWidth(r.WebhookLog); w != 2*time.Minute {
		t.Fatalf("deliveries width %s", w)
	}
	ev, dl, at := partitionsOf(t, db.Pool, "events"), partitionsOf(t, db.Pool, "webhook_deliveries"), partitionsOf(t, db.Pool, "webhook_attempts")
	if len(ev) < 4 || len(ev) > 5 || len(dl) < 5 || len(dl) > 6 {
		t.Fatalf("partitions: %d of events, %d of deliveries", len(ev), len(dl))
	}
	if rep.Created != len(ev)-1+len(dl)-1 || rep.Moved != 3 {
		t.Errorf("report %+v", rep)
	}
	if len(at) != len(dl) {
		t.Fatalf("attempts have %d partitions, deliveries %d", len(at), len(dl))
	}
	for i := range dl {
		if dl[i].bound != at[i].bound {
			t.Errorf("partition %d: deliveries %s, attempts %s", i, dl[i].bound, at[i].bound)
		}
	}
	for _, table := range []string{"events_default", "webhook_deliveries_default", "webhook_attempts_default"} {
		if n := count(t, db.Pool, `SELECT count(*) FROM `+table); n != 0 {
			t.Errorf("%s still holds %d rows", table, n)
		}
	}
	if _, err := s.EventByID(ctx, f.merchantID, early); err != nil {
		t.Errorf("the moved event: %v", err)
	}
	d, err := s.DeliveryByID(ctx, f.merchantID, earlyDelivery)
	if err != nil || len(d.Log) != 1 {
		t.Errorf("the moved delivery: %+v, %v", d, err)
	}

	// Idempotent.
	if rep, err := s.MaintainPartitions(ctx, now); err != nil || rep.Created != 0 || rep.Dropped != 0 {
		t.Fatalf("second run: %+v, %v", rep, err)
	}

	// The worker stopped for an hour: rows past the partitions ahead go to
	// the DEFAULT partitions, and the next run moves them.
	later := now.Add(time.Hour)
	late, lateDelivery := f.eventAt(t, later)
	if n := count(t, db.Pool, `SELECT count(*) FROM webhook_attempts_default`); n != 1 {
		t.Fatalf("webhook_attempts_default holds %d rows, want 1", n)
	}
	rep, err = s.MaintainPartitions(ctx, later)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Moved != 3 || rep.Dropped == 0 || rep.Postponed != 0 {
		t.Errorf("after an hour: %+v", rep)
	}
	if _, err := s.EventByID(ctx, f.merchantID, late); err != nil {
		t.Errorf("the late event: %v", err)
	}
	// Everything of an hour ago is past both retentions: dropped.
	if _, err := s.EventByID(ctx, f.merchantID, early); apperr.KindOf(err) != apperr.KindNotFound {
		t.Errorf("the early event: %v, want NotFound", err)
	}
	if n := count(t, db.Pool, `SELECT count(*) FROM events WHERE id = $1`, early); n != 0 {
		t.Errorf("the early event's row is still there")
	}
	if n := count(t, db.Pool, `SELECT count(*) FROM webhook_attempts WHERE delivery_id = $1`, earlyDelivery); n != 0 {
		t.Errorf("the early delivery's attempts are still there")
	}
	d, err = s.DeliveryByID(ctx, f.merchantID, lateDelivery)
	if err != nil || len(d.Log) != 1 {
		t.Errorf("the late delivery: %+v, %v", d, err)
	}
	// The partitions of the retention and those ahead, no more.
	if ev = partitionsOf(t, db.Pool, "events"); len(ev) > 1+6+3+1 {
		t.Errorf("events has %d partitions", len(ev))
	}
	page, err := s.ListEvents(ctx, f.merchantID, events.Filter{}, listing.Params{Limit: 10})
	if err != nil || len(page.Items) != 1 || page.Items[0].ID != late {
		t.Errorf("events listed: %+v, %v", page.Items, err)
	}
}

// TestMaintainPartitionsOneAtATime: a run while another worker holds the
// maintenance lock changes nothing and leaves every step to the next run.
func TestMaintainPartitionsOneAtATime(t *testing.T) {
	ctx := context.Background()
	db := testenv.NewDB(t)
	s := store.New(db.Pool)
	tx, err := db.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // rolled back below; a no-op then
	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, int64(0x67685f7061727473)); err != nil {
		t.Fatal(err)
	}
	rep, err := s.MaintainPartitions(ctx, time.Now())
	if err != nil || rep.Postponed == 0 || rep.Created != 0 || len(partitionsOf(t, db.Pool, "events")) != 1 {
		t.Fatalf("while locked: %+v, %v", rep, err)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if rep, err := s.MaintainPartitions(ctx, time.Now()); err != nil || rep.Postponed != 0 || rep.Created == 0 {
		t.Fatalf("after: %+v, %v", rep, err)
	}
}

// droppedSince16 are the indexes migrations after 00016 drop.
var droppedSince16 = map[string]bool{"events_created_at_idx": true}

// TestPartitionMigration: a database of the previous release (migrated to
// 00015) holding events, deliveries and attempts is moved to partitioned
// tables with its rows in the old tables, attached whole with their
// indexes (not rebuilt); old and new rows are served; once past retention
// the old tables are dropped like any partition; and the migration goes
// down and up again.
func TestPartitionMigration(t *testing.T) {
	ctx := context.Background()
	db := testenv.NewDB(t)
	p, err := goose.NewProvider(goose.DialectPostgres, stdlib.OpenDBFromPool(db.Pool), migrations.FS)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.DownTo(ctx, 15); err != nil {
		t.Fatal(err)
	}
	f := newOutboxFixture(t, db.Pool)
	now := time.Now().UTC()
	old, oldDelivery := f.eventAt(t, now.Add(-time.Hour))
	f.exec(t, `INSERT INTO events (id, merchant_id, environment, type, body, created_at)
		SELECT gh_uuid_v7(), $1, 'sandbox', 'charge.captured', '{}', now() FROM generate_series(1, 1000)`, f.merchantID)
	indexes := func(table string) map[string]uint32 {
		rows, err := db.Pool.Query(ctx, `SELECT c.relname, c.relfilenode FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid WHERE i.indrelid = $1::regclass`, table)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		out := map[string]uint32{}
		for rows.Next() {
			var name string
			var node uint32
			if err := rows.Scan(&name, &node); err != nil {
				t.Fatal(err)
			}
			out[name] = node
		}
		return out
	}
	before := map[string]map[string]uint32{}
	for _, table := range []string{"events", "webhook_deliveries", "webhook_attempts"} {
		before[table] = indexes(table)
	}

	if _, err := p.Up(ctx); err != nil {
		t.Fatal(err)
	}
	for _, table := range []string{"events", "webhook_deliveries", "webhook_attempts"} {
		parts := partitionsOf(t, db.Pool, table)
		if len(parts) != 2 || parts[0].name != table+"_default" || parts[1].name != table+"_legacy" ||
			!strings.HasPrefix(parts[1].bound, "FOR VALUES FROM (MINVALUE) TO (") {
			t.Fatalf("%s: partitions %+v", table, parts)
		}
		// Each old index is now the old partition's index, same file: attached, not rebuilt.
		after := indexes(table + "_legacy")
		for name, node := range before[table] {
			if after[name+"_legacy"] != node && !droppedSince16[name] {
				t.Errorf("%s: index %s was rebuilt or lost (%v)", table, name, after)
			}
		}
		parent := indexes(table)
		for name := range before[table] {
			if _, ok := parent[name]; !ok && !droppedSince16[name] {
				t.Errorf("%s: the partitioned table has no index %s", table, name)
			}
		}
	}
	if n := count(t, db.Pool, `SELECT count(*) FROM events_legacy`); n != 1001 {
		t.Errorf("events_legacy holds %d rows", n)
	}
	s := store.New(db.Pool).WithRetention(store.Retention{Events: 2 * time.Hour, WebhookLog: 2 * time.Hour})
	if _, err := s.EventByID(ctx, f.merchantID, old); err != nil {
		t.Errorf("the old event: %v", err)
	}
	if d, err := s.DeliveryByID(ctx, f.merchantID, oldDelivery); err != nil || len(d.Log) != 1 {
		t.Errorf("the old delivery: %+v, %v", d, err)
	}
	// Rows written after the migration go to the old table up to its bound.
	_, newDelivery := f.eventAt(t, now)
	if n := count(t, db.Pool, `SELECT count(*) FROM webhook_attempts_legacy WHERE delivery_id = $1`, newDelivery); n != 1 {
		t.Errorf("the new attempt is not in the old table")
	}

	// The worker's maintenance starts at the old table's bound, which is
	// further ahead than the partitions it makes.
	rep, err := s.MaintainPartitions(ctx, now)
	if err != nil || rep.Created != 0 || rep.Dropped != 0 {
		t.Fatalf("maintenance: %+v, %v", rep, err)
	}
	var expr string
	if err := db.Pool.QueryRow(ctx, `SELECT pg_get_expr(relpartbound, oid) FROM pg_class WHERE relname = 'events_legacy'`).Scan(&expr); err != nil {
		t.Fatal(err)
	}
	hex := strings.ReplaceAll(expr[strings.Index(expr, "TO ('")+5:], "-", "")[:12]
	ms, err := strconv.ParseInt(hex, 16, 64)
	if err != nil {
		t.Fatal(err)
	}
	bound := time.UnixMilli(ms)
	if d := bound.Sub(now); d < 24*time.Hour || d > 48*time.Hour {
		t.Errorf("the old table's bound is %s ahead, want one to two days", d)
	}
	// Past retention, the old tables go like any partition.
	rep, err = s.MaintainPartitions(ctx, bound.Add(2*time.Hour+time.Minute))
	if err != nil || rep.Dropped != 2 || rep.Created == 0 {
		t.Fatalf("maintenance past the old tables' retention: %+v, %v", rep, err)
	}
	for _, table := range []string{"events_legacy", "webhook_deliveries_legacy", "webhook_attempts_legacy"} {
		if n := count(t, db.Pool, `SELECT count(*) FROM pg_class WHERE relname = $1`, table); n != 0 {
			t.Errorf("%s is still there", table)
		}
	}

	if _, err := p.DownTo(ctx, 15); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Up(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestMaintainPartitionsGivesWayToLocks: while a transaction holds a lock
// on the DEFAULT partition (a long read of the whole table holds one too),
// creating a partition waits at most its lock timeout, then is left to the
// next run: the run ends without error, and writes are never queued behind
// it for longer.
func TestMaintainPartitionsGivesWayToLocks(t *testing.T) {
	ctx := context.Background()
	db := testenv.NewDB(t)
	s := store.New(db.Pool)
	tx, err := db.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // rolled back below; a no-op then
	if _, err := tx.Exec(ctx, `LOCK TABLE events_default IN ACCESS SHARE MODE`); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	rep, err := s.MaintainPartitions(ctx, time.Now())
	if err != nil || rep.Postponed == 0 || len(partitionsOf(t, db.Pool, "events")) != 1 {
		t.Fatalf("while events_default is locked: %+v, %v", rep, err)
	}
	// It gave way (Postponed, after its lock_timeout) rather than waiting
	// for the lock; how long that took is the machine's.
	t.Logf("the run gave way to the lock after %s", time.Since(start).Round(time.Millisecond))
	// The deliveries were not held up by the events' lock.
	if n := len(partitionsOf(t, db.Pool, "webhook_deliveries")); n < 2 {
		t.Errorf("webhook_deliveries has %d partitions", n)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	rep, err = s.MaintainPartitions(ctx, time.Now())
	if err != nil || rep.Created == 0 || rep.Postponed != 0 {
		t.Fatalf("after: %+v, %v", rep, err)
	}
}

// TestCatchUpPartitionsBesideWriters: after a stop longer than the
// partitions ahead, the worker creates the partitions of the present while
// events, deliveries and attempts are written into them. No write fails:
// a row routed to the DEFAULT partition just as a partition for its range
// was attached there would fail its partition check (SQLSTATE 23514, a
// 500 for the merchant), so creating a partition of the present holds
// writers back for that moment. Every row ends in a partition of its own
// range, none in the DEFAULT.
func TestCatchUpPartitionsBesideWriters(t *testing.T) {
	ctx := context.Background()
	db := testenv.NewDB(t)
	s := store.New(db.Pool).WithRetention(store.Retention{Events: 30 * time.Minute, WebhookLog: 15 * time.Minute})
	f := newOutboxFixture(t, db.Pool)

	stop := make(chan struct{})
	errs := make(chan error, 64)
	var written atomic.Int64
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				now := time.Now()
				ev, dl := idAt(now), idAt(now)
				_, err := db.Pool.Exec(ctx, `WITH e AS (INSERT INTO events (id, merchant_id, environment, type, body, created_at)
	VALUES ($1, $2, 'sandbox', 'charge.captured', '{}', $4) RETURNING id)
INSERT INTO webhook_deliveries (id, endpoint_id, merchant_id, event_id, event_type, status, attempts, created_at, updated_at)
	SELECT $3, $5, $2, e.id, 'charge.captured', 'succeeded', 1, $4, $4 FROM e`, ev, f.merchantID, dl, now, f.endpointID)
				if err == nil {
					_, err = db.Pool.Exec(ctx, `INSERT INTO webhook_attempts (delivery_id, attempt, started_at, duration_ms, status_code) VALUES ($1, 1, $2, 12, 200)`, dl, now)
				}
				if err != nil {
					select {
					case errs <- err:
					default:
					}
					continue
				}
				written.Add(1)
			}
		}()
	}
	// The writers fill the DEFAULT partitions first, as while the worker
	// was stopped.
	deadline := time.Now().Add(time.Minute)
	for written.Load() < 200 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	var rep store.PartitionReport
	for time.Now().Before(deadline) {
		r, err := s.MaintainPartitions(ctx, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		rep.Created += r.Created
		rep.Moved += r.Moved
		if r.Postponed == 0 {
			break
		}
	}
	time.Sleep(200 * time.Millisecond) // writes go on into the new partitions
	close(stop)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("a write beside the partitions' creation failed: %v", err)
	}
	if rep.Created == 0 || rep.Moved == 0 {
		t.Errorf("the run created %d partitions and moved %d rows, want some of each", rep.Created, rep.Moved)
	}
	for _, table := range []string{"events", "webhook_deliveries", "webhook_attempts"} {
		if n := count(t, db.Pool, `SELECT count(*) FROM `+table+`_default`); n != 0 {
			t.Errorf("%s_default holds %d rows after the run", table, n)
		}
	}
	if n := count(t, db.Pool, `SELECT count(*) FROM webhook_attempts`); int64(n) != written.Load() {
		t.Errorf("%d attempts stored, %d written", n, written.Load())
	}
	t.Logf("%d writes beside a run that created %d partitions and moved %d rows", written.Load(), rep.Created, rep.Moved)
}
