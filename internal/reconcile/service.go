package reconcile

import (
	"context"
	"errors"
	"slices"
	"time"

	"github.com/gatehouse-pay/gatehouse/internal/apperr"
	"github.com/gatehouse-pay/gatehouse/internal/connectors"
	"github.com/gatehouse-pay/gatehouse/internal/idempotency"
	"github.com/gatehouse-pay/gatehouse/internal/ids"
	"github.com/gatehouse-pay/gatehouse/internal/ledger"
	"github.com/gatehouse-pay/gatehouse/internal/listing"
	"github.com/gatehouse-pay/gatehouse/internal/providers"
	"github.com/gatehouse-pay/gatehouse/internal/resource"
)

// Filter narrows a list of reconciliations.
type Filter struct {
	ConnectorID string
}

// ExceptionFilter narrows a list of a reconciliation's exceptions.
type ExceptionFilter struct {
	Status string
	Kind   string
}

// Store keeps reconciliations and reads the books they compare.
type Store interface {
	// Movements returns the connector's balance transactions that carry a
	// provider reference and became available in [from, to), adjustments
	// aside.
	Movements(ctx context.Context, merchantID, connectorID string, from, to time.Time) ([]Movement, error)
	// Adjustments returns the connector's adjustments of the references,
	// whenever booked, each with the type of the exception it resolved.
	Adjustments(ctx context.Context, merchantID, connectorID string, references []string) ([]Movement, error)
	// CreateReconciliation claims the key (a replay answers the stored
	// response and writes nothing), then writes the reconciliation, its
	// exceptions, the fees it settles (a fee whose cause was booked
	// before writes nothing) and the response, in one transaction.
	CreateReconciliation(ctx context.Context, idem *idempotency.Request, r Reconciliation, exceptions []Exception, fees []ledger.Transaction, response idempotency.Response) (*idempotency.Response, error)
	ReconciliationByID(ctx context.Context, merchantID, id string) (Reconciliation, error)
	ListReconciliations(ctx context.Context, merchantID string, f Filter, p listing.Params) (listing.Page[Reconciliation], error)
	// ListExceptions returns a page of the reconciliation's exceptions;
	// NotFound when the merchant has no such reconciliation.
	ListExceptions(ctx context.Context, merchantID, reconciliationID string, f ExceptionFilter, p listing.Params) (listing.Page[Exception], error)
	// ListOpenExceptions returns a page of the merchant's open exceptions
	// of every reconciliation, the newest run's first.
	ListOpenExceptions(ctx context.Context, merchantID string, p listing.Params) (listing.Page[Exception], error)
	// ResolveException claims the key, then, with the exception locked,
	// calls plan with it and writes what plan returns: the exception as
	// resolved, the adjustment (nil for none) and the response; the
	// reconciliation counts one open exception less. NotFound for an
	// exception the merchant's reconciliation does not have.
	ResolveException(ctx context.Context, idem *idempotency.Request, merchantID, reconciliationID, exceptionID string, plan func(Exception) (Resolved, error)) (*idempotency.Response, error)
}

// Resolved is what resolving an exception writes.
type Resolved struct {
	Exception  Exception
	Adjustment *ledger.Transaction
	Response   idempotency.Response
}

// Fetch asks a connector's provider for what it settled in [from, to): the
// sandbox's own books, Stripe's balance transactions. An error wrapping
// ErrNoReport says the provider's report cannot be fetched (it must be
// uploaded); one wrapping providers.ErrUnavailable that the provider did
// not answer; one wrapping ErrRefused that it refused the request.
type Fetch func(ctx context.Context, c connectors.Connector, from, to time.Time) ([]providers.SettlementLine, error)

// Errors of a Fetch.
var (
	ErrNoReport = errors.New("reconcile: the provider's report cannot be fetched")
	ErrRefused  = errors.New("reconcile: the provider refused to report")
)

// Connectors finds one of a merchant's connectors.
type Connectors func(ctx context.Context, merchantID, id string) (connectors.Connector, error)

// PayoutImporter books a payout its provider reports (ledger.Importer).
type PayoutImporter interface {
	Import(ctx context.Context, merchantID, connectorID string, r ledger.Reported) (bool, error)
}

// Service is the API side of reconciliation.
type Service struct {
	store      Store
	connectors Connectors
	fetch      Fetch
	now        func() time.Time
	payouts    PayoutImporter
}

// WithPayouts makes a reconciliation of a Stripe or Adyen connector import
// the payouts its report settles that the books do not hold yet (the
// provider pays out on its own; its report is its record of it), before it
// compares them.
func (s *Service) WithPayouts(im PayoutImporter) *Service {
	s.payouts = im
	return s
}

// importPayouts books the payouts of rep, a report of a connector of a
// provider that pays out on its own: each reference's payout line (gross
// negative) as paid, or as failed when a line of the same reference
// returns it. The books take each once, whatever is imported again.
func (s *Service) importPayouts(ctx context.Context, merchantID string, conn connectors.Connector, rep Report) error {
	if s.payouts == nil || conn.Provider == connectors.ProviderSandbox {
		return nil
	}
	type payout struct {
		r        ledger.Reported
		returned bool
	}
	byRef := map[string]*payout{}
	var order []string
	for _, l := range rep.Lines {
		if l.Type != providers.SettlementPayout {
			continue
		}
		p := byRef[l.Reference]
		if p == nil {
			p = &payout{r: ledger.Reported{Reference: l.Reference, Currency: l.Currency, Status: ledger.PayoutPaid, Automatic: true,
				ArrivalDate: l.AvailableOn, BookedOn: l.AvailableOn}}
			byRef[l.Reference] = p
			order = append(order, l.Reference)
		}
		if l.Gross < 0 {
			p.r.Amount = -l.Gross
		} else {
			p.returned = true
		}
	}
	for _, ref := range order {
		p := byRef[ref]
		if p.r.Amount <= 0 {
			continue // only its return: nothing to book it by
		}
		if p.returned {
			p.r.Status = ledger.PayoutFailed
		}
		if _, err := s.payouts.Import(ctx, merchantID, conn.ID, p.r); err != nil && !errors.Is(err, ledger.ErrBadReport) {
			return err
		}
	}
	return nil
}

// NewService returns the service.
func NewService(store Store, conns Connectors, fetch Fetch, now func() time.Time) *Service {
	return &Service{store: store, connectors: conns, fetch: fetch, now: now}
}

// CreateParams is the body of POST /v1/reconciliations.
type CreateParams struct {
	Connector *string `json:"connector"`
	Report    *string `json:"report"`
	Date      *string `json:"date"`
}

// ResolveParams is the body of POST
// /v1/reconciliations/:id/exceptions/:exc/resolve.
type ResolveParams struct {
	Action *string `json:"action"`
	Note   *string `json:"note"`
}

// MaxNoteLen bounds a resolution's note.
const MaxNoteLen = 500

// Result is a created or replayed answer.
type Result struct {
	Response idempotency.Response
	Replayed bool
}

// connector finds the merchant's connector named by a parameter.
func (s *Service) connector(ctx context.Context, merchantID, id, param string) (connectors.Connector, error) {
	if !connectors.ValidID(id) {
		return connectors.Connector{}, apperr.Invalid(param, "No such connector: %s.", id)
	}
	c, err := s.connectors(ctx, merchantID, id)
	if apperr.KindOf(err) == apperr.KindNotFound {
		return c, apperr.Invalid(param, "No such connector: %s.", id)
	}
	return c, err
}

// settled fetches what the connector's provider settled on day; param
// names the parameter a connector whose report cannot be fetched is
// refused on.
func (s *Service) settled(ctx context.Context, c connectors.Connector, day time.Time, param string) ([]providers.SettlementLine, error) {
	lines, err := s.fetch(ctx, c, day, day.Add(24*time.Hour))
	switch {
	case errors.Is(err, ErrNoReport):
		return nil, apperr.Invalid(param, "Gatehouse cannot fetch the settlement report of a %s connector; upload it as report.", c.Provider)
	case errors.Is(err, ErrRefused):
		return nil, &apperr.Error{Kind: apperr.KindInvalid, Code: apperr.CodeParameterInvalid, Param: param, Err: err,
			Message: "The connector's provider refused to report what it settled; check the connector's credentials."}
	case errors.Is(err, providers.ErrUnavailable):
		return nil, apperr.Unavailable(err)
	}
	return lines, err
}

// Create reconciles a connector's settlement report with the books: the
// report uploaded (CSV), or, given only a date, the one the provider
// reports for that day. It stores the reconciliation and its exceptions,
// books the fees the report settles (of charges booked with their fee
// pending) and nothing else. A bad report, date or connector is
// parameter_invalid and stores nothing.
func (s *Service) Create(ctx context.Context, merchantID string, p CreateParams, idem *idempotency.Request,
	render func(resource.Reconciliation) (idempotency.Response, error)) (Result, error) {
	if p.Connector == nil {
		return Result{}, apperr.Missing("connector")
	}
	if p.Report == nil && p.Date == nil {
		return Result{}, apperr.Missing("report")
	}
	var date *time.Time
	if p.Date != nil {
		d, err := ParseDate("date", *p.Date)
		if err != nil {
			return Result{}, err
		}
		date = &d
	}
	var rep Report
	source := SourceUpload
	if p.Report != nil {
		var err error
		if rep, err = ParseCSV(*p.Report, date); err != nil {
			return Result{}, err
		}
	}
	conn, err := s.connector(ctx, merchantID, *p.Connector, "connector")
	if err != nil {
		return Result{}, err
	}
	now := s.now().UTC().Truncate(time.Millisecond)
	if p.Report == nil {
		if date.After(Day(now)) {
			return Result{}, apperr.Invalid("date", "date must not be after today (UTC): the provider has settled nothing of it yet.")
		}
		source = SourceProvider
		lines, err := s.settled(ctx, conn, *date, "date")
		if err != nil {
			return Result{}, err
		}
		rep.Dates = []time.Time{*date}
		for _, l := range lines {
			l.AvailableOn = Day(l.AvailableOn)
			rep.Lines = append(rep.Lines, Line{SettlementLine: l})
		}
	}

	if err := s.importPayouts(ctx, merchantID, conn, rep); err != nil {
		return Result{}, err
	}
	from, to := rep.Dates[0], rep.Dates[len(rep.Dates)-1].Add(24*time.Hour)
	books, err := s.store.Movements(ctx, merchantID, conn.ID, from, to)
	if err != nil {
		return Result{}, err
	}
	books = InDays(books, rep.Dates)
	adjustments, err := s.store.Adjustments(ctx, merchantID, conn.ID, references(rep, books))
	if err != nil {
		return Result{}, err
	}
	found := Compare(rep, books, adjustments)

	r := Reconciliation{ID: ids.New(PrefixReconciliation), MerchantID: merchantID, ConnectorID: conn.ID, Source: source,
		Dates: rep.Dates, Lines: len(rep.Lines), Matched: found.Matched, CreatedAt: now}
	exceptions := found.Exceptions
	// Made last first: lists are newest first, so a run's exceptions list
	// in the report's order.
	for i := len(exceptions) - 1; i >= 0; i-- {
		exceptions[i].ID = ids.New(PrefixException)
	}
	for i := range exceptions {
		e := &exceptions[i]
		e.MerchantID, e.ReconciliationID, e.ConnectorID, e.Status, e.CreatedAt = merchantID, r.ID, conn.ID, ExceptionOpen, now
		r.count(e.Kind)
	}
	var fees []ledger.Transaction
	for _, due := range found.Fees {
		c := due.Charge
		fees = append(fees, ledger.FeeSettled(ledger.Account{MerchantID: merchantID, ConnectorID: c.ConnectorID, Currency: c.Currency},
			c.Source, c.ProviderReference, due.Fee, now))
	}
	resp, err := render(r.View())
	if err != nil {
		return Result{}, apperr.Internal(err)
	}
	replay, err := s.store.CreateReconciliation(ctx, idem, r, exceptions, fees, resp)
	if err != nil {
		return Result{}, err
	}
	if replay != nil {
		return Result{Response: *replay, Replayed: true}, nil
	}
	return Result{Response: resp}, nil
}

// references are the provider references of both sides.
func references(rep Report, books []Movement) []string {
	seen := map[string]bool{}
	var out []string
	add := func(r string) {
		if r != "" && !seen[r] {
			seen[r] = true
			out = append(out, r)
		}
	}
	for _, l := range rep.Lines {
		add(l.Reference)
	}
	for _, m := range books {
		add(m.ProviderReference)
	}
	return out
}

// Get returns one of the merchant's reconciliations.
func (s *Service) Get(ctx context.Context, merchantID, id string) (Reconciliation, error) {
	if !ValidID(id) {
		return Reconciliation{}, apperr.NotFound("reconciliation")
	}
	return s.store.ReconciliationByID(ctx, merchantID, id)
}

// List returns a page of the merchant's reconciliations, newest first.
func (s *Service) List(ctx context.Context, merchantID string, f Filter, p listing.Params) (listing.Page[Reconciliation], error) {
	return s.store.ListReconciliations(ctx, merchantID, f, p)
}

// Exceptions returns a page of a reconciliation's exceptions, in the
// order of the report's lines, then the books' transactions the report
// lacks.
func (s *Service) Exceptions(ctx context.Context, merchantID, id string, f ExceptionFilter, p listing.Params) (listing.Page[Exception], error) {
	if !ValidID(id) {
		return listing.Page[Exception]{}, apperr.NotFound("reconciliation")
	}
	if f.Status != "" && !slices.Contains(ExceptionStatuses, f.Status) {
		return listing.Page[Exception]{}, apperr.Invalid("status", "status must be one of %v.", ExceptionStatuses)
	}
	if f.Kind != "" && !slices.Contains(Kinds, f.Kind) {
		return listing.Page[Exception]{}, apperr.Invalid("kind", "kind must be one of %v.", Kinds)
	}
	return s.store.ListExceptions(ctx, merchantID, id, f, p)
}

// OpenExceptions returns a page of the merchant's exceptions still open,
// across its reconciliations: the newest run's first, each run's in the
// order of its report.
func (s *Service) OpenExceptions(ctx context.Context, merchantID string, p listing.Params) (listing.Page[Exception], error) {
	return s.store.ListOpenExceptions(ctx, merchantID, p)
}

// Resolve resolves an open exception: adjust books the difference between
// the provider's side and the books' as an adjustment transaction (keyed
// by the exception, so it is booked once), accept books nothing; both
// record the action and the note. An exception resolved already is
// invalid_state (a replay of the same Idempotency-Key answers the first
// response).
func (s *Service) Resolve(ctx context.Context, merchantID, reconciliationID, exceptionID string, p ResolveParams, idem *idempotency.Request,
	render func(resource.ReconciliationException) (idempotency.Response, error)) (Result, error) {
	if p.Action == nil {
		return Result{}, apperr.Missing("action")
	}
	if *p.Action != ActionAdjust && *p.Action != ActionAccept {
		return Result{}, apperr.Invalid("action", "action must be adjust or accept.")
	}
	if p.Note != nil && len([]rune(*p.Note)) > MaxNoteLen {
		return Result{}, apperr.Invalid("note", "note must be at most %d characters.", MaxNoteLen)
	}
	// One answer for every exception the merchant does not have, whatever
	// of the path is wrong.
	if !ValidID(reconciliationID) || !ValidExceptionID(exceptionID) {
		return Result{}, apperr.NotFound("reconciliation exception")
	}
	now := s.now().UTC().Truncate(time.Millisecond)
	var made Resolved
	replay, err := s.store.ResolveException(ctx, idem, merchantID, reconciliationID, exceptionID, func(e Exception) (Resolved, error) {
		if e.Status != ExceptionOpen {
			return Resolved{}, apperr.New(apperr.KindConflict, apperr.CodeInvalidState, "Exception %s is resolved already.", e.ID)
		}
		res := &Resolution{Action: *p.Action, Note: p.Note, ResolvedAt: now}
		out := Resolved{}
		if *p.Action == ActionAdjust {
			if amount, fee := e.Difference(); amount != 0 || fee != 0 {
				t := ledger.Adjusted(ledger.Account{MerchantID: e.MerchantID, ConnectorID: e.ConnectorID, Currency: e.Currency},
					e.ID, e.ProviderReference, amount, fee, now)
				out.Adjustment, res.TransactionID = &t, t.ID
			}
		}
		e.Status, e.Resolution = ExceptionResolved, res
		resp, err := render(e.View())
		if err != nil {
			return Resolved{}, apperr.Internal(err)
		}
		out.Exception, out.Response = e, resp
		made = out
		return out, nil
	})
	if err != nil {
		return Result{}, err
	}
	if replay != nil {
		return Result{Response: *replay, Replayed: true}, nil
	}
	return Result{Response: made.Response}, nil
}

// SettlementReport is what a connector's provider settled on a day, as
// CSV: the sandbox's report from its own books, Stripe's from its balance
// transactions. date is YYYY-MM-DD.
func (s *Service) SettlementReport(ctx context.Context, merchantID, connectorID, date string) ([]byte, error) {
	if date == "" {
		return nil, apperr.Missing("date")
	}
	day, err := ParseDate("date", date)
	if err != nil {
		return nil, err
	}
	if !connectors.ValidID(connectorID) {
		return nil, apperr.NotFound("connector")
	}
	c, err := s.connectors(ctx, merchantID, connectorID)
	if err != nil {
		return nil, err
	}
	lines, err := s.settled(ctx, c, day, "id")
	if err != nil {
		return nil, err
	}
	return CSV(lines), nil
}
