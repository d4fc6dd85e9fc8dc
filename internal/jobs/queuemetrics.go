package jobs

import (
	"strings"

	"github.com/hibiken/asynq"
	asynqmetrics "github.com/hibiken/asynq/x/metrics"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// QueueCollector exports asynq's queue metrics (asynq_queue_size,
// asynq_queue_latency_seconds, asynq_tasks_processed_total, ...) from asynq's
// own collector, read from Redis at scrape time. Register it in one process
// kind only (the worker). Two of asynq's gauges carry a _total suffix that
// Prometheus reserves for counters; they are exported as asynq_tasks{queue,state}
// and asynq_queue_paused{queue} instead.
func QueueCollector(inspector *asynq.Inspector) prometheus.Collector {
	return &queueCollector{inner: asynqmetrics.NewQueueMetricsCollector(inspector)}
}

type queueCollector struct{ inner prometheus.Collector }

var (
	queueTasksDesc = prometheus.NewDesc("asynq_tasks",
		"Tasks in each queue by state (active, pending, scheduled, retry, archived, completed).", []string{"queue", "state"}, nil)
	queuePausedDesc = prometheus.NewDesc("asynq_queue_paused",
		"1 when the queue is paused.", []string{"queue"}, nil)
	renamed = map[string]*prometheus.Desc{
		`"asynq_tasks_enqueued_total"`: queueTasksDesc,
		`"asynq_queue_paused_total"`:   queuePausedDesc,
	}
)

func (c *queueCollector) Describe(ch chan<- *prometheus.Desc) {
	inner := make(chan *prometheus.Desc)
	go func() {
		c.inner.Describe(inner)
		close(inner)
	}()
	for d := range inner {
		if to := renamedTo(d); to != nil {
			d = to
		}
		ch <- d
	}
}

func (c *queueCollector) Collect(ch chan<- prometheus.Metric) {
	inner := make(chan prometheus.Metric)
	go func() {
		c.inner.Collect(inner)
		close(inner)
	}()
	for m := range inner {
		to := renamedTo(m.Desc())
		if to == nil {
			ch <- m
			continue
		}
		var pb dto.Metric
		if err := m.Write(&pb); err != nil || pb.Gauge == nil {
			continue
		}
		values := make([]string, 0, len(pb.Label))
		for _, l := range pb.Label { // sorted by name: queue, state
			values = append(values, l.GetValue())
		}
		if len(values) != len(labelNames(to)) {
			continue
		}
		ch <- prometheus.MustNewConstMetric(to, prometheus.GaugeValue, pb.Gauge.GetValue(), values...)
	}
}

func renamedTo(d *prometheus.Desc) *prometheus.Desc {
	s := d.String()
	for name, to := range renamed {
		if strings.Contains(s, "fqName: "+name) {
			return to
		}
	}
	return nil
}

func labelNames(d *prometheus.Desc) []string {
	if d == queueTasksDesc {
		return []string{"queue", "state"}
	}
	return []string{"queue"}
}
