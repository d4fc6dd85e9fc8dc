package webhooks

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"sync"
	"testing"
	"time"
)

// TestMerchantSlotsProperty drives a deliverer's slots from several
// goroutines with random mixes of merchants and endpoints, some endpoints
// slow (attempts of 2 s) and some fast, taking and freeing slots at random,
// one merchant mostly taking. Against a model of what each merchant and
// endpoint holds, every take must succeed exactly when the merchant is
// under its cap (its slow share for a slow endpoint) and the endpoint under
// its own: no merchant ever holds more than WEBHOOK_MERCHANT_SLOTS, and a
// merchant under its cap always gets a slot, however full the others are.
// A take that fails asks for a wait of about 1 s to 5 min.
func TestMerchantSlotsProperty(t *testing.T) {
	for seed := range uint64(12) {
		t.Run(fmt.Sprint("seed ", seed), func(t *testing.T) {
			t.Parallel()
			merchantSlotsRun(t, seed)
		})
	}
}

// merchantModel is what the test knows one merchant holds. Its mutex makes
// each take or release of the merchant and its check one step; different
// merchants run at once.
type merchantModel struct {
	mu       sync.Mutex
	id       string
	held     int
	endpoint []endpointModel
}

type endpointModel struct {
	id       string
	took     time.Duration // every attempt to it takes this long
	released bool          // an attempt has ended: the deliverer knows its pace
	held     []func(bool, time.Duration)
}

func (e *endpointModel) slow() bool { return e.released && e.took >= slowSend }

func merchantSlotsRun(t *testing.T, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 12))
	perMerchant, perEndpoint := 1+rng.IntN(30), 1+rng.IntN(12)
	d := NewDeliverer(nil, nil, nil, nil, time.Now, slog.New(slog.NewTextHandler(io.Discard, nil)), nil).WithMerchantSlots(perMerchant)
	d.perEndpoint, d.slotWait = perEndpoint, 0
	merchants := make([]*merchantModel, 2+rng.IntN(5))
	for i := range merchants {
		m := &merchantModel{id: fmt.Sprintf("m%d", i)}
		for j := range 1 + rng.IntN(12) {
			took := time.Millisecond
			if rng.IntN(2) == 0 {
				took = 2 * time.Second
			}
			m.endpoint = append(m.endpoint, endpointModel{id: fmt.Sprintf("m%d-e%d", i, j), took: took})
		}
		merchants[i] = m
	}
	const workers, steps = 8, 3000
	var wg sync.WaitGroup
	for w := range workers {
		r := rand.New(rand.NewPCG(seed, uint64(w)))
		wg.Go(func() {
			for range steps {
				// Merchant 0 is the noisy one: it is picked often and
				// mostly takes.
				mi := r.IntN(len(merchants) + 3)
				if mi >= len(merchants) {
					mi = 0
				}
				if !merchantStep(t, d, merchants[mi], r, mi == 0, perMerchant, perEndpoint) {
					return
				}
			}
		})
	}
	wg.Wait()
	for _, m := range merchants {
		for i := range m.endpoint {
			for _, release := range m.endpoint[i].held {
				release(true, m.endpoint[i].took)
			}
		}
	}
}

// merchantStep takes or frees one slot of m and checks the deliverer
// against the model; false stops the goroutine after a failure.
func merchantStep(t *testing.T, d *Deliverer, m *merchantModel, r *rand.Rand, noisy bool, perMerchant, perEndpoint int) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	e := &m.endpoint[r.IntN(len(m.endpoint))]
	takeP := 55
	if noisy {
		takeP = 85
	}
	if len(e.held) > 0 && r.IntN(100) >= takeP {
		last := len(e.held) - 1
		e.held[last](true, e.took)
		e.held = e.held[:last]
		e.released = true
		m.held--
		return true
	}
	limit := perMerchant
	if e.slow() {
		limit = slowShare(perMerchant)
	}
	window := d.endpointWindow(e.id)
	want := m.held < limit && len(e.held) < window
	release, retry, ok := d.acquire(context.Background(), m.id, e.id)
	switch {
	case ok != want:
		t.Errorf("merchant %s (holding %d of %d, slow endpoint %v) endpoint %s (holding %d of %d): took a slot %v, want %v",
			m.id, m.held, limit, e.slow(), e.id, len(e.held), window, ok, want)
		if ok {
			release(true, 0)
		}
		return false
	case window < 1 || window > max(perEndpoint, perMerchant):
		t.Errorf("endpoint %s: window %d, want 1 to %d", e.id, window, max(perEndpoint, perMerchant))
		return false
	case ok:
		e.held = append(e.held, release)
		m.held++
		if m.held > perMerchant {
			t.Errorf("merchant %s holds %d slots, above its %d", m.id, m.held, perMerchant)
			return false
		}
	case retry < busyRetry*9/10 || retry > maxBusyRetry*11/10:
		t.Errorf("put back for %s, want 0.9 s to 5.5 min", retry)
		return false
	}
	return true
}

// endpointWindow is how many attempts the endpoint may run at once now.
func (d *Deliverer) endpointWindow(id string) int {
	d.mu.Lock()
	e := d.slots[id]
	d.mu.Unlock()
	if e == nil {
		return 1 // a probe until the first answer
	}
	return e.current()
}

// TestPushBacksKeepPace: deliveries put back at once for a slow endpoint
// return spread out at the pace at which its slots free (slots per attempt
// duration, plus jitter), from about busyRetry on and never more than
// maxBusyRetry (plus jitter) ahead; once that time has passed, the next
// returns after about busyRetry again.
func TestPushBacksKeepPace(t *testing.T) {
	var p pushBacks
	now := time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)
	const took, slots, n = 2 * time.Second, 20, 5000 // one slot frees every 100 ms
	perTen := map[int64]int{}                        // returns in each 10 s
	longest := time.Duration(0)
	for range n {
		d := p.delay(now, took, slots)
		if d < busyRetry*9/10 || d > maxBusyRetry*11/10 {
			t.Fatalf("put back for %s, want 0.9 s to 5.5 min", d)
		}
		perTen[int64(d/(10*time.Second))]++
		longest = max(longest, d)
	}
	// Within the horizon, about 100 in 10 s (the jitter mixes them at
	// random: 150 is five standard deviations); the rest wait the longest.
	for s, c := range perTen {
		if s < int64(maxBusyRetry*9/10/(10*time.Second)) && c > 150 {
			t.Errorf("%d deliveries return in seconds %d0 to %d9, want about 100 (one per freed slot)", c, s, s)
		}
	}
	if longest < maxBusyRetry*9/10 {
		t.Errorf("the longest wait of %d put back at once is %s, want about %s", n, longest, maxBusyRetry)
	}
	later := now.Add(maxBusyRetry + time.Minute)
	if d := p.delay(later, took, slots); d > (busyRetry+took/slots)*11/10 {
		t.Errorf("after the backlog's time: put back for %s, want about %s", d, busyRetry+took/slots)
	}
}

// TestJitter: a schedule's delay gets 0 to 10 % more, never less; a
// push-back's delay moves up to 10 % either way; both vary.
func TestJitter(t *testing.T) {
	const d = 5 * time.Minute
	sched, busy := map[time.Duration]bool{}, map[time.Duration]bool{}
	for range 1000 {
		s, b := scheduleJitter(d), busyJitter(d)
		if s < d || s > d+d/10 {
			t.Fatalf("scheduleJitter(%s) = %s, want %s to %s", d, s, d, d+d/10)
		}
		if b < d-d/10 || b > d+d/10 {
			t.Fatalf("busyJitter(%s) = %s, want %s to %s", d, b, d-d/10, d+d/10)
		}
		sched[s], busy[b] = true, true
	}
	if len(sched) < 900 || len(busy) < 900 {
		t.Errorf("distinct delays in 1000: schedule %d, push-back %d; want them spread", len(sched), len(busy))
	}
	if got := scheduleJitter(0); got != 0 {
		t.Errorf("scheduleJitter(0) = %s, want 0", got)
	}
}

// TestEndpointWindowAdapts: an endpoint's window is one attempt until its
// first answer, PerEndpointDefault after a fast one (half that after a slow
// one), then grows with fast answers up to its merchant's slots,
// is halved by a failure (once for failures that come together), drops to
// one for an endpoint answering in slowSend or more, and grows back when
// the endpoint answers fast again.
func TestEndpointWindowAdapts(t *testing.T) {
	const most = 25
	e := newEndpointSlots(PerEndpointDefault, most)
	now := time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)
	attempt := func(ok bool, took time.Duration) {
		t.Helper()
		e.mu.Lock()
		if !e.take(e.slots()) {
			e.mu.Unlock()
			t.Fatalf("no free slot with none running (window %d)", e.current())
		}
		e.mu.Unlock()
		now = now.Add(took)
		e.release(now, ok, took, most)
	}
	if got := e.current(); got != 1 {
		t.Fatalf("window before the first answer %d, want 1 (a probe)", got)
	}
	attempt(true, time.Millisecond)
	if got := e.current(); got != PerEndpointDefault {
		t.Fatalf("window after a fast first answer %d, want %d", got, PerEndpointDefault)
	}
	for range 100 {
		attempt(true, time.Millisecond)
	}
	if got := e.current(); got != most {
		t.Fatalf("after 100 fast answers: window %d, want the merchant's %d", got, most)
	}
	// Failures that come together cut once.
	for range 5 {
		e.mu.Lock()
		e.take(e.slots())
		e.mu.Unlock()
	}
	for range 5 {
		e.release(now, false, time.Millisecond, most)
	}
	if got := e.current(); got != most/2 {
		t.Fatalf("after 5 failures at once: window %d, want %d", got, most/2)
	}
	// A steady, somewhat slower answer keeps the window.
	attempt(true, 80*time.Millisecond)
	if got := e.current(); got != most/2 {
		t.Fatalf("after a 2xx in 80 ms: window %d, want it kept at %d", got, most/2)
	}
	// An endpoint that answers in two seconds drops to half the first window;
	// one that fails, to one.
	for range 10 {
		attempt(true, 2*time.Second)
	}
	if got := e.current(); got != PerEndpointDefault/2 {
		t.Fatalf("after slow answers: window %d, want %d", got, PerEndpointDefault/2)
	}
	for range 10 {
		attempt(false, 2*time.Second)
	}
	if got := e.current(); got != 1 {
		t.Fatalf("after slow failures: window %d, want 1", got)
	}
	// Fast again: it grows back, by about one per window's worth of answers.
	for range 3 {
		attempt(true, time.Millisecond)
	}
	if got := e.current(); got < 2 {
		t.Fatalf("after 3 fast answers: window %d, want it growing", got)
	}
	for range 400 {
		attempt(true, time.Millisecond)
	}
	if got := e.current(); got != most {
		t.Fatalf("after 400 fast answers: window %d, want %d", got, most)
	}
	// An endpoint whose first answer is a 2xx in two seconds gets half the
	// first window.
	slow := newEndpointSlots(PerEndpointDefault, most)
	slow.mu.Lock()
	slow.take(slow.slots())
	slow.mu.Unlock()
	slow.release(now, true, 2*time.Second, most)
	if got := slow.current(); got != PerEndpointDefault/2 {
		t.Fatalf("after a first answer in 2 s: window %d, want %d", got, PerEndpointDefault/2)
	}
}

// TestGateHandsSlotsInOrder: a freed slot goes to the first waiter; a waiter
// that gives up leaves the queue and the next one is served.
func TestGateHandsSlotsInOrder(t *testing.T) {
	var g gate
	g.mu.Lock()
	g.take(1)
	g.mu.Unlock()
	admit := func(time.Duration, bool, int) bool { return true }
	ctx, cancel := context.WithCancel(context.Background())
	gaveUp := make(chan bool)
	go func() { gaveUp <- g.wait(ctx, 1, 1, time.Minute, admit) }()
	waitQueued(t, &g, 1)
	served := make(chan bool)
	go func() { served <- g.wait(context.Background(), 1, 1, time.Minute, admit) }()
	waitQueued(t, &g, 2)
	cancel()
	if <-gaveUp {
		t.Fatal("the first waiter gave up but holds a slot")
	}
	g.mu.Lock()
	g.observe(time.Millisecond)
	g.give(1)
	running := g.running
	g.mu.Unlock()
	if !<-served {
		t.Fatal("the second waiter was not handed the freed slot")
	}
	if running != 1 {
		t.Fatalf("running %d after the hand-over, want 1", running)
	}
	if g.wait(context.Background(), 1, 1, 0, admit) {
		t.Fatal("took a slot beyond the limit")
	}
}

func waitQueued(t *testing.T, g *gate, n int) {
	t.Helper()
	for end := time.Now().Add(5 * time.Second); time.Now().Before(end); time.Sleep(time.Millisecond) {
		g.mu.Lock()
		q := len(g.queue)
		g.mu.Unlock()
		if q == n {
			return
		}
	}
	t.Fatalf("waiters never reached %d", n)
}
