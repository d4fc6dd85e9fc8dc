package sender

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// received is what a test receiver saw of one request.
type received struct {
	Method string
	Header http.Header
	Body   []byte
}

// recorder is a loopback receiver that records requests and answers with
// status and body.
func recorder(t *testing.T, status int, body string) (*httptest.Server, func() []received) {
	t.Helper()
	var mu sync.Mutex
	var got []received
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		got = append(got, received{Method: r.Method, Header: r.Header.Clone(), Body: b})
		mu.Unlock()
		w.WriteHeader(status)
		_, _ = io.WriteString(w, body)
	}))
	t.Cleanup(srv.Close)
	return srv, func() []received {
		mu.Lock()
		defer mu.Unlock()
		return append([]received(nil), got...)
	}
}

// roomy is the timeout of a Sender in a test that is not about timeouts:
// room for a loaded machine, so that no exchange with a local server ends by
// it.
const roomy = 30 * time.Second

func TestSendDeliversHeadersAndBodyExactly(t *testing.T) {
	srv, got := recorder(t, http.StatusOK, "ok")
	s := New(Options{Timeout: roomy, AllowPrivate: true})
	body := []byte("{\"id\":\"evt_1\",\"note\":\"café 💳\\n\",\"raw\":\"\\u0000\"}\n  ")
	headers := map[string]string{
		"X-Service-Signature":        "sha256=136326a79cc2d7d0f4e34cf81855e46c8d490609528b6e5bee6c05bb216598b5",
		"X-Service-Event-Id":         "0195f3c2-7a4e-7b8c-9d0e-1f2a3b4c5d6e",
		"X-Service-Delivery-Attempt": "3",
		"webhook-id":                 "0195f3c2-7a4e-7b8c-9d0e-1f2a3b4c5d6e",
		"webhook-timestamp":          "1767225600",
		"webhook-signature":          "v1,PNvHc3O3oIQSDm9Nq8aTOSPaVmBYIgpi6UzWI/4IMqc= v1,N6Iw8hA43NydqMXCUr9cpr+CiVToBFmmLg7X9E6F9Ao=",
		"Content-Type":               "text/plain", // ignored: deliveries are JSON
	}
	start := time.Now()
	res := s.Send(context.Background(), Request{URL: srv.URL + "/hooks/in?source=gatehouse", Body: body, Headers: headers})
	took := time.Since(start)
	if !res.OK() || res.StatusCode != 200 || res.Body != "ok" || res.Err != nil {
		t.Fatalf("Send = %+v, want 200 OK with body ok", res)
	}
	if res.Duration <= 0 || res.Duration > took {
		t.Errorf("Duration = %v, want the attempt's time, within the %v Send took", res.Duration, took)
	}
	reqs := got()
	if len(reqs) != 1 {
		t.Fatalf("receiver got %d requests, want 1", len(reqs))
	}
	r := reqs[0]
	if r.Method != http.MethodPost {
		t.Errorf("method = %s, want POST", r.Method)
	}
	if !bytes.Equal(r.Body, body) {
		t.Errorf("body = %q, want %q", r.Body, body)
	}
	if ct := r.Header.Values("Content-Type"); len(ct) != 1 || ct[0] != "application/json" {
		t.Errorf("Content-Type = %q, want exactly application/json", ct)
	}
	for k, v := range headers {
		if strings.EqualFold(k, "Content-Type") {
			continue
		}
		if got := r.Header.Values(k); len(got) != 1 || got[0] != v {
			t.Errorf("header %s = %q, want [%q]", k, got, v)
		}
	}
}

func TestSendReportsFailuresWithTheStartOfTheBody(t *testing.T) {
	long := strings.Repeat("e", 700) + strings.Repeat("f", 1300)
	tests := []struct {
		name    string
		status  int
		body    string
		maxBody int64
		wantOK  bool
		want    string
	}{
		{"200", 200, "thanks", 0, true, "thanks"},
		{"204", 204, "", 0, true, ""},
		{"299", 299, "odd but 2xx", 0, true, "odd but 2xx"},
		{"500 keeps the first 1024 bytes", 500, long, 0, false, long[:1024]},
		{"400 with a small cap", 400, long, 16, false, long[:16]},
		{"404", 404, "no such hook", 0, false, "no such hook"},
		{"300 without a location", 300, "choices", 0, false, "choices"},
		{"binary body is made storable", 502, "bad\x00gate\xffway", 0, false, "badgate\uFFFDway"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.WriteHeader(tt.status)
				_, _ = io.WriteString(w, tt.body)
			}))
			defer srv.Close()
			res := New(Options{Timeout: roomy, AllowPrivate: true, MaxBody: tt.maxBody}).Send(context.Background(), Request{URL: srv.URL, Body: []byte("{}")})
			if res.OK() != tt.wantOK || res.Err != nil || res.Body != tt.want {
				t.Errorf("Send = %+v (OK %v), want OK %v, body %q", res, res.OK(), tt.wantOK, tt.want)
			}
		})
	}
}

func TestSendNeverFollowsRedirects(t *testing.T) {
	target, targetGot := recorder(t, 200, "ok")
	for _, status := range []int{301, 302, 303, 307, 308} {
		for _, to := range []string{target.URL + "/landing", "http://169.254.169.254/latest/meta-data/"} {
			redirector := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				http.Redirect(w, r, to, status)
			}))
			res := New(Options{Timeout: roomy, AllowPrivate: true}).Send(context.Background(), Request{URL: redirector.URL, Body: []byte("{}")})
			redirector.Close()
			if res.OK() || res.StatusCode != status || res.Err != nil {
				t.Errorf("%d to %s: Send = %+v, want a failed attempt with status %d", status, to, res, status)
			}
		}
	}
	if n := len(targetGot()); n != 0 {
		t.Errorf("the redirect target got %d requests, want 0", n)
	}
}

func TestSendRefusesURLsThatAreNotHTTP(t *testing.T) {
	s := New(Options{Timeout: roomy, AllowPrivate: true})
	for _, u := range []string{"", "/relative", "example.com/hook", "ftp://example.com/", "file:///etc/passwd", "http://", "http://:80/", "https:///path", "gopher://x", "http://a b/", "http://[::1"} {
		res := s.Send(context.Background(), Request{URL: u})
		if !errors.Is(res.Err, ErrInvalidURL) || res.OK() || res.StatusCode != 0 {
			t.Errorf("Send(%q) = %+v, want ErrInvalidURL", u, res)
		}
	}
}

// Errors are stored in the delivery log and logged: they must not show what
// the request carried, nor the URL's path and query.
func TestErrorsNeverShowTheRequest(t *testing.T) {
	const bodySecret, headerSecret, pathSecret, querySecret = "card4242body", "whsec_headersecret", "pathtoken", "querytoken"
	req := func(url string) Request {
		return Request{
			URL:     url + "/" + pathSecret + "?token=" + querySecret,
			Body:    []byte(`{"secret":"` + bodySecret + `"}`),
			Headers: map[string]string{"X-Service-Signature": headerSecret, "Authorization": "Bearer " + headerSecret},
		}
	}
	closed, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closedURL := "http://" + closed.Addr().String()
	closed.Close()
	silent := silentListener(t)
	reset := rawServer(t, func(c net.Conn) { _, _ = io.ReadAll(io.LimitReader(c, 1)); c.Close() })

	cases := []struct {
		name string
		s    *Sender
		url  string
	}{
		{"forbidden destination", New(Options{Timeout: roomy}), "http://127.0.0.1:9"},
		{"connection refused", New(Options{Timeout: roomy, AllowPrivate: true}), closedURL},
		{"timeout", New(Options{Timeout: 200 * time.Millisecond, AllowPrivate: true}), silent},
		{"connection closed", New(Options{Timeout: roomy, AllowPrivate: true}), reset},
		{"unknown host", newSender(Options{Timeout: roomy, AllowPrivate: true}, fakeDNS(t, false)), "http://nxdomain.gatehouse.test"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			res := c.s.Send(context.Background(), req(c.url))
			if res.Err == nil {
				t.Fatalf("Send = %+v, want an error", res)
			}
			msg := res.Err.Error()
			for _, secret := range []string{bodySecret, headerSecret, pathSecret, querySecret} {
				if strings.Contains(msg, secret) {
					t.Errorf("error %q shows %q", msg, secret)
				}
			}
		})
	}
	// An invalid header value fails without echoing it.
	srv, _ := recorder(t, 200, "")
	res := New(Options{Timeout: roomy, AllowPrivate: true}).Send(context.Background(), Request{URL: srv.URL, Headers: map[string]string{"X-Bad": "whsec_x\r\nInjected: 1"}})
	if res.Err == nil || strings.Contains(res.Err.Error(), "whsec_x") {
		t.Errorf("invalid header value: Err = %v, want an error without the value", res.Err)
	}
}

func TestSendHonoursTheCallersContext(t *testing.T) {
	silent := silentListener(t)
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(100*time.Millisecond, cancel)
	start := time.Now()
	res := New(Options{Timeout: 5 * time.Second, AllowPrivate: true}).Send(ctx, Request{URL: silent})
	// context.Canceled and not ErrTimeout: the cancel ended the attempt, not
	// the 5 s timeout, however long a loaded machine took to get there.
	if !errors.Is(res.Err, context.Canceled) || errors.Is(res.Err, ErrTimeout) {
		t.Errorf("Send = %+v after %v, want context.Canceled by the caller's cancel", res, time.Since(start))
	}
}

// One Sender keeps its connections for the next delivery.
func TestSendReusesConnections(t *testing.T) {
	var conns atomic.Int64
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		_, _ = io.WriteString(w, "ok")
	}))
	srv.Config.ConnState = func(_ net.Conn, st http.ConnState) {
		if st == http.StateNew {
			conns.Add(1)
		}
	}
	srv.Start()
	defer srv.Close()
	s := New(Options{Timeout: roomy, AllowPrivate: true})
	defer s.CloseIdleConnections()
	for i := range 5 {
		if res := s.Send(context.Background(), Request{URL: srv.URL, Body: []byte("{}")}); !res.OK() {
			t.Fatalf("send %d: %+v", i, res)
		}
	}
	if n := conns.Load(); n != 1 {
		t.Errorf("5 sequential deliveries opened %d connections, want 1", n)
	}
}

func TestTransportIgnoresProxiesFromTheEnvironment(t *testing.T) {
	t.Setenv("HTTP_PROXY", "http://127.0.0.1:1")
	t.Setenv("HTTPS_PROXY", "http://127.0.0.1:1")
	s := New(Options{})
	if s.transport.Proxy != nil {
		t.Error("Transport.Proxy is set: deliveries could go through a proxy that reaches private addresses")
	}
	if s.client.CheckRedirect == nil {
		t.Error("the client follows redirects")
	}
	if s.transport.Protocols == nil || s.transport.Protocols.HTTP2() {
		t.Errorf("protocols = %v, want HTTP/1 only", s.transport.Protocols)
	}
}

func TestDefaults(t *testing.T) {
	s := New(Options{})
	if s.timeout != DefaultTimeout || s.maxBody != DefaultMaxBody {
		t.Errorf("timeout, maxBody = %v, %d; want %v, %d", s.timeout, s.maxBody, DefaultTimeout, DefaultMaxBody)
	}
}

func TestText(t *testing.T) {
	tests := []struct {
		in   string
		max  int
		want string
	}{
		{"", 10, ""},
		{"plain", 10, "plain"},
		{"caf\xc3", 4, "caf"},         // a rune cut by the cap is dropped
		{"💳💳"[:6], 6, "💳"},            // 4 + the first 2 bytes of the second
		{"a\x00b", 10, "ab"},          // NUL removed
		{"\xff\xfe\xfd", 3, "\uFFFD"}, // an invalid run becomes one replacement
		{"ab\xffcd", 4, "ab"},         // never longer than the cap
	}
	for _, tt := range tests {
		got := text([]byte(tt.in), tt.max)
		if diff := cmp.Diff(tt.want, got); diff != "" || len(got) > tt.max {
			t.Errorf("text(%q, %d) = %q, want %q", tt.in, tt.max, got, tt.want)
		}
	}
}

// TestConnectionsAreReusedAtTheEndpointCap: waves of as many attempts at once
// as a worker runs to one endpoint reuse the first wave's connections.
func TestConnectionsAreReusedAtTheEndpointCap(t *testing.T) {
	var opened atomic.Int64
	var gate atomic.Pointer[chan struct{}]
	first := make(chan struct{})
	gate.Store(&first)
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		<-*gate.Load()
		w.WriteHeader(http.StatusOK)
	}))
	var idle atomic.Int64
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		switch s {
		case http.StateNew:
			opened.Add(1)
		case http.StateIdle:
			idle.Add(1)
		}
	}
	srv.Start()
	defer srv.Close()
	s := New(Options{Timeout: roomy, AllowPrivate: true})
	wave := func() {
		var wg sync.WaitGroup
		for range IdlePerHost {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if res := s.Send(context.Background(), Request{URL: srv.URL, Body: []byte("{}")}); res.StatusCode != http.StatusOK {
					t.Errorf("send: %+v", res)
				}
			}()
		}
		for opened.Load() < IdlePerHost {
			time.Sleep(time.Millisecond) // all in flight at once
		}
		close(first)
		wg.Wait()
	}
	wave()
	// A connection goes back to the client's idle pool from its read loop,
	// just after Send has returned: wait until the server has seen every
	// connection finish its answer, and the client a moment to park them.
	for deadline := time.Now().Add(roomy); idle.Load() < IdlePerHost && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond)
	}
	time.Sleep(20 * time.Millisecond)
	second := make(chan struct{})
	gate.Store(&second)
	afterFirst := opened.Load()
	go func() {
		time.Sleep(50 * time.Millisecond) // the second wave in flight at once too
		close(second)
	}()
	var wg sync.WaitGroup
	for range IdlePerHost {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.Send(context.Background(), Request{URL: srv.URL, Body: []byte("{}")})
		}()
	}
	wg.Wait()
	if afterFirst != IdlePerHost || opened.Load() != afterFirst {
		t.Errorf("connections opened: %d by the first wave of %d, %d in all; want the second wave to open none", afterFirst, IdlePerHost, opened.Load())
	}
}
