// Package store implements every domain store on PostgreSQL with pgx. SQL lives
// as constants beside the methods that run it; SQLSTATEs are turned into
// apperr kinds here and nowhere else.
package store

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strconv"
	"time"

	"github.com/exaring/otelpgx"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/lock"

	"github.com/gatehouse-pay/gatehouse/internal/apperr"
	"github.com/gatehouse-pay/gatehouse/internal/idempotency"
	"github.com/gatehouse-pay/gatehouse/internal/tracing"
	"github.com/gatehouse-pay/gatehouse/internal/webhooks"
	"github.com/gatehouse-pay/gatehouse/migrations"
)

// Store is the PostgreSQL implementation of the domain stores.
type Store struct {
	pool      *pgxpool.Pool
	standby   *Standby // nil: every read on the primary
	batches   batches
	retention Retention
	q         retainedQueries
}

// batches are the worker's delivery reads and attempt records, each run as
// one statement for the calls made at the same time.
type batches struct {
	pool   *pgxpool.Pool // the pool they run on (see WithBatchPool)
	work   *batcher[string, work]
	events *batcher[string, []webhooks.Work]
	record *batcher[webhooks.AttemptRecord, bool]
}

// Delivery batches: at most batchMax calls per statement and batchParallel
// statements of a kind in flight; a batch lingers batchLinger for more calls
// (see batcher) and gives up after batchTimeout.
const (
	batchMax      = 200
	batchParallel = 2
	batchLinger   = 3 * time.Millisecond
	batchTimeout  = 10 * time.Second
)

// New returns a Store on pool.
func New(pool *pgxpool.Pool) *Store {
	s := &Store{pool: pool}
	s.WithRetention(DefaultRetention)
	s.batches.pool = pool
	s.batches.work = newBatcher(batchMax, batchParallel, batchLinger, batchTimeout, s.deliveriesForWork)
	s.batches.events = newBatcher(batchMax, batchParallel, batchLinger, batchTimeout, s.eventFirsts)
	s.batches.record = newBatcher(batchMax, batchParallel, batchLinger, batchTimeout, s.recordAttempts)
	return s
}

// WithRetention sets how long events and the delivery log are kept: what
// the reads serve and what MaintainPartitions drops.
func (s *Store) WithRetention(r Retention) *Store {
	s.retention, s.q = r, newRetainedQueries(r)
	return s
}

// WithBatchPool runs the delivery batches on pool, a pool opened with
// GenericPlans: the batches are the worker's most frequent statements, and
// planning them afresh on every run would cost more than running them.
func (s *Store) WithBatchPool(pool *pgxpool.Pool) *Store {
	s.batches.pool = pool
	return s
}

// WithStandby serves from sb the list reads that may lag the primary (see
// Standby).
func (s *Store) WithStandby(sb *Standby) *Store {
	s.standby = sb
	return s
}

// ObserveBatches calls f with the kind ("event", "read" or "record") and
// the number of calls of every delivery batch the store runs.
func (s *Store) ObserveBatches(f func(kind string, size int)) {
	s.batches.events.setObserver(func(n int) { f("event", n) })
	s.batches.work.setObserver(func(n int) { f("read", n) })
	s.batches.record.setObserver(func(n int) { f("record", n) })
}

// An OpenOption adjusts a pool before it connects.
type OpenOption func(*openConfig)

// openConfig is a pool's configuration while the options apply.
type openConfig struct {
	*pgxpool.Config
	transactionPooling bool
}

// TransactionPooling makes the pool work through a pooler in transaction
// mode (PgBouncer's pool_mode=transaction, DATABASE_POOL_MODE=transaction),
// which hands each transaction, or each statement outside one, to any of
// its server connections:
//
//   - no named prepared statements, which would stay behind on a server
//     connection the next statement may not get: statements run with the
//     unnamed one, in one round trip, their descriptions cached
//     (cache_describe) unless DATABASE_URL chose another
//     default_query_exec_mode;
//   - no session settings in the startup packet, which PgBouncer refuses
//     (all but application_name and a few others) and could not keep per
//     client anyway: lock_timeout and statement_timeout then come from the
//     server (ALTER ROLE ... SET, see docs/scaling.md), and the delivery
//     batches' generic plans are not asked for.
//
// Whatever else needs a session (advisory locks of the migrations, LISTEN)
// must not go through such a pooler; nothing on the serving pools does.
func TransactionPooling() OpenOption {
	return func(c *openConfig) { c.transactionPooling = true }
}

// sessionParams are the settings Open and its options send in the startup
// packet; under TransactionPooling none is.
var sessionParams = []string{"lock_timeout", "statement_timeout", "plan_cache_mode", "enable_seqscan"}

// GenericPlans makes the pool's sessions plan each prepared statement once,
// for any parameters (plan_cache_mode = force_generic_plan), rather than
// plan it afresh each time. Only for statements whose best plan does not
// depend on their parameters: lookups and updates by primary key. Such a
// plan lasts as long as the connection (until an ANALYZE of its tables),
// so one made while a table, or its newest partition, was still small
// would scan the whole table on every call once it is not: the sessions
// also turn sequential scans down (enable_seqscan = off), and the plan
// takes the key's index whatever the table's size when it was made.
func GenericPlans() OpenOption {
	return func(c *openConfig) {
		c.ConnConfig.RuntimeParams["plan_cache_mode"] = "force_generic_plan"
		c.ConnConfig.RuntimeParams["enable_seqscan"] = "off"
	}
}

// NoStatementTimeout lifts any statement_timeout the server sets for the
// role (see TransactionPooling): for the migrations, whose statements take
// the time they need.
func NoStatementTimeout() OpenOption {
	return func(c *openConfig) { c.ConnConfig.RuntimeParams["statement_timeout"] = "0" }
}

// MaxConns bounds the pool's connections.
func MaxConns(n int32) OpenOption {
	return func(c *openConfig) { c.MaxConns = n }
}

// Open connects a pool to url and checks that the server answers. When
// tracing is on (tracing.Setup runs first) the pool's work is traced. The
// serving pools pass Deadlines; without it a connection gets 5 s to open and
// statements have no deadline (migrations).
func Open(ctx context.Context, url string, opts ...OpenOption) (*pgxpool.Pool, error) {
	pool, err := OpenLazy(ctx, url, opts...)
	if err != nil {
		return nil, err
	}
	cfg := pool.Config()
	pctx, cancel := context.WithTimeout(ctx, cfg.ConnConfig.ConnectTimeout+max(cfg.PingTimeout, 5*time.Second))
	defer cancel()
	if err := pool.Ping(pctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("store: ping: %w", redact(err))
	}
	return pool, nil
}

// OpenLazy is Open without the check that the server answers: the pool
// connects when first used. For a standby, whose absence must not keep a
// replica from starting.
func OpenLazy(ctx context.Context, url string, opts ...OpenOption) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("store: parse DATABASE_URL: %w", redact(err))
	}
	cfg.ConnConfig.ConnectTimeout = 5 * time.Second
	if cfg.ConnConfig.RuntimeParams == nil {
		cfg.ConnConfig.RuntimeParams = map[string]string{}
	}
	cfg.ConnConfig.RuntimeParams["application_name"] = "gatehouse"
	// A request never waits long for a row lock: a repeat of an idempotent
	// request still running answers 409 instead of queueing behind it.
	cfg.ConnConfig.RuntimeParams["lock_timeout"] = "3s"
	if tracing.Enabled() {
		// Queries, batches and pool waits within a traced request or task
		// become child spans: the SQL text with its $n placeholders, never
		// the arguments.
		cfg.ConnConfig.Tracer = otelpgx.NewTracer()
	}
	oc := &openConfig{Config: cfg}
	for _, o := range opts {
		o(oc)
	}
	if oc.transactionPooling {
		for _, p := range sessionParams {
			delete(cfg.ConnConfig.RuntimeParams, p)
		}
		if cfg.ConnConfig.DefaultQueryExecMode == pgx.QueryExecModeCacheStatement {
			cfg.ConnConfig.DefaultQueryExecMode = pgx.QueryExecModeCacheDescribe
		}
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("store: connect: %w", redact(err))
	}
	return pool, nil
}

// PoolMode is TransactionPooling for DATABASE_POOL_MODE=transaction, and
// nothing for session.
func PoolMode(mode string) OpenOption {
	return func(c *openConfig) { c.transactionPooling = c.transactionPooling || mode == "transaction" }
}

// WarnServerTimeouts logs a warning, under DATABASE_POOL_MODE=transaction,
// when the server gives the pool's sessions no lock_timeout: the pool
// cannot set it itself (TransactionPooling), and without it a repeat of an
// idempotent request still running waits for the first instead of
// answering 409.
func WarnServerTimeouts(ctx context.Context, pool *pgxpool.Pool, mode string, log *slog.Logger) {
	if mode != "transaction" {
		return
	}
	var lock, statement string
	err := pool.QueryRow(ctx, `SELECT current_setting('lock_timeout'), current_setting('statement_timeout')`).Scan(&lock, &statement)
	switch {
	case err != nil:
		log.Warn("could not read the server's lock_timeout", "err", err)
	case lock == "0":
		log.Warn("DATABASE_POOL_MODE=transaction and the server sets no lock_timeout for this role: set it (ALTER ROLE ... SET lock_timeout = '3s', see docs/scaling.md, PgBouncer)",
			"lock_timeout", lock, "statement_timeout", statement)
	default:
		log.Info("server session settings", "lock_timeout", lock, "statement_timeout", statement)
	}
}

// redact drops the parse error's text, which can quote the URL and its password.
func redact(err error) error {
	var pe *pgconn.ParseConfigError
	if errors.As(err, &pe) {
		return errors.New("invalid connection string")
	}
	return err
}

// Ping checks that Postgres answers: a connection from the pool (a new one
// bounded by the connect timeout, an idle one pinged first within the
// statement deadline), then a ping on it, bounded by the caller's context.
func (s *Store) Ping(ctx context.Context) error { return s.pool.Ping(ctx) }

// Migrate applies every embedded migration that has not run yet.
func Migrate(ctx context.Context, pool *pgxpool.Pool) error {
	db := stdlib.OpenDBFromPool(pool)
	defer db.Close()
	// An advisory lock serialises concurrent runs (two migration Jobs, or
	// replicas started with migrate at once): the second waits, then finds
	// nothing to do.
	locker, err := lock.NewPostgresSessionLocker()
	if err != nil {
		return fmt.Errorf("store: migrations: %w", err)
	}
	p, err := goose.NewProvider(goose.DialectPostgres, db, migrations.FS, goose.WithSessionLocker(locker))
	if err != nil {
		return fmt.Errorf("store: migrations: %w", err)
	}
	if _, err := p.Up(ctx); err != nil {
		return fmt.Errorf("store: migrate: %w", err)
	}
	return nil
}

// mapErr turns driver errors into apperr kinds: no rows is NotFound (of what),
// a unique violation is Conflict, a dead connection is Unavailable.
//
// A connection that breaks under a statement (the server was killed, or
// failed over to a standby: end of stream, reset, broken pipe) is
// Unavailable too. The statement may or may not have committed; a client
// that sends the request again with its Idempotency-Key finds out which.
func mapErr(err error, what string) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, pgx.ErrNoRows) {
		return apperr.NotFound(what)
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch pgErr.Code {
		case "23505":
			return &apperr.Error{Kind: apperr.KindConflict, Code: apperr.CodeInvalidState, Message: what + " already exists.", Err: err}
		case "22021", "22P05": // a character the database cannot store (NUL)
			return &apperr.Error{Kind: apperr.KindInvalid, Code: apperr.CodeParameterInvalid,
				Message: "Text must not contain NUL characters.", Err: err}
		case "57P01", "57P02", "57P03", "53300": // shutdown, crash, cannot connect now, too many connections
			return apperr.Unavailable(err)
		case "57014": // cancelled: the statement outlived DATABASE_STATEMENT_TIMEOUT on the server
			return apperr.Unavailable(err)
		}
		return apperr.Internal(err)
	}
	if pgconn.SafeToRetry(err) || pgconn.Timeout(err) || errors.Is(err, context.DeadlineExceeded) {
		return apperr.Unavailable(err)
	}
	var connErr *pgconn.ConnectError
	if errors.As(err, &connErr) {
		return apperr.Unavailable(err)
	}
	if connectionLost(err) {
		return apperr.Unavailable(err)
	}
	return apperr.Internal(err)
}

// connectionLost reports whether err is the connection to the server
// breaking: pgx passes on the end of stream or the socket's error, and
// closes the connection, which its pool then drops.
func connectionLost(err error) bool {
	var netErr net.Error
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.As(err, &netErr)
}

// cutoff is the SQL for the time d before now, as the retention periods of
// the domain packages define it.
func cutoff(d time.Duration) string {
	return "now() - interval '" + strconv.FormatInt(int64(d/time.Second), 10) + " seconds'"
}

// idempotencyCutoff is when a stored idempotency key expires.
var idempotencyCutoff = cutoff(idempotency.Retention)
