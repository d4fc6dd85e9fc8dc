package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"testing"
	"time"
)

type txnJSON struct {
	ID          string `json:"id"`
	Type        string `json:"type"`
	Source      string `json:"source"`
	Connector   string `json:"connector"`
	Amount      int64  `json:"amount"`
	Fee         int64  `json:"fee"`
	Net         int64  `json:"net"`
	Currency    string `json:"currency"`
	Status      string `json:"status"`
	AvailableOn string `json:"available_on"`
	FeeDetails  []struct {
		Type   string `json:"type"`
		Amount int64  `json:"amount"`
	} `json:"fee_details"`
}

type payoutJSON struct {
	ID          string  `json:"id"`
	Connector   string  `json:"connector"`
	Amount      int64   `json:"amount"`
	Currency    string  `json:"currency"`
	Status      string  `json:"status"`
	Automatic   bool    `json:"automatic"`
	FailureCode *string `json:"failure_code"`
}

type balanceJSON struct {
	Available []struct {
		Currency string `json:"currency"`
		Amount   int64  `json:"amount"`
	} `json:"available"`
	Pending []struct {
		Currency string `json:"currency"`
		Amount   int64  `json:"amount"`
	} `json:"pending"`
}

// usd is the balance's amounts in USD: available and pending.
func (b balanceJSON) usd() (available, pending int64) {
	for _, a := range b.Available {
		if a.Currency == "USD" {
			available = a.Amount
		}
	}
	for _, p := range b.Pending {
		if p.Currency == "USD" {
			pending = p.Amount
		}
	}
	return available, pending
}

func (p *payments) balance(t *testing.T, connector string) balanceJSON {
	t.Helper()
	e := p.do(t, http.MethodGet, "/v1/balance?connector="+connector, "")
	mustExpect(t, e, http.StatusOK, "")
	var b balanceJSON
	decode(t, e, &b)
	return b
}

func (p *payments) transactions(t *testing.T, query url.Values) []txnJSON {
	t.Helper()
	return listAll(t, func(q string) exchange {
		return p.do(t, http.MethodGet, "/v1/balance_transactions?"+q+"&"+query.Encode(), "")
	}, func(x txnJSON) string { return x.ID })
}

func (p *payments) payout(t *testing.T, id string) payoutJSON {
	t.Helper()
	e := p.do(t, http.MethodGet, "/v1/payouts/"+id, "")
	mustExpect(t, e, http.StatusOK, "")
	var po payoutJSON
	decode(t, e, &po)
	return po
}

// waitPayout polls a payout until it is paid or failed.
func (p *payments) waitPayout(t *testing.T, id string, within time.Duration) payoutJSON {
	t.Helper()
	within = patience(within)
	deadline := time.Now().Add(within)
	for {
		po := p.payout(t, id)
		if po.Status == "paid" || po.Status == "failed" {
			return po
		}
		if time.Now().After(deadline) {
			t.Fatalf("payout %s still %s after %s", id, po.Status, within)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// waitAvailable polls a connector's balance until nothing is pending.
func (p *payments) waitAvailable(t *testing.T, connector string, within time.Duration) int64 {
	t.Helper()
	within = patience(within)
	deadline := time.Now().Add(within)
	for {
		available, pending := p.balance(t, connector).usd()
		if pending == 0 {
			return available
		}
		if time.Now().After(deadline) {
			t.Fatalf("connector %s still has %d pending after %s", connector, pending, within)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (p *payments) createConnector(t *testing.T, body string) string {
	t.Helper()
	e := p.do(t, http.MethodPost, "/v1/connectors", body)
	mustExpect(t, e, http.StatusCreated, "")
	var c struct {
		ID string `json:"id"`
	}
	decode(t, e, &c)
	return c.ID
}

// charge makes a charge at a connector and returns its id.
func (p *payments) chargeAt(t *testing.T, connector string, amount int64, capture bool) string {
	t.Helper()
	var body map[string]any
	if err := json.Unmarshal([]byte(cardBody("4242424242424242", capture, amount, "ledger")), &body); err != nil {
		t.Fatal(err)
	}
	delete(body, "provider")
	body["connector"] = connector
	b, _ := json.Marshal(body)
	e := p.do(t, http.MethodPost, "/v1/charges", string(b))
	mustExpect(t, e, http.StatusCreated, "")
	var c chargeJSON
	decode(t, e, &c)
	return c.ID
}

// TestLedgerEndToEnd follows a merchant's money through the real binaries:
// captures booked with their fees, a partial capture and a refund, the
// balance pending then available, a manual payout (refused above the
// available balance, replayed by its key, paid), a payout that fails and
// returns its money, and an automatic payout whose transactions sum to it;
// another merchant sees none of it, and every transaction in the database
// balances.
func TestLedgerEndToEnd(t *testing.T) {
	parallel(t)
	st := newStack(t, stackOptions{env: []string{"SANDBOX_SETTLEMENT_DELAY=2s", "SANDBOX_PAYOUT_INTERVAL=3s",
		"SANDBOX_PAYOUT_DELAY=1s"}}, "the ledger: balances, fees and payouts")
	c := newClient(t, "127.0.0.1")
	_, token := st.signUp(t, c, "ledger", "Ledger Shop")
	p := &payments{st: st, c: c, key: st.newKey(t, c, token, "ledger").SecretKey}
	_, tokenB := st.signUp(t, c, "ledger-b", "Other Shop")
	other := &payments{st: st, c: c, key: st.newKey(t, c, tokenB, "ledger-b").SecretKey}

	// M pays out by hand only, at its own price; F fails every payout; D
	// pays out on its schedule.
	m := p.createConnector(t, `{"provider":"sandbox","name":"Manual","payout_schedule":"manual","fees":{"percent_bps":100,"fixed":10}}`)
	f := p.createConnector(t, `{"provider":"sandbox","name":"Failing","payout_schedule":"manual","sandbox":{"payout_failure":"account_closed"}}`)
	d := p.createConnector(t, `{"provider":"sandbox","name":"Daily"}`)
	mustExpect(t, p.do(t, http.MethodPost, "/v1/connectors", `{"provider":"sandbox","name":"x","fees":{"percent_bps":10001,"fixed":0}}`), 400, "parameter_invalid")
	mustExpect(t, p.do(t, http.MethodPost, "/v1/connectors", `{"provider":"sandbox","name":"x","payout_schedule":"hourly"}`), 400, "parameter_invalid")
	mustExpect(t, p.do(t, http.MethodPost, "/v1/connectors", `{"provider":"sandbox","name":"x","sandbox":{"payout_failure":"maybe"}}`), 400, "parameter_invalid")

	// At M: three captures, one partial capture, one refund.
	full := []string{p.chargeAt(t, m, 1000, true), p.chargeAt(t, m, 2500, true), p.chargeAt(t, m, 4000, true)}
	held := p.chargeAt(t, m, 3000, false)
	p.waitCharges(t, append(append([]string{}, full...), held), func(id, s string) bool {
		return s == "captured" || (id == held && s == "authorized")
	}, 30*time.Second)
	mustExpect(t, p.do(t, http.MethodPost, "/v1/charges/"+held+"/capture", `{"amount":1500}`), 200, "")
	p.waitCharges(t, []string{held}, func(_, s string) bool { return s == "captured" }, 30*time.Second)
	e := p.do(t, http.MethodPost, "/v1/refunds", fmt.Sprintf(`{"charge":%q,"amount":500}`, full[1]))
	mustExpect(t, e, http.StatusCreated, "")
	var r refundJSON
	decode(t, e, &r)
	if got := p.waitRefund(t, r.ID, 30*time.Second); got.Status != "succeeded" {
		t.Fatalf("refund %s", got.Status)
	}

	fee := func(amount int64) int64 { return (amount*100+5000)/10000 + 10 }
	want := map[string][2]int64{} // source: amount, fee
	for id, amount := range map[string]int64{full[0]: 1000, full[1]: 2500, full[2]: 4000, held: 1500} {
		want[id] = [2]int64{amount, fee(amount)}
	}
	want[r.ID] = [2]int64{-500, 0}
	txns := p.transactions(t, url.Values{"connector": {m}})
	var total int64
	for _, x := range txns {
		w, ok := want[x.Source]
		if !ok || x.Amount != w[0] || x.Fee != w[1] || x.Net != x.Amount-x.Fee || x.Currency != "USD" || x.Connector != m {
			t.Errorf("balance transaction %+v, want amount and fee %v", x, w)
		}
		if x.Type == "charge" && (len(x.FeeDetails) != 1 || x.FeeDetails[0].Amount != x.Fee || x.FeeDetails[0].Type != "provider_fee") {
			t.Errorf("fee details of %s: %+v", x.ID, x.FeeDetails)
		}
		delete(want, x.Source)
		total += x.Net
	}
	if len(want) != 0 || len(txns) != 5 {
		t.Fatalf("%d balance transactions; not booked: %v", len(txns), want)
	}
	if got := p.transactions(t, url.Values{"source": {held}}); len(got) != 1 || got[0].Amount != 1500 {
		t.Fatalf("the partial capture's transactions: %+v", got)
	}
	one := p.do(t, http.MethodGet, "/v1/balance_transactions/"+txns[0].ID, "")
	mustExpect(t, one, http.StatusOK, "")

	// Pending, then available: all of it, and no more, may be paid out.
	over := fmt.Sprintf(`{"connector":%q,"amount":%d,"currency":"usd"}`, m, total+1)
	mustExpect(t, p.do(t, http.MethodPost, "/v1/payouts", over), http.StatusConflict, "insufficient_balance")
	if available := p.waitAvailable(t, m, 30*time.Second); available != total {
		t.Fatalf("available %d, the transactions' net %d", available, total)
	}
	mustExpect(t, p.do(t, http.MethodPost, "/v1/payouts", over), http.StatusConflict, "insufficient_balance")
	for _, bad := range []string{`{"amount":0,"currency":"usd"}`, `{"amount":100,"currency":"usd1"}`, `{"amount":100}`,
		`{"amount":100,"currency":"usd","connector":"conn_nope"}`, `{"amount":"1","currency":"usd"}`, `{"amount":100,"currency":"usd","environment":"live"}`} {
		e := p.do(t, http.MethodPost, "/v1/payouts", bad)
		if e.status() != 400 && e.status() != 403 {
			t.Errorf("POST /v1/payouts %s: %s", bad, e)
		}
	}
	body := fmt.Sprintf(`{"connector":%q,"amount":3000,"currency":"usd","description":"rent"}`, m)
	first := p.do(t, http.MethodPost, "/v1/payouts", body, "Idempotency-Key", "po-"+m)
	mustExpect(t, first, http.StatusCreated, "")
	again := p.do(t, http.MethodPost, "/v1/payouts", body, "Idempotency-Key", "po-"+m)
	if again.status() != http.StatusCreated || again.header("Idempotent-Replayed") != "true" || string(again.body) != string(first.body) {
		t.Fatalf("the replayed payout: %s", again)
	}
	var po payoutJSON
	decode(t, first, &po)
	if available, _ := p.balance(t, m).usd(); available != total-3000 {
		t.Fatalf("available after the payout %d, want %d", available, total-3000)
	}
	if po = p.waitPayout(t, po.ID, 30*time.Second); po.Status != "paid" || po.Automatic {
		t.Fatalf("payout %+v", po)
	}

	// F's payout fails, and its money comes back.
	p.waitCharges(t, []string{p.chargeAt(t, f, 5000, true)}, func(_, s string) bool { return s == "captured" }, 30*time.Second)
	beforeF := p.waitAvailable(t, f, 30*time.Second)
	e = p.do(t, http.MethodPost, "/v1/payouts", fmt.Sprintf(`{"connector":%q,"amount":1000,"currency":"usd"}`, f))
	mustExpect(t, e, http.StatusCreated, "")
	var fpo payoutJSON
	decode(t, e, &fpo)
	if fpo = p.waitPayout(t, fpo.ID, 30*time.Second); fpo.Status != "failed" || fpo.FailureCode == nil || *fpo.FailureCode != "account_closed" {
		t.Fatalf("the failing connector's payout: %+v", fpo)
	}
	if after, _ := p.balance(t, f).usd(); after != beforeF {
		t.Fatalf("available after the failed payout %d, before it %d", after, beforeF)
	}
	if got := p.transactions(t, url.Values{"source": {fpo.ID}}); len(got) != 2 || got[0].Type != "payout_failure" || got[0].Net != 1000 || got[1].Type != "payout" || got[1].Net != -1000 {
		t.Fatalf("the failed payout's transactions: %+v", got)
	}

	// D pays out on its schedule what was available, and says what.
	dIDs := []string{p.chargeAt(t, d, 1200, true), p.chargeAt(t, d, 800, true)}
	p.waitCharges(t, dIDs, func(_, s string) bool { return s == "captured" }, 30*time.Second)
	var auto payoutJSON
	deadline := time.Now().Add(patience(60 * time.Second))
	for auto.ID == "" || auto.Status != "paid" {
		if time.Now().After(deadline) {
			t.Fatalf("no automatic payout of %s paid: %+v", d, auto)
		}
		time.Sleep(200 * time.Millisecond)
		list := listAll(t, func(q string) exchange { return p.do(t, http.MethodGet, "/v1/payouts?connector="+d+"&"+q, "") },
			func(x payoutJSON) string { return x.ID })
		for _, x := range list {
			if x.Automatic && (auto.ID == "" || x.ID == auto.ID) {
				auto = x
			}
		}
	}
	settled := p.transactions(t, url.Values{"payout": {auto.ID}})
	var sum int64
	for _, x := range settled {
		sum += x.Net
		if x.Connector != d || x.Status != "available" {
			t.Errorf("paid out by %s: %+v", auto.ID, x)
		}
	}
	if sum != auto.Amount || len(settled) == 0 {
		t.Fatalf("automatic payout %s of %d paid out %d transactions summing to %d", auto.ID, auto.Amount, len(settled), sum)
	}
	if got := p.transactions(t, url.Values{"payout": {po.ID}}); len(got) != 0 {
		t.Fatalf("a manual payout lists what it paid out: %+v", got)
	}

	// Events of each payout, in the catalogue's shapes (the stack checks
	// every answer against api/openapi.yaml).
	seen := map[string]bool{}
	for _, ev := range p.events(t) {
		var payout struct {
			ID string `json:"id"`
		}
		if ev.Data.Object == "payout" && json.Unmarshal(ev.Data.Payout, &payout) == nil {
			seen[ev.EventType+" "+payout.ID] = true
		}
	}
	for _, k := range []string{"payout.created " + po.ID, "payout.paid " + po.ID, "payout.created " + fpo.ID,
		"payout.failed " + fpo.ID, "payout.created " + auto.ID, "payout.paid " + auto.ID} {
		if !seen[k] {
			t.Errorf("no event %s", k)
		}
	}

	// Another merchant sees none of it.
	mustExpect(t, other.do(t, http.MethodGet, "/v1/payouts/"+po.ID, ""), http.StatusNotFound, "not_found")
	mustExpect(t, other.do(t, http.MethodGet, "/v1/balance_transactions/"+txns[0].ID, ""), http.StatusNotFound, "not_found")
	mustExpect(t, other.do(t, http.MethodGet, "/v1/balance_transactions?payout="+auto.ID, ""), http.StatusNotFound, "not_found")
	if b := other.balance(t, ""); len(b.Available) != 0 || len(b.Pending) != 0 {
		t.Fatalf("the other merchant's balance: %+v", b)
	}
	mustExpect(t, p.do(t, http.MethodGet, "/v1/balance_transactions?type=bogus", ""), 400, "parameter_invalid")
	mustExpect(t, p.do(t, http.MethodGet, "/v1/balance?connector=bogus", ""), 400, "parameter_invalid")
	mustExpect(t, p.do(t, http.MethodGet, "/v1/payouts?status=lost", ""), 400, "parameter_invalid")

	// Every transaction in the database balances, and the books were
	// never edited.
	if n := queryInt(t, st.db, `SELECT count(*) FROM (SELECT txn_id FROM ledger_entries GROUP BY txn_id HAVING sum(amount) <> 0) x`); n != 0 {
		t.Fatalf("%d transactions do not balance", n)
	}
	if n := queryInt(t, st.db, `SELECT count(*) FROM balance_transactions t WHERE net <> (SELECT coalesce(sum(amount), 0) FROM ledger_entries e WHERE e.txn_id = t.id AND e.account = 'balance')`); n != 0 {
		t.Fatalf("%d transactions whose net is not what they moved in the balance", n)
	}
}
