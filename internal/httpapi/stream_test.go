package httpapi_test

import (
	"bufio"
	"context"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gatehouse-pay/gatehouse/internal/providers/providertest"
)

// sseEvent is one event a stream carried.
type sseEvent struct {
	id, typ, data string
}

// sseStream is an open GET /v1/events/stream: events and comments as they
// come, and how it ended.
type sseStream struct {
	status   int
	header   http.Header
	events   chan sseEvent
	comments chan string
	cancel   context.CancelFunc
	ended    chan struct{}
}

// openStream opens a stream on base with the key, from lastID when set.
func openStream(t *testing.T, base, key, lastID string) *sseStream {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/v1/events/stream", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+key)
	if lastID != "" {
		req.Header.Set("Last-Event-ID", lastID)
	}
	resp, err := (&http.Client{}).Do(req)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	s := &sseStream{status: resp.StatusCode, header: resp.Header, events: make(chan sseEvent, 1000), comments: make(chan string, 100),
		cancel: cancel, ended: make(chan struct{})}
	t.Cleanup(s.close)
	if resp.StatusCode != http.StatusOK {
		resp.Body.Close()
		close(s.ended)
		return s
	}
	go func() {
		defer close(s.ended)
		defer resp.Body.Close()
		r := bufio.NewReader(resp.Body)
		var e sseEvent
		for {
			line, err := r.ReadString('\n')
			if err != nil {
				return
			}
			line = strings.TrimSuffix(line, "\n")
			switch {
			case line == "":
				if e.id != "" {
					s.events <- e
				}
				e = sseEvent{}
			case strings.HasPrefix(line, ":"):
				select {
				case s.comments <- strings.TrimSpace(line[1:]):
				default:
				}
			case strings.HasPrefix(line, "id: "):
				e.id = line[4:]
			case strings.HasPrefix(line, "event: "):
				e.typ = line[7:]
			case strings.HasPrefix(line, "data: "):
				e.data += line[6:]
			}
		}
	}()
	return s
}

func (s *sseStream) close() {
	s.cancel()
	<-s.ended
}

// take returns the next n events, failing after within.
func (s *sseStream) take(t *testing.T, n int, within time.Duration) []sseEvent {
	t.Helper()
	var out []sseEvent
	deadline := time.After(within)
	for len(out) < n {
		select {
		case e := <-s.events:
			out = append(out, e)
		case <-deadline:
			t.Fatalf("%d of %d events within %s: %v", len(out), n, within, out)
		}
	}
	return out
}

func streamEnv(env map[string]string) {
	paymentsEnv(env)
	env["EVENT_STREAM_HEARTBEAT"] = "200ms"
	env["EVENT_STREAM_MAX_PER_KEY"] = "3"
	env["EVENT_STREAM_MAX"] = "5"
}

// TestEventStream: GET /v1/events/stream through two replicas: events in
// commit order as they happen, on a replica other than the one that wrote
// them; each exactly once under concurrent writers on both replicas;
// Last-Event-ID resumes without gaps or duplicates; heartbeats; only the
// merchant's own events; the bounds per key and per replica; the stream
// ends when the replica shuts down.
func TestEventStream(t *testing.T) {
	t.Parallel()
	one := newHarness(t, streamEnv)
	two := newHarnessWith(t, harnessOptions{env: streamEnv, replicaOf: one})
	a, b := one.account("ada@example.com"), one.account("bob@example.com")
	w := one.worker(t, &providertest.Fake{})

	s := openStream(t, two.base, a.secret, "")
	bs := openStream(t, one.base, b.secret, "")
	if s.status != 200 || !strings.HasPrefix(s.header.Get("Content-Type"), "text/event-stream") {
		t.Fatalf("stream: %d %v", s.status, s.header)
	}
	// Written on replica one, streamed by replica two, in order.
	ch := one.capturedCharge(t, w, a.secret, 1500)
	got := s.take(t, 2, 5*time.Second)
	if got[0].typ != "charge.created" || got[1].typ != "charge.captured" || !strings.Contains(got[0].data, ch) {
		t.Fatalf("first events: %+v", got)
	}
	// Heartbeats while idle.
	select {
	case c := <-s.comments:
		for c == "connected" {
			c = <-s.comments
		}
		if c != "heartbeat" {
			t.Errorf("comment %q, want heartbeat", c)
		}
	case <-time.After(3 * time.Second):
		t.Error("no heartbeat within 3s at EVENT_STREAM_HEARTBEAT=200ms")
	}

	// Many writers on both replicas at once: every event exactly once.
	const n = 40
	var wg sync.WaitGroup
	for i := range n {
		h := one
		if i%2 == 1 {
			h = two
		}
		wg.Go(func() { h.createCharge(t, a.secret, chargeJSON()) })
	}
	wg.Wait()
	burst := s.take(t, n, 10*time.Second)
	seen := map[string]bool{}
	for _, e := range append(got, burst...) {
		if seen[e.id] {
			t.Errorf("event %s twice", e.id)
		}
		seen[e.id] = true
	}
	all := one.eventsOf(t, a.secret, "")
	if len(all) != n+2 || len(seen) != n+2 {
		t.Errorf("the stream carried %d events, the account has %d, want %d", len(seen), len(all), n+2)
	}
	for _, e := range all {
		if !seen[e["id"].(string)] {
			t.Errorf("event %s never streamed", e["id"])
		}
	}

	// Disconnected: events written meanwhile come after Last-Event-ID.
	last := burst[len(burst)-1].id
	s.close()
	missed := []string{one.capturedCharge(t, w, a.secret, 700), one.capturedCharge(t, w, a.secret, 800)}
	r := openStream(t, one.base, a.secret, last)
	resumed := r.take(t, 4, 5*time.Second)
	var types []string
	for _, e := range resumed {
		if seen[e.id] {
			t.Errorf("resumed stream repeats %s", e.id)
		}
		types = append(types, e.typ)
	}
	if want := []string{"charge.created", "charge.captured", "charge.created", "charge.captured"}; !slices.Equal(types, want) ||
		!strings.Contains(resumed[0].data, missed[0]) || !strings.Contains(resumed[2].data, missed[1]) {
		t.Errorf("resumed: %v", resumed)
	}
	select {
	case e := <-r.events:
		t.Errorf("resumed stream sent more: %+v", e)
	case <-time.After(300 * time.Millisecond):
	}

	// B saw none of A's events.
	select {
	case e := <-bs.events:
		t.Errorf("B's stream carried %+v", e)
	default:
	}

	// Bad Last-Event-ID: 400; another merchant's event id is not B's.
	for _, id := range []string{"nope", last} {
		if x := openStream(t, one.base, b.secret, id); x.status != 400 {
			t.Errorf("Last-Event-ID %q from B: %d, want 400", id, x.status)
		}
	}

	// Bounds: 3 per key on a replica (r and bs are open on one: A holds 1).
	a2 := openStream(t, one.base, a.secret, "")
	a3 := openStream(t, one.base, a.secret, "")
	if a2.status != 200 || a3.status != 200 {
		t.Fatalf("streams 2 and 3 of a key: %d %d", a2.status, a3.status)
	}
	if x := openStream(t, one.base, a.secret, ""); x.status != 429 || x.header.Get("Retry-After") != "2" {
		t.Errorf("a 4th stream of a key: %d with Retry-After %q, want 429 with 2", x.status, x.header.Get("Retry-After"))
	}
	// 5 per replica: one holds A's 3 and B's 1.
	c1 := openStream(t, one.base, one.account("cy@example.com").secret, "")
	if c1.status != 200 {
		t.Fatalf("the 5th stream on a replica: %d", c1.status)
	}
	if x := openStream(t, one.base, one.account("di@example.com").secret, ""); x.status != 503 {
		t.Errorf("a 6th stream on a replica: %d, want 503", x.status)
	}
	// Closing one frees its place.
	a3.close()
	waitFor(t, func() bool { return one.hub.Open() == 4 })

	// Shutdown ends every stream.
	one.hub.Close()
	for _, x := range []*sseStream{r, a2, bs, c1} {
		select {
		case <-x.ended:
		case <-time.After(3 * time.Second):
			t.Fatal("a stream did not end when its replica shut down")
		}
	}
}

func waitFor(t *testing.T, ok func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); !ok(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 5s")
		}
	}
}
