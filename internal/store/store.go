// Package store implements every domain store on PostgreSQL with pgx. SQL lives
// as constants beside the methods that run it; SQLSTATEs are turned into
// apperr kinds here and nowhere else.
package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/exaring/otelpgx"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/lock"

	"github.com/gatehouse-pay/gatehouse/internal/apperr"
	"github.com/gatehouse-pay/gatehouse/internal/tracing"
	"github.com/gatehouse-pay/gatehouse/migrations"
)

// Store is the PostgreSQL implementation of the domain stores.
type Store struct {
	pool *pgxpool.Pool
}

// New returns a Store on pool.
func New(pool *pgxpool.Pool) *Store { return &Store{pool: pool} }

// Open connects a pool to url and checks that the server answers. When
// tracing is on (tracing.Setup runs first) the pool's work is traced.
func Open(ctx context.Context, url string) (*pgxpool.Pool, error) {
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
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("store: connect: %w", redact(err))
	}
	pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := pool.Ping(pctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("store: ping: %w", redact(err))
	}
	return pool, nil
}

// redact drops the parse error's text, which can quote the URL and its password.
func redact(err error) error {
	var pe *pgconn.ParseConfigError
	if errors.As(err, &pe) {
		return errors.New("invalid connection string")
	}
	return err
}

// Ping checks that Postgres answers.
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
	return apperr.Internal(err)
}
