package ledger

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/gatehouse-pay/gatehouse/internal/events"
	"github.com/gatehouse-pay/gatehouse/internal/ids"
	"github.com/gatehouse-pay/gatehouse/internal/money"
	"github.com/gatehouse-pay/gatehouse/internal/outbox"
)

// Reported is a payout as the provider that made it reports it.
type Reported struct {
	Reference   string
	Amount      int64
	Currency    string
	Status      string // pending, in_transit, paid, failed or canceled
	Automatic   bool
	ArrivalDate time.Time
	FailureCode string
	// BookedOn is when the payout took its money from the balance, as a
	// settlement report dates it; zero for when it is imported.
	BookedOn time.Time
}

// ErrBadReport is the error of a report the books cannot take.
var ErrBadReport = fmt.Errorf("ledger: a payout report the books cannot take")

// Importer books the payouts a provider makes on its own (Stripe pays out
// a connector's balance on its schedule): the payout and its transaction
// the first time it is reported, then each move of its status, as the
// gateway's own payouts. A report repeated, or of a status the payout has
// already passed, books nothing.
type Importer struct {
	store Store
	queue outbox.Enqueuer
	now   func() time.Time
	log   *slog.Logger
}

// NewImporter returns the importer.
func NewImporter(store Store, queue outbox.Enqueuer, now func() time.Time, log *slog.Logger) *Importer {
	return &Importer{store: store, queue: queue, now: now, log: log}
}

// Import books what r reports of a payout of connectorID's account; it
// reports whether anything changed.
func (im *Importer) Import(ctx context.Context, merchantID, connectorID string, r Reported) (bool, error) {
	status, code := r.Status, r.FailureCode
	if status == "canceled" {
		status = PayoutFailed
		if code == "" {
			code = "could_not_process"
		}
	}
	cur, err := money.ParseCurrency(r.Currency)
	if r.Reference == "" || r.Amount <= 0 || err != nil || !contains(PayoutStatuses, status) {
		return false, fmt.Errorf("%w: %+v", ErrBadReport, r)
	}
	p, found, err := im.store.PayoutByReference(ctx, connectorID, r.Reference)
	if err != nil {
		return false, err
	}
	changed := false
	if !found {
		now := im.now().UTC().Truncate(time.Millisecond)
		a := Account{MerchantID: merchantID, ConnectorID: connectorID, Currency: cur}
		plan, err := NewPayoutPlan(a, environment, r.Amount, r.Automatic, nil, now, 0)
		if err != nil {
			return false, err
		}
		ref := r.Reference
		plan.Payout.ProviderReference = &ref
		plan.Transaction.ProviderReference = ref // the provider's reports name it so
		if !r.BookedOn.IsZero() {
			plan.Transaction.AvailableOn = r.BookedOn
		}
		if !r.ArrivalDate.IsZero() {
			plan.Payout.ArrivalDate = r.ArrivalDate
		}
		if plan.Event, err = events.NewPayout(plan.Event.ID, merchantID, environment, events.PayoutCreated, now, plan.Payout.View()); err != nil {
			return false, err
		}
		created, tasks, err := im.store.ImportPayout(ctx, plan)
		if err != nil {
			return false, err
		}
		enqueue(ctx, im.queue, im.log, tasks)
		if p, found, err = im.store.PayoutByReference(ctx, connectorID, r.Reference); err != nil || !found {
			return created, fmt.Errorf("ledger: payout %s of %s not found after its import: %w", r.Reference, connectorID, err)
		}
		changed = created
	}
	for p.Status != status {
		next := nextStatus(p.Status, status)
		if next == "" {
			break // a status the payout has passed: nothing to book
		}
		moved, after, err := im.move(ctx, p, next, code, r.BookedOn)
		if err != nil {
			return changed, err
		}
		changed = changed || moved
		if !moved {
			// Moved meanwhile by another report: read it again.
			if p, _, err = im.store.PayoutByReference(ctx, connectorID, r.Reference); err != nil {
				return changed, err
			}
			continue
		}
		p = after
	}
	return changed, nil
}

// nextStatus is the next step from a payout's status towards a reported
// one, "" when the report is behind it.
func nextStatus(from, to string) string {
	switch {
	case from == PayoutPending && to != PayoutPending:
		if to == PayoutFailed {
			return PayoutFailed
		}
		return PayoutInTransit
	case from == PayoutInTransit && (to == PayoutPaid || to == PayoutFailed):
		return to
	case from == PayoutPaid && to == PayoutFailed:
		return PayoutFailed
	}
	return ""
}

// move moves p to status, returning its money to the balance when it fails.
func (im *Importer) move(ctx context.Context, p Payout, status, code string, bookedOn time.Time) (bool, Payout, error) {
	now := im.now().UTC().Truncate(time.Millisecond)
	after := p
	after.Status, after.UpdatedAt = status, now
	m := PayoutMove{Before: p.Status, After: after}
	if status == PayoutFailed {
		if code == "" {
			code = "could_not_process"
		}
		msg := FailureMessage(code)
		after.FailureCode, after.FailureMessage = &code, &msg
		t := PayoutReturned(p.Account(), p.ID, p.Amount, now)
		if !bookedOn.IsZero() {
			t.AvailableOn = bookedOn
		}
		if p.ProviderReference != nil {
			t.ProviderReference = *p.ProviderReference
		}
		m.After, m.Transaction = after, &t
	}
	if typ := eventOf(status); typ != "" {
		ev, err := events.NewPayout(ids.NewUUID(), p.MerchantID, p.Environment, typ, now, after.View())
		if err != nil {
			return false, p, err
		}
		m.Event = &ev
	}
	moved, tasks, err := im.store.MovePayout(ctx, m)
	if err != nil {
		return false, p, err
	}
	enqueue(ctx, im.queue, im.log, tasks)
	return moved, after, nil
}
