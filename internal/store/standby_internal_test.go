package store

import (
	"testing"
	"time"
)

func TestParseLSN(t *testing.T) {
	for in, want := range map[string]uint64{"0/0": 0, "16/B374D848": 0x16B374D848, "FFFFFFFF/FFFFFFFF": 1<<64 - 1} {
		if got, err := parseLSN(in); err != nil || got != want {
			t.Errorf("parseLSN(%q) = %x, %v; want %x", in, got, err, want)
		}
	}
	for _, in := range []string{"", "16", "x/1", "1/", "100000000/0"} {
		if _, err := parseLSN(in); err == nil {
			t.Errorf("parseLSN(%q): no error", in)
		}
	}
}

// TestLagAt: the lag is the age of the newest primary position the standby
// has replayed; behind every sample it is not known; old samples go.
func TestLagAt(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 10, 0, time.UTC)
	sb := &Standby{maxLag: 5 * time.Second, interval: time.Second, now: func() time.Time { return now }}
	for i, lsn := range []uint64{100, 200, 200, 300} { // at 0 s, 1 s, 2 s, 3 s
		sb.sample(walSample{at: now.Add(time.Duration(i-10) * time.Second), lsn: lsn})
	}
	// Samples older than maxLag + 2 intervals (7 s) before the newest are dropped.
	sb.sample(walSample{at: now, lsn: 400})
	if len(sb.samples) != 2 {
		t.Fatalf("kept %d samples, want 2 (the new one and the one 7 s old; 8-10 s is too old)", len(sb.samples))
	}
	sb.samples = nil
	for i, lsn := range []uint64{100, 200, 200, 300} { // at 6 s, 7 s, 8 s, 9 s
		sb.sample(walSample{at: now.Add(time.Duration(i-4) * time.Second), lsn: lsn})
	}
	for _, c := range []struct {
		replayed uint64
		lag      time.Duration
		known    bool
	}{{300, time.Second, true}, {250, 2 * time.Second, true}, {200, 2 * time.Second, true}, {100, 4 * time.Second, true}, {99, 0, false}} {
		lag, known := sb.lagAt(c.replayed)
		if lag != c.lag || known != c.known {
			t.Errorf("replayed %d: lag %s, known %v; want %s, %v", c.replayed, lag, known, c.lag, c.known)
		}
	}
}
