package metrics_test

import (
	"runtime"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/gatehouse-pay/gatehouse/internal/metrics"
)

// TestConstructorsRegister: each constructor registers its metrics into a
// fresh registry without a panic (no name clash, valid options), and the
// metrics it creates up front are there before anything is recorded.
func TestConstructorsRegister(t *testing.T) {
	cases := []struct {
		name string
		make func(reg prometheus.Registerer)
		// want is the number of series gathered right after construction.
		want map[string]int
	}{
		{"NewHTTP", func(reg prometheus.Registerer) { metrics.NewHTTP(reg) }, map[string]int{
			"gatehouse_http_requests_in_flight":        1,
			"gatehouse_http_connections_open":          1,
			"gatehouse_http_connections_refused_total": 1,
		}},
		{"NewJobs", func(reg prometheus.Registerer) { metrics.NewJobs(reg) }, map[string]int{
			"gatehouse_provider_put_backs_total": 2, // merchant_slow and merchant_busy
		}},
		{"NewProviders", func(reg prometheus.Registerer) { metrics.NewProviders(reg) }, map[string]int{}},
		{"NewWebhooks", func(reg prometheus.Registerer) { metrics.NewWebhooks(reg) }, map[string]int{
			"gatehouse_webhook_attempts_total":              2, // succeeded and failed, attempt 1
			"gatehouse_webhook_attempt_duration_seconds":    2,
			"gatehouse_webhook_first_attempt_delay_seconds": 1,
			"gatehouse_webhook_batch_size":                  3,
			"gatehouse_webhook_endpoints_disabled_total":    2,
			"gatehouse_webhook_handoffs_total":              6,
			"gatehouse_webhook_operational_events_total":    3,
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			reg := prometheus.NewPedanticRegistry()
			c.make(reg)
			got := seriesByName(t, reg)
			if diff := cmp.Diff(c.want, got); diff != "" {
				t.Errorf("series after %s (-want +got):\n%s", c.name, diff)
			}
		})
	}
}

// TestEveryMetricInOneRegistry: the registry of a worker or an API process,
// holding every metric at once, gathers without a clash and without a lint
// problem (naming, _total counters, units).
func TestEveryMetricInOneRegistry(t *testing.T) {
	reg := metrics.NewRegistry()
	h := metrics.NewHTTP(reg)
	j := metrics.NewJobs(reg)
	p := metrics.NewProviders(reg)
	p.Init([]string{"sandbox"})
	w := metrics.NewWebhooks(reg)

	// One observation each, so every family is gathered and linted.
	h.Requests.WithLabelValues("GET", "/v1/charges/:id", "200").Inc()
	h.Duration.WithLabelValues("GET", "/v1/charges/:id").Observe(0.01)
	h.AuthFailures.WithLabelValues("invalid_api_key").Inc()
	h.ChargesCreated.WithLabelValues("sandbox").Inc()
	j.Processed.WithLabelValues("charge:authorize", "ok").Inc()
	j.Duration.WithLabelValues("charge:authorize").Observe(0.2)
	p.Calls.WithLabelValues("sandbox", "authorize", "succeeded").Inc()
	p.Duration.WithLabelValues("sandbox", "authorize").Observe(0.05)
	p.InitConnector("conn_a", "sandbox")
	p.InitFailovers([]string{"sandbox"}, []string{"processing_error"})
	w.FirstAttempt.Observe(0.3)

	problems, err := testutil.GatherAndLint(reg)
	if err != nil {
		t.Fatalf("gather: %v", err)
	}
	for _, pr := range problems {
		t.Errorf("lint: %s: %s", pr.Metric, pr.Text)
	}
	names := seriesByName(t, reg)
	for _, name := range []string{
		"gatehouse_build_info", "go_goroutines",
		"gatehouse_http_requests_total", "gatehouse_http_request_duration_seconds", "gatehouse_http_requests_in_flight",
		"gatehouse_auth_failures_total", "gatehouse_charges_created_total",
		"gatehouse_http_connections_open", "gatehouse_http_connections_refused_total",
		"gatehouse_jobs_processed_total", "gatehouse_job_duration_seconds",
		"gatehouse_provider_calls_total", "gatehouse_provider_call_duration_seconds", "gatehouse_provider_circuit_state",
		"gatehouse_charges_total", "gatehouse_refunds_total",
		"gatehouse_webhook_attempts_total", "gatehouse_webhook_attempt_duration_seconds", "gatehouse_webhook_first_attempt_delay_seconds",
		"gatehouse_webhook_batch_size",
		"gatehouse_connector_attempts_total", "gatehouse_routing_failovers_total",
	} {
		if names[name] == 0 {
			t.Errorf("%s is not gathered", name)
		}
	}
}

// TestProvidersInit: Init creates, for each provider, a closed circuit (0)
// and every charge and refund outcome at 0, so dashboards and alerts see the
// series before the first call; nothing exists before Init.
func TestProvidersInit(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	p := metrics.NewProviders(reg)
	for name, c := range map[string]prometheus.Collector{"circuit": p.Circuit, "charges": p.Charges, "refunds": p.Refunds} {
		if n := testutil.CollectAndCount(c); n != 0 {
			t.Errorf("%s before Init: %d series, want 0", name, n)
		}
	}
	p.Circuit.WithLabelValues("stripe").Set(2) // an open circuit is not reset by Init of another provider
	p.Init([]string{"sandbox"})

	const want = `
# HELP gatehouse_provider_circuit_state Circuit breaker state by provider: 0 closed, 1 half-open, 2 open.
# TYPE gatehouse_provider_circuit_state gauge
gatehouse_provider_circuit_state{provider="sandbox"} 0
gatehouse_provider_circuit_state{provider="stripe"} 2
# HELP gatehouse_charges_total Charge status changes made by the worker, by provider and outcome (authorized, captured, failed, voided).
# TYPE gatehouse_charges_total counter
gatehouse_charges_total{outcome="authorized",provider="sandbox"} 0
gatehouse_charges_total{outcome="captured",provider="sandbox"} 0
gatehouse_charges_total{outcome="failed",provider="sandbox"} 0
gatehouse_charges_total{outcome="voided",provider="sandbox"} 0
# HELP gatehouse_refunds_total Refunds settled by the worker, by provider and outcome (succeeded, failed).
# TYPE gatehouse_refunds_total counter
gatehouse_refunds_total{outcome="failed",provider="sandbox"} 0
gatehouse_refunds_total{outcome="succeeded",provider="sandbox"} 0
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want),
		"gatehouse_provider_circuit_state", "gatehouse_charges_total", "gatehouse_refunds_total"); err != nil {
		t.Error(err)
	}

	// Init again (a second call) keeps counts already recorded.
	p.Charges.WithLabelValues("sandbox", "captured").Inc()
	p.Init([]string{"sandbox"})
	if got := testutil.ToFloat64(p.Charges.WithLabelValues("sandbox", "captured")); got != 1 {
		t.Errorf("captured after a second Init: %v, want 1", got)
	}
}

// TestProvidersInitRouting: InitFailovers creates a zero failover series for
// each provider and code; InitConnector creates the connector's attempts by
// status at 0 and a closed circuit under its id, keeping counts already
// recorded and setting nothing for other connectors.
func TestProvidersInitRouting(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	p := metrics.NewProviders(reg)
	for name, c := range map[string]prometheus.Collector{"attempts": p.Attempts, "failovers": p.Failovers} {
		if n := testutil.CollectAndCount(c); n != 0 {
			t.Errorf("%s before Init: %d series, want 0", name, n)
		}
	}
	p.InitFailovers([]string{"sandbox", "stripe"}, []string{"processing_error", "provider_unavailable"})
	p.Attempts.WithLabelValues("conn_a", "stripe", "failed").Inc()
	p.InitConnector("conn_a", "stripe")

	const want = `
# HELP gatehouse_connector_attempts_total Charge attempts that ended, by connector, provider and status (succeeded, failed, unknown).
# TYPE gatehouse_connector_attempts_total counter
gatehouse_connector_attempts_total{connector="conn_a",provider="stripe",status="failed"} 1
gatehouse_connector_attempts_total{connector="conn_a",provider="stripe",status="succeeded"} 0
gatehouse_connector_attempts_total{connector="conn_a",provider="stripe",status="unknown"} 0
# HELP gatehouse_routing_failovers_total Charges that moved on to their next connector, by the provider they left and the failure code.
# TYPE gatehouse_routing_failovers_total counter
gatehouse_routing_failovers_total{code="processing_error",provider="sandbox"} 0
gatehouse_routing_failovers_total{code="processing_error",provider="stripe"} 0
gatehouse_routing_failovers_total{code="provider_unavailable",provider="sandbox"} 0
gatehouse_routing_failovers_total{code="provider_unavailable",provider="stripe"} 0
# HELP gatehouse_provider_circuit_state Circuit breaker state by provider: 0 closed, 1 half-open, 2 open.
# TYPE gatehouse_provider_circuit_state gauge
gatehouse_provider_circuit_state{provider="conn_a"} 0
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want),
		"gatehouse_connector_attempts_total", "gatehouse_routing_failovers_total", "gatehouse_provider_circuit_state"); err != nil {
		t.Error(err)
	}
}

// TestBuildInfo: gatehouse_build_info is 1 with the version and Go version.
func TestBuildInfo(t *testing.T) {
	mfs, err := metrics.NewRegistry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "gatehouse_build_info" {
			continue
		}
		if len(mf.GetMetric()) != 1 {
			t.Fatalf("gatehouse_build_info: %d series, want 1", len(mf.GetMetric()))
		}
		m := mf.GetMetric()[0]
		labels := map[string]string{}
		for _, l := range m.GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		if labels["version"] == "" {
			t.Errorf("version label empty: %v", labels)
		}
		if got, want := labels["go_version"], runtime.Version(); got != want {
			t.Errorf("go_version label: got %q, want %q", got, want)
		}
		if len(labels) != 2 {
			t.Errorf("labels %v, want only version and go_version", labels)
		}
		if got := m.GetGauge().GetValue(); got != 1 {
			t.Errorf("value: got %v, want 1", got)
		}
		return
	}
	t.Fatal("gatehouse_build_info is not in the registry")
}

// TestCircuitValue maps breaker states to the gauge's values.
func TestCircuitValue(t *testing.T) {
	for _, c := range []struct {
		state string
		want  float64
	}{{"closed", 0}, {"half-open", 1}, {"open", 2}, {"", 0}} {
		if got := metrics.CircuitValue(c.state); got != c.want {
			t.Errorf("CircuitValue(%q) = %v, want %v", c.state, got, c.want)
		}
	}
}

// seriesByName gathers g and counts the series of each family.
func seriesByName(t *testing.T, g prometheus.Gatherer) map[string]int {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatalf("gather: %v", err)
	}
	got := map[string]int{}
	for _, mf := range mfs {
		got[mf.GetName()] = len(mf.GetMetric())
	}
	return got
}
