// Package testenv gives tests real PostgreSQL and Redis: a database cloned per
// test from a migrated template, and a Redis DB index per package flushed at
// set-up. When the services are unreachable a test is skipped, unless
// GATEHOUSE_REQUIRE_SERVICES=1 (set by make test and CI), where it fails.
package testenv

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/gatehouse-pay/gatehouse/internal/store"
	"github.com/gatehouse-pay/gatehouse/migrations"
)

// PostgresURL is the server tests use: TEST_DATABASE_URL or the local default.
func PostgresURL() string {
	if u := os.Getenv("TEST_DATABASE_URL"); u != "" {
		return u
	}
	return "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"
}

// RedisURL is the server tests use: TEST_REDIS_URL or the local default, without a DB index.
func RedisURL() string {
	if u := os.Getenv("TEST_REDIS_URL"); u != "" {
		return strings.TrimRight(u, "/")
	}
	return "redis://127.0.0.1:6379"
}

func unavailable(t testing.TB, format string, args ...any) {
	t.Helper()
	if os.Getenv("GATEHOUSE_REQUIRE_SERVICES") == "1" {
		t.Fatalf(format, args...)
	}
	t.Skipf(format+" (set GATEHOUSE_REQUIRE_SERVICES=1 to fail instead)", args...)
}

var (
	templateOnce sync.Once
	templateName string
	templateErr  error
)

// migrationsHash names the template after the migrations it holds, so a
// changed migration builds a new template and an unchanged one is reused.
func migrationsHash() (string, error) {
	h := sha256.New()
	var names []string
	err := fs.WalkDir(migrations.FS, ".", func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			names = append(names, p)
		}
		return err
	})
	if err != nil {
		return "", err
	}
	sort.Strings(names)
	for _, n := range names {
		b, err := fs.ReadFile(migrations.FS, n)
		if err != nil {
			return "", err
		}
		h.Write([]byte(n))
		h.Write(b)
	}
	return hex.EncodeToString(h.Sum(nil))[:12], nil
}

// withDatabase returns base with its path set to db.
func withDatabase(base, db string) string {
	u, err := url.Parse(base)
	if err != nil {
		return base
	}
	u.Path = "/" + db
	return u.String()
}

func buildTemplate(ctx context.Context) (string, error) {
	hash, err := migrationsHash()
	if err != nil {
		return "", err
	}
	name := "gatehouse_tmpl_" + hash
	admin, err := pgx.Connect(ctx, PostgresURL())
	if err != nil {
		return "", err
	}
	defer admin.Close(ctx)
	// One builder at a time across test binaries running in parallel.
	if _, err := admin.Exec(ctx, "SELECT pg_advisory_lock(727274)"); err != nil {
		return "", err
	}
	defer admin.Exec(context.Background(), "SELECT pg_advisory_unlock(727274)") //nolint:errcheck
	var exists bool
	if err := admin.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)", name).Scan(&exists); err != nil {
		return "", err
	}
	if exists {
		_, err := admin.Exec(ctx, "COMMENT ON DATABASE "+pgx.Identifier{name}.Sanitize()+" IS '"+strconv.FormatInt(time.Now().Unix(), 10)+"'")
		return name, err
	}
	// Templates of other migrations are dropped once unused for a day (test
	// runs of other checkouts may be using them now); a half-built one is
	// rebuilt. A template's comment is when it was last wanted.
	rows, err := admin.Query(ctx, `SELECT datname FROM pg_database WHERE datname LIKE 'gatehouse_tmpl_%'
		AND (datname LIKE '%_building' OR coalesce(shobj_description(oid, 'pg_database'), '') !~ '^[0-9]+$'
			OR shobj_description(oid, 'pg_database')::bigint < extract(epoch FROM now() - interval '1 day'))`)
	if err != nil {
		return "", err
	}
	old, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return "", err
	}
	for _, o := range old {
		if _, err := admin.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{o}.Sanitize()+" WITH (FORCE)"); err != nil {
			return "", err
		}
	}
	building := name + "_building"
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{building}.Sanitize()); err != nil {
		return "", err
	}
	pool, err := store.Open(ctx, withDatabase(PostgresURL(), building))
	if err != nil {
		return "", err
	}
	err = store.Migrate(ctx, pool)
	pool.Close()
	if err != nil {
		return "", err
	}
	if _, err := admin.Exec(ctx, "ALTER DATABASE "+pgx.Identifier{building}.Sanitize()+" RENAME TO "+pgx.Identifier{name}.Sanitize()); err != nil {
		return "", err
	}
	_, err = admin.Exec(ctx, "COMMENT ON DATABASE "+pgx.Identifier{name}.Sanitize()+" IS '"+strconv.FormatInt(time.Now().Unix(), 10)+"'")
	return name, err
}

// DB is a fresh, migrated database for one test.
type DB struct {
	Pool *pgxpool.Pool
	URL  string
	Name string
}

// NewDB clones the migrated template into a new database that is dropped when
// the test ends.
func NewDB(t testing.TB) DB {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	templateOnce.Do(func() { templateName, templateErr = buildTemplate(ctx) })
	if templateErr != nil {
		unavailable(t, "testenv: PostgreSQL at %s: %v", redactURL(PostgresURL()), templateErr)
	}
	return createDB(ctx, t, templateName)
}

// NewEmptyDB creates a database without any table, dropped when the test
// ends: for a test that migrates it itself (with another release's binary).
func NewEmptyDB(t testing.TB) DB {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	return createDB(ctx, t, "")
}

// createDB creates a database from template ("" for the server's default)
// and opens it; it is dropped when the test ends.
func createDB(ctx context.Context, t testing.TB, template string) DB {
	t.Helper()
	var b [6]byte
	_, _ = rand.Read(b[:])
	name := "gatehouse_test_" + hex.EncodeToString(b[:])
	admin, err := pgx.Connect(ctx, PostgresURL())
	if err != nil {
		unavailable(t, "testenv: PostgreSQL: %v", err)
	}
	defer admin.Close(ctx)
	create := "CREATE DATABASE " + pgx.Identifier{name}.Sanitize()
	if template != "" {
		create += " TEMPLATE " + pgx.Identifier{template}.Sanitize()
	}
	if _, err := admin.Exec(ctx, create); err != nil {
		t.Fatalf("testenv: %s: %v", create, err)
	}
	dbURL := withDatabase(PostgresURL(), name)
	pool, err := store.Open(ctx, dbURL)
	if err != nil {
		t.Fatalf("testenv: open %s: %v", name, err)
	}
	t.Cleanup(func() {
		pool.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if c, err := pgx.Connect(ctx, PostgresURL()); err == nil {
			_, _ = c.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)")
			c.Close(ctx)
		}
	})
	return DB{Pool: pool, URL: dbURL, Name: name}
}

func redactURL(s string) string {
	u, err := url.Parse(s)
	if err != nil {
		return "(unparseable URL)"
	}
	return u.Redacted()
}

// Redis DB indexes, one per test package, so packages run in parallel safely.
const (
	RedisDBRateLimit = 1
	RedisDBCache     = 2
	RedisDBJobs      = 4
	RedisDBCmd       = 5
)

// RedisURLFor is the URL of DB index db on the test server.
func RedisURLFor(db int) string { return fmt.Sprintf("%s/%d", RedisURL(), db) }

// NewRedis returns a client on DB index db, flushed.
func NewRedis(t testing.TB, db int) redis.UniversalClient {
	t.Helper()
	opts, err := redis.ParseURL(RedisURLFor(db))
	if err != nil {
		t.Fatalf("testenv: TEST_REDIS_URL: %v", err)
	}
	c := redis.NewClient(opts)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := c.Ping(ctx).Err(); err != nil {
		c.Close()
		unavailable(t, "testenv: Redis at %s: %v", redactURL(RedisURL()), err)
	}
	if err := c.FlushDB(ctx).Err(); err != nil {
		t.Fatalf("testenv: flush redis db %d: %v", db, err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}
