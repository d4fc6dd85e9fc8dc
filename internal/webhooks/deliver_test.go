package webhooks_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gatehouse-pay/gatehouse/internal/apperr"
	"github.com/gatehouse-pay/gatehouse/internal/keyring"
	"github.com/gatehouse-pay/gatehouse/internal/webhooks"
)

// The default schedule of api/openapi.yaml: attempt 1 at once, then 5 min, 30 min,
// 2 h and 24 h after the previous failure.
var defaultSchedule = []time.Duration{0, 5 * time.Minute, 30 * time.Minute, 2 * time.Hour, 24 * time.Hour}

const (
	deliveryID = "0193a5c2-7f2a-7d11-8e9f-0a1b2c3d4e5f"
	eventID    = "0193a5c2-7f25-7c10-b1d2-e3f4a5b6c7d8"
	endpointID = "we_06gvgpgd01qhpcd8cjb64k1jg0"
	taskID     = "webhook:deliver:" + deliveryID
)

var eventBody = []byte(`{"id":"` + eventID + `","object":"event","event_type":"charge.captured","created_at":"2026-11-22T01:17:13.912Z","data":{"object":"charge","charge":{"id":"0193a5c2-7f24-7000-8000-000000000001","amount":2000}}}`)

// clock is the injected time: it moves only when the test says so.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

func (c *clock) set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = t
}

// fakeStore holds one delivery, its endpoint, its body and the outbox, and
// applies attempt records the way internal/store does: only to a pending
// delivery with Attempt-1 attempts.
type fakeStore struct {
	webhooks.Store // the API-side methods are not used by the Deliverer: calling one panics

	mu       sync.Mutex
	delivery webhooks.Delivery
	endpoint webhooks.Endpoint
	body     []byte
	tasks    map[string]bool
	records  []webhooks.AttemptRecord
	deleted  []string
	finishes int // FinishEvent calls
	workErr  error
	// other is a second delivery, to another endpoint.
	other         webhooks.Delivery
	otherEndpoint webhooks.Endpoint
	health        []webhooks.Health
	// unannounced answers FailingUnannounced; before is what it was asked.
	unannounced []string
	before      time.Time
}

func (s *fakeStore) FailingUnannounced(_ context.Context, before time.Time, limit int) ([]string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.before = before
	return s.unannounced[:min(limit, len(s.unannounced))], nil
}

func (s *fakeStore) UpdateHealth(_ context.Context, h webhooks.Health) (webhooks.HealthResult, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.health = append(s.health, h)
	return webhooks.HealthResult{Disabled: h.Disable != ""}, nil
}

func (s *fakeStore) DeliveryForWork(_ context.Context, id string) (webhooks.Delivery, webhooks.Endpoint, []byte, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.workErr != nil {
		return webhooks.Delivery{}, webhooks.Endpoint{}, nil, s.workErr
	}
	if id == s.other.ID && id != "" {
		return s.other, s.otherEndpoint, bytes.Clone(s.body), nil
	}
	if id != s.delivery.ID {
		return webhooks.Delivery{}, webhooks.Endpoint{}, nil, apperr.NotFound("webhook_delivery")
	}
	d := s.delivery
	d.Log = append([]webhooks.Attempt(nil), s.delivery.Log...)
	return d, s.endpoint, bytes.Clone(s.body), nil
}

func (s *fakeStore) RecordAttempt(_ context.Context, r webhooks.AttemptRecord) (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.records = append(s.records, r)
	d := &s.delivery
	if r.DeliveryID != d.ID || d.Status != webhooks.StatusPending || d.Attempts != r.Attempt.Attempt-1 {
		return false, nil
	}
	d.Status, d.Attempts, d.ChainAttempts, d.NextAttemptAt = r.Status, r.Attempt.Attempt, r.ChainAttempts, r.NextAttemptAt
	d.Log = append(d.Log, r.Attempt)
	if r.DoneTask != "" {
		delete(s.tasks, r.DoneTask)
	}
	if r.NewTask {
		s.tasks[webhooks.Task(r.DeliveryID).ID()] = true
	}
	return true, nil
}

// EventFirsts: the one delivery, if it waits for its first attempt and was
// not handed off, as DeliveryForWork returns it.
func (s *fakeStore) EventFirsts(_ context.Context, event string) ([]webhooks.Work, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.workErr != nil {
		return nil, s.workErr
	}
	d := s.delivery
	if d.EventID != event || d.Status != webhooks.StatusPending || d.Attempts > 0 || s.tasks[webhooks.Task(d.ID).ID()] {
		return nil, nil
	}
	d.Log = append([]webhooks.Attempt(nil), s.delivery.Log...)
	return []webhooks.Work{{Delivery: d, Endpoint: s.endpoint, Body: bytes.Clone(s.body)}}, nil
}

func (s *fakeStore) FinishEvent(_ context.Context, event string, handOff []string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.finishes++
	for _, id := range handOff {
		s.tasks[webhooks.Task(id).ID()] = true
	}
	delete(s.tasks, webhooks.EventTask(event).ID())
	return nil
}

func (s *fakeStore) DeleteTask(_ context.Context, id string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.deleted = append(s.deleted, id)
	delete(s.tasks, id)
	return nil
}

func (s *fakeStore) state() (webhooks.Delivery, map[string]bool, []webhooks.AttemptRecord) {
	s.mu.Lock()
	defer s.mu.Unlock()
	tasks := map[string]bool{}
	for k, v := range s.tasks {
		tasks[k] = v
	}
	return s.delivery, tasks, append([]webhooks.AttemptRecord(nil), s.records...)
}

// fakeSender records every POST and answers with answer(n), n counting from 1.
type fakeSender struct {
	mu     sync.Mutex
	sent   []webhooks.Outgoing
	answer func(n int) webhooks.Response
}

func (f *fakeSender) Send(_ context.Context, o webhooks.Outgoing) webhooks.Response {
	f.mu.Lock()
	o.Body = bytes.Clone(o.Body)
	h := map[string]string{}
	for k, v := range o.Headers {
		h[k] = v
	}
	o.Headers = h
	f.sent = append(f.sent, o)
	n := len(f.sent)
	f.mu.Unlock()
	if f.answer == nil {
		return webhooks.Response{StatusCode: 200, Duration: 20 * time.Millisecond}
	}
	return f.answer(n)
}

func (f *fakeSender) posts() []webhooks.Outgoing {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]webhooks.Outgoing(nil), f.sent...)
}

func answer(code int, d time.Duration) func(int) webhooks.Response {
	return func(int) webhooks.Response { return webhooks.Response{StatusCode: code, Duration: d} }
}

// rig is a Deliverer over fakes.
type rig struct {
	t      *testing.T
	keys   *keyring.Keyring
	clock  *clock
	store  *fakeStore
	sender *fakeSender
	d      *webhooks.Deliverer
	secret string
}

func newRig(t *testing.T, schedule []time.Duration) *rig {
	t.Helper()
	keys, err := keyring.New(bytes.Repeat([]byte{0x5a}, 32))
	if err != nil {
		t.Fatal(err)
	}
	secret, err := webhooks.NewSecret()
	if err != nil {
		t.Fatal(err)
	}
	sealed, err := keys.Seal(keyring.PurposeWebhook, []byte(secret), []byte(endpointID))
	if err != nil {
		t.Fatal(err)
	}
	start := time.Date(2026, 11, 22, 1, 17, 14, 2_000_000, time.UTC)
	c := &clock{t: start}
	created := start.Add(-90 * time.Millisecond)
	st := &fakeStore{
		delivery: webhooks.Delivery{ID: deliveryID, EndpointID: endpointID, MerchantID: "mer_1", EventID: eventID,
			EventType: "charge.captured", Status: webhooks.StatusPending, NextAttemptAt: &created, CreatedAt: created, UpdatedAt: created},
		endpoint: webhooks.Endpoint{ID: endpointID, MerchantID: "mer_1", Environment: "sandbox", URL: "https://hooks.example.com/in",
			Events: []string{"charge.captured"}, Active: true, SecretSealed: sealed, CreatedAt: created, UpdatedAt: created},
		body:  bytes.Clone(eventBody),
		tasks: map[string]bool{taskID: true},
	}
	snd := &fakeSender{}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	return &rig{t: t, keys: keys, clock: c, store: st, sender: snd, secret: secret,
		d: webhooks.NewDeliverer(st, snd, keys, schedule, c.now, log, nil)}
}

// rotate gives the endpoint a new current secret, keeping the old one as
// previous until until; it returns the new secret.
func (r *rig) rotate(until time.Time) string {
	r.t.Helper()
	secret, err := webhooks.NewSecret()
	if err != nil {
		r.t.Fatal(err)
	}
	sealed, err := r.keys.Seal(keyring.PurposeWebhook, []byte(secret), []byte(endpointID))
	if err != nil {
		r.t.Fatal(err)
	}
	r.store.mu.Lock()
	defer r.store.mu.Unlock()
	r.store.endpoint.PreviousSecretSealed = r.store.endpoint.SecretSealed
	r.store.endpoint.SecretSealed = sealed
	r.store.endpoint.PreviousSecretUntil = &until
	return secret
}

func (r *rig) deliver() error {
	r.t.Helper()
	return r.d.Deliver(context.Background(), deliveryID)
}

// withinJitter reports whether a delay of the retry schedule is the
// schedule's delay plus at most 10 %.
func withinJitter(got, want time.Duration) bool {
	return got >= want && got <= want+want/10
}

// retryIn returns the delay of a *RetryIn, failing the test for anything else.
func retryIn(t *testing.T, err error) time.Duration {
	t.Helper()
	var next *webhooks.RetryIn
	if !errors.As(err, &next) {
		t.Fatalf("Deliver: got %v, want *webhooks.RetryIn", err)
	}
	return next.Delay
}

func TestDeliverSucceedsOnFirstAttempt(t *testing.T) {
	r := newRig(t, defaultSchedule)
	r.sender.answer = func(int) webhooks.Response {
		return webhooks.Response{StatusCode: 204, Duration: 35 * time.Millisecond, Body: "thanks"}
	}
	if err := r.deliver(); err != nil {
		t.Fatalf("Deliver: got %v, want nil", err)
	}
	del, tasks, records := r.store.state()
	if got := len(r.sender.posts()); got != 1 {
		t.Fatalf("POSTs: got %d, want 1", got)
	}
	if del.Status != webhooks.StatusSucceeded || del.Attempts != 1 || del.NextAttemptAt != nil {
		t.Errorf("delivery: got status %s, attempts %d, next %v; want succeeded, 1, nil", del.Status, del.Attempts, del.NextAttemptAt)
	}
	if tasks[taskID] {
		t.Errorf("outbox task %s still there after success, want deleted", taskID)
	}
	if len(records) != 1 {
		t.Fatalf("attempt records: got %d, want 1", len(records))
	}
	rec := records[0]
	if rec.DoneTask != taskID || rec.ChainAttempts != 1 {
		t.Errorf("record: DoneTask %q, ChainAttempts %d; want %q, 1", rec.DoneTask, rec.ChainAttempts, taskID)
	}
	a := rec.Attempt
	if a.Attempt != 1 || !a.StartedAt.Equal(r.clock.now()) || a.DurationMS != 35 || a.StatusCode == nil || *a.StatusCode != 204 ||
		a.Error != nil || a.ResponseBody == nil || *a.ResponseBody != "thanks" {
		t.Errorf("attempt: got %+v (status %v, error %v), want attempt 1 at %s, 35 ms, 204, no error, body thanks",
			a, deref(a.StatusCode), derefS(a.Error), r.clock.now())
	}

	// A second run of the task (a duplicate from the queue) sends nothing.
	if err := r.deliver(); err != nil {
		t.Fatalf("Deliver of a succeeded delivery: got %v, want nil", err)
	}
	if got := len(r.sender.posts()); got != 1 {
		t.Errorf("POSTs after a duplicate task: got %d, want still 1", got)
	}
}

func deref(p *int) any {
	if p == nil {
		return nil
	}
	return *p
}

func derefS(p *string) any {
	if p == nil {
		return nil
	}
	return *p
}

// TestDeliverFollowsTheSchedule: each failure schedules the next attempt
// schedule[n] after it, plus a jitter of at most 10 %, never less; the fifth
// failure ends the delivery failed.
func TestDeliverFollowsTheSchedule(t *testing.T) {
	r := newRig(t, defaultSchedule)
	const took = 120 * time.Millisecond
	r.sender.answer = func(n int) webhooks.Response {
		switch n {
		case 2:
			return webhooks.Response{Duration: took, Err: errors.New("dial tcp 203.0.113.5:443: connect: connection refused"), Reason: "connection refused"}
		case 3:
			return webhooks.Response{StatusCode: 302, Duration: took, Err: errors.New("redirect not followed")}
		}
		return webhooks.Response{StatusCode: 500, Duration: took, Body: "oops"}
	}
	wantDelays := []time.Duration{5 * time.Minute, 30 * time.Minute, 2 * time.Hour, 24 * time.Hour}
	for n := 1; n <= 5; n++ {
		start := r.clock.now()
		err := r.deliver()
		del, tasks, records := r.store.state()
		if got := len(r.sender.posts()); got != n {
			t.Fatalf("after run %d: POSTs got %d, want %d", n, got, n)
		}
		if h := r.sender.posts()[n-1].Headers["X-Service-Delivery-Attempt"]; h != strconv.Itoa(n) {
			t.Errorf("attempt %d: X-Service-Delivery-Attempt %q, want %d", n, h, n)
		}
		rec := records[len(records)-1]
		if rec.Attempt.Attempt != n || rec.ChainAttempts != n {
			t.Errorf("attempt %d: record attempt %d chain %d", n, rec.Attempt.Attempt, rec.ChainAttempts)
		}
		if rec.Attempt.Error == nil {
			t.Errorf("attempt %d: a failure recorded without an error", n)
		}
		if n == 5 {
			if err != nil {
				t.Fatalf("after the 5th failure: Deliver got %v, want nil (final, no RetryIn)", err)
			}
			if del.Status != webhooks.StatusFailed || del.NextAttemptAt != nil || rec.NextAttemptAt != nil {
				t.Errorf("after the 5th failure: status %s, next %v; want failed, none", del.Status, del.NextAttemptAt)
			}
			if tasks[taskID] || rec.DoneTask != taskID {
				t.Errorf("after the 5th failure: task still present %v, DoneTask %q; want deleted", tasks[taskID], rec.DoneTask)
			}
			break
		}
		delay := retryIn(t, err)
		if !withinJitter(delay, wantDelays[n-1]) {
			t.Errorf("after failure %d: RetryIn %s, want %s to 10 %% more", n, delay, wantDelays[n-1])
		}
		wantNext := start.Add(took + delay)
		if del.Status != webhooks.StatusPending || del.NextAttemptAt == nil || !del.NextAttemptAt.Equal(wantNext) {
			t.Errorf("after failure %d: status %s next_attempt_at %v, want pending %s", n, del.Status, del.NextAttemptAt, wantNext)
		}
		if !tasks[taskID] || rec.DoneTask != "" {
			t.Errorf("after failure %d: the outbox task was deleted (DoneTask %q) while attempts remain", n, rec.DoneTask)
		}
		// The queue runs the task a little early: no attempt, rescheduled to the remaining time.
		r.clock.advance(took + delay - 10*time.Second)
		if got := retryIn(t, r.deliver()); got != 10*time.Second {
			t.Errorf("run 10s before attempt %d is due: RetryIn %s, want 10s", n+1, got)
		}
		if got := len(r.sender.posts()); got != n {
			t.Fatalf("a run before the due time sent a POST (%d POSTs, want %d)", got, n)
		}
		r.clock.advance(10 * time.Second)
	}
	del, _, _ := r.store.state()
	if len(del.Log) != 5 {
		t.Fatalf("attempt log: %d entries, want 5", len(del.Log))
	}
	codes := []any{}
	for _, a := range del.Log {
		codes = append(codes, deref(a.StatusCode))
	}
	t.Logf("attempt status codes: %v", codes)
	if del.Log[1].StatusCode != nil {
		t.Errorf("attempt 2 (connection refused): status code %v, want none", deref(del.Log[1].StatusCode))
	}
	if e := derefS(del.Log[1].Error); e != "connection refused" {
		t.Errorf("attempt 2: error %v, want the sender's reason", e)
	}
	if c := deref(del.Log[2].StatusCode); c != 302 {
		t.Errorf("attempt 3 (redirect): status code %v, want 302", c)
	}

	// A task run after the delivery failed sends nothing and deletes the task.
	if err := r.deliver(); err != nil {
		t.Fatalf("run after failed: %v", err)
	}
	if got := len(r.sender.posts()); got != 5 {
		t.Errorf("POSTs after the delivery failed: %d, want 5", got)
	}
}

// TestDeliverCompressedSchedule: a configured schedule is followed as given,
// its length being the number of attempts.
func TestDeliverCompressedSchedule(t *testing.T) {
	schedule := []time.Duration{0, 300 * time.Millisecond, 600 * time.Millisecond}
	r := newRig(t, schedule)
	r.sender.answer = answer(503, 0)
	for n := 1; n <= 2; n++ {
		got := retryIn(t, r.deliver())
		if !withinJitter(got, schedule[n]) {
			t.Errorf("after failure %d: RetryIn %s, want %s to 10 %% more", n, got, schedule[n])
		}
		r.clock.advance(got)
	}
	if err := r.deliver(); err != nil {
		t.Fatalf("third failure of a 3-attempt schedule: got %v, want nil", err)
	}
	if del, _, _ := r.store.state(); del.Status != webhooks.StatusFailed || del.Attempts != 3 {
		t.Errorf("got %s after %d attempts, want failed after 3", del.Status, del.Attempts)
	}
}

// TestDeliverManualRetryStartsANewChain: after POST .../retry the delivery is
// pending with chain_attempts 0; attempt numbers carry on, the schedule restarts.
func TestDeliverManualRetryStartsANewChain(t *testing.T) {
	r := newRig(t, defaultSchedule)
	r.store.mu.Lock()
	now := r.clock.now()
	r.store.delivery.Attempts, r.store.delivery.ChainAttempts, r.store.delivery.NextAttemptAt = 5, 0, &now
	r.store.mu.Unlock()
	r.sender.answer = answer(500, 0)
	if got := retryIn(t, r.deliver()); !withinJitter(got, 5*time.Minute) {
		t.Errorf("first failure of a new chain: RetryIn %s, want 5m to 5m30s", got)
	}
	posts := r.sender.posts()
	if len(posts) != 1 || posts[0].Headers["X-Service-Delivery-Attempt"] != "6" {
		t.Fatalf("POSTs %d, X-Service-Delivery-Attempt %q; want 1 POST, attempt 6", len(posts), posts[0].Headers["X-Service-Delivery-Attempt"])
	}
	if del, _, _ := r.store.state(); del.Attempts != 6 || del.ChainAttempts != 1 || del.Status != webhooks.StatusPending {
		t.Errorf("after the new chain's first failure: attempts %d chain %d status %s; want 6, 1, pending", del.Attempts, del.ChainAttempts, del.Status)
	}
}

// TestDeliverEnqueuedEarly: a task that runs before next_attempt_at (the
// sweeper re-enqueued it) is put back without an attempt.
func TestDeliverEnqueuedEarly(t *testing.T) {
	r := newRig(t, defaultSchedule)
	next := r.clock.now().Add(17 * time.Minute)
	r.store.mu.Lock()
	r.store.delivery.NextAttemptAt = &next
	r.store.mu.Unlock()
	if got := retryIn(t, r.deliver()); got != 17*time.Minute {
		t.Errorf("RetryIn %s, want 17m (the time left)", got)
	}
	del, tasks, records := r.store.state()
	if n := len(r.sender.posts()); n != 0 || len(records) != 0 {
		t.Errorf("early run: %d POSTs and %d records, want none", n, len(records))
	}
	if del.Status != webhooks.StatusPending || del.Attempts != 0 || !tasks[taskID] {
		t.Errorf("early run changed the delivery: %s, %d attempts, task %v", del.Status, del.Attempts, tasks[taskID])
	}
	// At the due time it is sent.
	r.clock.set(next)
	if err := r.deliver(); err != nil {
		t.Fatalf("at the due time: %v", err)
	}
	if n := len(r.sender.posts()); n != 1 {
		t.Errorf("at the due time: %d POSTs, want 1", n)
	}
}

// TestDeliverStoppedEndpoint: a delivery to a deleted or disabled endpoint
// fails at its next attempt without a request.
func TestDeliverStoppedEndpoint(t *testing.T) {
	for _, tc := range []struct {
		name string
		stop func(e *webhooks.Endpoint, now time.Time)
	}{
		{"deleted", func(e *webhooks.Endpoint, now time.Time) { e.DeletedAt, e.Active = &now, false }},
		{"disabled", func(e *webhooks.Endpoint, _ time.Time) { e.Active = false }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRig(t, defaultSchedule)
			r.store.mu.Lock()
			tc.stop(&r.store.endpoint, r.clock.now())
			r.store.mu.Unlock()
			if err := r.deliver(); err != nil {
				t.Fatalf("Deliver: got %v, want nil (final)", err)
			}
			del, tasks, records := r.store.state()
			if n := len(r.sender.posts()); n != 0 {
				t.Errorf("POSTs: %d, want 0", n)
			}
			if del.Status != webhooks.StatusFailed || tasks[taskID] || len(records) != 1 {
				t.Fatalf("got status %s, task present %v, %d records; want failed, deleted, 1", del.Status, tasks[taskID], len(records))
			}
			if a := records[0].Attempt; a.Attempt != 1 || a.Error == nil || a.StatusCode != nil {
				t.Errorf("recorded attempt %+v, want attempt 1 with an error and no status code", a)
			}
		})
	}
}

// TestDeliverStoreErrors: a database failure is returned for the queue to
// retry, not recorded as an attempt.
func TestDeliverStoreErrors(t *testing.T) {
	r := newRig(t, defaultSchedule)
	boom := errors.New("connection reset by peer")
	r.store.workErr = boom
	err := r.deliver()
	var next *webhooks.RetryIn
	if !errors.Is(err, boom) || errors.As(err, &next) {
		t.Errorf("Deliver with the store down: got %v, want the store's error", err)
	}
	if n := len(r.sender.posts()); n != 0 {
		t.Errorf("POSTs with the store down: %d", n)
	}
}

// TestDeliverHeaders: every header of api/openapi.yaml, over the exact body sent.
func TestDeliverHeaders(t *testing.T) {
	r := newRig(t, defaultSchedule)
	if err := r.deliver(); err != nil {
		t.Fatal(err)
	}
	o := r.sender.posts()[0]
	if o.URL != "https://hooks.example.com/in" {
		t.Errorf("URL %q", o.URL)
	}
	if !bytes.Equal(o.Body, eventBody) {
		t.Errorf("body sent:\n%s\nwant the stored event body byte for byte:\n%s", o.Body, eventBody)
	}
	h := o.Headers
	for name, want := range map[string]string{
		"X-Service-Event-Id":         eventID,
		"X-Service-Event-Type":       "charge.captured",
		"X-Service-Delivery-Id":      deliveryID,
		"X-Service-Delivery-Attempt": "1",
		"webhook-id":                 eventID,
		"webhook-timestamp":          strconv.FormatInt(r.clock.now().Unix(), 10),
	} {
		if h[name] != want {
			t.Errorf("header %s: got %q, want %q", name, h[name], want)
		}
	}
	for _, name := range []string{"X-Service-Signature-Previous", "X-Service-Test"} {
		if v, ok := h[name]; ok {
			t.Errorf("header %s present (%q) on a plain delivery without a rotation", name, v)
		}
	}
	if !webhooks.VerifyServiceSignature(o.Body, r.secret, h["X-Service-Signature"]) {
		t.Errorf("X-Service-Signature %q does not verify over the body sent", h["X-Service-Signature"])
	}
	if !webhooks.VerifyStandard(o.Body, r.secret, h["webhook-id"], h["webhook-timestamp"], h["webhook-signature"], r.clock.now(), 5*time.Minute) {
		t.Errorf("webhook-signature %q does not verify", h["webhook-signature"])
	}
	if n := len(strings.Fields(h["webhook-signature"])); n != 1 {
		t.Errorf("webhook-signature carries %d values, want 1", n)
	}
	other, _ := webhooks.NewSecret()
	if webhooks.VerifyServiceSignature(o.Body, other, h["X-Service-Signature"]) {
		t.Errorf("X-Service-Signature verifies with another secret")
	}
}

func TestDeliverTestDeliveryHeader(t *testing.T) {
	r := newRig(t, defaultSchedule)
	r.store.mu.Lock()
	r.store.delivery.Test = true
	r.store.mu.Unlock()
	if err := r.deliver(); err != nil {
		t.Fatal(err)
	}
	if v := r.sender.posts()[0].Headers["X-Service-Test"]; v != "true" {
		t.Errorf("X-Service-Test on a test delivery: %q, want true", v)
	}
}

// TestDeliverAfterRotation: within 24 h of a rotation the old secret signs
// too; after, only the new one.
func TestDeliverAfterRotation(t *testing.T) {
	r := newRig(t, defaultSchedule)
	old := r.secret
	rotatedAt := r.clock.now().Add(-time.Hour)
	fresh := r.rotate(rotatedAt.Add(webhooks.RotationOverlap))
	r.sender.answer = answer(500, 0)

	if _, ok := r.d.Deliver(context.Background(), deliveryID).(*webhooks.RetryIn); !ok {
		t.Fatal("want a failure to retry")
	}
	o := r.sender.posts()[0]
	h := o.Headers
	if !webhooks.VerifyServiceSignature(o.Body, fresh, h["X-Service-Signature"]) {
		t.Errorf("X-Service-Signature is not the new secret's")
	}
	if webhooks.VerifyServiceSignature(o.Body, old, h["X-Service-Signature"]) {
		t.Errorf("X-Service-Signature is the old secret's")
	}
	if !webhooks.VerifyServiceSignature(o.Body, old, h["X-Service-Signature-Previous"]) {
		t.Errorf("X-Service-Signature-Previous %q is not the old secret's", h["X-Service-Signature-Previous"])
	}
	sigs := strings.Split(h["webhook-signature"], " ")
	if len(sigs) != 2 {
		t.Fatalf("webhook-signature within 24 h of a rotation: %q, want two values", h["webhook-signature"])
	}
	for i, secret := range []string{fresh, old} { // newest first
		if !webhooks.VerifyStandard(o.Body, secret, h["webhook-id"], h["webhook-timestamp"], sigs[i], r.clock.now(), 5*time.Minute) {
			t.Errorf("webhook-signature value %d (%q) does not verify with the %s secret", i+1, sigs[i], []string{"new", "old"}[i])
		}
	}

	// 24 h after the rotation (the 4th attempt is 2h35m later; jump past the overlap).
	r.clock.set(rotatedAt.Add(webhooks.RotationOverlap + time.Second))
	if _, ok := r.d.Deliver(context.Background(), deliveryID).(*webhooks.RetryIn); !ok {
		t.Fatal("want a failure to retry")
	}
	o = r.sender.posts()[1]
	h = o.Headers
	if v, ok := h["X-Service-Signature-Previous"]; ok {
		t.Errorf("X-Service-Signature-Previous still sent 24 h after the rotation: %q", v)
	}
	if n := len(strings.Fields(h["webhook-signature"])); n != 1 {
		t.Errorf("webhook-signature 24 h after the rotation carries %d values, want 1", n)
	}
	if !webhooks.VerifyServiceSignature(o.Body, fresh, h["X-Service-Signature"]) ||
		!webhooks.VerifyStandard(o.Body, fresh, h["webhook-id"], h["webhook-timestamp"], h["webhook-signature"], r.clock.now(), 5*time.Minute) {
		t.Errorf("after the overlap the new secret does not verify")
	}
	if webhooks.VerifyStandard(o.Body, old, h["webhook-id"], h["webhook-timestamp"], h["webhook-signature"], r.clock.now(), 5*time.Minute) {
		t.Errorf("after the overlap the old secret still verifies webhook-signature")
	}
}

// TestDeliverSameEventIDEveryAttempt: the event id and body never change
// between attempts; webhook-timestamp is each attempt's own time.
func TestDeliverSameEventIDEveryAttempt(t *testing.T) {
	r := newRig(t, []time.Duration{0, time.Second, time.Second})
	r.sender.answer = func(n int) webhooks.Response {
		if n < 3 {
			return webhooks.Response{StatusCode: 500}
		}
		return webhooks.Response{StatusCode: 200}
	}
	for i := 0; i < 3; i++ {
		_ = r.deliver()
		r.clock.advance(time.Second)
	}
	posts := r.sender.posts()
	if len(posts) != 3 {
		t.Fatalf("POSTs: %d, want 3", len(posts))
	}
	for i, o := range posts {
		if o.Headers["X-Service-Event-Id"] != eventID || o.Headers["webhook-id"] != eventID || !bytes.Equal(o.Body, eventBody) {
			t.Errorf("attempt %d: event id %q, webhook-id %q, body changed %v", i+1, o.Headers["X-Service-Event-Id"], o.Headers["webhook-id"], !bytes.Equal(o.Body, eventBody))
		}
		if i > 0 && o.Headers["webhook-timestamp"] == posts[i-1].Headers["webhook-timestamp"] {
			t.Errorf("attempt %d: webhook-timestamp %s is the previous attempt's", i+1, o.Headers["webhook-timestamp"])
		}
	}
	if del, _, _ := r.store.state(); del.Status != webhooks.StatusSucceeded || del.Attempts != 3 {
		t.Errorf("got %s after %d attempts, want succeeded after 3", del.Status, del.Attempts)
	}
}

// TestDeliverPerEndpointCap: a worker runs at most PerEndpointDefault
// attempts to one endpoint at once; the next delivery to it is put back
// (RetryIn, no request, no attempt recorded) while deliveries to other
// endpoints go on.
func TestDeliverPerEndpointCap(t *testing.T) {
	r := newRig(t, defaultSchedule)
	const otherID = "0193a5c2-7f2a-7d11-8e9f-0a1b2c3d4e60"
	r.store.mu.Lock()
	r.store.other = r.store.delivery
	r.store.other.ID = otherID
	r.store.otherEndpoint = r.store.endpoint
	r.store.otherEndpoint.ID = "we_06gvgpgd01qhpcd8cjb64k1jg1"
	sealed, err := r.keys.Seal(keyring.PurposeWebhook, []byte(r.secret), []byte(r.store.otherEndpoint.ID))
	if err != nil {
		t.Fatal(err)
	}
	r.store.otherEndpoint.SecretSealed = sealed
	r.store.mu.Unlock()
	r.warmFast(t) // the endpoint answered: its window is open

	release := make(chan struct{})
	var inFlight sync.WaitGroup
	inFlight.Add(webhooks.PerEndpointDefault)
	r.sender.answer = func(n int) webhooks.Response {
		if n <= 1+webhooks.PerEndpointDefault {
			inFlight.Done()
			<-release
		}
		return webhooks.Response{StatusCode: 200}
	}
	errs := make(chan error, webhooks.PerEndpointDefault)
	for range webhooks.PerEndpointDefault {
		go func() { errs <- r.d.Deliver(context.Background(), deliveryID) }()
	}
	inFlight.Wait() // PerEndpointDefault POSTs to the endpoint are hanging

	// Put back for about a second (busyRetry, its pace step and jitter).
	if got := retryIn(t, r.deliver()); got < 900*time.Millisecond || got > 1500*time.Millisecond {
		t.Errorf("delivery to a busy endpoint: RetryIn %s, want about 1s", got)
	}
	if n := len(r.sender.posts()); n != 1+webhooks.PerEndpointDefault {
		t.Errorf("POSTs while the endpoint is at its cap: %d, want %d", n, 1+webhooks.PerEndpointDefault)
	}
	if _, _, records := r.store.state(); len(records) != 1 {
		t.Errorf("a delivery put back for a busy endpoint recorded an attempt: %+v (want the warm-up's only)", records)
	}
	// Another endpoint is not held up.
	if err := r.d.Deliver(context.Background(), otherID); err != nil {
		t.Errorf("delivery to another endpoint while the first is at its cap: %v", err)
	}
	if n := len(r.sender.posts()); n != webhooks.PerEndpointDefault+2 {
		t.Errorf("POSTs: %d, want %d (the other endpoint's went out)", n, webhooks.PerEndpointDefault+2)
	}
	close(release)
	for range webhooks.PerEndpointDefault {
		if err := <-errs; err != nil {
			t.Errorf("a concurrent attempt: %v", err)
		}
	}
	// The slots are free again: the delivery was already sent, so nothing more goes out;
	// a fresh pending state is sent at once.
	r.store.mu.Lock()
	now := r.clock.now()
	r.store.delivery.Status, r.store.delivery.Attempts, r.store.delivery.NextAttemptAt = webhooks.StatusPending, 1, &now
	r.store.mu.Unlock()
	if err := r.deliver(); err != nil {
		t.Errorf("after the hanging POSTs ended: %v, want the attempt made", err)
	}
}

// warmFast makes one quick attempt, so the endpoint counts as fast, and sets
// the delivery pending again for the deliveries that follow.
func (r *rig) warmFast(t *testing.T) {
	t.Helper()
	r.sender.answer = func(int) webhooks.Response { return webhooks.Response{StatusCode: 200, Duration: time.Millisecond} }
	if err := r.deliver(); err != nil {
		t.Fatal(err)
	}
	r.store.mu.Lock()
	now := r.clock.now()
	r.store.delivery.Status, r.store.delivery.NextAttemptAt = webhooks.StatusPending, &now
	r.store.mu.Unlock()
}

// TestDeliverWaitsForAFastEndpoint: at its window, an endpoint whose
// recent attempts were fast keeps the deliveries that find it busy waiting
// for its slots, however many there are while their expected wait is short,
// so a burst to a healthy endpoint goes out as slots free instead of being
// put back for a second; and its window holds at least PerEndpointDefault
// attempts at once.
func TestDeliverWaitsForAFastEndpoint(t *testing.T) {
	r := newRig(t, defaultSchedule)
	r.d.SetSlotWait(time.Minute) // none gives up while the test looks
	r.warmFast(t)

	release := make(chan struct{})
	var hanging atomic.Int32
	r.sender.answer = func(int) webhooks.Response {
		hanging.Add(1)
		<-release
		return webhooks.Response{StatusCode: 200, Duration: time.Millisecond}
	}
	const burst = 3 * webhooks.PerEndpointDefault // more than a window, and than the 4 the process lets wait for slow endpoints
	errs := make(chan error, burst)
	for range burst {
		go func() { errs <- r.deliver() }()
	}
	waitUntil(t, func() bool { return hanging.Load() >= webhooks.PerEndpointDefault })
	time.Sleep(200 * time.Millisecond) // a beat for more attempts to start, if the window let them
	if n := hanging.Load(); n < webhooks.PerEndpointDefault || n >= burst {
		t.Errorf("attempts at once to the fast endpoint: %d, want from %d to fewer than %d", n, webhooks.PerEndpointDefault, burst)
	}
	close(release)
	for range burst {
		if err := <-errs; err != nil {
			t.Errorf("a delivery to the fast endpoint: %v, want it sent", err)
		}
	}
	if n := len(r.sender.posts()); n != 1+burst {
		t.Errorf("POSTs: %d, want %d", n, 1+burst)
	}
}

// TestDeliverWaitsForAMerchantsSlot: at its merchant's cap, a delivery to
// an endpoint whose recent attempts were fast waits for one of the
// merchant's slots and is sent when one frees, instead of being put back.
func TestDeliverWaitsForAMerchantsSlot(t *testing.T) {
	const slots, waiters = 3, 2
	r := newRig(t, defaultSchedule)
	r.d = r.d.WithMerchantSlots(slots)
	r.d.SetSlotWait(time.Minute) // the waiters never give up while the test looks
	r.warmFast(t)

	release := make(chan struct{})
	var inFlight sync.WaitGroup
	inFlight.Add(slots)
	r.sender.answer = func(n int) webhooks.Response {
		if n <= 1+slots {
			inFlight.Done()
			<-release
		}
		return webhooks.Response{StatusCode: 200, Duration: time.Millisecond}
	}
	errs := make(chan error, slots+waiters)
	for range slots {
		go func() { errs <- r.deliver() }()
	}
	inFlight.Wait() // the merchant is at its cap, the endpoint (10) is not
	for range waiters {
		go func() { errs <- r.deliver() }()
	}
	time.Sleep(200 * time.Millisecond) // a beat for a waiter to be sent, if the cap let it
	if n := len(r.sender.posts()); n != 1+slots {
		t.Errorf("POSTs while the merchant is at its cap: %d, want %d", n, 1+slots)
	}
	close(release)
	for range slots + waiters {
		if err := <-errs; err != nil {
			t.Errorf("a delivery to the fast endpoint: %v, want it sent", err)
		}
	}
	if n := len(r.sender.posts()); n != 1+slots+waiters {
		t.Errorf("POSTs: %d, want %d", n, 1+slots+waiters)
	}
}

// TestDeliverErrorsShowNoInternals: the attempt log the merchant reads holds
// the sender's fixed reason, never the transport error, which may name an
// internal address and its denied range; that detail goes to the operator's
// log with the delivery id.
func TestDeliverErrorsShowNoInternals(t *testing.T) {
	detail := errors.New("webhook POST http://hooks.example.com: destination address is not allowed for webhooks: prohibited IP address 10.0.3.7 (denied by 10.0.0.0/8)")
	for _, tc := range []struct{ reason, want string }{
		{"destination not allowed", "destination not allowed"},
		{"", webhooks.ReasonFailed}, // a sender that gives no reason
	} {
		r := newRig(t, defaultSchedule)
		var logged bytes.Buffer
		r.d = webhooks.NewDeliverer(r.store, r.sender, r.keys, defaultSchedule, r.clock.now, slog.New(slog.NewJSONHandler(&logged, nil)), nil)
		r.sender.answer = func(int) webhooks.Response {
			return webhooks.Response{Duration: time.Millisecond, Err: detail, Reason: tc.reason}
		}
		_ = r.deliver()
		_, _, records := r.store.state()
		if len(records) != 1 || records[0].Attempt.Error == nil {
			t.Fatalf("records %+v, want one failed attempt", records)
		}
		if got := *records[0].Attempt.Error; got != tc.want {
			t.Errorf("attempt error %q, want %q", got, tc.want)
		}
		if !strings.Contains(logged.String(), "10.0.3.7") || !strings.Contains(logged.String(), deliveryID) {
			t.Errorf("the operator's log lacks the detail or the delivery id: %s", logged.String())
		}
	}
}

// TestDeliverEndpointHealth: the health change each answer calls for, made
// only when the endpoint's state changes.
func TestDeliverEndpointHealth(t *testing.T) {
	answer := func(status int) func(int) webhooks.Response {
		return func(int) webhooks.Response { return webhooks.Response{StatusCode: status, Duration: time.Millisecond} }
	}
	since := func(r *rig, d time.Duration) {
		at := r.clock.now().Add(-d)
		r.store.endpoint.FailingSince = &at
	}
	for _, tc := range []struct {
		name       string
		status     int
		failingFor time.Duration // 0: no streak
		test       bool
		announced  bool // the endpoint's trouble was told (failing or disabled)
		want       *webhooks.Health
		final      string // the delivery's status after the attempt
	}{
		{name: "a success on a healthy endpoint writes nothing", status: 200, final: webhooks.StatusSucceeded},
		{name: "a success ends a streak", status: 200, failingFor: time.Hour, final: webhooks.StatusSucceeded,
			want: &webhooks.Health{Recovered: true}},
		{name: "a first failure starts a streak", status: 500, final: webhooks.StatusPending, want: &webhooks.Health{Failing: true}},
		{name: "a failure within WEBHOOK_FAILING_AFTER writes nothing", status: 500, failingFor: 59 * time.Minute, final: webhooks.StatusPending},
		{name: "a failure past WEBHOOK_FAILING_AFTER announces", status: 500, failingFor: time.Hour, final: webhooks.StatusPending,
			want: &webhooks.Health{Announce: true}},
		{name: "an announced streak writes nothing more", status: 500, failingFor: 119 * time.Hour, announced: true, final: webhooks.StatusPending},
		{name: "an announced streak still disables", status: 500, failingFor: 120 * time.Hour, announced: true, final: webhooks.StatusFailed,
			want: &webhooks.Health{Disable: webhooks.DisabledFailing}},
		{name: "a success after an announcement recovers, even with the streak cleared", status: 200, announced: true,
			final: webhooks.StatusSucceeded, want: &webhooks.Health{Recovered: true}},
		{name: "a failure past WEBHOOK_DISABLE_AFTER disables", status: 503, failingFor: 120 * time.Hour, final: webhooks.StatusFailed,
			want: &webhooks.Health{Disable: webhooks.DisabledFailing}},
		{name: "410 Gone disables at once", status: 410, final: webhooks.StatusFailed, want: &webhooks.Health{Disable: webhooks.DisabledGone}},
		{name: "410 Gone to a test changes nothing", status: 410, test: true, final: webhooks.StatusPending},
		{name: "a failing test changes nothing", status: 500, failingFor: 200 * time.Hour, test: true, final: webhooks.StatusPending},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRig(t, defaultSchedule)
			r.d.WithHealth(webhooks.DefaultDisableAfter, nil).WithOperationalEvents(webhooks.DefaultFailingAfter, nil)
			r.sender.answer = answer(tc.status)
			r.store.delivery.Test = tc.test
			r.store.endpoint.HealthAnnounced = tc.announced
			if tc.failingFor > 0 {
				since(r, tc.failingFor)
			}
			_ = r.deliver()
			del, _, _ := r.store.state()
			if del.Status != tc.final {
				t.Errorf("delivery %s, want %s", del.Status, tc.final)
			}
			r.store.mu.Lock()
			got := r.store.health
			r.store.mu.Unlock()
			if tc.want == nil {
				if len(got) != 0 {
					t.Errorf("health writes %+v, want none", got)
				}
				return
			}
			if len(got) != 1 {
				t.Fatalf("health writes %+v, want one", got)
			}
			h := got[0]
			if h.EndpointID != endpointID || h.Failing != tc.want.Failing || h.Recovered != tc.want.Recovered || h.Disable != tc.want.Disable ||
				h.Announce != tc.want.Announce {
				t.Errorf("health %+v, want %+v", h, *tc.want)
			}
			if h.Disable == webhooks.DisabledFailing && !h.FailingBefore.Equal(r.clock.now().Add(-webhooks.DefaultDisableAfter)) {
				t.Errorf("FailingBefore %v, want now - WEBHOOK_DISABLE_AFTER", h.FailingBefore)
			}
			if h.Announce && !h.FailingBefore.Equal(r.clock.now().Add(-webhooks.DefaultFailingAfter)) {
				t.Errorf("FailingBefore %v, want now - WEBHOOK_FAILING_AFTER", h.FailingBefore)
			}
		})
	}
}

// TestAnnounceFailing: the sweep asks for the endpoints failing since
// WEBHOOK_FAILING_AFTER ago and announces each; with 0 it does nothing.
func TestAnnounceFailing(t *testing.T) {
	r := newRig(t, defaultSchedule)
	r.store.unannounced = []string{"we_a", "we_b"}
	r.d.WithOperationalEvents(0, nil)
	if err := r.d.AnnounceFailing(context.Background()); err != nil || len(r.store.health) != 0 {
		t.Fatalf("WEBHOOK_FAILING_AFTER=0: %v, health writes %+v; want none", err, r.store.health)
	}
	r.d.WithOperationalEvents(time.Hour, nil)
	if err := r.d.AnnounceFailing(context.Background()); err != nil {
		t.Fatal(err)
	}
	before := r.clock.now().Add(-time.Hour)
	if !r.store.before.Equal(before) || len(r.store.health) != 2 {
		t.Fatalf("asked for failing before %v, health writes %+v; want %v and two", r.store.before, r.store.health, before)
	}
	for i, h := range r.store.health {
		if h.EndpointID != r.store.unannounced[i] || !h.Announce || !h.FailingBefore.Equal(before) || h.Disable != "" {
			t.Errorf("health write %d: %+v", i, h)
		}
	}
}

// waitUntil polls cond until it holds; 30 s is a safety net for a loaded
// machine, not a bound on how long it takes.
func waitUntil(t *testing.T, cond func() bool) {
	t.Helper()
	for end := time.Now().Add(30 * time.Second); !cond(); time.Sleep(time.Millisecond) {
		if time.Now().After(end) {
			t.Fatal("condition not reached in 30 s")
		}
	}
}
