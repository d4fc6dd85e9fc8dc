package charges

import (
	"context"
	"fmt"
	"time"

	"github.com/gatehouse-pay/gatehouse/internal/outbox"
	"github.com/gatehouse-pay/gatehouse/internal/providers"
)

// Reverse releases whatever the provider booked for a charge that failed
// without knowing the provider's answer (see failUnknown). It sends the
// authorization again with the same idempotency key: a provider answers a key
// it booked with the original payment, and books one now for a key it did
// not, so either way the answer names the one payment the key can hold. That
// payment is then released: voided when it was only authorized, refunded in
// full (key gh_<charge>_reverse) when the authorization captured it. The
// release, the purge of the sealed card and the deletion of the task are one
// transition; the charge stays failed.
//
// An authorization the provider answers as still processing is looked up
// until it is final: released when it did not go through, else voided or
// refunded as it ended.
//
// A decline of the authorization means the provider booked nothing: the task
// is done. Any other error leaves the outcome unknown: ErrRetry (wrapped)
// until the final attempt, which logs at error level with the charge id, since
// the customer's money may still be held, and returns the error: the task row
// stays, and the outbox sweeper sends the task again.
func (p *Processor) Reverse(ctx context.Context, id string, final bool) error {
	task := outbox.Task{Type: outbox.ChargeReverse, RefID: id}
	c, sealed, prov, err := p.load(ctx, id)
	if err != nil {
		return err
	}
	if c.Status != StatusFailed || (c.CardToken == nil && sealed == nil) {
		// Not a charge this task is for, or a reverse that already finished
		// (the same transition purged the card and dropped the task).
		p.observe(c.Provider, "reverse", OutcomeNoop, 0)
		return p.done(ctx, task)
	}
	card, err := p.card(c, sealed)
	if err != nil {
		return err
	}
	release, err := p.slot(ctx, c)
	if err != nil {
		return err
	}
	defer release()
	start := time.Now()
	cctx, cancel := context.WithTimeout(ctx, p.timeout)
	res, err := prov.Authorize(cctx, providers.AuthorizeRequest{
		IdempotencyKey: c.AuthorizeKey(), Amount: c.Amount, Currency: c.Currency,
		Capture: c.Capture, Card: card, Description: deref(c.Description), Metadata: c.Metadata,
	})
	cancel()
	if _, ok := providers.AsDecline(err); ok {
		p.observe(c.Provider, "reverse", OutcomeDeclined, time.Since(start))
		p.log.InfoContext(ctx, "reverse: the provider booked nothing for the failed charge", "charge_id", c.ID)
		return p.released(ctx, c, task)
	}
	if err != nil {
		return p.reverseUnknown(ctx, c, final, time.Since(start), err)
	}
	captured := c.Capture
	if res.Pending {
		// The payment is still processing: it can be neither voided nor
		// refunded yet, and the key only replays that answer. Look it up.
		pay, err := p.lookupPayment(ctx, c, prov, res.Reference)
		switch {
		case err != nil:
			return p.reverseUnknown(ctx, c, final, time.Since(start), err)
		case pay.Status == providers.PaymentProcessing:
			return p.reverseUnknown(ctx, c, final, time.Since(start), errStillProcessing)
		case pay.Status == providers.PaymentFailed || pay.Status == providers.PaymentCanceled:
			p.observe(c.Provider, "reverse", OutcomeDeclined, time.Since(start))
			p.log.InfoContext(ctx, "reverse: the payment of the failed charge did not go through", "charge_id", c.ID)
			return p.released(ctx, c, task)
		}
		captured = pay.Status == providers.PaymentCaptured
	}
	cctx, cancel = context.WithTimeout(ctx, p.timeout)
	if captured {
		_, err = prov.Refund(cctx, providers.RefundRequest{IdempotencyKey: IdempotencyKey(c.ID, "reverse"),
			Reference: res.Reference, Amount: c.Amount, Currency: c.Currency})
	} else {
		_, err = prov.Void(cctx, providers.VoidRequest{IdempotencyKey: IdempotencyKey(c.ID, "reverse"), Reference: res.Reference})
	}
	cancel()
	elapsed := time.Since(start)
	if _, ok := providers.AsDecline(err); ok {
		// Retrying the same request cannot help: someone has to look.
		p.observe(c.Provider, "reverse", OutcomeDeclined, elapsed)
		p.log.ErrorContext(ctx, "reverse: the provider refused to release the payment of a failed charge; release it by hand",
			"charge_id", c.ID, "provider_reference", res.Reference, "err", err)
		return p.released(ctx, c, task)
	}
	if err != nil {
		return p.reverseUnknown(ctx, c, final, elapsed, err)
	}
	p.observe(c.Provider, "reverse", OutcomeSucceeded, elapsed)
	p.log.InfoContext(ctx, "reverse: released the payment of a failed charge", "charge_id", c.ID, "provider_reference", res.Reference)
	return p.released(ctx, c, task)
}

// lookupPayment reads the payment reference at the provider; a provider
// without lookups leaves it unknown.
func (p *Processor) lookupPayment(ctx context.Context, c Charge, prov providers.Provider, reference string) (providers.Payment, error) {
	look, ok := prov.(providers.Lookup)
	if !ok {
		return providers.Payment{}, fmt.Errorf("%w: %s: %w", providers.ErrUnavailable, c.Provider, providers.ErrNoLookup)
	}
	cctx, cancel := context.WithTimeout(ctx, p.timeout)
	defer cancel()
	return look.LookupPayment(cctx, reference)
}

// reverseUnknown answers a reverse attempt whose outcome is unknown.
func (p *Processor) reverseUnknown(ctx context.Context, c Charge, final bool, elapsed time.Duration, err error) error {
	if !final {
		p.observe(c.Provider, "reverse", OutcomeRetry, elapsed)
		return fmt.Errorf("%w: %v", ErrRetry, err)
	}
	p.observe(c.Provider, "reverse", OutcomeUnavailable, elapsed)
	p.log.ErrorContext(ctx, "reverse: the provider still does not answer after the last attempt; a payment of the failed charge may be held",
		"charge_id", c.ID, "err", err)
	return fmt.Errorf("charges: reverse of %s: %w", c.ID, err)
}

// released finishes a reverse: the charge stays failed, its sealed card is
// purged and the task dropped, in one transition.
func (p *Processor) released(ctx context.Context, c Charge, task outbox.Task) error {
	return p.apply(ctx, Transition{Before: c, After: c, DoneTask: task.ID(), PurgeCard: true})
}
