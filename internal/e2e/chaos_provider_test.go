package e2e

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gatehouse-pay/gatehouse/internal/testenv"
	"github.com/gatehouse-pay/gatehouse/internal/testenv/harness"
)

// The stripe-mock the Stripe adapter is tested against (internal/providers/stripe).
const chaosStripeMockVersion = "v0.203.0"

// stripeMockPath finds stripe-mock: STRIPE_MOCK_BIN, the cache directory
// internal/providers/stripe installs it into, the Go bin directory or PATH.
// Without it the test is skipped, or fails when services are required.
func stripeMockPath(t *testing.T) string {
	t.Helper()
	var tried []string
	if bin := os.Getenv("STRIPE_MOCK_BIN"); bin != "" {
		tried = append(tried, bin)
	}
	if cache, err := os.UserCacheDir(); err == nil {
		tried = append(tried, filepath.Join(cache, "gatehouse", "tools", "stripe-mock@"+chaosStripeMockVersion, "stripe-mock"))
	}
	if out, err := exec.Command("go", "env", "GOBIN", "GOPATH").Output(); err == nil {
		lines := strings.Split(strings.TrimSpace(string(out)), "\n")
		if len(lines) == 2 {
			if lines[0] != "" {
				tried = append(tried, filepath.Join(lines[0], "stripe-mock"))
			}
			tried = append(tried, filepath.Join(lines[1], "bin", "stripe-mock"))
		}
	}
	for _, p := range tried {
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	if p, err := exec.LookPath("stripe-mock"); err == nil {
		return p
	}
	testenv.Missing(t, "stripe-mock not found in %v or on PATH; go install github.com/stripe/stripe-mock@%s", tried, chaosStripeMockVersion)
	return ""
}

// startStripeMockProcess runs stripe-mock on a free loopback port and returns its base URL.
func startStripeMockProcess(t *testing.T) string {
	t.Helper()
	base, _ := startStripeMock(t)
	return base
}

// startStripeMock is startStripeMockProcess that also returns the process,
// for a test that stops it.
func startStripeMock(t *testing.T) (string, *harness.Process) {
	t.Helper()
	bin := stripeMockPath(t)
	// Port 0 for both listeners (without -https-addr, HTTPS takes the fixed
	// 12112); stripe-mock prints the HTTP one it took.
	p := testenv.StartProcess(t, "stripe-mock", nil, []string{"PATH=" + os.Getenv("PATH")}, bin,
		"-http-addr", "127.0.0.1:0", "-https-addr", "127.0.0.1:0")
	t.Cleanup(func() { _ = p.Kill(time.Minute) })
	addr, err := harness.WaitOutput(p, 30*time.Second, func(line string) (string, bool) {
		return strings.CutPrefix(strings.TrimSpace(line), "Listening for HTTP at address: ")
	})
	if err != nil {
		t.Fatalf("stripe-mock: %v\n%s", err, p.Tail(4<<10))
	}
	base := "http://" + addr
	testenv.WaitReady(t, "stripe-mock at "+base, p, 30*time.Second, 50*time.Millisecond,
		harness.HTTPOK(http.DefaultClient, base+"/v1/balance", "Authorization", "Bearer sk_test_123"))
	return base, p
}

// Fault modes of the provider proxy, chosen by the charge's amount.
type providerFault struct {
	amount int64
	name   string
	// faults: how many authorization calls of a key get the fault (-1: all).
	faults int
	// booked: the fault hits after the provider answered (booked the
	// payment) rather than before the request reached it.
	booked bool
	// reset: the connection is reset; otherwise the answer is held past
	// PROVIDER_TIMEOUT, so the call times out.
	reset bool
}

// f5MaxAttempts is the worker's PROVIDER_MAX_ATTEMPTS in F5.
const f5MaxAttempts = 4

var providerFaults = []providerFault{
	{1100, "no fault", 0, false, false},
	{1101, "timeout after the provider booked it, once", 1, true, false},
	{1102, "timeout after the provider booked it, twice", 2, true, false},
	{1103, "reset after the provider booked it, once", 1, true, true},
	{1104, "reset before the request reached the provider, twice", 2, false, true},
	// Every attempt of the authorization task; the provider answers again
	// afterwards, when the charge:reverse task sends the request again.
	{1105, everyAttempt, f5MaxAttempts, true, false},
}

// authCall is what the proxy saw of one idempotency key of POST /v1/payment_intents.
type authCall struct {
	amount int64
	calls  int // requests with the key
	booked int // requests the provider answered 2xx (with one key, one payment)
	faults int // faults injected
}

// providerProxy sits between the worker's Stripe adapter and stripe-mock and
// injects the faults of providerFaults into authorizations (POST
// /v1/payment_intents); it records every idempotency key, and the keys of
// the releases (refunds, and cancellations of payment intents) the provider
// answered with 2xx.
type providerProxy struct {
	srv      *httptest.Server
	upstream string
	hold     time.Duration
	mu       sync.Mutex
	keys     map[string]*authCall
	released map[string]int
}

func newProviderProxy(t *testing.T, upstream string, hold time.Duration) *providerProxy {
	t.Helper()
	p := &providerProxy{upstream: upstream, hold: hold, keys: map[string]*authCall{}, released: map[string]int{}}
	client := &http.Client{Timeout: 30 * time.Second}
	p.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		var fault providerFault
		var call *authCall
		key := r.Header.Get("Idempotency-Key")
		if r.Method == http.MethodPost && r.URL.Path == "/v1/payment_intents" {
			form, _ := url.ParseQuery(string(body))
			amount, _ := strconv.ParseInt(form.Get("amount"), 10, 64)
			p.mu.Lock()
			call = p.keys[key]
			if call == nil {
				call = &authCall{amount: amount}
				p.keys[key] = call
			}
			call.calls++
			for _, f := range providerFaults {
				if f.amount == amount && (f.faults < 0 || call.calls <= f.faults) {
					fault = f
					call.faults++
				}
			}
			p.mu.Unlock()
		}
		reset := func() { resetConn(w) }
		if fault.name != "" && !fault.booked {
			reset()
			return
		}
		res, answer, ok := forward(w, r, client, p.upstream, body)
		if !ok {
			return
		}
		if call != nil && res.StatusCode/100 == 2 {
			p.mu.Lock()
			call.booked++
			p.mu.Unlock()
		}
		release := r.Method == http.MethodPost && (r.URL.Path == "/v1/refunds" ||
			strings.HasPrefix(r.URL.Path, "/v1/payment_intents/") && strings.HasSuffix(r.URL.Path, "/cancel"))
		if release && res.StatusCode/100 == 2 {
			p.mu.Lock()
			p.released[key]++
			p.mu.Unlock()
		}
		loseOrRelay(w, r, res, answer, fault.name != "", fault.reset, p.hold)
	}))
	t.Cleanup(p.srv.Close)
	return p
}

// releasedKeys returns how many releases the provider answered 2xx, by idempotency key.
func (p *providerProxy) releasedKeys() map[string]int {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make(map[string]int, len(p.released))
	for k, v := range p.released {
		out[k] = v
	}
	return out
}

func (p *providerProxy) snapshot() map[string]authCall {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make(map[string]authCall, len(p.keys))
	for k, v := range p.keys {
		out[k] = *v
	}
	return out
}

// everyAttempt is the fault whose charges run out of attempts although the
// provider booked their payment on the first.
const everyAttempt = "timeout after the provider booked it, every attempt"

// failedAfterBookingFixed: a charge whose last authorization attempt times
// out fails provider_unavailable, although the provider may have booked the
// payment; the charge:reverse task written with the failure releases it
// (refund or void under gh_<charge>_reverse). With it false the test expected
// such payments to stay taken.
const failedAfterBookingFixed = true

// TestChaosProviderFaults is F5: provider calls time out or are reset, before
// and after the provider booked the payment. No charge is charged twice (one
// provider key per charge, so the provider books at most once), and every
// payment the provider booked for a charge that ended failed is released.
func TestChaosProviderFaults(t *testing.T) {
	chaosParallel(t)
	const (
		// Long enough that stripe-mock under the full load answers within
		// it: a timeout that is not injected would make a fault scenario
		// run out of attempts.
		timeout     = 1500 * time.Millisecond
		maxAttempts = f5MaxAttempts
	)
	perFault := chaosScale(3, 30)
	mock := startStripeMockProcess(t)
	proxy := newProviderProxy(t, mock, timeout+time.Second)
	st, m := chaosStack(t, "127.0.0.68", stackOptions{env: []string{
		"STRIPE_SECRET_KEY=sk_test_chaos", "STRIPE_API_BASE=" + proxy.srv.URL,
		"PROVIDER_TIMEOUT=" + timeout.String(), fmt.Sprintf("PROVIDER_MAX_ATTEMPTS=%d", maxAttempts),
	}})

	// Charges: every fault through Stripe, and the sandbox's own slow and
	// flaky cards, whose calls are counted in sandbox_ledger.
	type sent struct {
		id       string
		fault    string
		provider string
	}
	var charges []sent
	for _, f := range providerFaults {
		for i := range perFault {
			body := strings.Replace(cardBody("4242424242424242", true, f.amount, fmt.Sprintf("f5-%d-%d", f.amount, i)), `"provider":"sandbox"`, `"provider":"stripe"`, 1)
			e := m.do(t, http.MethodPost, "/v1/charges", body)
			mustExpect(t, e, http.StatusCreated, "")
			charges = append(charges, sent{chargeFrom(t, e), f.name, "stripe"})
		}
	}
	sandboxCases := map[string]string{"4000000000000606": "sandbox: no answer, every attempt", "4000000000000507": "sandbox: unavailable twice"}
	for card, name := range sandboxCases {
		for i := range perFault {
			e := m.do(t, http.MethodPost, "/v1/charges", cardBody(card, true, 1200, fmt.Sprintf("f5-%s-%d", card, i)))
			mustExpect(t, e, http.StatusCreated, "")
			charges = append(charges, sent{chargeFrom(t, e), name, "sandbox"})
		}
	}
	ids := make([]string, len(charges))
	for i, c := range charges {
		ids[i] = c.id
	}
	final, _ := m.waitCharges(t, ids, func(_, s string) bool { return s == "captured" || s == "failed" }, 90*time.Second)

	// A failed charge's charge:reverse task runs after the failure: wait
	// until no reverse is left in the outbox (bounded), then count.
	reverseStart := time.Now()
	for deadline := time.Now().Add(90 * time.Second); ; {
		n := queryInt(t, st.db, `SELECT count(*) FROM outbox WHERE task_type = 'charge:reverse'`)
		if n == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Errorf("charge:reverse tasks left in the outbox after 90s: %d", n)
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	reverseTook := time.Since(reverseStart)

	calls := proxy.snapshot()
	releases := proxy.releasedKeys()
	ledger := map[string]chargeRow{}
	for _, r := range chargeRows(t, st.db, m.id) {
		ledger[r.ID] = r
	}
	type tally struct{ captured, failed, failedBooked, released, calls int }
	per := map[string]*tally{}
	double, failedBooked, unreleased, capturedUnbooked := 0, 0, 0, 0
	for _, c := range charges {
		tl := per[c.fault]
		if tl == nil {
			tl = &tally{}
			per[c.fault] = tl
		}
		status := final[c.id].Status
		var booked, released bool
		switch c.provider {
		case "stripe":
			// Every authorization request of this charge used one key.
			var keys []string
			for k, v := range calls {
				if strings.Contains(k, c.id) {
					keys = append(keys, k)
					tl.calls += v.calls
				}
			}
			want := "gh_" + c.id + "_authorize"
			if len(keys) != 1 || keys[0] != want {
				double++
				t.Errorf("charge %s (%s): provider keys %v, want only %s", c.id, c.fault, keys, want)
			}
			booked = calls[want].booked > 0
			released = releases["gh_"+c.id+"_reverse"] > 0
		case "sandbox":
			booked = ledger[c.id].Booked
			tl.calls += int(ledger[c.id].Calls)
			released = queryInt(t, st.db, `SELECT count(*) FROM sandbox_ledger WHERE idempotency_key = $1 AND reference IS NOT NULL`, "gh_"+c.id+"_reverse") > 0
		}
		switch status {
		case "captured":
			tl.captured++
			if !booked {
				capturedUnbooked++
				t.Errorf("charge %s (%s): captured, but the provider booked no payment", c.id, c.fault)
			}
		case "failed":
			tl.failed++
			if booked {
				tl.failedBooked++
				failedBooked++
				if released {
					tl.released++
					continue
				}
				unreleased++
				if !failedAfterBookingFixed && c.fault == everyAttempt {
					continue // the known violation, checked below
				}
				t.Errorf("charge %s (%s): failed (%s), but the provider booked a payment for it and it was never released: the customer is charged for a failed charge",
					c.id, c.fault, chaosDeref(final[c.id].FailureCode))
			}
		default:
			t.Errorf("charge %s (%s): status %s", c.id, c.fault, status)
		}
		if released && status != "failed" {
			t.Errorf("charge %s (%s): %s, but its payment was released", c.id, c.fault, status)
		}
	}
	if tl := per[everyAttempt]; !failedAfterBookingFixed {
		if tl.failedBooked-tl.released == 0 {
			t.Errorf("%s: no charge failed with a payment left booked: the violation is fixed, set failedAfterBookingFixed", everyAttempt)
		} else {
			t.Logf("KNOWN VIOLATION (failedAfterBookingFixed = false): %s: %d of %d charges failed provider_unavailable although the provider booked their payment",
				everyAttempt, tl.failedBooked-tl.released, perFault)
		}
	} else if tl.failedBooked == 0 {
		// The scenario must still exercise the release: the provider booked
		// these payments before every attempt timed out.
		t.Errorf("%s: no charge failed with a booked payment: the scenario no longer tests the release", everyAttempt)
	}
	for _, f := range providerFaults {
		if f.faults >= 0 && f.faults < maxAttempts && per[f.name].captured != perFault {
			t.Errorf("%s: %d of %d charges captured, want all: the retries with the same key should go through", f.name, per[f.name].captured, perFault)
		}
	}
	for _, f := range append(providerFaults, providerFault{name: sandboxCases["4000000000000606"]}, providerFault{name: sandboxCases["4000000000000507"]}) {
		tl := per[f.name]
		t.Logf("F5 %s: %d charges, captured %d, failed %d, failed with a booked payment %d (released %d), provider calls %d",
			f.name, perFault, tl.captured, tl.failed, tl.failedBooked, tl.released, tl.calls)
	}
	t.Logf("F5 figures: charges %d, double charges %d, failed while the provider booked a payment %d, released %d, left booked %d, captured without a payment %d; reverses drained %s after the last charge settled",
		len(charges), double, failedBooked, failedBooked-unreleased, unreleased, capturedUnbooked, reverseTook.Round(time.Millisecond))
}

func chaosDeref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// resetConn closes the connection under w with a TCP reset: the caller's
// request was received and its answer is lost.
func resetConn(w http.ResponseWriter) {
	conn, _, err := w.(http.Hijacker).Hijack()
	if err != nil {
		return
	}
	if tc, ok := conn.(*net.TCPConn); ok {
		_ = tc.SetLinger(0) // close with RST
	}
	conn.Close()
}

// forward sends a fault proxy's request, with the body it already read, to
// upstream, and returns the provider's answer read whole; the request goes on
// even if the caller gives up, as a provider would finish it. A transport
// error is answered 502 and ok is false.
func forward(w http.ResponseWriter, r *http.Request, client *http.Client, upstream string, body []byte) (res *http.Response, answer []byte, ok bool) {
	req, _ := http.NewRequestWithContext(context.WithoutCancel(r.Context()), r.Method, upstream+r.URL.RequestURI(), bytes.NewReader(body))
	req.Header = r.Header.Clone()
	res, err := client.Do(req)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return nil, nil, false
	}
	answer, _ = io.ReadAll(res.Body)
	res.Body.Close()
	return res, answer, true
}

// loseOrRelay ends a fault proxy's handling of a request the provider
// answered with res and answer: when lose is set the answer is lost, by a
// reset or by holding it past the caller's timeout (hold); otherwise it is
// relayed as the provider sent it.
func loseOrRelay(w http.ResponseWriter, r *http.Request, res *http.Response, answer []byte, lose, reset bool, hold time.Duration) {
	if lose {
		if reset {
			resetConn(w)
			return
		}
		select { // the caller gives up first
		case <-r.Context().Done():
			return
		case <-time.After(hold):
		}
	}
	for k, v := range res.Header {
		if k != "Content-Length" {
			w.Header()[k] = v
		}
	}
	w.WriteHeader(res.StatusCode)
	_, _ = w.Write(answer)
}
