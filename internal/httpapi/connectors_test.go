package httpapi_test

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
)

// stripeTestKey is a Stripe secret key of a connector: it must never come
// back in an answer nor be stored in clear.
const stripeTestKey = "sk_test_51QxYzConnectorSecretNeverShown"

// newConnector creates a connector and returns its answer.
func (h *harness) newConnector(t *testing.T, secret, body string, headers ...string) response {
	t.Helper()
	r := h.with(t).do("POST", "/v1/connectors", body, append(bearer(secret), headers...)...)
	want(t, r, 201, "")
	return r
}

// api/openapi.yaml, tag routing: connectors are created (idempotently),
// listed with the server-account ones, read, patched and deleted; the
// credentials never come back; bad bodies answer 400 naming the field.
func TestConnectors(t *testing.T) {
	t.Parallel()
	h := newHarness(t, paymentsEnv)
	a := h.account("ada@example.com")
	auth := bearer(a.secret)

	// The first list creates the server-account sandbox connector.
	list := h.do("GET", "/v1/connectors", "", auth...)
	want(t, list, 200, "")
	data := list.body["data"].([]any)
	if len(data) != 1 || obj(data[0])["name"] != "Sandbox" || obj(data[0])["server_account"] != true ||
		obj(data[0])["provider"] != "sandbox" || obj(data[0])["has_credentials"] != false {
		t.Fatalf("first list: %s", list.raw)
	}
	server := obj(data[0])["id"].(string)

	body := `{"provider":"stripe","name":" Stripe EU ","credentials":{"secret_key":"` + stripeTestKey + `"}}`
	key := []string{"Idempotency-Key", "connector-1"}
	stripe := h.newConnector(t, a.secret, body, key...)
	replay := h.newConnector(t, a.secret, body, key...)
	if replay.header.Get("Idempotent-Replayed") != "true" || !bytes.Equal(replay.raw, stripe.raw) {
		t.Fatalf("replay: %s, first %s", replay.raw, stripe.raw)
	}
	want(t, h.do("POST", "/v1/connectors", `{"provider":"sandbox","name":"Other"}`, append(auth, key...)...), 422, "idempotency_key_reused")
	eu := stripe.body["id"].(string)
	if !strings.HasPrefix(eu, "conn_") || stripe.body["name"] != "Stripe EU" || stripe.body["has_credentials"] != true ||
		stripe.body["server_account"] != false || stripe.body["enabled"] != true {
		t.Fatalf("stripe connector: %s", stripe.raw)
	}
	if _, ok := stripe.body["sandbox"]; ok {
		t.Errorf("a stripe connector shows sandbox settings: %s", stripe.raw)
	}
	if n := h.count(t, `SELECT count(*) FROM connectors WHERE merchant_id = $1 AND position($2::bytea in credentials_sealed) > 0`,
		a.merchantID, []byte(stripeTestKey)); n != 0 {
		t.Errorf("%d connectors hold the secret key in clear", n)
	}
	h.noClearSecrets(t)

	rehearsal := h.newConnector(t, a.secret, `{"provider":"sandbox","name":"Rehearsal","enabled":false,"sandbox":{"unavailable":true,"latency_ms":20}}`)
	reh := rehearsal.body["id"].(string)
	if sb := obj(rehearsal.body["sandbox"]); rehearsal.body["enabled"] != false || sb["unavailable"] != true ||
		sb["decline_code"] != nil || sb["latency_ms"] != 20.0 {
		t.Fatalf("sandbox connector: %s", rehearsal.raw)
	}

	list = h.do("GET", "/v1/connectors?limit=2", "", auth...)
	if got := idsOf(list); len(got) != 2 || got[0] != reh || got[1] != eu || list.body["has_more"] != true {
		t.Fatalf("first page: %s", list.raw)
	}
	if got := idsOf(h.do("GET", "/v1/connectors?starting_after="+eu, "", auth...)); len(got) != 1 || got[0] != server {
		t.Fatalf("after %s: %v", eu, got)
	}
	for _, r := range []response{list, h.do("GET", "/v1/connectors/"+eu, "", auth...)} {
		_, one := r.body["credentials"]
		if strings.Contains(string(r.raw), stripeTestKey) || strings.Contains(string(r.raw), `{"credentials"`) || one {
			t.Errorf("an answer carries the credentials: %s", r.raw)
		}
	}
	want(t, h.do("GET", "/v1/connectors?starting_after=cus_06h0v2q41dpr8nmntjqkrr9c00", "", auth...), 400, "parameter_invalid")

	// A patch changes what it names; the sandbox settings it leaves out stay.
	p := h.do("PATCH", "/v1/connectors/"+reh, `{"enabled":true,"sandbox":{"decline_code":"processing_error"}}`, auth...)
	want(t, p, 200, "")
	if sb := obj(p.body["sandbox"]); p.body["enabled"] != true || sb["unavailable"] != true || sb["decline_code"] != "processing_error" || sb["latency_ms"] != 20.0 {
		t.Fatalf("patched: %s", p.raw)
	}
	p = h.do("PATCH", "/v1/connectors/"+reh, `{"sandbox":{"decline_code":null,"unavailable":false}}`, auth...)
	if sb := obj(p.body["sandbox"]); sb["unavailable"] != false || sb["decline_code"] != nil || sb["latency_ms"] != 20.0 {
		t.Fatalf("cleared: %s", p.raw)
	}
	p = h.do("PATCH", "/v1/connectors/"+eu, `{"credentials":{"secret_key":"rk_test_abc"},"name":"Stripe EU (main)"}`, auth...)
	if p.status != 200 || p.body["name"] != "Stripe EU (main)" || p.body["has_credentials"] != true {
		t.Fatalf("new credentials: %s", p.raw)
	}

	bad := []struct {
		name, method, path, body, code, param string
	}{
		{"no provider", "POST", "/v1/connectors", `{"name":"x"}`, "parameter_missing", "provider"},
		{"unknown provider", "POST", "/v1/connectors", `{"provider":"worldpay","name":"x"}`, "parameter_invalid", "provider"},
		{"adyen without credentials", "POST", "/v1/connectors", `{"provider":"adyen","name":"x"}`, "parameter_missing", "credentials"},
		{"adyen without an hmac key", "POST", "/v1/connectors", `{"provider":"adyen","name":"x","credentials":{"api_key":"k","merchant_account":"M"}}`, "parameter_missing", "credentials.hmac_key"},
		{"adyen with a key that is not hex", "POST", "/v1/connectors", `{"provider":"adyen","name":"x","credentials":{"api_key":"k","merchant_account":"M","hmac_key":"xyz"}}`, "parameter_invalid", "credentials.hmac_key"},
		{"adyen with a user and no password", "POST", "/v1/connectors", `{"provider":"adyen","name":"x","credentials":{"api_key":"k","merchant_account":"M","hmac_key":"` + strings.Repeat("AB", 32) + `","notification_username":"u"}}`, "parameter_invalid", "credentials.notification_username"},
		{"no name", "POST", "/v1/connectors", `{"provider":"sandbox"}`, "parameter_missing", "name"},
		{"blank name", "POST", "/v1/connectors", `{"provider":"sandbox","name":"  "}`, "parameter_invalid", "name"},
		{"long name", "POST", "/v1/connectors", `{"provider":"sandbox","name":"` + strings.Repeat("é", 101) + `"}`, "parameter_invalid", "name"},
		{"stripe without credentials", "POST", "/v1/connectors", `{"provider":"stripe","name":"x"}`, "parameter_missing", "credentials"},
		{"stripe with a publishable key", "POST", "/v1/connectors", `{"provider":"stripe","name":"x","credentials":{"secret_key":"pk_test_1"}}`, "parameter_invalid", "credentials.secret_key"},
		{"stripe with another credential", "POST", "/v1/connectors", `{"provider":"stripe","name":"x","credentials":{"secret_key":"sk_test_1","account":"a"}}`, "parameter_invalid", "credentials.account"},
		{"stripe with sandbox settings", "POST", "/v1/connectors", `{"provider":"stripe","name":"x","credentials":{"secret_key":"sk_test_1"},"sandbox":{}}`, "parameter_invalid", "sandbox"},
		{"sandbox with credentials", "POST", "/v1/connectors", `{"provider":"sandbox","name":"x","credentials":{"secret_key":"sk_test_1"}}`, "parameter_invalid", "credentials"},
		{"unknown decline", "POST", "/v1/connectors", `{"provider":"sandbox","name":"x","sandbox":{"decline_code":"nope"}}`, "parameter_invalid", "sandbox.decline_code"},
		{"negative latency", "POST", "/v1/connectors", `{"provider":"sandbox","name":"x","sandbox":{"latency_ms":-1}}`, "parameter_invalid", "sandbox.latency_ms"},
		{"latency above 5 s", "POST", "/v1/connectors", `{"provider":"sandbox","name":"x","sandbox":{"latency_ms":5001}}`, "parameter_invalid", "sandbox.latency_ms"},
		{"latency as a string", "POST", "/v1/connectors", `{"provider":"sandbox","name":"x","sandbox":{"latency_ms":"5"}}`, "parameter_invalid", "sandbox.latency_ms"},
		{"unknown sandbox setting", "POST", "/v1/connectors", `{"provider":"sandbox","name":"x","sandbox":{"unavailabel":true}}`, "parameter_invalid", "sandbox.unavailabel"},
		{"sandbox setting in upper case", "POST", "/v1/connectors", `{"provider":"sandbox","name":"x","sandbox":{"LATENCY_MS":10}}`, "parameter_invalid", "sandbox.LATENCY_MS"},
		{"unknown sandbox setting in a patch", "PATCH", "/v1/connectors/" + reh, `{"sandbox":{"bogus":1}}`, "parameter_invalid", "sandbox.bogus"},
		{"sandbox settings of a stripe connector", "PATCH", "/v1/connectors/" + eu, `{"sandbox":{"unavailable":true}}`, "parameter_invalid", "sandbox"},
		{"credentials of a server account", "PATCH", "/v1/connectors/" + server, `{"credentials":{"secret_key":"sk_test_1"}}`, "parameter_invalid", "credentials"},
		{"empty credentials of a stripe connector", "PATCH", "/v1/connectors/" + eu, `{"credentials":{}}`, "parameter_missing", "credentials.secret_key"},
		{"read-only provider", "PATCH", "/v1/connectors/" + eu, `{"provider":"sandbox"}`, "parameter_invalid", "provider"},
		{"blank name in a patch", "PATCH", "/v1/connectors/" + eu, `{"name":""}`, "parameter_invalid", "name"},
	}
	before := h.state(t, "")
	for _, c := range bad {
		r := h.with(t).do(c.method, c.path, c.body, auth...)
		if r.status != 400 || r.errCode() != c.code || r.errField("param") != c.param {
			t.Errorf("%s: %d %s, want 400 %s param %s", c.name, r.status, r.raw, c.code, c.param)
		}
	}
	if diff := stateDiff(before, h.state(t, "")); diff != "" {
		t.Errorf("refused bodies changed the database: %s", diff)
	}

	// Deletion: not of a server account, not while the routing names it.
	want(t, h.do("DELETE", "/v1/connectors/"+server, "", auth...), 409, "invalid_state")
	want(t, h.do("PUT", "/v1/routing", `{"default":{"split":[{"connector":"`+reh+`","weight":1}]}}`, auth...), 200, "")
	want(t, h.do("DELETE", "/v1/connectors/"+reh, "", auth...), 409, "invalid_state")
	want(t, h.do("PUT", "/v1/routing", `{"default":{"connectors":["`+server+`"]}}`, auth...), 200, "")
	del := h.do("DELETE", "/v1/connectors/"+reh, "", auth...)
	if del.status != 200 || del.body["id"] != reh || del.body["deleted"] != true || del.body["object"] != "connector" {
		t.Fatalf("delete: %d %s", del.status, del.raw)
	}
	for _, m := range []string{"GET", "PATCH", "DELETE"} {
		want(t, h.do(m, "/v1/connectors/"+reh, map[bool]string{true: `{"name":"x"}`}[m == "PATCH"], auth...), 404, "not_found")
	}
	if got := idsOf(h.do("GET", "/v1/connectors", "", auth...)); len(got) != 2 || got[0] != eu || got[1] != server {
		t.Errorf("after the deletion the list is %v, want [%s %s]", got, eu, server)
	}
	// The routing cannot name it any more.
	r := h.do("PUT", "/v1/routing", `{"default":{"connectors":["`+reh+`"]}}`, auth...)
	want(t, r, 400, "parameter_invalid")
	if r.errField("param") != "default" {
		t.Errorf("routing naming a deleted connector: %s", r.raw)
	}
}

// api/openapi.yaml, PUT /v1/routing: the server's default until the merchant
// sets one; rules and splits checked against the merchant's connectors and
// normalized; charges follow the routing, a named connector or provider.
func TestRouting(t *testing.T) {
	t.Parallel()
	h := newHarness(t, paymentsEnv)
	a := h.account("ada@example.com")
	auth := bearer(a.secret)

	def := h.do("GET", "/v1/routing", "", auth...)
	want(t, def, 200, "")
	dc, _ := obj(def.body["default"])["connectors"].([]any)
	if def.body["object"] != "routing" || def.body["updated_at"] != nil || len(def.body["rules"].([]any)) != 0 || len(dc) != 1 {
		t.Fatalf("default routing: %s", def.raw)
	}
	server := dc[0].(string)
	one := h.newConnector(t, a.secret, `{"provider":"sandbox","name":"One"}`).body["id"].(string)
	two := h.newConnector(t, a.secret, `{"provider":"sandbox","name":"Two"}`).body["id"].(string)
	off := h.newConnector(t, a.secret, `{"provider":"sandbox","name":"Off","enabled":false}`).body["id"].(string)

	put := h.do("PUT", "/v1/routing", `{"rules":[{"if":{"currency":["eur"," gbp"],"card_brand":["VISA"],"amount_gte":100,"amount_lte":100000},"then":{"connectors":["`+two+`","`+one+`"]}}],`+
		`"default":{"split":[{"connector":"`+one+`","weight":70},{"connector":"`+server+`","weight":30}]}}`, auth...)
	want(t, put, 200, "")
	cond := obj(obj(put.body["rules"].([]any)[0])["if"])
	if fmt.Sprint(cond["currency"]) != "[EUR GBP]" || fmt.Sprint(cond["card_brand"]) != "[visa]" || put.body["updated_at"] == nil {
		t.Errorf("routing not normalized: %s", put.raw)
	}
	if got := h.do("GET", "/v1/routing", "", auth...); !bytes.Equal(got.raw, put.raw) {
		t.Errorf("GET answers %s, PUT answered %s", got.raw, put.raw)
	}

	// A charge that matches the rule goes to its first connector.
	eur := h.createCharge(t, a.secret, chargeJSON(set("currency", "eur"), set("amount", 5000)))
	if eur.body["connector"] != two || eur.body["provider"] != "sandbox" {
		t.Errorf("a EUR visa charge went to %v, want %s: %s", eur.body["connector"], two, eur.raw)
	}
	// Others take the split: its first pick is one of the two.
	for i := 0; i < 5; i++ {
		c := h.createCharge(t, a.secret, chargeJSON())
		if c.body["connector"] != one && c.body["connector"] != server {
			t.Errorf("a USD charge went to %v, outside the split", c.body["connector"])
		}
	}
	named := h.createCharge(t, a.secret, chargeJSON(set("connector", one), set("currency", "eur")))
	if named.body["connector"] != one {
		t.Errorf("a charge naming %s went to %v", one, named.body["connector"])
	}
	byProvider := h.createCharge(t, a.secret, chargeJSON(set("provider", "sandbox")))
	if byProvider.body["connector"] != server {
		t.Errorf("a charge naming the sandbox went to %v, want the first enabled sandbox connector %s", byProvider.body["connector"], server)
	}

	bad := []struct {
		name, method, path, body, code, param string
	}{
		{"no default", "PUT", "/v1/routing", `{"rules":[]}`, "parameter_missing", "default"},
		{"empty route", "PUT", "/v1/routing", `{"default":{}}`, "parameter_invalid", "default"},
		{"both forms", "PUT", "/v1/routing", `{"default":{"connectors":["` + one + `"],"split":[{"connector":"` + two + `","weight":1}]}}`, "parameter_invalid", "default"},
		{"disabled connector", "PUT", "/v1/routing", `{"default":{"connectors":["` + off + `"]}}`, "parameter_invalid", "default"},
		{"unknown connector", "PUT", "/v1/routing", `{"default":{"connectors":["conn_00000000000000000000000000"]}}`, "parameter_invalid", "default"},
		{"named twice", "PUT", "/v1/routing", `{"default":{"connectors":["` + one + `","` + one + `"]}}`, "parameter_invalid", "default"},
		{"weight 0", "PUT", "/v1/routing", `{"default":{"split":[{"connector":"` + one + `","weight":0}]}}`, "parameter_invalid", "default.split"},
		{"weight 1001", "PUT", "/v1/routing", `{"default":{"split":[{"connector":"` + one + `","weight":1001}]}}`, "parameter_invalid", "default.split"},
		{"11 connectors", "PUT", "/v1/routing", `{"default":{"connectors":[` + strings.TrimSuffix(strings.Repeat(`"`+one+`",`, 11), ",") + `]}}`, "parameter_invalid", "default"},
		{"51 rules", "PUT", "/v1/routing", `{"rules":[` + strings.TrimSuffix(strings.Repeat(`{"if":{},"then":{"connectors":["`+one+`"]}},`, 51), ",") + `],"default":{"connectors":["` + one + `"]}}`, "parameter_invalid", "rules"},
		{"bad currency", "PUT", "/v1/routing", `{"rules":[{"if":{"currency":["EURO"]},"then":{"connectors":["` + one + `"]}}],"default":{"connectors":["` + one + `"]}}`, "parameter_invalid", "rules[0].if.currency"},
		{"bad brand", "PUT", "/v1/routing", `{"rules":[{"if":{"card_brand":["diners"]},"then":{"connectors":["` + one + `"]}}],"default":{"connectors":["` + one + `"]}}`, "parameter_invalid", "rules[0].if.card_brand"},
		{"negative amount", "PUT", "/v1/routing", `{"rules":[{"if":{"amount_lte":-1},"then":{"connectors":["` + one + `"]}}],"default":{"connectors":["` + one + `"]}}`, "parameter_invalid", "rules[0].if"},
		{"amounts crossed", "PUT", "/v1/routing", `{"rules":[{"if":{"amount_gte":10,"amount_lte":9},"then":{"connectors":["` + one + `"]}}],"default":{"connectors":["` + one + `"]}}`, "parameter_invalid", "rules[0].if.amount_gte"},
		{"rule without route", "PUT", "/v1/routing", `{"rules":[{"if":{}}],"default":{"connectors":["` + one + `"]}}`, "parameter_invalid", "rules[0].then"},
		{"unknown field in a rule", "PUT", "/v1/routing", `{"rules":[{"if":{},"then":{"connectors":["` + one + `"]},"else":{}}],"default":{"connectors":["` + one + `"]}}`, "parameter_invalid", "rules[0].else"},
		{"rule field in upper case", "PUT", "/v1/routing", `{"rules":[{"IF":{},"then":{"connectors":["` + one + `"]}}],"default":{"connectors":["` + one + `"]}}`, "parameter_invalid", "rules[0].IF"},
		{"condition field in other case", "PUT", "/v1/routing", `{"rules":[{"if":{"Currency":["EUR"]},"then":{"connectors":["` + one + `"]}}],"default":{"connectors":["` + one + `"]}}`, "parameter_invalid", "rules[0].if.Currency"},
		{"split field in upper case", "PUT", "/v1/routing", `{"default":{"split":[{"connector":"` + one + `","WEIGHT":1}]}}`, "parameter_invalid", "default.split[0].WEIGHT"},
		{"weight as a string", "PUT", "/v1/routing", `{"default":{"split":[{"connector":"` + one + `","weight":"1"}]}}`, "parameter_invalid", "default.split.weight"},
		{"read-only updated_at", "PUT", "/v1/routing", `{"default":{"connectors":["` + one + `"]},"updated_at":null}`, "parameter_invalid", "updated_at"},
		{"charge naming a connector and a provider", "POST", "/v1/charges", chargeJSON(set("connector", one), set("provider", "sandbox")), "parameter_invalid", "connector"},
		{"charge naming a disabled connector", "POST", "/v1/charges", chargeJSON(set("connector", off)), "parameter_invalid", "connector"},
		{"charge naming no connector", "POST", "/v1/charges", chargeJSON(set("connector", "one")), "parameter_invalid", "connector"},
		{"charge naming a provider without a connector", "POST", "/v1/charges", chargeJSON(set("provider", "stripe")), "parameter_invalid", "provider"},
	}
	before := h.state(t, "")
	for _, c := range bad {
		r := h.with(t).do(c.method, c.path, c.body, auth...)
		if r.status != 400 || r.errCode() != c.code || r.errField("param") != c.param {
			t.Errorf("%s: %d %s, want 400 %s param %s", c.name, r.status, r.raw, c.code, c.param)
		}
	}
	if diff := stateDiff(before, h.state(t, "")); diff != "" {
		t.Errorf("refused bodies changed the database: %s", diff)
	}

	// With every connector of its route disabled, a charge has nowhere to go.
	want(t, h.do("PUT", "/v1/routing", `{"default":{"connectors":["`+one+`"]}}`, auth...), 200, "")
	want(t, h.do("PATCH", "/v1/connectors/"+one, `{"enabled":false}`, auth...), 200, "")
	want(t, h.do("POST", "/v1/charges", chargeJSON(), auth...), 409, "invalid_state")
	if n := h.count(t, `SELECT count(*) FROM charges WHERE merchant_id = $1 AND connector_id = $2 AND status = 'created'`, a.merchantID, one); n == 0 {
		t.Errorf("no earlier charge kept connector %s", one)
	}
	var routed int
	if err := h.db.Pool.QueryRow(context.Background(), `SELECT count(*) FROM charges WHERE merchant_id = $1 AND connector_id IS NULL`, a.merchantID).Scan(&routed); err != nil || routed != 0 {
		t.Errorf("%d charges without a connector (%v), want 0", routed, err)
	}
}

// Live mode is not activated: a connector never takes live-mode
// credentials (Stripe's sk_live_, rk_live_, pk_live_), on creation or in a
// patch, whatever else the body says: 403 live_mode_disabled with the
// contract's message, and nothing is stored.
func TestConnectorsRefuseLiveCredentials(t *testing.T) {
	t.Parallel()
	h := newHarness(t, paymentsEnv)
	a := h.account("live@example.com")
	auth := bearer(a.secret)
	own := h.newConnector(t, a.secret, `{"provider":"stripe","name":"Own","credentials":{"secret_key":"`+stripeTestKey+`"}}`).body["id"].(string)
	server := idsOf(h.do("GET", "/v1/connectors?limit=100", "", auth...))
	before := h.state(t, "")
	sealed := func() string {
		var s string
		if err := h.db.Pool.QueryRow(context.Background(), `SELECT encode(credentials_sealed, 'hex') || updated_at::text FROM connectors WHERE id = $1`, own).Scan(&s); err != nil {
			t.Fatal(err)
		}
		return s
	}
	was := sealed()
	for _, c := range []struct{ method, path, body string }{
		{"POST", "/v1/connectors", `{"provider":"stripe","name":"Live","credentials":{"secret_key":"sk_live_51QxYzLiveKey"}}`},
		{"POST", "/v1/connectors", `{"provider":"stripe","name":"Live","credentials":{"secret_key":"rk_live_51QxYzLiveKey"}}`},
		{"POST", "/v1/connectors", `{"provider":"stripe","name":"Live","credentials":{"secret_key":" SK_LIVE_51QxYzLiveKey "}}`},
		{"POST", "/v1/connectors", `{"provider":"stripe","name":"Live","credentials":{"secret_key":"pk_live_51QxYzLiveKey"}}`},
		{"POST", "/v1/connectors", `{"provider":"stripe","name":"","credentials":{"secret_key":"sk_live_51QxYzLiveKey"}}`},
		{"POST", "/v1/connectors", `{"provider":"sandbox","name":"Live","credentials":{"secret_key":"sk_live_51QxYzLiveKey"}}`},
		{"PATCH", "/v1/connectors/" + own, `{"credentials":{"secret_key":"sk_live_51QxYzLiveKey"}}`},
		{"PATCH", "/v1/connectors/" + own, `{"credentials":{"secret_key":"rk_live_51QxYzLiveKey"},"name":"Renamed"}`},
		{"PATCH", "/v1/connectors/" + server[len(server)-1], `{"credentials":{"secret_key":"sk_live_51QxYzLiveKey"}}`},
	} {
		r := h.with(t).do(c.method, c.path, c.body, auth...)
		if r.status != 403 || r.errCode() != "live_mode_disabled" || r.errField("message") != "Live mode is not activated" {
			t.Errorf("%s %s %s: %d %s, want 403 live_mode_disabled", c.method, c.path, c.body, r.status, r.raw)
		}
	}
	if diff := stateDiff(before, h.state(t, "")); diff != "" {
		t.Errorf("live credentials changed the database: %s", diff)
	}
	if now := sealed(); now != was {
		t.Error("a patch with live credentials changed the connector's credentials")
	}
	if r := h.do("GET", "/v1/connectors/"+own, "", auth...); r.body["name"] != "Own" {
		t.Errorf("after the refused patches: %s", r.raw)
	}
}

// On a server-account connector (the server's own account at its
// provider) card.token takes only the merchant's own card tokens and the
// provider's documented test tokens: any other provider token could name an
// object of the operator's account. It is refused before any provider call
// and nothing is created. A merchant's own Stripe connector takes tokens
// of its own account.
func TestServerAccountTakesOnlyTestTokens(t *testing.T) {
	t.Parallel()
	h := newHarness(t, paymentsEnv)
	a := h.account("tok@example.com")
	auth := bearer(a.secret)
	own := h.newConnector(t, a.secret, `{"provider":"stripe","name":"Own","credentials":{"secret_key":"`+stripeTestKey+`"}}`).body["id"].(string)
	want(t, h.do("GET", "/v1/connectors", "", auth...), 200, "") // makes the server-account connectors
	before := h.state(t, "")
	for _, tok := range []string{"pm_1QxGh1LkdIwHu7ixkq9V3wLs", "pm_card_visa_x", "tok_1QxGh1LkdIwHu7ix", "card_1QxGh1LkdIwHu7ix", "src_1QxGh1Lkd", "cus_QxGh1Lkd"} {
		r := h.with(t).do("POST", "/v1/charges", chargeJSON(token(tok)), auth...)
		if r.status != 400 || r.errCode() != "parameter_invalid" || r.errField("param") != "card.token" {
			t.Errorf("card.token %s on the server's account: %d %s, want 400 parameter_invalid card.token", tok, r.status, r.raw)
		}
	}
	if diff := stateDiff(before, h.state(t, "")); diff != "" {
		t.Errorf("refused tokens changed the database: %s", diff)
	}
	for _, tok := range []string{"pm_card_visa", "tok_mastercard", "pm_card_chargeDeclinedInsufficientFunds"} {
		h.createCharge(t, a.secret, chargeJSON(token(tok)))
	}
	c := h.createCharge(t, a.secret, chargeJSON(token("pm_1QxGh1LkdIwHu7ixkq9V3wLs"), set("connector", own)))
	if c.body["connector"] != own {
		t.Errorf("a token of the merchant's own Stripe account: %s", c.raw)
	}
}

// An Adyen connector takes IDR and CVE in whole units: a charge it would
// take first with an amount Adyen's unit cannot carry is refused with 400
// (param amount) and nothing is stored; as a fallback, such a connector is
// left out of the charge's route.
func TestAdyenAmountsItCannotCarry(t *testing.T) {
	t.Parallel()
	h := newHarness(t, paymentsEnv)
	a := h.account("ada@example.com")
	auth := bearer(a.secret)
	ady := h.newConnector(t, a.secret, `{"provider":"adyen","name":"Adyen","credentials":{"api_key":"AQEkey","merchant_account":"M","hmac_key":"`+
		strings.Repeat("AB", 32)+`"}}`).body["id"].(string)
	sb := h.newConnector(t, a.secret, `{"provider":"sandbox","name":"One"}`).body["id"].(string)

	for _, c := range []struct {
		currency string
		amount   int
	}{{"idr", 12345}, {"IDR", 101}, {"cve", 250}} {
		r := h.do("POST", "/v1/charges", chargeJSON(set("connector", ady), set("currency", c.currency), set("amount", c.amount)), auth...)
		want(t, r, 400, "parameter_invalid")
		if r.errField("param") != "amount" || !strings.Contains(r.errField("message"), "whole units") {
			t.Errorf("%d %s at Adyen: %s, want param amount and why", c.amount, c.currency, r.raw)
		}
	}
	if n := h.count(t, `SELECT count(*) FROM charges WHERE merchant_id = $1`, a.merchantID); n != 0 {
		t.Errorf("refused charges stored: %d", n)
	}
	whole := h.createCharge(t, a.secret, chargeJSON(set("connector", ady), set("currency", "idr"), set("amount", 12300), set("capture", false)))
	if whole.body["connector"] != ady {
		t.Errorf("IDR 123.00 naming the Adyen connector went to %v: %s", whole.body["connector"], whole.raw)
	}
	// A capture and a refund of such an amount are refused the same way,
	// and change nothing; whole rupiah go through.
	id := whole.body["id"].(string)
	exec := func(sql string) {
		t.Helper()
		if _, err := h.db.Pool.Exec(context.Background(), sql, id); err != nil {
			t.Fatal(err)
		}
	}
	exec(`UPDATE charges SET status = 'authorized' WHERE id = $1`)
	r := h.do("POST", "/v1/charges/"+id+"/capture", `{"amount":12250}`, auth...)
	want(t, r, 400, "parameter_invalid")
	if r.errField("param") != "amount" || h.count(t, `SELECT count(*) FROM charges WHERE id = $1 AND pending_action IS NULL AND status = 'authorized'`, id) != 1 {
		t.Errorf("capture of IDR 122.50 at Adyen: %s; want 400 on amount and the charge unchanged", r.raw)
	}
	want(t, h.do("POST", "/v1/charges/"+id+"/capture", `{"amount":12200}`, auth...), 200, "")
	exec(`UPDATE charges SET status = 'captured', pending_action = NULL, amount_captured = 12200 WHERE id = $1`)
	r = h.do("POST", "/v1/refunds", `{"charge":"`+id+`","amount":50}`, auth...)
	want(t, r, 400, "parameter_invalid")
	if r.errField("param") != "amount" || h.count(t, `SELECT count(*) FROM refunds WHERE charge_id = $1`, id) != 0 {
		t.Errorf("refund of IDR 0.50 at Adyen: %s; want 400 on amount and no refund", r.raw)
	}
	want(t, h.do("POST", "/v1/refunds", `{"charge":"`+id+`","amount":100}`, auth...), 201, "")

	want(t, h.do("PUT", "/v1/routing", `{"default":{"connectors":["`+sb+`","`+ady+`"]}}`, auth...), 200, "")
	for amount, route := range map[int]string{12345: `["` + sb + `"]`, 12300: `["` + sb + `", "` + ady + `"]`} {
		c := h.createCharge(t, a.secret, chargeJSON(set("currency", "idr"), set("amount", amount)))
		var got string
		if err := h.db.Pool.QueryRow(context.Background(), `SELECT jsonb_path_query_array(route, '$[*].connector')::text FROM charges WHERE id = $1`,
			c.body["id"]).Scan(&got); err != nil {
			t.Fatal(err)
		}
		if got != route {
			t.Errorf("IDR %d routed [sandbox, adyen]: route %s, want %s", amount, got, route)
		}
	}
}
