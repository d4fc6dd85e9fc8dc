// Package ratelimit enforces Gatehouse's sliding-window limits. The shared
// limiter keeps a log of accepted requests per key in a Redis sorted set and
// decides in one atomic script, so all replicas together never accept more than
// N requests in any trailing window. When Redis cannot be reached each replica
// falls back to an in-memory limiter with the same limits, and says so in a
// log line and a metric. Each replica also remembers, in bounded memory, the
// keys it saw refused until their window frees (Over), so callers can refuse
// work before spending it. Failure budgets (Failures, Fail) count only failed
// attempts, and known members (Remember, Known) exempt an account's usual
// addresses from them.
package ratelimit

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
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
var slidingWindow = redis.NewScript(windowLua + `return {allowed, count, reset}`)

// windowLua is the sliding window of slidingWindow and gatedWindow: KEYS[1]
// the log, ARGV limit, window (µs) and the new member.
const windowLua = `
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
`

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
	over    *overMemo
	metrics *Metrics
	log     *slog.Logger
	// degraded is 1 while Redis is failing, so the log says so once per outage.
	degraded atomic.Bool
	// cluster: rdb is a Redis Cluster, where one script touches one slot.
	cluster bool
}

// New returns a Limiter on rdb.
func New(rdb redis.UniversalClient, metrics *Metrics, log *slog.Logger) *Limiter {
	_, cluster := rdb.(*redis.ClusterClient)
	return &Limiter{rdb: rdb, local: NewLocal(time.Now), over: newOverMemo(time.Now, maxOverKeys), metrics: metrics, log: log, cluster: cluster}
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
	l.record(name, key, d)
	return d
}

// record counts a decision in the metrics and remembers a refusal for Over.
func (l *Limiter) record(name, key string, d Decision) {
	decision, backend := "allowed", "redis"
	if !d.Allowed {
		decision = "limited"
	}
	if d.Local {
		backend = "local"
	}
	l.metrics.Decisions.WithLabelValues(name, decision, backend).Inc()
	if !d.Allowed {
		l.over.note(name+"\x00"+key, d)
	}
}

// Over reports, from this replica's memory and without a round trip, that
// key was refused under the named limit and its window has not freed since:
// the decision Allow would return now (no request leaves the window before
// Reset). Callers use it to refuse work before spending it, as the charge
// route does before looking up a key for an address over its budget of
// failed authentications. A replica that has not itself seen the refusal
// answers false and learns it from its next call to Allow.
func (l *Limiter) Over(name, key string) (Decision, bool) {
	return l.over.get(name + "\x00" + key)
}

// maxOverKeys bounds the memory of Over: at most this many keys are held
// (about 100 bytes each); beyond it refusals are not remembered and the
// callers go back to asking Redis.
const maxOverKeys = 100_000

// overMemo remembers, per replica, the keys that are over a limit until
// their window frees.
type overMemo struct {
	mu    sync.Mutex
	now   func() time.Time
	max   int
	swept time.Time
	until map[string]Decision // Reset holds the absolute time, as nanoseconds since the epoch
}

func newOverMemo(now func() time.Time, max int) *overMemo {
	return &overMemo{now: now, max: max, until: map[string]Decision{}}
}

func (m *overMemo) note(key string, d Decision) {
	now := m.now()
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.until) >= m.max {
		if now.Sub(m.swept) < time.Second {
			return // full, and swept a moment ago: do not scan on every refusal
		}
		m.swept = now
		for k, v := range m.until {
			if time.Duration(now.UnixNano()) >= v.Reset {
				delete(m.until, k)
			}
		}
		if len(m.until) >= m.max {
			return
		}
	}
	d.Reset = time.Duration(now.UnixNano()) + d.Reset
	m.until[key] = d
}

func (m *overMemo) get(key string) (Decision, bool) {
	now := time.Duration(m.now().UnixNano())
	m.mu.Lock()
	defer m.mu.Unlock()
	d, ok := m.until[key]
	if !ok {
		return Decision{}, false
	}
	if now >= d.Reset {
		delete(m.until, key)
		return Decision{}, false
	}
	d.Reset -= now
	d.Remaining = 0
	return d, true
}

func (l *Limiter) allowRedis(ctx context.Context, name, key string, limit config.Limit) (Decision, error) {
	res, err := slidingWindow.Run(ctx, l.rdb, []string{windowKey(name, key)},
		limit.N, limit.Window.Microseconds(), newMember()).Int64Slice()
	if err != nil {
		return Decision{}, err
	}
	return decisionOf(limit, res[0], res[1], res[2]), nil
}

func windowKey(name, key string) string { return "gh:rl:" + name + ":" + key }

// newMember is a random sorted-set member, so that requests in the same
// microsecond are separate entries.
func newMember() string {
	var member [12]byte
	_, _ = rand.Read(member[:])
	return hex.EncodeToString(member[:])
}

func decisionOf(limit config.Limit, allowed, count, reset int64) Decision {
	return Decision{
		Allowed:   allowed == 1,
		Limit:     limit.N,
		Remaining: max(0, limit.N-int(count)),
		Reset:     time.Duration(reset) * time.Microsecond,
	}
}

// A Gate is a Redis string that decides whether a request is counted at all:
// AllowGated counts the request only while the string at Key ends with Open.
// The API key cache is one: a request with a key whose cached entry says
// active is counted against the key's limit in the same round trip that
// reads the entry. Key must hash to the same Redis Cluster slot as the
// limit's key (a shared {hash tag}).
type Gate struct {
	Key  string
	Open string
}

// gatedWindow is slidingWindow behind a gate: it reads KEYS[2] and, unless
// the value ends with ARGV[4], returns {-1, 0, 0, value or ""} without
// counting; otherwise slidingWindow's answer followed by the value.
var gatedWindow = redis.NewScript(`
local v = redis.call('GET', KEYS[2])
local open = ARGV[4]
if not v or string.len(v) < string.len(open) or string.sub(v, -string.len(open)) ~= open then
  return {-1, 0, 0, v or ''}
end
` + windowLua + `return {allowed, count, reset, v}`)

// AllowGated is Allow for a request that counts only while gate is open, in
// one round trip: it returns the gate's value ("" when it does not exist)
// and, when the gate was open, the decision with counted true. It does not
// fall back: on a Redis error it returns the error and counts nothing, and
// the caller takes its slower way (reading the gate's truth elsewhere, then
// Allow with the same name and key, which share the window).
func (l *Limiter) AllowGated(ctx context.Context, name, key string, limit config.Limit, gate Gate) (d Decision, value string, counted bool, err error) {
	res, err := gatedWindow.Run(ctx, l.rdb, []string{windowKey(name, key), gate.Key},
		limit.N, limit.Window.Microseconds(), newMember(), gate.Open).Slice()
	if err != nil {
		return Decision{}, "", false, err
	}
	if len(res) != 4 {
		return Decision{}, "", false, errors.New("ratelimit: unexpected answer from the gated window")
	}
	allowed, _ := res[0].(int64)
	count, _ := res[1].(int64)
	reset, _ := res[2].(int64)
	value, _ = res[3].(string)
	if allowed < 0 {
		return Decision{}, value, false, nil
	}
	if l.degraded.Swap(false) {
		l.log.InfoContext(ctx, "rate limiter back on redis", "limit", name)
	}
	d = decisionOf(limit, allowed, count, reset)
	l.record(name, key, d)
	return d, value, true, nil
}

// Also is a second limit of a request, counted after the first one of
// AllowGatedAlso: the limit of the one that owns the first key (the
// merchant that owns an API key). It is counted only when the gate's value
// begins with Prefix (the gate's entry names that owner), so a wrong guess
// of the owner counts nothing.
type Also struct {
	Name   string
	Key    string
	Limit  config.Limit
	Prefix string
}

// gatedAlso is gatedWindow with a second window: KEYS[3], ARGV[5] its limit,
// ARGV[6] its window (µs), ARGV[7] the prefix the gate's value must have
// (Also.Prefix).
// The second window is counted only when the first allowed the request; it
// returns gatedWindow's answer followed by the second's allowed (-1: not
// counted), count and reset.
var gatedAlso = redis.NewScript(`
local v = redis.call('GET', KEYS[2])
local open = ARGV[4]
if not v or string.len(v) < string.len(open) or string.sub(v, -string.len(open)) ~= open then
  return {-1, 0, 0, v or '', -1, 0, 0}
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local function slide(key, limit, window)
  redis.call('ZREMRANGEBYSCORE', key, '-inf', now - window)
  local count = redis.call('ZCARD', key)
  local allowed = 0
  if count < limit then
    redis.call('ZADD', key, now, ARGV[3])
    count = count + 1
    allowed = 1
  end
  redis.call('PEXPIRE', key, math.floor(window / 1000) + 1000)
  local reset = 0
  local oldest = redis.call('ZRANGE', key, 0, 0, 'WITHSCORES')
  if oldest[2] then
    reset = tonumber(oldest[2]) + window - now
  end
  return allowed, count, reset
end
local allowed, count, reset = slide(KEYS[1], tonumber(ARGV[1]), tonumber(ARGV[2]))
local prefix = ARGV[7]
if allowed == 1 and prefix ~= '' and string.sub(v, 1, string.len(prefix)) == prefix then
  local a2, c2, r2 = slide(KEYS[3], tonumber(ARGV[5]), tonumber(ARGV[6]))
  return {allowed, count, reset, v, a2, c2, r2}
end
return {allowed, count, reset, v, -1, 0, 0}`)

// Gated is what AllowGatedAlso found: the gate's value, whether the gate
// was open and the request counted under the first limit (Counted, then
// Decision), and whether it was counted under the second too (AlsoCounted,
// then Also).
type Gated struct {
	Decision    Decision
	Value       string
	Counted     bool
	Also        Decision
	AlsoCounted bool
}

// AllowGatedAlso is AllowGated that also counts the request under a second
// limit, in the same script, when the first allows it and the gate's value
// begins with also.Prefix. On a Redis Cluster the second window lives in another
// slot, and a script may touch one slot only: there, and when also is nil,
// it is AllowGated, and the caller counts the second limit with Allow
// (AlsoCounted false), as it does when the owner was not the one guessed.
// A request the second limit refuses stays counted under the first. It
// does not fall back: see AllowGated.
func (l *Limiter) AllowGatedAlso(ctx context.Context, name, key string, limit config.Limit, gate Gate, also *Also) (Gated, error) {
	if also == nil || l.cluster {
		d, v, counted, err := l.AllowGated(ctx, name, key, limit, gate)
		return Gated{Decision: d, Value: v, Counted: counted}, err
	}
	res, err := gatedAlso.Run(ctx, l.rdb, []string{windowKey(name, key), gate.Key, windowKey(also.Name, also.Key)},
		limit.N, limit.Window.Microseconds(), newMember(), gate.Open,
		also.Limit.N, also.Limit.Window.Microseconds(), also.Prefix).Slice()
	if err != nil {
		return Gated{}, err
	}
	if len(res) != 7 {
		return Gated{}, errors.New("ratelimit: unexpected answer from the gated windows")
	}
	n := make([]int64, len(res))
	for i, r := range res {
		n[i], _ = r.(int64)
	}
	value, _ := res[3].(string)
	if n[0] < 0 {
		return Gated{Value: value}, nil
	}
	if l.degraded.Swap(false) {
		l.log.InfoContext(ctx, "rate limiter back on redis", "limit", name)
	}
	g := Gated{Decision: decisionOf(limit, n[0], n[1], n[2]), Value: value, Counted: true}
	l.record(name, key, g.Decision)
	if n[4] >= 0 {
		g.Also, g.AlsoCounted = decisionOf(also.Limit, n[4], n[5], n[6]), true
		l.record(also.Name, also.Key, g.Also)
	}
	return g, nil
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

// peek is Allow without recording.
func (l *Local) peek(key string, limit config.Limit) Decision {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	log := l.trim(key, now, limit)
	d := Decision{Allowed: len(log) < limit.N, Limit: limit.N, Remaining: max(0, limit.N-len(log)), Local: true}
	if len(log) > 0 {
		d.Reset = log[0].Add(limit.Window).Sub(now)
	}
	return d
}

// add records one entry, keeping the newest limit.N.
func (l *Local) add(key string, limit config.Limit) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	if now.Sub(l.swept) > time.Minute {
		l.sweep(now)
	}
	log := append(l.trim(key, now, limit), now)
	if len(log) > limit.N {
		log = log[len(log)-limit.N:]
	}
	l.windows[key] = log
}

// trim drops the entries of key that left the window and returns the rest.
func (l *Local) trim(key string, now time.Time, limit config.Limit) []time.Time {
	log := l.windows[key]
	cut := 0
	for cut < len(log) && !log[cut].After(now.Add(-limit.Window)) {
		cut++
	}
	return log[cut:]
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

// Failure budgets. Unlike Allow, which refuses the request it counts, a
// failure budget is read before an attempt (Failures) and charged only when
// the attempt fails (Fail), so successes never use it up. Login uses one per
// account: see httpapi's login guard.

// peekWindow reports the number of entries in the window and the time until
// the oldest leaves it, without adding one.
var peekWindow = redis.NewScript(`
local window = tonumber(ARGV[1])
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - window)
local count = redis.call('ZCARD', KEYS[1])
local reset = 0
local oldest = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
if oldest[2] then
  reset = tonumber(oldest[2]) + window - now
end
return {count, reset}
`)

// addWindow adds one entry and keeps only the newest limit entries, so a
// flood of failures holds at most limit members per key.
var addWindow = redis.NewScript(`
local limit = tonumber(ARGV[1])
local window = tonumber(ARGV[2])
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
redis.call('ZADD', KEYS[1], now, ARGV[3])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - window)
redis.call('ZREMRANGEBYRANK', KEYS[1], 0, -(limit + 1))
redis.call('PEXPIRE', KEYS[1], math.floor(window / 1000) + 1000)
return 1
`)

func failuresKey(name, key string) string { return windowKey(name, key) }

// Failures reports whether key still has failure budget under the named
// limit: Allowed while fewer than limit.N failures are in the window; when
// not, Reset is the time until the oldest leaves it. It records nothing.
// If Redis errors, the replica's local memory decides.
func (l *Limiter) Failures(ctx context.Context, name, key string, limit config.Limit) Decision {
	res, err := peekWindow.Run(ctx, l.rdb, []string{failuresKey(name, key)}, limit.Window.Microseconds()).Int64Slice()
	if err != nil {
		l.metrics.Fallbacks.WithLabelValues(name).Inc()
		return l.local.peek(name+"\x00"+key, limit)
	}
	count := int(res[0])
	return Decision{
		Allowed:   count < limit.N,
		Limit:     limit.N,
		Remaining: max(0, limit.N-count),
		Reset:     time.Duration(res[1]) * time.Microsecond,
	}
}

// Fail charges one failure to key under the named limit. At most limit.N
// failures are kept per key, so a flood cannot grow the entry.
func (l *Limiter) Fail(ctx context.Context, name, key string, limit config.Limit) {
	err := addWindow.Run(ctx, l.rdb, []string{failuresKey(name, key)}, limit.N, limit.Window.Microseconds(), newMember()).Err()
	if err != nil {
		l.metrics.Fallbacks.WithLabelValues(name).Inc()
		l.local.add(name+"\x00"+key, limit)
	}
}

// Known addresses. An account remembers the last maxKnown client addresses
// that signed in to it successfully, for knownFor, so that a failure budget
// exhausted by others does not refuse its owner.
const (
	maxKnown = 20
	knownFor = 30 * 24 * time.Hour
)

var rememberScript = redis.NewScript(`
local t = redis.call('TIME')
redis.call('ZADD', KEYS[1], tonumber(t[1]) * 1000000 + tonumber(t[2]), ARGV[1])
redis.call('ZREMRANGEBYRANK', KEYS[1], 0, -(tonumber(ARGV[2]) + 1))
redis.call('EXPIRE', KEYS[1], tonumber(ARGV[3]))
return 1
`)

func knownKey(name, key string) string { return "gh:known:" + name + ":" + key }

// knownMember is how a member is stored: a digest, so that Redis holds no
// client addresses, and a token that never runs into the score's digits.
func knownMember(member string) string {
	d := sha256.Sum256([]byte(member))
	return hex.EncodeToString(d[:16])
}

// Remember records that member (a client address) succeeded for key under
// name. Errors are ignored: a forgotten address only loses its exemption.
func (l *Limiter) Remember(ctx context.Context, name, key, member string) {
	_ = rememberScript.Run(ctx, l.rdb, []string{knownKey(name, key)}, knownMember(member), maxKnown, int(knownFor/time.Second)).Err()
}

// Known reports whether member succeeded for key under name within the last
// 30 days. If Redis cannot answer it reports true: the caller then relies on
// its other limits rather than refuse an owner it cannot recognise.
func (l *Limiter) Known(ctx context.Context, name, key, member string) bool {
	score, err := l.rdb.ZScore(ctx, knownKey(name, key), knownMember(member)).Result()
	if errors.Is(err, redis.Nil) {
		return false
	}
	if err != nil {
		return true
	}
	return time.Since(time.UnixMicro(int64(score))) < knownFor
}
