package store_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/gatehouse-pay/gatehouse/internal/apperr"
	"github.com/gatehouse-pay/gatehouse/internal/audit"
	"github.com/gatehouse-pay/gatehouse/internal/connectors"
	"github.com/gatehouse-pay/gatehouse/internal/idempotency"
	"github.com/gatehouse-pay/gatehouse/internal/ids"
	"github.com/gatehouse-pay/gatehouse/internal/ledger"
	"github.com/gatehouse-pay/gatehouse/internal/listing"
	"github.com/gatehouse-pay/gatehouse/internal/providers"
	"github.com/gatehouse-pay/gatehouse/internal/reconcile"
	"github.com/gatehouse-pay/gatehouse/internal/resource"
	"github.com/gatehouse-pay/gatehouse/internal/store"
	"github.com/gatehouse-pay/gatehouse/internal/testenv"
)

// reconWorld is a merchant with a sandbox connector whose books hold a day
// of transactions, and the reconciliation service on the store.
type reconWorld struct {
	t      *testing.T
	s      *store.Store
	svc    *reconcile.Service
	m      string
	conn   string
	day    time.Time
	fetch  func(c connectors.Connector, from, to time.Time) ([]providers.SettlementLine, error)
	counts func() string
}

func newReconWorld(t *testing.T) *reconWorld {
	db := testenv.NewDB(t)
	s := store.New(db.Pool)
	w := &reconWorld{t: t, s: s, m: newMerchant(t, s, "recon-"+ids.NewUUID()+"@example.com").ID,
		day: reconcile.Day(time.Now()).Add(-24 * time.Hour)}
	w.conn = w.connector(w.m)
	w.svc = reconcile.NewService(s, s.ConnectorByID, func(_ context.Context, c connectors.Connector, from, to time.Time) ([]providers.SettlementLine, error) {
		if w.fetch == nil {
			return nil, reconcile.ErrNoReport
		}
		return w.fetch(c, from, to)
	}, time.Now)
	w.counts = func() string {
		var out []string
		for _, table := range []string{"reconciliations", "reconciliation_exceptions", "balance_transactions", "ledger_entries", "idempotency_keys", "audit_log"} {
			var n int
			if err := db.Pool.QueryRow(context.Background(), `SELECT count(*) FROM `+table).Scan(&n); err != nil {
				t.Fatal(err)
			}
			out = append(out, fmt.Sprintf("%s %d", table, n))
		}
		return strings.Join(out, ", ")
	}
	return w
}

func (w *reconWorld) connector(merchantID string) string {
	w.t.Helper()
	now := time.Now().UTC().Truncate(time.Millisecond)
	c := connectors.Connector{ID: ids.New(connectors.Prefix), MerchantID: merchantID, Provider: connectors.ProviderSandbox, Name: "Sandbox",
		Enabled: true, Sandbox: &connectors.Sandbox{}, PayoutSchedule: ledger.ScheduleManual, CreatedAt: now, UpdatedAt: now}
	if _, err := w.s.CreateConnector(context.Background(), c, nil, idempotency.Response{}); err != nil {
		w.t.Fatal(err)
	}
	return c.ID
}

func (w *reconWorld) book(t ledger.Transaction) ledger.Transaction {
	w.t.Helper()
	if booked, err := w.s.Book(context.Background(), t); err != nil || !booked {
		w.t.Fatalf("book %s: %v, %v", t.Cause, booked, err)
	}
	return t
}

// balance is the connector's balance in USD, pending included.
func (w *reconWorld) balance() int64 {
	w.t.Helper()
	sums, err := w.s.Balance(context.Background(), w.m, w.conn, time.Now().Add(1000*time.Hour))
	if err != nil {
		w.t.Fatal(err)
	}
	var n int64
	for _, x := range sums {
		n += x.Available + x.Pending
	}
	return n
}

func strPtr(s string) *string { return &s }

func renderJSON[T any](v T) (idempotency.Response, error) {
	b, err := json.Marshal(v)
	return idempotency.Response{Status: 200, Body: b}, err
}

func (w *reconWorld) create(ctx context.Context, p reconcile.CreateParams, idem *idempotency.Request) (resource.Reconciliation, error) {
	w.t.Helper()
	res, err := w.svc.Create(ctx, w.m, p, idem, renderJSON[resource.Reconciliation])
	var r resource.Reconciliation
	if err == nil {
		if err := json.Unmarshal(res.Response.Body, &r); err != nil {
			w.t.Fatal(err)
		}
	}
	return r, err
}

func (w *reconWorld) exceptions(id string) map[string]reconcile.Exception {
	w.t.Helper()
	page, err := w.svc.Exceptions(context.Background(), w.m, id, reconcile.ExceptionFilter{}, listing.Params{Limit: listing.MaxLimit})
	if err != nil {
		w.t.Fatal(err)
	}
	out := map[string]reconcile.Exception{}
	for _, e := range page.Items {
		out[e.Kind] = e
	}
	if len(out) != len(page.Items) {
		w.t.Fatalf("%d exceptions of %d kinds", len(page.Items), len(out))
	}
	return out
}

func (w *reconWorld) resolve(ctx context.Context, e reconcile.Exception, action string, idem *idempotency.Request) (resource.ReconciliationException, bool, error) {
	w.t.Helper()
	note := "checked with the bank statement"
	res, err := w.svc.Resolve(ctx, w.m, e.ReconciliationID, e.ID, reconcile.ResolveParams{Action: &action, Note: &note}, idem,
		renderJSON[resource.ReconciliationException])
	var v resource.ReconciliationException
	if err == nil {
		if err := json.Unmarshal(res.Response.Body, &v); err != nil {
			w.t.Fatal(err)
		}
	}
	return v, res.Replayed, err
}

// A day of the books against a report with one exception of each kind:
// the counts, the exceptions and their sides, the pending fee the report
// settles booked once; then each exception resolved, adjust booking the
// difference once (audit-logged, idempotent, a second resolve refused)
// and accept nothing; a second run of the report finds only what was
// accepted.
func TestReconcileAndResolve(t *testing.T) {
	w := newReconWorld(t)
	ctx := context.Background()
	a := ledger.Account{MerchantID: w.m, ConnectorID: w.conn, Currency: "USD"}
	at := w.day.Add(10 * time.Hour)
	fee := ledger.DefaultSandboxFees
	w.book(ledger.Captured(a, "ch_ok", "sbx_ch_ok", 2000, fee.For(2000), at, at))
	amt := w.book(ledger.Captured(a, "ch_amt", "sbx_ch_amt", 5000, fee.For(5000), at, at))
	w.book(ledger.Captured(a, "ch_fee", "sbx_ch_fee", 1000, fee.For(1000), at, at))
	extra := w.book(ledger.Captured(a, "ch_extra", "sbx_ch_extra", 400, fee.For(400), at, at))
	w.book(ledger.Refunded(a, "re_ok", "sbx_re_ok", 500, at))
	w.book(ledger.PaidOut(a, "po_1", 1200, at))
	pending := w.book(ledger.Captured(a, "ch_pending", "psp_1", 3000, ledger.Fee{Pending: true}, at, at))
	// Another day's, and another connector's: not compared.
	w.book(ledger.Captured(a, "ch_tomorrow", "sbx_ch_tomorrow", 900, fee.For(900), at.Add(24*time.Hour), at.Add(24*time.Hour)))
	other := a
	other.ConnectorID = w.connector(w.m)
	w.book(ledger.Captured(other, "ch_elsewhere", "sbx_ch_unknown", 300, fee.For(300), at, at))

	d := w.day.Format(reconcile.DateLayout)
	report := reconcile.Header + "\n" + strings.Join([]string{
		"sbx_ch_ok,charge,USD,2000,88,1912," + d,
		"sbx_ch_amt,charge,USD,5100,178,4922," + d,
		"sbx_ch_fee,charge,USD,1000,61,939," + d,
		"sbx_ch_unknown,charge,USD,300,39,261," + d,
		"sbx_re_ok,refund,USD,-500,0,-500," + d,
		"po_1,payout,USD,-1200,0,-1200," + d,
		"psp_1,charge,USD,3000,117,2883," + d,
	}, "\n") + "\n"
	before := w.balance()
	r, err := w.create(auditCtx(w.m, "reconciliation.create"), reconcile.CreateParams{Connector: &w.conn, Report: &report}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if r.Status != reconcile.StatusOpen || r.Source != reconcile.SourceUpload || r.Lines != 7 || r.Matched != 4 || r.MissingInGateway != 1 ||
		r.MissingAtProvider != 1 || r.AmountMismatch != 1 || r.FeeMismatch != 1 || r.OpenExceptions != 4 || len(r.Dates) != 1 || r.Dates[0] != d {
		t.Fatalf("reconciliation: %+v", r)
	}
	// The pending fee was booked as its own transaction; nothing else.
	if got := w.balance(); got != before-117 {
		t.Errorf("balance %d after the run, want %d (the settled fee of psp_1 only)", got, before-117)
	}
	fees, err := w.s.ListTransactions(ctx, w.m, ledger.Filter{Source: "ch_pending", Type: ledger.TypeAdjustment}, listing.Params{Limit: 10})
	if err != nil || len(fees.Items) != 1 || fees.Items[0].Fee != 117 || fees.Items[0].Cause != ledger.FeeCause(pending.Source) {
		t.Fatalf("the settled fee: %+v, %v", fees.Items, err)
	}

	exc := w.exceptions(r.ID)
	amounts := func(gross, fee int64) *reconcile.Amounts {
		return &reconcile.Amounts{Gross: gross, Fee: fee, Net: gross - fee}
	}
	for kind, want := range map[string]reconcile.Exception{
		reconcile.KindAmountMismatch: {ProviderReference: "sbx_ch_amt", Line: 3, GatewayObject: "ch_amt", GatewayTransaction: amt.ID,
			Provider: amounts(5100, 178), Gateway: amounts(5000, 175)},
		reconcile.KindFeeMismatch:      {ProviderReference: "sbx_ch_fee", Line: 4, GatewayObject: "ch_fee", Provider: amounts(1000, 61), Gateway: amounts(1000, 59)},
		reconcile.KindMissingInGateway: {ProviderReference: "sbx_ch_unknown", Line: 5, Provider: amounts(300, 39)},
		reconcile.KindMissingAtProvider: {ProviderReference: "sbx_ch_extra", GatewayObject: "ch_extra", GatewayTransaction: extra.ID,
			Gateway: amounts(400, 42)},
	} {
		got := exc[kind]
		if got.ProviderReference != want.ProviderReference || got.Line != want.Line || got.GatewayObject != want.GatewayObject ||
			(want.GatewayTransaction != "" && got.GatewayTransaction != want.GatewayTransaction) ||
			fmt.Sprint(got.Provider) != fmt.Sprint(want.Provider) || fmt.Sprint(got.Gateway) != fmt.Sprint(want.Gateway) ||
			got.Status != reconcile.ExceptionOpen || got.Resolution != nil || got.Type != "charge" || got.Currency != "USD" {
			t.Errorf("%s: got %+v\nwant %+v", kind, got, want)
		}
	}
	// Listed in the report's order.
	page, _ := w.svc.Exceptions(ctx, w.m, r.ID, reconcile.ExceptionFilter{}, listing.Params{Limit: 10})
	var order []string
	for _, e := range page.Items {
		order = append(order, e.ProviderReference)
	}
	if got := strings.Join(order, " "); got != "sbx_ch_amt sbx_ch_fee sbx_ch_unknown sbx_ch_extra" {
		t.Errorf("order: %s", got)
	}

	// Adjust: the difference, once, in the audit log.
	key := idempotency.NewRequest(idempotency.ScopeServer, "resolve-1", []byte("fp"))
	actx := auditCtx(w.m, "reconciliation_exception.resolve")
	v, replayed, err := w.resolve(actx, exc[reconcile.KindAmountMismatch], reconcile.ActionAdjust, key)
	if err != nil || replayed || v.Status != reconcile.ExceptionResolved || v.Resolution == nil || v.Resolution.Action != "adjust" ||
		v.Resolution.BalanceTransaction == nil || v.Resolution.Note == nil {
		t.Fatalf("adjust: %+v, %v", v, err)
	}
	if got := w.balance(); got != before-117+97 {
		t.Errorf("balance after the adjustment %d, want %d (+100 gross, -3 fee)", got, before-117+97)
	}
	txn, err := w.s.TransactionByID(ctx, w.m, *v.Resolution.BalanceTransaction)
	if err != nil || txn.Type != ledger.TypeAdjustment || txn.Source != v.ID || txn.Amount != 100 || txn.Fee != 3 ||
		txn.Cause != ledger.AdjustmentCause(v.ID) || txn.ProviderReference != "sbx_ch_amt" {
		t.Errorf("the adjustment: %+v, %v", txn, err)
	}
	if got := auditEntries(t, w.s, w.m, audit.Filter{Action: "reconciliation_exception.resolve"}); len(got) != 1 {
		t.Errorf("audit entries of the resolution: %d, want 1", len(got))
	}
	again, replayed, err := w.resolve(auditCtx(w.m, "reconciliation_exception.resolve"), exc[reconcile.KindAmountMismatch], reconcile.ActionAdjust, key)
	if err != nil || !replayed || *again.Resolution.BalanceTransaction != *v.Resolution.BalanceTransaction {
		t.Errorf("the same request again: %+v, replayed %v, %v", again, replayed, err)
	}
	counts := w.counts()
	for _, action := range []string{reconcile.ActionAdjust, reconcile.ActionAccept} {
		_, _, err := w.resolve(auditCtx(w.m, "reconciliation_exception.resolve"), exc[reconcile.KindAmountMismatch], action, nil)
		if e, ok := apperr.As(err); !ok || e.Kind != apperr.KindConflict || e.Code != apperr.CodeInvalidState {
			t.Errorf("%s a resolved exception: %v, want invalid_state", action, err)
		}
	}
	if got := w.counts(); got != counts {
		t.Errorf("refused resolutions wrote: %s -> %s", counts, got)
	}

	// Accept books nothing.
	balance := w.balance()
	v, _, err = w.resolve(ctx, exc[reconcile.KindFeeMismatch], reconcile.ActionAccept, nil)
	if err != nil || v.Resolution.Action != "accept" || v.Resolution.BalanceTransaction != nil || w.balance() != balance {
		t.Errorf("accept: %+v, %v, balance %d -> %d", v, err, balance, w.balance())
	}
	if _, _, err := w.resolve(ctx, exc[reconcile.KindMissingInGateway], reconcile.ActionAdjust, nil); err != nil || w.balance() != balance+261 {
		t.Errorf("adjust the missing line: %v, balance %d, want %d", err, w.balance(), balance+261)
	}
	if _, _, err := w.resolve(ctx, exc[reconcile.KindMissingAtProvider], reconcile.ActionAccept, nil); err != nil || w.balance() != balance+261 {
		t.Errorf("accept the extra transaction: %v", err)
	}
	got, err := w.svc.Get(ctx, w.m, r.ID)
	if err != nil || got.Status() != reconcile.StatusResolved || got.OpenExceptions != 0 {
		t.Errorf("after every resolution: %+v, %v", got, err)
	}
	open, err := w.svc.Exceptions(ctx, w.m, r.ID, reconcile.ExceptionFilter{Status: reconcile.ExceptionOpen}, listing.Params{Limit: 10})
	if err != nil || len(open.Items) != 0 {
		t.Errorf("open exceptions left: %+v, %v", open.Items, err)
	}

	// The same report again: what was adjusted matches, what was accepted
	// is shown again, and the settled fee is not booked twice.
	balance = w.balance()
	r2, err := w.create(ctx, reconcile.CreateParams{Connector: &w.conn, Report: &report}, nil)
	if err != nil || r2.Matched != 6 || r2.FeeMismatch != 1 || r2.MissingAtProvider != 1 || r2.AmountMismatch != 0 || r2.MissingInGateway != 0 {
		t.Errorf("the report again: %+v, %v", r2, err)
	}
	if w.balance() != balance {
		t.Errorf("the second run moved the balance: %d -> %d", balance, w.balance())
	}
}

// A bad report, date or connector is parameter_invalid and stores
// nothing; another merchant's reconciliations are not found.
func TestReconcileRefusals(t *testing.T) {
	w := newReconWorld(t)
	ctx := context.Background()
	a := ledger.Account{MerchantID: w.m, ConnectorID: w.conn, Currency: "USD"}
	w.book(ledger.Captured(a, "ch_1", "sbx_ch_1", 2000, ledger.DefaultSandboxFees.For(2000), w.day, w.day))
	d := w.day.Format(reconcile.DateLayout)
	good := reconcile.Header + "\nsbx_ch_1,charge,USD,2000,88,1912," + d + "\n"
	for _, tc := range []struct {
		name  string
		p     reconcile.CreateParams
		code  string
		param string
	}{
		{"no connector", reconcile.CreateParams{Report: &good}, apperr.CodeParameterMissing, "connector"},
		{"no report, no date", reconcile.CreateParams{Connector: &w.conn}, apperr.CodeParameterMissing, "report"},
		{"a bad header", reconcile.CreateParams{Connector: &w.conn, Report: strPtr("id,amount\n1,2\n")}, apperr.CodeParameterInvalid, "report"},
		{"a bad amount", reconcile.CreateParams{Connector: &w.conn, Report: strPtr(strings.Replace(good, "2000,88", "20.00,88", 1))}, apperr.CodeParameterInvalid, "report"},
		{"a bad date in the report", reconcile.CreateParams{Connector: &w.conn, Report: strPtr(strings.Replace(good, d, "yesterday", 1))}, apperr.CodeParameterInvalid, "report"},
		{"too large", reconcile.CreateParams{Connector: &w.conn, Report: strPtr(good + strings.Repeat("x", reconcile.MaxReportBytes))}, apperr.CodeParameterInvalid, "report"},
		{"a bad date", reconcile.CreateParams{Connector: &w.conn, Date: strPtr("2026-13-01")}, apperr.CodeParameterInvalid, "date"},
		{"a day to come", reconcile.CreateParams{Connector: &w.conn, Date: strPtr(time.Now().UTC().Add(48 * time.Hour).Format(reconcile.DateLayout))}, apperr.CodeParameterInvalid, "date"},
		{"a report the provider cannot send", reconcile.CreateParams{Connector: &w.conn, Date: &d}, apperr.CodeParameterInvalid, "date"},
		{"a made-up connector", reconcile.CreateParams{Connector: strPtr("conn_x"), Report: &good}, apperr.CodeParameterInvalid, "connector"},
		{"another merchant's connector", reconcile.CreateParams{Connector: strPtr(w.connector(newMerchant(t, w.s, "other-"+ids.NewUUID()+"@example.com").ID)), Report: &good}, apperr.CodeParameterInvalid, "connector"},
	} {
		counts := w.counts()
		_, err := w.create(auditCtx(w.m, "reconciliation.create"), tc.p, idempotency.NewRequest(idempotency.ScopeServer, "k-"+tc.name, []byte("fp")))
		e, ok := apperr.As(err)
		if !ok || e.Kind != apperr.KindInvalid || e.Code != tc.code || e.Param != tc.param {
			t.Errorf("%s: %v, want %s on %s", tc.name, err, tc.code, tc.param)
		}
		if got := w.counts(); got != counts {
			t.Errorf("%s stored something: %s -> %s", tc.name, counts, got)
		}
	}
	w.fetch = func(connectors.Connector, time.Time, time.Time) ([]providers.SettlementLine, error) {
		return nil, fmt.Errorf("%w: down", providers.ErrUnavailable)
	}
	if _, err := w.create(ctx, reconcile.CreateParams{Connector: &w.conn, Date: &d}, nil); apperr.KindOf(err) != apperr.KindUnavailable {
		t.Errorf("a provider that does not answer: %v", err)
	}

	// Fetched from the provider for the day: the same lines reconcile.
	w.fetch = func(c connectors.Connector, from, to time.Time) ([]providers.SettlementLine, error) {
		if c.ID != w.conn || !from.Equal(w.day) || !to.Equal(w.day.Add(24*time.Hour)) {
			return nil, errors.New("asked for another report")
		}
		return []providers.SettlementLine{{Reference: "sbx_ch_1", Type: "charge", Currency: "USD", Gross: 2000, Fee: 88, Net: 1912,
			AvailableOn: w.day.Add(time.Hour)}}, nil
	}
	r, err := w.create(ctx, reconcile.CreateParams{Connector: &w.conn, Date: &d}, nil)
	if err != nil || r.Status != reconcile.StatusReconciled || r.Source != reconcile.SourceProvider || r.Matched != 1 || r.Lines != 1 {
		t.Fatalf("fetched: %+v, %v", r, err)
	}
	csv, err := w.svc.SettlementReport(ctx, w.m, w.conn, d)
	if err != nil || string(csv) != reconcile.Header+"\nsbx_ch_1,charge,USD,2000,88,1912,"+d+"\n" {
		t.Errorf("the report as CSV: %q, %v", csv, err)
	}

	// Another merchant sees none of it.
	other := newMerchant(t, w.s, "stranger-"+ids.NewUUID()+"@example.com").ID
	if _, err := w.svc.Get(ctx, other, r.ID); apperr.KindOf(err) != apperr.KindNotFound {
		t.Errorf("another merchant's get: %v", err)
	}
	if _, err := w.svc.Exceptions(ctx, other, r.ID, reconcile.ExceptionFilter{}, listing.Params{Limit: 10}); apperr.KindOf(err) != apperr.KindNotFound {
		t.Errorf("another merchant's exceptions: %v", err)
	}
	if page, err := w.svc.List(ctx, other, reconcile.Filter{}, listing.Params{Limit: 10}); err != nil || len(page.Items) != 0 {
		t.Errorf("another merchant's list: %+v, %v", page.Items, err)
	}
	if _, err := w.svc.SettlementReport(ctx, other, w.conn, d); apperr.KindOf(err) != apperr.KindNotFound {
		t.Errorf("another merchant's settlement report: %v", err)
	}
	if _, err := w.svc.Resolve(ctx, other, r.ID, ids.New(reconcile.PrefixException), reconcile.ResolveParams{Action: strPtr("accept")}, nil,
		renderJSON[resource.ReconciliationException]); apperr.KindOf(err) != apperr.KindNotFound {
		t.Errorf("another merchant's resolution: %v", err)
	}
}

// A reconciliation of a connector whose provider pays out on its own
// (Adyen, Stripe) imports the payouts its report settles: a paid one and
// one returned the same day, each once, so that they match; a second run
// of the same report imports nothing more and finds nothing.
func TestReconcileImportsTheProvidersPayouts(t *testing.T) {
	w := newReconWorld(t)
	ctx := context.Background()
	w.svc.WithPayouts(ledger.NewImporter(w.s, nopQueue{}, time.Now, slog.New(slog.NewTextHandler(io.Discard, nil))))
	now := time.Now().UTC().Truncate(time.Millisecond)
	adyen := connectors.Connector{ID: ids.New(connectors.Prefix), MerchantID: w.m, Provider: connectors.ProviderAdyen, Name: "Adyen",
		Enabled: true, Sealed: []byte("sealed"), CreatedAt: now, UpdatedAt: now}
	if _, err := w.s.CreateConnector(ctx, adyen, nil, idempotency.Response{}); err != nil {
		t.Fatal(err)
	}
	day := w.day.Format("2006-01-02")
	report := reconcile.Header + "\n" +
		"PAYOUT-1,payout,EUR,-5000,0,-5000," + day + "\n" +
		"PAYOUT-2,payout,EUR,-700,0,-700," + day + "\n" +
		"PAYOUT-2,payout,EUR,700,0,700," + day + "\n"
	for run := 1; run <= 2; run++ {
		r, err := w.create(ctx, reconcile.CreateParams{Connector: &adyen.ID, Report: &report}, nil)
		if err != nil {
			t.Fatalf("run %d: %v", run, err)
		}
		if r.Matched == 0 || r.MissingInGateway+r.MissingAtProvider+r.AmountMismatch+r.FeeMismatch != 0 {
			t.Fatalf("run %d: %+v, want every line matched", run, r)
		}
	}
	for ref, want := range map[string]string{"PAYOUT-1": ledger.PayoutPaid, "PAYOUT-2": ledger.PayoutFailed} {
		p, found, err := w.s.PayoutByReference(ctx, adyen.ID, ref)
		if err != nil || !found || p.Status != want {
			t.Fatalf("payout %s: %+v (found %v, %v), want %s", ref, p, found, err, want)
		}
	}
	sums, err := w.s.Balance(ctx, w.m, adyen.ID, now.Add(time.Hour))
	if err != nil || len(sums) != 1 || sums[0].Available != -5000 {
		t.Fatalf("the Adyen connector's balance: %+v, %v; want -5000 (the paid payout; the returned one nets out)", sums, err)
	}
}

// The open exceptions across a merchant's runs: the newest run's first,
// each run's in its report's order, without the resolved ones, the runs
// found reconciled or another merchant's; paged like every list.
func TestOpenExceptionsAcrossRuns(t *testing.T) {
	w := newReconWorld(t)
	ctx := context.Background()
	d := w.day.Format(reconcile.DateLayout)
	upload := func(m, conn string, refs ...string) string {
		t.Helper()
		report := reconcile.Header + "\n"
		for _, ref := range refs {
			report += ref + ",charge,USD,1000,59,941," + d + "\n"
		}
		res, err := w.svc.Create(ctx, m, reconcile.CreateParams{Connector: &conn, Report: &report}, nil, renderJSON[resource.Reconciliation])
		if err != nil {
			t.Fatal(err)
		}
		var r resource.Reconciliation
		if err := json.Unmarshal(res.Response.Body, &r); err != nil {
			t.Fatal(err)
		}
		return r.ID
	}
	first := upload(w.m, w.conn, "sbx_ch_a", "sbx_ch_b")
	stranger := newMerchant(t, w.s, "stranger-"+ids.NewUUID()+"@example.com").ID
	upload(stranger, w.connector(stranger), "sbx_ch_theirs")
	upload(w.m, w.conn, "sbx_ch_c", "sbx_ch_d", "sbx_ch_e")
	firsts, err := w.svc.Exceptions(ctx, w.m, first, reconcile.ExceptionFilter{}, listing.Params{Limit: 10})
	if err != nil || len(firsts.Items) != 2 || firsts.Items[0].ProviderReference != "sbx_ch_a" {
		t.Fatalf("the first run's exceptions: %+v, %v", firsts.Items, err)
	}

	refs := func(p listing.Params) ([]string, bool) {
		t.Helper()
		page, err := w.svc.OpenExceptions(ctx, w.m, p)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, e := range page.Items {
			if e.Status != reconcile.ExceptionOpen || e.MerchantID != w.m {
				t.Errorf("listed %+v", e)
			}
			out = append(out, e.ProviderReference)
		}
		return out, page.HasMore
	}
	if got, _ := refs(listing.Params{Limit: 10}); strings.Join(got, " ") != "sbx_ch_c sbx_ch_d sbx_ch_e sbx_ch_a sbx_ch_b" {
		t.Errorf("open exceptions: %v, want the second run's, then the first's, each in its report's order", got)
	}
	if _, _, err := w.resolve(ctx, firsts.Items[0], reconcile.ActionAccept, nil); err != nil {
		t.Fatal(err)
	}
	if got, _ := refs(listing.Params{Limit: 10}); strings.Join(got, " ") != "sbx_ch_c sbx_ch_d sbx_ch_e sbx_ch_b" {
		t.Errorf("after accepting sbx_ch_a: %v", got)
	}
	page, _ := w.svc.OpenExceptions(ctx, w.m, listing.Params{Limit: 2})
	if len(page.Items) != 2 || !page.HasMore {
		t.Fatalf("a page of 2: %+v", page)
	}
	if got, more := refs(listing.Params{Limit: 2, StartingAfter: page.Items[1].ID}); strings.Join(got, " ") != "sbx_ch_e sbx_ch_b" || more {
		t.Errorf("the next page: %v (more: %v)", got, more)
	}
	// A run that found nothing has nothing open.
	w.book(ledger.Captured(ledger.Account{MerchantID: w.m, ConnectorID: w.conn, Currency: "USD"}, "ch_f", "sbx_ch_f", 1000,
		ledger.DefaultSandboxFees.For(1000), w.day, w.day))
	if r, err := w.svc.Get(ctx, w.m, upload(w.m, w.conn, "sbx_ch_f")); err != nil || r.Status() != reconcile.StatusReconciled {
		t.Fatalf("a report that matches: %+v, %v", r, err)
	}
	if got, _ := refs(listing.Params{Limit: 10}); strings.Join(got, " ") != "sbx_ch_c sbx_ch_d sbx_ch_e sbx_ch_b" {
		t.Errorf("after a run that found nothing: %v", got)
	}
}
