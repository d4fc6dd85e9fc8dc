package e2e

import (
	"fmt"
	"net/http"
	"testing"
)

// The public key is public: it sits in every checkout page. A stranger who
// holds it can neither block nor answer the merchant's own requests by
// guessing their Idempotency-Keys, nor spend, from one address, the quota of
// POST /v1/tokens that every shopper of the merchant shares.

const tokenBody = `{"card":{"number":"4242424242424242","exp_month":12,"exp_year":2031,"cvc":"123"}}`

// TestPublicKeyIdempotencyScope: keys sent with the public key live in a
// space of their own. A key a stranger used first does not make the
// merchant's charge 422, a key the merchant used first is not replayed to
// the stranger, and each space still replays its own repeats.
func TestPublicKeyIdempotencyScope(t *testing.T) {
	parallel(t)
	st := newStack(t, stackOptions{}, "idempotency keys scoped per kind of credential")
	c := newClient(t, "127.0.0.60")
	stranger := newClient(t, "127.0.0.61")
	_, session := st.signUp(t, c, "scope", "Scope Shop")
	key := st.newKey(t, c, session, "scope")
	charge := `{"amount":1043,"currency":"usd","payment_method":"card","card":{"number":"4242424242424242","exp_month":12,"exp_year":2031,"cvc":"123"}}`

	post := func(c *http.Client, base, path, credential, body, idem string) exchange {
		t.Helper()
		e, err := sendWith(c, http.MethodPost, base+path, credential, body, "Idempotency-Key", idem)
		if err != nil {
			t.Fatal(err)
		}
		st.check(t, e)
		return e
	}
	objectOf := func(e exchange) (id, object string) {
		t.Helper()
		var v struct{ ID, Object string }
		decode(t, e, &v)
		return v.ID, v.Object
	}

	// The stranger reserves the merchant's next order number first.
	tok := post(stranger, st.replicas[0], "/v1/tokens", key.PublicKey, tokenBody, "order-1043")
	mustExpect(t, tok, http.StatusCreated, "")
	tokenID, _ := objectOf(tok)
	ch := post(c, st.replicas[1], "/v1/charges", key.SecretKey, charge, "order-1043")
	mustExpect(t, ch, http.StatusCreated, "")
	if ch.header("Idempotent-Replayed") != "" {
		t.Fatalf("the merchant's first charge under order-1043 is marked replayed: %s", ch)
	}
	chargeID, object := objectOf(ch)
	if object != "charge" {
		t.Fatalf("POST /v1/charges answered a %q: %s", object, ch)
	}

	// The merchant's key is not answered to the stranger either.
	mustExpect(t, post(c, st.replicas[0], "/v1/charges", key.SecretKey, charge, "order-2001"), http.StatusCreated, "")
	tok2 := post(stranger, st.replicas[1], "/v1/tokens", key.PublicKey, tokenBody, "order-2001")
	mustExpect(t, tok2, http.StatusCreated, "")
	if id, object := objectOf(tok2); object != "token" || tok2.header("Idempotent-Replayed") != "" || id == tokenID {
		t.Fatalf("a token under the merchant's order-2001 answered %s (replayed %q)", tok2, tok2.header("Idempotent-Replayed"))
	}

	// Each space replays its own repeats, on either replica.
	for _, base := range st.replicas {
		again := post(stranger, base, "/v1/tokens", key.PublicKey, tokenBody, "order-1043")
		mustExpect(t, again, http.StatusCreated, "")
		if id, _ := objectOf(again); id != tokenID || again.header("Idempotent-Replayed") != "true" {
			t.Errorf("token repeat on %s: %s, want %s replayed", base, again, tokenID)
		}
		again = post(c, base, "/v1/charges", key.SecretKey, charge, "order-1043")
		mustExpect(t, again, http.StatusCreated, "")
		if id, _ := objectOf(again); id != chargeID || again.header("Idempotent-Replayed") != "true" {
			t.Errorf("charge repeat on %s: %s, want %s replayed", base, again, chargeID)
		}
	}
	// Another request under a key of its own space is still refused.
	mustExpect(t, post(stranger, st.replicas[0], "/v1/tokens", key.PublicKey,
		`{"card":{"number":"5555555555554444","exp_month":12,"exp_year":2031,"cvc":"123"}}`, "order-1043"),
		http.StatusUnprocessableEntity, "idempotency_key_reused")
	mustExpect(t, post(c, st.replicas[1], "/v1/charges", key.SecretKey,
		`{"amount":1044,"currency":"usd","payment_method":"card","card":{"number":"4242424242424242","exp_month":12,"exp_year":2031,"cvc":"123"}}`, "order-1043"),
		http.StatusUnprocessableEntity, "idempotency_key_reused")
}

// TestPublicKeyLimitSharedFairly: POST /v1/tokens is limited per address
// (RATE_LIMIT_DEFAULT) and per public key (RATE_LIMIT_PUBLIC_KEY), and the
// per-key count holds only the requests that passed the per-address limit.
// One address flooding the route spends its own 20 and no more, so shoppers
// at other addresses get exactly the key's 50 less those 20, on either
// replica, and then 429.
func TestPublicKeyLimitSharedFairly(t *testing.T) {
	parallel(t)
	const perIP, perKey = 20, 50
	st := newStack(t, stackOptions{apiEnv: []string{
		fmt.Sprintf("RATE_LIMIT_DEFAULT=%d/1m", perIP), fmt.Sprintf("RATE_LIMIT_PUBLIC_KEY=%d/1m", perKey),
	}}, "the public key's own limit")
	c := newClient(t, "127.0.0.63")
	_, session := st.signUp(t, c, "limits", "Limits Shop")
	key := st.newKey(t, c, session, "limits")
	token := func(c *http.Client, i int, body string) exchange {
		t.Helper()
		e, err := sendWith(c, http.MethodPost, st.replicas[i%2]+"/v1/tokens", key.PublicKey, body)
		if err != nil {
			t.Fatal(err)
		}
		st.check(t, e)
		return e
	}

	// The flood: empty bodies from one address, three times its limit.
	flood := newClient(t, "127.0.0.64")
	counts := map[int]int{}
	for i := range 3 * perIP {
		counts[token(flood, i, `{}`).status()]++
	}
	if counts[http.StatusBadRequest] != perIP || counts[http.StatusTooManyRequests] != 2*perIP {
		t.Fatalf("the flood's answers %v, want %d x 400 and %d x 429", counts, perIP, 2*perIP)
	}

	// The shoppers: ten from each of three addresses, then one more.
	accepted := 0
	for i := range perKey - perIP {
		shopper := newClient(t, fmt.Sprintf("127.0.0.%d", 70+i/10))
		e := token(shopper, i, tokenBody)
		if e.status() != http.StatusCreated {
			t.Fatalf("shopper %d of %d after the flood: %s", i+1, perKey-perIP, e)
		}
		accepted++
	}
	last := token(newClient(t, "127.0.0.80"), 0, tokenBody)
	mustExpect(t, last, http.StatusTooManyRequests, "rate_limited")
	if last.header("Retry-After") == "" || last.header("RateLimit-Limit") != fmt.Sprint(perKey) {
		t.Errorf("the key's 429 carries Retry-After %q and RateLimit-Limit %q, want a delay and %d",
			last.header("Retry-After"), last.header("RateLimit-Limit"), perKey)
	}
	t.Logf("flood: %v; shoppers accepted: %d, then 429 at the key's %d", counts, accepted, perKey)
}

// TestEndpointActionsLimitedAcrossReplicas: an endpoint's test deliveries
// and recovers are limited per endpoint (RATE_LIMIT_ENDPOINT_ACTIONS) on
// every replica together; the merchant's other endpoint keeps its own count.
func TestEndpointActionsLimitedAcrossReplicas(t *testing.T) {
	parallel(t)
	const n = 3
	st := newStack(t, stackOptions{apiEnv: []string{fmt.Sprintf("RATE_LIMIT_ENDPOINT_ACTIONS=%d/1m", n)}},
		"test and recover limited per endpoint")
	c := newClient(t, "127.0.0.65")
	_, session := st.signUp(t, c, "actions", "Actions Shop")
	key := st.newKey(t, c, session, "actions")
	endpoint := func(url string) string {
		t.Helper()
		e := st.do(t, c, http.MethodPost, st.replicas[0]+"/v1/me/webhook_endpoints", key.SecretKey,
			`{"url":"`+url+`","events":["charge.captured"]}`)
		var v struct {
			Endpoint struct{ ID string } `json:"webhook_endpoint"`
		}
		decode(t, e, &v)
		return v.Endpoint.ID
	}
	busy, calm := endpoint("https://hooks.example.com/busy"), endpoint("https://hooks.example.com/calm")
	call := func(i int, ep, action, body string) exchange {
		t.Helper()
		e, err := send(c, http.MethodPost, st.replicas[i%2]+"/v1/me/webhook_endpoints/"+ep+"/"+action, key.SecretKey, body)
		if err != nil {
			t.Fatal(err)
		}
		st.check(t, e)
		return e
	}
	since := `{"since":"2026-01-01T00:00:00Z"}`
	for i := range n {
		mustExpect(t, call(i, busy, "test", ""), http.StatusAccepted, "")
		mustExpect(t, call(i, busy, "recover", since), http.StatusOK, "")
	}
	for action, body := range map[string]string{"test": "", "recover": since} {
		e := call(n, busy, action, body)
		mustExpect(t, e, http.StatusTooManyRequests, "rate_limited")
		if e.header("Retry-After") == "" {
			t.Errorf("%s's 429 has no Retry-After", action)
		}
	}
	mustExpect(t, call(0, calm, "test", ""), http.StatusAccepted, "")
}
