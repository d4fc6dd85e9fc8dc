package httpapi_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/uuid"

	"github.com/gatehouse-pay/gatehouse/internal/charges"
	"github.com/gatehouse-pay/gatehouse/internal/keyring"
	"github.com/gatehouse-pay/gatehouse/internal/providers"
	"github.com/gatehouse-pay/gatehouse/internal/providers/providertest"
	"github.com/gatehouse-pay/gatehouse/internal/refunds"
	"github.com/gatehouse-pay/gatehouse/internal/store"
)

// Test cards.
const (
	cardVisa       = "4242424242424242"
	cardMastercard = "5555555555554444"
	cardAmex       = "378282246310005"
)

// paymentsEnv raises the limits so that tests of payments and webhooks are
// never throttled.
func paymentsEnv(env map[string]string) {
	env["RATE_LIMIT_CHARGES"] = "10000/1m"
	env["RATE_LIMIT_DEFAULT"] = "100000/1m"
	env["RATE_LIMIT_ENDPOINT_ACTIONS"] = "100000/1m"
}

var expYear = time.Now().Year() + 3

// with returns the harness reporting to t, for use inside subtests.
func (h *harness) with(t *testing.T) *harness {
	c := *h
	c.t = t
	return &c
}

// try is do for other goroutines: it returns transport errors instead of
// stopping the test. The answer is still checked against the spec.
func (h *harness) try(method, path, body string, headers ...string) (response, error) {
	req, err := http.NewRequest(method, h.base+path, strings.NewReader(body))
	if err != nil {
		return response{}, err
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := client.Do(req)
	if err != nil {
		return response{}, err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return response{}, err
	}
	h.spec.Check(h.t, req, resp, raw)
	r := response{status: resp.StatusCode, header: resp.Header, raw: raw}
	if len(raw) > 0 {
		if err := json.Unmarshal(raw, &r.body); err != nil {
			return r, fmt.Errorf("%s %s: body is not JSON: %s", method, path, raw)
		}
	}
	return r, nil
}

// count runs a SELECT count(*) ... and returns the count.
func (h *harness) count(t *testing.T, query string, args ...any) int {
	t.Helper()
	var n int
	if err := h.db.Pool.QueryRow(context.Background(), query, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", query, err)
	}
	return n
}

// chargeRow is what the database holds of a charge's money.
type chargeRow struct {
	Status                           string
	Amount, Captured, Refunded, Held int64
	PendingAction                    *string
	SealedCard                       bool
}

func (h *harness) chargeRow(t *testing.T, id string) chargeRow {
	t.Helper()
	var r chargeRow
	err := h.db.Pool.QueryRow(context.Background(), `SELECT status, amount, amount_captured, amount_refunded,
		amount_refund_held, pending_action, card_sealed IS NOT NULL FROM charges WHERE id = $1`, id).
		Scan(&r.Status, &r.Amount, &r.Captured, &r.Refunded, &r.Held, &r.PendingAction, &r.SealedCard)
	if err != nil {
		t.Fatalf("charge %s: %v", id, err)
	}
	return r
}

// chargeJSON renders a create-charge body: a good visa charge of 2000 USD
// with each of mods applied.
func chargeJSON(mods ...func(map[string]any)) string {
	body := map[string]any{
		"amount":         2000,
		"currency":       "usd",
		"payment_method": "card",
		"card":           map[string]any{"number": cardVisa, "exp_month": 12, "exp_year": expYear, "cvc": "123"},
	}
	for _, m := range mods {
		m(body)
	}
	b, err := json.Marshal(body)
	if err != nil {
		panic(err)
	}
	return string(b)
}

func set(k string, v any) func(map[string]any) { return func(m map[string]any) { m[k] = v } }
func del(k string) func(map[string]any)        { return func(m map[string]any) { delete(m, k) } }

func setCard(k string, v any) func(map[string]any) {
	return func(m map[string]any) { m["card"].(map[string]any)[k] = v }
}

func delCard(k string) func(map[string]any) {
	return func(m map[string]any) { delete(m["card"].(map[string]any), k) }
}

func token(tok string) func(map[string]any) {
	return set("card", map[string]any{"token": tok})
}

// createCharge creates a charge and returns its body.
func (h *harness) createCharge(t *testing.T, secret, body string, headers ...string) response {
	t.Helper()
	r := h.with(t).do("POST", "/v1/charges", body, append(bearer(secret), headers...)...)
	want(t, r, 201, "")
	return r
}

func obj(v any) map[string]any { m, _ := v.(map[string]any); return m }

func idsOf(list response) []string {
	var out []string
	for _, it := range list.body["data"].([]any) {
		out = append(out, obj(it)["id"].(string))
	}
	return out
}

// worker is the worker side, run in-process against the harness database.
type worker struct {
	charges *charges.Processor
	refunds *refunds.Processor
	fake    *providertest.Fake
}

func (h *harness) worker(t *testing.T, fake *providertest.Fake) *worker {
	t.Helper()
	keys, err := keyring.New(h.cfg.EncryptionKey)
	if err != nil {
		t.Fatal(err)
	}
	st := store.New(h.db.Pool)
	reg := providers.Registry{"sandbox": fake}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	return &worker{
		charges: charges.NewProcessor(st, reg, keys, 5*time.Second, time.Now, log, nil),
		refunds: refunds.NewProcessor(st, reg, 5*time.Second, time.Now, log, nil),
		fake:    fake,
	}
}

func (w *worker) authorize(t *testing.T, id string) {
	t.Helper()
	if err := w.charges.Authorize(context.Background(), id, false); err != nil {
		t.Fatalf("authorize %s: %v", id, err)
	}
}

func (w *worker) refund(t *testing.T, id string) {
	t.Helper()
	if err := w.refunds.Process(context.Background(), id, false); err != nil {
		t.Fatalf("process refund %s: %v", id, err)
	}
}

// capturedCharge creates a charge of amount and has the worker capture it.
func (h *harness) capturedCharge(t *testing.T, w *worker, secret string, amount int) string {
	t.Helper()
	id := h.createCharge(t, secret, chargeJSON(set("amount", amount))).body["id"].(string)
	w.authorize(t, id)
	if got := h.chargeRow(t, id).Status; got != "captured" {
		t.Fatalf("charge %s is %s after authorize, want captured", id, got)
	}
	return id
}

// authorizedCharge creates a charge with capture false and has the worker authorize it.
func (h *harness) authorizedCharge(t *testing.T, w *worker, secret string, amount int) string {
	t.Helper()
	id := h.createCharge(t, secret, chargeJSON(set("amount", amount), set("capture", false))).body["id"].(string)
	w.authorize(t, id)
	if got := h.chargeRow(t, id).Status; got != "authorized" {
		t.Fatalf("charge %s is %s after authorize, want authorized", id, got)
	}
	return id
}

// eventsOf lists the merchant's events of one type (all of them, newest first).
func (h *harness) eventsOf(t *testing.T, secret, typ string) []map[string]any {
	t.Helper()
	r := h.with(t).do("GET", "/v1/events?limit=100&type="+typ, "", bearer(secret)...)
	want(t, r, 200, "")
	var out []map[string]any
	for _, e := range r.body["data"].([]any) {
		out = append(out, obj(e))
	}
	return out
}

func TestCreateChargeValidation(t *testing.T) {
	t.Parallel()
	h := newHarness(t, paymentsEnv)
	a := h.account("ada@example.com")

	meta51 := map[string]any{}
	for i := 0; i < 51; i++ {
		meta51["k"+strconv.Itoa(i)] = "v"
	}
	cases := []struct {
		name, body  string
		contentType string
		status      int
		code, param string
	}{
		{"empty body", "", "", 400, "parameter_missing", "amount"},
		{"empty object", "{}", "", 400, "parameter_missing", "amount"},
		{"amount missing", chargeJSON(del("amount")), "", 400, "parameter_missing", "amount"},
		{"amount null", chargeJSON(set("amount", nil)), "", 400, "parameter_missing", "amount"},
		{"amount zero", chargeJSON(set("amount", 0)), "", 400, "parameter_invalid", "amount"},
		{"amount negative", chargeJSON(set("amount", -5)), "", 400, "parameter_invalid", "amount"},
		{"amount too big", chargeJSON(set("amount", 100000000)), "", 400, "parameter_invalid", "amount"},
		{"amount float", chargeJSON(set("amount", 20.5)), "", 400, "parameter_invalid", "amount"},
		{"amount exponent", chargeJSON(set("amount", json.RawMessage("2e3"))), "", 400, "parameter_invalid", "amount"},
		{"amount huge", chargeJSON(set("amount", json.RawMessage("1e400"))), "", 400, "parameter_invalid", "amount"},
		{"amount string", chargeJSON(set("amount", "2000")), "", 400, "parameter_invalid", "amount"},
		{"currency missing", chargeJSON(del("currency")), "", 400, "parameter_missing", "currency"},
		{"currency two letters", chargeJSON(set("currency", "US")), "", 400, "parameter_invalid", "currency"},
		{"currency unknown", chargeJSON(set("currency", "XYZ")), "", 400, "parameter_invalid", "currency"},
		{"currency number", chargeJSON(set("currency", 840)), "", 400, "parameter_invalid", "currency"},
		{"payment_method missing", chargeJSON(del("payment_method")), "", 400, "parameter_missing", "payment_method"},
		{"payment_method bank", chargeJSON(set("payment_method", "bank")), "", 400, "parameter_invalid", "payment_method"},
		{"card missing", chargeJSON(del("card")), "", 400, "parameter_missing", "card"},
		{"card a string", chargeJSON(set("card", cardVisa)), "", 400, "parameter_invalid", "card"},
		{"card number missing", chargeJSON(delCard("number")), "", 400, "parameter_missing", "card.number"},
		{"card number fails Luhn", chargeJSON(setCard("number", "4242424242424241")), "", 400, "parameter_invalid", "card.number"},
		{"card number letters", chargeJSON(setCard("number", "4242abcd42424242")), "", 400, "parameter_invalid", "card.number"},
		{"card number too short", chargeJSON(setCard("number", "42424242")), "", 400, "parameter_invalid", "card.number"},
		{"card number a number", chargeJSON(setCard("number", 4242424242424242)), "", 400, "parameter_invalid", "card.number"},
		{"card expired", chargeJSON(setCard("exp_year", time.Now().Year()-1)), "", 400, "parameter_invalid", "card.exp_year"},
		{"exp_month 13", chargeJSON(setCard("exp_month", 13)), "", 400, "parameter_invalid", "card.exp_month"},
		{"exp_month 0", chargeJSON(setCard("exp_month", 0)), "", 400, "parameter_invalid", "card.exp_month"},
		{"exp_month missing", chargeJSON(delCard("exp_month")), "", 400, "parameter_missing", "card.exp_month"},
		{"exp_month string", chargeJSON(setCard("exp_month", "12")), "", 400, "parameter_invalid", "card.exp_month"},
		{"exp_year two digits", chargeJSON(setCard("exp_year", 30)), "", 400, "parameter_invalid", "card.exp_year"},
		{"cvc two digits", chargeJSON(setCard("cvc", "12")), "", 400, "parameter_invalid", "card.cvc"},
		{"cvc five digits", chargeJSON(setCard("cvc", "12345")), "", 400, "parameter_invalid", "card.cvc"},
		{"cvc letters", chargeJSON(setCard("cvc", "12a")), "", 400, "parameter_invalid", "card.cvc"},
		{"cvc a number", chargeJSON(setCard("cvc", 123)), "", 400, "parameter_invalid", "card.cvc"},
		{"cvc missing", chargeJSON(delCard("cvc")), "", 400, "parameter_missing", "card.cvc"},
		{"token and number", chargeJSON(setCard("token", "tok_visa")), "", 400, "parameter_invalid", "card"},
		{"empty token", chargeJSON(token("")), "", 400, "parameter_invalid", "card.token"},
		{"unknown card field", chargeJSON(setCard("bogus", 1)), "", 400, "parameter_invalid", "card.bogus"},
		{"metadata 51 keys", chargeJSON(set("metadata", meta51)), "", 400, "parameter_invalid", "metadata"},
		{"metadata 41-char key", chargeJSON(set("metadata", map[string]any{strings.Repeat("k", 41): "v"})), "", 400, "parameter_invalid", "metadata"},
		{"metadata empty key", chargeJSON(set("metadata", map[string]any{"": "v"})), "", 400, "parameter_invalid", "metadata"},
		{"metadata 501-char value", chargeJSON(set("metadata", map[string]any{"k": strings.Repeat("v", 501)})), "", 400, "parameter_invalid", "metadata"},
		{"metadata number value", chargeJSON(set("metadata", map[string]any{"k": 1})), "", 400, "parameter_invalid", "metadata"},
		{"metadata nested value", chargeJSON(set("metadata", map[string]any{"k": map[string]any{"a": "b"}})), "", 400, "parameter_invalid", "metadata"},
		{"metadata array", chargeJSON(set("metadata", []string{"a"})), "", 400, "parameter_invalid", "metadata"},
		{"description too long", chargeJSON(set("description", strings.Repeat("d", 1001))), "", 400, "parameter_invalid", "description"},
		{"capture not a boolean", chargeJSON(set("capture", "yes")), "", 400, "parameter_invalid", "capture"},
		{"provider paypal", chargeJSON(set("provider", "paypal")), "", 400, "parameter_invalid", "provider"},
		{"provider stripe not configured", chargeJSON(set("provider", "stripe")), "", 400, "parameter_invalid", "provider"},
		{"environment prod", chargeJSON(set("environment", "prod")), "", 400, "parameter_invalid", "environment"},
		{"read-only status", chargeJSON(set("status", "captured")), "", 400, "parameter_invalid", "status"},
		{"read-only amount_refunded", chargeJSON(set("amount_refunded", 0)), "", 400, "parameter_invalid", "amount_refunded"},
		{"read-only merchant_id", chargeJSON(set("merchant_id", "mer_x")), "", 400, "parameter_invalid", "merchant_id"},
		{"read-only id", chargeJSON(set("id", uuid.NewString())), "", 400, "parameter_invalid", "id"},
		{"read-only provider_reference", chargeJSON(set("provider_reference", "x")), "", 400, "parameter_invalid", "provider_reference"},
		{"not JSON", `{"amount":`, "", 400, "invalid_json", ""},
		{"array", `[1]`, "", 400, "invalid_json", ""},
		{"string", `"charge"`, "", 400, "invalid_json", ""},
		{"two objects", chargeJSON() + chargeJSON(), "", 400, "invalid_json", ""},
		{"deeply nested", `{"metadata":` + strings.Repeat(`{"a":`, 3000) + `1` + strings.Repeat(`}`, 3001), "", 400, "parameter_invalid", "metadata"},
		{"text/plain", chargeJSON(), "text/plain", 415, "unsupported_media_type", ""},
		{"form", "amount=2000", "application/x-www-form-urlencoded", 415, "unsupported_media_type", ""},
		{"over 64 KiB", chargeJSON(set("description", strings.Repeat("d", 70<<10))), "", 413, "payload_too_large", ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			headers := bearer(a.secret)
			if c.contentType != "" {
				headers = append(headers, "Content-Type", c.contentType)
			}
			r := h.with(t).do("POST", "/v1/charges", c.body, headers...)
			want(t, r, c.status, c.code)
			if got := r.errField("param"); got != c.param {
				t.Errorf("param = %q, want %q (message %q)", got, c.param, r.errField("message"))
			}
			if r.errField("message") == "" || r.errField("request_id") != r.header.Get("X-Request-Id") {
				t.Errorf("error body lacks a message or the request id: %s", r.raw)
			}
		})
	}

	t.Run("live mode", func(t *testing.T) {
		r := h.with(t).do("POST", "/v1/charges", chargeJSON(set("environment", "live")), bearer(a.secret)...)
		want(t, r, 403, "live_mode_disabled")
		if got := r.errField("message"); got != "Live mode is not activated" {
			t.Errorf("message = %q, want %q", got, "Live mode is not activated")
		}
	})

	t.Run("nothing is stored", func(t *testing.T) {
		for _, table := range []string{"charges", "events", "outbox", "idempotency_keys", "refunds"} {
			if n := h.count(t, "SELECT count(*) FROM "+table); n != 0 {
				t.Errorf("%s has %d rows after bad requests, want 0", table, n)
			}
		}
	})
}

func TestCreateCharge(t *testing.T) {
	t.Parallel()
	h := newHarness(t, paymentsEnv)
	a := h.account("ada@example.com")
	b := h.account("bob@example.com")

	r := h.createCharge(t, a.secret, chargeJSON(set("description", "Order 1042"), set("metadata", map[string]any{"order_id": "1042"})))
	ch := r.body
	id, _ := ch["id"].(string)
	if _, err := uuid.Parse(id); err != nil || strings.ToLower(id) != id {
		t.Fatalf("id %q is not a lower-case UUID", id)
	}
	if u := uuid.MustParse(id); u.Version() != 7 {
		t.Errorf("id is a UUID v%d, want v7", u.Version())
	}
	card := obj(ch["card"])
	fp, _ := card["fingerprint"].(string)
	if fp == "" {
		t.Fatalf("no card fingerprint: %s", r.raw)
	}
	wantCharge := map[string]any{
		"id": id, "object": "charge", "amount": 2000.0, "amount_captured": 0.0, "amount_refunded": 0.0, "currency": "USD",
		"status": "created", "payment_method": "card",
		"card":     map[string]any{"brand": "visa", "last4": "4242", "exp_month": 12.0, "exp_year": float64(expYear), "fingerprint": fp},
		"provider": "sandbox", "provider_reference": nil, "environment": "sandbox", "capture": true,
		"description": "Order 1042", "metadata": map[string]any{"order_id": "1042"},
		"failure_code": nil, "failure_message": nil, "customer": nil, "off_session": false, "next_action": nil,
		"authentication": map[string]any{"status": "not_required", "completed_at": nil},
		// The merchant's server-account sandbox connector (below); no attempt yet.
		"connector": ch["connector"], "attempts": []any{},
		"created_at": ch["created_at"], "updated_at": ch["created_at"],
	}
	if diff := cmp.Diff(wantCharge, ch); diff != "" {
		t.Errorf("created charge (-want +got):\n%s", diff)
	}
	conn := h.do("GET", fmt.Sprintf("/v1/connectors/%v", ch["connector"]), "", bearer(a.secret)...)
	if conn.status != 200 || conn.body["provider"] != "sandbox" || conn.body["server_account"] != true {
		t.Errorf("the charge's connector %v is not the merchant's server-account sandbox: %d %s", ch["connector"], conn.status, conn.raw)
	}
	created, err := time.Parse("2006-01-02T15:04:05.000Z", ch["created_at"].(string))
	if err != nil || time.Since(created) > time.Minute || time.Since(created) < -time.Minute {
		t.Errorf("created_at %v is not a recent RFC 3339 UTC time with milliseconds (%v)", ch["created_at"], err)
	}

	t.Run("stored with its task and event", func(t *testing.T) {
		row := h.chargeRow(t, id)
		if row.Status != "created" || !row.SealedCard {
			t.Errorf("row = %+v, want created with sealed card data", row)
		}
		if n := h.count(t, "SELECT count(*) FROM outbox WHERE task_type = 'charge:authorize' AND ref_id = $1", id); n != 1 {
			t.Errorf("%d authorize tasks, want 1", n)
		}
	})

	t.Run("get", func(t *testing.T) {
		g := h.with(t).do("GET", "/v1/charges/"+id, "", bearer(a.secret)...)
		want(t, g, 200, "")
		if diff := cmp.Diff(ch, g.body); diff != "" {
			t.Errorf("GET differs from the create answer (-create +get):\n%s", diff)
		}
	})

	t.Run("charge.created event", func(t *testing.T) {
		evs := h.eventsOf(t, a.secret, "charge.created")
		if len(evs) != 1 {
			t.Fatalf("%d charge.created events, want 1", len(evs))
		}
		e := evs[0]
		if e["event_type"] != "charge.created" || obj(e["data"])["object"] != "charge" {
			t.Errorf("event = %v", e)
		}
		if _, ok := obj(e["data"])["refund"]; ok {
			t.Errorf("a charge event carries data.refund: %v", e)
		}
		if diff := cmp.Diff(ch, obj(e["data"])["charge"]); diff != "" {
			t.Errorf("data.charge differs from the charge (-charge +event):\n%s", diff)
		}
		one := h.with(t).do("GET", "/v1/events/"+e["id"].(string), "", bearer(a.secret)...)
		want(t, one, 200, "")
		if diff := cmp.Diff(e, one.body); diff != "" {
			t.Errorf("GET /v1/events/:id differs from the list (-list +get):\n%s", diff)
		}
	})

	t.Run("fingerprints", func(t *testing.T) {
		fpOf := func(secret string, mods ...func(map[string]any)) string {
			t.Helper()
			c := h.createCharge(t, secret, chargeJSON(mods...))
			return obj(c.body["card"])["fingerprint"].(string)
		}
		if got := fpOf(a.secret); got != fp {
			t.Errorf("same card, same merchant: fingerprint %s, want %s", got, fp)
		}
		if got := fpOf(a.secret, setCard("number", "4242 4242 4242 4242"), setCard("cvc", "999"), setCard("exp_month", 1)); got != fp {
			t.Errorf("same number with spaces, other CVC and expiry: fingerprint %s, want %s", got, fp)
		}
		if got := fpOf(a.secret, setCard("number", cardMastercard)); got == fp {
			t.Error("another card has the same fingerprint")
		}
		if got := fpOf(b.secret); got == fp {
			t.Error("the same card has the same fingerprint for another merchant")
		}
	})

	cases := []struct {
		name     string
		body     string
		wantCard map[string]any
		check    func(t *testing.T, c map[string]any)
	}{
		{"token", chargeJSON(token("tok_visa")),
			map[string]any{"brand": "visa", "last4": nil, "exp_month": nil, "exp_year": nil, "fingerprint": nil}, nil},
		{"mastercard token", chargeJSON(token("tok_mastercard")),
			map[string]any{"brand": "mastercard", "last4": nil, "exp_month": nil, "exp_year": nil, "fingerprint": nil}, nil},
		{"amex with a 4-digit CVC", chargeJSON(setCard("number", cardAmex), setCard("cvc", "1234"), setCard("exp_month", 3)),
			map[string]any{"brand": "amex", "last4": "0005", "exp_month": 3.0, "exp_year": float64(expYear)}, nil},
		{"mastercard 2-series", chargeJSON(setCard("number", "2223003122003222")),
			map[string]any{"brand": "mastercard", "last4": "3222", "exp_month": 12.0, "exp_year": float64(expYear)}, nil},
		{"expiring this month", chargeJSON(setCard("exp_month", int(time.Now().Month())), setCard("exp_year", time.Now().Year())),
			map[string]any{"brand": "visa", "last4": "4242", "exp_month": float64(time.Now().Month()), "exp_year": float64(time.Now().Year())}, nil},
		{"upper-case currency, no capture", chargeJSON(set("currency", "eur"), set("capture", false), set("amount", 99999999)), nil,
			func(t *testing.T, c map[string]any) {
				if c["currency"] != "EUR" || c["capture"] != false || c["amount"] != 99999999.0 {
					t.Errorf("currency %v capture %v amount %v, want EUR false 99999999", c["currency"], c["capture"], c["amount"])
				}
			}},
		{"smallest amount, sandbox named, environment sandbox", chargeJSON(set("amount", 1), set("provider", "sandbox"), set("environment", "sandbox")), nil,
			func(t *testing.T, c map[string]any) {
				if c["amount"] != 1.0 || c["provider"] != "sandbox" || c["environment"] != "sandbox" {
					t.Errorf("amount %v provider %v environment %v", c["amount"], c["provider"], c["environment"])
				}
			}},
		{"metadata at the limits", chargeJSON(set("metadata", map[string]any{strings.Repeat("é", 40): strings.Repeat("é", 500)})), nil,
			func(t *testing.T, c map[string]any) {
				if len(obj(c["metadata"])) != 1 {
					t.Errorf("metadata = %v", c["metadata"])
				}
			}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := h.createCharge(t, a.secret, c.body).body
			if got["status"] != "created" {
				t.Errorf("status %v, want created", got["status"])
			}
			if c.wantCard != nil {
				card := obj(got["card"])
				if _, ok := c.wantCard["fingerprint"]; !ok {
					if s, _ := card["fingerprint"].(string); s == "" {
						t.Errorf("no fingerprint: %v", card)
					}
					delete(card, "fingerprint")
				}
				if diff := cmp.Diff(c.wantCard, card); diff != "" {
					t.Errorf("card (-want +got):\n%s", diff)
				}
			}
			if c.check != nil {
				c.check(t, got)
			}
		})
	}
}

// scanDatabase returns "table.column" for every stored value that holds one
// of needles (case-insensitive in text, exact bytes in bytea), in every table.
func (h *harness) scanDatabase(t *testing.T, needles ...string) []string {
	t.Helper()
	ctx := context.Background()
	rows, err := h.db.Pool.Query(ctx, `SELECT table_name, column_name, data_type FROM information_schema.columns
		WHERE table_schema = 'public' AND data_type IN ('text', 'character', 'character varying', 'jsonb', 'json', 'bytea')`)
	if err != nil {
		t.Fatal(err)
	}
	type col struct{ table, name, typ string }
	var cols []col
	for rows.Next() {
		var c col
		if err := rows.Scan(&c.table, &c.name, &c.typ); err != nil {
			t.Fatal(err)
		}
		cols = append(cols, c)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if len(cols) < 10 {
		t.Fatalf("only %d columns to scan: the query is wrong", len(cols))
	}
	var hits []string
	for _, c := range cols {
		ident := `"` + c.table + `"."` + c.name + `"`
		for _, n := range needles {
			q := fmt.Sprintf(`SELECT count(*) FROM "%s" WHERE strpos(lower(%s::text), lower($1)) > 0`, c.table, ident)
			if c.typ == "bytea" {
				q = fmt.Sprintf(`SELECT count(*) FROM "%s" WHERE position(convert_to($1, 'UTF8') in %s) > 0`, c.table, ident)
			}
			var k int
			if err := h.db.Pool.QueryRow(ctx, q, n).Scan(&k); err != nil {
				t.Fatalf("%s: %v", q, err)
			}
			if k > 0 {
				hits = append(hits, fmt.Sprintf("%s.%s holds %q in %d rows", c.table, c.name, n, k))
			}
		}
	}
	return hits
}

// scanRedis returns the keys of the harness Redis DB whose values hold one of needles.
func (h *harness) scanRedis(t *testing.T, needles ...string) []string {
	t.Helper()
	ctx := context.Background()
	keys, err := h.rdb.Keys(ctx, "*").Result()
	if err != nil {
		t.Fatal(err)
	}
	var hits []string
	for _, k := range keys {
		typ, err := h.rdb.Type(ctx, k).Result()
		if err != nil {
			t.Fatal(err)
		}
		var vals []string
		switch typ {
		case "string":
			v, _ := h.rdb.Get(ctx, k).Result()
			vals = []string{v}
		case "hash":
			m, _ := h.rdb.HGetAll(ctx, k).Result()
			for f, v := range m {
				vals = append(vals, f, v)
			}
		case "list":
			vals, _ = h.rdb.LRange(ctx, k, 0, -1).Result()
		case "set":
			vals, _ = h.rdb.SMembers(ctx, k).Result()
		case "zset":
			vals, _ = h.rdb.ZRange(ctx, k, 0, -1).Result()
		}
		all := k + "\x00" + strings.Join(vals, "\x00")
		for _, n := range needles {
			if strings.Contains(all, n) {
				hits = append(hits, fmt.Sprintf("redis %s (%s) holds %q", k, typ, n))
			}
		}
	}
	return hits
}

// TestCardDataNeverStored is docs/reliability.md I6 for card data: the number and
// CVC are nowhere in the database, the queue or an answer; the sealed copy is
// purged once the provider answered.
func TestCardDataNeverStored(t *testing.T) {
	t.Parallel()
	h := newHarness(t, paymentsEnv)
	a := h.account("ada@example.com")
	w := h.worker(t, &providertest.Fake{})

	const cvc = "9183"
	numbers := []string{cardVisa, cardMastercard, "4000000000000002"}
	// Needles: every number, the CVC as a JSON string, and a "cvc" key.
	needles := append([]string{`"` + cvc + `"`, `cvc"`}, numbers...)
	var ids []string
	for i, n := range numbers {
		body := chargeJSON(setCard("number", n), setCard("cvc", cvc), set("capture", i%2 == 0))
		r := h.createCharge(t, a.secret, body, "Idempotency-Key", "card-"+strconv.Itoa(i))
		replay := h.with(t).do("POST", "/v1/charges", body, append(bearer(a.secret), "Idempotency-Key", "card-"+strconv.Itoa(i))...)
		want(t, replay, 201, "")
		for _, ans := range []response{r, replay} {
			for _, n := range needles {
				if strings.Contains(string(ans.raw), n) {
					t.Errorf("create answer holds %q: %s", n, ans.raw)
				}
			}
		}
		ids = append(ids, r.body["id"].(string))
	}
	// The last card with spaces and dashes.
	spaced := h.createCharge(t, a.secret, chargeJSON(setCard("number", "4242-4242 4242-4242"), setCard("cvc", cvc)))
	ids = append(ids, spaced.body["id"].(string))
	needles = append(needles, "4242-4242 4242-4242", "4242 4242", "42424242")

	// The scanners find what is there: the fingerprint (text), the rendered
	// answer in the idempotency record (bytea), the task of a charge (Redis).
	fp := obj(spaced.body["card"])["fingerprint"].(string)
	if hits := h.scanDatabase(t, fp, `"last4":"4242"`); len(hits) < 3 {
		t.Fatalf("the database scanner misses stored values: %v", hits)
	}
	if hits := h.scanRedis(t, ids[0]); len(hits) == 0 {
		t.Fatalf("the Redis scanner misses the task of charge %s", ids[0])
	}
	if hits := h.scanDatabase(t, needles...); len(hits) > 0 {
		t.Errorf("card data stored in clear:\n%s", strings.Join(hits, "\n"))
	}
	if hits := h.scanRedis(t, needles...); len(hits) > 0 {
		t.Errorf("card data in Redis:\n%s", strings.Join(hits, "\n"))
	}

	// The worker reads the sealed card, calls the provider with it, then purges it.
	for _, id := range ids {
		if !h.chargeRow(t, id).SealedCard {
			t.Fatalf("charge %s has no sealed card before the provider call", id)
		}
		w.authorize(t, id)
		if h.chargeRow(t, id).SealedCard {
			t.Errorf("charge %s still holds its sealed card after the provider answered", id)
		}
	}
	var got []string
	for _, c := range w.fake.Calls() {
		got = append(got, c.Card.Number+"/"+c.Card.CVC)
	}
	wantCalls := []string{cardVisa + "/" + cvc, cardMastercard + "/" + cvc, "4000000000000002/" + cvc, cardVisa + "/" + cvc}
	if diff := cmp.Diff(wantCalls, got); diff != "" {
		t.Errorf("card data the provider got (-want +got):\n%s", diff)
	}

	for _, path := range []string{"/v1/charges?limit=100", "/v1/events?limit=100", "/v1/charges/" + ids[0], "/v1/charges/" + ids[1]} {
		r := h.do("GET", path, "", bearer(a.secret)...)
		want(t, r, 200, "")
		for _, n := range needles {
			if strings.Contains(string(r.raw), n) {
				t.Errorf("GET %s holds %q", path, n)
			}
		}
	}
	if hits := h.scanDatabase(t, needles...); len(hits) > 0 {
		t.Errorf("card data stored in clear after processing:\n%s", strings.Join(hits, "\n"))
	}
}

func TestChargeIdempotency(t *testing.T) {
	t.Parallel()
	h := newHarness(t, paymentsEnv)
	a := h.account("ada@example.com")
	b := h.account("bob@example.com")
	_, a2 := h.newKey(a.token)
	chargesOf := func(t *testing.T, merchant string) int {
		return h.count(t, "SELECT count(*) FROM charges WHERE merchant_id = $1", merchant)
	}

	t.Run("replay", func(t *testing.T) {
		body := chargeJSON(set("amount", 1234))
		first := h.createCharge(t, a.secret, body, "Idempotency-Key", "order-1")
		if first.header.Get("Idempotent-Replayed") != "" {
			t.Errorf("first answer carries Idempotent-Replayed: %q", first.header.Get("Idempotent-Replayed"))
		}
		for _, secret := range []string{a.secret, a2} { // keys are scoped per merchant, not per API key
			again := h.with(t).do("POST", "/v1/charges", body, append(bearer(secret), "Idempotency-Key", "order-1")...)
			if again.status != first.status || string(again.raw) != string(first.raw) {
				t.Errorf("replay = %d %s, want %d %s", again.status, again.raw, first.status, first.raw)
			}
			if got := again.header.Get("Idempotent-Replayed"); got != "true" {
				t.Errorf("Idempotent-Replayed = %q, want true", got)
			}
		}
		if n := chargesOf(t, a.merchantID); n != 1 {
			t.Errorf("%d charges, want 1", n)
		}
		if n := h.count(t, "SELECT count(*) FROM events WHERE merchant_id = $1", a.merchantID); n != 1 {
			t.Errorf("%d events, want 1", n)
		}
		if n := h.count(t, "SELECT count(*) FROM outbox"); n != 1 {
			t.Errorf("%d outbox rows, want 1", n)
		}

		// The replay is the first answer even after the charge moved on.
		w := h.worker(t, &providertest.Fake{})
		w.authorize(t, first.body["id"].(string))
		later := h.with(t).do("POST", "/v1/charges", body, append(bearer(a.secret), "Idempotency-Key", "order-1")...)
		if string(later.raw) != string(first.raw) {
			t.Errorf("replay after capture = %s, want %s", later.raw, first.raw)
		}

		reused := h.with(t).do("POST", "/v1/charges", chargeJSON(set("amount", 1235)), append(bearer(a.secret), "Idempotency-Key", "order-1")...)
		want(t, reused, 422, "idempotency_key_reused")
		if n := chargesOf(t, a.merchantID); n != 1 {
			t.Errorf("%d charges after a reused key, want 1", n)
		}

		other := h.createCharge(t, b.secret, body, "Idempotency-Key", "order-1")
		if other.header.Get("Idempotent-Replayed") != "" || other.body["id"] == first.body["id"] {
			t.Errorf("another merchant's key replayed the first charge: %s", other.raw)
		}
		if n := chargesOf(t, b.merchantID); n != 1 {
			t.Errorf("bob has %d charges, want 1", n)
		}
	})

	t.Run("key length", func(t *testing.T) {
		before := chargesOf(t, a.merchantID)
		r := h.with(t).do("POST", "/v1/charges", chargeJSON(), append(bearer(a.secret), "Idempotency-Key", strings.Repeat("k", 256))...)
		want(t, r, 400, "parameter_invalid")
		if r.errField("param") != "Idempotency-Key" {
			t.Errorf("param = %q, want Idempotency-Key", r.errField("param"))
		}
		nonASCII := h.with(t).do("POST", "/v1/charges", chargeJSON(), append(bearer(a.secret), "Idempotency-Key", "clé")...)
		want(t, nonASCII, 400, "parameter_invalid")
		if n := chargesOf(t, a.merchantID); n != before {
			t.Errorf("a refused key created a charge")
		}
		h.createCharge(t, a.secret, chargeJSON(), "Idempotency-Key", strings.Repeat("k", 255))
	})

	t.Run("20 concurrent requests with one key", func(t *testing.T) {
		for round := 0; round < 3; round++ {
			before := chargesOf(t, a.merchantID)
			key := "concurrent-" + strconv.Itoa(round)
			body := chargeJSON(set("amount", 700+round))
			answers := burst(t, 20, func(int) (response, error) {
				return h.with(t).try("POST", "/v1/charges", body, append(bearer(a.secret), "Idempotency-Key", key)...)
			})
			statuses := map[int]int{}
			var created []string
			for i, r := range answers {
				statuses[r.status]++
				switch {
				case r.status == 201:
					created = append(created, string(r.raw))
				case r.status == 409 && r.errCode() == "idempotency_key_in_use":
				default:
					t.Errorf("answer %d: %d %s", i, r.status, r.raw)
				}
			}
			if len(created) == 0 {
				t.Errorf("no 201 among %v", statuses)
			}
			for _, c := range created[1:] {
				if c != created[0] {
					t.Errorf("201 bodies differ:\n%s\n%s", created[0], c)
				}
			}
			if n := chargesOf(t, a.merchantID) - before; n != 1 {
				t.Errorf("round %d: %d charges created, want 1 (statuses %v)", round, n, statuses)
			}
		}
	})
}

func TestListCharges(t *testing.T) {
	t.Parallel()
	h := newHarness(t, paymentsEnv)
	a := h.account("ada@example.com")
	b := h.account("bob@example.com")
	w := h.worker(t, &providertest.Fake{AuthorizeFn: func(_ context.Context, r providers.AuthorizeRequest) (providers.Result, error) {
		if r.Amount == 13 {
			return providers.Result{}, &providers.Decline{Code: "card_declined"}
		}
		return providers.Result{Reference: "fake_" + r.IdempotencyKey}, nil
	}})

	// Oldest first: created, authorized, failed, captured, created.
	var all []string // newest first
	var times []string
	for i, amount := range []int{10, 11, 13, 14, 15} {
		c := h.createCharge(t, a.secret, chargeJSON(set("amount", amount), set("capture", i != 1)))
		all = append([]string{c.body["id"].(string)}, all...)
		times = append([]string{c.body["created_at"].(string)}, times...)
		time.Sleep(3 * time.Millisecond) // distinct created_at milliseconds
	}
	for _, i := range []int{3, 2, 1} { // authorized, failed, captured
		w.authorize(t, all[i])
	}
	bobs := h.createCharge(t, b.secret, chargeJSON()).body["id"].(string)

	list := func(t *testing.T, q url.Values, secret string) response {
		t.Helper()
		r := h.with(t).do("GET", "/v1/charges?"+q.Encode(), "", bearer(secret)...)
		want(t, r, 200, "")
		if r.body["object"] != "list" {
			t.Errorf("object = %v, want list", r.body["object"])
		}
		return r
	}
	cases := []struct {
		name    string
		query   url.Values
		want    []string
		hasMore bool
	}{
		{"all", url.Values{}, all, false},
		{"limit 2", url.Values{"limit": {"2"}}, all[:2], true},
		{"starting_after", url.Values{"limit": {"2"}, "starting_after": {all[1]}}, all[2:4], true},
		{"last page", url.Values{"limit": {"2"}, "starting_after": {all[3]}}, all[4:], false},
		{"after the last", url.Values{"starting_after": {all[4]}}, nil, false},
		{"ending_before", url.Values{"limit": {"2"}, "ending_before": {all[3]}}, all[1:3], true},
		{"ending_before, first page", url.Values{"limit": {"2"}, "ending_before": {all[1]}}, all[:1], false},
		{"status created", url.Values{"status": {"created"}}, []string{all[0], all[4]}, false},
		{"status authorized", url.Values{"status": {"authorized"}}, []string{all[3]}, false},
		{"status failed", url.Values{"status": {"failed"}}, []string{all[2]}, false},
		{"status captured", url.Values{"status": {"captured"}}, []string{all[1]}, false},
		{"status refunded", url.Values{"status": {"refunded"}}, nil, false},
		{"created[gte]", url.Values{"created[gte]": {times[2]}}, all[:3], false},
		{"created[lte]", url.Values{"created[lte]": {times[2]}}, all[2:], false},
		{"created range", url.Values{"created[gte]": {times[3]}, "created[lte]": {times[1]}}, all[1:4], false},
		{"created range with offset", url.Values{"created[gte]": {shiftZone(t, times[3])}}, all[:4], false},
		{"created range and status", url.Values{"created[gte]": {times[3]}, "status": {"created"}}, all[:1], false},
		{"created range and limit", url.Values{"created[lte]": {times[1]}, "limit": {"2"}}, all[1:3], true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := list(t, c.query, a.secret)
			if diff := cmp.Diff(c.want, idsOf(r)); diff != "" {
				t.Errorf("ids (-want +got):\n%s", diff)
			}
			if r.body["has_more"] != c.hasMore {
				t.Errorf("has_more = %v, want %v", r.body["has_more"], c.hasMore)
			}
		})
	}

	t.Run("newest first", func(t *testing.T) {
		r := list(t, url.Values{}, a.secret)
		var created []string
		for _, it := range r.body["data"].([]any) {
			created = append(created, obj(it)["created_at"].(string))
		}
		if !sort.IsSorted(sort.Reverse(sort.StringSlice(created))) {
			t.Errorf("not newest first: %v", created)
		}
	})

	t.Run("default limit is 10", func(t *testing.T) {
		for i := 0; i < 8; i++ {
			h.createCharge(t, a.secret, chargeJSON())
		}
		r := list(t, url.Values{}, a.secret)
		if n := len(r.body["data"].([]any)); n != 10 || r.body["has_more"] != true {
			t.Errorf("%d charges has_more %v, want 10 true", n, r.body["has_more"])
		}
	})

	t.Run("another merchant sees only its own", func(t *testing.T) {
		r := list(t, url.Values{"limit": {"100"}}, b.secret)
		if diff := cmp.Diff([]string{bobs}, idsOf(r)); diff != "" {
			t.Errorf("bob's list (-want +got):\n%s", diff)
		}
		// A's cursor gives B nothing of A's.
		r = list(t, url.Values{"starting_after": {"ffffffff-ffff-7fff-bfff-ffffffffffff"}}, b.secret)
		if diff := cmp.Diff([]string{bobs}, idsOf(r)); diff != "" {
			t.Errorf("bob's list after a high cursor (-want +got):\n%s", diff)
		}
	})

	bad := []struct {
		query, param string
	}{
		{"status=bogus", "status"},
		{"status=CREATED", "status"},
		{"created%5Bgte%5D=yesterday", "created[gte]"},
		{"created%5Blte%5D=2026-13-01T00:00:00Z", "created[lte]"},
		{"created%5Bgte%5D=1700000000", "created[gte]"},
		{"limit=0", "limit"},
		{"limit=101", "limit"},
		{"limit=ten", "limit"},
		{"starting_after=nope", "starting_after"},
		{"ending_before=" + strings.ToUpper(all[0]), "ending_before"},
		{"starting_after=" + all[0] + "&ending_before=" + all[1], "ending_before"},
	}
	for _, c := range bad {
		t.Run("bad "+c.query, func(t *testing.T) {
			r := h.with(t).do("GET", "/v1/charges?"+c.query, "", bearer(a.secret)...)
			want(t, r, 400, "parameter_invalid")
			if r.errField("param") != c.param {
				t.Errorf("param = %q, want %q", r.errField("param"), c.param)
			}
		})
	}
}

// shiftZone writes an RFC 3339 UTC time in the +02:00 zone.
func shiftZone(t *testing.T, s string) string {
	t.Helper()
	tm, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		t.Fatal(err)
	}
	return tm.In(time.FixedZone("", 2*3600)).Format(time.RFC3339Nano)
}

func TestListEvents(t *testing.T) {
	t.Parallel()
	h := newHarness(t, paymentsEnv)
	a := h.account("ada@example.com")
	b := h.account("bob@example.com")
	w := h.worker(t, &providertest.Fake{})
	var charged []string
	for i := 0; i < 3; i++ {
		id := h.createCharge(t, a.secret, chargeJSON()).body["id"].(string)
		w.authorize(t, id)
		charged = append(charged, id)
	}
	h.createCharge(t, b.secret, chargeJSON())

	r := h.do("GET", "/v1/events?limit=100", "", bearer(a.secret)...)
	want(t, r, 200, "")
	all := idsOf(r)
	if len(all) != 6 {
		t.Fatalf("%d events, want 6", len(all))
	}
	var types []string
	for _, e := range r.body["data"].([]any) {
		types = append(types, obj(e)["event_type"].(string))
	}
	wantTypes := []string{"charge.captured", "charge.created", "charge.captured", "charge.created", "charge.captured", "charge.created"}
	if diff := cmp.Diff(wantTypes, types); diff != "" {
		t.Errorf("event types newest first (-want +got):\n%s", diff)
	}

	captured := h.eventsOf(t, a.secret, "charge.captured")
	if len(captured) != 3 {
		t.Fatalf("%d charge.captured events, want 3", len(captured))
	}
	for i, e := range captured {
		c := obj(obj(e["data"])["charge"])
		if c["id"] != charged[2-i] || c["status"] != "captured" || c["provider_reference"] == nil {
			t.Errorf("charge.captured %d carries %v", i, c)
		}
		g := h.do("GET", "/v1/charges/"+charged[2-i], "", bearer(a.secret)...)
		if diff := cmp.Diff(g.body, c); diff != "" {
			t.Errorf("data.charge of the last event differs from the charge (-charge +event):\n%s", diff)
		}
	}
	if evs := h.eventsOf(t, a.secret, "refund.created"); len(evs) != 0 {
		t.Errorf("%d refund.created events, want 0", len(evs))
	}

	p := h.do("GET", "/v1/events?limit=4&starting_after="+all[1], "", bearer(a.secret)...)
	if diff := cmp.Diff(all[2:6], idsOf(p)); diff != "" || p.body["has_more"] != false {
		t.Errorf("page after %s (-want +got):\n%s has_more %v", all[1], diff, p.body["has_more"])
	}
	p = h.do("GET", "/v1/events?limit=2&type=charge.created&ending_before="+all[5], "", bearer(a.secret)...)
	if diff := cmp.Diff([]string{all[1], all[3]}, idsOf(p)); diff != "" || p.body["has_more"] != false {
		t.Errorf("charge.created before %s (-want +got):\n%s has_more %v", all[5], diff, p.body["has_more"])
	}

	bobs := h.do("GET", "/v1/events?limit=100", "", bearer(b.secret)...)
	if n := len(idsOf(bobs)); n != 1 {
		t.Errorf("bob sees %d events, want 1", n)
	}
	for _, q := range []string{"type=bogus", "type=charge", "type=CHARGE.CREATED", "limit=0", "starting_after=x"} {
		r := h.do("GET", "/v1/events?"+q, "", bearer(a.secret)...)
		want(t, r, 400, "parameter_invalid")
	}
	if r := h.do("GET", "/v1/events?type=bogus", "", bearer(a.secret)...); r.errField("param") != "type" {
		t.Errorf("param = %q, want type", r.errField("param"))
	}
}

// TestChargeStateMachine drives capture and void through the API, with the
// worker side run in-process.
func TestChargeStateMachine(t *testing.T) {
	t.Parallel()
	h := newHarness(t, paymentsEnv)
	a := h.account("ada@example.com")
	fake := &providertest.Fake{AuthorizeFn: func(_ context.Context, r providers.AuthorizeRequest) (providers.Result, error) {
		if r.Card.Number == "4000000000000002" {
			return providers.Result{}, &providers.Decline{Code: "card_declined"}
		}
		return providers.Result{Reference: "fake_" + r.IdempotencyKey}, nil
	}}
	w := h.worker(t, fake)
	ctx := context.Background()

	t.Run("created charges cannot be captured, voided or refunded", func(t *testing.T) {
		id := h.createCharge(t, a.secret, chargeJSON(set("capture", false))).body["id"].(string)
		hh := h.with(t)
		want(t, hh.do("POST", "/v1/charges/"+id+"/capture", "", bearer(a.secret)...), 409, "invalid_state")
		want(t, hh.do("POST", "/v1/charges/"+id+"/void", "", bearer(a.secret)...), 409, "invalid_state")
		want(t, hh.do("POST", "/v1/refunds", `{"charge":"`+id+`"}`, bearer(a.secret)...), 409, "invalid_state")
		if row := h.chargeRow(t, id); row.Status != "created" || row.PendingAction != nil {
			t.Errorf("row = %+v", row)
		}
	})

	t.Run("capture", func(t *testing.T) {
		id := h.authorizedCharge(t, w, a.secret, 2000)
		hh := h.with(t)
		g := hh.do("GET", "/v1/charges/"+id, "", bearer(a.secret)...)
		if g.body["status"] != "authorized" || g.body["provider_reference"] != "fake_gh_"+id+"_authorize" {
			t.Errorf("authorized charge: %s", g.raw)
		}
		if n := len(h.eventsOf(t, a.secret, "charge.captured")); n != 0 {
			t.Errorf("%d charge.captured events for an authorization, want 0", n)
		}
		want(t, hh.do("POST", "/v1/refunds", `{"charge":"`+id+`"}`, bearer(a.secret)...), 409, "invalid_state")

		for _, c := range []struct{ body, code, param string }{
			{`{"amount":2001}`, "parameter_invalid", "amount"},
			{`{"amount":0}`, "parameter_invalid", "amount"},
			{`{"amount":-1}`, "parameter_invalid", "amount"},
			{`{"amount":"10"}`, "parameter_invalid", "amount"},
			{`{"amount":1,"status":"captured"}`, "parameter_invalid", "status"},
			{`{"amount":`, "invalid_json", ""},
		} {
			r := hh.do("POST", "/v1/charges/"+id+"/capture", c.body, bearer(a.secret)...)
			want(t, r, 400, c.code)
			if r.errField("param") != c.param {
				t.Errorf("capture %s: param %q, want %q", c.body, r.errField("param"), c.param)
			}
		}
		if row := h.chargeRow(t, id); row.PendingAction != nil {
			t.Fatalf("a refused capture left pending action %q", *row.PendingAction)
		}

		r := hh.do("POST", "/v1/charges/"+id+"/capture", `{"amount":1500}`, append(bearer(a.secret), "Idempotency-Key", "cap-1")...)
		want(t, r, 200, "")
		if r.body["id"] != id || r.body["status"] != "authorized" {
			t.Errorf("capture answer: %s", r.raw)
		}
		replay := hh.do("POST", "/v1/charges/"+id+"/capture", `{"amount":1500}`, append(bearer(a.secret), "Idempotency-Key", "cap-1")...)
		if replay.status != 200 || string(replay.raw) != string(r.raw) || replay.header.Get("Idempotent-Replayed") != "true" {
			t.Errorf("capture replay: %d %s (replayed %q)", replay.status, replay.raw, replay.header.Get("Idempotent-Replayed"))
		}
		want(t, hh.do("POST", "/v1/charges/"+id+"/capture", `{"amount":1400}`, append(bearer(a.secret), "Idempotency-Key", "cap-1")...), 422, "idempotency_key_reused")
		want(t, hh.do("POST", "/v1/charges/"+id+"/capture", "", bearer(a.secret)...), 409, "invalid_state")
		want(t, hh.do("POST", "/v1/charges/"+id+"/void", "", bearer(a.secret)...), 409, "invalid_state")
		if n := h.count(t, "SELECT count(*) FROM outbox WHERE task_id = $1", "charge:capture:"+id); n != 1 {
			t.Errorf("%d capture tasks, want 1", n)
		}

		if err := w.charges.Capture(ctx, id, false); err != nil {
			t.Fatal(err)
		}
		row := h.chargeRow(t, id)
		if row.Status != "captured" || row.Captured != 1500 || row.PendingAction != nil {
			t.Errorf("after capture: %+v, want captured 1500 with nothing pending", row)
		}
		if n := h.count(t, "SELECT count(*) FROM outbox WHERE ref_id = $1", id); n != 0 {
			t.Errorf("%d tasks left for the charge, want 0", n)
		}
		var capCall *providertest.Call
		for _, c := range fake.Calls() {
			if c.Op == "capture" && c.Key == "gh_"+id+"_capture" {
				capCall = &c
			}
		}
		if capCall == nil || capCall.Amount != 1500 {
			t.Errorf("provider capture call = %+v, want amount 1500 with key gh_%s_capture", capCall, id)
		}
		evs := h.eventsOf(t, a.secret, "charge.captured")
		if len(evs) != 1 || obj(obj(evs[0]["data"])["charge"])["id"] != id || obj(obj(evs[0]["data"])["charge"])["status"] != "captured" {
			t.Errorf("charge.captured events: %v", evs)
		}
		want(t, hh.do("POST", "/v1/charges/"+id+"/capture", "", bearer(a.secret)...), 409, "invalid_state")
		want(t, hh.do("POST", "/v1/charges/"+id+"/void", "", bearer(a.secret)...), 409, "invalid_state")
		// Only what was captured can be refunded.
		tooMuch := hh.do("POST", "/v1/refunds", `{"charge":"`+id+`","amount":1501}`, bearer(a.secret)...)
		want(t, tooMuch, 400, "amount_too_large")
		ref := hh.do("POST", "/v1/refunds", `{"charge":"`+id+`"}`, bearer(a.secret)...)
		want(t, ref, 201, "")
		if ref.body["amount"] != 1500.0 {
			t.Errorf("default refund amount %v, want the captured 1500", ref.body["amount"])
		}
		// A second run of the capture task does nothing.
		if err := w.charges.Capture(ctx, id, false); err != nil {
			t.Fatal(err)
		}
		if n := len(h.eventsOf(t, a.secret, "charge.captured")); n != 1 {
			t.Errorf("%d charge.captured events after a duplicate task, want 1", n)
		}
	})

	t.Run("void", func(t *testing.T) {
		id := h.authorizedCharge(t, w, a.secret, 3000)
		hh := h.with(t)
		want(t, hh.do("POST", "/v1/charges/"+id+"/void", `{"amount":1}`, bearer(a.secret)...), 400, "parameter_invalid")
		r := hh.do("POST", "/v1/charges/"+id+"/void", "", bearer(a.secret)...)
		want(t, r, 200, "")
		if r.body["status"] != "authorized" {
			t.Errorf("void answer: %s", r.raw)
		}
		want(t, hh.do("POST", "/v1/charges/"+id+"/void", "", bearer(a.secret)...), 409, "invalid_state")
		want(t, hh.do("POST", "/v1/charges/"+id+"/capture", "", bearer(a.secret)...), 409, "invalid_state")
		if err := w.charges.Void(ctx, id, false); err != nil {
			t.Fatal(err)
		}
		if row := h.chargeRow(t, id); row.Status != "voided" || row.Captured != 0 || row.PendingAction != nil {
			t.Errorf("after void: %+v", row)
		}
		evs := h.eventsOf(t, a.secret, "charge.voided")
		if len(evs) != 1 || obj(obj(evs[0]["data"])["charge"])["status"] != "voided" {
			t.Errorf("charge.voided events: %v", evs)
		}
		want(t, hh.do("POST", "/v1/charges/"+id+"/capture", "", bearer(a.secret)...), 409, "invalid_state")
		want(t, hh.do("POST", "/v1/refunds", `{"charge":"`+id+`"}`, bearer(a.secret)...), 409, "invalid_state")
	})

	t.Run("declined", func(t *testing.T) {
		id := h.createCharge(t, a.secret, chargeJSON(setCard("number", "4000000000000002"), set("capture", false))).body["id"].(string)
		w.authorize(t, id)
		hh := h.with(t)
		g := hh.do("GET", "/v1/charges/"+id, "", bearer(a.secret)...)
		if g.body["status"] != "failed" || g.body["failure_code"] != "card_declined" || g.body["failure_message"] == nil {
			t.Errorf("declined charge: %s", g.raw)
		}
		if h.chargeRow(t, id).SealedCard {
			t.Error("a failed charge keeps its sealed card")
		}
		evs := h.eventsOf(t, a.secret, "charge.failed")
		if len(evs) != 1 || obj(obj(evs[0]["data"])["charge"])["failure_code"] != "card_declined" {
			t.Errorf("charge.failed events: %v", evs)
		}
		want(t, hh.do("POST", "/v1/charges/"+id+"/capture", "", bearer(a.secret)...), 409, "invalid_state")
		want(t, hh.do("POST", "/v1/charges/"+id+"/void", "", bearer(a.secret)...), 409, "invalid_state")
		want(t, hh.do("POST", "/v1/refunds", `{"charge":"`+id+`"}`, bearer(a.secret)...), 409, "invalid_state")
	})

	t.Run("duplicate authorize tasks move the charge once", func(t *testing.T) {
		id := h.createCharge(t, a.secret, chargeJSON(set("amount", 4321))).body["id"].(string)
		before := len(h.eventsOf(t, a.secret, "charge.captured"))
		var wg sync.WaitGroup
		errs := make([]error, 5)
		for i := range errs {
			wg.Add(1)
			go func() { defer wg.Done(); errs[i] = w.charges.Authorize(ctx, id, false) }()
		}
		wg.Wait()
		for _, err := range errs {
			if err != nil {
				t.Errorf("authorize: %v", err)
			}
		}
		if n := len(h.eventsOf(t, a.secret, "charge.captured")) - before; n != 1 {
			t.Errorf("%d charge.captured events, want 1", n)
		}
		keys := map[string]bool{}
		for _, c := range fake.Calls() {
			if c.Op == "authorize" && c.Amount == 4321 {
				keys[c.Key] = true
			}
		}
		if len(keys) != 1 || !keys["gh_"+id+"_authorize"] {
			t.Errorf("provider idempotency keys %v, want only gh_%s_authorize", keys, id)
		}
		if row := h.chargeRow(t, id); row.Status != "captured" || row.Captured != 4321 {
			t.Errorf("row = %+v", row)
		}
	})
}

// TestCreateChargeFieldNamesAreExact: a field is known only under its exact
// name; "AMOUNT" or "Currency" are unknown fields (api/openapi.yaml, docs/reliability.md B2).
func TestCreateChargeFieldNamesAreExact(t *testing.T) {
	t.Parallel()
	h := newHarness(t, paymentsEnv)
	a := h.account("ada@example.com")
	cases := []struct{ name, body, param string }{
		{"upper-case amount", `{"AMOUNT":2000,"currency":"usd","payment_method":"card","card":{"token":"tok_visa"}}`, "AMOUNT"},
		{"amount twice in two cases", `{"amount":100,"Amount":99999999,"currency":"usd","payment_method":"card","card":{"token":"tok_visa"}}`, "Amount"},
		{"card field", `{"amount":100,"currency":"usd","payment_method":"card","card":{"Token":"tok_visa"}}`, "card.Token"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := h.with(t).do("POST", "/v1/charges", c.body, bearer(a.secret)...)
			want(t, r, 400, "parameter_invalid")
			if r.errField("param") != c.param {
				t.Errorf("param = %q, want %q", r.errField("param"), c.param)
			}
		})
	}
	if n := h.count(t, "SELECT count(*) FROM charges"); n != 0 {
		t.Errorf("%d charges created from misspelt fields", n)
	}
}

// TestEventsAreKeptThirtyDays: an event older than 30 days is gone from the
// API even before the worker prunes it (api/openapi.yaml, GET /v1/events/{id}).
func TestEventsAreKeptThirtyDays(t *testing.T) {
	t.Parallel()
	h := newHarness(t, paymentsEnv)
	a := h.account("ada@example.com")
	h.createCharge(t, a.secret, chargeJSON())
	old := h.eventsOf(t, a.secret, "charge.created")[0]["id"].(string)
	fresh := h.createCharge(t, a.secret, chargeJSON())
	if _, err := h.db.Pool.Exec(context.Background(), `UPDATE events SET created_at = now() - interval '31 days' WHERE id = $1`, old); err != nil {
		t.Fatal(err)
	}
	want(t, h.do("GET", "/v1/events/"+old, "", bearer(a.secret)...), 404, "not_found")
	list := h.do("GET", "/v1/events?limit=100", "", bearer(a.secret)...)
	want(t, list, 200, "")
	for _, id := range idsOf(list) {
		if id == old {
			t.Errorf("the list shows an event older than 30 days")
		}
	}
	if len(idsOf(list)) != 1 {
		t.Errorf("list %v, want only the event of %s", idsOf(list), fresh.body["id"])
	}
}

// TestConcurrentCaptureAndVoid: of captures and voids sent at once, one wins.
func TestConcurrentCaptureAndVoid(t *testing.T) {
	t.Parallel()
	h := newHarness(t, paymentsEnv)
	a := h.account("ada@example.com")
	w := h.worker(t, &providertest.Fake{})
	id := h.authorizedCharge(t, w, a.secret, 2000)
	answers := burst(t, 10, func(i int) (response, error) {
		action := "capture"
		if i%2 == 1 {
			action = "void"
		}
		return h.try("POST", "/v1/charges/"+id+"/"+action, "", bearer(a.secret)...)
	})
	got := map[string]int{}
	for _, r := range answers {
		got[fmt.Sprintf("%d %s", r.status, r.errCode())]++
	}
	if diff := cmp.Diff(map[string]int{"200 ": 1, "409 invalid_state": 9}, got); diff != "" {
		t.Errorf("answers (-want +got):\n%s", diff)
	}
	if n := h.count(t, "SELECT count(*) FROM outbox WHERE ref_id = $1", id); n != 1 {
		t.Errorf("%d tasks for the charge, want 1", n)
	}
}

// TestCreateChargeNULBytes is docs/reliability.md B2: a NUL character (valid JSON,
// but not storable in PostgreSQL text) is a 400 naming the field, never a 500.
func TestCreateChargeNULBytes(t *testing.T) {
	t.Parallel()
	h := newHarness(t, paymentsEnv)
	a := h.account("ada@example.com")
	cases := []struct{ name, body, param string }{
		{"description", chargeJSON(set("description", "order\u00001")), "description"},
		{"metadata value", chargeJSON(set("metadata", map[string]any{"k": "v\u0000"})), "metadata"},
		{"metadata key", chargeJSON(set("metadata", map[string]any{"k\u0000": "v"})), "metadata"},
		{"card token", chargeJSON(token("tok_\u0000visa")), "card.token"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := h.with(t).do("POST", "/v1/charges", c.body, bearer(a.secret)...)
			want(t, r, 400, "parameter_invalid")
			if r.errField("param") != c.param {
				t.Errorf("param = %q, want %q", r.errField("param"), c.param)
			}
		})
	}
	t.Run("refund metadata", func(t *testing.T) {
		w := h.worker(t, &providertest.Fake{})
		id := h.capturedCharge(t, w, a.secret, 1000)
		r := h.with(t).do("POST", "/v1/refunds", refundJSON(id, `"metadata":{"k":"\u0000"}`), bearer(a.secret)...)
		want(t, r, 400, "parameter_invalid")
		if row := h.chargeRow(t, id); row.Held != 0 {
			t.Errorf("held %d after a refused refund", row.Held)
		}
	})
}

// TestIdempotencyKeysExpireAfter24Hours: keys are kept 24 h (api/openapi.yaml);
// after that the same key starts a new request, even before the pruner ran.
func TestIdempotencyKeysExpireAfter24Hours(t *testing.T) {
	t.Parallel()
	h := newHarness(t, paymentsEnv)
	a := h.account("ada@example.com")
	first := h.createCharge(t, a.secret, chargeJSON(set("amount", 100)), "Idempotency-Key", "daily")
	if _, err := h.db.Pool.Exec(context.Background(), `UPDATE idempotency_keys SET created_at = now() - interval '25 hours'`); err != nil {
		t.Fatal(err)
	}
	r := h.do("POST", "/v1/charges", chargeJSON(set("amount", 200)), append(bearer(a.secret), "Idempotency-Key", "daily")...)
	want(t, r, 201, "")
	if r.header.Get("Idempotent-Replayed") != "" || r.body["id"] == first.body["id"] || r.body["amount"] != 200.0 {
		t.Errorf("a key older than 24 h was honoured: %s", r.raw)
	}
}
