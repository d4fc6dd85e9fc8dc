package httpapi_test

import (
	"io"
	"net"
	"net/http"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/gatehouse-pay/gatehouse/internal/httpapi"
	"github.com/gatehouse-pay/gatehouse/internal/metrics"
)

// deadRedisURL is a Redis URL on a loopback port nothing listens on.
func deadRedisURL(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return "redis://" + addr + "/0"
}

// TestReadyzExclude: /readyz?exclude=NAME still runs and reports the named
// check but does not fail on it; without exclude, any failing check gives
// 503; an unknown name is a bad parameter. The API runs against real
// PostgreSQL and a Redis address that refuses connections; PostgreSQL then
// fails too when the API's pool is closed.
func TestReadyzExclude(t *testing.T) {
	t.Parallel()
	h := newHarnessWith(t, harnessOptions{redisURL: deadRedisURL(t)})
	// ready asks path for 200 with these checks.
	ready := func(path, postgres, redis string) {
		t.Helper()
		r := h.do("GET", path, "")
		want(t, r, 200, "")
		checks, _ := r.body["checks"].(map[string]any)
		if diff := cmp.Diff(map[string]any{"postgres": postgres, "redis": redis}, checks); diff != "" {
			t.Errorf("%s checks (-want +got):\n%s", path, diff)
		}
	}

	r := h.do("GET", "/readyz", "")
	want(t, r, 503, "service_unavailable")
	if msg := r.errField("message"); !strings.Contains(msg, "redis") || strings.Contains(msg, "postgres") {
		t.Errorf("/readyz with Redis down: message %q, want it to name redis only", msg)
	}

	for _, path := range []string{"/readyz?exclude=redis", "/readyz?exclude=%20redis%20"} {
		ready(path, "ok", "unavailable")
	}
	r = h.do("GET", "/readyz?exclude=postgres", "")
	want(t, r, 503, "service_unavailable")

	for _, path := range []string{"/readyz?exclude=nope", "/readyz?exclude=redis&exclude=nope", "/readyz?exclude=redis,", "/readyz?exclude=Redis", "/readyz?exclude="} {
		r = h.do("GET", path, "")
		want(t, r, 400, "parameter_invalid")
		if r.errField("param") != "exclude" {
			t.Errorf("%s: param %q, want exclude", path, r.errField("param"))
		}
	}

	h.db.Pool.Close() // the postgres check now fails as well
	for _, path := range []string{"/readyz", "/readyz?exclude=redis", "/readyz?exclude=postgres"} {
		r = h.do("GET", path, "")
		want(t, r, 503, "service_unavailable")
	}
	if msg := r.errField("message"); !strings.Contains(msg, "redis") || strings.Contains(msg, "postgres") {
		t.Errorf("/readyz?exclude=postgres: message %q, want it to name redis only", msg)
	}
	for _, path := range []string{"/readyz?exclude=redis&exclude=postgres", "/readyz?exclude=redis,postgres"} {
		ready(path, "unavailable", "unavailable")
	}
}

// TestReadyzHealthy: with both stores up every form answers 200 with both
// checks ok.
func TestReadyzHealthy(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	for _, path := range []string{"/readyz", "/readyz?exclude=redis", "/readyz?exclude=postgres&exclude=redis"} {
		r := h.do("GET", path, "")
		want(t, r, 200, "")
		if diff := cmp.Diff(map[string]any{"status": "ok", "checks": map[string]any{"postgres": "ok", "redis": "ok"}}, r.body); diff != "" {
			t.Errorf("%s (-want +got):\n%s", path, diff)
		}
	}
}

// TestMetricsOwnListener: with API_METRICS_ADDR set, HTTP_ADDR answers
// /metrics with the usual 404, and MetricsServer serves GET /metrics, with
// an X-Request-Id, and nothing else.
func TestMetricsOwnListener(t *testing.T) {
	t.Parallel()
	h := newHarness(t, func(env map[string]string) { env["API_METRICS_ADDR"] = "127.0.0.1:0" })
	want(t, h.do("GET", "/metrics", ""), 404, "not_found")
	want(t, h.do("GET", "/readyz", ""), 200, "")

	reg := metrics.NewRegistry()
	metrics.NewHTTP(reg)
	srv := httpapi.MetricsServer(metrics.Handler(reg))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	base := "http://" + ln.Addr().String()
	for _, c := range []struct {
		method, path string
		status       int
		body         string // a fragment
	}{
		{"GET", "/metrics", 200, "gatehouse_build_info"},
		{"GET", "/readyz", 404, ""},
		{"GET", "/v1/me", 404, ""},
		{"POST", "/metrics", 405, ""},
	} {
		req, _ := http.NewRequest(c.method, base+c.path, nil)
		req.Header.Set("X-Request-Id", "scrape-1")
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != c.status || !strings.Contains(string(b), c.body) || resp.Header.Get("X-Request-Id") != "scrape-1" {
			t.Errorf("%s %s on the metrics listener: %d, X-Request-Id %q; want %d with %q", c.method, c.path, resp.StatusCode, resp.Header.Get("X-Request-Id"), c.status, c.body)
		}
	}
}
