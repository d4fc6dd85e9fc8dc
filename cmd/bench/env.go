package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/gatehouse-pay/gatehouse/internal/testenv/harness"
)

// environment is everything a run sets up and tears down: a private
// redis-server, a fresh database on the shared Postgres, the API and the
// floor, each on a free loopback port.
type environment struct {
	o   options
	log io.Writer
	dir string

	redis *harness.RedisServer
	rdb   *redisDB

	admin      *sqlDB
	dbName     string
	dbURL      string
	db         *sqlDB
	postmaster int
	merchantID string

	api, floor *target
	worker     *target // bin/worker, only during the webhook section
	apiSecret  string  // the bench merchant's sandbox secret key
	email      string  // the bench merchant's login
	password   string
	jwtKey     string // JWT_SECRET and ENCRYPTION_KEY, the same for every process of the run
	encKey     string

	quietLeft, waited time.Duration // waiting for a quiet machine: budget left, time spent
}

// target is a server under test.
type target struct {
	name   string
	proc   *harness.Process
	addr   string
	logf   string
	client *client
}

func (t *target) pid() int { return t.proc.Pid() }

// stop ends the server with SIGTERM, then SIGKILL after 5 s.
func (t *target) stop() { t.proc.Stop(syscall.SIGTERM, 5*time.Second) }

// redisPID is the process id of the private redis-server.
func (e *environment) redisPID() int { return e.redis.Process().Pid() }

func (e *environment) logf(format string, args ...any) {
	fmt.Fprintf(e.log, "bench: "+format+"\n", args...)
}

// withDatabase returns base with its database name replaced.
func withDatabase(base, db string) (string, error) {
	u, err := url.Parse(base)
	if err != nil {
		return "", errors.New("TEST_DATABASE_URL is not a URL")
	}
	u.Path = "/" + db
	return u.String(), nil
}

func (e *environment) setup(ctx context.Context) error {
	var err error
	e.jwtKey, e.encKey = harness.RandomHex(32), harness.RandomHex(32)
	if e.dir, err = os.MkdirTemp("", "gatehouse-bench-"); err != nil {
		return err
	}
	if _, err := os.Stat(e.o.api); err != nil {
		return fmt.Errorf("%s: %w (run make build)", e.o.api, err)
	}
	if err := e.startRedis(ctx); err != nil {
		return err
	}
	if err := e.createDatabase(ctx); err != nil {
		return err
	}
	if err := e.runAPI(ctx, "migrate"); err != nil {
		return err
	}
	email, password := "bench-"+harness.RandomHex(4)+"@gatehouse.local", harness.RandomHex(12)
	out, err := e.apiOutput(ctx, "merchant", "create", "--email", email, "--password", password, "--name", "Bench Store")
	if err != nil {
		return err
	}
	var m struct {
		ID string `json:"id"`
	}
	if err := json.Unmarshal(out, &m); err != nil || m.ID == "" {
		return fmt.Errorf("merchant create printed %q", out)
	}
	e.merchantID, e.email, e.password = m.ID, email, password
	for _, s := range floorSetupSQL(e.o.floorTables) {
		if err := e.db.exec(ctx, s); err != nil {
			return fmt.Errorf("floor schema: %w", err)
		}
	}
	if err := e.startAPI(ctx); err != nil {
		return err
	}
	secret, err := e.apiKey(ctx, email, password)
	if err != nil {
		return err
	}
	e.apiSecret = secret
	runID := harness.RandomHex(4)
	seq := new(atomic.Int64)
	e.api.client = newClient(e.api.addr, "Bearer "+secret, "bench-"+runID+"-p-", seq)
	if err := e.startFloor(ctx, "Bearer "+secret); err != nil {
		return err
	}
	e.floor.client = newClient(e.floor.addr, "Bearer "+secret, "bench-"+runID+"-f-", seq)
	for _, t := range []*target{e.api, e.floor} {
		o := t.client.do(time.Now().Add(5*time.Second), true)
		if o.status != 201 || o.err != nil {
			return fmt.Errorf("%s: a first charge got %d %v %s (log: %s)", t.name, o.status, o.err, o.sample, t.logf)
		}
	}
	return nil
}

func (e *environment) startRedis(ctx context.Context) error {
	var err error
	e.redis, err = harness.StartRedisServer(harness.RedisConfig{Path: e.o.redisServer, Dir: e.dir,
		Args: []string{"--logfile", filepath.Join(e.dir, "redis.log")}})
	if err != nil {
		return fmt.Errorf("%w (install redis-server)", err)
	}
	if e.rdb, err = openRedis(e.redis.URL()); err != nil {
		return err
	}
	return e.rdb.ping(ctx)
}

func (e *environment) createDatabase(ctx context.Context) error {
	var err error
	if e.admin, err = openSQL(ctx, e.o.dbURL); err != nil {
		return fmt.Errorf("postgres at TEST_DATABASE_URL: %w", err)
	}
	e.dbName = fmt.Sprintf("gatehouse_bench_%d_%s", os.Getpid(), harness.RandomHex(3))
	// template0: template1 may be in use by a concurrent test run.
	if err := e.admin.exec(ctx, "CREATE DATABASE "+e.dbName+" TEMPLATE template0"); err != nil {
		return fmt.Errorf("create database: %w", err)
	}
	if e.dbURL, err = withDatabase(e.o.dbURL, e.dbName); err != nil {
		return err
	}
	if e.db, err = openSQL(ctx, e.dbURL); err != nil {
		return err
	}
	var backend int
	if err := e.db.query(ctx, "SELECT pg_backend_pid()", nil, &backend); err != nil {
		return err
	}
	if s, ok := readProcStat(backend); ok {
		e.postmaster = s.ppid
	} else {
		e.logf("postgres runs out of sight (pid %d not in /proc): its CPU is not counted", backend)
	}
	return nil
}

func (e *environment) apiEnv(addr string) []string {
	return append(os.Environ(),
		"DATABASE_URL="+e.dbURL,
		"REDIS_URL="+e.redis.URL(),
		"JWT_SECRET="+e.jwtKey,
		"ENCRYPTION_KEY="+e.encKey,
		"WEBHOOK_ALLOW_PRIVATE_NETWORKS=true", // the webhook section's receiver is on 127.0.0.1
		"HTTP_ADDR="+addr,
		"METRICS_ADDR=127.0.0.1:0",
		"LOG_LEVEL=warn",
		"RATE_LIMIT_CHARGES=100000000/1m",
		"RATE_LIMIT_CHARGES_MERCHANT=100000000/1m",
		"RATE_LIMIT_DEFAULT=100000/1m",
		"RATE_LIMIT_LOGIN=100000000/1m", // the login flood measures hashing, not the per-IP refusal
		"SHUTDOWN_TIMEOUT=2s",
		"SHUTDOWN_DELAY=0s",
	)
}

func (e *environment) apiOutput(ctx context.Context, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, e.o.api, args...)
	cmd.Env = e.apiEnv("127.0.0.1:0")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w: %s", e.o.api, strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return out, nil
}

func (e *environment) runAPI(ctx context.Context, args ...string) error {
	_, err := e.apiOutput(ctx, args...)
	return err
}

func (e *environment) startServer(ctx context.Context, name, path string, args, env []string, addr string) (*target, error) {
	t := &target{name: name, addr: addr, logf: filepath.Join(e.dir, name+".log")}
	logFile, err := os.Create(t.logf)
	if err != nil {
		return nil, err
	}
	defer logFile.Close()
	cmd := harness.Command(env, path, args...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if t.proc, err = harness.Start(name, cmd, nil); err != nil {
		return nil, err
	}
	err = harness.WaitFor(ctx, t.proc, 20*time.Second, 50*time.Millisecond, harness.HTTPOK(http.DefaultClient, "http://"+addr+"/healthz"))
	if err != nil {
		tail, _ := os.ReadFile(t.logf)
		return t, fmt.Errorf("%s on %s: %w\n%s", name, addr, err, lastLines(string(tail), 20))
	}
	return t, nil
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

func (e *environment) startAPI(ctx context.Context) error {
	addr, err := harness.FreeAddr()
	if err != nil {
		return err
	}
	e.api, err = e.startServer(ctx, "project", e.o.api, nil, e.apiEnv(addr), addr)
	return err
}

func (e *environment) startFloor(ctx context.Context, authorization string) error {
	addr, err := harness.FreeAddr()
	if err != nil {
		return err
	}
	path, args, env, err := floorCommand(addr, e.merchantID, e.dbURL, e.redis.URL(), authorization)
	if err != nil {
		return err
	}
	e.floor, err = e.startServer(ctx, "floor", path, args, append(os.Environ(), env...), addr)
	return err
}

// apiKey logs in and creates a sandbox secret key.
func (e *environment) apiKey(ctx context.Context, email, password string) (string, error) {
	var login struct {
		Token string `json:"token"`
	}
	if err := e.request(ctx, http.MethodPost, "/v1/auth/login", "", map[string]string{"email": email, "password": password}, http.StatusOK, &login); err != nil {
		return "", err
	}
	var key struct {
		SecretKey string `json:"secret_key"`
	}
	if err := e.request(ctx, http.MethodPost, "/v1/me/api_keys", login.Token, map[string]string{"environment": "sandbox", "name": "bench"}, http.StatusCreated, &key); err != nil {
		return "", err
	}
	if key.SecretKey == "" {
		return "", errors.New("POST /v1/me/api_keys returned no secret_key")
	}
	return key.SecretKey, nil
}

// request calls the API with token (none when empty) and decodes the answer
// into out (when not nil); want 0 accepts any 2xx.
func (e *environment) request(ctx context.Context, method, path, token string, body any, want int, out any) error {
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, "http://"+e.api.addr+path, rd)
	if err != nil {
		return err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	rb, _ := io.ReadAll(resp.Body)
	if (want != 0 && resp.StatusCode != want) || (want == 0 && resp.StatusCode/100 != 2) {
		return fmt.Errorf("%s %s: %d %s", method, path, resp.StatusCode, rb)
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(rb, out); err != nil {
		return errors.New(method + " " + path + ": unreadable answer")
	}
	return nil
}

// close tears everything down, in reverse order; it never fails the run.
func (e *environment) close() {
	for _, t := range []*target{e.worker, e.api, e.floor} {
		if t != nil {
			if t.client != nil {
				t.client.closeIdle()
			}
			t.stop()
		}
	}
	if e.db != nil {
		e.db.close()
	}
	if e.admin != nil {
		if e.dbName != "" && !e.o.keep {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			if err := e.admin.exec(ctx, "DROP DATABASE IF EXISTS "+e.dbName+" WITH (FORCE)"); err != nil {
				e.logf("drop database %s: %v", e.dbName, err)
			}
			cancel()
		} else if e.o.keep {
			e.logf("kept database %s", e.dbName)
		}
		e.admin.close()
	}
	if e.rdb != nil {
		_ = e.rdb.close()
	}
	if e.redis != nil {
		_ = e.redis.Close()
	}
	if e.dir != "" && !e.o.keep {
		_ = os.RemoveAll(e.dir)
	} else if e.dir != "" {
		e.logf("kept logs in %s", e.dir)
	}
}
