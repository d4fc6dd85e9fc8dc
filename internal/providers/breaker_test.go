package providers_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/gatehouse-pay/gatehouse/internal/providers"
	"github.com/gatehouse-pay/gatehouse/internal/providers/providertest"
)

// outcome is what the fake answers to one call.
type outcome int

const (
	ok outcome = iota
	declined
	unavailable
	cancelled
	deadline
	otherErr
)

func (o outcome) err() error {
	switch o {
	case declined:
		return &providers.Decline{Code: "card_declined", Message: "declined"}
	case unavailable:
		return fmt.Errorf("%w: upstream 503", providers.ErrUnavailable)
	case cancelled:
		return fmt.Errorf("%w: %w", providers.ErrUnavailable, context.Canceled)
	case deadline:
		return fmt.Errorf("%w: %w", providers.ErrUnavailable, context.DeadlineExceeded)
	case otherErr:
		return errors.New("connection reset by peer")
	}
	return nil
}

// scripted returns a provider named "fake" that answers with outcomes in
// order (ok once they run out) and counts the calls it received.
func scripted(outcomes ...outcome) *providertest.Fake {
	script := make([]error, len(outcomes))
	for i, o := range outcomes {
		script[i] = o.err()
	}
	return &providertest.Fake{ProviderName: "fake", Script: script}
}

func repeat(o outcome, n int) []outcome {
	out := make([]outcome, n)
	for i := range out {
		out[i] = o
	}
	return out
}

func seq(parts ...[]outcome) []outcome {
	var out []outcome
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

func TestBreakerCountsOnlyAvailabilityFailures(t *testing.T) {
	tests := []struct {
		name      string
		failures  uint32 // 0: the default
		outcomes  []outcome
		wantCalls int // calls that reached the provider
		wantState string
	}{
		{"declines never trip", 0, repeat(declined, 10), 10, "closed"},
		{"successes never trip", 0, repeat(ok, 10), 10, "closed"},
		{"five unavailable in a row trip", 0, repeat(unavailable, 5), 5, "open"},
		{"four do not", 0, repeat(unavailable, 4), 4, "closed"},
		{"an open circuit refuses without calling", 0, repeat(unavailable, 8), 5, "open"},
		{"deadlines count", 0, repeat(deadline, 5), 5, "open"},
		{"errors without a kind count", 0, repeat(otherErr, 5), 5, "open"},
		{"a success resets the run", 0, seq(repeat(unavailable, 4), []outcome{ok}, repeat(unavailable, 4)), 9, "closed"},
		{"a decline resets the run", 0, seq(repeat(unavailable, 4), []outcome{declined}, repeat(unavailable, 4)), 9, "closed"},
		{"cancelled calls count as nothing", 0, seq(repeat(unavailable, 4), repeat(cancelled, 3)), 7, "closed"},
		{"cancelled calls do not reset the run", 0, seq(repeat(unavailable, 4), repeat(cancelled, 3), []outcome{unavailable}), 8, "open"},
		{"Failures is configurable", 2, repeat(unavailable, 3), 2, "open"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := scripted(tt.outcomes...)
			b := providers.WithBreaker(f, providers.BreakerOptions{Failures: tt.failures, OpenFor: time.Hour})
			for i := range tt.outcomes {
				res, err := b.Authorize(context.Background(), providers.AuthorizeRequest{IdempotencyKey: fmt.Sprint(i)})
				if want := "ref_" + fmt.Sprint(i); err == nil && res.Reference != want {
					t.Errorf("call %d: reference = %q, want %s", i, res.Reference, want)
				}
			}
			if n := f.Count(); n != tt.wantCalls {
				t.Errorf("provider calls = %d, want %d", n, tt.wantCalls)
			}
			if got := b.State(); got != tt.wantState {
				t.Errorf("state = %q, want %q", got, tt.wantState)
			}
		})
	}
}

func TestBreakerPassesResultsThrough(t *testing.T) {
	tests := []struct {
		name        string
		o           outcome
		wantDecline string
		wantUnavail bool
		wantIs      error
	}{
		{"success", ok, "", false, nil},
		{"decline keeps its code", declined, "card_declined", false, nil},
		{"unavailable", unavailable, "", true, nil},
		{"deadline keeps its cause", deadline, "", true, context.DeadlineExceeded},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := scripted(tt.o)
			b := providers.WithBreaker(f, providers.BreakerOptions{})
			_, err := b.Capture(context.Background(), providers.CaptureRequest{})
			d, isDecline := providers.AsDecline(err)
			if got := ""; isDecline {
				got = d.Code
				if got != tt.wantDecline {
					t.Errorf("decline code = %q, want %q", got, tt.wantDecline)
				}
			} else if tt.wantDecline != "" {
				t.Errorf("err = %v, want a decline %q", err, tt.wantDecline)
			}
			if got := errors.Is(err, providers.ErrUnavailable); got != tt.wantUnavail {
				t.Errorf("errors.Is(%v, ErrUnavailable) = %v, want %v", err, got, tt.wantUnavail)
			}
			if errors.Is(err, providers.ErrCircuitOpen) {
				t.Errorf("err = %v: a call that went through must not say the circuit is open", err)
			}
			if tt.wantIs != nil && !errors.Is(err, tt.wantIs) {
				t.Errorf("err = %v, want it to wrap %v", err, tt.wantIs)
			}
		})
	}
}

func TestBreakerOpenErrorAndSharedCircuit(t *testing.T) {
	f := scripted(repeat(unavailable, 5)...)
	b := providers.WithBreaker(f, providers.BreakerOptions{OpenFor: time.Hour})
	ctx := context.Background()
	for range 5 {
		_, _ = b.Authorize(ctx, providers.AuthorizeRequest{})
	}
	// One circuit covers every operation of the provider.
	ops := map[string]func() error{
		"authorize": func() error { _, err := b.Authorize(ctx, providers.AuthorizeRequest{}); return err },
		"capture":   func() error { _, err := b.Capture(ctx, providers.CaptureRequest{}); return err },
		"void":      func() error { _, err := b.Void(ctx, providers.VoidRequest{}); return err },
		"refund":    func() error { _, err := b.Refund(ctx, providers.RefundRequest{}); return err },
	}
	for name, op := range ops {
		err := op()
		if !errors.Is(err, providers.ErrUnavailable) || !errors.Is(err, providers.ErrCircuitOpen) {
			t.Errorf("%s with an open circuit: err = %v, want ErrUnavailable and ErrCircuitOpen", name, err)
		}
		if _, isDecline := providers.AsDecline(err); isDecline {
			t.Errorf("%s: an open circuit must be retryable, got a decline", name)
		}
	}
	if n := f.Count(); n != 5 {
		t.Errorf("provider calls = %d, want 5", n)
	}
	if b.Name() != "fake" {
		t.Errorf("Name() = %q, want the wrapped provider's", b.Name())
	}
}

func TestBreakerHalfOpen(t *testing.T) {
	const openFor = 200 * time.Millisecond
	tests := []struct {
		name        string
		trial       outcome
		wantState   string
		wantChanges []string
	}{
		{"a successful trial closes", ok, "closed",
			[]string{"fake closed->open", "fake open->half-open", "fake half-open->closed"}},
		{"a decline is a successful trial", declined, "closed",
			[]string{"fake closed->open", "fake open->half-open", "fake half-open->closed"}},
		{"a failed trial opens again", unavailable, "open",
			[]string{"fake closed->open", "fake open->half-open", "fake half-open->open"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var mu sync.Mutex
			var changes []string
			f := scripted(append(repeat(unavailable, 3), tt.trial)...)
			b := providers.WithBreaker(f, providers.BreakerOptions{
				Failures: 3, OpenFor: openFor,
				OnStateChange: func(name, from, to string) {
					mu.Lock()
					defer mu.Unlock()
					changes = append(changes, name+" "+from+"->"+to)
				},
			})
			ctx := context.Background()
			for range 3 {
				_, _ = b.Void(ctx, providers.VoidRequest{})
			}
			if _, err := b.Void(ctx, providers.VoidRequest{}); !errors.Is(err, providers.ErrCircuitOpen) {
				t.Fatalf("right after tripping: err = %v, want ErrCircuitOpen", err)
			}
			time.Sleep(openFor + 20*time.Millisecond)
			if got := b.State(); got != "half-open" {
				t.Fatalf("after OpenFor: state = %q, want half-open", got)
			}
			_, _ = b.Void(ctx, providers.VoidRequest{})
			if n := f.Count(); n != 4 {
				t.Errorf("provider calls = %d, want 4 (3 failures and one trial)", n)
			}
			if got := b.State(); got != tt.wantState {
				t.Errorf("state = %q, want %q", got, tt.wantState)
			}
			mu.Lock()
			defer mu.Unlock()
			if diff := cmp.Diff(tt.wantChanges, changes); diff != "" {
				t.Errorf("state changes (-want +got):\n%s", diff)
			}
		})
	}
}

// While the single half-open trial is in flight, other calls are refused.
func TestBreakerHalfOpenLetsOneTrialThrough(t *testing.T) {
	const openFor = 30 * time.Millisecond
	release := make(chan struct{})
	started := make(chan struct{}, 10)
	// Two failures open the circuit; the third call, the trial, is held.
	f := scripted(unavailable, unavailable)
	f.AuthorizeFn = func(ctx context.Context, _ providers.AuthorizeRequest) (providers.Result, error) {
		started <- struct{}{}
		<-release
		return providers.Result{Reference: "ch_1"}, nil
	}
	b := providers.WithBreaker(f, providers.BreakerOptions{Failures: 2, OpenFor: openFor})
	ctx := context.Background()
	for range 2 {
		_, _ = b.Authorize(ctx, providers.AuthorizeRequest{})
	}
	time.Sleep(openFor + 20*time.Millisecond)

	trial := make(chan error, 1)
	go func() {
		_, err := b.Authorize(ctx, providers.AuthorizeRequest{})
		trial <- err
	}()
	<-started
	if _, err := b.Authorize(ctx, providers.AuthorizeRequest{}); !errors.Is(err, providers.ErrCircuitOpen) || !errors.Is(err, providers.ErrUnavailable) {
		t.Errorf("second call while the trial runs: err = %v, want ErrUnavailable and ErrCircuitOpen", err)
	}
	close(release)
	if err := <-trial; err != nil {
		t.Fatalf("trial: %v", err)
	}
	if got := b.State(); got != "closed" {
		t.Errorf("state = %q, want closed", got)
	}
	if n := f.Count(); n != 3 {
		t.Errorf("provider calls = %d, want 3", n)
	}
}
