package httpapi_test

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/gatehouse-pay/gatehouse/internal/httpapi"
	"github.com/gatehouse-pay/gatehouse/internal/metrics"
	"github.com/gatehouse-pay/gatehouse/internal/testenv"
)

// capServer serves a LimitListener on loopback: each connection it is given
// gets the line "served" and is closed when its client closes.
type capServer struct {
	addr   string
	ln     *httpapi.LimitedListener
	m      *metrics.HTTP
	closed chan struct{} // one value each time a served connection was closed
	heard  chan struct{} // one value when a served connection's first bytes were read
}

func newCapServer(t *testing.T, limit int) *capServer {
	t.Helper()
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &capServer{addr: inner.Addr().String(), m: metrics.NewHTTP(prometheus.NewRegistry()), closed: make(chan struct{}, 64), heard: make(chan struct{}, 64)}
	ln := httpapi.LimitListener(inner, limit, s.m, slog.New(slog.NewTextHandler(io.Discard, nil)))
	s.ln = ln
	var wg sync.WaitGroup
	t.Cleanup(func() {
		ln.Close()
		wg.Wait()
	})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, _ = io.WriteString(c, "served\n")
				var first [64]byte
				if n, _ := c.Read(first[:]); n > 0 {
					s.heard <- struct{}{}
					_, _ = io.Copy(io.Discard, c)
				}
				c.Close()
				c.Close() // a second Close frees no second place
				s.closed <- struct{}{}
			}()
		}
	}()
	return s
}

// dial opens a connection; the deadline only keeps a broken listener from
// hanging the test.
func (s *capServer) dial(t *testing.T) (net.Conn, *bufio.Reader) {
	t.Helper()
	c, err := net.Dial("tcp", s.addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	_ = c.SetDeadline(time.Now().Add(30 * time.Second))
	return c, bufio.NewReader(c)
}

// mustBeServed checks that the connection reached the server.
func mustBeServed(t *testing.T, name string, r *bufio.Reader) {
	t.Helper()
	line, err := r.ReadString('\n')
	if err != nil || line != "served\n" {
		t.Fatalf("%s: got %q, %v; want the server's line", name, line, err)
	}
}

// mustBeRefused checks the answer to a connection over the cap against spec,
// and that the connection is then closed. When send is set a request is
// written first (the server never reads it); otherwise the client only
// waits. It may run in any goroutine.
func mustBeRefused(t *testing.T, spec *testenv.Spec, name string, c net.Conn, r *bufio.Reader, send bool) {
	t.Helper()
	const req = "GET /healthz HTTP/1.1\r\nHost: gatehouse\r\n\r\n"
	if send {
		if _, err := io.WriteString(c, req); err != nil {
			t.Errorf("%s: write: %v", name, err)
			return
		}
	}
	resp, err := http.ReadResponse(r, nil)
	if err != nil {
		t.Errorf("%s: no HTTP answer: %v", name, err)
		return
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Errorf("%s: body: %v", name, err)
		return
	}
	var b struct {
		Error struct {
			Code      string `json:"code"`
			Message   string `json:"message"`
			RequestID string `json:"request_id"`
		} `json:"error"`
	}
	if err := json.Unmarshal(body, &b); err != nil {
		t.Errorf("%s: body is not JSON: %v: %s", name, err, body)
		return
	}
	for _, c := range []struct{ what, got, want string }{
		{"status", resp.Status, "503 Service Unavailable"},
		{"Content-Type", resp.Header.Get("Content-Type"), "application/json; charset=utf-8"},
		{"Retry-After", resp.Header.Get("Retry-After"), "1"},
		{"error.code", b.Error.Code, "service_unavailable"},
		{"error.request_id", b.Error.RequestID, resp.Header.Get("X-Request-Id")},
	} {
		if c.got != c.want {
			t.Errorf("%s: %s: got %q, want %q", name, c.what, c.got, c.want)
		}
	}
	if !resp.Close { // net/http takes Connection: close out of the header
		t.Errorf("%s: no Connection: close", name)
	}
	if len(b.Error.RequestID) != 36 || b.Error.Message == "" {
		t.Errorf("%s: want a UUID request id and a message: %s", name, body)
	}
	// The same answer, as GET /healthz, is one the spec documents.
	httpReq, err := http.ReadRequest(bufio.NewReader(strings.NewReader(req)))
	if err != nil {
		t.Errorf("%s: %v", name, err)
		return
	}
	httpReq.URL.Scheme, httpReq.URL.Host = "http", "gatehouse"
	spec.Check(t, httpReq, resp, body)

	if n, err := r.Read(make([]byte, 1)); n != 0 || !errors.Is(err, io.EOF) {
		t.Errorf("%s: after the answer: read %d bytes, %v; want the connection closed (EOF)", name, n, err)
	}
}

// TestLimitListener: with a cap of 2, over real TCP on loopback, two
// connections are served and a third is answered 503 service_unavailable
// in the contract's error body, with Retry-After and Connection: close, and
// closed, without reaching the server; so is one that sends nothing. Once a served connection closes, a new
// one is served again. The metrics count the open and the refused.
func TestLimitListener(t *testing.T) {
	t.Parallel()
	s := newCapServer(t, 2)
	c1, r1 := s.dial(t)
	mustBeServed(t, "connection 1", r1)
	_, r2 := s.dial(t)
	mustBeServed(t, "connection 2", r2)

	spec := testenv.LoadSpec(t)
	c3, r3 := s.dial(t)
	mustBeRefused(t, spec, "connection 3", c3, r3, true)
	c3, r3 = s.dial(t)
	mustBeRefused(t, spec, "connection 3, sending nothing", c3, r3, false)

	c1.Close()
	select {
	case <-s.closed:
	case <-time.After(30 * time.Second):
		t.Fatal("the server never closed connection 1 after its client did")
	}
	_, r4 := s.dial(t)
	mustBeServed(t, "connection 4, after connection 1 closed", r4)

	if got := testutil.ToFloat64(s.m.ConnectionsRefused); got != 2 {
		t.Errorf("gatehouse_http_connections_refused_total: got %v, want 2", got)
	}
	if got := testutil.ToFloat64(s.m.ConnectionsOpen); got != 2 {
		t.Errorf("gatehouse_http_connections_open: got %v, want 2", got)
	}
}

// TestLimitListenerCloseUnused: CloseUnused, which the API's drain calls,
// closes the served connections on which nothing arrived, once they are
// older than its grace, and leaves a connection whose request has begun.
func TestLimitListenerCloseUnused(t *testing.T) {
	t.Parallel()
	s := newCapServer(t, 8)
	unused, ru := s.dial(t)
	mustBeServed(t, "the unused connection", ru)
	busy, rb := s.dial(t)
	mustBeServed(t, "the busy connection", rb)
	if _, err := io.WriteString(busy, "GET /v1/charges HTTP/1.1\r\n"); err != nil {
		t.Fatal(err)
	}
	select {
	case <-s.heard:
	case <-time.After(30 * time.Second):
		t.Fatal("the server never read the busy connection's first bytes")
	}

	if n := s.ln.CloseUnused(time.Hour); n != 0 {
		t.Errorf("CloseUnused(1h) right after accepting: closed %d, want 0", n)
	}
	if n := s.ln.CloseUnused(0); n != 1 {
		t.Errorf("CloseUnused(0): closed %d, want 1 (the unused connection)", n)
	}
	select {
	case <-s.closed:
	case <-time.After(30 * time.Second):
		t.Fatal("the server's handler of the unused connection never returned")
	}
	if _, err := ru.ReadByte(); err == nil {
		t.Error("the unused connection: read a byte after CloseUnused, want it closed")
	}
	_ = unused.Close()

	_ = busy.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
	var ne net.Error
	if _, err := rb.ReadByte(); !errors.As(err, &ne) || !ne.Timeout() {
		t.Errorf("the busy connection after CloseUnused: read %v, want it open (a read timeout)", err)
	}
	if got := testutil.ToFloat64(s.m.ConnectionsOpen); got != 1 {
		t.Errorf("gatehouse_http_connections_open: got %v, want 1", got)
	}
}

// TestLimitListenerBurst: many connections over the cap at once are each
// refused with the 503 and closed, and none of them takes a place: the
// connections served before the burst stay served, and after they close,
// as many new ones are served as the cap allows.
func TestLimitListenerBurst(t *testing.T) {
	t.Parallel()
	const limit, burst = 3, 40
	spec := testenv.LoadSpec(t)
	s := newCapServer(t, limit)
	var held []net.Conn
	for i := range limit {
		c, r := s.dial(t)
		mustBeServed(t, fmt.Sprintf("held connection %d", i+1), r)
		held = append(held, c)
	}
	var wg sync.WaitGroup
	for range burst {
		c, r := s.dial(t)
		wg.Add(1)
		go func() {
			defer wg.Done()
			mustBeRefused(t, spec, "burst connection", c, r, true)
		}()
	}
	wg.Wait()
	if got := testutil.ToFloat64(s.m.ConnectionsRefused); got != burst {
		t.Errorf("gatehouse_http_connections_refused_total: got %v, want %d", got, burst)
	}
	for _, c := range held {
		c.Close()
		select {
		case <-s.closed:
		case <-time.After(30 * time.Second):
			t.Fatal("the server never closed a held connection after its client did")
		}
	}
	for i := range limit {
		_, r := s.dial(t)
		mustBeServed(t, fmt.Sprintf("new connection %d", i+1), r)
	}
	if got := testutil.ToFloat64(s.m.ConnectionsOpen); got != limit {
		t.Errorf("gatehouse_http_connections_open: got %v, want %d", got, limit)
	}
}
