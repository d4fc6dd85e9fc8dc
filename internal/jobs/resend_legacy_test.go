package jobs_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/gatehouse-pay/gatehouse/internal/config"
	"github.com/gatehouse-pay/gatehouse/internal/jobs"
	"github.com/gatehouse-pay/gatehouse/internal/outbox"
	"github.com/gatehouse-pay/gatehouse/internal/testenv"
	"github.com/gatehouse-pay/gatehouse/internal/webhooks"
)

// TestResendRoutesDeliveriesAndMindsTheLegacyQueue: the sweeper enqueues a
// delivery on its endpoint's queue, not a second time while the previous
// release's task for it still waits in the legacy webhooks queue, and in
// place of one archived there.
func TestResendRoutesDeliveriesAndMindsTheLegacyQueue(t *testing.T) {
	testenv.NewRedis(t, testenv.RedisDBJobs)
	opt, err := asynq.ParseRedisURI(testenv.RedisURLFor(testenv.RedisDBJobs))
	if err != nil {
		t.Fatal(err)
	}
	rdb := opt.MakeRedisClient().(redis.UniversalClient)
	t.Cleanup(func() { rdb.Close() })
	cfg, err := config.Load(func(string) string { return "" }, config.Needs{})
	if err != nil {
		t.Fatal(err)
	}
	client, in := asynq.NewClientFromRedisClient(rdb), asynq.NewInspectorFromRedisClient(rdb)
	q := jobs.NewQueue(client, in, cfg)
	ctx := context.Background()

	const endpoint = "0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b"
	home := jobs.WebhookQueue(endpoint, cfg.WebhookQueues)
	// As the previous release enqueued a delivery: on "webhooks", the
	// same task id and payload.
	legacy := func(id string) {
		t.Helper()
		body, _ := json.Marshal(map[string]string{"id": id})
		if _, err := client.Enqueue(asynq.NewTask(jobs.TypeWebhookDeliver, body), asynq.Queue(jobs.LegacyWebhookQueue),
			asynq.TaskID(webhooks.Task(id).ID())); err != nil {
			t.Fatal(err)
		}
	}
	stateIn := func(queue string, task outbox.Task) (asynq.TaskState, bool) {
		info, err := in.GetTaskInfo(queue, task.QueueID())
		if err != nil {
			return 0, false
		}
		return info.State, true
	}

	waiting := webhooks.TaskTo("0190a1b2-0000-7000-8000-000000000001", endpoint)
	archived := webhooks.TaskTo("0190a1b2-0000-7000-8000-000000000002", endpoint)
	fresh := webhooks.TaskTo("0190a1b2-0000-7000-8000-000000000003", endpoint)
	legacy(waiting.RefID)
	legacy(archived.RefID)
	if err := in.ArchiveTask(jobs.LegacyWebhookQueue, archived.QueueID()); err != nil {
		t.Fatal(err)
	}
	if err := q.Resend(ctx, []outbox.Task{waiting, archived, fresh}); err != nil {
		t.Fatal(err)
	}
	if _, ok := stateIn(home, waiting); ok {
		t.Errorf("a delivery waiting in the legacy queue was enqueued again on %s", home)
	}
	if st, ok := stateIn(jobs.LegacyWebhookQueue, waiting); !ok || st != asynq.TaskStatePending {
		t.Errorf("the legacy task of a waiting delivery: %v %t, want it left pending", st, ok)
	}
	if _, ok := stateIn(jobs.LegacyWebhookQueue, archived); ok {
		t.Errorf("the archived legacy task is still there")
	}
	for _, task := range []outbox.Task{archived, fresh} {
		if st, ok := stateIn(home, task); !ok || st != asynq.TaskStatePending {
			t.Errorf("delivery %s on its endpoint's queue %s: %v %t, want pending", task.RefID, home, st, ok)
		}
	}
}
