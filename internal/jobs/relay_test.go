package jobs_test

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/gatehouse-pay/gatehouse/internal/config"
	"github.com/gatehouse-pay/gatehouse/internal/jobs"
	"github.com/gatehouse-pay/gatehouse/internal/outbox"
	"github.com/gatehouse-pay/gatehouse/internal/testenv"
)

// relayQueue is a jobs.Queue on the jobs test Redis, and an inspector of it.
func relayQueue(t *testing.T, url string) (*jobs.Queue, *asynq.Inspector) {
	t.Helper()
	opt, err := asynq.ParseRedisURI(url)
	if err != nil {
		t.Fatal(err)
	}
	rdb := opt.MakeRedisClient().(redis.UniversalClient)
	t.Cleanup(func() { rdb.Close() })
	cfg, err := config.Load(func(string) string { return "" }, config.Needs{})
	if err != nil {
		t.Fatal(err)
	}
	return jobs.NewQueue(asynq.NewClientFromRedisClient(rdb), nil, cfg), asynq.NewInspectorFromRedisClient(rdb)
}

func queued(t *testing.T, in *asynq.Inspector, task outbox.Task) bool {
	t.Helper()
	_, err := in.GetTaskInfo("critical", task.ID())
	switch {
	case err == nil:
		return true
	case errors.Is(err, asynq.ErrTaskNotFound), errors.Is(err, asynq.ErrQueueNotFound):
		return false
	}
	t.Fatal(err)
	return false
}

// The relay enqueues every task it took, even for requests whose context
// ended as soon as they were answered, and Close waits for them; a full
// relay enqueues inline; after Close tasks are enqueued inline.
func TestRelayEnqueuesOffTheRequestPath(t *testing.T) {
	testenv.NewRedis(t, testenv.RedisDBJobs)
	q, in := relayQueue(t, testenv.RedisURLFor(testenv.RedisDBJobs))

	t.Run("every task reaches the queue", func(t *testing.T) {
		r := outbox.NewRelay(q, 4, 64, 5*time.Second, func(err error) { t.Errorf("enqueue failed: %v", err) })
		var tasks []outbox.Task
		var wg sync.WaitGroup
		for i := range 500 {
			task := outbox.Task{Type: outbox.ChargeAuthorize, RefID: "ch_relay" + strconv.Itoa(i)}
			tasks = append(tasks, task)
			wg.Add(1)
			go func() {
				defer wg.Done()
				ctx, cancel := context.WithCancel(context.Background())
				if err := r.Enqueue(ctx, task); err != nil {
					t.Error(err)
				}
				cancel() // the request is answered
			}()
		}
		wg.Wait()
		if err := r.Close(context.Background()); err != nil {
			t.Fatal(err)
		}
		for _, task := range tasks {
			if !queued(t, in, task) {
				t.Fatalf("%s not queued after Close", task.ID())
			}
		}
	})

	t.Run("full, then closed: inline", func(t *testing.T) {
		r := outbox.NewRelay(q, 0, 1, time.Second, nil) // no goroutine: the buffer stays full
		buffered := outbox.Task{Type: outbox.ChargeAuthorize, RefID: "ch_buffered"}
		inline := outbox.Task{Type: outbox.ChargeAuthorize, RefID: "ch_inline"}
		if err := r.Enqueue(context.Background(), buffered); err != nil {
			t.Fatal(err)
		}
		if err := r.Enqueue(context.Background(), inline); err != nil {
			t.Fatal(err)
		}
		if queued(t, in, buffered) || !queued(t, in, inline) || r.Waiting() != 1 {
			t.Fatalf("buffered queued=%v, inline queued=%v, waiting %d: want false, true, 1",
				queued(t, in, buffered), queued(t, in, inline), r.Waiting())
		}
		if err := r.Close(context.Background()); err != nil {
			t.Fatal(err)
		}
		late := outbox.Task{Type: outbox.ChargeAuthorize, RefID: "ch_late"}
		if err := r.Enqueue(context.Background(), late); err != nil || !queued(t, in, late) {
			t.Fatalf("after Close: err %v, queued %v; want inline", err, queued(t, in, late))
		}
	})
}

// A task the relay cannot enqueue is reported (the sweeper enqueues it), and
// the caller, already answered, never sees the error.
func TestRelayReportsWhatItCouldNotEnqueue(t *testing.T) {
	q, _ := relayQueue(t, "redis://127.0.0.1:1/0")
	errs := make(chan error, 1)
	r := outbox.NewRelay(q, 1, 8, 500*time.Millisecond, func(err error) { errs <- err })
	if err := r.Enqueue(context.Background(), outbox.Task{Type: outbox.ChargeAuthorize, RefID: "ch_lost"}); err != nil {
		t.Fatalf("Enqueue: %v, want nil (the failure is the relay's)", err)
	}
	select {
	case err := <-errs:
		if err == nil {
			t.Fatal("reported a nil error")
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the failure was not reported")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := r.Close(ctx); err != nil {
		t.Fatal(err)
	}
}
