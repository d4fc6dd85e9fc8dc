package httpapi_test

import (
	"context"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/gatehouse-pay/gatehouse/internal/providers/providertest"
	"github.com/gatehouse-pay/gatehouse/internal/store"
)

// auditLog lists the merchant's audit log through the API with query q.
func (h *harness) auditLog(t *testing.T, token, q string) []map[string]any {
	t.Helper()
	r := h.with(t).do("GET", "/v1/audit_log?limit=100&"+q, "", bearer(token)...)
	want(t, r, 200, "")
	var out []map[string]any
	for _, e := range r.body["data"].([]any) {
		out = append(out, obj(e))
	}
	return out
}

func TestAuditLogRecordsEveryChange(t *testing.T) {
	t.Parallel()
	h := newHarness(t, paymentsEnv)
	a := h.account("audit@example.com")
	w := h.worker(t, &providertest.Fake{})
	entries := func() int { return h.count(t, "SELECT count(*) FROM audit_log WHERE merchant_id = $1", a.merchantID) }
	// The account signed in (session.create), and made its key with the session.
	if n := entries(); n != 2 {
		t.Fatalf("%d entries after the sign-in and the key's creation, want 2", n)
	}

	ua := []string{"User-Agent", "audit-test/1.0"}
	with := func(reqID string, headers ...string) []string {
		return append(append(append(bearer(a.secret), ua...), "X-Request-Id", reqID), headers...)
	}

	// Payment traffic made with a key (charges, captures, voids, refunds)
	// is recorded by its own objects and events, not in the audit log.
	charge := h.with(t).do("POST", "/v1/charges", chargeJSON(set("amount", 1500)), with("req-charge")...)
	want(t, charge, 201, "")
	chargeID := charge.body["id"].(string)
	w.authorize(t, chargeID)
	refund := h.with(t).do("POST", "/v1/refunds", refundJSON(chargeID, `"amount":500`), with("req-refund")...)
	want(t, refund, 201, "")
	refundID := refund.body["id"].(string)
	held := h.with(t).do("POST", "/v1/charges", chargeJSON(set("capture", false)), with("req-held")...)
	want(t, held, 201, "")
	heldID := held.body["id"].(string)
	w.authorize(t, heldID)
	endpoint := h.with(t).do("POST", "/v1/me/webhook_endpoints", endpointBody("https://example.com/hook", "charge.captured"), with("req-endpoint")...)
	want(t, endpoint, 201, "")
	endpointID := obj(endpoint.body["webhook_endpoint"])["id"].(string)
	otherKey, _ := h.newKey(a.token)
	revoke := h.with(t).do("DELETE", "/v1/me/api_keys/"+otherKey, "", with("req-revoke")...)
	want(t, revoke, 200, "")
	if n := entries(); n != 5 { // and the endpoint, the key and its revocation
		t.Fatalf("%d entries, want 5", n)
	}

	// Failed requests leave nothing.
	want(t, h.with(t).do("POST", "/v1/me/webhook_endpoints", endpointBody("ftp://example.com/hook", "charge.captured"), with("req-bad")...), 400, "")
	want(t, h.with(t).do("DELETE", "/v1/me/api_keys/key_00000000000000000000000000", "", with("req-bad")...), 404, "not_found")
	want(t, h.with(t).do("POST", "/v1/charges/"+chargeID+"/capture", `{}`, with("req-bad")...), 409, "")
	// Nor do replays of an Idempotency-Key.
	idem := []string{"Idempotency-Key", "audit-replay"}
	want(t, h.with(t).do("POST", "/v1/charges", chargeJSON(), with("req-idem", idem...)...), 201, "")
	want(t, h.with(t).do("POST", "/v1/charges", chargeJSON(), with("req-idem-2", idem...)...), 201, "")
	if n := entries(); n != 5 {
		t.Fatalf("%d entries after failures, payments and a replay, want 5", n)
	}

	log := h.auditLog(t, a.token, "")
	if len(log) != 5 {
		t.Fatalf("listed %d entries, want 5", len(log))
	}
	byRequest := map[string]map[string]any{}
	for _, e := range log {
		byRequest[e["request_id"].(string)] = e
	}
	for _, req := range []string{"req-charge", "req-refund", "req-held", "req-idem"} {
		if e := byRequest[req]; e != nil {
			t.Errorf("payment traffic of request %s audit-logged: %v", req, e)
		}
	}
	for _, c := range []struct{ req, action, objectType, objectID string }{
		{"req-endpoint", "webhook_endpoint.create", "webhook_endpoint", endpointID},
		{"req-revoke", "api_key.revoke", "api_key", otherKey},
	} {
		e := byRequest[c.req]
		if e == nil {
			t.Errorf("no entry of request %s", c.req)
			continue
		}
		actor := obj(e["actor"])
		if e["action"] != c.action || e["object_type"] != c.objectType || e["object_id"] != c.objectID ||
			actor["type"] != "api_key" || actor["id"] != a.keyID || e["ip"] != "127.0.0.1" || e["user_agent"] != "audit-test/1.0" {
			t.Errorf("%s: %v", c.req, e)
		}
		if len(e["hash"].(string)) != 64 || len(e["prev_hash"].(string)) != 64 {
			t.Errorf("%s hashes: %v", c.req, e)
		}
	}
	// The session's own actions name it (the member, or the session before members).
	created := h.auditLog(t, a.token, "action=api_key.create")
	if len(created) != 2 || obj(created[0]["actor"])["type"] != "member" || created[0]["object_id"] != otherKey {
		t.Fatalf("key creations: %v", created)
	}

	t.Run("filters", func(t *testing.T) {
		if got := h.auditLog(t, a.token, "object_id="+endpointID); len(got) != 1 || got[0]["action"] != "webhook_endpoint.create" {
			t.Errorf("by object: %v", got)
		}
		if got := h.auditLog(t, a.token, "actor="+a.keyID); len(got) != 2 {
			t.Errorf("by actor: %d entries, want 2", len(got))
		}
		if got := h.auditLog(t, a.token, "action=api_key.revoke&actor="+a.keyID); len(got) != 1 || got[0]["object_id"] != otherKey {
			t.Errorf("by action and actor: %v", got)
		}
		if got := h.auditLog(t, a.token, "object_id="+chargeID); len(got) != 0 {
			t.Errorf("a charge made with a key is listed: %v", got)
		}
		future := url.QueryEscape(time.Now().Add(time.Hour).Format(time.RFC3339))
		past := url.QueryEscape(time.Now().Add(-time.Hour).Format(time.RFC3339))
		if got := h.auditLog(t, a.token, "created[gte]="+future); len(got) != 0 {
			t.Errorf("created after an hour from now: %d", len(got))
		}
		if got := h.auditLog(t, a.token, "created[gte]="+past+"&created[lte]="+future); len(got) != 5 {
			t.Errorf("created within the last hour: %d", len(got))
		}
		page := h.with(t).do("GET", "/v1/audit_log?limit=2", "", bearer(a.token)...)
		want(t, page, 200, "")
		if page.body["has_more"] != true {
			t.Fatal("first page of 2 has no more")
		}
		last := obj(page.body["data"].([]any)[1])["id"].(string)
		next := h.with(t).do("GET", "/v1/audit_log?limit=100&starting_after="+last, "", bearer(a.token)...)
		if n := len(next.body["data"].([]any)); n != 3 {
			t.Errorf("after the first page: %d entries, want 3", n)
		}
		for _, q := range []string{"created[gte]=yesterday", "starting_after=ch_1", "limit=0", "actor=" + strings.Repeat("x", 256)} {
			want(t, h.with(t).do("GET", "/v1/audit_log?"+q, "", bearer(a.token)...), 400, "parameter_invalid")
		}
		// Keys never read the audit log; another merchant sees none of it.
		want(t, h.with(t).do("GET", "/v1/audit_log", "", bearer(a.secret)...), 401, "invalid_token_type")
		b := h.account("other@example.com")
		if got := h.auditLog(t, b.token, "object_id="+endpointID); len(got) != 0 {
			t.Errorf("another merchant lists %v", got)
		}
	})

	t.Run("dashboard", func(t *testing.T) {
		d := h.dashClient(t)
		d.signIn("audit@example.com", "correct horse battery")
		// A person's capture in the dashboard is audit-logged, a key's is not.
		if r := d.post("/dashboard/charges/"+heldID+"/capture", url.Values{"amount": {"1.00"}}, "X-Request-Id", "req-dash-capture"); r.status != 303 {
			t.Fatalf("capture from the dashboard: %d", r.status)
		}
		captured := h.auditLog(t, a.token, "action=charge.capture")
		if len(captured) != 1 || captured[0]["object_id"] != heldID || obj(captured[0]["actor"])["type"] != "member" ||
			captured[0]["request_id"] != "req-dash-capture" {
			t.Fatalf("dashboard capture: %v", captured)
		}
		page := d.get("/dashboard/audit?action=charge.capture")
		if page.status != 200 || !strings.Contains(page.body, heldID) || strings.Contains(page.body, chargeID) || strings.Contains(page.body, refundID) {
			t.Fatalf("audit page: %d\n%.2000s", page.status, page.body)
		}
		if !strings.Contains(d.get("/dashboard/charges").body, `href="/dashboard/audit"`) {
			t.Error("the menu has no audit log for an owner")
		}
		// A dashboard action is recorded with the session as its actor.
		before := entries()
		r := d.post("/dashboard/keys/"+a.keyID+"/revoke", nil, "X-Request-Id", "req-dash-revoke")
		if r.status != 303 {
			t.Fatalf("revoke from the dashboard: %d", r.status)
		}
		got := h.auditLog(t, a.token, "object_id="+a.keyID)
		if entries() != before+1 || len(got) != 2 || got[0]["action"] != "api_key.revoke" || got[0]["request_id"] != "req-dash-revoke" ||
			obj(got[0]["actor"])["type"] != "member" {
			t.Fatalf("dashboard revoke: %v", got)
		}
		// A form refused for its CSRF token leaves nothing.
		r = d.send("POST", "/dashboard/keys", url.Values{"csrf_token": {"forged"}})
		if r.status != 403 || entries() != before+1 {
			t.Fatalf("refused form: %d, %d entries", r.status, entries())
		}
	})

	sum, err := store.New(h.db.Pool).VerifyAudit(context.Background())
	if err != nil || len(sum.Broken) != 0 || sum.Entries < 5 {
		t.Fatalf("verify: %+v %v", sum, err)
	}
}
