// Package metrics owns each binary's Prometheus registry and the metrics that
// more than one package records. Names follow one scheme: namespace
// "gatehouse", counters end in _total, durations are _seconds histograms, and
// labels carry route templates and outcomes, never ids.
package metrics

import (
	"net/http"
	"runtime"
	"runtime/debug"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Version is the release this build reports in gatehouse_build_info. Release
// builds set it with -ldflags "-X github.com/gatehouse-pay/gatehouse/internal/metrics.Version=v1.2.3";
// otherwise the module version from the build information is used.
var Version = ""

// NewRegistry returns a registry holding the Go runtime and process
// collectors and gatehouse_build_info.
func NewRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	version := Version
	if bi, ok := debug.ReadBuildInfo(); version == "" && ok && bi.Main.Version != "" {
		version = bi.Main.Version
	}
	if version == "" {
		version = "(devel)"
	}
	info := prometheus.NewGauge(prometheus.GaugeOpts{
		Namespace: "gatehouse", Name: "build_info",
		Help:        "Always 1; the labels name the running build.",
		ConstLabels: prometheus.Labels{"version": version, "go_version": runtime.Version()},
	})
	info.Set(1)
	reg.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		info,
	)
	return reg
}

// Handler serves reg in the Prometheus exposition format.
func Handler(reg *prometheus.Registry) http.Handler {
	return promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg, EnableOpenMetrics: false})
}

// HTTP are the API's request metrics.
type HTTP struct {
	Requests     *prometheus.CounterVec   // method, route, status
	Duration     *prometheus.HistogramVec // method, route
	InFlight     prometheus.Gauge
	AuthFailures *prometheus.CounterVec // reason
	// ChargesCreated counts charges created (replays of an idempotent
	// request are not counted), by provider.
	ChargesCreated *prometheus.CounterVec
	// ConnectionsOpen are the client connections being served, at most
	// HTTP_MAX_CONNS; ConnectionsRefused counts those refused with a 503
	// because that many were open.
	ConnectionsOpen    prometheus.Gauge
	ConnectionsRefused prometheus.Counter
}

// NewHTTP creates and registers the API's request metrics.
func NewHTTP(reg prometheus.Registerer) *HTTP {
	m := &HTTP{
		Requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "gatehouse", Name: "http_requests_total",
			Help: "HTTP requests by method, route template and status code.",
		}, []string{"method", "route", "status"}),
		Duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: "gatehouse", Name: "http_request_duration_seconds",
			Help:    "HTTP request duration by method and route template.",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5},
		}, []string{"method", "route"}),
		InFlight: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "gatehouse", Name: "http_requests_in_flight",
			Help: "HTTP requests being served.",
		}),
		AuthFailures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "gatehouse", Name: "auth_failures_total",
			Help: "Refused authentications by reason (the error code).",
		}, []string{"reason"}),
		ChargesCreated: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "gatehouse", Name: "charges_created_total",
			Help: "Charges created through the API, by provider (idempotent replays excluded).",
		}, []string{"provider"}),
		ConnectionsOpen: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "gatehouse", Name: "http_connections_open",
			Help: "Client connections being served (at most HTTP_MAX_CONNS).",
		}),
		ConnectionsRefused: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "gatehouse", Name: "http_connections_refused_total",
			Help: "Client connections answered 503 and closed because HTTP_MAX_CONNS connections were open.",
		}),
	}
	reg.MustRegister(m.Requests, m.Duration, m.InFlight, m.AuthFailures, m.ChargesCreated,
		m.ConnectionsOpen, m.ConnectionsRefused)
	return m
}

// Jobs are the worker's task metrics.
type Jobs struct {
	Processed *prometheus.CounterVec   // type, outcome
	Duration  *prometheus.HistogramVec // type
	// PutBacks counts the provider tasks put back without a call because
	// their merchant's slots were taken, by reason (the PutBack reasons of
	// providers).
	PutBacks *prometheus.CounterVec
}

// NewJobs creates and registers the worker's task metrics.
func NewJobs(reg prometheus.Registerer) *Jobs {
	m := &Jobs{
		Processed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "gatehouse", Name: "jobs_processed_total",
			Help: "Tasks processed by the worker, by task type and outcome (ok, error, skipped).",
		}, []string{"type", "outcome"}),
		Duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: "gatehouse", Name: "job_duration_seconds",
			Help:    "Task processing time by task type.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2.5, 12),
		}, []string{"type"}),
		PutBacks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "gatehouse", Name: "provider_put_backs_total",
			Help: "Provider tasks put back without a call because their merchant held all its PROVIDER_MERCHANT_SLOTS in the worker, by reason (merchant_slow, merchant_busy).",
		}, []string{"reason"}),
	}
	reg.MustRegister(m.Processed, m.Duration, m.PutBacks)
	for _, r := range []string{"merchant_slow", "merchant_busy"} {
		m.PutBacks.WithLabelValues(r)
	}
	return m
}

// Providers are the worker's provider-call metrics.
type Providers struct {
	Calls    *prometheus.CounterVec   // provider, operation, outcome
	Duration *prometheus.HistogramVec // provider, operation
	Circuit  *prometheus.GaugeVec     // provider: 0 closed, 1 half-open, 2 open
	Charges  *prometheus.CounterVec   // provider, outcome: the status a charge moved to
	Refunds  *prometheus.CounterVec   // provider, outcome: succeeded, failed
	// Attempts counts charge attempts that ended, by connector, provider
	// and status (succeeded, failed, unknown).
	Attempts *prometheus.CounterVec
	// Failovers counts charges that moved on to their next connector, by
	// the provider they left and the failure code.
	Failovers *prometheus.CounterVec
}

// NewProviders creates and registers the provider-call metrics.
func NewProviders(reg prometheus.Registerer) *Providers {
	m := &Providers{
		Calls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "gatehouse", Name: "provider_calls_total",
			Help: "Provider calls by provider, operation and outcome (succeeded, declined, retry, unavailable, pending, noop).",
		}, []string{"provider", "operation", "outcome"}),
		Duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: "gatehouse", Name: "provider_call_duration_seconds",
			Help:    "Provider call duration by provider and operation.",
			Buckets: prometheus.ExponentialBuckets(0.005, 2, 12),
		}, []string{"provider", "operation"}),
		Circuit: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: "gatehouse", Name: "provider_circuit_state",
			Help: "Circuit breaker state by provider: 0 closed, 1 half-open, 2 open.",
		}, []string{"provider"}),
		Charges: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "gatehouse", Name: "charges_total",
			Help: "Charge status changes made by the worker, by provider and outcome (authorized, captured, failed, voided).",
		}, []string{"provider", "outcome"}),
		Refunds: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "gatehouse", Name: "refunds_total",
			Help: "Refunds settled by the worker, by provider and outcome (succeeded, failed).",
		}, []string{"provider", "outcome"}),
	}
	m.Attempts = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "gatehouse", Name: "connector_attempts_total",
		Help: "Charge attempts that ended, by connector, provider and status (succeeded, failed, unknown).",
	}, []string{"connector", "provider", "status"})
	m.Failovers = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "gatehouse", Name: "routing_failovers_total",
		Help: "Charges that moved on to their next connector, by the provider they left and the failure code.",
	}, []string{"provider", "code"})
	reg.MustRegister(m.Calls, m.Duration, m.Circuit, m.Charges, m.Refunds, m.Attempts, m.Failovers)
	return m
}

// Init creates the zero-valued series of each provider, so dashboards and
// alerts see them before the first call.
func (m *Providers) Init(providers []string) {
	for _, p := range providers {
		m.Circuit.WithLabelValues(p).Set(0)
		for _, o := range []string{"authorized", "captured", "failed", "voided"} {
			m.Charges.WithLabelValues(p, o)
		}
		for _, o := range []string{"succeeded", "failed"} {
			m.Refunds.WithLabelValues(p, o)
		}
	}
}

// AttemptStatuses are the statuses an ended charge attempt is counted
// under in gatehouse_connector_attempts_total.
var AttemptStatuses = []string{"succeeded", "failed", "unknown"}

// InitFailovers creates the zero-valued failover series of each provider
// and failure code, so a failover rate exists before the first failover.
func (m *Providers) InitFailovers(providers, codes []string) {
	for _, p := range providers {
		for _, c := range codes {
			m.Failovers.WithLabelValues(p, c)
		}
	}
}

// InitConnector creates the zero-valued series of a connector the worker
// starts to use: its attempts by status and its circuit breaker (closed, as
// a new breaker is), so a success rate and a breaker state exist from its
// first attempt on.
func (m *Providers) InitConnector(connector, provider string) {
	for _, s := range AttemptStatuses {
		m.Attempts.WithLabelValues(connector, provider, s)
	}
	m.Circuit.WithLabelValues(connector).Set(0)
}

// CircuitValue maps a breaker state name to the gauge value.
func CircuitValue(state string) float64 {
	switch state {
	case "open":
		return 2
	case "half-open":
		return 1
	}
	return 0
}

// Webhooks are the worker's delivery metrics.
type Webhooks struct {
	Attempts *prometheus.CounterVec   // outcome, attempt
	Duration *prometheus.HistogramVec // outcome
	// FirstAttempt is the time from a delivery's commit (with its event) to
	// the start of its first attempt.
	FirstAttempt prometheus.Histogram
	// BatchSize is how many events' first deliveries ("event"), or
	// deliveries ("read", "record"), one database statement of the worker
	// read or recorded.
	BatchSize *prometheus.HistogramVec
	// EndpointsDisabled counts endpoints the worker disabled, by reason
	// (gone: the receiver answered 410; failing: WEBHOOK_DISABLE_AFTER of
	// nothing but failures).
	EndpointsDisabled *prometheus.CounterVec
	// HandOffs counts the first attempts an event's task left to a task of
	// the delivery's own, by reason (the HandOff constants of webhooks).
	HandOffs *prometheus.CounterVec
	// OperationalEvents counts the operational events the worker wrote
	// about endpoints, by type (webhook_endpoint.failing, .disabled,
	// .recovered).
	OperationalEvents *prometheus.CounterVec
}

// NewWebhooks creates and registers the delivery metrics.
func NewWebhooks(reg prometheus.Registerer) *Webhooks {
	m := &Webhooks{
		Attempts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "gatehouse", Name: "webhook_attempts_total",
			Help: "Webhook delivery attempts by outcome (succeeded, failed) and attempt number.",
		}, []string{"outcome", "attempt"}),
		Duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: "gatehouse", Name: "webhook_attempt_duration_seconds",
			Help:    "Webhook delivery attempt duration by outcome.",
			Buckets: prometheus.ExponentialBuckets(0.005, 2, 12),
		}, []string{"outcome"}),
		FirstAttempt: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: "gatehouse", Name: "webhook_first_attempt_delay_seconds",
			Help:    "Time from an event's commit to the start of a delivery's first attempt.",
			Buckets: []float64{.01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 300},
		}),
	}
	m.BatchSize = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Namespace: "gatehouse", Name: "webhook_batch_size",
		Help:    "Deliveries read or recorded by one database statement of the worker, by statement (read, record).",
		Buckets: []float64{1, 2, 4, 8, 16, 32, 64, 128, 200},
	}, []string{"statement"})
	m.EndpointsDisabled = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "gatehouse", Name: "webhook_endpoints_disabled_total",
		Help: "Webhook endpoints the worker disabled, by reason (gone: 410 Gone; failing: nothing but failures for WEBHOOK_DISABLE_AFTER).",
	}, []string{"reason"})
	m.HandOffs = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "gatehouse", Name: "webhook_handoffs_total",
		Help: "First attempts an event's task handed off to a task of the delivery's own, by reason (scheduled, ordered, endpoint_unknown, endpoint_not_fast, endpoint_busy, merchant_busy).",
	}, []string{"reason"})
	m.OperationalEvents = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "gatehouse", Name: "webhook_operational_events_total",
		Help: "Operational events the worker wrote about webhook endpoints, by type (webhook_endpoint.failing, webhook_endpoint.disabled, webhook_endpoint.recovered).",
	}, []string{"type"})
	reg.MustRegister(m.Attempts, m.Duration, m.FirstAttempt, m.BatchSize, m.EndpointsDisabled, m.HandOffs, m.OperationalEvents)
	for _, t := range []string{"webhook_endpoint.failing", "webhook_endpoint.disabled", "webhook_endpoint.recovered"} {
		m.OperationalEvents.WithLabelValues(t)
	}
	for _, r := range []string{"scheduled", "ordered", "endpoint_unknown", "endpoint_not_fast", "endpoint_busy", "merchant_busy"} {
		m.HandOffs.WithLabelValues(r)
	}
	for _, r := range []string{"gone", "failing"} {
		m.EndpointsDisabled.WithLabelValues(r)
	}
	for _, o := range []string{"succeeded", "failed"} {
		m.Attempts.WithLabelValues(o, "1")
		m.Duration.WithLabelValues(o)
	}
	for _, s := range []string{"event", "read", "record"} {
		m.BatchSize.WithLabelValues(s)
	}
	return m
}
