package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestEventStreamEndToEnd: GET /v1/events/stream on one replica of the real
// binaries while the other takes charges and the worker captures them:
// every event arrives once, each charge's created before its captured; it
// reports the time from an event's creation to its arrival.
func TestEventStreamEndToEnd(t *testing.T) {
	st := newStack(t, stackOptions{env: webhooksStackEnv, workerEnv: webhooksWorkerEnv}, "event stream")
	bag := &secretBag{}
	m := newWebhookMerchant(t, st, bag, "127.0.0.42", "stream")

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, st.replicas[1]+"/v1/events/stream", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+m.key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("stream: %d", resp.StatusCode)
	}
	type arrival struct {
		id, typ, charge string
		lag             time.Duration
	}
	arrivals := make(chan arrival, 1000)
	go func() {
		r := bufio.NewReader(resp.Body)
		var id, typ string
		for {
			line, err := r.ReadString('\n')
			if err != nil {
				close(arrivals)
				return
			}
			line = strings.TrimSuffix(line, "\n")
			switch {
			case strings.HasPrefix(line, "id: "):
				id = line[4:]
			case strings.HasPrefix(line, "event: "):
				typ = line[7:]
			case strings.HasPrefix(line, "data: "):
				var e struct {
					CreatedAt time.Time `json:"created_at"`
					Data      struct {
						Charge struct {
							ID string `json:"id"`
						} `json:"charge"`
					} `json:"data"`
				}
				if json.Unmarshal([]byte(line[6:]), &e) == nil {
					arrivals <- arrival{id, typ, e.Data.Charge.ID, time.Since(e.CreatedAt)}
				}
			}
		}
	}()

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
		case a, ok := <-arrivals:
			if !ok {
				t.Fatal("the stream ended")
			}
			if seen[a.id] {
				t.Errorf("event %s twice", a.id)
			}
			seen[a.id] = true
			order[a.charge] = append(order[a.charge], a.typ)
			lags = append(lags, a.lag)
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
