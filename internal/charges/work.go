package charges

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/gatehouse-pay/gatehouse/internal/apperr"
	"github.com/gatehouse-pay/gatehouse/internal/events"
	"github.com/gatehouse-pay/gatehouse/internal/ids"
	"github.com/gatehouse-pay/gatehouse/internal/keyring"
	"github.com/gatehouse-pay/gatehouse/internal/ledger"
	"github.com/gatehouse-pay/gatehouse/internal/outbox"
	"github.com/gatehouse-pay/gatehouse/internal/providers"
)

// Transition is one conditional move of a charge: it applies only if the
// charge is still in Before's status with Before's pending action. With it
// go the event that announces it and the deletion of the task that did it;
// PurgeCard drops the sealed card data. Then, when set, is a task the new
// state calls for, written with it.
type Transition struct {
	Before    Charge
	After     Charge
	Event     *events.Event
	DoneTask  string
	PurgeCard bool
	Then      *outbox.Task
	// Cause is what moves the charge (see CanMove).
	Cause string
	// SavedCardAuthenticated marks the charge's saved card as authenticated
	// by its cardholder (the issuer's mandate for off-session charges).
	SavedCardAuthenticated bool
	// Booking is the ledger transaction the move causes (a capture's),
	// written with it; the Processor sets it.
	Booking *ledger.Transaction
	// Settlement is what the provider reported of the capture with its
	// answer, when it did (Stripe's balance transaction): its fee and when
	// it is available. nil books by the connector's terms.
	Settlement *providers.Settlement
}

// ErrIllegalMove is returned for a transition the state machine refuses.
var ErrIllegalMove = errors.New("charges: the state machine does not allow this move")

// Outcome is what a provider call led to, for metrics.
type Outcome string

// Outcomes.
const (
	OutcomeSucceeded   Outcome = "succeeded"
	OutcomeDeclined    Outcome = "declined"
	OutcomeRetry       Outcome = "retry"
	OutcomeUnavailable Outcome = "unavailable"
	OutcomeNoop        Outcome = "noop"
	// OutcomePending: the provider accepted the operation and has not
	// finished it (a pending refund, a processing payment).
	OutcomePending Outcome = "pending"
)

// Defaults of the windows of unknown outcomes (see Processor.WithWindows).
const (
	// DefaultIdempotencyWindow is how long a capture or refund whose outcome
	// is unknown is sent again under its idempotency key before it is only
	// looked up: Stripe keeps idempotency keys for at least 24 hours.
	DefaultIdempotencyWindow = 24 * time.Hour
	// DefaultUnknownAfter is how long an outcome may stay unknown before it
	// is logged at error level for an operator.
	DefaultUnknownAfter = 24 * time.Hour
)

// Processor is the worker side: it carries charges through the provider.
type Processor struct {
	store     Store
	providers providers.Resolver
	keys      *keyring.Keyring
	timeout   time.Duration
	now       func() time.Time
	log       *slog.Logger
	observe   func(provider, op string, o Outcome, d time.Duration)
	queue     outbox.Enqueuer
	settled   func(provider, status string)
	terms     Terms
	// window and unknownAfter: see WithWindows.
	window       time.Duration
	unknownAfter time.Duration
	// authTimeout, links and schedule: see WithAuthentication.
	authTimeout time.Duration
	links       Links
	schedule    func(ctx context.Context, t outbox.Task, at time.Time) error
	// attempted, when set, is told of every attempt that ended.
	attempted func(a Attempt, failover bool)
	// slots bound the provider calls of one merchant at once (nil: no bound).
	slots *providers.MerchantSlots
}

// WithSlots bounds the provider calls one merchant runs at once in this
// process (PROVIDER_MERCHANT_SLOTS). A task whose merchant is at the cap
// makes no call and writes nothing: it returns the *providers.PutBack of
// slots.Take, and the queue runs it again later.
func (p *Processor) WithSlots(s *providers.MerchantSlots) *Processor {
	p.slots = s
	return p
}

// slot takes one of the charge's merchant's slots before the task's first
// write and provider call (see WithSlots).
func (p *Processor) slot(ctx context.Context, c Charge) (release func(), err error) {
	return p.slots.Take(ctx, c.MerchantID)
}

// WithAttempts makes the processor report every attempt that ended
// (succeeded, failed, or unknown after the last try), and whether the
// charge moved on to its next connector after it.
func (p *Processor) WithAttempts(f func(a Attempt, failover bool)) *Processor {
	p.attempted = f
	return p
}

// failoverOutcome is the metrics outcome of an attempt that fails over.
func failoverOutcome(err error) Outcome {
	if _, ok := providers.AsDecline(err); ok {
		return OutcomeDeclined
	}
	return OutcomeUnavailable
}

// WithWindows sets how long after it was requested a capture is still sent
// again under its idempotency key (the provider's idempotency window; after
// it the payment is looked up, never captured again) and after how long a
// capture whose outcome is still unknown is logged at error level for an
// operator. Zero keeps the default (DefaultIdempotencyWindow,
// DefaultUnknownAfter).
func (p *Processor) WithWindows(window, unknownAfter time.Duration) *Processor {
	if window > 0 {
		p.window = window
	}
	if unknownAfter > 0 {
		p.unknownAfter = unknownAfter
	}
	return p
}

// WithOutcomes makes the processor report every status change it commits
// (authorized, captured, failed, voided) with the charge's provider. A
// transition that lost a race to another worker is not reported.
func (p *Processor) WithOutcomes(f func(provider, status string)) *Processor {
	p.settled = f
	return p
}

// WithQueue makes the processor enqueue the webhook deliveries its
// transitions create right after commit; without it they wait for the
// outbox sweeper.
func (p *Processor) WithQueue(q outbox.Enqueuer) *Processor {
	p.queue = q
	return p
}

// apply writes a transition and hands its deliveries to the queue.
func (p *Processor) apply(ctx context.Context, t Transition) error {
	if !CanMove(t.Before.Status, t.After.Status, t.Cause) {
		return fmt.Errorf("%w: %s to %s (cause %q) of %s", ErrIllegalMove, t.Before.Status, t.After.Status, t.Cause, t.Before.ID)
	}
	if p.recordAttempt(&t) && t.Event != nil {
		// The event shows the charge as the transition leaves it, the
		// attempt it records included.
		e, err := events.New(t.Event.ID, t.Event.MerchantID, t.Event.Environment, t.Event.Type, t.Event.CreatedAt, t.After.View(), nil)
		if err != nil {
			return err
		}
		t.Event = &e
	}
	if t.After.Status == StatusCaptured && t.Before.Status != StatusCaptured && p.terms != nil {
		b, err := p.captureBooking(ctx, t)
		if err != nil {
			return err
		}
		t.Booking = &b
	}
	applied, deliveries, err := p.store.ApplyTransition(ctx, t)
	if err != nil {
		return err
	}
	if a, ok := endedAttempt(t); applied && ok && p.attempted != nil {
		p.attempted(a, t.Cause == CauseFailover)
	}
	if applied && p.settled != nil && t.After.Status != t.Before.Status {
		p.settled(t.After.Provider, t.After.Status)
	}
	if p.queue != nil {
		if applied && t.Then != nil {
			deliveries = append(deliveries, *t.Then)
		}
		for _, d := range deliveries {
			if err := p.queue.Enqueue(ctx, d); err != nil {
				p.log.WarnContext(ctx, "delivery not enqueued; the outbox sweeper will enqueue it", "err", err)
			}
		}
	}
	return nil
}

// Terms finds what a charge's connector charges and when it pays.
type Terms func(ctx context.Context, connectorID *string, provider string) (ledger.Terms, error)

// WithLedger makes the processor book each capture in the merchant's
// ledger, with the capture's own transition, by the connector's terms.
func (p *Processor) WithLedger(terms Terms) *Processor {
	p.terms = terms
	return p
}

// captureBooking is the ledger transaction of t's capture: the amount
// captured, its fee (as the provider reported it, or by the connector's
// schedule, or pending until the provider reports it), available after the
// connector's settlement delay.
func (p *Processor) captureBooking(ctx context.Context, t Transition) (ledger.Transaction, error) {
	c := t.After
	terms, err := p.terms(ctx, c.ConnectorID, c.Provider)
	if err != nil {
		return ledger.Transaction{}, err
	}
	at := c.UpdatedAt
	fee, availableOn := terms.FeeFor(c.AmountCaptured), at.Add(terms.SettlementDelay)
	if s := t.Settlement; s != nil {
		fee = ledger.Fee{Amount: s.Fee}
		for _, l := range s.FeeDetails {
			fee.Details = append(fee.Details, ledger.FeeDetail{Type: ledger.FeeProvider, Amount: l.Amount, Description: l.Description})
		}
		if !s.AvailableOn.IsZero() {
			availableOn = s.AvailableOn
		}
	}
	ref := ""
	if c.ProviderReference != nil {
		ref = *c.ProviderReference
	}
	return ledger.Captured(AccountOf(c), c.ID, ref, c.AmountCaptured, fee, at, availableOn), nil
}

// AccountOf is the ledger account a charge's money moves in: its
// connector's (its provider's, for a charge made before connectors).
func AccountOf(c Charge) ledger.Account {
	conn := c.Provider
	if c.ConnectorID != nil {
		conn = *c.ConnectorID
	}
	return ledger.Account{MerchantID: c.MerchantID, ConnectorID: conn, Currency: c.Currency}
}

// NewProcessor returns the worker-side service; timeout bounds each provider
// call; observe (may be nil) is told the outcome of each.
func NewProcessor(store Store, reg providers.Resolver, keys *keyring.Keyring, timeout time.Duration, now func() time.Time, log *slog.Logger, observe func(provider, op string, o Outcome, d time.Duration)) *Processor {
	if observe == nil {
		observe = func(string, string, Outcome, time.Duration) {}
	}
	return &Processor{store: store, providers: reg, keys: keys, timeout: timeout, now: now, log: log, observe: observe,
		window: DefaultIdempotencyWindow, unknownAfter: DefaultUnknownAfter, authTimeout: DefaultAuthenticationTimeout}
}

// ErrRetry wraps a provider outage that the queue should retry later.
var ErrRetry = errors.New("charges: provider unavailable, retry later")

// IdempotencyKey is the provider idempotency key of an operation on a charge.
func IdempotencyKey(chargeID, op string) string { return "gh_" + chargeID + "_" + op }

func (p *Processor) load(ctx context.Context, id string) (Charge, []byte, providers.Provider, error) {
	c, sealed, err := p.store.ChargeForWork(ctx, id)
	if err != nil {
		return Charge{}, nil, nil, err
	}
	prov, err := p.providers.Resolve(ctx, c.ConnectorID, c.Provider)
	if err != nil {
		if errors.Is(err, providers.ErrNotConfigured) {
			return c, sealed, nil, fmt.Errorf("charges: provider %q is not configured on this worker: %w", c.Provider, err)
		}
		return c, sealed, nil, apperr.Unavailable(err)
	}
	return c, sealed, prov, nil
}

// done drops a task whose work was already finished (a duplicate delivery).
func (p *Processor) done(ctx context.Context, task outbox.Task) error {
	return p.store.DeleteTask(ctx, task.ID())
}

// Authorize calls the provider for a created charge. It returns nil when the
// charge reached its next state (or already had), ErrRetry (wrapped) when the
// provider is unavailable and this is not the final attempt.
//
// A provider may accept the payment and not finish it (a Stripe
// PaymentIntent left processing). Then the charge stays created, with the
// provider's reference recorded, and is followed with lookups until the
// payment is final (see follow); it is never failed on a guess, since money
// may still move.
func (p *Processor) Authorize(ctx context.Context, id string, final bool) error {
	return p.AuthorizeAttempt(ctx, id, 0, final)
}

// AuthorizeAttempt is Authorize for the task of one attempt: attempt (from
// 2) is the attempt a failover queued the task for, 0 whatever attempt is
// current. A task of an attempt the charge has already left ends without a
// call (a late retry or a second copy of it): the current attempt has a
// task of its own, and two calls at once under one key only race.
func (p *Processor) AuthorizeAttempt(ctx context.Context, id string, attempt int, final bool) error {
	task := outbox.Task{Type: outbox.ChargeAuthorize, RefID: id}
	c, sealed, prov, err := p.load(ctx, id)
	if err != nil {
		if apperr.KindOf(err) == apperr.KindNotFound {
			return err
		}
		notConfigured := errors.Is(err, providers.ErrNotConfigured)
		if notConfigured && c.ID != "" && c.Status != StatusCreated {
			return p.done(ctx, task) // a duplicate task: the authorization is over
		}
		if notConfigured && c.ID != "" {
			if c.ProviderReference != nil {
				// The provider holds a payment in progress: never fail it unseen.
				return err
			}
			// An earlier attempt, from a worker that had the provider, may
			// have been booked: fail the charge as an unknown outcome, whose
			// charge:reverse releases it once a worker has the provider.
			p.log.ErrorContext(ctx, "provider not configured on this worker; the charge fails and its reverse waits for a worker that has it",
				"charge_id", c.ID, "provider", c.Provider)
			return p.failUnknown(ctx, c, task)
		}
		return err
	}
	if c.Status != StatusCreated {
		p.observe(c.Provider, "authorize", OutcomeNoop, 0)
		return p.done(ctx, task)
	}
	if attempt > 1 && attempt != c.attemptIndex()+1 {
		// Not done: the outbox row belongs to the current attempt's task.
		p.observe(c.Provider, "authorize", OutcomeNoop, 0)
		return nil
	}
	if c.ProviderReference != nil {
		release, err := p.slot(ctx, c)
		if err != nil {
			return err
		}
		defer release()
		return p.follow(ctx, c, prov, task, final)
	}
	if savedCardExpired(c, p.now()) {
		return p.fail(ctx, c, task, "expired_card", "The saved card has expired.")
	}
	card, err := p.card(c, sealed)
	if err != nil {
		return p.fail(ctx, c, task, "processing_error", "The card data could not be read.")
	}
	release, err := p.slot(ctx, c)
	if err != nil {
		return err
	}
	defer release()
	c.attemptStarted = p.stamp()
	owner, err := p.beginAttempt(ctx, &c)
	if err != nil {
		return err
	}
	start := time.Now()
	cctx, cancel := context.WithTimeout(ctx, p.timeout)
	res, err := prov.Authorize(cctx, p.authorizeRequest(c, card))
	cancel()
	release() // the outcome is recorded without the slot
	elapsed := time.Since(start)
	if err != nil {
		if code, ok := failoverCode(c, err, owner); ok {
			p.observe(c.Provider, "authorize", failoverOutcome(err), elapsed)
			return p.moveOn(ctx, c, code)
		}
	}
	if d, ok := providers.AsDecline(err); ok {
		p.observe(c.Provider, "authorize", OutcomeDeclined, elapsed)
		return p.fail(ctx, c, task, d.Code, declineMessage(d))
	}
	if err != nil {
		if !final {
			p.observe(c.Provider, "authorize", OutcomeRetry, elapsed)
			return fmt.Errorf("%w: %v", ErrRetry, err)
		}
		p.observe(c.Provider, "authorize", OutcomeUnavailable, elapsed)
		if providers.NothingBooked(err) {
			return p.fail(ctx, c, task, "provider_unavailable", "The provider did not answer; the charge was not made.")
		}
		return p.failUnknown(ctx, c, task)
	}
	if res.Action != nil {
		p.observe(c.Provider, "authorize", OutcomePending, elapsed)
		return p.requireAction(ctx, c, task, res)
	}
	if res.Pending {
		// Accepted, not finished: record the reference (the card stays
		// sealed until the payment is final) and follow the payment.
		p.observe(c.Provider, "authorize", OutcomePending, elapsed)
		after := c
		after.ProviderReference = &res.Reference
		after.UpdatedAt = p.stamp()
		if err := p.apply(ctx, Transition{Before: c, After: after}); err != nil {
			return err
		}
		return p.authorizeUnknown(ctx, after, final, errStillProcessing)
	}
	p.observe(c.Provider, "authorize", OutcomeSucceeded, elapsed)
	if c.Capture {
		return p.authorized(ctx, c, task, res.Reference, providers.PaymentCaptured, c.Amount, res.Settlement)
	}
	return p.authorized(ctx, c, task, res.Reference, providers.PaymentAuthorized, 0, nil)
}

// follow looks up a payment the provider accepted and had not finished
// (see Authorize). Captured at the provider: the charge is captured with the
// amount the provider took; authorized: it is authorized; failed or
// canceled: it fails, with the provider's reason when it gave one. Still
// processing, or no answer: the charge stays created and the task is tried
// again (after the last attempt the outbox row stays and the sweeper sends
// it again).
func (p *Processor) follow(ctx context.Context, c Charge, prov providers.Provider, task outbox.Task, final bool) error {
	start := time.Now()
	pay, err := p.lookupPayment(ctx, c, prov, *c.ProviderReference)
	elapsed := time.Since(start)
	switch {
	case err != nil:
		p.observe(c.Provider, "authorize_lookup", OutcomeRetry, elapsed)
		return p.authorizeUnknown(ctx, c, final, err)
	case pay.Status == providers.PaymentCaptured, pay.Status == providers.PaymentAuthorized:
		p.observe(c.Provider, "authorize_lookup", OutcomeSucceeded, elapsed)
		return p.authorized(ctx, c, task, *c.ProviderReference, pay.Status, pay.Captured, pay.Settlement)
	case pay.Status == providers.PaymentFailed, pay.Status == providers.PaymentCanceled:
		p.observe(c.Provider, "authorize_lookup", OutcomeDeclined, elapsed)
		if d := pay.Failure; d != nil {
			return p.fail(ctx, c, task, d.Code, declineMessage(d))
		}
		return p.fail(ctx, c, task, "processing_error", "The provider did not complete the payment.")
	default:
		p.observe(c.Provider, "authorize_lookup", OutcomePending, elapsed)
		return p.authorizeUnknown(ctx, c, final, errStillProcessing)
	}
}

// authorized records a payment the provider completed: captured (with
// captured, the amount it took; 0 or more than the charge's means all of
// it) or only authorized.
func (p *Processor) authorized(ctx context.Context, c Charge, task outbox.Task, reference, status string, captured int64, s *providers.Settlement) error {
	after := c
	after.ProviderReference = &reference
	after.UpdatedAt = p.stamp()
	t, err := p.settledTransition(c, after, task, status, captured)
	if err != nil {
		return err
	}
	t.Settlement = s
	return p.apply(ctx, t)
}

// settledTransition is the transition from c to after, made captured (with captured,
// the amount the provider took; 0 or more than the charge's means all of
// it, and charge.captured) or authorized, the card purged.
func (p *Processor) settledTransition(c, after Charge, task outbox.Task, status string, captured int64) (Transition, error) {
	var ev *events.Event
	if status == providers.PaymentCaptured {
		if captured <= 0 || captured > c.Amount {
			captured = c.Amount
		}
		after.Status, after.AmountCaptured = StatusCaptured, captured
		e, err := p.event(after, events.ChargeCaptured)
		if err != nil {
			return Transition{}, err
		}
		ev = &e
	} else {
		after.Status = StatusAuthorized
	}
	return Transition{Before: c, After: after, Event: ev, DoneTask: task.ID(), PurgeCard: true}, nil
}

// authorizeUnknown answers an attempt after which a payment the provider
// accepted is still not final: the charge stays created and the task is
// tried again; past PROVIDER_OUTCOME_UNKNOWN_AFTER each attempt is logged at
// error level.
func (p *Processor) authorizeUnknown(ctx context.Context, c Charge, final bool, err error) error {
	if age := p.now().UTC().Sub(c.CreatedAt); age >= p.unknownAfter {
		p.log.ErrorContext(ctx, "authorization outcome still unknown at the provider; see the runbook ProviderOutcomeUnknown",
			"charge_id", c.ID, "age", age.Round(time.Second).String(), "err", err)
	}
	if !final {
		return fmt.Errorf("%w: %v", ErrRetry, err)
	}
	return fmt.Errorf("charges: the payment of %s is still not final at the provider after the last attempt; the sweeper sends it again: %w", c.ID, err)
}

// Capture captures an authorized charge whose capture was requested.
//
// Within the provider's idempotency window (counted from the capture
// request, so never later than from its first sending) the capture is sent
// under its one key, gh_<charge>_capture, as often as it takes. After the
// window it is never sent again: the payment is looked up
// (providers.Lookup) and its status and captured amount decide. A capture the
// provider answers as processing is followed with lookups.
//
// The charge becomes captured (charge.captured) once the provider has
// captured it, with the amount the provider captured; a decline, or a lookup
// that finds the payment still only authorized, leaves it authorized with
// the failure recorded and the capture request cleared (known: nothing was
// captured); a payment the provider canceled makes it voided. Any other
// answer leaves the outcome unknown: the charge stays authorized with the
// capture pending, so a void or another capture is refused (409
// invalid_state) and no refund can start, and the task is tried again
// (ErrRetry, wrapped; a plain error on the final attempt: the outbox row
// stays and the sweeper sends the task again).
func (p *Processor) Capture(ctx context.Context, id string, final bool) error {
	return p.settle(ctx, id, final, ActionCapture)
}

// Void voids an authorized charge whose void was requested.
func (p *Processor) Void(ctx context.Context, id string, final bool) error {
	return p.settle(ctx, id, final, ActionVoid)
}

func (p *Processor) settle(ctx context.Context, id string, final bool, action string) error {
	task := outbox.Task{Type: outbox.ChargeCapture, RefID: id}
	if action == ActionVoid {
		task.Type = outbox.ChargeVoid
	}
	c, _, prov, err := p.load(ctx, id)
	if err != nil {
		return err
	}
	waiting := c.Status == StatusRequiresAction && action == ActionVoid
	if (c.Status != StatusAuthorized && !waiting) || c.PendingAction == nil || *c.PendingAction != action || c.ProviderReference == nil {
		p.observe(c.Provider, action, OutcomeNoop, 0)
		return p.done(ctx, task)
	}
	release, err := p.slot(ctx, c)
	if err != nil {
		return err
	}
	defer release()
	if action == ActionCapture {
		return p.capture(ctx, c, prov, task, final)
	}
	start := time.Now()
	cctx, cancel := context.WithTimeout(ctx, p.timeout)
	res, err := prov.Void(cctx, providers.VoidRequest{IdempotencyKey: IdempotencyKey(c.ID, "void"), Reference: *c.ProviderReference})
	cancel()
	elapsed := time.Since(start)
	after := c
	after.PendingAction, after.CaptureAmount = nil, nil
	after.UpdatedAt = p.stamp()
	var ev *events.Event
	d, declined := providers.AsDecline(err)
	switch {
	case err == nil && res.Pending && !waiting && providers.SettlesByNotification(c.Provider):
		// Received: the provider's notification settles it (Confirm).
		p.observe(c.Provider, action, OutcomePending, elapsed)
		after.Status = StatusVoiding
		after.FailureCode, after.FailureMessage = nil, nil
	case err == nil:
		p.observe(c.Provider, action, OutcomeSucceeded, elapsed)
		after.FailureCode, after.FailureMessage = nil, nil
		after.Status = StatusVoided
		if waiting {
			after.Authentication.Status = AuthFailed // the cardholder never authenticated it
		}
		e, err := p.event(after, events.ChargeVoided)
		if err != nil {
			return err
		}
		ev = &e
	case declined && waiting:
		// The provider would not cancel a payment waiting for the
		// cardholder: it may have had the answer on its own page. Its
		// answer settles the charge.
		p.observe(c.Provider, action, OutcomeDeclined, elapsed)
		after.FailureCode, after.FailureMessage = &d.Code, ptr(declineMessage(d))
		after.Authentication.Answer = ptr(providers.AnswerReturned)
		return p.apply(ctx, Transition{Before: c, After: after, DoneTask: task.ID(), Cause: CauseVoid,
			Then: &outbox.Task{Type: outbox.ChargeAuthenticate, RefID: c.ID}})
	case declined:
		// The charge stays authorized; the failure is recorded and the merchant may try again.
		p.observe(c.Provider, action, OutcomeDeclined, elapsed)
		after.FailureCode, after.FailureMessage = &d.Code, ptr(declineMessage(d))
	case !final:
		p.observe(c.Provider, action, OutcomeRetry, elapsed)
		return fmt.Errorf("%w: %v", ErrRetry, err)
	case waiting:
		// Whether the payment was cancelled is unknown: never guess. The
		// void stays pending and the sweeper sends it again.
		p.observe(c.Provider, action, OutcomeUnavailable, elapsed)
		return fmt.Errorf("charges: the void of %s, which requires action, is still unknown at the provider after the last attempt: %w", c.ID, err)
	default:
		p.observe(c.Provider, action, OutcomeUnavailable, elapsed)
		after.FailureCode, after.FailureMessage = ptr("provider_unavailable"), ptr("The provider did not answer; the charge is still authorized.")
	}
	return p.apply(ctx, Transition{Before: c, After: after, Event: ev, DoneTask: task.ID(), Cause: CauseVoid, PurgeCard: waiting})
}

func (p *Processor) fail(ctx context.Context, c Charge, task outbox.Task, code, message string) error {
	after := c
	after.Status = StatusFailed
	after.FailureCode, after.FailureMessage = &code, &message
	after.UpdatedAt = p.stamp()
	e, err := p.event(after, events.ChargeFailed)
	if err != nil {
		return err
	}
	return p.apply(ctx, Transition{Before: c, After: after, Event: &e, DoneTask: task.ID(), PurgeCard: true})
}

// failUnknown fails a charge whose last authorization attempt left the
// provider's answer unknown: a timeout or a reset may have lost the answer to
// a booked payment, and an attempt that was never sent says nothing about the
// earlier ones. The charge fails as the contract says, and the same
// transition writes the charge:reverse task, which releases whatever the
// provider booked (see Reverse). The sealed card stays until then: the
// reverse re-sends the authorization with it.
func (p *Processor) failUnknown(ctx context.Context, c Charge, task outbox.Task) error {
	after := c
	after.Status = StatusFailed
	after.FailureCode = ptr("provider_unavailable")
	after.FailureMessage = ptr("The provider did not answer; any authorization it made is being released.")
	after.UpdatedAt = p.stamp()
	e, err := p.event(after, events.ChargeFailed)
	if err != nil {
		return err
	}
	return p.apply(ctx, Transition{Before: c, After: after, Event: &e, DoneTask: task.ID(),
		Then: &outbox.Task{Type: outbox.ChargeReverse, RefID: c.ID}})
}

func (p *Processor) event(c Charge, typ string) (events.Event, error) {
	return events.New(ids.NewUUID(), c.MerchantID, c.Environment, typ, c.UpdatedAt, c.View(), nil)
}

func (p *Processor) stamp() time.Time { return p.now().UTC().Truncate(time.Millisecond) }

func (p *Processor) card(c Charge, sealed []byte) (providers.Card, error) {
	if c.CardToken != nil {
		return providers.Card{Token: *c.CardToken}, nil
	}
	if sealed == nil {
		return providers.Card{}, errors.New("charges: no card data")
	}
	plain, err := p.keys.Open(keyring.PurposeCard, sealed, []byte(c.ID))
	if err != nil {
		return providers.Card{}, err
	}
	var sc secretCard
	if err := json.Unmarshal(plain, &sc); err != nil {
		return providers.Card{}, err
	}
	return providers.Card{Number: sc.Number, CVC: sc.CVC, ExpMonth: sc.ExpMonth, ExpYear: sc.ExpYear}, nil
}

func declineMessage(d *providers.Decline) string {
	if d.Message != "" {
		return d.Message
	}
	switch d.Code {
	case "card_declined":
		return "The card was declined."
	case "insufficient_funds":
		return "The card has insufficient funds."
	case "expired_card":
		return "The card has expired."
	case "processing_error":
		return "An error occurred while processing the card."
	}
	return "The provider refused the operation."
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

func ptr[T any](v T) *T { return &v }

// ValidID reports whether id has the shape of a charge or refund id (a UUID),
// so malformed ids are answered "not found" without a database round trip.
func ValidID(id string) bool { return ids.ValidUUID(id) }
