package e2e

import (
	"maps"
	"slices"
	"strings"
	"testing"
)

// connectorStats is what journeys.mjs read of a connector's page (seen)
// and what the charges' attempts through the API say it should show (want).
type connectorStats struct {
	Seen struct {
		Attempts  int            `json:"attempts"`
		Succeeded int            `json:"succeeded"`
		Failed    int            `json:"failed"`
		Failures  map[string]int `json:"failures"`
		Rate      string         `json:"rate"`
		P50       string         `json:"p50"`
		P99       string         `json:"p99"`
	} `json:"seen"`
	Want struct {
		Attempts  int            `json:"attempts"`
		Succeeded int            `json:"succeeded"`
		Failed    int            `json:"failed"`
		Failures  map[string]int `json:"failures"`
	} `json:"want"`
}

// connectorsJourney is what journeys.mjs saw of the dashboard's connectors
// and routing (journey 15).
type connectorsJourney struct {
	KeyShown          bool           `json:"keyShown"`
	Listed            int            `json:"listed"`
	StripeEnabled     string         `json:"stripeEnabled"`
	Route             []string       `json:"route"`
	Refused           string         `json:"refused"`
	RefusedKept       bool           `json:"refusedKept"`
	RouteAfterRefusal int            `json:"routeAfterRefusal"`
	Direct            []string       `json:"direct"`
	MovedOn           []string       `json:"movedOn"`
	Backup            connectorStats `json:"backup"`
	Server            connectorStats `json:"server"`
}

// checkConnectorsJourney: the connectors made on the connectors page are
// listed with the server's sandbox (the Stripe one disabled from its row,
// its secret key on no page); the routing form set the server's sandbox
// then the backup; a routing naming an unknown connector was refused with
// the service's message and its JSON kept, the routing unchanged; charges
// went to the server's sandbox, and after its rehearsed processing_error
// moved on to the backup; each connector's page counts what the charges'
// attempts through the API say, with a success rate and latencies.
func checkConnectorsJourney(t *testing.T, got connectorsJourney) {
	t.Helper()
	if got.KeyShown || got.Listed != 3 || got.StripeEnabled != "false" {
		t.Errorf("connectors: the Stripe key shown back %v, %d listed (want 3), the Stripe one enabled %q (want false)",
			got.KeyShown, got.Listed, got.StripeEnabled)
	}
	if !slices.Equal(got.Route, []string{"server", "backup"}) || !strings.Contains(got.Refused, "is not one of your connectors") ||
		!got.RefusedKept || got.RouteAfterRefusal != 2 {
		t.Errorf("routing: default %v (want server, backup); a bad routing refused with %q (JSON kept %v), the route then %d connectors",
			got.Route, got.Refused, got.RefusedKept, got.RouteAfterRefusal)
	}
	for _, p := range got.Direct {
		if p != "server:succeeded" {
			t.Errorf("a charge before the rehearsed decline tried %q, want server:succeeded", p)
		}
	}
	for _, p := range got.MovedOn {
		if p != "server:failed:processing_error backup:succeeded" {
			t.Errorf("a charge during the rehearsed decline tried %q, want it to move on to the backup", p)
		}
	}
	if len(got.Direct) != 4 || len(got.MovedOn) != 3 {
		t.Errorf("%d direct and %d moved-on charges, want 4 and 3", len(got.Direct), len(got.MovedOn))
	}
	for name, c := range map[string]connectorStats{"backup": got.Backup, "server": got.Server} {
		if c.Seen.Attempts != c.Want.Attempts || c.Seen.Succeeded != c.Want.Succeeded || c.Seen.Failed != c.Want.Failed ||
			!maps.Equal(c.Seen.Failures, c.Want.Failures) {
			t.Errorf("the %s connector's page shows %+v; its attempts through the API say %+v", name, c.Seen, c.Want)
		}
		if !strings.HasSuffix(c.Seen.Rate, "%") || !strings.HasSuffix(c.Seen.P50, "ms") && !strings.HasSuffix(c.Seen.P50, " s") || c.Seen.P99 == "—" {
			t.Errorf("the %s connector's page: rate %q, p50 %q, p99 %q", name, c.Seen.Rate, c.Seen.P50, c.Seen.P99)
		}
	}
	if got.Backup.Want.Attempts != 3 || got.Server.Want.Failures["processing_error"] != 3 || got.Server.Want.Attempts < 7 {
		t.Errorf("the attempts through the API: backup %+v, server %+v; want 3 at the backup, 3 processing_error of 7 or more at the server",
			got.Backup.Want, got.Server.Want)
	}
}
