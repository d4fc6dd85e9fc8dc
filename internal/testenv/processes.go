package testenv

import (
	"context"
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/gatehouse-pay/gatehouse/internal/testenv/harness"
)

// This file gives tests the helpers of package harness: the same
// functions, failing (or skipping) the test instead of returning errors,
// and stopping what they start when the test ends.

// ServicesRequired reports whether a missing tool or service must fail a
// test instead of skipping it: under GATEHOUSE_REQUIRE_SERVICES=1 (make
// test) and in CI.
func ServicesRequired() bool {
	return os.Getenv("GATEHOUSE_REQUIRE_SERVICES") == "1" || os.Getenv("CI") == "true"
}

// Missing skips the test for a missing tool or service, or fails it when
// they are required (ServicesRequired).
func Missing(t testing.TB, format string, args ...any) {
	t.Helper()
	if ServicesRequired() {
		t.Fatalf(format, args...)
	}
	t.Skipf(format+" (set GATEHOUSE_REQUIRE_SERVICES=1 to fail instead)", args...)
}

// FreePort is harness.FreePort: a free loopback port never handed out
// before in this test binary.
func FreePort(t testing.TB) int {
	t.Helper()
	port, err := harness.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	return port
}

// FreeAddr is FreePort as a 127.0.0.1:port address.
func FreeAddr(t testing.TB) string {
	t.Helper()
	return harness.Loopback(FreePort(t))
}

// StartProcess starts path with args and env as the child called name, its
// output going to out (a new Output when nil). Stopping it is the caller's.
func StartProcess(t testing.TB, name string, out *harness.Output, env []string, path string, args ...string) *harness.Process {
	t.Helper()
	if out == nil {
		out = new(harness.Output)
	}
	p, err := harness.Start(name, harness.Command(env, path, args...), out)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// DumpOutput logs the tail of the process's output.
func DumpOutput(t testing.TB, p *harness.Process) {
	t.Helper()
	t.Logf("---- %s output (tail) ----\n%s\n---- end of %s output ----", p.Name, p.Tail(64<<10), p.Name)
}

// Terminate sends SIGTERM and records a test error unless the process
// drains and exits 0 within the given time (api/openapi.yaml: "SIGTERM
// drains and exits 0"). When the test has failed it dumps the output.
func Terminate(t testing.TB, p *harness.Process, within time.Duration) {
	t.Helper()
	defer func() {
		if t.Failed() {
			DumpOutput(t, p)
		}
	}()
	took, err := p.Terminate(within)
	if err != nil {
		t.Error(err)
		return
	}
	t.Logf("%s: exited 0 %s after SIGTERM", p.Name, took.Round(time.Millisecond))
}

// Kill kills the process (SIGKILL, like a crash) and records a test error
// unless it has exited 10 s later.
func Kill(t testing.TB, p *harness.Process) {
	t.Helper()
	if err := p.Kill(10 * time.Second); err != nil {
		t.Error(err)
	}
}

// WaitReady is harness.WaitFor, stopping the test when p exits first or
// ready still fails after within, with the tail of p's output; what names
// what is waited for.
func WaitReady(t testing.TB, what string, p *harness.Process, within, interval time.Duration, ready func(context.Context) error) {
	t.Helper()
	if err := harness.WaitFor(context.Background(), p, within, interval, ready); err != nil {
		if p != nil && p.Out != nil {
			t.Fatalf("%s: %v\n%s", what, err, p.Tail(4<<10))
		}
		t.Fatalf("%s: %v", what, err)
	}
}

// Build is harness.Build: the packages built once per test binary with the
// flags. TestMain removes them with harness.RemoveBuilds.
func Build(t testing.TB, flags []string, pkgs ...string) *harness.Built {
	t.Helper()
	b, err := harness.Build(flags, pkgs...)
	if err != nil {
		t.Fatalf("build: %v", err)
	}
	return b
}

// RedisServerPath finds redis-server on PATH; without it the test is
// skipped, or fails when services are required.
func RedisServerPath(t testing.TB) string {
	t.Helper()
	path, err := exec.LookPath("redis-server")
	if err != nil {
		Missing(t, "redis-server is not on PATH: %v", err)
	}
	return path
}

// StartRedis starts a private redis-server of the test's own (the one on
// PATH when cfg.Path is empty, in a new directory when cfg.Dir is empty).
// It is stopped when the test ends, its output logged if the test failed.
func StartRedis(t testing.TB, cfg harness.RedisConfig) *harness.RedisServer {
	t.Helper()
	defaultRedis(t, &cfg.Path, &cfg.Dir)
	r, err := harness.NewRedisServer(cfg)
	return startRedis(t, "redis-server", r, err)
}

// StartSentinel starts a sentinel monitoring primary (cfg.Path and cfg.Dir
// as in StartRedis); it is stopped when the test ends.
func StartSentinel(t testing.TB, cfg harness.SentinelConfig, primary *harness.RedisServer) *harness.RedisServer {
	t.Helper()
	defaultRedis(t, &cfg.Path, &cfg.Dir)
	s, err := harness.NewSentinel(cfg, primary)
	return startRedis(t, "redis-sentinel", s, err)
}

// defaultRedis fills in an empty binary path and directory.
func defaultRedis(t testing.TB, path, dir *string) {
	t.Helper()
	if *path == "" {
		*path = RedisServerPath(t)
	}
	if *dir == "" {
		*dir = t.TempDir()
	}
}

// startRedis starts r, made with error err, and stops it when the test ends.
func startRedis(t testing.TB, name string, r *harness.RedisServer, err error) *harness.RedisServer {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := r.Close(); err != nil {
			t.Error(err)
		}
		if t.Failed() {
			t.Logf("---- %[1]s output (tail) ----\n%[2]s\n---- end of %[1]s output ----", name, r.Out.Tail(16<<10))
		}
	})
	if err := r.Start(); err != nil {
		t.Fatal(err)
	}
	return r
}

// PrivateRedis starts a redis-server of the test's own and returns the URL
// of its DB 0. It listens on a Unix socket only, so there is no TCP port to
// find or to lose to another process, and tests that each have one may run
// in parallel without sharing a key. It is killed when the test ends.
func PrivateRedis(t testing.TB) string {
	t.Helper()
	path := RedisServerPath(t)
	// Not t.TempDir: a socket's path must stay under 108 bytes, and a long
	// test name would make it longer.
	dir, err := os.MkdirTemp("", "gh-redis-")
	if err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "redis.sock")
	p := StartProcess(t, "redis-server", nil, []string{"PATH=" + os.Getenv("PATH")}, path,
		"--port", "0", "--unixsocket", sock, "--unixsocketperm", "700",
		"--save", "", "--appendonly", "no", "--dir", dir)
	t.Cleanup(func() {
		if err := p.Kill(10 * time.Second); err != nil {
			t.Error(err)
		}
		if t.Failed() {
			DumpOutput(t, p)
		}
		os.RemoveAll(dir)
	})
	url := "unix://" + sock
	c := redis.NewClient(&redis.Options{Network: "unix", Addr: sock, DialTimeout: 250 * time.Millisecond, MaxRetries: -1})
	defer c.Close()
	WaitReady(t, "redis-server on "+sock, p, 10*time.Second, 5*time.Millisecond, func(ctx context.Context) error {
		ctx, cancel := context.WithTimeout(ctx, 250*time.Millisecond)
		defer cancel()
		return c.Ping(ctx).Err()
	})
	return url
}

// DefaultParallel sets -test.parallel to n unless the command line gave
// it: for a TestMain whose package's tests mostly wait, after flag.Parse.
func DefaultParallel(n int) {
	given := false
	flag.Visit(func(f *flag.Flag) { given = given || f.Name == "test.parallel" })
	if !given {
		if err := flag.Set("test.parallel", strconv.Itoa(n)); err != nil {
			panic(err)
		}
	}
}
