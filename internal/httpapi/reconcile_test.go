package httpapi_test

import (
	"encoding/json"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/gatehouse-pay/gatehouse/internal/reconcile"
)

// The reconciliation routes over HTTP, every answer checked against
// api/openapi.yaml: a bad report is 400 parameter_invalid on report naming
// its line and stores nothing; an upload makes its exceptions; resolving
// one twice is 409 invalid_state; the resolution is in the audit log; a
// sandbox connector's settlement report downloads as CSV.
func TestReconciliationAPI(t *testing.T) {
	t.Parallel()
	h := newHarness(t, paymentsEnv)
	a := h.account("recon@example.com")
	r := h.do("POST", "/v1/connectors", `{"provider":"sandbox","name":"Books"}`, bearer(a.secret)...)
	want(t, r, 201, "")
	conn := r.body["id"].(string)
	day := time.Now().UTC().Add(-24 * time.Hour).Format(reconcile.DateLayout)
	body := func(report string) string {
		b, _ := json.Marshal(map[string]string{"connector": conn, "report": report})
		return string(b)
	}

	for _, tc := range []struct{ name, report, line string }{
		{"a bad header", "ref,type\nx,charge\n", "line 1"},
		{"a bad amount", reconcile.Header + "\nsbx_ch_1,charge,USD,1,0,1," + day + "\nsbx_ch_2,charge,USD,1.5,0,1.5," + day + "\n", "line 3"},
		{"a bad date", reconcile.Header + "\nsbx_ch_1,charge,USD,1,0,1,27.11.2026\n", "line 2"},
		{"too large", reconcile.Header + "\n" + strings.Repeat(strings.Repeat("r", 200)+",charge,USD,1,0,1,"+day+"\n", reconcile.MaxReportBytes/200), "bytes"},
	} {
		before := h.snapshot(t)
		r := h.do("POST", "/v1/reconciliations", body(tc.report), bearer(a.secret)...)
		want(t, r, 400, "parameter_invalid")
		if r.errField("param") != "report" || !strings.Contains(r.errField("message"), tc.line) {
			t.Errorf("%s: %s, want report named with %q", tc.name, r.raw, tc.line)
		}
		if after := h.snapshot(t); !maps.Equal(before, after) {
			t.Errorf("%s stored something:\n%s", tc.name, diff(before, after))
		}
	}

	r = h.do("POST", "/v1/reconciliations", body(reconcile.Header+"\nsbx_ch_1,charge,USD,2000,88,1912,"+day+"\n"), bearer(a.secret)...)
	want(t, r, 201, "")
	rec := r.body["id"].(string)
	if r.body["status"] != "open" || r.body["missing_in_gateway"] != 1.0 || r.body["source"] != "upload" {
		t.Errorf("the reconciliation: %s", r.raw)
	}
	r = h.do("GET", "/v1/reconciliations/"+rec+"/exceptions?status=open", "", bearer(a.secret)...)
	want(t, r, 200, "")
	exc := obj(r.body["data"].([]any)[0])
	if exc["provider_reference"] != "sbx_ch_1" || exc["line"] != 2.0 || exc["gateway"] != nil || obj(exc["provider"])["net"] != 1912.0 {
		t.Errorf("the exception: %v", exc)
	}
	resolve := "/v1/reconciliations/" + rec + "/exceptions/" + exc["id"].(string) + "/resolve"
	r = h.do("POST", resolve, `{"action":"accept","note":"not ours"}`, bearer(a.secret)...)
	want(t, r, 200, "")
	if res := obj(r.body["resolution"]); res["action"] != "accept" || res["balance_transaction"] != nil || res["note"] != "not ours" {
		t.Errorf("the resolution: %s", r.raw)
	}
	want(t, h.do("POST", resolve, `{"action":"adjust"}`, bearer(a.secret)...), 409, "invalid_state")
	want(t, h.do("POST", resolve, `{"action":"ignore"}`, bearer(a.secret)...), 400, "parameter_invalid")
	r = h.do("GET", "/v1/reconciliations/"+rec, "", bearer(a.secret)...)
	if r.body["status"] != "resolved" || r.body["open_exceptions"] != 0.0 {
		t.Errorf("after the resolution: %s", r.raw)
	}
	r = h.do("GET", "/v1/audit_log?action=reconciliation_exception.resolve", "", bearer(a.token)...)
	want(t, r, 200, "")
	if entries := r.body["data"].([]any); len(entries) != 1 || obj(entries[0])["object_id"] != exc["id"] {
		t.Errorf("the audit log: %s", r.raw)
	}

	r = h.do("GET", "/v1/connectors/"+conn+"/settlement_report?date="+day, "", bearer(a.secret)...)
	want(t, r, 200, "")
	if string(r.raw) != reconcile.Header+"\n" || !strings.HasPrefix(r.header.Get("Content-Type"), "text/csv") {
		t.Errorf("a day without traffic: %q (%s)", r.raw, r.header.Get("Content-Type"))
	}
	want(t, h.do("GET", "/v1/connectors/"+conn+"/settlement_report", "", bearer(a.secret)...), 400, "parameter_missing")
	want(t, h.do("GET", "/v1/connectors/"+conn+"/settlement_report?date=tomorrow", "", bearer(a.secret)...), 400, "parameter_invalid")
}
