// Package jobs is the worker's side of asynq: task type names, payloads that
// carry ids only, constructors, handlers and the periodic schedule. It is the
// only package that knows *asynq.Task.
package jobs

import (
	"context"
	"errors"
	"fmt"
	"github.com/gatehouse-pay/gatehouse/internal/disputes"
	"log/slog"
	"sync"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/attribute"
	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/gatehouse-pay/gatehouse/internal/auth"
	"github.com/gatehouse-pay/gatehouse/internal/charges"
	"github.com/gatehouse-pay/gatehouse/internal/config"
	"github.com/gatehouse-pay/gatehouse/internal/customers"
	"github.com/gatehouse-pay/gatehouse/internal/ledger"
	"github.com/gatehouse-pay/gatehouse/internal/logging"
	"github.com/gatehouse-pay/gatehouse/internal/metrics"
	"github.com/gatehouse-pay/gatehouse/internal/notifications"
	"github.com/gatehouse-pay/gatehouse/internal/outbox"
	"github.com/gatehouse-pay/gatehouse/internal/providers"
	"github.com/gatehouse-pay/gatehouse/internal/refunds"
	"github.com/gatehouse-pay/gatehouse/internal/store"
	"github.com/gatehouse-pay/gatehouse/internal/tracing"
	"github.com/gatehouse-pay/gatehouse/internal/webhooks"
)

// A Pool is one of the worker's asynq servers: its queues with their
// weights, and its task slots. asynq takes a server's tasks one at a time,
// in one loop that tries its queues in turn with a Redis call each, so
// deliveries have a server of their own: they are taken without first
// polling queues that are empty, they never wait behind provider calls for
// a slot, and a backlog of them cannot hold up an authorization.
type Pool struct {
	Name        string
	Queues      map[string]int
	Concurrency int
}

// Pools are the worker's servers. In the first, provider calls outrank
// housekeeping; the second serves the delivery queues (see DeliveryQueues)
// with equal weights.
func Pools(deliveryQueues []string) []Pool {
	webhooks := make(map[string]int, len(deliveryQueues))
	for _, q := range deliveryQueues {
		webhooks[q] = 1
	}
	return []Pool{
		{Name: "tasks", Queues: map[string]int{"critical": 6, "default": 2, "maintenance": 1}, Concurrency: 50},
		{Name: "webhooks", Queues: webhooks, Concurrency: 100},
	}
}

// Handlers holds what the task handlers need.
type Handlers struct {
	Auth     *auth.Service
	Charges  *charges.Processor
	Refunds  *refunds.Processor
	Webhooks *webhooks.Deliverer
	// Notifications applies the providers' notifications; nil leaves
	// them received.
	Notifications *notifications.Applier
	Store         Maintenance
	// SavedCards is the housekeeping of saved cards; nil skips it.
	SavedCards *customers.CardHousekeeping
	// Payouts carries sandbox payouts and makes the scheduled ones; nil
	// skips them.
	Payouts *ledger.Runner
	// Disputes carries merchants' answers to disputes to their providers;
	// SandboxDisputes decides the sandbox's. nil skips them.
	Disputes        *disputes.Service
	SandboxDisputes interface {
		DecideDisputes(ctx context.Context) error
	}
	Queue   *Queue
	Config  config.Config
	Log     *slog.Logger
	Metrics *metrics.Jobs
}

// Maintenance is the store's housekeeping side.
type Maintenance interface {
	StaleTasks(ctx context.Context, before time.Time, limit int) ([]outbox.Pending, error)
	Reconcile(ctx context.Context, before time.Time) (int64, error)
	DeleteIdempotencyKeysBefore(ctx context.Context, t time.Time) (int64, error)
	// PruneCardTokens clears the cards of tokens expired unused at now and
	// deletes tokens past their retention.
	PruneCardTokens(ctx context.Context, now time.Time) (cleared, deleted int64, err error)
	// FillEventCharges sets the charge of events written without it (by an
	// earlier release) and returns how many.
	FillEventCharges(ctx context.Context) (int64, error)
	// MaintainPartitions creates the partitions of events and of webhook
	// deliveries and attempts ahead and drops those past retention.
	MaintainPartitions(ctx context.Context, now time.Time) (store.PartitionReport, error)
	// MaintainAuditLog creates the audit log's partitions ahead and drops
	// those past its retention (docs/audit.md).
	MaintainAuditLog(ctx context.Context, now time.Time) (created, dropped int, err error)
	// PruneNotifications deletes the provider notifications received
	// before before and already applied (or duplicates, or ignored).
	PruneNotifications(ctx context.Context, before time.Time) (int64, error)
}

// observe runs a task with its log id, metrics and, when tracing is on, a
// consumer span named after the task type: the child of the trace context
// the task carries in its headers (see Queue.Enqueue), or a new trace.
func (h *Handlers) observe(next asynq.Handler) asynq.Handler {
	return asynq.HandlerFunc(func(ctx context.Context, t *asynq.Task) error {
		start := time.Now()
		id, _ := asynq.GetTaskID(ctx)
		if id != "" {
			ctx = logging.WithRequestID(ctx, "task:"+id)
		}
		var span trace.Span
		if tracing.Enabled() {
			queue, _ := asynq.GetQueueName(ctx)
			retried, _ := asynq.GetRetryCount(ctx)
			ctx, span = tracing.StartConsumer(ctx, t.Headers(), t.Type(),
				semconv.MessagingSystemKey.String("asynq"),
				semconv.MessagingOperationTypeProcess,
				semconv.MessagingDestinationName(queue),
				semconv.MessagingMessageID(id),
				attribute.String("asynq.task.type", t.Type()),
				attribute.Int("asynq.task.retry_count", retried),
			)
		}
		err := next.ProcessTask(ctx, t)
		outcome := "ok"
		var back *providers.PutBack
		switch {
		case err != nil && isExhausted(err):
			outcome = "error"
			h.Log.WarnContext(ctx, "task failed", "type", t.Type(), "err", err)
		case err != nil && isSkip(err):
			outcome = "skipped"
		case err != nil && isRetryIn(err):
			outcome = "rescheduled"
		case errors.As(err, &back):
			outcome = "rescheduled"
			h.Metrics.PutBacks.WithLabelValues(back.Reason).Inc()
		case err != nil:
			outcome = "error"
			h.Log.WarnContext(ctx, "task failed", "type", t.Type(), "err", err)
		}
		if span != nil {
			span.SetAttributes(attribute.String("gatehouse.task.outcome", outcome))
			if outcome == "error" || outcome == "skipped" {
				tracing.RecordError(span, err)
			}
			span.End()
		}
		h.Metrics.Processed.WithLabelValues(t.Type(), outcome).Inc()
		h.Metrics.Duration.WithLabelValues(t.Type()).Observe(time.Since(start).Seconds())
		return err
	})
}

// ServerConfigs are the asynq server configurations of the worker, one per
// pool, its delivery pool serving deliveryQueues. Provider tasks back off
// exponentially from cfg.ProviderRetryBase up to cfg.ProviderRetryMax;
// other tasks that found Postgres or Redis unavailable from 1 s up to 30 s;
// any other failure asynq's default.
func ServerConfigs(log *slog.Logger, cfg config.Config, deliveryQueues []string) []asynq.Config {
	pools := Pools(deliveryQueues)
	out := make([]asynq.Config, len(pools))
	for i, p := range pools {
		out[i] = serverConfig(log, cfg, p)
	}
	return out
}

func serverConfig(log *slog.Logger, cfg config.Config, p Pool) asynq.Config {
	shutdownTimeout := cfg.ShutdownTimeout
	return asynq.Config{
		RetryDelayFunc:    retryDelay(cfg),
		Concurrency:       p.Concurrency,
		Queues:            p.Queues,
		TaskCheckInterval: 50 * time.Millisecond,
		IsFailure:         isFailure,
		// Retries and scheduled tasks move to the queue within a second of
		// their time (asynq's default checks every 5 s).
		DelayedTaskCheckInterval: time.Second,
		ShutdownTimeout:          shutdownTimeout,
		Logger:                   asynqLogger{log},
		LogLevel:                 asynq.WarnLevel,
		ErrorHandler: asynq.ErrorHandlerFunc(func(ctx context.Context, t *asynq.Task, err error) {
			retried, _ := asynq.GetRetryCount(ctx)
			maxRetry, _ := asynq.GetMaxRetry(ctx)
			if retried >= maxRetry || isExhausted(err) {
				log.ErrorContext(ctx, "task gave up", "type", t.Type(), "retried", retried, "err", err)
			}
		}),
	}
}

// asynqLogger routes asynq's own log lines into slog.
type asynqLogger struct{ log *slog.Logger }

func (l asynqLogger) Debug(args ...any) { l.log.Debug("asynq", "msg", args) }

func (l asynqLogger) Info(args ...any) { l.log.Info("asynq", "msg", args) }

func (l asynqLogger) Warn(args ...any) { l.log.Warn("asynq", "msg", args) }

func (l asynqLogger) Error(args ...any) { l.log.Error("asynq", "msg", args) }

func (l asynqLogger) Fatal(args ...any) { l.log.Error("asynq fatal", "msg", args) }

// Logger adapts the handlers' slog logger for asynq components.
func (h *Handlers) Logger() asynq.Logger { return asynqLogger{h.Log} }

// Servers are the worker's asynq servers, one per pool, sharing one Redis
// client (which they do not close).
type Servers []*asynq.Server

// NewServers makes the servers of ServerConfigs on rdb.
func NewServers(rdb redis.UniversalClient, log *slog.Logger, cfg config.Config, deliveryQueues []string) Servers {
	configs := ServerConfigs(log, cfg, deliveryQueues)
	out := make(Servers, len(configs))
	for i, c := range configs {
		out[i] = asynq.NewServerFromRedisClient(rdb, c)
	}
	return out
}

// Start starts every server with h; on an error it stops those started.
func (s Servers) Start(h asynq.Handler) error {
	for i, srv := range s {
		if err := srv.Start(h); err != nil {
			s[:i].Shutdown()
			return fmt.Errorf("start asynq server %q: %w", Pools(nil)[i].Name, err)
		}
	}
	return nil
}

// Shutdown stops the servers at once, each waiting up to its
// ShutdownTimeout for its tasks, so a drain takes one timeout, not one per
// server.
func (s Servers) Shutdown() {
	var wg sync.WaitGroup
	for _, srv := range s {
		wg.Go(srv.Shutdown)
	}
	wg.Wait()
}

// Ping checks the servers' Redis.
func (s Servers) Ping() error {
	if len(s) == 0 {
		return errors.New("no asynq server")
	}
	return s[0].Ping()
}
