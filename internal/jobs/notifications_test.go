package jobs_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
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
	exec := func(sql string, args ...any) {
		t.Helper()
		if _, err := db.Pool.Exec(ctx, sql, args...); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
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
	for outcome, want := range map[string]float64{"applied": 1, "duplicate": 1, "ignored": 3} {
		if got := testutil.ToFloat64(m.Notifications.WithLabelValues("stripe", outcome)); got != want {
			t.Errorf("gatehouse_provider_notifications_total{outcome=%q}: %v, want %v", outcome, got, want)
		}
	}
}
