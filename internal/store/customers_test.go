package store_test

import (
	"bytes"
	"context"
	"sync"
	"testing"
	"time"

	"github.com/gatehouse-pay/gatehouse/internal/apperr"
	"github.com/gatehouse-pay/gatehouse/internal/charges"
	"github.com/gatehouse-pay/gatehouse/internal/customers"
	"github.com/gatehouse-pay/gatehouse/internal/idempotency"
	"github.com/gatehouse-pay/gatehouse/internal/ids"
	"github.com/gatehouse-pay/gatehouse/internal/listing"
	"github.com/gatehouse-pay/gatehouse/internal/store"
	"github.com/gatehouse-pay/gatehouse/internal/testenv"
)

func newCustomer(t *testing.T, s *store.Store, merchantID string, email *string) customers.Customer {
	t.Helper()
	now := time.Now().UTC().Truncate(time.Millisecond)
	c := customers.Customer{ID: ids.New("cus"), MerchantID: merchantID, Environment: "sandbox", Email: email,
		Metadata: map[string]string{"k": "v"}, CreatedAt: now, UpdatedAt: now}
	if _, err := s.CreateCustomer(context.Background(), c, nil, idempotency.Response{}); err != nil {
		t.Fatal(err)
	}
	return c
}

func str(s string) *string { return &s }

// sealedAs is a stand-in of a sealed card and data key, named by tag.
func sealedAs(tag string) charges.SealedCard {
	return charges.SealedCard{Own: []byte(tag), Key: []byte("key-" + tag), Stub: []byte("stub-" + tag)}
}

// savedCard is a payment method of a raw card with sealed bytes of its own.
func savedCard(t *testing.T, s *store.Store, c customers.Customer, sealed string) customers.PaymentMethod {
	t.Helper()
	last4, fp, month, year := "4242", "fp", 12, 2030
	m := customers.PaymentMethod{ID: ids.New("pm"), MerchantID: c.MerchantID, Environment: c.Environment, CustomerID: c.ID,
		Card:      charges.Card{Brand: "visa", Last4: &last4, ExpMonth: &month, ExpYear: &year, Fingerprint: &fp},
		CreatedAt: time.Now().UTC().Truncate(time.Millisecond)}
	if _, err := s.CreatePaymentMethod(context.Background(), customers.NewPaymentMethod{Method: m, Sealed: sealedAs(sealed)}); err != nil {
		t.Fatal(err)
	}
	return m
}

// Customers are the merchant's: another merchant's reads, updates and
// deletions are NotFound; lists page newest first and filter by email in
// any case; a patch sets, clears or keeps each field.
func TestCustomerStore(t *testing.T) {
	s := newStore(t)
	ctx := context.Background()
	a := newMerchant(t, s, "a@example.com")
	b := newMerchant(t, s, "b@example.com")
	var made []customers.Customer
	for _, email := range []*string{str("Jenny@Example.com"), nil, str("other@example.com"), str("jenny@example.COM")} {
		made = append(made, newCustomer(t, s, a.ID, email))
	}
	newCustomer(t, s, b.ID, str("jenny@example.com"))

	got, err := s.CustomerByID(ctx, a.ID, made[0].ID)
	if err != nil || *got.Email != "Jenny@Example.com" || got.Name != nil || got.Metadata["k"] != "v" || !got.CreatedAt.Equal(made[0].CreatedAt) {
		t.Fatalf("by id: %+v %v", got, err)
	}
	if _, err := s.CustomerByID(ctx, b.ID, made[0].ID); apperr.KindOf(err) != apperr.KindNotFound {
		t.Fatalf("b reads a's customer: %v", err)
	}

	page, err := s.ListCustomers(ctx, a.ID, customers.Filter{}, listing.Params{Limit: 2, StartingAfter: made[3].ID})
	if err != nil || len(page.Items) != 2 || page.Items[0].ID != made[2].ID || page.Items[1].ID != made[1].ID || !page.HasMore {
		t.Fatalf("page after newest: %+v %v", page, err)
	}
	page, err = s.ListCustomers(ctx, a.ID, customers.Filter{Email: "JENNY@example.com"}, listing.Params{Limit: 10})
	if err != nil || len(page.Items) != 2 || page.Items[0].ID != made[3].ID || page.Items[1].ID != made[0].ID || page.HasMore {
		t.Fatalf("by email: %+v %v", page, err)
	}
	if page, err := s.ListCustomers(ctx, a.ID, customers.Filter{Email: "jenny@example"}, listing.Params{Limit: 10}); err != nil || len(page.Items) != 0 {
		t.Fatalf("by a prefix of an email: %+v %v", page, err)
	}

	at := time.Now().UTC().Truncate(time.Millisecond).Add(time.Second)
	up, err := s.UpdateCustomer(ctx, a.ID, made[0].ID, customers.Patch{Email: customers.ClearText(), Name: customers.SetText("Jenny"), At: at})
	if err != nil || up.Email != nil || *up.Name != "Jenny" || up.Description != nil || up.Metadata["k"] != "v" || !up.UpdatedAt.Equal(at) {
		t.Fatalf("patch: %+v %v", up, err)
	}
	up, err = s.UpdateCustomer(ctx, a.ID, made[0].ID, customers.Patch{Metadata: map[string]string{}, At: at})
	if err != nil || *up.Name != "Jenny" || len(up.Metadata) != 0 {
		t.Fatalf("patch of metadata only: %+v %v", up, err)
	}
	if _, err := s.UpdateCustomer(ctx, b.ID, made[0].ID, customers.Patch{Name: customers.SetText("Mallory"), At: at}); apperr.KindOf(err) != apperr.KindNotFound {
		t.Fatalf("b patches a's customer: %v", err)
	}
	if err := s.DeleteCustomer(ctx, b.ID, made[0].ID); apperr.KindOf(err) != apperr.KindNotFound {
		t.Fatalf("b deletes a's customer: %v", err)
	}
	if err := s.DeleteCustomer(ctx, a.ID, made[0].ID); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteCustomer(ctx, a.ID, made[0].ID); apperr.KindOf(err) != apperr.KindNotFound {
		t.Fatalf("second deletion: %v", err)
	}
}

// A payment method's row holds its sealed card until it, or its customer,
// is deleted; then nothing of it is left. Methods are reached only through
// their merchant's customer.
func TestPaymentMethodStore(t *testing.T) {
	db := testenv.NewDB(t)
	s := store.New(db.Pool)
	ctx := context.Background()
	a := newMerchant(t, s, "a@example.com")
	b := newMerchant(t, s, "b@example.com")
	c1 := newCustomer(t, s, a.ID, nil)
	c2 := newCustomer(t, s, a.ID, nil)
	pm1 := savedCard(t, s, c1, "sealed-1")
	pm2 := savedCard(t, s, c1, "sealed-2")
	pm3 := savedCard(t, s, c2, "sealed-3")
	left := func(id string) (rows int) {
		t.Helper()
		if err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM payment_methods WHERE id = $1`, id).Scan(&rows); err != nil {
			t.Fatal(err)
		}
		return rows
	}

	page, err := s.ListPaymentMethods(ctx, a.ID, c1.ID, listing.Params{Limit: 10})
	if err != nil || len(page.Items) != 2 || page.Items[0].ID != pm2.ID || page.Items[1].ID != pm1.ID ||
		*page.Items[0].Card.Last4 != "4242" || page.Items[0].CustomerID != c1.ID {
		t.Fatalf("c1's methods: %+v %v", page, err)
	}
	if _, err := s.ListPaymentMethods(ctx, b.ID, c1.ID, listing.Params{Limit: 10}); apperr.KindOf(err) != apperr.KindNotFound {
		t.Fatalf("b lists a's customer's methods: %v", err)
	}
	got, err := s.SavedCard(ctx, a.ID, pm1.ID)
	if err != nil || string(got.Own) != "sealed-1" || string(got.Key) != "key-sealed-1" || string(got.Sealed) != "stub-sealed-1" ||
		got.Legacy() || got.CustomerID != c1.ID || got.MerchantID != a.ID || *got.Card.Fingerprint != "fp" {
		t.Fatalf("saved card: %+v %v", got, err)
	}
	if _, err := s.SavedCard(ctx, b.ID, pm1.ID); apperr.KindOf(err) != apperr.KindNotFound {
		t.Fatalf("b reads a's saved card: %v", err)
	}
	orphan := pm1
	orphan.ID, orphan.MerchantID = ids.New("pm"), b.ID
	if _, err := s.CreatePaymentMethod(ctx, customers.NewPaymentMethod{Method: orphan, Sealed: sealedAs("x")}); apperr.KindOf(err) != apperr.KindNotFound {
		t.Fatalf("b saves a card for a's customer: %v", err)
	}

	for _, try := range []struct{ merchant, customer, id string }{{b.ID, c1.ID, pm1.ID}, {a.ID, c2.ID, pm1.ID}} {
		if err := s.DeletePaymentMethod(ctx, try.merchant, try.customer, try.id); apperr.KindOf(err) != apperr.KindNotFound {
			t.Fatalf("delete %+v: %v, want NotFound", try, err)
		}
	}
	if err := s.DeletePaymentMethod(ctx, a.ID, c1.ID, pm1.ID); err != nil || left(pm1.ID) != 0 {
		t.Fatalf("delete: %v, %d rows left", err, left(pm1.ID))
	}
	if err := s.DeleteCustomer(ctx, a.ID, c1.ID); err != nil || left(pm2.ID) != 0 || left(pm3.ID) != 1 {
		t.Fatalf("customer deletion: %v; its method %d rows, another customer's %d", err, left(pm2.ID), left(pm3.ID))
	}
	var sealedLeft int
	if err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM payment_methods WHERE card_sealed_own IN ('sealed-1', 'sealed-2')`).Scan(&sealedLeft); err != nil || sealedLeft != 0 {
		t.Fatalf("%d sealed cards of deleted methods left (%v)", sealedLeft, err)
	}
	if keys := countRows(t, db, `SELECT count(*) FROM payment_method_keys`); keys != 1 {
		t.Fatalf("%d data keys left, want pm3's alone", keys)
	}
}

// A payment method made from a card token uses it up in its transaction:
// of concurrent methods (and charges) with one token, one wins; the token
// keeps no card; a token of another merchant, environment, or expired,
// saves nothing.
func TestPaymentMethodFromTokenStore(t *testing.T) {
	db := testenv.NewDB(t)
	s := store.New(db.Pool)
	ctx := context.Background()
	a := newMerchant(t, s, "a@example.com")
	c := newCustomer(t, s, a.ID, nil)
	now := time.Now().UTC().Truncate(time.Millisecond)
	last4, fp, month, year := "4242", "fp", 12, 2030
	tk := charges.Token{ID: ids.New("ctok"), MerchantID: a.ID, Environment: "sandbox", KeyID: "key_1",
		Card:      charges.Card{Brand: "visa", Last4: &last4, ExpMonth: &month, ExpYear: &year, Fingerprint: &fp},
		CreatedAt: now, ExpiresAt: now.Add(charges.TokenTTL)}
	if _, err := s.CreateToken(ctx, tk, []byte("token-sealed"), nil, idempotency.Response{}); err != nil {
		t.Fatal(err)
	}
	method := func() customers.NewPaymentMethod {
		m := customers.PaymentMethod{ID: ids.New("pm"), MerchantID: a.ID, Environment: "sandbox", CustomerID: c.ID,
			Card: tk.Card, TokenID: &tk.ID, CreatedAt: now}
		return customers.NewPaymentMethod{Method: m, Sealed: sealedAs("resealed-" + m.ID), TokenID: tk.ID}
	}

	const n = 6
	var wg sync.WaitGroup
	errs := make([]error, n)
	made := make([]customers.NewPaymentMethod, n)
	for i := range n {
		made[i] = method()
		wg.Go(func() { _, errs[i] = s.CreatePaymentMethod(ctx, made[i]) })
	}
	wg.Wait()
	won := -1
	for i, err := range errs {
		switch {
		case err == nil && won >= 0:
			t.Fatalf("two methods used one token: %s and %s", made[won].Method.ID, made[i].Method.ID)
		case err == nil:
			won = i
		case apperr.CodeOf(err) != apperr.CodeParameterInvalid:
			t.Errorf("a losing method: %v, want the token's 400", err)
		}
	}
	if won < 0 {
		t.Fatal("no method used the token")
	}
	var usedAt *time.Time
	var pmID, chargeID *string
	var sealed []byte
	err := db.Pool.QueryRow(ctx, `SELECT used_at, payment_method_id, charge_id::text, card_sealed FROM card_tokens WHERE id = $1`, tk.ID).
		Scan(&usedAt, &pmID, &chargeID, &sealed)
	if err != nil || usedAt == nil || pmID == nil || *pmID != made[won].Method.ID || chargeID != nil || sealed != nil {
		t.Fatalf("the token after use: used %v, method %v, charge %v, sealed %q (%v)", usedAt, pmID, chargeID, sealed, err)
	}
	var stored []byte
	var tokenID string
	if err := db.Pool.QueryRow(ctx, `SELECT card_sealed_own, token_id FROM payment_methods`).Scan(&stored, &tokenID); err != nil ||
		!bytes.Equal(stored, made[won].Sealed.Own) || tokenID != tk.ID {
		t.Fatalf("the method stored: sealed %q, token %q (%v)", stored, tokenID, err)
	}
	if _, _, err := s.UsableToken(ctx, a.ID, "sandbox", tk.ID, now); apperr.KindOf(err) != apperr.KindNotFound {
		t.Fatalf("the used token is still usable: %v", err)
	}

	// An expired token, or one of another environment, is not used.
	old, fresh := tk, tk
	old.ID, old.CreatedAt, old.ExpiresAt = ids.New("ctok"), now.Add(-time.Hour), now.Add(-time.Minute)
	fresh.ID = ids.New("ctok")
	for _, tok := range []charges.Token{old, fresh} {
		if _, err := s.CreateToken(ctx, tok, []byte("sealed"), nil, idempotency.Response{}); err != nil {
			t.Fatal(err)
		}
	}
	for name, n := range map[string]customers.NewPaymentMethod{"expired": method(), "another environment": method()} {
		n.TokenID = old.ID
		if name == "another environment" {
			n.TokenID, n.Method.Environment = fresh.ID, "live"
		}
		if _, err := s.CreatePaymentMethod(ctx, n); apperr.CodeOf(err) != apperr.CodeParameterInvalid {
			t.Errorf("%s token: %v, want the token's 400", name, err)
		}
	}
	if got := countRows(t, db, `SELECT count(*) FROM payment_methods`); got != 1 {
		t.Fatalf("%d methods, want the one", got)
	}
}

func countRows(t *testing.T, db testenv.DB, query string, args ...any) (n int) {
	t.Helper()
	if err := db.Pool.QueryRow(context.Background(), query, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", query, err)
	}
	return n
}

// A card saved while its customer is deleted either commits first and is
// deleted with the customer, or finds the customer gone: no method outlives
// its customer, whatever the order.
func TestPaymentMethodRacesCustomerDeletion(t *testing.T) {
	db := testenv.NewDB(t)
	s := store.New(db.Pool)
	ctx := context.Background()
	a := newMerchant(t, s, "a@example.com")
	saved, refused := 0, 0
	for range 20 {
		c := newCustomer(t, s, a.ID, nil)
		m := customers.PaymentMethod{ID: ids.New("pm"), MerchantID: a.ID, Environment: "sandbox", CustomerID: c.ID,
			Card: charges.Card{Brand: "visa", Last4: str("4242"), ExpMonth: new(int), ExpYear: new(int), Fingerprint: str("fp")}, CreatedAt: time.Now()}
		var wg sync.WaitGroup
		var createErr, deleteErr error
		wg.Go(func() {
			_, createErr = s.CreatePaymentMethod(ctx, customers.NewPaymentMethod{Method: m, Sealed: sealedAs("sealed")})
		})
		wg.Go(func() { deleteErr = s.DeleteCustomer(ctx, a.ID, c.ID) })
		wg.Wait()
		switch {
		case deleteErr != nil:
			t.Fatalf("delete: %v", deleteErr)
		case createErr == nil:
			saved++
		case apperr.KindOf(createErr) == apperr.KindNotFound:
			refused++
		default:
			t.Fatalf("save: %v", createErr)
		}
		if n := countRows(t, db, `SELECT count(*) FROM payment_methods WHERE customer_id = $1`, c.ID); n != 0 {
			t.Fatalf("a method outlived its customer (saved %d, refused %d)", saved, refused)
		}
		if n := countRows(t, db, `SELECT count(*) FROM payment_method_keys WHERE payment_method_id = $1`, m.ID); n != 0 {
			t.Fatalf("a data key outlived its customer (saved %d, refused %d)", saved, refused)
		}
	}
	t.Logf("20 races: %d cards saved then deleted with their customer, %d refused as the customer was gone", saved, refused)
}
