package jobs_test

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/hibiken/asynq"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/gatehouse-pay/gatehouse/internal/charges"
	"github.com/gatehouse-pay/gatehouse/internal/config"
	"github.com/gatehouse-pay/gatehouse/internal/jobs"
	"github.com/gatehouse-pay/gatehouse/internal/metrics"
	"github.com/gatehouse-pay/gatehouse/internal/outbox"
	"github.com/gatehouse-pay/gatehouse/internal/providers"
	"github.com/gatehouse-pay/gatehouse/internal/providers/sandbox"
	"github.com/gatehouse-pay/gatehouse/internal/refunds"
	"github.com/gatehouse-pay/gatehouse/internal/store"
	"github.com/gatehouse-pay/gatehouse/internal/testenv"
)

// Through a real asynq server on real Redis and the real store: a refund and
// a capture whose answers are lost more often than PROVIDER_MAX_ATTEMPTS
// (the sandbox books each call and loses the answer of the first five) keep
// being sent under their one key by the same task, never fail, and end
// succeeded / captured with the provider's one booking once it answers.
func TestLostOutcomesOutlastProviderMaxAttempts(t *testing.T) {
	db := testenv.NewDB(t)
	testenv.NewRedis(t, testenv.RedisDBJobs)
	st := store.New(db.Pool)
	ctx := context.Background()
	const lose = 5
	sbx := sandbox.New(st.SandboxLedger(), sandbox.Options{LoseAnswer: func(op sandbox.Operation, calls int64) bool {
		return (op == sandbox.OpRefund || op == sandbox.OpCapture) && calls <= lose
	}})
	authorize := func(key string, capture bool) string {
		res, err := sbx.Authorize(ctx, providers.AuthorizeRequest{IdempotencyKey: key, Amount: 2000, Currency: "USD", Capture: capture, Card: providers.Card{Token: "tok_visa"}})
		if err != nil {
			t.Fatal(err)
		}
		return res.Reference
	}
	exec := func(sql string, args ...any) {
		t.Helper()
		if _, err := db.Pool.Exec(ctx, sql, args...); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	exec(`INSERT INTO merchants (id, email, name, password_hash) VALUES ('mer_jobs', 'jobs@example.com', 'n', 'h')`)
	insertCharge := func(status string, action *string, ref string) string {
		id := uuid.NewString()
		exec(`INSERT INTO charges (id, merchant_id, environment, amount, amount_captured, amount_refund_held, currency, status, pending_action,
				payment_method, capture, card_brand, provider, provider_reference, created_at, updated_at)
			VALUES ($1, 'mer_jobs', 'sandbox', 2000, CASE WHEN $2 = 'captured' THEN 2000 ELSE 0 END, CASE WHEN $2 = 'captured' THEN 700 ELSE 0 END,
				'USD', $2, $3, 'card', $2 = 'captured', 'visa', 'sandbox', $4, now(), now())`, id, status, action, ref)
		return id
	}
	captured := insertCharge("captured", nil, authorize("jobs-auth-1", true))
	refundID := uuid.NewString()
	exec(`INSERT INTO refunds (id, merchant_id, charge_id, amount, currency, status, created_at, updated_at)
		VALUES ($1, 'mer_jobs', $2, 700, 'USD', 'pending', now(), now())`, refundID, captured)
	capture := charges.ActionCapture
	authorized := insertCharge("authorized", &capture, authorize("jobs-auth-2", false))
	tasks := []outbox.Task{{Type: outbox.RefundProcess, RefID: refundID}, {Type: outbox.ChargeCapture, RefID: authorized}}
	for _, task := range tasks {
		exec(`INSERT INTO outbox (task_id, task_type, ref_id) VALUES ($1, $2, $3)`, task.ID(), task.Type, task.RefID)
	}

	cfg, err := config.Load(func(k string) string {
		return map[string]string{"PROVIDER_MAX_ATTEMPTS": "2", "PROVIDER_RETRY_BASE": "5ms", "PROVIDER_RETRY_MAX": "20ms"}[k]
	}, config.Needs{})
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	reg := registryOf(sbx)
	h := &jobs.Handlers{
		Charges: charges.NewProcessor(st, reg, nil, time.Second, time.Now, log, nil),
		Refunds: refunds.NewProcessor(st, reg, time.Second, time.Now, log, nil),
		Config:  cfg, Log: log, Metrics: metrics.NewJobs(prometheus.NewRegistry()),
	}
	redisOpt, err := asynq.ParseRedisURI(testenv.RedisURLFor(testenv.RedisDBJobs))
	if err != nil {
		t.Fatal(err)
	}
	qrdb := redisOpt.MakeRedisClient().(redis.UniversalClient)
	defer qrdb.Close()
	srv := jobs.NewServers(qrdb, log, cfg, jobs.DeliveryQueues(cfg.WebhookQueues, nil))
	if err := srv.Start(h.Mux()); err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown()
	client := asynq.NewClient(redisOpt)
	defer client.Close()
	q := jobs.NewQueue(client, nil, cfg)
	for _, task := range tasks {
		if err := q.Enqueue(ctx, task); err != nil {
			t.Fatal(err)
		}
	}

	var refundStatus, chargeStatus string
	var captureAmount int64
	for deadline := time.Now().Add(30 * time.Second); ; {
		if err := db.Pool.QueryRow(ctx, `SELECT r.status, c.status, c.amount_captured FROM refunds r, charges c WHERE r.id = $1 AND c.id = $2`,
			refundID, authorized).Scan(&refundStatus, &chargeStatus, &captureAmount); err != nil {
			t.Fatal(err)
		}
		if refundStatus != "pending" && chargeStatus != "authorized" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 30 s: refund %s, charge %s", refundStatus, chargeStatus)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if refundStatus != refunds.StatusSucceeded || chargeStatus != charges.StatusCaptured || captureAmount != 2000 {
		t.Errorf("refund %s, charge %s captured %d; want succeeded, captured 2000", refundStatus, chargeStatus, captureAmount)
	}
	for _, key := range []string{"gh_" + refundID + "_refund", "gh_" + authorized + "_capture"} {
		var calls int64
		var booked bool
		if err := db.Pool.QueryRow(ctx, `SELECT calls, reference IS NOT NULL FROM sandbox_ledger WHERE idempotency_key = $1`, key).Scan(&calls, &booked); err != nil {
			t.Fatal(err)
		}
		if calls != lose+1 || !booked {
			t.Errorf("%s: %d calls, booked %v; want %d calls under the one key", key, calls, booked, lose+1)
		}
	}
	var outboxLeft int
	if err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM outbox WHERE task_type <> 'webhook:deliver'`).Scan(&outboxLeft); err != nil {
		t.Fatal(err)
	}
	if outboxLeft != 0 {
		t.Errorf("outbox rows left: %d", outboxLeft)
	}
}

func registryOf(p providers.Provider) providers.Registry { return providers.Registry{p.Name(): p} }
