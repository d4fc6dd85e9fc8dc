package charges

import (
	"context"
	"errors"

	"github.com/gatehouse-pay/gatehouse/internal/events"
	"github.com/gatehouse-pay/gatehouse/internal/outbox"
)

// Confirmation is a provider's notification of how a capture or void it
// received ended (providers.SettlesByNotification).
type Confirmation struct {
	// Action is ActionCapture or ActionVoid.
	Action  string
	Success bool
	// Amount is the amount captured, in minor units; 0 when the
	// notification did not say.
	Amount int64
	// Reason is the provider's reason for a failure.
	Reason string
}

// ErrNotConfirmable is returned for a confirmation of an action other
// than a capture or a void.
var ErrNotConfirmable = errors.New("charges: only captures and voids are confirmed")

// Confirm settles the charge with the provider's confirmation and reports
// whether it moved it. A capture confirmed moves a capturing charge to
// captured (charge.captured); one that failed moves it back to authorized
// (charge.capture_failed), the failure recorded. A void confirmed moves a
// voiding charge to voided (charge.voided); one that failed moves it back to
// authorized. The notification may come before the call's own answer: an
// authorized charge whose capture or void is still being sent moves the
// same way, and the call's answer, when it comes, finds it moved and
// changes nothing. Anything else (a charge already settled, a confirmation
// sent again) changes nothing.
func (p *Processor) Confirm(ctx context.Context, id string, cf Confirmation) (bool, error) {
	if cf.Action != ActionCapture && cf.Action != ActionVoid {
		return false, ErrNotConfirmable
	}
	c, _, err := p.store.ChargeForWork(ctx, id)
	if err != nil {
		return false, err
	}
	received := StatusCapturing
	task := outbox.Task{Type: outbox.ChargeCapture, RefID: c.ID}
	if cf.Action == ActionVoid {
		received, task.Type = StatusVoiding, outbox.ChargeVoid
	}
	inFlight := c.Status == StatusAuthorized && c.PendingAction != nil && *c.PendingAction == cf.Action
	if c.Status != received && !inFlight {
		return false, nil
	}
	after := c
	after.PendingAction, after.CaptureAmount = nil, nil
	after.UpdatedAt = p.stamp()
	var typ string
	switch {
	case cf.Action == ActionCapture && cf.Success:
		asked := c.Amount
		if c.CaptureAmount != nil {
			asked = *c.CaptureAmount
		}
		after.Status, after.AmountCaptured, typ = StatusCaptured, asked, events.ChargeCaptured
		if cf.Amount > 0 && cf.Amount <= c.Amount {
			after.AmountCaptured = cf.Amount
		}
		after.FailureCode, after.FailureMessage = nil, nil
	case cf.Action == ActionCapture:
		after.Status, typ = StatusAuthorized, events.ChargeCaptureFailed
		after.FailureCode, after.FailureMessage = ptr("capture_failed"), ptr(failureMessage("The provider could not capture the charge; it is still authorized.", cf.Reason))
	case cf.Success:
		after.Status, typ = StatusVoided, events.ChargeVoided
		after.FailureCode, after.FailureMessage = nil, nil
	default:
		after.Status = StatusAuthorized
		after.FailureCode, after.FailureMessage = ptr("void_failed"), ptr(failureMessage("The provider could not cancel the authorization; the charge is still authorized.", cf.Reason))
	}
	var ev *events.Event
	if typ != "" {
		e, err := p.event(after, typ)
		if err != nil {
			return false, err
		}
		ev = &e
	}
	if err := p.apply(ctx, Transition{Before: c, After: after, Event: ev, DoneTask: task.ID(), Cause: CauseNotification}); err != nil {
		return false, err
	}
	now, _, err := p.store.ChargeForWork(ctx, id)
	if err != nil {
		return false, err
	}
	if now.Status != after.Status {
		// Moved by someone else meanwhile (the call's own answer): read
		// again and settle what is there now.
		return p.Confirm(ctx, id, cf)
	}
	return true, nil
}

// failureMessage is msg, with the provider's reason when it gave one.
func failureMessage(msg, reason string) string {
	if reason == "" {
		return msg
	}
	if len(reason) > 200 {
		reason = reason[:200]
	}
	return msg + " The provider said: " + reason
}
