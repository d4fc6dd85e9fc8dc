// Package metrics owns each binary's Prometheus registry and the metrics that
// more than one package records. Names follow one scheme: namespace
// "gatehouse", counters end in _total, durations are _seconds histograms, and
// labels carry route templates and outcomes, never ids.
package metrics

import (
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// NewRegistry returns a registry holding the Go runtime and process collectors.
func NewRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
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
	}
	reg.MustRegister(m.Requests, m.Duration, m.InFlight, m.AuthFailures)
	return m
}

// Jobs are the worker's task metrics.
type Jobs struct {
	Processed *prometheus.CounterVec   // type, outcome
	Duration  *prometheus.HistogramVec // type
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
	}
	reg.MustRegister(m.Processed, m.Duration)
	return m
}

// Providers are the worker's provider-call metrics.
type Providers struct {
	Calls    *prometheus.CounterVec   // provider, operation, outcome
	Duration *prometheus.HistogramVec // provider, operation
	Circuit  *prometheus.GaugeVec     // provider: 0 closed, 1 half-open, 2 open
}

// NewProviders creates and registers the provider-call metrics.
func NewProviders(reg prometheus.Registerer) *Providers {
	m := &Providers{
		Calls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "gatehouse", Name: "provider_calls_total",
			Help: "Provider calls by provider, operation and outcome (succeeded, declined, retry, unavailable, noop).",
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
	}
	reg.MustRegister(m.Calls, m.Duration, m.Circuit)
	return m
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
	}
	reg.MustRegister(m.Attempts, m.Duration)
	return m
}
