// Package providertest has providers for tests. Fake answers as the test
// chooses (a script of errors, an answer per operation, lookups through
// FakeLookup) and records every call.
//
// Scripted is for tests of unknown outcomes: honest books behind an
// unreliable network that a script drives. The books keep one
// booking per idempotency key, as a real provider does within its key window;
// the script decides, call by call, whether the request is lost on its way,
// booked and its answer lost, declined, or left processing. Fuzz targets feed
// it their input and check that the gateway's record ends equal to the books.
package providertest

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/gatehouse-pay/gatehouse/internal/providers"
)

// Fate is what the network does to one call, read from the script.
type Fate byte

// Fates; a script byte is taken modulo NumFates, and an exhausted script
// answers every call honestly.
const (
	Honest      Fate = iota
	LostRequest      // never reaches the provider: nothing booked, ErrUnavailable
	LostAnswer       // booked, then the answer times out
	Declined         // refused if nothing is booked under the key yet (a replay answers the booking)
	Processing       // booked, answered pending (processing); lookups say so until an honest one
	NumFates
)

// Payment is an authorization in the books.
type Payment struct {
	Amount     int64
	Captured   int64
	CaptureKey string // the key that booked the capture
	Processing bool   // the capture has not finished
}

// Refund is a refund in the books: its key, the gateway's refund id, its
// own reference and the payment it returns money of.
type Refund struct {
	Key, RefundID, Reference, Payment string
	Amount                            int64
	Processing                        bool
}

// Scripted is a provider whose books are exact and whose answers the script
// decides. It is safe for concurrent use.
type Scripted struct {
	mu       sync.Mutex
	script   []byte
	Payments map[string]*Payment // by reference
	Refunds  map[string]*Refund  // by idempotency key
	// Keys lists the idempotency keys of every capture and refund request
	// that reached the books, in order, repeats included.
	Keys []string
}

// NewScripted returns a provider holding one authorization of amount under
// reference, driven by script.
func NewScripted(script []byte, reference string, amount int64) *Scripted {
	return &Scripted{script: script, Payments: map[string]*Payment{reference: {Amount: amount}}, Refunds: map[string]*Refund{}}
}

var (
	_ providers.Provider = (*Scripted)(nil)
	_ providers.Lookup   = (*Scripted)(nil)
)

// Exhausted reports whether the script is used up: from then on every
// answer is honest.
func (s *Scripted) Exhausted() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.script) == 0
}

func (s *Scripted) next() Fate {
	if len(s.script) == 0 {
		return Honest
	}
	f := Fate(s.script[0] % byte(NumFates))
	s.script = s.script[1:]
	return f
}

var (
	errLostRequest = fmt.Errorf("%w: scripted: connection refused", providers.ErrUnavailable)
	errLostAnswer  = fmt.Errorf("%w: scripted: the answer was lost: %w", providers.ErrUnavailable, context.DeadlineExceeded)
)

// Name returns "sandbox", so the gateway's charges find it under that name.
func (s *Scripted) Name() string { return "sandbox" }

// Authorize is not scripted: the books hold their one authorization.
func (s *Scripted) Authorize(context.Context, providers.AuthorizeRequest) (providers.Result, error) {
	return providers.Result{}, &providers.Decline{Code: "invalid_request", Message: "scripted: no authorizations"}
}

// Void is not scripted.
func (s *Scripted) Void(context.Context, providers.VoidRequest) (providers.Result, error) {
	return providers.Result{}, &providers.Decline{Code: "invalid_request", Message: "scripted: no voids"}
}

// reach reads the fate of a capture or refund call of the payment
// reference with key: a lost request never reaches the books; one that does
// is listed in Keys. The caller holds s.mu.
func (s *Scripted) reach(reference, key string) (Fate, *Payment, error) {
	fate := s.next()
	if fate == LostRequest {
		return fate, nil, errLostRequest
	}
	p, ok := s.Payments[reference]
	if !ok {
		return fate, nil, &providers.Decline{Code: "invalid_request", Message: "No such payment."}
	}
	s.Keys = append(s.Keys, key)
	return fate, p, nil
}

// Capture books a capture of r.Amount (0: all) once per payment.
func (s *Scripted) Capture(_ context.Context, r providers.CaptureRequest) (providers.Result, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	fate, p, err := s.reach(r.Reference, r.IdempotencyKey)
	if err != nil {
		return providers.Result{}, err
	}
	if p.CaptureKey == "" {
		if fate == Declined {
			return providers.Result{}, &providers.Decline{Code: "invalid_request", Message: "scripted decline"}
		}
		if p.Captured > 0 {
			return providers.Result{}, &providers.Decline{Code: "invalid_request", Message: "The payment was already captured."}
		}
		amount := r.Amount
		if amount == 0 {
			amount = p.Amount
		}
		p.Captured, p.CaptureKey, p.Processing = amount, r.IdempotencyKey, fate == Processing
	} else if p.CaptureKey != r.IdempotencyKey {
		return providers.Result{}, &providers.Decline{Code: "invalid_request", Message: "The payment was already captured."}
	}
	if fate == LostAnswer {
		return providers.Result{}, errLostAnswer
	}
	return providers.Result{Reference: r.Reference, Pending: p.Processing}, nil
}

// Refund books r.Amount under r.IdempotencyKey once.
func (s *Scripted) Refund(_ context.Context, r providers.RefundRequest) (providers.Result, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	fate, p, err := s.reach(r.Reference, r.IdempotencyKey)
	if err != nil {
		return providers.Result{}, err
	}
	re, booked := s.Refunds[r.IdempotencyKey]
	if !booked {
		if fate == Declined {
			return providers.Result{}, &providers.Decline{Code: "refund_failed", Message: "scripted decline"}
		}
		if s.refunded(r.Reference)+r.Amount > p.Captured {
			return providers.Result{}, &providers.Decline{Code: "invalid_request", Message: "The refund exceeds what was captured."}
		}
		re = &Refund{Key: r.IdempotencyKey, RefundID: r.RefundID, Reference: "re_" + r.IdempotencyKey, Payment: r.Reference,
			Amount: r.Amount, Processing: fate == Processing}
		s.Refunds[r.IdempotencyKey] = re
	}
	if fate == LostAnswer {
		return providers.Result{}, errLostAnswer
	}
	return providers.Result{Reference: re.Reference, Pending: re.Processing}, nil
}

// refunded is the sum of the refunds of reference in the books.
func (s *Scripted) refunded(reference string) int64 {
	var sum int64
	for _, re := range s.Refunds {
		if re.Payment == reference {
			sum += re.Amount
		}
	}
	return sum
}

// LookupPayment reads the books; a lost request is ErrUnavailable, and a
// processing capture stays so until an honest lookup finishes it.
func (s *Scripted) LookupPayment(_ context.Context, reference string) (providers.Payment, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	fate := s.next()
	if fate == LostRequest || fate == LostAnswer {
		return providers.Payment{}, errLostRequest
	}
	p, ok := s.Payments[reference]
	if !ok {
		return providers.Payment{}, &providers.Decline{Code: "invalid_request", Message: "No such payment."}
	}
	switch {
	case p.Processing && fate != Honest:
		return providers.Payment{Reference: reference, Status: providers.PaymentProcessing}, nil
	case p.CaptureKey != "":
		p.Processing = false
		return providers.Payment{Reference: reference, Status: providers.PaymentCaptured, Captured: p.Captured}, nil
	}
	return providers.Payment{Reference: reference, Status: providers.PaymentAuthorized}, nil
}

// LookupRefund finds a refund by its provider id, else by the gateway's
// refund id; none is ErrNothingBooked.
func (s *Scripted) LookupRefund(_ context.Context, r providers.RefundLookup) (providers.Result, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	fate := s.next()
	if fate == LostRequest || fate == LostAnswer {
		return providers.Result{}, errLostRequest
	}
	for _, re := range s.Refunds {
		if (r.ProviderRefund != "" && re.Reference == r.ProviderRefund) || (r.RefundID != "" && re.RefundID == r.RefundID) {
			if re.Processing && fate != Honest {
				return providers.Result{Reference: re.Reference, Pending: true}, nil
			}
			re.Processing = false
			return providers.Result{Reference: re.Reference}, nil
		}
	}
	return providers.Result{}, fmt.Errorf("scripted: no refund %s: %w", r.RefundID, providers.ErrNothingBooked)
}

// Refunded is the total the books refunded of reference.
func (s *Scripted) Refunded(reference string) int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.refunded(reference)
}

// Seeds are fuzz inputs for Drive: (script, windowAfter, finalEvery).
var Seeds = []struct {
	Script                  []byte
	WindowAfter, FinalEvery uint8
}{
	{[]byte{}, 255, 0},
	{[]byte{2, 2, 2, 0}, 255, 3},                 // booked, answers lost, then one arrives
	{[]byte{1, 1, 1}, 2, 1},                      // never reaches the provider, then the window passes
	{[]byte{2, 1, 1, 2, 1}, 2, 2},                // booked and lost, then looked up after the window
	{[]byte{4, 4, 4, 2, 4, 0}, 255, 1},           // left processing, followed
	{[]byte{3}, 255, 0},                          // declined
	{[]byte{2, 3, 3, 1, 4, 4, 2, 0, 1}, 3, 2},    // mixed
	{[]byte{1, 2, 1, 4, 1, 1, 4, 4, 0, 2}, 1, 5}, // the window passes at once
}

// AddSeeds adds Seeds to f.
func AddSeeds(f *testing.F) {
	for _, s := range Seeds {
		f.Add(s.Script, s.WindowAfter, s.FinalEvery)
	}
}

// Drive makes attempts of one operation until pending reports false: at
// attempt n (from 0) the clock reads requested plus a minute, or, from
// attempt windowAfter on, plus window and an hour; every finalEvery-th
// attempt is its task's last (none when 0). It fails t when a request
// reaches the books after the window, when an attempt reports success while
// the operation is still pending, when every request the books saw was not
// sent under key, or when the operation is still pending once the script
// has run out and the provider has answered honestly for a while.
func (s *Scripted) Drive(t testing.TB, key string, requested time.Time, window time.Duration, windowAfter, finalEvery uint8,
	clock *time.Time, pending func() bool, attempt func(final bool) error) {
	t.Helper()
	limit := 2*len(s.script) + 4
	for n := 0; pending(); n++ {
		if n > limit {
			t.Fatalf("still pending after %d attempts, with an honest provider since the script ran out", n)
		}
		past := n >= int(windowAfter)
		*clock = requested.Add(time.Minute)
		if past {
			*clock = requested.Add(window + time.Hour)
		}
		s.mu.Lock()
		sent := len(s.Keys)
		s.mu.Unlock()
		err := attempt(finalEvery > 0 && n%int(finalEvery) == int(finalEvery)-1)
		s.mu.Lock()
		resent := len(s.Keys) != sent
		s.mu.Unlock()
		if past && resent {
			t.Fatalf("attempt %d: the request was sent after the idempotency window", n)
		}
		if pending() && err == nil {
			t.Fatalf("attempt %d: still pending and the attempt reported success", n)
		}
	}
	for _, k := range s.Keys {
		if k != key {
			t.Fatalf("a request was sent under %q, want only %q", k, key)
		}
	}
}
