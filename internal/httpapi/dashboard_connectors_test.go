package httpapi_test

// The dashboard's connectors and routing: the list and the creation form
// (a Stripe secret key never shown back), a connector's page with its last
// 24 hours, enabling, rehearsal and deletion through the connectors
// service, and the routing page's three forms, refused routings shown with
// the service's message.

import (
	"context"
	"encoding/json"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gatehouse-pay/gatehouse/internal/charges"
	"github.com/gatehouse-pay/gatehouse/internal/ids"
)

// connectorRow is a connector's row as stored.
type connectorRow struct {
	Name    string
	Enabled bool
	Sandbox map[string]any
	Sealed  []byte
	Deleted bool
}

func (h *harness) connectorRow(t *testing.T, id string) connectorRow {
	t.Helper()
	var r connectorRow
	var sandbox []byte
	err := h.db.Pool.QueryRow(context.Background(), `SELECT name, enabled, sandbox, credentials_sealed, deleted_at IS NOT NULL
		FROM connectors WHERE id = $1`, id).Scan(&r.Name, &r.Enabled, &sandbox, &r.Sealed, &r.Deleted)
	if err != nil {
		t.Fatalf("connector %s: %v", id, err)
	}
	if sandbox != nil {
		if err := json.Unmarshal(sandbox, &r.Sandbox); err != nil {
			t.Fatal(err)
		}
	}
	return r
}

// routingConfig is the merchant's stored routing, "" when it set none.
func (h *harness) routingConfig(t *testing.T, merchantID string) string {
	t.Helper()
	var config string
	err := h.db.Pool.QueryRow(context.Background(), `SELECT config::text FROM routing WHERE merchant_id = $1`, merchantID).Scan(&config)
	if err != nil && !strings.Contains(err.Error(), "no rows") {
		t.Fatal(err)
	}
	return config
}

// createdConnector is the id of the connector a creation redirected to.
var createdConnector = regexp.MustCompile(`^/dashboard/connectors/(conn_[0-9a-v]{26})\?notice=(conn_created|already_done)$`)

func TestDashboardConnectors(t *testing.T) {
	t.Parallel()
	h := newHarness(t, paymentsEnv)
	merchant := h.merchant("kim@example.com", matrixPassword)
	h.merchant("lee@example.com", matrixPassword)
	d := h.dashClientSignedIn(t, "kim@example.com")
	const secretKey = "sk_test_DashboardOnlyK3yNeverShown0042"

	// The list starts with the server's own sandbox account.
	list := d.get("/dashboard/connectors")
	rows := rowsOf(list.body, "data-connector")
	if list.status != 200 || len(rows) != 1 || !strings.Contains(list.body, "server account") ||
		!strings.Contains(list.body, `href="/dashboard/connectors" aria-current="page"`) {
		t.Fatalf("the connectors list: %d, rows %v\n%.2000s", list.status, rows, list.body)
	}
	checkDashboardHeaders(t, "the connectors list", list)
	server := rows[0]

	create := func(form url.Values) dashPage {
		t.Helper()
		return d.post("/dashboard/connectors", form)
	}
	createdID := func(r dashPage) string {
		t.Helper()
		m := createdConnector.FindStringSubmatch(r.location)
		if r.status != 303 || m == nil {
			t.Fatalf("create: %d to %q\n%.800s", r.status, r.location, r.body)
		}
		return m[1]
	}

	// A sandbox connector with a rehearsed latency.
	backup := createdID(create(url.Values{"provider": {"sandbox"}, "name": {"  Backup sandbox "}, "enabled": {"on"}, "latency_ms": {"150"}}))
	if row := h.connectorRow(t, backup); row.Name != "Backup sandbox" || !row.Enabled || row.Sandbox["latency_ms"] != 150.0 ||
		row.Sandbox["unavailable"] != false || row.Sandbox["decline_code"] != nil || row.Sealed != nil {
		t.Errorf("the sandbox connector as stored: %+v", row)
	}

	// A Stripe connector: its key is sealed, and no page shows it.
	key := ids.NewUUID()
	stripeForm := url.Values{"provider": {"stripe"}, "name": {"Stripe EU"}, "secret_key": {secretKey}, "enabled": {"on"}, "idempotency_key": {key}}
	r := create(stripeForm)
	stripe := createdID(r)
	if row := h.connectorRow(t, stripe); !row.Enabled || row.Sealed == nil || strings.Contains(string(row.Sealed), secretKey) || row.Sandbox != nil {
		t.Errorf("the stripe connector as stored: enabled %v, sealed %d bytes (plain text %v), sandbox %v",
			row.Enabled, len(row.Sealed), strings.Contains(string(row.Sealed), secretKey), row.Sandbox)
	}
	// The same form again (a double submit): the same connector, once.
	if again := create(stripeForm); createdID(again) != stripe || !strings.HasSuffix(again.location, "notice=already_done") {
		t.Errorf("the same form again: to %q, want %s with already_done", again.location, stripe)
	}
	if n := h.count(t, `SELECT count(*) FROM connectors WHERE merchant_id = $1 AND provider = 'stripe'`, merchant); n != 1 {
		t.Errorf("%d stripe connectors after a double submit, want 1", n)
	}
	page := d.get(r.location)
	if page.status != 200 || !strings.Contains(page.body, `id="notice"`) || !strings.Contains(page.body, "own secret key") ||
		strings.Contains(page.body, `id="rehearsal"`) {
		t.Errorf("the stripe connector's page: %d\n%.2000s", page.status, page.body)
	}
	list = d.get("/dashboard/connectors")
	if got := rowsOf(list.body, "data-connector"); !slices.Equal(got, []string{stripe, backup, server}) {
		t.Errorf("the list: %v, want %v (newest first)", got, []string{stripe, backup, server})
	}

	// Refused creations: the service's message; the key is never echoed.
	for _, tc := range []struct {
		form url.Values
		want string
	}{
		{url.Values{"provider": {"stripe"}, "name": {"No key"}}, "credentials"},
		{url.Values{"provider": {"stripe"}, "name": {"Bad key"}, "secret_key": {"pk_test_" + secretKey[8:]}}, "Stripe secret or restricted key"},
		{url.Values{"provider": {"stripe"}, "name": {"Rehearsed"}, "secret_key": {secretKey}, "unavailable": {"on"}}, "Only a sandbox connector has rehearsal settings."},
		{url.Values{"provider": {"sandbox"}, "name": {"With key"}, "secret_key": {secretKey}}, "A sandbox connector takes no credentials."},
		{url.Values{"provider": {"sandbox"}, "name": {""}}, "name must be 1 to 100 characters."},
		{url.Values{"provider": {"worldpay"}, "name": {"Other"}}, "provider must be one of: sandbox, stripe, adyen."},
		{url.Values{"provider": {"sandbox"}, "name": {"Slow"}, "latency_ms": {"9000"}}, "sandbox.latency_ms must be from 0 to 5000."},
		{url.Values{"provider": {"sandbox"}, "name": {"Slow"}, "latency_ms": {"soon"}}, "whole number of milliseconds"},
	} {
		r := create(tc.form)
		if r.status != 400 || !strings.Contains(r.body, tc.want) || strings.Contains(r.body, secretKey[8:]) {
			t.Errorf("create %v: %d (key echoed %v), want 400 saying %q\n%.800s", tc.form, r.status, strings.Contains(r.body, secretKey[8:]), tc.want, r.body)
		}
	}

	// Rehearsal: set all three, then clear the decline.
	r = d.post("/dashboard/connectors/"+backup+"/rehearsal", url.Values{"unavailable": {"on"}, "decline_code": {"processing_error"}, "latency_ms": {"20"}})
	if r.status != 303 || r.location != "/dashboard/connectors/"+backup+"?notice=rehearsal_saved" {
		t.Fatalf("rehearsal: %d to %q\n%.800s", r.status, r.location, r.body)
	}
	if row := h.connectorRow(t, backup); row.Sandbox["unavailable"] != true || row.Sandbox["decline_code"] != "processing_error" || row.Sandbox["latency_ms"] != 20.0 {
		t.Errorf("the rehearsal as stored: %v", row.Sandbox)
	}
	page = d.get(r.location)
	for _, s := range []string{`<option value="processing_error" selected>`, `name="unavailable" id="rehearsal-unavailable" checked`, `value="20"`, "declines <code>processing_error</code>"} {
		if !strings.Contains(page.body, s) {
			t.Errorf("the connector's page after the rehearsal lacks %q", s)
		}
	}
	if r := d.post("/dashboard/connectors/"+backup+"/rehearsal", url.Values{"latency_ms": {"0"}}); r.status != 303 {
		t.Errorf("clear the rehearsal: %d", r.status)
	}
	if row := h.connectorRow(t, backup); row.Sandbox["unavailable"] != false || row.Sandbox["decline_code"] != nil || row.Sandbox["latency_ms"] != 0.0 {
		t.Errorf("the cleared rehearsal as stored: %v", row.Sandbox)
	}
	for _, tc := range []struct {
		id   string
		form url.Values
		want string
	}{
		{backup, url.Values{"decline_code": {"bogus"}}, "sandbox.decline_code must be null or one of"},
		{backup, url.Values{"latency_ms": {"-1"}}, "sandbox.latency_ms must be from 0 to 5000."},
		{stripe, url.Values{"latency_ms": {"10"}}, "Only a sandbox connector has rehearsal settings."},
	} {
		if r := d.post("/dashboard/connectors/"+tc.id+"/rehearsal", tc.form); r.status != 400 || !strings.Contains(r.body, tc.want) {
			t.Errorf("rehearsal %v on %s: %d, want 400 saying %q", tc.form, tc.id, r.status, tc.want)
		}
	}

	// Disable and enable, from the list and from the page.
	r = d.post("/dashboard/connectors/"+stripe+"/enabled", url.Values{"enabled": {"false"}, "return": {"list"}})
	if r.status != 303 || r.location != "/dashboard/connectors?notice=conn_disabled" || h.connectorRow(t, stripe).Enabled {
		t.Errorf("disable from the list: %d to %q, enabled %v", r.status, r.location, h.connectorRow(t, stripe).Enabled)
	}
	if p := d.get("/dashboard/connectors"); !strings.Contains(p.body, `<tr data-connector="`+stripe+`">`) ||
		!regexp.MustCompile(`data-connector="`+stripe+`">(?s:.)*?data-enabled="false"`).MatchString(p.body) {
		t.Error("the list does not show the stripe connector disabled")
	}
	if r := d.post("/dashboard/connectors/"+backup+"/enabled", url.Values{"enabled": {"maybe"}}); r.status != 400 {
		t.Errorf("enabled=maybe: %d, want 400", r.status)
	}

	// The routing: the server's default until one is saved.
	rt := d.get("/dashboard/routing")
	if rt.status != 200 || !strings.Contains(rt.body, `data-set="false"`) || !strings.Contains(rt.body, `<li data-connector="`+server+`">`) ||
		!strings.Contains(rt.body, `href="/dashboard/routing" aria-current="page"`) {
		t.Fatalf("the routing page before any routing: %d\n%.3000s", rt.status, rt.body)
	}
	checkDashboardHeaders(t, "the routing page", rt)
	// The forms offer the enabled connectors only.
	if strings.Contains(rt.body, `<option value="`+stripe+`"`) || !strings.Contains(rt.body, `<option value="`+backup+`"`) {
		t.Error("the ordered form offers a disabled connector, or not an enabled one")
	}

	putRouting := func(form url.Values) dashPage {
		t.Helper()
		return d.post("/dashboard/routing", form)
	}
	saved := func(r dashPage, what string) {
		t.Helper()
		if r.status != 303 || r.location != "/dashboard/routing?notice=routing_saved" {
			t.Fatalf("%s: %d to %q\n%.1500s", what, r.status, r.location, r.body)
		}
	}
	saved(putRouting(url.Values{"form": {"ordered"}, "connector": {backup, "", server, ""}}), "the ordered form")
	if got, want := h.routingConfig(t, merchant), `{"rules": [], "default": {"connectors": ["`+backup+`", "`+server+`"]}}`; got != want {
		t.Errorf("routing after the ordered form: %s, want %s", got, want)
	}
	rt = d.get("/dashboard/routing")
	if !strings.Contains(rt.body, `data-set="true"`) || !strings.Contains(rt.body, `<option value="`+backup+`" selected>`) ||
		!regexp.MustCompile(`id="default-route">(?s:.)*?data-connector="`+backup+`">(?s:.)*?data-connector="`+server+`">`).MatchString(rt.body) {
		t.Errorf("the routing page after the ordered form\n%.3000s", rt.body)
	}

	saved(putRouting(url.Values{"form": {"split"}, "split_connector": {server, backup}, "split_weight": {"70", "30"}}), "the split form")
	if got, want := h.routingConfig(t, merchant), `{"rules": [], "default": {"split": [{"weight": 70, "connector": "`+server+`"}, {"weight": 30, "connector": "`+backup+`"}]}}`; got != want {
		t.Errorf("routing after the split form: %s, want %s", got, want)
	}
	if rt = d.get("/dashboard/routing"); !strings.Contains(rt.body, "weight 70 · 70% first") || !strings.Contains(rt.body, `value="30" placeholder="0" data-connector="`+backup+`"`) {
		t.Errorf("the routing page does not show the split\n%.3000s", rt.body)
	}

	// The JSON form: rules too. The ordered form afterwards keeps them.
	rules := `{"rules":[{"if":{"currency":["eur"],"card_brand":["VISA"]},"then":{"connectors":["` + backup + `"]}}],"default":{"connectors":["` + server + `"]}}`
	saved(putRouting(url.Values{"form": {"json"}, "routing": {rules}}), "the JSON form")
	saved(putRouting(url.Values{"form": {"ordered"}, "connector": {server, backup}}), "the ordered form with rules")
	if got, want := h.routingConfig(t, merchant), `{"rules": [{"if": {"currency": ["EUR"], "card_brand": ["visa"]}, "then": {"connectors": ["`+backup+`"]}}], "default": {"connectors": ["`+server+`", "`+backup+`"]}}`; got != want {
		t.Errorf("routing after the JSON and ordered forms: %s, want %s", got, want)
	}
	if rt = d.get("/dashboard/routing"); !strings.Contains(rt.body, `<tr data-rule="0">`) || !strings.Contains(rt.body, "<code>EUR</code>") {
		t.Errorf("the routing page does not show the rule\n%.3000s", rt.body)
	}

	// Refused routings: the page again, 400, the service's message, and the
	// refused JSON kept in its field; nothing stored changes.
	before := h.routingConfig(t, merchant)
	for _, tc := range []struct {
		name string
		form url.Values
		want string
	}{
		{"a disabled connector", url.Values{"form": {"ordered"}, "connector": {stripe}}, "which is disabled."},
		{"no connector", url.Values{"form": {"ordered"}, "connector": {""}}, "default needs connectors (in order) or a split."},
		{"a weight out of range", url.Values{"form": {"split"}, "split_connector": {server, backup}, "split_weight": {"5000", "1"}}, "weights must be integers from 1 to 1000."},
		{"a weight that is no number", url.Values{"form": {"split"}, "split_connector": {server}, "split_weight": {"lots"}}, "Weights must be whole numbers"},
		{"another merchant's connector", url.Values{"form": {"json"}, "routing": {`{"default":{"connectors":["conn_0000000000000000000000000a"]}}`}},
			"which is not one of your connectors."},
		{"broken JSON", url.Values{"form": {"json"}, "routing": {`{"default":`}}, "The routing is not one valid JSON object"},
		{"an unknown field", url.Values{"form": {"json"}, "routing": {`{"default":{"connectors":["` + server + `"]},"fallback":true}`}}, "Received unknown parameter: fallback."},
		{"no default", url.Values{"form": {"json"}, "routing": {`{"rules":[]}`}}, "default"},
		{"an empty field", url.Values{"form": {"json"}, "routing": {"  "}}, "routing"},
	} {
		r := putRouting(tc.form)
		if r.status != 400 || !strings.Contains(r.body, `id="error"`) || !strings.Contains(r.body, tc.want) || !strings.Contains(r.body, `id="routing-json"`) {
			t.Errorf("%s: %d, want the routing page with 400 saying %q\n%.1500s", tc.name, r.status, tc.want, r.body)
		}
		if tc.form.Get("form") == "json" && strings.TrimSpace(tc.form.Get("routing")) != "" &&
			!strings.Contains(r.body, strings.ReplaceAll(tc.form.Get("routing"), `"`, "&#34;")) {
			t.Errorf("%s: the refused JSON is not in its field again", tc.name)
		}
	}
	if r := putRouting(url.Values{"form": {"yaml"}}); r.status != 400 {
		t.Errorf("form=yaml: %d, want 400", r.status)
	}
	if got := h.routingConfig(t, merchant); got != before {
		t.Errorf("refused routings changed it: %s, was %s", got, before)
	}

	// Deletion: not of a routed connector nor the server's; then the
	// stripe one, which is neither.
	for _, id := range []string{backup, server} {
		page := d.get("/dashboard/connectors/" + id)
		if strings.Contains(page.body, `id="delete-connector"`) {
			t.Errorf("the page of %s offers to delete it", id)
		}
		if r := d.post("/dashboard/connectors/"+id+"/delete", nil); r.status != 409 || !strings.Contains(r.body, "invalid_state") ||
			!strings.Contains(r.body, `href="/dashboard/connectors/`+id+`"`) {
			t.Errorf("delete %s: %d, want 409 with a way back to its page\n%.800s", id, r.status, r.body)
		}
	}
	if page := d.get("/dashboard/connectors/" + stripe); !strings.Contains(page.body, `id="delete-connector"`) {
		t.Error("the stripe connector's page does not offer to delete it")
	}
	r = d.post("/dashboard/connectors/"+stripe+"/delete", nil)
	if r.status != 303 || r.location != "/dashboard/connectors?notice=conn_deleted" || !h.connectorRow(t, stripe).Deleted {
		t.Fatalf("delete the stripe connector: %d to %q", r.status, r.location)
	}
	if got := rowsOf(d.get("/dashboard/connectors").body, "data-connector"); !slices.Equal(got, []string{backup, server}) {
		t.Errorf("the list after the deletion: %v", got)
	}
	if p := d.get("/dashboard/connectors/" + stripe); p.status != 404 {
		t.Errorf("the deleted connector's page: %d, want 404", p.status)
	}

	// Another merchant: 404 on the connector's page and forms, and its own
	// list and routing name none of these.
	other := h.dashClientSignedIn(t, "lee@example.com")
	for _, p := range []dashPage{
		other.get("/dashboard/connectors/" + backup),
		other.post("/dashboard/connectors/"+backup+"/enabled", url.Values{"enabled": {"false"}}),
		other.post("/dashboard/connectors/"+backup+"/rehearsal", url.Values{"unavailable": {"on"}}),
		other.post("/dashboard/connectors/"+backup+"/delete", nil),
	} {
		if p.status != 404 || strings.Contains(p.body, backup) || strings.Contains(p.body, "Backup sandbox") {
			t.Errorf("another merchant on the connector: %d\n%.400s", p.status, p.body)
		}
	}
	for _, p := range []string{"/dashboard/connectors", "/dashboard/routing"} {
		if body := other.get(p).body; strings.Contains(body, backup) || strings.Contains(body, server) {
			t.Errorf("another merchant's %s names this merchant's connectors", p)
		}
	}
	if row := h.connectorRow(t, backup); !row.Enabled || row.Sandbox["unavailable"] != false || row.Deleted {
		t.Errorf("another merchant's forms changed the connector: %+v", row)
	}

	// The forms need the session's CSRF token.
	own := d.csrf
	d.csrf = ""
	for _, p := range []string{"/dashboard/connectors", "/dashboard/connectors/" + backup + "/enabled", "/dashboard/connectors/" + backup + "/rehearsal",
		"/dashboard/connectors/" + backup + "/delete", "/dashboard/routing"} {
		if r := d.post(p, url.Values{"provider": {"sandbox"}, "name": {"csrf"}, "enabled": {"false"}, "form": {"ordered"}, "connector": {backup}}); r.status != 403 ||
			!strings.Contains(r.body, "csrf_token_invalid") {
			t.Errorf("POST %s without the token: %d", p, r.status)
		}
	}
	d.csrf = own
	if n := h.count(t, `SELECT count(*) FROM connectors WHERE name = 'csrf'`); n != 0 || !h.connectorRow(t, backup).Enabled {
		t.Errorf("forms without the token changed something: %d created, enabled %v", n, h.connectorRow(t, backup).Enabled)
	}

	// An Adyen connector from the form: its keys are sealed, and its page
	// shows the notification URL to set at Adyen, never the keys.
	const adyenKey, hmacKey = "AQEyhmfxDashboardAdyenKeyNeverShown", "44782DEF547AAA06C910C43932B1EB0C71FC68D9D0C057550C48EC2ACF6BA056"
	adyen := createdID(create(url.Values{"provider": {"adyen"}, "name": {"Adyen EU"}, "enabled": {"on"}, "api_key": {adyenKey},
		"merchant_account": {"GatehouseECOM"}, "hmac_key": {hmacKey}}))
	if row := h.connectorRow(t, adyen); row.Sealed == nil || strings.Contains(string(row.Sealed), adyenKey) || strings.Contains(string(row.Sealed), hmacKey) {
		t.Errorf("the adyen connector as stored: sealed %d bytes, plain text %v", len(row.Sealed), strings.Contains(string(row.Sealed), adyenKey))
	}
	page = d.get("/dashboard/connectors/" + adyen)
	if page.status != 200 || !strings.Contains(page.body, "/v1/provider_notifications/"+adyen) ||
		strings.Contains(page.body, adyenKey) || strings.Contains(page.body, hmacKey) || !strings.Contains(page.body, "No notification has arrived yet.") {
		t.Errorf("the adyen connector's page: %d\n%.3000s", page.status, page.body)
	}
	if r := create(url.Values{"provider": {"adyen"}, "name": {"No HMAC"}, "api_key": {adyenKey}, "merchant_account": {"M"}}); r.status != 400 ||
		!strings.Contains(r.body, "credentials.hmac_key") || strings.Contains(r.body, adyenKey) {
		t.Errorf("an adyen connector without its HMAC key: %d\n%.800s", r.status, r.body)
	}
}

// TestDashboardConnectorStats: a connector's page shows its attempts of
// the charges created in the last 24 hours: how many, the success rate of
// those that ended, the median and 99th percentile of their durations, and
// the failure codes; older charges and other connectors do not count.
func TestDashboardConnectorStats(t *testing.T) {
	t.Parallel()
	h := newHarness(t, paymentsEnv)
	merchant := h.merchant("max@example.com", matrixPassword)
	d := h.dashClientSignedIn(t, "max@example.com")
	conn := h.sandboxConnector(t, merchant, "Primary")
	other := h.sandboxConnector(t, merchant, "Secondary")

	empty := d.get("/dashboard/connectors/" + conn)
	if empty.status != 200 || !strings.Contains(empty.body, `<span class="value" id="stat-attempts">0</span>`) ||
		!strings.Contains(empty.body, `<span class="value" id="stat-rate">—</span>`) || !strings.Contains(empty.body, "No failed attempts since") {
		t.Fatalf("a connector without attempts: %d\n%.3000s", empty.status, empty.body)
	}
	checkDashboardHeaders(t, "the connector's page", empty)

	now := time.Now().UTC()
	charge := func(created time.Time, attempts ...charges.Attempt) {
		t.Helper()
		body, err := json.Marshal(attempts)
		if err != nil {
			t.Fatal(err)
		}
		id := ids.UUIDFloor(created)
		id = id[:24] + ids.NewUUID()[24:] // the moment's UUIDv7, random in its tail
		if _, err := h.db.Pool.Exec(context.Background(), `INSERT INTO charges (id, merchant_id, environment, amount, currency, status,
				payment_method, capture, card_brand, provider, created_at, updated_at, attempts, connector_id)
			VALUES ($1, $2, 'sandbox', 2000, 'USD', 'captured', 'card', true, 'visa', 'sandbox', $3, $3, $4, $5)`,
			id, merchant, created, body, attempts[len(attempts)-1].Connector); err != nil {
			t.Fatal(err)
		}
	}
	attempt := func(connector, status, code string, started time.Time, took time.Duration) charges.Attempt {
		a := charges.Attempt{Connector: connector, Provider: "sandbox", Status: status, StartedAt: started}
		if code != "" {
			a.FailureCode = &code
		}
		if took > 0 {
			end := started.Add(took)
			a.EndedAt = &end
		}
		return a
	}
	at := now.Add(-2 * time.Hour)
	charge(at, attempt(conn, "succeeded", "", at, 100*time.Millisecond))
	charge(at, attempt(conn, "succeeded", "", at, 200*time.Millisecond))
	charge(at, attempt(conn, "failed", "processing_error", at, 300*time.Millisecond), attempt(other, "succeeded", "", at, 2*time.Second))
	charge(now, attempt(conn, "unknown", "", now, 0))
	old := now.Add(-25 * time.Hour)
	charge(old, attempt(conn, "failed", "card_declined", old, time.Second))

	page := d.get("/dashboard/connectors/" + conn)
	for _, s := range []string{
		`data-attempts="4" data-succeeded="2" data-failed="1"`,
		`<span class="value" id="stat-attempts">4</span>`,
		"2 succeeded · 1 failed · 1 under way",
		`<span class="value" id="stat-rate">66.7%</span>`,
		`<span class="value" id="stat-p50">200 ms</span>`,
		`<span class="value" id="stat-p99">298 ms</span>`,
		`<tr data-failure-code="processing_error"><td><code>processing_error</code></td><td class="num">1</td></tr>`,
	} {
		if !strings.Contains(page.body, s) {
			t.Errorf("the connector's page lacks %q", s)
		}
	}
	if strings.Contains(page.body, `data-failure-code="card_declined"`) {
		t.Error("the connector's page counts a charge older than 24 hours")
	}
	if page := d.get("/dashboard/connectors/" + other); !strings.Contains(page.body, `<span class="value" id="stat-attempts">1</span>`) ||
		!strings.Contains(page.body, `<span class="value" id="stat-rate">100.0%</span>`) || !strings.Contains(page.body, `id="stat-p50">2.00 s</span>`) {
		t.Errorf("the other connector's page\n%.3000s", page.body)
	}
}
