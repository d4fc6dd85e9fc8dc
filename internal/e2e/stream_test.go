package e2e

import (
	"slices"
	"testing"
	"time"
)

// TestEventStreamEndToEnd: GET /v1/events/stream on one replica of the real
// binaries while the other takes charges and the worker captures them:
// every event arrives once, each charge's created before its captured; it
// reports the time from an event's creation to its arrival.
func TestEventStreamEndToEnd(t *testing.T) {
	parallel(t)
	st := newStack(t, stackOptions{env: webhooksStackEnv, workerEnv: webhooksWorkerEnv}, "event stream")
	bag := &secretBag{}
	m := newWebhookMerchant(t, st, bag, "127.0.0.42", "stream")

	stream, refused := openLiveStream(t, st, st.replicas[1], m.key)
	if stream == nil {
		t.Fatalf("stream: %s", refused)
	}

	const n = 60
	for i := range n {
		m.charge(t, "stream-"+string(rune('a'+i%26)))
		time.Sleep(20 * time.Millisecond)
	}
	seen := map[string]bool{}
	order := map[string][]string{}
	var lags []time.Duration
	timeout := time.After(30 * time.Second)
	for len(seen) < 2*n {
		select {
		case e, ok := <-stream.events:
			if !ok {
				t.Fatal("the stream ended")
			}
			if seen[e.id] {
				t.Errorf("event %s twice", e.id)
			}
			seen[e.id] = true
			order[e.charge] = append(order[e.charge], e.typ)
			lags = append(lags, e.received.Sub(e.created))
		case <-timeout:
			t.Fatalf("%d of %d events within 30s", len(seen), 2*n)
		}
	}
	for charge, types := range order {
		if !slices.Equal(types, []string{"charge.created", "charge.captured"}) {
			t.Errorf("charge %s: %v", charge, types)
		}
	}
	slices.Sort(lags)
	t.Logf("event stream: %d events of %d charges on the other replica; event creation to arrival p50 %s, p99 %s, max %s",
		len(seen), n, lags[len(lags)/2].Round(time.Millisecond), lags[len(lags)*99/100].Round(time.Millisecond), lags[len(lags)-1].Round(time.Millisecond))
}
