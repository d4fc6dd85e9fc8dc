package jobs

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/hibiken/asynq"

	"github.com/gatehouse-pay/gatehouse/internal/apperr"
	"github.com/gatehouse-pay/gatehouse/internal/charges"
	"github.com/gatehouse-pay/gatehouse/internal/config"
	"github.com/gatehouse-pay/gatehouse/internal/idempotency"
	"github.com/gatehouse-pay/gatehouse/internal/outbox"
	"github.com/gatehouse-pay/gatehouse/internal/tracing"
)

// payload is the body of every object task: the id and nothing else, so no
// card data or secret ever reaches Redis.
type payload struct {
	ID string `json:"id"`
}

// queueOf is the asynq queue of an outbox task type.
func queueOf(typ string) string {
	if typ == outbox.WebhookDeliver {
		return "webhooks"
	}
	return "critical"
}

func isProviderTask(typ string) bool {
	switch typ {
	case outbox.ChargeAuthorize, outbox.ChargeCapture, outbox.ChargeVoid, outbox.ChargeReverse, outbox.RefundProcess:
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
	case outbox.ChargeReverse, outbox.ChargeCapture, outbox.RefundProcess:
		return true
	}
	return false
}

// ReverseAttempts is how many attempts of the provider backoff (from base,
// capped at limit) fit in ReverseWindow: the attempts of one charge:reverse
// task, at most maxReverseAttempts. The last one that fails is logged at error
// level; the outbox row stays, so the sweeper starts the task again.
func ReverseAttempts(base, limit time.Duration) int {
	n, total := 1, time.Duration(0)
	for total < ReverseWindow && n < maxReverseAttempts {
		d := Backoff(n, base, limit)
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

// Queue enqueues outbox tasks on asynq. It implements outbox.Enqueuer.
type Queue struct {
	client    *asynq.Client
	inspector *asynq.Inspector
	cfg       config.Config
}

// NewQueue returns a Queue; inspector may be nil where tasks are never revived
// (the API), and must be set in the worker, whose sweeper revives archived ones.
func NewQueue(client *asynq.Client, inspector *asynq.Inspector, cfg config.Config) *Queue {
	return &Queue{client: client, inspector: inspector, cfg: cfg}
}

// NewTask builds the asynq task of an outbox task: payload the id, TaskID the
// outbox id, retries per the provider settings. It carries no trace context:
// a task resent by the sweeper starts a trace of its own.
func (q *Queue) NewTask(t outbox.Task) (*asynq.Task, error) {
	return q.newTask(t, nil)
}

// newTask is NewTask with headers, the trace context of the work that called
// for the task (see tracing.Inject), or nil.
func (q *Queue) newTask(t outbox.Task, headers map[string]string) (*asynq.Task, error) {
	body, err := json.Marshal(payload{ID: t.RefID})
	if err != nil {
		return nil, err
	}
	if t.Type == outbox.WebhookDeliver {
		// Attempts are counted in Postgres, which decides when a delivery
		// fails; asynq's retries only carry the schedule (see RetryIn).
		return asynq.NewTaskWithHeaders(t.Type, body, headers, asynq.TaskID(t.ID()), asynq.Queue(queueOf(t.Type)),
			asynq.MaxRetry(25), asynq.Timeout(q.cfg.WebhookTimeout+30*time.Second)), nil
	}
	if untilKnown(t.Type) {
		// Two provider calls at most: the request sent again, then the
		// release (reverse) or a lookup (a pending capture or refund).
		return asynq.NewTaskWithHeaders(t.Type, body, headers, asynq.TaskID(t.ID()), asynq.Queue(queueOf(t.Type)),
			asynq.MaxRetry(ReverseAttempts(q.cfg.ProviderRetryBase, q.cfg.ProviderRetryMax)-1),
			asynq.Timeout(2*q.cfg.ProviderTimeout+30*time.Second)), nil
	}
	return asynq.NewTaskWithHeaders(t.Type, body, headers,
		asynq.TaskID(t.ID()),
		asynq.Queue(queueOf(t.Type)),
		asynq.MaxRetry(q.cfg.ProviderMaxAttempts-1),
		asynq.Timeout(q.cfg.ProviderTimeout+30*time.Second),
	), nil
}

// Enqueue hands t to the queue; a task already queued under its id is fine.
// With tracing on, the task carries the trace context of ctx in its headers,
// so the worker's span of it joins the trace of the request that called for it.
func (q *Queue) Enqueue(ctx context.Context, t outbox.Task) error {
	var headers map[string]string
	if tracing.Enabled() {
		headers = tracing.Inject(ctx)
	}
	task, err := q.newTask(t, headers)
	if err != nil {
		return err
	}
	_, err = q.client.EnqueueContext(ctx, task)
	if errors.Is(err, asynq.ErrTaskIDConflict) {
		return nil
	}
	return err
}

// Resend enqueues again the outbox tasks the sweeper found unfinished. A task
// still queued, scheduled or retrying is left alone. One archived (it used up
// its retries while, say, Postgres was down) is deleted and enqueued afresh.
// One left active by a worker that died (its lease expired: asynq calls it
// orphaned) is enqueued again under a derived id rather than waiting for
// asynq's own recovery, which runs once a minute; the handlers are
// idempotent, so the late original changes nothing.
func (q *Queue) Resend(ctx context.Context, tasks []outbox.Task) error {
	if len(tasks) == 0 {
		return nil
	}
	orphaned := map[string]bool{}
	if q.inspector != nil {
		for _, queue := range []string{"critical", "webhooks"} {
			active, err := q.inspector.ListActiveTasks(queue, asynq.PageSize(1000))
			if err != nil && !errors.Is(err, asynq.ErrQueueNotFound) {
				return err
			}
			for _, info := range active {
				if info.IsOrphaned {
					orphaned[info.ID] = true
				}
			}
		}
	}
	for _, t := range tasks {
		if err := q.resend(ctx, t, orphaned[t.ID()]); err != nil {
			return err
		}
	}
	return nil
}

func (q *Queue) resend(ctx context.Context, t outbox.Task, orphaned bool) error {
	task, err := q.NewTask(t)
	if err != nil {
		return err
	}
	if orphaned {
		id := t.ID() + ":recovered:" + strconv.FormatInt(time.Now().Unix()/60, 10)
		_, err = q.client.EnqueueContext(ctx, task, asynq.TaskID(id))
		if errors.Is(err, asynq.ErrTaskIDConflict) {
			return nil
		}
		return err
	}
	_, err = q.client.EnqueueContext(ctx, task)
	if !errors.Is(err, asynq.ErrTaskIDConflict) || q.inspector == nil {
		return err
	}
	info, ierr := q.inspector.GetTaskInfo(queueOf(t.Type), t.ID())
	if ierr != nil || info.State != asynq.TaskStateArchived {
		return nil // queued, scheduled, retrying or running: it will happen
	}
	if err := q.inspector.DeleteTask(queueOf(t.Type), t.ID()); err != nil {
		return err
	}
	_, err = q.client.EnqueueContext(ctx, task)
	if errors.Is(err, asynq.ErrTaskIDConflict) {
		return nil
	}
	return err
}

// provider adapts a processor method to an asynq handler: it decodes the id,
// tells the method whether this is the last attempt, and turns a missing
// object or a bad payload into SkipRetry.
func (h *Handlers) provider(process func(ctx context.Context, id string, final bool) error) asynq.HandlerFunc {
	return func(ctx context.Context, t *asynq.Task) error {
		var p payload
		if err := json.Unmarshal(t.Payload(), &p); err != nil || !charges.ValidID(p.ID) {
			return fmt.Errorf("bad payload: %w", asynq.SkipRetry)
		}
		retried, _ := asynq.GetRetryCount(ctx)
		maxRetry, _ := asynq.GetMaxRetry(ctx)
		// The worker's own PROVIDER_MAX_ATTEMPTS bounds the attempts too, even
		// if the process that enqueued the task was configured otherwise.
		final := retried >= maxRetry || retried+1 >= h.Config.ProviderMaxAttempts
		if untilKnown(t.Type()) {
			final = retried >= maxRetry || retried+1 >= ReverseAttempts(h.Config.ProviderRetryBase, h.Config.ProviderRetryMax)
		}
		err := process(ctx, p.ID, final)
		if apperr.KindOf(err) == apperr.KindNotFound {
			return fmt.Errorf("%v: %w", err, asynq.SkipRetry)
		}
		return err
	}
}

// HandleWebhookDeliver makes the next attempt of a delivery. The schedule is
// carried back to asynq in a *webhooks.RetryIn error (see ServerConfig).
func (h *Handlers) HandleWebhookDeliver(ctx context.Context, t *asynq.Task) error {
	var p payload
	if err := json.Unmarshal(t.Payload(), &p); err != nil || !charges.ValidID(p.ID) {
		return fmt.Errorf("bad payload: %w", asynq.SkipRetry)
	}
	err := h.Webhooks.Deliver(ctx, p.ID)
	if apperr.KindOf(err) == apperr.KindNotFound {
		return fmt.Errorf("%v: %w", err, asynq.SkipRetry)
	}
	return err
}

// HandleOutboxSweep re-creates the tasks of work waiting too long and
// enqueues every outbox row older than the sweep age whose task is not queued.
func (h *Handlers) HandleOutboxSweep(ctx context.Context, _ *asynq.Task) error {
	now := time.Now()
	if n, err := h.Store.Reconcile(ctx, now.Add(-h.Config.ReconcileAfter)); err != nil {
		return err
	} else if n > 0 {
		h.Log.WarnContext(ctx, "reconciler re-created tasks", "count", n)
	}
	stale, err := h.Store.StaleTasks(ctx, now.Add(-h.Config.OutboxSweepAfter), 1000)
	if err != nil {
		return err
	}
	tasks := make([]outbox.Task, 0, len(stale))
	for _, p := range stale {
		tasks = append(tasks, p.Task)
	}
	return h.Queue.Resend(ctx, tasks)
}

// HandleRetentionPrune deletes idempotency keys older than 24 h and events
// older than 30 days.
func (h *Handlers) HandleRetentionPrune(ctx context.Context, _ *asynq.Task) error {
	keys, err := h.Store.DeleteIdempotencyKeysBefore(ctx, time.Now().Add(-idempotency.Retention))
	if err != nil {
		return err
	}
	evs, err := h.Events.Prune(ctx)
	if err != nil {
		return err
	}
	h.Log.InfoContext(ctx, "pruned expired records", "idempotency_keys", keys, "events", evs)
	return nil
}
