package jobs

import (
	"maps"
	"slices"
	"testing"
)

// TestPoolsTakeEveryQueueOnce: every queue a task goes to is served by
// exactly one pool, and deliveries by a pool of their own.
func TestPoolsTakeEveryQueueOnce(t *testing.T) {
	served := map[string]string{}
	for _, p := range Pools {
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
	queues := []string{"maintenance"} // the scheduler's tasks
	for _, typ := range []string{TypeChargeAuthorize, TypeChargeCapture, TypeChargeVoid, TypeChargeReverse, TypeRefundProcess, TypeWebhookDeliver} {
		queues = append(queues, queueOf(typ))
	}
	for _, q := range queues {
		if _, ok := served[q]; !ok {
			t.Errorf("queue %q is in no pool (pools serve %v)", q, slices.Sorted(maps.Keys(served)))
		}
	}
	for _, p := range Pools {
		if _, ok := p.Queues[queueOf(TypeWebhookDeliver)]; ok && len(p.Queues) != 1 {
			t.Errorf("deliveries share pool %s with %v", p.Name, slices.Sorted(maps.Keys(p.Queues)))
		}
	}
}
