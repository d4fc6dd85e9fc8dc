package webhooks

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gatehouse-pay/gatehouse/internal/apperr"
	"github.com/gatehouse-pay/gatehouse/internal/keyring"
	"github.com/gatehouse-pay/gatehouse/internal/outbox"
)

// Outgoing is one HTTP POST of a delivery.
type Outgoing struct {
	URL     string
	Body    []byte
	Headers map[string]string
	// OAuth2 is the endpoint's OAuth 2.0 client credentials (nil for
	// none): the sender adds a bearer token.
	OAuth2 *OAuth2
	// ClientCert is the merchant's client certificate for an https mTLS
	// endpoint (nil for none); ClientCertID is its fingerprint.
	ClientCert   *tls.Certificate
	ClientCertID string
}

// Response is what came of one POST: a status code (0 when none came), the
// time it took, a transport error (timeout, refused, redirect, blocked
// address) and the first bytes of the answer's body.
type Response struct {
	StatusCode int
	Duration   time.Duration
	Err        error
	// Reason is what the merchant's attempt log shows for Err: one of a
	// small fixed set ("destination not allowed", "timeout", ...). Err
	// itself may name internal addresses and goes to the operator's log only.
	Reason string
	Body   string
	// TokenRefreshed: the receiver refused the cached OAuth 2.0 token with
	// a 401, and this is what came of the POST made again with a new one.
	TokenRefreshed bool
}

// OK reports a 2xx answer.
func (r Response) OK() bool { return r.Err == nil && r.StatusCode >= 200 && r.StatusCode < 300 }

// Sender POSTs deliveries; it is the outbound HTTP adapter.
type Sender interface {
	Send(ctx context.Context, o Outgoing) Response
}

// AttemptRecord is one attempt and the state it leaves the delivery in. The
// store applies it only if the delivery is still pending with Attempt-1
// attempts, so an attempt is recorded once.
type AttemptRecord struct {
	DeliveryID    string
	Attempt       Attempt
	Status        string
	ChainAttempts int
	NextAttemptAt *time.Time
	DoneTask      string // deleted from the outbox when the delivery is final
	// NewTask writes the delivery's own task to the outbox with the
	// attempt: a first attempt made by its event's task that calls for a
	// retry.
	NewTask bool
}

// ReasonFailed is the attempt log's reason for a transport error the sender
// did not classify.
const ReasonFailed = "connection failed"

// RetryIn asks the queue to run the delivery task again after Delay.
type RetryIn struct{ Delay time.Duration }

func (r *RetryIn) Error() string { return "webhook delivery: next attempt in " + r.Delay.String() }

// Deliverer is the worker side: it sends one attempt of a delivery and
// schedules the next.
type Deliverer struct {
	store    Store
	sender   Sender
	keys     *keyring.Keyring
	certs    ClientCertStore
	schedule []time.Duration
	now      func() time.Time
	log      *slog.Logger
	observe  func(outcome string, attempt int, d time.Duration)
	first    func(delay time.Duration)

	// slots bound this process's attempts per endpoint, so one slow or
	// hanging endpoint holds few of the worker's slots; how many adapts to
	// each endpoint (see endpointSlots), from perEndpoint at first up to its
	// merchant's slots. A delivery that finds its endpoint at its window
	// waits up to slotWait for a slot while its expected wait (its place in
	// the queue at the endpoint's pace) is under waitBudget: a fast
	// endpoint's burst goes out as slots free. An endpoint that is not fast
	// may keep only maxWaiting deliveries waiting in the whole process:
	// waiting holds one of the worker's own slots, so beyond that it is put
	// back at once and several slow endpoints cannot fill the worker.
	mu          sync.Mutex
	slots       map[string]*endpointSlots
	perEndpoint int
	slotWait    time.Duration
	waiting     atomic.Int32
	maxWaiting  int32

	// merchants bound this process's attempts per merchant (over all its
	// endpoints), so one merchant's slow or dead endpoints hold at most
	// perMerchant of the worker's slots and another merchant's first
	// attempts find one free. A delivery that finds its merchant at the cap
	// is put back (see acquire), except one to a fast endpoint, which waits
	// for the merchant's next free slot under the same rule as above.
	merchants   map[string]*merchantSlots
	perMerchant int

	// disableAfter is how long an endpoint may do nothing but fail before
	// its next failure disables it (0: never); onDisable is told each time
	// an endpoint is disabled, with the reason.
	disableAfter time.Duration
	onDisable    func(reason string)
	// failingAfter is how long an endpoint may do nothing but fail before
	// its next failure sends webhook_endpoint.failing (0: never);
	// onOperational is told the type of each operational event written.
	failingAfter  time.Duration
	onOperational func(eventType string)

	// enqueue hands a delivery's own task to the queue, to run after a
	// delay: the event's task's hand-offs and retries (see DeliverEvent).
	enqueue func(ctx context.Context, t outbox.Task, in time.Duration) error
	// handOff is told the reason of each hand-off (the HandOff constants).
	handOff func(reason string)
}

// The reasons an event's task hands a first attempt off (see DeliverEvent).
const (
	HandOffScheduled       = "scheduled"         // its first attempt is not due yet
	HandOffOrdered         = "ordered"           // it waits for an earlier delivery
	HandOffEndpointUnknown = "endpoint_unknown"  // the endpoint has not answered in this process, and its probe is under way
	HandOffEndpointNotFast = "endpoint_not_fast" // the endpoint's answers take fastSend or more
	HandOffEndpointBusy    = "endpoint_busy"     // the endpoint's window is full
	HandOffMerchantBusy    = "merchant_busy"     // the merchant's slots are taken
)

// WithHandOffs makes the deliverer tell f the reason of each first attempt
// an event's task hands off.
func (d *Deliverer) WithHandOffs(f func(reason string)) *Deliverer {
	d.handOff = f
	return d
}

// DefaultDisableAfter is WEBHOOK_DISABLE_AFTER's default: five days of
// nothing but failures.
const DefaultDisableAfter = 120 * time.Hour

// DefaultFailingAfter is WEBHOOK_FAILING_AFTER's default: an hour of
// nothing but failures sends webhook_endpoint.failing.
const DefaultFailingAfter = time.Hour

// orderedRecheck is how long after its predecessor's next attempt a
// waiting ordered delivery looks again (at least this long from now).
const orderedRecheck = time.Second

// statusGone is the answer with which a receiver asks to be sent nothing more.
const statusGone = 410

// maxWaitingDefault is how many deliveries to endpoints that are not fast
// may wait for an endpoint slot at once in one worker process (of the 100
// slots of its delivery pool).
const maxWaitingDefault = 4

// fastSend is the attempt duration under which an endpoint counts as fast.
const fastSend = 100 * time.Millisecond

// PerEndpointDefault is how many attempts to one endpoint a worker process
// runs at once at first; the window then adapts to the endpoint.
const PerEndpointDefault = 10

// waitBudget is the longest expected wait for which a delivery to a fast
// endpoint queues for its endpoint's or merchant's next slot rather than
// being put back.
const waitBudget = 50 * time.Millisecond

// MerchantSlotsDefault is WEBHOOK_MERCHANT_SLOTS's default: how many
// attempts to one merchant's endpoints a worker process runs at once, a
// quarter of its 100 delivery slots.
const MerchantSlotsDefault = 25

// acquire takes a slot of the endpoint and one of its merchant, in that
// order. When either is at its cap it returns ok false and how long the
// delivery waits before it is tried again (see pushBacks). The caller passes
// the attempt's outcome and duration to release.
func (d *Deliverer) acquire(ctx context.Context, merchantID, endpointID string) (release func(ok bool, took time.Duration), retry time.Duration, ok bool) {
	m, e := d.slotsOf(merchantID, endpointID)
	// The endpoint's slot first: a delivery that waits for its endpoint
	// holds none of its merchant's. A slow endpoint's deliveries may then
	// hold only slowShare of the merchant's slots, and when put back they
	// return at the pace at which its slots free. A fast endpoint's delivery
	// waits for a merchant's slot while its expected wait is short; others
	// are tried again shortly.
	now, p := d.now(), e.pace()
	if !d.acquireEndpoint(ctx, e, p) {
		return nil, e.back.delay(now, p.took, e.current()), false
	}
	limit := d.perMerchant
	if p.slow {
		limit = slowShare(d.perMerchant)
	}
	if !m.tryTake(limit) {
		if p.slow || !p.fast || !d.fastMerchantSlot(ctx, m) {
			e.cancel()
			if p.slow {
				return nil, m.back.delay(now, p.took, limit), false
			}
			return nil, busyJitter(busyRetry), false
		}
	}
	return d.releaser(m, e), 0, true
}

// releaser frees the slots of an attempt, taken of m and e, with the
// attempt's outcome and duration.
func (d *Deliverer) releaser(m *merchantSlots, e *endpointSlots) func(ok bool, took time.Duration) {
	return func(ok bool, took time.Duration) {
		e.release(d.now(), ok, took, d.perMerchant)
		m.release(took, d.perMerchant)
	}
}

// fastMerchantSlot takes one of the merchant's slots for an attempt to a
// fast endpoint, waiting for one while the expected wait is under
// waitBudget. Slow endpoints may hold all but a fifth of the merchant's
// slots: the rest turn over at the fast endpoints' pace.
func (d *Deliverer) fastMerchantSlot(ctx context.Context, m *merchantSlots) bool {
	limit := d.perMerchant
	return m.wait(ctx, limit, limit-slowShare(limit), d.slotWait, shortWait)
}

// slotsOf returns the slots of the merchant and of the endpoint in this
// process, made on first use.
func (d *Deliverer) slotsOf(merchantID, endpointID string) (*merchantSlots, *endpointSlots) {
	d.mu.Lock()
	defer d.mu.Unlock()
	m, found := d.merchants[merchantID]
	if !found {
		m = &merchantSlots{}
		d.merchants[merchantID] = m
	}
	e, found := d.slots[endpointID]
	if !found {
		e = newEndpointSlots(d.perEndpoint, d.perMerchant)
		d.slots[endpointID] = e
	}
	return m, e
}

// acquireNow takes a slot of the endpoint and one of its merchant for an
// event's task's first attempt; else it returns nil and the reason, and the
// delivery is handed off.
//   - An endpoint that has not answered in this process yet runs one
//     attempt at a time, its probe: the event's task makes it when no other
//     is under way, within the share of the merchant's slots that slow
//     endpoints may hold. So a worker that starts with a backlog learns
//     each endpoint's pace from the first event that reaches it, instead of
//     handing off every delivery until a delivery's own task has answered.
//   - An endpoint known to answer fast gets its slots when they are free
//     now or, as for the delivery's own task (see acquire), expected to free
//     within waitBudget.
//   - Any other is handed off: its attempts could hang, and the event's
//     task must not wait on them.
func (d *Deliverer) acquireNow(ctx context.Context, merchantID, endpointID string) (func(ok bool, took time.Duration), string) {
	m, e := d.slotsOf(merchantID, endpointID)
	release := d.releaser(m, e)
	p := e.pace()
	if !p.known {
		if !e.tryTake(1) {
			return nil, HandOffEndpointUnknown
		}
		if !m.tryTake(slowShare(d.perMerchant)) {
			e.cancel()
			return nil, HandOffMerchantBusy
		}
		return release, ""
	}
	if !p.fast {
		return nil, HandOffEndpointNotFast
	}
	if !d.acquireEndpoint(ctx, e, p) {
		return nil, HandOffEndpointBusy
	}
	if !d.fastMerchantSlot(ctx, m) {
		e.cancel()
		return nil, HandOffMerchantBusy
	}
	return release, ""
}

// shortWait admits a waiter whose expected wait is known and under waitBudget.
func shortWait(expected time.Duration, known bool, _ int) bool { return known && expected < waitBudget }

// acquireEndpoint takes one of the endpoint's slots, waiting up to slotWait
// for one to free when the endpoint is fast and the wait likely short, when
// the endpoint has not answered yet and fewer than perEndpoint wait for its
// first answer, or, for an endpoint that is not fast, while fewer than
// maxWaiting wait in the process.
func (d *Deliverer) acquireEndpoint(ctx context.Context, e *endpointSlots, p pace) bool {
	e.mu.Lock()
	slots := e.slots()
	took := e.take(slots)
	e.mu.Unlock()
	if took {
		return true
	}
	if p.fast {
		return e.wait(ctx, slots, slots, d.slotWait, shortWait)
	}
	if !p.known {
		return e.wait(ctx, slots, slots, d.slotWait, func(_ time.Duration, _ bool, queued int) bool { return queued < d.perEndpoint })
	}
	defer d.waiting.Add(-1)
	if d.waiting.Add(1) > d.maxWaiting {
		return false
	}
	return e.wait(ctx, slots, slots, d.slotWait, func(time.Duration, bool, int) bool { return true })
}

// NewDeliverer returns the delivery processor. schedule[i] is the delay
// before attempt i+1 (schedule[0] is normally 0); its length is the number of
// attempts before a delivery fails.
func NewDeliverer(store Store, sender Sender, keys *keyring.Keyring, schedule []time.Duration, now func() time.Time, log *slog.Logger, observe func(outcome string, attempt int, d time.Duration)) *Deliverer {
	if observe == nil {
		observe = func(string, int, time.Duration) {}
	}
	certs, _ := store.(ClientCertStore) // internal/store keeps them; nil fails mtls endpoints' attempts
	return &Deliverer{store: store, sender: sender, keys: keys, certs: certs, schedule: schedule, now: now, log: log, observe: observe,
		slots: map[string]*endpointSlots{}, perEndpoint: PerEndpointDefault, slotWait: time.Second, maxWaiting: maxWaitingDefault,
		merchants: map[string]*merchantSlots{}, perMerchant: MerchantSlotsDefault,
		disableAfter: DefaultDisableAfter, onDisable: func(string) {},
		failingAfter: DefaultFailingAfter, onOperational: func(string) {},
		enqueue: func(context.Context, outbox.Task, time.Duration) error { return errors.New("webhooks: no queue") },
		handOff: func(string) {}}
}

// WithMerchantSlots sets how many attempts to one merchant's endpoints the
// process runs at once (WEBHOOK_MERCHANT_SLOTS); n < 1 keeps the default.
func (d *Deliverer) WithMerchantSlots(n int) *Deliverer {
	if n >= 1 {
		d.perMerchant = n
	}
	return d
}

// WithHealth sets how long an endpoint may do nothing but fail before it is
// disabled (WEBHOOK_DISABLE_AFTER; 0: never) and what to tell when an
// endpoint is disabled. A 410 Gone disables an endpoint at once either way.
func (d *Deliverer) WithHealth(disableAfter time.Duration, onDisable func(reason string)) *Deliverer {
	d.disableAfter = disableAfter
	if onDisable != nil {
		d.onDisable = onDisable
	}
	return d
}

// WithOperationalEvents sets how long an endpoint may do nothing but fail
// before its next failure sends webhook_endpoint.failing
// (WEBHOOK_FAILING_AFTER; 0: never), and what to tell of each operational
// event written.
func (d *Deliverer) WithOperationalEvents(failingAfter time.Duration, written func(eventType string)) *Deliverer {
	d.failingAfter = failingAfter
	if written != nil {
		d.onOperational = written
	}
	return d
}

// AnnounceFailing sends webhook_endpoint.failing for the endpoints whose
// run of failures began WEBHOOK_FAILING_AFTER ago or more and was not told
// yet (at most 100 a call; the next call takes the rest). Attempts
// announce as they fail; this catches the endpoints no attempt comes to
// in time.
func (d *Deliverer) AnnounceFailing(ctx context.Context) error {
	if d.failingAfter <= 0 {
		return nil
	}
	now := d.now()
	before := now.Add(-d.failingAfter)
	due, err := d.store.FailingUnannounced(ctx, before, 100)
	if err != nil {
		return err
	}
	for _, id := range due {
		d.applyHealth(ctx, Health{EndpointID: id, Announce: true, FailingBefore: before, At: now})
	}
	return nil
}

// healthAfter is the change of the endpoint's health that an attempt's
// answer calls for, and whether the delivery stops here. Test deliveries
// change nothing.
func (d *Deliverer) healthAfter(del Delivery, ep Endpoint, res Response, now time.Time) (*Health, bool) {
	if del.Test {
		return nil, false
	}
	h := Health{EndpointID: ep.ID, At: now}
	switch {
	case res.Err == nil && res.StatusCode == statusGone:
		h.Disable = DisabledGone
		return &h, true
	case res.OK():
		if ep.FailingSince == nil && !ep.HealthAnnounced {
			return nil, false // the usual case: nothing to write
		}
		h.Recovered = true
	case ep.FailingSince == nil:
		h.Failing = true
	case d.disableAfter > 0 && !now.Before(ep.FailingSince.Add(d.disableAfter)):
		h.Disable, h.FailingBefore = DisabledFailing, now.Add(-d.disableAfter)
		return &h, true
	case d.failingAfter > 0 && !ep.HealthAnnounced && !now.Before(ep.FailingSince.Add(d.failingAfter)):
		h.Announce, h.FailingBefore = true, now.Add(-d.failingAfter)
	default:
		return nil, false
	}
	return &h, false
}

// applyHealth writes a health change after the attempt was recorded. A
// failure is only logged: the next attempt's answer decides again.
func (d *Deliverer) applyHealth(ctx context.Context, h Health) {
	res, err := d.store.UpdateHealth(ctx, h)
	if err != nil {
		d.log.WarnContext(ctx, "webhook endpoint health not updated", "endpoint_id", h.EndpointID, "err", err)
		return
	}
	if res.Disabled {
		d.log.WarnContext(ctx, "webhook endpoint disabled", "endpoint_id", h.EndpointID, "reason", h.Disable)
		d.onDisable(h.Disable)
	}
	if res.Event != "" {
		d.log.InfoContext(ctx, "operational event written", "endpoint_id", h.EndpointID, "event_type", res.Event)
		d.onOperational(res.Event)
	}
	for _, t := range res.Tasks {
		// The outbox row is written: a task that is not enqueued now is
		// swept later.
		if err := d.enqueue(ctx, t, 0); err != nil {
			d.log.WarnContext(ctx, "operational event's deliveries not enqueued; the outbox sweep sends them", "task", t.Type+":"+t.RefID, "err", err)
		}
	}
}

// Task is the outbox task of a delivery.
func Task(deliveryID string) outbox.Task {
	return outbox.Task{Type: outbox.WebhookDeliver, RefID: deliveryID}
}

// TaskTo is the outbox task of a delivery to endpointID, which picks its
// queue.
func TaskTo(deliveryID, endpointID string) outbox.Task {
	t := Task(deliveryID)
	t.Key = endpointID
	return t
}

// WithFirstAttemptDelay makes the deliverer report, for each delivery's first
// attempt, the time from the delivery's commit (with its event) to the start
// of the attempt. Test deliveries are not reported.
func (d *Deliverer) WithFirstAttemptDelay(f func(delay time.Duration)) *Deliverer {
	d.first = f
	return d
}

// WithQueue sets how the deliverer enqueues a delivery's own task (see
// DeliverEvent).
func (d *Deliverer) WithQueue(enqueue func(ctx context.Context, t outbox.Task, in time.Duration) error) *Deliverer {
	d.enqueue = enqueue
	return d
}

// EventTask is the outbox task that makes the first attempts of an event's
// deliveries.
func EventTask(eventID string) outbox.Task {
	return outbox.Task{Type: outbox.WebhookEvent, RefID: eventID}
}

// errHandOff: the event's task does not make this first attempt (its
// endpoint or merchant is busy, the endpoint is not fast or its probe is
// under way, or an ordered delivery must wait); the delivery's own task will.
var errHandOff = errors.New("webhook delivery handed off")

// DeliverEvent makes the first attempt of every delivery of an event that
// has none yet, at once, each within its endpoint's and merchant's slots.
// A delivery it cannot attempt at once is handed off to a task of its own
// (webhook:deliver, on its endpoint's queue): one whose endpoint or merchant
// is at its cap, whose endpoint is known not to answer fast (so a slow
// endpoint holds the event's task at most once per process, for its probe)
// or is being probed, or that waits for an earlier ordered delivery (see
// acquireNow). A first attempt that calls for a retry writes the
// delivery's own task with the attempt. The event's task is deleted with
// the hand-offs, in one statement, or, when the event has one delivery to
// attempt and it was attempted, with that attempt's record; run again
// after a crash, it attempts only the deliveries still without an attempt
// or a task of their own.
func (d *Deliverer) DeliverEvent(ctx context.Context, eventID string) error {
	works, err := d.store.EventFirsts(ctx, eventID)
	if err != nil {
		return err
	}
	type outcome struct {
		id, endpoint string
		err          error
	}
	results := make([]outcome, len(works))
	// One delivery (an event to the merchant's one endpoint, the usual
	// case): the record of its attempt also deletes the event's task, and
	// FinishEvent has nothing left to do.
	firsts := make([]firstAttempt, len(works))
	if len(works) == 1 {
		firsts[0].finish = EventTask(eventID).ID()
	}
	var wg sync.WaitGroup
	for i, w := range works {
		wg.Go(func() {
			id := w.Delivery.ID
			err := d.attempt(ctx, w.Delivery, w.Endpoint, w.Body, Task(id), &firsts[i])
			results[i] = outcome{id: id, endpoint: w.Endpoint.ID, err: err}
		})
	}
	wg.Wait()
	var handOff []string
	var tasks []outbox.Task
	for _, r := range results {
		switch {
		case errors.Is(r.err, errHandOff):
			handOff = append(handOff, r.id)
			tasks = append(tasks, TaskTo(r.id, r.endpoint))
		case r.err != nil:
			return r.err // the attempts made are recorded; a run again skips them
		}
	}
	if len(works) == 1 && firsts[0].finished && len(handOff) == 0 {
		return nil
	}
	if err := d.store.FinishEvent(ctx, eventID, handOff); err != nil {
		return err
	}
	for _, t := range tasks {
		if err := d.enqueue(ctx, t, 0); err != nil {
			// Its outbox row is written: the sweeper enqueues it.
			d.log.WarnContext(ctx, "webhook delivery handed off but not enqueued", "delivery_id", t.RefID, "err", err)
		}
	}
	return nil
}

// Deliver makes the next attempt of a pending delivery. It returns nil when
// the delivery is final (or was already), *RetryIn when the next attempt is
// due later, and other errors when the database failed (the queue retries).
func (d *Deliverer) Deliver(ctx context.Context, id string) error {
	task := Task(id)
	del, ep, body, err := d.store.DeliveryForWork(ctx, id)
	if err != nil {
		return err
	}
	if del.Status != StatusPending {
		return d.store.DeleteTask(ctx, task.ID())
	}
	return d.attempt(ctx, del, ep, body, task, nil)
}

// firstAttempt is a first attempt made by its event's task (see
// DeliverEvent): attempt then returns errHandOff rather than wait, and a
// retry is a task of the delivery's own, enqueued there. With finish, the
// event's task id, the event has no other delivery to attempt: the
// attempt's record deletes the task too, and finished says it was applied,
// so it did.
type firstAttempt struct {
	finish   string
	finished bool
}

// attempt makes the next attempt of del (see Deliver and firstAttempt).
func (d *Deliverer) attempt(ctx context.Context, del Delivery, ep Endpoint, body []byte, task outbox.Task, first *firstAttempt) error {
	now := d.now().UTC()
	if first != nil && del.NextAttemptAt != nil && del.NextAttemptAt.After(now) {
		d.handOff(HandOffScheduled)
		return errHandOff
	}
	if del.NextAttemptAt != nil {
		switch early := del.NextAttemptAt.Sub(now); {
		case early > time.Second:
			// Enqueued early (the sweeper after a lost task): wait for the schedule.
			return &RetryIn{Delay: early}
		case early > 0:
			// The queue keeps times in whole seconds: wait out the rest here,
			// so no attempt is made before its time.
			select {
			case <-time.After(early):
			case <-ctx.Done():
				return ctx.Err()
			}
			now = d.now().UTC()
		}
	}
	n := del.Attempts + 1
	if ep.DeletedAt != nil || !ep.Active {
		msg := "The endpoint was deleted or disabled."
		return d.record(ctx, del, task, Attempt{Attempt: n, StartedAt: now, Error: &msg}, false, true, first)
	}
	if body == nil {
		msg := "The event is past its retention period."
		return d.record(ctx, del, task, Attempt{Attempt: n, StartedAt: now, Error: &msg}, false, true, first)
	}
	secrets := Secrets{}
	cur, err := d.keys.Open(keyring.PurposeWebhook, ep.SecretSealed, []byte(ep.ID))
	if err != nil {
		return apperr.Internal(fmt.Errorf("webhooks: open secret of %s: %w", ep.ID, err))
	}
	secrets.Current = string(cur)
	if ep.PreviousSecretSealed != nil && ep.PreviousSecretUntil != nil && now.Before(*ep.PreviousSecretUntil) {
		if prev, err := d.keys.Open(keyring.PurposeWebhook, ep.PreviousSecretSealed, []byte(ep.ID)); err == nil {
			secrets.Previous = string(prev)
		}
	}
	headers, err := DeliveryHeaders(body, secrets, AttemptHeaders{EventID: del.EventID, EventType: del.EventType, DeliveryID: del.ID,
		Attempt: n, Sequence: del.Sequence, Test: del.Test}, now)
	if err != nil {
		return apperr.Internal(err)
	}
	out := Outgoing{URL: ep.URL, Body: body, Headers: headers}
	if err := d.authenticate(ctx, ep, &out, now); err != nil {
		return err
	}

	if ep.Ordered && del.OrderedObject != nil {
		// Ordered: wait for the object's earlier deliveries to this endpoint
		// (pending ones: delivered or failed for good lets this one go).
		wait, at, err := d.store.WaitInOrder(ctx, del, func(earliest *time.Time) time.Time {
			next := now.Add(orderedRecheck)
			if earliest != nil && earliest.After(now) {
				next = earliest.Add(orderedRecheck)
			}
			return next
		})
		if err != nil {
			return err
		}
		if wait {
			if first != nil {
				d.handOff(HandOffOrdered)
				return errHandOff
			}
			return &RetryIn{Delay: at.Sub(now)} // not an attempt
		}
	}

	var release func(ok bool, took time.Duration)
	if first != nil {
		var why string
		if release, why = d.acquireNow(ctx, ep.MerchantID, ep.ID); release == nil {
			d.handOff(why)
			return errHandOff
		}
	} else {
		var busy time.Duration
		var ok bool
		if release, busy, ok = d.acquire(ctx, ep.MerchantID, ep.ID); !ok {
			return &RetryIn{Delay: busy} // not an attempt: the merchant or the endpoint is busy
		}
	}
	if d.first != nil && del.Attempts == 0 && !del.Test {
		d.first(d.now().Sub(del.CreatedAt))
	}
	res := d.sender.Send(ctx, out)
	release(res.OK(), res.Duration)
	a := Attempt{Attempt: n, StartedAt: now, DurationMS: int(res.Duration / time.Millisecond)}
	if res.StatusCode != 0 {
		code := res.StatusCode
		a.StatusCode = &code
	}
	if res.Err != nil {
		msg := res.Reason
		if msg == "" {
			msg = ReasonFailed
		}
		a.Error = &msg
		d.log.WarnContext(ctx, "webhook attempt failed", "delivery_id", del.ID, "endpoint_id", ep.ID,
			"attempt", n, "reason", msg, "error", res.Err.Error())
	} else if !res.OK() {
		msg := "non-2xx answer"
		switch {
		case res.StatusCode >= 300 && res.StatusCode < 400:
			msg = "redirect not followed"
		case res.StatusCode == statusGone && !del.Test:
			msg = "410 Gone: the endpoint is disabled"
		}
		a.Error = &msg
	}
	if a.Error != nil && res.TokenRefreshed {
		msg := *a.Error + " (after the receiver refused the oauth2 token with 401 and a new one was fetched)"
		a.Error = &msg
	}
	if res.Body != "" {
		b := res.Body
		a.ResponseBody = &b
	}
	outcome := "succeeded"
	if !res.OK() {
		outcome = "failed"
	}
	d.observe(outcome, n, res.Duration)
	health, stop := d.healthAfter(del, ep, res, now)
	err = d.record(ctx, del, task, a, res.OK(), stop, first)
	var retry *RetryIn
	if health != nil && (err == nil || errors.As(err, &retry)) {
		d.applyHealth(ctx, *health)
	}
	return err
}

// record stores the attempt and decides what comes next. A retry after a
// first attempt made by the event's task (first) is a task of the
// delivery's own, written with the attempt and enqueued here.
func (d *Deliverer) record(ctx context.Context, del Delivery, task outbox.Task, a Attempt, ok, stop bool, first *firstAttempt) error {
	chain := del.ChainAttempts + 1
	r := AttemptRecord{DeliveryID: del.ID, Attempt: a, ChainAttempts: chain}
	var retry *RetryIn
	switch {
	case ok:
		r.Status, r.DoneTask = StatusSucceeded, task.ID()
	case stop || chain >= len(d.schedule):
		r.Status, r.DoneTask = StatusFailed, task.ID()
	default:
		delay := scheduleJitter(d.schedule[chain])
		next := a.StartedAt.Add(time.Duration(a.DurationMS)*time.Millisecond + delay)
		r.Status, r.NextAttemptAt = StatusPending, &next
		retry = &RetryIn{Delay: max(delay, time.Millisecond)}
		r.NewTask = first != nil
	}
	if first != nil && first.finish != "" {
		r.DoneTask = first.finish // a first attempt has no task of its own to delete
	}
	applied, err := d.store.RecordAttempt(ctx, r)
	if err == nil && applied && first != nil && first.finish != "" {
		first.finished = true
	}
	switch {
	case err != nil:
		return err
	case retry == nil:
		return nil
	case first == nil:
		return retry
	case applied:
		if err := d.enqueue(ctx, TaskTo(del.ID, del.EndpointID), retry.Delay); err != nil {
			// Its outbox row is written: the sweeper enqueues it (early;
			// it then waits for its time).
			d.log.WarnContext(ctx, "webhook retry not enqueued", "delivery_id", del.ID, "err", err)
		}
	}
	return nil
}
