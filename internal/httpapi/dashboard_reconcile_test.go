package httpapi_test

// The dashboard's reconciliation: the runs and the open exceptions of
// every run, a day reconciled with the provider's report, a tampered
// report uploaded as a file, refused forms shown again with their reason
// (400, nothing stored), a run's exceptions with both sides, and their
// resolution: adjust books exactly one adjustment, accept none, a double
// submit does nothing more, each audit-logged as the API's; only owners
// and admins resolve.

import (
	"bytes"
	"fmt"
	"html"
	"mime/multipart"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/gatehouse-pay/gatehouse/internal/authz"
	"github.com/gatehouse-pay/gatehouse/internal/ids"
	"github.com/gatehouse-pay/gatehouse/internal/ledger"
	"github.com/gatehouse-pay/gatehouse/internal/reconcile"
)

// upload posts a multipart form, as the browser sends the upload form:
// the fields (with the client's CSRF token and a fresh idempotency key,
// unless fields has its own) and a file as report_file ("" for none).
func (d *dashClient) upload(path string, fields url.Values, file string, content []byte) dashPage {
	d.t.Helper()
	f := url.Values{"csrf_token": {d.csrf}, "idempotency_key": {ids.NewUUID()}}
	for k, v := range fields {
		f[k] = v
	}
	var body bytes.Buffer
	w := multipart.NewWriter(&body)
	for k, vs := range f {
		for _, v := range vs {
			if err := w.WriteField(k, v); err != nil {
				d.t.Fatal(err)
			}
		}
	}
	if file != "" {
		fw, err := w.CreateFormFile("report_file", file)
		if err != nil {
			d.t.Fatal(err)
		}
		if _, err := fw.Write(content); err != nil {
			d.t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		d.t.Fatal(err)
	}
	return d.sendBody("POST", path, &body, "Content-Type", w.FormDataContentType())
}

var (
	runLocation   = regexp.MustCompile(`^/dashboard/reconciliations/(rec_[0-9a-v]{26})\?notice=(\w+)$`)
	exceptionCard = regexp.MustCompile(`<article class="exception" id="(exc_[0-9a-v]{26})" data-exception="exc_[0-9a-v]{26}" data-kind="([a-z_]+)" data-status="([a-z]+)"`)
)

// exceptionsOn are the exceptions a run's page shows, by kind, and their
// ids in the page's order.
func exceptionsOn(t *testing.T, body string) (byKind map[string]string, order []string) {
	t.Helper()
	byKind = map[string]string{}
	for _, m := range exceptionCard.FindAllStringSubmatch(body, -1) {
		byKind[m[2]] = m[1]
		order = append(order, m[2]+" "+m[3])
	}
	return byKind, order
}

// card is the part of a run's page that shows one exception.
func card(t *testing.T, body, exc string) string {
	t.Helper()
	i := strings.Index(body, `<article class="exception" id="`+exc+`"`)
	if i < 0 {
		t.Fatalf("the page shows no exception %s", exc)
	}
	j := strings.Index(body[i:], "</article>")
	return body[i : i+j]
}

func TestDashboardReconciliation(t *testing.T) {
	t.Parallel()
	h := newHarness(t, authzEnv) // sign-in limits raised: six people sign in
	own := h.account("rec@example.com")
	h.merchant("stranger@example.com", matrixPassword)
	books := h.sandboxConnector(t, own.merchantID, "Books")
	quiet := h.sandboxConnector(t, own.merchantID, "Quiet")
	acct := ledger.Account{MerchantID: own.merchantID, ConnectorID: books, Currency: "USD"}
	b := h.books(t)
	day := time.Now().UTC().Truncate(24*time.Hour).AddDate(0, 0, -1)
	d := day.Format(reconcile.DateLayout)
	fee := func(amount int64) int64 { return ledger.DefaultSandboxFees.For(amount).Amount }
	charge := map[string]string{}
	for i, c := range []struct {
		ref    string
		amount int64
	}{{"sbx_ch_ok", 2000}, {"sbx_ch_amount", 5000}, {"sbx_ch_fee", 1000}, {"sbx_ch_extra", 400}} {
		at := day.Add(time.Duration(9+i) * time.Hour)
		charge[c.ref] = ids.NewUUID()
		b.book(ledger.Captured(acct, charge[c.ref], c.ref, c.amount, ledger.DefaultSandboxFees.For(c.amount), at, at), at)
	}
	line := func(ref string, gross, fee int64) string {
		return fmt.Sprintf("%s,charge,USD,%d,%d,%d,%s\n", ref, gross, fee, gross-fee, d)
	}
	// One line of each kind of exception: 51.00 for 50.00, a fee 0.05
	// higher, a line the books lack, and sbx_ch_extra left out.
	tampered := reconcile.Header + "\n" + line("sbx_ch_ok", 2000, fee(2000)) + line("sbx_ch_amount", 5100, fee(5100)) +
		line("sbx_ch_fee", 1000, fee(1000)+5) + line("sbx_ch_unknown", 300, fee(300))
	runs := func() int {
		return h.count(t, `SELECT count(*) FROM reconciliations WHERE merchant_id = $1`, own.merchantID)
	}
	adjustments := func(source string) int {
		return h.count(t, `SELECT count(*) FROM balance_transactions WHERE merchant_id = $1 AND type = 'adjustment' AND ($2 = '' OR source = $2)`,
			own.merchantID, source)
	}

	o := h.dashClientSignedIn(t, "rec@example.com")
	p := o.get("/dashboard/reconciliations")
	if p.status != 200 || !strings.Contains(p.body, `href="/dashboard/reconciliations" aria-current="page">Reconciliation</a>`) ||
		!strings.Contains(p.body, `href="/dashboard/balance" aria-current="true"`) || !strings.Contains(p.body, `id="reconcile-day"`) ||
		!strings.Contains(p.body, `id="reconcile-upload"`) || !strings.Contains(p.body, `enctype="multipart/form-data"`) ||
		!strings.Contains(p.body, "No runs yet.") || !strings.Contains(p.body, `value="`+d+`"`) {
		t.Fatalf("the reconciliation page: %d\n%.4000s", p.status, p.body)
	}
	checkDashboardHeaders(t, "the reconciliation page", p)

	// A quiet day, with the provider's report: nothing to compare, nothing
	// differs.
	r := o.post("/dashboard/reconciliations", url.Values{"source": {"provider"}, "connector": {quiet}, "date": {d}})
	m := runLocation.FindStringSubmatch(r.location)
	if r.status != 303 || m == nil || m[2] != "reconciled" {
		t.Fatalf("a day reconciled: %d to %q\n%.2000s", r.status, r.location, r.body)
	}
	quietRun := m[1]
	if p := o.get(r.location); p.status != 200 || !strings.Contains(p.body, `id="run-status" data-status="reconciled"`) ||
		!strings.Contains(p.body, `id="all-matched"`) || !strings.Contains(p.body, `id="notice"`) || !strings.Contains(p.body, "Quiet") {
		t.Errorf("the quiet day's run: %d\n%.3000s", p.status, p.body)
	}

	// Forms the service refuses: 400 on the page, saying why, and nothing
	// stored.
	tomorrow := day.AddDate(0, 0, 2).Format(reconcile.DateLayout)
	badAmount := reconcile.Header + "\n" + line("sbx_ch_ok", 2000, fee(2000)) + "sbx_ch_x,charge,USD,1.50,0,1.50," + d + "\n"
	before := runs()
	for _, tc := range []struct {
		name   string
		fields url.Values
		file   []byte // sent as a file, multipart, when set
		says   string
	}{
		{"a day to come", url.Values{"source": {"provider"}, "connector": {books}, "date": {tomorrow}}, nil, "date must not be after today"},
		{"a date that is none", url.Values{"source": {"provider"}, "connector": {books}, "date": {"27.11.2026"}}, nil, "date must be a date written YYYY-MM-DD"},
		{"no date", url.Values{"source": {"provider"}, "connector": {books}}, nil, "Choose the day to reconcile."},
		{"no connector", url.Values{"source": {"provider"}, "date": {d}}, nil, "Choose the connector to reconcile."},
		{"another merchant's connector", url.Values{"source": {"provider"}, "connector": {h.sandboxConnector(t, h.merchant("third@example.com", matrixPassword), "Theirs")}, "date": {d}}, nil, "No such connector"},
		{"a bad amount", url.Values{"source": {"upload"}, "connector": {books}, "report": {badAmount}}, nil, "report line 3: "},
		{"nothing uploaded", url.Values{"source": {"upload"}, "connector": {books}, "report": {" \n"}}, nil, "Choose the settlement report&#39;s CSV file, or paste its text."},
		{"a file without the header", url.Values{"source": {"upload"}, "connector": {books}}, []byte("ref,amount\nx,1\n"), "report line 1 must be the header"},
		{"a file too large", url.Values{"source": {"upload"}, "connector": {books}}, bytes.Repeat([]byte("x"), reconcile.MaxReportBytes+1), "at most 512 KiB are taken"},
		{"no way to reconcile", url.Values{"source": {"magic"}, "connector": {books}}, nil, "Choose how to reconcile"},
	} {
		var r dashPage
		if tc.file != nil {
			r = o.upload("/dashboard/reconciliations", tc.fields, "report.csv", tc.file)
		} else {
			r = o.post("/dashboard/reconciliations", tc.fields)
		}
		if r.status != 400 || !strings.Contains(r.body, `role="alert"`) || !strings.Contains(r.body, tc.says) ||
			!strings.Contains(r.body, `data-canonical="/dashboard/reconciliations"`) {
			t.Errorf("%s: %d, want 400 saying %q\n%.1500s", tc.name, r.status, tc.says, r.body)
		}
	}
	// The refused text comes back to be corrected.
	r = o.post("/dashboard/reconciliations", url.Values{"source": {"upload"}, "connector": {books}, "report": {badAmount}})
	if !strings.Contains(r.body, html.EscapeString(badAmount)+"</textarea>") ||
		!strings.Contains(r.body, `<option value="`+books+`" selected>Books (sandbox)</option>`) {
		t.Errorf("the refused upload's text and connector are not shown again\n%.5000s", r.body)
	}
	csrf := o.csrf
	o.csrf = "forged"
	if r := o.upload("/dashboard/reconciliations", url.Values{"source": {"upload"}, "connector": {books}}, "report.csv", []byte(tampered)); r.status != 403 {
		t.Errorf("an upload without the CSRF token: %d", r.status)
	}
	o.csrf = csrf
	if n := runs(); n != before {
		t.Fatalf("%d runs after refused forms, want %d", n, before)
	}

	// The tampered report, as a file: one exception of each kind; the same
	// form again makes nothing more.
	key := ids.NewUUID()
	form := url.Values{"source": {"upload"}, "connector": {books}, "idempotency_key": {key}}
	r = o.upload("/dashboard/reconciliations", form, "settlement.csv", []byte(tampered))
	m = runLocation.FindStringSubmatch(r.location)
	if r.status != 303 || m == nil || m[2] != "reconciled" {
		t.Fatalf("the tampered report: %d to %q\n%.2000s", r.status, r.location, r.body)
	}
	run := m[1]
	if again := o.upload("/dashboard/reconciliations", form, "settlement.csv", []byte(tampered)); again.location != "/dashboard/reconciliations/"+run+"?notice=already_done" {
		t.Errorf("the same upload again: %d to %q", again.status, again.location)
	}
	if n := runs(); n != before+1 {
		t.Errorf("%d runs, want %d", n, before+1)
	}
	if n := h.count(t, `SELECT count(*) FROM audit_log WHERE merchant_id = $1 AND action = 'reconciliation.create' AND object_id = $2 AND actor_type = 'member'`,
		own.merchantID, run); n != 1 {
		t.Errorf("%d audit log entries of the upload, want 1", n)
	}
	rp := o.get("/dashboard/reconciliations/" + run)
	exc, order := exceptionsOn(t, rp.body)
	if rp.status != 200 || !strings.Contains(rp.body, `id="run-status" data-status="open"`) ||
		!strings.Contains(rp.body, `id="run-counts" data-lines="4" data-matched="1" data-exceptions="4" data-open="4"`) {
		t.Fatalf("the run's page: %d\n%.3000s", rp.status, rp.body)
	}
	checkDashboardHeaders(t, "a run's page", rp)
	if want := []string{"amount_mismatch open", "fee_mismatch open", "missing_in_gateway open", "missing_at_provider open"}; !cmp.Equal(order, want) {
		t.Errorf("the exceptions %v, want %v (the report's order, then the books')", order, want)
	}
	amount := card(t, rp.body, exc["amount_mismatch"])
	for _, s := range []string{"sbx_ch_amount", "report line 3", `href="/dashboard/charges/` + charge["sbx_ch_amount"] + `"`,
		"51.00 USD", "50.00 USD", "&#43;1.00 USD", // html/template writes + so fmt.Sprintf(`data-net-diff="%d"`, 100-(fee(5100)-fee(5000))), `name="action" value="adjust"`,
		`name="action" value="accept"`, `action="/dashboard/reconciliations/` + run + `/exceptions/` + exc["amount_mismatch"] + `/resolve"`} {
		if !strings.Contains(amount, s) {
			t.Errorf("the amount mismatch does not show %q\n%s", s, amount)
		}
	}
	if missing := card(t, rp.body, exc["missing_in_gateway"]); !strings.Contains(missing, "nothing with this reference") || !strings.Contains(missing, "&#43;3.00 USD") {
		t.Errorf("the line the books lack\n%s", missing)
	}
	if extra := card(t, rp.body, exc["missing_at_provider"]); !strings.Contains(extra, `href="/dashboard/charges/`+charge["sbx_ch_extra"]+`"`) ||
		!strings.Contains(extra, "-4.00 USD") {
		t.Errorf("the transaction the report lacks\n%s", extra)
	}
	// The list: both runs, newest first, and the four open exceptions.
	l := o.get("/dashboard/reconciliations")
	if got := rowsOf(l.body, "data-reconciliation"); !cmp.Equal(got, []string{run, quietRun}) {
		t.Errorf("the runs %v, want %v", got, []string{run, quietRun})
	}
	if got := rowsOf(l.body, "data-exception"); len(got) != 4 || got[0] != exc["amount_mismatch"] {
		t.Errorf("the open exceptions %v", got)
	}
	if !strings.Contains(l.body, `data-reconciliation="`+run+`" data-status="open" data-open="4" data-matched="1"`) {
		t.Errorf("the run's row\n%.5000s", l.body)
	}

	// Resolved: adjust books exactly one adjustment, whatever is sent
	// again; accept books none.
	resolve := func(d *dashClient, kind string, f url.Values) dashPage {
		t.Helper()
		return d.post("/dashboard/reconciliations/"+run+"/exceptions/"+exc[kind]+"/resolve", f)
	}
	adjusted := "/dashboard/reconciliations/" + run + "?notice=adjusted#" + exc["amount_mismatch"]
	rk := ids.NewUUID()
	adjust := url.Values{"action": {"adjust"}, "note": {"The bank statement says 51.00."}, "idempotency_key": {rk}}
	if r := resolve(o, "amount_mismatch", adjust); r.status != 303 || r.location != adjusted {
		t.Fatalf("adjust: %d to %q\n%.2000s", r.status, r.location, r.body)
	}
	if r := resolve(o, "amount_mismatch", adjust); r.status != 303 || !strings.Contains(r.location, "notice=already_done") {
		t.Errorf("the same adjustment again: %d to %q", r.status, r.location)
	}
	if r := resolve(o, "amount_mismatch", url.Values{"action": {"accept"}}); r.status != 409 || !strings.Contains(r.body, "is resolved already") ||
		!strings.Contains(r.body, `role="alert"`) {
		t.Errorf("an exception resolved already: %d\n%.1500s", r.status, r.body)
	}
	if n := adjustments(exc["amount_mismatch"]); n != 1 {
		t.Errorf("%d adjustments of the amount mismatch, want 1", n)
	}
	if r := resolve(o, "fee_mismatch", url.Values{"action": {"accept"}}); r.status != 303 || !strings.Contains(r.location, "notice=accepted") {
		t.Errorf("accept: %d to %q", r.status, r.location)
	}
	if n := adjustments(""); n != 1 {
		t.Errorf("%d adjustments after accepting, want the one", n)
	}
	// Refused resolutions: shown again, the note kept; nothing booked.
	long := strings.Repeat("n", reconcile.MaxNoteLen+1)
	for _, tc := range []struct {
		f    url.Values
		says string
	}{
		{url.Values{"action": {"ignore"}}, "action must be adjust or accept."},
		{url.Values{}, "action"},
		{url.Values{"action": {"adjust"}, "note": {long}}, "note must be at most 500 characters."},
	} {
		r := resolve(o, "missing_in_gateway", tc.f)
		if r.status != 400 || !strings.Contains(r.body, tc.says) || !strings.Contains(r.body, `role="alert"`) {
			t.Errorf("resolve with %v: %d, want 400 saying %q", tc.f, r.status, tc.says)
		}
		if note := tc.f.Get("note"); note != "" && !strings.Contains(r.body, ">"+note+"</textarea>") {
			t.Errorf("the refused note is not shown again")
		}
	}
	o.csrf = "forged"
	if r := resolve(o, "missing_in_gateway", url.Values{"action": {"adjust"}}); r.status != 403 || !strings.Contains(r.body, "csrf_token_invalid") {
		t.Errorf("a resolution without the CSRF token: %d", r.status)
	}
	o.csrf = csrf
	if n := adjustments(""); n != 1 {
		t.Errorf("%d adjustments after refused resolutions, want 1", n)
	}
	for _, kind := range []string{"amount_mismatch", "fee_mismatch"} {
		if n := h.count(t, `SELECT count(*) FROM audit_log WHERE merchant_id = $1 AND action = 'reconciliation_exception.resolve'
			AND object_type = 'reconciliation_exception' AND object_id = $2 AND actor_type = 'member'`, own.merchantID, exc[kind]); n != 1 {
			t.Errorf("%d audit log entries of the %s's resolution, want 1", n, kind)
		}
	}
	rp = o.get("/dashboard/reconciliations/" + run)
	if _, order := exceptionsOn(t, rp.body); !cmp.Equal(order, []string{"amount_mismatch resolved", "fee_mismatch resolved", "missing_in_gateway open", "missing_at_provider open"}) {
		t.Errorf("after two resolutions: %v", order)
	}
	amount = card(t, rp.body, exc["amount_mismatch"])
	txn := regexp.MustCompile(`data-adjustment="(txn_[0-9a-v]{26})" data-net="(-?\d+)"`).FindStringSubmatch(amount)
	if txn == nil || txn[2] != fmt.Sprint(100-(fee(5100)-fee(5000))) || !strings.Contains(amount, `data-action="adjust"`) ||
		!strings.Contains(amount, "The bank statement says 51.00.") || !strings.Contains(amount, "by <span data-by>rec@example.com</span>") ||
		strings.Contains(amount, `class="resolve"`) {
		t.Errorf("the adjusted exception\n%s", amount)
	}
	if n := h.count(t, `SELECT count(*) FROM balance_transactions WHERE id = $1 AND source = $2 AND type = 'adjustment'`, txn[1], exc["amount_mismatch"]); n != 1 {
		t.Errorf("the page names adjustment %s, which the books do not hold", txn[1])
	}
	if accepted := card(t, rp.body, exc["fee_mismatch"]); !strings.Contains(accepted, `data-action="accept"`) || !strings.Contains(accepted, "Nothing was booked.") {
		t.Errorf("the accepted exception\n%s", accepted)
	}
	if p := o.get("/dashboard/reconciliations/" + run + "?status=open"); !cmp.Equal(rowsOfExceptions(p.body), []string{exc["missing_in_gateway"], exc["missing_at_provider"]}) {
		t.Errorf("the open exceptions of the run: %v", rowsOfExceptions(p.body))
	}
	if p := o.get("/dashboard/reconciliations/" + run + "?status=lost"); p.status != 400 {
		t.Errorf("an unknown status: %d", p.status)
	}

	// Roles: developers and viewers read without the forms and are
	// refused; support has no link and is refused; admins resolve.
	for _, role := range []string{authz.Developer, authz.Viewer, authz.Support, authz.Admin} {
		email := role + "@example.com"
		h.teamMember(t, own.token, email, role)
		m := h.dashClientSignedIn(t, email)
		list, page := m.get("/dashboard/reconciliations"), m.get("/dashboard/reconciliations/"+run)
		r := resolve(m, "missing_in_gateway", url.Values{"action": {"adjust"}})
		up := m.post("/dashboard/reconciliations", url.Values{"source": {"provider"}, "connector": {quiet}, "date": {d}})
		switch role {
		case authz.Support:
			if list.status != 403 || page.status != 403 || r.status != 403 || up.status != 403 {
				t.Errorf("support: list %d, run %d, resolve %d, reconcile %d; want 403", list.status, page.status, r.status, up.status)
			}
			if c := m.get("/dashboard/charges"); strings.Contains(c.body, `href="/dashboard/reconciliations"`) || strings.Contains(c.body, `href="/dashboard/balance"`) {
				t.Error("support's navigation links to the books")
			}
		case authz.Admin:
			if page.status != 200 || !strings.Contains(page.body, `class="resolve"`) || r.status != 303 {
				t.Errorf("an admin: run %d (forms %v), resolve %d", page.status, strings.Contains(page.body, `class="resolve"`), r.status)
			}
		default:
			if list.status != 200 || page.status != 200 || strings.Contains(list.body, `id="reconcile"`) || strings.Contains(page.body, `class="resolve"`) ||
				!strings.Contains(page.body, "Owners and admins resolve exceptions.") || strings.Contains(page.body, "data-by") {
				t.Errorf("a %s's pages: %d and %d, or they offer the forms, or name who resolved", role, list.status, page.status)
			}
			if r.status != 403 || !strings.Contains(r.body, "permission_denied") || up.status != 403 {
				t.Errorf("a %s resolves %d, reconciles %d; want 403 permission_denied", role, r.status, up.status)
			}
		}
	}
	if n := adjustments(""); n != 2 {
		t.Errorf("%d adjustments, want 2 (the owner's and the admin's)", n)
	}

	// Another merchant: not found, and nothing moves.
	s := h.dashClientSignedIn(t, "stranger@example.com")
	if r := s.get("/dashboard/reconciliations/" + run); r.status != 404 {
		t.Errorf("another merchant's run: %d", r.status)
	}
	if r := resolve(s, "missing_at_provider", url.Values{"action": {"adjust"}}); r.status != 404 {
		t.Errorf("another merchant resolves: %d", r.status)
	}
	if l := s.get("/dashboard/reconciliations"); strings.Contains(l.body, run) || strings.Contains(l.body, exc["missing_at_provider"]) {
		t.Error("another merchant's page lists the run or its exceptions")
	}
	if n := adjustments(""); n != 2 {
		t.Errorf("%d adjustments after another merchant's attempt, want 2", n)
	}
}

// rowsOfExceptions are the ids of the exceptions a run's page shows.
func rowsOfExceptions(body string) []string {
	var out []string
	for _, m := range exceptionCard.FindAllStringSubmatch(body, -1) {
		out = append(out, m[1])
	}
	return out
}
