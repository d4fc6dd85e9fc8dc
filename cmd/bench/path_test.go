package main

import (
	"testing"
	"time"
)

func heldStep(events float64, holds bool) pathStep {
	s := pathStep{Events: events, Charges: summary{Scheduled: 100, OK: 100}, Expected: 200, Received: 200,
		Lat: latencies{P99: 100 * time.Millisecond}}
	if !holds {
		s.Lat.P99 = time.Second
	}
	return s
}

// TestPathStepHolds: a step holds only with every delivery in, p99 under
// 250 ms and at most 0.1 % of the charges lost.
func TestPathStepHolds(t *testing.T) {
	if !heldStep(200, true).Holds() {
		t.Error("a step with every delivery in at p99 100 ms does not hold")
	}
	if heldStep(200, false).Holds() {
		t.Error("a step at p99 1 s holds")
	}
	missing := heldStep(200, true)
	missing.Received--
	if missing.Holds() {
		t.Error("a step with a delivery missing holds")
	}
	dropped := heldStep(200, true)
	dropped.Charges.Dropped = 1
	if dropped.Holds() {
		t.Error("a step with 1 % of its charges dropped holds")
	}
	if (pathStep{}).Holds() {
		t.Error("an empty step holds")
	}
}

// TestNextPathRate: the search grows by half while steps hold, then bisects
// toward the lowest failure above the highest pass, and stops within 10 %
// or when nothing held.
func TestNextPathRate(t *testing.T) {
	for _, tc := range []struct {
		name  string
		steps []pathStep
		want  float64
		ok    bool
	}{
		{"all held", []pathStep{heldStep(200, true), heldStep(2000, true)}, 3000, true},
		{"bisect", []pathStep{heldStep(1000, true), heldStep(2000, false)}, 1500, true},
		{"narrowed", []pathStep{heldStep(1000, true), heldStep(1050, false)}, 0, false},
		{"none held", []pathStep{heldStep(200, false)}, 0, false},
		{"already measured", []pathStep{heldStep(1000, true), heldStep(1500, true), heldStep(2000, false), heldStep(1750, false)}, 1650, true},
		{"failure below a pass does not bound", []pathStep{heldStep(500, false), heldStep(1000, true)}, 1500, true},
	} {
		got, ok := nextPathRate(tc.steps)
		if got != tc.want || ok != tc.ok {
			t.Errorf("%s: nextPathRate = %v, %v; want %v, %v", tc.name, got, ok, tc.want, tc.ok)
		}
	}
}

func TestParseRates(t *testing.T) {
	got, err := parseRates("-x", " 2000, 200 ,500", 20000)
	if err != nil || len(got) != 3 || got[0] != 200 || got[2] != 2000 {
		t.Errorf("parseRates = %v, %v; want [200 500 2000]", got, err)
	}
	for _, bad := range []string{"0", "abc", "30000", "-5"} {
		if _, err := parseRates("-x", bad, 20000); err == nil {
			t.Errorf("parseRates(%q) accepted", bad)
		}
	}
}
