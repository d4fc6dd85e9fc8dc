package e2e

import (
	"flag"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"
)

// The tests of this package run side by side, a few at once (slots). Go's
// own -parallel limit would start them in no particular order, and the
// longest, started last, would decide when the package ends. So the
// package takes the limit over: TestMain gives Go a limit it never
// reaches, and parallel(t) waits for one of the package's slots, which go
// to the longest waiting test first (longest processing time first: the
// last tests to start are short ones, and the slots empty together). The
// time go test reports for a test includes its wait for a slot, which the
// test logs when it is over a second.

// expected is how long the longer tests take at the smoke scale, measured
// inside make test on two cores; the others count as defaultExpected. Only
// the order the tests start in depends on these figures: a wrong one costs
// time, never a result.
var expected = map[string]time.Duration{
	"TestChaosRetentionSoak":                 90 * time.Second,
	"TestWebhooksEndToEnd":                   80 * time.Second,
	"TestAuthFlood":                          76 * time.Second,
	"TestRoutingSplit":                       69 * time.Second,
	"TestWebhooksWorkerKilled":               64 * time.Second,
	"TestFreshCheckoutInPrivateDirectory":    63 * time.Second,
	"TestBrowserJourneys":                    61 * time.Second,
	"TestChaosConnectorFailover":             50 * time.Second,
	"TestChaosRollingUpgrade":                42 * time.Second,
	"TestCLIEndToEnd":                        42 * time.Second,
	"TestGracefulShutdownWorker":             41 * time.Second,
	"TestChaosRedisSentinel":                 40 * time.Second,
	"TestChargesEndToEnd":                    40 * time.Second,
	"TestChaosRedisDown":                     39 * time.Second,
	"TestBrowserLedger":                      36 * time.Second,
	"TestLookupsAfterTheIdempotencyWindow":   36 * time.Second,
	"TestProviderDisputeNotifications":       35 * time.Second,
	"TestAuditVerify":                        30 * time.Second,
	"TestChaosProviderFairness":              30 * time.Second,
	"TestChaosNoisyNeighbour":                28 * time.Second,
	"TestEndToEnd":                           25 * time.Second,
	"TestObservabilityEndToEnd":              25 * time.Second,
	"TestChaosPostgresRestart":               23 * time.Second,
	"TestBrowserDisputes":                    23 * time.Second,
	"TestLedgerEndToEnd":                     23 * time.Second,
	"TestChaosWorkerKilled":                  23 * time.Second,
	"TestConnectorsAndRouting":               22 * time.Second,
	"TestChaosPostgresFailover":              21 * time.Second,
	"TestEventStreamTenancy":                 20 * time.Second,
	"TestWebhookFiltersAndOperationalEvents": 20 * time.Second,
	"TestDoctorReceivers":                    18 * time.Second,
	"TestWebhookReceiverAuth":                16 * time.Second,
	"TestBrowserWebhookFilters":              15 * time.Second,
}

const defaultExpected = 12 * time.Second

// settleTime is how long the first slot waits after the first test asks
// for one: the parallel tests are released together, and in that time all
// of them are waiting, so the longest are among them.
const settleTime = 300 * time.Millisecond

// slots is the package's gate, sized by TestMain.
var slots *gate

// parallel marks t as a parallel test and waits for one of the package's
// slots, held until t and its cleanups (the stack's shutdown) are done.
func parallel(t *testing.T) {
	t.Helper()
	t.Parallel()
	if slots == nil { // a test binary run without TestMain's setup
		return
	}
	waited := slots.acquire(t.Name(), expectedFor(t.Name()))
	t.Cleanup(slots.release)
	if waited > time.Second {
		t.Logf("waited %s for a slot (%d at once)", waited.Round(time.Millisecond), slots.size)
	}
}

func expectedFor(name string) time.Duration {
	if d, ok := expected[name]; ok {
		return d
	}
	return defaultExpected
}

// takeParallel sets the package's slots to -test.parallel when the command
// line gave it, else to n, and raises Go's own limit above the number of
// tests, so that the slots alone decide which test runs.
func takeParallel(n int) {
	flag.Visit(func(f *flag.Flag) {
		if f.Name == "test.parallel" {
			if v, err := strconv.Atoi(f.Value.String()); err == nil && v > 0 {
				n = v
			}
		}
	})
	slots = newGate(n)
	if err := flag.Set("test.parallel", "1000"); err != nil {
		panic(err)
	}
}

// gate lets size holders in at once, the heaviest waiter first.
type gate struct {
	size    int
	mu      sync.Mutex
	free    int
	opensAt time.Time // settleTime after the first request; zero before it
	waiting []*waiter
}

type waiter struct {
	name   string
	weight time.Duration
	ready  chan struct{}
}

func newGate(size int) *gate { return &gate{size: size, free: size} }

// acquire waits for a slot and says how long that took.
func (g *gate) acquire(name string, weight time.Duration) time.Duration {
	start := time.Now()
	w := &waiter{name: name, weight: weight, ready: make(chan struct{})}
	g.mu.Lock()
	if g.opensAt.IsZero() {
		g.opensAt = start.Add(settleTime)
		time.AfterFunc(settleTime, g.dispatch)
	}
	g.waiting = append(g.waiting, w)
	g.mu.Unlock()
	g.dispatch()
	<-w.ready
	return time.Since(start)
}

func (g *gate) release() {
	g.mu.Lock()
	g.free++
	g.mu.Unlock()
	g.dispatch()
}

// dispatch hands the free slots to the heaviest waiters (by name among
// equals, so the order is the same every run).
func (g *gate) dispatch() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if time.Now().Before(g.opensAt) {
		return
	}
	for g.free > 0 && len(g.waiting) > 0 {
		i := 0
		for j, w := range g.waiting {
			if w.weight > g.waiting[i].weight || (w.weight == g.waiting[i].weight && w.name < g.waiting[i].name) {
				i = j
			}
		}
		w := g.waiting[i]
		g.waiting = slices.Delete(g.waiting, i, i+1)
		g.free--
		close(w.ready)
	}
}

func TestGateLongestFirst(t *testing.T) {
	g := newGate(1)
	hold := make(chan struct{})
	held := make(chan struct{})
	go func() { g.acquire("holder", 0); close(held); <-hold; g.release() }()
	<-held
	var mu sync.Mutex
	var order []string
	var wg sync.WaitGroup
	for i, w := range []time.Duration{5, 30, 10, 30, 1} {
		wg.Add(1)
		name := "t" + strconv.Itoa(i)
		go func() {
			defer wg.Done()
			g.acquire(name, w)
			mu.Lock()
			order = append(order, name)
			mu.Unlock()
			g.release()
		}()
	}
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(10 * time.Millisecond) { // all five are waiting
		g.mu.Lock()
		n := len(g.waiting)
		g.mu.Unlock()
		if n == 5 || time.Now().After(deadline) {
			break
		}
	}
	close(hold)
	wg.Wait()
	if want := []string{"t1", "t3", "t2", "t0", "t4"}; !slices.Equal(order, want) {
		t.Errorf("the slots went to %v, want the longest first: %v", order, want)
	}
}
