package store

import (
	"context"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/gatehouse-pay/gatehouse/internal/outbox"
)

// PoolCollector exports the connection pool's statistics as
// gatehouse_db_pool_* metrics, read from pgxpool at scrape time.
func PoolCollector(pool *pgxpool.Pool) prometheus.Collector {
	return &poolCollector{pool: pool}
}

type poolCollector struct{ pool *pgxpool.Pool }

var (
	poolAcquired      = dbDesc("acquired_connections", "Connections in use.")
	poolIdle          = dbDesc("idle_connections", "Idle connections in the pool.")
	poolTotal         = dbDesc("total_connections", "Connections in the pool: acquired, idle and being opened.")
	poolMax           = dbDesc("max_connections", "The pool's size limit.")
	poolAcquires      = dbDesc("acquires_total", "Connections taken from the pool.")
	poolEmptyAcquires = dbDesc("empty_acquires_total", "Acquires that had to wait because no idle connection was there.")
	poolCanceled      = dbDesc("canceled_acquires_total", "Acquires given up because their context ended.")
	poolWait          = dbDesc("acquire_wait_seconds_total", "Time spent waiting for a connection.")
)

func dbDesc(name, help string) *prometheus.Desc {
	return prometheus.NewDesc("gatehouse_db_pool_"+name, help, nil, nil)
}

func (c *poolCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{poolAcquired, poolIdle, poolTotal, poolMax, poolAcquires, poolEmptyAcquires, poolCanceled, poolWait} {
		ch <- d
	}
}

func (c *poolCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.pool.Stat()
	ch <- prometheus.MustNewConstMetric(poolAcquired, prometheus.GaugeValue, float64(s.AcquiredConns()))
	ch <- prometheus.MustNewConstMetric(poolIdle, prometheus.GaugeValue, float64(s.IdleConns()))
	ch <- prometheus.MustNewConstMetric(poolTotal, prometheus.GaugeValue, float64(s.TotalConns()))
	ch <- prometheus.MustNewConstMetric(poolMax, prometheus.GaugeValue, float64(s.MaxConns()))
	ch <- prometheus.MustNewConstMetric(poolAcquires, prometheus.CounterValue, float64(s.AcquireCount()))
	ch <- prometheus.MustNewConstMetric(poolEmptyAcquires, prometheus.CounterValue, float64(s.EmptyAcquireCount()))
	ch <- prometheus.MustNewConstMetric(poolCanceled, prometheus.CounterValue, float64(s.CanceledAcquireCount()))
	ch <- prometheus.MustNewConstMetric(poolWait, prometheus.CounterValue, s.AcquireDuration().Seconds())
}

// outboxStats counts the outbox rows by task type and measures, per type, how
// long the oldest row has been due. A delivery waiting for a scheduled retry
// is due at its next_attempt_at, not when its row was written, so a backlog of
// healthy retries does not look stale.
const outboxStats = `
SELECT o.task_type, count(*),
       coalesce(extract(epoch FROM now() - min(coalesce(d.next_attempt_at, o.created_at))
                FILTER (WHERE coalesce(d.next_attempt_at, o.created_at) <= now())), 0)::float8
FROM outbox o
LEFT JOIN webhook_deliveries d ON o.task_type = '` + outbox.WebhookDeliver + `' AND d.id = o.ref_id
GROUP BY o.task_type`

// OutboxCollector exports gatehouse_outbox_backlog and
// gatehouse_outbox_oldest_age_seconds by task type. It queries Postgres at
// most once per minInterval (several Prometheus servers may scrape), with a
// short timeout; a failed query leaves the metrics out of that scrape.
func OutboxCollector(pool *pgxpool.Pool, minInterval time.Duration) prometheus.Collector {
	return &outboxCollector{pool: pool, every: minInterval}
}

type outboxCollector struct {
	pool  *pgxpool.Pool
	every time.Duration

	mu     sync.Mutex
	at     time.Time
	counts map[string]float64
	ages   map[string]float64
}

var (
	outboxBacklogDesc = prometheus.NewDesc("gatehouse_outbox_backlog",
		"Outbox rows (tasks committed but not finished) by task type.", []string{"type"}, nil)
	outboxAgeDesc = prometheus.NewDesc("gatehouse_outbox_oldest_age_seconds",
		"How long the oldest due outbox row of each task type has waited; 0 when none is due.", []string{"type"}, nil)
)

func (c *outboxCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- outboxBacklogDesc
	ch <- outboxAgeDesc
}

func (c *outboxCollector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.counts == nil || time.Since(c.at) >= c.every {
		if err := c.refresh(); err != nil {
			return
		}
	}
	for _, typ := range outbox.Types {
		ch <- prometheus.MustNewConstMetric(outboxBacklogDesc, prometheus.GaugeValue, c.counts[typ], typ)
		ch <- prometheus.MustNewConstMetric(outboxAgeDesc, prometheus.GaugeValue, c.ages[typ], typ)
	}
}

func (c *outboxCollector) refresh() error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	rows, err := c.pool.Query(ctx, outboxStats)
	if err != nil {
		return err
	}
	defer rows.Close()
	counts, ages := map[string]float64{}, map[string]float64{}
	for rows.Next() {
		var typ string
		var n int64
		var age float64
		if err := rows.Scan(&typ, &n, &age); err != nil {
			return err
		}
		counts[typ], ages[typ] = float64(n), age
	}
	if err := rows.Err(); err != nil {
		return err
	}
	c.counts, c.ages, c.at = counts, ages, time.Now()
	return nil
}

// outcomesUnknown counts the payments, captures and refunds still waiting
// for the provider's outcome longer than $1: a payment the provider accepted
// and has not finished (the charge is created with a provider reference), a
// capture requested (the charge is authorized with the capture pending;
// updated_at is the request's time, nothing else moves the charge
// meanwhile) and a refund still pending, unless a provider that settles by
// notification received it. Then, $2 on, the confirmations overdue: the
// captures and voids (capturing, voiding) and the refunds such a provider
// received whose notification has not come for longer than $2.
const outcomesUnknown = `
SELECT (SELECT count(*) FROM charges WHERE status = 'created' AND provider_reference IS NOT NULL AND created_at < now() - $1::float8 * interval '1 second'),
       (SELECT count(*) FROM charges WHERE status = 'authorized' AND pending_action = 'capture' AND updated_at < now() - $1::float8 * interval '1 second'),
       (SELECT count(*) FROM refunds r WHERE r.status = 'pending' AND r.created_at < now() - $1::float8 * interval '1 second'
		AND NOT (r.provider_reference IS NOT NULL AND (SELECT c.provider FROM charges c WHERE c.id = r.charge_id) = ANY ($3::text[]))),
       (SELECT count(*) FROM charges WHERE status = 'capturing' AND updated_at < now() - $2::float8 * interval '1 second'),
       (SELECT count(*) FROM charges WHERE status = 'voiding' AND updated_at < now() - $2::float8 * interval '1 second'),
       (SELECT count(*) FROM refunds r WHERE r.status = 'pending' AND r.provider_reference IS NOT NULL AND r.updated_at < now() - $2::float8 * interval '1 second'
		AND (SELECT c.provider FROM charges c WHERE c.id = r.charge_id) = ANY ($3::text[]))`

var outcomesUnknownDesc = prometheus.NewDesc("gatehouse_provider_outcomes_unknown",
	"Authorizations, captures and refunds whose provider outcome is still unknown after PROVIDER_OUTCOME_UNKNOWN_AFTER, by operation.",
	[]string{"operation"}, nil)

var confirmationsOverdueDesc = prometheus.NewDesc("gatehouse_provider_confirmations_overdue",
	"Captures, voids and refunds a provider that settles by notification (Adyen) received and whose notification has not come within PROVIDER_CONFIRMATION_TIMEOUT, by operation.",
	[]string{"operation"}, nil)

// NotifiedProviders are the providers whose captures, voids and refunds
// settle by notification (providers.SettlesByNotification).
var NotifiedProviders = []string{"adyen"}

// OutcomesCollector exports gatehouse_provider_outcomes_unknown{operation}
// (authorize, capture, refund): the payments, captures and refunds waiting for the provider's
// outcome longer than after, which an operator must resolve (see
// docs/background.md, "Resolving a stuck object"). It queries Postgres at most once per minInterval, with
// a short timeout; a failed query leaves the metric out of that scrape.
//
// It exports gatehouse_provider_confirmations_overdue{operation} (capture,
// void, refund) too: what a provider that settles by notification received
// and has not confirmed within confirmAfter (PROVIDER_CONFIRMATION_TIMEOUT).
func OutcomesCollector(pool *pgxpool.Pool, after, confirmAfter, minInterval time.Duration) prometheus.Collector {
	return &outcomesCollector{pool: pool, after: after, confirmAfter: confirmAfter, every: minInterval}
}

type outcomesCollector struct {
	pool                       *pgxpool.Pool
	after, confirmAfter, every time.Duration

	mu     sync.Mutex
	at     time.Time
	loaded bool
	counts [6]float64 // authorize, capture, refund unknown; capture, void, refund overdue
}

func (c *outcomesCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- outcomesUnknownDesc
	ch <- confirmationsOverdueDesc
}

func (c *outcomesCollector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.loaded || time.Since(c.at) >= c.every {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		var n [6]int64
		err := c.pool.QueryRow(ctx, outcomesUnknown, c.after.Seconds(), c.confirmAfter.Seconds(), NotifiedProviders).
			Scan(&n[0], &n[1], &n[2], &n[3], &n[4], &n[5])
		cancel()
		if err != nil {
			return
		}
		for i, v := range n {
			c.counts[i] = float64(v)
		}
		c.at, c.loaded = time.Now(), true
	}
	ch <- prometheus.MustNewConstMetric(outcomesUnknownDesc, prometheus.GaugeValue, c.counts[0], "authorize")
	ch <- prometheus.MustNewConstMetric(outcomesUnknownDesc, prometheus.GaugeValue, c.counts[1], "capture")
	ch <- prometheus.MustNewConstMetric(outcomesUnknownDesc, prometheus.GaugeValue, c.counts[2], "refund")
	ch <- prometheus.MustNewConstMetric(confirmationsOverdueDesc, prometheus.GaugeValue, c.counts[3], "capture")
	ch <- prometheus.MustNewConstMetric(confirmationsOverdueDesc, prometheus.GaugeValue, c.counts[4], "void")
	ch <- prometheus.MustNewConstMetric(confirmationsOverdueDesc, prometheus.GaugeValue, c.counts[5], "refund")
}

// disputesDue counts the disputes waiting for the merchant's evidence
// (needs_response, or warning_needs_response for an inquiry, with nothing
// submitted yet) whose evidence is due within $1 seconds, those already
// past due included, and then those past due alone. The status filter is
// the predicate of the partial index disputes_due_idx, so the count reads
// only the disputes still waiting, by deadline.
const disputesDue = `
SELECT count(*),
       count(*) FILTER (WHERE evidence_due_by <= now())
FROM disputes
WHERE status IN ('needs_response', 'warning_needs_response')
  AND evidence_submitted_at IS NULL
  AND evidence_due_by <= now() + $1::float8 * interval '1 second'`

// disputesDueWithin is how close a dispute's evidence deadline must be for
// gatehouse_disputes_due_soon to count it.
const disputesDueWithin = 72 * time.Hour

var disputesDueSoonDesc = prometheus.NewDesc("gatehouse_disputes_due_soon",
	"Disputes waiting for the merchant's evidence (needs_response or warning_needs_response, none submitted) whose evidence is due within 72 hours, those past due included.",
	nil, nil)

var disputesOverdueDesc = prometheus.NewDesc("gatehouse_disputes_overdue",
	"Disputes waiting for the merchant's evidence (needs_response or warning_needs_response, none submitted) whose evidence due date has passed.",
	nil, nil)

// DisputesCollector exports gatehouse_disputes_due_soon: the disputes
// waiting for the merchant's evidence whose deadline is within 72 hours,
// or already past (a dispute whose deadline passes without evidence is
// lost, and its money with it); and gatehouse_disputes_overdue, those past
// their deadline. It queries Postgres at most once per minInterval, with a
// short timeout; a failed query leaves the metrics out of that scrape.
func DisputesCollector(pool *pgxpool.Pool, minInterval time.Duration) prometheus.Collector {
	return &disputesCollector{pool: pool, every: minInterval}
}

type disputesCollector struct {
	pool  *pgxpool.Pool
	every time.Duration

	mu      sync.Mutex
	at      time.Time
	loaded  bool
	dueSoon float64
	overdue float64
}

func (c *disputesCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- disputesDueSoonDesc
	ch <- disputesOverdueDesc
}

func (c *disputesCollector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.loaded || time.Since(c.at) >= c.every {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		var dueSoon, overdue int64
		err := c.pool.QueryRow(ctx, disputesDue, disputesDueWithin.Seconds()).Scan(&dueSoon, &overdue)
		cancel()
		if err != nil {
			return
		}
		c.dueSoon, c.overdue = float64(dueSoon), float64(overdue)
		c.at, c.loaded = time.Now(), true
	}
	ch <- prometheus.MustNewConstMetric(disputesDueSoonDesc, prometheus.GaugeValue, c.dueSoon)
	ch <- prometheus.MustNewConstMetric(disputesOverdueDesc, prometheus.GaugeValue, c.overdue)
}
