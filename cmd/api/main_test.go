package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/gatehouse-pay/gatehouse/internal/testenv"
)

func envOf(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

func TestBadConfigStopsWithOneLine(t *testing.T) {
	var stdout, stderr bytes.Buffer
	code := run(context.Background(), nil, envOf(map[string]string{"JWT_SECRET": "too-short-secret", "RATE_LIMIT_LOGIN": "x"}), &stdout, &stderr)
	if code != 1 {
		t.Fatalf("exit code %d, want 1", code)
	}
	msg := stderr.String()
	if strings.Count(msg, "\n") != 1 {
		t.Fatalf("want one line, got %q", msg)
	}
	for _, name := range []string{"DATABASE_URL", "REDIS_URL", "JWT_SECRET", "ENCRYPTION_KEY", "RATE_LIMIT_LOGIN"} {
		if !strings.Contains(msg, name) {
			t.Errorf("message does not name %s: %q", name, msg)
		}
	}
	if strings.Contains(msg, "too-short-secret") {
		t.Errorf("message prints the secret: %q", msg)
	}
}

func TestMigrateAndMerchantCreate(t *testing.T) {
	db := testenv.NewDB(t)
	env := envOf(map[string]string{"DATABASE_URL": db.URL})
	ctx := context.Background()
	var stdout, stderr bytes.Buffer
	if code := run(ctx, []string{"migrate"}, env, &stdout, &stderr); code != 0 {
		t.Fatalf("migrate on a migrated database: exit %d: %s", code, stderr.String())
	}

	stdout.Reset()
	args := []string{"merchant", "create", "--email", "Shop@Example.com", "--password", "long enough password", "--name", "Shop"}
	if code := run(ctx, args, env, &stdout, &stderr); code != 0 {
		t.Fatalf("merchant create: exit %d: %s", code, stderr.String())
	}
	var m map[string]any
	if err := json.Unmarshal(stdout.Bytes(), &m); err != nil {
		t.Fatalf("output is not JSON: %q", stdout.String())
	}
	if !strings.HasPrefix(m["id"].(string), "mer_") || m["email"] != "shop@example.com" || m["name"] != "Shop" || m["object"] != "merchant" {
		t.Fatalf("merchant: %v", m)
	}
	if strings.Contains(stdout.String(), "password") || strings.Contains(stdout.String(), "argon2") {
		t.Fatalf("output carries the password or its hash: %s", stdout.String())
	}

	stderr.Reset()
	if code := run(ctx, args, env, &stdout, &stderr); code != 1 || !strings.Contains(stderr.String(), "already exists") {
		t.Fatalf("duplicate: exit %d, stderr %q", code, stderr.String())
	}
	stderr.Reset()
	if code := run(ctx, []string{"merchant", "create", "--email", "x@example.com", "--password", "short", "--name", "X"}, env, &stdout, &stderr); code != 1 || !strings.Contains(stderr.String(), "Password") {
		t.Fatalf("short password: exit %d, stderr %q", code, stderr.String())
	}
	if code := run(ctx, []string{"frobnicate"}, env, &stdout, &stderr); code != 2 {
		t.Fatalf("unknown command: exit %d, want 2", code)
	}
}

// TestConcurrentMigrations: several `api migrate` runs at once on an empty
// database (two migration Jobs, say) all succeed and apply each migration once.
func TestConcurrentMigrations(t *testing.T) {
	ctx := context.Background()
	admin, err := pgx.Connect(ctx, testenv.PostgresURL())
	if err != nil {
		t.Fatalf("postgres: %v", err)
	}
	defer admin.Close(ctx)
	name := fmt.Sprintf("gh_migrate_%d", time.Now().UnixNano())
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = admin.Exec(context.Background(), "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)") })
	u, err := url.Parse(testenv.PostgresURL())
	if err != nil {
		t.Fatal(err)
	}
	u.Path = "/" + name
	env := envOf(map[string]string{"DATABASE_URL": u.String()})

	const runs = 4
	codes := make(chan string, runs)
	for range runs {
		go func() {
			var stdout, stderr bytes.Buffer
			code := run(ctx, []string{"migrate"}, env, &stdout, &stderr)
			codes <- fmt.Sprintf("exit %d %s", code, strings.TrimSpace(stderr.String()))
		}()
	}
	for range runs {
		if got := <-codes; got != "exit 0 " && got != "exit 0" {
			t.Errorf("concurrent migrate: %s", got)
		}
	}
	conn, err := pgx.Connect(ctx, u.String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var applied, distinct int
	if err := conn.QueryRow(ctx, `SELECT count(*), count(DISTINCT version_id) FROM goose_db_version WHERE version_id > 0`).Scan(&applied, &distinct); err != nil {
		t.Fatal(err)
	}
	if applied == 0 || applied != distinct {
		t.Fatalf("goose_db_version: %d rows for %d versions; want each version once", applied, distinct)
	}
}
