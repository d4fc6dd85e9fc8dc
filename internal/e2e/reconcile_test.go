package e2e

// Reconciliation against the real binaries (docs/ledger.md#reconciliation):
// a day of sandbox traffic reconciled by date with the sandbox's own
// settlement report finds nothing; the same report tampered and uploaded
// finds exactly what was planted, and resolving it moves the balance by
// the adjustment alone; a Stripe connector's report is read from
// stripe-mock's balance transactions.

import (
	"encoding/csv"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gatehouse-pay/gatehouse/internal/testenv/harness"
)

// reconciliationJSON is what the tests read of a reconciliation.
type reconciliationJSON struct {
	ID                string   `json:"id"`
	Status            string   `json:"status"`
	Source            string   `json:"source"`
	Dates             []string `json:"dates"`
	Lines             int      `json:"lines"`
	Matched           int      `json:"matched"`
	MissingInGateway  int      `json:"missing_in_gateway"`
	MissingAtProvider int      `json:"missing_at_provider"`
	AmountMismatch    int      `json:"amount_mismatch"`
	FeeMismatch       int      `json:"fee_mismatch"`
	OpenExceptions    int      `json:"open_exceptions"`
}

func (r reconciliationJSON) exceptions() int {
	return r.MissingInGateway + r.MissingAtProvider + r.AmountMismatch + r.FeeMismatch
}

type sideJSON struct {
	Gross int64 `json:"gross"`
	Fee   int64 `json:"fee"`
	Net   int64 `json:"net"`
}

// exceptionJSON is what the tests read of an exception.
type exceptionJSON struct {
	ID                 string    `json:"id"`
	Kind               string    `json:"kind"`
	ProviderReference  string    `json:"provider_reference"`
	Type               string    `json:"type"`
	Line               *int      `json:"line"`
	GatewayObject      *string   `json:"gateway_object"`
	BalanceTransaction *string   `json:"balance_transaction"`
	Provider           *sideJSON `json:"provider"`
	Gateway            *sideJSON `json:"gateway"`
	Status             string    `json:"status"`
	Resolution         *struct {
		Action             string  `json:"action"`
		BalanceTransaction *string `json:"balance_transaction"`
	} `json:"resolution"`
}

// reconMerchant is a merchant of the reconciliation test.
type reconMerchant struct{ *rtMerchant }

func (m reconMerchant) reconcile(t *testing.T, body string) reconciliationJSON {
	t.Helper()
	e := m.do(t, http.MethodPost, "/v1/reconciliations", body)
	mustExpect(t, e, http.StatusCreated, "")
	var r reconciliationJSON
	decode(t, e, &r)
	return r
}

func (m reconMerchant) exceptions(t *testing.T, rec string) []exceptionJSON {
	t.Helper()
	e := m.do(t, http.MethodGet, "/v1/reconciliations/"+rec+"/exceptions?limit=100", "")
	mustExpect(t, e, http.StatusOK, "")
	var list struct {
		Data []exceptionJSON `json:"data"`
	}
	decode(t, e, &list)
	return list.Data
}

// balance is the connector's USD balance, available and pending together.
func (m reconMerchant) balance(t *testing.T, conn string) (available, total int64) {
	t.Helper()
	e := m.do(t, http.MethodGet, "/v1/balance?connector="+conn, "")
	mustExpect(t, e, http.StatusOK, "")
	var b struct {
		Available []struct {
			Currency string `json:"currency"`
			Amount   int64  `json:"amount"`
		} `json:"available"`
		Pending []struct {
			Currency string `json:"currency"`
			Amount   int64  `json:"amount"`
		} `json:"pending"`
	}
	decode(t, e, &b)
	for _, x := range b.Available {
		if x.Currency == "USD" {
			available += x.Amount
		}
	}
	total = available
	for _, x := range b.Pending {
		if x.Currency == "USD" {
			total += x.Amount
		}
	}
	return available, total
}

// transactionDays are the UTC days the connector's balance transactions
// became available, and how many each has.
func (m reconMerchant) transactionDays(t *testing.T, conn string) map[string]int {
	t.Helper()
	e := m.do(t, http.MethodGet, "/v1/balance_transactions?limit=100&connector="+conn, "")
	mustExpect(t, e, http.StatusOK, "")
	var list struct {
		Data []struct {
			AvailableOn string `json:"available_on"`
		} `json:"data"`
		HasMore bool `json:"has_more"`
	}
	decode(t, e, &list)
	if list.HasMore {
		t.Fatalf("more than 100 balance transactions")
	}
	days := map[string]int{}
	for _, x := range list.Data {
		days[x.AvailableOn[:10]]++
	}
	return days
}

func TestReconciliation(t *testing.T) {
	parallel(t)
	mock := startStripeMockProcess(t)
	st := newStack(t, stackOptions{env: append(slices.Clone(routingStackEnv), "SANDBOX_SETTLEMENT_DELAY=2s", "STRIPE_API_BASE="+mock),
		workerEnv: routingWorkerEnv}, "reconciliation")
	m := reconMerchant{newRoutingMerchant(t, st, "127.0.0.190", "reconcile")}
	conn := m.createConnector(t, `{"provider":"sandbox","name":"Books","payout_schedule":"manual"}`).ID
	on := `"connector":"` + conn + `"`

	// A day of traffic: captures at once, a partial and a whole capture
	// later, a partial and a full refund, a void and a decline (no money),
	// then a payout of what became available.
	now := m.charge(t, routeBody("4242424242424242", 2000, "usd", true, "now", on))
	now2 := m.charge(t, routeBody("5555555555554444", 3500, "usd", true, "now-2", on))
	partial := m.charge(t, routeBody("4242424242424242", 5000, "usd", false, "partial", on))
	whole := m.charge(t, routeBody("4242424242424242", 1200, "usd", false, "whole", on))
	refundedPart := m.charge(t, routeBody("4242424242424242", 4000, "usd", true, "refund-part", on))
	refundedAll := m.charge(t, routeBody("4242424242424242", 800, "usd", true, "refund-all", on))
	voided := m.charge(t, routeBody("4242424242424242", 900, "usd", false, "void", on))
	declined := m.charge(t, routeBody("4000000000000002", 700, "usd", true, "declined", on))
	all := []string{now.ID, now2.ID, partial.ID, whole.ID, refundedPart.ID, refundedAll.ID, voided.ID, declined.ID}
	m.waitCharges(t, all, func(_, s string) bool { return s != "created" }, 60*time.Second)
	mustExpect(t, m.do(t, http.MethodPost, "/v1/charges/"+partial.ID+"/capture", `{"amount":3000}`), http.StatusOK, "")
	mustExpect(t, m.do(t, http.MethodPost, "/v1/charges/"+whole.ID+"/capture", ""), http.StatusOK, "")
	mustExpect(t, m.do(t, http.MethodPost, "/v1/charges/"+voided.ID+"/void", ""), http.StatusOK, "")
	m.waitCharges(t, []string{partial.ID, whole.ID, voided.ID}, func(_, s string) bool { return s == "captured" || s == "voided" }, 60*time.Second)
	for _, r := range []struct {
		charge string
		amount int64
	}{{refundedPart.ID, 1500}, {refundedAll.ID, 800}} {
		e := m.do(t, http.MethodPost, "/v1/refunds", fmt.Sprintf(`{"charge":%q,"amount":%d}`, r.charge, r.amount))
		mustExpect(t, e, http.StatusCreated, "")
		var ref refundJSON
		decode(t, e, &ref)
		if got := m.waitRefund(t, ref.ID, 60*time.Second); got.Status != "succeeded" {
			t.Fatalf("refund %s: %s", ref.ID, got.Status)
		}
	}
	deadline := time.Now().Add(patience(30 * time.Second))
	for {
		if available, _ := m.balance(t, conn); available >= 1000 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("nothing available to pay out after %s", patience(30*time.Second))
		}
		time.Sleep(200 * time.Millisecond)
	}
	mustExpect(t, m.do(t, http.MethodPost, "/v1/payouts", `{`+on+`,"amount":1000,"currency":"usd"}`), http.StatusCreated, "")

	// Reconciled by date with the sandbox's own report: nothing differs.
	// (A day that straddles midnight UTC is two days, each reconciled.)
	days := m.transactionDays(t, conn)
	lines := 0
	for day := range days {
		r := m.reconcile(t, `{`+on+`,"date":"`+day+`"}`)
		lines += r.Lines
		if r.Status != "reconciled" || r.exceptions() != 0 || r.Source != "provider" || r.Matched == 0 || !slices.Equal(r.Dates, []string{day}) {
			t.Errorf("reconciled by date %s: %+v", day, r)
		}
	}
	// 6 captures, 2 refunds and the payout.
	if lines != 9 {
		t.Errorf("the sandbox's reports of %v hold %d lines, want 9 (6 captures, 2 refunds, a payout)", days, lines)
	}

	// The busiest day's report, tampered: a line removed, one added, an
	// amount and a fee changed.
	var day string
	for d, n := range days {
		if day == "" || n > days[day] {
			day = d
		}
	}
	tp := m.tamperedReport(t, conn, day, "USD")
	rows, removed, added, amount, fee := tp.rows, tp.removed, tp.added, tp.amount, tp.fee
	body := fmt.Sprintf(`{%s,"date":%q,"report":%q}`, on, day, tp.csv)
	r := m.reconcile(t, body)
	if r.Status != "open" || r.Source != "upload" || r.MissingInGateway != 1 || r.MissingAtProvider != 1 || r.AmountMismatch != 1 ||
		r.FeeMismatch != 1 || r.OpenExceptions != 4 || r.Matched != len(rows)-1-3 {
		t.Fatalf("the tampered report: %+v", r)
	}
	exc := map[string]exceptionJSON{}
	for _, x := range m.exceptions(t, r.ID) {
		exc[x.Kind] = x
	}
	for kind, ref := range map[string]string{"missing_at_provider": removed[0], "missing_in_gateway": added[0],
		"amount_mismatch": amount[0], "fee_mismatch": fee[0]} {
		x := exc[kind]
		if x.ProviderReference != ref || x.Status != "open" || x.Type != "charge" {
			t.Errorf("%s: %+v, want %s open", kind, x, ref)
		}
		if (x.Provider == nil) != (kind == "missing_at_provider") || (x.Gateway == nil) != (kind == "missing_in_gateway") ||
			(x.GatewayObject == nil) != (kind == "missing_in_gateway") || (x.Line == nil) != (kind == "missing_at_provider") {
			t.Errorf("%s: the sides %+v / %+v, object %v, line %v", kind, x.Provider, x.Gateway, x.GatewayObject, x.Line)
		}
	}
	if x := exc["amount_mismatch"]; x.Provider == nil || x.Gateway == nil || x.Provider.Gross-x.Gateway.Gross != 100 || x.Provider.Fee != x.Gateway.Fee {
		t.Errorf("the amount mismatch's sides: %+v", x)
	}
	if x := exc["fee_mismatch"]; x.Provider == nil || x.Gateway == nil || x.Provider.Fee-x.Gateway.Fee != 5 || x.Provider.Gross != x.Gateway.Gross {
		t.Errorf("the fee mismatch's sides: %+v", x)
	}

	// Resolved: the amount adjusted (once, whatever is sent again), the
	// rest accepted. The balance moves by the adjustment alone.
	_, before := m.balance(t, conn)
	resolve := func(kind, action string, headers ...string) exchange {
		return m.do(t, http.MethodPost, "/v1/reconciliations/"+r.ID+"/exceptions/"+exc[kind].ID+"/resolve",
			`{"action":"`+action+`","note":"e2e"}`, headers...)
	}
	key := "resolve-" + harness.RandomHex(8)
	first := resolve("amount_mismatch", "adjust", "Idempotency-Key", key)
	mustExpect(t, first, http.StatusOK, "")
	again := resolve("amount_mismatch", "adjust", "Idempotency-Key", key)
	mustExpect(t, again, http.StatusOK, "")
	if again.header("Idempotent-Replayed") != "true" || string(again.body) != string(first.body) {
		t.Errorf("the same resolution again: %s", again)
	}
	expect(t, resolve("amount_mismatch", "adjust"), http.StatusConflict, "invalid_state")
	for _, kind := range []string{"missing_at_provider", "missing_in_gateway", "fee_mismatch"} {
		mustExpect(t, resolve(kind, "accept"), http.StatusOK, "")
	}
	expect(t, resolve("fee_mismatch", "accept"), http.StatusConflict, "invalid_state")
	if _, after := m.balance(t, conn); after-before != 100 {
		t.Errorf("the balance moved by %d, want the adjustment's 100", after-before)
	}
	e := m.do(t, http.MethodGet, "/v1/balance_transactions?type=adjustment&connector="+conn, "")
	mustExpect(t, e, http.StatusOK, "")
	var adjustments struct {
		Data []struct {
			Source string `json:"source"`
			Amount int64  `json:"amount"`
			Net    int64  `json:"net"`
		} `json:"data"`
	}
	decode(t, e, &adjustments)
	if len(adjustments.Data) != 1 || adjustments.Data[0].Source != exc["amount_mismatch"].ID || adjustments.Data[0].Net != 100 {
		t.Errorf("adjustments: %+v, want one of 100 from %s", adjustments.Data, exc["amount_mismatch"].ID)
	}
	e = m.do(t, http.MethodGet, "/v1/reconciliations/"+r.ID, "")
	mustExpect(t, e, http.StatusOK, "")
	var done reconciliationJSON
	decode(t, e, &done)
	if done.Status != "resolved" || done.OpenExceptions != 0 {
		t.Errorf("after every resolution: %+v", done)
	}

	// A Stripe connector: its report is stripe-mock's balance
	// transactions, whose fixture became available on 2009-02-13.
	stripeConn := m.createConnector(t, fmt.Sprintf(`{"provider":"stripe","name":"Stripe","credentials":{"secret_key":"sk_test_%s"}}`, harness.RandomHex(16))).ID
	sr := m.reconcile(t, `{"connector":"`+stripeConn+`","date":"2009-02-13"}`)
	if sr.Source != "provider" || sr.Lines == 0 || sr.Matched+sr.exceptions() == 0 || sr.MissingInGateway == 0 {
		t.Errorf("the Stripe connector's reconciliation: %+v", sr)
	}
	for _, x := range m.exceptions(t, sr.ID) {
		if x.Kind != "missing_in_gateway" || x.ProviderReference == "" || x.Provider == nil || x.Provider.Net != x.Provider.Gross-x.Provider.Fee {
			t.Errorf("an exception of Stripe's report: %+v", x)
		}
	}
	e = m.do(t, http.MethodGet, "/v1/connectors/"+stripeConn+"/settlement_report?date=2009-02-13", "")
	mustExpect(t, e, http.StatusOK, "")
	if got := strings.Count(strings.TrimSpace(string(e.body)), "\n"); got != sr.Lines {
		t.Errorf("Stripe's report as CSV has %d lines, the reconciliation read %d:\n%s", got, sr.Lines, e.body)
	}
	t.Logf("sandbox: %d lines over %v reconciled with no exception; tampered (%d lines): %d matched, 4 exceptions, resolved; "+
		"Stripe (stripe-mock): %d lines, %d matched, %d missing in the books", lines, days, len(rows)-1, r.Matched, sr.Lines, sr.Matched, sr.MissingInGateway)
}

// tampered is a sandbox settlement report with four exceptions planted: its
// first charge line removed, a line added, the second's amount and the
// third's fee changed.
type tampered struct {
	rows           [][]string // the report as the sandbox served it, header first
	removed, added []string
	amount, fee    []string // the changed lines, as changed
	csv            string
}

// tamperedReport fetches the connector's report of day and plants the four
// exceptions; the added line is in currency.
func (p *payments) tamperedReport(t *testing.T, connector, day, currency string) tampered {
	t.Helper()
	e := p.do(t, http.MethodGet, "/v1/connectors/"+connector+"/settlement_report?date="+day, "")
	mustExpect(t, e, http.StatusOK, "")
	rows, err := csv.NewReader(strings.NewReader(string(e.body))).ReadAll()
	if err != nil || len(rows) < 2 || strings.Join(rows[0], ",") != "provider_reference,type,currency,gross,fee,net,available_on" {
		t.Fatalf("the report of %s: %v\n%s", day, err, e.body)
	}
	var charges []int
	for i, row := range rows[1:] {
		if row[1] == "charge" {
			charges = append(charges, i+1)
		}
	}
	if len(charges) < 3 {
		t.Fatalf("the report of %s has %d charge lines, want 3 to tamper with (did the day straddle midnight UTC?):\n%s", day, len(charges), e.body)
	}
	num := func(s string) int64 {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	// The changed lines are copies: rows stays the report as served.
	tp := tampered{rows: rows, removed: rows[charges[0]], amount: slices.Clone(rows[charges[1]]), fee: slices.Clone(rows[charges[2]])}
	tp.amount[3], tp.amount[5] = strconv.FormatInt(num(tp.amount[3])+100, 10), strconv.FormatInt(num(tp.amount[5])+100, 10)
	tp.fee[4], tp.fee[5] = strconv.FormatInt(num(tp.fee[4])+5, 10), strconv.FormatInt(num(tp.fee[5])-5, 10)
	tp.added = []string{"sbx_ch_" + harness.RandomHex(13), "charge", currency, "999", "59", "940", day}
	var b strings.Builder
	w := csv.NewWriter(&b)
	for i, row := range rows {
		switch i {
		case charges[0]:
		case charges[1]:
			_ = w.Write(tp.amount)
		case charges[2]:
			_ = w.Write(tp.fee)
		default:
			_ = w.Write(row)
		}
	}
	_ = w.Write(tp.added)
	w.Flush()
	tp.csv = b.String()
	return tp
}
