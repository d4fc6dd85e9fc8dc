package customers_test

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/gatehouse-pay/gatehouse/internal/apperr"
	"github.com/gatehouse-pay/gatehouse/internal/charges"
	"github.com/gatehouse-pay/gatehouse/internal/customers"
	"github.com/gatehouse-pay/gatehouse/internal/idempotency"
	"github.com/gatehouse-pay/gatehouse/internal/ids"
	"github.com/gatehouse-pay/gatehouse/internal/keyring"
	"github.com/gatehouse-pay/gatehouse/internal/merchants"
	"github.com/gatehouse-pay/gatehouse/internal/resource"
	"github.com/gatehouse-pay/gatehouse/internal/store"
	"github.com/gatehouse-pay/gatehouse/internal/testenv"
)

var testNow = time.Date(2026, 11, 25, 9, 0, 0, 0, time.UTC)

// fixture is the service on a fresh database, with two merchants.
type fixture struct {
	db     testenv.DB
	st     *store.Store
	keys   *keyring.Keyring
	svc    *customers.Service
	charge *charges.Service
	a, b   string // merchant ids
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	db := testenv.NewDB(t)
	st := store.New(db.Pool)
	keys, err := keyring.New(bytes.Repeat([]byte{7}, 32))
	if err != nil {
		t.Fatal(err)
	}
	now := func() time.Time { return testNow }
	f := &fixture{db: db, st: st, keys: keys, svc: customers.NewService(st, keys, now),
		charge: charges.NewService(st, noQueue{}, keys, []string{"sandbox"}, "sandbox", now, nil).WithTokens(st).WithCustomers(st)}
	for _, email := range []string{"a@example.com", "b@example.com"} {
		m := merchants.Merchant{ID: ids.New("mer"), Email: email, Name: "n", PasswordHash: "h", CreatedAt: testNow}
		if err := st.CreateMerchant(context.Background(), m); err != nil {
			t.Fatal(err)
		}
		if f.a == "" {
			f.a = m.ID
		} else {
			f.b = m.ID
		}
	}
	return f
}

func render[T any](v T) (idempotency.Response, error) {
	b, err := json.Marshal(v)
	return idempotency.Response{Status: 201, Body: b}, err
}

func (f *fixture) customer(t *testing.T, merchantID string) string {
	t.Helper()
	r, err := f.svc.Create(context.Background(), merchantID, "sandbox", customers.CreateParams{}, nil, render[customers.Customer])
	if err != nil {
		t.Fatal(err)
	}
	var v resource.Customer
	if err := json.Unmarshal(r.Response.Body, &v); err != nil {
		t.Fatal(err)
	}
	return v.ID
}

func (f *fixture) token(t *testing.T, merchantID, number string) resource.Token {
	t.Helper()
	r, err := f.charge.CreateToken(context.Background(), merchantID, "sandbox", "key_1", charges.TokenParams{Card: rawCard(number)}, nil,
		func(v any) (idempotency.Response, error) { return render(v) })
	if err != nil {
		t.Fatal(err)
	}
	var v resource.Token
	if err := json.Unmarshal(r.Response.Body, &v); err != nil {
		t.Fatal(err)
	}
	return v
}

func rawCard(number string) *charges.RawCard {
	month, year, cvc := 12, 2030, "123"
	return &charges.RawCard{Number: &number, ExpMonth: &month, ExpYear: &year, CVC: &cvc}
}

func cardParams(number string) *customers.CardParams {
	c := rawCard(number)
	return &customers.CardParams{Number: c.Number, ExpMonth: c.ExpMonth, ExpYear: c.ExpYear, CVC: c.CVC}
}

func tokenParams(id string) *customers.CardParams { return &customers.CardParams{Token: &id} }

func (f *fixture) savePM(merchantID, customerID string, card *customers.CardParams, idem *idempotency.Request) (resource.PaymentMethod, bool, error) {
	r, err := f.svc.CreatePaymentMethod(context.Background(), merchantID, "sandbox", customerID, customers.PaymentMethodParams{Card: card}, idem,
		render[customers.PaymentMethod])
	if err != nil {
		return resource.PaymentMethod{}, false, err
	}
	var v resource.PaymentMethod
	err = json.Unmarshal(r.Response.Body, &v)
	return v, r.Replayed, err
}

// savedOf returns the method's card as stored, and checks it the way every
// saved card must be: sealed under its data key, which opens only with the
// method's and merchant's ids, holding the number and no CVC; its old
// column holds a seal of nothing.
func (f *fixture) savedOf(t *testing.T, merchantID, pmID, number string) charges.SavedCard {
	t.Helper()
	c, err := f.st.SavedCard(context.Background(), merchantID, pmID)
	if err != nil {
		t.Fatal(err)
	}
	if c.Legacy() {
		t.Fatalf("%s is not sealed under a data key of its own", pmID)
	}
	got, _, _, cvc, err := charges.OpenSavedCard(f.keys, c)
	if err != nil || got != number || cvc != "" {
		t.Fatalf("the saved card %s: number %t, CVC %q kept (%v)", pmID, got == number, cvc, err)
	}
	for _, sealed := range [][]byte{c.Own, c.Sealed, c.Key} {
		if bytes.Contains(sealed, []byte(number[len(number)-4:])) {
			t.Fatalf("%s holds the number in clear", pmID)
		}
	}
	if plain, err := f.keys.Open(keyring.PurposeCard, c.Sealed, []byte(pmID)); err != nil || len(plain) != 0 {
		t.Fatalf("the old column of %s: %d bytes (%v), want a seal of nothing", pmID, len(plain), err)
	}
	if _, err := f.keys.Open(keyring.PurposeCard, c.Own, []byte(pmID)); err == nil {
		t.Fatalf("the card of %s opens under the card key", pmID)
	}
	other := c
	other.MerchantID = "mer_other"
	if _, _, _, _, err := charges.OpenSavedCard(f.keys, other); err == nil {
		t.Fatalf("the card of %s opens as another merchant's", pmID)
	}
	return c
}

func wantParam(t *testing.T, name string, err error, param string) {
	t.Helper()
	e, ok := apperr.As(err)
	if !ok || e.Kind != apperr.KindInvalid || e.Param != param {
		t.Errorf("%s: %v, want 400 param %s", name, err, param)
	}
}

// Customer fields are held to their limits, each refusal naming its field;
// a patch clears with null and keeps what it leaves out.
func TestCustomerValidation(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	long := func(n int) *string { s := strings.Repeat("é", n); return &s }
	s := func(v string) *string { return &v }
	live, other := "live", "test"
	bad := map[string]struct {
		p     customers.CreateParams
		param string
	}{
		"no @":           {customers.CreateParams{Email: s("jenny.example.com")}, "email"},
		"no domain dot":  {customers.CreateParams{Email: s("jenny@localhost")}, "email"},
		"display name":   {customers.CreateParams{Email: s("Jenny <jenny@example.com>")}, "email"},
		"spaces":         {customers.CreateParams{Email: s(" jenny@example.com")}, "email"},
		"empty email":    {customers.CreateParams{Email: s("")}, "email"},
		"email too long": {customers.CreateParams{Email: s(strings.Repeat("a", 501) + "@example.com")}, "email"},
		"name too long":  {customers.CreateParams{Name: long(1001)}, "name"},
		"NUL in name":    {customers.CreateParams{Name: s("a\x00b")}, "name"},
		"description":    {customers.CreateParams{Description: long(1001)}, "description"},
		"metadata key":   {customers.CreateParams{Metadata: map[string]string{strings.Repeat("k", 41): "v"}}, "metadata"},
		"metadata value": {customers.CreateParams{Metadata: map[string]string{"k": *long(501)}}, "metadata"},
		"environment":    {customers.CreateParams{Environment: &other}, "environment"},
	}
	for name, c := range bad {
		_, err := f.svc.Create(ctx, f.a, "sandbox", c.p, nil, render[customers.Customer])
		wantParam(t, name, err, c.param)
	}
	if _, err := f.svc.Create(ctx, f.a, "sandbox", customers.CreateParams{Environment: &live}, nil, render[customers.Customer]); apperr.CodeOf(err) != apperr.CodeLiveModeDisabled {
		t.Errorf("live: %v", err)
	}
	var n int
	if err := f.db.Pool.QueryRow(ctx, `SELECT count(*) FROM customers`).Scan(&n); err != nil || n != 0 {
		t.Fatalf("refused creations stored %d customers (%v)", n, err)
	}

	ok := customers.CreateParams{Email: s(strings.Repeat("a", 500) + "@example.com"), Name: long(1000), Description: s(""),
		Metadata: map[string]string{"plan": "gold"}}
	r, err := f.svc.Create(ctx, f.a, "sandbox", ok, nil, render[customers.Customer])
	if err != nil {
		t.Fatal(err)
	}
	var v resource.Customer
	if err := json.Unmarshal(r.Response.Body, &v); err != nil || !customers.ValidID(v.ID) || v.Object != "customer" || len(*v.Email) != 512 {
		t.Fatalf("created %s (%v)", r.Response.Body, err)
	}

	var p customers.UpdateParams
	if err := json.Unmarshal([]byte(`{"name":null,"description":"vip"}`), &p); err != nil {
		t.Fatal(err)
	}
	got, err := f.svc.Update(ctx, f.a, v.ID, p)
	if err != nil || got.Name != nil || *got.Description != "vip" || *got.Email != *ok.Email || got.Metadata["plan"] != "gold" {
		t.Fatalf("patch: %+v %v", got, err)
	}
	for body, param := range map[string]string{`{"email":"nope"}`: "email", `{"name":"` + *long(1001) + `"}`: "name",
		`{"description":"a\u0000b"}`: "description", `{"metadata":{"":"x"}}`: "metadata"} {
		var p customers.UpdateParams
		if err := json.Unmarshal([]byte(body), &p); err != nil {
			t.Fatal(err)
		}
		_, err := f.svc.Update(ctx, f.a, v.ID, p)
		wantParam(t, "patch "+body[:min(len(body), 30)], err, param)
	}
	for _, id := range []string{"cus_nope", v.ID + "x", ids.New("pm")} {
		if _, err := f.svc.Update(ctx, f.a, id, customers.UpdateParams{}); apperr.KindOf(err) != apperr.KindNotFound {
			t.Errorf("patch of %q: %v", id, err)
		}
	}
	if _, err := f.svc.Get(ctx, f.b, v.ID); apperr.KindOf(err) != apperr.KindNotFound {
		t.Errorf("b reads a's customer: %v", err)
	}
}

// A raw card is checked as a charge's card, fingerprinted as charges do,
// and kept sealed under the method's id only.
func TestPaymentMethodFromRawCard(t *testing.T) {
	f := newFixture(t)
	cus := f.customer(t, f.a)
	pm, _, err := f.savePM(f.a, cus, cardParams("4242 4242 4242 4242"), nil)
	if err != nil {
		t.Fatal(err)
	}
	wantFP := charges.CardFingerprint(f.keys, f.a, "4242424242424242")
	if !customers.ValidPaymentMethodID(pm.ID) || pm.Customer != cus || pm.Type != "card" || pm.Card.Brand != "visa" ||
		*pm.Card.Last4 != "4242" || *pm.Card.ExpYear != 2030 || *pm.Card.Fingerprint != wantFP {
		t.Fatalf("payment method %+v", pm)
	}
	f.savedOf(t, f.a, pm.ID, "4242424242424242")
	// The same card of the same merchant has the same fingerprint; another
	// merchant's differs.
	again, _, err := f.savePM(f.a, f.customer(t, f.a), cardParams("4242424242424242"), nil)
	if err != nil || *again.Card.Fingerprint != wantFP {
		t.Fatalf("the same card again: %+v %v", again, err)
	}
	if b, _, err := f.savePM(f.b, f.customer(t, f.b), cardParams("4242424242424242"), nil); err != nil || *b.Card.Fingerprint == wantFP {
		t.Fatalf("another merchant's fingerprint: %+v %v", b, err)
	}

	year, month, cvc, short := 2020, 13, "12", "4242"
	bad := map[string]struct {
		card  *customers.CardParams
		param string
	}{
		"no card":      {nil, "card"},
		"empty card":   {&customers.CardParams{}, "card.number"},
		"Luhn":         {cardParams("4242424242424241"), "card.number"},
		"short number": {&customers.CardParams{Number: &short, ExpMonth: &month, ExpYear: &year, CVC: &cvc}, "card.number"},
		"month":        {func() *customers.CardParams { c := cardParams("4242424242424242"); c.ExpMonth = &month; return c }(), "card.exp_month"},
		"expired":      {func() *customers.CardParams { c := cardParams("4242424242424242"); c.ExpYear = &year; return c }(), "card.exp_year"},
		"cvc":          {func() *customers.CardParams { c := cardParams("4242424242424242"); c.CVC = &cvc; return c }(), "card.cvc"},
		"both":         {func() *customers.CardParams { c := cardParams("4242424242424242"); c.Token = &short; return c }(), "card"},
	}
	for name, c := range bad {
		_, _, err := f.savePM(f.a, cus, c.card, nil)
		wantParam(t, name, err, c.param)
	}
	if _, _, err := f.savePM(f.b, cus, cardParams("4242424242424242"), nil); apperr.KindOf(err) != apperr.KindNotFound {
		t.Fatalf("b saves a card for a's customer: %v", err)
	}
	for _, id := range []string{"", "nope", strings.ToUpper(cus), pm.ID} {
		if _, _, err := f.savePM(f.a, id, cardParams("4242424242424242"), nil); apperr.KindOf(err) != apperr.KindNotFound {
			t.Errorf("customer id %q: %v", id, err)
		}
	}
}

// A card token becomes a payment method once: its card moves, re-sealed,
// under the method's id; the token is then used, for methods and charges
// alike. Unusable tokens answer 400 card.token, but a repeated request
// replays its first answer.
func TestPaymentMethodFromToken(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	cus := f.customer(t, f.a)
	tok := f.token(t, f.a, "5555555555554444")
	idem := idempotency.NewRequest(idempotency.ScopeServer, "save-1", []byte("fingerprint-1"))
	pm, replayed, err := f.savePM(f.a, cus, tokenParams(tok.ID), idem)
	if err != nil || replayed {
		t.Fatal(err)
	}
	if pm.Card.Brand != "mastercard" || *pm.Card.Last4 != "4444" || *pm.Card.Fingerprint != *tok.Card.Fingerprint {
		t.Fatalf("payment method %+v of token %+v", pm, tok)
	}
	saved := f.savedOf(t, f.a, pm.ID, "5555555555554444")
	if _, err := f.keys.Open(keyring.PurposeCard, saved.Own, []byte(tok.ID)); err == nil {
		t.Fatal("the method's card still opens under the token's id")
	}
	var tokenID *string
	if err := f.db.Pool.QueryRow(ctx, `SELECT token_id FROM payment_methods WHERE id = $1`, pm.ID).Scan(&tokenID); err != nil || tokenID == nil || *tokenID != tok.ID {
		t.Fatalf("token_id %v (%v)", tokenID, err)
	}

	// The same request again replays; another request with the token is refused.
	again, replayed, err := f.savePM(f.a, cus, tokenParams(tok.ID), idem)
	if err != nil || !replayed || again.ID != pm.ID {
		t.Fatalf("replay: %+v %v %v", again, replayed, err)
	}
	_, _, err = f.savePM(f.a, cus, tokenParams(tok.ID), nil)
	wantParam(t, "used by a method", err, "card.token")
	_, err = f.charge.Create(ctx, f.a, "sandbox", charges.CreateParams{Amount: ptr(int64(100)), Currency: ptr("usd"),
		PaymentMethod: ptr("card"), Card: &charges.CardInput{Token: &tok.ID}}, nil, func(v any) (idempotency.Response, error) { return render(v) })
	wantParam(t, "a charge of the used token", err, "card.token")

	other := f.token(t, f.b, "4242424242424242")
	for name, id := range map[string]string{
		"another merchant's": other.ID, "unknown": ids.New("ctok"), "provider's": "tok_visa", "malformed": "ctok_x", "empty": " ",
	} {
		_, _, err := f.savePM(f.a, cus, tokenParams(id), nil)
		wantParam(t, name, err, "card.token")
	}
	// A token saved for another merchant's customer stays usable.
	fresh := f.token(t, f.a, "4242424242424242")
	if _, _, err := f.savePM(f.a, f.customer(t, f.b), tokenParams(fresh.ID), nil); apperr.KindOf(err) != apperr.KindNotFound {
		t.Fatalf("a's token for b's customer: %v", err)
	}
	if _, _, err := f.st.UsableToken(ctx, f.a, "sandbox", fresh.ID, testNow); err != nil {
		t.Fatalf("the token of a refused method is no longer usable: %v", err)
	}
}

func ptr[T any](v T) *T { return &v }
