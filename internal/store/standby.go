package store

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
)

// Standby is a hot standby (DATABASE_READ_URL) that serves the reads which
// may lag the primary: the pages of lists asked for as lists (see
// listing.Params.MayLag). Everything else reads the primary.
//
// A standby is only used while it is fresh: a loop compares, every
// interval, the WAL position the standby has replayed with the positions
// the primary had reached at known times. The standby's lag is how long ago
// the primary was at the newest position the standby has replayed: every
// transaction committed before then is visible on the standby. While the
// lag exceeds maxLag, or the standby does not answer, reads go to the
// primary; so do the reads the standby fails (recovery conflicts, a broken
// connection). Each such read is counted in
// gatehouse_db_read_fallbacks_total by reason, and the change of state is
// logged once, not every read.
type Standby struct {
	pool, primary *pgxpool.Pool
	maxLag        time.Duration
	interval      time.Duration
	log           *slog.Logger
	now           func() time.Time

	state atomic.Int32 // a standbyState

	mu      sync.Mutex
	samples []walSample // the primary's positions, oldest first
	lastErr time.Time   // when a failed read was last logged

	fallbacks *prometheus.CounterVec
	lag       prometheus.Gauge
	reads     prometheus.Counter
}

type standbyState int32

const (
	standbyUnchecked standbyState = iota // not measured yet: read the primary
	standbyFresh
	standbyLagging
	standbyUnreachable
)

// reason is the label of a fallback in this state.
func (s standbyState) reason() string {
	switch s {
	case standbyLagging:
		return "lagging"
	case standbyUnreachable:
		return "unreachable"
	}
	return "unchecked"
}

// walSample is the primary's WAL position at a time.
type walSample struct {
	at  time.Time
	lsn uint64
}

// Fallback reasons: the standby was behind by more than the bound, did not
// answer the last check, had not been checked yet, or failed the read itself.
var fallbackReasons = []string{"lagging", "unreachable", "unchecked", "error"}

// NewStandby watches the standby on pool, whose lag it measures against
// primary, and serves reads from it while it is at most maxLag behind. Run
// must run for it to be used.
func NewStandby(pool, primary *pgxpool.Pool, maxLag time.Duration, log *slog.Logger) *Standby {
	sb := &Standby{pool: pool, primary: primary, maxLag: maxLag, log: log, now: time.Now,
		// A quarter of the bound, so a standby is seen lagging within a
		// quarter of the bound past it; at most a second, at least 100 ms.
		interval: min(max(maxLag/4, 100*time.Millisecond), time.Second),
		fallbacks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "gatehouse", Name: "db_read_fallbacks_total",
			Help: "List reads meant for the standby (DATABASE_READ_URL) that the primary served, by reason: lagging, unreachable, unchecked, error.",
		}, []string{"reason"}),
		lag: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "gatehouse", Name: "db_standby_lag_seconds",
			Help: "How far the standby (DATABASE_READ_URL) was behind the primary at its last check; +Inf when it did not answer.",
		}),
		reads: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "gatehouse", Name: "db_standby_reads_total",
			Help: "List reads the standby (DATABASE_READ_URL) served.",
		}),
	}
	for _, r := range fallbackReasons {
		sb.fallbacks.WithLabelValues(r)
	}
	return sb
}

// Collectors are the standby's metrics.
func (sb *Standby) Collectors() []prometheus.Collector {
	return []prometheus.Collector{sb.fallbacks, sb.lag, sb.reads}
}

// Run measures the standby's lag every interval until ctx ends.
func (sb *Standby) Run(ctx context.Context) {
	t := time.NewTicker(sb.interval)
	defer t.Stop()
	for {
		sb.check(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

const (
	primaryWAL = `SELECT pg_current_wal_lsn()::text`
	// A server that is not in recovery has no replay position: it is a
	// primary (DATABASE_READ_URL names the primary, or a promoted
	// standby), current by definition.
	standbyReplayed = `SELECT coalesce(pg_last_wal_replay_lsn(), pg_current_wal_lsn())::text`
)

// check samples the primary's position, then reads the standby's and sets
// the state. Each query is bounded by the interval (at least a second).
func (sb *Standby) check(ctx context.Context) {
	timeout := max(sb.interval, time.Second)
	if lsn, err := sb.position(ctx, sb.primary, primaryWAL, timeout); err == nil {
		sb.sample(walSample{at: sb.now(), lsn: lsn})
	}
	replayed, err := sb.position(ctx, sb.pool, standbyReplayed, timeout)
	if ctx.Err() != nil {
		return
	}
	if err != nil {
		sb.lag.Set(math.Inf(1))
		sb.set(standbyUnreachable, "reads go to the primary: the standby does not answer", "err", err)
		return
	}
	lag, known := sb.lagAt(replayed)
	if !known {
		sb.lag.Set(math.Inf(1))
		sb.set(standbyLagging, "reads go to the primary: the standby is further behind than the lag bound", "max_lag", sb.maxLag.String())
		return
	}
	sb.lag.Set(lag.Seconds())
	if lag > sb.maxLag {
		sb.set(standbyLagging, "reads go to the primary: the standby is further behind than the lag bound",
			"lag", lag.Round(time.Millisecond).String(), "max_lag", sb.maxLag.String())
		return
	}
	sb.set(standbyFresh, "list reads go to the standby", "lag", lag.Round(time.Millisecond).String())
}

// position runs a query answering a WAL position on pool.
func (sb *Standby) position(ctx context.Context, pool *pgxpool.Pool, query string, timeout time.Duration) (uint64, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var text string
	if err := pool.QueryRow(ctx, query).Scan(&text); err != nil {
		return 0, err
	}
	return parseLSN(text)
}

// parseLSN reads PostgreSQL's text form of a WAL position, "16/B374D848".
func parseLSN(s string) (uint64, error) {
	hi, lo, ok := strings.Cut(s, "/")
	h, err1 := strconv.ParseUint(hi, 16, 32)
	l, err2 := strconv.ParseUint(lo, 16, 32)
	if !ok || err1 != nil || err2 != nil {
		return 0, fmt.Errorf("store: bad WAL position %q", s)
	}
	return h<<32 | l, nil
}

// sample records the primary's position, keeping the samples of the last
// maxLag and two intervals more: a standby behind all of them is too far
// behind anyway.
func (sb *Standby) sample(s walSample) {
	sb.mu.Lock()
	defer sb.mu.Unlock()
	keep := s.at.Add(-sb.maxLag - 2*sb.interval)
	i := 0
	for i < len(sb.samples) && sb.samples[i].at.Before(keep) {
		i++
	}
	sb.samples = append(sb.samples[i:], s)
}

// lagAt is how long ago the primary was at most at replayed: the age of the
// newest sample the standby has replayed up to. It is not known when the
// standby is behind every sample.
func (sb *Standby) lagAt(replayed uint64) (time.Duration, bool) {
	sb.mu.Lock()
	defer sb.mu.Unlock()
	for i := len(sb.samples) - 1; i >= 0; i-- {
		if sb.samples[i].lsn <= replayed {
			return max(sb.now().Sub(sb.samples[i].at), 0), true
		}
	}
	return 0, false
}

// set changes the state and logs the change.
func (sb *Standby) set(s standbyState, msg string, args ...any) {
	if standbyState(sb.state.Swap(int32(s))) == s {
		return
	}
	if s == standbyFresh {
		sb.log.Info(msg, args...)
		return
	}
	sb.log.Warn(msg, args...)
}

// use reports whether a read may go to the standby now; when not, it counts
// the fallback.
func (sb *Standby) use() bool {
	s := standbyState(sb.state.Load())
	if s == standbyFresh {
		return true
	}
	sb.fallbacks.WithLabelValues(s.reason()).Inc()
	return false
}

// failed counts a read the standby failed, which the primary then serves,
// and logs it at most once a minute.
func (sb *Standby) failed(ctx context.Context, err error) {
	sb.fallbacks.WithLabelValues("error").Inc()
	sb.mu.Lock()
	now := sb.now()
	quiet := now.Sub(sb.lastErr) < time.Minute
	if !quiet {
		sb.lastErr = now
	}
	sb.mu.Unlock()
	if !quiet {
		sb.log.WarnContext(ctx, "a read failed on the standby; the primary served it (logged once a minute)", "err", err)
	}
}

// read runs f on the standby when mayLag and the standby is fresh, else on
// the primary. A failure on the standby runs f again on the primary, so a
// dead or lagging standby never fails a read.
func (s *Store) read(ctx context.Context, mayLag bool, f func(dbtx) error) error {
	sb := s.standby
	if !mayLag || sb == nil || !sb.use() {
		return f(s.pool)
	}
	err := f(sb.pool)
	if err == nil {
		sb.reads.Inc()
		return nil
	}
	if ctx.Err() != nil {
		return err
	}
	sb.failed(ctx, err)
	return f(s.pool)
}
