package httpapi_test

import (
	"context"
	"encoding/base64"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/redis/go-redis/v9"
)

func TestLogin(t *testing.T) {
	t.Parallel()
	h := newHarness(t, func(env map[string]string) { env["RATE_LIMIT_LOGIN"] = "1000/5m" })
	h.merchant("ada@example.com", "correct horse battery")

	t.Run("success", func(t *testing.T) {
		r := h.do("POST", "/v1/auth/login", `{"email":"ADA@example.com","password":"correct horse battery"}`)
		want(t, r, 200, "")
		if r.body["token_type"] != "Bearer" || r.body["token"] == "" {
			t.Fatalf("login body: %s", r.raw)
		}
		m := r.body["merchant"].(map[string]any)
		if m["email"] != "ada@example.com" || !strings.HasPrefix(m["id"].(string), "mer_") {
			t.Fatalf("merchant: %v", m)
		}
		exp, err := time.Parse(time.RFC3339, r.body["expires_at"].(string))
		if err != nil || time.Until(exp) < 23*time.Hour+59*time.Minute || time.Until(exp) > 24*time.Hour {
			t.Fatalf("expires_at %v is not 24 h from now (%v)", r.body["expires_at"], err)
		}
	})

	t.Run("wrong password and unknown email look the same", func(t *testing.T) {
		wrong := h.do("POST", "/v1/auth/login", `{"email":"ada@example.com","password":"wrong password!"}`)
		unknown := h.do("POST", "/v1/auth/login", `{"email":"nobody@example.com","password":"wrong password!"}`)
		want(t, wrong, 401, "invalid_credentials")
		want(t, unknown, 401, "invalid_credentials")
		if wrong.errField("message") != unknown.errField("message") {
			t.Fatalf("messages differ: %q vs %q", wrong.errField("message"), unknown.errField("message"))
		}
	})

	cases := []struct {
		name, body, contentType string
		status                  int
		code, param             string
	}{
		{"empty body", "", "", 400, "parameter_missing", "email"},
		{"missing password", `{"email":"ada@example.com"}`, "", 400, "parameter_missing", "password"},
		{"not json", `{"email":`, "", 400, "invalid_json", ""},
		{"array", `[1,2]`, "", 400, "invalid_json", ""},
		{"string", `"hello"`, "", 400, "invalid_json", ""},
		{"two objects", `{} {}`, "", 400, "invalid_json", ""},
		{"unknown field", `{"email":"a@b.co","password":"x","merchant_id":"mer_1"}`, "", 400, "parameter_invalid", "merchant_id"},
		{"wrong type", `{"email":42,"password":"x"}`, "", 400, "parameter_invalid", "email"},
		{"form body", `email=a&password=b`, "application/x-www-form-urlencoded", 415, "unsupported_media_type", ""},
		{"deeply nested", `{"email":` + strings.Repeat("[", 5000) + strings.Repeat("]", 5000) + `}`, "", 400, "parameter_invalid", "email"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var headers []string
			if c.contentType != "" {
				headers = []string{"Content-Type", c.contentType}
			}
			r := h.do("POST", "/v1/auth/login", c.body, headers...)
			want(t, r, c.status, c.code)
			if r.errField("param") != c.param {
				t.Fatalf("param = %q, want %q", r.errField("param"), c.param)
			}
		})
	}
}

func TestBodyLimit(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	big := `{"email":"` + strings.Repeat("a", 70<<10) + `","password":"x"}`
	r := h.do("POST", "/v1/auth/login", big)
	want(t, r, 413, "payload_too_large")
}

func TestLoginRateLimit(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	h.merchant("ada@example.com", "correct horse battery")
	for i := 1; i <= 10; i++ {
		r := h.do("POST", "/v1/auth/login", `{"email":"ada@example.com","password":"wrong password!"}`)
		want(t, r, 401, "invalid_credentials")
		if got := r.header.Get("RateLimit-Remaining"); got != strconv.Itoa(10-i) {
			t.Fatalf("request %d: RateLimit-Remaining %q, want %d", i, got, 10-i)
		}
		if got := r.header.Get("RateLimit-Limit"); got != "10" {
			t.Fatalf("RateLimit-Limit %q, want 10", got)
		}
	}
	r := h.do("POST", "/v1/auth/login", `{"email":"ada@example.com","password":"correct horse battery"}`)
	want(t, r, 429, "rate_limited")
	retry, err := strconv.Atoi(r.header.Get("Retry-After"))
	if err != nil || retry < 1 || retry > 300 {
		t.Fatalf("Retry-After %q, want an integer in [1, 300]", r.header.Get("Retry-After"))
	}
}

func TestAuthentication(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	a := h.account("ada@example.com")

	t.Run("me with session and with secret key", func(t *testing.T) {
		for _, token := range []string{a.token, a.secret} {
			r := h.do("GET", "/v1/me", "", bearer(token)...)
			want(t, r, 200, "")
			if r.body["id"] != a.merchantID || r.body["email"] != "ada@example.com" {
				t.Fatalf("me: %s", r.raw)
			}
		}
	})

	pk := h.do("GET", "/v1/me/api_keys", "", bearer(a.secret)...).body["data"].([]any)[0].(map[string]any)["public_key"].(string)
	expired := signed(t, jwt.MapClaims{"iss": "gatehouse", "aud": "gatehouse-dashboard", "sub": a.merchantID, "jti": "ses_x", "iat": time.Now().Add(-48 * time.Hour).Unix(), "exp": time.Now().Add(-24 * time.Hour).Unix()}, jwt.SigningMethodHS256, testJWTSecret)
	cases := []struct {
		name, method, path string
		headers            []string
		status             int
		code               string
	}{
		{"no header", "GET", "/v1/me", nil, 401, "missing_authorization"},
		{"basic scheme", "GET", "/v1/me", []string{"Authorization", "Basic YTpi"}, 401, "invalid_token"},
		{"empty bearer", "GET", "/v1/me", []string{"Authorization", "Bearer "}, 401, "invalid_token"},
		{"garbage", "GET", "/v1/me", bearer("not-a-token"), 401, "invalid_token"},
		{"unknown secret key", "GET", "/v1/me", bearer("sk_test_0000000000000000000000000000000"), 401, "invalid_token"},
		{"public key", "GET", "/v1/me", bearer(pk), 401, "invalid_token_type"},
		{"live public key", "GET", "/v1/me", bearer("pk_live_abc"), 401, "invalid_token_type"},
		{"live secret key", "GET", "/v1/me", bearer("sk_live_abc"), 403, "live_mode_disabled"},
		{"secret key creating keys", "POST", "/v1/me/api_keys", bearer(a.secret), 401, "invalid_token_type"},
		{"jwt revoking keys", "DELETE", "/v1/me/api_keys/" + a.keyID, bearer(a.token), 401, "invalid_token_type"},
		{"jwt on charges", "POST", "/v1/charges", bearer(a.token), 401, "invalid_token_type"},
		{"expired jwt", "GET", "/v1/me", bearer(expired), 401, "invalid_token"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := h.do(c.method, c.path, "", c.headers...)
			want(t, r, c.status, c.code)
		})
	}

	t.Run("live mode body", func(t *testing.T) {
		r := h.do("GET", "/v1/me", "", bearer("sk_live_abc")...)
		if string(r.raw) == "" || r.errField("message") != "Live mode is not activated" {
			t.Fatalf("live body: %s", r.raw)
		}
	})
}

func signed(t *testing.T, claims jwt.MapClaims, method jwt.SigningMethod, secret string) string {
	t.Helper()
	s, err := jwt.NewWithClaims(method, claims).SignedString([]byte(secret))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestJWTAttacks is docs/reliability.md A2: every forged or malformed token is 401.
func TestJWTAttacks(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	a := h.account("ada@example.com")
	now := time.Now()
	good := jwt.MapClaims{"iss": "gatehouse", "aud": "gatehouse-dashboard", "sub": a.merchantID, "iat": now.Unix(), "exp": now.Add(time.Hour).Unix()}
	with := func(k string, v any) jwt.MapClaims {
		c := jwt.MapClaims{}
		for kk, vv := range good {
			c[kk] = vv
		}
		if v == nil {
			delete(c, k)
		} else {
			c[k] = v
		}
		return c
	}
	// A real session id, so only the attacked property is wrong.
	parts := strings.Split(a.token, ".")
	payload, _ := base64.RawURLEncoding.DecodeString(parts[1])
	jti := strings.Split(strings.Split(string(payload), `"jti":"`)[1], `"`)[0]
	good["jti"] = jti

	none := func(c jwt.MapClaims) string {
		s, err := jwt.NewWithClaims(jwt.SigningMethodNone, c).SignedString(jwt.UnsafeAllowNoneSignatureType)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	tampered := parts[0] + "." + base64.RawURLEncoding.EncodeToString([]byte(strings.Replace(string(payload), a.merchantID, "mer_someoneelse00000000000000", 1))) + "." + parts[2]

	if r := h.do("GET", "/v1/me", "", bearer(signed(t, good, jwt.SigningMethodHS256, testJWTSecret))...); r.status != 200 {
		t.Fatalf("control token refused: %s", r.raw)
	}
	attacks := map[string]string{
		"alg none":        none(good),
		"HS512":           signed(t, good, jwt.SigningMethodHS512, testJWTSecret),
		"wrong secret":    signed(t, good, jwt.SigningMethodHS256, "another-secret-that-is-long-enough!!"),
		"tampered":        tampered,
		"expired":         signed(t, with("exp", now.Add(-time.Hour).Unix()), jwt.SigningMethodHS256, testJWTSecret),
		"no exp":          signed(t, with("exp", nil), jwt.SigningMethodHS256, testJWTSecret),
		"wrong issuer":    signed(t, with("iss", "evil"), jwt.SigningMethodHS256, testJWTSecret),
		"wrong audience":  signed(t, with("aud", "other"), jwt.SigningMethodHS256, testJWTSecret),
		"unknown session": signed(t, with("jti", "ses_unknown"), jwt.SigningMethodHS256, testJWTSecret),
		"other merchant":  signed(t, with("sub", "mer_someoneelse00000000000000"), jwt.SigningMethodHS256, testJWTSecret),
	}
	for name, token := range attacks {
		t.Run(name, func(t *testing.T) {
			want(t, h.do("GET", "/v1/me", "", bearer(token)...), 401, "invalid_token")
		})
	}
}

func TestLogout(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	a := h.account("ada@example.com")
	want(t, h.do("GET", "/v1/me", "", bearer(a.token)...), 200, "")
	r := h.do("DELETE", "/v1/auth/logout", "", bearer(a.token)...)
	want(t, r, 204, "")
	if len(r.raw) != 0 {
		t.Fatalf("logout body: %q", r.raw)
	}
	want(t, h.do("GET", "/v1/me", "", bearer(a.token)...), 401, "token_revoked")
	want(t, h.do("DELETE", "/v1/auth/logout", "", bearer(a.token)...), 401, "token_revoked")

	// Redis loses its data: Postgres still refuses the token.
	if err := h.rdb.FlushDB(context.Background()).Err(); err != nil {
		t.Fatal(err)
	}
	want(t, h.do("GET", "/v1/me", "", bearer(a.token)...), 401, "token_revoked")
	// Other sessions and keys are untouched.
	want(t, h.do("GET", "/v1/me", "", bearer(a.secret)...), 200, "")
}

func TestAPIKeys(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	a := h.account("ada@example.com")
	b := h.account("bob@example.com")

	t.Run("create", func(t *testing.T) {
		r := h.do("POST", "/v1/me/api_keys", `{"name":"backend","environment":"sandbox"}`, bearer(a.token)...)
		want(t, r, 201, "")
		secret := r.body["secret_key"].(string)
		if !strings.HasPrefix(secret, "sk_test_") || !strings.HasPrefix(r.body["public_key"].(string), "pk_test_") ||
			r.body["secret_key_last4"] != secret[len(secret)-4:] || r.body["name"] != "backend" || r.body["revoked_at"] != nil {
			t.Fatalf("created key: %s", r.raw)
		}
		if r.header.Get("Cache-Control") != "no-store" {
			t.Fatalf("Cache-Control %q", r.header.Get("Cache-Control"))
		}
		want(t, h.do("GET", "/v1/me", "", bearer(secret)...), 200, "")
	})

	t.Run("create refuses live and bad input", func(t *testing.T) {
		live := h.do("POST", "/v1/me/api_keys", `{"environment":"live"}`, bearer(a.token)...)
		want(t, live, 403, "live_mode_disabled")
		if live.errField("message") != "Live mode is not activated" {
			t.Fatalf("live message %q", live.errField("message"))
		}
		want(t, h.do("POST", "/v1/me/api_keys", `{"environment":"prod"}`, bearer(a.token)...), 400, "parameter_invalid")
		want(t, h.do("POST", "/v1/me/api_keys", `{"name":"`+strings.Repeat("n", 101)+`"}`, bearer(a.token)...), 400, "parameter_invalid")
		want(t, h.do("POST", "/v1/me/api_keys", `{"merchant_id":"`+b.merchantID+`"}`, bearer(a.token)...), 400, "parameter_invalid")
	})

	t.Run("list never shows secrets and pages newest first", func(t *testing.T) {
		for i := 0; i < 3; i++ {
			h.newKey(a.token)
		}
		all := h.do("GET", "/v1/me/api_keys?limit=100", "", bearer(a.secret)...)
		want(t, all, 200, "")
		if strings.Contains(string(all.raw), "sk_test_") {
			t.Fatalf("list leaks a secret: %s", all.raw)
		}
		data := all.body["data"].([]any)
		if len(data) != 5 || all.body["has_more"] != false {
			t.Fatalf("got %d keys has_more=%v, want 5 false", len(data), all.body["has_more"])
		}
		idsOf := func(items []any) []string {
			var out []string
			for _, it := range items {
				out = append(out, it.(map[string]any)["id"].(string))
			}
			return out
		}
		allIDs := idsOf(data)
		for i := 1; i < len(allIDs); i++ {
			if allIDs[i-1] <= allIDs[i] {
				t.Fatalf("not newest first: %v", allIDs)
			}
		}
		p1 := h.do("GET", "/v1/me/api_keys?limit=2", "", bearer(a.token)...)
		p2 := h.do("GET", "/v1/me/api_keys?limit=2&starting_after="+allIDs[1], "", bearer(a.token)...)
		p3 := h.do("GET", "/v1/me/api_keys?limit=2&ending_before="+allIDs[3], "", bearer(a.token)...)
		if got := idsOf(p1.body["data"].([]any)); strings.Join(got, ",") != strings.Join(allIDs[:2], ",") || p1.body["has_more"] != true {
			t.Fatalf("page 1 = %v has_more=%v", got, p1.body["has_more"])
		}
		if got := idsOf(p2.body["data"].([]any)); strings.Join(got, ",") != strings.Join(allIDs[2:4], ",") || p2.body["has_more"] != true {
			t.Fatalf("page 2 = %v has_more=%v", got, p2.body["has_more"])
		}
		if got := idsOf(p3.body["data"].([]any)); strings.Join(got, ",") != strings.Join(allIDs[1:3], ",") {
			t.Fatalf("ending_before page = %v, want %v", got, allIDs[1:3])
		}
		bobs := h.do("GET", "/v1/me/api_keys", "", bearer(b.secret)...)
		if got := idsOf(bobs.body["data"].([]any)); len(got) != 1 || got[0] != b.keyID {
			t.Fatalf("bob sees %v, want only %s", got, b.keyID)
		}
		for _, q := range []string{"limit=0", "limit=101", "limit=x", "starting_after=nope", "starting_after=" + allIDs[0] + "&ending_before=" + allIDs[1]} {
			want(t, h.do("GET", "/v1/me/api_keys?"+q, "", bearer(a.secret)...), 400, "parameter_invalid")
		}
	})

	t.Run("revoke", func(t *testing.T) {
		_, victim := h.newKey(a.token)
		victimID := h.do("GET", "/v1/me/api_keys?limit=1", "", bearer(a.secret)...).body["data"].([]any)[0].(map[string]any)["id"].(string)
		want(t, h.do("GET", "/v1/me", "", bearer(victim)...), 200, "") // cached as active

		// Another merchant's key is not found, and stays usable.
		want(t, h.do("DELETE", "/v1/me/api_keys/"+victimID, "", bearer(b.secret)...), 404, "not_found")
		want(t, h.do("GET", "/v1/me", "", bearer(victim)...), 200, "")
		want(t, h.do("DELETE", "/v1/me/api_keys/key_doesnotexist", "", bearer(a.secret)...), 404, "not_found")

		r := h.do("DELETE", "/v1/me/api_keys/"+victimID, "", bearer(a.secret)...)
		want(t, r, 200, "")
		if r.body["revoked_at"] == nil || r.body["id"] != victimID {
			t.Fatalf("revoke body: %s", r.raw)
		}
		want(t, h.do("GET", "/v1/me", "", bearer(victim)...), 401, "token_revoked")
		again := h.do("DELETE", "/v1/me/api_keys/"+victimID, "", bearer(a.secret)...)
		want(t, again, 200, "")
		if again.body["revoked_at"] != r.body["revoked_at"] {
			t.Fatalf("second revoke moved revoked_at: %v -> %v", r.body["revoked_at"], again.body["revoked_at"])
		}
		if err := h.rdb.FlushDB(context.Background()).Err(); err != nil {
			t.Fatal(err)
		}
		want(t, h.do("GET", "/v1/me", "", bearer(victim)...), 401, "token_revoked")
	})

	t.Run("a key may revoke itself", func(t *testing.T) {
		id, secret := h.newKey(b.token)
		want(t, h.do("DELETE", "/v1/me/api_keys/"+id, "", bearer(secret)...), 200, "")
		want(t, h.do("GET", "/v1/me/api_keys", "", bearer(secret)...), 401, "token_revoked")
	})
}

func TestChargesRouteIsLimitedPerKey(t *testing.T) {
	t.Parallel()
	h := newHarness(t, func(env map[string]string) { env["RATE_LIMIT_CHARGES"] = "3/1m" })
	a := h.account("ada@example.com")
	_, other := h.newKey(a.token)
	for i := 0; i < 3; i++ {
		r := h.do("POST", "/v1/charges", `{}`, bearer(a.secret)...)
		want(t, r, 400, "parameter_missing") // counted by the limiter before validation
		if r.header.Get("RateLimit-Limit") != "3" || r.header.Get("RateLimit-Remaining") != strconv.Itoa(2-i) {
			t.Fatalf("RateLimit-Limit %q Remaining %q", r.header.Get("RateLimit-Limit"), r.header.Get("RateLimit-Remaining"))
		}
	}
	r := h.do("POST", "/v1/charges", `{}`, bearer(a.secret)...)
	want(t, r, 429, "rate_limited")
	if n, err := strconv.Atoi(r.header.Get("Retry-After")); err != nil || n < 1 {
		t.Fatalf("Retry-After %q", r.header.Get("Retry-After"))
	}
	// The limit is per key: another key of the same merchant is not limited.
	want(t, h.do("POST", "/v1/charges", `{}`, bearer(other)...), 400, "parameter_missing")
}

// POST /v1/charges is limited per merchant over all its keys as well as
// per key: the merchant's keys share its window, a request over either
// limit is answered 429 with Retry-After, every answer carries the
// RateLimit-* headers of the limit closer to refusing, a request refused by
// its key's limit spends nothing of the merchant's, and another merchant is
// not affected.
func TestChargesRouteIsLimitedPerMerchant(t *testing.T) {
	t.Parallel()
	h := newHarness(t, func(env map[string]string) {
		env["RATE_LIMIT_CHARGES"] = "3/1m"
		env["RATE_LIMIT_CHARGES_MERCHANT"] = "5/1m"
	})
	a := h.account("ada@example.com")
	b := h.account("bob@example.com")
	_, second := h.newKey(a.token)
	_, third := h.newKey(a.token)
	for i, c := range []struct {
		secret           string
		status           int
		code             string
		limit, remaining string
	}{
		{a.secret, 400, "parameter_missing", "3", "2"},
		{a.secret, 400, "parameter_missing", "3", "1"},
		{a.secret, 400, "parameter_missing", "3", "0"},
		{a.secret, 429, "rate_limited", "3", "0"}, // the key's limit: not counted for the merchant
		{second, 400, "parameter_missing", "5", "1"},
		{second, 400, "parameter_missing", "5", "0"},
		{second, 429, "rate_limited", "5", "0"}, // the merchant's limit
		{third, 429, "rate_limited", "5", "0"},  // a fresh key does not help
		{b.secret, 400, "parameter_missing", "3", "2"},
	} {
		r := h.do("POST", "/v1/charges", `{}`, bearer(c.secret)...)
		want(t, r, c.status, c.code)
		if got, rem := r.header.Get("RateLimit-Limit"), r.header.Get("RateLimit-Remaining"); got != c.limit || rem != c.remaining {
			t.Fatalf("request %d: RateLimit-Limit %q Remaining %q, want %s and %s", i, got, rem, c.limit, c.remaining)
		}
		if reset, err := strconv.Atoi(r.header.Get("RateLimit-Reset")); err != nil || reset < 0 || reset > 60 {
			t.Fatalf("request %d: RateLimit-Reset %q", i, r.header.Get("RateLimit-Reset"))
		}
		if n, err := strconv.Atoi(r.header.Get("Retry-After")); c.status == 429 && (err != nil || n < 1 || n > 60) {
			t.Fatalf("request %d: Retry-After %q", i, r.header.Get("Retry-After"))
		}
	}
	n, err := h.rdb.ZCard(context.Background(), "gh:rl:charges_merchant:"+a.merchantID).Result()
	if err != nil || n != 5 {
		t.Fatalf("the merchant's window holds %d (%v), want 5", n, err)
	}
}

// redisKeys records the Redis keys each command names.
type redisKeys struct {
	mu   sync.Mutex
	cmds [][]string
}

func (r *redisKeys) DialHook(next redis.DialHook) redis.DialHook { return next }
func (r *redisKeys) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		// A script's first run on a server is an EVALSHA refused with
		// NOSCRIPT, then the EVAL that loads it: the refusal is not counted,
		// so that the test means the same on a new server as on one that
		// has run the script before.
		if err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") {
			return err
		}
		var args []string
		for _, a := range cmd.Args() {
			args = append(args, fmt.Sprint(a))
		}
		r.mu.Lock()
		r.cmds = append(r.cmds, args)
		r.mu.Unlock()
		return err
	}
}
func (r *redisKeys) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, c := range cmds {
			_ = r.ProcessHook(func(context.Context, redis.Cmder) error { return nil })(ctx, c)
		}
		return next(ctx, cmds)
	}
}

// authCommands returns, and forgets, the commands that touched a key's cache
// entry or a rate limit.
func (r *redisKeys) authCommands() [][]string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out [][]string
	for _, c := range r.cmds {
		if strings.Contains(strings.Join(c, " "), "gh:key:") || strings.Contains(strings.Join(c, " "), "gh:rl:") {
			out = append(out, c)
		}
	}
	r.cmds = nil
	return out
}

// A charge with a key whose entry is cached reads the entry and counts the
// request against the key's limit and its merchant's in one Redis round
// trip, the key's entry and window on keys of one Redis Cluster slot (on a
// cluster the merchant's window, in another slot, takes a second); a
// revoked key is refused and not counted.
func TestChargeRouteReadsKeyAndLimitInOneRoundTrip(t *testing.T) {
	t.Parallel()
	h := newHarness(t, func(env map[string]string) { env["RATE_LIMIT_CHARGES"] = "5/1m" })
	a := h.account("ada@example.com")
	rec := &redisKeys{}
	h.rdb.AddHook(rec)
	want(t, h.do("POST", "/v1/charges", `{}`, bearer(a.secret)...), 400, "parameter_missing")
	if n := len(rec.authCommands()); n < 2 {
		t.Fatalf("first request (cache miss): %d auth commands, want the fill and the count", n)
	}
	for i := 0; i < 3; i++ {
		r := h.do("POST", "/v1/charges", `{}`, bearer(a.secret)...)
		want(t, r, 400, "parameter_missing")
		if got := r.header.Get("RateLimit-Remaining"); got != strconv.Itoa(3-i) {
			t.Fatalf("RateLimit-Remaining %q, want %d", got, 3-i)
		}
		cmds := rec.authCommands()
		if len(cmds) != 1 {
			t.Fatalf("request %d: %d commands on the key's entry and limits, want 1: %q", i+2, len(cmds), cmds)
		}
		var tags []string
		merchantWindow := false
		for _, arg := range cmds[0] {
			if arg == "gh:rl:charges_merchant:"+a.merchantID {
				merchantWindow = true
				continue
			}
			if strings.HasPrefix(arg, "gh:") {
				open, end := strings.Index(arg, "{"), strings.Index(arg, "}")
				if open < 0 || end < open {
					t.Fatalf("key %q has no hash tag", arg)
				}
				tags = append(tags, arg[open:end+1])
			}
		}
		if len(tags) != 2 || tags[0] != tags[1] || !merchantWindow {
			t.Fatalf("keys of the script %q: hash tags %q, want two equal, and the merchant's window", cmds[0], tags)
		}
	}
	// Revoked: refused, and the window (4 of 5 used) is left alone.
	want(t, h.do("DELETE", "/v1/me/api_keys/"+a.keyID, "", bearer(a.secret)...), 200, "")
	for i := 0; i < 3; i++ {
		want(t, h.do("POST", "/v1/charges", `{}`, bearer(a.secret)...), 401, "token_revoked")
	}
	n, err := h.rdb.Eval(context.Background(), `local n = 0
for _, k in ipairs(redis.call('KEYS', 'gh:rl:charges:*')) do n = n + redis.call('ZCARD', k) end
return n`, nil).Int()
	if err != nil || n != 4 {
		t.Fatalf("entries in the charges windows: %d (%v), want 4", n, err)
	}
}

func TestRoutingAndRequestIDs(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	a := h.account("ada@example.com")
	want(t, h.do("GET", "/v1/nothing-here", ""), 404, "not_found")
	want(t, h.do("PUT", "/v1/me", "", bearer(a.secret)...), 405, "method_not_allowed")

	r := h.do("GET", "/v1/me", "", append(bearer(a.secret), "X-Request-Id", "client-id.123")...)
	if r.header.Get("X-Request-Id") != "client-id.123" {
		t.Fatalf("request id not echoed: %q", r.header.Get("X-Request-Id"))
	}
	bad := h.do("GET", "/v1/nothing", "", "X-Request-Id", "has spaces and <html>")
	if id := bad.header.Get("X-Request-Id"); id == "" || strings.Contains(id, " ") || bad.errField("request_id") != id {
		t.Fatalf("unsafe request id handled badly: header %q body %q", id, bad.errField("request_id"))
	}
	long := h.do("GET", "/healthz", "", "X-Request-Id", strings.Repeat("a", 65))
	if len(long.header.Get("X-Request-Id")) > 64 {
		t.Fatal("over-long request id echoed")
	}
}

func TestHealth(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	want(t, h.do("GET", "/healthz", ""), 200, "")
	r := h.do("GET", "/readyz", "")
	want(t, r, 200, "")
	m := h.do("GET", "/metrics", "")
	if m.status != 200 || !strings.Contains(string(m.raw), "gatehouse_http_requests_total") {
		t.Fatalf("metrics: %d", m.status)
	}
	if strings.Contains(string(m.raw), "mer_") || strings.Contains(string(m.raw), "key_") {
		t.Fatal("metrics carry ids")
	}
}

func TestTrustedProxies(t *testing.T) {
	t.Parallel()
	// The test connects from 127.0.0.1; trusting it makes X-Forwarded-For count.
	h := newHarness(t, func(env map[string]string) {
		env["TRUSTED_PROXIES"] = "127.0.0.1/32,10.0.0.0/8"
		env["RATE_LIMIT_LOGIN"] = "2/5m"
	})
	login := func(xff string) response {
		return h.do("POST", "/v1/auth/login", `{"email":"x@example.com","password":"whatever1"}`, "X-Forwarded-For", xff)
	}
	// The client is the right-most untrusted entry: 203.0.113.7 in both forms.
	want(t, login("198.51.100.1, 203.0.113.7"), 401, "invalid_credentials")
	want(t, login("203.0.113.7, 10.1.2.3"), 401, "invalid_credentials")
	want(t, login("198.51.100.99, 203.0.113.7, 10.9.9.9"), 429, "rate_limited")
	// Another client behind the same proxy has its own budget.
	want(t, login("203.0.113.8"), 401, "invalid_credentials")
}
