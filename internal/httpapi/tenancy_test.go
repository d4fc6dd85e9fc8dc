package httpapi_test

import (
	"fmt"
	"math/rand/v2"
	"net/http"
	"testing"
)

// What a stranger holding the public key can do to the merchant, and what a
// merchant can do to another's endpoints: nothing.

// TestIdempotencyScopesProperty drives random requests with a few shared
// Idempotency-Keys through the public key (POST /v1/tokens) and the secret
// key (POST /v1/charges), and checks each answer against a model in which the
// two kinds of credential have spaces of their own: within a space, the same
// body replays the first answer and another body gets 422; across spaces,
// nothing is shared, so a key used first by one space is new to the other.
func TestIdempotencyScopesProperty(t *testing.T) {
	t.Parallel()
	h := newHarness(t, paymentsEnv)
	a := h.account("ada@example.com")
	pk := h.publicKeyOf(a.secret)
	seed := rand.Uint64()
	rng := rand.New(rand.NewPCG(seed, 7))
	t.Logf("seed %d", seed)

	type first struct {
		body, id string
	}
	type slot struct {
		public bool
		key    string
	}
	model := map[slot]first{}
	keys := []string{"order-1", "order-2", "order-3"}
	tokens := []string{tokenCard, `{"card":{"number":"5555555555554444","exp_month":12,"exp_year":2030,"cvc":"123"}}`}
	charges := []string{
		fmt.Sprintf(`{"amount":100,"currency":"usd","payment_method":"card","card":{"number":"%s","exp_month":12,"exp_year":%d,"cvc":"123"}}`, cardVisa, expYear),
		fmt.Sprintf(`{"amount":200,"currency":"usd","payment_method":"card","card":{"number":"%s","exp_month":12,"exp_year":%d,"cvc":"123"}}`, cardVisa, expYear),
	}
	for step := range 40 {
		s := slot{public: rng.IntN(2) == 0, key: keys[rng.IntN(len(keys))]}
		path, credential, body, object := "/v1/charges", a.secret, charges[rng.IntN(2)], "charge"
		if s.public {
			path, credential, body, object = "/v1/tokens", pk, tokens[rng.IntN(2)], "token"
		}
		r := h.do("POST", path, body, "Authorization", "Bearer "+credential, "Idempotency-Key", s.key)
		prev, seen := model[s]
		switch {
		case !seen:
			if r.status != http.StatusCreated || r.body["object"] != object || r.header.Get("Idempotent-Replayed") != "" {
				t.Fatalf("step %d: first %s under %q (public %t): %d %s", step, path, s.key, s.public, r.status, r.raw)
			}
			model[s] = first{body: body, id: r.body["id"].(string)}
		case prev.body == body:
			if r.status != http.StatusCreated || r.body["id"] != prev.id || r.header.Get("Idempotent-Replayed") != "true" {
				t.Fatalf("step %d: repeat of %s under %q (public %t): %d %s, want %s replayed", step, path, s.key, s.public, r.status, r.raw, prev.id)
			}
		default:
			want(t, r, http.StatusUnprocessableEntity, "idempotency_key_reused")
		}
	}
	crossed := 0
	for _, k := range keys {
		if _, ok := model[slot{true, k}]; ok {
			if _, ok := model[slot{false, k}]; ok {
				crossed++
			}
		}
	}
	t.Logf("%d of %d keys were used by both kinds of credential", crossed, len(keys))
}

// TestTokenLimitsProperty sends POST /v1/tokens from random addresses and
// checks every answer against the model of the two limits: an address over
// its own limit (RATE_LIMIT_DEFAULT) gets 429 and spends nothing of the
// public key's; otherwise the request counts against the key's limit
// (RATE_LIMIT_PUBLIC_KEY), over which it gets 429.
func TestTokenLimitsProperty(t *testing.T) {
	t.Parallel()
	const perIP, perKey = 5, 17
	h := newHarness(t, func(env map[string]string) {
		env["RATE_LIMIT_DEFAULT"] = fmt.Sprintf("%d/1m", perIP)
		env["RATE_LIMIT_PUBLIC_KEY"] = fmt.Sprintf("%d/1m", perKey)
	})
	a := h.account("ada@example.com")
	pk := h.publicKeyOf(a.secret)
	seed := rand.Uint64()
	rng := rand.New(rand.NewPCG(seed, 11))
	t.Logf("seed %d", seed)

	const addresses = 8
	clients := make([]*http.Client, addresses)
	for i := range clients {
		clients[i] = clientFrom(t, fmt.Sprintf("127.0.1.%d", 10+i))
	}
	perAddress, keyCount, created := make([]int, addresses), 0, 0
	for step := range 70 {
		i := rng.IntN(addresses)
		r := h.doWith(clients[i], "POST", "/v1/tokens", tokenCard, bearer(pk)...)
		wantStatus, limit := http.StatusCreated, perKey
		switch {
		case perAddress[i] >= perIP:
			wantStatus, limit = http.StatusTooManyRequests, perIP
		case keyCount >= perKey:
			perAddress[i]++
			wantStatus = http.StatusTooManyRequests
		default:
			perAddress[i]++
			keyCount++
		}
		if r.status != wantStatus {
			t.Fatalf("step %d from address %d (%d sent there, %d counted for the key): %d %s, want %d",
				step, i, perAddress[i], keyCount, r.status, r.raw, wantStatus)
		}
		if wantStatus == http.StatusTooManyRequests && r.header.Get("RateLimit-Limit") != fmt.Sprint(limit) {
			t.Fatalf("step %d: 429 with RateLimit-Limit %q, want the %d limit", step, r.header.Get("RateLimit-Limit"), limit)
		}
		if r.status == http.StatusCreated {
			created++
		}
	}
	if created != min(perKey, addresses*perIP) || keyCount != perKey {
		t.Errorf("%d tokens created, %d counted for the key; want %d", created, keyCount, perKey)
	}
}

// TestEndpointActionsLimitedPerEndpoint: test and recover are limited per
// endpoint (RATE_LIMIT_ENDPOINT_ACTIONS), each route on its own count; one
// endpoint at its limit leaves the merchant's others alone, and another
// merchant naming the endpoint's id gets 404 and spends nothing of it (only
// its own count, under its own merchant).
func TestEndpointActionsLimitedPerEndpoint(t *testing.T) {
	t.Parallel()
	const n = 3
	h := newHarness(t, func(env map[string]string) {
		paymentsEnv(env)
		env["RATE_LIMIT_ENDPOINT_ACTIONS"] = fmt.Sprintf("%d/1m", n)
	})
	a := h.account("ada@example.com")
	b := h.account("bob@example.com")
	ep1, _ := h.createEndpoint(t, a.secret, "https://hooks.example.com/one", "charge.created")
	ep2, _ := h.createEndpoint(t, a.secret, "https://hooks.example.com/two", "charge.created")
	recover := `{"since":"2026-01-01T00:00:00Z"}`

	for _, ep := range []string{ep1, ep2} {
		for range n {
			want(t, h.do("POST", "/v1/me/webhook_endpoints/"+ep+"/test", "", bearer(b.secret)...), 404, "not_found")
			want(t, h.do("POST", "/v1/me/webhook_endpoints/"+ep+"/recover", recover, bearer(b.secret)...), 404, "not_found")
		}
	}
	for i := range n {
		r := h.do("POST", "/v1/me/webhook_endpoints/"+ep1+"/test", "", bearer(a.secret)...)
		want(t, r, 202, "")
		if r.header.Get("RateLimit-Remaining") != fmt.Sprint(n-1-i) {
			t.Errorf("test %d: RateLimit-Remaining %q, want %d", i+1, r.header.Get("RateLimit-Remaining"), n-1-i)
		}
	}
	r := h.do("POST", "/v1/me/webhook_endpoints/"+ep1+"/test", "", bearer(a.secret)...)
	want(t, r, 429, "rate_limited")
	if r.header.Get("Retry-After") == "" {
		t.Errorf("429 without Retry-After: %v", r.header)
	}
	for range n {
		want(t, h.do("POST", "/v1/me/webhook_endpoints/"+ep1+"/recover?dry_run=true", recover, bearer(a.secret)...), 200, "")
	}
	want(t, h.do("POST", "/v1/me/webhook_endpoints/"+ep1+"/recover", recover, bearer(a.secret)...), 429, "rate_limited")
	for range n {
		want(t, h.do("POST", "/v1/me/webhook_endpoints/"+ep2+"/test", "", bearer(a.secret)...), 202, "")
	}
	want(t, h.do("POST", "/v1/me/webhook_endpoints/"+ep2+"/test", "", bearer(a.secret)...), 429, "rate_limited")
}
