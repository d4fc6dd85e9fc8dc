// Command worker runs Gatehouse's background jobs on asynq: provider calls,
// webhook deliveries and housekeeping, with scheduled retries. It serves
// /healthz, /readyz and /metrics on METRICS_ADDR.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/google/uuid"
	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/gatehouse-pay/gatehouse/internal/auth"
	"github.com/gatehouse-pay/gatehouse/internal/cache"
	"github.com/gatehouse-pay/gatehouse/internal/charges"
	"github.com/gatehouse-pay/gatehouse/internal/config"
	"github.com/gatehouse-pay/gatehouse/internal/connectors"
	"github.com/gatehouse-pay/gatehouse/internal/customers"
	"github.com/gatehouse-pay/gatehouse/internal/disputes"
	"github.com/gatehouse-pay/gatehouse/internal/health"
	"github.com/gatehouse-pay/gatehouse/internal/jobs"
	"github.com/gatehouse-pay/gatehouse/internal/keyring"
	"github.com/gatehouse-pay/gatehouse/internal/ledger"
	"github.com/gatehouse-pay/gatehouse/internal/logging"
	"github.com/gatehouse-pay/gatehouse/internal/metrics"
	"github.com/gatehouse-pay/gatehouse/internal/notifications"
	"github.com/gatehouse-pay/gatehouse/internal/providers"
	"github.com/gatehouse-pay/gatehouse/internal/providers/adyen"
	"github.com/gatehouse-pay/gatehouse/internal/providers/sandbox"
	"github.com/gatehouse-pay/gatehouse/internal/providers/stripe"
	"github.com/gatehouse-pay/gatehouse/internal/refunds"
	"github.com/gatehouse-pay/gatehouse/internal/store"
	"github.com/gatehouse-pay/gatehouse/internal/tracing"
	"github.com/gatehouse-pay/gatehouse/internal/webhooks"
	"github.com/gatehouse-pay/gatehouse/internal/webhooks/sender"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr))
}

// run is the whole program; it returns the exit code.
func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	if len(args) > 0 {
		fmt.Fprintln(stdout, "usage: worker   (configured through the environment; see docs/settings.md)")
		if args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
			return 0
		}
		return 2
	}
	if err := work(ctx, getenv, stderr); err != nil {
		fmt.Fprintln(stderr, "gatehouse worker:", err)
		return 1
	}
	return 0
}

func work(ctx context.Context, getenv func(string) string, stderr io.Writer) error {
	cfg, err := config.Load(getenv, config.Needs{Database: true, Redis: true, Encryption: true})
	if err != nil {
		return err
	}
	log := logging.New(stderr, cfg.LogLevel, "worker")
	stopTracing, err := tracing.Setup(ctx, getenv, "gatehouse-worker")
	if err != nil {
		return err
	}
	defer flushTraces(stopTracing, log)

	deadlines := store.Deadlines(cfg.DatabaseStatementTimeout, cfg.DatabaseConnectTimeout)
	mode := store.PoolMode(cfg.DatabasePoolMode)
	pool, err := store.Open(ctx, cfg.DatabaseURL.Reveal(), deadlines, mode)
	if err != nil {
		return err
	}
	defer pool.Close()
	store.WarnServerTimeouts(ctx, pool, cfg.DatabasePoolMode, log)
	// The delivery batches run on a pool of their own, with generic plans
	// (see store.GenericPlans; not under DATABASE_POOL_MODE=transaction);
	// two statements of each kind at once at most.
	batchPool, err := store.Open(ctx, cfg.DatabaseURL.Reveal(), deadlines, store.GenericPlans(), store.MaxConns(4), mode)
	if err != nil {
		return err
	}
	defer batchPool.Close()
	cache.SetLogger(log)
	rdb, err := cache.Dial(cfg.RedisURL.Reveal(), cfg.RedisMode)
	if err != nil {
		return err
	}
	defer rdb.Close()
	// The queue has its own connections, with go-redis' default timeouts.
	qrdb, err := cache.DialQueue(cfg.RedisURL.Reveal(), cfg.RedisMode)
	if err != nil {
		return err
	}
	defer qrdb.Close()
	for _, c := range []redis.UniversalClient{rdb, qrdb} {
		if err := tracing.InstrumentRedis(c); err != nil {
			return err
		}
	}

	reg := metrics.NewRegistry()
	reg.MustRegister(store.PoolCollector(pool), cache.PoolCollector(rdb, "cache"), cache.PoolCollector(qrdb, "queue"),
		store.OutboxCollector(pool, 5*time.Second), store.OutcomesCollector(pool, cfg.ProviderOutcomeUnknownAfter, cfg.ProviderConfirmationTimeout, 5*time.Second),
		store.DisputesCollector(pool, 5*time.Second))
	db := store.New(pool).WithBatchPool(batchPool).WithRetention(store.Retention{Events: cfg.EventRetention, WebhookLog: cfg.WebhookLogRetention})
	keys, err := keyring.New(cfg.EncryptionKey)
	if err != nil {
		return err
	}
	pm := metrics.NewProviders(reg)
	pm.Init(cfg.Providers())
	// Failovers can leave a connector of any provider (Stripe connectors
	// may bring their own keys): soft declines, or an outage in which
	// nothing was booked (provider_unavailable).
	pm.InitFailovers(connectors.Providers, append(slices.Clone(connectors.SoftDeclines), "provider_unavailable"))
	// Every connector has a circuit breaker of its own, named after its id
	// (charges made before connectors: after the provider).
	breaker := providers.BreakerOptions{OnStateChange: func(name, from, to string) {
		pm.Circuit.WithLabelValues(name).Set(metrics.CircuitValue(to))
		log.Warn("provider circuit breaker", "provider", name, "from", from, "to", to)
	}, Failures: uint32(cfg.ProviderBreakerFailures)}
	httpClient := &http.Client{Timeout: cfg.ProviderTimeout}
	// The sandbox's notifications (its disputes) are applied at once
	// through the queue, once there is one.
	var notify func(ctx context.Context, id string)
	sbx := sandbox.New(db.SandboxLedger(), sandbox.Options{Latency: cfg.SandboxLatency,
		DisputeDecisionDelay: cfg.SandboxDisputeDecisionDelay,
		Notified: func(ctx context.Context, id string) {
			if notify != nil {
				notify(ctx, id)
			}
		}})
	server := providers.Registry{"sandbox": sbx}
	if cfg.StripeSecretKey != "" {
		server["stripe"] = stripe.New(cfg.StripeSecretKey.Reveal(), cfg.StripeAPIBase, httpClient)
	}
	registry := connectors.NewResolver(db, keys, server,
		func(c connectors.Connector, cr connectors.Credentials) (providers.Provider, error) {
			switch c.Provider {
			case connectors.ProviderStripe:
				return stripe.New(cr.SecretKey, cfg.StripeAPIBase, httpClient), nil
			case connectors.ProviderAdyen:
				return adyen.New(adyen.Config{APIKey: cr.APIKey, MerchantAccount: cr.MerchantAccount,
					BaseURL: cfg.AdyenAPIBase, DisputeBaseURL: cfg.AdyenDisputeAPIBase, HTTPClient: httpClient, Timeout: cfg.ProviderTimeout})
			}
			return nil, fmt.Errorf("%w: %q with credentials", providers.ErrNotConfigured, c.Provider)
		},
		func(name string, p providers.Provider) providers.Provider {
			if connectors.ValidID(name) {
				pm.InitConnector(name, p.Name())
			}
			return providers.NamedBreaker(name, p, breaker)
		},
		0, time.Now)
	observe := func(provider, op string, o charges.Outcome, d time.Duration) {
		pm.Calls.WithLabelValues(provider, op, string(o)).Inc()
		if o != charges.OutcomeNoop {
			pm.Duration.WithLabelValues(provider, op).Observe(d.Seconds())
		}
	}
	client := asynq.NewClientFromRedisClient(qrdb)
	defer client.Close()
	inspector := asynq.NewInspectorFromRedisClient(qrdb)
	defer inspector.Close()
	reg.MustRegister(jobs.QueueCollector(inspector))
	// The delivery pool serves WEBHOOK_QUEUES queues, the legacy one, and
	// those of a larger WEBHOOK_QUEUES that Redis still knows, so that
	// lowering the setting leaves no task behind.
	known, err := inspector.Queues()
	if err != nil {
		log.Warn("could not list the queues in Redis; serving the configured ones", "err", err)
	}
	deliveryQueues := jobs.DeliveryQueues(cfg.WebhookQueues, known)
	queue := jobs.NewQueue(client, inspector, cfg).Serving(deliveryQueues)
	notify = func(ctx context.Context, id string) {
		if err := queue.Enqueue(ctx, notifications.ApplyTask(id)); err != nil {
			log.Warn("a sandbox notification waits for the outbox sweeper", "notification", id, "err", err)
		}
	}
	jm := metrics.NewJobs(reg)
	wm := metrics.NewWebhooks(reg)
	db.ObserveBatches(func(kind string, n int) { wm.BatchSize.WithLabelValues(kind).Observe(float64(n)) })
	out := sender.New(sender.Options{Timeout: cfg.WebhookTimeout, AllowPrivate: cfg.WebhookAllowPrivateNetworks})
	deliverer := webhooks.NewDeliverer(db, webhookSender{out}, keys, cfg.WebhookRetrySchedule, time.Now, log,
		func(outcome string, attempt int, d time.Duration) {
			wm.Attempts.WithLabelValues(outcome, strconv.Itoa(min(attempt, len(cfg.WebhookRetrySchedule)))).Inc()
			wm.Duration.WithLabelValues(outcome).Observe(d.Seconds())
		}).WithFirstAttemptDelay(func(d time.Duration) { wm.FirstAttempt.Observe(d.Seconds()) }).
		WithHealth(cfg.WebhookDisableAfter, func(reason string) { wm.EndpointsDisabled.WithLabelValues(reason).Inc() }).
		WithOperationalEvents(cfg.WebhookFailingAfter, func(typ string) { wm.OperationalEvents.WithLabelValues(typ).Inc() }).
		WithMerchantSlots(cfg.WebhookMerchantSlots).WithQueue(queue.EnqueueIn).
		WithHandOffs(func(reason string) { wm.HandOffs.WithLabelValues(reason).Inc() })
	// One merchant's provider calls hold at most PROVIDER_MERCHANT_SLOTS of
	// the provider pool's slots; the others are put back (jobs counts them).
	slots := providers.NewMerchantSlots(cfg.ProviderMerchantSlots, time.Now)
	chargeOutcome := func(provider, status string) { pm.Charges.WithLabelValues(provider, status).Inc() }
	refundOutcome := func(provider, status string) { pm.Refunds.WithLabelValues(provider, status).Inc() }
	chargeProcessor := charges.NewProcessor(db, registry, keys, cfg.ProviderTimeout, time.Now, log, observe).WithQueue(queue).WithOutcomes(chargeOutcome).
		WithWindows(cfg.ProviderIdempotencyWindow, cfg.ProviderOutcomeUnknownAfter).WithSlots(slots).
		WithAuthentication(cfg.AuthenticationTimeout, charges.NewLinks(cfg.PublicURL, keys), queue.EnqueueAt).
		WithLedger(func(ctx context.Context, connectorID *string, provider string) (ledger.Terms, error) {
			return registry.Terms(ctx, connectorID, provider, cfg.SandboxSettlementDelay)
		}).
		WithAttempts(func(a charges.Attempt, failover bool) {
			pm.Attempts.WithLabelValues(a.Connector, a.Provider, a.Status).Inc()
			if failover {
				pm.Failovers.WithLabelValues(a.Provider, deref(a.FailureCode)).Inc()
			}
		})
	refundProcessor := refunds.NewProcessor(db, registry, cfg.ProviderTimeout, time.Now, log, observe).WithQueue(queue).WithOutcomes(refundOutcome).
		WithWindows(cfg.ProviderIdempotencyWindow, cfg.ProviderOutcomeUnknownAfter).WithSlots(slots)
	disputeService := disputes.NewService(db, registry, queue, time.Now, log, nil)
	handlers := &jobs.Handlers{
		Auth:     auth.NewService(nil, db, cache.New(rdb), nil, nil, time.Now, log),
		Charges:  chargeProcessor,
		Refunds:  refundProcessor,
		Webhooks: deliverer,
		Notifications: notifications.NewApplier(db, queue, notifications.NewMetrics(reg), log, time.Now).
			WithConfirmers(chargeProcessor, refundProcessor).
			WithPayouts(ledger.NewImporter(db, queue, time.Now, log), registry).
			WithDisputes(disputeService),
		Store:      db,
		SavedCards: customers.NewCardHousekeeping(db, keys),
		Payouts: ledger.NewRunner(db, registry.PayoutFailure, queue, time.Now, cfg.SandboxPayoutInterval,
			cfg.SandboxPayoutDelay, log),
		Disputes:        disputeService,
		SandboxDisputes: sbx,
		Queue:           queue,
		Config:          cfg,
		Log:             log,
		Metrics:         jm,
	}

	srv := jobs.NewServers(qrdb, log, cfg, deliveryQueues)
	// Recovery puts back the tasks of a worker that died within seconds,
	// instead of asynq's minute or more (see jobs.Recovery): the servers'
	// dequeues on qrdb claim each task they take. It holds one connection for
	// good, the one other workers look for, on a client of its own (not
	// traced: it renews the worker's entry twice a second).
	lrdb, err := cache.DialQueue(cfg.RedisURL.Reveal(), cfg.RedisMode)
	if err != nil {
		return err
	}
	defer lrdb.Close()
	recovery := jobs.NewRecovery(lrdb, log, jobs.QueueNames(deliveryQueues))
	recovery.Watch(qrdb)
	reg.MustRegister(recovery.Collectors()...)
	// The scheduler owns its connection (it closes it on shutdown).
	srdb, err := cache.DialQueue(cfg.RedisURL.Reveal(), cfg.RedisMode)
	if err != nil {
		return err
	}
	scheduler := asynq.NewScheduler(sharedRedis{srdb}, &asynq.SchedulerOpts{Logger: handlers.Logger(), LogLevel: asynq.WarnLevel})
	if err := jobs.Register(scheduler, jobs.PrunePeriod(cfg), jobs.PayoutPeriod(cfg), jobs.DisputePeriod(cfg), jobs.WebhookHealthPeriod(cfg)); err != nil {
		return err
	}
	// The partitions are kept at start too, not only a period later: after
	// a long stop, rows may be waiting in the DEFAULT partitions.
	go func() {
		rep, err := db.MaintainPartitions(ctx, time.Now())
		if err != nil {
			log.Warn("partition maintenance failed; the retention prune tries again", "err", err)
			return
		}
		log.Info("partitions kept", "created", rep.Created, "dropped", rep.Dropped, "postponed", rep.Postponed,
			"default_partition_rows_moved", rep.Moved)
	}()

	draining := new(atomic.Bool)
	ln, err := net.Listen("tcp", cfg.MetricsAddr)
	if err != nil {
		return fmt.Errorf("listen on METRICS_ADDR %s: %w", cfg.MetricsAddr, err)
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", metrics.Handler(reg))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	mux.HandleFunc("GET /readyz", readyz(draining, map[string]func(context.Context) error{
		"postgres": pool.Ping,
		"redis":    func(context.Context) error { return srv.Ping() },
	}))
	httpSrv := &http.Server{Handler: withRequestID(mux), ReadHeaderTimeout: 5 * time.Second}
	go func() {
		if err := httpSrv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("metrics server stopped", "err", err)
		}
	}()
	var adminSrv *http.Server
	if cfg.AdminAddr != "" {
		aln, err := net.Listen("tcp", cfg.AdminAddr)
		if err != nil {
			return fmt.Errorf("listen on ADMIN_ADDR %s: %w", cfg.AdminAddr, err)
		}
		adminSrv = &http.Server{Handler: withRequestID(adminHandler(qrdb, cfg.AdminToken.Reveal())), ReadHeaderTimeout: 5 * time.Second}
		go func() {
			if err := adminSrv.Serve(aln); err != nil && !errors.Is(err, http.ErrServerClosed) {
				log.Error("admin server stopped", "err", err)
			}
		}()
		log.Info("queue UI (read-only) listening", "admin_addr", aln.Addr().String())
	}

	recovery.Start()
	if err := srv.Start(recovery.Middleware(handlers.Mux())); err != nil {
		recovery.Stop()
		return err
	}
	if err := scheduler.Start(); err != nil {
		srv.Shutdown()
		recovery.Stop()
		return fmt.Errorf("start scheduler: %w", err)
	}
	log.Info("worker running", "metrics_addr", ln.Addr().String())

	<-ctx.Done()
	// Drain: stop taking tasks, let in-flight ones finish (asynq re-queues any
	// still running after ShutdownTimeout), then exit 0.
	draining.Store(true)
	log.Info("shutting down", "timeout", cfg.ShutdownTimeout.String())
	scheduler.Shutdown()
	srv.Shutdown()
	recovery.Stop()
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = httpSrv.Shutdown(sctx)
	if adminSrv != nil {
		_ = adminSrv.Shutdown(sctx)
	}
	log.Info("stopped")
	return nil
}

// readyz answers 200 while every check answers and the worker is not
// draining, as the api's /readyz does. The checks named by ?exclude=
// (repeated, or comma-separated) still run and are reported, but do not make
// the answer 503; draining is never excluded. The worker serves no traffic:
// its Kubernetes probe excludes both checks, so a pod stays among the
// endpoints Prometheus scrapes while the stores are down.
func readyz(draining *atomic.Bool, checks map[string]func(context.Context) error) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		excluded, err := health.Checks(checks).Exclude(r.URL.Query()["exclude"])
		if err != nil {
			writeJSON(w, http.StatusBadRequest, map[string]any{"error": map[string]string{
				"code":       "parameter_invalid",
				"message":    err.Error(),
				"param":      "exclude",
				"request_id": w.Header().Get("X-Request-Id"),
			}})
			return
		}
		states, failed := health.Checks(checks).Run(r.Context(), excluded)
		if draining.Load() {
			failed = append([]string{"draining"}, failed...)
		}
		if len(failed) > 0 {
			writeJSON(w, http.StatusServiceUnavailable, map[string]any{"error": map[string]string{
				"code":       "service_unavailable",
				"message":    "Not ready: " + strings.Join(failed, ", ") + ".",
				"request_id": w.Header().Get("X-Request-Id"),
			}})
			return
		}
		writeJSON(w, http.StatusOK, map[string]any{"status": "ok", "checks": states})
	}
}

// webhookSender adapts the outbound HTTP sender to the webhooks domain.
type webhookSender struct{ s *sender.Sender }

func (w webhookSender) Send(ctx context.Context, o webhooks.Outgoing) webhooks.Response {
	req := sender.Request{URL: o.URL, Body: o.Body, Headers: o.Headers, ClientCert: o.ClientCert, ClientCertID: o.ClientCertID}
	if a := o.OAuth2; a != nil {
		req.OAuth2 = &sender.OAuth2{Endpoint: a.Endpoint, Version: a.Version, TokenURL: a.TokenURL, ClientID: a.ClientID,
			ClientSecret: a.ClientSecret, Scopes: a.Scopes}
	}
	r := w.s.Send(ctx, req)
	return webhooks.Response{StatusCode: r.StatusCode, Duration: r.Duration, Err: r.Err, Reason: sender.Reason(r.Err), Body: r.Body,
		TokenRefreshed: r.TokenRefreshed}
}

// withRequestID gives every answer an X-Request-Id, as the API does.
func withRequestID(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Request-Id", uuid.NewString())
		next.ServeHTTP(w, r)
	})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// flushTraces sends the spans still buffered, for at most 5 s.
func flushTraces(stop func(context.Context) error, log *slog.Logger) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := stop(ctx); err != nil {
		log.Warn("traces not flushed", "err", err)
	}
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}
