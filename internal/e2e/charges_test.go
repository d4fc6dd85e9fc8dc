package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/gatehouse-pay/gatehouse/internal/testenv"
	"github.com/gatehouse-pay/gatehouse/internal/testenv/harness"
)

// Settings of the charges stack. The PROVIDER_* settings go to the API
// replicas too: the replica that enqueues a provider task stamps it with
// MaxRetry = PROVIDER_MAX_ATTEMPTS (one in reserve) and Timeout = PROVIDER_TIMEOUT+30s
// (internal/jobs/tasks.go, Queue.NewTask), so a worker-only setting would not bound
// the attempts of tasks the API enqueued.
// providerTimeout is twenty times the sandbox's latency: only the silent
// card (4000000000000606) reaches it, never a healthy call on a loaded
// machine, whose timeouts would open the breaker and fail charges that the
// fault test expects captured.
const (
	providerTimeout     = time.Second
	providerMaxAttempts = 4
	sandboxLatency      = 50 * time.Millisecond
)

var chargesStackEnv = []string{
	"PROVIDER_TIMEOUT=" + providerTimeout.String(),
	"PROVIDER_RETRY_BASE=100ms",
	"PROVIDER_RETRY_MAX=400ms",
	fmt.Sprintf("PROVIDER_MAX_ATTEMPTS=%d", providerMaxAttempts),
	// 200 charges of the fault test plus the others, and polling, in one minute.
	"RATE_LIMIT_CHARGES=2000/1m",
	"RATE_LIMIT_CHARGES_MERCHANT=2000/1m",
	"RATE_LIMIT_DEFAULT=20000/1m",
}

var chargesWorkerEnv = []string{
	"OUTBOX_SWEEP_AFTER=2s",
	"RECONCILE_AFTER=5s",
	"SANDBOX_LATENCY=" + sandboxLatency.String(),
}

// sandboxCards are every test card of api/openapi.yaml, for the leak checks.
var sandboxCards = []string{
	"4242424242424242", "5555555555554444", "378282246310005", "4000000000000002", "4000000000009995",
	"4000000000000069", "4000000000000119", "4000000000000507", "4000000000000606",
	"4000002500003155", "4000002760003184", "4000008260003178", "4000000000003055",
}

// chargeJSON is what the tests read of a charge.
type chargeJSON struct {
	ID             string `json:"id"`
	Object         string `json:"object"`
	Amount         int64  `json:"amount"`
	AmountCaptured int64  `json:"amount_captured"`
	AmountRefunded int64  `json:"amount_refunded"`
	Currency       string `json:"currency"`
	Status         string `json:"status"`
	Capture        bool   `json:"capture"`
	Provider       string `json:"provider"`
	Card           struct {
		Brand       string  `json:"brand"`
		Last4       *string `json:"last4"`
		Fingerprint *string `json:"fingerprint"`
	} `json:"card"`
	ProviderReference *string `json:"provider_reference"`
	FailureCode       *string `json:"failure_code"`
	FailureMessage    *string `json:"failure_message"`
}

type refundJSON struct {
	ID          string  `json:"id"`
	Object      string  `json:"object"`
	Charge      string  `json:"charge"`
	Amount      int64   `json:"amount"`
	Currency    string  `json:"currency"`
	Status      string  `json:"status"`
	FailureCode *string `json:"failure_code"`
}

// eventJSON is an event as GET /v1/events returns it; raw is its exact body.
type eventJSON struct {
	ID        string `json:"id"`
	Object    string `json:"object"`
	EventType string `json:"event_type"`
	CreatedAt string `json:"created_at"`
	Data      struct {
		Object  string          `json:"object"`
		Charge  json.RawMessage `json:"charge"`
		Refund  json.RawMessage `json:"refund"`
		Payout  json.RawMessage `json:"payout"`
		Dispute json.RawMessage `json:"dispute"`
	} `json:"data"`
	raw json.RawMessage
}

func (e eventJSON) charge(t *testing.T) chargeJSON {
	t.Helper()
	var c chargeJSON
	if err := json.Unmarshal(e.Data.Charge, &c); err != nil {
		t.Fatalf("event %s: data.charge: %v: %s", e.ID, err, e.raw)
	}
	return c
}

func (e eventJSON) refund(t *testing.T) refundJSON {
	t.Helper()
	var r refundJSON
	if len(e.Data.Refund) == 0 || string(e.Data.Refund) == "null" {
		t.Errorf("event %s (%s): no data.refund: %s", e.ID, e.EventType, e.raw)
		return r
	}
	if err := json.Unmarshal(e.Data.Refund, &r); err != nil {
		t.Fatalf("event %s: data.refund: %v: %s", e.ID, err, e.raw)
	}
	return r
}

// sameJSON reports whether a and b are the same JSON value.
func sameJSON(a, b []byte) bool {
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return false
	}
	return reflect.DeepEqual(x, y)
}

func cardBody(number string, capture bool, amount int64, tag string) string {
	cvc := "123"
	if strings.HasPrefix(number, "37") {
		cvc = "1234"
	}
	return fmt.Sprintf(`{"amount":%d,"currency":"usd","payment_method":"card",`+
		`"card":{"number":%q,"exp_month":12,"exp_year":%d,"cvc":%q},"capture":%t,"provider":"sandbox",`+
		`"description":%q,"metadata":{"tag":%q}}`, amount, number, time.Now().Year()+3, cvc, capture, "e2e "+tag, tag)
}

// payments talks to the stack as one merchant's secret key from one client address.
type payments struct {
	st  *stack
	c   *http.Client
	key string
	n   atomic.Int64 // spreads requests over the replicas
}

func (p *payments) base() string { return p.st.replicas[int(p.n.Add(1))%2] }

func (p *payments) do(t *testing.T, method, path, body string, headers ...string) exchange {
	t.Helper()
	e, err := sendWith(p.c, method, p.base()+path, p.key, body, headers...)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	p.st.check(t, e)
	return e
}

// getCharge returns the charge and its exact body.
func (p *payments) getCharge(t *testing.T, id string) (chargeJSON, []byte) {
	t.Helper()
	e := p.do(t, http.MethodGet, "/v1/charges/"+id, "")
	mustExpect(t, e, http.StatusOK, "")
	var c chargeJSON
	decode(t, e, &c)
	return c, e.body
}

// waitCharges polls every charge until done says its status is where it
// should stop, and returns the last answers. It fails the test for charges
// still elsewhere after within.
func (p *payments) waitCharges(t *testing.T, ids []string, done func(id, status string) bool, within time.Duration) (map[string]chargeJSON, map[string][]byte) {
	t.Helper()
	within = patience(within)
	deadline := time.Now().Add(within)
	got := map[string]chargeJSON{}
	raw := map[string][]byte{}
	pending := slices.Clone(ids)
	for len(pending) > 0 {
		var still []string
		for _, id := range pending {
			c, b := p.getCharge(t, id)
			got[id], raw[id] = c, b
			if !done(id, c.Status) {
				still = append(still, id)
			}
		}
		pending = still
		if len(pending) == 0 {
			break
		}
		if time.Now().After(deadline) {
			for _, id := range pending {
				t.Errorf("charge %s still %s after %s", id, got[id].Status, within)
			}
			t.FailNow()
		}
		time.Sleep(50 * time.Millisecond)
	}
	return got, raw
}

func (p *payments) waitRefund(t *testing.T, id string, within time.Duration) refundJSON {
	t.Helper()
	within = patience(within)
	deadline := time.Now().Add(within)
	for {
		e := p.do(t, http.MethodGet, "/v1/refunds/"+id, "")
		mustExpect(t, e, http.StatusOK, "")
		var r refundJSON
		decode(t, e, &r)
		if r.Status != "pending" {
			return r
		}
		if time.Now().After(deadline) {
			t.Fatalf("refund %s still pending after %s", id, within)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// events returns every event of the merchant, newest first, through the API.
func (p *payments) events(t *testing.T) []eventJSON {
	t.Helper()
	var out []eventJSON
	after := ""
	for page := 0; page < 1000; page++ {
		q := url.Values{"limit": {"100"}}
		if after != "" {
			q.Set("starting_after", after)
		}
		e := p.do(t, http.MethodGet, "/v1/events?"+q.Encode(), "")
		mustExpect(t, e, http.StatusOK, "")
		var list struct {
			Object  string            `json:"object"`
			Data    []json.RawMessage `json:"data"`
			HasMore bool              `json:"has_more"`
		}
		decode(t, e, &list)
		for _, r := range list.Data {
			var ev eventJSON
			if err := json.Unmarshal(r, &ev); err != nil {
				t.Fatalf("event: %v: %s", err, r)
			}
			ev.raw = r
			out = append(out, ev)
		}
		if !list.HasMore || len(list.Data) == 0 {
			return out
		}
		after = out[len(out)-1].ID
	}
	t.Fatalf("more than 1000 pages of events")
	return nil
}

// eventsOfCharge keeps the events whose data.charge is the charge, oldest first.
func eventsOfCharge(t *testing.T, all []eventJSON, id string) []eventJSON {
	t.Helper()
	var out []eventJSON
	for _, e := range all {
		if len(e.Data.Charge) == 0 { // a payout's or a dispute's
			continue
		}
		if e.charge(t).ID == id {
			out = append(out, e)
		}
	}
	slices.Reverse(out)
	return out
}

func countTypes(evs []eventJSON) map[string]int {
	m := map[string]int{}
	for _, e := range evs {
		m[e.EventType]++
	}
	return m
}

// ledgerRow is one row of sandbox_ledger.
type ledgerRow struct {
	Key       string
	Operation string
	Amount    int64
	Reference *string
	Calls     int64
}

func dbCtx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), 30*time.Second)
}

// ledgerOf returns the sandbox's rows for the provider idempotency keys of
// one charge or refund (gh_<id>_<operation>), by operation.
func ledgerOf(t *testing.T, db testenv.DB, id string) map[string]ledgerRow {
	t.Helper()
	out := map[string]ledgerRow{}
	for _, r := range ledgerKeys(t, db, id) {
		if _, dup := out[r.Operation]; dup {
			t.Errorf("sandbox_ledger: two %s rows for %s", r.Operation, id)
		}
		out[r.Operation] = r
	}
	return out
}

func queryInt(t *testing.T, db testenv.DB, sql string, args ...any) int64 {
	t.Helper()
	ctx, cancel := dbCtx()
	defer cancel()
	var n int64
	if err := db.Pool.QueryRow(ctx, sql, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return n
}

// TestChargesEndToEnd carries charges and refunds through two API replicas
// and the real worker: every sandbox card, capture and void, refunds,
// idempotency across replicas, and a worker killed with SIGKILL three times
// while 200 charges are processed (docs/reliability.md I2: no double charge, every
// charge reaches a final state).
func TestChargesEndToEnd(t *testing.T) {
	parallel(t)
	began := time.Now()
	st := newStack(t, stackOptions{env: chargesStackEnv, workerEnv: chargesWorkerEnv}, "charges")

	setup := newClient(t, "127.0.0.20")
	_, token := st.signUp(t, setup, "charges", "Charges Merchant")
	key, faultKey := st.newKey(t, setup, token, "charges").SecretKey, st.newKey(t, setup, token, "fault").SecretKey

	t.Run("a_lifecycle_of_every_sandbox_card", func(t *testing.T) {
		p := &payments{st: st, c: newClient(t, "127.0.0.21"), key: key}
		type tc struct {
			name    string
			number  string
			capture bool
			then    string // "capture" or "void" once authorized
			status  string // final status
			code    string // failure_code
			calls   int64  // provider calls with the authorize key
		}
		cases := []tc{
			{"visa", "4242424242424242", true, "", "captured", "", 1},
			{"mastercard", "5555555555554444", true, "", "captured", "", 1},
			{"amex", "378282246310005", true, "", "captured", "", 1},
			{"declined", "4000000000000002", true, "", "failed", "card_declined", 1},
			{"insufficient_funds", "4000000000009995", true, "", "failed", "insufficient_funds", 1},
			{"expired_card", "4000000000000069", true, "", "failed", "expired_card", 1},
			{"processing_error", "4000000000000119", true, "", "failed", "processing_error", 1},
			{"flaky", "4000000000000507", true, "", "captured", "", 3},
			{"silent", "4000000000000606", true, "", "failed", "provider_unavailable", providerMaxAttempts},
			{"capture_later", "4242424242424242", false, "capture", "captured", "", 1},
			{"void_later", "5555555555554444", false, "void", "voided", "", 1},
		}
		const amount, partial = 2000, 1500
		ids := make([]string, len(cases))
		createdBody := map[string][]byte{}
		byID := map[string]tc{}
		for i, c := range cases {
			e := p.do(t, http.MethodPost, "/v1/charges", cardBody(c.number, c.capture, amount, c.name), "Idempotency-Key", "lifecycle-"+c.name)
			mustExpect(t, e, http.StatusCreated, "")
			var ch chargeJSON
			decode(t, e, &ch)
			if ch.Status != "created" || ch.Object != "charge" || ch.Amount != amount || ch.Currency != "USD" || ch.Capture != c.capture ||
				ch.Provider != "sandbox" || ch.ProviderReference != nil || ch.Card.Last4 == nil || *ch.Card.Last4 != c.number[len(c.number)-4:] {
				t.Errorf("%s: create: got %s", c.name, e.body)
			}
			if bytes.Contains(e.body, []byte(c.number)) {
				t.Errorf("%s: the create response carries the card number: %s", c.name, e.body)
			}
			ids[i] = ch.ID
			createdBody[ch.ID] = e.body
			byID[ch.ID] = c
		}

		// Authorized charges stop there until asked to move on.
		got, _ := p.waitCharges(t, ids, func(_, status string) bool { return status != "created" }, 20*time.Second)
		for _, id := range ids {
			c := byID[id]
			if c.capture {
				continue
			}
			if got[id].Status != "authorized" {
				t.Fatalf("%s: after the provider: got %s, want authorized", c.name, got[id].Status)
			}
			if got[id].ProviderReference == nil {
				t.Errorf("%s: authorized without a provider_reference", c.name)
			}
			var e exchange
			if c.then == "capture" {
				e = p.do(t, http.MethodPost, "/v1/charges/"+id+"/capture", fmt.Sprintf(`{"amount":%d}`, partial))
			} else {
				e = p.do(t, http.MethodPost, "/v1/charges/"+id+"/void", "")
			}
			mustExpect(t, e, http.StatusOK, "")
			var ch chargeJSON
			decode(t, e, &ch)
			if ch.ID != id || ch.Status != "authorized" {
				t.Errorf("%s: %s: got %s, want the charge still authorized", c.name, c.then, e.body)
			}
			// A second request of the other action is refused while one is pending.
			other := "/void"
			if c.then == "void" {
				other = "/capture"
			}
			expect(t, p.do(t, http.MethodPost, "/v1/charges/"+id+other, "{}"), http.StatusConflict, "invalid_state")
		}
		final, finalBody := p.waitCharges(t, ids, func(_, status string) bool {
			return status != "created" && status != "authorized"
		}, 20*time.Second)

		all := p.events(t)
		for _, id := range ids {
			c, ch := byID[id], final[id]
			if ch.Status != c.status {
				t.Errorf("%s: final status %s, want %s; body %s", c.name, ch.Status, c.status, finalBody[id])
				continue
			}
			led := ledgerOf(t, st.db, id)
			auth, ok := led["authorize"]
			if !ok {
				t.Errorf("%s: no sandbox_ledger row for gh_%s_authorize", c.name, id)
			} else if auth.Calls != c.calls {
				t.Errorf("%s: provider calls with gh_%s_authorize: got %d, want %d", c.name, id, auth.Calls, c.calls)
			}
			switch ch.Status {
			case "captured", "voided":
				if ch.ProviderReference == nil || !strings.HasPrefix(*ch.ProviderReference, "sbx_ch_") {
					t.Errorf("%s: provider_reference %v, want sbx_ch_...", c.name, ch.ProviderReference)
				} else if auth.Reference == nil || *auth.Reference != *ch.ProviderReference {
					t.Errorf("%s: ledger reference %v, charge provider_reference %s", c.name, auth.Reference, *ch.ProviderReference)
				}
				if ch.FailureCode != nil {
					t.Errorf("%s: failure_code %s on a %s charge", c.name, *ch.FailureCode, ch.Status)
				}
			case "failed":
				if ch.FailureCode == nil || *ch.FailureCode != c.code || ch.FailureMessage == nil || *ch.FailureMessage == "" {
					t.Errorf("%s: got failure_code %v, message %v; want %s and a message", c.name, ch.FailureCode, ch.FailureMessage, c.code)
				}
				if ch.ProviderReference != nil {
					t.Errorf("%s: failed charge has provider_reference %s", c.name, *ch.ProviderReference)
				}
				if auth.Reference != nil {
					t.Errorf("%s: failed charge booked at the provider: %s", c.name, *auth.Reference)
				}
			}
			wantCaptured := int64(0)
			switch {
			case ch.Status == "captured" && c.then == "capture":
				wantCaptured = partial
				capRow, ok := led["capture"]
				if !ok || capRow.Reference == nil || capRow.Amount != partial || capRow.Calls != 1 {
					t.Errorf("%s: ledger capture row %+v, want amount %d, a reference, 1 call", c.name, capRow, partial)
				}
			case ch.Status == "captured":
				wantCaptured = amount
			case ch.Status == "voided":
				if v, ok := led["void"]; !ok || v.Reference == nil || v.Calls != 1 {
					t.Errorf("%s: ledger void row %+v, want a reference and 1 call", c.name, v)
				}
			}
			if got := queryInt(t, st.db, `SELECT amount_captured FROM charges WHERE id = $1`, id); got != wantCaptured {
				t.Errorf("%s: amount_captured %d, want %d", c.name, got, wantCaptured)
			}
			if n := queryInt(t, st.db, `SELECT count(*) FROM charges WHERE id = $1 AND card_sealed IS NOT NULL`, id); n != 0 {
				t.Errorf("%s: card_sealed still set on a %s charge", c.name, ch.Status)
			}

			// Events: one charge.created showing the charge as created, one
			// event for the final move showing it as it is now, none for authorized.
			evs := eventsOfCharge(t, all, id)
			want := map[string]int{"charge.created": 1, "charge." + ch.Status: 1}
			if got := countTypes(evs); !reflect.DeepEqual(got, want) {
				t.Errorf("%s: events %v, want %v", c.name, got, want)
				continue
			}
			created, last := evs[0], evs[1]
			if created.EventType != "charge.created" || last.EventType != "charge."+ch.Status {
				t.Errorf("%s: events in order %s, %s", c.name, created.EventType, last.EventType)
				continue
			}
			for _, e := range evs {
				if e.Object != "event" || e.Data.Object != "charge" || (len(e.Data.Refund) > 0 && string(e.Data.Refund) != "null") {
					t.Errorf("%s: event %s: object %q, data.object %q, data.refund %s", c.name, e.EventType, e.Object, e.Data.Object, e.Data.Refund)
				}
			}
			if !sameJSON(created.Data.Charge, createdBody[id]) {
				t.Errorf("%s: charge.created data.charge\n%s\nwant the charge as created\n%s", c.name, created.Data.Charge, createdBody[id])
			}
			if !sameJSON(last.Data.Charge, finalBody[id]) {
				t.Errorf("%s: %s data.charge\n%s\nwant the charge as it is now\n%s", c.name, last.EventType, last.Data.Charge, finalBody[id])
			}
		}
		checkNoCardData(t, st)
	})

	// api/openapi.yaml: a card tokenized with the
	// public key and charged by the secret key goes through the worker like
	// a card sent by the server, and its card is purged from the token at
	// once and from the charge once the provider answered.
	t.Run("a2_card_token_charged_through_the_worker", func(t *testing.T) {
		c := newClient(t, "127.0.0.24")
		var keys struct {
			Data []struct {
				PublicKey      string `json:"public_key"`
				SecretKeyLast4 string `json:"secret_key_last4"`
			} `json:"data"`
		}
		e, err := sendWith(c, http.MethodGet, st.replicas[0]+"/v1/me/api_keys", key, "")
		if err != nil {
			t.Fatal(err)
		}
		decode(t, e, &keys)
		var pk string
		for _, k := range keys.Data {
			if strings.HasSuffix(key, k.SecretKeyLast4) {
				pk = k.PublicKey
			}
		}
		tokenID := st.cardToken(t, c, st.replicas[1], pk, "5555555555554444")
		p := &payments{st: st, c: c, key: key}
		e = p.do(t, http.MethodPost, "/v1/charges",
			`{"amount":2500,"currency":"usd","payment_method":"card","card":{"token":"`+tokenID+`"}}`)
		mustExpect(t, e, http.StatusCreated, "")
		var ch chargeJSON
		decode(t, e, &ch)
		got, _ := p.waitCharges(t, []string{ch.ID}, func(_, status string) bool { return status != "created" }, 20*time.Second)
		if final := got[ch.ID]; final.Status != "captured" || final.AmountCaptured != 2500 || final.Card.Brand != "mastercard" ||
			final.Card.Last4 == nil || *final.Card.Last4 != "4444" {
			t.Fatalf("the token's charge: %+v", final)
		}
		ctx, cancel := dbCtx()
		defer cancel()
		var tokenCard, chargeCard []byte
		if err := st.db.Pool.QueryRow(ctx, `SELECT t.card_sealed, c.card_sealed FROM card_tokens t JOIN charges c ON c.id = t.charge_id
			WHERE t.id = $1`, tokenID).Scan(&tokenCard, &chargeCard); err != nil {
			t.Fatal(err)
		}
		if tokenCard != nil || chargeCard != nil {
			t.Errorf("sealed card left: token %d bytes, charge %d bytes", len(tokenCard), len(chargeCard))
		}
		checkNoCardData(t, st)
	})

	t.Run("b_refunds", func(t *testing.T) {
		p := &payments{st: st, c: newClient(t, "127.0.0.22"), key: key}
		create := func(number string, capture bool) string {
			e := p.do(t, http.MethodPost, "/v1/charges", cardBody(number, capture, 2000, "refunds"))
			mustExpect(t, e, http.StatusCreated, "")
			var ch chargeJSON
			decode(t, e, &ch)
			return ch.ID
		}
		captured, uncaptured, failed := create("4242424242424242", true), create("4242424242424242", false), create("4000000000000002", true)
		p.waitCharges(t, []string{captured, uncaptured, failed}, func(_, s string) bool { return s != "created" }, 15*time.Second)

		refund := func(body string) exchange {
			return p.do(t, http.MethodPost, "/v1/refunds", body, "Idempotency-Key", "refund-"+harness.RandomHex(8))
		}
		expect(t, refund(fmt.Sprintf(`{"charge":%q,"amount":2001}`, captured)), http.StatusBadRequest, "amount_too_large")
		expect(t, refund(fmt.Sprintf(`{"charge":%q}`, uncaptured)), http.StatusConflict, "invalid_state")
		expect(t, refund(fmt.Sprintf(`{"charge":%q,"amount":100}`, failed)), http.StatusConflict, "invalid_state")

		e := refund(fmt.Sprintf(`{"charge":%q,"amount":500,"reason":"requested_by_customer"}`, captured))
		mustExpect(t, e, http.StatusCreated, "")
		var r1 refundJSON
		decode(t, e, &r1)
		if r1.Status != "pending" || r1.Amount != 500 || r1.Charge != captured || r1.Object != "refund" || r1.Currency != "USD" {
			t.Errorf("first refund: got %s", e.body)
		}
		if got := p.waitRefund(t, r1.ID, 15*time.Second); got.Status != "succeeded" {
			t.Errorf("first refund: final status %s, want succeeded", got.Status)
		}
		if ch, _ := p.getCharge(t, captured); ch.Status != "captured" || ch.AmountRefunded != 500 {
			t.Errorf("after refunding 500: charge %s amount_refunded %d, want captured 500", ch.Status, ch.AmountRefunded)
		}

		e = refund(fmt.Sprintf(`{"charge":%q}`, captured))
		mustExpect(t, e, http.StatusCreated, "")
		var r2 refundJSON
		decode(t, e, &r2)
		if r2.Status != "pending" || r2.Amount != 1500 {
			t.Errorf("refund of the rest: got %s, want pending 1500", e.body)
		}
		if got := p.waitRefund(t, r2.ID, 15*time.Second); got.Status != "succeeded" {
			t.Errorf("refund of the rest: final status %s, want succeeded", got.Status)
		}
		ch, chBody := p.getCharge(t, captured)
		if ch.Status != "refunded" || ch.AmountRefunded != 2000 {
			t.Errorf("after refunding all: charge %s amount_refunded %d, want refunded 2000", ch.Status, ch.AmountRefunded)
		}
		expect(t, refund(fmt.Sprintf(`{"charge":%q,"amount":1}`, captured)), http.StatusConflict, "invalid_state")

		for _, r := range []refundJSON{r1, r2} {
			row, ok := ledgerOf(t, st.db, r.ID)["refund"]
			if !ok || row.Reference == nil || !strings.HasPrefix(*row.Reference, "sbx_re_") || row.Amount != r.Amount || row.Calls != 1 {
				t.Errorf("refund %s: ledger row %+v, want amount %d, sbx_re_ reference, 1 call", r.ID, row, r.Amount)
			}
		}
		if n := queryInt(t, st.db, `SELECT count(*) FROM refunds WHERE charge_id = $1`, captured); n != 2 {
			t.Errorf("refunds of the charge in Postgres: %d, want 2", n)
		}

		evs := eventsOfCharge(t, p.events(t), captured)
		want := map[string]int{"charge.created": 1, "charge.captured": 1, "refund.created": 2, "refund.succeeded": 2, "charge.refunded": 1}
		if got := countTypes(evs); !reflect.DeepEqual(got, want) {
			t.Errorf("events of the refunded charge: %v, want %v", got, want)
		}
		for _, e := range evs {
			c := e.charge(t)
			switch e.EventType {
			case "refund.created", "refund.succeeded":
				rf := e.refund(t)
				wantStatus := map[string]string{"refund.created": "pending", "refund.succeeded": "succeeded"}[e.EventType]
				if e.Data.Object != "refund" || rf.Status != wantStatus || (rf.ID != r1.ID && rf.ID != r2.ID) {
					t.Errorf("%s: data.object %q, refund %s %s; want refund, one of ours, %s", e.EventType, e.Data.Object, rf.ID, rf.Status, wantStatus)
				}
				if e.EventType == "refund.succeeded" && rf.ID == r1.ID && (c.Status != "captured" || c.AmountRefunded != 500) {
					t.Errorf("refund.succeeded of the first refund: charge %s %d, want captured 500", c.Status, c.AmountRefunded)
				}
				if e.EventType == "refund.succeeded" && rf.ID == r2.ID && (c.Status != "refunded" || c.AmountRefunded != 2000) {
					t.Errorf("refund.succeeded of the second refund: charge %s %d, want refunded 2000", c.Status, c.AmountRefunded)
				}
			case "charge.refunded":
				if !sameJSON(e.Data.Charge, chBody) {
					t.Errorf("charge.refunded data.charge\n%s\nwant the charge as it is now\n%s", e.Data.Charge, chBody)
				}
			}
		}
	})

	t.Run("c_idempotency_across_replicas", func(t *testing.T) {
		const n = 20
		p := &payments{st: st, c: newClient(t, "127.0.0.23"), key: key}
		tag := "idem-" + harness.RandomHex(6)
		body := cardBody("4242424242424242", true, 4200, tag)
		idemKey := "one-key-" + harness.RandomHex(8)
		results := make([]exchange, n)
		errs := make([]error, n)
		start := make(chan struct{})
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() {
				<-start
				results[i], errs[i] = sendWith(p.c, http.MethodPost, st.replicas[i%2]+"/v1/charges", key, body, "Idempotency-Key", idemKey)
			})
		}
		close(start)
		wg.Wait()

		var first []byte
		created, replayed, inUse := 0, 0, 0
		chargeIDs := map[string]bool{}
		for i, e := range results {
			if errs[i] != nil {
				t.Errorf("request %d: %v", i, errs[i])
				continue
			}
			st.check(t, e)
			switch {
			case e.status() == http.StatusCreated:
				if first == nil {
					first = e.body
				} else if !bytes.Equal(first, e.body) {
					t.Errorf("request %d: body differs from another 201:\n%s\n%s", i, e.body, first)
				}
				var ch chargeJSON
				decode(t, e, &ch)
				chargeIDs[ch.ID] = true
				if e.header("Idempotent-Replayed") == "true" {
					replayed++
				} else {
					created++
				}
			case e.is(http.StatusConflict, "idempotency_key_in_use"):
				inUse++
			default:
				t.Errorf("request %d: %s, want 201 or 409 idempotency_key_in_use", i, e)
			}
		}
		t.Logf("%d concurrent requests with one key over both replicas: %d created, %d replayed, %d x 409 in use", n, created, replayed, inUse)
		if created != 1 || len(chargeIDs) != 1 {
			t.Fatalf("got %d first answers and charge ids %v; want exactly one charge", created, chargeIDs)
		}
		var id string
		for k := range chargeIDs {
			id = k
		}
		if got := queryInt(t, st.db, `SELECT count(*) FROM charges WHERE metadata->>'tag' = $1`, tag); got != 1 {
			t.Errorf("charges with the request's tag in Postgres: %d, want 1", got)
		}
		if got := queryInt(t, st.db, `SELECT count(*) FROM events WHERE type = 'charge.created' AND body->'data'->'charge'->>'id' = $1`, id); got != 1 {
			t.Errorf("charge.created events: %d, want 1", got)
		}

		// After the worker: one provider charge.
		p.waitCharges(t, []string{id}, func(_, s string) bool { return s == "captured" || s == "failed" }, 15*time.Second)
		led := ledgerOf(t, st.db, id)
		if len(led) != 1 || led["authorize"].Reference == nil || led["authorize"].Calls != 1 {
			t.Errorf("ledger rows of the charge: %+v, want one authorize row with a reference and 1 call", led)
		}

		// A later repeat replays the same bytes; another body is refused.
		e := p.do(t, http.MethodPost, "/v1/charges", body, "Idempotency-Key", idemKey)
		if expect(t, e, http.StatusCreated, "") && (!bytes.Equal(e.body, first) || e.header("Idempotent-Replayed") != "true") {
			t.Errorf("late replay: Idempotent-Replayed %q, body\n%s\nwant true and\n%s", e.header("Idempotent-Replayed"), e.body, first)
		}
		other := cardBody("4242424242424242", true, 4300, tag)
		expect(t, p.do(t, http.MethodPost, "/v1/charges", other, "Idempotency-Key", idemKey), http.StatusUnprocessableEntity, "idempotency_key_reused")
		if got := queryInt(t, st.db, `SELECT count(*) FROM charges WHERE metadata->>'tag' = $1`, tag); got != 1 {
			t.Errorf("charges with the tag after the repeats: %d, want 1", got)
		}
	})

	t.Run("d_worker_killed_three_times", func(t *testing.T) {
		faultTest(t, st, faultKey)
	})

	// Every outbox row has been worked off by now.
	if n := queryInt(t, st.db, `SELECT count(*) FROM outbox`); n != 0 {
		t.Errorf("outbox rows left at the end: %d, want 0", n)
	}
	t.Logf("charges end-to-end took %s (the build: %s)", time.Since(began).Round(time.Millisecond), st.bins.took.Round(time.Millisecond))
}

// faultTest creates 200 charges while the worker is killed with SIGKILL three
// times, then checks from Postgres that each was charged once and reached
// its final state.
func faultTest(t *testing.T, st *stack, key string) {
	const (
		total     = 200
		senders   = 6
		pace      = 12 * time.Millisecond // 200 charges over about 2.4 s
		kills     = 3
		killEvery = 700 * time.Millisecond
	)
	// Tasks held by a killed worker are back in their queue about 3 s after
	// the kill (jobs.Recovery); a task recovery cannot see waits for its
	// 30 s asynq lease and the outbox sweeper (every 10 s, Queue.Resend).
	// The drain is waited for, not timed: it fails only when no charge
	// becomes final for stallLimit.
	c := newClient(t, "127.0.0.24")
	inspector := st.redis.inspector()
	defer inspector.Close()
	activeTasks := func() int {
		info, err := inspector.GetQueueInfo("critical")
		if err != nil {
			return -1
		}
		return info.Active
	}
	tag := "fault-" + harness.RandomHex(6)
	body := cardBody("4242424242424242", true, 1000, tag)

	results := make([]exchange, total)
	errs := make([]error, total)
	next := make(chan int)
	var wg sync.WaitGroup
	for s := range senders {
		wg.Go(func() {
			for i := range next {
				results[i], errs[i] = sendWith(c, http.MethodPost, st.replicas[(i+s)%2]+"/v1/charges", key, body)
			}
		})
	}
	began := time.Now()
	go func() {
		tick := time.NewTicker(pace)
		defer tick.Stop()
		for i := range total {
			next <- i
			<-tick.C
		}
		close(next)
	}()

	inFlight := func() int64 {
		return queryInt(t, st.db, `SELECT count(*) FROM charges WHERE metadata->>'tag' = $1 AND status = 'created'`, tag)
	}
	type killFigures struct {
		at              time.Duration
		created, active int64
		restart         time.Duration
	}
	var figs []killFigures
	var lastKill time.Time
	rc := newClient(t, "127.0.0.25")
	time.Sleep(400 * time.Millisecond)
	for k := range kills {
		if k > 0 {
			time.Sleep(killEvery)
		}
		st.killWorker(t, 0)
		lastKill = time.Now()
		// Tasks the dead worker held stay active in asynq until recovered.
		f := killFigures{at: lastKill.Sub(began), active: int64(activeTasks()), created: inFlight()}
		f.restart = st.restartWorker(t, 0, rc)
		figs = append(figs, f)
	}
	wg.Wait()
	createdAll := time.Since(began)

	ids := make([]string, 0, total)
	for i, e := range results {
		if errs[i] != nil {
			t.Errorf("charge %d: %v", i, errs[i])
			continue
		}
		st.check(t, e)
		if !expect(t, e, http.StatusCreated, "") {
			continue
		}
		var ch chargeJSON
		decode(t, e, &ch)
		ids = append(ids, ch.ID)
	}
	for k, f := range figs {
		t.Logf("kill %d at %s after the first charge: charges in flight (status created) %d, provider tasks left active in asynq (orphaned by this and earlier kills) %d; worker ready again %s later",
			k+1, f.at.Round(time.Millisecond), f.created, f.active, f.restart.Round(time.Millisecond))
	}
	t.Logf("%d of %d charges created in %s", len(ids), total, createdAll.Round(time.Millisecond))
	if len(ids) != total {
		t.FailNow()
	}

	// Wait (bounded) until every charge is final, noting when the backlog
	// drained apart from the tasks lost with the killed workers.
	finalCount := func() (int64, int64) {
		ctx, cancel := dbCtx()
		defer cancel()
		var final, active int64
		err := st.db.Pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE status IN ('captured', 'failed')), count(*) FILTER (WHERE status = 'created')
			FROM charges WHERE id = ANY($1::uuid[])`, ids).Scan(&final, &active)
		if err != nil {
			t.Fatalf("count final charges: %v", err)
		}
		return final, active
	}
	type point struct {
		after time.Duration // since the last kill
		final int64
	}
	var timeline []point
	lastLog := time.Now()
	p := newProgress()
	for {
		final, left := finalCount()
		if len(timeline) == 0 || timeline[len(timeline)-1].final != final {
			timeline = append(timeline, point{time.Since(lastKill), final})
		}
		if final == total {
			break
		}
		if time.Since(lastLog) >= 10*time.Second {
			lastLog = time.Now()
			t.Logf("%s after the last kill: %d final, %d still created, %d provider tasks active in asynq",
				time.Since(lastKill).Round(time.Second), final, left, activeTasks())
		}
		if p.stalled(total - int(final)) {
			t.Fatalf("%d of %d charges still not final %s after the last kill, none for %s; progress (time after last kill: final): %v",
				total-final, total, time.Since(lastKill).Round(time.Second), stallLimit, timeline)
		}
		time.Sleep(200 * time.Millisecond)
	}
	drained := timeline[len(timeline)-1].after
	var tail []string
	for _, pt := range timeline[max(0, len(timeline)-4):] {
		tail = append(tail, fmt.Sprintf("%d final at %s", pt.final, pt.after.Round(100*time.Millisecond)))
	}
	t.Logf("time to drain after the last kill: %s (all %d final); last progress: %s", drained.Round(time.Millisecond), total, strings.Join(tail, ", "))

	// From Postgres: states, events, provider charges, card data, outbox.
	ctx, cancel := dbCtx()
	defer cancel()
	statuses := map[string]int{}
	rows, err := st.db.Pool.Query(ctx, `SELECT status, count(*) FROM charges WHERE id = ANY($1::uuid[]) GROUP BY status`, ids)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var s string
		var n int
		if err := rows.Scan(&s, &n); err != nil {
			t.Fatal(err)
		}
		statuses[s] = n
	}
	if rows.Err() != nil {
		t.Fatal(rows.Err())
	}
	t.Logf("final states: %v", statuses)
	if statuses["captured"] != total {
		t.Errorf("captured charges: %d of %d (states %v)", statuses["captured"], total, statuses)
	}

	perCharge := map[string]map[string]int{}
	byType := map[string]int{}
	rows, err = st.db.Pool.Query(ctx, `SELECT body->'data'->'charge'->>'id', type, count(*) FROM events
		WHERE body->'data'->'charge'->>'id' = ANY($1::text[]) GROUP BY 1, 2`, ids)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var id, typ string
		var n int
		if err := rows.Scan(&id, &typ, &n); err != nil {
			t.Fatal(err)
		}
		if perCharge[id] == nil {
			perCharge[id] = map[string]int{}
		}
		perCharge[id][typ] = n
		byType[typ] += n
	}
	if rows.Err() != nil {
		t.Fatal(rows.Err())
	}
	t.Logf("events per transition: %v (for %d charges)", byType, total)
	badEvents := 0
	for _, id := range ids {
		if want := map[string]int{"charge.created": 1, "charge.captured": 1}; !reflect.DeepEqual(perCharge[id], want) {
			if badEvents++; badEvents <= 10 {
				t.Errorf("charge %s: events %v, want %v", id, perCharge[id], want)
			}
		}
	}

	type led struct {
		id, key, op string
		reference   *string
		calls       int64
	}
	rows, err = st.db.Pool.Query(ctx, `SELECT c.id::text, l.idempotency_key, l.operation, l.reference, l.calls
		FROM charges c JOIN sandbox_ledger l ON l.idempotency_key LIKE 'gh\_' || c.id || '\_%'
		WHERE c.id = ANY($1::uuid[])`, ids)
	if err != nil {
		t.Fatal(err)
	}
	ledger, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (led, error) {
		var l led
		err := r.Scan(&l.id, &l.key, &l.op, &l.reference, &l.calls)
		return l, err
	})
	if err != nil {
		t.Fatal(err)
	}
	booked := map[string]int{}
	rowsOf := map[string]int{}
	calls := map[int64]int{}
	var maxCalls int64
	for _, l := range ledger {
		rowsOf[l.id]++
		if l.op == "authorize" && l.reference != nil {
			booked[l.id]++
		}
		calls[l.calls]++
		maxCalls = max(maxCalls, l.calls)
	}
	doubles, missing := 0, 0
	for _, id := range ids {
		if booked[id] != 1 || rowsOf[id] != 1 {
			if doubles++; doubles <= 10 {
				t.Errorf("charge %s: %d ledger rows, %d provider charges; want 1 and 1", id, rowsOf[id], booked[id])
			}
		}
		if rowsOf[id] == 0 {
			missing++
		}
	}
	refMismatch := queryInt(t, st.db, `SELECT count(*) FROM charges c JOIN sandbox_ledger l ON l.idempotency_key = 'gh_' || c.id || '_authorize'
		WHERE c.id = ANY($1::uuid[]) AND l.reference IS DISTINCT FROM c.provider_reference`, ids)
	if refMismatch != 0 {
		t.Errorf("charges whose provider_reference is not the ledger's reference: %d", refMismatch)
	}
	var callHist []string
	for _, k := range slices.Sorted(maps.Keys(calls)) {
		callHist = append(callHist, fmt.Sprintf("%d call(s): %d", k, calls[k]))
	}
	t.Logf("provider charges: %d charges with exactly one booked authorization, %d not exactly one, %d without any; provider calls per charge: max %d (%s)",
		len(ids)-doubles, doubles, missing, maxCalls, strings.Join(callHist, ", "))

	if n := queryInt(t, st.db, `SELECT count(*) FROM charges WHERE id = ANY($1::uuid[]) AND card_sealed IS NOT NULL`, ids); n != 0 {
		t.Errorf("charges still holding sealed card data: %d", n)
	}
	if n := queryInt(t, st.db, `SELECT count(*) FROM outbox`); n != 0 {
		t.Errorf("outbox rows left: %d, want 0", n)
	}
	if arch, err := inspector.ListArchivedTasks("critical"); err == nil && len(arch) > 0 {
		t.Logf("archived provider tasks in asynq: %d", len(arch))
	}
}

// checkNoCardData looks for the test card numbers in the rows that must never
// hold them (events, outbox, idempotency records), in every Redis value and
// in the processes' logs (docs/reliability.md I6).
func checkNoCardData(t *testing.T, st *stack) {
	t.Helper()
	ctx, cancel := dbCtx()
	defer cancel()
	var blobs []struct {
		where string
		b     []byte
	}
	add := func(where string, b []byte) {
		blobs = append(blobs, struct {
			where string
			b     []byte
		}{where, b})
	}
	for _, q := range []struct{ where, sql string }{
		{"events", `SELECT id::text, convert_to(body::text, 'UTF8') FROM events`},
		{"outbox", `SELECT task_id, convert_to(task_id || ' ' || task_type || ' ' || ref_id::text, 'UTF8') FROM outbox`},
		{"idempotency_keys", `SELECT key, response || fingerprint FROM idempotency_keys`},
		{"charges (outside card_sealed)", `SELECT id::text, convert_to(concat_ws(' ', card_brand, card_last4, card_fingerprint, card_token, description, metadata::text, failure_message), 'UTF8') FROM charges`},
		{"card_tokens (outside card_sealed)", `SELECT id, convert_to(concat_ws(' ', card_brand, card_last4, card_fingerprint, key_id), 'UTF8') FROM card_tokens`},
	} {
		rows, err := st.db.Pool.Query(ctx, q.sql)
		if err != nil {
			t.Fatalf("%s: %v", q.where, err)
		}
		n := 0
		for rows.Next() {
			var id string
			var b []byte
			if err := rows.Scan(&id, &b); err != nil {
				t.Fatalf("%s: %v", q.where, err)
			}
			add(q.where+" "+id, b)
			n++
		}
		if rows.Err() != nil {
			t.Fatalf("%s: %v", q.where, rows.Err())
		}
	}
	entries := st.redis.entries(t)
	for k, vals := range entries {
		add("redis "+k, []byte(k+" "+strings.Join(vals, " ")))
	}
	add("process logs", []byte(st.logs()))
	hits := 0
	for _, b := range blobs {
		for _, pan := range sandboxCards {
			if bytes.Contains(b.b, []byte(pan)) {
				hits++
				t.Errorf("card number %s...%s found in %s", pan[:4], pan[len(pan)-4:], b.where)
			}
		}
	}
	t.Logf("card data scan: %d rows/keys/logs scanned (%d Redis keys), %d hits", len(blobs), len(entries), hits)
}
