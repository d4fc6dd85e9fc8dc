package harness

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"syscall"
	"time"
)

// Process is a running child: a Gatehouse binary, redis-server, PgBouncer,
// a mock provider... Its exit is watched from the start.
type Process struct {
	Name string
	Cmd  *exec.Cmd
	// Out is where its standard output and error go, when Start was given
	// one; nil when the command writes elsewhere (a log file).
	Out     *Output
	outFrom int           // Out's length when the process started: what it writes comes after
	done    chan struct{} // closed once the process has exited and its output is collected
}

// Start starts cmd as the child called name. When out is not nil it
// receives the child's standard output and error. Unless cmd has
// SysProcAttr set already, the child gets SIGKILL when the starting
// process dies (on Linux), so an interrupted run leaves no server behind.
func Start(name string, cmd *exec.Cmd, out *Output) (*Process, error) {
	from := 0
	if out != nil {
		cmd.Stdout, cmd.Stderr = out, out
		from = out.Len()
	}
	if cmd.SysProcAttr == nil {
		dieWithParent(cmd)
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &Process{Name: name, Cmd: cmd, Out: out, outFrom: from, done: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

// Command is exec.Command with env as the child's whole environment.
func Command(env []string, path string, args ...string) *exec.Cmd {
	cmd := exec.Command(path, args...)
	cmd.Env = env
	return cmd
}

// Done is closed once the process has exited.
func (p *Process) Done() <-chan struct{} { return p.done }

// Exited reports whether the process has exited.
func (p *Process) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// Pid is the process id.
func (p *Process) Pid() int { return p.Cmd.Process.Pid }

// State describes how the process exited, or "running".
func (p *Process) State() string {
	if !p.Exited() {
		return "running"
	}
	return p.Cmd.ProcessState.String()
}

// Tail is at most the last n bytes of the process's output ("" without
// Out).
func (p *Process) Tail(n int) string {
	if p.Out == nil {
		return ""
	}
	return p.Out.Tail(n)
}

// Kill sends SIGKILL, like a crash, and waits up to within for the exit.
func (p *Process) Kill(within time.Duration) error {
	_ = p.Cmd.Process.Kill()
	select {
	case <-p.done:
		return nil
	case <-time.After(within):
		return fmt.Errorf("%s did not exit %s after SIGKILL", p.Name, within)
	}
}

// Stop sends sig and waits up to grace for the exit, then sends SIGKILL and
// waits for good. It reports whether the process exited within grace (or
// had exited before).
func (p *Process) Stop(sig os.Signal, grace time.Duration) bool {
	if p == nil || p.Exited() {
		return true
	}
	_ = p.Cmd.Process.Signal(sig)
	select {
	case <-p.done:
		return true
	case <-time.After(grace):
		_ = p.Cmd.Process.Kill()
		<-p.done
		return false
	}
}

// Terminate sends SIGTERM and checks that the process drains and exits 0
// within the given time; it returns how long the exit took. A process still
// running then is killed. The error says what went wrong: the process had
// exited before the signal, took too long, or exited with another code.
func (p *Process) Terminate(within time.Duration) (time.Duration, error) {
	if p.Exited() {
		return 0, fmt.Errorf("%s exited before SIGTERM: %v", p.Name, p.Cmd.ProcessState)
	}
	start := time.Now()
	var errs []error
	if err := p.Cmd.Process.Signal(syscall.SIGTERM); err != nil {
		errs = append(errs, fmt.Errorf("%s: SIGTERM: %w", p.Name, err))
	}
	select {
	case <-p.done:
		if got := p.Cmd.ProcessState.ExitCode(); got != 0 {
			errs = append(errs, fmt.Errorf("%s: exit code after SIGTERM: got %d (%v), want 0", p.Name, got, p.Cmd.ProcessState))
		}
	case <-time.After(within):
		errs = append(errs, fmt.Errorf("%s: still running %s after SIGTERM, want exit 0 within %s", p.Name, within, within))
		_ = p.Cmd.Process.Kill()
		<-p.done
	}
	return time.Since(start), errors.Join(errs...)
}

// ErrExited is in the error of a wait whose process exited before it was
// ready.
var ErrExited = errors.New("the process exited")

// WaitFor calls ready every interval until it returns nil. It gives up with
// an error when ctx ends, when within has passed (the error holds ready's
// last error) or, when p is not nil, as soon as p has exited (the error
// wraps ErrExited). ready gets a context that ends with ctx.
func WaitFor(ctx context.Context, p *Process, within, interval time.Duration, ready func(context.Context) error) error {
	deadline := time.Now().Add(within)
	for {
		err := ready(ctx)
		if err == nil {
			return nil
		}
		switch {
		case p != nil && p.Exited():
			return fmt.Errorf("%w before it was ready: %s (last: %v)", ErrExited, p.State(), err)
		case ctx.Err() != nil:
			return fmt.Errorf("not ready: %w (last: %v)", ctx.Err(), err)
		case time.Now().After(deadline):
			return fmt.Errorf("not ready after %s: %w", within, err)
		}
		select {
		case <-ctx.Done():
		case <-time.After(interval):
		}
	}
}

// Listening is a readiness check: addr accepts TCP connections.
func Listening(addr string) func(context.Context) error {
	return func(ctx context.Context) error {
		d := net.Dialer{Timeout: time.Second}
		c, err := d.DialContext(ctx, "tcp", addr)
		if err == nil {
			c.Close()
		}
		return err
	}
}

// HTTPOK is a readiness check: a GET of url, with the headers given as
// name, value pairs, answers 200.
func HTTPOK(c *http.Client, url string, headers ...string) func(context.Context) error {
	return func(ctx context.Context) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return err
		}
		for i := 0; i+1 < len(headers); i += 2 {
			req.Header.Set(headers[i], headers[i+1])
		}
		resp, err := c.Do(req)
		if err != nil {
			return err
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("GET %s: %d", url, resp.StatusCode)
		}
		return nil
	}
}
