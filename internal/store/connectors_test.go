package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/gatehouse-pay/gatehouse/internal/apperr"
	"github.com/gatehouse-pay/gatehouse/internal/charges"
	"github.com/gatehouse-pay/gatehouse/internal/connectors"
	"github.com/gatehouse-pay/gatehouse/internal/events"
	"github.com/gatehouse-pay/gatehouse/internal/idempotency"
	"github.com/gatehouse-pay/gatehouse/internal/ids"
	"github.com/gatehouse-pay/gatehouse/internal/listing"
	"github.com/gatehouse-pay/gatehouse/internal/outbox"
	"github.com/gatehouse-pay/gatehouse/internal/store"
	"github.com/gatehouse-pay/gatehouse/internal/testenv"
)

func newConnector(t *testing.T, s *store.Store, merchantID, provider string, sealed []byte) connectors.Connector {
	t.Helper()
	now := time.Now().UTC().Truncate(time.Millisecond)
	c := connectors.Connector{ID: ids.New(connectors.Prefix), MerchantID: merchantID, Provider: provider, Name: provider,
		Enabled: true, Sealed: sealed, CreatedAt: now, UpdatedAt: now}
	if provider == connectors.ProviderSandbox {
		c.Sandbox = &connectors.Sandbox{}
	}
	if _, err := s.CreateConnector(context.Background(), c, nil, idempotency.Response{}); err != nil {
		t.Fatal(err)
	}
	return c
}

// TestConnectorStore: the server-account connectors are made once per
// merchant and provider however many snapshots race; connectors are the
// merchant's; the routing's connectors cannot be deleted; a deleted
// connector leaves lists and snapshots and still serves the worker.
func TestConnectorStore(t *testing.T) {
	s := newStore(t)
	ctx := context.Background()
	a := newMerchant(t, s, "conn-a@example.com")
	b := newMerchant(t, s, "conn-b@example.com")
	now := time.Now().UTC().Truncate(time.Millisecond)

	done := make(chan error, 8)
	for range 8 {
		go func() {
			_, err := s.Snapshot(ctx, a.ID, []string{"sandbox", "stripe"}, now)
			done <- err
		}()
	}
	for range 8 {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	snap, err := s.Snapshot(ctx, a.ID, []string{"sandbox"}, now)
	if err != nil {
		t.Fatal(err)
	}
	if len(snap.Connectors) != 2 || !snap.Connectors[0].ServerAccount || snap.Routing != nil {
		t.Fatalf("snapshot %+v: want one server-account connector per provider and no routing", snap)
	}
	own := newConnector(t, s, a.ID, connectors.ProviderStripe, []byte("sealed"))
	spare := newConnector(t, s, a.ID, connectors.ProviderSandbox, nil)
	if _, err := s.ConnectorByID(ctx, b.ID, own.ID); apperr.KindOf(err) != apperr.KindNotFound {
		t.Errorf("another merchant reads the connector: %v", err)
	}
	if _, err := s.UpdateConnector(ctx, b.ID, own.ID, connectors.Patch{Enabled: ptr(false), At: now}); apperr.KindOf(err) != apperr.KindNotFound {
		t.Errorf("another merchant updates the connector: %v", err)
	}
	if err := s.DeleteConnector(ctx, b.ID, own.ID, now); apperr.KindOf(err) != apperr.KindNotFound {
		t.Errorf("another merchant deletes the connector: %v", err)
	}

	r := connectors.Routing{Default: connectors.Route{Split: []connectors.Weighted{{Connector: own.ID, Weight: 3}, {Connector: snap.Connectors[0].ID, Weight: 1}}}}
	saved, err := s.PutRouting(ctx, a.ID, r, now)
	if err != nil || saved.Version != 1 {
		t.Fatalf("put routing: %+v %v", saved, err)
	}
	if saved, err = s.PutRouting(ctx, a.ID, r, now); err != nil || saved.Version != 2 {
		t.Fatalf("put routing again: %+v %v", saved, err)
	}
	if err := s.DeleteConnector(ctx, a.ID, own.ID, now); apperr.KindOf(err) != apperr.KindConflict {
		t.Errorf("deleting a routed connector: %v, want a conflict", err)
	}
	if err := s.DeleteConnector(ctx, a.ID, snap.Connectors[0].ID, now); apperr.KindOf(err) != apperr.KindConflict {
		t.Errorf("deleting a server-account connector: %v, want a conflict", err)
	}
	if err := s.DeleteConnector(ctx, a.ID, spare.ID, now); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteConnector(ctx, a.ID, spare.ID, now); apperr.KindOf(err) != apperr.KindNotFound {
		t.Errorf("deleting twice: %v, want not found", err)
	}
	page, err := s.ListConnectors(ctx, a.ID, listing.Params{Limit: 10})
	if err != nil || len(page.Items) != 3 || page.Items[0].ID != own.ID {
		t.Fatalf("list %+v %v: want 3 live connectors, newest first", page.Items, err)
	}
	if c, err := s.ConnectorForWork(ctx, spare.ID); err != nil || c.DeletedAt == nil {
		t.Errorf("the worker reads a deleted connector: %+v %v", c, err)
	}
	snap, err = s.Snapshot(ctx, a.ID, []string{"sandbox"}, now)
	if err != nil || len(snap.Connectors) != 3 || snap.Routing == nil || len(snap.Routing.Default.Split) != 2 || snap.Routing.UpdatedAt == nil {
		t.Fatalf("snapshot %+v %v", snap, err)
	}
	if other, _ := s.Snapshot(ctx, b.ID, nil, now); len(other.Connectors) != 0 || other.Routing != nil {
		t.Errorf("merchant b sees %+v", other)
	}
}

// TestAttemptRecords: an attempt is recorded before its call only while
// the charge is created with the attempts the worker read, and a
// transition applies only with the attempts it was computed from.
func TestAttemptRecords(t *testing.T) {
	db := testenv.NewDB(t)
	s := store.New(db.Pool)
	ctx := context.Background()
	m := newMerchant(t, s, "attempts@example.com")
	now := time.Now().UTC().Truncate(time.Millisecond)
	route := []charges.RouteStep{{Connector: "conn_a", Provider: "sandbox"}, {Connector: "conn_b", Provider: "sandbox"}}
	c := charges.Charge{ID: ids.NewUUID(), MerchantID: m.ID, Environment: "sandbox", Amount: 2000, Currency: "USD",
		Status: charges.StatusCreated, PaymentMethod: "card", Capture: true, Provider: "sandbox", Metadata: map[string]string{},
		ConnectorID: ptr("conn_a"), Route: route, CreatedAt: now, UpdatedAt: now}
	c.Card.Brand = "visa"
	ev, err := events.New(ids.NewUUID(), m.ID, c.Environment, events.ChargeCreated, now, c.View(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.CreateCharge(ctx, charges.NewCharge{Charge: c, Sealed: []byte("sealed"), Event: ev,
		Task: outbox.Task{Type: outbox.ChargeAuthorize, RefID: c.ID}}); err != nil {
		t.Fatal(err)
	}
	got, _, err := s.ChargeForWork(ctx, c.ID)
	if err != nil || len(got.Route) != 2 || got.Route[1].Connector != "conn_b" || len(got.Attempts) != 0 || *got.ConnectorID != "conn_a" {
		t.Fatalf("read back %+v %v", got, err)
	}
	a := charges.Attempt{Connector: "conn_a", Provider: "sandbox", Status: charges.AttemptUnknown, StartedAt: now}
	if ok, err := s.BeginAttempt(ctx, c.ID, 0, a); err != nil || !ok {
		t.Fatalf("begin: %v %v", ok, err)
	}
	if ok, err := s.BeginAttempt(ctx, c.ID, 0, a); err != nil || ok {
		t.Fatalf("a second run began the same attempt: %v %v", ok, err)
	}
	if got, _, _ = s.ChargeForWork(ctx, c.ID); len(got.Attempts) != 1 || got.Attempts[0].Status != charges.AttemptUnknown {
		t.Fatalf("the record: %+v", got.Attempts)
	}

	// A move to conn_b applies once: a second worker that read the same
	// charge loses.
	failed := a
	failed.Status, failed.FailureCode, failed.EndedAt = charges.AttemptFailed, ptr("processing_error"), &now
	after := got
	after.Attempts, after.ConnectorID = []charges.Attempt{failed}, ptr("conn_b")
	next := &outbox.Task{Type: outbox.ChargeAuthorize, RefID: c.ID, Attempt: 2}
	for i, want := range []bool{true, false} {
		applied, _, err := s.ApplyTransition(ctx, charges.Transition{Before: got, After: after, Cause: charges.CauseFailover, Then: next})
		if err != nil || applied != want {
			t.Fatalf("move %d: applied %v %v, want %v", i, applied, err, want)
		}
	}
	got, _, _ = s.ChargeForWork(ctx, c.ID)
	if *got.ConnectorID != "conn_b" || len(got.Attempts) != 1 || got.Attempts[0].Status != charges.AttemptFailed || got.Status != charges.StatusCreated {
		t.Fatalf("after the move: %+v", got)
	}
	var rows int
	if err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM outbox WHERE ref_id = $1`, c.ID).Scan(&rows); err != nil || rows != 1 {
		t.Errorf("outbox rows %d %v: the authorize row stays, refreshed", rows, err)
	}
	// The sweeper resends the task under the id it was queued with.
	stale, err := s.StaleTasks(ctx, time.Now().Add(time.Hour), 1000)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, p := range stale {
		if p.Task.RefID == c.ID {
			found = true
			if p.Task.QueueID() != next.QueueID() {
				t.Errorf("the sweeper would queue %s, not %s", p.Task.QueueID(), next.QueueID())
			}
		}
	}
	if !found {
		t.Error("the authorize row is not among the stale tasks")
	}
}
