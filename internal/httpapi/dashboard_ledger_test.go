package httpapi_test

// The dashboard's books: the Balance page (available and pending per
// currency, the chart of the last 30 days drawn as SVG from known
// bookings), the payouts list, a payout's page with what it paid out
// summing to its amount, and the form that pays out by hand (a payout above
// the available balance refused on the page with 409, nothing created).

import (
	"context"
	"math"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/gatehouse-pay/gatehouse/internal/authz"
	"github.com/gatehouse-pay/gatehouse/internal/connectors"
	"github.com/gatehouse-pay/gatehouse/internal/idempotency"
	"github.com/gatehouse-pay/gatehouse/internal/ids"
	"github.com/gatehouse-pay/gatehouse/internal/ledger"
	"github.com/gatehouse-pay/gatehouse/internal/store"
)

// books writes ledger transactions as the services book them, each with an
// id of its own moment.
type books struct {
	t *testing.T
	s *store.Store
}

func (h *harness) books(t *testing.T) books { return books{t: t, s: store.New(h.db.Pool)} }

// book writes tx as booked at `at`.
func (b books) book(tx ledger.Transaction, at time.Time) ledger.Transaction {
	b.t.Helper()
	tx.ID, tx.CreatedAt = ids.Floor(ledger.PrefixTransaction, at), at
	if booked, err := b.s.Book(context.Background(), tx); err != nil || !booked {
		b.t.Fatalf("book %s: %v, %v", tx.Cause, booked, err)
	}
	return tx
}

// capture books a capture of amount with the sandbox's default fee at
// `at`, available after `wait`.
func (b books) capture(a ledger.Account, amount int64, at time.Time, wait time.Duration) ledger.Transaction {
	b.t.Helper()
	return b.book(ledger.Captured(a, ids.NewUUID(), "", amount, ledger.DefaultSandboxFees.For(amount), at, at.Add(wait)), at)
}

// svgBar is a bar of the chart as the page draws it.
type svgBar struct {
	Day    string
	Kind   string
	Amount int64
	X, Y   float64
	W, H   float64
}

var (
	chartDayGroup = regexp.MustCompile(`(?s)<g class="day" data-day="([0-9-]+)">\s*<title>([^<]*)</title>(.*?)</g>`)
	chartBarRect  = regexp.MustCompile(`<rect class="bar (gross|fees|net)" data-amount="(-?\d+)" x="([\d.]+)" y="([\d.]+)" width="([\d.]+)" height="([\d.]+)">`)
	chartAttr     = func(name string) *regexp.Regexp {
		return regexp.MustCompile(`<svg class="chart"[^>]* ` + name + `="([-\d.]+)"`)
	}
)

// chartOf reads the chart's bars, its days' tooltips and its scale.
func chartOf(t *testing.T, body string) (bars []svgBar, tips map[string]string, scale map[string]float64) {
	t.Helper()
	tips, scale = map[string]string{}, map[string]float64{}
	for _, g := range chartDayGroup.FindAllStringSubmatch(body, -1) {
		tips[g[1]] = g[2]
		for _, m := range chartBarRect.FindAllStringSubmatch(g[3], -1) {
			b := svgBar{Day: g[1], Kind: m[1]}
			b.Amount, _ = strconv.ParseInt(m[2], 10, 64)
			for i, f := range []*float64{&b.X, &b.Y, &b.W, &b.H} {
				*f, _ = strconv.ParseFloat(m[3+i], 64)
			}
			bars = append(bars, b)
		}
	}
	for _, name := range []string{"data-top", "data-bottom", "data-zero", "data-plot-left", "data-plot-top", "data-plot-height", "data-slot"} {
		m := chartAttr(name).FindStringSubmatch(body)
		if m == nil {
			t.Fatalf("the chart has no %s", name)
		}
		scale[name], _ = strconv.ParseFloat(m[1], 64)
	}
	return bars, tips, scale
}

func TestDashboardBalance(t *testing.T) {
	t.Parallel()
	h := newHarness(t, paymentsEnv)
	ana := h.merchant("ana@example.com", matrixPassword)
	bob := h.merchant("bob@example.com", matrixPassword)
	conn := h.sandboxConnector(t, ana, "Main sandbox")
	usd := ledger.Account{MerchantID: ana, ConnectorID: conn, Currency: "USD"}
	eur := ledger.Account{MerchantID: ana, ConnectorID: conn, Currency: "EUR"}
	b := h.books(t)
	now := time.Now().UTC()
	today := now.Truncate(24 * time.Hour)
	dayOf := func(n int) string { return today.AddDate(0, 0, n).Format(time.DateOnly) }

	// Three days ago: 20.00 USD captured (fee 0.88), available since.
	b.capture(usd, 2000, today.AddDate(0, 0, -3).Add(10*time.Hour), time.Hour)
	// Yesterday: 10.00 EUR captured; 5.00 USD refunded.
	b.capture(eur, 1000, today.AddDate(0, 0, -1).Add(9*time.Hour), time.Hour)
	b.book(ledger.Refunded(usd, ids.NewUUID(), "", 500, today.AddDate(0, 0, -1).Add(11*time.Hour)), today.AddDate(0, 0, -1).Add(11*time.Hour))
	// Now: 50.00 USD captured (fee 1.75), pending for two days.
	b.capture(usd, 5000, now.Add(-time.Second), 48*time.Hour)
	// Before the window, and another merchant's today: not on the page.
	b.capture(usd, 7777, today.AddDate(0, 0, -30).Add(-time.Hour), time.Hour)
	b.capture(ledger.Account{MerchantID: bob, ConnectorID: conn, Currency: "USD"}, 9999, now.Add(-2*time.Second), time.Hour)

	d := h.dashClientSignedIn(t, "ana@example.com")
	p := d.get("/dashboard/balance")
	if p.status != 200 || !strings.Contains(p.body, `href="/dashboard/balance" aria-current="page"`) {
		t.Fatalf("the balance page: %d\n%.2000s", p.status, p.body)
	}
	checkDashboardHeaders(t, "the balance page", p)

	// Available and pending per currency.
	stats := regexp.MustCompile(`data-currency="([A-Z]{3})" data-available="(-?\d+)" data-pending="(-?\d+)"`).FindAllStringSubmatch(p.body, -1)
	var gotStats []string
	for _, m := range stats {
		gotStats = append(gotStats, m[1]+" "+m[2]+" "+m[3])
	}
	// USD: 19.12 + 75.78 (the old capture) - 5.00 available, 48.25 pending.
	oldNet := int64(7777) - ledger.DefaultSandboxFees.For(7777).Amount
	wantStats := []string{"EUR 941 0", "USD " + strconv.FormatInt(1912+oldNet-500, 10) + " 4825"}
	if diff := cmp.Diff(wantStats, gotStats); diff != "" {
		t.Errorf("the balances (-want +got):\n%s", diff)
	}
	for _, s := range []string{"9.41 EUR", "48.25 USD", cents(1912+oldNet-500) + " USD"} {
		if !strings.Contains(p.body, s) {
			t.Errorf("the balance page does not show %s", s)
		}
	}
	if strings.Contains(p.body, "99.99") || strings.Contains(p.body, "77.77") {
		t.Error("the page counts another merchant's capture, or one before the window")
	}

	// The chart: USD (the currency that captured the most), its bars from
	// the zero line, all on one scale, in their days' slots.
	if !strings.Contains(p.body, `id="chart" data-currency="USD"`) || !strings.Contains(p.body, `role="img" aria-labelledby="chart-title chart-desc"`) ||
		!strings.Contains(p.body, "In total 2 captures: gross 70.00 USD, fees 2.63 USD, net 67.37 USD.") {
		t.Errorf("the chart's currency, title or description\n%.3000s", p.body)
	}
	bars, tips, scale := chartOf(t, p.body)
	var gotBars []string
	for _, bar := range bars {
		gotBars = append(gotBars, bar.Day+" "+bar.Kind+" "+strconv.FormatInt(bar.Amount, 10))
	}
	wantBars := []string{dayOf(-3) + " gross 2000", dayOf(-3) + " fees 88", dayOf(-3) + " net 1912",
		dayOf(0) + " gross 5000", dayOf(0) + " fees 175", dayOf(0) + " net 4825"}
	if diff := cmp.Diff(wantBars, gotBars); diff != "" {
		t.Errorf("the chart's bars (-want +got):\n%s", diff)
	}
	if len(tips) != 30 || !strings.HasPrefix(tips[dayOf(-29)], today.AddDate(0, 0, -29).Format("Mon 2 Jan 2006")) {
		t.Errorf("the chart has %d days, the first %q: want 30, from 29 days ago", len(tips), tips[dayOf(-29)])
	}
	if want := "1 capture, gross 50.00 USD, fees 1.75 USD, net 48.25 USD"; !strings.Contains(tips[dayOf(0)], want) {
		t.Errorf("today's tooltip %q, want it to say %q", tips[dayOf(0)], want)
	}
	if want := "no captures; refunds and disputes 5.00 USD"; !strings.Contains(tips[dayOf(-1)], want) {
		t.Errorf("yesterday's tooltip %q, want it to say %q", tips[dayOf(-1)], want)
	}
	// 50.00 is the top amount: steps of 20.00 (a quarter of it, rounded
	// up to 1, 2 or 5 of a power of ten), so the axis runs to 60.00.
	if scale["data-top"] != 6000 || scale["data-bottom"] != 0 {
		t.Errorf("the axis runs from %v to %v, want 0 to 6000", scale["data-bottom"], scale["data-top"])
	}
	perUnit := scale["data-plot-height"] / (scale["data-top"] - scale["data-bottom"])
	for _, bar := range bars {
		if math.Abs(bar.H-float64(bar.Amount)*perUnit) > 0.11 || math.Abs(bar.Y+bar.H-scale["data-zero"]) > 0.11 {
			t.Errorf("bar %s %s of %d: y %.1f height %.1f; want height %.1f standing on the zero line at %.1f",
				bar.Day, bar.Kind, bar.Amount, bar.Y, bar.H, float64(bar.Amount)*perUnit, scale["data-zero"])
		}
		day, _ := time.Parse(time.DateOnly, bar.Day)
		slot := scale["data-plot-left"] + float64(29-int(today.Sub(day)/(24*time.Hour)))*scale["data-slot"]
		if bar.X < slot || bar.X+bar.W > slot+scale["data-slot"] {
			t.Errorf("bar %s %s at x %.1f-%.1f: outside its day's slot %.1f-%.1f", bar.Day, bar.Kind, bar.X, bar.X+bar.W, slot, slot+scale["data-slot"])
		}
	}
	// The table: the days with bookings, newest first, and the totals.
	if got, want := rowsOf(p.body, "data-day"), []string{dayOf(0), dayOf(-1), dayOf(-3)}; !cmp.Equal(got, want) {
		t.Errorf("the table's days %v, want %v", got, want)
	}
	if !regexp.MustCompile(`<tr id="days-total" data-captures="2" data-gross="7000" data-fees="263" data-net="6737"><th>Total</th><td class="num">2</td><td class="num">70.00 USD</td><td class="num">2.63 USD</td><td class="num">67.37 USD</td><td class="num">5.00 USD</td>`).MatchString(p.body) {
		t.Errorf("the table's totals\n%.4000s", p.body[strings.Index(p.body, `id="days"`):])
	}

	// The other currency, chosen; a currency without bookings; a bad one.
	e := d.get("/dashboard/balance?currency=eur")
	bars, _, _ = chartOf(t, e.body)
	if e.status != 200 || len(bars) != 3 || bars[0].Day != dayOf(-1) || bars[0].Amount != 1000 || bars[2].Amount != 941 ||
		!strings.Contains(e.body, `href="/dashboard/balance?currency=USD#daily"`) {
		t.Errorf("the EUR chart: %d, bars %+v", e.status, bars)
	}
	j := d.get("/dashboard/balance?currency=JPY")
	if bars, _, _ := chartOf(t, j.body); j.status != 200 || len(bars) != 0 || !strings.Contains(j.body, "Nothing captured in JPY in these days") {
		t.Errorf("a currency without bookings: %d, %d bars", j.status, len(bars))
	}
	if r := d.get("/dashboard/balance?currency=dollars"); r.status != 400 || !strings.Contains(r.body, `role="alert"`) {
		t.Errorf("a currency that is not one: %d", r.status)
	}

	// Another merchant sees its own only; a merchant without bookings an
	// empty page.
	bd := h.dashClientSignedIn(t, "bob@example.com")
	if r := bd.get("/dashboard/balance"); !strings.Contains(r.body, `data-currency="USD" data-available="0" data-pending="`) ||
		strings.Contains(r.body, "EUR") {
		t.Errorf("bob's balance page\n%.2000s", r.body)
	}
	h.merchant("cyd@example.com", matrixPassword)
	if r := h.dashClientSignedIn(t, "cyd@example.com").get("/dashboard/balance"); r.status != 200 || !strings.Contains(r.body, `id="no-balance"`) {
		t.Errorf("a page without bookings: %d", r.status)
	}
}

// cents renders minor units of a two-digit currency.
func cents(n int64) string {
	return strconv.FormatInt(n/100, 10) + "." + strconv.FormatInt(n%100/10, 10) + strconv.FormatInt(n%10, 10)
}

func TestDashboardPayouts(t *testing.T) {
	t.Parallel()
	h := newHarness(t, paymentsEnv)
	pia := h.account("pia@example.com")
	h.merchant("quin@example.com", matrixPassword)
	main := h.sandboxConnector(t, pia.merchantID, "Main sandbox")
	eu := ids.New(connectors.Prefix)
	at := time.Now().UTC().Truncate(time.Millisecond)
	if _, err := store.New(h.db.Pool).CreateConnector(context.Background(), connectors.Connector{ID: eu, MerchantID: pia.merchantID,
		Provider: connectors.ProviderSandbox, Name: "EU sandbox", Enabled: true, Sandbox: &connectors.Sandbox{}, PayoutSchedule: "manual",
		CreatedAt: at, UpdatedAt: at}, nil, idempotency.Response{}); err != nil {
		t.Fatal(err)
	}
	usd := ledger.Account{MerchantID: pia.merchantID, ConnectorID: main, Currency: "USD"}
	eur := ledger.Account{MerchantID: pia.merchantID, ConnectorID: eu, Currency: "EUR"}
	b := h.books(t)
	past := at.Add(-72 * time.Hour)
	// Main: 100.00 USD captured (fee 3.20), 10.00 refunded, both
	// available; the daily schedule pays out the 86.80 left.
	capture := b.capture(usd, 10000, past, time.Hour)
	refund := b.book(ledger.Refunded(usd, ids.NewUUID(), "", 1000, past.Add(time.Minute)), past.Add(time.Minute))
	slot := at.Truncate(24 * time.Hour)
	var auto ledger.Payout
	made, _, err := b.s.CreateAutomaticPayout(context.Background(), usd, slot, at, func(total int64) (*ledger.PayoutPlan, error) {
		p, err := ledger.NewPayoutPlan(usd, "sandbox", total, true, nil, at, 24*time.Hour)
		auto = p.Payout
		return &p, err
	})
	if err != nil || !made || auto.Amount != 8680 {
		t.Fatalf("the automatic payout: %v, %v, %+v", made, err, auto)
	}
	// EU: 50.00 EUR captured (fee 1.75), 48.25 available, on the manual
	// schedule.
	b.capture(eur, 5000, past.Add(2*time.Minute), time.Hour)

	d := h.dashClientSignedIn(t, "pia@example.com")
	p := d.get("/dashboard/payouts")
	if p.status != 200 || !strings.Contains(p.body, `href="/dashboard/payouts" aria-current="page"`) || !strings.Contains(p.body, `id="payout-form"`) {
		t.Fatalf("the payouts page: %d\n%.3000s", p.status, p.body)
	}
	checkDashboardHeaders(t, "the payouts page", p)
	if got, want := rowsOf(p.body, "data-account"), []string{eu + "/EUR", main + "/USD"}; !cmp.Equal(got, want) {
		t.Errorf("the accounts %v, want %v", got, want)
	}
	for _, s := range []string{`data-account="` + main + `/USD" data-available="0"`, `data-account="` + eu + `/EUR" data-available="4825"`,
		"EU sandbox · EUR (48.25 EUR available)", "by hand only", "daily, and by hand"} {
		if !strings.Contains(p.body, s) {
			t.Errorf("the payouts page does not show %q", s)
		}
	}
	if got := rowsOf(p.body, "data-payout"); !cmp.Equal(got, []string{auto.ID}) || !strings.Contains(p.body, `data-automatic="true">automatic`) {
		t.Errorf("the payouts listed: %v, want the automatic %s", got, auto.ID)
	}

	// The automatic payout's page: what it paid out, summing to its amount.
	ap := d.get("/dashboard/payouts/" + auto.ID)
	if ap.status != 200 || !strings.Contains(ap.body, `id="payout-status" data-status="pending"`) || !strings.Contains(ap.body, "86.80 USD") {
		t.Fatalf("the automatic payout's page: %d\n%.3000s", ap.status, ap.body)
	}
	settled := ap.body[strings.Index(ap.body, `id="settled"`):strings.Index(ap.body, `id="own"`)]
	if got, want := rowsOf(settled, "data-transaction"), []string{refund.ID, capture.ID}; !cmp.Equal(got, want) {
		t.Errorf("what the payout paid out: %v, want the refund and the capture %v", got, want)
	}
	if !strings.Contains(ap.body, `id="settled" data-count="2" data-net="8680"`) || !strings.Contains(ap.body, `id="sum-check" data-balances="true"`) ||
		!strings.Contains(ap.body, "Their net sums to 86.80 USD, this payout's amount.") ||
		!strings.Contains(settled, `href="/dashboard/charges/`+capture.Source+`"`) {
		t.Errorf("the automatic payout's sum\n%s", settled)
	}
	if own := rowsOf(ap.body[strings.Index(ap.body, `id="own"`):], "data-transaction"); len(own) != 1 ||
		!strings.Contains(ap.body, `data-type="payout" data-net="-8680"`) {
		t.Errorf("the payout's own transactions: %v", own)
	}

	payouts := func() int { return h.count(t, `SELECT count(*) FROM payouts WHERE merchant_id = $1`, pia.merchantID) }
	pay := func(account, amount string, extra ...string) dashPage {
		t.Helper()
		f := url.Values{"account": {account}, "amount": {amount}}
		for i := 0; i+1 < len(extra); i += 2 {
			f.Set(extra[i], extra[i+1])
		}
		return d.post("/dashboard/payouts", f)
	}
	// More than is available: 409 on the page, with what is available,
	// the form kept, and nothing paid out.
	r := pay(eu+"/EUR", "50.00")
	if r.status != 409 || !strings.Contains(r.body, `role="alert"`) || !strings.Contains(r.body, "insufficient_balance") ||
		!strings.Contains(r.body, "Not enough available: you asked to pay out 50.00 EUR, but EU sandbox has 48.25 EUR available now. Nothing was paid out.") ||
		!strings.Contains(r.body, `id="payout-amount" name="amount" inputmode="decimal" required value="50.00"`) ||
		!strings.Contains(r.body, `<option value="`+eu+`/EUR" selected>`) || !strings.Contains(r.body, `data-canonical="/dashboard/payouts"`) {
		t.Errorf("a payout above the available balance: %d\n%.4000s", r.status, r.body)
	}
	// Fields the service cannot take: 400 on the page.
	for _, tc := range []struct{ account, amount, says string }{
		{eu + "/EUR", "", "Enter the amount to pay out"},
		{eu + "/EUR", "-5", "The amount must be a positive number"},
		{eu + "/EUR", "1.234", "The amount must be a positive number"},
		{"", "1.00", "Choose the account to pay out from."},
		{eu + "/EURO", "1.00", "Choose the account to pay out from."},
		{ids.New(connectors.Prefix) + "/EUR", "1.00", "No such connector"},
	} {
		r := pay(tc.account, tc.amount)
		if r.status != 400 || !strings.Contains(r.body, `role="alert"`) || !strings.Contains(r.body, tc.says) {
			t.Errorf("account %q amount %q: %d, want 400 saying %q\n%.600s", tc.account, tc.amount, r.status, tc.says, r.body)
		}
	}
	// Without the session's CSRF token: refused.
	csrf := d.csrf
	d.csrf = "forged"
	if r := pay(eu+"/EUR", "1.00"); r.status != 403 {
		t.Errorf("a payout without the CSRF token: %d", r.status)
	}
	d.csrf = csrf
	if n := payouts(); n != 1 {
		t.Fatalf("%d payouts after refused forms, want 1", n)
	}

	// 20.00 EUR by hand: made, audit-logged; the same form again makes
	// nothing more.
	key := ids.NewUUID()
	r = pay(eu+"/EUR", "20", "description", "Rent", "idempotency_key", key)
	m := regexp.MustCompile(`^/dashboard/payouts/(po_[0-9a-v]{26})\?notice=payout_created$`).FindStringSubmatch(r.location)
	if r.status != 303 || m == nil {
		t.Fatalf("a payout by hand: %d to %q\n%.2000s", r.status, r.location, r.body)
	}
	manual := m[1]
	if again := pay(eu+"/EUR", "20", "description", "Rent", "idempotency_key", key); again.location != "/dashboard/payouts/"+manual+"?notice=already_done" {
		t.Errorf("the same form again: %d to %q", again.status, again.location)
	}
	if n := payouts(); n != 2 {
		t.Errorf("%d payouts, want 2", n)
	}
	if n := h.count(t, `SELECT count(*) FROM audit_log WHERE merchant_id = $1 AND action = 'payout.create' AND object_type = 'payout'
		AND object_id = $2 AND actor_type = 'member'`, pia.merchantID, manual); n != 1 {
		t.Errorf("%d audit log entries of the payout, want 1", n)
	}
	mp := d.get(r.location)
	if mp.status != 200 || !strings.Contains(mp.body, `id="notice"`) || !strings.Contains(mp.body, "20.00 EUR") ||
		!strings.Contains(mp.body, `id="payout-made" data-automatic="false">by hand`) || !strings.Contains(mp.body, `id="manual-note"`) ||
		!strings.Contains(mp.body, `data-type="payout" data-net="-2000"`) || !strings.Contains(mp.body, "Rent") || !strings.Contains(mp.body, `data-busy="true"`) {
		t.Errorf("the payout made by hand: %d\n%.3000s", mp.status, mp.body)
	}
	if p := d.get("/dashboard/payouts"); !strings.Contains(p.body, `data-account="`+eu+`/EUR" data-available="2825"`) ||
		!cmp.Equal(rowsOf(p.body, "data-payout"), []string{manual, auto.ID}) {
		t.Errorf("after the payout: accounts and list\n%.3000s", p.body)
	}
	if p := d.get("/dashboard/payouts?status=pending&starting_after=" + manual); !cmp.Equal(rowsOf(p.body, "data-payout"), []string{auto.ID}) {
		t.Errorf("the second page of pending payouts: %v", rowsOf(p.body, "data-payout"))
	}
	if r := d.get("/dashboard/payouts?status=lost"); r.status != 400 {
		t.Errorf("an unknown status: %d", r.status)
	}

	// Another merchant's connector is none of pia's; its pages are 404.
	qd := h.dashClientSignedIn(t, "quin@example.com")
	if r := qd.get("/dashboard/payouts/" + manual); r.status != 404 {
		t.Errorf("another merchant's payout: %d", r.status)
	}
	if r := qd.post("/dashboard/payouts", url.Values{"account": {eu + "/EUR"}, "amount": {"1.00"}}); r.status != 400 || !strings.Contains(r.body, "No such connector") {
		t.Errorf("a payout from another merchant's connector: %d", r.status)
	}

	// Roles: a developer reads both pages, without the form; support has
	// no link to them and is refused.
	h.teamMember(t, pia.token, "dev@example.com", authz.Developer)
	dev := h.dashClientSignedIn(t, "dev@example.com")
	dp := dev.get("/dashboard/payouts")
	if dp.status != 200 || strings.Contains(dp.body, `id="payout-form"`) || !strings.Contains(dp.body, `href="/dashboard/balance"`) {
		t.Errorf("a developer's payouts page: %d, form shown %v", dp.status, strings.Contains(dp.body, `id="payout-form"`))
	}
	if r := dev.post("/dashboard/payouts", url.Values{"account": {eu + "/EUR"}, "amount": {"1.00"}}); r.status != 403 || !strings.Contains(r.body, "permission_denied") {
		t.Errorf("a developer's payout: %d", r.status)
	}
	h.teamMember(t, pia.token, "sup@example.com", authz.Support)
	sup := h.dashClientSignedIn(t, "sup@example.com")
	if c := sup.get("/dashboard/charges"); strings.Contains(c.body, `href="/dashboard/balance"`) || strings.Contains(c.body, `href="/dashboard/payouts"`) {
		t.Error("support's navigation links to the balance or payouts")
	}
	if r := sup.get("/dashboard/balance"); r.status != 403 {
		t.Errorf("support's balance page: %d", r.status)
	}
}
