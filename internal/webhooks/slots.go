package webhooks

import (
	"context"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"
)

// merchantSlots are one merchant's attempt slots in this process, over all
// its endpoints.
type merchantSlots struct {
	used    atomic.Int32
	back    pushBacks     // for its slow endpoints' deliveries
	freed   chan struct{} // a token each time a slot frees, for one waiter
	waiting atomic.Int32
}

func newMerchantSlots() *merchantSlots { return &merchantSlots{freed: make(chan struct{}, 1)} }

// take takes one of the merchant's slots if fewer than limit are in use.
func (m *merchantSlots) take(limit int) bool {
	for {
		n := m.used.Load()
		if n >= int32(limit) {
			return false
		}
		if m.used.CompareAndSwap(n, n+1) {
			return true
		}
	}
}

// give frees one of the merchant's slots and wakes a waiter, if any.
func (m *merchantSlots) give() {
	m.used.Add(-1)
	select {
	case m.freed <- struct{}{}:
	default:
	}
}

// wait waits up to limit for one of the merchant's slots.
func (m *merchantSlots) wait(ctx context.Context, slots int, limit time.Duration) bool {
	t := time.NewTimer(limit)
	defer t.Stop()
	for !m.take(slots) {
		select {
		case <-m.freed:
		case <-t.C:
			return m.take(slots)
		case <-ctx.Done():
			return false
		}
	}
	if m.used.Load() < int32(slots) {
		// Slots freed together left one token: pass it on to the next waiter.
		select {
		case m.freed <- struct{}{}:
		default:
		}
	}
	return true
}

// slowSend is the attempt duration from which an endpoint counts as slow:
// its attempts may hold only slowShare of its merchant's slots.
const slowSend = time.Second

// slow reports whether the endpoint's recent attempts took slowSend or more.
// An endpoint with no attempt yet is not slow.
func (e *endpointSlots) slow() bool {
	t := e.took.Load()
	return t > 0 && time.Duration(t-1) >= slowSend
}

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

// waitFor is wait for at most slots deliveries of the merchant at once.
func (m *merchantSlots) waitFor(ctx context.Context, slots int, limit time.Duration) bool {
	defer m.waiting.Add(-1)
	if m.waiting.Add(1) > int32(slots) {
		return false
	}
	return m.wait(ctx, slots, limit)
}
