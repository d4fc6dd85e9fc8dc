package httpapi_test

import (
	"strings"
	"testing"
	"time"
)

// docs/keys.md: restricted keys, rolling and checksums through the API.

func TestRestrictedKeys(t *testing.T) {
	h := newHarness(t, nil)
	a := h.account("ada@example.com")

	r := h.do("POST", "/v1/me/api_keys", `{"name":"charges","type":"restricted","permissions":{"charges":"write","refunds":"none","events":"read"}}`, bearer(a.token)...)
	want(t, r, 201, "")
	rk := r.body["secret_key"].(string)
	perms := r.body["permissions"].(map[string]any)
	if !strings.HasPrefix(rk, "rk_test_") || len(rk) != 44 || r.body["type"] != "restricted" || len(perms) != 7 ||
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
