package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gatehouse-pay/gatehouse/internal/events"
	"github.com/gatehouse-pay/gatehouse/internal/testenv"
	"github.com/gatehouse-pay/gatehouse/internal/testenv/harness"
)

// dashboardPath is the Grafana dashboard shipped with the Kubernetes base,
// relative to the module root.
const dashboardPath = "deploy/k8s/base/dashboards/gatehouse.json"

// The window every rate() of the dashboard is evaluated with. Prometheus
// scrapes every second here, so a minute holds plenty of samples.
const (
	obsScrapeInterval = time.Second
	obsRateWindow     = "1m"
)

// obsChargesLimit is the tiny per-key charge limit of the observability
// stack: one burst of charges fits in it, one more request is refused.
const obsChargesLimit = 5

var obsStackEnv = []string{
	"WEBHOOK_ALLOW_PRIVATE_NETWORKS=true",
	"WEBHOOK_RETRY_SCHEDULE=0s,500ms,1s,1s,1s",
	"WEBHOOK_TIMEOUT=1s",
	"PROVIDER_TIMEOUT=2s",
	"PROVIDER_RETRY_BASE=100ms",
	"PROVIDER_RETRY_MAX=400ms",
	fmt.Sprintf("RATE_LIMIT_CHARGES=%d/1m", obsChargesLimit),
	"RATE_LIMIT_DEFAULT=100000/1m",
	"RATE_LIMIT_LOGIN=1000/5m",
}

var obsWorkerEnv = []string{
	"OUTBOX_SWEEP_AFTER=2s",
	"SANDBOX_LATENCY=5ms",
}

// obsMetrics are the metric families the binaries promise; the dashboard
// must chart every one of them.
var obsMetrics = []string{
	// api
	"gatehouse_http_requests_total", "gatehouse_http_request_duration_seconds", "gatehouse_http_requests_in_flight",
	"gatehouse_auth_failures_total", "gatehouse_ratelimit_decisions_total", "gatehouse_ratelimit_fallback_total",
	"gatehouse_charges_created_total",
	// both
	"gatehouse_build_info",
	"gatehouse_db_pool_acquired_connections", "gatehouse_db_pool_idle_connections", "gatehouse_db_pool_total_connections",
	"gatehouse_db_pool_max_connections", "gatehouse_db_pool_acquires_total", "gatehouse_db_pool_empty_acquires_total",
	"gatehouse_db_pool_acquire_wait_seconds_total",
	"gatehouse_redis_pool_hits_total", "gatehouse_redis_pool_misses_total", "gatehouse_redis_pool_timeouts_total",
	"gatehouse_redis_pool_total_connections", "gatehouse_redis_pool_idle_connections",
	"process_cpu_seconds_total", "process_resident_memory_bytes", "go_goroutines",
	// worker
	"gatehouse_jobs_processed_total", "gatehouse_job_duration_seconds",
	"gatehouse_provider_calls_total", "gatehouse_provider_call_duration_seconds", "gatehouse_provider_circuit_state",
	"gatehouse_charges_total", "gatehouse_refunds_total",
	"gatehouse_connector_attempts_total", "gatehouse_routing_failovers_total",
	"gatehouse_webhook_attempts_total", "gatehouse_webhook_attempt_duration_seconds", "gatehouse_webhook_first_attempt_delay_seconds",
	"gatehouse_outbox_backlog", "gatehouse_outbox_oldest_age_seconds",
	"asynq_queue_size", "asynq_queue_latency_seconds", "asynq_tasks", "asynq_queue_paused",
	"asynq_tasks_processed_total", "asynq_tasks_failed_total",
}

// dashboardDS is the only datasource reference the dashboard may hold: the
// datasource variable, so that the dashboard imports into any Grafana.
const dashboardDS = "${datasource}"

// dashPanel is one chart of the dashboard, rows flattened away.
type dashPanel struct {
	ID         int             `json:"id"`
	Type       string          `json:"type"`
	Title      string          `json:"title"`
	Datasource json.RawMessage `json:"datasource"`
	Targets    []struct {
		RefID      string          `json:"refId"`
		Expr       string          `json:"expr"`
		Datasource json.RawMessage `json:"datasource"`
	} `json:"targets"`
	GridPos *struct {
		H, W, X, Y int
	} `json:"gridPos"`
	Panels []dashPanel `json:"panels"` // a row's panels when it is collapsed
}

type dashVariable struct {
	Name       string          `json:"name"`
	Type       string          `json:"type"`
	Query      json.RawMessage `json:"query"`
	Definition string          `json:"definition"`
	Multi      bool            `json:"multi"`
	IncludeAll bool            `json:"includeAll"`
	AllValue   *string         `json:"allValue"`
}

// queryText is the variable's query, whether Grafana stored it as a string
// or as the Prometheus editor's {"query": ...} object.
func (v dashVariable) queryText() string {
	var s string
	if json.Unmarshal(v.Query, &s) == nil {
		return s
	}
	var o struct {
		Query string `json:"query"`
	}
	if json.Unmarshal(v.Query, &o) == nil && o.Query != "" {
		return o.Query
	}
	return v.Definition
}

type dashboard struct {
	raw       any
	panels    []dashPanel // charts only, in order
	rows      int
	variables []dashVariable
}

// loadDashboard reads the dashboard file and fails the test for every
// problem checkDashboard finds.
func loadDashboard(t *testing.T) dashboard {
	t.Helper()
	root, err := harness.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(root, dashboardPath))
	if err != nil {
		t.Fatalf("read the dashboard: %v", err)
	}
	d, problems := checkDashboard(b)
	for _, p := range problems {
		t.Errorf("%s: %s", dashboardPath, p)
	}
	return d
}

// checkDashboard parses a dashboard and lists what does not need a running
// Prometheus to find: it must import into any Grafana (no fixed uid, every
// datasource the datasource variable), use only variables the test can
// resolve, give every panel queries, use $__rate_interval for every range,
// and chart every promised metric.
func checkDashboard(b []byte) (dashboard, []string) {
	var d dashboard
	var problems []string
	problem := func(format string, args ...any) { problems = append(problems, fmt.Sprintf(format, args...)) }
	if err := json.Unmarshal(b, &d.raw); err != nil {
		return d, []string{fmt.Sprintf("not JSON: %v", err)}
	}
	var top struct {
		UID        json.RawMessage `json:"uid"`
		Title      string          `json:"title"`
		Schema     int             `json:"schemaVersion"`
		Panels     []dashPanel     `json:"panels"`
		Templating struct {
			List []dashVariable `json:"list"`
		} `json:"templating"`
	}
	if err := json.Unmarshal(b, &top); err != nil {
		return d, []string{err.Error()}
	}
	if len(top.UID) > 0 && string(top.UID) != "null" {
		problem("dashboard uid: got %s, want none or null (no fixed UIDs)", top.UID)
	}
	if top.Title == "" || top.Schema == 0 {
		problem("dashboard: got title %q, schemaVersion %d; want both set", top.Title, top.Schema)
	}
	checkUIDs(d.raw, "$", problem)

	d.variables = top.Templating.List
	var haveDS bool
	for _, v := range d.variables {
		switch {
		case v.Name == "datasource":
			var q string
			_ = json.Unmarshal(v.Query, &q)
			if v.Type != "datasource" || q != "prometheus" {
				problem("variable datasource: got type %q, query %s; want type datasource, query prometheus", v.Type, v.Query)
			}
			haveDS = true
		case v.Name == "job" || v.Name == "instance":
			if v.Type != "query" || !strings.HasPrefix(v.queryText(), "label_values(") {
				problem("variable %s: got type %q, query %q; want a label_values query", v.Name, v.Type, v.queryText())
			}
		default:
			problem("variable %s (type %s): the test cannot resolve it; only datasource, job and instance are allowed", v.Name, v.Type)
		}
	}
	if !haveDS {
		problem("templating: no datasource variable")
	}

	ids := map[int]string{}
	var walk func(ps []dashPanel)
	walk = func(ps []dashPanel) {
		for _, p := range ps {
			if other, dup := ids[p.ID]; dup || p.ID == 0 {
				problem("panel %q: id %d is zero or also used by %q", p.Title, p.ID, other)
			}
			ids[p.ID] = p.Title
			if p.GridPos == nil || p.GridPos.W == 0 || p.GridPos.H == 0 {
				problem("panel %q: no gridPos", p.Title)
			}
			if p.Type == "row" {
				d.rows++
				walk(p.Panels)
				continue
			}
			d.panels = append(d.panels, p)
		}
	}
	walk(top.Panels)
	if d.rows == 0 {
		problem("dashboard: no rows; want the panels grouped in rows")
	}
	windows := regexp.MustCompile(`\[([^\]]*)\]`)
	strs := regexp.MustCompile(`"(?:[^"\\]|\\.)*"`) // PromQL strings, which may hold [...] regexes
	var exprs []string
	titles := map[string]bool{}
	for _, p := range d.panels {
		if titles[p.Title] {
			problem("panel %q: two panels with this title", p.Title)
		}
		titles[p.Title] = true
		if p.Type != "timeseries" && p.Type != "stat" {
			problem("panel %q: type %q, want timeseries or stat", p.Title, p.Type)
		}
		if p.Title == "" {
			problem("panel %d: no title", p.ID)
		}
		if !isDashboardDS(p.Datasource) {
			problem("panel %q: datasource %s, want {\"type\":\"prometheus\",\"uid\":%q}", p.Title, p.Datasource, dashboardDS)
		}
		if len(p.Targets) == 0 {
			problem("panel %q: no targets", p.Title)
		}
		for _, tg := range p.Targets {
			if strings.TrimSpace(tg.Expr) == "" {
				problem("panel %q target %s: empty expr", p.Title, tg.RefID)
			}
			if !isDashboardDS(tg.Datasource) {
				problem("panel %q target %s: datasource %s, want {\"type\":\"prometheus\",\"uid\":%q}", p.Title, tg.RefID, tg.Datasource, dashboardDS)
			}
			for _, m := range windows.FindAllStringSubmatch(strs.ReplaceAllString(tg.Expr, `""`), -1) {
				if m[1] != "$__rate_interval" {
					problem("panel %q target %s: range [%s], want [$__rate_interval]: %s", p.Title, tg.RefID, m[1], tg.Expr)
				}
			}
			exprs = append(exprs, tg.Expr)
		}
	}
	all := strings.Join(exprs, "\n")
	for _, name := range obsMetrics {
		re := regexp.MustCompile(`(^|[^a-zA-Z0-9_:])` + regexp.QuoteMeta(name) + `(_bucket|_sum|_count)?([^a-zA-Z0-9_:]|$)`)
		if !re.MatchString(all) {
			problem("dashboard: no panel charts %s", name)
		}
	}
	return d, problems
}

// checkUIDs walks the dashboard JSON: a "uid" may only be the dashboard's
// own (null), or "${datasource}" inside a datasource reference. A datasource
// given by name (a string) is refused too.
func checkUIDs(v any, path string, problem func(string, ...any)) {
	switch x := v.(type) {
	case map[string]any:
		for k, val := range x {
			p := path + "." + k
			switch {
			case k == "uid" && path == "$":
				// The dashboard's own uid, checked by the caller.
			case k == "datasource":
				if !isDashboardDSValue(val) {
					problem("%s: got %v, want {\"type\":\"prometheus\",\"uid\":%q}", p, val, dashboardDS)
				}
			case k == "uid":
				problem("%s: fixed uid %v outside a datasource reference", p, val)
			default:
				checkUIDs(val, p, problem)
			}
		}
	case []any:
		for i, val := range x {
			checkUIDs(val, fmt.Sprintf("%s[%d]", path, i), problem)
		}
	}
}

func isDashboardDSValue(v any) bool {
	m, ok := v.(map[string]any)
	return ok && len(m) == 2 && m["type"] == "prometheus" && m["uid"] == dashboardDS
}

func isDashboardDS(raw json.RawMessage) bool {
	var v any
	return json.Unmarshal(raw, &v) == nil && isDashboardDSValue(v)
}

// TestObservabilityDashboard checks the dashboard file alone, and that the
// checks catch what would keep it from importing or from being tested; it
// needs no services.
func TestObservabilityDashboard(t *testing.T) {
	parallel(t)
	d := loadDashboard(t)
	t.Logf("%s: %d rows, %d panels", dashboardPath, d.rows, len(d.panels))
	b, err := json.Marshal(d.raw)
	if err != nil {
		t.Fatal(err)
	}

	type object = map[string]any
	firstChart := func(dash object) object {
		for _, p := range dash["panels"].([]any) {
			if p := p.(object); p["type"] != "row" {
				return p
			}
		}
		t.Fatal("no chart")
		return nil
	}
	firstTarget := func(dash object) object { return firstChart(dash)["targets"].([]any)[0].(object) }
	vars := func(dash object) []any { return dash["templating"].(object)["list"].([]any) }
	for _, tc := range []struct {
		name   string
		mutate func(dash object)
		want   string
	}{
		{"fixed dashboard uid", func(d object) { d["uid"] = "gatehouse" }, "dashboard uid"},
		{"fixed datasource uid", func(d object) {
			firstTarget(d)["datasource"] = object{"type": "prometheus", "uid": "P1809F7CD0C75ACF3"}
		}, "datasource"},
		{"datasource by name", func(d object) { firstChart(d)["datasource"] = "Prometheus" }, "datasource"},
		{"built-in annotation", func(d object) {
			d["annotations"] = object{"list": []any{object{"builtIn": 1, "datasource": object{"type": "grafana", "uid": "-- Grafana --"}}}}
		}, "annotations"},
		{"uid elsewhere", func(d object) { firstChart(d)["links"] = []any{object{"uid": "abc"}} }, "fixed uid"},
		{"no targets", func(d object) { firstChart(d)["targets"] = []any{} }, "no targets"},
		{"fixed rate window", func(d object) {
			firstTarget(d)["expr"] = `sum(rate(gatehouse_http_requests_total[5m]))`
		}, "want [$__rate_interval]"},
		{"unknown variable", func(d object) {
			d["templating"].(object)["list"] = append(vars(d), object{"name": "env", "type": "custom", "query": "prod"})
		}, "cannot resolve"},
		{"no datasource variable", func(d object) {
			d["templating"].(object)["list"] = slices.DeleteFunc(vars(d), func(v any) bool { return v.(object)["name"] == "datasource" })
		}, "no datasource variable"},
		{"metric not charted", func(d object) {
			for _, p := range d["panels"].([]any) {
				targets, _ := p.(object)["targets"].([]any)
				for _, tg := range targets {
					tg := tg.(object)
					tg["expr"] = strings.ReplaceAll(tg["expr"].(string), "gatehouse_outbox_backlog", "gatehouse_outbox_rows")
				}
			}
		}, "no panel charts gatehouse_outbox_backlog"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var dash object
			if err := json.Unmarshal(b, &dash); err != nil {
				t.Fatal(err)
			}
			tc.mutate(dash)
			broken, err := json.Marshal(dash)
			if err != nil {
				t.Fatal(err)
			}
			_, problems := checkDashboard(broken)
			if !slices.ContainsFunc(problems, func(p string) bool { return strings.Contains(p, tc.want) }) {
				t.Errorf("got problems %q, want one mentioning %q", problems, tc.want)
			}
		})
	}
}

// requireTool finds a program on PATH (where make test puts the pinned tools
// of deploy/local/tools.sh first), else at one of the given absolute paths.
// Without it the test is skipped, or fails in CI and under
// GATEHOUSE_REQUIRE_SERVICES=1.
func requireTool(t *testing.T, name string, fallback ...string) string {
	t.Helper()
	if path, err := exec.LookPath(name); err == nil {
		return path
	}
	for _, p := range fallback {
		if st, err := os.Stat(p); err == nil && !st.IsDir() {
			return p
		}
	}
	testenv.Missing(t, "%s is not installed (deploy/local/tools.sh installs it into bin/tools)", name)
	return ""
}

// TestObservabilityEndToEnd runs the stack (two API replicas and a worker)
// with Prometheus scraping it, sends traffic of every kind the dashboard
// charts, lints both expositions with promtool, and runs every query of the
// dashboard against the scraped data: each must return at least one series.
func TestObservabilityEndToEnd(t *testing.T) {
	parallel(t)
	began := time.Now()
	dash := loadDashboard(t)
	if t.Failed() {
		t.FailNow()
	}
	redisPath := testenv.RedisServerPath(t)
	promtool := requireTool(t, "promtool", "/usr/bin/promtool")
	promBin := requireTool(t, "prometheus", "/usr/bin/prometheus")
	db := testenv.NewDB(t)
	bins := buildBinaries(t)
	spec := testenv.LoadSpec(t)

	stackStart := time.Now()
	st := startStackWith(t, bins, db, redisPath, spec, stackOptions{env: obsStackEnv, workerEnv: obsWorkerEnv})
	prom := startPrometheus(t, promBin, st)
	t.Logf("stack and Prometheus ready in %s (build %s)", time.Since(stackStart).Round(time.Millisecond), bins.took.Round(time.Millisecond))

	tr := newObsTraffic(t, st)
	tr.burst(t, tr.keys[0], true)
	prom.waitScrapes(t, 2)
	tr.burst(t, tr.keys[1], false)
	tr.waitWebhooks(t, 20*time.Second)
	t.Logf("traffic sent in %s", time.Since(stackStart).Round(time.Millisecond))

	t.Run("promtool_check_metrics", func(t *testing.T) {
		c := newClient(t, "127.0.0.1")
		for _, base := range []string{st.replicas[0], st.replicas[1], st.worker} {
			e := st.do(t, c, http.MethodGet, base+"/metrics", "", "")
			mustExpect(t, e, http.StatusOK, "")
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			cmd := exec.CommandContext(ctx, promtool, "check", "metrics")
			cmd.Stdin = bytes.NewReader(e.body)
			out, err := cmd.CombinedOutput()
			cancel()
			if err != nil || len(bytes.TrimSpace(out)) > 0 {
				t.Errorf("promtool check metrics on %s/metrics: %v\n%s", base, err, out)
			}
			checkRouteLabels(t, base, string(e.body))
		}
	})

	prom.waitScrapes(t, 2)
	t.Run("traffic_recorded", func(t *testing.T) {
		for _, c := range obsRecorded {
			v, err := prom.value(c.expr)
			switch {
			case err != nil:
				t.Errorf("%s: %v", c.expr, err)
			case v < c.min:
				t.Errorf("%s: got %g, want at least %g", c.expr, v, c.min)
			}
		}
	})
	t.Run("dashboard_queries", func(t *testing.T) {
		vars := prom.resolveVariables(t, dash.variables)
		for _, p := range dash.panels {
			for _, tg := range p.Targets {
				expr := substitute(tg.Expr, vars)
				if v := unresolved(expr); v != "" {
					t.Errorf("panel %q target %s: unresolved variable %s in %s", p.Title, tg.RefID, v, expr)
					continue
				}
				n, err := prom.count(expr)
				switch {
				case err != nil:
					t.Errorf("panel %q target %s: %v\n  expr: %s", p.Title, tg.RefID, err, tg.Expr)
				case n == 0:
					t.Errorf("panel %q target %s: no series\n  expr: %s", p.Title, tg.RefID, tg.Expr)
				default:
					t.Logf("panel %q target %s: %d series", p.Title, tg.RefID, n)
				}
			}
		}
	})
	t.Logf("observability end-to-end took %s (excluding the build: %s)", time.Since(began).Round(time.Millisecond), time.Since(stackStart).Round(time.Millisecond))
}

// obsRecorded are the lower bounds of what the traffic of two bursts must
// have left in the metrics, summed over the processes. Panels only need
// series, which zero-valued children already give; these show that the
// requests, charges, refunds and deliveries were counted.
var obsRecorded = []struct {
	expr string
	min  float64
}{
	{`count(gatehouse_build_info)`, 3},
	{`sum(rate(gatehouse_http_requests_total[` + obsRateWindow + `]))`, 0.01},
	{`sum(gatehouse_http_requests_total{method="POST", route="/v1/charges", status="201"})`, 2 * obsChargesLimit},
	{`sum(gatehouse_http_requests_total{method="POST", route="/v1/charges", status="429"})`, 1},
	{`sum(gatehouse_http_request_duration_seconds_count{method="POST", route="/v1/refunds"})`, 2},
	{`sum(gatehouse_ratelimit_decisions_total{limit="charges", decision="allowed"})`, 2 * obsChargesLimit},
	{`sum(gatehouse_ratelimit_decisions_total{limit="charges", decision="limited"})`, 1},
	{`sum(gatehouse_auth_failures_total{reason="invalid_token"})`, 4},
	{`sum(gatehouse_auth_failures_total{reason="missing_authorization"})`, 4},
	{`sum(gatehouse_auth_failures_total{reason="invalid_credentials"})`, 1},
	{`sum(gatehouse_charges_created_total{provider="sandbox"})`, 2 * obsChargesLimit},
	{`sum(gatehouse_charges_total{provider="sandbox", outcome="captured"})`, 6},
	{`sum(gatehouse_charges_total{provider="sandbox", outcome="authorized"})`, 4},
	{`sum(gatehouse_charges_total{provider="sandbox", outcome="failed"})`, 2},
	{`sum(gatehouse_charges_total{provider="sandbox", outcome="voided"})`, 2},
	{`sum(gatehouse_refunds_total{provider="sandbox", outcome="succeeded"})`, 2},
	{`sum(gatehouse_provider_calls_total{provider="sandbox", outcome="declined"})`, 2},
	{`sum(gatehouse_jobs_processed_total)`, 10},
	{`sum(gatehouse_webhook_attempts_total{outcome="succeeded"})`, 1},
	{`sum(gatehouse_webhook_attempts_total{outcome="failed", attempt="2"})`, 1},
	{`sum(gatehouse_webhook_attempt_duration_seconds_count{outcome="failed"})`, 2},
	{`sum(gatehouse_webhook_first_attempt_delay_seconds_count)`, 1},
	{`count(gatehouse_provider_circuit_state{provider="sandbox"} == 0)`, 1},
	// The charges went through the merchant's Sandbox connector: its
	// attempts are counted under its id, and the series it has not used yet
	// (unknown) and its closed breaker exist from its first attempt on.
	{`sum(gatehouse_connector_attempts_total{connector=~"conn_.+", provider="sandbox", status="succeeded"})`, 6},
	{`sum(gatehouse_connector_attempts_total{connector=~"conn_.+", provider="sandbox", status="failed"})`, 2},
	{`count(gatehouse_connector_attempts_total{connector=~"conn_.+", provider="sandbox", status="unknown"} == 0)`, 1},
	{`count(gatehouse_provider_circuit_state{provider=~"conn_.+"} == 0)`, 1},
	// No charge failed over, yet each provider's failover codes are there.
	{`count(gatehouse_routing_failovers_total{provider="stripe", code="provider_unavailable"} == 0)`, 1},
	{`count(gatehouse_routing_failovers_total{provider="sandbox", code="processing_error"} == 0)`, 1},
	{`min(gatehouse_db_pool_max_connections)`, 1},
	{`min(sum by (job, instance) (gatehouse_redis_pool_total_connections))`, 1},
}

// idLike matches what must never be a label value: UUIDs and prefixed ids.
var idLike = regexp.MustCompile(`[0-9a-f]{8}-[0-9a-f]{4}-|\b(mer|key|we)_[0-9A-Za-z]`)

// checkRouteLabels checks that the request metrics are labelled with route
// templates, never with ids.
func checkRouteLabels(t *testing.T, base, exposition string) {
	t.Helper()
	for _, name := range []string{"gatehouse_http_requests_total", "gatehouse_http_request_duration_seconds_bucket"} {
		for _, r := range labelValues(exposition, name, "route") {
			if !strings.HasPrefix(r, "/") || idLike.MatchString(r) {
				t.Errorf("%s/metrics: %s has route %q, want a route template", base, name, r)
			}
		}
	}
}

// obsTraffic is one merchant sending every kind of request the dashboard
// charts, with two webhook endpoints: one that accepts and one that answers 500.
type obsTraffic struct {
	st        *stack
	c         *http.Client
	keys      [2]string
	good, bad *receiver
	charges   int
}

func newObsTraffic(t *testing.T, st *stack) *obsTraffic {
	t.Helper()
	tr := &obsTraffic{st: st, c: newClient(t, "127.0.0.41")}
	email := "obs-" + harness.RandomHex(6) + "@example.com"
	password := "correct horse " + harness.RandomHex(8)
	st.createMerchant(t, email, password, "Observability Merchant")
	r1, r2 := st.replicas[0], st.replicas[1]

	bad := st.login(t, tr.c, r2, fmt.Sprintf(`{"email":%q,"password":"wrong password"}`, email))
	expect(t, bad, http.StatusUnauthorized, "invalid_credentials")
	login := st.login(t, tr.c, r1, fmt.Sprintf(`{"email":%q,"password":%q}`, email, password))
	mustExpect(t, login, http.StatusOK, "")
	var session struct {
		Token string `json:"token"`
	}
	decode(t, login, &session)
	for i := range tr.keys {
		e := st.do(t, tr.c, http.MethodPost, st.replicas[i]+"/v1/me/api_keys", session.Token, fmt.Sprintf(`{"name":"observability %d"}`, i+1))
		mustExpect(t, e, http.StatusCreated, "")
		var k apiKey
		decode(t, e, &k)
		tr.keys[i] = k.SecretKey
	}

	tr.good = newReceiver(t, "good", always(http.StatusOK))
	tr.bad = newReceiver(t, "bad", always(http.StatusInternalServerError))
	p := &payments{st: st, c: tr.c, key: tr.keys[0]}
	for _, ep := range []struct {
		url    string
		events []string
	}{{tr.good.url(), events.Types}, {tr.bad.url(), []string{events.ChargeCaptured, events.ChargeFailed}}} {
		b, _ := json.Marshal(map[string]any{"url": ep.url, "events": ep.events})
		mustExpect(t, p.do(t, http.MethodPost, "/v1/me/webhook_endpoints", string(b)), http.StatusCreated, "")
	}
	return tr
}

// burst sends one round of traffic with key: charges that capture, one
// declined, two authorized (one then voided, one captured), a partial
// refund, a list, refused authentications and, if overLimit, one charge over
// the per-key limit.
func (tr *obsTraffic) burst(t *testing.T, key string, overLimit bool) {
	t.Helper()
	st := tr.st
	p := &payments{st: st, c: tr.c, key: key}
	create := func(number string, capture bool) string {
		t.Helper()
		tr.charges++
		e := p.do(t, http.MethodPost, "/v1/charges", cardBody(number, capture, 2000, fmt.Sprintf("obs %d", tr.charges)))
		mustExpect(t, e, http.StatusCreated, "")
		var ch chargeJSON
		decode(t, e, &ch)
		return ch.ID
	}
	captured := create("4242424242424242", true)
	captured2 := create("5555555555554444", true)
	declined := create("4000000000000002", true)
	toVoid := create("4242424242424242", false)
	toCapture := create("4242424242424242", false)
	if overLimit {
		e := p.do(t, http.MethodPost, "/v1/charges", cardBody("4242424242424242", true, 2000, "obs over the limit"))
		checkTooManyRequests(t, e, obsChargesLimit)
	}

	want := map[string]string{captured: "captured", captured2: "captured", declined: "failed", toVoid: "authorized", toCapture: "authorized"}
	got, _ := p.waitCharges(t, []string{captured, captured2, declined, toVoid, toCapture},
		func(_, status string) bool { return status != "created" }, 20*time.Second)
	for id, w := range want {
		if got[id].Status != w {
			t.Errorf("charge %s: got %s, want %s", id, got[id].Status, w)
		}
	}
	mustExpect(t, p.do(t, http.MethodPost, "/v1/charges/"+toVoid+"/void", ""), http.StatusOK, "")
	mustExpect(t, p.do(t, http.MethodPost, "/v1/charges/"+toCapture+"/capture", ""), http.StatusOK, "")
	e := p.do(t, http.MethodPost, "/v1/refunds", fmt.Sprintf(`{"charge":%q,"amount":500,"reason":"requested_by_customer"}`, captured))
	mustExpect(t, e, http.StatusCreated, "")
	var rf refundJSON
	decode(t, e, &rf)
	if r := p.waitRefund(t, rf.ID, 20*time.Second); r.Status != "succeeded" {
		t.Errorf("refund %s: got %s, want succeeded", rf.ID, r.Status)
	}
	want = map[string]string{toVoid: "voided", toCapture: "captured"}
	got, _ = p.waitCharges(t, []string{toVoid, toCapture},
		func(id, status string) bool { return status == want[id] }, 20*time.Second)
	for id, w := range want {
		if got[id].Status != w {
			t.Errorf("charge %s: got %s, want %s", id, got[id].Status, w)
		}
	}
	mustExpect(t, p.do(t, http.MethodGet, "/v1/charges?limit=5", ""), http.StatusOK, "")

	// Refused authentications: an unknown key, and no key at all.
	for _, base := range st.replicas {
		expect(t, st.do(t, tr.c, http.MethodGet, base+"/v1/charges", "sk_test_"+harness.RandomHex(16), ""), http.StatusUnauthorized, "invalid_token")
		expect(t, st.do(t, tr.c, http.MethodGet, base+"/v1/me", "", ""), http.StatusUnauthorized, "missing_authorization")
	}
}

// waitWebhooks waits until the good endpoint got deliveries and the bad one
// failed at least one retry too, so attempt numbers above 1 exist.
func (tr *obsTraffic) waitWebhooks(t *testing.T, within time.Duration) {
	t.Helper()
	within = patience(within)
	deadline := time.Now().Add(within)
	for {
		retried := slices.ContainsFunc(tr.bad.all(), func(h hit) bool { return h.attempt() >= 2 })
		if retried && tr.good.count() > 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Errorf("after %s: the good endpoint got %d requests, the bad one %d (a retry: %t); want some, and a retry",
				within, tr.good.count(), tr.bad.count(), retried)
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// promServer is a private Prometheus scraping one stack.
type promServer struct {
	base    string
	proc    *harness.Process
	client  *http.Client
	targets int
}

// startPrometheus runs Prometheus on a free port with its own storage,
// scraping both API replicas as job gatehouse-api and the worker as
// gatehouse-worker every second, and waits until every target is up.
// t.Cleanup kills it.
func startPrometheus(t *testing.T, path string, st *stack) *promServer {
	t.Helper()
	dir := t.TempDir()
	host := func(base string) string { return strings.TrimPrefix(base, "http://") }
	cfg := fmt.Sprintf(`global:
  scrape_interval: %[1]s
  scrape_timeout: %[1]s
  evaluation_interval: %[1]s
scrape_configs:
  - job_name: gatehouse-api
    static_configs:
      - targets: [%[2]q, %[3]q]
  - job_name: gatehouse-worker
    static_configs:
      - targets: [%[4]q]
`, obsScrapeInterval, host(st.replicas[0]), host(st.replicas[1]), host(st.worker))
	cfgPath := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	addr := testenv.FreeAddr(t)
	p := &promServer{base: "http://" + addr, targets: 3, client: &http.Client{Timeout: 10 * time.Second}}
	env := []string{"PATH=" + os.Getenv("PATH"), "HOME=" + dir}
	p.proc = testenv.StartProcess(t, "prometheus", nil, env, path,
		"--config.file="+cfgPath,
		"--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+addr,
		"--storage.tsdb.retention.time=1h",
		"--log.level=warn")
	t.Cleanup(func() {
		testenv.Kill(t, p.proc)
		if t.Failed() {
			testenv.DumpOutput(t, p.proc)
		}
	})
	p.waitScrapes(t, 1)
	return p
}

type promTarget struct {
	Labels     map[string]string `json:"labels"`
	Health     string            `json:"health"`
	LastError  string            `json:"lastError"`
	LastScrape time.Time         `json:"lastScrape"`
}

func (p *promServer) activeTargets() ([]promTarget, error) {
	var out struct {
		Data struct {
			ActiveTargets []promTarget `json:"activeTargets"`
		} `json:"data"`
	}
	err := p.get("/api/v1/targets", url.Values{"state": {"active"}}, &out)
	return out.Data.ActiveTargets, err
}

// waitScrapes waits until every target is up and has been scraped n times
// since the call, so counters that moved before it show in rate().
func (p *promServer) waitScrapes(t *testing.T, n int) {
	t.Helper()
	since := time.Now().Add(time.Duration(n-1) * obsScrapeInterval)
	deadline := time.Now().Add(30*time.Second + time.Duration(n)*obsScrapeInterval)
	var last string
	for {
		ts, err := p.activeTargets()
		if err == nil {
			done := len(ts) == p.targets
			var s []string
			for _, tg := range ts {
				done = done && tg.Health == "up" && tg.LastScrape.After(since)
				s = append(s, fmt.Sprintf("%s %s %s (last %s) %s", tg.Labels["job"], tg.Labels["instance"], tg.Health,
					tg.LastScrape.Format(time.RFC3339Nano), tg.LastError))
			}
			if done {
				return
			}
			last = strings.Join(s, "; ")
		} else {
			last = err.Error()
		}
		if p.proc.Exited() {
			t.Fatalf("prometheus exited: %v", p.proc.Cmd.ProcessState)
		}
		if time.Now().After(deadline) {
			t.Fatalf("prometheus: targets not up and scraped %d times: %s", n, last)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// get calls the Prometheus HTTP API and decodes a successful answer into v.
func (p *promServer) get(path string, q url.Values, v any) error {
	resp, err := p.client.Get(p.base + path + "?" + q.Encode())
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	var env struct {
		Status    string `json:"status"`
		ErrorType string `json:"errorType"`
		Error     string `json:"error"`
	}
	var body bytes.Buffer
	if _, err := body.ReadFrom(resp.Body); err != nil {
		return err
	}
	if err := json.Unmarshal(body.Bytes(), &env); err != nil {
		return fmt.Errorf("%s: %d %s", path, resp.StatusCode, body.Bytes())
	}
	if env.Status != "success" {
		return fmt.Errorf("%s: %s: %s", path, env.ErrorType, env.Error)
	}
	return json.Unmarshal(body.Bytes(), v)
}

// count runs an instant query and returns how many series it gave.
func (p *promServer) count(expr string) (int, error) {
	var out struct {
		Data struct {
			ResultType string            `json:"resultType"`
			Result     []json.RawMessage `json:"result"`
		} `json:"data"`
	}
	if err := p.get("/api/v1/query", url.Values{"query": {expr}}, &out); err != nil {
		return 0, err
	}
	if out.Data.ResultType != "vector" {
		return 0, fmt.Errorf("result type %s, want vector", out.Data.ResultType)
	}
	return len(out.Data.Result), nil
}

// value runs an instant query that must give exactly one series and
// returns its value.
func (p *promServer) value(expr string) (float64, error) {
	var out struct {
		Data struct {
			Result []struct {
				Value [2]any `json:"value"`
			} `json:"result"`
		} `json:"data"`
	}
	if err := p.get("/api/v1/query", url.Values{"query": {expr}}, &out); err != nil {
		return 0, err
	}
	if len(out.Data.Result) != 1 {
		return 0, fmt.Errorf("got %d series, want 1", len(out.Data.Result))
	}
	s, _ := out.Data.Result[0].Value[1].(string)
	return strconv.ParseFloat(s, 64)
}

// labelValuesQuery is Grafana's label_values(selector, label).
var labelValuesQuery = regexp.MustCompile(`^label_values\((.+),\s*([a-zA-Z_][a-zA-Z0-9_]*)\)$`)

// resolveVariables gives every variable the value Grafana would substitute
// with "All" selected: the regex of every value its query finds. The
// datasource variable is left for substitute.
func (p *promServer) resolveVariables(t *testing.T, vars []dashVariable) map[string]string {
	t.Helper()
	out := map[string]string{
		"__rate_interval": obsRateWindow,
		"__interval":      obsScrapeInterval.String(),
		"__range":         obsRateWindow,
	}
	for _, v := range vars {
		if v.Type != "query" {
			continue
		}
		q := substitute(v.queryText(), out)
		m := labelValuesQuery.FindStringSubmatch(q)
		if m == nil {
			t.Errorf("variable %s: query %q is not label_values(selector, label)", v.Name, q)
			out[v.Name] = ".+"
			continue
		}
		var lv struct {
			Data []string `json:"data"`
		}
		err := p.get("/api/v1/label/"+m[2]+"/values", url.Values{"match[]": {m[1]}}, &lv)
		if err != nil || len(lv.Data) == 0 {
			// Go on with every value so the panels are still checked.
			t.Errorf("variable %s: query %q found no values (err %v)", v.Name, q, err)
			out[v.Name] = ".+"
			continue
		}
		var quoted []string
		for _, s := range lv.Data {
			// Grafana escapes regex metacharacters with a doubled
			// backslash, one for the PromQL string and one for the regex.
			quoted = append(quoted, strings.ReplaceAll(regexp.QuoteMeta(s), `\`, `\\`))
		}
		out[v.Name] = "(" + strings.Join(quoted, "|") + ")"
		t.Logf("variable %s = %s", v.Name, out[v.Name])
	}
	return out
}

// grafanaVar matches Grafana's variable syntaxes: $name, ${name} and
// ${name:format}, and [[name]]. ${1} (a label_replace group) is no variable.
var grafanaVar = regexp.MustCompile(`\$\{([a-zA-Z_][a-zA-Z0-9_]*)(?::[^}]*)?\}|\$([a-zA-Z_][a-zA-Z0-9_]*)|\[\[([a-zA-Z_][a-zA-Z0-9_]*)\]\]`)

// substitute replaces the variables known in vars, leaving others as they are.
func substitute(expr string, vars map[string]string) string {
	return grafanaVar.ReplaceAllStringFunc(expr, func(s string) string {
		m := grafanaVar.FindStringSubmatch(s)
		name := m[1] + m[2] + m[3]
		if v, ok := vars[name]; ok {
			return v
		}
		return s
	})
}

// unresolved returns the first variable left in expr, or "".
func unresolved(expr string) string {
	return grafanaVar.FindString(expr)
}
