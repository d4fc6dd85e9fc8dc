// Package refunds returns money of captured charges. The sum of a charge's
// refunds never exceeds what was captured, even under concurrent requests:
// the charge row is locked while a refund is recorded, and the amount is held
// until the provider settles it. It depends on charges, never the reverse.
package refunds

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"time"

	"github.com/gatehouse-pay/gatehouse/internal/apperr"
	"github.com/gatehouse-pay/gatehouse/internal/charges"
	"github.com/gatehouse-pay/gatehouse/internal/events"
	"github.com/gatehouse-pay/gatehouse/internal/idempotency"
	"github.com/gatehouse-pay/gatehouse/internal/ids"
	"github.com/gatehouse-pay/gatehouse/internal/ledger"
	"github.com/gatehouse-pay/gatehouse/internal/listing"
	"github.com/gatehouse-pay/gatehouse/internal/money"
	"github.com/gatehouse-pay/gatehouse/internal/outbox"
	"github.com/gatehouse-pay/gatehouse/internal/providers"
	"github.com/gatehouse-pay/gatehouse/internal/resource"
)

// Statuses.
const (
	StatusPending   = "pending"
	StatusSucceeded = "succeeded"
	StatusFailed    = "failed"
)

// Reasons a merchant may give.
var Reasons = []string{"duplicate", "fraudulent", "requested_by_customer"}

// Refund is a return of Amount of a captured charge.
type Refund struct {
	ID                string
	MerchantID        string
	ChargeID          string
	Amount            int64
	Currency          string
	Status            string
	Reason            *string
	Metadata          map[string]string
	ProviderReference *string
	FailureCode       *string
	CreatedAt         time.Time
	UpdatedAt         time.Time
}

// View returns the public form.
func (r Refund) View() resource.Refund {
	md := r.Metadata
	if md == nil {
		md = map[string]string{}
	}
	return resource.Refund{ID: r.ID, Object: "refund", Charge: r.ChargeID, Amount: r.Amount, Currency: r.Currency,
		Status: r.Status, Reason: r.Reason, Metadata: md, FailureCode: r.FailureCode,
		CreatedAt: events.Timestamp(r.CreatedAt), UpdatedAt: events.Timestamp(r.UpdatedAt)}
}

// MarshalJSON renders the public form.
func (r Refund) MarshalJSON() ([]byte, error) { return json.Marshal(r.View()) }

// Plan is what recording a refund writes, decided with the charge row locked.
type Plan struct {
	Refund   Refund
	Event    events.Event
	Task     outbox.Task
	Response idempotency.Response
}

// Store persists refunds.
//
// CreateRefund locks the merchant's charge, calls plan with it, and writes the
// plan (refund, held amount on the charge, event, task, idempotency record) in
// the same transaction; a charge of another merchant is NotFound. With a used
// idempotency key it writes nothing and returns the stored response or
// idempotency.ErrReused.
//
// SettleRefund moves a pending refund to its final state and, for a success,
// moves the held amount to amount_refunded on the charge (and the charge to
// refunded when fully refunded); it calls settle with the refund and the
// charge as they are after the change, writes the events and the ledger
// transaction it returns, and deletes the task. It returns false
// when the refund was no longer pending.
type Store interface {
	CreateRefund(ctx context.Context, merchantID, chargeID string, idem *idempotency.Request, plan func(charges.Charge) (Plan, error)) (replay *idempotency.Response, deliveries []outbox.Task, err error)
	RefundByID(ctx context.Context, merchantID, id string) (Refund, error)
	ListRefunds(ctx context.Context, merchantID, chargeID string, p listing.Params) (listing.Page[Refund], error)
	RefundForWork(ctx context.Context, id string) (Refund, charges.Charge, error)
	SettleRefund(ctx context.Context, after Refund, doneTask string, settle func(Refund, charges.Charge) (Settlement, error)) (applied bool, deliveries []outbox.Task, err error)
	DeleteTask(ctx context.Context, taskID string) error
	// AwaitRefund records the provider's reference of a pending refund the
	// provider received (it settles by notification) and deletes the task:
	// the refund stays pending until Confirm.
	AwaitRefund(ctx context.Context, id, providerReference, doneTask string, at time.Time) error
}

// CreateParams is the body of POST /v1/refunds.
type CreateParams struct {
	Charge      *string           `json:"charge"`
	Amount      *int64            `json:"amount"`
	Reason      *string           `json:"reason"`
	Metadata    map[string]string `json:"metadata"`
	Environment *string           `json:"environment"`
}

// Service is the API side of refunds.
type Service struct {
	store     Store
	queue     outbox.Enqueuer
	now       func() time.Time
	onEnqueue func(error)
}

// NewService returns the API-side service.
func NewService(store Store, queue outbox.Enqueuer, now func() time.Time, onEnqueueErr func(error)) *Service {
	return &Service{store: store, queue: queue, now: now, onEnqueue: onEnqueueErr}
}

// Result is a created or replayed answer.
type Result = charges.Result

// Create records a pending refund of a captured charge and asks the worker to
// settle it. Without an amount it refunds what remains refundable.
func (s *Service) Create(ctx context.Context, merchantID string, p CreateParams, idem *idempotency.Request, render func(Refund) (idempotency.Response, error)) (Result, error) {
	if p.Environment != nil && *p.Environment == "live" {
		return Result{}, apperr.LiveMode()
	}
	if p.Environment != nil && *p.Environment != "sandbox" {
		return Result{}, apperr.Invalid("environment", "environment must be sandbox or live.")
	}
	if p.Charge == nil || *p.Charge == "" {
		return Result{}, apperr.Missing("charge")
	}
	if p.Amount != nil && !money.ValidAmount(*p.Amount) {
		return Result{}, apperr.Invalid("amount", "amount must be a positive integer (minor units).")
	}
	if p.Reason != nil && !contains(Reasons, *p.Reason) {
		return Result{}, apperr.Invalid("reason", "reason must be one of duplicate, fraudulent, requested_by_customer.")
	}
	if err := charges.CheckMetadata(p.Metadata); err != nil {
		return Result{}, err
	}
	if !charges.ValidID(*p.Charge) {
		return Result{}, apperr.NotFound("charge")
	}
	now := s.now().UTC().Truncate(time.Millisecond)
	var created Plan
	replay, deliveries, err := s.store.CreateRefund(ctx, merchantID, *p.Charge, idem, func(c charges.Charge) (Plan, error) {
		if c.Status != charges.StatusCaptured {
			return Plan{}, charges.ErrInvalidState("Only captured charges can be refunded; this charge is %s.", c.Status)
		}
		remaining := c.Refundable()
		amount := remaining
		if p.Amount != nil {
			amount = *p.Amount
		}
		if p.Amount == nil && remaining <= 0 {
			return Plan{}, charges.ErrInvalidState("This charge has nothing left to refund.")
		}
		if c.AmountDisputed > 0 && amount > remaining-c.AmountDisputed {
			return Plan{}, apperr.New(apperr.KindConflict, apperr.CodeChargeDisputed,
				"This charge is disputed: %d of it went back to the cardholder with the dispute, so at most %d can be refunded.",
				c.AmountDisputed, max(remaining-c.AmountDisputed, 0))
		}
		if amount > remaining {
			return Plan{}, &apperr.Error{Kind: apperr.KindInvalid, Code: apperr.CodeAmountTooLarge, Param: "amount",
				Message: fmt.Sprintf("amount %d exceeds what remains refundable, %d.", amount, remaining)}
		}
		if err := charges.CheckProviderAmount(c.Provider, c.Currency, amount); err != nil {
			return Plan{}, err
		}
		r := Refund{ID: ids.NewUUID(), MerchantID: merchantID, ChargeID: c.ID, Amount: amount, Currency: c.Currency,
			Status: StatusPending, Reason: p.Reason, Metadata: p.Metadata, CreatedAt: now, UpdatedAt: now}
		if r.Metadata == nil {
			r.Metadata = map[string]string{}
		}
		c.AmountRefundHeld += amount
		view := r.View()
		ev, err := events.New(ids.NewUUID(), merchantID, c.Environment, events.RefundCreated, now, c.View(), &view)
		if err != nil {
			return Plan{}, apperr.Internal(err)
		}
		resp, err := render(r)
		if err != nil {
			return Plan{}, apperr.Internal(err)
		}
		created = Plan{Refund: r, Event: ev, Task: outbox.Task{Type: outbox.RefundProcess, RefID: r.ID}, Response: resp}
		return created, nil
	})
	if err != nil {
		return Result{}, err
	}
	if replay != nil {
		return Result{Response: *replay, Replayed: true}, nil
	}
	for _, t := range append([]outbox.Task{created.Task}, deliveries...) {
		if err := s.queue.Enqueue(ctx, t); err != nil && s.onEnqueue != nil {
			s.onEnqueue(err)
		}
	}
	return Result{Response: created.Response}, nil
}

// Get returns one of the merchant's refunds.
func (s *Service) Get(ctx context.Context, merchantID, id string) (Refund, error) {
	if !charges.ValidID(id) {
		return Refund{}, apperr.NotFound("refund")
	}
	return s.store.RefundByID(ctx, merchantID, id)
}

// List returns a page of the merchant's refunds, optionally of one charge.
func (s *Service) List(ctx context.Context, merchantID, chargeID string, p listing.Params) (listing.Page[Refund], error) {
	if chargeID != "" && !charges.ValidID(chargeID) {
		return listing.Page[Refund]{}, apperr.Invalid("charge", "charge must be a charge id.")
	}
	return s.store.ListRefunds(ctx, merchantID, chargeID, p)
}

// Processor is the worker side of refunds.
type Processor struct {
	store        Store
	providers    providers.Resolver
	timeout      time.Duration
	now          func() time.Time
	log          *slog.Logger
	observe      func(provider, op string, o charges.Outcome, d time.Duration)
	queue        outbox.Enqueuer
	settled      func(provider, status string)
	window       time.Duration
	unknownAfter time.Duration
	slots        *providers.MerchantSlots
}

// WithSlots bounds the provider calls one merchant runs at once in this
// process (PROVIDER_MERCHANT_SLOTS), as charges.Processor.WithSlots does: a
// refund whose merchant is at the cap makes no call and writes nothing, and
// Process returns the *providers.PutBack.
func (p *Processor) WithSlots(s *providers.MerchantSlots) *Processor {
	p.slots = s
	return p
}

// WithOutcomes makes the processor report each refund it settles (succeeded
// or failed) with the charge's provider.
func (p *Processor) WithOutcomes(f func(provider, status string)) *Processor {
	p.settled = f
	return p
}

// WithQueue makes the processor enqueue the webhook deliveries its
// settlements create right after commit; without it they wait for the sweeper.
func (p *Processor) WithQueue(q outbox.Enqueuer) *Processor {
	p.queue = q
	return p
}

// WithWindows sets how long after its creation a refund is still sent again
// under its idempotency key (the provider's idempotency window; after it the
// refund is looked up, never sent again) and after how long a refund whose
// outcome is still unknown is logged at error level for an operator. Zero
// keeps a default (charges.DefaultIdempotencyWindow, charges.DefaultUnknownAfter).
func (p *Processor) WithWindows(window, unknownAfter time.Duration) *Processor {
	if window > 0 {
		p.window = window
	}
	if unknownAfter > 0 {
		p.unknownAfter = unknownAfter
	}
	return p
}

func (p *Processor) settle(ctx context.Context, provider string, after Refund, doneTask string, settle func(Refund, charges.Charge) (Settlement, error)) error {
	applied, deliveries, err := p.store.SettleRefund(ctx, after, doneTask, settle)
	if err != nil {
		return err
	}
	if applied && p.settled != nil {
		p.settled(provider, after.Status)
	}
	if p.queue != nil {
		for _, d := range deliveries {
			if err := p.queue.Enqueue(ctx, d); err != nil {
				p.log.WarnContext(ctx, "delivery not enqueued; the outbox sweeper will enqueue it", "err", err)
			}
		}
	}
	return nil
}

// NewProcessor returns the worker-side service.
func NewProcessor(store Store, reg providers.Resolver, timeout time.Duration, now func() time.Time, log *slog.Logger, observe func(provider, op string, o charges.Outcome, d time.Duration)) *Processor {
	if observe == nil {
		observe = func(string, string, charges.Outcome, time.Duration) {}
	}
	return &Processor{store: store, providers: reg, timeout: timeout, now: now, log: log, observe: observe,
		window: charges.DefaultIdempotencyWindow, unknownAfter: charges.DefaultUnknownAfter}
}

// Process settles a pending refund at the provider.
//
// Within the provider's idempotency window (counted from the refund's
// creation, so never later than from its first sending) the refund is sent
// under its one key, gh_<refund>_refund, as often as it takes: the provider
// answers a key it booked with that booking. After the window it is never
// sent again (the provider may have forgotten the key and would book a second
// refund): it is looked up (providers.Lookup) by the refund id it carries.
// A refund the provider answers as pending is followed with lookups.
//
// The refund succeeds (refund.succeeded, and charge.refunded when the charge
// is fully refunded, in the same transaction) when the provider booked it,
// fails (the held amount is released) when the provider declined it or
// vouches that it holds none, and otherwise stays pending: its outcome is
// unknown and money may have moved. Then Process returns a wrapped
// charges.ErrRetry (the queue tries again with backoff) or, on the final
// attempt, a plain error: the outbox row stays and the sweeper sends the
// task again. A refund still unknown after the unknownAfter bound is logged at
// error level on every attempt and counted by the
// gatehouse_provider_outcomes_unknown gauge.
func (p *Processor) Process(ctx context.Context, id string, final bool) error {
	task := outbox.Task{Type: outbox.RefundProcess, RefID: id}
	r, c, err := p.store.RefundForWork(ctx, id)
	if err != nil {
		return err
	}
	if r.Status != StatusPending {
		return p.store.DeleteTask(ctx, task.ID())
	}
	now := p.now().UTC()
	after := r
	after.UpdatedAt = now.Truncate(time.Millisecond)
	if c.ProviderReference == nil {
		// The charge never reached the provider: there is nothing to refund there.
		after.Status, after.FailureCode = StatusFailed, ptr("provider_unavailable")
		return p.settle(ctx, c.Provider, after, task.ID(), noEvents)
	}
	// The refund goes to the connector that took the money.
	prov, err := p.providers.Resolve(ctx, c.ConnectorID, c.Provider)
	if err != nil {
		// An earlier attempt, from a worker that had the provider, may have
		// reached it: the outcome is unknown until the provider is back.
		return p.unknown(ctx, r, final, now, fmt.Errorf("%w: provider %q of connector %s: %w", providers.ErrUnavailable, c.Provider, deref(c.ConnectorID), err))
	}
	release, err := p.slots.Take(ctx, r.MerchantID)
	if err != nil {
		return err
	}
	defer release()
	key := charges.IdempotencyKey(r.ID, "refund")
	lookup := providers.RefundLookup{Reference: *c.ProviderReference, RefundID: r.ID, IdempotencyKey: key}
	look, canLook := prov.(providers.Lookup)
	op := "refund"
	start := time.Now()
	cctx, cancel := context.WithTimeout(ctx, p.timeout)
	var res providers.Result
	if now.Sub(r.CreatedAt) < p.window {
		res, err = prov.Refund(cctx, providers.RefundRequest{IdempotencyKey: key, RefundID: r.ID,
			Reference: *c.ProviderReference, Amount: r.Amount, Currency: r.Currency, Reason: deref(r.Reason)})
		if err == nil && res.Pending && providers.SettlesByNotification(c.Provider) {
			// Received: the provider's notification settles it (Confirm).
			cancel()
			p.observe(c.Provider, op, charges.OutcomePending, time.Since(start))
			return p.store.AwaitRefund(ctx, r.ID, res.Reference, task.ID(), after.UpdatedAt)
		}
		if err == nil && res.Pending && canLook {
			// Sent again, the key only replays the first answer: follow the refund itself.
			op, lookup.ProviderRefund = "refund_lookup", res.Reference
			res, err = look.LookupRefund(cctx, lookup)
		}
	} else {
		op = "refund_lookup"
		if canLook {
			res, err = look.LookupRefund(cctx, lookup)
		} else {
			err = fmt.Errorf("%w: %s: %w", providers.ErrUnavailable, c.Provider, providers.ErrNoLookup)
		}
	}
	cancel()
	elapsed := time.Since(start)
	d, declined := providers.AsDecline(err)
	switch {
	case err == nil && !res.Pending:
		p.observe(c.Provider, op, charges.OutcomeSucceeded, elapsed)
		after.Status, after.ProviderReference = StatusSucceeded, &res.Reference
		return p.settle(ctx, c.Provider, after, task.ID(), succeeded)
	case err == nil:
		p.observe(c.Provider, op, charges.OutcomePending, elapsed)
		return p.unknown(ctx, r, final, now, fmt.Errorf("refunds: the provider's refund %s is still pending", res.Reference))
	case declined:
		p.observe(c.Provider, op, charges.OutcomeDeclined, elapsed)
		after.Status, after.FailureCode = StatusFailed, &d.Code
	case providers.NothingBooked(err) && (op == "refund_lookup" || final):
		// The provider read its books: no refund moved any money.
		p.observe(c.Provider, op, charges.OutcomeUnavailable, elapsed)
		after.Status, after.FailureCode = StatusFailed, ptr("provider_unavailable")
	case !final:
		p.observe(c.Provider, op, charges.OutcomeRetry, elapsed)
		return p.unknown(ctx, r, final, now, err)
	default:
		p.observe(c.Provider, op, charges.OutcomeUnavailable, elapsed)
		return p.unknown(ctx, r, final, now, err)
	}
	return p.settle(ctx, c.Provider, after, task.ID(), noEvents)
}

// Settlement is what settling a refund writes besides the refund and its
// charge: its events, and the ledger transaction of its money.
type Settlement struct {
	Events  []events.Event
	Booking *ledger.Transaction
}

// succeeded is the settlement of a refund that succeeded: its events, and
// the amount booked back to the cardholder from the merchant's balance.
func succeeded(r Refund, c charges.Charge) (Settlement, error) {
	evs, err := succeededEvents(r, c)
	if err != nil {
		return Settlement{}, err
	}
	ref := ""
	if r.ProviderReference != nil {
		ref = *r.ProviderReference
	}
	b := ledger.Refunded(charges.AccountOf(c), r.ID, ref, r.Amount, r.UpdatedAt)
	return Settlement{Events: evs, Booking: &b}, nil
}

// succeededEvents are the events of a refund that succeeded:
// refund.succeeded, and charge.refunded when it refunded the charge in full.
func succeededEvents(r Refund, c charges.Charge) ([]events.Event, error) {
	out := []events.Event{}
	view := r.View()
	e, err := events.New(ids.NewUUID(), r.MerchantID, c.Environment, events.RefundSucceeded, r.UpdatedAt, c.View(), &view)
	if err != nil {
		return nil, err
	}
	out = append(out, e)
	if c.Status == charges.StatusRefunded {
		e, err := events.New(ids.NewUUID(), r.MerchantID, c.Environment, events.ChargeRefunded, r.UpdatedAt, c.View(), nil)
		if err != nil {
			return nil, err
		}
		out = append(out, e)
	}
	return out, nil
}

// Confirm settles a pending refund with the provider's notification of it
// (a provider that settles refunds by notification): it succeeds
// (refund.succeeded, and charge.refunded when the charge is refunded in
// full) or fails with refund_failed, the held amount released. A refund no
// longer pending changes nothing; Confirm reports whether it moved it.
func (p *Processor) Confirm(ctx context.Context, id string, success bool, providerReference string) (bool, error) {
	r, c, err := p.store.RefundForWork(ctx, id)
	if err != nil {
		return false, err
	}
	if r.Status != StatusPending {
		return false, nil
	}
	after := r
	after.UpdatedAt = p.now().UTC().Truncate(time.Millisecond)
	if providerReference != "" {
		after.ProviderReference = &providerReference
	}
	task := outbox.Task{Type: outbox.RefundProcess, RefID: id}
	eventsFor := succeeded
	if success {
		after.Status = StatusSucceeded
	} else {
		after.Status, after.FailureCode, eventsFor = StatusFailed, ptr("refund_failed"), noEvents
	}
	applied, deliveries, err := p.store.SettleRefund(ctx, after, task.ID(), eventsFor)
	if err != nil {
		return false, err
	}
	if applied && p.settled != nil {
		p.settled(c.Provider, after.Status)
	}
	if p.queue != nil {
		for _, d := range deliveries {
			if err := p.queue.Enqueue(ctx, d); err != nil {
				p.log.WarnContext(ctx, "delivery not enqueued; the outbox sweeper will enqueue it", "err", err)
			}
		}
	}
	return applied, nil
}

// unknown answers an attempt after which the refund's outcome is still
// unknown: the refund stays pending and the task is tried again.
func (p *Processor) unknown(ctx context.Context, r Refund, final bool, now time.Time, err error) error {
	if age := now.Sub(r.CreatedAt); age >= p.unknownAfter {
		p.log.ErrorContext(ctx, "refund outcome still unknown at the provider; see the runbook ProviderOutcomeUnknown",
			"refund_id", r.ID, "charge_id", r.ChargeID, "age", age.Round(time.Second).String(), "err", err)
	}
	if !final {
		return fmt.Errorf("%w: %v", charges.ErrRetry, err)
	}
	return fmt.Errorf("refunds: outcome of refund %s still unknown after the last attempt; the sweeper sends it again: %w", r.ID, err)
}

func noEvents(Refund, charges.Charge) (Settlement, error) { return Settlement{}, nil }

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

func ptr[T any](v T) *T { return &v }
