package jobs_test

import (
	"context"
	"testing"
	"time"

	"github.com/hibiken/asynq"

	"github.com/gatehouse-pay/gatehouse/internal/config"
	"github.com/gatehouse-pay/gatehouse/internal/ids"
	"github.com/gatehouse-pay/gatehouse/internal/jobs"
	"github.com/gatehouse-pay/gatehouse/internal/outbox"
	"github.com/gatehouse-pay/gatehouse/internal/testenv"
)

// The attempts of charge:reverse cover ReverseWindow with the provider
// backoff, and not one more; a backoff too short to fill it is bounded.
func TestReverseAttemptsCoverTheWindow(t *testing.T) {
	for _, c := range []struct{ base, limit time.Duration }{
		{2 * time.Second, 5 * time.Minute}, // the defaults
		{time.Second, time.Hour},
		{time.Minute, 10 * time.Minute},
	} {
		n := jobs.ReverseAttempts(c.base, c.limit)
		var waits time.Duration // the waits between the n attempts
		for i := 1; i < n; i++ {
			waits += jobs.Backoff(i, c.base, c.limit)
		}
		last := jobs.Backoff(n-1, c.base, c.limit)
		if waits < jobs.ReverseWindow || waits-last >= jobs.ReverseWindow {
			t.Errorf("base %v limit %v: %d attempts span %v, want the first span of at least %v", c.base, c.limit, n, waits, jobs.ReverseWindow)
		}
	}
	if n := jobs.ReverseAttempts(time.Millisecond, time.Millisecond); n != 10000 {
		t.Errorf("1 ms backoff: %d attempts, want the bound 10000", n)
	}
}

// A charge:reverse task goes to the critical queue with the attempts of
// ReverseAttempts and its id as the outbox row's.
func TestReverseTaskOptions(t *testing.T) {
	testenv.NewRedis(t, testenv.RedisDBJobs)
	redisOpt, err := asynq.ParseRedisURI(testenv.RedisURLFor(testenv.RedisDBJobs))
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(func(string) string { return "" }, config.Needs{})
	if err != nil {
		t.Fatal(err)
	}
	client := asynq.NewClient(redisOpt)
	defer client.Close()
	inspector := asynq.NewInspector(redisOpt)
	defer inspector.Close()
	task := outbox.Task{Type: outbox.ChargeReverse, RefID: ids.NewUUID()}
	if err := jobs.NewQueue(client, inspector, cfg).Enqueue(context.Background(), task); err != nil {
		t.Fatal(err)
	}
	info, err := inspector.GetTaskInfo("critical", task.ID())
	if err != nil {
		t.Fatalf("charge:reverse not in the critical queue: %v", err)
	}
	if want := jobs.ReverseAttempts(cfg.ProviderRetryBase, cfg.ProviderRetryMax) - 1; info.MaxRetry != want {
		t.Errorf("max retry %d, want %d", info.MaxRetry, want)
	}
	if info.Timeout != 2*cfg.ProviderTimeout+30*time.Second {
		t.Errorf("timeout %v, want two provider calls and a margin", info.Timeout)
	}
}
