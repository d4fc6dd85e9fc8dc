package e2e

import (
	"compress/gzip"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/gatehouse-pay/gatehouse/internal/testenv"
	"github.com/gatehouse-pay/gatehouse/internal/testenv/harness"
)

// Instrumentation scopes of the spans the test looks for.
const (
	scopePgx   = "github.com/exaring/otelpgx"
	scopeRedis = "github.com/redis/go-redis/extra/redisotel"
)

// otlpSpan is one received span, flattened with its resource and scope.
type otlpSpan struct {
	service  string
	resource map[string]string
	scope    string
	traceID  string
	spanID   string
	parentID string // "" for a root span
	name     string
	kind     tracepb.Span_SpanKind
	attrs    map[string]string
	status   tracepb.Status_StatusCode
}

func (s otlpSpan) String() string {
	return fmt.Sprintf("%s %q kind=%s span=%s parent=%s scope=%s", s.service, s.name, s.kind, s.spanID, s.parentID, s.scope)
}

// otlpReceiver is a minimal OTLP/HTTP trace receiver: POST /v1/traces with
// a protobuf ExportTraceServiceRequest, gzipped or not.
type otlpReceiver struct {
	srv *httptest.Server

	mu       sync.Mutex
	spans    []otlpSpan
	requests int
	problems []string
}

// startOTLPReceiver starts the receiver on 127.0.0.1. It is closed by
// t.Cleanup; started before the stack, it outlives the processes' final flush.
func startOTLPReceiver(t *testing.T) *otlpReceiver {
	t.Helper()
	r := &otlpReceiver{}
	r.srv = httptest.NewServer(http.HandlerFunc(r.serve))
	t.Cleanup(func() {
		r.srv.Close()
		r.mu.Lock()
		defer r.mu.Unlock()
		for _, p := range r.problems {
			t.Errorf("OTLP receiver: %s", p)
		}
	})
	return r
}

func (r *otlpReceiver) problem(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.problems = append(r.problems, fmt.Sprintf(format, args...))
}

func (r *otlpReceiver) serve(w http.ResponseWriter, req *http.Request) {
	if req.Method != http.MethodPost || req.URL.Path != "/v1/traces" {
		r.problem("unexpected request %s %s", req.Method, req.URL.Path)
		http.NotFound(w, req)
		return
	}
	if ct := req.Header.Get("Content-Type"); ct != "application/x-protobuf" {
		r.problem("Content-Type %q, want application/x-protobuf", ct)
		http.Error(w, "unsupported content type", http.StatusUnsupportedMediaType)
		return
	}
	var body io.Reader = http.MaxBytesReader(w, req.Body, 32<<20)
	switch enc := req.Header.Get("Content-Encoding"); enc {
	case "":
	case "gzip":
		zr, err := gzip.NewReader(body)
		if err != nil {
			r.problem("gzip: %v", err)
			http.Error(w, "bad gzip", http.StatusBadRequest)
			return
		}
		defer zr.Close()
		body = zr
	default:
		r.problem("Content-Encoding %q", enc)
		http.Error(w, "unsupported encoding", http.StatusUnsupportedMediaType)
		return
	}
	raw, err := io.ReadAll(body)
	if err != nil {
		r.problem("read body: %v", err)
		http.Error(w, "read error", http.StatusBadRequest)
		return
	}
	var export collectortrace.ExportTraceServiceRequest
	if err := proto.Unmarshal(raw, &export); err != nil {
		r.problem("decode ExportTraceServiceRequest: %v", err)
		http.Error(w, "bad protobuf", http.StatusBadRequest)
		return
	}
	var got []otlpSpan
	for _, rs := range export.GetResourceSpans() {
		res := otlpAttrs(rs.GetResource().GetAttributes())
		for _, ss := range rs.GetScopeSpans() {
			for _, s := range ss.GetSpans() {
				got = append(got, otlpSpan{
					service:  res["service.name"],
					resource: res,
					scope:    ss.GetScope().GetName(),
					traceID:  hex.EncodeToString(s.GetTraceId()),
					spanID:   hex.EncodeToString(s.GetSpanId()),
					parentID: hex.EncodeToString(s.GetParentSpanId()),
					name:     s.GetName(),
					kind:     s.GetKind(),
					attrs:    otlpAttrs(s.GetAttributes()),
					status:   s.GetStatus().GetCode(),
				})
			}
		}
	}
	r.mu.Lock()
	r.spans = append(r.spans, got...)
	r.requests++
	r.mu.Unlock()
	out, _ := proto.Marshal(&collectortrace.ExportTraceServiceResponse{})
	w.Header().Set("Content-Type", "application/x-protobuf")
	_, _ = w.Write(out)
}

// otlpAttrs renders OTLP attributes as strings (ints and bools in decimal).
func otlpAttrs(kvs []*commonpb.KeyValue) map[string]string {
	m := make(map[string]string, len(kvs))
	for _, kv := range kvs {
		v := kv.GetValue()
		switch x := v.GetValue().(type) {
		case *commonpb.AnyValue_StringValue:
			m[kv.GetKey()] = x.StringValue
		case *commonpb.AnyValue_IntValue:
			m[kv.GetKey()] = fmt.Sprint(x.IntValue)
		case *commonpb.AnyValue_BoolValue:
			m[kv.GetKey()] = fmt.Sprint(x.BoolValue)
		case *commonpb.AnyValue_DoubleValue:
			m[kv.GetKey()] = fmt.Sprint(x.DoubleValue)
		default:
			m[kv.GetKey()] = v.String()
		}
	}
	return m
}

// snapshot returns every span received so far.
func (r *otlpReceiver) snapshot() []otlpSpan {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]otlpSpan(nil), r.spans...)
}

// trace returns the received spans of one trace.
func (r *otlpReceiver) trace(traceID string) []otlpSpan {
	var out []otlpSpan
	for _, s := range r.snapshot() {
		if s.traceID == traceID {
			out = append(out, s)
		}
	}
	return out
}

func findSpan(spans []otlpSpan, match func(otlpSpan) bool) (otlpSpan, bool) {
	for _, s := range spans {
		if match(s) {
			return s, true
		}
	}
	return otlpSpan{}, false
}

func describeSpans(spans []otlpSpan) string {
	lines := make([]string, 0, len(spans))
	for _, s := range spans {
		lines = append(lines, "  "+s.String())
	}
	sort.Strings(lines)
	return strings.Join(lines, "\n")
}

// TestTracingEndToEnd runs the stack with tracing on, exporting to an OTLP
// receiver of the test's own, and follows one charge: the API's server span
// continues the caller's traceparent and holds the Postgres and Redis spans
// of the request, and the worker's span of the charge:authorize task joins
// the same trace through the task's headers. Span names carry route
// templates, never ids, and the operating endpoints are not traced.
func TestTracingEndToEnd(t *testing.T) {
	parallel(t)
	redisPath := testenv.RedisServerPath(t)
	db := testenv.NewDB(t)
	bins := buildBinaries(t)
	spec := testenv.LoadSpec(t)

	rcv := startOTLPReceiver(t)
	st := startStackWith(t, bins, db, redisPath, spec, stackOptions{env: []string{
		"OTEL_EXPORTER_OTLP_ENDPOINT=" + rcv.srv.URL,
		"OTEL_BSP_SCHEDULE_DELAY=100",
		"OTEL_EXPORTER_OTLP_TIMEOUT=5000",
		"OTEL_RESOURCE_ATTRIBUTES=deployment.environment.name=e2e",
	}})
	base := st.replicas[0]

	c := newClient(t, "127.0.0.30")
	_, token := st.signUp(t, c, "tracing", "Tracing Merchant")
	key := st.newKey(t, c, token, "tracing")

	// The caller's trace: the API's span must continue it.
	chargeTrace, callerSpan := harness.RandomHex(16), harness.RandomHex(8)
	e, err := sendWith(c, http.MethodPost, base+"/v1/charges", key.SecretKey, chargeBody,
		"traceparent", "00-"+chargeTrace+"-"+callerSpan+"-01", "Idempotency-Key", "tracing-"+harness.RandomHex(8))
	if err != nil {
		t.Fatalf("POST /v1/charges: %v", err)
	}
	st.check(t, e)
	mustExpect(t, e, http.StatusCreated, "")
	var ch chargeJSON
	decode(t, e, &ch)

	// Operating endpoints are never traced, even when the caller sends a trace.
	healthTrace := harness.RandomHex(16)
	for _, path := range []string{"/healthz", "/readyz", "/metrics"} {
		if _, err := sendWith(c, http.MethodGet, base+path, "", "", "traceparent", "00-"+healthTrace+"-"+harness.RandomHex(8)+"-01"); err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
	}
	// A route with an id is named after its template.
	getTrace := harness.RandomHex(16)
	e, err = sendWith(c, http.MethodGet, base+"/v1/charges/"+ch.ID, key.SecretKey, "", "traceparent", "00-"+getTrace+"-"+harness.RandomHex(8)+"-01")
	if err != nil {
		t.Fatalf("GET /v1/charges/%s: %v", ch.ID, err)
	}
	mustExpect(t, e, http.StatusOK, "")

	isServer := func(name string) func(otlpSpan) bool {
		return func(s otlpSpan) bool { return s.kind == tracepb.Span_SPAN_KIND_SERVER && s.name == name }
	}
	isTask := func(s otlpSpan) bool {
		return s.kind == tracepb.Span_SPAN_KIND_CONSUMER && s.name == "charge:authorize"
	}
	// Wait until the API's and the worker's spans have been exported.
	deadline := time.Now().Add(30 * time.Second)
	var server, task, get otlpSpan
	for {
		spans := rcv.trace(chargeTrace)
		var okServer, okTask, okGet bool
		server, okServer = findSpan(spans, isServer("POST /v1/charges"))
		task, okTask = findSpan(spans, isTask)
		get, okGet = findSpan(rcv.trace(getTrace), isServer("GET /v1/charges/:id"))
		if okServer && okTask && okGet {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 30s: server span %v, worker task span %v, GET span %v; spans of the charge's trace:\n%s\nall spans:\n%s",
				okServer, okTask, okGet, describeSpans(spans), describeSpans(rcv.snapshot()))
		}
		time.Sleep(100 * time.Millisecond)
	}
	spans := rcv.trace(chargeTrace)
	rcv.mu.Lock()
	t.Logf("%d export requests so far; the charge's trace:\n%s", rcv.requests, describeSpans(spans))
	rcv.mu.Unlock()

	// The API's span continues the caller's trace.
	if server.parentID != callerSpan {
		t.Errorf("server span's parent: got %q, want the caller's span %s", server.parentID, callerSpan)
	}
	if got := server.attrs["http.route"]; got != "/v1/charges" {
		t.Errorf("server span http.route: got %q, want /v1/charges", got)
	}
	if server.service != "gatehouse-api" || server.resource["deployment.environment.name"] != "e2e" {
		t.Errorf("server span resource: got %v, want service.name gatehouse-api and deployment.environment.name e2e", server.resource)
	}
	// Its children: Postgres and Redis work of the request.
	childOf := func(parent otlpSpan, scope string) func(otlpSpan) bool {
		return func(s otlpSpan) bool { return s.parentID == parent.spanID && s.scope == scope }
	}
	if s, ok := findSpan(spans, childOf(server, scopePgx)); !ok {
		t.Errorf("no pgx span under the server span %s", server)
	} else if s.kind != tracepb.Span_SPAN_KIND_CLIENT || s.service != "gatehouse-api" {
		t.Errorf("pgx span: got %s, want a client span of gatehouse-api", s)
	}
	if s, ok := findSpan(spans, childOf(server, scopeRedis)); !ok {
		t.Errorf("no redis span under the server span %s", server)
	} else if s.kind != tracepb.Span_SPAN_KIND_CLIENT || s.attrs["db.statement"] != "" {
		t.Errorf("redis span: got %s with db.statement %q, want a client span without the command's arguments", s, s.attrs["db.statement"])
	}

	// The worker's span of the task joins the trace as the server span's child.
	if task.parentID != server.spanID {
		t.Errorf("task span's parent: got %q, want the server span %s", task.parentID, server.spanID)
	}
	if task.service != "gatehouse-worker" || task.service == server.service || task.resource["deployment.environment.name"] != "e2e" {
		t.Errorf("task span resource: got %v, want service.name gatehouse-worker and deployment.environment.name e2e", task.resource)
	}
	wantTask := map[string]string{
		"messaging.system":           "asynq",
		"messaging.operation.type":   "process",
		"messaging.destination.name": "critical",
		"messaging.message.id":       "charge:authorize:" + ch.ID,
		"asynq.task.type":            "charge:authorize",
		"asynq.task.retry_count":     "0",
		"gatehouse.task.outcome":     "ok",
	}
	for k, want := range wantTask {
		if got := task.attrs[k]; got != want {
			t.Errorf("task span attribute %s: got %q, want %q", k, got, want)
		}
	}
	if task.status == tracepb.Status_STATUS_CODE_ERROR {
		t.Errorf("task span status: got error, want unset or ok")
	}
	if _, ok := findSpan(spans, childOf(task, scopePgx)); !ok {
		t.Errorf("no pgx span under the worker's task span %s", task)
	}

	if got := get.attrs["http.route"]; got != "/v1/charges/:id" {
		t.Errorf("GET span http.route: got %q, want /v1/charges/:id", got)
	}
	for _, s := range rcv.snapshot() {
		if strings.Contains(s.name, ch.ID) {
			t.Errorf("span name carries an id: %s", s)
		}
		if s.traceID == healthTrace {
			t.Errorf("an operating endpoint was traced: %s", s)
		}
		// Database and Redis calls outside a traced operation (readiness
		// checks, background loops) make no traces of their own.
		if (s.scope == scopePgx || s.scope == scopeRedis) && s.parentID == "" {
			t.Errorf("a root %s span: %s", s.scope, s)
		}
	}
}
