package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func TestParseRetryAfter(t *testing.T) {
	for v, want := range map[string]int{"1": 1, "7": 7, "60": 60, "007": 7} {
		if got, ok := parseRetryAfter(v); !ok || got != want {
			t.Errorf("parseRetryAfter(%q) = %d %v, want %d", v, got, ok, want)
		}
	}
	for _, v := range []string{"", "0", "00", "-1", "+3", "1.5", " 3", "3 ", "abc", "Wed, 21 Oct 2015 07:28:00 GMT", "99999999999999999999"} {
		if got, ok := parseRetryAfter(v); ok {
			t.Errorf("parseRetryAfter(%q) = %d, accepted", v, got)
		}
	}
}

func TestParseLimit(t *testing.T) {
	n, w, err := parseLimit("100/10s")
	if err != nil || n != 100 || w != 10*time.Second {
		t.Errorf("100/10s = %d %s %v", n, w, err)
	}
	for _, s := range []string{"100", "0/10s", "x/10s", "100/500ms", "100/ten"} {
		if _, _, err := parseLimit(s); err == nil {
			t.Errorf("parseLimit(%q) accepted", s)
		}
	}
}

// at is a moment of a test, in milliseconds from a fixed start.
func at(msec int) time.Time {
	return time.Unix(1_700_000_000, 0).Add(time.Duration(msec) * time.Millisecond)
}

func TestMaxInWindow(t *testing.T) {
	w := 10 * time.Second
	tests := []struct {
		name  string
		times []int // ms
		want  int
	}{
		{"none", nil, 0},
		{"one", []int{5}, 1},
		// A sliding-window limiter of 3 per 10 s may accept at 0, 1, 2 and
		// again from 10,000 on: the window (t-10s, t] never holds 4.
		{"exactly at the window's end", []int{0, 1, 2, 10_000, 10_001, 10_002}, 3},
		{"one ms early", []int{0, 1, 2, 9_999}, 4},
		{"unsorted", []int{10_002, 0, 10_000, 2, 1, 10_001}, 3},
		{"burst in the middle", []int{0, 5_000, 5_001, 5_002, 14_999, 20_000}, 4},
		{"burst at a window's start", []int{0, 5_000, 5_001, 5_002, 9_999, 20_000}, 5},
	}
	for _, tt := range tests {
		var ts []time.Time
		for _, m := range tt.times {
			ts = append(ts, at(m))
		}
		if got := maxInWindow(ts, w); got != tt.want {
			t.Errorf("%s: maxInWindow = %d, want %d", tt.name, got, tt.want)
		}
	}
}

func TestCertainInWindow(t *testing.T) {
	w := 10 * time.Second
	sp := func(from, to int) span { return span{at(from), at(to)} }
	// Requests at 0-100 ms and 9,950-10,050 ms: the server may have decided
	// at 0 and at 10,050, more than a window apart, so they are not certain
	// to share a window; by midpoints (50 and 10,000) they do.
	loose := []span{sp(0, 100), sp(9_950, 10_050)}
	if got := certainInWindow(loose, w); got != 1 {
		t.Errorf("loose: certain %d, want 1", got)
	}
	if got := maxInWindow(midpoints(loose), w); got != 2 {
		t.Errorf("loose: by midpoints %d, want 2", got)
	}
	// Three whose last answer came within the window of the first send.
	tight := []span{sp(0, 10), sp(4_000, 4_100), sp(9_000, 9_999), sp(20_000, 20_001)}
	if got := certainInWindow(tight, w); got != 3 {
		t.Errorf("tight: certain %d, want 3", got)
	}
	// A wide span is never certain to share a window with a far one, but by
	// midpoints it may.
	wide := []span{sp(0, 1), sp(5_000, 15_000)}
	if c, m := certainInWindow(wide, w), maxInWindow(midpoints(wide), w); c != 1 || m != 2 {
		t.Errorf("wide: certain %d, by midpoints %d; want 1 and 2", c, m)
	}
	if certainInWindow(nil, w) != 0 {
		t.Error("nothing is not 0")
	}
}

func TestLatenciesOf(t *testing.T) {
	var ds []time.Duration
	for i := 2000; i >= 1; i-- { // unsorted on purpose
		ds = append(ds, time.Duration(i)*time.Millisecond)
	}
	l := latenciesOf(ds)
	if l.P50 != 1000*time.Millisecond || l.P99 != 1980*time.Millisecond || l.P999 != 1998*time.Millisecond || l.Max != 2000*time.Millisecond {
		t.Errorf("latencies = %+v", l)
	}
	if ds[0] != 2000*time.Millisecond {
		t.Error("latenciesOf sorted its argument")
	}
	if pctChange(100*time.Millisecond, 110*time.Millisecond) != 10 || pctChange(0, time.Second) != 0 {
		t.Error("pctChange")
	}
}

func TestChargeIDs(t *testing.T) {
	rs := []hresult{
		{status: 201, body: []byte(`{"id":"a","status":"created"}`)},
		{status: 201, body: []byte(`{"id":"a","status":"created"}`)},
		{status: 409, body: []byte(`{"error":{"code":"idempotency_key_in_use"}}`)},
		{status: 201, err: io.ErrUnexpectedEOF, body: []byte(`{"id":"z"}`)},
	}
	if got := chargeIDs(rs); len(got) != 1 || got[0] != "a" {
		t.Errorf("chargeIDs = %q, want [a]", got)
	}
	rs = append(rs, hresult{status: 201, body: []byte(`{"id":"b"}`)})
	if got := chargeIDs(rs); len(got) != 2 {
		t.Errorf("chargeIDs = %q, want a and b", got)
	}
}

func TestPooled(t *testing.T) {
	a := &recording{latency: []time.Duration{1, 2}, status: []int16{201, 201}, scheduled: 2, start: at(0), finish: at(1000)}
	b := &recording{latency: []time.Duration{3, 4, 0}, status: []int16{201, 503, statusDropped}, scheduled: 3, start: at(5000), finish: at(6000)}
	s := pooled([]*recording{a, b})
	if s.Scheduled != 5 || s.OK != 3 || s.Errors != 1 || s.ServerErrors != 1 || s.Dropped != 1 || s.Max != 4 || s.Achieved != 1.5 {
		t.Errorf("pooled = %+v", s)
	}
}

func TestFanReceiverFirstAttempts(t *testing.T) {
	f, err := startFanReceiver([]string{"healthy", "slow", "failing"}, 50*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	defer f.srv.Close()
	t0 := time.Now().Add(-time.Second)
	send := func(ep int, event string, created time.Time) int {
		body := fmt.Sprintf(`{"id":%q,"created_at":%q}`, event, created.UTC().Format(time.RFC3339Nano))
		req, _ := http.NewRequest(http.MethodPost, f.base+fmt.Sprint(ep), strings.NewReader(body))
		req.Header.Set("X-Service-Event-Id", event)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if st := send(0, "evt_1", t0); st != 200 {
		t.Errorf("healthy answered %d", st)
	}
	send(0, "evt_1", t0) // a second attempt: the first counts
	if st := send(2, "evt_1", t0); st != 500 {
		t.Errorf("failing answered %d", st)
	}
	start := time.Now()
	if st := send(1, "evt_1", t0); st != 200 || time.Since(start) < 50*time.Millisecond {
		t.Errorf("slow answered %d after %s", st, time.Since(start))
	}
	send(0, "evt_old", t0.Add(-time.Hour)) // before the step: not counted
	first, byKind := f.firstAttempts(t0, "healthy")
	if len(first) != 1 || byKind["healthy"] != 2 || byKind["slow"] != 1 || byKind["failing"] != 1 {
		t.Fatalf("first %v, by kind %v", first, byKind)
	}
	if d := first["0/evt_1"]; d < time.Second || d > 10*time.Second {
		t.Errorf("commit to first attempt %s, want about 1 s", d)
	}
}

func TestOpenModelDoCallsEveryDueRequest(t *testing.T) {
	var calls atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		if r.Header.Get("Idempotency-Key") == "" {
			w.WriteHeader(400)
			return
		}
		w.Header().Set("Retry-After", "3")
		w.WriteHeader(http.StatusTooManyRequests)
	}))
	defer srv.Close()
	// Room for all 40 in flight at once and a long timeout: on shared cores a
	// drop or a timeout would be the machine's, and this test is about the
	// calls and their answers.
	hc := newHTTPClient(8, time.Minute)
	addr := strings.TrimPrefix(srv.URL, "http://")
	res := make([]hresult, 40)
	rec := openModelDo(context.Background(), 200, 200*time.Millisecond, len(res), func(i int, due time.Time) outcome {
		res[i] = post(context.Background(), hc, addr, "/v1/charges", "sk", fmt.Sprint("k", i), []byte(`{}`))
		return res[i].outcome()
	})
	s := summarize(rec)
	if s.Scheduled != 40 || s.Errors != 40 || calls.Load() != 40 {
		t.Fatalf("scheduled %d, errors %d, calls %d; want 40 answered 429s", s.Scheduled, s.Errors, calls.Load())
	}
	for i, r := range res {
		if v, ok := parseRetryAfter(r.header.Get("Retry-After")); r.status != 429 || !ok || v != 3 {
			t.Fatalf("request %d: %d, Retry-After %q", i, r.status, r.header.Get("Retry-After"))
		}
	}
}

func TestVerdicts(t *testing.T) {
	for _, tt := range []struct {
		certain, likely int
		want            string
	}{{100, 100, "met"}, {100, 104, "not shown"}, {101, 104, "MISSED"}} {
		r := &l3Result{Limit: 100, Accepted: 300, Limited: 10, Certain: tt.certain, Likely: tt.likely}
		if got := r.windowVerdict(); got != tt.want {
			t.Errorf("certain %d, likely %d: %s, want %s", tt.certain, tt.likely, got, tt.want)
		}
	}
	if (&l3Result{Limit: 100}).windowVerdict() != "no data" {
		t.Error("no accepts judged")
	}
	ok := summary{Completed: 100, OK: 100}
	for _, tt := range []struct {
		alone, flood summary
		change       float64
		want         string
	}{
		{ok, ok, 9.9, "met"},
		{ok, ok, 10.1, "MISSED"},
		{ok, summary{Completed: 100, OK: 99, Errors: 1}, 0, "MISSED"},
		{ok, summary{Completed: 100, OK: 100, Dropped: 3}, 0, "MISSED"},
		{summary{Completed: 100, OK: 90, Errors: 10}, ok, 0, "invalid (errors alone)"},
		{summary{}, ok, 0, "no data"},
	} {
		r := &loginResult{Alone: tt.alone, Flood: tt.flood, Change: tt.change}
		if got := r.verdict(); got != tt.want {
			t.Errorf("alone %+v flood %+v change %v: %s, want %s", tt.alone, tt.flood, tt.change, got, tt.want)
		}
	}
}

// After a pause every idle connection may have been closed by the server:
// a request must not fail on the second stale one.
func TestClientRetriesOnAFreshConnection(t *testing.T) {
	srv, n, _ := chargeServer(t, http.StatusCreated)
	c := newClient(strings.TrimPrefix(srv.URL, "http://"), "Bearer sk_test_x", "test-", new(atomic.Int64))
	defer c.closeIdle()
	var wg sync.WaitGroup
	for range 4 { // four idle connections
		wg.Add(1)
		go func() { defer wg.Done(); c.do(time.Now().Add(2*time.Second), true) }()
	}
	wg.Wait()
	if len(c.idle) < 2 {
		t.Fatalf("%d idle connections, want at least 2", len(c.idle))
	}
	srv.CloseClientConnections()
	for i := range 3 {
		if o := c.do(time.Now().Add(2*time.Second), true); o.status != 201 || o.err != nil {
			t.Fatalf("request %d after the server closed its connections: %d %v", i, o.status, o.err)
		}
	}
	if n.Load() != 7 {
		t.Errorf("server saw %d charges, want 7", n.Load())
	}
}
