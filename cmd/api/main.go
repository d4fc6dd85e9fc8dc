// Command api serves Gatehouse's REST API. Subcommands: "migrate" applies the
// database migrations; "merchant create" adds a merchant from the shell;
// "audit verify" checks the audit log's chains (docs/audit.md).
// Configuration comes from the environment only (every setting in docs/settings.md).
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/hibiken/asynq"

	"github.com/gatehouse-pay/gatehouse/internal/apikeys"
	"github.com/gatehouse-pay/gatehouse/internal/apperr"
	"github.com/gatehouse-pay/gatehouse/internal/auth"
	"github.com/gatehouse-pay/gatehouse/internal/authz"
	"github.com/gatehouse-pay/gatehouse/internal/cache"
	"github.com/gatehouse-pay/gatehouse/internal/charges"
	"github.com/gatehouse-pay/gatehouse/internal/config"
	"github.com/gatehouse-pay/gatehouse/internal/connectors"
	"github.com/gatehouse-pay/gatehouse/internal/customers"
	"github.com/gatehouse-pay/gatehouse/internal/disputes"
	"github.com/gatehouse-pay/gatehouse/internal/events"
	"github.com/gatehouse-pay/gatehouse/internal/eventtypes"
	"github.com/gatehouse-pay/gatehouse/internal/httpapi"
	"github.com/gatehouse-pay/gatehouse/internal/jobs"
	"github.com/gatehouse-pay/gatehouse/internal/keyring"
	"github.com/gatehouse-pay/gatehouse/internal/ledger"
	"github.com/gatehouse-pay/gatehouse/internal/logging"
	"github.com/gatehouse-pay/gatehouse/internal/members"
	"github.com/gatehouse-pay/gatehouse/internal/merchants"
	"github.com/gatehouse-pay/gatehouse/internal/metrics"
	"github.com/gatehouse-pay/gatehouse/internal/mfa"
	"github.com/gatehouse-pay/gatehouse/internal/notifications"
	"github.com/gatehouse-pay/gatehouse/internal/outbox"
	"github.com/gatehouse-pay/gatehouse/internal/ratelimit"
	"github.com/gatehouse-pay/gatehouse/internal/reconcile"
	"github.com/gatehouse-pay/gatehouse/internal/refunds"
	"github.com/gatehouse-pay/gatehouse/internal/store"
	"github.com/gatehouse-pay/gatehouse/internal/tracing"
	"github.com/gatehouse-pay/gatehouse/internal/webhooks"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr))
}

// The relay that enqueues tasks after the response: goroutines, buffered
// tasks, and the bound on one enqueue and on draining it at shutdown.
const (
	relayWorkers = 4
	relayDepth   = 4096
	relayTimeout = 5 * time.Second
	// streamPoll is how often the event stream's hub looks for new events
	// while a stream is open.
	streamPoll = 100 * time.Millisecond
	// metricsCloseTimeout bounds closing the API_METRICS_ADDR listener at
	// exit: a scrape in flight gets this long to finish.
	metricsCloseTimeout = 2 * time.Second
	// At shutdown, a connection on which nothing arrived for
	// unusedConnGrace since it was accepted is closed; the drain looks for
	// such connections every unusedConnSweep.
	unusedConnGrace = time.Second
	unusedConnSweep = 100 * time.Millisecond
)

const usage = `usage:
  api                       serve the HTTP API on HTTP_ADDR
  api migrate               apply database migrations and exit
  api merchant create --email E --password P --name N [--if-absent]
                            create a merchant and print it as JSON
  api audit verify          check every chain of the audit log; exit 1
                            naming the first broken entry of each broken chain`

// run is the whole program; it returns the exit code.
func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	fail := func(err error) int {
		fmt.Fprintln(stderr, "gatehouse api:", err)
		return 1
	}
	switch {
	case len(args) == 0 || args[0] == "serve":
		if err := serve(ctx, getenv, stderr); err != nil {
			return fail(err)
		}
	case args[0] == "migrate":
		if err := migrate(ctx, getenv); err != nil {
			return fail(err)
		}
		fmt.Fprintln(stdout, "migrations applied")
	case len(args) >= 2 && args[0] == "merchant" && args[1] == "create":
		if err := createMerchant(ctx, args[2:], getenv, stdout, stderr); err != nil {
			return fail(err)
		}
	case len(args) == 2 && args[0] == "audit" && args[1] == "verify":
		ok, err := verifyAudit(ctx, getenv, stdout)
		if err != nil {
			return fail(err)
		}
		if !ok {
			return 1
		}
	case args[0] == "-h" || args[0] == "--help" || args[0] == "help":
		fmt.Fprintln(stdout, usage)
	default:
		fmt.Fprintln(stderr, usage)
		return 2
	}
	return 0
}

// openDB connects to DATABASE_URL for the subcommands, which need nothing else.
func openDB(ctx context.Context, getenv func(string) string, opts ...store.OpenOption) (*pgxpool.Pool, error) {
	cfg, err := config.Load(getenv, config.Needs{Database: true})
	if err != nil {
		return nil, err
	}
	opts = append([]store.OpenOption{store.ConnectTimeout(cfg.DatabaseConnectTimeout), store.PoolMode(cfg.DatabasePoolMode)}, opts...)
	return store.Open(ctx, cfg.DatabaseURL.Reveal(), opts...)
}

// errMigrateThroughPooler: the migrations hold a session-level advisory
// lock, which a pooler in transaction mode would leave on whichever server
// connection took it.
var errMigrateThroughPooler = errors.New("migrate needs a session of its own: run it with DATABASE_URL naming PostgreSQL itself, not PgBouncer in transaction mode, and DATABASE_POOL_MODE unset (docs/scaling.md, PgBouncer)")

func migrate(ctx context.Context, getenv func(string) string) error {
	cfg, err := config.Load(getenv, config.Needs{Database: true})
	if err != nil {
		return err
	}
	if cfg.DatabasePoolMode == "transaction" {
		return errMigrateThroughPooler
	}
	pool, err := openDB(ctx, getenv, store.NoStatementTimeout())
	if err != nil {
		return err
	}
	defer pool.Close()
	if err := store.Migrate(ctx, pool); err != nil {
		return err
	}
	db := store.New(pool).WithRetention(retention(cfg))
	// The partitions of events and webhook deliveries for the retention
	// configured, so the first rows written find theirs (the worker keeps
	// them from then on).
	if _, err := db.MaintainPartitions(ctx, time.Now()); err != nil {
		return err
	}
	// Data the schema now expects of rows written before it: the charge of
	// each event (migration 00005). The retention prune fills what replicas
	// of the previous release write during the rollout.
	_, err = db.FillEventCharges(ctx)
	return err
}

// retention is how long the configuration keeps events and the delivery log.
func retention(cfg config.Config) store.Retention {
	return store.Retention{Events: cfg.EventRetention, WebhookLog: cfg.WebhookLogRetention}
}

// verifyAudit checks the audit log's chains and months and prints what it
// found: a summary, then each month dropped unrecorded and each broken
// chain's first broken entry. It reports false when anything is broken.
func verifyAudit(ctx context.Context, getenv func(string) string, stdout io.Writer) (bool, error) {
	pool, err := openDB(ctx, getenv)
	if err != nil {
		return false, err
	}
	defer pool.Close()
	sum, err := store.New(pool).VerifyAudit(ctx)
	if err != nil {
		return false, err
	}
	fmt.Fprintf(stdout, "audit log: %d entries in %d chains of %d merchants checked\n", sum.Entries, sum.Chains, sum.Merchants)
	for _, m := range sum.Missing {
		fmt.Fprintf(stdout, "BROKEN: %s\n", m.Error())
	}
	for _, b := range sum.Broken {
		fmt.Fprintf(stdout, "BROKEN: merchant %s chain %d seq %d: %s\n", b.MerchantID, b.Chain, b.Seq, b.Reason)
	}
	if !sum.Intact() {
		fmt.Fprintf(stdout, "audit log: %d broken chain(s), %d month(s) dropped unrecorded\n", len(sum.Broken), len(sum.Missing))
		return false, nil
	}
	fmt.Fprintln(stdout, "audit log: intact")
	return true, nil
}

func createMerchant(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("merchant create", flag.ContinueOnError)
	fs.SetOutput(stderr)
	email := fs.String("email", "", "login email")
	password := fs.String("password", "", "login password (8 to 256 characters)")
	name := fs.String("name", "", "display name")
	ifAbsent := fs.Bool("if-absent", false, "print the merchant this email already owns, if any, instead of creating another")
	if err := fs.Parse(args); err != nil {
		return err
	}
	pool, err := openDB(ctx, getenv)
	if err != nil {
		return err
	}
	defer pool.Close()
	db := store.New(pool)
	if *ifAbsent {
		// An email may own several merchants; a script that runs again
		// (make run) wants the one it made, not a second.
		ms, err := db.MembershipsByEmail(ctx, *email, 10)
		if err != nil {
			return err
		}
		for _, mem := range ms {
			if mem.Role != authz.Owner {
				continue
			}
			m, err := db.MerchantByID(ctx, mem.MerchantID)
			if err != nil {
				return err
			}
			return json.NewEncoder(stdout).Encode(httpapi.PresentMerchant(m))
		}
	}
	svc := merchants.NewService(db, auth.NewHasher(1), time.Now)
	m, err := svc.Create(ctx, *email, *password, *name)
	if err != nil {
		if ae, ok := apperr.As(err); ok && ae.Kind != apperr.KindInternal {
			return errors.New(ae.Message)
		}
		return err
	}
	return json.NewEncoder(stdout).Encode(httpapi.PresentMerchant(m))
}

func serve(ctx context.Context, getenv func(string) string, stderr io.Writer) error {
	cfg, err := config.Load(getenv, config.Needs{Database: true, Redis: true, JWT: true, Encryption: true})
	if err != nil {
		return err
	}
	log := logging.New(stderr, cfg.LogLevel, "api")
	stopTracing, err := tracing.Setup(ctx, getenv, "gatehouse-api")
	if err != nil {
		return err
	}
	defer flushTraces(stopTracing, log)

	dbOpts := []store.OpenOption{store.Deadlines(cfg.DatabaseStatementTimeout, cfg.DatabaseConnectTimeout), store.PoolMode(cfg.DatabasePoolMode)}
	pool, err := store.Open(ctx, cfg.DatabaseURL.Reveal(), dbOpts...)
	if err != nil {
		return err
	}
	defer pool.Close()
	store.WarnServerTimeouts(ctx, pool, cfg.DatabasePoolMode, log)
	// DATABASE_READ_URL: the lists read a hot standby while it is fresh.
	// It is not pinged at start: a dead standby must not keep the replica
	// from serving, the primary reads for it.
	var standby *store.Standby
	if cfg.DatabaseReadURL != "" {
		readPool, err := store.OpenLazy(ctx, cfg.DatabaseReadURL.Reveal(), dbOpts...)
		if err != nil {
			return fmt.Errorf("DATABASE_READ_URL: %w", err)
		}
		defer readPool.Close()
		standby = store.NewStandby(readPool, pool, cfg.DatabaseReadMaxLag, log)
		go standby.Run(ctx)
	}
	cache.SetLogger(log)
	rdb, err := cache.Dial(cfg.RedisURL.Reveal(), cfg.RedisMode)
	if err != nil {
		return err
	}
	defer rdb.Close()
	if err := tracing.InstrumentRedis(rdb); err != nil {
		return err
	}

	reg := metrics.NewRegistry()
	reg.MustRegister(store.PoolCollector(pool), cache.PoolCollector(rdb, "cache"))
	db := store.New(pool).WithRetention(retention(cfg))
	if standby != nil {
		reg.MustRegister(standby.Collectors()...)
		db.WithStandby(standby)
	}
	rc := cache.New(rdb)
	hasher := auth.NewHasher(cfg.MaxConcurrentHashes)
	tokens := auth.NewTokens([]byte(cfg.JWTSecret.Reveal()), cfg.JWTIssuer, cfg.JWTAudience, time.Now)
	draining := new(atomic.Bool)
	keys, err := keyring.New(cfg.EncryptionKey)
	if err != nil {
		return err
	}
	queue := jobs.NewQueue(asynq.NewClientFromRedisClient(rdb), nil, cfg)
	onEnqueueErr := func(err error) {
		log.Warn("task not enqueued; the outbox sweeper will enqueue it", "err", err)
	}
	// Tasks are enqueued off the request path; see outbox.Relay. It is
	// drained before the Redis client closes.
	relay := outbox.NewRelay(queue, relayWorkers, relayDepth, relayTimeout, onEnqueueErr)
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), relayTimeout)
		defer cancel()
		if err := relay.Close(ctx); err != nil {
			log.Warn("tasks left to the outbox sweeper at shutdown", "tasks", relay.Waiting(), "err", err)
		}
	}()

	// The event stream's hub: it polls only while a stream is open, and ends
	// every stream when the replica starts draining.
	hub := events.NewHub(db, streamPoll, events.Limits{
		Total: cfg.EventStreamMax, PerMerchant: cfg.EventStreamMaxPerMerchant, PerCredential: cfg.EventStreamMaxPerKey}, log)
	go hub.Run(ctx)

	// The charge path routes from a cache of each merchant's connectors and
	// routing; a change on any replica drops the copies of all of them.
	notices := cache.NewNotices(rdb, cache.RoutingChannel)
	directory := connectors.NewDirectory(db, notices, cfg.Providers(), cfg.DefaultProvider, 0, time.Now)
	listenCtx, stopListening := context.WithCancel(ctx)
	listening := make(chan struct{})
	go func() {
		defer close(listening)
		notices.Listen(listenCtx, directory.Forget, directory.ForgetAll, log)
	}()
	// Before the Redis client closes, and before serve returns.
	defer func() { stopListening(); <-listening }()

	// HTTP_ADDR is bound before the handlers are made: with port 0 the
	// default PUBLIC_URL (the links they build) names the port taken.
	ln, err := net.Listen("tcp", cfg.HTTPAddr)
	if err != nil {
		return fmt.Errorf("listen on HTTP_ADDR %s: %w", cfg.HTTPAddr, err)
	}
	defer ln.Close() // on an error before it is served; then a no-op
	cfg.HTTPBound(ln.Addr().String())

	httpMetrics := metrics.NewHTTP(reg)
	conns := connectors.NewService(db, keys, directory, cfg.Providers(), time.Now).WithPublicURL(cfg.PublicURL)
	deps := httpapi.Deps{
		Config:    cfg,
		Log:       log,
		Auth:      auth.NewService(db, db, rc, hasher, tokens, time.Now, log),
		Keys:      apikeys.NewService(db, rc, time.Now, log),
		KeyCache:  rc,
		Merchants: merchants.NewService(db, hasher, time.Now),
		Members:   members.NewService(db, hasher, time.Now),
		MFA:       mfa.NewService(db, keys, time.Now),
		Charges: charges.NewService(db, relay, keys, cfg.Providers(), cfg.DefaultProvider, time.Now, onEnqueueErr).WithTokens(db).
			WithCustomers(db).WithChallenges(db, charges.NewLinks(cfg.PublicURL, keys)).
			WithRouter(directory, cfg.RoutingMaxAttempts),
		Connectors: conns,
		Ledger:     ledger.NewService(db, conns.Payee, relay, time.Now, cfg.SandboxPayoutDelay, onEnqueueErr),
		Disputes:   disputes.NewService(db, nil, relay, time.Now, log, onEnqueueErr),
		Reconcile: reconcile.NewService(db, conns.GetAny, settlementReports(db, keys, cfg), time.Now).
			WithPayouts(ledger.NewImporter(db, relay, time.Now, log)),
		Notifications: notifications.NewReceiver(db, keys, relay, string(cfg.StripeWebhookSecret), time.Now, onEnqueueErr).
			WithMetrics(notifications.NewMetrics(reg)),
		Refunds:        refunds.NewService(db, relay, time.Now, onEnqueueErr),
		Customers:      customers.NewService(db, keys, time.Now),
		Events:         events.NewService(db, time.Now),
		Webhooks:       webhooks.NewService(db, relay, keys, cfg.WebhookAllowPrivateNetworks, time.Now, onEnqueueErr).WithFilterPaths(eventtypes.HasPath),
		AuditLog:       db,
		Stream:         hub,
		Keyring:        keys,
		Limiter:        ratelimit.New(rdb, ratelimit.NewMetrics(reg), log),
		Metrics:        httpMetrics,
		MetricsHandler: metrics.Handler(reg),
		Checks: map[string]func(context.Context) error{
			"postgres": db.Ping,
			"redis":    func(ctx context.Context) error { return rdb.Ping(ctx).Err() },
		},
		Draining: draining,
	}
	app := httpapi.NewServer(deps)

	// PROBE_ADDR: /healthz and /readyz on a listener of their own too, out
	// of HTTP_MAX_CONNS, so the kubelet's probes answer while clients fill
	// the public port. Closed once the requests have drained, so readiness
	// answers 503 throughout the drain.
	if cfg.ProbeAddr != "" {
		pln, err := net.Listen("tcp", cfg.ProbeAddr)
		if err != nil {
			return fmt.Errorf("listen on PROBE_ADDR %s: %w", cfg.ProbeAddr, err)
		}
		probes := httpapi.NewProbeServer(deps)
		go func() {
			if err := probes.Listener(pln); err != nil {
				log.Error("probe server stopped", "err", err)
			}
		}()
		defer func() { _ = probes.ShutdownWithTimeout(metricsCloseTimeout) }()
		log.Info("api probes listening", "probe_addr", pln.Addr().String())
	}

	// API_METRICS_ADDR: /metrics on a listener of its own, off the public port.
	var metricsSrv *http.Server
	if cfg.APIMetricsAddr != "" {
		mln, err := net.Listen("tcp", cfg.APIMetricsAddr)
		if err != nil {
			return fmt.Errorf("listen on API_METRICS_ADDR %s: %w", cfg.APIMetricsAddr, err)
		}
		metricsSrv = httpapi.MetricsServer(metrics.Handler(reg))
		go func() {
			if err := metricsSrv.Serve(mln); err != nil && !errors.Is(err, http.ErrServerClosed) {
				log.Error("metrics server stopped", "err", err)
			}
		}()
		// Closed once the requests have drained, so the drain can be scraped.
		defer func() {
			ctx, cancel := context.WithTimeout(context.Background(), metricsCloseTimeout)
			defer cancel()
			_ = metricsSrv.Shutdown(ctx)
		}()
		log.Info("api metrics listening", "api_metrics_addr", mln.Addr().String())
	}

	limited := httpapi.LimitListener(ln, cfg.HTTPMaxConns, httpMetrics, log)
	log.Info("api listening", "addr", limited.Addr().String(), "max_conns", cfg.HTTPMaxConns, "public_url", cfg.PublicURL)
	served := make(chan error, 1)
	go func() { served <- app.Listener(limited) }()

	select {
	case err := <-served:
		return err
	case <-ctx.Done():
	}
	// Drain: readiness turns false (and, for SHUTDOWN_DELAY, requests are still
	// served while load balancers notice), in-flight requests finish, exit 0.
	draining.Store(true)
	hub.Close() // open streams end: their clients resume on another replica
	log.Info("shutting down", "delay", cfg.ShutdownDelay.String(), "timeout", cfg.ShutdownTimeout.String())
	if cfg.ShutdownDelay > 0 {
		select {
		case <-time.After(cfg.ShutdownDelay):
		case err := <-served:
			return err
		}
	}
	// While the server waits for the requests in flight, connections that
	// never sent one are closed: the server would otherwise wait for each
	// until HTTP_READ_TIMEOUT.
	sweepDone := make(chan struct{})
	var unused atomic.Int64
	var sweeping sync.WaitGroup
	sweeping.Go(func() {
		tick := time.NewTicker(unusedConnSweep)
		defer tick.Stop()
		for {
			unused.Add(int64(limited.CloseUnused(unusedConnGrace)))
			select {
			case <-sweepDone:
				return
			case <-tick.C:
			}
		}
	})
	shutErr := app.ShutdownWithTimeout(cfg.ShutdownTimeout)
	// The sweep that closed the last spares may still be counting them.
	close(sweepDone)
	sweeping.Wait()
	if err := shutErr; err != nil {
		log.Error("shutdown incomplete", "err", err)
	}
	log.Info("stopped", "unused_connections_closed", unused.Load())
	return nil
}

// flushTraces sends the spans still buffered, for at most 5 s.
func flushTraces(stop func(context.Context) error, log *slog.Logger) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := stop(ctx); err != nil {
		log.Warn("traces not flushed", "err", err)
	}
}
