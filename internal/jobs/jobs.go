// Package jobs is the worker's side of asynq: task type names, payloads that
// carry ids only, constructors, handlers and the periodic schedule. It is the
// only package that knows *asynq.Task.
package jobs

import (
	"context"
	"log/slog"
	"time"

	"github.com/hibiken/asynq"

	"github.com/gatehouse-pay/gatehouse/internal/auth"
	"github.com/gatehouse-pay/gatehouse/internal/logging"
	"github.com/gatehouse-pay/gatehouse/internal/metrics"
)

// Task types.
const (
	// TypeSessionsPrune deletes sessions that expired more than a day ago.
	TypeSessionsPrune = "sessions:prune"
)

// Queues and their weights: provider calls and deliveries will outrank
// housekeeping.
var Queues = map[string]int{"critical": 6, "default": 3, "maintenance": 1}

// NewSessionsPruneTask returns the housekeeping task that prunes sessions. It
// is unique for its period, so several workers scheduling it enqueue it once.
func NewSessionsPruneTask() *asynq.Task {
	return asynq.NewTask(TypeSessionsPrune, nil,
		asynq.Queue("maintenance"), asynq.MaxRetry(3), asynq.Unique(50*time.Minute), asynq.Timeout(time.Minute))
}

// Handlers holds what the task handlers need.
type Handlers struct {
	Auth    *auth.Service
	Log     *slog.Logger
	Metrics *metrics.Jobs
}

// Mux routes every task type to its handler, with metrics and a log line per task.
func (h *Handlers) Mux() *asynq.ServeMux {
	mux := asynq.NewServeMux()
	mux.Use(h.observe)
	mux.HandleFunc(TypeSessionsPrune, h.HandleSessionsPrune)
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

func (h *Handlers) observe(next asynq.Handler) asynq.Handler {
	return asynq.HandlerFunc(func(ctx context.Context, t *asynq.Task) error {
		start := time.Now()
		if id, ok := asynq.GetTaskID(ctx); ok {
			ctx = logging.WithRequestID(ctx, "task:"+id)
		}
		err := next.ProcessTask(ctx, t)
		outcome := "ok"
		switch {
		case err != nil && isSkip(err):
			outcome = "skipped"
		case err != nil:
			outcome = "error"
			h.Log.WarnContext(ctx, "task failed", "type", t.Type(), "err", err)
		}
		h.Metrics.Processed.WithLabelValues(t.Type(), outcome).Inc()
		h.Metrics.Duration.WithLabelValues(t.Type()).Observe(time.Since(start).Seconds())
		return err
	})
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
	_, err := s.Register("@hourly", NewSessionsPruneTask())
	return err
}

// ServerConfig is the asynq server configuration of the worker.
func ServerConfig(log *slog.Logger, shutdownTimeout time.Duration) asynq.Config {
	return asynq.Config{
		Concurrency:       20,
		Queues:            Queues,
		TaskCheckInterval: 50 * time.Millisecond,
		ShutdownTimeout:   shutdownTimeout,
		Logger:            asynqLogger{log},
		LogLevel:          asynq.WarnLevel,
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
