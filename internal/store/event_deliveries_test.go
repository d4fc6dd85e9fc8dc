package store_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/gatehouse-pay/gatehouse/internal/outbox"
	"github.com/gatehouse-pay/gatehouse/internal/store"
	"github.com/gatehouse-pay/gatehouse/internal/testenv"
	"github.com/gatehouse-pay/gatehouse/internal/webhooks"
)

// TestEventFirstsHandOffsAndRetries: an event's task sees the deliveries
// still waiting for their first attempt (not one attempted, handed off,
// final or a test); FinishEvent writes the hand-offs' rows and deletes the
// event's in one statement; a recorded first attempt that calls for a retry
// writes the delivery's own row, once, and only if the attempt was applied.
func TestEventFirstsHandOffsAndRetries(t *testing.T) {
	db := testenv.NewDB(t)
	s := store.New(db.Pool)
	f := newOutboxFixture(t, db.Pool)
	ctx := context.Background()
	ev := uuid.NewString()
	f.exec(t, `INSERT INTO events (id, merchant_id, environment, type, body, created_at)
		VALUES ($1, $2, 'sandbox', 'charge.captured', '{}', now())`, ev, f.merchantID)
	f.exec(t, `INSERT INTO outbox (task_id, task_type, ref_id) VALUES ($1, $2, $3)`, webhooks.EventTask(ev).ID(), outbox.WebhookEvent, ev)
	delivery := func(status string, attempts int) string {
		id := uuid.NewString()
		f.exec(t, `INSERT INTO webhook_deliveries (id, endpoint_id, merchant_id, event_id, event_type, status, attempts, next_attempt_at, created_at, updated_at)
			VALUES ($1, $2, $3, $4, 'charge.captured', $5, $6, now(), now(), now())`, id, f.endpointID, f.merchantID, ev, status, attempts)
		return id
	}
	waiting, retried, handedOff, attempted := delivery("pending", 0), delivery("pending", 0), delivery("pending", 0), delivery("pending", 1)
	delivery("failed", 0)
	f.exec(t, `INSERT INTO outbox (task_id, task_type, ref_id) VALUES ($1, $2, $3)`, webhooks.Task(handedOff).ID(), outbox.WebhookDeliver, handedOff)
	count := func(taskID string) int {
		var n int
		if err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM outbox WHERE task_id = $1`, taskID).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}

	works, err := s.EventFirsts(ctx, ev)
	if want := slices.Sorted(slices.Values([]string{waiting, retried})); err != nil || !slices.Equal(workIDs(works), want) {
		t.Fatalf("EventFirsts = %v, %v; want %v (not %s attempted, %s handed off)", workIDs(works), err, want, attempted, handedOff)
	}
	for _, w := range works { // each with what its attempt needs
		if w.Endpoint.ID != f.endpointID || string(w.Body) != "{}" || w.Delivery.EventID != ev || w.Delivery.Status != webhooks.StatusPending {
			t.Fatalf("EventFirsts' %s: endpoint %q, body %q, event %q, status %q", w.Delivery.ID, w.Endpoint.ID, w.Body, w.Delivery.EventID, w.Delivery.Status)
		}
	}

	// A failed first attempt of retried: its own row comes with the record.
	next := time.Now().Add(5 * time.Minute)
	code := 500
	r := webhooks.AttemptRecord{DeliveryID: retried, Status: webhooks.StatusPending, ChainAttempts: 1, NextAttemptAt: &next, NewTask: true,
		Attempt: webhooks.Attempt{Attempt: 1, StartedAt: time.Now(), DurationMS: 3, StatusCode: &code}}
	if ok, err := s.RecordAttempt(ctx, r); err != nil || !ok {
		t.Fatalf("RecordAttempt = %t, %v", ok, err)
	}
	if n := count(webhooks.Task(retried).ID()); n != 1 {
		t.Fatalf("%d rows of the retried delivery's own task, want 1", n)
	}
	// The same attempt again (a re-run) is not applied and writes nothing.
	if ok, err := s.RecordAttempt(ctx, r); err != nil || ok {
		t.Fatalf("RecordAttempt again = %t, %v; want not applied", ok, err)
	}
	if got := firstIDs(t, s, ev); !slices.Equal(got, []string{waiting}) {
		t.Fatalf("EventFirsts after the attempt = %v, want [%s]", got, waiting)
	}

	// waiting is handed off; the event's row goes with it.
	if err := s.FinishEvent(ctx, ev, []string{waiting}); err != nil {
		t.Fatal(err)
	}
	if count(webhooks.Task(waiting).ID()) != 1 || count(webhooks.EventTask(ev).ID()) != 0 {
		t.Fatalf("after FinishEvent: hand-off rows %d, event rows %d; want 1, 0", count(webhooks.Task(waiting).ID()), count(webhooks.EventTask(ev).ID()))
	}
	if got := firstIDs(t, s, ev); len(got) != 0 {
		t.Fatalf("EventFirsts after the hand-off = %v, want none", got)
	}
	// Finishing again (a re-run) changes nothing.
	if err := s.FinishEvent(ctx, ev, []string{waiting}); err != nil || count(webhooks.Task(waiting).ID()) != 1 {
		t.Fatalf("FinishEvent again: %v, %d rows", err, count(webhooks.Task(waiting).ID()))
	}
}

// TestEventFirstsFromTheEventsDay: an event's deliveries are written with
// or after it, so EventFirsts reads deliveries from a day before the
// event's id on (the partitions of older ones are pruned). A delivery of
// the event with an id from the day before that (which the fan-out never
// writes) is not seen; one from a few minutes before (a database clock
// behind the API's) is.
func TestEventFirstsFromTheEventsDay(t *testing.T) {
	db := testenv.NewDB(t)
	s := store.New(db.Pool)
	f := newOutboxFixture(t, db.Pool)
	at := time.Now()
	ev := idAt(at)
	f.exec(t, `INSERT INTO events (id, merchant_id, environment, type, body, created_at)
		VALUES ($1, $2, 'sandbox', 'charge.captured', '{}', now())`, ev, f.merchantID)
	delivery := func(id string) string {
		f.exec(t, `INSERT INTO webhook_deliveries (id, endpoint_id, merchant_id, event_id, event_type, status, attempts, next_attempt_at, created_at, updated_at)
			VALUES ($1, $2, $3, $4, 'charge.captured', 'pending', 0, now(), now(), now())`, id, f.endpointID, f.merchantID, ev)
		return id
	}
	now, skewed := delivery(idAt(at.Add(time.Millisecond))), delivery(idAt(at.Add(-5*time.Minute)))
	delivery(idAt(at.Add(-25 * time.Hour)))
	if got, want := firstIDs(t, s, ev), slices.Sorted(slices.Values([]string{now, skewed})); !slices.Equal(got, want) {
		t.Fatalf("EventFirsts = %v; want %v", got, want)
	}
}

// TestEventFirstsBatched: the tasks of many events asking at once share
// statements, and each gets its own event's deliveries and no other's, the
// events' days apart included (the batch reads from the oldest one's day).
func TestEventFirstsBatched(t *testing.T) {
	db := testenv.NewDB(t)
	s := store.New(db.Pool)
	var sizes []int
	var mu sync.Mutex
	s.ObserveBatches(func(kind string, n int) {
		if kind == "event" {
			mu.Lock()
			sizes = append(sizes, n)
			mu.Unlock()
		}
	})
	f := newOutboxFixture(t, db.Pool)
	const n = 40
	events, want := make([]string, n), make([][]string, n)
	for i := range n {
		at := time.Now().Add(-time.Duration(i) * 3 * time.Hour) // up to 5 days back
		events[i] = idAt(at)
		f.exec(t, `INSERT INTO events (id, merchant_id, environment, type, body, created_at)
			VALUES ($1, $2, 'sandbox', 'charge.captured', $3::jsonb, now())`, events[i], f.merchantID, fmt.Sprintf(`{"n": %d}`, i))
		for j := range i % 3 { // 0, 1 or 2 deliveries
			id := idAt(at.Add(time.Duration(j+1) * time.Millisecond))
			f.exec(t, `INSERT INTO webhook_deliveries (id, endpoint_id, merchant_id, event_id, event_type, status, attempts, next_attempt_at, created_at, updated_at)
				VALUES ($1, $2, $3, $4, 'charge.captured', 'pending', 0, now(), now(), now())`, id, f.endpointID, f.merchantID, events[i])
			want[i] = append(want[i], id)
		}
	}
	got := make([][]webhooks.Work, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { got[i], errs[i] = s.EventFirsts(context.Background(), events[i]) })
	}
	wg.Wait()
	for i := range n {
		if errs[i] != nil || !slices.Equal(workIDs(got[i]), want[i]) {
			t.Fatalf("event %d: EventFirsts = %v, %v; want %v", i, workIDs(got[i]), errs[i], want[i])
		}
		for _, w := range got[i] {
			if body := fmt.Sprintf(`{"n": %d}`, i); string(w.Body) != body {
				t.Fatalf("event %d: body %s, want %s", i, w.Body, body)
			}
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(sizes) >= n {
		t.Fatalf("%d statements for %d events at once (%v): not batched", len(sizes), n, sizes)
	}
}

func workIDs(works []webhooks.Work) []string {
	var ids []string
	for _, w := range works {
		ids = append(ids, w.Delivery.ID)
	}
	return ids
}

// firstIDs is what EventFirsts returns for ev, by delivery id.
func firstIDs(t *testing.T, s *store.Store, ev string) []string {
	t.Helper()
	works, err := s.EventFirsts(context.Background(), ev)
	if err != nil {
		t.Fatal(err)
	}
	return workIDs(works)
}
