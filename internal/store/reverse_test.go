package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/gatehouse-pay/gatehouse/internal/charges"
	"github.com/gatehouse-pay/gatehouse/internal/events"
	"github.com/gatehouse-pay/gatehouse/internal/ids"
	"github.com/gatehouse-pay/gatehouse/internal/outbox"
	"github.com/gatehouse-pay/gatehouse/internal/store"
	"github.com/gatehouse-pay/gatehouse/internal/testenv"
)

// TestApplyTransitionWritesItsTask: a charge that fails with an unknown
// provider outcome gets its charge:reverse row in the statement that fails
// it, keeps its sealed card, and the reverse's own transition purges the card
// and drops the row. A transition that lost its race writes no task.
func TestApplyTransitionWritesItsTask(t *testing.T) {
	db := testenv.NewDB(t)
	s := store.New(db.Pool)
	ctx := context.Background()
	m := newMerchant(t, s, "reverse@example.com")
	now := time.Now().UTC().Truncate(time.Millisecond)
	c := charges.Charge{ID: ids.NewUUID(), MerchantID: m.ID, Environment: "sandbox", Amount: 2000, Currency: "USD",
		Status: charges.StatusCreated, PaymentMethod: "card", Capture: true, Provider: "sandbox", Metadata: map[string]string{},
		CreatedAt: now, UpdatedAt: now}
	c.Card.Brand, c.Card.Last4 = "visa", ptr("4242")
	ev, err := events.New(ids.NewUUID(), m.ID, c.Environment, events.ChargeCreated, now, c.View(), nil)
	if err != nil {
		t.Fatal(err)
	}
	authorize := outbox.Task{Type: outbox.ChargeAuthorize, RefID: c.ID}
	if _, _, err := s.CreateCharge(ctx, charges.NewCharge{Charge: c, Sealed: []byte("sealed card"), Event: ev, Task: authorize}); err != nil {
		t.Fatal(err)
	}
	outboxRows := func() []string {
		t.Helper()
		rows, err := db.Pool.Query(ctx, `SELECT task_id FROM outbox WHERE ref_id = $1 ORDER BY task_id`, c.ID)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		var ids []string
		for rows.Next() {
			var id string
			if err := rows.Scan(&id); err != nil {
				t.Fatal(err)
			}
			ids = append(ids, id)
		}
		return ids
	}
	sealed := func() bool {
		t.Helper()
		var has bool
		if err := db.Pool.QueryRow(ctx, `SELECT card_sealed IS NOT NULL FROM charges WHERE id = $1`, c.ID).Scan(&has); err != nil {
			t.Fatal(err)
		}
		return has
	}

	failed := c
	failed.Status = charges.StatusFailed
	failed.FailureCode, failed.FailureMessage = ptr("provider_unavailable"), ptr("The provider did not answer; any authorization it made is being released.")
	failed.UpdatedAt = now.Add(time.Second)
	fe, err := events.New(ids.NewUUID(), m.ID, c.Environment, events.ChargeFailed, failed.UpdatedAt, failed.View(), nil)
	if err != nil {
		t.Fatal(err)
	}
	reverse := outbox.Task{Type: outbox.ChargeReverse, RefID: c.ID}
	fail := charges.Transition{Before: c, After: failed, Event: &fe, DoneTask: authorize.ID(), Then: &reverse}
	applied, _, err := s.ApplyTransition(ctx, fail)
	if err != nil || !applied {
		t.Fatalf("fail: applied %v, %v", applied, err)
	}
	if got := outboxRows(); len(got) != 1 || got[0] != reverse.ID() {
		t.Fatalf("outbox after the failure: %v, want only %s", got, reverse.ID())
	}
	if !sealed() {
		t.Error("the failure purged the card the reverse needs")
	}
	var stale []string
	pending, err := s.StaleTasks(ctx, time.Now().Add(time.Hour), 100)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pending {
		stale = append(stale, p.Task.ID())
	}
	if len(stale) != 1 || stale[0] != reverse.ID() {
		t.Errorf("the sweeper sees %v, want %s", stale, reverse.ID())
	}

	// The same transition again lost its race: nothing is written.
	if err := s.DeleteTask(ctx, reverse.ID()); err != nil {
		t.Fatal(err)
	}
	if applied, _, err := s.ApplyTransition(ctx, fail); err != nil || applied {
		t.Fatalf("replayed fail: applied %v, %v", applied, err)
	}
	if got := outboxRows(); len(got) != 0 {
		t.Fatalf("a transition that did not apply wrote %v", got)
	}

	// The reverse finishes: the charge stays failed, the card goes, the row goes.
	if _, err := db.Pool.Exec(ctx, `INSERT INTO outbox (task_id, task_type, ref_id) VALUES ($1, $2, $3)`, reverse.ID(), reverse.Type, c.ID); err != nil {
		t.Fatal(err)
	}
	if applied, _, err := s.ApplyTransition(ctx, charges.Transition{Before: failed, After: failed, DoneTask: reverse.ID(), PurgeCard: true}); err != nil || !applied {
		t.Fatalf("released: applied %v, %v", applied, err)
	}
	if got := outboxRows(); len(got) != 0 {
		t.Errorf("outbox after the release: %v, want none", got)
	}
	if sealed() {
		t.Error("the card is still sealed after the release")
	}
	got, err := s.ChargeByID(ctx, m.ID, c.ID)
	if err != nil || got.Status != charges.StatusFailed || got.FailureCode == nil || *got.FailureCode != "provider_unavailable" {
		t.Errorf("charge after the release: %+v, %v", got, err)
	}
}

func ptr[T any](v T) *T { return &v }
