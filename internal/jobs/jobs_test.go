package jobs_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"

	"github.com/gatehouse-pay/gatehouse/internal/apperr"
	"github.com/gatehouse-pay/gatehouse/internal/auth"
	"github.com/gatehouse-pay/gatehouse/internal/cache"
	"github.com/gatehouse-pay/gatehouse/internal/config"
	"github.com/gatehouse-pay/gatehouse/internal/ids"
	"github.com/gatehouse-pay/gatehouse/internal/jobs"
	"github.com/gatehouse-pay/gatehouse/internal/merchants"
	"github.com/gatehouse-pay/gatehouse/internal/metrics"
	"github.com/gatehouse-pay/gatehouse/internal/store"
	"github.com/gatehouse-pay/gatehouse/internal/testenv"
)

// The prune task goes through a real asynq server on real Redis and deletes
// only sessions that expired more than a day ago; a second enqueue within the
// period is refused as a duplicate.
func TestSessionsPruneRunsThroughTheQueue(t *testing.T) {
	db := testenv.NewDB(t)
	rdb := testenv.NewRedis(t, testenv.RedisDBJobs)
	st := store.New(db.Pool)
	ctx := context.Background()
	m := merchants.Merchant{ID: ids.New("mer"), Email: "a@example.com", Name: "a", PasswordHash: "x", CreatedAt: time.Now()}
	if err := st.CreateMerchant(ctx, m); err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC()
	stale := auth.Session{ID: ids.New("ses"), MerchantID: m.ID, CreatedAt: now.Add(-72 * time.Hour), ExpiresAt: now.Add(-48 * time.Hour)}
	recent := auth.Session{ID: ids.New("ses"), MerchantID: m.ID, CreatedAt: now.Add(-30 * time.Hour), ExpiresAt: now.Add(-6 * time.Hour)}
	for _, s := range []auth.Session{stale, recent} {
		if err := st.CreateSession(ctx, s); err != nil {
			t.Fatal(err)
		}
	}

	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	reg := prometheus.NewRegistry()
	h := &jobs.Handlers{Auth: auth.NewService(nil, st, cache.New(rdb), nil, nil, time.Now, log), Log: log, Metrics: metrics.NewJobs(reg)}
	redisOpt, err := asynq.ParseRedisURI(testenv.RedisURLFor(testenv.RedisDBJobs))
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(func(string) string { return "" }, config.Needs{})
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
	if _, err := client.Enqueue(jobs.NewSessionsPruneTask()); err != nil {
		t.Fatal(err)
	}
	if _, err := client.Enqueue(jobs.NewSessionsPruneTask()); !errors.Is(err, asynq.ErrDuplicateTask) {
		t.Fatalf("second enqueue in the period: %v, want ErrDuplicateTask", err)
	}

	deadline := time.Now().Add(30 * time.Second)
	for testutil.ToFloat64(h.Metrics.Processed.WithLabelValues(jobs.TypeSessionsPrune, "ok")) < 1 {
		if time.Now().After(deadline) {
			t.Fatal("the prune task was not processed within 30 s")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if _, err := st.SessionByID(ctx, stale.ID); apperr.KindOf(err) != apperr.KindNotFound {
		t.Fatalf("stale session: %v, want pruned", err)
	}
	if _, err := st.SessionByID(ctx, recent.ID); err != nil {
		t.Fatalf("recently expired session was pruned: %v", err)
	}
}
