package e2e

import (
	"context"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/gatehouse-pay/gatehouse/internal/jobs"
)

// whQueues is WEBHOOK_QUEUES of the stacks of TestWebhookQueuesSpreadOverCluster.
const whQueues = 8

// deliveryQueueInfo sums the asynq queue info of every delivery queue Redis
// knows (webhooks-<k> and the legacy webhooks): the tasks of deliveries,
// wherever their endpoints put them.
func deliveryQueueInfo(inspector *asynq.Inspector) (*asynq.QueueInfo, error) {
	names, err := inspector.Queues()
	if err != nil {
		return nil, err
	}
	sum := &asynq.QueueInfo{Queue: "webhooks*"}
	for _, q := range jobs.DeliveryQueues(0, names) {
		info, err := inspector.GetQueueInfo(q)
		if err != nil {
			continue // a queue nothing was ever enqueued on
		}
		sum.Size += info.Size
		sum.Pending += info.Pending
		sum.Active += info.Active
		sum.Scheduled += info.Scheduled
		sum.Retry += info.Retry
		sum.Archived += info.Archived
		sum.Completed += info.Completed
	}
	return sum, nil
}

// TestWebhookQueuesSpreadOverCluster: on a three-primary Redis Cluster the
// delivery work of a merchant's events is queued on every primary, not on
// the one primary that holds a single queue's hash tag, and the workers
// serve every queue. The delivery queues are paused while the charges are
// made, so the tasks (one per event) are counted where they wait (keys per
// primary); then they are resumed and every delivery must arrive (the first
// to each endpoint handed off to the endpoint's own queue), and the Redis
// commands each primary ran while they were delivered are reported.
//
// With WEBHOOK_QUEUES=1 (one queue: the layout before there were several)
// the check of keys per primary fails: every task waits on one primary.
func TestWebhookQueuesSpreadOverCluster(t *testing.T) {
	parallel(t)
	const charges = 40
	st := newStack(t, stackOptions{env: append(webhooksStackEnv, "WEBHOOK_QUEUES="+strconv.Itoa(whQueues)),
		workerEnv: webhooksWorkerEnv, redisMode: "cluster"}, "deliveries on a Redis Cluster")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	primaries := st.redis.primaries(t)
	owner := slotOwners(t, st.redis, primaries)

	inspector := st.redis.inspector()
	defer inspector.Close()
	for _, q := range jobs.DeliveryQueues(whQueues, nil) {
		if err := inspector.PauseQueue(q); err != nil {
			t.Fatalf("pause %s: %v", q, err)
		}
	}

	// Endpoints until their queues lie on every primary (each endpoint's
	// queue is fixed by its id, which the API picks).
	bag := &secretBag{}
	m := newWebhookMerchant(t, st, bag, "127.0.0.61", "queues")
	rcv := newReceiver(t, "spread", always(http.StatusOK))
	covered := map[int]bool{}
	var endpoints []string
	for (len(covered) < len(primaries) || len(endpoints) < 3) && len(endpoints) < 40 {
		ep, _ := m.endpoint(t, rcv.url()+"/"+strconv.Itoa(len(endpoints)), "charge.created")
		endpoints = append(endpoints, ep.ID)
		covered[owner(jobs.WebhookQueue(ep.ID, whQueues))] = true
	}
	for i := range charges {
		m.charge(t, "spread-"+strconv.Itoa(i))
	}
	want := charges * len(endpoints)

	// Every event's task (its first attempts) waits on a delivery queue
	// picked by the event's id, on that queue's primary.
	var perPrimary []int
	deadline := time.Now().Add(30 * time.Second)
	for {
		perPrimary = deliveryTasksPerPrimary(ctx, t, primaries)
		total := 0
		for _, n := range perPrimary {
			total += n
		}
		if total >= charges || time.Now().After(deadline) {
			t.Logf("%d events, %d deliveries to %d endpoints: tasks per primary %v", charges, want, len(endpoints), perPrimary)
			if total < charges {
				t.Fatalf("%d tasks queued, want %d (one per event)", total, charges)
			}
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	for i, n := range perPrimary {
		if n == 0 {
			t.Errorf("primary %d holds none of the %d tasks (per primary %v): the deliveries do not spread", i, charges, perPrimary)
		}
	}

	before := commandsPerPrimary(ctx, t, primaries)
	start := time.Now()
	for _, q := range jobs.DeliveryQueues(whQueues, nil) {
		if err := inspector.UnpauseQueue(q); err != nil {
			t.Fatalf("resume %s: %v", q, err)
		}
	}
	for rcv.count() < want && time.Since(start) < time.Minute {
		time.Sleep(50 * time.Millisecond)
	}
	took := time.Since(start)
	after := commandsPerPrimary(ctx, t, primaries)
	got := map[string]bool{}
	for _, h := range rcv.all() {
		got[h.deliveryID()] = true
	}
	if len(got) != want {
		t.Fatalf("%d of %d deliveries arrived within a minute", len(got), want)
	}
	delta := make([]int64, len(primaries))
	for i := range primaries {
		delta[i] = after[i] - before[i]
	}
	t.Logf("figures: %d deliveries on %d queues over %d primaries in %s; tasks per primary %v; Redis commands per primary while delivering %v",
		want, whQueues, len(primaries), took.Round(time.Millisecond), perPrimary, delta)
}

// slotOwners returns a function telling which of primaries holds a queue's
// keys (its hash tag's slot).
func slotOwners(t *testing.T, d *redisDeploy, primaries []*redis.Client) func(queue string) int {
	t.Helper()
	slots, err := d.client.ClusterSlots(context.Background()).Result()
	if err != nil {
		t.Fatal(err)
	}
	return func(queue string) int {
		slot := keySlot(t, d, "{"+queue+"}")
		for _, s := range slots {
			if int64(s.Start) <= slot && slot <= int64(s.End) && len(s.Nodes) > 0 {
				for i, p := range primaries {
					if p.Options().Addr == s.Nodes[0].Addr {
						return i
					}
				}
			}
		}
		t.Fatalf("no primary holds slot %d of queue %s", slot, queue)
		return -1
	}
}

// deliveryTasksPerPrimary counts, on each primary, the asynq task hashes
// of the delivery queues (asynq:{webhooks...}:t:<id>): events' and
// deliveries' tasks.
func deliveryTasksPerPrimary(ctx context.Context, t *testing.T, primaries []*redis.Client) []int {
	t.Helper()
	out := make([]int, len(primaries))
	for i, c := range primaries {
		iter := c.Scan(ctx, 0, "asynq:{webhooks*}:t:*", 1000).Iterator()
		for iter.Next(ctx) {
			out[i]++
		}
		if err := iter.Err(); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

// commandsPerPrimary is the number of commands each primary has run
// (the calls of INFO commandstats, summed).
func commandsPerPrimary(ctx context.Context, t *testing.T, primaries []*redis.Client) []int64 {
	t.Helper()
	out := make([]int64, len(primaries))
	for i, c := range primaries {
		info, err := c.Info(ctx, "commandstats").Result()
		if err != nil {
			t.Fatal(err)
		}
		out[i] = commandCalls(info)
	}
	return out
}

// commandCalls sums the calls of an INFO commandstats answer.
func commandCalls(info string) int64 {
	var n int64
	for line := range strings.SplitSeq(info, "\n") {
		_, stats, ok := strings.Cut(strings.TrimSpace(line), ":calls=")
		if !ok {
			continue
		}
		calls, _, _ := strings.Cut(stats, ",")
		v, err := strconv.ParseInt(calls, 10, 64)
		if err == nil {
			n += v
		}
	}
	return n
}
