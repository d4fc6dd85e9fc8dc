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
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"

	"github.com/gatehouse-pay/gatehouse/internal/charges"
	"github.com/gatehouse-pay/gatehouse/internal/config"
	"github.com/gatehouse-pay/gatehouse/internal/jobs"
	"github.com/gatehouse-pay/gatehouse/internal/metrics"
	"github.com/gatehouse-pay/gatehouse/internal/outbox"
	"github.com/gatehouse-pay/gatehouse/internal/providers"
	"github.com/gatehouse-pay/gatehouse/internal/providers/sandbox"
	"github.com/gatehouse-pay/gatehouse/internal/store"
	"github.com/gatehouse-pay/gatehouse/internal/testenv"
)

// Through a real asynq server on real Redis and the real store: an
// authorization whose merchant holds its one provider slot is put back,
// under its own task id, without a call, a write or a retry counted, even
// on its last attempt (PROVIDER_MAX_ATTEMPTS=1), which asynq would give up
// had it no retry in reserve; another merchant's authorization runs
// meanwhile; once the slot is free the task authorizes the charge with one
// provider call.
func TestPutBackIsNotAnAttempt(t *testing.T) {
	db := testenv.NewDB(t)
	testenv.NewRedis(t, testenv.RedisDBJobs)
	st := store.New(db.Pool)
	ctx := context.Background()
	exec := func(sql string, args ...any) {
		t.Helper()
		if _, err := db.Pool.Exec(ctx, sql, args...); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	insertCharge := func(merchant string) string {
		id := uuid.NewString()
		exec(`INSERT INTO charges (id, merchant_id, environment, amount, currency, status, payment_method, capture, card_brand, card_token,
				provider, created_at, updated_at)
			VALUES ($1, $2, 'sandbox', 1500, 'USD', 'created', 'card', true, 'visa', 'tok_visa', 'sandbox', now(), now())`, id, merchant)
		exec(`INSERT INTO outbox (task_id, task_type, ref_id) VALUES ($1, $2, $3)`, outbox.ChargeAuthorize+":"+id, outbox.ChargeAuthorize, id)
		return id
	}
	for _, m := range []string{"mer_busy", "mer_free"} {
		exec(`INSERT INTO merchants (id, email, name, password_hash) VALUES ($1, $1 || '@example.com', 'n', 'h')`, m)
	}
	busy, free := insertCharge("mer_busy"), insertCharge("mer_free")

	cfg, err := config.Load(func(k string) string {
		return map[string]string{"PROVIDER_MAX_ATTEMPTS": "1"}[k]
	}, config.Needs{})
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	slots := providers.NewMerchantSlots(1, time.Now)
	hold, err := slots.Take(ctx, "mer_busy") // a slow call of the merchant's, under way
	if err != nil {
		t.Fatal(err)
	}
	h := &jobs.Handlers{
		Charges: charges.NewProcessor(st, registryOf(sandbox.New(st.SandboxLedger(), sandbox.Options{})), nil, time.Second, time.Now, log, nil).WithSlots(slots),
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
	inspector := asynq.NewInspector(redisOpt)
	defer inspector.Close()
	q := jobs.NewQueue(client, inspector, cfg)
	for _, id := range []string{busy, free} {
		if err := q.Enqueue(ctx, outbox.Task{Type: outbox.ChargeAuthorize, RefID: id}); err != nil {
			t.Fatal(err)
		}
	}
	status := func(id string) (s string, calls int64) {
		t.Helper()
		if err := db.Pool.QueryRow(ctx, `SELECT c.status, coalesce(l.calls, 0) FROM charges c
			LEFT JOIN sandbox_ledger l ON l.idempotency_key = 'gh_' || c.id::text || '_authorize' WHERE c.id = $1`, id).Scan(&s, &calls); err != nil {
			t.Fatal(err)
		}
		return s, calls
	}
	putBacks := func() float64 {
		return testutil.ToFloat64(h.Metrics.PutBacks.WithLabelValues(providers.PutBackMerchantSlow))
	}
	waitFor := func(what string, ok func() bool) {
		t.Helper()
		for deadline := time.Now().Add(20 * time.Second); !ok(); time.Sleep(20 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%s: not within 20 s", what)
			}
		}
	}
	waitFor("the free merchant's charge captured", func() bool { s, _ := status(free); return s == charges.StatusCaptured })
	waitFor("the busy merchant's task put back twice", func() bool { return putBacks() >= 2 })
	if s, calls := status(busy); s != charges.StatusCreated || calls != 0 {
		t.Fatalf("busy merchant's charge while put back: %s with %d calls, want created with none", s, calls)
	}
	var attempts int
	if err := db.Pool.QueryRow(ctx, `SELECT coalesce(jsonb_array_length(attempts), 0) FROM charges WHERE id = $1`, busy).Scan(&attempts); err != nil {
		t.Fatal(err)
	}
	if attempts != 0 {
		t.Fatalf("busy merchant's charge has %d attempts recorded while put back, want none", attempts)
	}
	info, err := inspector.GetTaskInfo("critical", outbox.ChargeAuthorize+":"+busy)
	if err != nil {
		t.Fatalf("the put-back task under its own id: %v", err)
	}
	if info.Retried != 0 || info.State == asynq.TaskStateArchived || info.MaxRetry != cfg.ProviderMaxAttempts {
		t.Fatalf("put-back task: state %s, retried %d, max retry %d; want not archived, 0 retries, max retry %d",
			info.State, info.Retried, info.MaxRetry, cfg.ProviderMaxAttempts)
	}

	hold()
	waitFor("the busy merchant's charge captured once its slot is free", func() bool { s, _ := status(busy); return s == charges.StatusCaptured })
	if _, calls := status(busy); calls != 1 {
		t.Fatalf("busy merchant's charge: %d provider calls, want 1", calls)
	}
}
