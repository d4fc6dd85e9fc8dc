package httpapi_test

import (
	"bytes"
	"context"
	"encoding/hex"
	"net/url"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// newCustomer creates a customer with body and returns its answer.
func (h *harness) newCustomer(t *testing.T, secret, body string, headers ...string) response {
	t.Helper()
	r := h.with(t).do("POST", "/v1/customers", body, append(bearer(secret), headers...)...)
	want(t, r, 201, "")
	return r
}

// saveCard saves a card (a card object's JSON) for the customer and returns the answer.
func (h *harness) saveCard(t *testing.T, secret, customer, card string, headers ...string) response {
	t.Helper()
	return h.with(t).do("POST", "/v1/customers/"+customer+"/payment_methods", `{"card":`+card+`}`, append(bearer(secret), headers...)...)
}

func rawCardJSON(number, cvc string) string {
	return `{"number":"` + number + `","exp_month":12,"exp_year":` + strconv.Itoa(expYear) + `,"cvc":"` + cvc + `"}`
}

// newCardToken makes a card token with the public key of the key pair of secret.
func (h *harness) newCardToken(t *testing.T, secret, number string) string {
	t.Helper()
	r := h.with(t).do("POST", "/v1/tokens", `{"card":`+rawCardJSON(number, "123")+`}`, bearer(h.publicKeyOf(secret))...)
	want(t, r, 201, "")
	return r.body["id"].(string)
}

// api/openapi.yaml, tag customers: creation with every field optional,
// idempotent; lists newest first, filtered by email in any case; a patch
// sets, clears (null) and keeps fields; deletion; bad input answers 400
// naming the field.
func TestCustomers(t *testing.T) {
	t.Parallel()
	h := newHarness(t, paymentsEnv)
	a := h.account("ada@example.com")

	empty := h.newCustomer(t, a.secret, "")
	if id, _ := empty.body["id"].(string); !strings.HasPrefix(id, "cus_") || empty.body["object"] != "customer" ||
		empty.body["email"] != nil || empty.body["name"] != nil || empty.body["description"] != nil || len(obj(empty.body["metadata"])) != 0 {
		t.Fatalf("empty customer: %s", empty.raw)
	}
	body := `{"email":"Jenny.Rosen@Example.com","name":"Jenny Rosen","description":"VIP","metadata":{"account":"7731"},"environment":"sandbox"}`
	key := []string{"Idempotency-Key", "customer-1"}
	jenny := h.newCustomer(t, a.secret, body, key...)
	replay := h.newCustomer(t, a.secret, body, key...)
	if replay.header.Get("Idempotent-Replayed") != "true" || !bytes.Equal(replay.raw, jenny.raw) {
		t.Fatalf("replay: %s, first %s", replay.raw, jenny.raw)
	}
	want(t, h.do("POST", "/v1/customers", `{"name":"Other"}`, append(bearer(a.secret), key...)...), 422, "idempotency_key_reused")
	id := jenny.body["id"].(string)
	if jenny.body["email"] != "Jenny.Rosen@Example.com" || obj(jenny.body["metadata"])["account"] != "7731" {
		t.Fatalf("customer: %s", jenny.raw)
	}
	other := h.newCustomer(t, a.secret, `{"email":"jenny.rosen@example.COM"}`)
	if n := h.count(t, `SELECT count(*) FROM customers WHERE merchant_id = $1`, a.merchantID); n != 3 {
		t.Fatalf("%d customers, want 3", n)
	}

	list := h.do("GET", "/v1/customers?limit=2", "", bearer(a.secret)...)
	want(t, list, 200, "")
	if got := idsOf(list); len(got) != 2 || got[0] != other.body["id"] || got[1] != id || list.body["has_more"] != true {
		t.Fatalf("first page: %s", list.raw)
	}
	older := h.do("GET", "/v1/customers?starting_after="+id, "", bearer(a.secret)...)
	if got := idsOf(older); len(got) != 1 || got[0] != empty.body["id"] || older.body["has_more"] != false {
		t.Fatalf("after %s: %s", id, older.raw)
	}
	byEmail := h.do("GET", "/v1/customers?email="+url.QueryEscape("JENNY.ROSEN@example.com"), "", bearer(a.secret)...)
	if got := idsOf(byEmail); len(got) != 2 || got[0] != other.body["id"] || got[1] != id {
		t.Fatalf("by email: %s", byEmail.raw)
	}
	if got := idsOf(h.do("GET", "/v1/customers?email=jenny", "", bearer(a.secret)...)); len(got) != 0 {
		t.Fatalf("a part of an email matches: %v", got)
	}

	got := h.do("GET", "/v1/customers/"+id, "", bearer(a.secret)...)
	want(t, got, 200, "")
	if !bytes.Equal(got.raw, jenny.raw) {
		t.Fatalf("get: %s, created %s", got.raw, jenny.raw)
	}
	patched := h.do("PATCH", "/v1/customers/"+id, `{"name":"Jenny Appleseed","description":null}`, bearer(a.secret)...)
	want(t, patched, 200, "")
	if patched.body["name"] != "Jenny Appleseed" || patched.body["description"] != nil || patched.body["email"] != "Jenny.Rosen@Example.com" ||
		obj(patched.body["metadata"])["account"] != "7731" {
		t.Fatalf("patched: %s", patched.raw)
	}
	cleared := h.do("PATCH", "/v1/customers/"+id, `{"email":null,"metadata":{}}`, bearer(a.secret)...)
	if cleared.body["email"] != nil || len(obj(cleared.body["metadata"])) != 0 || cleared.body["name"] != "Jenny Appleseed" {
		t.Fatalf("cleared: %s", cleared.raw)
	}

	t.Run("bad input", func(t *testing.T) {
		for _, c := range []struct{ method, path, body, param string }{
			{"POST", "/v1/customers", `{"email":"not an email"}`, "email"},
			{"POST", "/v1/customers", `{"email":"` + strings.Repeat("a", 510) + `@example.com"}`, "email"},
			{"POST", "/v1/customers", `{"name":"` + strings.Repeat("n", 1001) + `"}`, "name"},
			{"POST", "/v1/customers", `{"description":"` + strings.Repeat("d", 1001) + `"}`, "description"},
			{"POST", "/v1/customers", `{"metadata":{"k":"` + strings.Repeat("v", 501) + `"}}`, "metadata"},
			{"POST", "/v1/customers", `{"email":1}`, "email"},
			{"POST", "/v1/customers", `{"phone":"1"}`, "phone"},
			{"POST", "/v1/customers", `{"Email":"a@example.com"}`, "Email"},
			{"POST", "/v1/customers", `{"environment":"test"}`, "environment"},
			{"PATCH", "/v1/customers/" + id, `{"email":"nope"}`, "email"},
			{"PATCH", "/v1/customers/" + id, `{"name":{"first":"J"}}`, "name"},
			{"PATCH", "/v1/customers/" + id, `{"description":"a\u0000b"}`, "description"},
			{"PATCH", "/v1/customers/" + id, `{"id":"cus_x"}`, "id"},
			{"PATCH", "/v1/customers/" + id, `{"created_at":"2026-01-01T00:00:00.000Z"}`, "created_at"},
			{"GET", "/v1/customers?limit=0", "", "limit"},
			{"GET", "/v1/customers?starting_after=0193a5c2-7f1e-7b3a-9c4d-2e8f6a1b3c5d", "", "starting_after"},
			{"GET", "/v1/customers?email=" + strings.Repeat("a", 513), "", "email"},
			{"GET", "/v1/customers?email=a%00b", "", "email"},
		} {
			r := h.with(t).do(c.method, c.path, c.body, bearer(a.secret)...)
			if r.status != 400 || r.errField("param") != c.param {
				t.Errorf("%s %s %.60s: %d %s, want 400 param %s", c.method, c.path, c.body, r.status, r.raw, c.param)
			}
		}
		want(t, h.with(t).do("POST", "/v1/customers", `{"environment":"live"}`, bearer(a.secret)...), 403, "live_mode_disabled")
		if r := h.do("GET", "/v1/customers/"+id, "", bearer(a.secret)...); r.body["email"] != nil || r.body["name"] != "Jenny Appleseed" {
			t.Errorf("refused patches changed the customer: %s", r.raw)
		}
	})

	deleted := h.do("DELETE", "/v1/customers/"+id, "", bearer(a.secret)...)
	want(t, deleted, 200, "")
	if deleted.body["id"] != id || deleted.body["object"] != "customer" || deleted.body["deleted"] != true {
		t.Fatalf("deleted: %s", deleted.raw)
	}
	for _, m := range []string{"GET", "DELETE"} {
		want(t, h.do(m, "/v1/customers/"+id, "", bearer(a.secret)...), 404, "not_found")
	}
	want(t, h.do("PATCH", "/v1/customers/"+id, `{"name":"x"}`, bearer(a.secret)...), 404, "not_found")
	for _, bad := range []string{"nope", strings.ToUpper(id), id + "0", "0193a5c2-7f1e-7b3a-9c4d-2e8f6a1b3c5d"} {
		want(t, h.do("GET", "/v1/customers/"+bad, "", bearer(a.secret)...), 404, "not_found")
	}
}

// Saved cards: from a card token, which is then used up (a charge of it
// answers 400 card.token), or from a raw card, checked as a charge's card.
// Answers and stored records hold only the card's summary.
func TestPaymentMethods(t *testing.T) {
	t.Parallel()
	h := newHarness(t, paymentsEnv)
	a := h.account("ada@example.com")
	b := h.account("bob@example.com")
	cus := h.newCustomer(t, a.secret, `{"name":"Jenny"}`).body["id"].(string)

	tok := h.newCardToken(t, a.secret, cardMastercard)
	key := []string{"Idempotency-Key", "save-token-1"}
	fromToken := h.saveCard(t, a.secret, cus, `{"token":"`+tok+`"}`, key...)
	want(t, fromToken, 201, "")
	card := obj(fromToken.body["card"])
	if pm, _ := fromToken.body["id"].(string); !strings.HasPrefix(pm, "pm_") || fromToken.body["object"] != "payment_method" ||
		fromToken.body["type"] != "card" || fromToken.body["customer"] != cus || card["brand"] != "mastercard" || card["last4"] != "4444" {
		t.Fatalf("from a token: %s", fromToken.raw)
	}
	replay := h.saveCard(t, a.secret, cus, `{"token":"`+tok+`"}`, key...)
	want(t, replay, 201, "")
	if replay.header.Get("Idempotent-Replayed") != "true" || !bytes.Equal(replay.raw, fromToken.raw) {
		t.Fatalf("replay: %s", replay.raw)
	}
	var usedOK bool
	if err := h.db.Pool.QueryRow(context.Background(), `SELECT used_at IS NOT NULL AND card_sealed IS NULL AND charge_id IS NULL
		AND payment_method_id = $2 FROM card_tokens WHERE id = $1`, tok, fromToken.body["id"]).Scan(&usedOK); err != nil || !usedOK {
		t.Fatalf("the token is not marked used by the method (%v)", err)
	}
	r := h.saveCard(t, a.secret, cus, `{"token":"`+tok+`"}`)
	want(t, r, 400, "parameter_invalid")
	if r.errField("param") != "card.token" {
		t.Fatalf("a used token: %s", r.raw)
	}
	r = h.do("POST", "/v1/charges", tokenChargeBody(tok), bearer(a.secret)...)
	if r.status != 400 || r.errField("param") != "card.token" {
		t.Fatalf("a charge of the token a method used: %d %s", r.status, r.raw)
	}

	fromCard := h.saveCard(t, a.secret, cus, rawCardJSON(cardVisa, "9183"))
	want(t, fromCard, 201, "")
	if c := obj(fromCard.body["card"]); c["brand"] != "visa" || c["last4"] != "4242" || c["exp_year"] != float64(expYear) {
		t.Fatalf("from a raw card: %s", fromCard.raw)
	}
	// The same card has the fingerprint its charges show.
	charge := h.createCharge(t, a.secret, chargeJSON())
	if obj(charge.body["card"])["fingerprint"] != obj(fromCard.body["card"])["fingerprint"] {
		t.Fatalf("fingerprints differ: charge %s, method %s", charge.raw, fromCard.raw)
	}

	list := h.do("GET", "/v1/customers/"+cus+"/payment_methods", "", bearer(a.secret)...)
	want(t, list, 200, "")
	if got := idsOf(list); len(got) != 2 || got[0] != fromCard.body["id"] || got[1] != fromToken.body["id"] {
		t.Fatalf("list: %s", list.raw)
	}
	page := h.do("GET", "/v1/customers/"+cus+"/payment_methods?limit=1&starting_after="+fromCard.body["id"].(string), "", bearer(a.secret)...)
	if got := idsOf(page); len(got) != 1 || got[0] != fromToken.body["id"] {
		t.Fatalf("second page: %s", page.raw)
	}

	t.Run("bad input", func(t *testing.T) {
		otherTok := h.newCardToken(t, b.secret, cardVisa)
		for _, c := range []struct{ body, param string }{
			{``, "card"},
			{`{}`, "card"},
			{`{"card":{"token":"` + otherTok + `"}}`, "card.token"},
			{`{"card":{"token":"ctok_00000000000000000000000000"}}`, "card.token"},
			{`{"card":{"token":"tok_visa"}}`, "card.token"},
			{`{"card":{"token":"` + tok + `","number":"` + cardVisa + `"}}`, "card"},
			{`{"card":` + rawCardJSON("4242424242424241", "123") + `}`, "card.number"},
			{`{"card":` + rawCardJSON(cardVisa, "12") + `}`, "card.cvc"},
			{`{"card":{"number":"` + cardVisa + `","exp_month":13,"exp_year":2030,"cvc":"123"}}`, "card.exp_month"},
			{`{"card":{"number":"` + cardVisa + `","exp_month":1,"exp_year":2020,"cvc":"123"}}`, "card.exp_year"},
			{`{"card":{"number":"` + cardVisa + `","exp_month":1,"cvc":"123"}}`, "card.exp_year"},
			{`{"card":{"brand":"visa"}}`, "card.brand"},
			{`{"card":{"token":"x"},"type":"card"}`, "type"},
			{`{"card":{"token":"x"},"customer":"` + cus + `"}`, "customer"},
		} {
			r := h.with(t).do("POST", "/v1/customers/"+cus+"/payment_methods", c.body, bearer(a.secret)...)
			if r.status != 400 || r.errField("param") != c.param {
				t.Errorf("%.80s: %d %s, want 400 param %s", c.body, r.status, r.raw, c.param)
			}
		}
		if n := h.count(t, `SELECT count(*) FROM payment_methods`); n != 2 {
			t.Errorf("%d payment methods after refusals, want 2", n)
		}
		// B's token stays usable after A's refused attempt.
		want(t, h.do("POST", "/v1/charges", tokenChargeBody(otherTok), bearer(b.secret)...), 201, "")
	})

	t.Run("card data is stored only sealed", func(t *testing.T) {
		needles := []string{cardVisa, cardMastercard, `"9183"`, `cvc"`}
		for _, ans := range []response{fromToken, replay, fromCard, list} {
			for _, n := range needles {
				if strings.Contains(string(ans.raw), n) {
					t.Errorf("an answer holds %q: %s", n, ans.raw)
				}
			}
		}
		// The idempotency record of a raw card's method holds its answer only.
		keyed := h.saveCard(t, a.secret, cus, rawCardJSON(cardAmex, "9183"), "Idempotency-Key", "save-card-1")
		want(t, keyed, 201, "")
		if hits := h.scanDatabase(t, append(needles, cardAmex)...); len(hits) > 0 {
			t.Errorf("card data stored in clear:\n%s", strings.Join(hits, "\n"))
		}
		if hits := h.scanRedis(t, append(needles, cardAmex)...); len(hits) > 0 {
			t.Errorf("card data in Redis:\n%s", strings.Join(hits, "\n"))
		}
	})
}

// Another merchant's customers and saved cards are unknown to B: 404 on
// every route, even under B's own customer, and never in B's lists.
func TestCustomersOfAnotherMerchant(t *testing.T) {
	t.Parallel()
	h := newHarness(t, paymentsEnv)
	a := h.account("ada@example.com")
	b := h.account("bob@example.com")
	cusA := h.newCustomer(t, a.secret, `{"email":"shared@example.com"}`).body["id"].(string)
	pmA := h.saveCard(t, a.secret, cusA, rawCardJSON(cardVisa, "123")).body["id"].(string)
	cusB := h.newCustomer(t, b.secret, `{"email":"shared@example.com"}`).body["id"].(string)
	before := h.state(t, a.merchantID)

	for _, c := range []struct{ method, path, body string }{
		{"GET", "/v1/customers/" + cusA, ""},
		{"PATCH", "/v1/customers/" + cusA, `{"name":"Mallory"}`},
		{"DELETE", "/v1/customers/" + cusA, ""},
		{"GET", "/v1/customers/" + cusA + "/payment_methods", ""},
		{"POST", "/v1/customers/" + cusA + "/payment_methods", `{"card":` + rawCardJSON(cardVisa, "123") + `}`},
		{"POST", "/v1/customers/" + cusA + "/payment_methods", `{"card":{"token":"` + h.newCardToken(t, b.secret, cardVisa) + `"}}`},
		{"DELETE", "/v1/customers/" + cusA + "/payment_methods/" + pmA, ""},
		{"DELETE", "/v1/customers/" + cusB + "/payment_methods/" + pmA, ""},
	} {
		r := h.do(c.method, c.path, c.body, bearer(b.secret)...)
		want(t, r, 404, "not_found")
		if strings.Contains(string(r.raw), cusA) || strings.Contains(string(r.raw), pmA) {
			t.Errorf("%s %s answers with A's ids: %s", c.method, c.path, r.raw)
		}
	}
	// A's own method under another of A's customers is not found either.
	cusA2 := h.newCustomer(t, a.secret, "").body["id"].(string)
	want(t, h.do("DELETE", "/v1/customers/"+cusA2+"/payment_methods/"+pmA, "", bearer(a.secret)...), 404, "not_found")
	for _, path := range []string{"/v1/customers?limit=100", "/v1/customers?email=shared%40example.com", "/v1/customers?starting_after=" + cusA,
		"/v1/customers/" + cusB + "/payment_methods?starting_after=" + pmA} {
		r := h.do("GET", path, "", bearer(b.secret)...)
		want(t, r, 200, "")
		for _, id := range idsOf(r) {
			if id != cusB {
				t.Errorf("B's %s lists %s", path, id)
			}
		}
	}
	after := h.state(t, a.merchantID)
	for _, table := range []string{"customers", "audit_log"} { // A's second customer and its entry
		delete(before, table)
		delete(after, table)
	}
	if n := h.count(t, "SELECT count(*) FROM audit_log WHERE merchant_id = $1 AND action = 'customer.create'", a.merchantID); n != 2 {
		t.Errorf("A's audit log has %d customer creations, want 2 (B's requests wrote to it?)", n)
	}
	if diff := stateDiff(before, after); diff != "" {
		t.Errorf("B's requests changed what A owns: %s", diff)
	}
}

// Deleting a payment method, or its customer, deletes the rows: nothing of
// the sealed cards is left in a dump of the database.
func TestPaymentMethodDeletionLeavesNoCard(t *testing.T) {
	t.Parallel()
	h := newHarness(t, paymentsEnv)
	a := h.account("ada@example.com")
	cus := h.newCustomer(t, a.secret, "").body["id"].(string)
	other := h.newCustomer(t, a.secret, "").body["id"].(string)
	var pms []string
	for _, c := range []struct{ customer, card string }{
		{cus, rawCardJSON(cardVisa, "123")},
		{cus, `{"token":"` + h.newCardToken(t, a.secret, cardMastercard) + `"}`},
		{other, rawCardJSON(cardAmex, "1234")},
	} {
		r := h.saveCard(t, a.secret, c.customer, c.card)
		want(t, r, 201, "")
		pms = append(pms, r.body["id"].(string))
	}
	sealed := map[string][]byte{}
	for _, pm := range pms {
		var b []byte
		if err := h.db.Pool.QueryRow(context.Background(), `SELECT card_sealed FROM payment_methods WHERE id = $1`, pm).Scan(&b); err != nil || len(b) < 16 {
			t.Fatalf("sealed card of %s: %d bytes (%v)", pm, len(b), err)
		}
		sealed[pm] = b
	}
	dump, dumped := pgDump(t, h.db.URL)
	if dumped {
		for pm, b := range sealed {
			if !bytes.Contains(dump, []byte(hex.EncodeToString(b))) {
				t.Fatalf("the dump does not show the sealed card of %s: the scan is wrong", pm)
			}
		}
	}

	want(t, h.do("DELETE", "/v1/customers/"+cus+"/payment_methods/"+pms[0], "", bearer(a.secret)...), 200, "")
	want(t, h.do("DELETE", "/v1/customers/"+cus+"/payment_methods/"+pms[0], "", bearer(a.secret)...), 404, "not_found")
	if n := h.count(t, `SELECT count(*) FROM payment_methods WHERE id = $1`, pms[0]); n != 0 {
		t.Fatalf("%d rows of the deleted method", n)
	}
	r := h.do("DELETE", "/v1/customers/"+other, "", bearer(a.secret)...)
	want(t, r, 200, "")
	if n := h.count(t, `SELECT count(*) FROM payment_methods WHERE customer_id = $1`, other); n != 0 {
		t.Fatalf("%d methods of the deleted customer", n)
	}
	want(t, h.do("GET", "/v1/customers/"+other+"/payment_methods", "", bearer(a.secret)...), 404, "not_found")
	if n := h.count(t, `SELECT count(*) FROM payment_methods WHERE id = $1`, pms[1]); n != 1 {
		t.Fatalf("another customer's method is gone")
	}
	want(t, h.do("DELETE", "/v1/customers/"+cus, "", bearer(a.secret)...), 200, "")
	if n := h.count(t, `SELECT count(*) FROM payment_methods WHERE merchant_id = $1`, a.merchantID); n != 0 {
		t.Fatalf("%d methods left", n)
	}

	if !dumped {
		t.Log("pg_dump not found: the sealed cards were checked by SQL only")
		return
	}
	dump, _ = pgDump(t, h.db.URL)
	for pm, b := range sealed {
		if bytes.Contains(dump, []byte(hex.EncodeToString(b))) {
			t.Errorf("the sealed card of deleted %s is still in the database", pm)
		}
	}
	t.Logf("pg_dump of %d bytes holds none of the %d deleted sealed cards", len(dump), len(sealed))
}

// pgDump is pg_dump --data-only of the database at url; false when no
// pg_dump is installed.
func pgDump(t *testing.T, url string) ([]byte, bool) {
	t.Helper()
	path, err := exec.LookPath("pg_dump")
	if err != nil {
		found, _ := filepath.Glob("/usr/lib/postgresql/*/bin/pg_dump")
		if len(found) == 0 {
			return nil, false
		}
		path = found[len(found)-1]
	}
	var out, errOut bytes.Buffer
	cmd := exec.Command(path, "--data-only", "--no-owner", "--no-privileges", "--dbname="+url)
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Run(); err != nil {
		t.Fatalf("pg_dump: %v: %s", err, errOut.String())
	}
	return out.Bytes(), true
}
