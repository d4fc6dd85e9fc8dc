package providers

import (
	"context"
	"math/rand/v2"
	"sync"
	"time"
)

// PutBack is returned instead of a provider call when the call's merchant
// holds all its slots in this process (see MerchantSlots): nothing was sent
// and nothing was written, and the work is to run again after Delay without
// counting as an attempt. Reason is one of the PutBack constants.
type PutBack struct {
	Delay  time.Duration
	Reason string
}

func (p *PutBack) Error() string {
	return "provider call put back (" + p.Reason + "): run again in " + p.Delay.String()
}

// The reasons a provider call is put back.
const (
	// PutBackMerchantSlow: the merchant's slots are held by calls that are
	// not fast (its connector answers slowly, or has not answered yet).
	PutBackMerchantSlow = "merchant_slow"
	// PutBackMerchantBusy: the merchant's fast calls hold every slot and
	// its turn would not come within the wait budget.
	PutBackMerchantBusy = "merchant_busy"
)

// PutBackReasons are the PutBack constants, for metrics.
var PutBackReasons = []string{PutBackMerchantSlow, PutBackMerchantBusy}

// MerchantSlotsDefault is PROVIDER_MERCHANT_SLOTS's default: a quarter of
// the worker's 50 provider slots (jobs.Pools), rounded down. One merchant's
// slow connector or flood then holds at most a quarter of them, so even
// three such merchants at once leave a quarter for everyone else, while a
// merchant with a connector answering in 300 ms still gets some 40 calls a
// second from each worker process.
const MerchantSlotsDefault = 12

// The pacing of MerchantSlots.
const (
	// FastCall is the call duration under which a merchant's calls count
	// as fast: a call that finds its merchant at the cap may then wait in
	// the process for the next slot.
	FastCall = 100 * time.Millisecond
	// waitBudget is the longest expected wait for which a fast merchant's
	// call queues for its next slot rather than being put back.
	waitBudget = 50 * time.Millisecond
	// slotWait bounds how long a queued call waits before it is put back.
	slotWait = time.Second
	// minPutBack is the least delay of a put-back: the queue schedules in
	// whole seconds.
	minPutBack = time.Second
	// maxPutBack bounds how far ahead a put-back is scheduled.
	maxPutBack = time.Minute
	// unknownPace stands for a merchant's call duration before its first
	// call in this process has ended.
	unknownPace = time.Second
	// maxIdleMerchants is how many merchants with no call running the
	// slots remember (their pace) before the idle ones are forgotten.
	maxIdleMerchants = 10_000
)

// MerchantSlots bound the provider calls one merchant runs at once in this
// process, over all its connectors and all kinds of work (authorizations,
// captures, voids, reverses, authentications, refunds), so that one
// merchant's slow connector or flood of charges holds at most a bounded
// share of the worker's provider slots and another merchant's calls find
// one free.
//
// A call that finds its merchant at the cap does not hold a worker slot
// while it waits for one: it is put back (Take returns a *PutBack) to run
// again later, spaced at the pace at which the merchant's slots free (one
// return every took/slots, from minPutBack on, at most maxPutBack ahead,
// with 10 % of jitter either way), so a slow merchant's backlog comes back
// about when it can run instead of all of it every second. Only a merchant
// whose calls are fast (under FastCall) queues in the process for its next
// slot, while the expected wait is under waitBudget: a burst of a healthy
// merchant goes out as its slots free.
type MerchantSlots struct {
	mu        sync.Mutex
	limit     int
	now       func() time.Time
	jitter    func(time.Duration) time.Duration
	merchants map[string]*merchantGate
}

// merchantGate is one merchant's slots.
type merchantGate struct {
	running int
	queue   []chan struct{} // calls waiting for a slot, first come first served
	took    time.Duration   // recent calls' duration, a moving average
	tookSet bool
	last    time.Time // the latest return handed out to a put-back call
}

// NewMerchantSlots returns slots of limit calls per merchant (at least 1),
// reading the clock now.
func NewMerchantSlots(limit int, now func() time.Time) *MerchantSlots {
	return &MerchantSlots{limit: max(limit, 1), now: now, jitter: putBackJitter, merchants: map[string]*merchantGate{}}
}

// Limit is how many calls of one merchant run at once.
func (s *MerchantSlots) Limit() int { return s.limit }

type mustRunKey struct{}

// MustRun marks ctx as work that cannot be put back (the queue would give
// it up rather than run it again): its call takes a slot even over the cap.
func MustRun(ctx context.Context) context.Context { return context.WithValue(ctx, mustRunKey{}, true) }

func mustRun(ctx context.Context) bool { v, _ := ctx.Value(mustRunKey{}).(bool); return v }

// Take takes one of the merchant's slots for a provider call, or returns a
// *PutBack when the call is to run later. The caller calls release once
// the call has ended (more calls are harmless); a nil *MerchantSlots
// bounds nothing.
func (s *MerchantSlots) Take(ctx context.Context, merchantID string) (release func(), err error) {
	if s == nil {
		return func() {}, nil
	}
	s.mu.Lock()
	g := s.gate(merchantID)
	if (g.running < s.limit && len(g.queue) == 0) || mustRun(ctx) {
		g.running++
		s.mu.Unlock()
		return s.releaser(g), nil
	}
	fast := g.tookSet && g.took < FastCall
	if fast && time.Duration(len(g.queue)+1)*g.took/time.Duration(s.limit) < waitBudget {
		ready := make(chan struct{})
		g.queue = append(g.queue, ready)
		s.mu.Unlock()
		if s.await(ctx, g, ready) {
			return s.releaser(g), nil
		}
		s.mu.Lock()
	}
	reason := PutBackMerchantBusy
	if !fast {
		reason = PutBackMerchantSlow
	}
	delay := g.putBack(s.now(), s.limit)
	s.mu.Unlock()
	return nil, &PutBack{Delay: s.jitter(delay), Reason: reason}
}

// await waits up to slotWait for a queued call's slot; false when it gave
// up (and left the queue). A call handed a slot as it gave up keeps it.
func (s *MerchantSlots) await(ctx context.Context, g *merchantGate, ready chan struct{}) bool {
	t := time.NewTimer(slotWait)
	defer t.Stop()
	select {
	case <-ready:
		return true
	case <-t.C:
	case <-ctx.Done():
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, c := range g.queue {
		if c == ready {
			g.queue = append(g.queue[:i], g.queue[i+1:]...)
			return false
		}
	}
	return true
}

// gate is the merchant's slots, made on first use. Called with s.mu held.
func (s *MerchantSlots) gate(merchantID string) *merchantGate {
	g, ok := s.merchants[merchantID]
	if ok {
		return g
	}
	if len(s.merchants) >= maxIdleMerchants {
		for id, m := range s.merchants {
			if m.running == 0 && len(m.queue) == 0 {
				delete(s.merchants, id)
			}
		}
	}
	g = &merchantGate{}
	s.merchants[merchantID] = g
	return g
}

// releaser frees a slot of g once, recording the call's duration.
func (s *MerchantSlots) releaser(g *merchantGate) func() {
	start := s.now()
	var once sync.Once
	return func() {
		once.Do(func() {
			s.mu.Lock()
			defer s.mu.Unlock()
			g.observe(s.now().Sub(start))
			g.running--
			for g.running < s.limit && len(g.queue) > 0 {
				close(g.queue[0])
				g.queue = g.queue[1:]
				g.running++
			}
			if len(g.queue) == 0 {
				g.queue = nil
			}
		})
	}
}

// observe adds a call's duration to the moving average.
func (g *merchantGate) observe(took time.Duration) {
	took = max(took, 0)
	if g.tookSet {
		g.took = (3*g.took + took) / 4
	} else {
		g.took, g.tookSet = took, true
	}
}

// putBack is the delay of the next call put back: one return every
// took/limit after the latest one handed out, from minPutBack on, at most
// maxPutBack ahead.
func (g *merchantGate) putBack(now time.Time, limit int) time.Duration {
	pace := unknownPace
	if g.tookSet {
		pace = g.took
	}
	at := now.Add(minPutBack)
	if g.last.After(at) {
		at = g.last
	}
	at = at.Add(pace / time.Duration(limit))
	if most := now.Add(maxPutBack); at.After(most) {
		at = most
	}
	g.last = at
	return at.Sub(now)
}

// putBackJitter spreads a put-back's delay by up to 10 % either way, never
// under minPutBack, so calls put back together do not return together.
func putBackJitter(d time.Duration) time.Duration {
	if d < 10 {
		return d
	}
	return max(d-d/10+rand.N(d/5+1), minPutBack)
}
