package e2e

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/jackc/pgx/v5"

	"github.com/gatehouse-pay/gatehouse/internal/webhooks"
)

// The compressed schedule and timeout the webhook stack runs with.
var (
	whSchedule = []time.Duration{0, 300 * time.Millisecond, 600 * time.Millisecond, 900 * time.Millisecond, 1200 * time.Millisecond}
	whTimeout  = 500 * time.Millisecond
)

// whE2ETimeout is WEBHOOK_TIMEOUT in TestWebhooksEndToEnd, whose scenarios
// count every request: an attempt to a receiver that answers at once ends
// well within it even on a loaded machine, so no attempt is made again for a
// timeout the test did not mean.
const whE2ETimeout = 2 * time.Second

// whEarly is how early an attempt may start before its next_attempt_at: the
// Deliverer sends when less than 500 ms remain (internal/webhooks/deliver.go),
// because asynq schedules retries in whole seconds.
const whEarly = 500 * time.Millisecond

func whScheduleEnv() string {
	var parts []string
	for _, d := range whSchedule {
		parts = append(parts, d.String())
	}
	return strings.Join(parts, ",")
}

var webhooksStackEnv = []string{
	// The API checks endpoint URLs with it, and stamps tasks with WEBHOOK_TIMEOUT.
	"WEBHOOK_ALLOW_PRIVATE_NETWORKS=true",
	"WEBHOOK_RETRY_SCHEDULE=" + whScheduleEnv(),
	"WEBHOOK_TIMEOUT=" + whTimeout.String(),
	"PROVIDER_TIMEOUT=2s",
	"PROVIDER_RETRY_BASE=100ms",
	"PROVIDER_RETRY_MAX=400ms",
	"RATE_LIMIT_CHARGES=5000/1m",
	"RATE_LIMIT_CHARGES_MERCHANT=5000/1m",
	"RATE_LIMIT_DEFAULT=100000/1m",
	"RATE_LIMIT_LOGIN=1000/5m",
}

var webhooksWorkerEnv = []string{
	"OUTBOX_SWEEP_AFTER=2s",
	"RECONCILE_AFTER=5s",
	"SANDBOX_LATENCY=5ms",
}

// hit is one request a receiver got.
type hit struct {
	at     time.Time
	header http.Header
	body   []byte
}

func (h hit) eventID() string    { return h.header.Get("X-Service-Event-Id") }
func (h hit) deliveryID() string { return h.header.Get("X-Service-Delivery-Id") }
func (h hit) attempt() int {
	n, _ := strconv.Atoi(h.header.Get("X-Service-Delivery-Attempt"))
	return n
}

// receiver is an HTTP server on 127.0.0.1 that records every request (headers
// and raw body) and answers as respond says; nth counts the requests of the
// same delivery, from 1.
type receiver struct {
	name string
	srv  *httptest.Server
	mu   sync.Mutex
	hits []hit
	per  map[string]int
	// respond returns the status and how long to wait before answering.
	respond atomic.Pointer[func(h hit, nth int) (int, time.Duration, http.Header)]
}

func newReceiver(t *testing.T, name string, respond func(h hit, nth int) (int, time.Duration, http.Header)) *receiver {
	t.Helper()
	r := &receiver{name: name, per: map[string]int{}}
	r.setRespond(respond)
	r.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, _ := io.ReadAll(req.Body)
		if req.Header.Get("X-Service-Event-Type") != "" {
			checkEventBody(t, body)
		}
		h := hit{at: time.Now(), header: req.Header.Clone(), body: body}
		r.mu.Lock()
		r.hits = append(r.hits, h)
		r.per[h.deliveryID()]++
		nth := r.per[h.deliveryID()]
		r.mu.Unlock()
		status, delay, extra := (*r.respond.Load())(h, nth)
		if delay > 0 {
			select {
			case <-time.After(delay):
			case <-req.Context().Done():
				return
			}
		}
		for k, v := range extra {
			w.Header()[k] = v
		}
		w.WriteHeader(status)
		fmt.Fprintf(w, "%s says %d", name, status)
	}))
	t.Cleanup(r.srv.Close)
	return r
}

func (r *receiver) setRespond(f func(h hit, nth int) (int, time.Duration, http.Header)) {
	r.respond.Store(&f)
}

func (r *receiver) url() string { return r.srv.URL + "/hooks/" + r.name }

func (r *receiver) all() []hit {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.hits)
}

func (r *receiver) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.hits)
}

// of returns the hits of one delivery, in arrival order.
func (r *receiver) of(deliveryID string) []hit {
	var out []hit
	for _, h := range r.all() {
		if h.deliveryID() == deliveryID {
			out = append(out, h)
		}
	}
	return out
}

func always(status int) func(hit, int) (int, time.Duration, http.Header) {
	return func(hit, int) (int, time.Duration, http.Header) { return status, 0, nil }
}

// Webhook objects as the API shows them.
type endpointJSON struct {
	ID             string   `json:"id"`
	Object         string   `json:"object"`
	URL            string   `json:"url"`
	Events         []string `json:"events"`
	Active         bool     `json:"active"`
	Status         string   `json:"status"`
	DisabledReason *string  `json:"disabled_reason"`
	DisabledAt     *string  `json:"disabled_at"`
}

type attemptJSON struct {
	Attempt      int     `json:"attempt"`
	StartedAt    string  `json:"started_at"`
	DurationMS   int     `json:"duration_ms"`
	StatusCode   *int    `json:"status_code"`
	Error        *string `json:"error"`
	ResponseBody *string `json:"response_body"`
}

type deliveryJSON struct {
	ID            string        `json:"id"`
	Endpoint      string        `json:"endpoint"`
	EventID       string        `json:"event_id"`
	EventType     string        `json:"event_type"`
	Status        string        `json:"status"`
	Test          bool          `json:"test"`
	Attempts      []attemptJSON `json:"attempts"`
	NextAttemptAt *string       `json:"next_attempt_at"`
}

func (d deliveryJSON) codes() []string {
	var out []string
	for _, a := range d.Attempts {
		if a.StatusCode != nil {
			out = append(out, strconv.Itoa(*a.StatusCode))
		} else {
			out = append(out, "-")
		}
	}
	return out
}

// whMerchant is one merchant of the webhook test with a secret key.
type whMerchant struct {
	*payments
	id      string
	secrets *secretBag
}

// secretBag collects every webhook secret the test was shown, for the leak scan.
type secretBag struct {
	mu   sync.Mutex
	list []string
}

func (b *secretBag) add(s string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.list = append(b.list, s)
}

func (b *secretBag) all() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Clone(b.list)
}

// newWebhookMerchant creates a merchant, signs in and makes a secret key; the
// merchant talks to the stack from client address ip.
func newWebhookMerchant(t *testing.T, st *stack, bag *secretBag, ip, name string) *whMerchant {
	t.Helper()
	c := newClient(t, ip)
	id, token := st.signUp(t, c, name, "Webhooks "+name)
	k := st.newKey(t, c, token, "webhooks")
	return &whMerchant{payments: &payments{st: st, c: c, key: k.SecretKey}, id: id, secrets: bag}
}

// endpoint registers url for events and returns the endpoint and its secret.
func (m *whMerchant) endpoint(t *testing.T, url string, events ...string) (endpointJSON, string) {
	t.Helper()
	b, _ := json.Marshal(map[string]any{"url": url, "events": events})
	e := m.do(t, http.MethodPost, "/v1/me/webhook_endpoints", string(b))
	mustExpect(t, e, http.StatusCreated, "")
	var out struct {
		Endpoint endpointJSON `json:"webhook_endpoint"`
		Secret   string       `json:"webhook_secret"`
	}
	decode(t, e, &out)
	if !strings.HasPrefix(out.Secret, "whsec_") || out.Endpoint.URL != url {
		t.Fatalf("create endpoint: %s", e.body)
	}
	m.secrets.add(out.Secret)
	return out.Endpoint, out.Secret
}

func (m *whMerchant) charge(t *testing.T, tag string) string {
	t.Helper()
	e := m.do(t, http.MethodPost, "/v1/charges", cardBody("4242424242424242", true, 1500, tag))
	mustExpect(t, e, http.StatusCreated, "")
	var ch chargeJSON
	decode(t, e, &ch)
	return ch.ID
}

// deliveries returns every delivery of the endpoint (newest first).
func (m *whMerchant) deliveries(t *testing.T, endpoint string) []deliveryJSON {
	t.Helper()
	return listAll(t, func(query string) exchange {
		return m.do(t, http.MethodGet, "/v1/me/webhook_endpoints/"+endpoint+"/deliveries?"+query, "")
	}, func(d deliveryJSON) string { return d.ID })
}

// listAll reads every page of a list (newest first): get answers one
// page for a query (limit, starting_after), id names an item for the next
// page's cursor.
func listAll[T any](t *testing.T, get func(query string) exchange, id func(T) string) []T {
	t.Helper()
	var out []T
	after := ""
	for {
		q := url.Values{"limit": {"100"}}
		if after != "" {
			q.Set("starting_after", after)
		}
		e := get(q.Encode())
		mustExpect(t, e, http.StatusOK, "")
		var list struct {
			Data    []T  `json:"data"`
			HasMore bool `json:"has_more"`
		}
		decode(t, e, &list)
		out = append(out, list.Data...)
		if !list.HasMore || len(list.Data) == 0 {
			return out
		}
		after = id(list.Data[len(list.Data)-1])
	}
}

// waitDeliveries polls the endpoint's deliveries until done holds for all of
// them (and there are want of them), and returns them by id.
func (m *whMerchant) waitDeliveries(t *testing.T, endpoint string, want int, done func(deliveryJSON) bool, within time.Duration) map[string]deliveryJSON {
	t.Helper()
	within = patience(within)
	deadline := time.Now().Add(within)
	for {
		ds := m.deliveries(t, endpoint)
		ok := len(ds) == want
		for _, d := range ds {
			ok = ok && done(d)
		}
		if ok {
			out := map[string]deliveryJSON{}
			for _, d := range ds {
				out[d.ID] = d
			}
			return out
		}
		if time.Now().After(deadline) {
			var s []string
			for _, d := range ds {
				s = append(s, fmt.Sprintf("%s %s %s attempts %v", d.ID, d.EventType, d.Status, d.codes()))
			}
			t.Fatalf("endpoint %s: deliveries not done after %s (want %d): %s", endpoint, within, want, strings.Join(s, "; "))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func isStatus(s string) func(deliveryJSON) bool {
	return func(d deliveryJSON) bool { return d.Status == s }
}

// checkSigned checks the headers of one request against api/openapi.yaml with the
// endpoint's secret(s): current signs X-Service-Signature; previous, if set,
// X-Service-Signature-Previous and the second webhook-signature value.
func checkSigned(t *testing.T, h hit, current, previous string) {
	t.Helper()
	hd := h.header
	if ct := hd.Get("Content-Type"); ct != "application/json" {
		t.Errorf("Content-Type %q, want application/json", ct)
	}
	if !webhooks.VerifyServiceSignature(h.body, current, hd.Get("X-Service-Signature")) {
		t.Errorf("attempt %d: X-Service-Signature %q does not verify with the endpoint's secret", h.attempt(), hd.Get("X-Service-Signature"))
	}
	if vals := hd.Values("X-Service-Signature"); len(vals) != 1 {
		t.Errorf("X-Service-Signature carries %d values, want exactly 1", len(vals))
	}
	if hd.Get("webhook-id") != hd.Get("X-Service-Event-Id") {
		t.Errorf("webhook-id %q, X-Service-Event-Id %q: want equal", hd.Get("webhook-id"), hd.Get("X-Service-Event-Id"))
	}
	// The time the attempt was signed: not after the receiver got it, and
	// not from long before (an earlier attempt's, the event's). The attempt
	// is signed before it waits for a slot and is sent, so on a loaded
	// machine it may be seconds older than the request.
	ts, err := strconv.ParseInt(hd.Get("webhook-timestamp"), 10, 64)
	if err != nil || ts > h.at.Unix() || h.at.Sub(time.Unix(ts, 0)) > 30*time.Second {
		t.Errorf("webhook-timestamp %q: want the Unix time of the attempt (received at %d)", hd.Get("webhook-timestamp"), h.at.Unix())
	}
	sigs := strings.Split(hd.Get("webhook-signature"), " ")
	if !webhooks.VerifyStandard(h.body, current, hd.Get("webhook-id"), hd.Get("webhook-timestamp"), sigs[0], h.at, 5*time.Minute) {
		t.Errorf("webhook-signature %q: the first value does not verify with the current secret", hd.Get("webhook-signature"))
	}
	if previous == "" {
		if len(sigs) != 1 || hd.Get("X-Service-Signature-Previous") != "" {
			t.Errorf("without a rotation: webhook-signature %q, X-Service-Signature-Previous %q; want one value and no header",
				hd.Get("webhook-signature"), hd.Get("X-Service-Signature-Previous"))
		}
		return
	}
	if !webhooks.VerifyServiceSignature(h.body, previous, hd.Get("X-Service-Signature-Previous")) {
		t.Errorf("X-Service-Signature-Previous %q does not verify with the previous secret", hd.Get("X-Service-Signature-Previous"))
	}
	if webhooks.VerifyServiceSignature(h.body, previous, hd.Get("X-Service-Signature")) {
		t.Errorf("X-Service-Signature is made with the previous secret, want the new one")
	}
	if len(sigs) != 2 || !webhooks.VerifyStandard(h.body, previous, hd.Get("webhook-id"), hd.Get("webhook-timestamp"), sigs[1], h.at, 5*time.Minute) {
		t.Errorf("webhook-signature %q: want two values, the second made with the previous secret", hd.Get("webhook-signature"))
	}
}

// checkBody checks that the request body is the event with the header's id and type.
func checkBody(t *testing.T, h hit) map[string]any {
	t.Helper()
	var b map[string]any
	if err := json.Unmarshal(h.body, &b); err != nil {
		t.Errorf("body is not JSON: %v: %s", err, h.body)
		return nil
	}
	if b["id"] != h.eventID() || b["event_type"] != h.header.Get("X-Service-Event-Type") {
		t.Errorf("body id %v type %v; headers X-Service-Event-Id %q X-Service-Event-Type %q", b["id"], b["event_type"], h.eventID(), h.header.Get("X-Service-Event-Type"))
	}
	return b
}

// checkSpacing checks that attempt i+1 came no earlier than the schedule
// allows after attempt i, and returns the gaps.
func checkSpacing(t *testing.T, hits []hit) []time.Duration {
	t.Helper()
	var gaps []time.Duration
	for i := 1; i < len(hits); i++ {
		gap := hits[i].at.Sub(hits[i-1].at)
		gaps = append(gaps, gap.Round(time.Millisecond))
		if i < len(whSchedule) && gap < whSchedule[i]-whEarly {
			t.Errorf("attempt %d came %s after attempt %d; the schedule asks for %s (less %s of slack)", i+1, gap, i, whSchedule[i], whEarly)
		}
	}
	return gaps
}

// TestWebhooksEndToEnd delivers events through two API replicas and the real
// worker to receivers on 127.0.0.1: retries on the compressed schedule,
// failures, timeouts and redirects, manual retry and recovery, test
// deliveries and secret rotation. TestWebhooksWorkerKilled kills the worker
// on a stack of its own.
func TestWebhooksEndToEnd(t *testing.T) {
	parallel(t)
	began := time.Now()
	env := append(slices.Clone(webhooksStackEnv), "WEBHOOK_TIMEOUT="+whE2ETimeout.String())
	st := newStack(t, stackOptions{env: env, workerEnv: webhooksWorkerEnv},
		fmt.Sprintf("schedule %s, timeout %s", whScheduleEnv(), whE2ETimeout))
	ready := time.Now()

	// The scenarios run one after another on the stack: parallel subtests
	// would queue for a -parallel slot behind the package's other tests
	// while the stack sits idle.
	bag := &secretBag{}
	t.Run("retried_until_it_succeeds", func(t *testing.T) { retriedUntilSuccess(t, st, bag) })
	t.Run("failures_retry_and_recover", func(t *testing.T) { failuresRetryRecover(t, st, bag) })
	t.Run("test_delivery", func(t *testing.T) { testDelivery(t, st, bag) })
	t.Run("rotated_secret", func(t *testing.T) { rotatedSecret(t, st, bag) })
	checkNoWebhookSecrets(t, st, bag.all())
	t.Logf("webhooks end-to-end took %s (since the stack was ready: %s)", time.Since(began).Round(time.Millisecond), time.Since(ready).Round(time.Millisecond))
}

// TestWebhooksWorkerKilled kills the worker with SIGKILL three times while
// 1,000 events are delivered to two slow receivers and an ordered endpoint
// (docs/reliability.md I1, F1). It has a stack of its own, so the kills do
// not cut into TestWebhooksEndToEnd's schedules and the two run side by side.
//
// Its attempts get killTimeout, not whTimeout: the test is about kills, and
// on a loaded machine an attempt to a 200 ms receiver can outlast 500 ms. A
// timeout cuts the endpoint's window to one attempt at a time, and a
// backlog put back at that pace takes minutes to drain.
func TestWebhooksWorkerKilled(t *testing.T) {
	parallel(t)
	const killTimeout = 5 * time.Second
	env := append(slices.Clone(webhooksStackEnv), "WEBHOOK_TIMEOUT="+killTimeout.String())
	st := newStack(t, stackOptions{env: env, workerEnv: webhooksWorkerEnv},
		fmt.Sprintf("schedule %s, timeout %s", whScheduleEnv(), killTimeout))
	bag := &secretBag{}
	webhookFaultTest(t, st, bag)
	checkNoWebhookSecrets(t, st, bag.all())
}

// retriedUntilSuccess: a receiver that fails twice gets the same event three
// times, then nothing more.
func retriedUntilSuccess(t *testing.T, st *stack, bag *secretBag) {
	m := newWebhookMerchant(t, st, bag, "127.0.0.40", "retry")
	rcv := newReceiver(t, "flaky", func(_ hit, nth int) (int, time.Duration, http.Header) {
		if nth <= 2 {
			return http.StatusInternalServerError, 0, nil
		}
		return http.StatusOK, 0, nil
	})
	ep, secret := m.endpoint(t, rcv.url(), "charge.created")
	chargeID := m.charge(t, "retry")

	got := m.waitDeliveries(t, ep.ID, 1, isStatus("succeeded"), 20*time.Second)
	time.Sleep(2 * whSchedule[len(whSchedule)-1]) // anything more would come by now
	var d deliveryJSON
	for _, x := range got {
		d = x
	}
	hits := rcv.all()
	if len(hits) != 3 {
		t.Fatalf("receiver got %d requests, want 3 (2 failures, 1 success)", len(hits))
	}
	// The event as the API stores it.
	evs := m.events(t)
	if len(evs) == 0 {
		t.Fatal("no events")
	}
	var created eventJSON
	for _, e := range evs {
		if e.EventType == "charge.created" && e.charge(t).ID == chargeID {
			created = e
		}
	}
	for i, h := range hits {
		if h.eventID() != created.ID || h.attempt() != i+1 || h.deliveryID() != d.ID || h.header.Get("X-Service-Event-Type") != "charge.created" {
			t.Errorf("request %d: event %q attempt %d delivery %q type %q; want event %s attempt %d delivery %s",
				i+1, h.eventID(), h.attempt(), h.deliveryID(), h.header.Get("X-Service-Event-Type"), created.ID, i+1, d.ID)
		}
		if string(h.body) != string(hits[0].body) {
			t.Errorf("request %d: the body differs from the first attempt's", i+1)
		}
		if h.header.Get("X-Service-Test") != "" {
			t.Errorf("request %d: X-Service-Test on a real event", i+1)
		}
		checkBody(t, h)
		checkSigned(t, h, secret, "")
	}
	if !sameJSON(hits[0].body, created.raw) {
		t.Errorf("delivered body\n%s\nis not the event GET /v1/events shows\n%s", hits[0].body, created.raw)
	}
	gaps := checkSpacing(t, hits)
	if d.Status != "succeeded" || d.EventID != created.ID || d.NextAttemptAt != nil || len(d.Attempts) != 3 ||
		!slices.Equal(d.codes(), []string{"500", "500", "200"}) {
		t.Errorf("delivery log: status %s event %s next %v codes %v; want succeeded, %s, null, [500 500 200]", d.Status, d.EventID, d.NextAttemptAt, d.codes(), created.ID)
	}
	for i, a := range d.Attempts {
		if a.Attempt != i+1 || (i < 2) != (a.Error != nil) {
			t.Errorf("attempt log %d: %+v", i+1, a)
		}
	}
	t.Logf("3 attempts of event %s, gaps %v (schedule %v)", created.ID, gaps, whSchedule[1:3])
}

// failuresRetryRecover: an always-500, a too-slow and a redirecting receiver;
// every delivery fails after 5 attempts; then a manual retry and a recovery.
func failuresRetryRecover(t *testing.T, st *stack, bag *secretBag) {
	m := newWebhookMerchant(t, st, bag, "127.0.0.41", "failures")
	canary := newReceiver(t, "canary", always(http.StatusOK))
	fail := newReceiver(t, "fail", always(http.StatusInternalServerError))
	slow := newReceiver(t, "slow", func(hit, int) (int, time.Duration, http.Header) { return http.StatusOK, 2 * whE2ETimeout, nil })
	redirect := newReceiver(t, "redirect", func(hit, int) (int, time.Duration, http.Header) {
		return http.StatusMovedPermanently, 0, http.Header{"Location": {canary.url()}}
	})
	since := time.Now().UTC().Add(-time.Second)
	epFail, _ := m.endpoint(t, fail.url(), "charge.created")
	epSlow, _ := m.endpoint(t, slow.url(), "charge.created")
	epRedirect, _ := m.endpoint(t, redirect.url(), "charge.created")
	m.charge(t, "failures-1")
	m.charge(t, "failures-2")

	failed := map[string]map[string]deliveryJSON{}
	for _, ep := range []endpointJSON{epFail, epSlow, epRedirect} {
		failed[ep.ID] = m.waitDeliveries(t, ep.ID, 2, isStatus("failed"), 30*time.Second)
	}
	time.Sleep(2 * whSchedule[len(whSchedule)-1]) // a 6th attempt would come by now

	for _, c := range []struct {
		name string
		ep   endpointJSON
		rcv  *receiver
	}{{"always 500", epFail, fail}, {"slower than the timeout", epSlow, slow}, {"301", epRedirect, redirect}} {
		for id, d := range failed[c.ep.ID] {
			hits := c.rcv.of(id)
			if len(hits) != 5 || len(d.Attempts) != 5 {
				t.Errorf("%s: delivery %s: %d requests, %d logged attempts; want 5 and 5", c.name, id, len(hits), len(d.Attempts))
				continue
			}
			for i, h := range hits {
				if h.attempt() != i+1 || h.eventID() != d.EventID {
					t.Errorf("%s: request %d: attempt %d event %s, want %d %s", c.name, i+1, h.attempt(), h.eventID(), i+1, d.EventID)
				}
			}
			gaps := checkSpacing(t, hits)
			for _, a := range d.Attempts {
				if a.Error == nil || *a.Error == "" {
					t.Errorf("%s: attempt %d logged without an error: %+v", c.name, a.Attempt, a)
				}
				switch c.name {
				case "always 500":
					if a.StatusCode == nil || *a.StatusCode != 500 {
						t.Errorf("always 500: attempt %d status %v", a.Attempt, a.StatusCode)
					}
				case "slower than the timeout":
					// It ended by the timeout: not before it, and with no
					// status, so before the receiver's answer (sent at twice
					// the timeout), however slow the machine.
					if a.StatusCode != nil || a.DurationMS < int(whE2ETimeout/time.Millisecond)-50 {
						t.Errorf("slow: attempt %d status %v after %d ms; want no status, about %s", a.Attempt, a.StatusCode, a.DurationMS, whE2ETimeout)
					}
				case "301":
					if a.StatusCode == nil || *a.StatusCode != 301 {
						t.Errorf("301: attempt %d status %v, want 301 (not followed)", a.Attempt, a.StatusCode)
					}
				}
			}
			if id == firstKey(failed[c.ep.ID]) {
				e := ""
				if d.Attempts[0].Error != nil {
					e = *d.Attempts[0].Error
				}
				t.Logf("%s: codes %v, gaps %v, first error %q, durations %v ms", c.name, d.codes(), gaps, e, durations(d))
			}
		}
	}
	if n := canary.count(); n != 0 {
		t.Errorf("the redirect target got %d requests; redirects must not be followed", n)
	}

	// A manual retry starts a new chain: the receiver now answers 200.
	fail.setRespond(always(http.StatusOK))
	retryID := firstKey(failed[epFail.ID])
	e := m.do(t, http.MethodPost, "/v1/webhook_deliveries/"+retryID+"/retry", "")
	mustExpect(t, e, http.StatusAccepted, "")
	var rd deliveryJSON
	decode(t, e, &rd)
	if rd.Status != "pending" || len(rd.Attempts) != 5 {
		t.Errorf("retry answer: status %s with %d attempts, want pending with 5", rd.Status, len(rd.Attempts))
	}
	expect(t, m.do(t, http.MethodPost, "/v1/webhook_deliveries/"+retryID+"/retry", ""), http.StatusConflict, "invalid_state")
	after := m.waitDeliveries(t, epFail.ID, 2, func(d deliveryJSON) bool {
		return d.ID != retryID || d.Status == "succeeded"
	}, 10*time.Second)
	if d := after[retryID]; len(d.Attempts) != 6 || d.Attempts[5].StatusCode == nil || *d.Attempts[5].StatusCode != 200 {
		t.Errorf("after the retry: %d attempts, codes %v; want 6 ending in 200", len(d.Attempts), d.codes())
	}
	if hits := fail.of(retryID); len(hits) != 6 || hits[5].attempt() != 6 || hits[5].eventID() != failed[epFail.ID][retryID].EventID {
		t.Errorf("after the retry the receiver has %d requests of the delivery; want 6, the last attempt 6 of the same event", len(hits))
	}
	expect(t, m.do(t, http.MethodPost, "/v1/webhook_deliveries/"+retryID+"/retry", ""), http.StatusConflict, "invalid_state")

	// Recover: count, then re-send, the failed ones since the start.
	recoverBody := fmt.Sprintf(`{"since":%q}`, since.Format(time.RFC3339Nano))
	count := func(ep endpointJSON, query, body string) int {
		t.Helper()
		e := m.do(t, http.MethodPost, "/v1/me/webhook_endpoints/"+ep.ID+"/recover"+query, body)
		mustExpect(t, e, http.StatusOK, "")
		var r struct {
			Count  int  `json:"count"`
			DryRun bool `json:"dry_run"`
		}
		decode(t, e, &r)
		return r.Count
	}
	if n := count(epFail, "?dry_run=true", recoverBody); n != 1 {
		t.Errorf("recover dry run on the always-500 endpoint: count %d, want 1", n)
	}
	if n := count(epSlow, "?dry_run=true", recoverBody); n != 2 {
		t.Errorf("recover dry run on the slow endpoint: count %d, want 2", n)
	}
	if n := count(epSlow, "?dry_run=true", fmt.Sprintf(`{"since":%q}`, time.Now().Add(time.Minute).UTC().Format(time.RFC3339))); n != 0 {
		t.Errorf("recover dry run since a minute from now: count %d, want 0", n)
	}
	before := slow.count()
	time.Sleep(300 * time.Millisecond)
	if slow.count() != before {
		t.Errorf("a dry run sent requests")
	}
	slow.setRespond(always(http.StatusNoContent))
	if n := count(epSlow, "", recoverBody); n != 2 {
		t.Errorf("recover on the slow endpoint: count %d, want 2", n)
	}
	recovered := m.waitDeliveries(t, epSlow.ID, 2, isStatus("succeeded"), 10*time.Second)
	for id, d := range recovered {
		if len(d.Attempts) != 6 || len(slow.of(id)) != 6 {
			t.Errorf("recovered delivery %s: %d logged attempts, %d requests; want 6 and 6", id, len(d.Attempts), len(slow.of(id)))
		}
	}
	if n := count(epSlow, "?dry_run=true", recoverBody); n != 0 {
		t.Errorf("recover dry run after the recovery: %d, want 0", n)
	}
	if n := count(epFail, "", recoverBody); n != 1 {
		t.Errorf("recover on the always-500 endpoint: %d, want 1", n)
	}
	m.waitDeliveries(t, epFail.ID, 2, isStatus("succeeded"), 10*time.Second)
}

func firstKey[V any](m map[string]V) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	if len(keys) == 0 {
		return ""
	}
	return keys[0]
}

func durations(d deliveryJSON) []int {
	var out []int
	for _, a := range d.Attempts {
		out = append(out, a.DurationMS)
	}
	return out
}

// testDelivery: POST /:id/test sends a sample of the first subscribed type
// with X-Service-Test: true; the sample is not an event.
func testDelivery(t *testing.T, st *stack, bag *secretBag) {
	m := newWebhookMerchant(t, st, bag, "127.0.0.42", "test")
	rcv := newReceiver(t, "test", always(http.StatusOK))
	ep, secret := m.endpoint(t, rcv.url(), "refund.succeeded", "charge.created")
	e := m.do(t, http.MethodPost, "/v1/me/webhook_endpoints/"+ep.ID+"/test", "")
	mustExpect(t, e, http.StatusAccepted, "")
	var d deliveryJSON
	decode(t, e, &d)
	if !d.Test || d.Status != "pending" || d.EventType != "refund.succeeded" {
		t.Errorf("test delivery: %s", e.body)
	}
	m.waitDeliveries(t, ep.ID, 1, isStatus("succeeded"), 10*time.Second)
	hits := rcv.all()
	if len(hits) != 1 {
		t.Fatalf("receiver got %d requests, want 1", len(hits))
	}
	h := hits[0]
	if h.header.Get("X-Service-Test") != "true" || h.eventID() != d.EventID || h.deliveryID() != d.ID || h.attempt() != 1 {
		t.Errorf("test request headers: %v", h.header)
	}
	checkSigned(t, h, secret, "")
	b := checkBody(t, h)
	data, _ := b["data"].(map[string]any)
	if data["object"] != "refund" || data["refund"] == nil || data["charge"] == nil {
		t.Errorf("test body of refund.succeeded: %s", h.body)
	}
	for _, ev := range m.events(t) {
		if ev.ID == d.EventID {
			t.Errorf("the test event %s is listed in /v1/events", d.EventID)
		}
	}
}

// rotatedSecret: after rotate_secret the next delivery is signed with the new
// secret and, as previous, the old one.
func rotatedSecret(t *testing.T, st *stack, bag *secretBag) {
	m := newWebhookMerchant(t, st, bag, "127.0.0.43", "rotate")
	rcv := newReceiver(t, "rotate", always(http.StatusOK))
	ep, old := m.endpoint(t, rcv.url(), "charge.created")
	m.charge(t, "rotate-1")
	m.waitDeliveries(t, ep.ID, 1, isStatus("succeeded"), 10*time.Second)
	if hits := rcv.all(); len(hits) != 1 {
		t.Fatalf("before the rotation: %d requests, want 1", len(hits))
	} else {
		checkSigned(t, hits[0], old, "")
	}

	e := m.do(t, http.MethodPost, "/v1/me/webhook_endpoints/"+ep.ID+"/rotate_secret", "")
	mustExpect(t, e, http.StatusOK, "")
	var r struct {
		Secret string `json:"webhook_secret"`
	}
	decode(t, e, &r)
	if !strings.HasPrefix(r.Secret, "whsec_") || r.Secret == old {
		t.Fatalf("rotate_secret: %s", e.body)
	}
	m.charge(t, "rotate-2")
	m.waitDeliveries(t, ep.ID, 2, isStatus("succeeded"), 10*time.Second)
	hits := rcv.all()
	if len(hits) != 2 {
		t.Fatalf("after the rotation: %d requests, want 2", len(hits))
	}
	checkSigned(t, hits[1], r.Secret, old)
}

// webhookFaultTest: 500 charges (charge.created and charge.captured: 1,000
// events) to two receivers that take 200 ms each and an ordered endpoint,
// while the worker is killed with SIGKILL three times; every event must
// reach each endpoint at least once, the ordered one in sequence.
func webhookFaultTest(t *testing.T, st *stack, bag *secretBag) {
	const (
		steadyCharges = 50
		steadyPace    = 50 * time.Millisecond
		faultCharges  = 500
		senders       = 6
		pace          = 10 * time.Millisecond
		kills         = 3
		killEvery     = 700 * time.Millisecond
		receiverTakes = 200 * time.Millisecond
	)
	// The drain is waited for, not timed: it fails only when nothing more
	// arrives for stallLimit, so it catches a lost event, not a slow drain,
	// which the progress lines show. On two cores with -race binaries it
	// took 50-58 s (2026-11-24): about 15 deliveries/s per 200 ms receiver
	// after the kills, most deliveries put back at least once at the
	// endpoint cap, and the ordered endpoint's 1,100 more deliveries sharing
	// the worker; beside another package's tests, more than 120 s.
	m := newWebhookMerchant(t, st, bag, "127.0.0.44", "fault")
	slowOK := func(hit, int) (int, time.Duration, http.Header) { return http.StatusOK, receiverTakes, nil }
	rcvs := []*receiver{newReceiver(t, "fault-a", slowOK), newReceiver(t, "fault-b", slowOK)}
	for _, r := range rcvs {
		m.endpoint(t, r.url(), "charge.created", "charge.captured")
	}
	// A third endpoint asks for order: it must see each charge's
	// charge.created (sequence 1) before its charge.captured (2), kills or not.
	inOrder := newReceiver(t, "fault-ordered", always(http.StatusOK))
	oe := m.do(t, http.MethodPost, "/v1/me/webhook_endpoints",
		`{"url":"`+inOrder.url()+`","events":["charge.created","charge.captured"],"ordered":true}`)
	mustExpect(t, oe, http.StatusCreated, "")
	endpoints := len(rcvs) + 1
	inspector := st.redis.inspector()
	defer inspector.Close()

	createCharges := func(n int, tag string, pace time.Duration, during func()) []string {
		results := make([]exchange, n)
		errs := make([]error, n)
		next := make(chan int)
		var wg sync.WaitGroup
		for s := range senders {
			wg.Go(func() {
				for i := range next {
					results[i], errs[i] = sendWith(m.c, http.MethodPost, st.replicas[(i+s)%2]+"/v1/charges", m.key, cardBody("4242424242424242", true, 1000, tag))
				}
			})
		}
		go func() {
			tick := time.NewTicker(pace)
			defer tick.Stop()
			for i := range n {
				next <- i
				<-tick.C
			}
			close(next)
		}()
		if during != nil {
			during()
		}
		wg.Wait()
		var ids []string
		for i, e := range results {
			if errs[i] != nil {
				t.Errorf("charge %d: %v", i, errs[i])
				continue
			}
			st.check(t, e)
			if expect(t, e, http.StatusCreated, "") {
				var ch chargeJSON
				decode(t, e, &ch)
				ids = append(ids, ch.ID)
			}
		}
		if len(ids) != n {
			t.Fatalf("%d of %d charges created", len(ids), n)
		}
		return ids
	}

	// eventsOf returns the charges' events: id -> created_at.
	eventsOf := func(ids []string) map[string]time.Time {
		ctx, cancel := dbCtx()
		defer cancel()
		rows, err := st.db.Pool.Query(ctx, `SELECT id::text, created_at FROM events
			WHERE merchant_id = $1 AND body->'data'->'charge'->>'id' = ANY($2::text[])`, m.id, ids)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		out := map[string]time.Time{}
		for rows.Next() {
			var id string
			var at time.Time
			if err := rows.Scan(&id, &at); err != nil {
				t.Fatal(err)
			}
			out[id] = at
		}
		return out
	}
	// missing counts (event, receiver) pairs not received yet.
	missing := func(evs map[string]time.Time) int {
		n := 0
		for _, r := range rcvs {
			got := map[string]bool{}
			for _, h := range r.all() {
				got[h.eventID()] = true
			}
			for id := range evs {
				if !got[id] {
					n++
				}
			}
		}
		return n
	}
	// waitAll waits until the charges' events are all written and each has
	// reached both receivers; it fails when nothing more arrives for
	// stallLimit.
	waitAll := func(ids []string, wantEvents int, from time.Time, logProgress bool) (map[string]time.Time, time.Duration) {
		lastLog := time.Now()
		p := newProgress()
		for {
			evs := eventsOf(ids)
			left := missing(evs)
			if len(evs) == wantEvents && left == 0 {
				return evs, time.Since(from)
			}
			if logProgress && time.Since(lastLog) >= 10*time.Second {
				lastLog = time.Now()
				t.Logf("%s after the last kill: %d of %d events written, %d (event, endpoint) pairs not received; delivery tasks in asynq: %s",
					time.Since(from).Round(time.Second), len(evs), wantEvents, left, queueStates(inspector))
			}
			if p.stalled(wantEvents - len(evs) + left) {
				t.Fatalf("%s, nothing more for %s: %d of %d events written, %d (event, endpoint) pairs never received; delivery tasks in asynq: %s; the merchant's deliveries: %s",
					time.Since(from).Round(time.Second), stallLimit, len(evs), wantEvents, left, queueStates(inspector), deliveryStates(t, st, m.id))
			}
			time.Sleep(200 * time.Millisecond)
		}
	}

	// Steady part, no fault: commit-to-first-attempt latency.
	rescheduledBefore := deliverRescheduled(t, st, m.c)
	steadyStart := time.Now()
	// Paced under the worker's capacity (20 tasks at once, 100 ms per receiver: 200 deliveries/s;
	// 4 deliveries per charge), so the latency is the pipeline's, not a queue's.
	steadyIDs := createCharges(steadyCharges, "wh-steady", steadyPace, nil)
	steadyEvents, steadyTook := waitAll(steadyIDs, 2*steadyCharges, steadyStart, false)
	var lat []time.Duration
	for _, r := range rcvs {
		first := map[string]time.Time{}
		for _, h := range r.all() {
			if at, ok := first[h.eventID()]; !ok || h.at.Before(at) {
				first[h.eventID()] = h.at
			}
		}
		for id, created := range steadyEvents {
			lat = append(lat, first[id].Sub(created))
		}
	}
	slices.Sort(lat)
	bounced := deliverRescheduled(t, st, m.c) - rescheduledBefore
	pct := func(p float64) time.Duration {
		return lat[min(len(lat)-1, int(p*float64(len(lat))))].Round(time.Millisecond)
	}
	t.Logf("no fault: %d charges, %d events to 2 receivers (%s each) delivered in %s; commit-to-first-attempt latency min %s, p50 %s, p99 %s, max %s; "+
		"delivery tasks put back without an attempt (per-endpoint cap or early): %.0f for %d deliveries",
		steadyCharges, len(steadyEvents), receiverTakes, steadyTook.Round(time.Millisecond), lat[0].Round(time.Millisecond), pct(0.50), pct(0.99),
		lat[len(lat)-1].Round(time.Millisecond), bounced, 2*len(steadyEvents))
	before := map[*receiver]int{}
	for _, r := range rcvs {
		before[r] = r.count()
	}

	// Fault part.
	var lastKill time.Time
	faultStart := time.Now()
	rc := newClient(t, "127.0.0.45")
	ids := createCharges(faultCharges, "wh-fault", pace, func() {
		time.Sleep(400 * time.Millisecond)
		for k := range kills {
			if k > 0 {
				time.Sleep(killEvery)
			}
			st.killWorker(t, 0)
			lastKill = time.Now()
			info, _ := deliveryQueueInfo(inspector)
			active := -1
			if info != nil {
				active = info.Active
			}
			restart := st.restartWorker(t, 0, rc)
			t.Logf("kill %d at %s: %d delivery tasks left active in asynq; worker ready again %s later; received so far %d+%d",
				k+1, lastKill.Sub(faultStart).Round(time.Millisecond), active, restart.Round(time.Millisecond), rcvs[0].count()-before[rcvs[0]], rcvs[1].count()-before[rcvs[1]])
		}
	})
	t.Logf("%d charges created in %s", len(ids), time.Since(faultStart).Round(time.Millisecond))
	evs, drained := waitAll(ids, 2*faultCharges, lastKill, true)

	// Figures, from what the receivers saw.
	lost := missing(evs)
	total, unique, dupEvents := 0, 0, 0
	for _, r := range rcvs {
		perEvent := map[string]int{}
		deliveryEvent := map[string]string{}
		for _, h := range r.all()[before[r]:] {
			if h.eventID() == "" || h.eventID() != checkBody(t, h)["id"] {
				t.Errorf("%s: a request whose X-Service-Event-Id %q is not its body's id", r.name, h.eventID())
			}
			if prev, ok := deliveryEvent[h.deliveryID()]; ok && prev != h.eventID() {
				t.Errorf("%s: delivery %s carried events %s and %s", r.name, h.deliveryID(), prev, h.eventID())
			}
			deliveryEvent[h.deliveryID()] = h.eventID()
			if _, ok := evs[h.eventID()]; ok {
				perEvent[h.eventID()]++
				total++
			}
		}
		unique += len(perEvent)
		for _, n := range perEvent {
			if n > 1 {
				dupEvents++
			}
		}
	}
	t.Logf("fault: %d events x 2 endpoints; events lost %d; %d requests for %d (event, endpoint) pairs: duplicate rate %.2f%% (%d pairs received more than once, every duplicate with the same event id); drained %s after the last kill",
		len(evs), lost, total, unique, 100*float64(total-unique)/float64(max(unique, 1)), dupEvents, drained.Round(time.Millisecond))
	if lost != 0 {
		t.Errorf("events lost: %d, want 0", lost)
	}
	if len(evs) != 2*faultCharges {
		t.Errorf("events written: %d, want %d", len(evs), 2*faultCharges)
	}
	// Postgres agrees: every delivery, to each of the three endpoints,
	// succeeded. A receiver sees a request before the worker records its
	// answer, and an attempt a killed worker made but never recorded is made
	// again once asynq's lease on its task expires and the sweeper resends
	// it: so wait for the records, until they stop coming.
	evIDs := make([]string, 0, len(evs))
	for id := range evs {
		evIDs = append(evIDs, id)
	}
	var succeeded, other int
	for p := newProgress(); ; time.Sleep(250 * time.Millisecond) {
		ctx, cancel := dbCtx()
		err := st.db.Pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE status = 'succeeded'), count(*) FILTER (WHERE status <> 'succeeded')
			FROM webhook_deliveries WHERE merchant_id = $1 AND event_id = ANY($2::uuid[])`, m.id, evIDs).Scan(&succeeded, &other)
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		if (succeeded == endpoints*len(evs) && other == 0) || p.stalled(endpoints*len(evs)-succeeded) {
			break
		}
	}
	if succeeded != endpoints*len(evs) || other != 0 {
		t.Errorf("deliveries of the fault events: %d succeeded, %d not; want %d and 0", succeeded, other, endpoints*len(evs))
	}
	checkOrdered(t, inOrder, steadyEvents, evs)
}

// checkOrdered checks what an ordered endpoint's receiver saw: every event
// at least once, and for each charge, sequence 1 (charge.created) only
// before the first arrival of sequence 2 (charge.captured): a duplicate of
// the earlier event may come again only until the later one was sent.
func checkOrdered(t *testing.T, r *receiver, sets ...map[string]time.Time) {
	t.Helper()
	type arrival struct {
		seq int
		at  time.Time
	}
	perCharge := map[string][]arrival{}
	got := map[string]bool{}
	for _, h := range r.all() {
		seq, err := strconv.Atoi(h.header.Get("X-Service-Sequence"))
		if err != nil {
			t.Errorf("%s: X-Service-Sequence %q", r.name, h.header.Get("X-Service-Sequence"))
			continue
		}
		body := checkBody(t, h)
		charge, _ := body["data"].(map[string]any)["charge"].(map[string]any)["id"].(string)
		perCharge[charge] = append(perCharge[charge], arrival{seq, h.at})
		got[h.eventID()] = true
	}
	missingEvents := 0
	for _, set := range sets {
		for id := range set {
			if !got[id] {
				missingEvents++
			}
		}
	}
	outOfOrder := 0
	for charge, as := range perCharge {
		laterSeen := false
		for _, a := range as {
			switch {
			case a.seq == 2:
				laterSeen = true
			case a.seq == 1 && laterSeen:
				outOfOrder++
				t.Errorf("%s: charge %s: sequence 1 arrived after sequence 2", r.name, charge)
			}
		}
	}
	t.Logf("ordered endpoint: %d charges, %d requests, events missing %d, out of order %d", len(perCharge), r.count(), missingEvents, outOfOrder)
	if missingEvents != 0 {
		t.Errorf("%s: %d events never received", r.name, missingEvents)
	}
}

// queueStates sums the delivery queues' tasks by state, for a log line.
func queueStates(inspector *asynq.Inspector) string {
	info, err := deliveryQueueInfo(inspector)
	if err != nil {
		return err.Error()
	}
	return fmt.Sprintf("%d pending, %d active, %d scheduled, %d retry, %d archived",
		info.Pending, info.Active, info.Scheduled, info.Retry, info.Archived)
}

// deliveryStates counts a merchant's deliveries by status and number of
// attempts, with the most frequent errors of the failed ones' attempts, for
// a failure message: a delivery that ended failed after its last attempt is
// not a lost event.
func deliveryStates(t *testing.T, st *stack, merchant string) string {
	t.Helper()
	ctx, cancel := dbCtx()
	defer cancel()
	rows, err := st.db.Pool.Query(ctx, `
		SELECT d.status || ' after ' || d.attempts || ' attempts: ' || count(*)
		FROM webhook_deliveries d WHERE d.merchant_id = $1
		GROUP BY d.status, d.attempts ORDER BY d.status, d.attempts`, merchant)
	if err != nil {
		return err.Error()
	}
	byStatus, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return err.Error()
	}
	rows, err = st.db.Pool.Query(ctx, `
		SELECT coalesce(a.error, 'status ' || a.status_code::text, 'none') || ': ' || count(*)
		FROM webhook_attempts a JOIN webhook_deliveries d ON d.id = a.delivery_id
		WHERE d.merchant_id = $1 AND d.status = 'failed'
		GROUP BY 1 ORDER BY count(*) DESC LIMIT 3`, merchant)
	if err != nil {
		return err.Error()
	}
	errs, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return err.Error()
	}
	return strings.Join(byStatus, ", ") + "; failed deliveries' attempts: " + strings.Join(errs, ", ")
}

// checkNoWebhookSecrets looks for the webhook secrets (the base64 key after
// whsec_) in every text column of the database, every Redis value and the
// processes' logs (docs/reliability.md I6, B5).
func checkNoWebhookSecrets(t *testing.T, st *stack, secrets []string) {
	t.Helper()
	if len(secrets) == 0 {
		t.Fatal("no webhook secrets collected")
	}
	ctx, cancel := dbCtx()
	defer cancel()
	var dump string
	err := st.db.Pool.QueryRow(ctx, `SELECT concat_ws(' ',
		(SELECT string_agg(w::text, ' ') FROM webhook_endpoints w),
		(SELECT string_agg(d::text, ' ') FROM webhook_deliveries d),
		(SELECT string_agg(a::text, ' ') FROM webhook_attempts a),
		(SELECT string_agg(e::text, ' ') FROM events e),
		(SELECT string_agg(o::text, ' ') FROM outbox o))`).Scan(&dump)
	if err != nil {
		t.Fatal(err)
	}
	var values []string
	for k, v := range st.redis.entries(t) {
		values = append(append(values, k), v...)
	}
	redisDump := strings.Join(values, " ")
	logs := st.logs()
	hits := 0
	for _, sec := range secrets {
		key := strings.TrimPrefix(sec, "whsec_")
		for where, blob := range map[string]string{"the database": dump, "Redis": redisDump, "the process logs": logs} {
			if strings.Contains(blob, key) {
				hits++
				t.Errorf("a webhook secret (whsec_%s...) is in %s", key[:6], where)
			}
		}
	}
	if strings.Contains(logs, "whsec_") {
		hits++
		t.Errorf("the process logs hold a whsec_ string")
	}
	t.Logf("webhook secret scan: %d secrets, database %d bytes, Redis %d values, logs %d bytes: %d hits", len(secrets), len(dump), len(values), len(logs), hits)
}

// deliverRescheduled reads from the worker's metrics how many webhook:deliver
// tasks ended rescheduled (a *RetryIn: after a failed attempt, or put back
// without one).
func deliverRescheduled(t *testing.T, st *stack, c *http.Client) float64 {
	t.Helper()
	e := st.do(t, c, http.MethodGet, st.worker+"/metrics", "", "")
	for _, line := range strings.Split(string(e.body), "\n") {
		if strings.HasPrefix(line, "gatehouse_jobs_processed_total{") && strings.Contains(line, `outcome="rescheduled"`) &&
			strings.Contains(line, `type="webhook:deliver"`) {
			v, _ := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
			return v
		}
	}
	return 0
}
