package httpapi

import (
	"context"
	"encoding/json"
	"io"
	"net/url"
	"strconv"
	"strings"

	"github.com/gofiber/fiber/v2"

	"github.com/gatehouse-pay/gatehouse/internal/apperr"
	"github.com/gatehouse-pay/gatehouse/internal/audit"
	"github.com/gatehouse-pay/gatehouse/internal/authz"
	"github.com/gatehouse-pay/gatehouse/internal/connectors"
	"github.com/gatehouse-pay/gatehouse/internal/ledger"
	"github.com/gatehouse-pay/gatehouse/internal/listing"
	"github.com/gatehouse-pay/gatehouse/internal/money"
	"github.com/gatehouse-pay/gatehouse/internal/reconcile"
	"github.com/gatehouse-pay/gatehouse/internal/resource"
)

// The dashboard's reconciliation (docs/ledger.md, "The dashboard"): the
// runs with their counts, the forms that start one (the provider's report
// of a day, or an uploaded CSV), the open exceptions of every run, and a
// run's page with its exceptions, both sides of each, and the forms that
// resolve them, through the same reconcile.Service as /v1/reconciliations.

// Sources of the form that starts a run: the provider's report of a day,
// or an upload.
const (
	reconcileFromProvider = "provider"
	reconcileFromUpload   = "upload"
)

// reportFileField is the upload form's file input; its textarea is
// "report", the API's field.
const reportFileField = "report_file"

// resolveAction is the audit action of resolving an exception, the API's
// and the dashboard's.
const resolveAction = "reconciliation_exception.resolve"

// exceptionKinds name the kinds of exception for people.
var exceptionKinds = map[string]string{
	reconcile.KindMissingInGateway:  "Missing in Gatehouse",
	reconcile.KindMissingAtProvider: "Missing at the provider",
	reconcile.KindAmountMismatch:    "Amount differs",
	reconcile.KindFeeMismatch:       "Fee differs",
}

// reconcileForm is what the form that starts a run was sent with, to show
// it again.
type reconcileForm struct {
	Source    string
	Connector string
	Date      string
	// Report is the uploaded text, shown again in the textarea when it was
	// refused (a file's too, so the line the message names can be read).
	Report string
}

type reconciliationsView struct {
	Runs  []reconcile.Reconciliation
	Pager *pager
	// Open are the newest of the merchant's open exceptions, of every run;
	// MoreOpen is set when there are more.
	Open     []reconcile.Exception
	MoreOpen bool
	// Names are the merchant's live connectors by id; Fetchable those whose
	// provider's report Gatehouse fetches (sandbox, Stripe), All every one,
	// for an upload.
	Names     map[string]*connectors.Connector
	Fetchable []connectors.Connector
	All       []connectors.Connector
	Form      reconcileForm
	// Today is the last day the provider's report may be asked for (UTC).
	Today     string
	MaxReport int
}

// Span is the days a run compared, as people read them.
func (reconciliationsView) Span(r reconcile.Reconciliation) string { return daySpan(r) }

// daySpan is "2026-11-27", or "2026-11-01 to 2026-11-27 (3 days)" when a
// run compared several.
func daySpan(r reconcile.Reconciliation) string {
	if len(r.Dates) == 0 {
		return ""
	}
	first, last := r.Dates[0].Format(reconcile.DateLayout), r.Dates[len(r.Dates)-1].Format(reconcile.DateLayout)
	if len(r.Dates) == 1 {
		return first
	}
	return first + " to " + last + " (" + plural(len(r.Dates), "day") + ")"
}

func plural(n int, noun string) string {
	s := strconv.Itoa(n) + " " + noun
	if n != 1 {
		s += "s"
	}
	return s
}

func (s *server) reconciliationsPage(c *fiber.Ctx) error {
	return s.renderReconciliations(c, fiber.StatusOK, reconcileForm{Source: reconcileFromProvider}, nil)
}

// renderReconciliations is the reconciliation page; a form that was
// refused comes back with its values and why.
func (s *server) renderReconciliations(c *fiber.Ctx, status int, f reconcileForm, fail *apperr.Error) error {
	ctx, merchant := c.UserContext(), principal(c).MerchantID
	today := reconcile.Day(s.Ledger.Now())
	v := reconciliationsView{Form: f, Today: today.Format(reconcile.DateLayout), MaxReport: reconcile.MaxReportBytes >> 10}
	if v.Form.Date == "" {
		// Yesterday: today's report is not complete until it ends.
		v.Form.Date = today.AddDate(0, 0, -1).Format(reconcile.DateLayout)
	}
	var err error
	if v.Pager, err = newPager(c, dashboardPath+"/reconciliations", reconcile.ValidID, nil); err != nil {
		return err
	}
	if c.Method() != fiber.MethodGet {
		v.Pager.params = listing.Params{Limit: dashboardPageSize}
	}
	runs, err := s.Reconcile.List(ctx, merchant, reconcile.Filter{}, v.Pager.params)
	if err != nil {
		return err
	}
	v.Runs = pageItems(v.Pager, runs, func(r reconcile.Reconciliation) string { return r.ID })
	open, err := s.Reconcile.OpenExceptions(ctx, merchant, listing.Params{Limit: dashboardPageSize})
	if err != nil {
		return err
	}
	v.Open, v.MoreOpen = open.Items, open.HasMore
	all, err := s.allConnectors(ctx, merchant)
	if err != nil {
		return err
	}
	v.Names = map[string]*connectors.Connector{}
	for i, cn := range all {
		v.Names[cn.ID] = &all[i]
		v.All = append(v.All, cn)
		if cn.Provider == connectors.ProviderSandbox || cn.Provider == connectors.ProviderStripe {
			v.Fetchable = append(v.Fetchable, cn)
		}
	}
	view, err := s.signedIn(c, "reconciliations", "Reconciliation")
	if err != nil {
		return err
	}
	view.Data = v
	if c.Method() != fiber.MethodGet {
		view.Canonical = dashboardPath + "/reconciliations" // the answer to the form
	}
	if fail != nil {
		view.Error, view.ErrorCode = fail.Message, fail.Code
	}
	return s.render(c, status, "reconciliations", view)
}

// dashCreateReconciliation starts a run, as POST /v1/reconciliations, with
// the form's idempotency key: for a connector and a day (the provider's
// report), or of an uploaded report (a CSV file, or its text). A run the
// service refuses (a bad report, day or connector) shows the page again
// with the reason and the form as it was sent.
func (s *server) dashCreateReconciliation(c *fiber.Ctx) error {
	f := reconcileForm{Source: form(c, "source"), Connector: form(c, "connector"), Date: form(c, "date")}
	refused := func(err error) error {
		ae, ok := apperr.As(err)
		if !ok || ae.Kind != apperr.KindInvalid {
			return err
		}
		return s.renderReconciliations(c, statusOf[ae.Kind], f, ae)
	}
	p := reconcile.CreateParams{Connector: &f.Connector}
	switch f.Source {
	case reconcileFromProvider:
		if f.Date == "" {
			return refused(apperr.Invalid("date", "Choose the day to reconcile."))
		}
		p.Date = &f.Date
	case reconcileFromUpload:
		f.Date = ""
		report, err := uploadedReport(c)
		if err != nil {
			return refused(err)
		}
		if len(report) <= reconcile.MaxReportBytes {
			f.Report = report
		}
		if strings.TrimSpace(report) == "" {
			return refused(apperr.Invalid("report", "Choose the settlement report's CSV file, or paste its text."))
		}
		p.Report = &report
	default:
		return refused(apperr.Invalid("source", "Choose how to reconcile: the provider's report of a day, or a report you upload."))
	}
	if f.Connector == "" {
		return refused(apperr.Invalid("connector", "Choose the connector to reconcile."))
	}
	report := ""
	if p.Report != nil {
		report = *p.Report
	}
	idem, err := s.formIdem(c, f.Source, f.Connector, f.Date, report)
	if err != nil {
		return err
	}
	res, err := s.Reconcile.Create(c.UserContext(), principal(c).MerchantID, p, idem, renderAs[resource.Reconciliation](fiber.StatusCreated))
	if err != nil {
		return refused(err)
	}
	var made resource.Reconciliation
	if err := json.Unmarshal(res.Response.Body, &made); err != nil {
		return apperr.Internal(err)
	}
	return redirectNotice(c, dashboardPath+"/reconciliations/"+made.ID, doneOr(res.Replayed, "reconciled"))
}

// uploadedReport is the upload form's report: the chosen file, else the
// text pasted in the textarea.
func uploadedReport(c *fiber.Ctx) (string, error) {
	fh, err := c.FormFile(reportFileField)
	if err != nil || fh.Size == 0 {
		return strings.Clone(c.FormValue("report")), nil
	}
	if fh.Size > reconcile.MaxReportBytes {
		return "", apperr.Invalid("report", "The file is %d KiB; at most %d KiB are taken: split the report by day.",
			(fh.Size+1023)>>10, reconcile.MaxReportBytes>>10)
	}
	file, err := fh.Open()
	if err != nil {
		return "", apperr.Internal(err)
	}
	defer file.Close()
	b, err := io.ReadAll(io.LimitReader(file, reconcile.MaxReportBytes+1))
	if err != nil {
		return "", apperr.Internal(err)
	}
	return string(b), nil
}

// exceptionRow is an exception as its run's page shows it.
type exceptionRow struct {
	reconcile.Exception
	// Link is the dashboard's page of the gateway's object (a charge, or a
	// refund's charge, or a payout), "" when there is none.
	Link string
	// Adjustment is the balance transaction an adjustment booked.
	Adjustment *ledger.Transaction
	// By is who resolved it, for a member who may read the audit log.
	By string
}

// Diff is what the report says less what the books hold, in gross, fee
// and net: what adjusting books.
func (e exceptionRow) Diff() reconcile.Amounts {
	gross, fee := e.Difference()
	return reconcile.Amounts{Gross: gross, Fee: fee, Net: gross - fee}
}

// resolveForm is a resolution that was refused, to show again.
type resolveForm struct {
	Exception string
	Note      string
}

type reconciliationView struct {
	Run reconcile.Reconciliation
	// Connector is the run's, nil once deleted.
	Connector  *connectors.Connector
	Exceptions []exceptionRow
	Pager      *pager
	Statuses   []string
	Status     string
	// CanResolve: the member may write the balance.
	CanResolve bool
	MaxNote    int
	Form       resolveForm
}

// Span is the days the run compared.
func (v reconciliationView) Span() string { return daySpan(v.Run) }

func (s *server) reconciliationPage(c *fiber.Ctx) error {
	return s.renderReconciliation(c, fiber.StatusOK, id(c), resolveForm{}, nil)
}

// renderReconciliation is a run's page: its counts and its exceptions (a
// page of them, filtered by status), each resolved one with how, by whom
// and what it booked. A resolution that was refused comes back with its
// note and why.
func (s *server) renderReconciliation(c *fiber.Ctx, status int, runID string, f resolveForm, fail *apperr.Error) error {
	ctx, merchant := c.UserContext(), principal(c).MerchantID
	run, err := s.Reconcile.Get(ctx, merchant, runID)
	if err != nil {
		return err
	}
	v := reconciliationView{Run: run, Statuses: reconcile.ExceptionStatuses, MaxNote: reconcile.MaxNoteLen, Form: f}
	if c.Method() == fiber.MethodGet {
		v.Status = strings.Clone(c.Query("status"))
	}
	base := dashboardPath + "/reconciliations/" + run.ID
	if v.Pager, err = newPager(c, base, reconcile.ValidExceptionID, url.Values{"status": {v.Status}}); err != nil {
		return err
	}
	if c.Method() != fiber.MethodGet {
		v.Pager.params = listing.Params{Limit: dashboardPageSize}
	}
	page, err := s.Reconcile.Exceptions(ctx, merchant, run.ID, reconcile.ExceptionFilter{Status: v.Status}, v.Pager.params)
	if err != nil {
		return err
	}
	view, err := s.signedIn(c, "reconciliations", "Reconciliation "+run.ID)
	if err != nil {
		return err
	}
	v.CanResolve = view.Can(string(authz.Balance), "write")
	who := s.resolvers(ctx, merchant, view)
	for _, e := range pageItems(v.Pager, page, func(e reconcile.Exception) string { return e.ID }) {
		row, err := s.exceptionRow(ctx, merchant, e, who)
		if err != nil {
			return err
		}
		v.Exceptions = append(v.Exceptions, row)
	}
	if cn, err := s.Connectors.Get(ctx, merchant, run.ConnectorID); err == nil {
		v.Connector = &cn
	} else if apperr.KindOf(err) != apperr.KindNotFound {
		return err
	}
	view.Data = v
	if c.Method() != fiber.MethodGet {
		view.Canonical = base
	}
	if fail != nil {
		view.Error, view.ErrorCode = fail.Message, fail.Code
	}
	return s.render(c, status, "reconciliation", view)
}

// resolvers returns who resolved an exception, from the audit log, for a
// member who may read it ("" otherwise, or when the log has no entry).
func (s *server) resolvers(ctx context.Context, merchantID string, v view) func(exceptionID string) (string, error) {
	if s.AuditLog == nil || !v.Can(string(authz.AuditLog), "read") {
		return func(string) (string, error) { return "", nil }
	}
	members := v.Can(string(authz.Members), "read")
	emails := map[string]string{} // a page's resolutions are mostly a few people's
	return func(exceptionID string) (string, error) {
		page, err := s.AuditLog.ListAudit(ctx, merchantID, audit.Filter{Action: resolveAction, ObjectID: exceptionID}, listing.Params{Limit: 1})
		if err != nil || len(page.Items) == 0 {
			return "", err
		}
		e := page.Items[0]
		switch {
		case e.ActorType == audit.ActorAPIKey:
			return "API key " + e.ActorID, nil
		case e.ActorType != audit.ActorMember || !members:
			return e.ActorID, nil
		}
		if email, ok := emails[e.ActorID]; ok {
			return email, nil
		}
		m, err := s.Members.Get(ctx, merchantID, e.ActorID)
		switch {
		case err == nil:
			emails[e.ActorID] = m.Email
		case apperr.KindOf(err) == apperr.KindNotFound:
			emails[e.ActorID] = "a member since removed (" + e.ActorID + ")"
		default:
			return "", err
		}
		return emails[e.ActorID], nil
	}
}

// exceptionRow is e with the page of its gateway object, the adjustment
// it booked and who resolved it.
func (s *server) exceptionRow(ctx context.Context, merchantID string, e reconcile.Exception, who func(string) (string, error)) (exceptionRow, error) {
	row := exceptionRow{Exception: e}
	switch obj := e.GatewayObject; {
	case obj == "":
	case e.Type == ledger.TypeCharge:
		row.Link = dashboardPath + "/charges/" + obj
	case e.Type == ledger.TypePayout:
		row.Link = dashboardPath + "/payouts/" + obj
	case e.Type == ledger.TypeRefund:
		r, err := s.Refunds.Get(ctx, merchantID, obj)
		if err == nil {
			row.Link = dashboardPath + "/charges/" + r.ChargeID
		} else if apperr.KindOf(err) != apperr.KindNotFound {
			return row, err
		}
	}
	res := e.Resolution
	if res == nil {
		return row, nil
	}
	if res.TransactionID != "" {
		t, err := s.Ledger.Transaction(ctx, merchantID, res.TransactionID)
		if err == nil {
			row.Adjustment = &t
		} else if apperr.KindOf(err) != apperr.KindNotFound {
			return row, err
		}
	}
	var err error
	row.By, err = who(e.ID)
	return row, err
}

// dashResolveException resolves an exception, as POST
// /v1/reconciliations/:id/exceptions/:exc/resolve, with the form's
// idempotency key: adjust or accept, with an optional note. One the
// service refuses (resolved already, a note too long) shows the run again
// with the reason.
func (s *server) dashResolveException(c *fiber.Ctx) error {
	runID, excID := id(c), strings.Clone(c.Params("exc"))
	action, note := form(c, "action"), form(c, "note")
	idem, err := s.formIdem(c, action, note)
	if err != nil {
		return err
	}
	p := reconcile.ResolveParams{Action: optional(action), Note: optional(note)}
	res, err := s.Reconcile.Resolve(c.UserContext(), principal(c).MerchantID, runID, excID, p, idem,
		renderAs[resource.ReconciliationException](fiber.StatusOK))
	if err != nil {
		ae, ok := apperr.As(err)
		if !ok || ae.Kind != apperr.KindInvalid && ae.Code != apperr.CodeInvalidState {
			return err
		}
		return s.renderReconciliation(c, statusOf[ae.Kind], runID, resolveForm{Exception: excID, Note: note}, ae)
	}
	notice := "accepted"
	if action == reconcile.ActionAdjust {
		notice = "adjusted"
	}
	dashboardHeaders(c)
	return c.Redirect(dashboardPath+"/reconciliations/"+runID+"?notice="+doneOr(res.Replayed, notice)+"#"+excID, fiber.StatusSeeOther)
}

// signedMoney is an amount with its sign, for a difference: "+1.00 USD",
// "-0.05 USD", "0.00 USD".
func signedMoney(amount int64, currency string) string {
	if amount > 0 {
		return "+" + money.Format(amount, currency)
	}
	return money.Format(amount, currency)
}
