package jobs_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/hibiken/asynq"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"

	"github.com/gatehouse-pay/gatehouse/internal/charges"
	"github.com/gatehouse-pay/gatehouse/internal/config"
	"github.com/gatehouse-pay/gatehouse/internal/jobs"
	"github.com/gatehouse-pay/gatehouse/internal/notifications"
	"github.com/gatehouse-pay/gatehouse/internal/outbox"
	"github.com/gatehouse-pay/gatehouse/internal/providers"
	"github.com/gatehouse-pay/gatehouse/internal/providers/adyen"
	"github.com/gatehouse-pay/gatehouse/internal/refunds"
	"github.com/gatehouse-pay/gatehouse/internal/store"
	"github.com/gatehouse-pay/gatehouse/internal/testenv"
)

// A stored notification about a charge whose capture waits for its retry
// wakes that task: it runs now, not at its retry. Applied once: the
// notification records the charge and its outbox row goes; applying it
// again, or a resent copy, changes nothing. A notification about a charge
// with nothing in flight is a duplicate; one about no charge the gateway
// holds, or of a type it does not act on, is ignored.
func TestNotificationApplyWakesTheWorkInFlight(t *testing.T) {
	db := testenv.NewDB(t)
	redisURL := testenv.PrivateRedis(t)
	st := store.New(db.Pool)
	ctx := context.Background()
	exec := dbExec(t, db)
	exec(`INSERT INTO merchants (id, email, name, password_hash) VALUES ('mer_notify', 'notify@example.com', 'n', 'h')`)
	exec(`INSERT INTO connectors (id, merchant_id, provider, name, server_account, created_at, updated_at)
		VALUES ('conn_notify', 'mer_notify', 'stripe', 'Stripe', true, now(), now())`)
	insertCharge := func(status string, action *string, ref string) string {
		id := uuid.NewString()
		exec(`INSERT INTO charges (id, merchant_id, environment, amount, amount_captured, currency, status, pending_action,
				payment_method, capture, card_brand, provider, provider_reference, created_at, updated_at)
			VALUES ($1, 'mer_notify', 'sandbox', 2000, CASE WHEN $2 = 'captured' THEN 2000 ELSE 0 END,
				'USD', $2, $3, 'card', false, 'visa', 'stripe', $4, now(), now())`, id, status, action, ref)
		return id
	}
	capture := charges.ActionCapture
	capturing := insertCharge("authorized", &capture, "pi_capturing")
	settled := insertCharge("captured", nil, "pi_settled")
	captureTask := outbox.Task{Type: outbox.ChargeCapture, RefID: capturing}
	exec(`INSERT INTO outbox (task_id, task_type, ref_id) VALUES ($1, $2, $3)`, captureTask.ID(), captureTask.Type, captureTask.RefID)

	opt, err := redis.ParseURL(redisURL)
	if err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(opt)
	t.Cleanup(func() { rdb.Close() })
	cfg, err := config.Load(func(string) string { return "" }, config.Needs{})
	if err != nil {
		t.Fatal(err)
	}
	inspector := asynq.NewInspectorFromRedisClient(rdb)
	q := jobs.NewQueue(asynq.NewClientFromRedisClient(rdb), inspector, cfg)
	// The capture's task waits an hour for its next attempt.
	if err := q.EnqueueIn(ctx, captureTask, time.Hour); err != nil {
		t.Fatal(err)
	}
	state := func() asynq.TaskState {
		t.Helper()
		info, err := inspector.GetTaskInfo("critical", captureTask.QueueID())
		if err != nil {
			t.Fatal(err)
		}
		return info.State
	}
	if s := state(); s != asynq.TaskStateScheduled {
		t.Fatalf("the capture's task: %v, want scheduled", s)
	}

	reg := prometheus.NewRegistry()
	m := notifications.NewMetrics(reg)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	applier := notifications.NewApplier(st, q, m, log, time.Now)

	receive := func(eventID, typ, pi string) notifications.Notification {
		t.Helper()
		body := fmt.Sprintf(`{"id":%q,"type":%q,"data":{"object":{"id":%q,"object":"payment_intent"}}}`, eventID, typ, pi)
		ns, err := st.ReceiveNotifications(ctx, []notifications.Notification{{ID: uuid.NewString(), ConnectorID: "conn_notify",
			MerchantID: "mer_notify", Provider: "stripe", ProviderEventID: eventID, DedupKey: eventID, Type: typ,
			Payload: []byte(body), ReceivedAt: time.Now()}})
		if err != nil {
			t.Fatal(err)
		}
		return ns[0]
	}
	outcome := func(id string) (string, *string) {
		t.Helper()
		var o string
		var charge *string
		if err := db.Pool.QueryRow(ctx, `SELECT outcome, charge_id::text FROM provider_notifications WHERE id = $1`, id).Scan(&o, &charge); err != nil {
			t.Fatal(err)
		}
		return o, charge
	}
	outboxRows := func(id string) int {
		t.Helper()
		var n int
		if err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM outbox WHERE task_id = $1`, notifications.ApplyTask(id).ID()).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}

	n := receive("evt_capture", "payment_intent.succeeded", "pi_capturing")
	if n.Outcome != notifications.OutcomeReceived || outboxRows(n.ID) != 1 {
		t.Fatalf("stored: outcome %s, outbox rows %d; want received, 1", n.Outcome, outboxRows(n.ID))
	}
	if err := applier.Apply(ctx, n.ID); err != nil {
		t.Fatal(err)
	}
	if s := state(); s != asynq.TaskStatePending {
		t.Errorf("the capture's task after the notification: %v, want pending (run now)", s)
	}
	if o, c := outcome(n.ID); o != notifications.OutcomeApplied || c == nil || *c != capturing {
		t.Errorf("applied notification: outcome %s, charge %v; want applied, %s", o, c, capturing)
	}
	if outboxRows(n.ID) != 0 {
		t.Errorf("the applied notification's outbox row is still there")
	}
	// Applied again (its task ran twice): nothing changes.
	if err := applier.Apply(ctx, n.ID); err != nil {
		t.Fatal(err)
	}
	if o, _ := outcome(n.ID); o != notifications.OutcomeApplied {
		t.Errorf("applied twice: outcome %s", o)
	}
	// Resent by the provider: stored as a duplicate, with no task.
	if d := receive("evt_capture", "payment_intent.succeeded", "pi_capturing"); d.Outcome != notifications.OutcomeDuplicate || outboxRows(d.ID) != 0 {
		t.Errorf("resent: outcome %s, outbox rows %d; want duplicate, 0", d.Outcome, outboxRows(d.ID))
	}

	for _, c := range []struct {
		event, typ, pi, want string
		charge               *string
	}{
		{"evt_settled", "payment_intent.succeeded", "pi_settled", notifications.OutcomeDuplicate, &settled},
		{"evt_unknown", "payment_intent.succeeded", "pi_nobody", notifications.OutcomeIgnored, nil},
		{"evt_customer", "customer.created", "pi_capturing", notifications.OutcomeIgnored, nil},
		{"evt_dispute", "charge.dispute.created", "pi_capturing", notifications.OutcomeIgnored, nil},
	} {
		n := receive(c.event, c.typ, c.pi)
		if err := applier.Apply(ctx, n.ID); err != nil {
			t.Fatal(err)
		}
		o, charge := outcome(n.ID)
		if o != c.want || (charge == nil) != (c.charge == nil) || (charge != nil && *charge != *c.charge) {
			t.Errorf("%s (%s): outcome %s, charge %v; want %s, %v", c.event, c.typ, o, charge, c.want, c.charge)
		}
	}
	// Retention deletes what the worker is done with, never what waits.
	waiting := receive("evt_waiting", "payment_intent.succeeded", "pi_capturing")
	pruned, err := st.PruneNotifications(ctx, time.Now().Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	var left []string
	if err := db.Pool.QueryRow(ctx, `SELECT array_agg(id::text) FROM provider_notifications`).Scan(&left); err != nil {
		t.Fatal(err)
	}
	if pruned != 6 || len(left) != 1 || left[0] != waiting.ID {
		t.Errorf("retention: pruned %d (want 6), left %v (want only %s, still received)", pruned, left, waiting.ID)
	}
	for outcome, want := range map[string]float64{"applied": 1, "duplicate": 1, "ignored": 3} {
		if got := testutil.ToFloat64(m.Notifications.WithLabelValues("stripe", outcome)); got != want {
			t.Errorf("gatehouse_provider_notifications_total{outcome=%q}: %v, want %v", outcome, got, want)
		}
	}
}

// adyenSet is one set of charges in every state an Adyen notification
// settles, and the notifications that settle them.
type adyenSet struct {
	charges map[string]string // name -> charge id
	refunds map[string]string // name -> refund id
	items   []adyen.NotificationItem
}

// newAdyenSet inserts, under prefix, a capturing charge that will be
// captured in part, one whose capture will fail, a voiding one, a captured
// one with a refund that will succeed and one with a refund that will
// fail, and an authorized one whose capture call is still out (its
// notification comes first).
func newAdyenSet(t *testing.T, exec func(string, ...any), prefix string) adyenSet {
	t.Helper()
	s := adyenSet{charges: map[string]string{}, refunds: map[string]string{}}
	charge := func(name, status string, action *string, captured, held int64) string {
		id := uuid.NewString()
		exec(`INSERT INTO charges (id, merchant_id, environment, amount, amount_captured, amount_refund_held, capture_amount, currency, status,
				pending_action, payment_method, capture, card_brand, provider, provider_reference, connector_id, created_at, updated_at)
			VALUES ($1, 'mer_adyen', 'sandbox', 2000, $2, $3, CASE WHEN $4 IN ('capturing', 'authorized') THEN 1500 END, 'EUR', $4,
				$5, 'card', false, 'visa', 'adyen', $6, 'conn_adyen', now(), now())`, id, captured, held, status, action, prefix+name)
		s.charges[name] = id
		return id
	}
	refund := func(name, chargeID string) {
		id := uuid.NewString()
		exec(`INSERT INTO refunds (id, merchant_id, charge_id, amount, currency, status, created_at, updated_at)
			VALUES ($1, 'mer_adyen', $2, 500, 'EUR', 'pending', now(), now())`, id, chargeID)
		s.refunds[name] = id
	}
	capture := charges.ActionCapture
	charge("capture", "capturing", nil, 0, 0)
	charge("capture-fails", "capturing", nil, 0, 0)
	charge("void", "voiding", nil, 0, 0)
	refund("refund", charge("refunded", "captured", nil, 2000, 500))
	refund("refund-fails", charge("refund-fails", "captured", nil, 2000, 500))
	charge("early", "authorized", &capture, 0, 0)
	item := func(code, charge, psp, merchantRef string, success bool, amount int64) {
		s.items = append(s.items, adyen.NotificationItem{EventCode: code, OriginalReference: prefix + charge, PSPReference: prefix + psp,
			MerchantAccountCode: "GatehouseECOM", MerchantReference: merchantRef, Success: fmt.Sprint(success),
			Amount: adyen.Amount{Value: amount, Currency: "EUR"}})
	}
	item("CAPTURE", "capture", "cap1", "", true, 1500)
	item("CAPTURE_FAILED", "capture-fails", "cap2", "", true, 1500)
	item("CANCELLATION", "void", "can1", "", true, 0)
	item("REFUND", "refunded", "ref1", s.refunds["refund"], true, 500)
	item("REFUND_FAILED", "refund-fails", "ref2", s.refunds["refund-fails"], true, 500)
	item("CAPTURE", "early", "cap3", "", true, 1500)
	// AUTHORISATION names the payment itself: of a charge the gateway
	// holds, it repeats what the payment's answer said; of another, it is
	// about nothing the gateway holds.
	for _, psp := range []string{"refunded", "nobody"} {
		s.items = append(s.items, adyen.NotificationItem{EventCode: "AUTHORISATION", PSPReference: prefix + psp, MerchantAccountCode: "GatehouseECOM",
			MerchantReference: "gh_" + prefix + psp + "_authorize", Success: "true", Amount: adyen.Amount{Value: 2000, Currency: "EUR"}})
	}
	return s
}

// TestAdyenNotificationsSettleOnceInAnyOrder: Adyen's notifications settle
// what Adyen received (captures, a failed capture, a cancel, refunds, a
// capture whose notification comes before the call's answer), and a set of
// them delivered twice each, in a shuffled order, ends exactly as the same
// set delivered once in order: statuses, amounts, failure codes, events.
func TestAdyenNotificationsSettleOnceInAnyOrder(t *testing.T) {
	db := testenv.NewDB(t)
	st := store.New(db.Pool)
	ctx := context.Background()
	exec := dbExec(t, db)
	exec(`INSERT INTO merchants (id, email, name, password_hash) VALUES ('mer_adyen', 'adyen@example.com', 'n', 'h')`)
	exec(`INSERT INTO connectors (id, merchant_id, provider, name, credentials_sealed, created_at, updated_at)
		VALUES ('conn_adyen', 'mer_adyen', 'adyen', 'Adyen', '\x00'::bytea, now(), now())`)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	cp := charges.NewProcessor(st, providers.Registry{}, nil, time.Second, time.Now, log, nil)
	rp := refunds.NewProcessor(st, providers.Registry{}, time.Second, time.Now, log, nil)
	m := notifications.NewMetrics(prometheus.NewRegistry())
	applier := notifications.NewApplier(st, nil, m, log, time.Now).WithConfirmers(cp, rp)
	deliver := func(item adyen.NotificationItem) {
		t.Helper()
		payload, err := json.Marshal(item)
		if err != nil {
			t.Fatal(err)
		}
		ns, err := st.ReceiveNotifications(ctx, []notifications.Notification{{ID: uuid.NewString(), ConnectorID: "conn_adyen",
			MerchantID: "mer_adyen", Provider: "adyen", ProviderEventID: item.PSPReference, DedupKey: adyen.DedupKey(item),
			Type: item.EventCode, Payload: payload, ReceivedAt: time.Now()}})
		if err != nil {
			t.Fatal(err)
		}
		// The task may run twice: the second run changes nothing.
		for range 2 {
			if err := applier.Apply(ctx, ns[0].ID); err != nil {
				t.Fatalf("%s %s: %v", item.EventCode, item.OriginalReference, err)
			}
		}
	}

	inOrder := newAdyenSet(t, exec, "A-")
	for _, item := range inOrder.items {
		deliver(item)
	}
	twice := newAdyenSet(t, exec, "B-")
	items := append(slices.Clone(twice.items), twice.items...)
	rand.New(rand.NewPCG(7, 43)).Shuffle(len(items), func(i, j int) { items[i], items[j] = items[j], items[i] })
	for _, item := range items {
		deliver(item)
	}

	type chargeState struct {
		Status                   string
		Captured, Refunded, Held int64
		Failure, Pending         string
		Events                   string
	}
	state := func(id string) chargeState {
		t.Helper()
		var s chargeState
		if err := db.Pool.QueryRow(ctx, `SELECT status, amount_captured, amount_refunded, amount_refund_held, coalesce(failure_code, ''), coalesce(pending_action, ''),
			coalesce((SELECT string_agg(type, ',' ORDER BY type) FROM events WHERE charge_id = charges.id), '')
			FROM charges WHERE id = $1`, id).Scan(&s.Status, &s.Captured, &s.Refunded, &s.Held, &s.Failure, &s.Pending, &s.Events); err != nil {
			t.Fatal(err)
		}
		return s
	}
	refundState := func(id string) string {
		t.Helper()
		var status string
		var failure *string
		if err := db.Pool.QueryRow(ctx, `SELECT status, failure_code FROM refunds WHERE id = $1`, id).Scan(&status, &failure); err != nil {
			t.Fatal(err)
		}
		if failure != nil {
			return status + "/" + *failure
		}
		return status
	}
	want := map[string]string{
		"capture": "captured 1500", "capture-fails": "authorized capture_failed", "void": "voided",
		"refunded": "captured 2000 refunded 500", "refund-fails": "captured 2000", "early": "captured 1500",
	}
	for name, id := range inOrder.charges {
		a, b := state(id), state(twice.charges[name])
		if fmt.Sprint(a) != fmt.Sprint(b) {
			t.Errorf("%s: delivered in order %+v, twice and shuffled %+v", name, a, b)
		}
		got := a.Status
		if a.Captured > 0 {
			got += fmt.Sprintf(" %d", a.Captured)
		}
		if a.Refunded > 0 {
			got += fmt.Sprintf(" refunded %d", a.Refunded)
		}
		if a.Failure != "" {
			got += " " + a.Failure
		}
		if got != want[name] || a.Held != 0 || a.Pending != "" {
			t.Errorf("%s: %+v, want %s with nothing held or pending", name, a, want[name])
		}
	}
	if e := state(inOrder.charges["capture-fails"]).Events; e != "charge.capture_failed" {
		t.Errorf("the failed capture's events: %q, want charge.capture_failed", e)
	}
	if e := state(inOrder.charges["capture"]).Events; e != "charge.captured" {
		t.Errorf("the capture's events: %q, want charge.captured once", e)
	}
	if e := state(inOrder.charges["refunded"]).Events; e != "refund.succeeded" {
		t.Errorf("the refund's events: %q, want refund.succeeded once", e)
	}
	for name, id := range inOrder.refunds {
		if a, b := refundState(id), refundState(twice.refunds[name]); a != b {
			t.Errorf("refund %s: in order %s, twice and shuffled %s", name, a, b)
		}
	}
	if got := refundState(inOrder.refunds["refund"]); got != "succeeded" {
		t.Errorf("the refund: %s, want succeeded", got)
	}
	if got := refundState(inOrder.refunds["refund-fails"]); got != "failed/refund_failed" {
		t.Errorf("the failed refund: %s, want failed/refund_failed", got)
	}
	// Twelve notifications applied (six a set), six duplicates delivered.
	applied := testutil.ToFloat64(m.Notifications.WithLabelValues("adyen", "applied"))
	if applied != 12 {
		t.Errorf("applied notifications: %v, want 12", applied)
	}
	// The AUTHORISATIONs: a duplicate of the payment's answer, or ignored.
	for _, set := range []adyenSet{inOrder, twice} {
		for psp, want := range map[string]string{"refunded": "duplicate " + set.charges["refunded"], "nobody": "ignored "} {
			var outcome, charge string
			if err := db.Pool.QueryRow(ctx, `SELECT outcome, coalesce(charge_id::text, '') FROM provider_notifications
				WHERE type = 'AUTHORISATION' AND provider_event_id = $1 ORDER BY received_at LIMIT 1`, set.items[len(set.items)-1].PSPReference[:2]+psp).Scan(&outcome, &charge); err != nil {
				t.Fatal(err)
			}
			if got := outcome + " " + charge; got != want {
				t.Errorf("AUTHORISATION of %s: %s, want %s", psp, got, want)
			}
		}
	}
}

// dbExec returns a function that runs one statement on db, failing the
// test on an error.
func dbExec(t *testing.T, db testenv.DB) func(sql string, args ...any) {
	return func(sql string, args ...any) {
		t.Helper()
		if _, err := db.Pool.Exec(context.Background(), sql, args...); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
}
