package harness_test

import (
	"context"
	"errors"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gatehouse-pay/gatehouse/internal/testenv"
	"github.com/gatehouse-pay/gatehouse/internal/testenv/harness"
)

func TestFreePortNeverRepeats(t *testing.T) {
	seen := map[int]bool{}
	for range 300 {
		port, err := harness.FreePort()
		if err != nil {
			t.Fatal(err)
		}
		if seen[port] {
			t.Fatalf("port %d handed out twice", port)
		}
		seen[port] = true
		ln, err := net.Listen("tcp", harness.Loopback(port))
		if err != nil {
			t.Fatalf("port %d is not free: %v", port, err)
		}
		ln.Close() // closed at once: the kernel may well offer it again
	}
}

// TestFreePortBelowEphemeral: where the kernel says which ports it gives
// outgoing connections, FreePort hands out none of them.
func TestFreePortBelowEphemeral(t *testing.T) {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		t.Skipf("the kernel does not say which ports are ephemeral: %v", err)
	}
	fields := strings.Fields(string(b))
	first, err := strconv.Atoi(fields[0])
	if err != nil || first < 10000+4096 {
		t.Skipf("ephemeral ports start at %q: FreePort asks the kernel", fields[0])
	}
	for range 200 {
		port, err := harness.FreePort()
		if err != nil {
			t.Fatal(err)
		}
		if port < 10000 || port >= first {
			t.Fatalf("port %d, want one in 10000-%d, below the ephemeral ports", port, first-1)
		}
	}
}

func TestOutputTail(t *testing.T) {
	var o harness.Output
	if got := o.Tail(4); got != "" {
		t.Errorf("empty: Tail(4) = %q", got)
	}
	o.Write([]byte("abc"))
	o.Write([]byte("defgh"))
	if got := o.Tail(8); got != "abcdefgh" {
		t.Errorf("Tail(8) = %q, want all", got)
	}
	if got := o.Tail(3); got != "...\nfgh" {
		t.Errorf("Tail(3) = %q, want the last 3 bytes, marked", got)
	}
	if got := o.String(); got != "abcdefgh" {
		t.Errorf("String() = %q", got)
	}
}

// shell starts sh -c script and waits until it has printed "ready".
func shell(t *testing.T, script string) *harness.Process {
	t.Helper()
	p := testenv.StartProcess(t, "sh", nil, []string{"PATH=" + os.Getenv("PATH")}, "/bin/sh", "-c", script)
	t.Cleanup(func() { p.Stop(syscall.SIGKILL, time.Second) })
	testenv.WaitReady(t, "sh", p, 10*time.Second, 5*time.Millisecond, func(context.Context) error {
		if !strings.Contains(p.Out.String(), "ready") {
			return errors.New("not ready")
		}
		return nil
	})
	return p
}

const loop = "; echo ready; while :; do sleep 0.02; done"

func TestTerminate(t *testing.T) {
	t.Run("exits 0", func(t *testing.T) {
		p := shell(t, "trap 'exit 0' TERM"+loop)
		if _, err := p.Terminate(5 * time.Second); err != nil {
			t.Errorf("Terminate: %v", err)
		}
		if !p.Exited() {
			t.Error("running after Terminate")
		}
	})
	t.Run("exits 3", func(t *testing.T) {
		p := shell(t, "trap 'exit 3' TERM"+loop)
		_, err := p.Terminate(5 * time.Second)
		if err == nil || !strings.Contains(err.Error(), "exit code after SIGTERM: got 3") {
			t.Errorf("Terminate: %v, want the exit code 3 named", err)
		}
	})
	t.Run("ignores SIGTERM", func(t *testing.T) {
		p := shell(t, "trap '' TERM"+loop)
		took, err := p.Terminate(300 * time.Millisecond)
		if err == nil || !strings.Contains(err.Error(), "still running") {
			t.Errorf("Terminate: %v, want still running", err)
		}
		if !p.Exited() || took < 300*time.Millisecond {
			t.Errorf("after %s: exited %t; want killed after the 300ms", took, p.Exited())
		}
	})
	t.Run("exited before", func(t *testing.T) {
		p := shell(t, "echo ready; exit 0")
		<-p.Done()
		if _, err := p.Terminate(time.Second); err == nil || !strings.Contains(err.Error(), "exited before SIGTERM") {
			t.Errorf("Terminate: %v, want exited before SIGTERM", err)
		}
	})
}

func TestStop(t *testing.T) {
	p := shell(t, "trap '' TERM"+loop)
	if p.Stop(syscall.SIGTERM, 200*time.Millisecond) {
		t.Error("Stop: exited within the grace despite ignoring SIGTERM")
	}
	if !p.Exited() {
		t.Error("running after Stop")
	}
	if !p.Stop(syscall.SIGTERM, time.Second) {
		t.Error("Stop of an exited process: false")
	}
	q := shell(t, "trap 'exit 0' TERM"+loop)
	if !q.Stop(syscall.SIGTERM, 5*time.Second) {
		t.Error("Stop: killed a process that exits on SIGTERM")
	}
}

func TestWaitFor(t *testing.T) {
	notYet := errors.New("not yet")
	t.Run("exit ends the wait", func(t *testing.T) {
		p := shell(t, "echo ready; sleep 0.1; exit 1")
		start := time.Now()
		err := harness.WaitFor(context.Background(), p, time.Minute, 10*time.Millisecond, func(context.Context) error { return notYet })
		if !errors.Is(err, harness.ErrExited) || !strings.Contains(err.Error(), "exit status 1") {
			t.Errorf("WaitFor: %v, want ErrExited with the exit status", err)
		}
		if time.Since(start) > 10*time.Second {
			t.Errorf("WaitFor took %s after the exit", time.Since(start))
		}
	})
	t.Run("deadline", func(t *testing.T) {
		err := harness.WaitFor(context.Background(), nil, 100*time.Millisecond, 10*time.Millisecond, func(context.Context) error { return notYet })
		if err == nil || errors.Is(err, harness.ErrExited) || !errors.Is(err, notYet) {
			t.Errorf("WaitFor: %v, want the last error after the deadline", err)
		}
	})
	t.Run("ready", func(t *testing.T) {
		n := 0
		err := harness.WaitFor(context.Background(), nil, time.Minute, time.Millisecond, func(context.Context) error {
			if n++; n < 3 {
				return notYet
			}
			return nil
		})
		if err != nil || n != 3 {
			t.Errorf("WaitFor: %v after %d calls, want nil after 3", err, n)
		}
	})
	t.Run("listening", func(t *testing.T) {
		addr := testenv.FreeAddr(t)
		if err := harness.Listening(addr)(context.Background()); err == nil {
			t.Fatalf("Listening(%s) before anything listens: nil", addr)
		}
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		if err := harness.Listening(addr)(context.Background()); err != nil {
			t.Errorf("Listening(%s): %v", addr, err)
		}
	})
}

func TestBuildOnce(t *testing.T) {
	t.Cleanup(harness.RemoveBuilds)
	b := testenv.Build(t, nil, "./internal/testenv/harness/testdata/hello")
	out, err := exec.Command(b.Path("hello")).Output()
	if err != nil || string(out) != "hello from a built command\n" {
		t.Fatalf("the built command: %q, %v", out, err)
	}
	again := testenv.Build(t, nil, "./internal/testenv/harness/testdata/hello")
	if again != b || again.Dir != b.Dir {
		t.Errorf("a second Build built again: %s, then %s", b.Dir, again.Dir)
	}
	if _, err := harness.Build(nil, "./internal/testenv/harness/testdata/nothing"); err == nil {
		t.Error("Build of a package that does not exist: no error")
	}
	harness.RemoveBuilds()
	if _, err := os.Stat(b.Dir); !os.IsNotExist(err) {
		t.Errorf("%s after RemoveBuilds: %v", b.Dir, err)
	}
}

func TestRedisServerRestart(t *testing.T) {
	r := testenv.StartRedis(t, harness.RedisConfig{})
	ctx := context.Background()
	if err := r.Client.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatalf("SET: %v", err)
	}
	if err := r.Stop(); err != nil {
		t.Fatal(err)
	}
	if r.Running() || r.Client.Ping(ctx).Err() == nil {
		t.Fatal("the server answers after Stop")
	}
	port := r.Port
	if err := r.Start(); err != nil {
		t.Fatal(err)
	}
	if r.Port != port || r.Client.Ping(ctx).Err() != nil {
		t.Errorf("after Start: port %d (was %d), PING %v", r.Port, port, r.Client.Ping(ctx).Err())
	}
	if n, _ := r.Client.Exists(ctx, "k").Result(); n != 0 {
		t.Error("the key survived a crash without persistence")
	}
	if err := r.Start(); err == nil {
		t.Error("a second Start: no error")
	}
}

func TestSentinelWithPassword(t *testing.T) {
	const pw = "harness-pw"
	primary := testenv.StartRedis(t, harness.RedisConfig{Password: pw})
	if !strings.HasPrefix(primary.URL(), "redis://:"+pw+"@") {
		t.Errorf("URL %s, want the password in it", primary.URL())
	}
	s := testenv.StartSentinel(t, harness.SentinelConfig{Master: "hm", Quorum: 1}, primary)
	testenv.WaitReady(t, "the sentinel", s.Process(), 10*time.Second, 50*time.Millisecond, func(ctx context.Context) error {
		a, err := s.Client.Do(ctx, "SENTINEL", "GET-MASTER-ADDR-BY-NAME", "hm").StringSlice()
		if err != nil {
			return err
		}
		if len(a) != 2 || a[0]+":"+a[1] != primary.Addr() {
			return errors.New("names " + strings.Join(a, ":"))
		}
		return nil
	})
}
