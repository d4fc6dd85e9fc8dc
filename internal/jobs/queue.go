package jobs

import (
	"context"
	"errors"
	"strconv"
	"time"

	"github.com/hibiken/asynq"

	"github.com/gatehouse-pay/gatehouse/internal/config"
	"github.com/gatehouse-pay/gatehouse/internal/outbox"
	"github.com/gatehouse-pay/gatehouse/internal/tracing"
)

// Queue enqueues outbox tasks on asynq. It implements outbox.Enqueuer.
type Queue struct {
	client    *asynq.Client
	inspector *asynq.Inspector
	cfg       config.Config
	// deliveryQueues are the delivery queues the worker serves, whose
	// orphaned tasks the sweeper looks for (see Resend).
	deliveryQueues []string
}

// NewQueue returns a Queue; inspector may be nil where tasks are never revived
// (the API), and must be set in the worker, whose sweeper revives archived ones.
func NewQueue(client *asynq.Client, inspector *asynq.Inspector, cfg config.Config) *Queue {
	return &Queue{client: client, inspector: inspector, cfg: cfg, deliveryQueues: DeliveryQueues(cfg.WebhookQueues, nil)}
}

// Serving sets the delivery queues the worker serves (DeliveryQueues with
// the queues found in Redis), when they are more than WEBHOOK_QUEUES's.
func (q *Queue) Serving(deliveryQueues []string) *Queue {
	q.deliveryQueues = deliveryQueues
	return q
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

// EnqueueAt schedules t to run at at (a timeout). A task already queued
// or scheduled under its id is fine.
func (q *Queue) EnqueueAt(ctx context.Context, t outbox.Task, at time.Time) error {
	task, err := q.newTask(t, nil)
	if err != nil {
		return err
	}
	_, err = q.client.EnqueueContext(ctx, task, asynq.ProcessAt(at))
	if errors.Is(err, asynq.ErrTaskIDConflict) {
		return nil
	}
	return err
}

// EnqueueIn schedules t to run in in (now when in is 0). A task already
// queued or scheduled under its id is fine.
func (q *Queue) EnqueueIn(ctx context.Context, t outbox.Task, in time.Duration) error {
	return q.EnqueueAt(ctx, t, time.Now().Add(in))
}

// Wake runs t now: one waiting for its retry or scheduled for later is
// moved ahead to run at once, one not in the queue is enqueued, and one
// queued or running is left alone. It needs the inspector (the worker's
// Queue).
func (q *Queue) Wake(ctx context.Context, t outbox.Task) error {
	task, err := q.NewTask(t)
	if err != nil {
		return err
	}
	_, err = q.client.EnqueueContext(ctx, task)
	if !errors.Is(err, asynq.ErrTaskIDConflict) || q.inspector == nil {
		return err
	}
	info, err := q.inspector.GetTaskInfo(q.queueOf(t), t.QueueID())
	if err != nil {
		return nil // finished and gone since: nothing to wake
	}
	switch info.State {
	case asynq.TaskStateScheduled, asynq.TaskStateRetry:
		if err := q.inspector.RunTask(q.queueOf(t), t.QueueID()); err != nil && !errors.Is(err, asynq.ErrTaskNotFound) {
			return err
		}
	}
	return nil
}

// Resend enqueues again the outbox tasks the sweeper found unfinished. A task
// still queued, scheduled or retrying is left alone. One archived (it used up
// its retries while, say, Postgres was down) is deleted and enqueued afresh.
// One left active by a worker that died (its lease expired: asynq calls it
// orphaned; Recovery puts back most such tasks long before) is enqueued
// again under a derived id rather than waiting for asynq's own recovery,
// which runs once a minute; the handlers are idempotent, so the late
// original changes nothing.
func (q *Queue) Resend(ctx context.Context, tasks []outbox.Task) error {
	if len(tasks) == 0 {
		return nil
	}
	orphaned := map[string]bool{}
	legacy := false
	if q.inspector != nil {
		for _, queue := range append([]string{"critical"}, q.deliveryQueues...) {
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
		legacy = q.legacyInUse()
	}
	for _, t := range tasks {
		if legacy && t.Type == TypeWebhookDeliver && q.inLegacyQueue(t) {
			continue
		}
		if err := q.resend(ctx, t, orphaned[t.QueueID()]); err != nil {
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
		id := t.QueueID() + ":recovered:" + strconv.FormatInt(time.Now().Unix()/60, 10)
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
	info, ierr := q.inspector.GetTaskInfo(q.queueOf(t), t.QueueID())
	if ierr != nil || info.State != asynq.TaskStateArchived {
		return nil // queued, scheduled, retrying or running: it will happen
	}
	if err := q.inspector.DeleteTask(q.queueOf(t), t.QueueID()); err != nil {
		return err
	}
	_, err = q.client.EnqueueContext(ctx, task)
	if errors.Is(err, asynq.ErrTaskIDConflict) {
		return nil
	}
	return err
}

// legacyInUse reports whether the legacy delivery queue holds tasks (an
// earlier release's API enqueued there; its retries stay there), so that
// the sweeper must look there before enqueueing a delivery on its own queue.
func (q *Queue) legacyInUse() bool {
	info, err := q.inspector.GetQueueInfo(LegacyWebhookQueue)
	return err == nil && info.Size > 0
}

// inLegacyQueue reports whether delivery task t waits or runs in the legacy
// queue, where the sweeper leaves it: enqueued on its endpoint's queue as
// well, it could be sent twice at once. One archived there is deleted, and
// enqueued on its endpoint's queue instead.
func (q *Queue) inLegacyQueue(t outbox.Task) bool {
	info, err := q.inspector.GetTaskInfo(LegacyWebhookQueue, t.QueueID())
	if err != nil {
		return false
	}
	if info.State == asynq.TaskStateArchived {
		return q.inspector.DeleteTask(LegacyWebhookQueue, t.QueueID()) != nil
	}
	return true
}
