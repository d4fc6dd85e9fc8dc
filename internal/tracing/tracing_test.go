package tracing

import (
	"context"
	"reflect"
	"strings"
	"testing"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/baggage"
	"go.opentelemetry.io/otel/trace"
)

// env returns a getenv that knows only vars.
func env(vars map[string]string) func(string) string {
	return func(k string) string { return vars[k] }
}

// TestSetupOffInstallsNothing checks that tracing stays off, the global
// provider and propagator the default no-ops, without an exporter configured.
// No test in this package turns tracing on.
func TestSetupOffInstallsNothing(t *testing.T) {
	before := otel.GetTracerProvider()
	beforeProp := otel.GetTextMapPropagator()
	for _, vars := range []map[string]string{
		{},
		{"OTEL_SERVICE_NAME": "gatehouse-api", "OTEL_TRACES_SAMPLER": "always_on"},
		{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:1", "OTEL_TRACES_EXPORTER": "none"},
		{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:1", "OTEL_SDK_DISABLED": "true"},
	} {
		shutdown, err := Setup(context.Background(), env(vars), "gatehouse-test")
		if err != nil {
			t.Fatalf("Setup with %v: %v", vars, err)
		}
		if err := shutdown(context.Background()); err != nil {
			t.Errorf("shutdown with %v: %v", vars, err)
		}
		if Enabled() {
			t.Errorf("Setup with %v: Enabled() is true, want false", vars)
		}
		if got := otel.GetTracerProvider(); got != before {
			t.Errorf("Setup with %v installed tracer provider %T", vars, got)
		}
		if got := otel.GetTextMapPropagator(); got != beforeProp {
			t.Errorf("Setup with %v installed propagator %T", vars, got)
		}
	}
	// The default global provider never records.
	_, span := otel.Tracer("test").Start(context.Background(), "x")
	defer span.End()
	if span.IsRecording() || span.SpanContext().IsValid() {
		t.Errorf("with tracing off a span records (%v) or has a valid context (%v)", span.IsRecording(), span.SpanContext().IsValid())
	}
	if err := InstrumentRedis(nil); err != nil {
		t.Errorf("InstrumentRedis with tracing off: %v, want nil (nothing to do)", err)
	}
}

func TestConfigured(t *testing.T) {
	tests := []struct {
		name     string
		vars     map[string]string
		on       bool
		protocol string
		err      string
	}{
		{"nothing set", nil, false, "", ""},
		{"endpoint", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"}, true, "http/protobuf", ""},
		{"traces endpoint", map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://collector:4318/v1/traces"}, true, "http/protobuf", ""},
		{"exporter otlp alone", map[string]string{"OTEL_TRACES_EXPORTER": "otlp"}, true, "http/protobuf", ""},
		{"exporter none wins", map[string]string{"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"}, false, "", ""},
		{"sdk disabled wins", map[string]string{"OTEL_SDK_DISABLED": "TRUE", "OTEL_TRACES_EXPORTER": "otlp"}, false, "", ""},
		{"sdk disabled false", map[string]string{"OTEL_SDK_DISABLED": "false", "OTEL_TRACES_EXPORTER": "otlp"}, true, "http/protobuf", ""},
		{"grpc", map[string]string{"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}, true, "grpc", ""},
		{"traces protocol wins", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4317",
			"OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "grpc"}, true, "grpc", ""},
		{"protocol ignored when off", map[string]string{"OTEL_EXPORTER_OTLP_PROTOCOL": "http/json"}, false, "", ""},
		{"http/json", map[string]string{"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "http/json"}, false, "", "http/json"},
		{"zipkin", map[string]string{"OTEL_TRACES_EXPORTER": "zipkin"}, false, "", "zipkin"},
		{"console", map[string]string{"OTEL_TRACES_EXPORTER": "otlp,console"}, false, "", "console"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			on, protocol, err := configured(env(tt.vars))
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("got error %v, want one naming %q", err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatalf("got error %v", err)
			}
			if on != tt.on || protocol != tt.protocol {
				t.Errorf("got on=%v protocol=%q, want on=%v protocol=%q", on, protocol, tt.on, tt.protocol)
			}
		})
	}
}

func TestInjectExtract(t *testing.T) {
	if got := Inject(context.Background()); got != nil {
		t.Errorf("Inject without a trace: got %v, want nil", got)
	}
	if got := Extract(context.Background(), nil); trace.SpanContextFromContext(got).IsValid() {
		t.Errorf("Extract of no headers made a valid span context")
	}

	traceID, _ := trace.TraceIDFromHex("4bf92f3577b34da6a3ce929d0e0e4736")
	spanID, _ := trace.SpanIDFromHex("00f067aa0ba902b7")
	sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: traceID, SpanID: spanID, TraceFlags: trace.FlagsSampled, Remote: true})
	member, _ := baggage.NewMember("tenant", "acme")
	bag, _ := baggage.New(member)
	ctx := baggage.ContextWithBaggage(trace.ContextWithRemoteSpanContext(context.Background(), sc), bag)

	headers := Inject(ctx)
	want := map[string]string{
		"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
		"baggage":     "tenant=acme",
	}
	if !reflect.DeepEqual(headers, want) {
		t.Fatalf("Inject: got %v, want %v", headers, want)
	}
	got := Extract(context.Background(), headers)
	if gsc := trace.SpanContextFromContext(got); !gsc.Equal(sc) {
		t.Errorf("Extract: got span context %v, want %v", gsc, sc)
	}
	if v := baggage.FromContext(got).Member("tenant").Value(); v != "acme" {
		t.Errorf("Extract: baggage tenant = %q, want acme", v)
	}
}

// TestChildOnly checks the tracer that keeps Redis commands outside a trace
// from starting traces of their own.
func TestChildOnly(t *testing.T) {
	var started []string
	tr := childOnly{recorder{started: &started}}.Tracer("test")
	ctx, span := tr.Start(context.Background(), "root")
	span.End()
	if span.IsRecording() || ctx != context.Background() {
		t.Errorf("outside a trace: got a recording span or a new context")
	}
	parent := trace.ContextWithSpan(context.Background(), recordingSpan{})
	if _, span := tr.Start(parent, "child"); !span.IsRecording() {
		t.Errorf("within a recording span: the child does not record")
	}
	if !reflect.DeepEqual(started, []string{"child"}) {
		t.Errorf("spans started: got %v, want [child]", started)
	}
}

// recorder is a tracer provider whose spans record and remember their names.
type recorder struct {
	trace.TracerProvider
	started *[]string
}

func (r recorder) Tracer(string, ...trace.TracerOption) trace.Tracer { return recorderTracer{r: r} }

type recorderTracer struct {
	trace.Tracer
	r recorder
}

func (t recorderTracer) Start(ctx context.Context, name string, _ ...trace.SpanStartOption) (context.Context, trace.Span) {
	*t.r.started = append(*t.r.started, name)
	return trace.ContextWithSpan(ctx, recordingSpan{}), recordingSpan{}
}

type recordingSpan struct{ trace.Span }

func (recordingSpan) IsRecording() bool          { return true }
func (recordingSpan) End(...trace.SpanEndOption) {}
