package main

import (
	"errors"
	"slices"
	"strconv"
	"strings"
	"time"
)

// parseLimit reads a limit as RATE_LIMIT_CHARGES spells it, "N/duration"
// (100/10s), with the API's rules: N ≥ 1, a window of at least a second.
func parseLimit(s string) (n int, window time.Duration, err error) {
	c, w, ok := strings.Cut(strings.TrimSpace(s), "/")
	if !ok {
		return 0, 0, errors.New("want N/duration such as 100/10s")
	}
	if n, err = strconv.Atoi(c); err != nil || n < 1 {
		return 0, 0, errors.New("want a positive count before '/'")
	}
	if window, err = time.ParseDuration(w); err != nil || window < time.Second {
		return 0, 0, errors.New("want a window of at least 1s after '/'")
	}
	return n, window, nil
}

// parseRetryAfter reads a Retry-After header that must be a whole number of
// seconds, at least 1 (delay-seconds; an HTTP date or "0" does not count).
func parseRetryAfter(v string) (int, bool) {
	if v == "" || strings.TrimLeft(v, "0123456789") != "" {
		return 0, false
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		return 0, false
	}
	return n, true
}

// maxInWindow is the most of times that fall in one trailing window of
// length w, (t-w, t], over every t: the most a sliding-window limiter with
// window w may have accepted at once if times are its decisions.
func maxInWindow(times []time.Time, w time.Duration) int {
	ts := slices.Clone(times)
	slices.SortFunc(ts, func(a, b time.Time) int { return a.Compare(b) })
	best, i := 0, 0
	for j := range ts {
		for ts[j].Sub(ts[i]) >= w {
			i++
		}
		best = max(best, j-i+1)
	}
	return best
}

// span is when a request was sent and when its answer arrived: the server
// decided somewhere in between.
type span struct{ from, to time.Time }

// certainInWindow is the most of spans that lie in one window of length w
// whatever the moments within them the server decided: a set qualifies when
// its last answer came less than w after its first send. Above a limit, the
// limit was certainly exceeded; maxInWindow of the midpoints is the likely
// figure.
func certainInWindow(spans []span, w time.Duration) int {
	ss := slices.Clone(spans)
	slices.SortFunc(ss, func(a, b span) int { return a.from.Compare(b.from) })
	best := 0
	for i, a := range ss {
		n := 0
		for _, b := range ss[i:] {
			if b.to.Sub(a.from) < w {
				n++
			}
		}
		best = max(best, n)
	}
	return best
}

// midpoints are the middles of spans.
func midpoints(spans []span) []time.Time {
	out := make([]time.Time, len(spans))
	for i, s := range spans {
		out[i] = s.from.Add(s.to.Sub(s.from) / 2)
	}
	return out
}

// pctChange is the change from before to after in per cent.
func pctChange(before, after time.Duration) float64 {
	if before <= 0 {
		return 0
	}
	return (after - before).Seconds() / before.Seconds() * 100
}

// latencies is the sorted p50/p99/p99.9/max of ds.
type latencies struct{ P50, P99, P999, Max time.Duration }

func latenciesOf(ds []time.Duration) latencies {
	s := slices.Clone(ds)
	slices.Sort(s)
	l := latencies{P50: quantile(s, 0.5), P99: quantile(s, 0.99), P999: quantile(s, 0.999)}
	if len(s) > 0 {
		l.Max = s[len(s)-1]
	}
	return l
}
