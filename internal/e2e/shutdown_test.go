package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"net/url"
	"os"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/gatehouse-pay/gatehouse/internal/testenv"
	"github.com/gatehouse-pay/gatehouse/internal/testenv/harness"
)

// The drain settings the shutdown tests run the API with.
const (
	sdDelay   = 2 * time.Second
	sdTimeout = 10 * time.Second
	// sdExitSlack is what exiting may add to delay + timeout, asserted at
	// full scale only (sdWaitExit).
	sdExitSlack = 5 * time.Second
)

var sdStackEnv = []string{
	// The race detector sleeps a second at exit by default; the drain
	// figures are the binaries' own.
	"GORACE=" + strings.TrimSpace(os.Getenv("GORACE")+" atexit_sleep_ms=0"),
	"SHUTDOWN_DELAY=" + sdDelay.String(),
	"SHUTDOWN_TIMEOUT=" + sdTimeout.String(),
	"RATE_LIMIT_CHARGES=100000/1m",
	"RATE_LIMIT_CHARGES_MERCHANT=100000/1m",
	"RATE_LIMIT_DEFAULT=100000/1m",
	"RATE_LIMIT_LOGIN=1000/5m",
	"PROVIDER_TIMEOUT=2s",
	"PROVIDER_RETRY_BASE=100ms",
	"PROVIDER_RETRY_MAX=400ms",
	"WEBHOOK_ALLOW_PRIVATE_NETWORKS=true",
	"WEBHOOK_RETRY_SCHEDULE=0s,1s,2s,3s,4s",
	"WEBHOOK_TIMEOUT=6s",
}

var sdWorkerEnv = []string{
	"OUTBOX_SWEEP_AFTER=2s",
	"RECONCILE_AFTER=5s",
	"SANDBOX_LATENCY=5ms",
}

// sdOutcome is what became of one HTTP request sent to a draining stack.
type sdOutcome int

const (
	// sdAnswered: a complete response arrived.
	sdAnswered sdOutcome = iota
	// sdRefused: no connection could be opened (ECONNREFUSED): the listener
	// is closed. Acceptable once readiness has turned false.
	sdRefused
	// sdRaced: the request was written on a kept-alive connection that the
	// server then closed without answering (the keep-alive race). Go's
	// transport re-sends such a request on a new connection when it is
	// idempotent (GET, or POST with Idempotency-Key), which hides it from most
	// Go clients, but not from other clients or from POSTs without a key.
	sdRaced
	// sdReset: a reset or an EOF on a fresh connection, or in the middle of
	// a response.
	sdReset
	// sdFailed: anything else (a timeout, ...).
	sdFailed
)

func (o sdOutcome) String() string {
	return [...]string{"answered", "refused", "raced", "reset", "failed"}[o]
}

// sdShot is one request of the drain test and what came of it.
type sdShot struct {
	who     string // "load-N" or "readyz"
	replica int    // index into stack.replicas
	key     string // Idempotency-Key of a POST
	start   time.Time
	end     time.Time
	ex      exchange // when answered
	headed  bool     // the response's head arrived (even if its body did not)
	conns   []httptrace.GotConnInfo
	err     error
	outcome sdOutcome
}

func (s sdShot) status() int {
	if s.outcome != sdAnswered {
		return 0
	}
	return s.ex.status()
}

// describe is a line for a failure message, with times relative to ref.
func (s sdShot) describe(ref time.Time) string {
	var conns []string
	for _, c := range s.conns {
		conns = append(conns, fmt.Sprintf("reused=%t idle=%s", c.Reused, c.IdleTime.Round(time.Microsecond)))
	}
	what := s.outcome.String()
	if s.outcome == sdAnswered {
		what = fmt.Sprintf("%d %s", s.ex.status(), sdTruncate(s.ex.body, 120))
	} else if s.err != nil {
		what += ": " + s.err.Error()
	}
	method := http.MethodGet
	if s.key != "" {
		method = http.MethodPost
	}
	return fmt.Sprintf("%s %s on replica %d, sent %+dms, ended %+dms, connections [%s]: %s",
		s.who, method, s.replica+1, s.start.Sub(ref).Milliseconds(), s.end.Sub(ref).Milliseconds(), strings.Join(conns, "; "), what)
}

// sdClassify names the outcome of a request from its error and the
// connections the transport used for it, in order.
func sdClassify(err error, conns []httptrace.GotConnInfo) sdOutcome {
	reusedFirst := len(conns) > 0 && conns[0].Reused
	switch {
	case reusedFirst && (err != nil || len(conns) > 1):
		return sdRaced
	case err == nil:
		return sdAnswered
	case errors.Is(err, syscall.ECONNREFUSED):
		return sdRefused
	case errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE), errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return sdReset
	}
	return sdFailed
}

// sdSend sends one request and records every connection the transport used
// for it, so that a request re-sent by the transport is seen.
func sdSend(c *http.Client, method, url, token, body string, headers ...string) sdShot {
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	var mu sync.Mutex
	var conns []httptrace.GotConnInfo
	trace := &httptrace.ClientTrace{GotConn: func(i httptrace.GotConnInfo) {
		mu.Lock()
		defer mu.Unlock()
		conns = append(conns, i)
	}}
	req, err := http.NewRequestWithContext(httptrace.WithClientTrace(context.Background(), trace), method, url, rd)
	if err != nil {
		return sdShot{err: err, outcome: sdFailed, start: time.Now(), end: time.Now()}
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	s := sdShot{start: time.Now()}
	resp, err := c.Do(req)
	if err == nil {
		s.headed = true
		var b []byte
		b, err = io.ReadAll(resp.Body)
		resp.Body.Close()
		if err == nil {
			s.ex = exchange{req: req, resp: resp, body: b, start: s.start, end: time.Now()}
		}
	}
	s.end = time.Now()
	mu.Lock()
	s.conns = slices.Clone(conns)
	mu.Unlock()
	s.err = err
	s.outcome = sdClassify(err, s.conns)
	return s
}

// sdLog collects the shots of every goroutine.
type sdLog struct {
	mu    sync.Mutex
	shots []sdShot
}

func (l *sdLog) add(s sdShot) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.shots = append(l.shots, s)
}

func (l *sdLog) all() []sdShot {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := slices.Clone(l.shots)
	sort.SliceStable(out, func(i, j int) bool { return out[i].start.Before(out[j].start) })
	return out
}

// sdReplaceReplica starts a new API replica i on the address of the one that
// exited, as a rolling deployment does, and waits until it is ready. The
// stack's cleanup holds replica i's *harness.Process and stops whatever runs in it,
// so the new process takes the old one's place. It binds the port the old
// one held, not port 0: the clients and PUBLIC_URL know the replica there.
func sdReplaceReplica(t *testing.T, st *stack, i int, apiEnv []string, c *http.Client) time.Duration {
	t.Helper()
	old := st.apis[i]
	if !old.Exited() {
		t.Fatalf("%s is still running", old.Name)
	}
	start := time.Now()
	addr := strings.TrimPrefix(st.replicas[i], "http://")
	env := append(append(slices.Clone(st.env), apiEnv...), "HTTP_ADDR="+addr)
	fmt.Fprintf(old.Out, "\n==== test: %s replaced ====\n", old.Name)
	p := testenv.StartProcess(t, old.Name, old.Out, env, st.bins.api)
	*old = *p // old exited: nothing else reads or writes it now
	st.waitReady(t, c, st.replicas[i], old, 60*time.Second)
	return time.Since(start)
}

// sdWaitExit waits for p to exit after a SIGTERM sent at sent and returns
// when it exited; it records an error unless it exits 0. The process's own
// timers (SHUTDOWN_DELAY, SHUTDOWN_TIMEOUT) end its drain within limit: an
// exit later than that is an error at full scale (make chaos) and logged at
// smoke scale, where a loaded machine may slow the exit itself. A process
// still running waitFloor after limit ignores its timers: it is killed and
// fails the test at both scales.
func sdWaitExit(t *testing.T, p *harness.Process, sent time.Time, limit time.Duration) time.Time {
	t.Helper()
	select {
	case <-p.Done():
	case <-time.After(time.Until(sent.Add(limit + waitFloor))):
		t.Errorf("%s: still running %s after SIGTERM, want exit 0 within %s", p.Name, limit+waitFloor, limit)
		_ = p.Cmd.Process.Kill()
		<-p.Done()
		return time.Now()
	}
	at := time.Now()
	if code := p.Cmd.ProcessState.ExitCode(); code != 0 {
		t.Errorf("%s: exit code after SIGTERM: got %d (%v), want 0", p.Name, code, p.Cmd.ProcessState)
	}
	if took := at.Sub(sent); took > limit {
		if chaosFull() {
			t.Errorf("%s: exited %s after SIGTERM, want within %s", p.Name, took.Round(time.Millisecond), limit)
		} else {
			t.Logf("%s: exited %s after SIGTERM, later than %s (asserted at full scale only)", p.Name, took.Round(time.Millisecond), limit)
		}
	}
	return at
}

// sdReadiness polls a /readyz every 20 ms until stop is closed, adds every
// answer to log and, when seen is not nil, hands it to seen.
func sdReadiness(c *http.Client, url string, log *sdLog, replica int, stop <-chan struct{}, seen func(sdShot)) {
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		s := sdSend(c, http.MethodGet, url, "", "")
		s.who, s.replica = "readyz", replica
		log.add(s)
		if seen != nil {
			seen(s)
		}
		select {
		case <-stop:
			return
		case <-tick.C:
		}
	}
}

// sdState is the readiness state a /readyz answer shows.
func sdState(s sdShot) string {
	if s.outcome == sdAnswered {
		return fmt.Sprint(s.ex.status())
	}
	return s.outcome.String()
}

// sdTransitions lists the changes of state of the readiness probes, with
// times relative to ref.
func sdTransitions(probes []sdShot, ref time.Time) []string {
	var out []string
	last := ""
	for _, s := range probes {
		if st := sdState(s); st != last {
			out = append(out, fmt.Sprintf("%s at %+dms", st, s.end.Sub(ref).Milliseconds()))
			last = st
		}
	}
	return out
}

// sdLBLag is how long the test's load balancer keeps sending new requests to
// a replica after its health check saw /readyz answer 503: the propagation
// delay of a real one (kube-proxy, an ingress), which SHUTDOWN_DELAY must cover.
const sdLBLag = sdDelay / 4

// TestGracefulShutdownAPI sends SIGTERM to API replica 1 while it is under
// steady load (GET and POST /v1/charges on kept-alive connections) and its
// /readyz is polled every 20 ms (api/openapi.yaml; SHUTDOWN_DELAY
// and SHUTDOWN_TIMEOUT). The load clients behave as behind a well-behaved load
// balancer: they keep sending to replica 1 until sdLBLag after the health check
// first saw 503, then move to replica 2. So every request replica 1 gets arrives
// before readiness turned 503 and the propagation lag passed, well inside
// SHUTDOWN_DELAY, and each must be answered: no 5xx, no reset, no refusal, no
// keep-alive race. Answers while draining carry Connection: close. The listener
// stays open for SHUTDOWN_DELAY after SIGTERM (the health check is the only
// client that sees it close, and only then); every charge answered 201 exists;
// the process exits 0, within SHUTDOWN_DELAY + SHUTDOWN_TIMEOUT at full scale
// (make chaos; see sdWaitExit). At full scale it runs on its own.
//
// What the kernel does with a connection that reaches the listen queue as the
// listener closes is not the server's to decide, and no client of a load
// balancer sends one, so the test sends none: it asserts what such clients see,
// and nothing about how long any of it takes beyond the configured delays.
func TestGracefulShutdownAPI(t *testing.T) {
	chaosParallel(t)
	began := time.Now()
	st := newStack(t, stackOptions{env: sdStackEnv, workerEnv: sdWorkerEnv},
		fmt.Sprintf("SHUTDOWN_DELAY %s, SHUTDOWN_TIMEOUT %s", sdDelay, sdTimeout))
	ready := time.Now()

	m := newWebhookMerchant(t, st, &secretBag{}, "127.0.0.70", "drain")
	api := st.apis[0]

	// The load balancer: replica 1 leaves the pool sdLBLag after the health
	// check first sees it not ready.
	var notReadyAt atomic.Int64 // UnixNano of the first non-200 /readyz answer after SIGTERM
	var signalled atomic.Bool
	inPool := func() bool {
		at := notReadyAt.Load()
		return at == 0 || time.Now().Before(time.Unix(0, at).Add(sdLBLag))
	}

	// Load: each goroutine has its own keep-alive client and sends to the
	// replica the load balancer picks. A request replica 1 leaves unanswered
	// is a failure; the client then re-sends it to replica 2, as a client
	// retrying through the load balancer would. The pauses range from none (a
	// connection always busy) to 10 ms.
	pauses := []time.Duration{0, 2 * time.Millisecond, 5 * time.Millisecond, 10 * time.Millisecond}
	run := harness.RandomHex(4)
	var log sdLog
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for i, pause := range pauses {
		c := newClient(t, fmt.Sprintf("127.0.0.%d", 71+i))
		who := fmt.Sprintf("load-%d", i+1)
		wg.Go(func() {
			for n := 0; ; n++ {
				select {
				case <-stop:
					return
				default:
				}
				key := ""
				if n%2 == 1 {
					key = fmt.Sprintf("drain-%s-%d-%d", run, i+1, n)
				}
				target := 1
				if inPool() {
					target = 0
				}
				for {
					var s sdShot
					if key == "" {
						s = sdSend(c, http.MethodGet, st.replicas[target]+"/v1/charges?limit=5", m.key, "")
					} else {
						s = sdSend(c, http.MethodPost, st.replicas[target]+"/v1/charges", m.key,
							cardBody("4242424242424242", true, 1000, key), "Idempotency-Key", key)
					}
					s.who, s.replica, s.key = who, target, key
					log.add(s)
					if s.outcome == sdAnswered || target == 1 {
						break
					}
					target = 1
				}
				if pause > 0 {
					time.Sleep(pause)
				}
			}
		})
	}
	probeStop := make(chan struct{})
	var probeWG sync.WaitGroup
	probeWG.Go(func() {
		sdReadiness(newClient(t, "127.0.0.79"), st.replicas[0]+"/readyz", &log, 0, probeStop, func(s sdShot) {
			if signalled.Load() && s.status() != http.StatusOK {
				notReadyAt.CompareAndSwap(0, s.end.UnixNano())
			}
		})
	})

	// Two connections opened and never used, as a load balancer's or an
	// HTTP client's spares are: the server counts a new connection as busy,
	// and without the drain closing them it would wait for each until
	// HTTP_READ_TIMEOUT, longer than SHUTDOWN_TIMEOUT.
	u, err := url.Parse(st.replicas[0])
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		spare, err := net.Dial("tcp", u.Host)
		if err != nil {
			t.Fatalf("a spare connection to %s: %v", api.Name, err)
		}
		t.Cleanup(func() { spare.Close() })
	}

	time.Sleep(time.Second)
	sigAt := time.Now()
	signalled.Store(true)
	if err := api.Cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatalf("SIGTERM %s: %v", api.Name, err)
	}
	exitAt := sdWaitExit(t, api, sigAt, sdDelay+sdTimeout+sdExitSlack)
	exitCode := api.Cmd.ProcessState.ExitCode()
	time.Sleep(500 * time.Millisecond) // replica 2 carries the load alone for a while
	close(stop)
	wg.Wait()
	close(probeStop)
	probeWG.Wait()
	loadEnd := time.Now()

	// Keep the old replica's output for the checks below, then replace it.
	apiLog := api.Out.Tail(1 << 62)
	replaced := sdReplaceReplica(t, st, 0, nil, newClient(t, "127.0.0.78"))

	shots := log.all()
	var probes, load []sdShot
	for _, s := range shots {
		if s.outcome == sdAnswered {
			st.check(t, s.ex)
		}
		if s.who == "readyz" {
			probes = append(probes, s)
		} else {
			load = append(load, s)
		}
	}
	rel := func(at time.Time) string { return fmt.Sprintf("%+dms", at.Sub(sigAt).Milliseconds()) }
	t.Logf("readiness of replica 1 (times from SIGTERM): %s", strings.Join(sdTransitions(probes, sigAt), ", "))

	// (a) readiness turns 503, with the contract's error body, and stays so
	// while the replica answers; once the listener closes the health check
	// sees it gone, which is how a load balancer learns it too.
	var first503, firstGone *sdShot
	for i, s := range probes {
		switch {
		case s.end.Before(sigAt):
			if s.status() != http.StatusOK {
				t.Errorf("before SIGTERM: %s", s.describe(sigAt))
			}
		case s.status() == http.StatusServiceUnavailable:
			if !s.ex.is(http.StatusServiceUnavailable, "service_unavailable") {
				t.Errorf("/readyz while draining: %s, want the service_unavailable error body", s.ex)
			}
			if first503 == nil {
				first503 = &probes[i]
			}
		case s.status() == http.StatusOK:
			if first503 != nil {
				t.Errorf("/readyz turned 200 again after 503: %s", s.describe(sigAt))
			}
		case s.outcome == sdAnswered:
			t.Errorf("/readyz while draining: %s, want 503", s.describe(sigAt))
		default:
			if firstGone == nil {
				firstGone = &probes[i]
			}
		}
	}
	if first503 == nil {
		t.Fatalf("/readyz never answered 503 after SIGTERM; probes: %s", strings.Join(sdTransitions(probes, sigAt), ", "))
	}
	notReady := first503.end // readiness false is observed by then
	if firstGone == nil {
		t.Errorf("the health check never saw replica 1's listener close: the test did not see the drain end")
	} else {
		if firstGone.start.Before(first503.start) {
			t.Errorf("replica 1 stopped answering its health check (%s) before /readyz answered 503 (%s)", firstGone.describe(sigAt), rel(notReady))
		}
		// The server closes its listener SHUTDOWN_DELAY after it got the
		// signal. A probe that reached the listen queue just before that is
		// reset by the kernel, and the queue may wait a while on a loaded
		// machine, so only a close in the first half of the delay counts as
		// closing early: it catches a server that does not wait at all.
		if d := firstGone.start.Sub(sigAt); d < sdDelay/2 {
			t.Errorf("replica 1 stopped answering %s after SIGTERM, want SHUTDOWN_DELAY (%s) of service first: %s", d, sdDelay, firstGone.describe(sigAt))
		}
	}

	// (b) every request the load balancer sent to replica 1 was answered,
	// with no 5xx; so was every request to replica 2. While it drains,
	// replica 1 answers with Connection: close: a client keeps a connection
	// without it, and when the listener closes the server closes that
	// connection under a client that may be sending on it (the keep-alive
	// race, seen as "raced").
	counts := map[sdOutcome]int{}
	var bad []string
	served, servedPOST := 0, 0
	drainAnswers, withClose := 0, 0
	var lastServed time.Time
	var noClose *sdShot
	for i, s := range load {
		counts[s.outcome]++
		if s.outcome != sdAnswered {
			bad = append(bad, s.describe(sigAt))
			continue
		}
		want := http.StatusOK
		if s.key != "" {
			want = http.StatusCreated
		}
		if s.status() != want {
			bad = append(bad, s.describe(sigAt))
		}
		if s.replica != 0 || s.start.Before(notReady) {
			continue
		}
		drainAnswers++
		if s.ex.resp.Close {
			withClose++
		} else if noClose == nil {
			noClose = &load[i]
		}
		if s.status() < 300 {
			served++
			if s.key != "" {
				servedPOST++
			}
			lastServed = s.end
		}
	}
	for i, b := range bad {
		if i == 20 {
			t.Errorf("... and %d more", len(bad)-i)
			break
		}
		t.Errorf("request: %s", b)
	}
	if served == 0 {
		t.Errorf("replica 1 served no request between readiness 503 and the load balancer's lag (%s), want it to keep serving while draining", sdLBLag)
	}
	if noClose != nil {
		t.Errorf("%d of %d answers of replica 1 while it drained lack Connection: close, e.g. %s; clients keep those connections "+
			"and the server closes them under them when the listener closes", drainAnswers-withClose, drainAnswers, noClose.describe(sigAt))
	}

	// (c) every charge answered 201 exists, once per Idempotency-Key.
	created := map[string]string{} // key -> charge id
	for _, s := range load {
		if s.key == "" || s.status() != http.StatusCreated {
			continue
		}
		var ch chargeJSON
		decode(t, s.ex, &ch)
		if prev, ok := created[s.key]; ok && prev != ch.ID {
			t.Errorf("Idempotency-Key %s: charges %s and %s", s.key, prev, ch.ID)
		}
		created[s.key] = ch.ID
	}
	ctx, cancel := dbCtx()
	defer cancel()
	rows, err := st.db.Pool.Query(ctx, `SELECT id::text, metadata->>'tag' FROM charges WHERE merchant_id = $1`, m.id)
	if err != nil {
		t.Fatal(err)
	}
	inDB := map[string]string{} // charge id -> tag
	perTag := map[string]int{}
	for rows.Next() {
		var id, tag string
		if err := rows.Scan(&id, &tag); err != nil {
			t.Fatal(err)
		}
		inDB[id] = tag
		perTag[tag]++
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	missing := 0
	for key, id := range created {
		if inDB[id] != key {
			missing++
			t.Errorf("charge %s (Idempotency-Key %s) was answered 201 but is not in the database", id, key)
		}
	}
	for tag, n := range perTag {
		if n != 1 {
			t.Errorf("%d charges carry the tag %s, want 1", n, tag)
		}
		if _, ok := created[tag]; !ok {
			t.Errorf("a charge with the tag %s exists but no request for it was answered 201", tag)
		}
	}

	// (d) the exit code and time were checked by sdWaitExit; the drain
	// finished within SHUTDOWN_TIMEOUT.
	if strings.Contains(apiLog, "shutdown incomplete") {
		t.Errorf("%s logged an incomplete shutdown", api.Name)
	}
	if closed := sdUnusedClosed(apiLog); closed < 2 {
		t.Errorf("%s closed %d unused connections while draining (its \"stopped\" line), want the 2 spares at least", api.Name, closed)
	}

	t.Logf("SIGTERM -> /readyz 503 observed %s; -> load balancer stopped sending %s later; -> listener closed (health check refused) %s; "+
		"-> exit %s (code %d); replaced by a new replica in %s",
		rel(notReady), sdLBLag, rel(sdStartOr(firstGone, sigAt)), rel(exitAt), exitCode, replaced.Round(time.Millisecond))
	t.Logf("%d load requests in %s: answered %d, refused %d, raced %d, reset %d, other failures %d; "+
		"replica 1 served %d requests (%d POST) after readiness turned 503, the last ending %s; "+
		"%d of its %d answers while draining carried Connection: close",
		len(load), loadEnd.Sub(shots[0].start).Round(time.Millisecond), counts[sdAnswered], counts[sdRefused], counts[sdRaced],
		counts[sdReset], counts[sdFailed], served, servedPOST, rel(lastServed), withClose, drainAnswers)
	t.Logf("%d charges answered 201, %d in the database, %d missing; took %s (since the stack was ready: %s)",
		len(created), len(inDB), missing, time.Since(began).Round(time.Millisecond), time.Since(ready).Round(time.Millisecond))
	if t.Failed() {
		t.Logf("---- %s output before it was replaced (tail) ----\n%s", api.Name, sdTail(apiLog, 16<<10))
	}
}

// sdUnusedClosed is unused_connections_closed of the API's "stopped" log
// line, or -1 when there is none.
func sdUnusedClosed(apiLog string) int {
	for line := range strings.Lines(apiLog) {
		var l struct {
			Msg    string `json:"msg"`
			Closed *int   `json:"unused_connections_closed"`
		}
		if json.Unmarshal([]byte(line), &l) == nil && l.Msg == "stopped" && l.Closed != nil {
			return *l.Closed
		}
	}
	return -1
}

// sdStartOr is when s started, or or when there is no s.
func sdStartOr(s *sdShot, or time.Time) time.Time {
	if s == nil {
		return or
	}
	return s.start
}

// sdTruncate returns at most the first n bytes of b.
func sdTruncate(b []byte, n int) string {
	if len(b) <= n {
		return string(b)
	}
	return string(b[:n]) + "..."
}

// sdTail returns at most the last n bytes of s.
func sdTail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "...\n" + s[len(s)-n:]
}

// sdHit is one request a slow receiver got.
type sdHit struct {
	start      time.Time
	end        time.Time // when the handler returned
	eventID    string
	deliveryID string
	attempt    string
	bodyID     string
	answered   bool // the handler wrote its 200; false when the sender went away first
}

// sdReceiver records webhook requests and answers each with 200 after
// delay(); it gives up on a request whose sender goes away.
type sdReceiver struct {
	srv     *httptest.Server
	delay   func() time.Duration
	mu      sync.Mutex
	hits    []*sdHit
	started chan struct{} // closed at the first request
	once    sync.Once
}

func newSDReceiver(t *testing.T, delay func() time.Duration) *sdReceiver {
	t.Helper()
	r := &sdReceiver{delay: delay, started: make(chan struct{})}
	r.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, _ := io.ReadAll(req.Body)
		checkEventBody(t, body)
		var b struct {
			ID string `json:"id"`
		}
		_ = json.Unmarshal(body, &b)
		h := &sdHit{start: time.Now(), eventID: req.Header.Get("X-Service-Event-Id"), deliveryID: req.Header.Get("X-Service-Delivery-Id"),
			attempt: req.Header.Get("X-Service-Delivery-Attempt"), bodyID: b.ID}
		r.mu.Lock()
		r.hits = append(r.hits, h)
		r.mu.Unlock()
		r.once.Do(func() { close(r.started) })
		answered := false
		defer func() {
			r.mu.Lock()
			h.end, h.answered = time.Now(), answered
			r.mu.Unlock()
		}()
		select {
		case <-time.After(r.delay()):
		case <-req.Context().Done():
			return
		}
		w.WriteHeader(http.StatusOK)
		_, _ = io.WriteString(w, "ok")
		answered = true
	}))
	t.Cleanup(r.srv.Close)
	return r
}

func (r *sdReceiver) url() string { return r.srv.URL + "/hooks/drain" }

// all returns copies of the hits, in arrival order.
func (r *sdReceiver) all() []sdHit {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]sdHit, len(r.hits))
	for i, h := range r.hits {
		out[i] = *h
	}
	return out
}

// sdWorkerDrain sends SIGTERM to the stack's worker, polls its /readyz until
// it exits and returns when the signal was sent, when readiness was first
// seen false (zero if never) and when it exited.
func sdWorkerDrain(t *testing.T, st *stack, limit time.Duration) (sigAt, notReady, exitAt time.Time) {
	t.Helper()
	p := st.workers[0].current()
	var log sdLog
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() { sdReadiness(newClient(t, "127.0.0.89"), st.worker+"/readyz", &log, -1, stop, nil) })
	sigAt = time.Now()
	if err := p.Cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatalf("SIGTERM %s: %v", p.Name, err)
	}
	exitAt = sdWaitExit(t, p, sigAt, limit)
	close(stop)
	wg.Wait()
	fmt.Fprintf(st.workers[0].out, "\n==== test: %s stopped with SIGTERM ====\n", p.Name)
	probes := log.all()
	for _, s := range probes {
		if s.outcome == sdAnswered {
			st.check(t, s.ex)
		}
		if s.start.After(sigAt) && s.status() == http.StatusServiceUnavailable && notReady.IsZero() {
			notReady = s.end
			if !s.ex.is(http.StatusServiceUnavailable, "service_unavailable") || !strings.Contains(s.ex.code()+string(s.ex.body), "draining") {
				t.Errorf("worker /readyz while draining: %s, want service_unavailable naming draining", s.ex)
			}
		}
		if !notReady.IsZero() && s.status() == http.StatusOK {
			t.Errorf("worker /readyz turned 200 again while draining: %s", s.describe(sigAt))
		}
	}
	t.Logf("worker readiness (times from SIGTERM): %s; exit %+dms", strings.Join(sdTransitions(probes, sigAt), ", "), exitAt.Sub(sigAt).Milliseconds())
	return sigAt, notReady, exitAt
}

// sdAllReceived waits until every event of the merchant (as GET /v1/events
// lists them; want of them) has been answered by the receiver at least once,
// and returns the events and how long that took from since.
func sdAllReceived(t *testing.T, m *whMerchant, r *sdReceiver, want int, since time.Time, within time.Duration) ([]eventJSON, time.Duration) {
	t.Helper()
	within = patience(within)
	deadline := time.Now().Add(within)
	for {
		evs := m.events(t)
		answered := map[string]bool{}
		for _, h := range r.all() {
			if h.answered {
				answered[h.eventID] = true
			}
		}
		left := 0
		for _, e := range evs {
			if !answered[e.ID] {
				left++
			}
		}
		if len(evs) == want && left == 0 {
			return evs, time.Since(since)
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %s: %d of %d events listed, %d of them never answered by the receiver", within, len(evs), want, left)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// sdTally checks the receiver's hits against the events (each carried by
// one delivery, under its own id in header and body) and returns how many
// were lost (never answered) and received more than once.
func sdTally(t *testing.T, evs []eventJSON, hits []sdHit) (lost, duplicated, requests int) {
	t.Helper()
	known := map[string]bool{}
	for _, e := range evs {
		known[e.ID] = true
	}
	perEvent := map[string]int{}
	answered := map[string]bool{}
	deliveryEvent := map[string]string{}
	for _, h := range hits {
		if h.eventID == "" || h.bodyID != h.eventID {
			t.Errorf("a request with X-Service-Event-Id %q carries event %q", h.eventID, h.bodyID)
		}
		if prev, ok := deliveryEvent[h.deliveryID]; ok && prev != h.eventID {
			t.Errorf("delivery %s carried events %s and %s", h.deliveryID, prev, h.eventID)
		}
		deliveryEvent[h.deliveryID] = h.eventID
		if !known[h.eventID] {
			t.Errorf("the receiver got event %s, which GET /v1/events does not list", h.eventID)
			continue
		}
		perEvent[h.eventID]++
		answered[h.eventID] = answered[h.eventID] || h.answered
		requests++
	}
	for id := range known {
		if !answered[id] {
			lost++
		}
		if perEvent[id] > 1 {
			duplicated++
		}
	}
	return lost, duplicated, requests
}

// sdAttempts returns the recorded attempts of a delivery: attempt -> status
// code (0 for none) and error.
func sdAttempts(t *testing.T, st *stack, deliveryID string) map[string]string {
	t.Helper()
	ctx, cancel := dbCtx()
	defer cancel()
	rows, err := st.db.Pool.Query(ctx, `SELECT attempt::text, coalesce(status_code, 0)::text || ' ' || coalesce(error, '')
		FROM webhook_attempts WHERE delivery_id = $1`, deliveryID)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[string]string{}
	for rows.Next() {
		var a, s string
		if err := rows.Scan(&a, &s); err != nil {
			t.Fatal(err)
		}
		out[a] = strings.TrimSpace(s)
	}
	return out
}

// TestGracefulShutdownWorker sends SIGTERM to the worker while webhook
// deliveries are in flight to a receiver that takes 1.5 s per request. With
// SHUTDOWN_TIMEOUT above that, the in-flight deliveries finish and are
// recorded before the worker exits 0. With SHUTDOWN_TIMEOUT below it, the
// worker exits 0 without waiting for the receiver and the cut delivery runs
// again in the next worker. Either way, after a restart every event reaches
// the endpoint, duplicates carrying the same event id. How soon the worker
// exits is asserted at full scale (make chaos) only, where it runs on its own.
func TestGracefulShutdownWorker(t *testing.T) {
	chaosParallel(t)
	began := time.Now()
	st := newStack(t, stackOptions{env: sdStackEnv, workerEnv: sdWorkerEnv},
		fmt.Sprintf("worker SHUTDOWN_TIMEOUT %s, WEBHOOK_TIMEOUT 6s", sdTimeout))
	ready := time.Now()
	c := newClient(t, "127.0.0.80")
	bag := &secretBag{}

	t.Run("in_flight_deliveries_finish", func(t *testing.T) {
		const (
			charges = 4 // charge.created and charge.captured each: 8 events
			// takes leaves a loaded machine seconds between the first
			// delivery's start and the SIGTERM, so some are in flight.
			takes = 3 * time.Second
		)
		m := newWebhookMerchant(t, st, bag, "127.0.0.81", "drain-finish")
		rcv := newSDReceiver(t, func() time.Duration { return takes })
		m.endpoint(t, rcv.url(), "charge.created", "charge.captured")
		for i := range charges {
			m.charge(t, fmt.Sprintf("drain-finish-%d", i))
		}
		select {
		case <-rcv.started:
		case <-time.After(waitFloor):
			t.Fatalf("no delivery reached the receiver within %s", waitFloor)
		}
		// A little longer, for more deliveries in flight, well before the first ends.
		for wait := time.Now().Add(500 * time.Millisecond); len(rcv.all()) < charges && time.Now().Before(wait); {
			time.Sleep(10 * time.Millisecond)
		}
		sigAt, notReady, exitAt := sdWorkerDrain(t, st, sdTimeout+sdExitSlack)
		if notReady.IsZero() {
			t.Logf("the worker exited before its /readyz was seen 503")
		}

		// Every request the receiver got before the worker exited was
		// answered, and its attempt recorded as a success before the exit.
		var inFlight, cut int
		var startedDuring []string
		for _, h := range rcv.all() {
			if h.start.After(exitAt) {
				continue
			}
			if h.start.Before(sigAt) {
				inFlight++
			} else {
				startedDuring = append(startedDuring, fmt.Sprintf("%+dms", h.start.Sub(sigAt).Milliseconds()))
			}
			if !h.answered {
				cut++
				t.Errorf("delivery %s attempt %s (started %+dms from SIGTERM) was cut short by the shutdown",
					h.deliveryID, h.attempt, h.start.Sub(sigAt).Milliseconds())
				continue
			}
			if got := sdAttempts(t, st, h.deliveryID)[h.attempt]; !strings.HasPrefix(got, "200") {
				t.Errorf("delivery %s attempt %s was answered 200 %+dms from SIGTERM but the worker recorded %q before it exited",
					h.deliveryID, h.attempt, h.end.Sub(sigAt).Milliseconds(), got)
			}
		}
		if inFlight == 0 {
			t.Errorf("no delivery was in flight at SIGTERM")
		}

		restartAt := time.Now()
		restart := st.restartWorker(t, 0, c)
		evs, took := sdAllReceived(t, m, rcv, 2*charges, restartAt, 30*time.Second)
		lost, dup, requests := sdTally(t, evs, rcv.all())
		if lost != 0 {
			t.Errorf("events lost: %d, want 0", lost)
		}
		t.Logf("SIGTERM -> worker /readyz 503 %s, exit 0 after %s (drain); %d deliveries in flight at SIGTERM, %d started during the drain "+
			"(tasks taken before it, at %v), %d cut; restarted in %s, every event answered %s after; %d events, %d requests, %d lost, %d events received more than once",
			sdRel(notReady, sigAt), exitAt.Sub(sigAt).Round(time.Millisecond), inFlight, len(startedDuring), startedDuring, cut,
			restart.Round(time.Millisecond), took.Round(time.Millisecond), len(evs), requests, lost, dup)
	})

	t.Run("timeout_requeues", func(t *testing.T) {
		const (
			charges = 2
			short   = time.Second // SHUTDOWN_TIMEOUT of the worker
			takes   = 4 * time.Second
		)
		testenv.Terminate(t, st.workers[0].current(), exitTimeout) // nothing in flight
		w := st.workers[0]
		w.mu.Lock()
		w.env = append(slices.Clone(w.env), "SHUTDOWN_TIMEOUT="+short.String())
		w.mu.Unlock()
		st.restartWorker(t, 0, c)

		m := newWebhookMerchant(t, st, bag, "127.0.0.82", "drain-timeout")
		// Until the worker has exited, requests outlast SHUTDOWN_TIMEOUT; then they are answered at once.
		var slow atomic.Bool
		slow.Store(true)
		rcv := newSDReceiver(t, func() time.Duration {
			if slow.Load() {
				return takes
			}
			return 0
		})
		m.endpoint(t, rcv.url(), "charge.created", "charge.captured")
		for i := range charges {
			m.charge(t, fmt.Sprintf("drain-timeout-%d", i))
		}
		select {
		case <-rcv.started:
		case <-time.After(waitFloor):
			t.Fatalf("no delivery reached the receiver within %s", waitFloor)
		}
		sigAt, notReady, exitAt := sdWorkerDrain(t, st, short+sdExitSlack)
		slow.Store(false)
		// That the worker did not wait for the receiver shows below as a
		// delivery cut short (the receiver saw the sender go away before
		// its answer); how soon it exited is a figure, asserted at full
		// scale only.
		if d := exitAt.Sub(sigAt); d >= takes && chaosFull() {
			t.Errorf("the worker took %s to exit, want about SHUTDOWN_TIMEOUT (%s), less than the receiver's %s", d, short, takes)
		}
		// Wait for the receiver to see the sender go away.
		deadline := time.Now().Add(waitFloor)
		for {
			open := 0
			for _, h := range rcv.all() {
				if h.end.IsZero() {
					open++
				}
			}
			if open == 0 || time.Now().After(deadline) {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		var cut []sdHit
		recorded := map[string]string{}
		for _, h := range rcv.all() {
			if !h.answered && !h.end.IsZero() {
				cut = append(cut, h)
				recorded[h.deliveryID+" attempt "+h.attempt] = fmt.Sprintf("%q", sdAttempts(t, st, h.deliveryID)[h.attempt])
			}
		}
		if len(cut) == 0 {
			t.Errorf("no delivery was cut by the shutdown timeout")
		}
		inspector := st.redis.inspector()
		defer inspector.Close()
		queued := "unknown"
		if info, err := deliveryQueueInfo(inspector); err == nil {
			queued = fmt.Sprintf("pending %d, active %d, scheduled %d, retry %d", info.Pending, info.Active, info.Scheduled, info.Retry)
		}

		restartAt := time.Now()
		restart := st.restartWorker(t, 0, c)
		evs, took := sdAllReceived(t, m, rcv, 2*charges, restartAt, 30*time.Second)
		hits := rcv.all()
		lost, dup, requests := sdTally(t, evs, hits)
		if lost != 0 {
			t.Errorf("events lost: %d, want 0", lost)
		}
		var again []string
		for _, h := range cut {
			for _, l := range hits {
				if l.deliveryID == h.deliveryID && l.start.After(restartAt) {
					again = append(again, fmt.Sprintf("%s attempt %s -> attempt %s %+dms after the restart",
						h.deliveryID, h.attempt, l.attempt, l.start.Sub(restartAt).Milliseconds()))
					break
				}
			}
		}
		if len(again) != len(cut) {
			t.Errorf("%d deliveries cut by the shutdown, %d sent again after the restart: %v", len(cut), len(again), again)
		}
		t.Logf("SIGTERM -> worker /readyz 503 %s, exit 0 after %s (SHUTDOWN_TIMEOUT %s, receiver %s); %d deliveries cut, their attempts as recorded at exit: %v; "+
			"webhooks queue after the exit: %s; restarted in %s; re-run: %v; every event answered %s after the restart; %d events, %d requests, %d lost, %d received more than once",
			sdRel(notReady, sigAt), exitAt.Sub(sigAt).Round(time.Millisecond), short, takes, len(cut), recorded, queued,
			restart.Round(time.Millisecond), again, took.Round(time.Millisecond), len(evs), requests, lost, dup)
	})
	t.Logf("took %s (since the stack was ready: %s)", time.Since(began).Round(time.Millisecond), time.Since(ready).Round(time.Millisecond))
}

func sdRel(at, ref time.Time) string {
	if at.IsZero() {
		return "never seen"
	}
	return fmt.Sprintf("%+dms", at.Sub(ref).Milliseconds())
}
