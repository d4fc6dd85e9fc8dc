package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/gatehouse-pay/gatehouse/internal/ids"
	"github.com/gatehouse-pay/gatehouse/internal/members"
	"github.com/gatehouse-pay/gatehouse/internal/store"
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

// TestMetricsAddrStopsWithOneLine: a bad API_METRICS_ADDR, or one already in
// use, stops the api at start with one line naming the setting.
func TestMetricsAddrStopsWithOneLine(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	for _, c := range []struct {
		addr, want string
		services   bool // the address is only tried once the stores are open
	}{
		{"9090", `API_METRICS_ADDR must be host:port or :port, got "9090"`, false},
		{taken.Addr().String(), "listen on API_METRICS_ADDR " + taken.Addr().String(), true},
	} {
		env := map[string]string{
			"JWT_SECRET":       strings.Repeat("j", 32),
			"ENCRYPTION_KEY":   strings.Repeat("ab", 32),
			"DATABASE_URL":     "postgres://gatehouse@127.0.0.1:1/gatehouse",
			"REDIS_URL":        testenv.RedisURLFor(testenv.RedisDBCmd),
			"HTTP_ADDR":        "127.0.0.1:0",
			"API_METRICS_ADDR": c.addr,
		}
		if c.services {
			env["DATABASE_URL"] = testenv.NewDB(t).URL
		}
		ctx, cancel := context.WithCancel(context.Background())
		var stdout, stderr bytes.Buffer
		code := run(ctx, nil, envOf(env), &stdout, &stderr)
		cancel()
		// The log lines before it are JSON; the reason is the last line.
		lines := strings.Split(strings.TrimSuffix(stderr.String(), "\n"), "\n")
		last := lines[len(lines)-1]
		if code != 1 || !strings.HasPrefix(last, "gatehouse api: ") || !strings.Contains(last, c.want) {
			t.Errorf("API_METRICS_ADDR=%s: exit %d, last line %q; want exit 1 and a line naming %q", c.addr, code, last, c.want)
		}
		if !c.services && len(lines) != 1 {
			t.Errorf("API_METRICS_ADDR=%s: want one line, got %q", c.addr, stderr.String())
		}
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

	// An email that belongs to members of other merchants makes a merchant
	// too (member emails are unique per merchant): an invited member's, and
	// another merchant's owner's, who then owns both.
	invited := members.Member{ID: ids.New("mem"), MerchantID: m["id"].(string), Email: "dev@example.com", Role: "developer", CreatedAt: time.Now()}
	if err := store.New(db.Pool).CreateMember(ctx, invited, nil, time.Time{}); err != nil {
		t.Fatal(err)
	}
	for _, email := range []string{"Dev@Example.com", "shop@example.com"} {
		stdout.Reset()
		stderr.Reset()
		args := []string{"merchant", "create", "--email", email, "--password", "long enough password", "--name", "Another"}
		var another map[string]any
		if code := run(ctx, args, env, &stdout, &stderr); code != 0 || json.Unmarshal(stdout.Bytes(), &another) != nil || another["id"] == m["id"] {
			t.Fatalf("merchant create with the email of a member elsewhere (%s): exit %d: %s%s", email, code, stdout.String(), stderr.String())
		}
	}
	// --if-absent prints the merchant the email owns (its first) instead of
	// making another; an email that owns none, or is only a member
	// elsewhere, gets a new one.
	for email, wantSame := range map[string]bool{"SHOP@example.com": true, "new@example.com": false} {
		stdout.Reset()
		stderr.Reset()
		args := []string{"merchant", "create", "--email", email, "--password", "long enough password", "--name", "Again", "--if-absent"}
		var again map[string]any
		if code := run(ctx, args, env, &stdout, &stderr); code != 0 || json.Unmarshal(stdout.Bytes(), &again) != nil || (again["id"] == m["id"]) != wantSame {
			t.Fatalf("merchant create --if-absent %s: exit %d: %s%s; want the first merchant: %v", email, code, stdout.String(), stderr.String(), wantSame)
		}
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

// TestListenersOnPortZero: with port 0 in HTTP_ADDR, API_METRICS_ADDR and
// PROBE_ADDR, each listener takes a free port of its own and the log names
// it, and the default PUBLIC_URL names the port HTTP_ADDR took.
func TestListenersOnPortZero(t *testing.T) {
	env := map[string]string{
		"JWT_SECRET":       strings.Repeat("j", 32),
		"ENCRYPTION_KEY":   strings.Repeat("ab", 32),
		"DATABASE_URL":     testenv.NewDB(t).URL,
		"REDIS_URL":        testenv.RedisURLFor(testenv.RedisDBCmd),
		"HTTP_ADDR":        "127.0.0.1:0",
		"API_METRICS_ADDR": "127.0.0.1:0",
		"PROBE_ADDR":       "127.0.0.1:0",
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	logR, logW := io.Pipe()
	exited := make(chan int, 1)
	go func() {
		var stdout bytes.Buffer
		exited <- run(ctx, nil, envOf(env), &stdout, logW)
		logW.Close()
	}()
	// Every line is read, so that logging never blocks the server; the
	// addresses logged up to "api listening" are sent once it comes.
	logged := make(chan map[string]string, 1)
	drained := make(chan struct{})
	go func() {
		defer close(drained)
		addrs := map[string]string{} // log attribute -> value
		sc := bufio.NewScanner(logR)
		for sc.Scan() {
			var l map[string]any
			if addrs == nil || json.Unmarshal(sc.Bytes(), &l) != nil {
				continue
			}
			msg, _ := l["msg"].(string)
			for _, key := range []string{"addr", "api_metrics_addr", "probe_addr", "public_url"} {
				if v, ok := l[key].(string); ok && strings.HasPrefix(msg, "api ") {
					addrs[key] = v
				}
			}
			if msg == "api listening" {
				logged <- addrs
				addrs = nil
			}
		}
		close(logged)
	}()
	addrs, ok := <-logged
	if !ok {
		t.Fatalf("the api exited (%d) without logging \"api listening\"", <-exited)
	}
	ports := map[string]bool{}
	for _, key := range []string{"addr", "api_metrics_addr", "probe_addr"} {
		addr := addrs[key]
		host, port, err := net.SplitHostPort(addr)
		if err != nil || host != "127.0.0.1" || port == "0" || ports[port] {
			t.Fatalf("%s: logged %q; want 127.0.0.1 with a port of its own (all: %v)", key, addr, addrs)
		}
		ports[port] = true
		path := "/healthz"
		if key == "api_metrics_addr" {
			path = "/metrics"
		}
		resp, err := http.Get("http://" + addr + path)
		if err != nil {
			t.Fatalf("GET %s on %s: %v", path, key, err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Errorf("GET %s on %s (%s): %d", path, key, addr, resp.StatusCode)
		}
	}
	if want := "http://" + addrs["addr"]; addrs["public_url"] != want {
		t.Errorf("public_url %q, want %q", addrs["public_url"], want)
	}
	cancel()
	if code := <-exited; code != 0 {
		t.Errorf("exit %d after the context ended, want 0", code)
	}
	<-drained
}
