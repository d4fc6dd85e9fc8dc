package providers

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/sony/gobreaker/v2"
)

// ErrCircuitOpen is in the chain of the error a Breaker returns, together with
// ErrUnavailable, when it refuses a call without making it: the circuit is
// open, or half-open with its trial calls already under way.
var ErrCircuitOpen = errors.New("circuit breaker open")

// Breaker defaults: after DefaultBreakerFailures availability failures in a
// row the circuit opens for DefaultBreakerOpenFor, then lets
// DefaultBreakerHalfOpenRequests trial calls through.
const (
	DefaultBreakerFailures         = 5
	DefaultBreakerOpenFor          = 30 * time.Second
	DefaultBreakerHalfOpenRequests = 1
)

// BreakerOptions tunes WithBreaker. Zero fields take the defaults above, so
// production code passes BreakerOptions{OnStateChange: ...} and tests shorten
// the timings.
type BreakerOptions struct {
	// Failures is how many availability failures in a row open the circuit.
	Failures uint32
	// OpenFor is how long the circuit stays open before trial calls go through.
	OpenFor time.Duration
	// HalfOpenRequests is how many trial calls may run while half-open; that
	// many successes in a row close the circuit, one failure opens it again.
	HalfOpenRequests uint32
	// OnStateChange, when set, is told every move of the circuit with the
	// provider's name and the states "closed", "open" and "half-open" (for a
	// gauge or a log line). It runs under the breaker's lock: keep it short
	// and never call the breaker from it.
	OnStateChange func(provider, from, to string)
}

// Breaker is a Provider guarded by a circuit breaker. Only availability
// failures count toward opening the circuit: a *Decline, or a lookup that
// found nothing, proves the provider is up and counts as a success, and a call its caller cancelled
// (context.Canceled) counts as nothing. A deadline that expires while the
// provider is silent is a failure. While the circuit is open every method
// returns an error wrapping ErrUnavailable and ErrCircuitOpen at once, without
// calling the provider, so the worker's retries back off instead of queueing
// on a provider that is down. One circuit covers all four operations: they
// reach the same upstream.
type Breaker struct {
	p    Provider
	name string
	cb   *gobreaker.CircuitBreaker[Result]
}

// WithBreaker wraps p in a circuit breaker named after p.Name().
func WithBreaker(p Provider, opts BreakerOptions) *Breaker { return NamedBreaker(p.Name(), p, opts) }

// NamedBreaker wraps p in a circuit breaker of its own, named name (a
// connector's id): every connector has its own circuit, even two at one
// provider.
func NamedBreaker(name string, p Provider, opts BreakerOptions) *Breaker {
	if opts.Failures == 0 {
		opts.Failures = DefaultBreakerFailures
	}
	if opts.OpenFor <= 0 {
		opts.OpenFor = DefaultBreakerOpenFor
	}
	if opts.HalfOpenRequests == 0 {
		opts.HalfOpenRequests = DefaultBreakerHalfOpenRequests
	}
	st := gobreaker.Settings{
		Name:        name,
		MaxRequests: opts.HalfOpenRequests,
		Timeout:     opts.OpenFor,
		ReadyToTrip: func(c gobreaker.Counts) bool { return c.ConsecutiveFailures >= opts.Failures },
		IsSuccessful: func(err error) bool {
			_, declined := AsDecline(err)
			// A lookup that found nothing is an answer too.
			found := NothingBooked(err) && !errors.Is(err, ErrUnavailable)
			return err == nil || declined || found
		},
		IsExcluded: func(err error) bool { return errors.Is(err, context.Canceled) },
	}
	if f := opts.OnStateChange; f != nil {
		st.OnStateChange = func(name string, from, to gobreaker.State) { f(name, from.String(), to.String()) }
	}
	return &Breaker{p: p, name: name, cb: gobreaker.NewCircuitBreaker[Result](st)}
}

// Name returns the wrapped provider's name, so a Registry keeps its keys.
func (b *Breaker) Name() string { return b.p.Name() }

// State returns "closed", "open" or "half-open".
func (b *Breaker) State() string { return b.cb.State().String() }

func (b *Breaker) call(f func() (Result, error)) (Result, error) {
	res, err := b.cb.Execute(f)
	if errors.Is(err, gobreaker.ErrOpenState) || errors.Is(err, gobreaker.ErrTooManyRequests) {
		return Result{}, fmt.Errorf("%w: %s: %w: %w", ErrUnavailable, b.name, ErrCircuitOpen, ErrNotSent)
	}
	return res, err
}

// Authorize calls the provider unless the circuit is open.
func (b *Breaker) Authorize(ctx context.Context, r AuthorizeRequest) (Result, error) {
	return b.call(func() (Result, error) { return b.p.Authorize(ctx, r) })
}

// Capture calls the provider unless the circuit is open.
func (b *Breaker) Capture(ctx context.Context, r CaptureRequest) (Result, error) {
	return b.call(func() (Result, error) { return b.p.Capture(ctx, r) })
}

// Void calls the provider unless the circuit is open.
func (b *Breaker) Void(ctx context.Context, r VoidRequest) (Result, error) {
	return b.call(func() (Result, error) { return b.p.Void(ctx, r) })
}

// Refund calls the provider unless the circuit is open.
func (b *Breaker) Refund(ctx context.Context, r RefundRequest) (Result, error) {
	return b.call(func() (Result, error) { return b.p.Refund(ctx, r) })
}

// LookupRefund reads the wrapped provider's books unless the circuit is open.
// A provider that cannot look refunds up answers ErrUnavailable and ErrNoLookup.
func (b *Breaker) LookupRefund(ctx context.Context, r RefundLookup) (Result, error) {
	l, ok := b.p.(Lookup)
	if !ok {
		return Result{}, fmt.Errorf("%w: %s: %w", ErrUnavailable, b.p.Name(), ErrNoLookup)
	}
	return b.call(func() (Result, error) { return l.LookupRefund(ctx, r) })
}

// LookupPayment reads the wrapped provider's books unless the circuit is
// open. A provider that cannot look payments up answers ErrUnavailable and
// ErrNoLookup.
func (b *Breaker) LookupPayment(ctx context.Context, reference string) (Payment, error) {
	l, ok := b.p.(Lookup)
	if !ok {
		return Payment{}, fmt.Errorf("%w: %s: %w", ErrUnavailable, b.p.Name(), ErrNoLookup)
	}
	var p Payment
	_, err := b.call(func() (Result, error) {
		var err error
		p, err = l.LookupPayment(ctx, reference)
		return Result{Reference: p.Reference}, err
	})
	return p, err
}

// Payout reads a payout from the wrapped provider's books unless the
// circuit is open. A provider that pays out through the gateway (the
// sandbox) answers ErrUnavailable and ErrNoLookup.
func (b *Breaker) Payout(ctx context.Context, reference string) (Payout, error) {
	r, ok := b.p.(PayoutReader)
	if !ok {
		return Payout{}, fmt.Errorf("%w: %s: %w", ErrUnavailable, b.p.Name(), ErrNoLookup)
	}
	var p Payout
	_, err := b.call(func() (Result, error) {
		var err error
		p, err = r.Payout(ctx, reference)
		return Result{Reference: p.Reference}, err
	})
	return p, err
}

var _ Authenticator = (*Breaker)(nil)

// SubmitDisputeEvidence passes a merchant's evidence on to the provider.
func (b *Breaker) SubmitDisputeEvidence(ctx context.Context, reference string, evidence map[string]string) error {
	r, ok := b.p.(DisputeResponder)
	if !ok {
		return fmt.Errorf("%s: %w", b.p.Name(), ErrNoDisputeAPI)
	}
	_, err := b.call(func() (Result, error) {
		return Result{Reference: reference}, r.SubmitDisputeEvidence(ctx, reference, evidence)
	})
	return err
}

// AcceptDispute passes a merchant's acceptance of a dispute on to the
// provider.
func (b *Breaker) AcceptDispute(ctx context.Context, reference string) error {
	r, ok := b.p.(DisputeResponder)
	if !ok {
		return fmt.Errorf("%s: %w", b.p.Name(), ErrNoDisputeAPI)
	}
	_, err := b.call(func() (Result, error) { return Result{Reference: reference}, r.AcceptDispute(ctx, reference) })
	return err
}

// PaymentOfCharge reads the payment of a provider's charge object.
func (b *Breaker) PaymentOfCharge(ctx context.Context, chargeID string) (string, error) {
	r, ok := b.p.(ChargePayments)
	if !ok {
		return "", fmt.Errorf("%s: %w", b.p.Name(), ErrNoDisputeAPI)
	}
	var ref string
	_, err := b.call(func() (Result, error) {
		var err error
		ref, err = r.PaymentOfCharge(ctx, chargeID)
		return Result{Reference: ref}, err
	})
	return ref, err
}

// Authenticate resumes a payment at the wrapped provider unless the circuit
// is open. A provider that cannot resume one declines with invalid_request:
// it never asked for authentication.
func (b *Breaker) Authenticate(ctx context.Context, r AuthenticateRequest) (Result, error) {
	a, ok := b.p.(Authenticator)
	if !ok {
		return Result{}, &Decline{Code: "invalid_request", Message: b.p.Name() + " does not authenticate cardholders."}
	}
	return b.call(func() (Result, error) { return a.Authenticate(ctx, r) })
}
