package jobs_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/gatehouse-pay/gatehouse/internal/config"
	"github.com/gatehouse-pay/gatehouse/internal/jobs"
	"github.com/gatehouse-pay/gatehouse/internal/testenv"
	"github.com/gatehouse-pay/gatehouse/internal/webhooks"
)

// TestDeliveryPoolServesEveryDeliveryQueue: a worker's servers, with the
// claims of Recovery around their dequeues, take deliveries from each of
// the WEBHOOK_QUEUES queues, from the legacy webhooks queue (where the
// previous release's API enqueues) and from a queue of a larger setting
// that Redis still knows, including tasks pushed while the queues sat
// empty.
func TestDeliveryPoolServesEveryDeliveryQueue(t *testing.T) {
	testenv.NewRedis(t, testenv.RedisDBJobs)
	opt, err := asynq.ParseRedisURI(testenv.RedisURLFor(testenv.RedisDBJobs))
	if err != nil {
		t.Fatal(err)
	}
	newClient := func() redis.UniversalClient {
		c := opt.MakeRedisClient().(redis.UniversalClient)
		t.Cleanup(func() { c.Close() })
		return c
	}
	qrdb, lrdb := newClient(), newClient()
	cfg, err := config.Load(func(k string) string {
		if k == "WEBHOOK_QUEUES" {
			return "4"
		}
		return ""
	}, config.Needs{})
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	queues := jobs.DeliveryQueues(cfg.WebhookQueues, []string{"critical", "webhooks-6"})

	var mu sync.Mutex
	var served []string
	mux := asynq.NewServeMux()
	mux.HandleFunc(jobs.TypeWebhookDeliver, func(ctx context.Context, _ *asynq.Task) error {
		q, _ := asynq.GetQueueName(ctx)
		mu.Lock()
		served = append(served, q)
		mu.Unlock()
		return nil
	})
	recovery := jobs.NewRecovery(lrdb, log, jobs.QueueNames(queues))
	recovery.Watch(qrdb)
	recovery.Start()
	srv := jobs.NewServers(qrdb, log, cfg, queues)
	if err := srv.Start(recovery.Middleware(mux)); err != nil {
		t.Fatal(err)
	}
	defer recovery.Stop()
	defer srv.Shutdown()

	client := asynq.NewClientFromRedisClient(newClient())
	time.Sleep(300 * time.Millisecond) // the pool polls empty queues for a while
	want := []string{"webhooks", "webhooks-0", "webhooks-1", "webhooks-2", "webhooks-3", "webhooks-6"}
	for i, q := range want {
		body, _ := json.Marshal(map[string]string{"id": "0190a1b2-0000-7000-8000-00000000000" + string(rune('0'+i))})
		task := asynq.NewTask(jobs.TypeWebhookDeliver, body)
		if _, err := client.Enqueue(task, asynq.Queue(q), asynq.TaskID(webhooks.Task(q).ID())); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		mu.Lock()
		got := slices.Sorted(slices.Values(served))
		mu.Unlock()
		if slices.Equal(got, want) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("served deliveries from %v, want one from each of %v", got, want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
