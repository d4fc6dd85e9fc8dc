package e2e

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gatehouse-pay/gatehouse/internal/testenv/harness"
)

// ledgerSums are a currency's captures as the Balance page's chart sums
// them.
type ledgerSums struct {
	Captures int64 `json:"captures"`
	Gross    int64 `json:"gross"`
	Fees     int64 `json:"fees"`
	Net      int64 `json:"net"`
	Bars     int   `json:"bars"`
}

// ledgerJourney is what ledger.mjs saw.
type ledgerJourney struct {
	journeyRun
	NavLinks      []string              `json:"navLinks"`
	MoneyLinks    []string              `json:"moneyLinks"`
	Available     map[string]int64      `json:"available"`
	Pending       map[string]int64      `json:"pending"`
	ChartCurrency string                `json:"chartCurrency"`
	Chart         map[string]ledgerSums `json:"chart"`
	ChartTitle    string                `json:"chartTitle"`
	Refused       struct {
		Status  int    `json:"status"`
		Message string `json:"message"`
		Kept    string `json:"kept"`
	} `json:"refused"`
	Manual struct {
		ID     string `json:"id"`
		Notice string `json:"notice"`
		Amount int64  `json:"amount"`
		Status string `json:"status"`
		Made   string `json:"made"`
	} `json:"manual"`
	Automatic struct {
		ID       string   `json:"id"`
		Amount   int64    `json:"amount"`
		Status   string   `json:"status"`
		Count    int64    `json:"count"`
		Net      int64    `json:"net"`
		Balances string   `json:"balances"`
		Listed   []string `json:"listed"`
		SumCheck string   `json:"sumCheck"`
	} `json:"automatic"`
}

// TestBrowserLedger is the dashboard's books in Debian's chromium against
// the real binaries (ledger.mjs), with time compressed: captures are
// available after 3 s, the daily schedule pays out every 20 s and a payout
// is in transit for 3 s. A merchant routes USD charges to the server's
// sandbox (on the daily schedule) and EUR ones to a sandbox connector of
// its own that pays out by hand only; after real captures (and a partial
// refund) the journey signs in, sees the available and pending balance
// and the chart of the last 30 days, is refused a payout above the
// available EUR (409, on the page), pays out half of it by hand and sees
// the payout paid, then sees the schedule's USD payout paid and opens it:
// what it paid out, summing to its amount. The page's numbers are checked
// against the API's. Then the EUR connector is reconciled in the dashboard
// (reconcileInBrowser).
func TestBrowserLedger(t *testing.T) {
	parallel(t)
	dir, chromium := browserTools(t)
	shots := screenshotDir(t)
	st := newStack(t, stackOptions{env: []string{"SANDBOX_SETTLEMENT_DELAY=3s", "SANDBOX_PAYOUT_DELAY=3s"},
		workerEnv: []string{"SANDBOX_PAYOUT_INTERVAL=20s"}}, "browser ledger")
	setup := newClient(t, "127.0.0.41")
	email, password := "books-"+harness.RandomHex(4)+"@example.com", "correct horse "+harness.RandomHex(8)
	merchantID := st.createMerchant(t, email, password, "Ledger Shop")
	token := st.sessionToken(t, setup, email, password)
	p := &payments{st: st, c: setup, key: st.newKey(t, setup, token, "books").SecretKey}

	// EUR charges go to a sandbox connector of the merchant's on the
	// manual schedule; the others to the server's sandbox, paid out daily.
	e := p.do(t, http.MethodPost, "/v1/connectors", `{"provider":"sandbox","name":"EU sandbox","payout_schedule":"manual"}`)
	mustExpect(t, e, http.StatusCreated, "")
	var eu struct {
		ID string `json:"id"`
	}
	decode(t, e, &eu)
	e = p.do(t, http.MethodGet, "/v1/connectors?limit=100", "")
	mustExpect(t, e, http.StatusOK, "")
	var list struct {
		Data []struct {
			ID            string `json:"id"`
			Provider      string `json:"provider"`
			ServerAccount bool   `json:"server_account"`
		} `json:"data"`
	}
	decode(t, e, &list)
	server := ""
	for _, c := range list.Data {
		if c.Provider == "sandbox" && c.ServerAccount {
			server = c.ID
		}
	}
	if server == "" {
		t.Fatalf("no server-account sandbox connector in %s", e.body)
	}
	mustExpect(t, p.do(t, http.MethodPut, "/v1/routing", fmt.Sprintf(
		`{"rules":[{"if":{"currency":["eur"]},"then":{"connectors":[%q]}}],"default":{"connectors":[%q]}}`, eu.ID, server)), http.StatusOK, "")

	// Real captures: four in USD, three in EUR, and 5.00 USD of the first
	// refunded.
	var charged []string
	for _, c := range []struct {
		amount   int64
		currency string
	}{{4200, "usd"}, {1850, "usd"}, {12000, "usd"}, {725, "usd"}, {2500, "eur"}, {6000, "eur"}, {1200, "eur"}} {
		body := strings.Replace(cardBody("4242424242424242", true, c.amount, "books"), `"currency":"usd"`, `"currency":"`+c.currency+`"`, 1)
		body = strings.Replace(body, `,"provider":"sandbox"`, "", 1)
		e := p.do(t, http.MethodPost, "/v1/charges", body)
		mustExpect(t, e, http.StatusCreated, "")
		var ch struct {
			ID string `json:"id"`
		}
		decode(t, e, &ch)
		charged = append(charged, ch.ID)
	}
	p.waitCharges(t, charged, func(_, status string) bool { return status == "captured" }, 30*time.Second)
	e = p.do(t, http.MethodPost, "/v1/refunds", fmt.Sprintf(`{"charge":%q,"amount":500}`, charged[0]))
	mustExpect(t, e, http.StatusCreated, "")
	var refund struct {
		ID string `json:"id"`
	}
	decode(t, e, &refund)
	if r := p.waitRefund(t, refund.ID, 20*time.Second); r.Status != "succeeded" {
		t.Fatalf("the refund is %s", r.Status)
	}

	cfg := map[string]string{"api": st.replicas[0], "email": email, "password": password, "shots": shots}
	got := journey[ledgerJourney](t, dir, chromium, "ledger.mjs", cfg, 3*time.Minute)
	t.Logf("ledger journey in chromium: %d ms; steps (ms): %v; screenshots in %s", got.TookMS, got.Steps, shots)

	// The chart sums what the API lists as the captures' transactions.
	want := map[string]ledgerSums{}
	for _, txn := range p.balanceTransactions(t, "type=charge") {
		s := want[txn.Currency]
		s.Captures++
		s.Gross += txn.Amount
		s.Fees += txn.Fee
		s.Net += txn.Net
		want[txn.Currency] = s
	}
	for cur, w := range want {
		g := got.Chart[cur]
		if g.Captures != w.Captures || g.Gross != w.Gross || g.Fees != w.Fees || g.Net != w.Net || g.Bars == 0 || g.Bars%3 != 0 {
			t.Errorf("the %s chart shows %+v; the API's charge transactions sum to %+v (want 3 bars a day: gross, fees, net)", cur, g, w)
		}
	}
	if len(want) != 2 || want["USD"].Captures != 4 || want["EUR"].Captures != 3 || got.ChartCurrency != "USD" ||
		!strings.Contains(got.ChartTitle, "Captures per day in USD") {
		t.Errorf("captures through the API %+v; the page chose %q, titled %q", want, got.ChartCurrency, got.ChartTitle)
	}
	// The navigation's Money section leads to the balance, whose page
	// lists the section's pages.
	if nav := strings.Join(got.NavLinks, " "); !strings.Contains(nav, "/dashboard/balance") || strings.Contains(nav, "/dashboard/payouts") ||
		strings.Join(got.MoneyLinks, " ") != "/dashboard/balance /dashboard/payouts /dashboard/reconciliations /dashboard/disputes" {
		t.Errorf("the navigation %v, the Money section's %v", got.NavLinks, got.MoneyLinks)
	}
	// The EUR connector pays out by hand only: all of its net was
	// available when the journey saw the page.
	if got.Available["EUR"] != want["EUR"].Net || got.Pending["EUR"] != 0 {
		t.Errorf("the page showed EUR %d available, %d pending; want all %d available", got.Available["EUR"], got.Pending["EUR"], want["EUR"].Net)
	}

	// The payout above the available balance: refused on the page.
	if got.Refused.Status != http.StatusConflict || !strings.Contains(got.Refused.Message, "Not enough available") ||
		!strings.Contains(got.Refused.Message, "Nothing was paid out") || got.Refused.Kept == "" {
		t.Errorf("a payout above the available balance: %+v", got.Refused)
	}
	// The payout by hand: half the EUR, paid, audit-logged.
	type payoutJSON struct {
		ID        string `json:"id"`
		Amount    int64  `json:"amount"`
		Currency  string `json:"currency"`
		Status    string `json:"status"`
		Automatic bool   `json:"automatic"`
		Connector string `json:"connector"`
	}
	payout := func(id string) payoutJSON {
		t.Helper()
		e := p.do(t, http.MethodGet, "/v1/payouts/"+id, "")
		mustExpect(t, e, http.StatusOK, "")
		var po payoutJSON
		decode(t, e, &po)
		return po
	}
	manual := payout(got.Manual.ID)
	if manual.Automatic || manual.Connector != eu.ID || manual.Currency != "EUR" || manual.Amount != want["EUR"].Net/2 ||
		manual.Status != "paid" || got.Manual.Status != "paid" || got.Manual.Made != "false" || !strings.Contains(got.Manual.Notice, "Payout created") {
		t.Errorf("the payout by hand: the page saw %+v; the API says %+v (want paid, half of %d EUR from %s)", got.Manual, manual, want["EUR"].Net, eu.ID)
	}
	if n := queryInt(t, st.db, `SELECT count(*) FROM payouts WHERE merchant_id = $1 AND NOT automatic`, merchantID); n != 1 {
		t.Errorf("%d payouts by hand, want 1 (the refused one made nothing)", n)
	}
	if n := queryInt(t, st.db, `SELECT count(*) FROM audit_log WHERE merchant_id = $1 AND action = 'payout.create' AND object_id = $2
		AND actor_type = 'member'`, merchantID, manual.ID); n != 1 {
		t.Errorf("%d audit log entries of the payout by hand, want 1", n)
	}
	// The schedule's payout: what it paid out sums to its amount, as the
	// API lists it.
	auto := payout(got.Automatic.ID)
	settled := p.balanceTransactions(t, "payout="+auto.ID)
	var net int64
	var listed []string
	for _, txn := range settled {
		net += txn.Net
		listed = append(listed, txn.ID)
	}
	if !auto.Automatic || auto.Connector != server || auto.Status != "paid" || got.Automatic.Status != "paid" ||
		got.Automatic.Amount != auto.Amount || got.Automatic.Net != auto.Amount || net != auto.Amount ||
		got.Automatic.Count != int64(len(settled)) || got.Automatic.Balances != "true" ||
		strings.Join(got.Automatic.Listed, " ") != strings.Join(listed, " ") || !strings.Contains(got.Automatic.SumCheck, "sums to") {
		t.Errorf("the automatic payout: the page saw %+v; the API says %+v, its transactions %v summing to %d", got.Automatic, auto, listed, net)
	}
	for _, name := range []string{"balance", "payouts", "payout", "payout-refused", "payout-manual"} {
		if fi, err := os.Stat(filepath.Join(shots, name+".png")); err != nil || fi.Size() < 1000 {
			t.Errorf("screenshot %s: %v", name, err)
		}
	}

	reconcileInBrowser(t, p, browserRun{dir: dir, chromium: chromium, shots: shots, email: email, password: password}, merchantID, eu.ID)
}

// browserRun is how a journey script is run, and as whom.
type browserRun struct {
	dir, chromium, shots string
	email, password      string
}

// reconcileJourney is what reconcile.mjs saw.
type reconcileJourney struct {
	journeyRun
	Days []struct {
		reconcileRun
		Day        string `json:"day"`
		AllMatched int    `json:"allMatched"`
	} `json:"days"`
	Refused struct {
		Status  int    `json:"status"`
		Message string `json:"message"`
		Kept    string `json:"kept"`
	} `json:"refused"`
	Upload   reconcileRun        `json:"upload"`
	Adjusted reconcileResolution `json:"adjusted"`
	Accepted reconcileResolution `json:"accepted"`
	Resolved reconcileRun        `json:"resolved"`
	List     struct {
		Runs []struct {
			ID      string `json:"id"`
			Status  string `json:"status"`
			Open    int    `json:"open"`
			Matched int    `json:"matched"`
		} `json:"runs"`
		Open []string `json:"open"`
	} `json:"list"`
}

// reconcileRun is a run's page as the journey read it.
type reconcileRun struct {
	ID         string `json:"id"`
	Status     string `json:"status"`
	Lines      int    `json:"lines"`
	Matched    int    `json:"matched"`
	Exceptions int    `json:"exceptions"`
	Open       int    `json:"open"`
	Listed     []struct {
		ID        string `json:"id"`
		Kind      string `json:"kind"`
		Status    string `json:"status"`
		Reference string `json:"reference"`
		NetDiff   int64  `json:"netDiff"`
		Link      string `json:"link"`
	} `json:"listed"`
}

// reconcileResolution is an exception the journey resolved, as its page
// then showed it.
type reconcileResolution struct {
	ID          string `json:"id"`
	Asked       string `json:"asked"`
	Notice      string `json:"notice"`
	Status      string `json:"status"`
	Action      string `json:"action"`
	Note        string `json:"note"`
	By          string `json:"by"`
	Transaction string `json:"transaction"`
	Net         int64  `json:"net"`
	Forms       int    `json:"forms"`
}

// reconcileInBrowser reconciles the EUR connector's traffic in the
// dashboard (reconcile.mjs): each of its days with the sandbox's report
// (nothing differs), then its busiest day's report tampered (a line
// removed, one added, an amount and a fee changed) and uploaded as a
// file, whose amount is adjusted and fee accepted in the browser. The
// pages are checked against the API: the runs and exceptions, exactly one
// adjustment of the difference, nothing booked for the accepted one, and
// the audit log.
func reconcileInBrowser(t *testing.T, p *payments, b browserRun, merchantID, connector string) {
	t.Helper()
	days := map[string]int{}
	for _, txn := range p.balanceTransactions(t, "connector="+connector) {
		days[txn.AvailableOn[:10]]++
	}
	var order []string
	busiest := ""
	for day, n := range days {
		order = append(order, day)
		if busiest == "" || n > days[busiest] {
			busiest = day
		}
	}
	slices.Sort(order)
	tp := p.tamperedReport(t, connector, busiest, "EUR")
	rows, removed, added, amount, fee := tp.rows, tp.removed[0], tp.added, tp.amount, tp.fee

	cfg := map[string]any{"api": p.st.replicas[0], "email": b.email, "password": b.password, "shots": b.shots,
		"connector": connector, "days": order, "tampered": tp.csv}
	got := journey[reconcileJourney](t, b.dir, b.chromium, "reconcile.mjs", cfg, 3*time.Minute)
	t.Logf("reconciliation journey in chromium: %d ms; steps (ms): %v; days %v, the tampered report of %s", got.TookMS, got.Steps, order, busiest)

	// Each day with the sandbox's report: every line matched.
	lines := 0
	for _, d := range got.Days {
		lines += d.Lines
		if d.Status != "reconciled" || d.Exceptions != 0 || d.Matched == 0 || d.AllMatched != 1 {
			t.Errorf("the day %s reconciled in the browser: %+v", d.Day, d)
		}
	}
	total := 0
	for _, n := range days {
		total += n
	}
	if len(got.Days) != len(order) || lines != total {
		t.Errorf("%d days reconciled with %d lines; the connector has %d balance transactions over %v", len(got.Days), lines, total, order)
	}
	// A report that is not one: refused on the page, its text kept.
	if got.Refused.Status != http.StatusBadRequest || !strings.Contains(got.Refused.Message, "report line 1 must be the header") ||
		!strings.Contains(got.Refused.Kept, "provider_reference,type") {
		t.Errorf("a report that is not one: %+v", got.Refused)
	}
	// The tampered report: exactly what was planted, as the API lists it.
	planted := map[string]string{"missing_at_provider": removed, "missing_in_gateway": added[0], "amount_mismatch": amount[0], "fee_mismatch": fee[0]}
	up := got.Upload
	if up.Status != "open" || up.Lines != len(rows)-1 || up.Matched != len(rows)-1-3 || up.Exceptions != 4 || up.Open != 4 || len(up.Listed) != 4 {
		t.Errorf("the tampered report's run: %+v", up)
	}
	e := p.do(t, http.MethodGet, "/v1/reconciliations/"+up.ID+"/exceptions?limit=100", "")
	mustExpect(t, e, http.StatusOK, "")
	var api struct {
		Data []struct {
			ID                string `json:"id"`
			Kind              string `json:"kind"`
			ProviderReference string `json:"provider_reference"`
			Status            string `json:"status"`
			Resolution        *struct {
				Action             string  `json:"action"`
				Note               *string `json:"note"`
				BalanceTransaction *string `json:"balance_transaction"`
			} `json:"resolution"`
		} `json:"data"`
	}
	decode(t, e, &api)
	byKind := map[string]int{}
	for i, x := range api.Data {
		byKind[x.Kind] = i
		if planted[x.Kind] != x.ProviderReference {
			t.Errorf("%s of %s, want %s", x.Kind, x.ProviderReference, planted[x.Kind])
		}
	}
	for _, x := range up.Listed {
		if planted[x.Kind] != x.Reference || x.Status != "open" || api.Data[byKind[x.Kind]].ID != x.ID {
			t.Errorf("the page listed %+v; planted %s there", x, planted[x.Kind])
		}
		if (x.Link != "") != (x.Kind != "missing_in_gateway") || x.Link != "" && !strings.HasPrefix(x.Link, "/dashboard/charges/") {
			t.Errorf("%s links to %q", x.Kind, x.Link)
		}
	}
	// Adjusted: the difference, booked once; accepted: nothing.
	adj, acc := api.Data[byKind["amount_mismatch"]], api.Data[byKind["fee_mismatch"]]
	if got.Adjusted.ID != adj.ID || got.Adjusted.Status != "resolved" || got.Adjusted.Action != "adjust" || got.Adjusted.Net != 100 ||
		got.Adjusted.Transaction == "" || got.Adjusted.Forms != 0 || !strings.Contains(got.Adjusted.Asked, "+1.00 EUR") ||
		!strings.Contains(got.Adjusted.Notice, "booked to your balance") || got.Adjusted.By != b.email ||
		adj.Resolution == nil || adj.Resolution.Action != "adjust" || adj.Resolution.BalanceTransaction == nil ||
		*adj.Resolution.BalanceTransaction != got.Adjusted.Transaction || adj.Resolution.Note == nil || *adj.Resolution.Note != got.Adjusted.Note {
		t.Errorf("the adjusted exception: the page saw %+v; the API says %+v", got.Adjusted, adj.Resolution)
	}
	if got.Accepted.ID != acc.ID || got.Accepted.Action != "accept" || got.Accepted.Transaction != "" || got.Accepted.Forms != 0 ||
		acc.Resolution == nil || acc.Resolution.Action != "accept" || acc.Resolution.BalanceTransaction != nil {
		t.Errorf("the accepted exception: the page saw %+v; the API says %+v", got.Accepted, acc.Resolution)
	}
	adjustments := p.balanceTransactions(t, "type=adjustment")
	if len(adjustments) != 1 || adjustments[0].ID != got.Adjusted.Transaction || adjustments[0].Net != 100 || adjustments[0].Currency != "EUR" {
		t.Errorf("the merchant's adjustments %+v, want the one of +100 EUR", adjustments)
	}
	if n := queryInt(t, p.st.db, `SELECT count(*) FROM audit_log WHERE merchant_id = $1 AND action = 'reconciliation_exception.resolve'
		AND actor_type = 'member' AND object_id = ANY($2)`, merchantID, []string{adj.ID, acc.ID}); n != 2 {
		t.Errorf("%d audit log entries of the two resolutions, want 2", n)
	}
	if r := got.Resolved; r.Status != "open" || r.Open != 2 || r.Exceptions != 4 {
		t.Errorf("the run after two resolutions: %+v", r)
	}
	// The list: the runs, newest first, and the two exceptions still open.
	if n := len(got.List.Runs); n != len(order)+1 || got.List.Runs[0].ID != up.ID || got.List.Runs[0].Open != 2 || got.List.Runs[n-1].Status != "reconciled" {
		t.Errorf("the runs listed: %+v", got.List.Runs)
	}
	open := []string{api.Data[byKind["missing_in_gateway"]].ID, api.Data[byKind["missing_at_provider"]].ID}
	if !slices.Equal(got.List.Open, open) {
		t.Errorf("the open exceptions listed %v, want %v", got.List.Open, open)
	}
	for _, name := range []string{"reconciliations", "reconciliation"} {
		if fi, err := os.Stat(filepath.Join(b.shots, name+".png")); err != nil || fi.Size() < 1000 {
			t.Errorf("screenshot %s: %v", name, err)
		}
	}
}

// balanceTxnJSON is a balance transaction as the API shows it.
type balanceTxnJSON struct {
	ID          string `json:"id"`
	Type        string `json:"type"`
	Amount      int64  `json:"amount"`
	Fee         int64  `json:"fee"`
	Net         int64  `json:"net"`
	Currency    string `json:"currency"`
	AvailableOn string `json:"available_on"`
}

// balanceTransactions lists the merchant's balance transactions that the
// query selects, newest first, through the API.
func (p *payments) balanceTransactions(t *testing.T, query string) []balanceTxnJSON {
	t.Helper()
	var out []balanceTxnJSON
	after := ""
	for {
		q := "/v1/balance_transactions?limit=100&" + query
		if after != "" {
			q += "&starting_after=" + after
		}
		e := p.do(t, http.MethodGet, q, "")
		mustExpect(t, e, http.StatusOK, "")
		var page struct {
			Data    []balanceTxnJSON `json:"data"`
			HasMore bool             `json:"has_more"`
		}
		decode(t, e, &page)
		out = append(out, page.Data...)
		if !page.HasMore || len(page.Data) == 0 {
			return out
		}
		after = page.Data[len(page.Data)-1].ID
	}
}
