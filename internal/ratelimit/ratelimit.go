// Package ratelimit enforces Gatehouse's sliding-window limits. The shared
// limiter keeps a log of accepted requests per key in a Redis sorted set and
// decides in one atomic script, so all replicas together never accept more than
// N requests in any trailing window. When Redis cannot be reached each replica
// falls back to an in-memory limiter with the same limits, and says so in a
// log line and a metric.
package ratelimit

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/gatehouse-pay/gatehouse/internal/config"
)

// Decision is the outcome of one check.
type Decision struct {
	Allowed   bool
	Limit     int
	Remaining int
	// Reset is the time until the oldest accepted request leaves the window,
	// that is until one more request would be accepted.
	Reset time.Duration
	// Local reports that the in-memory fallback decided.
	Local bool
}

// RetryAfter is Reset in whole seconds, rounded up, at least 1.
func (d Decision) RetryAfter() int { return max(1, ceilSeconds(d.Reset)) }

// ResetSeconds is Reset in whole seconds, rounded up.
func (d Decision) ResetSeconds() int { return ceilSeconds(d.Reset) }

func ceilSeconds(d time.Duration) int {
	if d <= 0 {
		return 0
	}
	return int((d + time.Second - 1) / time.Second)
}

// The script removes entries that left the window, accepts the request if
// fewer than N remain, and reports the count and the time until the oldest
// entry leaves. It reads the clock from Redis (TIME) so every replica shares
// one clock. Scores are microseconds, exact in a double until the year 2255.
var slidingWindow = redis.NewScript(`
local limit = tonumber(ARGV[1])
local window = tonumber(ARGV[2])
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - window)
local count = redis.call('ZCARD', KEYS[1])
local allowed = 0
if count < limit then
  redis.call('ZADD', KEYS[1], now, ARGV[3])
  count = count + 1
  allowed = 1
end
redis.call('PEXPIRE', KEYS[1], math.floor(window / 1000) + 1000)
local reset = 0
local oldest = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
if oldest[2] then
  reset = tonumber(oldest[2]) + window - now
end
return {allowed, count, reset}
`)

// Metrics are the limiter's counters.
type Metrics struct {
	Decisions *prometheus.CounterVec // labels: limit, decision, backend
	Fallbacks *prometheus.CounterVec // labels: limit
}

// NewMetrics creates and registers the limiter's metrics.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		Decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "gatehouse", Name: "ratelimit_decisions_total",
			Help: "Rate-limit decisions by limit, decision (allowed, limited) and backend (redis, local).",
		}, []string{"limit", "decision", "backend"}),
		Fallbacks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "gatehouse", Name: "ratelimit_fallback_total",
			Help: "Decisions made by the in-memory fallback because Redis was unreachable, by limit.",
		}, []string{"limit"}),
	}
	reg.MustRegister(m.Decisions, m.Fallbacks)
	return m
}

// Limiter checks named limits against Redis, falling back to memory.
type Limiter struct {
	rdb     redis.UniversalClient
	local   *Local
	metrics *Metrics
	log     *slog.Logger
	// degraded is 1 while Redis is failing, so the log says so once per outage.
	degraded atomic.Bool
}

// New returns a Limiter on rdb.
func New(rdb redis.UniversalClient, metrics *Metrics, log *slog.Logger) *Limiter {
	return &Limiter{rdb: rdb, local: NewLocal(time.Now), metrics: metrics, log: log}
}

// Declare creates the zero-valued series of a named limit, so dashboards and
// alerts see the limit (and its fallback count) before its first request.
func (l *Limiter) Declare(name string) {
	l.metrics.Fallbacks.WithLabelValues(name)
	for _, d := range []string{"allowed", "limited"} {
		l.metrics.Decisions.WithLabelValues(name, d, "redis")
	}
}

// Allow records one request for key under the named limit and says whether it
// is accepted. It never fails: if Redis errors, the local limiter decides.
func (l *Limiter) Allow(ctx context.Context, name, key string, limit config.Limit) Decision {
	d, err := l.allowRedis(ctx, name, key, limit)
	if err != nil {
		if !l.degraded.Swap(true) {
			l.log.ErrorContext(ctx, "rate limiter falling back to local memory: redis unreachable", "limit", name, "err", err)
		}
		l.metrics.Fallbacks.WithLabelValues(name).Inc()
		d = l.local.Allow(name+"\x00"+key, limit)
	} else if l.degraded.Swap(false) {
		l.log.InfoContext(ctx, "rate limiter back on redis", "limit", name)
	}
	decision, backend := "allowed", "redis"
	if !d.Allowed {
		decision = "limited"
	}
	if d.Local {
		backend = "local"
	}
	l.metrics.Decisions.WithLabelValues(name, decision, backend).Inc()
	return d
}

func (l *Limiter) allowRedis(ctx context.Context, name, key string, limit config.Limit) (Decision, error) {
	var member [12]byte
	_, _ = rand.Read(member[:])
	res, err := slidingWindow.Run(ctx, l.rdb, []string{"gh:rl:" + name + ":" + key},
		limit.N, limit.Window.Microseconds(), hex.EncodeToString(member[:])).Int64Slice()
	if err != nil {
		return Decision{}, err
	}
	return Decision{
		Allowed:   res[0] == 1,
		Limit:     limit.N,
		Remaining: max(0, limit.N-int(res[1])),
		Reset:     time.Duration(res[2]) * time.Microsecond,
	}, nil
}

// Local is an in-memory sliding-window log with the same semantics as the
// Redis script, for one process.
type Local struct {
	mu      sync.Mutex
	now     func() time.Time
	windows map[string][]time.Time
	swept   time.Time
}

// NewLocal returns an empty local limiter reading the clock now.
func NewLocal(now func() time.Time) *Local {
	return &Local{now: now, windows: map[string][]time.Time{}, swept: now()}
}

// Allow records one request for key and decides.
func (l *Local) Allow(key string, limit config.Limit) Decision {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	if now.Sub(l.swept) > time.Minute {
		l.sweep(now)
	}
	log := l.windows[key]
	cut := 0
	for cut < len(log) && !log[cut].After(now.Add(-limit.Window)) {
		cut++
	}
	log = log[cut:]
	d := Decision{Limit: limit.N, Local: true}
	if len(log) < limit.N {
		log = append(log, now)
		d.Allowed = true
	}
	l.windows[key] = log
	d.Remaining = limit.N - len(log)
	d.Reset = log[0].Add(limit.Window).Sub(now)
	return d
}

// sweep drops keys whose newest entry is older than the longest window we
// could be asked about (an hour), bounding memory during a long outage.
func (l *Local) sweep(now time.Time) {
	for k, log := range l.windows {
		if len(log) == 0 || now.Sub(log[len(log)-1]) > time.Hour {
			delete(l.windows, k)
		}
	}
	l.swept = now
}
