package httpapi_test

import (
	"encoding/json"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/gatehouse-pay/gatehouse/internal/authz"
	"github.com/gatehouse-pay/gatehouse/internal/httpapi"
	"github.com/gatehouse-pay/gatehouse/internal/members"
)

// docs/keys.md: restricted keys, rolling and checksums through the API.

func TestRestrictedKeys(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	a := h.account("ada@example.com")

	r := h.do("POST", "/v1/me/api_keys", `{"name":"charges","type":"restricted","permissions":{"charges":"write","refunds":"none","events":"read"}}`, bearer(a.token)...)
	want(t, r, 201, "")
	rk := r.body["secret_key"].(string)
	perms := r.body["permissions"].(map[string]any)
	if !strings.HasPrefix(rk, "rk_test_") || len(rk) != 44 || r.body["type"] != "restricted" || len(perms) != 10 ||
		perms["charges"] != "write" || perms["refunds"] != "none" || perms["events"] != "read" || perms["customers"] != "none" {
		t.Fatalf("restricted key: %s", r.raw)
	}
	// The secret key of the account is a secret key, with every permission.
	list := h.do("GET", "/v1/me/api_keys?limit=100", "", bearer(a.secret)...)
	want(t, list, 200, "")
	for _, it := range list.body["data"].([]any) {
		k := it.(map[string]any)
		p := k["permissions"].(map[string]any)
		switch k["id"] {
		case a.keyID:
			if k["type"] != "secret" || p["customers"] != "write" || p["api_keys"] != "write" || k["expires_at"] != nil {
				t.Errorf("secret key listed as %v", k)
			}
		case r.body["id"]:
			if k["type"] != "restricted" || p["charges"] != "write" || p["refunds"] != "none" {
				t.Errorf("restricted key listed as %v", k)
			}
		}
	}

	// Twice each: the second charge goes through the cached fast path.
	for range 2 {
		h.createCharge(t, rk, chargeJSON())
	}
	want(t, h.do("GET", "/v1/charges", "", bearer(rk)...), 200, "")
	want(t, h.do("GET", "/v1/events", "", bearer(rk)...), 200, "")
	want(t, h.do("GET", "/v1/me", "", bearer(rk)...), 200, "")
	for _, c := range []struct{ method, path, body string }{
		{"POST", "/v1/refunds", `{"charge":"0190f4b6-3c2a-7d4e-8f00-000000000001","amount":1}`},
		{"GET", "/v1/customers", ""},
		{"GET", "/v1/me/api_keys", ""},
		{"DELETE", "/v1/me/api_keys/" + a.keyID, ""},
		{"POST", "/v1/me/webhook_endpoints", `{"url":"https://hooks.example.com/x","events":["charge.created"]}`},
	} {
		r := h.do(c.method, c.path, c.body, bearer(rk)...)
		want(t, r, 403, "permission_denied")
	}
	// A restricted key is still a key: it does not create keys.
	want(t, h.do("POST", "/v1/me/api_keys", "", bearer(rk)...), 401, "invalid_token_type")

	// No permission at all: accepted, and refused everything but GET /v1/me.
	r = h.do("POST", "/v1/me/api_keys", `{"type":"restricted"}`, bearer(a.token)...)
	want(t, r, 201, "")
	nothing := r.body["secret_key"].(string)
	want(t, h.do("GET", "/v1/me", "", bearer(nothing)...), 200, "")
	want(t, h.do("GET", "/v1/charges", "", bearer(nothing)...), 403, "permission_denied")
	want(t, h.do("POST", "/v1/charges", chargeJSON(), bearer(nothing)...), 403, "permission_denied")

	for body, param := range map[string]string{
		`{"type":"admin"}`: "type",
		`{"type":"restricted","permissions":{"payouts":"read"}}`:  "permissions.payouts",
		`{"type":"restricted","permissions":{"charges":"admin"}}`: "permissions.charges",
		`{"type":"restricted","permissions":{"charges":2}}`:       "permissions",
		`{"type":"restricted","permissions":["charges"]}`:         "permissions",
		`{"permissions":{"charges":"read"}}`:                      "permissions",
		`{"type":"secret","permissions":{}}`:                      "permissions",
	} {
		r := h.do("POST", "/v1/me/api_keys", body, bearer(a.token)...)
		want(t, r, 400, "parameter_invalid")
		if r.errField("param") != param {
			t.Errorf("%s: param %q, want %q", body, r.errField("param"), param)
		}
	}
}

func TestRollKeys(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	a := h.account("ada@example.com")
	b := h.account("bob@example.com")
	roll := func(token, id, body string) response {
		return h.do("POST", "/v1/me/api_keys/"+id+"/roll", body, bearer(token)...)
	}

	for _, body := range []string{`{"expires_in":-1}`, `{"expires_in":604801}`, `{"expires_in":1.5}`, `{"expires_in":"60"}`, `{"expires_in":60,"x":1}`} {
		r := roll(a.token, a.keyID, body)
		want(t, r, 400, "parameter_invalid")
		if p := r.errField("param"); p != "expires_in" && p != "x" {
			t.Errorf("%s: param %q", body, p)
		}
	}
	want(t, roll(b.token, a.keyID, `{"expires_in":60}`), 404, "not_found")
	want(t, roll(a.token, "key_00000000000000000000000000", ""), 404, "not_found")
	want(t, roll(a.token, "nope", ""), 404, "not_found")
	want(t, roll(a.secret, a.keyID, ""), 401, "invalid_token_type")
	h.createCharge(t, a.secret, chargeJSON()) // the key's entry is cached

	r := roll(a.token, a.keyID, `{"expires_in":1}`)
	want(t, r, 201, "")
	next := r.body["secret_key"].(string)
	nextID := r.body["id"].(string)
	if !strings.HasPrefix(next, "sk_test_") || len(next) != 44 || nextID == a.keyID || r.body["type"] != "secret" || r.body["expires_at"] != nil {
		t.Fatalf("rolled key: %s", r.raw)
	}
	if r.header.Get("Cache-Control") != "no-store" {
		t.Fatalf("Cache-Control %q", r.header.Get("Cache-Control"))
	}
	// During the overlap both keys work, the old one from the cache too.
	h.createCharge(t, a.secret, chargeJSON())
	want(t, h.do("GET", "/v1/charges", "", bearer(a.secret)...), 200, "")
	h.createCharge(t, next, chargeJSON())
	want(t, roll(a.token, a.keyID, `{"expires_in":60}`), 409, "invalid_state")
	var expires time.Time
	list := h.do("GET", "/v1/me/api_keys?limit=100", "", bearer(next)...)
	for _, it := range list.body["data"].([]any) {
		if k := it.(map[string]any); k["id"] == a.keyID && k["revoked_at"] == nil {
			expires, _ = time.Parse(time.RFC3339, k["expires_at"].(string))
		}
	}
	if expires.IsZero() {
		t.Fatalf("the old key has no expires_at: %s", list.raw)
	}
	time.Sleep(time.Until(expires) + 20*time.Millisecond)
	want(t, h.do("POST", "/v1/charges", chargeJSON(), bearer(a.secret)...), 401, "token_revoked")
	want(t, h.do("GET", "/v1/charges", "", bearer(a.secret)...), 401, "token_revoked")
	h.createCharge(t, next, chargeJSON())

	// expires_in 0 (and a missing body) revokes at once.
	r = roll(a.token, nextID, "")
	want(t, r, 201, "")
	if r.body["expires_at"] != nil {
		t.Fatalf("the new key: %s", r.raw)
	}
	want(t, h.do("POST", "/v1/charges", chargeJSON(), bearer(next)...), 401, "token_revoked")
	want(t, h.do("GET", "/v1/charges", "", bearer(next)...), 401, "token_revoked")
	want(t, roll(a.token, nextID, ""), 409, "invalid_state")
	h.createCharge(t, r.body["secret_key"].(string), chargeJSON())
}

func TestKeyChecksums(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	a := h.account("ada@example.com")
	last := a.secret[len(a.secret)-1]
	swap := byte('a')
	if last == 'a' {
		swap = 'b'
	}
	bad := a.secret[:len(a.secret)-1] + string(swap)
	want(t, h.do("GET", "/v1/charges", "", bearer(bad)...), 401, "invalid_token")
	want(t, h.do("POST", "/v1/charges", chargeJSON(), bearer(bad)...), 401, "invalid_token")
	rk := "rk_test_" + a.secret[len("sk_test_"):] // the same body, so the same checksum: an unknown key
	want(t, h.do("GET", "/v1/charges", "", bearer(rk)...), 401, "invalid_token")
	want(t, h.do("GET", "/v1/charges", "", bearer("rk_live_"+a.secret[len("sk_test_"):])...), 403, "live_mode_disabled")
	// Keys of the format before checksums are still looked up.
	want(t, h.do("GET", "/v1/charges", "", bearer("sk_test_"+strings.Repeat("0", 32))...), 401, "invalid_token")
	want(t, h.do("GET", "/v1/charges", "", bearer(a.secret)...), 200, "")
}

// teamMember invites a member of role with the owner's session and signs
// it in: its id and session token.
func (h *harness) teamMember(t *testing.T, ownerToken, email, role string) (id, token string) {
	t.Helper()
	r := h.do("POST", "/v1/me/members", `{"email":"`+email+`","role":"`+role+`"}`, bearer(ownerToken)...)
	want(t, r, 201, "")
	want(t, h.do("POST", "/v1/auth/setup", `{"token":"`+setupToken(t, r)+`","password":"`+matrixPassword+`"}`), 200, "")
	return obj(r.body["member"])["id"].(string), h.login(email, matrixPassword)
}

// keyBody is a restricted key's creation body with perms.
func keyBody(name string, perms authz.Permissions) string {
	levels := map[string]string{}
	for r, a := range perms {
		levels[string(r)] = a.String()
	}
	b, _ := json.Marshal(map[string]any{"name": name, "type": "restricted", "permissions": levels})
	return string(b)
}

// TestKeysWithinTheirMakersRole: a key never holds more than the role of
// the member who makes it (docs/keys.md). Owners and admins make secret
// keys; a developer makes restricted keys up to its role and is refused
// 403 permission_denied, naming the field, for a secret key (asked for or
// by default) or one level more on any resource, and nothing is stored,
// with or without an Idempotency-Key. Rolling obeys the same rule. Every
// key answer shows created_by: the member who made or rolled the key.
func TestKeysWithinTheirMakersRole(t *testing.T) {
	t.Parallel()
	h := newHarness(t, authzEnv)
	a := h.account("boss@example.com")
	ownerID := members.OwnerID(a.merchantID)
	adminID, admin := h.teamMember(t, a.token, "admin@example.com", authz.Admin)
	devID, dev := h.teamMember(t, a.token, "dev@example.com", authz.Developer)
	keys := func() int { return h.count(t, `SELECT count(*) FROM api_keys WHERE merchant_id = $1`, a.merchantID) }
	denied := func(r response, param string) {
		t.Helper()
		want(t, r, 403, "permission_denied")
		if got := r.errField("param"); got != param {
			t.Errorf("param %q, want %q: %s", got, param, r.raw)
		}
	}

	// The harness's key is the owner's.
	list := h.do("GET", "/v1/me/api_keys?limit=100", "", bearer(a.secret)...)
	want(t, list, 200, "")
	if k := obj(list.body["data"].([]any)[0]); k["id"] != a.keyID || k["created_by"] != ownerID {
		t.Fatalf("the owner's key: %v", k)
	}

	for role, m := range map[string]struct{ id, token string }{authz.Owner: {ownerID, a.token}, authz.Admin: {adminID, admin}, authz.Developer: {devID, dev}} {
		rp := authz.RolePermissions(role)
		before := keys()
		for _, body := range []string{`{"name":"secret"}`, `{"name":"secret","type":"secret"}`, ``} {
			r := h.do("POST", "/v1/me/api_keys", body, bearer(m.token)...)
			if role == authz.Developer {
				denied(r, "type")
				continue
			}
			want(t, r, 201, "")
			if r.body["type"] != "secret" || r.body["created_by"] != m.id {
				t.Errorf("%s's secret key: %s", role, r.raw)
			}
		}
		if role == authz.Developer && keys() != before {
			t.Fatalf("refused secret keys were stored: %d keys, were %d", keys(), before)
		}
		// The fullest key of the role, and one level more on each resource.
		own := authz.Permissions{}
		for _, r := range authz.KeyResources {
			own[r] = rp[r]
		}
		r := h.do("POST", "/v1/me/api_keys", keyBody("own", own), bearer(m.token)...)
		want(t, r, 201, "")
		if r.body["created_by"] != m.id || r.body["type"] != "restricted" {
			t.Errorf("%s's restricted key: %s", role, r.raw)
		}
		for _, res := range authz.KeyResources {
			if rp[res] == authz.Write {
				continue
			}
			before := keys()
			denied(h.do("POST", "/v1/me/api_keys", keyBody("more", authz.Permissions{res: rp[res] + 1}), bearer(m.token)...), "permissions."+string(res))
			if keys() != before {
				t.Errorf("%s: a key with %s %s was stored", role, res, rp[res]+1)
			}
		}
	}

	// Refunds, charges, customers and connectors are beyond a developer;
	// a refused request under an Idempotency-Key records nothing, so the
	// key serves the developer's next, allowed, request.
	for _, res := range []authz.Resource{authz.Refunds, authz.Charges, authz.Customers, authz.Connectors} {
		denied(h.do("POST", "/v1/me/api_keys", keyBody("x", authz.Permissions{res: authz.Write}), append(bearer(dev), "Idempotency-Key", "dev-1")...),
			"permissions."+string(res))
	}
	mine := h.do("POST", "/v1/me/api_keys", keyBody("hooks", authz.Permissions{authz.WebhookEndpoints: authz.Write, authz.Events: authz.Read}),
		append(bearer(dev), "Idempotency-Key", "dev-1")...)
	want(t, mine, 201, "")
	if mine.body["created_by"] != devID || mine.body["secret_key"] == nil {
		t.Fatalf("the developer's key: %s", mine.raw)
	}
	mineID := mine.body["id"].(string)

	// Rolling: the developer cannot roll the owner's secret key, nor the
	// admin's refund key; nothing changes.
	adminKey := h.do("POST", "/v1/me/api_keys", keyBody("refunds", authz.Permissions{authz.Refunds: authz.Write}), bearer(admin)...)
	want(t, adminKey, 201, "")
	for _, id := range []string{a.keyID, adminKey.body["id"].(string)} {
		before := keys()
		denied(h.do("POST", "/v1/me/api_keys/"+id+"/roll", `{"expires_in":60}`, bearer(dev)...), "")
		if keys() != before || h.count(t, `SELECT count(*) FROM api_keys WHERE id = $1 AND expires_at IS NULL AND revoked_at IS NULL`, id) != 1 {
			t.Errorf("a refused roll of %s changed something", id)
		}
	}
	h.createCharge(t, a.secret, chargeJSON()) // the owner's key still works
	// It rolls its own key; the owner rolls the result: each new key is its roller's.
	r := h.do("POST", "/v1/me/api_keys/"+mineID+"/roll", `{"expires_in":60}`, bearer(dev)...)
	want(t, r, 201, "")
	if r.body["created_by"] != devID || r.body["type"] != "restricted" || obj(r.body["permissions"])["webhook_endpoints"] != "write" {
		t.Fatalf("the developer's roll: %s", r.raw)
	}
	r = h.do("POST", "/v1/me/api_keys/"+r.body["id"].(string)+"/roll", "", bearer(a.token)...)
	want(t, r, 201, "")
	if r.body["created_by"] != ownerID {
		t.Fatalf("the owner's roll: %s", r.raw)
	}
	// The revoke's answer shows the maker too.
	r = h.do("DELETE", "/v1/me/api_keys/"+adminKey.body["id"].(string), "", bearer(a.secret)...)
	want(t, r, 200, "")
	if r.body["created_by"] != adminID {
		t.Fatalf("the revoked key: %s", r.raw)
	}
}

// TestDeveloperNeverReachesConnectors: connectors and routing need
// connectors write, which only owners and admins hold, and no key a
// developer can make reaches them: the fullest key of its role reads them
// and is refused every change; a key with connectors write is refused at
// creation, in the API and in the dashboard.
func TestDeveloperNeverReachesConnectors(t *testing.T) {
	t.Parallel()
	h := newHarness(t, authzEnv)
	a := h.account("boss@example.com")
	_, dev := h.teamMember(t, a.token, "dev@example.com", authz.Developer)
	for _, role := range authz.Roles {
		if got := authz.RolePermissions(role).Allows(authz.Connectors, authz.Write); got != (role == authz.Owner || role == authz.Admin) {
			t.Errorf("%s has connectors write: %v", role, got)
		}
	}
	for _, route := range []string{"POST /v1/connectors", "PATCH /v1/connectors/:id", "DELETE /v1/connectors/:id", "PUT /v1/routing",
		"POST /dashboard/connectors", "POST /dashboard/routing"} {
		if n := httpapi.Needs()[route]; n.Resource != authz.Connectors || n.Access != authz.Write {
			t.Errorf("%s needs %v, want connectors write", route, n)
		}
	}
	own := authz.Permissions{}
	for _, r := range authz.KeyResources {
		own[r] = authz.RolePermissions(authz.Developer)[r]
	}
	r := h.do("POST", "/v1/me/api_keys", keyBody("fullest", own), bearer(dev)...)
	want(t, r, 201, "")
	fullest := r.body["secret_key"].(string)
	conns := h.do("GET", "/v1/connectors", "", bearer(fullest)...)
	want(t, conns, 200, "")
	conn := idsOf(conns)[0]
	routingBefore := h.do("GET", "/v1/routing", "", bearer(fullest)...)
	want(t, routingBefore, 200, "")
	for _, c := range []struct{ method, path, body string }{
		{"POST", "/v1/connectors", `{"provider":"stripe","name":"mine","credentials":{"secret_key":"sk_test_x"}}`},
		{"PATCH", "/v1/connectors/" + conn, `{"enabled":false}`},
		{"DELETE", "/v1/connectors/" + conn, ""},
		{"PUT", "/v1/routing", `{"default":{"connectors":["` + conn + `"]}}`},
	} {
		want(t, h.do(c.method, c.path, c.body, bearer(fullest)...), 403, "permission_denied")
	}
	if n := h.count(t, `SELECT count(*) FROM connectors WHERE merchant_id = $1`, a.merchantID); n != 1 {
		t.Errorf("%d connectors, want the one the account started with", n)
	}
	if after := h.do("GET", "/v1/routing", "", bearer(fullest)...); string(after.raw) != string(routingBefore.raw) {
		t.Errorf("the routing changed: %s, was %s", after.raw, routingBefore.raw)
	}
	want(t, h.do("POST", "/v1/me/api_keys", keyBody("conn", authz.Permissions{authz.Connectors: authz.Write}), bearer(dev)...), 403, "permission_denied")

	// The dashboard's key form offers only what the role may make, and
	// refuses the rest alike.
	d := h.dashClientSignedIn(t, "dev@example.com")
	page := d.get("/dashboard/keys")
	levels := func(res authz.Resource) string {
		m := regexp.MustCompile(`(?s)name="permissions\.` + string(res) + `">(.*?)</select>`).FindStringSubmatch(page.body)
		if m == nil {
			t.Fatalf("no select of %s:\n%.3000s", res, page.body)
		}
		return m[1]
	}
	if page.status != 200 || strings.Contains(page.body, `<option value="secret"`) || !strings.Contains(page.body, `id="key-rule"`) ||
		strings.Contains(levels(authz.Connectors), `"write"`) || !strings.Contains(levels(authz.Connectors), `"read"`) ||
		strings.Contains(levels(authz.Refunds), `"write"`) || !strings.Contains(levels(authz.WebhookEndpoints), `"write"`) {
		t.Fatalf("the developer's key form:\n%.3000s", page.body)
	}
	before := h.count(t, `SELECT count(*) FROM api_keys WHERE merchant_id = $1`, a.merchantID)
	for _, form := range []url.Values{
		{"name": {"secret"}, "type": {"secret"}},
		{"name": {"default"}},
		{"name": {"conn"}, "type": {"restricted"}, "permissions.connectors": {"write"}},
		{"name": {"refunds"}, "type": {"restricted"}, "permissions.refunds": {"write"}},
	} {
		if p := d.post("/dashboard/keys", form); p.status != 403 || !strings.Contains(p.body, "permission_denied") {
			t.Errorf("the developer's form %v: %d\n%.500s", form, p.status, p.body)
		}
	}
	if p := d.post("/dashboard/keys/"+a.keyID+"/roll", url.Values{"expires_in": {"0"}}); p.status != 403 {
		t.Errorf("the developer rolls the owner's key in the dashboard: %d", p.status)
	}
	if after := h.count(t, `SELECT count(*) FROM api_keys WHERE merchant_id = $1 AND revoked_at IS NULL AND expires_at IS NULL`, a.merchantID); after != before {
		t.Errorf("the refused forms changed the keys: %d active, were %d", after, before)
	}
	if p := d.post("/dashboard/keys", url.Values{"name": {"hooks"}, "type": {"restricted"}, "permissions.webhook_endpoints": {"write"}}); p.status != 200 ||
		!strings.Contains(p.body, `id="secret-key">rk_test_`) {
		t.Errorf("the developer's restricted key in the dashboard: %d\n%.500s", p.status, p.body)
	}
}

// TestRemovedMembersKeysAreListedForReview: removing a member does not
// revoke the keys it made (integrations run on them); the removal's answer
// lists those that still work, GET /v1/me/api_keys?created_by= lists them
// all, and the dashboard shows them for review after a removal and marks
// them on the keys page.
func TestRemovedMembersKeysAreListedForReview(t *testing.T) {
	t.Parallel()
	h := newHarness(t, authzEnv)
	a := h.account("boss@example.com")
	devID, dev := h.teamMember(t, a.token, "dev@example.com", authz.Developer)
	var made, secrets []string
	for _, name := range []string{"hooks", "reader", "gone"} {
		r := h.do("POST", "/v1/me/api_keys", keyBody(name, authz.Permissions{authz.Events: authz.Read}), bearer(dev)...)
		want(t, r, 201, "")
		made, secrets = append(made, r.body["id"].(string)), append(secrets, r.body["secret_key"].(string))
	}
	want(t, h.do("DELETE", "/v1/me/api_keys/"+made[2], "", bearer(a.secret)...), 200, "")

	r := h.do("GET", "/v1/me/api_keys?created_by="+devID, "", bearer(a.token)...)
	want(t, r, 200, "")
	if got := idsOf(r); len(got) != 3 || got[0] != made[2] || got[2] != made[0] {
		t.Fatalf("the developer's keys: %s", r.raw)
	}
	r = h.do("GET", "/v1/me/api_keys?created_by=nobody", "", bearer(a.secret)...)
	want(t, r, 400, "parameter_invalid")
	if r.errField("param") != "created_by" {
		t.Errorf("a bad created_by: %s", r.raw)
	}

	r = h.do("DELETE", "/v1/me/members/"+devID, "", bearer(a.token)...)
	want(t, r, 200, "")
	keys := obj(r.body["api_keys"])
	if r.body["id"] != devID || r.body["object"] != "member" || r.body["deleted"] != true || keys["object"] != "list" || keys["has_more"] != false {
		t.Fatalf("the removal: %s", r.raw)
	}
	if got := idsOf(response{body: keys}); len(got) != 2 || got[0] != made[1] || got[1] != made[0] {
		t.Fatalf("keys to review %v, want the two that still work %v", got, made[:2])
	}
	want(t, h.do("GET", "/v1/me", "", bearer(dev)...), 401, "token_revoked")
	want(t, h.do("GET", "/v1/events", "", bearer(secrets[0])...), 200, "") // the key outlives its maker's membership

	// The dashboard: removing a member leads to its keys.
	_, _ = h.teamMember(t, a.token, "support@example.com", authz.Support)
	supportID := ""
	for _, m := range h.do("GET", "/v1/me/members?limit=100", "", bearer(a.token)...).body["data"].([]any) {
		if obj(m)["email"] == "support@example.com" {
			supportID = obj(m)["id"].(string)
		}
	}
	d := h.dashClientSignedIn(t, "boss@example.com")
	p := d.post("/dashboard/team/"+supportID+"/remove", nil)
	if p.status != 303 || p.location != "/dashboard/team?notice=member_removed&review="+supportID {
		t.Fatalf("the dashboard's removal: %d to %q", p.status, p.location)
	}
	if p = d.get(p.location); p.status != 200 || !strings.Contains(p.body, `id="review-keys"`) || !strings.Contains(p.body, "made no key that still works") {
		t.Fatalf("the team page after a removal:\n%.3000s", p.body)
	}
	p = d.get("/dashboard/team?review=" + devID)
	if p.status != 200 || !strings.Contains(p.body, `data-key="`+made[0]+`"`) || !strings.Contains(p.body, `data-key="`+made[1]+`"`) ||
		strings.Contains(p.body, `data-key="`+made[2]+`"`) || !strings.Contains(p.body, "/dashboard/keys?created_by="+devID) {
		t.Fatalf("the developer's keys to review:\n%.4000s", p.body)
	}
	p = d.get("/dashboard/keys?created_by=" + devID)
	if p.status != 200 || strings.Count(p.body, "creator-removed") != 3 || !strings.Contains(p.body, "dev@example.com") {
		t.Fatalf("the keys page of the removed developer:\n%.4000s", p.body)
	}
	if p = d.get("/dashboard/keys"); !strings.Contains(p.body, "boss@example.com") {
		t.Errorf("the keys page does not name the owner as a maker")
	}
}

// TestSavedCardNeedsCustomersRead: charging a saved card needs customers
// read as well as charges write. A restricted key with only charges write
// is refused 403 permission_denied before the method is looked at (an
// unknown method gets the same answer) and nothing is created.
func TestSavedCardNeedsCustomersRead(t *testing.T) {
	t.Parallel()
	h := newHarness(t, paymentsEnv)
	a := h.account("ada@example.com")
	cus := h.newCustomer(t, a.secret, `{"email":"jenny@example.com"}`).body["id"].(string)
	pm := h.saveCard(t, a.secret, cus, rawCardJSON(cardVisa, "123"))
	want(t, pm, 201, "")
	pmID := pm.body["id"].(string)
	restricted := func(perms authz.Permissions) string {
		r := h.do("POST", "/v1/me/api_keys", keyBody("k", perms), bearer(a.token)...)
		want(t, r, 201, "")
		return r.body["secret_key"].(string)
	}
	chargesOnly := restricted(authz.Permissions{authz.Charges: authz.Write})
	withCustomers := restricted(authz.Permissions{authz.Charges: authz.Write, authz.Customers: authz.Read})
	saved := func(pm string) string {
		return `{"amount":1500,"currency":"usd","customer":"` + cus + `","card":{"payment_method":"` + pm + `"},"off_session":true}`
	}
	before := h.count(t, `SELECT count(*) FROM charges WHERE merchant_id = $1`, a.merchantID)
	for _, body := range []string{saved(pmID), saved("pm_00000000000000000000000000"), saved(""),
		`{"amount":1500,"currency":"usd","card":{"payment_method":"` + pmID + `"}}`} {
		r := h.do("POST", "/v1/charges", body, append(bearer(chargesOnly), "Idempotency-Key", "saved-1")...)
		want(t, r, 403, "permission_denied")
		if !strings.Contains(r.errField("message"), "customers") {
			t.Errorf("the refusal does not name customers: %s", r.raw)
		}
	}
	if n := h.count(t, `SELECT count(*) FROM charges WHERE merchant_id = $1`, a.merchantID); n != before {
		t.Fatalf("%d charges after the refusals, were %d", n, before)
	}
	h.createCharge(t, chargesOnly, chargeJSON()) // a card, not a saved one: charges write is enough
	ch := h.createCharge(t, withCustomers, saved(pmID))
	if ch.body["customer"] != cus {
		t.Fatalf("the saved card's charge: %s", ch.raw)
	}
	want(t, h.do("POST", "/v1/charges", saved("pm_00000000000000000000000000"), bearer(withCustomers)...), 400, "parameter_invalid")
}
