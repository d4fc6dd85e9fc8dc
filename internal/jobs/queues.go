package jobs

import (
	"cmp"
	"hash/fnv"
	"slices"
	"strconv"
	"strings"

	"github.com/gatehouse-pay/gatehouse/internal/outbox"
)

// Deliveries are spread over WEBHOOK_QUEUES asynq queues, webhooks-0 to
// webhooks-N-1. asynq keeps each queue's keys under one hash tag (its name),
// so on a Redis Cluster a queue lives on one primary; with several queues
// the deliveries, and the Redis work of taking and retrying them, spread
// over the primaries. An endpoint's deliveries always go to the same queue
// (a stable hash of its id), so they are taken in the order they came.
const (
	// LegacyWebhookQueue is the one queue of deliveries before there were
	// several. Workers keep serving it: an API replica of the earlier
	// release enqueues there during a rolling upgrade, and its retries
	// stay there.
	LegacyWebhookQueue = "webhooks"
	webhookQueuePrefix = LegacyWebhookQueue + "-"
)

// WebhookQueue is the queue of the deliveries of the endpoint key (an
// endpoint id) when there are n queues: FNV-1a of the id, mod n. The hash
// is fixed, so every process and every release agrees.
func WebhookQueue(key string, n int) string {
	h := fnv.New32a()
	h.Write([]byte(key))
	return webhookQueuePrefix + strconv.FormatUint(uint64(h.Sum32()%uint32(max(n, 1))), 10)
}

// WebhookQueues names the n delivery queues.
func WebhookQueues(n int) []string {
	out := make([]string, max(n, 1))
	for i := range out {
		out[i] = webhookQueuePrefix + strconv.Itoa(i)
	}
	return out
}

// isWebhookQueue reports whether q is one of the delivery queues,
// webhooks-<k> for any k.
func isWebhookQueue(q string) bool {
	k, ok := strings.CutPrefix(q, webhookQueuePrefix)
	if !ok || k == "" {
		return false
	}
	n, err := strconv.Atoi(k)
	return err == nil && n >= 0 && strconv.Itoa(n) == k
}

// DeliveryQueues are the queues a worker's delivery pool serves: the n of
// WEBHOOK_QUEUES, the legacy queue, and any other delivery queue among
// existing (the queues asynq knows in Redis, which it never forgets): those
// of a larger WEBHOOK_QUEUES before it was lowered, whose tasks are drained
// rather than left behind.
func DeliveryQueues(n int, existing []string) []string {
	out := append(WebhookQueues(n), LegacyWebhookQueue)
	for _, q := range existing {
		if isWebhookQueue(q) && !slices.Contains(out, q) {
			out = append(out, q)
		}
	}
	return out
}

// queueOf is the asynq queue of an outbox task: its endpoint's delivery
// queue for a delivery (one whose endpoint is not known goes by its own id),
// a delivery queue by the event's id for an event's first attempts (so they
// spread too), critical for every other.
func (q *Queue) queueOf(t outbox.Task) string {
	switch t.Type {
	case TypeWebhookDeliver:
		return WebhookQueue(cmp.Or(t.Key, t.RefID), q.cfg.WebhookQueues)
	case TypeWebhookEvent:
		return WebhookQueue(t.RefID, q.cfg.WebhookQueues)
	}
	return "critical"
}
