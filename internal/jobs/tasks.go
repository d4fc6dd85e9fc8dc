// Every task the worker runs, in one place, as asynq's README lays them
// out: its type (TypeX), payload, constructor (NewXTask, or Queue.NewTask for
// the outbox's object tasks) with its options, and handler (HandleX). Retry
// and skip rules are in retry.go; enqueueing in queue.go.

package jobs

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/hibiken/asynq"

	"github.com/gatehouse-pay/gatehouse/internal/charges"
	"github.com/gatehouse-pay/gatehouse/internal/config"
	"github.com/gatehouse-pay/gatehouse/internal/disputes"
	"github.com/gatehouse-pay/gatehouse/internal/idempotency"
	"github.com/gatehouse-pay/gatehouse/internal/outbox"
	"github.com/gatehouse-pay/gatehouse/internal/providers"
)

// Task types. The object tasks are the outbox's: written with the state
// change that calls for them, their payload the object's id.
const (
	TypeChargeAuthorize = outbox.ChargeAuthorize
	TypeChargeCapture   = outbox.ChargeCapture
	TypeChargeVoid      = outbox.ChargeVoid
	TypeChargeReverse   = outbox.ChargeReverse
	// TypeChargeAuthenticate settles a charge that requires action (the
	// cardholder answered, or the time is up); TypeChargeAuthenticationTimeout
	// is the same work scheduled for the moment the time is up.
	TypeChargeAuthenticate          = outbox.ChargeAuthenticate
	TypeChargeAuthenticationTimeout = outbox.ChargeAuthenticationTimeout
	TypeRefundProcess               = outbox.RefundProcess
	TypeWebhookDeliver              = outbox.WebhookDeliver
	TypeWebhookEvent                = outbox.WebhookEvent
	// TypeNotificationApply applies a provider notification the API stored.
	TypeNotificationApply = outbox.NotificationApply

	// TypeSessionsPrune deletes sessions that expired more than a day ago.
	TypeSessionsPrune = "sessions:prune"
	// TypeOutboxSweep enqueues outbox tasks that went missing and re-creates
	// the tasks of charges and refunds waiting too long.
	TypeOutboxSweep = "outbox:sweep"
	// TypeRetentionPrune deletes idempotency keys after 24 h, purges expired
	// card tokens, and keeps the partitions of events, webhook deliveries
	// and the audit log: created ahead, dropped after their retention.
	TypeRetentionPrune = "retention:prune"
	// TypeSavedCardsHousekeeping converts the saved cards an earlier
	// release sealed with their CVC under the card key, and vacuums the
	// data keys of deleted payment methods away.
	TypeSavedCardsHousekeeping = "payment_methods:housekeeping"
	// TypePayoutsRun carries sandbox payouts from pending to paid (or
	// failed) and makes the automatic payouts of each schedule's slot.
	TypePayoutsRun = "payouts:run"
	// TypeDisputeSubmit and TypeDisputeClose carry a merchant's answer to
	// a dispute (its evidence, or the loss accepted) to the provider.
	TypeDisputeSubmit = disputes.TaskSubmit
	TypeDisputeClose  = disputes.TaskClose
	// TypeDisputesDecide decides the sandbox disputes whose test evidence
	// is due for a decision.
	TypeDisputesDecide = "disputes:decide"
	// TypeWebhookHealth sends webhook_endpoint.failing for endpoints that
	// have failed for WEBHOOK_FAILING_AFTER with no attempt since to tell.
	TypeWebhookHealth = "webhooks:health"
)

// payload is the body of every object task: the id and nothing else, so no
// card data or secret ever reaches Redis.
type payload struct {
	ID string `json:"id"`
}

// objectID reads the id an object task carries; a bad payload is never
// retried.
func objectID(t *asynq.Task) (string, error) {
	var p payload
	if err := json.Unmarshal(t.Payload(), &p); err != nil || !charges.ValidID(p.ID) {
		return "", fmt.Errorf("bad payload: %w", asynq.SkipRetry)
	}
	return p.ID, nil
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
	if t.Type == TypeNotificationApply {
		// No provider call: only Postgres and the queue, retried while
		// either is away.
		return asynq.NewTaskWithHeaders(t.Type, body, headers, asynq.TaskID(t.QueueID()), asynq.Queue(q.queueOf(t)),
			asynq.MaxRetry(25), asynq.Timeout(30*time.Second)), nil
	}
	if t.Type == TypeWebhookDeliver || t.Type == TypeWebhookEvent {
		// Attempts are counted in Postgres, which decides when a delivery
		// fails; asynq's retries only carry the schedule (see RetryIn).
		return asynq.NewTaskWithHeaders(t.Type, body, headers, asynq.TaskID(t.QueueID()), asynq.Queue(q.queueOf(t)),
			asynq.MaxRetry(25), asynq.Timeout(q.cfg.WebhookTimeout+30*time.Second)), nil
	}
	// A provider task has one retry more than its attempts: asynq gives up
	// a task that returns any error with no retry left, and the last
	// attempt too must be able to be put back when its merchant is at the
	// cap (see providers.MerchantSlots). The handlers give up a last
	// attempt that fails themselves (see lastAttempt).
	if untilKnown(t.Type) {
		// Two provider calls at most: the request sent again, then the
		// release (reverse) or a lookup (a pending capture or refund).
		return asynq.NewTaskWithHeaders(t.Type, body, headers, asynq.TaskID(t.QueueID()), asynq.Queue(q.queueOf(t)),
			asynq.MaxRetry(ReverseAttempts(q.cfg.ProviderRetryBase, q.cfg.ProviderRetryMax)),
			asynq.Timeout(2*q.cfg.ProviderTimeout+30*time.Second)), nil
	}
	return asynq.NewTaskWithHeaders(t.Type, body, headers,
		asynq.TaskID(t.QueueID()),
		asynq.Queue(q.queueOf(t)),
		asynq.MaxRetry(q.cfg.ProviderMaxAttempts),
		asynq.Timeout(q.cfg.ProviderTimeout+30*time.Second),
	), nil
}

// NewSessionsPruneTask returns the housekeeping task that prunes sessions. It
// is unique for its period, so several workers scheduling it enqueue it once.
func NewSessionsPruneTask() *asynq.Task {
	return asynq.NewTask(TypeSessionsPrune, nil,
		asynq.Queue("maintenance"), asynq.MaxRetry(3), asynq.Unique(50*time.Minute), asynq.Timeout(time.Minute))
}

// NewOutboxSweepTask returns the sweep that enqueues lost outbox tasks; one
// per period however many workers schedule it.
func NewOutboxSweepTask() *asynq.Task {
	return asynq.NewTask(TypeOutboxSweep, nil, asynq.Queue("maintenance"), asynq.MaxRetry(0), asynq.Unique(9*time.Second), asynq.Timeout(time.Minute))
}

// NewRetentionPruneTask returns the retention prune run every period (see
// PrunePeriod): one per period however many workers schedule it.
func NewRetentionPruneTask(period time.Duration) *asynq.Task {
	return asynq.NewTask(TypeRetentionPrune, nil, asynq.Queue("maintenance"), asynq.MaxRetry(3),
		asynq.Unique(period*5/6), asynq.Timeout(10*time.Minute))
}

// NewSavedCardsHousekeepingTask returns the housekeeping of saved cards:
// one per period however many workers schedule it.
func NewSavedCardsHousekeepingTask() *asynq.Task {
	return asynq.NewTask(TypeSavedCardsHousekeeping, nil, asynq.Queue("maintenance"), asynq.MaxRetry(3),
		asynq.Unique(50*time.Second), asynq.Timeout(10*time.Minute))
}

// NewPayoutsRunTask returns the run of sandbox payouts: one per period
// however many workers schedule it.
func NewPayoutsRunTask(period time.Duration) *asynq.Task {
	return asynq.NewTask(TypePayoutsRun, nil, asynq.Queue("maintenance"), asynq.MaxRetry(0),
		asynq.Unique(max(period*5/6, time.Second)), asynq.Timeout(5*time.Minute))
}

// NewDisputesDecideTask returns the sandbox's dispute decisions: one per
// period however many workers schedule it.
func NewDisputesDecideTask(period time.Duration) *asynq.Task {
	return asynq.NewTask(TypeDisputesDecide, nil, asynq.Queue("maintenance"), asynq.MaxRetry(0),
		asynq.Unique(max(period*5/6, time.Second)), asynq.Timeout(time.Minute))
}

// NewWebhookHealthTask returns the sweep of failing webhook endpoints: one
// per period however many workers schedule it.
func NewWebhookHealthTask(period time.Duration) *asynq.Task {
	return asynq.NewTask(TypeWebhookHealth, nil, asynq.Queue("maintenance"), asynq.MaxRetry(0),
		asynq.Unique(max(period*5/6, time.Second)), asynq.Timeout(time.Minute))
}

// WebhookHealthPeriod is how often failing endpoints are swept: a quarter
// of WEBHOOK_FAILING_AFTER, between a second and a minute.
func WebhookHealthPeriod(c config.Config) time.Duration {
	if c.WebhookFailingAfter <= 0 {
		return time.Minute
	}
	return max(time.Second, min(time.Minute, c.WebhookFailingAfter/4).Truncate(time.Second))
}

// DisputePeriod is how often the sandbox's dispute decisions run: a
// quarter of SANDBOX_DISPUTE_DECISION_DELAY, between a second and a
// minute.
func DisputePeriod(c config.Config) time.Duration {
	return max(time.Second, min(time.Minute, c.SandboxDisputeDecisionDelay/4).Truncate(time.Second))
}

// PayoutPeriod is how often the payouts run: every minute, or a quarter of
// the payout interval or of the time in transit when that is less (at
// least a second), so a payout arrives and a schedule's slot is paid out
// soon after they are due.
func PayoutPeriod(c config.Config) time.Duration {
	return max(time.Second, min(time.Minute, c.SandboxPayoutInterval/4, c.SandboxPayoutDelay/4).Truncate(time.Second))
}

// PrunePeriod is how often the retention prune runs: hourly, or a sixth of
// the shorter of the events' and the delivery log's retention when that is
// less (30 s for 3 minutes), so partitions are dropped about a width after
// they are due and created well before they are needed (their width is a
// sixth of the retention and they are made half of it ahead, see
// store.PartitionWidth).
func PrunePeriod(c config.Config) time.Duration {
	return min(time.Hour, min(c.EventRetention, c.WebhookLogRetention)/6).Truncate(time.Second)
}

// Register adds the periodic tasks to the scheduler; the retention prune
// runs every prunePeriod.
func Register(s *asynq.Scheduler, prunePeriod, payoutPeriod, disputePeriod, healthPeriod time.Duration) error {
	for _, p := range []struct {
		spec string
		task *asynq.Task
	}{
		{"@hourly", NewSessionsPruneTask()},
		{"@every 10s", NewOutboxSweepTask()},
		{"@every " + prunePeriod.String(), NewRetentionPruneTask(prunePeriod)},
		{"@every 1m", NewSavedCardsHousekeepingTask()},
		{"@every " + payoutPeriod.String(), NewPayoutsRunTask(payoutPeriod)},
		{"@every " + disputePeriod.String(), NewDisputesDecideTask(disputePeriod)},
		{"@every " + healthPeriod.String(), NewWebhookHealthTask(healthPeriod)},
	} {
		if _, err := s.Register(p.spec, p.task); err != nil {
			return err
		}
	}
	return nil
}

// Mux routes every task type to its handler, with metrics and a log line per task.
func (h *Handlers) Mux() *asynq.ServeMux {
	mux := asynq.NewServeMux()
	mux.Use(h.observe)
	mux.HandleFunc(TypeSessionsPrune, h.HandleSessionsPrune)
	mux.HandleFunc(TypeOutboxSweep, h.HandleOutboxSweep)
	mux.HandleFunc(TypeRetentionPrune, h.HandleRetentionPrune)
	mux.HandleFunc(TypeSavedCardsHousekeeping, h.HandleSavedCardsHousekeeping)
	mux.HandleFunc(TypePayoutsRun, h.HandlePayoutsRun)
	mux.HandleFunc(TypeDisputesDecide, h.HandleDisputesDecide)
	mux.HandleFunc(TypeWebhookHealth, h.HandleWebhookHealth)
	mux.HandleFunc(TypeDisputeSubmit, h.HandleDispute)
	mux.HandleFunc(TypeDisputeClose, h.HandleDispute)
	mux.HandleFunc(TypeChargeAuthorize, h.HandleChargeAuthorize)
	mux.HandleFunc(TypeChargeCapture, h.provider(h.Charges.Capture))
	mux.HandleFunc(TypeChargeVoid, h.provider(h.Charges.Void))
	mux.HandleFunc(TypeChargeReverse, h.provider(h.Charges.Reverse))
	mux.HandleFunc(TypeChargeAuthenticate, h.provider(h.Charges.Authenticate))
	mux.HandleFunc(TypeChargeAuthenticationTimeout, h.provider(h.Charges.Authenticate))
	mux.HandleFunc(TypeRefundProcess, h.provider(h.Refunds.Process))
	mux.HandleFunc(TypeWebhookDeliver, h.HandleWebhookDeliver)
	mux.HandleFunc(TypeWebhookEvent, h.HandleWebhookEvent)
	mux.HandleFunc(TypeNotificationApply, h.HandleNotificationApply)
	return mux
}

// HandlePayoutsRun runs the sandbox payouts that are due.
func (h *Handlers) HandlePayoutsRun(ctx context.Context, _ *asynq.Task) error {
	if h.Payouts == nil {
		return nil
	}
	return h.Payouts.Run(ctx)
}

// HandleDisputesDecide decides the sandbox disputes that are due.
func (h *Handlers) HandleDisputesDecide(ctx context.Context, _ *asynq.Task) error {
	if h.SandboxDisputes == nil {
		return nil
	}
	return h.SandboxDisputes.DecideDisputes(ctx)
}

// HandleWebhookHealth sends webhook_endpoint.failing for every endpoint
// whose run of failures has lasted WEBHOOK_FAILING_AFTER when no attempt
// has told of it yet: one whose deliveries all failed for good before
// then, or whose next attempt is hours away.
func (h *Handlers) HandleWebhookHealth(ctx context.Context, _ *asynq.Task) error {
	if h.Webhooks == nil {
		return nil
	}
	return h.Webhooks.AnnounceFailing(ctx)
}

// HandleDispute carries a merchant's answer to a dispute to its provider.
func (h *Handlers) HandleDispute(ctx context.Context, t *asynq.Task) error {
	id, err := objectID(t)
	if err != nil {
		return err
	}
	if h.Disputes == nil {
		return fmt.Errorf("this worker does not answer disputes: %w", asynq.SkipRetry)
	}
	return skipMissing(h.Disputes.Respond(ctx, t.Type(), id))
}

// HandleNotificationApply applies a stored provider notification.
func (h *Handlers) HandleNotificationApply(ctx context.Context, t *asynq.Task) error {
	id, err := objectID(t)
	if err != nil {
		return err
	}
	if h.Notifications == nil {
		return fmt.Errorf("notification %s: this worker does not apply notifications", id)
	}
	return h.Notifications.Apply(ctx, id)
}

// HandleSessionsPrune prunes long-expired sessions.
func (h *Handlers) HandleSessionsPrune(ctx context.Context, _ *asynq.Task) error {
	n, err := h.Auth.PruneExpired(ctx)
	if err != nil {
		return err
	}
	h.Log.InfoContext(ctx, "pruned expired sessions", "count", n)
	return nil
}

// savedCardsBatch is how many legacy saved cards the housekeeping reads at
// a time.
const savedCardsBatch = 200

// HandleSavedCardsHousekeeping converts the legacy saved cards and vacuums
// the data keys of deleted payment methods (customers.CardHousekeeping).
func (h *Handlers) HandleSavedCardsHousekeeping(ctx context.Context, _ *asynq.Task) error {
	if h.SavedCards == nil {
		return nil
	}
	r, err := h.SavedCards.Run(ctx, savedCardsBatch)
	if err != nil {
		return err
	}
	if r.Converted > 0 || r.Unreadable > 0 {
		h.Log.InfoContext(ctx, "converted saved cards to data keys", "converted", r.Converted, "unreadable", r.Unreadable)
	}
	if r.Unreadable > 0 {
		h.Log.WarnContext(ctx, "saved cards that ENCRYPTION_KEY cannot open were left as they are", "count", r.Unreadable)
	}
	return nil
}

// provider adapts a processor method to an asynq handler: it decodes the id,
// tells the method whether this is the last attempt, and turns a missing
// object or a bad payload into SkipRetry.
func (h *Handlers) provider(process func(ctx context.Context, id string, final bool) error) asynq.HandlerFunc {
	return func(ctx context.Context, t *asynq.Task) error {
		id, err := objectID(t)
		if err != nil {
			return err
		}
		final := finalAttempt(ctx, t.Type(), h.Config)
		return lastAttempt(skipMissing(process(runnable(ctx), id, final)), final)
	}
}

// runnable marks ctx providers.MustRun when the task has no retry left, so
// that asynq would give it up rather than put it back: a task an earlier
// release enqueued, with one retry fewer (see Queue.NewTask). Its call then
// takes a slot even when its merchant is at the cap.
func runnable(ctx context.Context) context.Context {
	retried, _ := asynq.GetRetryCount(ctx)
	maxRetry, _ := asynq.GetMaxRetry(ctx)
	if retried >= maxRetry {
		return providers.MustRun(ctx)
	}
	return ctx
}

// HandleChargeAuthorize authorizes a charge at its current connector; a
// task a failover queued (charge:authorize:<id>:<n>) only for attempt n.
func (h *Handlers) HandleChargeAuthorize(ctx context.Context, t *asynq.Task) error {
	id, err := objectID(t)
	if err != nil {
		return err
	}
	taskID, _ := asynq.GetTaskID(ctx)
	final := finalAttempt(ctx, t.Type(), h.Config)
	return lastAttempt(skipMissing(h.Charges.AuthorizeAttempt(runnable(ctx), id, AttemptOf(taskID, id), final)), final)
}

// AttemptOf is the attempt in the queue id of a charge:authorize task
// (outbox.Task.QueueID, possibly with the sweeper's ":recovered:..."
// suffix): n for charge:authorize:<id>:<n>, 0 for the first attempt's task.
func AttemptOf(taskID, chargeID string) int {
	rest, ok := strings.CutPrefix(taskID, TypeChargeAuthorize+":"+chargeID+":")
	if !ok {
		return 0
	}
	n, err := strconv.Atoi(strings.SplitN(rest, ":", 2)[0])
	if err != nil || n < 2 {
		return 0
	}
	return n
}

// HandleWebhookDeliver makes the next attempt of a delivery. The schedule is
// carried back to asynq in a *webhooks.RetryIn error (see ServerConfig).
func (h *Handlers) HandleWebhookDeliver(ctx context.Context, t *asynq.Task) error {
	id, err := objectID(t)
	if err != nil {
		return err
	}
	return skipMissing(h.Webhooks.Deliver(ctx, id))
}

// HandleWebhookEvent makes the first attempts of an event's deliveries,
// handing off those it cannot make at once (see webhooks.DeliverEvent).
func (h *Handlers) HandleWebhookEvent(ctx context.Context, t *asynq.Task) error {
	id, err := objectID(t)
	if err != nil {
		return err
	}
	return h.Webhooks.DeliverEvent(ctx, id)
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

// HandleRetentionPrune deletes idempotency keys older than 24 h, keeps the
// partitions of events and of webhook deliveries and attempts (created
// ahead, dropped whole after EVENT_RETENTION and WEBHOOK_LOG_RETENTION),
// clears the sealed cards of card tokens that expired unused, deletes
// tokens 30 days after they expired, sets the charge of events an earlier
// release wrote without it, and keeps the audit log's monthly partitions:
// created three months ahead, dropped after a year.
func (h *Handlers) HandleRetentionPrune(ctx context.Context, _ *asynq.Task) error {
	keys, err := h.Store.DeleteIdempotencyKeysBefore(ctx, time.Now().Add(-idempotency.Retention))
	if err != nil {
		return err
	}
	parts, err := h.Store.MaintainPartitions(ctx, time.Now())
	if err != nil {
		return err
	}
	cleared, tokens, err := h.Store.PruneCardTokens(ctx, time.Now())
	if err != nil {
		return err
	}
	filled, err := h.Store.FillEventCharges(ctx)
	if err != nil {
		return err
	}
	created, dropped, err := h.Store.MaintainAuditLog(ctx, time.Now())
	if err != nil {
		return err
	}
	notices, err := h.Store.PruneNotifications(ctx, time.Now().Add(-h.Config.EventRetention))
	if err != nil {
		return err
	}
	h.Log.InfoContext(ctx, "pruned expired records", "idempotency_keys", keys,
		"partitions_created", parts.Created, "partitions_dropped", parts.Dropped, "partition_steps_postponed", parts.Postponed,
		"default_partition_rows_moved", parts.Moved, "default_partition_strays", parts.Strays,
		"token_cards_cleared", cleared, "tokens", tokens, "event_charges_filled", filled,
		"audit_partitions_created", created, "audit_partitions_dropped", dropped, "provider_notifications", notices)
	return nil
}
