// When a task is tried again, and when it gives up: every retry and skip
// rule of the worker.

package jobs

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/hibiken/asynq"

	"github.com/gatehouse-pay/gatehouse/internal/apperr"
	"github.com/gatehouse-pay/gatehouse/internal/config"
	"github.com/gatehouse-pay/gatehouse/internal/providers"
	"github.com/gatehouse-pay/gatehouse/internal/webhooks"
)

// retryDelay is how long the queue waits before running a task again: a
// delivery the time its schedule asks (RetryIn), a provider task the
// provider backoff, any other task that found a dependency unavailable the
// unavailable backoff, anything else asynq's default. Both backoffs are
// jittered (see Jitter), so that the tasks an outage held back do not all
// come back at the same instant when it ends.
func retryDelay(cfg config.Config) asynq.RetryDelayFunc {
	return func(n int, err error, t *asynq.Task) time.Duration {
		var next *webhooks.RetryIn
		if errors.As(err, &next) {
			return next.Delay
		}
		var back *providers.PutBack
		if errors.As(err, &back) {
			return back.Delay
		}
		if isProviderTask(t.Type()) {
			return Jitter(Backoff(n+1, cfg.ProviderRetryBase, cfg.ProviderRetryMax), rand.Int64N)
		}
		if apperr.KindOf(err) == apperr.KindUnavailable {
			return Jitter(Backoff(n+1, unavailableRetryBase, unavailableRetryMax), rand.Int64N)
		}
		return asynq.DefaultRetryDelayFunc(n, err, t)
	}
}

// The backoff of a task that found Postgres or Redis unavailable: a
// restart or a failover to a standby is over in seconds, and asynq's
// default (15 s to 45 s for the first retry, growing as n^4) would hold a
// webhook delivery back long after it. Once the retries are used up the
// task is archived and the outbox sweeper starts it again.
const (
	unavailableRetryBase = time.Second
	unavailableRetryMax  = 30 * time.Second
)

// isFailure: a delivery waiting for its next scheduled attempt is not a
// failure, nor a provider task put back because its merchant's slots are
// taken, nor a task whose worker died and that asynq's lease recovery puts
// back (asynq.ErrLeaseExpired: the task did not fail, its worker did, as
// when Recovery puts it back): asynq then moves the task, under its own id,
// to run again after the delay without counting a retry.
func isFailure(err error) bool {
	return !isRetryIn(err) && !isPutBack(err) && !errors.Is(err, asynq.ErrLeaseExpired)
}

// isPutBack reports a provider task put back (see providers.MerchantSlots).
func isPutBack(err error) bool {
	var back *providers.PutBack
	return errors.As(err, &back)
}

// exhausted is the failure of a provider task's last attempt. A provider
// task has one retry more than its attempts (see Queue.NewTask), so that
// asynq, which gives up a task that fails with no retry left, whatever the
// error, can still put the last attempt back when its merchant is at the
// cap; a last attempt that fails is given up here instead (SkipRetry), as
// before: the task is archived and the outbox sweeper starts it again.
type exhausted struct{ err error }

func (e *exhausted) Error() string { return e.err.Error() }

func (e *exhausted) Unwrap() []error { return []error{e.err, asynq.SkipRetry} }

// lastAttempt gives up err, the failure of a provider task's last
// attempt (final), unless it is no failure at all.
func lastAttempt(err error, final bool) error {
	if err == nil || !final || isSkip(err) || !isFailure(err) {
		return err
	}
	return &exhausted{err: err}
}

// isExhausted reports a failure lastAttempt gave up.
func isExhausted(err error) bool {
	var e *exhausted
	return errors.As(err, &e)
}

func isProviderTask(typ string) bool {
	switch typ {
	case TypeChargeAuthorize, TypeChargeCapture, TypeChargeVoid, TypeChargeReverse, TypeRefundProcess,
		TypeChargeAuthenticate, TypeChargeAuthenticationTimeout:
		return true
	}
	return false
}

// ReverseWindow is how long a charge:reverse, charge:capture or
// refund:process task keeps trying, with the provider backoff, to learn the
// outcome of what it sent: Stripe keeps an idempotency key (and so the answer
// to the request) for 24 h. After it, the outbox row stays and the sweeper
// starts the task again: captures and refunds are then looked up (see
// charges.Processor.Capture and refunds.Processor.Process).
const ReverseWindow = 24 * time.Hour

// untilKnown reports whether a task type keeps trying for ReverseWindow
// rather than PROVIDER_MAX_ATTEMPTS times: the tasks whose outcome may be
// unknown while money may have moved, which never end as a guess.
func untilKnown(typ string) bool {
	switch typ {
	case TypeChargeReverse, TypeChargeCapture, TypeRefundProcess, TypeChargeAuthenticate, TypeChargeAuthenticationTimeout:
		return true
	}
	return false
}

// ReverseAttempts is how many attempts of the provider backoff (from base,
// capped at limit) fit in ReverseWindow: the attempts of one charge:reverse
// task, at most maxReverseAttempts. The waits are counted at their shortest
// jitter (MinJittered), so the attempts cover the window however the
// jitter falls, and end within 4/3 of it. The last one that fails is logged
// at error level; the outbox row stays, so the sweeper starts the task again.
func ReverseAttempts(base, limit time.Duration) int {
	n, total := 1, time.Duration(0)
	for total < ReverseWindow && n < maxReverseAttempts {
		d := MinJittered(Backoff(n, base, limit))
		if d <= 0 {
			return maxReverseAttempts
		}
		total += d
		n++
	}
	return n
}

// maxReverseAttempts bounds ReverseAttempts when the backoff is very short.
const maxReverseAttempts = 10000

// Backoff is the delay before retry n (1-based) of a provider task:
// base * 2^(n-1), at most limit. asynq counts retries from 0, hence n+1 at
// the call site.
func Backoff(n int, base, limit time.Duration) time.Duration {
	d := base
	for i := 1; i < n && d < limit; i++ {
		d *= 2
	}
	return min(d, limit)
}

// Jitter draws a retry's wait from the top quarter of its backoff d:
// uniformly in [d-d/4, d] (int63n is rand.Int64N, or a test's source). The
// wait never exceeds the backoff, so PROVIDER_RETRY_MAX and the 30 s of the
// unavailable backoff stay upper bounds; tasks that failed together spread
// over a quarter of their step instead of returning in step. A quarter, not
// more: a retry still comes well after the one before (a capture's second
// attempt after PROVIDER_IDEMPOTENCY_WINDOW, say, when the backoff is set
// above it).
func Jitter(d time.Duration, int63n func(int64) int64) time.Duration {
	spread := d - MinJittered(d)
	if spread <= 0 {
		return d
	}
	return d - time.Duration(int63n(int64(spread)+1))
}

// MinJittered is the shortest wait Jitter draws for a backoff d.
func MinJittered(d time.Duration) time.Duration { return d - d/4 }

func isRetryIn(err error) bool {
	var next *webhooks.RetryIn
	return errors.As(err, &next)
}

func isSkip(err error) bool {
	for e := err; e != nil; {
		if e == asynq.SkipRetry {
			return true
		}
		u, ok := e.(interface{ Unwrap() error })
		if !ok {
			return false
		}
		e = u.Unwrap()
	}
	return false
}

// finalAttempt reports whether this run of a provider task is its last: the
// queue's retries are used up, or the worker's own limit is reached
// (PROVIDER_MAX_ATTEMPTS, or the attempts within ReverseWindow for the tasks
// that run until the outcome is known), even if the process that enqueued
// the task was configured otherwise.
func finalAttempt(ctx context.Context, typ string, cfg config.Config) bool {
	retried, _ := asynq.GetRetryCount(ctx)
	maxRetry, _ := asynq.GetMaxRetry(ctx)
	if untilKnown(typ) {
		return retried >= maxRetry || retried+1 >= ReverseAttempts(cfg.ProviderRetryBase, cfg.ProviderRetryMax)
	}
	return retried >= maxRetry || retried+1 >= cfg.ProviderMaxAttempts
}

// skipMissing turns "the object does not exist" into SkipRetry: no retry can
// make it appear.
func skipMissing(err error) error {
	if apperr.KindOf(err) == apperr.KindNotFound {
		return fmt.Errorf("%v: %w", err, asynq.SkipRetry)
	}
	return err
}
