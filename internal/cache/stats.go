package cache

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
)

// PoolCollector exports a Redis client's connection pool statistics as
// gatehouse_redis_pool_* metrics; client names the client ("cache" or
// "queue") when a process has more than one.
func PoolCollector(c redis.UniversalClient, client string) prometheus.Collector {
	return &poolCollector{c: c, labels: prometheus.Labels{"client": client}}
}

type poolCollector struct {
	c      redis.UniversalClient
	labels prometheus.Labels
}

func (p *poolCollector) descs() (hits, misses, timeouts, total, idle, stale *prometheus.Desc) {
	d := func(name, help string) *prometheus.Desc {
		return prometheus.NewDesc("gatehouse_redis_pool_"+name, help, nil, p.labels)
	}
	return d("hits_total", "Commands that found an idle connection in the pool."),
		d("misses_total", "Commands that had to open or wait for a connection."),
		d("timeouts_total", "Waits for a connection that timed out."),
		d("total_connections", "Connections in the pool."),
		d("idle_connections", "Idle connections in the pool."),
		d("stale_connections_total", "Connections removed from the pool as stale.")
}

func (p *poolCollector) Describe(ch chan<- *prometheus.Desc) {
	hits, misses, timeouts, total, idle, stale := p.descs()
	for _, d := range []*prometheus.Desc{hits, misses, timeouts, total, idle, stale} {
		ch <- d
	}
}

func (p *poolCollector) Collect(ch chan<- prometheus.Metric) {
	s := p.c.PoolStats()
	hits, misses, timeouts, total, idle, stale := p.descs()
	ch <- prometheus.MustNewConstMetric(hits, prometheus.CounterValue, float64(s.Hits))
	ch <- prometheus.MustNewConstMetric(misses, prometheus.CounterValue, float64(s.Misses))
	ch <- prometheus.MustNewConstMetric(timeouts, prometheus.CounterValue, float64(s.Timeouts))
	ch <- prometheus.MustNewConstMetric(total, prometheus.GaugeValue, float64(s.TotalConns))
	ch <- prometheus.MustNewConstMetric(idle, prometheus.GaugeValue, float64(s.IdleConns))
	ch <- prometheus.MustNewConstMetric(stale, prometheus.CounterValue, float64(s.StaleConns))
}
