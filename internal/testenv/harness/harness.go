// Package harness starts what a Gatehouse stack runs on, for the end-to-end
// tests and the benchmark harness alike: child processes with their output
// captured, free loopback ports, private redis-server instances (single,
// replica, sentinel, cluster node), the commands built once per run, and
// waits for readiness. It reports failures as errors and never imports
// testing; internal/testenv wraps it for tests (testing.TB).
package harness

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	mrand "math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
)

// portsGiven are the ports FreePort has returned in this process.
var portsGiven sync.Map

// FreePort returns a TCP port on 127.0.0.1 that was free a moment ago and
// that it has not returned before in this process: a stack's processes take
// their ports only once all are chosen.
//
// Where the kernel says which ports it hands out as the local end of
// outgoing connections (Linux: ip_local_port_range), the port is drawn at
// random below that range. A port from inside it could be taken by any
// connection of the machine, the stack's own to PostgreSQL, PgBouncer and
// Redis included, between the moment it is chosen and the moment its server
// binds it; then the server fails with "address already in use".
func FreePort() (int, error) {
	lo, hi, ok := belowEphemeral()
	if !ok {
		return kernelPort()
	}
	for range 1000 {
		port := lo + mrand.IntN(hi-lo)
		if _, given := portsGiven.LoadOrStore(port, true); given {
			continue
		}
		ln, err := net.Listen("tcp", Loopback(port))
		if err != nil {
			continue // in use
		}
		ln.Close()
		return port, nil
	}
	return 0, fmt.Errorf("find a free port: none free in %d-%d after 1000 tries", lo, hi-1)
}

// kernelPort is a port the kernel picks as free, not returned before.
func kernelPort() (int, error) {
	for {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0, fmt.Errorf("find a free port: %w", err)
		}
		port := ln.Addr().(*net.TCPAddr).Port
		ln.Close()
		if _, given := portsGiven.LoadOrStore(port, true); !given {
			return port, nil
		}
	}
}

// belowEphemeral is the range [lo, hi) FreePort draws from: from 10000 up
// to the first port the kernel hands to outgoing connections. ok is false
// where the kernel does not say, or leaves fewer than 4096 ports below.
func belowEphemeral() (lo, hi int, ok bool) {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 0, 0, false
	}
	fields := strings.Fields(string(b))
	if len(fields) != 2 {
		return 0, 0, false
	}
	first, err := strconv.Atoi(fields[0])
	if err != nil || first-10000 < 4096 {
		return 0, 0, false
	}
	return 10000, first, true
}

// FreeAddr is FreePort as a host:port address on 127.0.0.1.
func FreeAddr() (string, error) {
	port, err := FreePort()
	if err != nil {
		return "", err
	}
	return Loopback(port), nil
}

// Loopback is the address of port on 127.0.0.1.
func Loopback(port int) string { return fmt.Sprintf("127.0.0.1:%d", port) }

// RandomHex returns n random bytes, hex-encoded: secrets, names and emails
// of one run.
func RandomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b) // never fails: crypto/rand aborts the program instead
	return hex.EncodeToString(b)
}

// Output collects a child process's output; it is safe for concurrent use.
type Output struct {
	mu      sync.Mutex
	b       bytes.Buffer
	written chan struct{} // closed at the next Write; nil until asked for
}

func (o *Output) Write(p []byte) (int, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.written != nil {
		close(o.written)
		o.written = nil
	}
	return o.b.Write(p)
}

// Len is how many bytes have been written so far.
func (o *Output) Len() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.b.Len()
}

// since returns what was written from offset on, and a channel closed at
// the next write.
func (o *Output) since(offset int) (string, <-chan struct{}) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.written == nil {
		o.written = make(chan struct{})
	}
	b := o.b.Bytes()
	return string(b[min(offset, len(b)):]), o.written
}

// String is everything written so far.
func (o *Output) String() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.b.String()
}

// Tail returns at most the last n bytes written, marked with "...\n" when
// cut.
func (o *Output) Tail(n int) string {
	o.mu.Lock()
	defer o.mu.Unlock()
	b := o.b.Bytes()
	if len(b) <= n {
		return string(b)
	}
	return "...\n" + string(b[len(b)-n:])
}
