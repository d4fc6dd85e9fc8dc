package store_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/gatehouse-pay/gatehouse/internal/apperr"
	"github.com/gatehouse-pay/gatehouse/internal/outbox"
	"github.com/gatehouse-pay/gatehouse/internal/store"
	"github.com/gatehouse-pay/gatehouse/internal/testenv"
	"github.com/gatehouse-pay/gatehouse/internal/webhooks"
)

// pendingDeliveries writes n events, each with one pending delivery to the
// fixture's endpoint and its outbox row, and returns the delivery ids.
func (f outboxFixture) pendingDeliveries(t *testing.T, n int) []string {
	t.Helper()
	ids := make([]string, n)
	for i := range ids {
		ev := uuid.NewString()
		f.exec(t, `INSERT INTO events (id, merchant_id, environment, type, body, created_at)
			VALUES ($1, $2, 'sandbox', 'charge.captured', $3, now())`, ev, f.merchantID, fmt.Sprintf(`{"id":%q,"n":%d}`, ev, i))
		ids[i] = f.task(t, outbox.WebhookDeliver, 0)
		f.exec(t, `INSERT INTO webhook_deliveries (id, endpoint_id, merchant_id, event_id, event_type, status, next_attempt_at, created_at, updated_at)
			VALUES ($1, $2, $3, $4, 'charge.captured', 'pending', now(), now(), now())`, ids[i], f.endpointID, f.merchantID, ev)
	}
	return ids
}

// TestDeliveriesReadAndRecordedTogether runs the worker's delivery reads and
// attempt records as concurrent calls, which the store batches: each call
// gets its own delivery and its own outcome.
func TestDeliveriesReadAndRecordedTogether(t *testing.T) {
	db := testenv.NewDB(t)
	s := store.New(db.Pool)
	f := newOutboxFixture(t, db.Pool)
	ids := f.pendingDeliveries(t, 40)
	ctx := context.Background()

	t.Run("reads", func(t *testing.T) {
		var wg sync.WaitGroup
		for i, id := range ids {
			wg.Add(1)
			go func() {
				defer wg.Done()
				d, e, body, err := s.DeliveryForWork(ctx, id)
				if err != nil || d.ID != id || d.Status != webhooks.StatusPending || e.ID != f.endpointID {
					t.Errorf("delivery %d: %+v, endpoint %q, %v", i, d, e.ID, err)
					return
				}
				if want := fmt.Sprintf(`{"id":%q,"n":%d}`, d.EventID, i); string(body) != want {
					t.Errorf("delivery %d: body %s, want %s", i, body, want)
				}
			}()
		}
		missing := uuid.NewString()
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, _, _, err := s.DeliveryForWork(ctx, missing); apperr.KindOf(err) != apperr.KindNotFound {
				t.Errorf("unknown delivery: %v, want NotFound", err)
			}
		}()
		wg.Wait()
	})

	t.Run("records", func(t *testing.T) {
		started := time.Now().UTC().Truncate(time.Millisecond)
		next := started.Add(time.Minute)
		code := 200
		record := func(i int) webhooks.AttemptRecord {
			r := webhooks.AttemptRecord{DeliveryID: ids[i], Attempt: webhooks.Attempt{Attempt: 1, StartedAt: started, DurationMS: i, StatusCode: &code},
				ChainAttempts: 1}
			if i%2 == 0 { // even: succeeded, its task done
				r.Status, r.DoneTask = webhooks.StatusSucceeded, webhooks.Task(ids[i]).ID()
			} else { // odd: failed once, next attempt in a minute
				r.Status, r.NextAttemptAt = webhooks.StatusPending, &next
			}
			return r
		}
		var wg sync.WaitGroup
		applied := make([][]bool, len(ids))
		for i := range ids {
			applied[i] = make([]bool, 3)
			for k := range 3 { // the same attempt recorded three times at once: once applied
				wg.Add(1)
				go func() {
					defer wg.Done()
					ok, err := s.RecordAttempt(ctx, record(i))
					if err != nil {
						t.Errorf("record %d/%d: %v", i, k, err)
					}
					applied[i][k] = ok
				}()
			}
		}
		wg.Wait()
		for i, a := range applied {
			n := 0
			for _, ok := range a {
				if ok {
					n++
				}
			}
			if n != 1 {
				t.Errorf("delivery %d: attempt 1 applied %d times, want once", i, n)
			}
		}
		var attempts, outboxLeft, succeeded, pendingNext int
		q := `SELECT (SELECT count(*) FROM webhook_attempts WHERE delivery_id = ANY($1::uuid[])),
			(SELECT count(*) FROM outbox WHERE ref_id = ANY($1::uuid[])),
			(SELECT count(*) FROM webhook_deliveries WHERE id = ANY($1::uuid[]) AND status = 'succeeded' AND attempts = 1),
			(SELECT count(*) FROM webhook_deliveries WHERE id = ANY($1::uuid[]) AND status = 'pending' AND attempts = 1
				AND chain_attempts = 1 AND next_attempt_at = $2)`
		if err := db.Pool.QueryRow(ctx, q, ids, next).Scan(&attempts, &outboxLeft, &succeeded, &pendingNext); err != nil {
			t.Fatal(err)
		}
		if attempts != 40 || outboxLeft != 20 || succeeded != 20 || pendingNext != 20 {
			t.Errorf("attempt rows %d (want 40), outbox rows left %d (want the 20 pending), succeeded %d (want 20), pending with next attempt %d (want 20)",
				attempts, outboxLeft, succeeded, pendingNext)
		}
		var dur, status int
		if err := db.Pool.QueryRow(ctx, `SELECT duration_ms, status_code FROM webhook_attempts WHERE delivery_id = $1`, ids[7]).Scan(&dur, &status); err != nil || dur != 7 || status != 200 {
			t.Errorf("attempt of delivery 7: duration %d status %d (%v), want 7 and 200", dur, status, err)
		}

		// A stale record (attempt 1 again) and one for a final delivery change nothing.
		for _, i := range []int{1, 2} {
			if ok, err := s.RecordAttempt(ctx, record(i)); ok || err != nil {
				t.Errorf("repeat of attempt 1 of delivery %d: applied %v, %v; want not applied", i, ok, err)
			}
		}
		// The next attempt of a pending delivery is applied.
		r := record(1)
		r.Attempt.Attempt, r.ChainAttempts, r.Status, r.NextAttemptAt, r.DoneTask = 2, 2, webhooks.StatusSucceeded, nil, webhooks.Task(ids[1]).ID()
		if ok, err := s.RecordAttempt(ctx, r); !ok || err != nil {
			t.Errorf("attempt 2 of delivery 1: applied %v, %v; want applied", ok, err)
		}
	})
}
