package e2e

import (
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gatehouse-pay/gatehouse/internal/testenv"
)

// readyOutage is how long TestReadiness keeps Redis down.
const readyOutage = 3 * time.Second

// readyChecks returns the checks of a 200 /readyz answer.
func readyChecks(t *testing.T, e exchange) map[string]string {
	t.Helper()
	var body struct {
		Checks map[string]string `json:"checks"`
	}
	if err := json.Unmarshal(e.body, &body); err != nil {
		t.Errorf("%s: body is not a readiness answer: %v: %s", e.describe(), err, e.body)
	}
	return body.Checks
}

// expectReady records an error unless e is a 200 readiness answer whose
// checks are postgres and redis as given.
func expectReady(t *testing.T, e exchange, postgres, redis string) {
	t.Helper()
	if !expect(t, e, http.StatusOK, "") {
		return
	}
	got := readyChecks(t, e)
	if got["postgres"] != postgres || got["redis"] != redis || len(got) != 2 {
		t.Errorf("%s: checks %v, want postgres %s and redis %s", e.describe(), got, postgres, redis)
	}
}

// TestReadiness runs the real binaries and checks what their probes see
// (docs/deploy.md, "Probes").
//
// api_metrics_addr: a third API process with API_METRICS_ADDR serves
// /metrics there and answers 404 not_found for it on HTTP_ADDR; the replicas
// without it still serve /metrics on HTTP_ADDR.
//
// redis_outage: while Redis is down, /readyz answers 503 on the API replicas
// and the worker, but the API's /readyz?exclude=redis (its Kubernetes
// readiness probe) stays 200, reporting redis unavailable, and the API keeps
// doing its work: charges with a secret key are created and a revoked key is
// refused. The worker's /readyz?exclude=redis&exclude=postgres (its probe)
// stays 200. Once Redis is back every /readyz answers 200 again.
func TestReadiness(t *testing.T) {
	parallel(t)
	st := newStack(t, stackOptions{}, "readiness probes and API_METRICS_ADDR")
	c := newClient(t, "127.0.0.150")

	t.Run("api_metrics_addr", func(t *testing.T) {
		httpAddr := testenv.FreeAddr(t)
		metricsAddr := testenv.FreeAddr(t)
		env := append(slices.Clone(st.env), "HTTP_ADDR="+httpAddr, "API_METRICS_ADDR="+metricsAddr)
		p := testenv.StartProcess(t, "api-3", nil, env, st.bins.api)
		t.Cleanup(func() { testenv.Terminate(t, p, exitTimeout) })
		st.waitReady(t, c, "http://"+httpAddr, p, 60*time.Second)

		e := st.do(t, c, http.MethodGet, "http://"+metricsAddr+"/metrics", "", "")
		if expect(t, e, http.StatusOK, "") {
			if _, found := metricSum(string(e.body), "gatehouse_http_requests_total"); !found {
				t.Errorf("API_METRICS_ADDR /metrics has no gatehouse_http_requests_total:\n%.2000s", e.body)
			}
		}
		expect(t, st.do(t, c, http.MethodGet, "http://"+httpAddr+"/metrics", "", ""), http.StatusNotFound, "not_found")
		// The metrics listener serves nothing else.
		if e, err := send(c, http.MethodGet, "http://"+metricsAddr+"/readyz", "", ""); err != nil {
			t.Errorf("GET /readyz on API_METRICS_ADDR: %v", err)
		} else if e.status() != http.StatusNotFound {
			t.Errorf("GET /readyz on API_METRICS_ADDR: %s, want 404", e)
		}
		for _, r := range st.replicas {
			expect(t, st.do(t, c, http.MethodGet, r+"/metrics", "", ""), http.StatusOK, "")
		}
	})

	t.Run("redis_outage", func(t *testing.T) {
		_, token := st.signUp(t, c, "ready", "Readiness")
		valid := st.newKey(t, c, token, "valid")
		revoked := st.newKey(t, c, token, "revoked")
		for _, r := range st.replicas { // each replica caches the key before it is revoked
			mustExpect(t, st.do(t, c, http.MethodGet, r+"/v1/me", revoked.SecretKey, ""), http.StatusOK, "")
		}
		mustExpect(t, st.do(t, c, http.MethodDelete, st.replicas[0]+"/v1/me/api_keys/"+revoked.ID, revoked.SecretKey, ""), http.StatusOK, "")

		const apiProbe, workerProbe = "/readyz?exclude=redis", "/readyz?exclude=redis&exclude=postgres"
		for _, r := range st.replicas {
			expectReady(t, st.do(t, c, http.MethodGet, r+"/readyz", "", ""), "ok", "ok")
			expectReady(t, st.do(t, c, http.MethodGet, r+apiProbe, "", ""), "ok", "ok")
			expect(t, st.do(t, c, http.MethodGet, r+"/readyz?exclude=queue", "", ""), http.StatusBadRequest, "parameter_invalid")
		}
		expectReady(t, st.do(t, c, http.MethodGet, st.worker+workerProbe, "", ""), "ok", "ok")
		expectReady(t, st.do(t, c, http.MethodGet, st.worker+"/readyz?exclude=redis,postgres", "", ""), "ok", "ok")
		expect(t, st.do(t, c, http.MethodGet, st.worker+"/readyz?exclude=queue", "", ""), http.StatusBadRequest, "parameter_invalid")

		st.redis.stop(t)
		down := time.Now()

		// /readyz without exclude answers 503 everywhere.
		var notReady time.Duration
		for _, base := range []string{st.replicas[0], st.replicas[1], st.worker} {
			for {
				e := st.do(t, c, http.MethodGet, base+"/readyz", "", "")
				if e.status() == http.StatusServiceUnavailable {
					expect(t, e, http.StatusServiceUnavailable, "service_unavailable")
					if !strings.Contains(string(e.body), "redis") {
						t.Errorf("%s: %s, want a message naming redis", e.describe(), e.body)
					}
					notReady = max(notReady, time.Since(down))
					break
				}
				if time.Since(down) > waitFloor {
					t.Fatalf("%s: %d %s %s after Redis stopped, want 503", e.describe(), e.status(), e.body, waitFloor)
				}
				time.Sleep(20 * time.Millisecond)
			}
		}

		// Through the outage the probes stay 200 and the API serves.
		var rounds, charges, refusals int
		var slowest time.Duration // of the probes: their timeoutSeconds must stay above it
		probe := func(url string) {
			t.Helper()
			e := st.do(t, c, http.MethodGet, url, "", "")
			slowest = max(slowest, e.elapsed())
			expectReady(t, e, "ok", "unavailable")
		}
		for rounds == 0 || time.Since(down) < readyOutage {
			for _, r := range st.replicas {
				probe(r + apiProbe)
				if expect(t, st.do(t, c, http.MethodPost, r+"/v1/charges", valid.SecretKey, chargeBody), http.StatusCreated, "") {
					charges++
				}
				if expect(t, st.do(t, c, http.MethodPost, r+"/v1/charges", revoked.SecretKey, chargeBody), http.StatusUnauthorized, "token_revoked") {
					refusals++
				}
			}
			probe(st.worker + workerProbe)
			rounds++
			time.Sleep(100 * time.Millisecond)
		}
		for _, r := range st.replicas {
			expect(t, st.do(t, c, http.MethodGet, r+"/readyz?exclude=postgres", "", ""), http.StatusServiceUnavailable, "service_unavailable")
		}
		expect(t, st.do(t, c, http.MethodGet, st.worker+"/readyz?exclude=postgres", "", ""), http.StatusServiceUnavailable, "service_unavailable")
		outage := time.Since(down)

		st.redis.start(t)
		restarted := time.Now()
		const within = waitFloor
		for _, base := range []string{st.replicas[0], st.replicas[1], st.worker} {
			for {
				e := st.do(t, c, http.MethodGet, base+"/readyz", "", "")
				if e.status() == http.StatusOK {
					expectReady(t, e, "ok", "ok")
					break
				}
				if time.Since(restarted) > within {
					t.Errorf("%s: %d %s %s after Redis restarted, want 200", e.describe(), e.status(), e.body, within)
					break
				}
				time.Sleep(50 * time.Millisecond)
			}
		}
		t.Logf("Redis down %s: /readyz 503 on every process within %s; %d rounds of the probes all 200 on 2 API replicas and the worker "+
			"(slowest %s), charges 201 %d, revoked-key charges 401 %d; /readyz 200 again %s after Redis restarted",
			outage.Round(time.Millisecond), notReady.Round(time.Millisecond), rounds, slowest.Round(time.Millisecond), charges, refusals,
			time.Since(restarted).Round(time.Millisecond))
	})
}
