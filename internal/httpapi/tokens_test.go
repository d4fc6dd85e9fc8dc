package httpapi_test

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"
)

const tokenCard = `{"card":{"number":"4242424242424242","exp_month":12,"exp_year":2030,"cvc":"123"}}`

// publicKeyOf returns the public key of the key pair whose secret is given.
func (h *harness) publicKeyOf(secret string) string {
	h.t.Helper()
	r := h.do("GET", "/v1/me/api_keys", "", bearer(secret)...)
	want(h.t, r, 200, "")
	for _, k := range r.body["data"].([]any) {
		k := k.(map[string]any)
		if strings.HasSuffix(secret, k["secret_key_last4"].(string)) {
			return k["public_key"].(string)
		}
	}
	h.t.Fatalf("no key ends like the secret: %s", r.raw)
	return ""
}

func tokenChargeBody(token string) string {
	return fmt.Sprintf(`{"amount":2000,"currency":"usd","payment_method":"card","card":{"token":%q}}`, token)
}

// api/openapi.yaml: POST /v1/tokens takes only a
// public key, answers CORS to any origin, and its token is charged once by
// the merchant's secret key.
func TestCardTokens(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	a := h.account("ada@example.com")
	pk := h.publicKeyOf(a.secret)
	ctx := context.Background()

	t.Run("created with the public key, CORS for any origin", func(t *testing.T) {
		r := h.do("POST", "/v1/tokens", tokenCard, append(bearer(pk), "Origin", "https://shop.example")...)
		want(t, r, 201, "")
		if got := r.header.Get("Access-Control-Allow-Origin"); got != "*" {
			t.Errorf("Access-Control-Allow-Origin %q, want *", got)
		}
		card := r.body["card"].(map[string]any)
		id, _ := r.body["id"].(string)
		if !strings.HasPrefix(id, "ctok_") || r.body["object"] != "token" || r.body["type"] != "card" ||
			r.body["used"] != false || r.body["livemode"] != false || card["last4"] != "4242" || card["brand"] != "visa" {
			t.Fatalf("token %s", r.raw)
		}
		created, _ := time.Parse(time.RFC3339, r.body["created_at"].(string))
		expires, _ := time.Parse(time.RFC3339, r.body["expires_at"].(string))
		if expires.Sub(created) != 15*time.Minute {
			t.Errorf("expires %s after creation, want 15m", expires.Sub(created))
		}
		if bytes.Contains(r.raw, []byte("4242424242424242")) || bytes.Contains(r.raw, []byte(`"123"`)) {
			t.Errorf("the answer carries the card: %s", r.raw)
		}
		var sealed []byte
		if err := h.db.Pool.QueryRow(ctx, `SELECT card_sealed FROM card_tokens WHERE id = $1`, id).Scan(&sealed); err != nil {
			t.Fatal(err)
		}
		if len(sealed) == 0 || bytes.Contains(sealed, []byte("4242424242424242")) {
			t.Errorf("the token's card is not sealed: %d bytes", len(sealed))
		}
	})

	t.Run("preflight; no CORS elsewhere", func(t *testing.T) {
		r := h.do("OPTIONS", "/v1/tokens", "", "Origin", "https://shop.example", "Access-Control-Request-Method", "POST",
			"Access-Control-Request-Headers", "authorization,content-type")
		if r.status != http.StatusNoContent || r.header.Get("Access-Control-Allow-Origin") != "*" ||
			r.header.Get("Access-Control-Allow-Methods") != "POST" ||
			r.header.Get("Access-Control-Allow-Headers") != "Authorization, Content-Type, Idempotency-Key" {
			t.Fatalf("preflight: %d %v", r.status, r.header)
		}
		for _, path := range []string{"/v1/charges", "/v1/me"} {
			r := h.do("GET", path, "", append(bearer(a.secret), "Origin", "https://shop.example")...)
			if v := r.header.Get("Access-Control-Allow-Origin"); v != "" {
				t.Errorf("GET %s: Access-Control-Allow-Origin %q, want none", path, v)
			}
		}
	})

	t.Run("only a public key", func(t *testing.T) {
		for _, c := range []struct {
			name, token string
			status      int
			code        string
		}{
			{"secret key", a.secret, 401, "invalid_token_type"},
			{"session token", a.token, 401, "invalid_token_type"},
			{"live public key", "pk_live_" + strings.TrimPrefix(pk, "pk_test_"), 403, "live_mode_disabled"},
			{"unknown public key", "pk_test_unknown", 401, "invalid_token"},
			{"none", "", 401, "missing_authorization"},
		} {
			var headers []string
			if c.token != "" {
				headers = bearer(c.token)
			}
			r := h.do("POST", "/v1/tokens", tokenCard, headers...)
			if r.status != c.status || r.errCode() != c.code {
				t.Errorf("%s: %d %s, want %d %s", c.name, r.status, r.errCode(), c.status, c.code)
			}
			if r.header.Get("Access-Control-Allow-Origin") != "*" {
				t.Errorf("%s: the error carries no Access-Control-Allow-Origin, so the page cannot read it", c.name)
			}
		}
		for field, body := range map[string]string{
			"card":        `{}`,
			"card.number": `{"card":{"number":"4242424242424241","exp_month":12,"exp_year":2030,"cvc":"123"}}`,
			"card.cvc":    `{"card":{"number":"4242424242424242","exp_month":12,"exp_year":2030,"cvc":"12"}}`,
			"card.token":  `{"card":{"token":"ctok_x"}}`,
		} {
			r := h.do("POST", "/v1/tokens", body, bearer(pk)...)
			if r.status != 400 || r.errField("param") != field {
				t.Errorf("%s: %d %s", field, r.status, r.raw)
			}
		}
	})

	t.Run("a revoked key pair's public key", func(t *testing.T) {
		id, secret := h.newKey(a.token)
		revokedPK := h.publicKeyOf(secret)
		want(t, h.do("DELETE", "/v1/me/api_keys/"+id, "", bearer(secret)...), 200, "")
		want(t, h.do("POST", "/v1/tokens", tokenCard, bearer(revokedPK)...), 401, "token_revoked")
	})

	t.Run("charged once, with its card, in the charge's transaction", func(t *testing.T) {
		tok := h.do("POST", "/v1/tokens", tokenCard, bearer(pk)...)
		want(t, tok, 201, "")
		id := tok.body["id"].(string)
		raw := h.do("POST", "/v1/charges", `{"amount":2000,"currency":"usd","payment_method":"card","card":{"number":"4242424242424242","exp_month":12,"exp_year":2030,"cvc":"123"}}`, bearer(a.secret)...)
		want(t, raw, 201, "")

		ch := h.do("POST", "/v1/charges", tokenChargeBody(id), append(bearer(a.secret), "Idempotency-Key", "order-1")...)
		want(t, ch, 201, "")
		card := ch.body["card"].(map[string]any)
		tokCard := tok.body["card"].(map[string]any)
		if card["last4"] != "4242" || card["exp_year"] != float64(2030) || card["fingerprint"] != tokCard["fingerprint"] ||
			card["fingerprint"] != raw.body["card"].(map[string]any)["fingerprint"] {
			t.Errorf("charge card %v, token card %v, raw card's fingerprint %v", card, tokCard, raw.body["card"])
		}
		var used bool
		var chargeID string
		var tokenSealed, chargeSealed []byte
		if err := h.db.Pool.QueryRow(ctx, `SELECT t.used_at IS NOT NULL, t.charge_id::text, t.card_sealed, c.card_sealed
			FROM card_tokens t JOIN charges c ON c.id = t.charge_id WHERE t.id = $1`, id).Scan(&used, &chargeID, &tokenSealed, &chargeSealed); err != nil {
			t.Fatal(err)
		}
		if !used || chargeID != ch.body["id"] || tokenSealed != nil || len(chargeSealed) == 0 {
			t.Errorf("token used %v by %s (charge %v), token card %d bytes, charge card %d bytes",
				used, chargeID, ch.body["id"], len(tokenSealed), len(chargeSealed))
		}

		// The same request again is a replay; another request is refused.
		again := h.do("POST", "/v1/charges", tokenChargeBody(id), append(bearer(a.secret), "Idempotency-Key", "order-1")...)
		if again.status != 201 || again.header.Get("Idempotent-Replayed") != "true" || !bytes.Equal(again.raw, ch.raw) {
			t.Errorf("replay: %d %q %s", again.status, again.header.Get("Idempotent-Replayed"), again.raw)
		}
		r := h.do("POST", "/v1/charges", tokenChargeBody(id), bearer(a.secret)...)
		if r.status != 400 || r.errCode() != "parameter_invalid" || r.errField("param") != "card.token" {
			t.Errorf("second use: %d %s", r.status, r.raw)
		}
	})

	t.Run("unusable tokens", func(t *testing.T) {
		other := h.account("grace@example.com")
		otherTok := h.do("POST", "/v1/tokens", tokenCard, bearer(h.publicKeyOf(other.secret))...)
		want(t, otherTok, 201, "")
		expired := h.do("POST", "/v1/tokens", tokenCard, bearer(pk)...)
		want(t, expired, 201, "")
		if _, err := h.db.Pool.Exec(ctx, `UPDATE card_tokens SET expires_at = now() - interval '1 second' WHERE id = $1`, expired.body["id"]); err != nil {
			t.Fatal(err)
		}
		before := h.snapshot(t)
		for name, id := range map[string]string{
			"unknown": "ctok_0000000000000000000000000", "another merchant's": otherTok.body["id"].(string),
			"expired": expired.body["id"].(string),
		} {
			r := h.do("POST", "/v1/charges", tokenChargeBody(id), bearer(a.secret)...)
			if r.status != 400 || r.errCode() != "parameter_invalid" || r.errField("param") != "card.token" {
				t.Errorf("%s token: %d %s", name, r.status, r.raw)
			}
		}
		after := h.snapshot(t)
		for tb, v := range before {
			if tb != "idempotency_keys" && after[tb] != v {
				t.Errorf("table %s changed by refused charges: %s -> %s", tb, v, after[tb])
			}
		}
	})

	t.Run("one token, charges racing: one wins", func(t *testing.T) {
		tok := h.do("POST", "/v1/tokens", tokenCard, bearer(pk)...)
		want(t, tok, 201, "")
		body := tokenChargeBody(tok.body["id"].(string))
		answers := burst(t, 8, func(i int) (response, error) {
			return h.doWith(client, "POST", "/v1/charges", body, bearer(a.secret)...), nil
		})
		won := 0
		for _, r := range answers {
			switch {
			case r.status == 201:
				won++
			case r.status == 400 && r.errField("param") == "card.token":
			default:
				t.Errorf("answer %d %s", r.status, r.raw)
			}
		}
		var n int
		if err := h.db.Pool.QueryRow(ctx, `SELECT count(*) FROM charges WHERE card_fingerprint IS NOT NULL AND id IN
			(SELECT charge_id FROM card_tokens WHERE id = $1)`, tok.body["id"]).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if won != 1 || n != 1 {
			t.Fatalf("%d charges answered 201 and %d use the token, want 1 and 1", won, n)
		}
	})
}

// The per-key limit of POST /v1/tokens (RATE_LIMIT_PUBLIC_KEY) counts the
// public key's requests from every address.
func TestCardTokensLimitedPerPublicKey(t *testing.T) {
	t.Parallel()
	// The set-up's own requests (keys, lists) come from one address and count
	// against its limit of 6; the tokens come from others.
	h := newHarness(t, func(env map[string]string) {
		env["RATE_LIMIT_DEFAULT"] = "6/1m"
		env["RATE_LIMIT_PUBLIC_KEY"] = "6/1m"
	})
	a := h.account("ada@example.com")
	pk := h.publicKeyOf(a.secret)
	_, other := h.newKey(a.token)
	otherPK := h.publicKeyOf(other)
	for i := 0; i < 6; i++ {
		want(t, h.doWith(clientFrom(t, fmt.Sprintf("127.0.0.%d", 10+i)), "POST", "/v1/tokens", tokenCard, bearer(pk)...), 201, "")
	}
	r := h.doWith(clientFrom(t, "127.0.0.20"), "POST", "/v1/tokens", tokenCard, bearer(pk)...)
	want(t, r, 429, "rate_limited")
	if r.header.Get("Access-Control-Allow-Origin") != "*" || r.header.Get("Retry-After") == "" {
		t.Errorf("429 headers %v", r.header)
	}
	want(t, h.doWith(clientFrom(t, "127.0.0.20"), "POST", "/v1/tokens", tokenCard, bearer(otherPK)...), 201, "")
}
