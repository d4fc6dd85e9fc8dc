package webhooks_test

import (
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/gatehouse-pay/gatehouse/internal/webhooks"
)

// firstDelays records what WithFirstAttemptDelay reports.
type firstDelays struct {
	mu  sync.Mutex
	got []time.Duration
}

func (f *firstDelays) observe(d time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.got = append(f.got, d)
}

func (f *firstDelays) list() []time.Duration {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]time.Duration{}, f.got...)
}

// TestFirstAttemptDelay: the delay from a delivery's commit to the start of
// its first attempt is reported once, with the injected clock; later
// attempts, runs that make no attempt and test deliveries are not reported.
func TestFirstAttemptDelay(t *testing.T) {
	cases := []struct {
		name string
		// setup changes the rig before the runs.
		setup func(r *rig)
		// runs are the clock moves before each Deliver.
		runs   []time.Duration
		answer func(n int) webhooks.Response
		posts  int // requests sent
		want   []time.Duration
	}{
		{
			name:  "first attempt succeeds",
			runs:  []time.Duration{0},
			posts: 1,
			want:  []time.Duration{90 * time.Millisecond}, // the rig's clock is 90 ms after CreatedAt
		},
		{
			name:  "first attempt late",
			runs:  []time.Duration{3 * time.Second},
			posts: 1,
			want:  []time.Duration{3*time.Second + 90*time.Millisecond},
		},
		{
			name:   "second attempt is not reported",
			runs:   []time.Duration{0, 5*time.Minute + 30*time.Second}, // the schedule's 5m plus its jitter at most
			answer: func(int) webhooks.Response { return webhooks.Response{StatusCode: 500} },
			posts:  2,
			want:   []time.Duration{90 * time.Millisecond},
		},
		{
			name: "a delivery that already had attempts (manual retry of a failed one)",
			setup: func(r *rig) {
				now := r.clock.now()
				r.store.delivery.Attempts, r.store.delivery.ChainAttempts, r.store.delivery.NextAttemptAt = 5, 0, &now
			},
			runs:  []time.Duration{0},
			posts: 1,
			want:  []time.Duration{},
		},
		{
			name:  "test delivery",
			setup: func(r *rig) { r.store.delivery.Test = true },
			runs:  []time.Duration{0},
			posts: 1,
			want:  []time.Duration{},
		},
		{
			name: "run before the due time makes no attempt; the attempt reports the whole wait",
			setup: func(r *rig) {
				next := r.clock.now().Add(time.Minute)
				r.store.delivery.NextAttemptAt = &next
			},
			runs:  []time.Duration{0, time.Minute},
			posts: 1,
			want:  []time.Duration{time.Minute + 90*time.Millisecond},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := newRig(t, defaultSchedule)
			if c.setup != nil {
				r.store.mu.Lock()
				c.setup(r)
				r.store.mu.Unlock()
			}
			r.sender.answer = c.answer
			f := &firstDelays{}
			if got := r.d.WithFirstAttemptDelay(f.observe); got != r.d {
				t.Fatal("WithFirstAttemptDelay does not return its Deliverer")
			}
			for _, d := range c.runs {
				r.clock.advance(d)
				_ = r.deliver()
			}
			if n := len(r.sender.posts()); n != c.posts {
				t.Fatalf("POSTs: %d, want %d", n, c.posts)
			}
			if diff := cmp.Diff(c.want, f.list()); diff != "" {
				t.Errorf("first-attempt delays (-want +got):\n%s", diff)
			}
		})
	}
}

// TestFirstAttemptDelayOptional: without WithFirstAttemptDelay a first
// attempt goes out as before.
func TestFirstAttemptDelayOptional(t *testing.T) {
	r := newRig(t, defaultSchedule)
	if err := r.deliver(); err != nil {
		t.Fatalf("Deliver: %v", err)
	}
	if n := len(r.sender.posts()); n != 1 {
		t.Errorf("POSTs: %d, want 1", n)
	}
}
