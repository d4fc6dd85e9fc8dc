package httpapi_test

// The webhook endpoint page's filter (api/openapi.yaml, docs/webhooks.md):
// the Settings form stores a filter as PATCH /v1/me/webhook_endpoints/:id
// does, shows a refused one next to the textarea with the path it names and
// what was typed, clears it when empty, and takes no form without the
// session's CSRF token.

import (
	"encoding/json"
	"html"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"
)

// filterTextarea is the content of the page's filter textarea.
var filterTextarea = regexp.MustCompile(`(?s)<textarea id="edit-filter"[^>]*>(.*?)</textarea>`)

func filterShown(t *testing.T, p dashPage) string {
	t.Helper()
	m := filterTextarea.FindStringSubmatch(p.body)
	if m == nil {
		t.Fatalf("the page has no filter textarea: %d\n%.2000s", p.status, p.body)
	}
	return html.UnescapeString(m[1])
}

// sameJSON reports whether a and b are the same JSON value.
func sameJSON(a, b string) bool {
	var x, y any
	if json.Unmarshal([]byte(a), &x) != nil || json.Unmarshal([]byte(b), &y) != nil {
		return false
	}
	xs, _ := json.Marshal(x)
	ys, _ := json.Marshal(y)
	return string(xs) == string(ys)
}

func TestDashboardWebhookFilter(t *testing.T) {
	t.Parallel()
	h := newHarness(t, paymentsEnv)
	const email = "filter-form@example.com"
	merchant := h.merchant(email, matrixPassword)
	_, secret := h.newKey(h.login(email, matrixPassword))
	endpoint, _ := h.createEndpoint(t, secret, "https://hooks.example.com/filtered", "charge.created")
	page := "/dashboard/webhooks/" + endpoint
	d := h.dashClientSignedIn(t, email)

	stored := func() map[string]any {
		t.Helper()
		r := h.do("GET", "/v1/me/webhook_endpoints/"+endpoint, "", bearer(secret)...)
		want(t, r, 200, "")
		if _, ok := r.body["filter"]; !ok {
			t.Fatalf("the endpoint has no filter field: %v", r.body)
		}
		return r.body
	}
	storedFilter := func() string {
		t.Helper()
		b, _ := json.Marshal(stored()["filter"])
		return string(b)
	}
	settings := func(u, filter string, events ...string) url.Values {
		return url.Values{"url": {u}, "description": {"orders"}, "events": events, "active": {"on"}, "filter": {filter}}
	}
	const endpointURL = "https://hooks.example.com/filtered"

	// No filter yet: the textarea is empty, the counts are shown.
	p := d.get(page)
	if p.status != 200 || filterShown(t, p) != "" || !strings.Contains(p.body, `id="endpoint-stats"`) ||
		strings.Contains(p.body, `id="edit-filter-error"`) || storedFilter() != "null" {
		t.Fatalf("the page before any filter: %d, textarea %q, stored %s", p.status, filterShown(t, p), storedFilter())
	}

	// A good filter is stored as the API stores it (a bare value is $eq)
	// and shown on the page.
	good := `{"data.charge.amount": {"$gte": 1000}, "data.charge.currency": "USD"}`
	const goodStored = `{"data.charge.amount": {"$gte": 1000}, "data.charge.currency": {"$eq": "USD"}}`
	r := d.post(page, settings(endpointURL, good, "charge.created"))
	if r.status != http.StatusSeeOther || r.location != page+"?notice=updated" {
		t.Fatalf("saving a good filter: %d to %q\n%.1500s", r.status, r.location, r.body)
	}
	if got := storedFilter(); !sameJSON(got, goodStored) {
		t.Errorf("stored filter %s, want %s", got, goodStored)
	}
	if got := filterShown(t, d.get(page)); !sameJSON(got, goodStored) || !strings.Contains(got, "\n") {
		t.Errorf("the page shows the filter %q, want %s indented", got, goodStored)
	}

	// Bad filters: 400, the page again with the error next to the textarea
	// naming the path, what was typed kept (the url changed in the same
	// form too), and nothing stored.
	for _, tc := range []struct{ filter, param, says string }{
		{`{"data.charge.amount": {"$gte": true}}`, "filter.data.charge.amount", "$gte takes a number or a string"},
		{`{"data.charge.amount": {"$between": [1, 2]}}`, "filter.data.charge.amount", `unknown operator "$between"`},
		{`{"data.charge..amount": 1}`, "filter.data.charge..amount", "a path is names of letters"},
		{`{"data.charge.currency": {"$in": []}}`, "filter.data.charge.currency", "$in takes a list of 1 to 100 values"},
		{`amount >= 1000`, "filter", "filter must be an object of conditions"},
		{`[{"data.charge.amount": 1}]`, "filter", "filter must be an object of conditions"},
	} {
		before, beforeAPI := h.state(t, merchant), storedFilter()
		r := d.post(page, settings("https://hooks.example.com/changed", tc.filter, "charge.created", "charge.captured"))
		fieldError := regexp.MustCompile(`(?s)<p class="field-error" id="edit-filter-error">(.*?)</p>`).FindStringSubmatch(r.body)
		switch {
		case r.status != http.StatusBadRequest:
			t.Errorf("filter %s: %d, want 400\n%.1500s", tc.filter, r.status, r.body)
		case fieldError == nil:
			t.Errorf("filter %s: no error next to the textarea\n%.4000s", tc.filter, r.body)
		case !strings.Contains(html.UnescapeString(fieldError[1]), "<code>"+tc.param+"</code>") ||
			!strings.Contains(html.UnescapeString(fieldError[1]), tc.says):
			t.Errorf("filter %s: the field error %q, want %s and %q", tc.filter, html.UnescapeString(fieldError[1]), tc.param, tc.says)
		case !strings.Contains(r.body, `id="error"`) || !strings.Contains(r.body, "parameter_invalid"):
			t.Errorf("filter %s: no alert with the error's code", tc.filter)
		case !strings.Contains(r.body, `aria-invalid="true" aria-describedby="edit-filter-error"`):
			t.Errorf("filter %s: the textarea is not marked invalid", tc.filter)
		}
		if got := filterShown(t, r); got != tc.filter {
			t.Errorf("filter %s: the textarea shows %q, want what was typed", tc.filter, got)
		}
		if !strings.Contains(r.body, `value="https://hooks.example.com/changed"`) ||
			!regexp.MustCompile(`value="charge.captured" checked`).MatchString(r.body) {
			t.Errorf("filter %s: the form lost the url or events typed with it", tc.filter)
		}
		if diff := stateDiff(before, h.state(t, merchant)); diff != "" {
			t.Errorf("filter %s changed: %s", tc.filter, diff)
		}
		if after := stored(); after["url"] != endpointURL || !sameJSON(storedFilter(), beforeAPI) {
			t.Errorf("filter %s: the API shows url %v, filter %s; want them unchanged", tc.filter, after["url"], storedFilter())
		}
	}
	// Another field refused: its own error, the filter typed kept.
	r = d.post(page, settings(endpointURL, `{"data.charge.amount": {"$lt": 5}}`))
	if r.status != http.StatusBadRequest || !strings.Contains(r.body, `id="edit-events-error"`) ||
		strings.Contains(r.body, `id="edit-filter-error"`) || filterShown(t, r) != `{"data.charge.amount": {"$lt": 5}}` {
		t.Errorf("no events ticked: %d, filter shown %q\n%.3000s", r.status, filterShown(t, r), r.body)
	}

	// The CSRF rule holds for this form: another token, or a cross-site
	// request with the right one, is refused and changes nothing.
	own := d.csrf
	before := h.state(t, merchant)
	for _, tc := range []struct {
		name, token string
		headers     []string
	}{
		{"no token", "", nil},
		{"a made-up token", "guessed", nil},
		{"a cross-site request with the right token", own, []string{"Sec-Fetch-Site", "cross-site"}},
	} {
		d.csrf = tc.token
		r := d.post(page, settings(endpointURL, `{"data.charge.amount": {"$gte": 1}}`, "charge.created"), tc.headers...)
		if r.status != http.StatusForbidden || !strings.Contains(r.body, "csrf_token_invalid") {
			t.Errorf("%s: %d, want 403 csrf_token_invalid", tc.name, r.status)
		}
	}
	d.csrf = own
	if diff := stateDiff(before, h.state(t, merchant)); diff != "" || !sameJSON(storedFilter(), goodStored) {
		t.Errorf("forms without the session's token changed: %s; filter %s", diff, storedFilter())
	}

	// An empty filter removes it: null through the API, an empty textarea.
	r = d.post(page, settings(endpointURL, "  \n ", "charge.created"))
	if r.status != http.StatusSeeOther {
		t.Fatalf("clearing the filter: %d\n%.1500s", r.status, r.body)
	}
	if got := storedFilter(); got != "null" {
		t.Errorf("after clearing, the API shows filter %s, want null", got)
	}
	if got := filterShown(t, d.get(page)); got != "" {
		t.Errorf("after clearing, the textarea shows %q", got)
	}
}

// TestDashboardWebhookFailing: an enabled endpoint whose attempts have
// failed since some time says so on its page; a healthy one does not.
func TestDashboardWebhookFailing(t *testing.T) {
	t.Parallel()
	h := newHarness(t, paymentsEnv)
	const email = "failing-page@example.com"
	h.merchant(email, matrixPassword)
	_, secret := h.newKey(h.login(email, matrixPassword))
	endpoint, _ := h.createEndpoint(t, secret, "https://hooks.example.com/failing", "charge.created")
	d := h.dashClientSignedIn(t, email)
	if p := d.get("/dashboard/webhooks/" + endpoint); p.status != 200 || strings.Contains(p.body, `id="endpoint-failing"`) {
		t.Fatalf("a healthy endpoint's page: %d, failing notice shown: %t", p.status, strings.Contains(p.body, `id="endpoint-failing"`))
	}
	if _, err := h.db.Pool.Exec(t.Context(), `UPDATE webhook_endpoints SET failing_since = '2026-11-20T10:00:00Z' WHERE id = $1`, endpoint); err != nil {
		t.Fatal(err)
	}
	p := d.get("/dashboard/webhooks/" + endpoint)
	if p.status != 200 || !strings.Contains(p.body, `id="endpoint-failing"`) || !strings.Contains(p.body, "2026-11-20 10:00") {
		t.Errorf("a failing endpoint's page: %d, no failing notice with its start\n%.3000s", p.status, p.body)
	}
}
