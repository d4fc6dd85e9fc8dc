package customers_test

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"testing"

	"github.com/gatehouse-pay/gatehouse/internal/charges"
	"github.com/gatehouse-pay/gatehouse/internal/customers"
	"github.com/gatehouse-pay/gatehouse/internal/idempotency"
	"github.com/gatehouse-pay/gatehouse/internal/ids"
	"github.com/gatehouse-pay/gatehouse/internal/keyring"
	"github.com/gatehouse-pay/gatehouse/internal/outbox"
)

type noQueue struct{}

func (noQueue) Enqueue(context.Context, outbox.Task) error { return nil }

// legacyCard saves a card as a release before data keys did: its number,
// CVC and expiry sealed under the card key and the method's id, in
// card_sealed alone, with no data key.
func (f *fixture) legacyCard(t *testing.T, merchantID, customerID, number string) string {
	t.Helper()
	id := ids.New(customers.PaymentMethodPrefix)
	plain := fmt.Sprintf(`{"n":%q,"c":"123","m":12,"y":2030}`, number)
	sealed, err := f.keys.Seal(keyring.PurposeCard, []byte(plain), []byte(id))
	if err != nil {
		t.Fatal(err)
	}
	_, err = f.db.Pool.Exec(context.Background(), `INSERT INTO payment_methods (id, merchant_id, environment, customer_id, card_brand,
	card_last4, card_exp_month, card_exp_year, card_fingerprint, card_sealed, created_at)
VALUES ($1, $2, 'sandbox', $3, 'visa', $4, 12, 2030, 'fp', $5, $6)`, id, merchantID, customerID, number[len(number)-4:], sealed, testNow)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// chargeSaved creates a charge of a saved card and returns the copy of the
// card the charge keeps for the provider, opened.
func (f *fixture) chargeSaved(t *testing.T, merchantID, customerID, pmID string) map[string]any {
	t.Helper()
	ctx := context.Background()
	amount, currency := int64(500), "usd"
	r, err := f.charge.Create(ctx, merchantID, "sandbox", charges.CreateParams{Amount: &amount, Currency: &currency,
		Customer: &customerID, Card: &charges.CardInput{PaymentMethod: &pmID}}, nil,
		func(v any) (idempotency.Response, error) { return render(v) })
	if err != nil {
		t.Fatalf("charge of %s: %v", pmID, err)
	}
	var ch struct{ ID string }
	if err := json.Unmarshal(r.Response.Body, &ch); err != nil {
		t.Fatal(err)
	}
	var sealed []byte
	if err := f.db.Pool.QueryRow(ctx, `SELECT card_sealed FROM charges WHERE id = $1`, ch.ID).Scan(&sealed); err != nil {
		t.Fatal(err)
	}
	plain, err := f.keys.Open(keyring.PurposeCard, sealed, []byte(ch.ID))
	if err != nil {
		t.Fatalf("the card of charge %s: %v", ch.ID, err)
	}
	var card map[string]any
	if err := json.Unmarshal(plain, &card); err != nil {
		t.Fatal(err)
	}
	return card
}

// TestSavedCardsWithoutCVC: a card saved raw or from a token keeps no CVC
// and is sealed under its own data key (savedOf checks both); a charge of a
// saved card takes a copy without CVC, so none reaches the provider; a
// card an earlier release saved (CVC included, under the card key) stays
// chargeable, without its CVC, and is converted on its first charge or by
// the housekeeping.
func TestSavedCardsWithoutCVC(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	cus := f.customer(t, f.a)
	raw, _, err := f.savePM(f.a, cus, cardParams("4242424242424242"), nil)
	if err != nil {
		t.Fatal(err)
	}
	fromToken, _, err := f.savePM(f.a, cus, tokenParams(f.token(t, f.a, "5555555555554444").ID), nil)
	if err != nil {
		t.Fatal(err)
	}
	f.savedOf(t, f.a, raw.ID, "4242424242424242")
	f.savedOf(t, f.a, fromToken.ID, "5555555555554444")
	for _, pm := range []string{raw.ID, fromToken.ID} {
		if card := f.chargeSaved(t, f.a, cus, pm); card["n"] == nil || card["c"] != nil {
			t.Errorf("the charge of %s keeps number %t and CVC %v; want the number alone", pm, card["n"] != nil, card["c"])
		}
	}

	// Cards of the previous release: one charged, one left to the housekeeping.
	charged, idle := f.legacyCard(t, f.a, cus, "4000000000003055"), f.legacyCard(t, f.a, cus, "378282246310005")
	if card := f.chargeSaved(t, f.a, cus, charged); card["n"] != "4000000000003055" || card["c"] != nil {
		t.Errorf("the charge of a legacy card keeps number %v and CVC %v; want the number alone", card["n"], card["c"])
	}
	f.savedOf(t, f.a, charged, "4000000000003055")
	if c, err := f.st.SavedCard(ctx, f.a, idle); err != nil || !c.Legacy() {
		t.Fatalf("the idle legacy card converted before the housekeeping: %v", err)
	}
	broken := f.legacyCard(t, f.a, cus, "4242424242424242")
	if _, err := f.db.Pool.Exec(ctx, `UPDATE payment_methods SET card_sealed = '\x00' WHERE id = $1`, broken); err != nil {
		t.Fatal(err)
	}
	r, err := customers.NewCardHousekeeping(f.st, f.keys).Run(ctx, 1)
	if err != nil || r.Converted != 1 || r.Unreadable != 1 || !r.KeysVacuumed || !r.MethodsVacuumed {
		t.Fatalf("housekeeping: %+v %v; want one converted, one unreadable, both tables vacuumed", r, err)
	}
	f.savedOf(t, f.a, idle, "378282246310005")
	if card := f.chargeSaved(t, f.a, cus, idle); card["n"] != "378282246310005" || card["c"] != nil {
		t.Errorf("the charge of a converted card keeps number %v and CVC %v", card["n"], card["c"])
	}
	if r, err := customers.NewCardHousekeeping(f.st, f.keys).Run(ctx, 10); err != nil || r.Converted != 0 || r.Unreadable != 1 || r.MethodsVacuumed {
		t.Fatalf("housekeeping again: %+v %v; want nothing left to convert but the unreadable card", r, err)
	}
}

// TestDeletedSavedCardsCannotBeOpened reads the raw pages of
// payment_methods and payment_method_keys (pageinspect) after payment
// methods, and a customer with its methods, were deleted: every byte
// string stored there, deleted row versions and free space included, is
// tried as a sealed card of a deleted method, with the card key and with
// every data key still live; none may open. It also shows what remains: the
// deleted data keys' row versions until the housekeeping's vacuum, after
// which no row of the key table holds one.
func TestDeletedSavedCardsCannotBeOpened(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	if _, err := f.db.Pool.Exec(ctx, `CREATE EXTENSION IF NOT EXISTS pageinspect`); err != nil {
		t.Fatalf("pageinspect (PostgreSQL's contrib): %v", err)
	}
	keep, gone := f.customer(t, f.a), f.customer(t, f.a)
	save := func(customer string, card *customers.CardParams) string {
		t.Helper()
		pm, _, err := f.savePM(f.a, customer, card, nil)
		if err != nil {
			t.Fatal(err)
		}
		f.chargeSaved(t, f.a, customer, pm.ID)
		return pm.ID
	}
	kept := []string{save(keep, cardParams("4242424242424242")), save(keep, tokenParams(f.token(t, f.a, "5555555555554444").ID))}
	deleted := []string{
		save(keep, cardParams("4000000000000002")),
		save(keep, tokenParams(f.token(t, f.a, "4000002500003155").ID)),
		save(gone, cardParams("378282246310005")),
		save(gone, cardParams("4000000000009995")),
	}
	if err := f.svc.DeletePaymentMethod(ctx, f.a, keep, deleted[0]); err != nil {
		t.Fatal(err)
	}
	if err := f.svc.DeletePaymentMethod(ctx, f.a, keep, deleted[1]); err != nil {
		t.Fatal(err)
	}
	if err := f.svc.Delete(ctx, f.a, gone); err != nil {
		t.Fatal(err)
	}
	if n := countOf(t, f, `SELECT count(*) FROM payment_method_keys`); n != len(kept) {
		t.Fatalf("%d data keys left, want the %d of the kept methods", n, len(kept))
	}

	// The live data keys, as anyone with ENCRYPTION_KEY and the database has them.
	var live []keyring.DataKey
	for _, pm := range kept {
		c, err := f.st.SavedCard(ctx, f.a, pm)
		if err != nil {
			t.Fatal(err)
		}
		dk, err := f.keys.OpenDataKey(keyring.PurposeCardDataKey, c.Key, charges.SavedCardAAD(f.a, pm))
		if err != nil {
			t.Fatal(err)
		}
		live = append(live, dk)
	}
	check := func(stage string) (wrappedLeft int) {
		t.Helper()
		for _, table := range []string{"payment_methods", "payment_method_keys"} {
			for _, v := range storedValues(t, f, table) {
				for _, pm := range deleted {
					aad := charges.SavedCardAAD(f.a, pm)
					if plain, err := f.keys.Open(keyring.PurposeCard, v, []byte(pm)); err == nil && len(plain) > 0 {
						t.Errorf("%s: a card of deleted method %s in the pages of %s opens with the card key", stage, pm, table)
					}
					for _, dk := range live {
						if _, err := dk.Open(v, aad); err == nil {
							t.Errorf("%s: a card of deleted method %s in the pages of %s opens with a live data key", stage, pm, table)
						}
					}
					if _, err := f.keys.OpenDataKey(keyring.PurposeCardDataKey, v, aad); err == nil {
						wrappedLeft++
					}
				}
			}
		}
		return wrappedLeft
	}
	before := check("right after the deletions")
	rows := func() int {
		return countOf(t, f, `SELECT count(*) FROM heap_page_items(get_raw_page('payment_method_keys', 0)) WHERE lp_flags = 1`)
	}
	if n := rows(); n <= len(kept) {
		t.Errorf("right after the deletions the key table's page has %d row versions; want the deleted keys' dead ones too (else this test reads nothing)", n)
	}
	r, err := customers.NewCardHousekeeping(f.st, f.keys).Run(ctx, 10)
	if err != nil || !r.KeysVacuumed {
		t.Fatalf("housekeeping: %+v %v", r, err)
	}
	after := check("after the housekeeping's vacuum")
	if n := rows(); n != len(kept) {
		t.Errorf("after the housekeeping's vacuum the key table's page has %d row versions, want the %d live ones", n, len(kept))
	}
	// What docs/customers.md says remains: the bytes of a vacuumed row stay
	// in the page's free space until a new row overwrites them.
	t.Logf("wrapped data keys of deleted methods found in the pages: %d right after the deletions, %d in free space after the vacuum", before, after)
}

func countOf(t *testing.T, f *fixture, query string) (n int) {
	t.Helper()
	if err := f.db.Pool.QueryRow(context.Background(), query).Scan(&n); err != nil {
		t.Fatalf("%s: %v", query, err)
	}
	return n
}

// storedValues returns every byte string that may be a bytea value stored
// in the table's pages, read raw (row versions live and dead, and free
// space): at each offset, the bytes a 1-byte or 4-byte varlena header there
// would announce, from 28 bytes (the least a sealed value takes) up.
func storedValues(t *testing.T, f *fixture, table string) [][]byte {
	t.Helper()
	rows, err := f.db.Pool.Query(context.Background(), `SELECT get_raw_page($1::text, 'main', b::int)
FROM generate_series(0, pg_relation_size($1::regclass) / current_setting('block_size')::int - 1) b`, table)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out [][]byte
	for rows.Next() {
		var page []byte
		if err := rows.Scan(&page); err != nil {
			t.Fatal(err)
		}
		for i, b := range page {
			if b&1 == 1 && b != 1 { // a short varlena header: (size << 1) | 1
				if n := int(b>>1) - 1; n >= 28 && i+1+n <= len(page) {
					out = append(out, page[i+1:i+1+n])
				}
			}
			if b&3 == 0 && i+4 <= len(page) { // a 4-byte header: size << 2
				if n := int(binary.LittleEndian.Uint32(page[i:])>>2) - 4; n >= 28 && n <= 1024 && i+4+n <= len(page) {
					out = append(out, page[i+4:i+4+n])
				}
			}
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if len(out) == 0 {
		t.Fatalf("nothing read from the pages of %s", table)
	}
	return out
}
