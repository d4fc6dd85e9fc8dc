// Package reconcile compares what a provider says it settled with the
// merchant's books, line by line: a settlement report (uploaded as CSV, or
// fetched from the provider for a day) against the connector's balance
// transactions that became available on the days it covers. What differs
// is an exception, shown until a person resolves it: by adjusting the books
// (an adjustment transaction for the difference, through the ledger) or by
// accepting it; nothing is ever adjusted by itself. docs/ledger.md
// explains it.
package reconcile

import (
	"time"

	"github.com/gatehouse-pay/gatehouse/internal/events"
	"github.com/gatehouse-pay/gatehouse/internal/ids"
	"github.com/gatehouse-pay/gatehouse/internal/resource"
)

// Id prefixes.
const (
	PrefixReconciliation = "rec"
	PrefixException      = "exc"
)

// ValidID reports whether id can be a reconciliation's.
func ValidID(id string) bool { return ids.Valid(PrefixReconciliation, id) }

// ValidExceptionID reports whether id can be an exception's.
func ValidExceptionID(id string) bool { return ids.Valid(PrefixException, id) }

// Exception kinds.
const (
	// KindMissingInGateway: the report has the line, the books nothing.
	KindMissingInGateway = "missing_in_gateway"
	// KindMissingAtProvider: the books have it, the report nothing.
	KindMissingAtProvider = "missing_at_provider"
	// KindAmountMismatch: both have it, with a different gross.
	KindAmountMismatch = "amount_mismatch"
	// KindFeeMismatch: both have it, with the same gross and another fee.
	KindFeeMismatch = "fee_mismatch"
)

// Kinds lists them in the order of api/openapi.yaml.
var Kinds = []string{KindMissingInGateway, KindMissingAtProvider, KindAmountMismatch, KindFeeMismatch}

// Statuses of a reconciliation: reconciled when it found no exception,
// open while one is open, resolved once every one is.
const (
	StatusReconciled = "reconciled"
	StatusOpen       = "open"
	StatusResolved   = "resolved"
)

// Statuses of an exception.
const (
	ExceptionOpen     = "open"
	ExceptionResolved = "resolved"
)

// ExceptionStatuses lists them.
var ExceptionStatuses = []string{ExceptionOpen, ExceptionResolved}

// Actions that resolve an exception.
const (
	// ActionAdjust books the difference as an adjustment transaction.
	ActionAdjust = "adjust"
	// ActionAccept closes the exception and books nothing.
	ActionAccept = "accept"
)

// Sources of a report.
const (
	SourceUpload   = "upload"
	SourceProvider = "provider"
)

// Reconciliation is one comparison of a connector's settlement report with
// the books.
type Reconciliation struct {
	ID          string
	MerchantID  string
	ConnectorID string
	Source      string
	// Dates are the days compared (UTC), ascending.
	Dates             []time.Time
	Lines             int
	Matched           int
	MissingInGateway  int
	MissingAtProvider int
	AmountMismatch    int
	FeeMismatch       int
	OpenExceptions    int
	CreatedAt         time.Time
}

// Exceptions is how many exceptions the reconciliation found.
func (r Reconciliation) Exceptions() int {
	return r.MissingInGateway + r.MissingAtProvider + r.AmountMismatch + r.FeeMismatch
}

// Status is reconciled, open or resolved.
func (r Reconciliation) Status() string {
	switch {
	case r.Exceptions() == 0:
		return StatusReconciled
	case r.OpenExceptions > 0:
		return StatusOpen
	}
	return StatusResolved
}

// count adds an exception of kind to the counts.
func (r *Reconciliation) count(kind string) {
	switch kind {
	case KindMissingInGateway:
		r.MissingInGateway++
	case KindMissingAtProvider:
		r.MissingAtProvider++
	case KindAmountMismatch:
		r.AmountMismatch++
	case KindFeeMismatch:
		r.FeeMismatch++
	}
	r.OpenExceptions++
}

// View returns the public form.
func (r Reconciliation) View() resource.Reconciliation {
	dates := make([]string, len(r.Dates))
	for i, d := range r.Dates {
		dates[i] = d.UTC().Format(DateLayout)
	}
	return resource.Reconciliation{ID: r.ID, Object: "reconciliation", Connector: r.ConnectorID, Status: r.Status(),
		Source: r.Source, Dates: dates, Lines: r.Lines, Matched: r.Matched, MissingInGateway: r.MissingInGateway,
		MissingAtProvider: r.MissingAtProvider, AmountMismatch: r.AmountMismatch, FeeMismatch: r.FeeMismatch,
		OpenExceptions: r.OpenExceptions, CreatedAt: events.Timestamp(r.CreatedAt)}
}

// Exception is a difference between a line of the report and the books.
type Exception struct {
	ID               string
	MerchantID       string
	ReconciliationID string
	ConnectorID      string
	Kind             string
	// The line's key: the provider's reference, its type and currency.
	ProviderReference string
	Type              string
	Currency          string
	// Line is the first line of the key in an uploaded report; 0 when the
	// report has none or was fetched.
	Line int
	// GatewayObject is the source of the books' transaction (a charge,
	// refund, payout or dispute), GatewayTransaction its id; "" when the
	// books have none.
	GatewayObject      string
	GatewayTransaction string
	// Provider and Gateway are the two sides; nil for the side that has
	// nothing.
	Provider   *Amounts
	Gateway    *Amounts
	Status     string
	Resolution *Resolution
	CreatedAt  time.Time
}

// Resolution is how a person resolved an exception: the action, a note,
// and for an adjustment the transaction it booked ("" when the difference
// was nothing).
type Resolution struct {
	Action        string
	Note          *string
	TransactionID string
	ResolvedAt    time.Time
}

// Difference is what the provider reported less what the books hold:
// what an adjustment books.
func (e Exception) Difference() (amount, fee int64) {
	var p, g Amounts
	if e.Provider != nil {
		p = *e.Provider
	}
	if e.Gateway != nil {
		g = *e.Gateway
	}
	return p.Gross - g.Gross, p.Fee - g.Fee
}

// View returns the public form.
func (e Exception) View() resource.ReconciliationException {
	v := resource.ReconciliationException{ID: e.ID, Object: "reconciliation_exception", Reconciliation: e.ReconciliationID,
		Kind: e.Kind, ProviderReference: e.ProviderReference, Type: e.Type, Currency: e.Currency, Status: e.Status,
		Provider: amountsView(e.Provider), Gateway: amountsView(e.Gateway), GatewayObject: optional(e.GatewayObject),
		BalanceTransaction: optional(e.GatewayTransaction), CreatedAt: events.Timestamp(e.CreatedAt)}
	if e.Line > 0 {
		line := e.Line
		v.Line = &line
	}
	if r := e.Resolution; r != nil {
		v.Resolution = &resource.ReconciliationResolution{Action: r.Action, Note: r.Note,
			BalanceTransaction: optional(r.TransactionID), ResolvedAt: events.Timestamp(r.ResolvedAt)}
	}
	return v
}

func amountsView(a *Amounts) *resource.ReconciliationAmounts {
	if a == nil {
		return nil
	}
	return &resource.ReconciliationAmounts{Gross: a.Gross, Fee: a.Fee, Net: a.Net}
}

func optional(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}
