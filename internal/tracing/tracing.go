// Package tracing sets up OpenTelemetry tracing from the standard OTEL_*
// environment variables. Tracing is off unless an exporter is configured:
// then no tracer provider is installed, no exporter runs, and the adapters
// (httpapi, store, jobs) add no instrumentation, so a request pays nothing
// for it. On, spans are exported over OTLP (HTTP/protobuf or gRPC) and the
// trace context travels in W3C traceparent and baggage headers: in HTTP
// requests and in the headers of queued tasks.
package tracing

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/extra/redisotel/v9"
	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/baggage"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/embedded"
)

// ScopeName is the instrumentation scope of the spans Gatehouse starts itself
// (the worker's task spans); the libraries' spans carry their own scopes.
const ScopeName = "github.com/gatehouse-pay/gatehouse"

// shutdownTimeout bounds the final flush of the exporter at exit.
const shutdownTimeout = 5 * time.Second

// enabled is set by Setup once a tracer provider is installed.
var enabled atomic.Bool

// propagator carries the trace context and baggage across processes: W3C
// traceparent/tracestate and baggage.
var propagator = propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})

// Enabled reports whether Setup turned tracing on in this process. The
// adapters check it once, when they are built, or per request before doing
// any work for tracing.
func Enabled() bool { return enabled.Load() }

// Setup installs the global tracer provider and propagator for service when
// the environment configures an exporter; otherwise it installs nothing. The
// returned function flushes and stops the exporter; it waits at most 5 s,
// even when its context is already cancelled (the signal context at exit).
//
// Tracing is on when OTEL_TRACES_EXPORTER is otlp, or when it is unset and
// OTEL_EXPORTER_OTLP_ENDPOINT or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT is set.
// It is off when OTEL_SDK_DISABLED is true or OTEL_TRACES_EXPORTER is none.
// OTEL_EXPORTER_OTLP_PROTOCOL (or _TRACES_PROTOCOL) picks http/protobuf, the
// default, or grpc. getenv makes that decision; the exporter, the sampler
// (OTEL_TRACES_SAMPLER, _ARG), the batch processor (OTEL_BSP_*) and the
// resource (OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES) read the rest of
// the OTEL_* variables from the process environment, as the OpenTelemetry
// SDK specifies. service is the service.name unless the environment names
// one. An unsupported exporter or protocol is an error.
func Setup(ctx context.Context, getenv func(string) string, service string) (shutdown func(context.Context) error, err error) {
	noop := func(context.Context) error { return nil }
	on, protocol, err := configured(getenv)
	if err != nil || !on {
		return noop, err
	}
	var exp sdktrace.SpanExporter
	switch protocol {
	case "grpc":
		exp, err = otlptracegrpc.New(ctx)
	default:
		exp, err = otlptracehttp.New(ctx)
	}
	if err != nil {
		return noop, fmt.Errorf("tracing: OTLP exporter: %w", err)
	}
	res, err := resource.New(ctx,
		resource.WithAttributes(attribute.String("service.name", service)),
		resource.WithTelemetrySDK(),
		resource.WithHost(),
		resource.WithFromEnv(), // last: OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES win
	)
	if err != nil && res == nil {
		_ = exp.Shutdown(ctx)
		return noop, fmt.Errorf("tracing: resource: %w", err)
	}
	// A partly detected resource (say, no host name) still names the service.
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	otel.SetTracerProvider(tp)
	otel.SetTextMapPropagator(propagator)
	enabled.Store(true)
	return func(ctx context.Context) error {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), shutdownTimeout)
		defer cancel()
		return tp.Shutdown(ctx)
	}, nil
}

// configured decides from the environment whether tracing is on and over
// which OTLP protocol ("http/protobuf" or "grpc").
func configured(getenv func(string) string) (on bool, protocol string, err error) {
	if strings.EqualFold(strings.TrimSpace(getenv("OTEL_SDK_DISABLED")), "true") {
		return false, "", nil
	}
	switch exporters := strings.ToLower(strings.TrimSpace(getenv("OTEL_TRACES_EXPORTER"))); {
	case exporters == "":
		on = getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != ""
	default:
		for _, e := range strings.Split(exporters, ",") {
			switch strings.TrimSpace(e) {
			case "none":
				return false, "", nil
			case "otlp":
				on = true
			default:
				return false, "", fmt.Errorf("tracing: OTEL_TRACES_EXPORTER=%s is not supported (otlp or none)", exporters)
			}
		}
	}
	if !on {
		return false, "", nil
	}
	protocol = strings.TrimSpace(getenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"))
	if protocol == "" {
		protocol = strings.TrimSpace(getenv("OTEL_EXPORTER_OTLP_PROTOCOL"))
	}
	switch protocol {
	case "", "http/protobuf":
		return true, "http/protobuf", nil
	case "grpc":
		return true, "grpc", nil
	}
	return false, "", fmt.Errorf("tracing: OTLP protocol %q is not supported (http/protobuf or grpc)", protocol)
}

// InstrumentRedis adds tracing to a Redis client when tracing is on: each
// command (or pipeline) run within a traced operation becomes a child span
// named after the command. Commands outside any trace (health checks, the
// background loops) make no spans, and no command's arguments are recorded:
// cached values stay out of the traces.
func InstrumentRedis(c redis.UniversalClient) error {
	if !Enabled() {
		return nil
	}
	if err := redisotel.InstrumentTracing(c,
		redisotel.WithTracerProvider(childOnly{otel.GetTracerProvider()}),
		redisotel.WithDBStatement(false),
		redisotel.WithCallerEnabled(false),
	); err != nil {
		return fmt.Errorf("tracing: instrument redis: %w", err)
	}
	return nil
}

// Inject returns the W3C trace context (traceparent, tracestate, baggage) of
// ctx as a header map, or nil when ctx carries none. It costs two context
// lookups when tracing is off.
func Inject(ctx context.Context) map[string]string {
	if !trace.SpanContextFromContext(ctx).IsValid() && baggage.FromContext(ctx).Len() == 0 {
		return nil
	}
	carrier := propagation.MapCarrier{}
	propagator.Inject(ctx, carrier)
	if len(carrier) == 0 {
		return nil
	}
	return carrier
}

// Extract returns ctx with the remote trace context and baggage that Inject
// put into headers; with none, ctx itself.
func Extract(ctx context.Context, headers map[string]string) context.Context {
	if len(headers) == 0 {
		return ctx
	}
	return propagator.Extract(ctx, propagation.MapCarrier(headers))
}

// StartConsumer starts the span of a unit of queued work named name, the
// child of the trace context in headers (see Inject); without one it starts
// a new trace. The caller ends the span.
func StartConsumer(ctx context.Context, headers map[string]string, name string, attrs ...attribute.KeyValue) (context.Context, trace.Span) {
	return otel.Tracer(ScopeName).Start(Extract(ctx, headers), name,
		trace.WithSpanKind(trace.SpanKindConsumer), trace.WithAttributes(attrs...))
}

// RecordError marks span as failed with err.
func RecordError(span trace.Span, err error) {
	if err == nil {
		return
	}
	span.RecordError(err)
	span.SetStatus(codes.Error, err.Error())
}

// childOnly is a tracer provider whose tracers start a span only within a
// recording one: calls made outside any trace stay untraced instead of each
// becoming a trace of its own.
type childOnly struct {
	trace.TracerProvider
}

var _ trace.TracerProvider = childOnly{}

func (p childOnly) Tracer(name string, opts ...trace.TracerOption) trace.Tracer {
	return childOnlyTracer{inner: p.TracerProvider.Tracer(name, opts...)}
}

type childOnlyTracer struct {
	embedded.Tracer
	inner trace.Tracer
}

// untraced is the no-op span returned for a call outside any trace.
var untraced = trace.SpanFromContext(context.Background())

func (t childOnlyTracer) Start(ctx context.Context, name string, opts ...trace.SpanStartOption) (context.Context, trace.Span) {
	if !trace.SpanFromContext(ctx).IsRecording() {
		return ctx, untraced
	}
	return t.inner.Start(ctx, name, opts...)
}
