package jobs

import (
	"maps"
	"slices"
	"testing"

	"github.com/gatehouse-pay/gatehouse/internal/config"
	"github.com/gatehouse-pay/gatehouse/internal/outbox"
)

// TestPoolsTakeEveryQueueOnce: every queue a task goes to is served by
// exactly one pool, and deliveries by a pool of their own.
func TestPoolsTakeEveryQueueOnce(t *testing.T) {
	q := NewQueue(nil, nil, config.Config{WebhookQueues: 8})
	pools := Pools(DeliveryQueues(8, nil))
	served := map[string]string{}
	for _, p := range pools {
		if p.Concurrency < 1 {
			t.Errorf("pool %s has %d slots", p.Name, p.Concurrency)
		}
		for q := range p.Queues {
			if other, dup := served[q]; dup {
				t.Errorf("queue %q is in pools %s and %s", q, other, p.Name)
			}
			served[q] = p.Name
		}
	}
	queues := []string{"maintenance", LegacyWebhookQueue} // the scheduler's tasks; the earlier release's deliveries
	for _, typ := range []string{TypeChargeAuthorize, TypeChargeCapture, TypeChargeVoid, TypeChargeReverse, TypeRefundProcess} {
		queues = append(queues, q.queueOf(outbox.Task{Type: typ, RefID: "0190a1b2-0000-7000-8000-000000000000"}))
	}
	for i := range 100 {
		queues = append(queues, q.queueOf(outbox.Task{Type: TypeWebhookDeliver, RefID: "d", Key: "endpoint-" + string(rune('a'+i%26)) + string(rune('a'+i/26))}))
	}
	for _, q := range queues {
		if _, ok := served[q]; !ok {
			t.Errorf("queue %q is in no pool (pools serve %v)", q, slices.Sorted(maps.Keys(served)))
		}
	}
	for _, p := range pools {
		if p.Name != "webhooks" {
			for q := range p.Queues {
				if q == LegacyWebhookQueue || isWebhookQueue(q) {
					t.Errorf("deliveries share pool %s with %v", p.Name, slices.Sorted(maps.Keys(p.Queues)))
				}
			}
			continue
		}
		for q, w := range p.Queues {
			if q != LegacyWebhookQueue && !isWebhookQueue(q) {
				t.Errorf("the delivery pool serves %q", q)
			}
			if w != 1 {
				t.Errorf("delivery queue %q has weight %d, want 1 like the others", q, w)
			}
		}
	}
}
