package httpapi_test

// api/openapi.yaml, Idempotency: webhook endpoint creation is replayed like any
// creating POST, its secret included (stored sealed); API key creation
// replays the key object without its secret.

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

// countRows returns the number of rows of table for the merchant.
func (h *harness) countRows(t *testing.T, table, merchantID string) int {
	t.Helper()
	var n int
	q := `SELECT count(*) FROM ` + table + ` WHERE merchant_id = $1`
	if table == "webhook_endpoints" {
		q += ` AND deleted_at IS NULL`
	}
	if err := h.db.Pool.QueryRow(context.Background(), q, merchantID).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// noClearSecrets fails if any stored idempotency record holds a webhook or
// API secret in clear.
func (h *harness) noClearSecrets(t *testing.T) {
	t.Helper()
	rows, err := h.db.Pool.Query(context.Background(), `SELECT key, response FROM idempotency_keys`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	n := 0
	for rows.Next() {
		var key string
		var resp []byte
		if err := rows.Scan(&key, &resp); err != nil {
			t.Fatal(err)
		}
		n++
		for _, secret := range []string{"whsec_", "sk_test_", "sk_live_"} {
			if bytes.Contains(resp, []byte(secret)) {
				t.Errorf("idempotency record %q holds %s in clear", key, secret)
			}
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if n == 0 {
		t.Error("no idempotency record stored: the scan proves nothing")
	}
}

func TestEndpointCreationIsIdempotent(t *testing.T) {
	t.Parallel()
	h := newHarness(t, paymentsEnv)
	a := h.account("idem-endpoint@example.com")
	body := endpointBody("https://hooks.example.com/idem", "charge.captured")
	key := []string{"Idempotency-Key", "endpoint-create-1"}
	auth := bearer(a.secret)

	first := h.do("POST", "/v1/me/webhook_endpoints", body, append(auth, key...)...)
	want(t, first, 201, "")
	if first.header.Get("Idempotent-Replayed") != "" {
		t.Errorf("first answer carries Idempotent-Replayed: %q", first.header.Get("Idempotent-Replayed"))
	}
	secret, _ := first.body["webhook_secret"].(string)
	if !strings.HasPrefix(secret, "whsec_") {
		t.Fatalf("first answer has no secret: %s", first.raw)
	}
	again := h.do("POST", "/v1/me/webhook_endpoints", body, append(auth, key...)...)
	want(t, again, 201, "")
	if !bytes.Equal(again.raw, first.raw) {
		t.Errorf("replay differs:\nfirst  %s\nreplay %s", first.raw, again.raw)
	}
	if again.header.Get("Idempotent-Replayed") != "true" {
		t.Errorf("replay without Idempotent-Replayed: true")
	}
	if n := h.countRows(t, "webhook_endpoints", a.merchantID); n != 1 {
		t.Errorf("%d endpoints after a repeat, want 1", n)
	}
	h.noClearSecrets(t)

	// Another body under the same key.
	other := h.do("POST", "/v1/me/webhook_endpoints", endpointBody("https://hooks.example.com/other", "charge.captured"), append(auth, key...)...)
	want(t, other, 422, "idempotency_key_reused")
	// The key of a charge is not the key of an endpoint.
	want(t, h.do("POST", "/v1/charges", chargeJSON(), append(auth, key...)...), 422, "idempotency_key_reused")

	// Without a key each request creates an endpoint.
	want(t, h.do("POST", "/v1/me/webhook_endpoints", body, auth...), 201, "")
	if n := h.countRows(t, "webhook_endpoints", a.merchantID); n != 2 {
		t.Errorf("%d endpoints, want 2", n)
	}

	// Concurrent repeats: exactly one endpoint, every 201 the same bytes.
	concurrent := []string{"Idempotency-Key", "endpoint-create-burst"}
	answers := burst(t, 8, func(int) (response, error) {
		return h.unchecked(t, "POST", "/v1/me/webhook_endpoints", body, append(auth, concurrent...)...), nil
	})
	var created []byte
	for _, r := range answers {
		switch {
		case r.status == 201 && created == nil:
			created = r.raw
		case r.status == 201:
			if !bytes.Equal(r.raw, created) {
				t.Errorf("two different 201 answers under one key:\n%s\n%s", created, r.raw)
			}
		case r.status == 409 && r.errCode() == "idempotency_key_in_use":
		default:
			t.Errorf("concurrent repeat: %d %s", r.status, r.raw)
		}
	}
	if n := h.countRows(t, "webhook_endpoints", a.merchantID); n != 3 {
		t.Errorf("%d endpoints after 8 concurrent repeats, want 3 (one more)", n)
	}
	h.noClearSecrets(t)
}

func TestAPIKeyCreationIsIdempotent(t *testing.T) {
	t.Parallel()
	h := newHarness(t, paymentsEnv)
	a := h.account("idem-key@example.com")
	session := bearer(a.token)
	key := []string{"Idempotency-Key", "key-create-1"}
	before := h.countRows(t, "api_keys", a.merchantID)

	first := h.do("POST", "/v1/me/api_keys", `{"name":"ci"}`, append(session, key...)...)
	want(t, first, 201, "")
	if s, _ := first.body["secret_key"].(string); !strings.HasPrefix(s, "sk_test_") {
		t.Fatalf("first answer without a secret key: %s", first.raw)
	}
	again := h.do("POST", "/v1/me/api_keys", `{"name":"ci"}`, append(session, key...)...)
	want(t, again, 201, "")
	if again.header.Get("Idempotent-Replayed") != "true" {
		t.Error("replay without Idempotent-Replayed: true")
	}
	if again.body["id"] != first.body["id"] || again.body["public_key"] != first.body["public_key"] {
		t.Errorf("replay names another key: %s vs %s", again.raw, first.raw)
	}
	if _, ok := again.body["secret_key"]; ok {
		t.Errorf("replay carries secret_key: %s", again.raw)
	}
	if got := h.countRows(t, "api_keys", a.merchantID); got != before+1 {
		t.Errorf("%d keys after a repeat, want %d", got, before+1)
	}
	list := h.do("GET", "/v1/me/api_keys?limit=100", "", session...)
	want(t, list, 200, "")
	if n := len(list.body["data"].([]any)); n != before+1 {
		t.Errorf("the list holds %d keys, want %d", n, before+1)
	}
	want(t, h.do("POST", "/v1/me/api_keys", `{"name":"other"}`, append(session, key...)...), 422, "idempotency_key_reused")
	h.noClearSecrets(t)

	// Concurrent repeats create one key.
	burstKey := []string{"Idempotency-Key", "key-create-burst"}
	answers := burst(t, 6, func(int) (response, error) {
		return h.unchecked(t, "POST", "/v1/me/api_keys", `{"name":"burst"}`, append(session, burstKey...)...), nil
	})
	withSecret := 0
	for _, r := range answers {
		switch {
		case r.status == 201:
			if _, ok := r.body["secret_key"]; ok {
				withSecret++
			}
		case r.status == 409 && r.errCode() == "idempotency_key_in_use":
		default:
			t.Errorf("concurrent repeat: %d %s", r.status, r.raw)
		}
	}
	if withSecret != 1 {
		t.Errorf("%d answers carried a secret key, want exactly 1", withSecret)
	}
	if got := h.countRows(t, "api_keys", a.merchantID); got != before+2 {
		t.Errorf("%d keys after concurrent repeats, want %d", got, before+2)
	}
}
