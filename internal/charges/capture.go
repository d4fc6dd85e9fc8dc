package charges

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/gatehouse-pay/gatehouse/internal/events"
	"github.com/gatehouse-pay/gatehouse/internal/outbox"
	"github.com/gatehouse-pay/gatehouse/internal/providers"
)

// errStillProcessing is the outcome of a payment or capture the provider is still processing.
var errStillProcessing = errors.New("charges: the provider is still processing the payment")

// capture makes one attempt of a requested capture (see Capture).
func (p *Processor) capture(ctx context.Context, c Charge, prov providers.Provider, task outbox.Task, final bool) error {
	now := p.now().UTC()
	amount := c.Amount
	if c.CaptureAmount != nil {
		amount = *c.CaptureAmount
	}
	look, canLook := prov.(providers.Lookup)
	op := "capture"
	start := time.Now()
	cctx, cancel := context.WithTimeout(ctx, p.timeout)
	var pay providers.Payment
	var err error
	if now.Sub(c.UpdatedAt) < p.window {
		var res providers.Result
		res, err = prov.Capture(cctx, providers.CaptureRequest{IdempotencyKey: IdempotencyKey(c.ID, "capture"), Reference: *c.ProviderReference, Amount: amount, Currency: c.Currency})
		pay = providers.Payment{Reference: res.Reference, Status: providers.PaymentCaptured, Captured: amount, Settlement: res.Settlement}
		if err == nil && res.Pending && providers.SettlesByNotification(c.Provider) {
			// Received: the provider's notification settles it (Confirm).
			cancel()
			p.observe(c.Provider, op, OutcomePending, time.Since(start))
			after := c
			after.Status, after.PendingAction = StatusCapturing, nil
			after.FailureCode, after.FailureMessage = nil, nil
			after.UpdatedAt = p.stamp()
			return p.apply(ctx, Transition{Before: c, After: after, DoneTask: task.ID()})
		}
		if err == nil && res.Pending {
			// Sent again, the key only replays the first answer: follow the payment itself.
			pay.Status = providers.PaymentProcessing
			if canLook {
				op = "capture_lookup"
				pay, err = look.LookupPayment(cctx, *c.ProviderReference)
			}
		}
	} else {
		op = "capture_lookup"
		if canLook {
			pay, err = look.LookupPayment(cctx, *c.ProviderReference)
		} else {
			err = fmt.Errorf("%w: %s: %w", providers.ErrUnavailable, c.Provider, providers.ErrNoLookup)
		}
	}
	cancel()
	elapsed := time.Since(start)
	if err == nil && pay.Status == providers.PaymentProcessing {
		p.observe(c.Provider, op, OutcomePending, elapsed)
		return p.captureUnknown(ctx, c, final, now, errStillProcessing)
	}
	after := c
	after.PendingAction, after.CaptureAmount = nil, nil
	after.UpdatedAt = p.stamp()
	var typ string
	d, declined := providers.AsDecline(err)
	switch {
	case err == nil && pay.Status == providers.PaymentCaptured:
		p.observe(c.Provider, op, OutcomeSucceeded, elapsed)
		after.FailureCode, after.FailureMessage = nil, nil
		after.Status, after.AmountCaptured, typ = StatusCaptured, pay.Captured, events.ChargeCaptured
		if after.AmountCaptured <= 0 || after.AmountCaptured > c.Amount {
			after.AmountCaptured = amount
		}
	case err == nil && (pay.Status == providers.PaymentCanceled || pay.Status == providers.PaymentFailed):
		// The provider released the authorization: nothing can be captured.
		p.observe(c.Provider, op, OutcomeDeclined, elapsed)
		after.Status, typ = StatusVoided, events.ChargeVoided
		after.FailureCode, after.FailureMessage = ptr("authorization_canceled"), ptr("The provider canceled the authorization before it was captured.")
	case err == nil:
		// Looked up: the payment is still only authorized, so the capture
		// never happened. The merchant may capture again.
		p.observe(c.Provider, op, OutcomeDeclined, elapsed)
		after.FailureCode, after.FailureMessage = ptr("provider_unavailable"), ptr("The provider did not capture the charge; it is still authorized.")
	case declined:
		// The charge stays authorized; the failure is recorded and the merchant may try again.
		p.observe(c.Provider, op, OutcomeDeclined, elapsed)
		after.FailureCode, after.FailureMessage = &d.Code, ptr(declineMessage(d))
	case !final:
		p.observe(c.Provider, op, OutcomeRetry, elapsed)
		return p.captureUnknown(ctx, c, final, now, err)
	default:
		p.observe(c.Provider, op, OutcomeUnavailable, elapsed)
		return p.captureUnknown(ctx, c, final, now, err)
	}
	var ev *events.Event
	if typ != "" {
		e, err := p.event(after, typ)
		if err != nil {
			return err
		}
		ev = &e
	}
	t := Transition{Before: c, After: after, Event: ev, DoneTask: task.ID()}
	if after.Status == StatusCaptured {
		t.Settlement = pay.Settlement
	}
	return p.apply(ctx, t)
}

// captureUnknown answers an attempt after which the capture's outcome is
// still unknown: nothing is written (the charge stays authorized with the
// capture pending) and the task is tried again.
func (p *Processor) captureUnknown(ctx context.Context, c Charge, final bool, now time.Time, err error) error {
	if age := now.Sub(c.UpdatedAt); age >= p.unknownAfter {
		p.log.ErrorContext(ctx, "capture outcome still unknown at the provider; see the runbook ProviderOutcomeUnknown",
			"charge_id", c.ID, "age", age.Round(time.Second).String(), "err", err)
	}
	if !final {
		return fmt.Errorf("%w: %v", ErrRetry, err)
	}
	return fmt.Errorf("charges: outcome of the capture of %s still unknown after the last attempt; the sweeper sends it again: %w", c.ID, err)
}
