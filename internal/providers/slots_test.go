package providers

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"
)

// clock is a test clock moved by hand.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

func newTestSlots(limit int) (*MerchantSlots, *clock) {
	c := &clock{t: time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)}
	s := NewMerchantSlots(limit, c.now)
	s.jitter = func(d time.Duration) time.Duration { return d }
	return s, c
}

// putBackOf is the *PutBack of err, or fails the test.
func putBackOf(t *testing.T, err error) *PutBack {
	t.Helper()
	var back *PutBack
	if !errors.As(err, &back) {
		t.Fatalf("got %v, want a *PutBack", err)
	}
	return back
}

// A merchant runs at most its limit of calls at once; one more is put back
// without waiting (its pace is not known, or slow), whatever the others do;
// another merchant's calls are not affected; a freed slot is taken again.
func TestMerchantSlotsCapPerMerchant(t *testing.T) {
	ctx := context.Background()
	for _, c := range []struct {
		name    string
		limit   int
		took    time.Duration // how long the first call of A took; 0: none ended yet
		want    string
		atLeast time.Duration
	}{
		{"pace unknown", 2, 0, PutBackMerchantSlow, minPutBack},
		{"slow connector", 2, 5 * time.Second, PutBackMerchantSlow, minPutBack},
		{"just under fast is fast", 3, FastCall - time.Millisecond, "", 0},
		{"fast connector, long queue", 1, 90 * time.Millisecond, PutBackMerchantBusy, minPutBack},
	} {
		t.Run(c.name, func(t *testing.T) {
			s, clk := newTestSlots(c.limit)
			if c.took > 0 {
				release, err := s.Take(ctx, "mer_a")
				if err != nil {
					t.Fatal(err)
				}
				clk.advance(c.took)
				release()
			}
			var releases []func()
			for i := range c.limit {
				release, err := s.Take(ctx, "mer_a")
				if err != nil {
					t.Fatalf("call %d of %d: %v", i+1, c.limit, err)
				}
				releases = append(releases, release)
			}
			if release, err := s.Take(ctx, "mer_b"); err != nil {
				t.Fatalf("another merchant's call: %v", err)
			} else {
				release()
			}
			if c.want == "" {
				// A fast merchant's call waits for the next slot.
				done := make(chan error, 1)
				go func() {
					release, err := s.Take(ctx, "mer_a")
					if err == nil {
						release()
					}
					done <- err
				}()
				time.Sleep(20 * time.Millisecond)
				releases[0]()
				if err := <-done; err != nil {
					t.Fatalf("a fast merchant's call over the cap: %v, want it to wait for a slot", err)
				}
				return
			}
			_, err := s.Take(ctx, "mer_a")
			back := putBackOf(t, err)
			if back.Reason != c.want || back.Delay < c.atLeast || back.Delay > maxPutBack {
				t.Fatalf("put back %+v, want reason %s and a delay from %s to %s", back, c.want, c.atLeast, maxPutBack)
			}
			releases[0]()
			releases[0]() // a second release frees nothing more
			release, err := s.Take(ctx, "mer_a")
			if err != nil {
				t.Fatalf("after a release: %v", err)
			}
			release()
			if _, err := s.Take(ctx, "mer_a"); err != nil {
				t.Fatalf("after two releases (one of them twice): %v", err)
			}
			if _, err := s.Take(ctx, "mer_a"); err == nil {
				t.Fatal("a release counted twice: a call over the cap was let through")
			}
		})
	}
}

// The calls put back for a slow merchant return at the pace its slots
// free: one every took/limit after the latest one handed out, from
// minPutBack on, never more than maxPutBack ahead; as the clock moves, the
// spacing continues from the latest return.
func TestMerchantSlotsPutBackPace(t *testing.T) {
	ctx := context.Background()
	s, clk := newTestSlots(2)
	release, _ := s.Take(ctx, "mer_a")
	clk.advance(5 * time.Second)
	release()
	for range 2 {
		if _, err := s.Take(ctx, "mer_a"); err != nil {
			t.Fatal(err)
		}
	}
	step := 5 * time.Second / 2
	for i, want := range []time.Duration{
		minPutBack + step, minPutBack + 2*step, minPutBack + 3*step,
	} {
		_, err := s.Take(ctx, "mer_a")
		if got := putBackOf(t, err).Delay; got != want {
			t.Fatalf("put-back %d: delay %s, want %s", i, got, want)
		}
	}
	clk.advance(2 * time.Second) // the latest return is now 6.5 s ahead
	_, err := s.Take(ctx, "mer_a")
	if got, want := putBackOf(t, err).Delay, minPutBack+4*step-2*time.Second; got != want {
		t.Fatalf("after 2 s: delay %s, want %s", got, want)
	}
	for range 100 {
		_, err = s.Take(ctx, "mer_a")
	}
	if got := putBackOf(t, err).Delay; got != maxPutBack {
		t.Fatalf("a long backlog: delay %s, want the bound %s", got, maxPutBack)
	}
	// Another merchant's pace is its own.
	if _, err := s.Take(ctx, "mer_b"); err != nil {
		t.Fatal(err)
	}
}

// A queued call gives up when its context ends, leaves the queue and is
// put back; a call that cannot be put back (MustRun) runs over the cap.
func TestMerchantSlotsWaitAndMustRun(t *testing.T) {
	s, clk := newTestSlots(1)
	release, _ := s.Take(context.Background(), "mer_a")
	clk.advance(10 * time.Millisecond)
	release()
	hold, err := s.Take(context.Background(), "mer_a")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	_, err = s.Take(ctx, "mer_a")
	if back := putBackOf(t, err); back.Reason != PutBackMerchantBusy {
		t.Fatalf("a wait that ended: %+v, want merchant_busy", back)
	}
	if n := len(s.merchants["mer_a"].queue); n != 0 {
		t.Fatalf("%d calls left queued, want 0", n)
	}
	over, err := s.Take(MustRun(context.Background()), "mer_a")
	if err != nil {
		t.Fatalf("MustRun over the cap: %v", err)
	}
	over()
	hold()
	if g := s.merchants["mer_a"]; g.running != 0 {
		t.Fatalf("%d calls running after every release, want 0", g.running)
	}
	var none *MerchantSlots
	if release, err := none.Take(context.Background(), "mer_a"); err != nil || release == nil {
		t.Fatalf("nil slots: %v", err)
	}
}

// The jitter spreads a delay by up to 10 % either way, never under minPutBack.
func TestPutBackJitter(t *testing.T) {
	for range 1000 {
		for _, d := range []time.Duration{time.Second, 10 * time.Second, time.Minute} {
			got := putBackJitter(d)
			if got < max(d-d/10, minPutBack) || got > d+d/10 {
				t.Fatalf("jitter of %s: %s", d, got)
			}
		}
	}
}
