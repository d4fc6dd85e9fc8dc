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
	"net"
	"sync"
)

// portsGiven are the ports FreePort has returned in this process.
var portsGiven sync.Map

// FreePort returns a TCP port on 127.0.0.1 that was free a moment ago and
// that it has not returned before in this process: the kernel may hand a
// port just closed out again, and a stack's processes take theirs only once
// all are chosen.
func FreePort() (int, error) {
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
	mu sync.Mutex
	b  bytes.Buffer
}

func (o *Output) Write(p []byte) (int, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.b.Write(p)
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
