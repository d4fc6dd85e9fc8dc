package e2e

import (
	"net/http"
	"testing"
	"time"
)

// TestConnectionLimit: an API replica started with HTTP_MAX_CONNS=3 serves
// three keep-alive connections that stay open after a request each. A
// fourth connection is answered 503 service_unavailable in the contract's
// error body, with Retry-After and Connection: close, whatever the route
// (authentication is never reached), and is closed; the three open ones are
// still served. Once one of them is closed, a new connection is served.
func TestConnectionLimit(t *testing.T) {
	parallel(t)
	const limit = 3
	st := newStack(t, stackOptions{apiEnv: []string{"HTTP_MAX_CONNS=3"}}, "connections beyond HTTP_MAX_CONNS")
	base := st.replicas[0]

	// conn is a client holding at most one connection, kept open between
	// requests.
	conn := func() *http.Client {
		tr := &http.Transport{MaxConnsPerHost: 1, MaxIdleConnsPerHost: 1, IdleConnTimeout: time.Minute}
		t.Cleanup(tr.CloseIdleConnections)
		return &http.Client{Transport: tr, Timeout: 15 * time.Second}
	}
	// gauge reads the replica's metrics through c; waitOpen reads them
	// until gatehouse_http_connections_open is want (the server notices a
	// closed connection an instant after its client closes it).
	gauge := func(c *http.Client, name string) float64 {
		t.Helper()
		e := st.do(t, c, http.MethodGet, base+"/metrics", "", "")
		mustExpect(t, e, http.StatusOK, "")
		v, found := metricSum(string(e.body), name)
		if !found {
			t.Fatalf("%s is not exported", name)
		}
		return v
	}
	waitOpen := func(c *http.Client, want float64) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for {
			got := gauge(c, "gatehouse_http_connections_open")
			if got == want {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("gatehouse_http_connections_open is %v, want %v", got, want)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}

	// Three connections, each answered once and left open; the first also
	// reads the metrics, once the start-up checks' connection is gone.
	open := []*http.Client{conn(), conn(), conn()}
	waitOpen(open[0], 1)
	for _, c := range open {
		mustExpect(t, st.do(t, c, http.MethodGet, base+"/healthz", "", ""), http.StatusOK, "")
	}
	if got := gauge(open[0], "gatehouse_http_connections_open"); got != limit {
		t.Fatalf("gatehouse_http_connections_open: got %v, want %d", got, limit)
	}

	// A fourth connection, on an operating route and on an authenticated
	// one: each is refused with the contract's 503 (checked against
	// api/openapi.yaml by do) and closed.
	for _, path := range []string{"/healthz", "/v1/me"} {
		e := st.do(t, conn(), http.MethodGet, base+path, "", "")
		mustExpect(t, e, http.StatusServiceUnavailable, "service_unavailable")
		if got, ok := intHeader(t, e, "Retry-After"); ok && got < 1 {
			t.Errorf("%s: Retry-After %d, want at least 1", e.describe(), got)
		}
		if !e.resp.Close { // net/http takes Connection: close out of the header
			t.Errorf("%s: 503 without Connection: close", e.describe())
		}
		var b struct {
			Error struct {
				RequestID string `json:"request_id"`
			} `json:"error"`
		}
		decode(t, e, &b)
		if id := e.header("X-Request-Id"); id == "" || b.Error.RequestID != id {
			t.Errorf("%s: request_id %q, X-Request-Id %q: want the same id", e.describe(), b.Error.RequestID, id)
		}
	}
	if got := gauge(open[0], "gatehouse_http_connections_refused_total"); got != 2 {
		t.Errorf("gatehouse_http_connections_refused_total: got %v, want 2", got)
	}

	// The open connections are still served, on the same connections: a
	// new one would have been refused.
	for _, c := range open {
		mustExpect(t, st.do(t, c, http.MethodGet, base+"/healthz", "", ""), http.StatusOK, "")
	}

	// One of the three closes: a new connection is served again.
	open[2].CloseIdleConnections()
	waitOpen(open[0], limit-1)
	mustExpect(t, st.do(t, conn(), http.MethodGet, base+"/healthz", "", ""), http.StatusOK, "")
	if got := gauge(open[0], "gatehouse_http_connections_refused_total"); got != 2 {
		t.Errorf("gatehouse_http_connections_refused_total: got %v, want 2", got)
	}
}

// TestProbePortAtConnectionLimit: with the public port full (HTTP_MAX_CONNS
// keep-alive connections held open, a further one refused 503), the
// replica's PROBE_ADDR still answers /healthz 200 and /readyz?exclude=redis
// 200, as the kubelet's liveness and readiness probes ask them, each on a
// new connection, and takes no place of the public port's. That each probe
// answers within 5 s is asserted at full scale (make chaos), where the test
// runs on its own; at smoke scale the slowest is logged.
func TestProbePortAtConnectionLimit(t *testing.T) {
	chaosParallel(t)
	const limit = 2
	st := newStack(t, stackOptions{apiEnv: []string{"HTTP_MAX_CONNS=2"}, probes: true}, "probes while the public port is full")
	base, probes := st.replicas[0], st.probes[0]

	conn := func() *http.Client {
		tr := &http.Transport{MaxConnsPerHost: 1, MaxIdleConnsPerHost: 1, IdleConnTimeout: time.Minute}
		t.Cleanup(tr.CloseIdleConnections)
		return &http.Client{Transport: tr, Timeout: 15 * time.Second}
	}
	// Fill the public port: each held connection was served once and stays
	// open. A place may still be taken, for an instant, by the start-up
	// checks' connection, which the server notices closed a little later.
	deadline := time.Now().Add(30 * time.Second)
	for held := 0; held < limit; {
		c := conn()
		e := st.do(t, c, http.MethodGet, base+"/healthz", "", "")
		if e.status() == http.StatusOK {
			held++
			continue
		}
		mustExpect(t, e, http.StatusServiceUnavailable, "service_unavailable")
		if time.Now().After(deadline) {
			t.Fatalf("the public port has not served %d connections within 30s", limit)
		}
		time.Sleep(50 * time.Millisecond)
	}
	mustExpect(t, st.do(t, conn(), http.MethodGet, base+"/healthz", "", ""), http.StatusServiceUnavailable, "service_unavailable")

	// The probe port answers, on fresh connections each time, as a kubelet's
	// probes come.
	var slowest time.Duration
	for range 3 {
		for _, path := range []string{"/healthz", "/readyz?exclude=redis", "/readyz"} {
			e := st.do(t, conn(), http.MethodGet, probes+path, "", "")
			mustExpect(t, e, http.StatusOK, "")
			slowest = max(slowest, e.elapsed())
			if chaosFull() && e.elapsed() > 5*time.Second {
				t.Errorf("%s took %s", e.describe(), e.elapsed())
			}
		}
	}
	t.Logf("the probe port answered 9 probes on new connections while the public port was full; the slowest in %s", slowest.Round(time.Millisecond))
	// Still full: the probes took no place of the public port's.
	mustExpect(t, st.do(t, conn(), http.MethodGet, base+"/healthz", "", ""), http.StatusServiceUnavailable, "service_unavailable")

}
