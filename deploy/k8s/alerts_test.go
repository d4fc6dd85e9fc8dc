package k8s_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	"sigs.k8s.io/yaml"
)

const (
	rulesSource = "deploy/k8s/base/prometheus-rules.yaml"
	rulesTests  = "deploy/k8s/tests/alerts.test.yaml"
	// rulesFile is the name alerts.test.yaml gives in rule_files.
	rulesFile = "gatehouse-rules.yaml"
)

// metricNames are the series the binaries expose (docs/observability.md); an
// alert on any other name would never fire.
var metricNames = []string{
	"up",
	"gatehouse_http_requests_total", "gatehouse_http_request_duration_seconds", "gatehouse_http_requests_in_flight",
	"gatehouse_http_connections_open", "gatehouse_http_connections_refused_total",
	"gatehouse_auth_failures_total", "gatehouse_ratelimit_decisions_total", "gatehouse_ratelimit_fallback_total",
	"gatehouse_build_info", "gatehouse_charges_created_total",
	"gatehouse_db_pool_acquired_connections", "gatehouse_db_pool_idle_connections", "gatehouse_db_pool_total_connections",
	"gatehouse_db_pool_max_connections", "gatehouse_db_pool_acquires_total", "gatehouse_db_pool_empty_acquires_total",
	"gatehouse_db_pool_acquire_wait_seconds_total",
	"gatehouse_redis_pool_hits_total", "gatehouse_redis_pool_misses_total", "gatehouse_redis_pool_timeouts_total",
	"gatehouse_redis_pool_total_connections", "gatehouse_redis_pool_idle_connections",
	"gatehouse_jobs_processed_total", "gatehouse_job_duration_seconds", "gatehouse_jobs_recovery_active",
	"gatehouse_provider_calls_total", "gatehouse_provider_call_duration_seconds", "gatehouse_provider_circuit_state",
	"gatehouse_charges_total", "gatehouse_refunds_total",
	"gatehouse_connector_attempts_total", "gatehouse_routing_failovers_total",
	"gatehouse_webhook_attempts_total", "gatehouse_webhook_attempt_duration_seconds", "gatehouse_webhook_first_attempt_delay_seconds",
	"gatehouse_webhook_batch_size", "gatehouse_webhook_endpoints_disabled_total",
	"gatehouse_outbox_backlog", "gatehouse_outbox_oldest_age_seconds", "gatehouse_provider_outcomes_unknown",
	"gatehouse_provider_confirmations_overdue", "gatehouse_provider_notifications_total",
	"gatehouse_disputes_due_soon", "gatehouse_disputes_overdue",
	"asynq_queue_size", "asynq_queue_latency_seconds", "asynq_tasks", "asynq_queue_paused",
	"asynq_tasks_processed_total", "asynq_tasks_failed_total", "asynq_queue_memory_usage_approx_bytes",
}

// alertRules reads the PrometheusRule, strictly decoded, and its raw spec.
func alertRules(t *testing.T) (*monitoringv1.PrometheusRule, map[string]any) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(repoRoot(t), rulesSource))
	if err != nil {
		t.Fatal(err)
	}
	o := decode(t, data)
	rule, ok := o.Obj.(*monitoringv1.PrometheusRule)
	if !ok {
		t.Fatalf("%s holds a %s, want a PrometheusRule", rulesSource, o.Kind)
	}
	spec, _ := o.Raw["spec"].(map[string]any)
	return rule, spec
}

// writeRules extracts spec.groups to dir/gatehouse-rules.yaml and copies the
// unit tests beside it, so promtool reads exactly what the cluster gets.
func writeRules(t *testing.T, dir string) {
	t.Helper()
	_, spec := alertRules(t)
	out, err := yaml.Marshal(map[string]any{"groups": spec["groups"]})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, rulesFile), out, 0o644); err != nil {
		t.Fatal(err)
	}
	tests, err := os.ReadFile(filepath.Join(repoRoot(t), rulesTests))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "alerts.test.yaml"), tests, 0o644); err != nil {
		t.Fatal(err)
	}
}

func promtool(t *testing.T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command(tool(t, "promtool"), args...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

func TestAlertsPromtool(t *testing.T) {
	dir := t.TempDir()
	writeRules(t, dir)
	promtool(t, dir, "check", "rules", rulesFile)
	promtool(t, dir, "test", "rules", "alerts.test.yaml")
}

// TestAlertsEachTested: every alert has a unit test where it fires and one
// where it stays quiet, and the tests name no alert that does not exist.
func TestAlertsEachTested(t *testing.T) {
	rule, _ := alertRules(t)
	var alerts []string
	for _, g := range rule.Spec.Groups {
		for _, r := range g.Rules {
			if r.Alert != "" {
				alerts = append(alerts, r.Alert)
			}
		}
	}
	if len(alerts) < 10 {
		t.Fatalf("%d alerts, want at least 10: %v", len(alerts), alerts)
	}
	data, err := os.ReadFile(filepath.Join(repoRoot(t), rulesTests))
	if err != nil {
		t.Fatal(err)
	}
	var suite struct {
		RuleFiles []string `json:"rule_files"`
		Tests     []struct {
			Name          string `json:"name"`
			AlertRuleTest []struct {
				Alertname string           `json:"alertname"`
				ExpAlerts []map[string]any `json:"exp_alerts"`
			} `json:"alert_rule_test"`
		} `json:"tests"`
	}
	if err := yaml.Unmarshal(data, &suite); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(suite.RuleFiles, []string{rulesFile}) {
		t.Errorf("rule_files %v, want [%s] (the file the test extracts)", suite.RuleFiles, rulesFile)
	}
	fires, quiet := map[string]bool{}, map[string]bool{}
	for _, tc := range suite.Tests {
		for _, a := range tc.AlertRuleTest {
			if !slices.Contains(alerts, a.Alertname) {
				t.Errorf("test %q checks unknown alert %s", tc.Name, a.Alertname)
			}
			if len(a.ExpAlerts) == 0 {
				quiet[a.Alertname] = true
			} else {
				fires[a.Alertname] = true
			}
		}
	}
	for _, a := range alerts {
		if !fires[a] {
			t.Errorf("no test where %s fires", a)
		}
		if !quiet[a] {
			t.Errorf("no test where %s stays quiet", a)
		}
	}
}

var metricRef = regexp.MustCompile(`\b(?:gatehouse|asynq)_[a-z_]+\b|\bup\b`)

// TestAlertsShape: severity, summary, description and a runbook that exists.
func TestAlertsShape(t *testing.T) {
	rule, _ := alertRules(t)
	seen := map[string]bool{}
	for _, g := range rule.Spec.Groups {
		for _, r := range g.Rules {
			if r.Alert == "" {
				continue
			}
			if seen[r.Alert] {
				t.Errorf("alert %s defined twice", r.Alert)
			}
			seen[r.Alert] = true
			if !strings.HasPrefix(r.Alert, "Gatehouse") {
				t.Errorf("alert %s does not start with Gatehouse", r.Alert)
			}
			if r.For == nil || *r.For == "" {
				t.Errorf("%s has no for: a single bad scrape would page", r.Alert)
			}
			if s := r.Labels["severity"]; s != "critical" && s != "warning" {
				t.Errorf("%s severity %q, want critical or warning", r.Alert, s)
			}
			for _, k := range []string{"summary", "description"} {
				if strings.TrimSpace(r.Annotations[k]) == "" {
					t.Errorf("%s has no %s", r.Alert, k)
				}
			}
			if got, want := r.Annotations["runbook_url"], runbookBase+r.Alert+".md"; got != want {
				t.Errorf("%s runbook_url %q, want %q", r.Alert, got, want)
			}
			for _, name := range metricRef.FindAllString(r.Expr.String(), -1) {
				base := name
				for _, suffix := range []string{"_bucket", "_sum", "_count"} {
					base = strings.TrimSuffix(base, suffix)
				}
				if !slices.Contains(metricNames, base) && !slices.Contains(metricNames, name) {
					t.Errorf("%s uses %s, which no Gatehouse binary exposes", r.Alert, name)
				}
			}
		}
	}
}

// TestAlertsRunbooks: docs/runbooks holds one file per alert, named after it
// and titled with its name, and nothing else but the README, which links to
// every runbook.
func TestAlertsRunbooks(t *testing.T) {
	rule, _ := alertRules(t)
	alerts := map[string]bool{}
	for _, g := range rule.Spec.Groups {
		for _, r := range g.Rules {
			if r.Alert != "" {
				alerts[r.Alert] = true
			}
		}
	}
	dir := filepath.Join(repoRoot(t), runbookDir)
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	files := map[string]bool{}
	for _, e := range entries {
		name, ok := strings.CutSuffix(e.Name(), ".md")
		if e.IsDir() || !ok {
			t.Errorf("%s/%s: only the runbooks (<alert>.md) and README.md belong there", runbookDir, e.Name())
			continue
		}
		if name == "README" {
			continue
		}
		files[name] = true
		if !alerts[name] {
			t.Errorf("%s/%s.md: no alert %s in %s", runbookDir, name, name, rulesSource)
		}
		data, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if first, _, _ := strings.Cut(string(data), "\n"); first != "# "+name {
			t.Errorf("%s/%s.md starts with %q, want %q", runbookDir, name, first, "# "+name)
		}
		for _, part := range []string{"**Means**", "**Check**", "**Do**"} {
			if !strings.Contains(string(data), part) {
				t.Errorf("%s/%s.md has no %s", runbookDir, name, part)
			}
		}
	}
	index, err := os.ReadFile(filepath.Join(dir, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	for a := range alerts {
		if !files[a] {
			t.Errorf("alert %s has no runbook %s/%s.md", a, runbookDir, a)
		}
		if !strings.Contains(string(index), "]("+a+".md)") {
			t.Errorf("%s/README.md does not link to %s.md", runbookDir, a)
		}
	}
}
