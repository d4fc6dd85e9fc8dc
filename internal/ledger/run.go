package ledger

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/gatehouse-pay/gatehouse/internal/events"
	"github.com/gatehouse-pay/gatehouse/internal/ids"
	"github.com/gatehouse-pay/gatehouse/internal/outbox"
)

// Environment of every payout: live mode is disabled.
const environment = "sandbox"

// PayoutFailureOf is the worker's view of a connector's rehearsed payout
// failure: the code every payout of the connector fails with, "" for none.
type PayoutFailureOf func(ctx context.Context, connectorID string) (string, error)

// Runner is the worker side of sandbox payouts: it carries each one from
// pending through in transit to paid (or failed, returning its money), and
// makes the automatic payouts of connectors on the daily schedule.
type Runner struct {
	store    Store
	failure  PayoutFailureOf
	queue    outbox.Enqueuer
	now      func() time.Time
	interval time.Duration
	delay    time.Duration
	log      *slog.Logger

	lastSlot time.Time
}

// NewRunner returns the runner: interval is the automatic payouts' period
// (24 h: daily, at midnight UTC), delay how long a payout is in transit.
func NewRunner(store Store, failure PayoutFailureOf, queue outbox.Enqueuer, now func() time.Time, interval, delay time.Duration, log *slog.Logger) *Runner {
	return &Runner{store: store, failure: failure, queue: queue, now: now, interval: interval, delay: delay, log: log}
}

// openBatch bounds the payouts one run moves.
const openBatch = 500

// Run moves the open payouts that are due, then makes the automatic
// payouts of the current slot once per process (each account's is made
// once whichever process makes it).
func (r *Runner) Run(ctx context.Context) error {
	open, err := r.store.OpenPayouts(ctx, openBatch)
	if err != nil {
		return err
	}
	var errs []error
	for _, p := range open {
		if err := r.advance(ctx, p); err != nil {
			errs = append(errs, err)
		}
	}
	now := r.now().UTC()
	slot := now.Truncate(r.interval)
	if slot.Equal(r.lastSlot) {
		return errors.Join(errs...)
	}
	accounts, err := r.store.ScheduledAccounts(ctx)
	if err != nil {
		return errors.Join(append(errs, err)...)
	}
	failed := false
	for _, a := range accounts {
		at := r.now().UTC().Truncate(time.Millisecond)
		_, tasks, err := r.store.CreateAutomaticPayout(ctx, a, slot, at, func(total int64) (*PayoutPlan, error) {
			if total <= 0 {
				return nil, nil
			}
			p, err := NewPayoutPlan(a, environment, total, true, nil, at, r.delay)
			return &p, err
		})
		if err != nil {
			failed = true
			errs = append(errs, err)
			continue
		}
		enqueue(ctx, r.queue, r.log, tasks)
	}
	if !failed {
		r.lastSlot = slot
	}
	return errors.Join(errs...)
}

// advance moves one payout if it is due: pending goes in transit at once;
// in transit arrives (paid, or failed as its connector rehearses) at its
// arrival date.
func (r *Runner) advance(ctx context.Context, p Payout) error {
	now := r.now().UTC().Truncate(time.Millisecond)
	after := p
	after.UpdatedAt = now
	var m PayoutMove
	switch p.Status {
	case PayoutPending:
		after.Status = PayoutInTransit
		m = PayoutMove{Before: p.Status, After: after}
	case PayoutInTransit:
		if now.Before(p.ArrivalDate) {
			return nil
		}
		code, err := r.failure(ctx, p.ConnectorID)
		if err != nil {
			return err
		}
		after.Status = PayoutPaid
		m = PayoutMove{Before: p.Status, After: after}
		if code != "" {
			msg := FailureMessage(code)
			after.Status, after.FailureCode, after.FailureMessage = PayoutFailed, &code, &msg
			t := PayoutReturned(p.Account(), p.ID, p.Amount, now)
			m = PayoutMove{Before: p.Status, After: after, Transaction: &t}
		}
	default:
		return nil
	}
	if typ := eventOf(after.Status); typ != "" {
		ev, err := events.NewPayout(ids.NewUUID(), p.MerchantID, p.Environment, typ, now, after.View())
		if err != nil {
			return err
		}
		m.Event = &ev
	}
	moved, tasks, err := r.store.MovePayout(ctx, m)
	if err != nil {
		return err
	}
	if moved {
		r.log.InfoContext(ctx, "payout moved", "payout", p.ID, "from", p.Status, "to", after.Status)
	}
	enqueue(ctx, r.queue, r.log, tasks)
	return nil
}

// enqueue hands the deliveries a commit wrote to the queue; those it
// cannot are left to the outbox sweeper.
func enqueue(ctx context.Context, q outbox.Enqueuer, log *slog.Logger, tasks []outbox.Task) {
	for _, t := range tasks {
		if err := q.Enqueue(ctx, t); err != nil {
			log.WarnContext(ctx, "delivery not enqueued; the outbox sweeper will enqueue it", "err", err)
		}
	}
}
