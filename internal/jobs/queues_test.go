package jobs

import (
	"slices"
	"testing"

	"github.com/google/uuid"

	"github.com/gatehouse-pay/gatehouse/internal/config"
	"github.com/gatehouse-pay/gatehouse/internal/outbox"
)

// TestWebhookQueueIsStable: an endpoint's deliveries always go to the same
// queue, whatever the delivery, the process or the release (the hash is
// fixed: these values must never change), and endpoints spread over all the
// queues.
func TestWebhookQueueIsStable(t *testing.T) {
	for _, c := range []struct {
		key  string
		n    int
		want string
	}{
		{"0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b", 8, "webhooks-4"},
		{"0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5c", 8, "webhooks-7"},
		{"0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b", 1, "webhooks-0"},
		{"0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b", 0, "webhooks-0"},
	} {
		if got := WebhookQueue(c.key, c.n); got != c.want {
			t.Errorf("WebhookQueue(%q, %d) = %q, want %q", c.key, c.n, got, c.want)
		}
	}

	q := NewQueue(nil, nil, config.Config{WebhookQueues: 8})
	seen := map[string]int{}
	for range 800 {
		endpoint := uuid.Must(uuid.NewV7()).String()
		first := q.queueOf(outbox.Task{Type: TypeWebhookDeliver, RefID: uuid.Must(uuid.NewV7()).String(), Key: endpoint})
		for range 3 {
			if again := q.queueOf(outbox.Task{Type: TypeWebhookDeliver, RefID: uuid.Must(uuid.NewV7()).String(), Key: endpoint}); again != first {
				t.Fatalf("endpoint %s: deliveries on %s and %s", endpoint, first, again)
			}
		}
		seen[first]++
	}
	for _, name := range WebhookQueues(8) {
		// 100 expected each; a fair hash stays well within 50-150.
		if seen[name] < 50 || seen[name] > 150 {
			t.Errorf("queue %s took %d of 800 endpoints: %v", name, seen[name], seen)
		}
	}
	if len(seen) != 8 {
		t.Errorf("endpoints went to %d queues, want 8: %v", len(seen), seen)
	}
	// Without a known endpoint (a row whose delivery is gone) the task
	// still goes to a delivery queue.
	if got := q.queueOf(outbox.Task{Type: TypeWebhookDeliver, RefID: "0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b"}); got != "webhooks-4" {
		t.Errorf("a delivery without its endpoint went to %q", got)
	}
	// An event's task goes by the event's id, to a delivery queue.
	if got := q.queueOf(outbox.Task{Type: TypeWebhookEvent, RefID: "0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5c"}); got != "webhooks-7" {
		t.Errorf("an event's task went to %q", got)
	}
	if got := q.queueOf(outbox.Task{Type: TypeChargeAuthorize, RefID: "x", Key: "y"}); got != "critical" {
		t.Errorf("charge:authorize went to %q", got)
	}
}

// TestDeliveryQueues: a worker serves the configured queues, the legacy
// one, and every other delivery queue Redis knows (a larger setting's),
// but no queue of another kind.
func TestDeliveryQueues(t *testing.T) {
	got := DeliveryQueues(2, []string{"critical", "webhooks", "webhooks-1", "webhooks-5", "webhooks-x", "webhooks-", "webhooks-07", "maintenance"})
	want := []string{"webhooks-0", "webhooks-1", "webhooks", "webhooks-5"}
	if !slices.Equal(got, want) {
		t.Fatalf("DeliveryQueues = %v, want %v", got, want)
	}
	names := QueueNames(got)
	for _, q := range append(want, "critical", "default", "maintenance") {
		if !slices.Contains(names, q) {
			t.Errorf("QueueNames lacks %q: %v", q, names)
		}
	}
}
