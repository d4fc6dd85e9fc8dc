package jobs_test

import (
	"context"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/gatehouse-pay/gatehouse/internal/outbox"
	"github.com/gatehouse-pay/gatehouse/internal/testenv"
)

// TestLeaseExpiredKeepsRetryCount: a task whose worker died and that
// asynq's own lease recovery puts back (its recoverer, which runs as a
// server starts and then every minute) keeps its retry count: a lost lease
// is not the task's failure. The task here was taken by a worker that is
// gone with no claim of Recovery's (a worker without it, or one found dead
// too late): it is active, its lease ran out a minute ago. A server with the
// worker's configuration starts and its recoverer moves the task to retry.
func TestLeaseExpiredKeepsRetryCount(t *testing.T) {
	rdb := testenv.NewRedis(t, testenv.RedisDBJobs)
	ctx := context.Background()
	const queue, id = "lease-test", "lost"
	client := asynq.NewClientFromRedisClient(rdb)
	if _, err := client.Enqueue(asynq.NewTask(outbox.WebhookDeliver, []byte(`{}`)), asynq.Queue(queue), asynq.TaskID(id), asynq.MaxRetry(5)); err != nil {
		t.Fatal(err)
	}
	// What asynq's dequeue leaves for a worker that then died: the task
	// active, under a lease its heartbeat no longer renews.
	key := func(name string) string { return "asynq:{" + queue + "}:" + name }
	if _, err := rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.LRem(ctx, key("pending"), 0, id)
		p.LPush(ctx, key("active"), id)
		p.ZAdd(ctx, key("lease"), redis.Z{Score: float64(time.Now().Add(-time.Minute).Unix()), Member: id})
		p.HSet(ctx, key("t:"+id), "state", "active")
		return nil
	}); err != nil {
		t.Fatal(err)
	}

	sc, _ := defaultServerConfig(t)
	sc.Queues = map[string]int{queue: 1}
	sc.LogLevel = asynq.FatalLevel
	srv := asynq.NewServerFromRedisClient(rdb, sc)
	if err := srv.Start(asynq.HandlerFunc(func(context.Context, *asynq.Task) error { return nil })); err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown()

	inspector := asynq.NewInspectorFromRedisClient(rdb)
	deadline := time.Now().Add(30 * time.Second)
	for {
		info, err := inspector.GetTaskInfo(queue, id)
		if err != nil {
			t.Fatal(err)
		}
		if info.State == asynq.TaskStateRetry {
			if info.Retried != 0 || info.LastErr != asynq.ErrLeaseExpired.Error() {
				t.Fatalf("put back by asynq's recoverer: retried %d, last error %q; want 0 and %q", info.Retried, info.LastErr, asynq.ErrLeaseExpired)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the task is %s 30 s after the server started, want retry (its lease expired)", info.State)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
