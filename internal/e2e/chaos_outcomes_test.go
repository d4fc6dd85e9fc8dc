package e2e

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gatehouse-pay/gatehouse/internal/providers/sandbox"
)

// f9MaxAttempts is the worker's PROVIDER_MAX_ATTEMPTS in F9: some faults
// outlast it, which used to fail a refund and drop a capture.
const f9MaxAttempts = 3

// outcomeFault is what the outcome proxy does to the refunds and captures of
// one amount: the first lose calls with a key reach the provider, which books
// them, and then lose their answer (held past PROVIDER_TIMEOUT, or the
// connection reset when reset says so for that call); later calls answer.
type outcomeFault struct {
	amount int64
	name   string
	lose   int
	reset  func(call int) bool
}

var (
	resetNever  = func(int) bool { return false }
	resetAlways = func(int) bool { return true }
	resetOdd    = func(call int) bool { return call%2 == 1 }
)

// F9's Stripe faults: refunds of a captured charge of f9RefundCharge, and
// captures of an authorization of the same amount, by amount.
var outcomeFaults = []outcomeFault{
	{2101, "timeout after booking, once", 1, resetNever},
	{2102, "reset after booking, twice", 2, resetAlways},
	{2103, "timeout or reset after booking, past PROVIDER_MAX_ATTEMPTS", f9MaxAttempts + 2, resetOdd},
}

// f9RefundCharge is the amount of the captured Stripe charges F9 refunds.
const f9RefundCharge = 3000

// outcomeKey is what the proxy saw of one idempotency key of a refund or capture.
type outcomeKey struct {
	op     string // refund or capture
	amount int64  // the amount asked for
	calls  int
	booked int // calls the provider answered 2xx
	lost   int // answers lost after the provider booked
}

// outcomeProxy sits between the worker's Stripe adapter and stripe-mock and
// loses the answers of refunds (POST /v1/refunds) and captures (POST
// /v1/payment_intents/{id}/capture) after stripe-mock answered them, per
// outcomeFaults. It records every key. stripe-mock keeps no state, so the
// proxy's records are the provider's books: a key with a 2xx answer is one
// booking of its amount (a real provider books a key once).
type outcomeProxy struct {
	srv      *httptest.Server
	upstream string
	hold     time.Duration
	mu       sync.Mutex
	keys     map[string]*outcomeKey
}

func newOutcomeProxy(t *testing.T, upstream string, hold time.Duration) *outcomeProxy {
	t.Helper()
	p := &outcomeProxy{upstream: upstream, hold: hold, keys: map[string]*outcomeKey{}}
	client := &http.Client{Timeout: 30 * time.Second}
	p.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		form, _ := url.ParseQuery(string(body))
		var k *outcomeKey
		var fault *outcomeFault
		call := 0
		if r.Method == http.MethodPost {
			op, field := "", ""
			switch {
			case r.URL.Path == "/v1/refunds":
				op, field = "refund", "amount"
			case strings.HasPrefix(r.URL.Path, "/v1/payment_intents/") && strings.HasSuffix(r.URL.Path, "/capture"):
				op, field = "capture", "amount_to_capture"
			}
			if op != "" {
				amount, _ := strconv.ParseInt(form.Get(field), 10, 64)
				key := r.Header.Get("Idempotency-Key")
				p.mu.Lock()
				k = p.keys[key]
				if k == nil {
					k = &outcomeKey{op: op, amount: amount}
					p.keys[key] = k
				}
				k.calls++
				call = k.calls
				for i := range outcomeFaults {
					if outcomeFaults[i].amount == amount && call <= outcomeFaults[i].lose {
						fault = &outcomeFaults[i]
					}
				}
				p.mu.Unlock()
			}
		}
		res, answer, ok := forward(w, r, client, p.upstream, body)
		if !ok {
			return
		}
		if k != nil && res.StatusCode/100 == 2 {
			p.mu.Lock()
			k.booked++
			if fault != nil {
				k.lost++
			}
			p.mu.Unlock()
		}
		loseOrRelay(w, r, res, answer, fault != nil, fault != nil && fault.reset(call), p.hold)
	}))
	t.Cleanup(p.srv.Close)
	return p
}

func (p *outcomeProxy) snapshot() map[string]outcomeKey {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make(map[string]outcomeKey, len(p.keys))
	for k, v := range p.keys {
		out[k] = *v
	}
	return out
}

// TestChaosProviderOutcomes is F9: refunds and captures whose provider
// answer is lost after the provider booked them (timeouts and resets, some
// past PROVIDER_MAX_ATTEMPTS), through Stripe behind a fault proxy and
// through the sandbox's lost-answer amount. No refund fails and no capture is
// dropped while money may have moved: each stays pending, is sent again under
// its one key, and ends as the provider booked it. For every refund and
// capture the provider's amount equals the gateway's, no object is left
// unknown, and refund.succeeded / charge.captured fire once each.
func TestChaosProviderOutcomes(t *testing.T) {
	chaosParallel(t)
	const timeout = 1500 * time.Millisecond
	perFault := chaosScale(2, 20)
	mock := startStripeMockProcess(t)
	proxy := newOutcomeProxy(t, mock, timeout+time.Second)
	st, m := chaosStack(t, "127.0.0.69", stackOptions{env: []string{
		"STRIPE_SECRET_KEY=sk_test_chaos", "STRIPE_API_BASE=" + proxy.srv.URL,
		"PROVIDER_TIMEOUT=" + timeout.String(), fmt.Sprintf("PROVIDER_MAX_ATTEMPTS=%d", f9MaxAttempts),
	}})

	type object struct {
		provider string
		fault    string
		charge   string
		refund   string // "" for a capture
		amount   int64
	}
	var objs []object
	stripeBody := func(capture bool, amount int64, tag string) string {
		return strings.Replace(cardBody("4242424242424242", capture, amount, tag), `"provider":"sandbox"`, `"provider":"stripe"`, 1)
	}
	create := func(body string) string {
		e := m.do(t, http.MethodPost, "/v1/charges", body)
		mustExpect(t, e, http.StatusCreated, "")
		return chargeFrom(t, e)
	}
	type plan struct {
		provider, fault string
		amount          int64
		capture         bool
		chargeID        string
	}
	var plans []plan
	for _, f := range outcomeFaults {
		for i := range perFault {
			plans = append(plans,
				plan{"stripe", f.name, f.amount, false, create(stripeBody(true, f9RefundCharge, fmt.Sprintf("f9-r-%d-%d", f.amount, i)))},
				plan{"stripe", f.name, f.amount, true, create(stripeBody(false, f.amount, fmt.Sprintf("f9-c-%d-%d", f.amount, i)))})
		}
	}
	sbxFault := fmt.Sprintf("sandbox: answer lost %d times after booking", sandbox.LostAnswerFailures)
	for i := range perFault {
		plans = append(plans,
			plan{"sandbox", sbxFault, sandbox.LostAnswerAmount, false, create(cardBody("4242424242424242", true, f9RefundCharge, fmt.Sprintf("f9-sr-%d", i)))},
			plan{"sandbox", sbxFault, sandbox.LostAnswerAmount, true, create(cardBody("4242424242424242", false, sandbox.LostAnswerAmount, fmt.Sprintf("f9-sc-%d", i)))})
	}
	ids := make([]string, len(plans))
	for i, p := range plans {
		ids[i] = p.chargeID
	}
	authorized, _ := m.waitCharges(t, ids, func(_, s string) bool { return s == "captured" || s == "authorized" || s == "failed" }, 60*time.Second)

	conflicts := 0
	for _, p := range plans {
		if want := map[bool]string{true: "authorized", false: "captured"}[p.capture]; authorized[p.chargeID].Status != want {
			t.Fatalf("charge %s (%s): %s before the fault, want %s", p.chargeID, p.fault, authorized[p.chargeID].Status, want)
		}
		if p.capture {
			e := m.do(t, http.MethodPost, "/v1/charges/"+p.chargeID+"/capture", "")
			mustExpect(t, e, http.StatusOK, "")
			// The capture's outcome is not known yet (or it is captured):
			// a void is refused either way, never applied.
			e = m.do(t, http.MethodPost, "/v1/charges/"+p.chargeID+"/void", "")
			mustExpect(t, e, http.StatusConflict, "invalid_state")
			conflicts++
			objs = append(objs, object{p.provider, p.fault, p.chargeID, "", p.amount})
			continue
		}
		e := m.do(t, http.MethodPost, "/v1/refunds", fmt.Sprintf(`{"charge":%q,"amount":%d}`, p.chargeID, p.amount))
		mustExpect(t, e, http.StatusCreated, "")
		var r refundJSON
		decode(t, e, &r)
		// The pending refund holds its amount: one more than what remains is too large.
		e = m.do(t, http.MethodPost, "/v1/refunds", fmt.Sprintf(`{"charge":%q,"amount":%d}`, p.chargeID, f9RefundCharge-p.amount+1))
		mustExpect(t, e, http.StatusBadRequest, "amount_too_large")
		conflicts++
		objs = append(objs, object{p.provider, p.fault, p.chargeID, r.ID, p.amount})
	}

	start := time.Now()
	var captureIDs []string
	for _, o := range objs {
		if o.refund == "" {
			captureIDs = append(captureIDs, o.charge)
		}
	}
	// A capture is settled when it is no longer pending (a capture that is
	// dropped leaves the charge authorized, which the checks below catch).
	for deadline := time.Now().Add(120 * time.Second); ; {
		n := queryInt(t, st.db, `SELECT count(*) FROM charges WHERE id::text = ANY($1) AND pending_action IS NOT NULL`, captureIDs)
		if n == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d captures still pending after 120s", n)
		}
		time.Sleep(100 * time.Millisecond)
	}
	final, _ := m.waitCharges(t, captureIDs, func(string, string) bool { return true }, time.Second)
	refunds := map[string]refundJSON{}
	for _, o := range objs {
		if o.refund != "" {
			refunds[o.refund] = m.waitRefund(t, o.refund, 120*time.Second)
		}
	}
	settledIn := time.Since(start)

	calls := proxy.snapshot()
	type tally struct{ objects, calls, lost int }
	per := map[string]*tally{}
	var providerRefunds, gatewayRefunds, providerCaptures, gatewayCaptures int64
	mismatched := 0
	var stripeOwn, stripeAll int64 // what the objects' keys booked at Stripe; what every key booked
	for _, k := range calls {
		if k.booked > 0 {
			stripeAll += k.amount
		}
	}
	for _, o := range objs {
		tl := per[o.fault]
		if tl == nil {
			tl = &tally{}
			per[o.fault] = tl
		}
		tl.objects++
		var key string
		var providerAmount, gatewayAmount int64
		if o.refund != "" {
			key = "gh_" + o.refund + "_refund"
			r := refunds[o.refund]
			if r.Status != "succeeded" {
				t.Errorf("refund %s (%s, %s): %s (%s), want succeeded: the provider booked it", o.refund, o.provider, o.fault, r.Status, chaosDeref(r.FailureCode))
			} else {
				gatewayAmount = r.Amount
			}
		} else {
			key = "gh_" + o.charge + "_capture"
			c := final[o.charge]
			if c.Status != "captured" {
				t.Errorf("capture of %s (%s, %s): charge %s (%s), want captured: the provider captured it", o.charge, o.provider, o.fault, c.Status, chaosDeref(c.FailureCode))
			}
			gatewayAmount = c.AmountCaptured
		}
		switch o.provider {
		case "stripe":
			k := calls[key]
			tl.calls += k.calls
			tl.lost += k.lost
			if k.booked > 0 {
				providerAmount = k.amount
			}
			stripeOwn += providerAmount
		case "sandbox":
			tl.calls += int(queryInt(t, st.db, `SELECT coalesce(sum(calls), 0) FROM sandbox_ledger WHERE idempotency_key = $1`, key))
			tl.lost += int(min(queryInt(t, st.db, `SELECT coalesce(sum(calls), 0) FROM sandbox_ledger WHERE idempotency_key = $1`, key), sandbox.LostAnswerFailures))
			providerAmount = queryInt(t, st.db, `SELECT coalesce(sum(CASE WHEN l.amount = 0 THEN a.amount ELSE l.amount END), 0)
				FROM sandbox_ledger l LEFT JOIN sandbox_ledger a ON a.reference = l.parent_reference AND a.operation = 'authorize'
				WHERE l.idempotency_key = $1 AND l.reference IS NOT NULL`, key)
		}
		if providerAmount != gatewayAmount {
			mismatched++
			t.Errorf("%s (%s, %s): the provider booked %d, the gateway recorded %d", key, o.provider, o.fault, providerAmount, gatewayAmount)
		}
		if o.refund != "" {
			providerRefunds += providerAmount
			gatewayRefunds += gatewayAmount
		} else {
			providerCaptures += providerAmount
			gatewayCaptures += gatewayAmount
		}
	}
	if stripeAll != stripeOwn {
		t.Errorf("Stripe booked %d in refunds and captures, %d of it under the objects' keys: something was sent under another key", stripeAll, stripeOwn)
	}
	// The gateway's sums straight from Postgres.
	pgRefunds := queryInt(t, st.db, `SELECT coalesce(sum(amount), 0) FROM refunds WHERE merchant_id = $1 AND status = 'succeeded'`, m.id)
	pgCaptures := queryInt(t, st.db, `SELECT coalesce(sum(amount_captured), 0) FROM charges WHERE merchant_id = $1 AND capture = false`, m.id)
	if pgRefunds != providerRefunds || pgCaptures != providerCaptures {
		t.Errorf("totals: refunds provider %d / Postgres %d, captures provider %d / Postgres %d", providerRefunds, pgRefunds, providerCaptures, pgCaptures)
	}
	unknown := queryInt(t, st.db, `SELECT (SELECT count(*) FROM refunds WHERE merchant_id = $1 AND status = 'pending')
		+ (SELECT count(*) FROM charges WHERE merchant_id = $1 AND pending_action IS NOT NULL)`, m.id)
	if unknown != 0 {
		t.Errorf("objects left unknown: %d, want 0", unknown)
	}
	lost := 0
	for _, tl := range per {
		lost += tl.lost
	}
	if lost == 0 {
		t.Error("no answer was lost: the scenario no longer tests lost outcomes")
	}
	// Events fire once the outcome is known, once each.
	nRefunds, nCaptures := len(refunds), len(captureIDs)
	types := map[string]int64{}
	for _, typ := range []string{"refund.succeeded", "charge.captured", "charge.refunded"} {
		types[typ] = queryInt(t, st.db, `SELECT count(*) FROM events WHERE merchant_id = $1 AND type = $2`, m.id, typ)
	}
	// charge.captured: one per captured Stripe/sandbox charge created with capture true, and one per capture.
	if types["refund.succeeded"] != int64(nRefunds) || types["charge.captured"] != int64(nRefunds+nCaptures) || types["charge.refunded"] != 0 {
		t.Errorf("events %v, want refund.succeeded %d, charge.captured %d, charge.refunded 0", types, nRefunds, nRefunds+nCaptures)
	}
	for _, f := range append(outcomeFaults, outcomeFault{name: sbxFault}) {
		tl := per[f.name]
		t.Logf("F9 %s: %d refunds and captures, provider calls %d, answers lost after booking %d", f.name, tl.objects, tl.calls, tl.lost)
	}
	t.Logf("F9 figures: refunds %d (provider %d, gateway %d), captures %d (provider %d, gateway %d), objects whose amounts differ %d, left unknown %d, conflicting requests refused %d; settled %s after the last request",
		nRefunds, providerRefunds, pgRefunds, nCaptures, providerCaptures, pgCaptures, mismatched, unknown, conflicts, settledIn.Round(time.Millisecond))
}
