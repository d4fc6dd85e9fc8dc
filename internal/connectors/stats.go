package connectors

import (
	"context"
	"time"
)

// StatsWindow is how far back a connector's statistics look: the attempts
// of the charges created in it.
const StatsWindow = 24 * time.Hour

// Stats is how a connector did with the attempts of the merchant's charges
// created since Since.
type Stats struct {
	Since    time.Time
	Attempts int64
	// Succeeded and Failed are the attempts that ended so; the others are
	// under way, wait for the cardholder, or are being settled with the
	// provider.
	Succeeded int64
	Failed    int64
	// P50 and P99 are the median and 99th percentile of the ended
	// attempts' durations (ended_at - started_at); nil when none ended.
	P50, P99 *time.Duration
	// Failures counts the failed attempts by failure code, the most
	// frequent first.
	Failures []FailureCount
}

// FailureCount is how many failed attempts had a failure code.
type FailureCount struct {
	Code  string
	Count int64
}

// Pending is the attempts that have not succeeded or failed (yet).
func (s Stats) Pending() int64 { return s.Attempts - s.Succeeded - s.Failed }

// SuccessRate is the share of the ended attempts (succeeded or failed) that
// succeeded, from 0 to 1; false when none ended.
func (s Stats) SuccessRate() (float64, bool) {
	ended := s.Succeeded + s.Failed
	if ended == 0 {
		return 0, false
	}
	return float64(s.Succeeded) / float64(ended), true
}

// Stats returns how one of the merchant's connectors did over the last
// StatsWindow.
func (s *Service) Stats(ctx context.Context, merchantID, id string) (Stats, error) {
	c, err := s.Get(ctx, merchantID, id)
	if err != nil {
		return Stats{}, err
	}
	return s.store.ConnectorStats(ctx, merchantID, c.ID, s.now().UTC().Add(-StatsWindow))
}
