// Package jobs is the worker's side of asynq: task type names, payloads that
// carry ids only, constructors, handlers and the periodic schedule. It is the
// only package that knows *asynq.Task.
package jobs

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/hibiken/asynq"
	"go.opentelemetry.io/otel/attribute"
	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/gatehouse-pay/gatehouse/internal/auth"
	"github.com/gatehouse-pay/gatehouse/internal/charges"
	"github.com/gatehouse-pay/gatehouse/internal/config"
	"github.com/gatehouse-pay/gatehouse/internal/events"
	"github.com/gatehouse-pay/gatehouse/internal/logging"
	"github.com/gatehouse-pay/gatehouse/internal/metrics"
	"github.com/gatehouse-pay/gatehouse/internal/outbox"
	"github.com/gatehouse-pay/gatehouse/internal/refunds"
	"github.com/gatehouse-pay/gatehouse/internal/tracing"
	"github.com/gatehouse-pay/gatehouse/internal/webhooks"
)

// Task types. Provider work uses the outbox task types (charge:authorize,
// charge:capture, charge:void, charge:reverse, refund:process).
const (
	// TypeSessionsPrune deletes sessions that expired more than a day ago.
	TypeSessionsPrune = "sessions:prune"
	// TypeOutboxSweep enqueues outbox tasks that went missing and re-creates
	// the tasks of charges and refunds waiting too long.
	TypeOutboxSweep = "outbox:sweep"
	// TypeRetentionPrune deletes idempotency keys after 24 h and events after 30 days.
	TypeRetentionPrune = "retention:prune"
)

// Queues and their weights: provider calls and deliveries will outrank
// housekeeping.
var Queues = map[string]int{"critical": 6, "webhooks": 4, "default": 2, "maintenance": 1}

// NewSessionsPruneTask returns the housekeeping task that prunes sessions. It
// is unique for its period, so several workers scheduling it enqueue it once.
func NewSessionsPruneTask() *asynq.Task {
	return asynq.NewTask(TypeSessionsPrune, nil,
		asynq.Queue("maintenance"), asynq.MaxRetry(3), asynq.Unique(50*time.Minute), asynq.Timeout(time.Minute))
}

// Handlers holds what the task handlers need.
type Handlers struct {
	Auth     *auth.Service
	Charges  *charges.Processor
	Refunds  *refunds.Processor
	Webhooks *webhooks.Deliverer
	Events   *events.Service
	Store    Maintenance
	Queue    *Queue
	Config   config.Config
	Log      *slog.Logger
	Metrics  *metrics.Jobs
}

// Maintenance is the store's housekeeping side.
type Maintenance interface {
	StaleTasks(ctx context.Context, before time.Time, limit int) ([]outbox.Pending, error)
	Reconcile(ctx context.Context, before time.Time) (int64, error)
	DeleteIdempotencyKeysBefore(ctx context.Context, t time.Time) (int64, error)
}

// Mux routes every task type to its handler, with metrics and a log line per task.
func (h *Handlers) Mux() *asynq.ServeMux {
	mux := asynq.NewServeMux()
	mux.Use(h.observe)
	mux.HandleFunc(TypeSessionsPrune, h.HandleSessionsPrune)
	mux.HandleFunc(TypeOutboxSweep, h.HandleOutboxSweep)
	mux.HandleFunc(TypeRetentionPrune, h.HandleRetentionPrune)
	mux.HandleFunc(outbox.ChargeAuthorize, h.provider(h.Charges.Authorize))
	mux.HandleFunc(outbox.ChargeCapture, h.provider(h.Charges.Capture))
	mux.HandleFunc(outbox.ChargeVoid, h.provider(h.Charges.Void))
	mux.HandleFunc(outbox.ChargeReverse, h.provider(h.Charges.Reverse))
	mux.HandleFunc(outbox.RefundProcess, h.provider(h.Refunds.Process))
	mux.HandleFunc(outbox.WebhookDeliver, h.HandleWebhookDeliver)
	return mux
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
		switch {
		case err != nil && isSkip(err):
			outcome = "skipped"
		case err != nil && isRetryIn(err):
			outcome = "rescheduled"
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

// Register adds the periodic tasks to the scheduler.
func Register(s *asynq.Scheduler) error {
	for spec, t := range map[string]*asynq.Task{
		"@hourly":    NewSessionsPruneTask(),
		"@every 10s": asynq.NewTask(TypeOutboxSweep, nil, asynq.Queue("maintenance"), asynq.MaxRetry(0), asynq.Unique(9*time.Second), asynq.Timeout(time.Minute)),
		"@every 1h":  asynq.NewTask(TypeRetentionPrune, nil, asynq.Queue("maintenance"), asynq.MaxRetry(3), asynq.Unique(50*time.Minute), asynq.Timeout(10*time.Minute)),
	} {
		if _, err := s.Register(spec, t); err != nil {
			return err
		}
	}
	return nil
}

// ServerConfig is the asynq server configuration of the worker. Provider
// tasks back off exponentially from cfg.ProviderRetryBase up to
// cfg.ProviderRetryMax; other tasks use asynq's default.
func ServerConfig(log *slog.Logger, cfg config.Config) asynq.Config {
	shutdownTimeout := cfg.ShutdownTimeout
	return asynq.Config{
		RetryDelayFunc: func(n int, err error, t *asynq.Task) time.Duration {
			var next *webhooks.RetryIn
			if errors.As(err, &next) {
				return next.Delay
			}
			if !isProviderTask(t.Type()) {
				return asynq.DefaultRetryDelayFunc(n, err, t)
			}
			return Backoff(n+1, cfg.ProviderRetryBase, cfg.ProviderRetryMax)
		},
		Concurrency:       50,
		Queues:            Queues,
		TaskCheckInterval: 50 * time.Millisecond,
		// A delivery waiting for its next scheduled attempt is not a failure.
		IsFailure: func(err error) bool {
			var next *webhooks.RetryIn
			return !errors.As(err, &next)
		},
		// Retries and scheduled tasks move to the queue within a second of
		// their time (asynq's default checks every 5 s).
		DelayedTaskCheckInterval: time.Second,
		ShutdownTimeout:          shutdownTimeout,
		Logger:                   asynqLogger{log},
		LogLevel:                 asynq.WarnLevel,
		ErrorHandler: asynq.ErrorHandlerFunc(func(ctx context.Context, t *asynq.Task, err error) {
			retried, _ := asynq.GetRetryCount(ctx)
			maxRetry, _ := asynq.GetMaxRetry(ctx)
			if retried >= maxRetry {
				log.ErrorContext(ctx, "task gave up", "type", t.Type(), "retried", retried, "err", err)
			}
		}),
	}
}

// asynqLogger routes asynq's own log lines into slog.
type asynqLogger struct{ log *slog.Logger }

func (l asynqLogger) Debug(args ...any) { l.log.Debug("asynq", "msg", args) }
func (l asynqLogger) Info(args ...any)  { l.log.Info("asynq", "msg", args) }
func (l asynqLogger) Warn(args ...any)  { l.log.Warn("asynq", "msg", args) }
func (l asynqLogger) Error(args ...any) { l.log.Error("asynq", "msg", args) }
func (l asynqLogger) Fatal(args ...any) { l.log.Error("asynq fatal", "msg", args) }

// Logger adapts the handlers' slog logger for asynq components.
func (h *Handlers) Logger() asynq.Logger { return asynqLogger{h.Log} }
