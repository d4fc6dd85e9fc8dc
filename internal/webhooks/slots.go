package webhooks

import (
	"context"
	"math/rand/v2"
	"sync"
	"time"
)

// gate is a set of attempt slots: at most a limit run at once, and the
// deliveries that wait for one are handed a freed slot in the order they
// came. A waiter that gives up leaves the queue; one that was handed a slot
// as it gave up keeps it.
type gate struct {
	mu      sync.Mutex
	running int
	queue   []chan struct{}
	took    time.Duration // recent attempts' duration, a moving average; 0 before the first
	tookSet bool
}

// take takes a slot if fewer than limit run and nobody waits. Called with g.mu held.
func (g *gate) take(limit int) bool {
	if g.running < limit && len(g.queue) == 0 {
		g.running++
		return true
	}
	return false
}

// tryTake is take under the lock.
func (g *gate) tryTake(limit int) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.take(limit)
}

// expectedWait is how long the next waiter can expect to wait for a slot
// when pace slots turn over at the recent attempts' pace: its place in the
// queue times the time one of them frees. Called with g.mu held.
func (g *gate) expectedWait(pace int) time.Duration {
	return time.Duration(len(g.queue)+1) * g.took / time.Duration(max(pace, 1))
}

// wait takes one of slots, waiting up to limit for one when admit, told how
// long the wait is likely to be (pace of the slots turning over at the
// recent attempts' pace), lets it queue.
func (g *gate) wait(ctx context.Context, slots, pace int, limit time.Duration, admit func(expected time.Duration, known bool, queued int) bool) bool {
	g.mu.Lock()
	if g.take(slots) {
		g.mu.Unlock()
		return true
	}
	if limit <= 0 || !admit(g.expectedWait(pace), g.tookSet, len(g.queue)) {
		g.mu.Unlock()
		return false
	}
	ready := make(chan struct{})
	g.queue = append(g.queue, ready)
	g.mu.Unlock()
	t := time.NewTimer(limit)
	defer t.Stop()
	select {
	case <-ready:
		return true
	case <-t.C:
	case <-ctx.Done():
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	for i, c := range g.queue {
		if c == ready {
			g.queue = append(g.queue[:i], g.queue[i+1:]...)
			return false
		}
	}
	return true // handed a slot while giving up: it is ours
}

// observe adds an attempt's duration to the moving average. Called with g.mu held.
func (g *gate) observe(took time.Duration) {
	took = max(took, 0)
	if g.tookSet {
		g.took = (3*g.took + took) / 4
	} else {
		g.took, g.tookSet = took, true
	}
}

// give frees a slot and hands free slots to waiters, first come first
// served, while fewer than limit run. Called with g.mu held.
func (g *gate) give(limit int) {
	g.running--
	for g.running < limit && len(g.queue) > 0 {
		close(g.queue[0])
		g.queue = g.queue[1:]
		g.running++
	}
	if len(g.queue) == 0 {
		g.queue = nil
	}
}

// merchantSlots are one merchant's attempt slots in this process, over all
// its endpoints.
type merchantSlots struct {
	gate
	back pushBacks // for its slow endpoints' deliveries
}

// release frees one of the merchant's slots. Only fast attempts set the
// merchant's pace: the deliveries that wait for its slots are fast
// endpoints', and they wait for the slots its slow endpoints do not hold.
func (m *merchantSlots) release(took time.Duration, limit int) {
	m.mu.Lock()
	if took < fastSend {
		m.observe(took)
	}
	m.give(limit)
	m.mu.Unlock()
}

// endpointSlots are one endpoint's attempt slots in this process. How many
// attempts may run at once adapts to the endpoint as TCP's congestion
// window does. Until its first answer an endpoint runs one attempt, a probe,
// so that endpoints of unknown pace cannot fill their merchant's slots with
// attempts that may hang; a 2xx answer under slowSend opens the window to
// PerEndpointDefault. From there it grows while the endpoint's
// answers stay fast (by one per answer up to the last limit that was cut,
// then by one per window's worth of answers) and is halved, at most once
// per attempt duration, on an error, a non-2xx answer, a timeout (down to
// one) or a 2xx answer of slowSend or more (down to slowFloor). So a fast
// endpoint gets up to its merchant's slots, a failing one drops to one and
// a slow one to a few.
type endpointSlots struct {
	gate
	probing  bool    // no answer yet: one attempt at once
	initial  float64 // the window after a good first answer
	limit    float64 // attempts allowed at once, from 1 up to the merchant's slots
	ssthresh float64 // below it the window grows by one per fast answer
	base     time.Duration
	cutAt    time.Time
	back     pushBacks
}

func newEndpointSlots(initial, most int) *endpointSlots {
	return &endpointSlots{probing: true, initial: float64(max(min(initial, most), 1)), limit: 1, ssthresh: float64(most)}
}

// slowFloor is the least window of an endpoint whose answers are 2xx but
// take slowSend or more: half the first window, so a slow endpoint that works
// keeps delivering while a merchant's slow endpoints hold their share.
// Called with e.mu held.
func (e *endpointSlots) slowFloor() float64 { return max(e.initial/2, 1) }

// slots is how many attempts the endpoint may run at once now. Called with e.mu held.
func (e *endpointSlots) slots() int { return max(int(e.limit), 1) }

// answer is how an attempt's answer moves the endpoint's window.
type answer int

const (
	answerFast    answer = iota // a 2xx within the endpoint's usual time: grow
	answerSteady                // a 2xx slower than usual, under slowSend: keep
	answerTrouble               // an error, non-2xx, timeout, or slowSend or more: halve
)

// judge classes an attempt's answer against the endpoint's usual time: a
// 2xx is fast when it took under twice the endpoint's quickest recent
// answers (and never less than fastSend counts as fast). Called with e.mu held.
func (e *endpointSlots) judge(ok bool, took time.Duration) answer {
	switch {
	case !ok || took >= slowSend:
		return answerTrouble
	case took < min(max(2*e.base, fastSend), slowSend):
		return answerFast
	default:
		return answerSteady
	}
}

// release frees one of the endpoint's slots and moves its window by the
// attempt's answer. most is the window's ceiling (the merchant's slots).
func (e *endpointSlots) release(now time.Time, ok bool, took time.Duration, most int) {
	e.mu.Lock()
	defer e.mu.Unlock()
	took = max(took, 0)
	switch a := e.judge(ok, took); {
	case e.probing:
		e.probing = false
		switch {
		case a != answerTrouble:
			e.limit = e.initial
		case ok: // a slow 2xx
			e.limit = e.slowFloor()
		}
		if a == answerTrouble {
			e.ssthresh, e.cutAt = max(e.limit, 1), now
		}
	case a == answerFast:
		if e.limit < e.ssthresh {
			e.limit++
		} else {
			e.limit += 1 / e.limit
		}
	case a == answerTrouble:
		// Attempts that fail together are one signal: cut once per the
		// time an attempt takes.
		if now.Sub(e.cutAt) >= max(took, e.took) {
			floor := 1.0
			if ok {
				floor = min(e.slowFloor(), e.limit) // slow, not failing: it still delivers
			}
			e.ssthresh = max(e.limit/2, floor)
			e.limit, e.cutAt = e.ssthresh, now
		}
	}
	e.limit = min(e.limit, float64(most))
	// The usual time follows the quickest answers down at once and up slowly.
	if ok && (e.base == 0 || took < e.base) {
		e.base = took
	} else if ok {
		e.base += (took - e.base) / 16
	}
	e.observe(took)
	e.give(e.slots())
}

// cancel frees a slot taken for an attempt that was not made.
func (e *endpointSlots) cancel() {
	e.mu.Lock()
	e.give(e.slots())
	e.mu.Unlock()
}

// pace is what the endpoint's recent attempts say of it, read at once: how
// long they took (busyRetry before the first answer), whether it has
// answered yet, and whether it is fast (under fastSend) or slow (slowSend
// or more). An endpoint with no answer yet is neither.
type pace struct {
	took              time.Duration
	known, fast, slow bool
}

func (e *endpointSlots) pace() pace {
	e.mu.Lock()
	defer e.mu.Unlock()
	if !e.tookSet {
		return pace{took: busyRetry}
	}
	return pace{took: e.took, known: true, fast: e.took < fastSend, slow: e.took >= slowSend}
}

// current is the endpoint's window now.
func (e *endpointSlots) current() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.slots()
}

// slowSend is the attempt duration from which an endpoint counts as slow:
// its attempts may hold only slowShare of its merchant's slots.
const slowSend = time.Second

// slowShare is how many of a merchant's perMerchant slots its slow
// endpoints may hold together: all but a fifth, so that the merchant's own
// healthy endpoints keep slots beside its dead ones.
func slowShare(perMerchant int) int {
	return max(perMerchant-perMerchant/5, 1)
}

// busyRetry is the least time after which a delivery that found its
// merchant or endpoint at its cap is tried again; it is not an attempt.
const busyRetry = time.Second

// maxBusyRetry bounds how long a delivery is put back for a busy merchant
// or endpoint: the second step of the default retry schedule.
const maxBusyRetry = 5 * time.Minute

// pushBacks spaces the returns of the deliveries put back for one merchant
// or endpoint at the pace at which its slots free, one every took/slots,
// from busyRetry on and at most maxBusyRetry ahead. A dead endpoint's
// backlog then comes back to the queue at the rate it could be sent, not
// all of it every second, so it cannot keep the worker, Postgres and Redis
// busy reading deliveries that go straight back.
type pushBacks struct {
	mu   sync.Mutex
	last time.Time // the latest return handed out
}

// delay is how long from now the next delivery put back waits, with up to
// 10 % of jitter either way.
func (p *pushBacks) delay(now time.Time, took time.Duration, slots int) time.Duration {
	step := max(took, 0) / time.Duration(max(slots, 1))
	p.mu.Lock()
	at := now.Add(busyRetry)
	if p.last.After(at) {
		at = p.last
	}
	at = at.Add(step)
	if limit := now.Add(maxBusyRetry); at.After(limit) {
		at = limit
	}
	p.last = at
	p.mu.Unlock()
	return busyJitter(at.Sub(now))
}

// busyJitter spreads a push-back's delay by up to 10 % either way, so
// deliveries put back together do not return together.
func busyJitter(d time.Duration) time.Duration {
	if d < 10 {
		return d
	}
	return d - d/10 + rand.N(d/5+1)
}

// scheduleJitter adds up to 10 % to a delay of the retry schedule, never
// less than the schedule, so that deliveries that failed together (an
// outage of the receiver, or of Gatehouse) are not all tried again at the
// same instant.
func scheduleJitter(d time.Duration) time.Duration {
	if d < 10 {
		return d
	}
	return d + rand.N(d/10+1)
}
