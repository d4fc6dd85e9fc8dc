package providertest

import (
	"context"
	"errors"
	"sync"

	"github.com/gatehouse-pay/gatehouse/internal/providers"
)

// Operations a Call records.
const (
	OpAuthorize     = "authorize"
	OpCapture       = "capture"
	OpVoid          = "void"
	OpRefund        = "refund"
	OpAuthenticate  = "authenticate"
	OpLookupPayment = "lookup_payment"
	OpLookupRefund  = "lookup_refund"
)

// Call is one call a Fake received.
type Call struct {
	Op     string // one of the Op* constants
	Key    string // the idempotency key ("" for a lookup)
	Amount int64
	Card   providers.Card
	// Request is the request itself: a providers.AuthorizeRequest,
	// CaptureRequest, VoidRequest, RefundRequest, AuthenticateRequest or
	// RefundLookup, or the reference (a string) a payment lookup read.
	Request any
}

// Fake is a providers.Provider and providers.Authenticator that answers as
// the test chooses and records every call. Each call is recorded first;
// then the next entry of Script, when it is a non-nil error, is the answer;
// otherwise the operation's Fn answers, or, when the Fn is nil, the call
// succeeds:
//
//	Authorize     Reference "ref_" + the idempotency key
//	Capture, Void Reference of the request
//	Authenticate  Reference of the request
//	Refund        Reference "re_" + the idempotency key
//
// Set the fields before the first call. Its methods are safe for concurrent
// use; an Fn may block (to hold a call in flight) and may read the Fake.
// A Fake cannot look payments or refunds up: wrap it in a FakeLookup for that.
type Fake struct {
	// ProviderName is what Name answers; "" answers "sandbox".
	ProviderName string
	// Script answers the calls in order, whatever their operation: the n-th
	// call (from 0) fails with Script[n]; a nil entry, and every call once
	// the script has run out, is answered as if there were no script.
	Script []error

	AuthorizeFn    func(context.Context, providers.AuthorizeRequest) (providers.Result, error)
	CaptureFn      func(context.Context, providers.CaptureRequest) (providers.Result, error)
	VoidFn         func(context.Context, providers.VoidRequest) (providers.Result, error)
	RefundFn       func(context.Context, providers.RefundRequest) (providers.Result, error)
	AuthenticateFn func(context.Context, providers.AuthenticateRequest) (providers.Result, error)

	mu    sync.Mutex
	calls []Call
}

var (
	_ providers.Provider      = (*Fake)(nil)
	_ providers.Authenticator = (*Fake)(nil)
)

// record adds c to the calls and returns the script's error for it, if any.
func (f *Fake) record(c Call) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := len(f.calls)
	f.calls = append(f.calls, c)
	if n < len(f.Script) {
		return f.Script[n]
	}
	return nil
}

// Name returns ProviderName, or "sandbox".
func (f *Fake) Name() string {
	if f.ProviderName == "" {
		return "sandbox"
	}
	return f.ProviderName
}

// Authorize records r and answers it.
func (f *Fake) Authorize(ctx context.Context, r providers.AuthorizeRequest) (providers.Result, error) {
	if err := f.record(Call{Op: OpAuthorize, Key: r.IdempotencyKey, Amount: r.Amount, Card: r.Card, Request: r}); err != nil {
		return providers.Result{}, err
	}
	if f.AuthorizeFn != nil {
		return f.AuthorizeFn(ctx, r)
	}
	return providers.Result{Reference: "ref_" + r.IdempotencyKey}, nil
}

// Capture records r and answers it.
func (f *Fake) Capture(ctx context.Context, r providers.CaptureRequest) (providers.Result, error) {
	if err := f.record(Call{Op: OpCapture, Key: r.IdempotencyKey, Amount: r.Amount, Request: r}); err != nil {
		return providers.Result{}, err
	}
	if f.CaptureFn != nil {
		return f.CaptureFn(ctx, r)
	}
	return providers.Result{Reference: r.Reference}, nil
}

// Void records r and answers it.
func (f *Fake) Void(ctx context.Context, r providers.VoidRequest) (providers.Result, error) {
	if err := f.record(Call{Op: OpVoid, Key: r.IdempotencyKey, Request: r}); err != nil {
		return providers.Result{}, err
	}
	if f.VoidFn != nil {
		return f.VoidFn(ctx, r)
	}
	return providers.Result{Reference: r.Reference}, nil
}

// Refund records r and answers it.
func (f *Fake) Refund(ctx context.Context, r providers.RefundRequest) (providers.Result, error) {
	if err := f.record(Call{Op: OpRefund, Key: r.IdempotencyKey, Amount: r.Amount, Request: r}); err != nil {
		return providers.Result{}, err
	}
	if f.RefundFn != nil {
		return f.RefundFn(ctx, r)
	}
	return providers.Result{Reference: "re_" + r.IdempotencyKey}, nil
}

// Authenticate records r and answers it.
func (f *Fake) Authenticate(ctx context.Context, r providers.AuthenticateRequest) (providers.Result, error) {
	if err := f.record(Call{Op: OpAuthenticate, Key: r.IdempotencyKey, Amount: r.Amount, Card: r.Card, Request: r}); err != nil {
		return providers.Result{}, err
	}
	if f.AuthenticateFn != nil {
		return f.AuthenticateFn(ctx, r)
	}
	return providers.Result{Reference: r.Reference}, nil
}

// Calls returns the calls received so far, in order.
func (f *Fake) Calls() []Call {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]Call(nil), f.calls...)
}

// Count returns how many calls the Fake received, of every operation.
func (f *Fake) Count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.calls)
}

// requests returns the requests of the calls of op, in order; nil when none.
func requests[T any](f *Fake, op string) []T {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []T
	for _, c := range f.calls {
		if c.Op == op {
			out = append(out, c.Request.(T))
		}
	}
	return out
}

// Authorizes returns the authorization requests received, in order.
func (f *Fake) Authorizes() []providers.AuthorizeRequest {
	return requests[providers.AuthorizeRequest](f, OpAuthorize)
}

// Captures returns the capture requests received, in order.
func (f *Fake) Captures() []providers.CaptureRequest {
	return requests[providers.CaptureRequest](f, OpCapture)
}

// Voids returns the void requests received, in order.
func (f *Fake) Voids() []providers.VoidRequest { return requests[providers.VoidRequest](f, OpVoid) }

// Refunds returns the refund requests received, in order.
func (f *Fake) Refunds() []providers.RefundRequest {
	return requests[providers.RefundRequest](f, OpRefund)
}

// Authentications returns the authentication requests received, in order.
func (f *Fake) Authentications() []providers.AuthenticateRequest {
	return requests[providers.AuthenticateRequest](f, OpAuthenticate)
}

// FakeLookup is a Fake that can read its books: a providers.Lookup whose
// answers the test chooses. Lookups are recorded with the Fake's calls and
// take their turn in its Script. A lookup whose Fn is nil fails with an
// error that leaves the outcome unknown.
type FakeLookup struct {
	*Fake
	LookupPaymentFn func(ctx context.Context, reference string) (providers.Payment, error)
	LookupRefundFn  func(context.Context, providers.RefundLookup) (providers.Result, error)
}

var _ providers.Lookup = (*FakeLookup)(nil)

// ErrNotExpected answers a lookup the test set no Fn for.
var ErrNotExpected = errors.New("providertest: call not expected")

// LookupPayment records reference and answers it.
func (l *FakeLookup) LookupPayment(ctx context.Context, reference string) (providers.Payment, error) {
	if err := l.record(Call{Op: OpLookupPayment, Request: reference}); err != nil {
		return providers.Payment{}, err
	}
	if l.LookupPaymentFn == nil {
		return providers.Payment{}, ErrNotExpected
	}
	return l.LookupPaymentFn(ctx, reference)
}

// LookupRefund records r and answers it.
func (l *FakeLookup) LookupRefund(ctx context.Context, r providers.RefundLookup) (providers.Result, error) {
	if err := l.record(Call{Op: OpLookupRefund, Request: r}); err != nil {
		return providers.Result{}, err
	}
	if l.LookupRefundFn == nil {
		return providers.Result{}, ErrNotExpected
	}
	return l.LookupRefundFn(ctx, r)
}

// PaymentLookups returns the references of the payment lookups, in order.
func (l *FakeLookup) PaymentLookups() []string { return requests[string](l.Fake, OpLookupPayment) }

// RefundLookups returns the refund lookups received, in order.
func (l *FakeLookup) RefundLookups() []providers.RefundLookup {
	return requests[providers.RefundLookup](l.Fake, OpLookupRefund)
}
