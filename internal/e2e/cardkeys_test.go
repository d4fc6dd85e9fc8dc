package e2e

import (
	"encoding/hex"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/hibiken/asynq"

	"github.com/gatehouse-pay/gatehouse/internal/charges"
	"github.com/gatehouse-pay/gatehouse/internal/ids"
	"github.com/gatehouse-pay/gatehouse/internal/keyring"
)

// stackKeyring is the keyring of the stack's ENCRYPTION_KEY, as anyone who
// holds it and the database would have it.
func stackKeyring(t *testing.T, st *stack) *keyring.Keyring {
	t.Helper()
	for _, kv := range st.env {
		if v, ok := strings.CutPrefix(kv, "ENCRYPTION_KEY="); ok {
			master, err := hex.DecodeString(v)
			if err != nil {
				t.Fatal(err)
			}
			k, err := keyring.New(master)
			if err != nil {
				t.Fatal(err)
			}
			return k
		}
	}
	t.Fatal("the stack has no ENCRYPTION_KEY")
	return nil
}

// savedByThisRelease saves a card for the merchant's customer as this
// release does (charges.SaveCard), straight into the database, for the
// previous release's binaries to meet; it returns the method's id.
func savedByThisRelease(t *testing.T, st *stack, merchantID, customerID, number string) string {
	t.Helper()
	id := ids.New("pm")
	month, year, cvc := 12, time.Now().Year()+2, "123"
	card, sealed, err := charges.SaveCard(stackKeyring(t, st), merchantID, charges.RawCard{Number: &number, ExpMonth: &month, ExpYear: &year, CVC: &cvc}, id, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := dbCtx()
	defer cancel()
	_, err = st.db.Pool.Exec(ctx, `WITH m AS (INSERT INTO payment_methods (id, merchant_id, environment, customer_id, card_brand,
	card_last4, card_exp_month, card_exp_year, card_fingerprint, card_sealed, card_sealed_own, created_at)
VALUES ($1, $2, 'sandbox', $3, $4, $5, $6, $7, $8, $9, $10, now()) RETURNING id)
INSERT INTO payment_method_keys (payment_method_id, wrapped_key) SELECT id, $11 FROM m`,
		id, merchantID, customerID, card.Brand, card.Last4, month, year, card.Fingerprint, sealed.Stub, sealed.Own, sealed.Key)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// storedCard reads a payment method's card as stored: both columns and its
// wrapped data key (nil when none is left).
func storedCard(t *testing.T, st *stack, merchantID, pmID string) charges.SavedCard {
	t.Helper()
	ctx, cancel := dbCtx()
	defer cancel()
	c := charges.SavedCard{PaymentMethodID: pmID, MerchantID: merchantID}
	err := st.db.Pool.QueryRow(ctx, `SELECT card_sealed, card_sealed_own,
	(SELECT wrapped_key FROM payment_method_keys WHERE payment_method_id = $1) FROM payment_methods WHERE id = $1`, pmID).
		Scan(&c.Sealed, &c.Own, &c.Key)
	if err != nil {
		t.Fatalf("payment method %s: %v", pmID, err)
	}
	return c
}

// TestSavedCardsKeepNoCVC: cards saved through the API (raw, from a token,
// and one the previous release saved, CVC included, under the card key)
// keep no CVC and are each sealed under a data key of their own; they are
// charged off session (the earlier release's card converted on its charge)
// and captured; a method deleted, and a customer deleted with its card,
// take their data keys with them in the same transaction, so their sealed
// cards, read from the database, open neither with the card key nor with
// any data key still live; and the worker's housekeeping vacuums the
// deleted keys' row versions away.
func TestSavedCardsKeepNoCVC(t *testing.T) {
	parallel(t)
	st := newStack(t, stackOptions{env: chargesStackEnv, workerEnv: chargesWorkerEnv}, "saved cards keep no CVC")
	keys := stackKeyring(t, st)
	setup := newClient(t, "127.0.0.180")
	merchant, token := st.signUp(t, setup, "cardkeys", "Card Keys Shop")
	key := st.newKey(t, setup, token, "cardkeys")
	f := &authFlow{payments: &payments{st: st, c: newClient(t, "127.0.0.181"), key: key.SecretKey}}
	ctx, cancel := dbCtx()
	defer cancel()
	if _, err := st.db.Pool.Exec(ctx, `CREATE EXTENSION IF NOT EXISTS pageinspect`); err != nil {
		t.Fatalf("pageinspect (PostgreSQL's contrib): %v", err)
	}

	customer := func() string {
		e := f.do(t, http.MethodPost, "/v1/customers", `{"email":"ada@example.com"}`)
		mustExpect(t, e, http.StatusCreated, "")
		var cus struct{ ID string }
		decode(t, e, &cus)
		return cus.ID
	}
	keep, gone := customer(), customer()
	year := time.Now().Year() + 2
	save := func(cus, card string) string {
		t.Helper()
		e := f.do(t, http.MethodPost, "/v1/customers/"+cus+"/payment_methods", `{"card":`+card+`}`)
		mustExpect(t, e, http.StatusCreated, "")
		var pm struct{ ID string }
		decode(t, e, &pm)
		return pm.ID
	}
	raw := save(keep, fmt.Sprintf(`{"number":"4242424242424242","exp_month":12,"exp_year":%d,"cvc":"123"}`, year))
	fromToken := save(keep, `{"token":"`+st.cardToken(t, f.c, st.replicas[0], key.PublicKey, "5555555555554444")+`"}`)
	ofGone := save(gone, fmt.Sprintf(`{"number":"378282246310005","exp_month":12,"exp_year":%d,"cvc":"1234"}`, year))

	// A card as the previous release saves it on this schema.
	legacy := ids.New("pm")
	sealed, err := keys.Seal(keyring.PurposeCard, fmt.Appendf(nil, `{"n":"4000000000003055","c":"321","m":12,"y":%d}`, year), []byte(legacy))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.db.Pool.Exec(ctx, `INSERT INTO payment_methods (id, merchant_id, environment, customer_id, card_brand,
	card_last4, card_exp_month, card_exp_year, card_fingerprint, card_sealed, created_at)
VALUES ($1, $2, 'sandbox', $3, 'visa', '3055', 12, $4, 'fp', $5, now())`, legacy, merchant, keep, year, sealed); err != nil {
		t.Fatal(err)
	}

	// Every saved card is charged off session, and captured.
	for pm, cus := range map[string]string{raw: keep, fromToken: keep, legacy: keep, ofGone: gone} {
		c := f.charge(t, `{"amount":700,"currency":"usd","customer":"`+cus+`","card":{"payment_method":"`+pm+`"},"off_session":true}`)
		if got := f.wait(t, c.ID, 20*time.Second, "created"); got.Status != "captured" {
			t.Errorf("off-session charge of %s: %s %q, want captured", pm, got.Status, deref(got.FailureCode))
		}
	}

	// No CVC is stored, and each card is under a data key of its own.
	numbers := map[string]string{raw: "4242424242424242", fromToken: "5555555555554444", ofGone: "378282246310005", legacy: "4000000000003055"}
	stored := map[string]charges.SavedCard{}
	for pm, want := range numbers {
		c := storedCard(t, st, merchant, pm)
		number, _, _, cvc, err := charges.OpenSavedCard(keys, c)
		switch {
		case err != nil || number != want:
			t.Errorf("saved card %s: number %t (%v)", pm, number == want, err)
		case c.Legacy():
			t.Errorf("saved card %s is not under a data key of its own", pm)
		case cvc != "":
			t.Errorf("saved card %s keeps its CVC", pm)
		}
		if plain, err := keys.Open(keyring.PurposeCard, c.Sealed, []byte(pm)); err != nil || len(plain) != 0 {
			t.Errorf("card_sealed of %s: %d bytes under the card key (%v), want a seal of nothing", pm, len(plain), err)
		}
		stored[pm] = c
	}

	// Deletions take the data keys with them.
	mustExpect(t, f.do(t, http.MethodDelete, "/v1/customers/"+keep+"/payment_methods/"+raw, ""), http.StatusOK, "")
	mustExpect(t, f.do(t, http.MethodDelete, "/v1/customers/"+gone, ""), http.StatusOK, "")
	if n := queryInt(t, st.db, `SELECT count(*) FROM payment_method_keys WHERE payment_method_id = ANY($1)`, []string{raw, ofGone}); n != 0 {
		t.Errorf("%d data keys of deleted methods left", n)
	}
	var live []keyring.DataKey
	for _, pm := range []string{fromToken, legacy} {
		c := storedCard(t, st, merchant, pm)
		dk, err := keys.OpenDataKey(keyring.PurposeCardDataKey, c.Key, charges.SavedCardAAD(merchant, pm))
		if err != nil {
			t.Fatal(err)
		}
		live = append(live, dk)
	}
	for _, pm := range []string{raw, ofGone} {
		c := stored[pm]
		if _, err := keys.Open(keyring.PurposeCard, c.Own, []byte(pm)); err == nil {
			t.Errorf("the deleted card of %s opens with the card key", pm)
		}
		for _, dk := range live {
			if _, err := dk.Open(c.Own, charges.SavedCardAAD(merchant, pm)); err == nil {
				t.Errorf("the deleted card of %s opens with a live data key", pm)
			}
		}
	}

	// The housekeeping vacuums the deleted keys' row versions away.
	versions := func() int64 {
		return queryInt(t, st.db, `SELECT count(*) FROM heap_page_items(get_raw_page('payment_method_keys', 0)) WHERE lp_flags = 1`)
	}
	// (The scheduled run, every minute, may come first.)
	t.Logf("the key table holds %d row versions right after the deletions, 2 of them live", versions())
	// A vacuum removes a row version only once no transaction can still see
	// it; the task is queued again until it has.
	client := asynq.NewClientFromRedisClient(st.redis.client)
	housekeeping := func() {
		t.Helper()
		if _, err := client.Enqueue(asynq.NewTask("payment_methods:housekeeping", nil, asynq.Queue("maintenance"), asynq.MaxRetry(0))); err != nil {
			t.Fatalf("enqueue the housekeeping: %v", err)
		}
	}
	housekeeping()
	waitTasksDone(t, st, []string{"payment_methods:housekeeping"}, 30*time.Second)
	for start, next := time.Now(), time.Now().Add(5*time.Second); versions() != 2; time.Sleep(200 * time.Millisecond) {
		if time.Since(start) > 60*time.Second {
			t.Fatalf("the key table holds %d row versions 60 s after the housekeeping was first queued, want the 2 live ones; "+
				"transactions holding back the vacuum horizon: %s; the worker's log:\n%s",
				versions(), jsonRows(t, st.db, `SELECT pid, datname, state, backend_xmin::text, now() - xact_start AS age, left(query, 80) AS query
FROM pg_stat_activity WHERE backend_xmin IS NOT NULL AND pid <> pg_backend_pid()`), st.workers[0].out.Tail(40))
		}
		if time.Now().After(next) {
			housekeeping()
			next = time.Now().Add(5 * time.Second)
		}
	}
}
