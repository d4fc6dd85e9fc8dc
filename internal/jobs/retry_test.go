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
	"github.com/gatehouse-pay/gatehouse/internal/providers"
	"github.com/gatehouse-pay/gatehouse/internal/webhooks"
)

// A task that found the database unavailable (a restart, a failover) runs
// again within seconds, its waits doubling up to 30 s less a jitter of at
// most a quarter, not after asynq's default of 15 s and more; a delivery
// keeps its schedule, a provider task the provider backoff, any other
// failure asynq's default.
// defaultRetryDelay is the worker's retry delay under the default settings.
func defaultRetryDelay(t *testing.T) (asynq.RetryDelayFunc, config.Config) {
	t.Helper()
	sc, cfg := defaultServerConfig(t)
	return sc.RetryDelayFunc, cfg
}

// defaultServerConfig is the configuration of the worker's first asynq
// server under the default settings.
func defaultServerConfig(t *testing.T) (asynq.Config, config.Config) {
	t.Helper()
	cfg, err := config.Load(func(string) string { return "" }, config.Needs{})
	if err != nil {
		t.Fatal(err)
	}
	return jobs.ServerConfigs(slog.New(slog.NewTextHandler(io.Discard, nil)), cfg, nil)[0], cfg
}

func TestRetryDelay(t *testing.T) {
	delay, cfg := defaultRetryDelay(t)
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
		{"delivery, database down, first retry", 0, down, deliver, 750 * time.Millisecond, time.Second},
		{"delivery, database down, third retry", 2, down, deliver, 3 * time.Second, 4 * time.Second},
		{"delivery, database down, tenth retry", 9, down, deliver, 22500 * time.Millisecond, 30 * time.Second},
		{"delivery, on its schedule", 0, &webhooks.RetryIn{Delay: 7 * time.Minute}, deliver, 7 * time.Minute, 7 * time.Minute},
		{"delivery, another failure", 0, errors.New("boom"), deliver, 15 * time.Second, 45 * time.Second},
		{"provider task, database down", 1, down, authorize, 3 * cfg.ProviderRetryBase / 2, 2 * cfg.ProviderRetryBase},
		{"provider task, put back", 3, &providers.PutBack{Delay: 1700 * time.Millisecond, Reason: providers.PutBackMerchantSlow}, authorize, 1700 * time.Millisecond, 1700 * time.Millisecond},
	} {
		if got := delay(c.n, c.err, c.task); got < c.min || got > c.max {
			t.Errorf("%s: retry %d after %v, want %v to %v", c.name, c.n, got, c.min, c.max)
		}
	}
}

// Tasks that failed at the same instant (an outage's end) do not come back
// at the same instant: for every kind of jittered retry, 1,000 draws of the
// same retry spread over the top quarter of its backoff, never above it.
// asynq schedules in whole seconds, so at the 30 s and 5 min caps the
// returns must also fall in several distinct seconds.
func TestRetryDelaySpread(t *testing.T) {
	delay, cfg := defaultRetryDelay(t)
	down := fmt.Errorf("read delivery: %w", apperr.Unavailable(io.ErrUnexpectedEOF))
	for _, c := range []struct {
		name     string
		n        int
		err      error
		task     *asynq.Task
		min, max time.Duration
	}{
		{"delivery, database down, tenth retry", 9, down, asynq.NewTask(outbox.WebhookDeliver, nil), 22500 * time.Millisecond, 30 * time.Second},
		{"authorize, first retry", 0, errors.New("provider down"), asynq.NewTask(outbox.ChargeAuthorize, nil), 3 * cfg.ProviderRetryBase / 4, cfg.ProviderRetryBase},
		{"capture, at the cap", 30, errors.New("provider down"), asynq.NewTask(outbox.ChargeCapture, nil), 3 * cfg.ProviderRetryMax / 4, cfg.ProviderRetryMax},
	} {
		draws := map[time.Duration]bool{}
		seconds := map[int64]bool{}
		lo, hi := c.max, c.min
		for range 1000 {
			d := delay(c.n, c.err, c.task)
			if d < c.min || d > c.max {
				t.Fatalf("%s: %v, want %v to %v", c.name, d, c.min, c.max)
			}
			draws[d] = true
			seconds[int64(d/time.Second)] = true
			lo, hi = min(lo, d), max(hi, d)
		}
		// 1,000 uniform draws leave less than 1/10^40 of a chance that none
		// falls in the first or the last tenth of the range.
		tenth := (c.max - c.min) / 10
		if len(draws) < 900 || lo > c.min+tenth || hi < c.max-tenth {
			t.Errorf("%s: %d distinct waits from %v to %v, want them spread over %v to %v", c.name, len(draws), lo, hi, c.min, c.max)
		}
		if c.max >= 30*time.Second && len(seconds) < 5 {
			t.Errorf("%s: the retries fall in %d distinct seconds, want at least 5", c.name, len(seconds))
		}
	}
}

func TestAttemptOf(t *testing.T) {
	id := "01a21444-ada8-7b95-9687-bd8aa3726531"
	for taskID, want := range map[string]int{
		"charge:authorize:" + id:                        0,
		"charge:authorize:" + id + ":2":                 2,
		"charge:authorize:" + id + ":3:recovered:29400": 3,
		"charge:authorize:" + id + ":recovered:29400":   0,
		"charge:authorize:" + id + ":1":                 0,
		"charge:authorize:other:4":                      0,
		"charge:capture:" + id + ":2":                   0,
	} {
		if got := jobs.AttemptOf(taskID, id); got != want {
			t.Errorf("AttemptOf(%s) = %d, want %d", taskID, got, want)
		}
	}
}
