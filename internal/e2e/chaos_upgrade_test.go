package e2e

// F13 of docs/reliability.md: a rolling upgrade under load, from the previous
// release (testdata/previous-release, built by previous_test.go) to the
// checkout under test, and the previous release's binaries on this release's
// schema.

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"os"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/jackc/pgx/v5"

	"github.com/gatehouse-pay/gatehouse/internal/testenv"
	"github.com/gatehouse-pay/gatehouse/internal/testenv/harness"
)

// upgradeStackEnv: the fault tests' settings, with a short drain so that a
// replacement takes seconds (SHUTDOWN_DELAY covers the load balancer's lag).
var upgradeStackEnv = append(slices.Clone(chaosStackEnv),
	"GORACE="+strings.TrimSpace(os.Getenv("GORACE")+" atexit_sleep_ms=0"),
	"SHUTDOWN_DELAY=1s", "SHUTDOWN_TIMEOUT=10s")

// upgradeEvents are the event types the upgrade's endpoints subscribe to:
// every one its charges and refunds produce.
var upgradeEvents = []string{"charge.created", "charge.captured", "charge.refunded", "refund.created", "refund.succeeded"}

// upgradeLBLag is how long the test's load balancer takes to stop sending
// new requests to a replica it took out of service; SHUTDOWN_DELAY (1 s)
// covers it.
const upgradeLBLag = 200 * time.Millisecond

// upgradeLB routes the load as a load balancer with health checks and
// connection draining does during a rolling deployment: round robin over
// the replicas in service. A replica leaves service before it gets SIGTERM
// and comes back once its successor answers /readyz; while it is being
// replaced, a request that cannot reach it (refused, reset) is sent again
// with the same Idempotency-Key to another replica, as such a load balancer
// retries a request that never got an answer. Any other transport error is
// an error of the upgrade.
type upgradeLB struct {
	st        *stack
	mu        sync.Mutex
	in        [2]bool     // in service
	replacing [2]bool     // taken out by the test, until its successor is in
	version   [2]*release // what runs on each replica
	next      int
	phase     string
}

func (lb *upgradeLB) pick() (int, *release, string) {
	lb.mu.Lock()
	defer lb.mu.Unlock()
	for range 2 {
		i := lb.next % 2
		lb.next++
		if lb.in[i] {
			return i, lb.version[i], lb.phase
		}
	}
	panic("upgrade: no replica in service") // the test takes out one at a time
}

func (lb *upgradeLB) setPhase(p string) {
	lb.mu.Lock()
	defer lb.mu.Unlock()
	lb.phase = p
}

func (lb *upgradeLB) beingReplaced(i int) bool {
	lb.mu.Lock()
	defer lb.mu.Unlock()
	return lb.replacing[i]
}

func (lb *upgradeLB) takeOut(i int) {
	lb.mu.Lock()
	defer lb.mu.Unlock()
	lb.in[i], lb.replacing[i] = false, true
}

func (lb *upgradeLB) putBack(i int, rel *release) {
	lb.mu.Lock()
	defer lb.mu.Unlock()
	lb.in[i], lb.replacing[i], lb.version[i] = true, false, rel
}

// upCall is one request of the upgrade's load and what came of it.
type upCall struct {
	phase    string
	op       string // create, capture, refund, get, list ...
	key      string // Idempotency-Key or the charge it is about
	replica  int
	version  string
	start    time.Time
	end      time.Time
	status   int
	code     string
	body     string // the first bytes of the answer, for the failure message
	reqID    string // X-Request-Id of the answer, which the replica's log lines carry
	err      error
	rerouted int  // sends moved off a replica being replaced
	bad      bool // not the answer the flow expected
}

func (c upCall) String() string {
	what := fmt.Sprintf("%d %s %s", c.status, c.code, c.body)
	if c.err != nil {
		what = "transport error: " + c.err.Error()
	}
	return fmt.Sprintf("[phase %s] %s %s on api-%d (%s release), sent %s, took %s, rerouted %d: %s",
		c.phase, c.op, c.key, c.replica+1, c.version, c.start.Format("15:04:05.000"), c.end.Sub(c.start).Round(time.Millisecond), c.rerouted, what)
}

// upgradeTB prefixes the spec check's failures with the replica and release
// that answered.
type upgradeTB struct {
	testing.TB
	prefix string
}

func (u upgradeTB) Errorf(format string, args ...any) {
	u.TB.Helper()
	u.TB.Errorf(u.prefix+format, args...)
}

// upgradeLoad is the load of the upgrade: flows of charges on fresh keys
// from senders goroutines, and readers listing what the merchants have.
type upgradeLoad struct {
	t     *testing.T
	lb    *upgradeLB
	mu    sync.Mutex
	calls []upCall
	flows []*upFlow
	stop  chan struct{}
	once  sync.Once
	wg    sync.WaitGroup
	n     atomic.Int64
}

// upFlow is one key's charge and what the flow did with it.
type upFlow struct {
	m       *whMerchant
	key     string
	kind    string // captured, capture (authorized, then captured by request), refund (captured, then 400 refunded)
	charge  string
	refund  string
	settled bool // the flow ran to its end
}

func (l *upgradeLoad) record(c upCall) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.calls = append(l.calls, c)
}

func (l *upgradeLoad) stopped() bool {
	select {
	case <-l.stop:
		return true
	default:
		return false
	}
}

// send sends one request of the load through the load balancer and checks
// the answer against the spec of the release that gave it; it records the
// call, marked bad unless it answered want.
func (l *upgradeLoad) send(m *whMerchant, op, key, method, path, body string, want int, headers ...string) (upCall, exchange) {
	c := upCall{op: op, key: key, start: time.Now()}
	for {
		i, rel, phase := l.lb.pick()
		c.replica, c.version, c.phase = i, rel.name, phase
		e, err := sendWith(m.c, method, l.lb.st.replicas[i]+path, m.key, body, headers...)
		c.end = time.Now()
		if err != nil {
			if l.lb.beingReplaced(i) && c.rerouted < 10 {
				c.rerouted++
				continue
			}
			c.err, c.bad = err, true
			l.record(c)
			return c, e
		}
		rel.spec.Check(upgradeTB{l.t, fmt.Sprintf("[phase %s, api-%d of the %s release] ", phase, i+1, rel.name)}, e.req, e.resp, e.body)
		c.status, c.code = e.status(), e.code()
		// The first send of a rerouted request may still hold its key.
		if c.rerouted > 0 && c.status == http.StatusConflict && c.code == "idempotency_key_in_use" && time.Since(c.start) < waitFloor {
			time.Sleep(50 * time.Millisecond)
			continue
		}
		c.bad = c.status != want
		if c.bad {
			c.body, c.reqID = string(e.body[:min(len(e.body), 300)]), e.header("X-Request-Id")
		}
		l.record(c)
		return c, e
	}
}

// waitStatus polls the charge through the load balancer until its status is
// want (and no action is pending on it, as far as the answer shows).
func (l *upgradeLoad) waitStatus(f *upFlow, want string, within time.Duration) bool {
	within = patience(within)
	deadline := time.Now().Add(within)
	for {
		c, e := l.send(f.m, "get", f.charge, http.MethodGet, "/v1/charges/"+f.charge, "", http.StatusOK)
		if c.bad {
			return false
		}
		var ch chargeJSON
		if json.Unmarshal(e.body, &ch) == nil && ch.Status == want {
			return true
		}
		if time.Now().After(deadline) {
			c.bad, c.body = true, fmt.Sprintf("still %s after %s, want %s", ch.Status, within, want)
			l.record(c)
			return false
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// run is one flow: a charge on a fresh key and, for some, a capture or a
// refund once the worker has moved it.
func (l *upgradeLoad) run(f *upFlow) {
	capture := f.kind != "capture"
	c, e := l.send(f.m, "create", f.key, http.MethodPost, "/v1/charges", cardBody("4242424242424242", capture, 1000, f.key),
		http.StatusCreated, "Idempotency-Key", f.key)
	if c.bad {
		return
	}
	var ch chargeJSON
	if json.Unmarshal(e.body, &ch) != nil || ch.ID == "" {
		return
	}
	f.charge = ch.ID
	switch f.kind {
	case "capture":
		if !l.waitStatus(f, "authorized", 30*time.Second) {
			return
		}
		if c, _ := l.send(f.m, "capture", f.charge, http.MethodPost, "/v1/charges/"+f.charge+"/capture", "{}", http.StatusOK,
			"Idempotency-Key", f.key+"-capture"); c.bad {
			return
		}
	case "refund":
		if !l.waitStatus(f, "captured", 30*time.Second) {
			return
		}
		key := f.key + "-refund"
		c, e := l.send(f.m, "refund", f.charge, http.MethodPost, "/v1/refunds", fmt.Sprintf(`{"charge":%q,"amount":400}`, f.charge),
			http.StatusCreated, "Idempotency-Key", key)
		if c.bad {
			return
		}
		var r refundJSON
		if json.Unmarshal(e.body, &r) != nil || r.ID == "" {
			return
		}
		f.refund = r.ID
	}
	f.settled = true
}

// start runs senders flows at most one per pace each, spread over the
// merchants, and one reader per merchant, until end.
func (l *upgradeLoad) start(ms []*whMerchant, senders int, pace time.Duration) {
	for range senders {
		l.wg.Go(func() {
			tick := time.NewTicker(pace)
			defer tick.Stop()
			for !l.stopped() {
				n := l.n.Add(1)
				m := ms[int(n)%len(ms)]
				f := &upFlow{m: m, key: fmt.Sprintf("f13-%s-%05d", m.id[len(m.id)-6:], n), kind: "captured"}
				switch {
				case n%5 == 0:
					f.kind = "capture"
				case n%7 == 0:
					f.kind = "refund"
				}
				l.mu.Lock()
				l.flows = append(l.flows, f)
				l.mu.Unlock()
				l.run(f)
				select {
				case <-l.stop:
				case <-tick.C:
				}
			}
		})
	}
	for _, m := range ms {
		l.wg.Go(func() { l.read(m) })
	}
}

// read lists the merchant's charges, events and deliveries and gets the
// newest event, every 250 ms: the previous release's list queries run on
// the new schema while it serves.
func (l *upgradeLoad) read(m *whMerchant) {
	for !l.stopped() {
		_, e := l.send(m, "list events", "", http.MethodGet, "/v1/events?limit=10", "", http.StatusOK)
		var list struct {
			Data []struct {
				ID string `json:"id"`
			} `json:"data"`
		}
		if e.resp != nil && json.Unmarshal(e.body, &list) == nil && len(list.Data) > 0 {
			l.send(m, "get event", list.Data[0].ID, http.MethodGet, "/v1/events/"+list.Data[0].ID, "", http.StatusOK)
		}
		l.send(m, "list charges", "", http.MethodGet, "/v1/charges?limit=10", "", http.StatusOK)
		l.send(m, "list refunds", "", http.MethodGet, "/v1/refunds?limit=10", "", http.StatusOK)
		select {
		case <-l.stop:
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// end stops the load and returns what it did; it may be called again (the
// test's cleanup does, so that a fatal failure stops the load before the
// processes).
func (l *upgradeLoad) end() ([]upCall, []*upFlow) {
	l.once.Do(func() { close(l.stop) })
	l.wg.Wait()
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.calls), slices.Clone(l.flows)
}

// upPhase is one step of the upgrade, for the figures.
type upPhase struct {
	name       string
	start, end time.Time
}

// TestChaosRollingUpgrade is F13: a rolling upgrade under load from the
// previous release to this one, as docs/deploy.md ("Upgrading") runs it.
// The database is migrated by the previous release's `api migrate`; two API
// replicas and two workers of that release serve two merchants (three
// webhook endpoints) under steady charges, captures and refunds. Then, with
// the load going on: this release's `api migrate`; each worker in turn
// stopped with SIGTERM and replaced by this release's; each API replica in
// turn taken out of the load balancer, stopped with SIGTERM and replaced;
// then load on the new release alone. No request fails (no 5xx, no
// transport error beyond a replica the test itself was replacing, whose
// request goes to the other replica with the same Idempotency-Key); no event
// is lost (every event reaches every subscribed endpoint, a repeat carrying
// the same event id); one charge and one booked provider authorization per
// key; every charge and refund reaches its final state; no process logs an
// error.
func TestChaosRollingUpgrade(t *testing.T) {
	chaosParallel(t)
	var (
		senders = chaosScale(3, 6)
		pace    = chaosScale(150*time.Millisecond, 40*time.Millisecond)
		settle  = chaosScale(2*time.Second, 10*time.Second) // load in each phase before the next step
		// At full scale (make chaos): enough for the backlog of deliveries
		// the load leaves and an outbox row the sweeper must find (every
		// 10 s). At smoke scale the drain is waited for, not timed.
		drainMax = 120 * time.Second
	)
	redisPath := testenv.RedisServerPath(t)
	prev := previousRelease(t)
	next := release{name: "new", bins: buildBinaries(t), spec: testenv.LoadSpec(t)}
	t.Logf("previous release %s (built or taken from bin/previous in %s)", prev.commit[:12], previousTook.Round(time.Millisecond))

	db := testenv.NewEmptyDB(t)
	migrateWith(t, prev.bins.api, db)
	fromSchema := schemaVersion(t, db)
	// Directly on PostgreSQL: the previous release cannot connect through
	// PgBouncer in transaction mode (docs/scaling.md, "PgBouncer"); the
	// switch to it comes after the upgrade.
	st := startStackWith(t, prev.bins, db, redisPath, prev.spec,
		stackOptions{env: upgradeStackEnv, workerEnv: chaosWorkerEnv, workers: 2, direct: true})
	bag := &secretBag{}
	ms := []*whMerchant{newWebhookMerchant(t, st, bag, "127.0.0.130", "f13-a"), newWebhookMerchant(t, st, bag, "127.0.0.131", "f13-b")}
	type sub struct {
		m        *whMerchant
		endpoint string
		r        *receiver
	}
	var subs []sub
	for i, name := range []string{"f13-a1", "f13-a2", "f13-b1"} {
		m := ms[min(i/2, 1)]
		r := newReceiver(t, name, always(http.StatusOK))
		ep, _ := m.endpoint(t, r.url(), upgradeEvents...)
		subs = append(subs, sub{m, ep.ID, r})
	}
	rc := newClient(t, "127.0.0.132")

	lb := &upgradeLB{st: st, in: [2]bool{true, true}, version: [2]*release{&prev, &prev}}
	load := &upgradeLoad{t: t, lb: lb, stop: make(chan struct{})}
	t.Cleanup(func() { load.end() })
	var phases []upPhase
	phase := func(name string) {
		now := time.Now()
		if len(phases) > 0 {
			phases[len(phases)-1].end = now
		}
		phases = append(phases, upPhase{name: name, start: now})
		lb.setPhase(name)
		t.Logf("F13 phase %q at %s", name, now.Format("15:04:05.000"))
	}
	began := time.Now()
	phase("previous")
	load.start(ms, senders, pace)
	time.Sleep(settle) // the load's time in the phase, not a synchronisation

	phase("migrating")
	migrated := migrateWith(t, next.bins.api, db)
	toSchema := schemaVersion(t, db)
	phase("migrated")
	time.Sleep(settle)

	// The workers first: a task type this release adds is taken only by its
	// workers (docs/deploy.md, "Upgrading").
	phase("workers")
	st.bins, st.spec = next.bins, next.spec
	var workerTook []string
	for i, w := range st.workers {
		p := w.current()
		sent := time.Now()
		if err := p.Cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatalf("%s: SIGTERM: %v", w.name, err)
		}
		exited := sdWaitExit(t, p, sent, exitTimeout)
		upgradeSlowExit(t, p, exited.Sub(sent))
		fmt.Fprintf(w.out, "\n==== test: %s of the previous release stopped; this release's starts ====\n", w.name)
		ready := st.restartWorker(t, i, rc)
		workerTook = append(workerTook, fmt.Sprintf("%s: exit %s, new ready %s", w.name,
			exited.Sub(sent).Round(time.Millisecond), ready.Round(time.Millisecond)))
		time.Sleep(settle / 2)
	}

	phase("apis")
	var apiTook []string
	for i := range st.apis {
		lb.takeOut(i)
		time.Sleep(upgradeLBLag)
		// A load balancer closes its idle connections to a replica it took
		// out. A spare one left open would hold the previous release's drain
		// until HTTP_READ_TIMEOUT; this release closes such connections
		// itself (TestGracefulShutdownAPI).
		for _, m := range ms {
			m.c.CloseIdleConnections()
		}
		p := st.apis[i]
		sent := time.Now()
		if err := p.Cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatalf("%s: SIGTERM: %v", p.Name, err)
		}
		exited := sdWaitExit(t, p, sent, exitTimeout)
		upgradeSlowExit(t, p, exited.Sub(sent))
		ready := sdReplaceReplica(t, st, i, nil, rc)
		lb.putBack(i, &next)
		apiTook = append(apiTook, fmt.Sprintf("api-%d: out of service %s, exit %s after SIGTERM, new ready %s", i+1,
			time.Since(sent).Round(time.Millisecond)+upgradeLBLag, exited.Sub(sent).Round(time.Millisecond), ready.Round(time.Millisecond)))
		time.Sleep(settle / 2)
	}

	phase("new")
	time.Sleep(settle)
	calls, flows := load.end()
	loadEnded := time.Now()
	phases[len(phases)-1].end = loadEnded

	// Every request answered as its flow expected.
	bad := 0
	for _, c := range calls {
		if c.bad {
			bad++
			if bad <= 40 {
				t.Errorf("F13 request failed: %s%s", c, st.logLinesOf(c.reqID))
			}
		}
	}
	if bad > 40 {
		t.Errorf("F13: %d more requests failed", bad-40)
	}

	// Every charge and refund in its final state, every event at every
	// endpoint, the outbox empty.
	drained := upgradeDrain(t, st, ms, loadEnded, drainMax, func() (missing []string) {
		for _, s := range subs {
			got := map[string]bool{}
			for _, h := range s.r.all() {
				got[h.eventID()] = true
			}
			for _, ev := range merchantEventsOf(t, st.db, s.m.id) {
				if slices.Contains(upgradeEvents, ev.typ) && !got[ev.id] {
					missing = append(missing, s.endpoint+" "+ev.id)
				}
			}
		}
		return missing
	})

	// Events: lost, repeated with the same id.
	lost, pairs, deliveries, dupPairs := 0, 0, 0, 0
	events := 0
	for _, s := range subs {
		evs := merchantEventsOf(t, st.db, s.m.id)
		per := map[string]int{}
		deliveryEvent := map[string]string{}
		for _, h := range s.r.all() {
			if h.eventID() == "" || h.eventID() != checkBody(t, h)["id"] {
				t.Errorf("%s: X-Service-Event-Id %q is not the body's id", s.r.name, h.eventID())
			}
			if prev, ok := deliveryEvent[h.deliveryID()]; ok && prev != h.eventID() {
				t.Errorf("%s: delivery %s carried events %s and %s", s.r.name, h.deliveryID(), prev, h.eventID())
			}
			deliveryEvent[h.deliveryID()] = h.eventID()
			per[h.eventID()]++
			deliveries++
		}
		for _, ev := range evs {
			if !slices.Contains(upgradeEvents, ev.typ) {
				continue
			}
			events++
			pairs++
			switch n := per[ev.id]; {
			case n == 0:
				lost++
				if lost <= 20 {
					t.Errorf("F13 event lost: %s %s of charge %s (created %s) never reached endpoint %s (%s); its deliveries: %s%s",
						ev.typ, ev.id, ev.charge, ev.created.Format("15:04:05.000"), s.endpoint, s.r.name, deliveryRows(t, st.db, ev.id, s.endpoint),
						st.logLinesOf(append(deliveryIDs(t, st.db, ev.id, s.endpoint), ev.id)...))
				}
			case n > 1:
				dupPairs++
			}
		}
	}

	// Charges: one per key, one booked authorization each, final states.
	double, unbooked, repeatedCalls := 0, 0, 0
	kinds := map[string]int{}
	for _, m := range ms {
		rows := byTag(chargeRows(t, st.db, m.id))
		for _, f := range flows {
			if f.m != m {
				continue
			}
			kinds[f.kind]++
			cs := rows[f.key]
			if f.charge == "" {
				if len(cs) != 0 {
					t.Errorf("F13 key %s: not answered 201, yet %d charges in Postgres", f.key, len(cs))
				}
				continue
			}
			if len(cs) != 1 {
				double += max(len(cs)-1, 0)
				t.Errorf("F13 key %s (%s): %d charges in Postgres, want 1", f.key, f.kind, len(cs))
				continue
			}
			c := cs[0]
			if c.ID != f.charge {
				t.Errorf("F13 key %s: charge %s in Postgres, %s answered", f.key, c.ID, f.charge)
			}
			if !c.Booked {
				unbooked++
				t.Errorf("F13 key %s: charge %s %s without a booked sandbox authorization", f.key, c.ID, c.Status)
			}
			if c.Calls > 1 {
				repeatedCalls++ // the same provider idempotency key sent again: no second charge, counted
			}
			if f.settled && c.Status != "captured" {
				t.Errorf("F13 key %s (%s): charge %s ends %s, want captured", f.key, f.kind, c.ID, c.Status)
			}
		}
	}
	orphans := orphanAuthorizations(t, st.db)
	if orphans != 0 {
		t.Errorf("F13: sandbox authorizations without a charge: %d, want 0", orphans)
	}
	refunds := 0
	for _, f := range flows {
		if f.refund == "" {
			continue
		}
		refunds++
		if got := queryInt(t, st.db, `SELECT count(*) FROM refunds WHERE id = $1 AND status = 'succeeded'`, f.refund); got != 1 {
			t.Errorf("F13 refund %s of charge %s (key %s): not succeeded", f.refund, f.charge, f.key)
		}
		if got := queryInt(t, st.db, `SELECT amount_refunded FROM charges WHERE id = $1`, f.charge); got != 400 {
			t.Errorf("F13 charge %s (key %s): amount_refunded %d, want 400", f.charge, f.key, got)
		}
	}

	// Every phase was under load, and both releases answered.
	byPhase := map[string][]upCall{}
	versions := map[string]int{}
	rerouted := 0
	for _, c := range calls {
		byPhase[c.phase] = append(byPhase[c.phase], c)
		versions[c.version]++
		rerouted += c.rerouted
	}
	var perPhase []string
	for _, p := range phases {
		cs := byPhase[p.name]
		created := 0
		var lat []time.Duration
		for _, c := range cs {
			if c.op == "create" && !c.bad {
				created++
			}
			lat = append(lat, c.end.Sub(c.start))
		}
		// The migration's phase lasts as long as the migration, which may
		// be less than a request on a loaded machine.
		if created == 0 && p.name != "migrating" {
			t.Errorf("F13 phase %q (%s): no charge created; the phase was not under load", p.name, p.end.Sub(p.start).Round(time.Millisecond))
		}
		perPhase = append(perPhase, fmt.Sprintf("%s %s: %d requests, %d charges, p99 %s, max %s",
			p.name, p.end.Sub(p.start).Round(100*time.Millisecond), len(cs), created,
			percentile(lat, 0.99).Round(time.Millisecond), percentile(lat, 1).Round(time.Millisecond)))
	}
	if versions["previous"] == 0 || versions["new"] == 0 {
		t.Errorf("F13: requests answered by release: %v; want both", versions)
	}

	// No process logged an error; the previous release's processes on the
	// new schema are the ones this is about.
	logErrors := st.logProblems(t)

	t.Logf("F13 figures: previous release %s (schema %d) to this one (schema %d), load %s in %d phases [%s]; requests %d (previous release %d, this one %d), failed %d, rerouted off a replica being replaced %d; charges %d (%d captured at once, %d captured by request, %d refunded in part), refunds %d; events %d to 3 endpoints, events lost %d, deliveries %d for %d (event, endpoint) pairs, %d pairs more than once (same event id); double charges %d, charges without a booked authorization %d, charges with the provider call repeated %d, authorizations without a charge %d; migration %s, workers [%s], api replicas [%s]; drained %s after the load; error lines in the logs %d",
		prev.commit[:12], fromSchema, toSchema, loadEnded.Sub(began).Round(100*time.Millisecond), len(phases), strings.Join(perPhase, "; "),
		len(calls), versions["previous"], versions["new"], bad, rerouted,
		len(flows), kinds["captured"], kinds["capture"], kinds["refund"], refunds,
		events, lost, deliveries, pairs, dupPairs, double, unbooked, repeatedCalls, orphans,
		migrated.Round(time.Millisecond), strings.Join(workerTook, "; "), strings.Join(apiTook, "; "), drained.Round(time.Millisecond), logErrors)
}

// upgradeSlowExit logs the last lines of a process that took longer than
// its SHUTDOWN_DELAY and a few seconds to exit after SIGTERM: it waited for
// something (a request, a task, a connection) that the lines may name.
func upgradeSlowExit(t *testing.T, p *harness.Process, took time.Duration) {
	t.Helper()
	if took > 4*time.Second {
		t.Logf("%s took %s to exit after SIGTERM; its last lines:\n%s", p.Name, took.Round(time.Millisecond), p.Out.Tail(6<<10))
	}
}

// upgradeDrain waits until every charge of the merchants is captured with no
// action pending, no refund is pending, the outbox is empty and missing()
// lists nothing; it fails the test with what is left when nothing was worked
// off for stallLimit, and at full scale (make chaos) when the drain took
// longer than fullBound.
func upgradeDrain(t *testing.T, st *stack, ms []*whMerchant, from time.Time, fullBound time.Duration, missing func() []string) time.Duration {
	t.Helper()
	var ids []string
	for _, m := range ms {
		ids = append(ids, m.id)
	}
	p := newProgress()
	for {
		open := queryInt(t, st.db, `SELECT count(*) FROM charges WHERE merchant_id = ANY($1) AND (status <> 'captured' OR pending_action IS NOT NULL)`, ids)
		pending := queryInt(t, st.db, `SELECT count(*) FROM refunds WHERE merchant_id = ANY($1) AND status = 'pending'`, ids)
		outbox := queryInt(t, st.db, `SELECT count(*) FROM outbox`)
		miss := missing()
		if open == 0 && pending == 0 && outbox == 0 && len(miss) == 0 {
			took := time.Since(from)
			if chaosFull() && took > fullBound {
				t.Errorf("F13: drained %s after the load, want within %s", took.Round(time.Millisecond), fullBound)
			}
			return took
		}
		if p.stalled(int(open+pending+outbox) + len(miss)) {
			t.Errorf("F13: not drained %s after the load, nothing worked off for %s: %d charges not captured or with an action pending, %d refunds pending, %d outbox rows, %d (endpoint, event) pairs not received (first: %v)",
				time.Since(from).Round(time.Millisecond), stallLimit, open, pending, outbox, len(miss), miss[:min(len(miss), 5)])
			if open > 0 {
				t.Logf("charges not final: %s", jsonRows(t, st.db, `SELECT jsonb_build_object('id', id, 'status', status, 'pending_action', pending_action, 'updated_at', updated_at)
					FROM charges WHERE merchant_id = ANY($1) AND (status <> 'captured' OR pending_action IS NOT NULL) LIMIT 10`, ids))
			}
			if outbox > 0 {
				t.Logf("outbox: %s", jsonRows(t, st.db, `SELECT to_jsonb(o) FROM outbox o LIMIT 10`))
			}
			return time.Since(from)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// upEvent is one event of a merchant as Postgres holds it.
type upEvent struct {
	id, typ, charge string
	created         time.Time
}

// merchantEventsOf returns every event of the merchant with its type and charge.
func merchantEventsOf(t *testing.T, db testenv.DB, merchant string) []upEvent {
	t.Helper()
	ctx, cancel := dbCtx()
	defer cancel()
	rows, err := db.Pool.Query(ctx, `SELECT id::text, type, coalesce(body->'data'->'charge'->>'id', body->'data'->'refund'->>'charge', ''), created_at FROM events WHERE merchant_id = $1`, merchant)
	if err != nil {
		t.Fatalf("query events: %v", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (upEvent, error) {
		var e upEvent
		err := r.Scan(&e.id, &e.typ, &e.charge, &e.created)
		return e, err
	})
	if err != nil {
		t.Fatalf("read events: %v", err)
	}
	return out
}

// deliveryRows describes the delivery rows of an event to an endpoint, for
// a failure message; the table's shape may change, so it reads whole rows.
func deliveryRows(t *testing.T, db testenv.DB, event, endpoint string) string {
	t.Helper()
	return jsonRows(t, db, `SELECT to_jsonb(d) - 'test_body' FROM webhook_deliveries d WHERE d.event_id::text = $1 AND d.endpoint_id::text = $2`, event, endpoint)
}

// deliveryIDs lists the ids of an event's deliveries to an endpoint.
func deliveryIDs(t *testing.T, db testenv.DB, event, endpoint string) []string {
	t.Helper()
	ctx, cancel := dbCtx()
	defer cancel()
	rows, err := db.Pool.Query(ctx, `SELECT id::text FROM webhook_deliveries WHERE event_id::text = $1 AND endpoint_id::text = $2`, event, endpoint)
	if err != nil {
		return nil
	}
	ids, _ := pgx.CollectRows(rows, pgx.RowTo[string])
	return ids
}

// jsonRows runs a query of one jsonb column and joins its rows; a failing
// query is described, not fatal, since it only explains another failure.
func jsonRows(t *testing.T, db testenv.DB, sql string, args ...any) string {
	t.Helper()
	ctx, cancel := dbCtx()
	defer cancel()
	rows, err := db.Pool.Query(ctx, sql, args...)
	if err != nil {
		return fmt.Sprintf("(query failed: %v)", err)
	}
	list, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return fmt.Sprintf("(query failed: %v)", err)
	}
	if len(list) == 0 {
		return "none"
	}
	return strings.Join(list, ", ")
}

// percentile returns the q quantile of ds (0 when empty).
func percentile(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[min(int(q*float64(len(s))), len(s)-1)]
}

// logProblems fails the test for the lines of the stack's processes that
// report a problem (an ERROR, a task that failed, a panic, a data race),
// one failure per process and kind of problem with its count and first
// line; it returns how many lines there were.
func (s *stack) logProblems(t *testing.T) int {
	t.Helper()
	type kind struct{ process, what string }
	count := map[kind]int{}
	first := map[kind]string{}
	var order []kind
	scan := func(name, out string) {
		for _, line := range strings.Split(out, "\n") {
			what, ok := logProblem(line)
			if !ok {
				continue
			}
			k := kind{name, what}
			if count[k] == 0 {
				order = append(order, k)
				first[k] = line
			}
			count[k]++
		}
	}
	for _, w := range s.workers {
		scan(w.name, w.out.Tail(1<<62))
	}
	for _, p := range s.apis {
		scan(p.Name, p.Out.Tail(1<<62))
	}
	n := 0
	for _, k := range order {
		n += count[k]
		t.Errorf("%s logged %d time(s) %s; first: %.1500s", k.process, count[k], k.what, first[k])
	}
	return n
}

// logProblem reports whether a log line tells of a problem, and which: the
// level, message, task type and error of a JSON line (ids left out, so that
// one cause is counted once), or the line's start.
func logProblem(line string) (string, bool) {
	switch {
	case strings.HasPrefix(line, "panic:"), strings.HasPrefix(line, "fatal error:"), strings.Contains(line, "WARNING: DATA RACE"):
		return fmt.Sprintf("%.80q", line), true
	case !strings.Contains(line, `"level":"ERROR"`) && !strings.Contains(line, `"msg":"task failed"`):
		return "", false
	}
	var l struct {
		Level, Msg, Type, Err, Error string
	}
	if json.Unmarshal([]byte(line), &l) != nil {
		return fmt.Sprintf("%.80q", line), true
	}
	return fmt.Sprintf("%s %q (type %q): %s", l.Level, l.Msg, l.Type, uuids.ReplaceAllString(l.Err+l.Error, "<id>")), true
}

var uuids = regexp.MustCompile(`[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}`)

// logLinesOf returns the stack's log lines that name any of ids (a request
// id, a delivery or event id), at most five, for a failure message.
func (s *stack) logLinesOf(ids ...string) string {
	var out []string
	for _, line := range strings.Split(s.logs(), "\n") {
		for _, id := range ids {
			if id != "" && strings.Contains(line, id) {
				out = append(out, line)
				break
			}
		}
	}
	if len(out) == 0 {
		return ""
	}
	if len(out) > 5 {
		out = append(out[:2], out[len(out)-3:]...)
	}
	return "\n\tlog lines: " + strings.Join(out, "\n\t")
}

// TestPreviousReleaseOnNewSchema runs the previous release's binaries on a
// database of this release's schema: what serves between the migration and
// the last replaced pod of a rollout, and after a rollback. The previous
// release's `api migrate` (a rollback's migration Job) leaves the schema as
// it is; then two of its API replicas and its worker take one merchant
// through sign-in, keys (one revoked, refused on both replicas), a webhook
// endpoint, charges captured at once, captured and voided by request, a
// refund, a saved card saved, charged off session and deleted (and one this
// release saved under a data key, charged to a processing_error failure and
// deleted with its customer, data key included), the lists and gets of
// charges, refunds, events and deliveries, the dashboard's pages, and the worker's periodic tasks (outbox sweep,
// retention and sessions prunes); every event reaches the endpoint; every
// answer matches that release's api/openapi.yaml; no process logs an error
// or a failed task.
func TestPreviousReleaseOnNewSchema(t *testing.T) {
	chaosParallel(t)
	redisPath := testenv.RedisServerPath(t)
	prev := previousRelease(t)
	db := testenv.NewDB(t) // migrated by this release
	schema := schemaVersion(t, db)
	migrateWith(t, prev.bins.api, db)
	if got := schemaVersion(t, db); got != schema {
		t.Errorf("the previous release's api migrate moved the schema from %d to %d; want it left alone", schema, got)
	}
	// Directly, as in F13.
	st := startStackWith(t, prev.bins, db, redisPath, prev.spec, stackOptions{env: chaosStackEnv, workerEnv: chaosWorkerEnv, direct: true})
	c := newClient(t, "127.0.0.135")
	m := newWebhookMerchant(t, st, &secretBag{}, "127.0.0.136", "prev")
	rcv := newReceiver(t, "prev", always(http.StatusOK))
	ep, _ := m.endpoint(t, rcv.url(), upgradeEvents...)

	// Keys.
	revokedKey(t, st, c)
	mustExpect(t, m.do(t, http.MethodGet, "/v1/me/api_keys", ""), http.StatusOK, "")
	mustExpect(t, m.do(t, http.MethodGet, "/v1/me", ""), http.StatusOK, "")

	// Charges and a refund.
	create := func(capture bool, tag string) string {
		e := m.do(t, http.MethodPost, "/v1/charges", cardBody("4242424242424242", capture, 1000, tag), "Idempotency-Key", tag+"-"+harness.RandomHex(4))
		mustExpect(t, e, http.StatusCreated, "")
		var ch chargeJSON
		decode(t, e, &ch)
		return ch.ID
	}
	captured, toCapture, toVoid := create(true, "prev-captured"), create(false, "prev-capture"), create(false, "prev-void")
	ids := []string{captured, toCapture, toVoid}
	m.waitCharges(t, ids, func(id, s string) bool {
		return s == map[bool]string{true: "captured", false: "authorized"}[id == captured]
	}, 30*time.Second)
	mustExpect(t, m.do(t, http.MethodPost, "/v1/charges/"+toCapture+"/capture", "{}"), http.StatusOK, "")
	mustExpect(t, m.do(t, http.MethodPost, "/v1/charges/"+toVoid+"/void", ""), http.StatusOK, "")
	e := m.do(t, http.MethodPost, "/v1/refunds", fmt.Sprintf(`{"charge":%q,"amount":400}`, captured), "Idempotency-Key", "prev-refund-"+harness.RandomHex(4))
	mustExpect(t, e, http.StatusCreated, "")
	var refund refundJSON
	decode(t, e, &refund)
	if got := m.waitRefund(t, refund.ID, 30*time.Second); got.Status != "succeeded" {
		t.Errorf("refund %s: %s, want succeeded", refund.ID, got.Status)
	}
	want := map[string]string{captured: "captured", toCapture: "captured", toVoid: "voided"}
	m.waitCharges(t, ids, func(id, s string) bool { return s == want[id] }, 30*time.Second)

	// A saved card: saved (in card_sealed alone, with its CVC, as that
	// release seals it), charged, deleted (its data key, once this release
	// has converted it, goes by ON DELETE CASCADE).
	e = m.do(t, http.MethodPost, "/v1/customers", `{"email":"prev@example.com"}`)
	mustExpect(t, e, http.StatusCreated, "")
	var cus struct{ ID string }
	decode(t, e, &cus)
	e = m.do(t, http.MethodPost, "/v1/customers/"+cus.ID+"/payment_methods",
		fmt.Sprintf(`{"card":{"number":"4242424242424242","exp_month":12,"exp_year":%d,"cvc":"123"}}`, time.Now().Year()+2))
	mustExpect(t, e, http.StatusCreated, "")
	var pm struct{ ID string }
	decode(t, e, &pm)
	e = m.do(t, http.MethodPost, "/v1/charges", `{"amount":900,"currency":"usd","customer":"`+cus.ID+`","card":{"payment_method":"`+pm.ID+`"},"off_session":true}`)
	mustExpect(t, e, http.StatusCreated, "")
	var savedCharge chargeJSON
	decode(t, e, &savedCharge)
	m.waitCharges(t, []string{savedCharge.ID}, func(_, s string) bool { return s == "captured" }, 30*time.Second)
	mustExpect(t, m.do(t, http.MethodDelete, "/v1/customers/"+cus.ID+"/payment_methods/"+pm.ID, ""), http.StatusOK, "")
	// A card this release saved, under its data key, which that release
	// cannot open: its charge fails processing_error, without an error.
	ownKeyed := savedByThisRelease(t, st, m.id, cus.ID, "5555555555554444")
	e = m.do(t, http.MethodPost, "/v1/charges", `{"amount":900,"currency":"usd","customer":"`+cus.ID+`","card":{"payment_method":"`+ownKeyed+`"}}`)
	mustExpect(t, e, http.StatusCreated, "")
	decode(t, e, &savedCharge)
	got, _ := m.waitCharges(t, []string{savedCharge.ID}, func(_, s string) bool { return s != "created" }, 30*time.Second)
	if c := got[savedCharge.ID]; c.Status != "failed" || c.FailureCode == nil || *c.FailureCode != "processing_error" {
		t.Errorf("the previous release's charge of a card under a data key: %s %v, want failed processing_error", c.Status, c.FailureCode)
	}
	mustExpect(t, m.do(t, http.MethodDelete, "/v1/customers/"+cus.ID, ""), http.StatusOK, "")
	if n := queryInt(t, st.db, `SELECT count(*) FROM payment_method_keys WHERE payment_method_id = $1`, ownKeyed); n != 0 {
		t.Errorf("the previous release deleted a customer and left the data key of its card")
	}

	// Lists and gets.
	for _, path := range []string{"/v1/charges?limit=5", "/v1/charges/" + captured, "/v1/refunds?limit=5", "/v1/refunds/" + refund.ID,
		"/v1/me/webhook_endpoints", "/v1/me/webhook_endpoints/" + ep.ID} {
		mustExpect(t, m.do(t, http.MethodGet, path, ""), http.StatusOK, "")
	}
	evs := m.events(t)
	if len(evs) == 0 {
		t.Fatalf("GET /v1/events: no event after three charges and a refund")
	}
	for _, ev := range evs {
		mustExpect(t, m.do(t, http.MethodGet, "/v1/events/"+ev.ID, ""), http.StatusOK, "")
	}

	// Every event reaches the endpoint, and its deliveries list.
	deadline := time.Now().Add(waitFloor)
	for {
		got := map[string]bool{}
		for _, h := range rcv.all() {
			got[h.eventID()] = true
		}
		var missing []string
		for _, ev := range merchantEventsOf(t, st.db, m.id) {
			if slices.Contains(upgradeEvents, ev.typ) && !got[ev.id] {
				missing = append(missing, ev.typ+" "+ev.id)
			}
		}
		if len(missing) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("events not delivered after %s: %v", waitFloor, missing)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if ds := m.deliveries(t, ep.ID); len(ds) == 0 {
		t.Errorf("GET deliveries of %s: none after the events were delivered", ep.ID)
	}

	// The dashboard, signed in with a fresh owner.
	previousDashboard(t, st, captured)

	// The worker's periodic tasks: the sweep runs every 10 s by itself; the
	// prunes run hourly, so the test enqueues them as the previous
	// release's scheduler does (its internal/jobs/tasks.go): this
	// release's may name other queues.
	client := asynq.NewClientFromRedisClient(st.redis.client)
	for _, typ := range []string{"retention:prune", "sessions:prune"} {
		if _, err := client.Enqueue(asynq.NewTask(typ, nil, asynq.Queue("maintenance"), asynq.MaxRetry(0))); err != nil {
			t.Fatalf("enqueue %s: %v", typ, err)
		}
	}
	waitTasksDone(t, st, []string{"outbox:sweep", "retention:prune", "sessions:prune"}, 30*time.Second)

	problems := st.logProblems(t)
	t.Logf("previous release %s on schema %d: its migrate a no-op, %d events delivered, periodic tasks done, problem lines in the logs %d",
		prev.commit[:12], schema, len(evs), problems)
}

// previousDashboard signs in to the dashboard of replica 1 as a new owner
// and opens its pages, the charge's among them: each answers 200.
func previousDashboard(t *testing.T, st *stack, charge string) {
	t.Helper()
	email := "prev-dash-" + harness.RandomHex(6) + "@example.com"
	password := "correct horse " + harness.RandomHex(8)
	st.createMerchant(t, email, password, "Dashboard")
	jar, err := cookiejar.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	tr := newClient(t, "127.0.0.137").Transport
	c := &http.Client{Transport: tr, Jar: jar, Timeout: 15 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	base := st.replicas[0]
	get := func(path string) (int, string) {
		t.Helper()
		resp, err := c.Get(base + path)
		if err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	status, page := get("/dashboard/login")
	csrf := csrfField.FindStringSubmatch(page)
	if status != http.StatusOK || csrf == nil {
		t.Fatalf("GET /dashboard/login: %d, CSRF field found %t", status, csrf != nil)
	}
	resp, err := c.PostForm(base+"/dashboard/login", url.Values{"csrf_token": {csrf[1]}, "email": {email}, "password": {password}})
	if err != nil {
		t.Fatalf("POST /dashboard/login: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/dashboard/charges" {
		t.Fatalf("POST /dashboard/login: %d to %q, want 303 to /dashboard/charges", resp.StatusCode, resp.Header.Get("Location"))
	}
	// The charge belongs to another merchant: its page is a 404, drawn
	// from the same queries.
	for path, want := range map[string]int{"/dashboard/charges": 200, "/dashboard/events": 200, "/dashboard/webhooks": 200,
		"/dashboard/keys": 200, "/dashboard/customers": 200, "/dashboard/charges/" + charge: 404} {
		if status, body := get(path); status != want {
			t.Errorf("GET %s: %d, want %d: %.300s", path, status, want, body)
		}
	}
}

var csrfField = regexp.MustCompile(`name="csrf_token" value="([^"]+)"`)

// waitTasksDone polls the worker's metrics until each task type has been
// processed with outcome ok at least once.
func waitTasksDone(t *testing.T, st *stack, types []string, within time.Duration) {
	t.Helper()
	c := newClient(t, "127.0.0.1")
	within = patience(within)
	deadline := time.Now().Add(within)
	for {
		e, err := send(c, http.MethodGet, st.worker+"/metrics", "", "")
		var left []string
		for _, typ := range types {
			if err != nil || !strings.Contains(string(e.body), fmt.Sprintf(`gatehouse_jobs_processed_total{outcome="ok",type=%q}`, typ)) {
				left = append(left, typ)
			}
		}
		if len(left) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Errorf("the worker has not processed %v with outcome ok after %s", left, within)
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
}
