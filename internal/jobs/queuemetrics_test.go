package jobs_test

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/hibiken/asynq"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"

	"github.com/gatehouse-pay/gatehouse/internal/jobs"
	"github.com/gatehouse-pay/gatehouse/internal/testenv"
)

// TestQueueCollector: asynq's queue metrics are read from Redis at scrape
// time; its two gauges named like counters come out as asynq_tasks and
// asynq_queue_paused, and the whole output passes the Prometheus lint.
func TestQueueCollector(t *testing.T) {
	rdb := testenv.NewRedis(t, testenv.RedisDBJobs)
	const queue = "metrics"
	client := asynq.NewClientFromRedisClient(rdb)
	defer client.Close()
	inspector := asynq.NewInspectorFromRedisClient(rdb)
	defer inspector.Close()
	if _, err := client.Enqueue(asynq.NewTask("test:noop", nil), asynq.Queue(queue)); err != nil {
		t.Fatal(err)
	}

	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(jobs.QueueCollector(inspector))
	got := gatherQueue(t, reg, queue)
	for _, name := range []string{"asynq_tasks_enqueued_total", "asynq_queue_paused_total"} {
		if _, ok := got.families[name]; ok {
			t.Errorf("%s is exported; want it renamed", name)
		}
	}
	want := map[string]float64{
		`asynq_queue_size`:               1,
		`asynq_tasks{state="pending"}`:   1,
		`asynq_tasks{state="active"}`:    0,
		`asynq_tasks{state="scheduled"}`: 0,
		`asynq_tasks{state="retry"}`:     0,
		`asynq_tasks{state="archived"}`:  0,
		`asynq_tasks{state="completed"}`: 0,
		`asynq_queue_paused`:             0,
		`asynq_tasks_processed_total`:    0,
		`asynq_tasks_failed_total`:       0,
	}
	// got.values holds more series (latency, memory); compare those listed.
	listed := map[string]float64{}
	for k := range want {
		if v, ok := got.values[k]; ok {
			listed[k] = v
		}
	}
	if diff := cmp.Diff(want, listed); diff != "" {
		t.Errorf("series of queue %q (-want +got):\n%s", queue, diff)
	}
	for _, name := range []string{"asynq_queue_latency_seconds", "asynq_queue_memory_usage_approx_bytes"} {
		if _, ok := got.values[name]; !ok {
			t.Errorf("%s{queue=%q} is missing", name, queue)
		}
	}
	for name, typ := range map[string]dto.MetricType{
		"asynq_tasks": dto.MetricType_GAUGE, "asynq_queue_paused": dto.MetricType_GAUGE,
		"asynq_queue_size": dto.MetricType_GAUGE, "asynq_tasks_processed_total": dto.MetricType_COUNTER,
	} {
		switch mf, ok := got.families[name]; {
		case !ok:
			t.Errorf("%s is missing", name)
		case mf.GetType() != typ:
			t.Errorf("%s: type %v, want %v", name, mf.GetType(), typ)
		}
	}

	problems, err := testutil.CollectAndLint(jobs.QueueCollector(inspector))
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("lint: %s: %s", p.Metric, p.Text)
	}

	if err := inspector.PauseQueue(queue); err != nil {
		t.Fatal(err)
	}
	if got := gatherQueue(t, reg, queue).values["asynq_queue_paused"]; got != 1 {
		t.Errorf("asynq_queue_paused after PauseQueue: %v, want 1", got)
	}
}

// queueSeries are the gathered families and, for one queue, each series'
// value keyed by name and its labels other than queue.
type queueSeries struct {
	families map[string]*dto.MetricFamily
	values   map[string]float64
}

func gatherQueue(t *testing.T, g prometheus.Gatherer, queue string) queueSeries {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatalf("gather: %v", err)
	}
	s := queueSeries{families: map[string]*dto.MetricFamily{}, values: map[string]float64{}}
	for _, mf := range mfs {
		s.families[mf.GetName()] = mf
		for _, m := range mf.GetMetric() {
			key, mine := mf.GetName(), false
			for _, l := range m.GetLabel() {
				switch {
				case l.GetName() == "queue":
					mine = l.GetValue() == queue
				default:
					key += "{" + l.GetName() + "=" + `"` + l.GetValue() + `"}`
				}
			}
			if !mine {
				continue
			}
			v := m.GetGauge().GetValue()
			if m.Counter != nil {
				v = m.GetCounter().GetValue()
			}
			if _, dup := s.values[key]; dup {
				t.Errorf("%s{queue=%q} gathered twice", key, queue)
			}
			s.values[key] = v
		}
	}
	return s
}
