package charges

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/gatehouse-pay/gatehouse/internal/connectors"
	"github.com/gatehouse-pay/gatehouse/internal/events"
	"github.com/gatehouse-pay/gatehouse/internal/outbox"
	"github.com/gatehouse-pay/gatehouse/internal/providers"
	"github.com/gatehouse-pay/gatehouse/internal/resource"
)

// Attempt statuses.
const (
	AttemptSucceeded = "succeeded"
	AttemptFailed    = "failed"
	// AttemptUnknown: under way, or its answer was lost and is being
	// settled at its provider (never a reason to move on).
	AttemptUnknown = "unknown"
)

// CauseFailover is the cause when an attempt failed in a way another
// connector may fix (a soft decline, or an outage in which nothing was
// booked), and the charge moves on to the next connector of its route. The
// charge stays created.
const CauseFailover = "failover"

// Attempt is one try of a charge at one connector, as stored.
type Attempt struct {
	Connector         string     `json:"connector"`
	Provider          string     `json:"provider"`
	Status            string     `json:"status"`
	FailureCode       *string    `json:"failure_code"`
	ProviderReference *string    `json:"provider_reference"`
	StartedAt         time.Time  `json:"started_at"`
	EndedAt           *time.Time `json:"ended_at"`
}

// RouteStep is one connector of a charge's route.
type RouteStep struct {
	Connector string `json:"connector"`
	Provider  string `json:"provider"`
}

func attemptViews(list []Attempt) []resource.ChargeAttempt {
	out := make([]resource.ChargeAttempt, len(list))
	for i, a := range list {
		v := resource.ChargeAttempt{Provider: a.Provider, Status: a.Status, FailureCode: a.FailureCode,
			ProviderReference: a.ProviderReference, StartedAt: events.Timestamp(a.StartedAt)}
		if a.Connector != "" {
			v.Connector = ptr(a.Connector)
		}
		if a.EndedAt != nil {
			ts := events.Timestamp(*a.EndedAt)
			v.EndedAt = &ts
		}
		out[i] = v
	}
	return out
}

// attemptIndex is the position of the charge's current connector in its
// route (0 for a charge made before connectors).
func (c Charge) attemptIndex() int {
	if c.ConnectorID == nil {
		return 0
	}
	for i, s := range c.Route {
		if s.Connector == *c.ConnectorID {
			return i
		}
	}
	return 0
}

// AuthorizeKey is the provider idempotency key of the charge's current
// attempt: the first keeps gh_<charge>_authorize, the n-th (n > 1)
// gh_<charge>_authorize_<n>.
func (c Charge) AuthorizeKey() string {
	if i := c.attemptIndex(); i > 0 {
		return IdempotencyKey(c.ID, "authorize_"+strconv.Itoa(i+1))
	}
	return IdempotencyKey(c.ID, "authorize")
}

// nextStep is the connector after the current one, if the route has one.
func (c Charge) nextStep() (RouteStep, bool) {
	i := c.attemptIndex()
	if i+1 < len(c.Route) {
		return c.Route[i+1], true
	}
	return RouteStep{}, false
}

// begun reports whether the current attempt is recorded (begun before the
// call, so a later run knows a request may have reached the provider).
func (c Charge) begun() bool { return len(c.Attempts) == c.attemptIndex()+1 }

// currentAttempt is the current attempt's record, begun or not.
func (c Charge) currentAttempt(now time.Time) Attempt {
	if c.begun() {
		return c.Attempts[len(c.Attempts)-1]
	}
	a := Attempt{Provider: c.Provider, Status: AttemptUnknown, StartedAt: now}
	if c.ConnectorID != nil {
		a.Connector = *c.ConnectorID
	}
	return a
}

// withAttempt is the charge's attempts with the current one set to a.
func (c Charge) withAttempt(a Attempt) []Attempt {
	out := make([]Attempt, 0, len(c.Attempts)+1)
	out = append(out, c.Attempts...)
	if c.begun() {
		out[len(out)-1] = a
		return out
	}
	return append(out, a)
}

// recordAttempt sets the current attempt from the transition's outcome: a
// charge authorized or captured succeeded; failed, it failed (or stays
// unknown when the answer was lost and a reverse releases it); waiting for
// the cardholder or followed at the provider, it stays unknown.
// It reports whether it changed the attempts.
func (p *Processor) recordAttempt(t *Transition) bool {
	b := t.Before
	if t.Cause == CauseFailover || (b.Status != StatusCreated && b.Status != StatusRequiresAction) {
		return false
	}
	now := p.stamp()
	a := b.currentAttempt(b.attemptStart(now))
	a.ProviderReference = t.After.ProviderReference
	switch t.After.Status {
	case StatusAuthorized, StatusCaptured:
		a.Status, a.FailureCode, a.EndedAt = AttemptSucceeded, nil, &now
	case StatusFailed:
		a.Status, a.FailureCode, a.EndedAt = AttemptFailed, t.After.FailureCode, &now
		if t.Then != nil && t.Then.Type == outbox.ChargeReverse {
			a.Status = AttemptUnknown
		}
	case StatusVoided:
		a.Status, a.FailureCode, a.EndedAt = AttemptFailed, ptr("authentication_failed"), &now
	default:
		if t.After.ProviderReference == b.ProviderReference && b.begun() {
			return false // nothing new to record
		}
		a.Status = AttemptUnknown
	}
	t.After.Attempts = b.withAttempt(a)
	return true
}

// attemptStart is when the current attempt began this run (Authorize sets
// it before its call), or now.
func (c Charge) attemptStart(now time.Time) time.Time {
	if c.attemptStarted.IsZero() {
		return now
	}
	return c.attemptStarted
}

// beginAttempt records the current attempt before its call, when the charge
// could move on after it: a later run then knows the call may have reached
// the provider. It reports whether this run recorded it (and so made every
// call of the attempt so far); false when an earlier run had.
func (p *Processor) beginAttempt(ctx context.Context, c *Charge) (owner bool, err error) {
	if _, ok := c.nextStep(); !ok || c.begun() {
		return false, nil
	}
	a := c.currentAttempt(p.stamp())
	applied, err := p.store.BeginAttempt(ctx, c.ID, len(c.Attempts), a)
	if err != nil || !applied {
		return false, err
	}
	c.Attempts = c.withAttempt(a)
	return true, nil
}

// moveOn ends the current attempt as failed with code and hands the charge
// to the next connector of its route, in a new authorize task. The charge
// stays created: nothing was taken.
func (p *Processor) moveOn(ctx context.Context, c Charge, code string) error {
	next, _ := c.nextStep()
	now := p.stamp()
	a := c.currentAttempt(c.attemptStart(now))
	a.Status, a.FailureCode, a.EndedAt = AttemptFailed, &code, &now
	after := c
	after.Attempts = c.withAttempt(a)
	after.ConnectorID, after.Provider = &next.Connector, next.Provider
	after.UpdatedAt = now
	p.log.InfoContext(ctx, "charge moves on to its next connector", "charge_id", c.ID, "from", deref(c.ConnectorID),
		"to", next.Connector, "failure_code", code)
	return p.apply(ctx, Transition{Before: c, After: after, Cause: CauseFailover,
		Then: &outbox.Task{Type: outbox.ChargeAuthorize, RefID: c.ID, Attempt: c.attemptIndex() + 2}})
}

// endedAttempt is the attempt t ends, if it ends one.
func endedAttempt(t Transition) (Attempt, bool) {
	n := len(t.After.Attempts)
	if n == 0 || t.After.Attempts[n-1].EndedAt == nil {
		return Attempt{}, false
	}
	if len(t.Before.Attempts) == n && t.Before.Attempts[n-1].EndedAt != nil {
		return Attempt{}, false // ended before
	}
	return t.After.Attempts[n-1], true
}

// failoverCode is the failure code of an attempt that lets the charge move
// on, and whether it does: a soft decline, or an outage in which nothing
// was booked (the provider vouches for it, or no call of the attempt ever
// reached it), when the charge has a next connector.
func failoverCode(c Charge, err error, owner bool) (string, bool) {
	if _, ok := c.nextStep(); !ok {
		return "", false
	}
	if d, ok := providers.AsDecline(err); ok {
		return d.Code, connectors.Soft(d.Code)
	}
	// Known: the provider vouches it booked nothing under the key, or no
	// call of the attempt ever reached it (every call was this run's, and
	// its breaker or the connection refused it). Another connector is then
	// a better bet than waiting out this one's outage. A call that may
	// have reached it (a timeout, a reset) is settled at this connector
	// first, however long that takes.
	if providers.NothingBooked(err) || (owner && providers.NotSent(err)) {
		return "provider_unavailable", true
	}
	return "", false
}

// String names an attempt for logs.
func (a Attempt) String() string {
	return fmt.Sprintf("%s@%s:%s", a.Provider, a.Connector, a.Status)
}
