package main

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestWebhookTargets: the verdicts of the webhook section follow
// docs/BENCHMARKS.md's targets: half the asynq floor and 5,000/s; 150 µs of Postgres per
// delivery; p99 under 250 ms held at 1,000/s for 60 s with all delivered.
func TestWebhookTargets(t *testing.T) {
	verdicts := func(w *webhookResults) map[string]string {
		out := map[string]string{}
		for _, r := range w.targets().rows {
			out[strings.SplitN(r[0], ",", 2)[0]] = r[len(r)-1]
		}
		return out
	}
	hold := whLatency{Rate: 1000, For: time.Minute, Created: 60000, Expected: 180000, Received: 180000, P99: 240 * time.Millisecond}
	w := &webhookResults{
		Drains: []whThroughput{{Expected: 3000, Got: 3000, Rate: 6000, PG: 150 * time.Microsecond, CPU: true}, {Rate: 9000}},
		Floor:  &whThroughput{Rate: 12000},
		Hold:   &hold,
	}
	got := verdicts(w)
	for _, k := range []string{"deliveries/s with one attempt row each", "Postgres CPU per delivery", "commit to first attempt"} {
		if got[k] != "met" {
			t.Errorf("%s: %q, want met (rows %v)", k, got[k], got)
		}
	}
	if _, ok := got["deliveries/s"]; !ok {
		t.Errorf("no two-worker row: %v", got)
	}

	w.Drains[0].Rate = 5900 // below half the floor
	w.Drains[0].PG = 151 * time.Microsecond
	short := hold
	short.For = 30 * time.Second
	w.Hold = &short
	got = verdicts(w)
	for _, k := range []string{"deliveries/s with one attempt row each", "Postgres CPU per delivery", "commit to first attempt"} {
		if got[k] != "MISSED" {
			t.Errorf("%s: %q, want MISSED (rows %v)", k, got[k], got)
		}
	}
	lost := hold
	lost.Received--
	w.Hold = &lost
	if v := verdicts(w)["commit to first attempt"]; v != "MISSED" {
		t.Errorf("held step with a delivery missing: %q, want MISSED", v)
	}
}

// TestReceiverTimesFloorPosts: the receiver records the asynq floor's POSTs
// (marked with floorHeader) apart from deliveries, and waitFor counts only
// deliveries since its mark, one per event and endpoint (port).
func TestReceiverTimesFloorPosts(t *testing.T) {
	rc, err := startReceiver(2)
	if err != nil {
		t.Fatal(err)
	}
	defer rc.close()
	post := func(h map[string]string, body string, to ...int) {
		req, _ := http.NewRequest(http.MethodPost, rc.urls[append(to, 0)[0]], strings.NewReader(body))
		for k, v := range h {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	post(map[string]string{floorHeader: "1"}, "{}")
	post(nil, "{}") // the signer loop: not timed
	m := rc.mark()
	created := time.Now().UTC().Format(time.RFC3339Nano)
	post(map[string]string{"X-Service-Event-Id": "evt_1", "X-Service-Delivery-Attempt": "1"}, `{"created_at":"`+created+`"}`)
	post(map[string]string{floorHeader: "1"}, "{}")
	if n := len(rc.floorSince(0)); n != 2 {
		t.Errorf("floor POSTs timed: %d, want 2", n)
	}
	got := rc.waitFor(context.Background(), m, 1, time.Second)
	if len(got) != 1 || got[0].event != "evt_1" {
		t.Errorf("deliveries since the mark: %+v, want evt_1 only", got)
	}
	// The same event at the second endpoint is a second delivery; a repeat
	// at the first is not.
	post(map[string]string{"X-Service-Event-Id": "evt_1", "X-Service-Delivery-Attempt": "2"}, `{"created_at":"`+created+`"}`)
	post(map[string]string{"X-Service-Event-Id": "evt_1", "X-Service-Delivery-Attempt": "1"}, `{"created_at":"`+created+`"}`, 1)
	got = rc.waitFor(context.Background(), m, 2, time.Second)
	if n := distinct(got); n != 2 || len(got) != 3 {
		t.Errorf("deliveries: %d distinct of %d receipts, want 2 of 3", n, len(got))
	}
	l := latencyOf(1, summary{OK: 1}, got, 2)
	if l.Received != 2 || l.Expected != 2 || l.Duplicates != 1 || l.Retries != 1 {
		t.Errorf("latency step: %+v, want 2 of 2 received, 1 duplicate, 1 retry", l)
	}
}
