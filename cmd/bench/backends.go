package main

import (
	"context"

	"github.com/gatehouse-pay/gatehouse/internal/cache"
	"github.com/gatehouse-pay/gatehouse/internal/store"
)

// sqlDB is a Postgres pool opened with the project's own store.Open, so the
// floor talks to Postgres through exactly the driver, pool size and session
// settings the API uses (and this package names no driver type: the
// dependency rules keep pgx inside the adapters).
type sqlDB struct {
	exec  func(ctx context.Context, sql string, args ...any) error
	query func(ctx context.Context, sql string, args []any, dest ...any) error
	close func()
}

func openSQL(ctx context.Context, url string) (*sqlDB, error) {
	pool, err := store.Open(ctx, url)
	if err != nil {
		return nil, err
	}
	return &sqlDB{
		exec: func(ctx context.Context, sql string, args ...any) error {
			_, err := pool.Exec(ctx, sql, args...)
			return err
		},
		query: func(ctx context.Context, sql string, args []any, dest ...any) error {
			return pool.QueryRow(ctx, sql, args...).Scan(dest...)
		},
		close: pool.Close,
	}, nil
}

// redisDB is a client made by the project's cache.NewClient (the API's
// timeouts, retries and dial breaker).
type redisDB struct {
	ping    func(ctx context.Context) error
	load    func(ctx context.Context, script string) (string, error)
	evalSha func(ctx context.Context, sha string, keys []string, args ...any) ([]int64, error)
	info    func(ctx context.Context, section string) (string, error)
	close   func() error
}

func openRedis(url string) (*redisDB, error) {
	rdb, err := cache.NewClient(url)
	if err != nil {
		return nil, err
	}
	return &redisDB{
		ping: func(ctx context.Context) error { return rdb.Ping(ctx).Err() },
		load: func(ctx context.Context, script string) (string, error) {
			return rdb.ScriptLoad(ctx, script).Result()
		},
		evalSha: func(ctx context.Context, sha string, keys []string, args ...any) ([]int64, error) {
			return rdb.EvalSha(ctx, sha, keys, args...).Int64Slice()
		},
		info: func(ctx context.Context, section string) (string, error) {
			return rdb.Info(ctx, section).Result()
		},
		close: rdb.Close,
	}, nil
}
