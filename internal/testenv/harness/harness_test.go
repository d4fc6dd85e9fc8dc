package harness_test

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
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

// startListener starts testdata/listener on addr.
func startListener(t *testing.T, addr string) *harness.Process {
	t.Helper()
	bin := testenv.Build(t, nil, "./internal/testenv/harness/testdata/listener").Path("listener")
	p := testenv.StartProcess(t, "listener", nil, []string{"ADDR=" + addr}, bin)
	t.Cleanup(func() { p.Stop(syscall.SIGKILL, 10*time.Second) })
	return p
}

// answeredBy reports the process id the listener at addr answers with.
func answeredBy(t *testing.T, addr string) string {
	t.Helper()
	resp, err := http.Get("http://" + addr)
	if err != nil {
		t.Fatalf("GET http://%s: %v", addr, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestAddressFromLog: a server given port 0 is found at the address its log
// line names; a server that exits before that line ends the wait at once,
// and one that could not bind its address says so.
func TestAddressFromLog(t *testing.T) {
	t.Cleanup(harness.RemoveBuilds)
	t.Run("port 0", func(t *testing.T) {
		p := startListener(t, "127.0.0.1:0")
		addr, err := harness.AddressFromLog(p, "listening", "addr", 30*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if got := answeredBy(t, addr); got != strconv.Itoa(p.Pid()) {
			t.Errorf("%s answered as process %s, want %d", addr, got, p.Pid())
		}
		if _, err := harness.AddressFromLog(p, "starting", "addr", time.Second); err == nil {
			t.Error(`AddressFromLog of a line without the key: no error`)
		}
	})
	t.Run("taken", func(t *testing.T) {
		taken, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer taken.Close()
		p := startListener(t, taken.Addr().String())
		start := time.Now()
		_, err = harness.AddressFromLog(p, "listening", "addr", time.Minute)
		if !errors.Is(err, harness.ErrExited) {
			t.Fatalf("AddressFromLog: %v, want ErrExited", err)
		}
		if time.Since(start) > 30*time.Second {
			t.Errorf("the wait ended %s after it began, not at the exit", time.Since(start))
		}
		if !p.AddrInUse() {
			t.Errorf("AddrInUse: false, output %q", p.Out.String())
		}
	})
	t.Run("a later incarnation", func(t *testing.T) {
		// Output shared by two starts: the second start's wait reads its own
		// lines only.
		out := new(harness.Output)
		out.Write([]byte(`{"msg":"listening","addr":"127.0.0.1:1"}` + "\n"))
		p := testenv.StartProcess(t, "sh", out, nil, "/bin/sh", "-c", `echo '{"msg":"other"}'; echo '{"msg":"listening","addr":"127.0.0.1:2"}'`)
		addr, err := harness.AddressFromLog(p, "listening", "addr", 30*time.Second)
		if err != nil || addr != "127.0.0.1:2" {
			t.Errorf("AddressFromLog: %q, %v; want 127.0.0.1:2", addr, err)
		}
	})
}

// TestOnFreePort: a port taken by another process between the moment it is
// chosen and the server's bind moves the server to another port.
func TestOnFreePort(t *testing.T) {
	t.Cleanup(harness.RemoveBuilds)
	var tried []int
	var p *harness.Process
	port, err := harness.OnFreePort(func(port int) error {
		tried = append(tried, port)
		if len(tried) == 1 {
			// Another process takes the port first.
			taken, err := net.Listen("tcp", harness.Loopback(port))
			if err != nil {
				t.Fatal(err)
			}
			defer taken.Close()
		}
		p = startListener(t, harness.Loopback(port))
		if _, err := harness.AddressFromLog(p, "listening", "addr", 30*time.Second); err != nil {
			if p.AddrInUse() {
				return harness.ErrAddrInUse
			}
			return err
		}
		return nil
	})
	if err != nil {
		t.Fatalf("OnFreePort: %v (tried %v)", err, tried)
	}
	if len(tried) != 2 || port != tried[1] {
		t.Fatalf("tried %v, got port %d; want a second port after the taken one", tried, port)
	}
	if got := answeredBy(t, harness.Loopback(port)); got != strconv.Itoa(p.Pid()) {
		t.Errorf("port %d answered as process %s, want %d", port, got, p.Pid())
	}

	calls := 0
	if _, err := harness.OnFreePort(func(int) error { calls++; return harness.ErrAddrInUse }); !errors.Is(err, harness.ErrAddrInUse) || calls != harness.PortTries {
		t.Errorf("every port taken: %v after %d starts, want ErrAddrInUse after %d", err, calls, harness.PortTries)
	}
}

// TestRedisServerPortTaken: a redis-server whose port another process took
// after it was chosen starts on another one, also when the other process
// is a redis-server that answers there; a restart keeps the port.
func TestRedisServerPortTaken(t *testing.T) {
	path := testenv.RedisServerPath(t)
	for _, other := range []string{"a listener", "a redis-server"} {
		t.Run(other, func(t *testing.T) {
			r, err := harness.NewRedisServer(harness.RedisConfig{Path: path, Dir: t.TempDir()})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = r.Close() })
			taken := r.Port
			if other == "a listener" {
				ln, err := net.Listen("tcp", r.Addr())
				if err != nil {
					t.Fatal(err)
				}
				defer ln.Close()
			} else {
				p := testenv.StartProcess(t, "the other redis-server", nil, nil, path,
					"--port", strconv.Itoa(taken), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", t.TempDir())
				t.Cleanup(func() { _ = p.Kill(10 * time.Second) })
				testenv.WaitReady(t, "the other redis-server", p, 10*time.Second, 10*time.Millisecond, harness.Listening(r.Addr()))
			}
			if err := r.Start(); err != nil {
				t.Fatal(err)
			}
			if r.Port == taken {
				t.Fatalf("started on the taken port %d", taken)
			}
			if !harness.SaysAddrInUse(r.Out.String()) {
				t.Errorf("the first start did not meet the taken port; output:\n%s", r.Out.String())
			}
			ctx := context.Background()
			info, err := r.Client.Info(ctx, "server").Result()
			if err != nil || !strings.Contains(info, "process_id:"+strconv.Itoa(r.Process().Pid())+"\r\n") {
				t.Errorf("the client reaches another server: INFO %v", err)
			}
		})
	}
	t.Run("restart", func(t *testing.T) {
		r := testenv.StartRedis(t, harness.RedisConfig{Path: path})
		port := r.Port
		if err := r.Stop(); err != nil {
			t.Fatal(err)
		}
		ln, err := net.Listen("tcp", r.Addr())
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		if err := r.Start(); !errors.Is(err, harness.ErrAddrInUse) || r.Port != port {
			t.Errorf("restart on a taken port: %v on port %d; want ErrAddrInUse on port %d, where its clients look", err, r.Port, port)
		}
	})
}
