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
// backoff even when every wait is drawn at its shortest jitter, and not one
// more; a backoff too short to fill it is bounded.
func TestReverseAttemptsCoverTheWindow(t *testing.T) {
	for _, c := range []struct{ base, limit time.Duration }{
		{2 * time.Second, 5 * time.Minute}, // the defaults
		{time.Second, time.Hour},
		{time.Minute, 10 * time.Minute},
	} {
		n := jobs.ReverseAttempts(c.base, c.limit)
		var waits time.Duration // the waits between the n attempts
		for i := 1; i < n; i++ {
			waits += jobs.MinJittered(jobs.Backoff(i, c.base, c.limit))
		}
		last := jobs.MinJittered(jobs.Backoff(n-1, c.base, c.limit))
		if waits < jobs.ReverseWindow || waits-last >= jobs.ReverseWindow {
			t.Errorf("base %v limit %v: %d attempts span %v, want the first span of at least %v", c.base, c.limit, n, waits, jobs.ReverseWindow)
		}
	}
	if n := jobs.ReverseAttempts(time.Millisecond, time.Millisecond); n != 10000 {
		t.Errorf("1 ms backoff: %d attempts, want the bound 10000", n)
	}
}

// The tasks whose outcome may be unknown while money may have moved
// (charge:reverse, charge:capture, refund:process) go to the critical queue
// with the attempts of ReverseAttempts and their id as the outbox row's; the
// others keep PROVIDER_MAX_ATTEMPTS; each has one retry in reserve.
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
	// One retry more than the attempts: the reserve a put-back of the last
	// attempt needs (see jobs.Queue.NewTask).
	window := jobs.ReverseAttempts(cfg.ProviderRetryBase, cfg.ProviderRetryMax)
	for _, c := range []struct {
		typ      string
		maxRetry int
		timeout  time.Duration
	}{
		{outbox.ChargeReverse, window, 2*cfg.ProviderTimeout + 30*time.Second},
		{outbox.ChargeCapture, window, 2*cfg.ProviderTimeout + 30*time.Second},
		{outbox.RefundProcess, window, 2*cfg.ProviderTimeout + 30*time.Second},
		{outbox.ChargeAuthorize, cfg.ProviderMaxAttempts, cfg.ProviderTimeout + 30*time.Second},
		{outbox.ChargeVoid, cfg.ProviderMaxAttempts, cfg.ProviderTimeout + 30*time.Second},
	} {
		task := outbox.Task{Type: c.typ, RefID: ids.NewUUID()}
		if err := jobs.NewQueue(client, inspector, cfg).Enqueue(context.Background(), task); err != nil {
			t.Fatal(err)
		}
		info, err := inspector.GetTaskInfo("critical", task.ID())
		if err != nil {
			t.Fatalf("%s not in the critical queue: %v", c.typ, err)
		}
		if info.MaxRetry != c.maxRetry {
			t.Errorf("%s: max retry %d, want %d", c.typ, info.MaxRetry, c.maxRetry)
		}
		if info.Timeout != c.timeout {
			t.Errorf("%s: timeout %v, want %v", c.typ, info.Timeout, c.timeout)
		}
	}
}
