package jobs_test

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/hibiken/asynq"

	"github.com/gatehouse-pay/gatehouse/internal/apperr"
	"github.com/gatehouse-pay/gatehouse/internal/config"
	"github.com/gatehouse-pay/gatehouse/internal/jobs"
	"github.com/gatehouse-pay/gatehouse/internal/outbox"
	"github.com/gatehouse-pay/gatehouse/internal/webhooks"
)

// A task that found the database unavailable (a restart, a failover) runs
// again within seconds, its waits doubling up to 30 s, not after asynq's
// default of 15 s and more; a delivery keeps its schedule, a provider task
// the provider backoff, any other failure asynq's default.
func TestRetryDelay(t *testing.T) {
	cfg, err := config.Load(func(string) string { return "" }, config.Needs{})
	if err != nil {
		t.Fatal(err)
	}
	delay := jobs.ServerConfigs(slog.New(slog.NewTextHandler(io.Discard, nil)), cfg)[0].RetryDelayFunc
	deliver := asynq.NewTask(outbox.WebhookDeliver, nil)
	authorize := asynq.NewTask(outbox.ChargeAuthorize, nil)
	down := fmt.Errorf("read delivery: %w", apperr.Unavailable(io.ErrUnexpectedEOF))
	for _, c := range []struct {
		name     string
		n        int
		err      error
		task     *asynq.Task
		min, max time.Duration
	}{
		{"delivery, database down, first retry", 0, down, deliver, time.Second, time.Second},
		{"delivery, database down, third retry", 2, down, deliver, 4 * time.Second, 4 * time.Second},
		{"delivery, database down, tenth retry", 9, down, deliver, 30 * time.Second, 30 * time.Second},
		{"delivery, on its schedule", 0, &webhooks.RetryIn{Delay: 7 * time.Minute}, deliver, 7 * time.Minute, 7 * time.Minute},
		{"delivery, another failure", 0, errors.New("boom"), deliver, 15 * time.Second, 45 * time.Second},
		{"provider task, database down", 1, down, authorize, 2 * cfg.ProviderRetryBase, 2 * cfg.ProviderRetryBase},
	} {
		if got := delay(c.n, c.err, c.task); got < c.min || got > c.max {
			t.Errorf("%s: retry %d after %v, want %v to %v", c.name, c.n, got, c.min, c.max)
		}
	}
}
