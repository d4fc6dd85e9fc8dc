package harness

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"strings"
	"time"
)

// A port FreePort returns was free a moment ago; another process may bind
// it before the server it is meant for does. So a server listens where
// nobody can take its address first, in the first of these ways it can:
//
//   - it binds port 0 (the kernel gives it a free port) and says which port
//     it got: Gatehouse's binaries log it (AddressFromLog), stripe-mock
//     prints it (WaitOutput);
//   - it serves on a listener the test bound on port 0, passed to it as a
//     file (the CLI test's webhook receiver);
//   - it exits saying the port was taken ("address already in use",
//     ErrAddrInUse) and is started again on another one: redis-server
//     (RedisServer), PgBouncer (OnFreePort). It must not be taken for ready
//     on an answer at the port, which may come from the process that took
//     it: its own word that it listens (its log, its process id) counts.
//
// A server restarted after a crash, which its clients must find where they
// left it, binds the port it held a moment before again: that one is not
// chosen afresh.

// WaitOutput waits until a line p writes, from its start on, matches, and
// returns what match found in it. A line counts once it ends with a
// newline, or once p has exited. It gives up when p exits without such a
// line (the error wraps ErrExited) and after within.
func WaitOutput(p *Process, within time.Duration, match func(line string) (string, bool)) (string, error) {
	if p.Out == nil {
		return "", fmt.Errorf("%s: its output is not collected", p.Name)
	}
	deadline := time.NewTimer(within)
	defer deadline.Stop()
	seen := p.outFrom // the lines before it have been matched
	for {
		// Exited first: the output is complete once the process has exited.
		exited := p.Exited()
		text, written := p.Out.since(seen)
		for {
			line, rest, whole := strings.Cut(text, "\n")
			if !whole && !exited {
				break
			}
			if v, ok := match(line); ok {
				return v, nil
			}
			seen += len(line) + 1
			text = rest
			if !whole {
				break
			}
		}
		if exited {
			return "", fmt.Errorf("%s: %w before the line waited for: %s", p.Name, ErrExited, p.State())
		}
		select {
		case <-written:
		case <-p.Done():
		case <-deadline.C:
			return "", fmt.Errorf("%s: no line waited for in its output after %s", p.Name, within)
		}
	}
}

// LogLine waits until p logs a JSON line (slog's JSON handler, as both of
// Gatehouse's binaries log) whose msg is msg, and returns its attributes.
// It gives up as WaitOutput does.
func LogLine(p *Process, msg string, within time.Duration) (map[string]any, error) {
	var found map[string]any
	_, err := WaitOutput(p, within, func(line string) (string, bool) {
		var attrs map[string]any
		if !strings.HasPrefix(line, "{") || json.Unmarshal([]byte(line), &attrs) != nil || attrs["msg"] != msg {
			return "", false
		}
		found = attrs
		return "", true
	})
	if err != nil {
		return nil, fmt.Errorf("log line %q: %w", msg, err)
	}
	return found, nil
}

// AddressFromLog waits until p logs the line msg and returns the address,
// host:port, of its attribute key: where a server that bound port 0 says
// which port it got (cmd/api: "api listening" addr; cmd/worker: "worker
// running" metrics_addr).
func AddressFromLog(p *Process, msg, key string, within time.Duration) (string, error) {
	attrs, err := LogLine(p, msg, within)
	if err != nil {
		return "", err
	}
	addr, _ := attrs[key].(string)
	if _, port, err := net.SplitHostPort(addr); err != nil || port == "0" {
		return "", fmt.Errorf("%s: log line %q: %s is %v, want the host:port bound", p.Name, msg, key, attrs[key])
	}
	return addr, nil
}

// ErrAddrInUse is in the error of a start whose server could not listen
// because its address was taken.
var ErrAddrInUse = errors.New("address already in use")

// SaysAddrInUse reports whether output says that an address could not be
// bound because it was taken, as redis-server ("Address already in use"),
// PgBouncer ("bind(): Address already in use"), PostgreSQL, stripe-mock and
// Go programs ("bind: address already in use") say it.
func SaysAddrInUse(output string) bool {
	return strings.Contains(strings.ToLower(output), "address already in use")
}

// AddrInUse reports whether p has exited saying, since it started, that an
// address it was to listen on was taken.
func (p *Process) AddrInUse() bool {
	if !p.Exited() || p.Out == nil {
		return false
	}
	text, _ := p.Out.since(p.outFrom)
	return SaysAddrInUse(text)
}

// PortTries is how many ports a server that finds its port taken is
// started on, in all, before the start fails.
const PortTries = 5

// OnFreePort calls start with a port from FreePort, and again with another
// one while start's error wraps ErrAddrInUse, at most PortTries times in
// all. It returns the port of the start that succeeded, or start's last
// error. start must leave nothing running when it fails.
func OnFreePort(start func(port int) error) (int, error) {
	var err error
	for range PortTries {
		var port int
		if port, err = FreePort(); err != nil {
			return 0, err
		}
		err = start(port)
		if err == nil {
			return port, nil
		}
		if !errors.Is(err, ErrAddrInUse) {
			return 0, err
		}
	}
	return 0, fmt.Errorf("every one of %d ports was taken before the server bound it: %w", PortTries, err)
}
