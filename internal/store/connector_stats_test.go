package store_test

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/uuid"

	"github.com/gatehouse-pay/gatehouse/internal/charges"
	"github.com/gatehouse-pay/gatehouse/internal/connectors"
	"github.com/gatehouse-pay/gatehouse/internal/ids"
	"github.com/gatehouse-pay/gatehouse/internal/store"
	"github.com/gatehouse-pay/gatehouse/internal/testenv"
)

// chargeIDAt is a UUIDv7 of the moment t, as a charge made then has.
func chargeIDAt(t *testing.T, at time.Time) string {
	t.Helper()
	u := uuid.MustParse(ids.UUIDFloor(at))
	if _, err := rand.Read(u[9:]); err != nil {
		t.Fatal(err)
	}
	return u.String()
}

// A connector's statistics count its attempts of the merchant's charges
// created in the window: how many, how many succeeded and failed (the
// others under way), the median and 99th percentile of the ended attempts'
// durations (interpolated, as percentile_cont does), and the failed
// attempts by failure code, the most frequent first. Another connector's
// attempts of the same charges, older charges and another merchant's
// charges are not counted.
func TestConnectorStats(t *testing.T) {
	db := testenv.NewDB(t)
	s := store.New(db.Pool)
	ctx := context.Background()
	a := newMerchant(t, s, "ada@example.com")
	b := newMerchant(t, s, "bob@example.com")
	conn, other := ids.New(connectors.Prefix), ids.New(connectors.Prefix)
	now := time.Now().UTC().Truncate(time.Millisecond)
	since := now.Add(-connectors.StatsWindow)

	attempt := func(connector, status, code string, started time.Time, took time.Duration) charges.Attempt {
		a := charges.Attempt{Connector: connector, Provider: "sandbox", Status: status, StartedAt: started}
		if code != "" {
			a.FailureCode = &code
		}
		if took >= 0 {
			end := started.Add(took)
			a.EndedAt = &end
		}
		return a
	}
	charge := func(merchantID string, created time.Time, attempts ...charges.Attempt) {
		t.Helper()
		body, err := json.Marshal(append([]charges.Attempt{}, attempts...)) // [] for none, as stored
		if err != nil {
			t.Fatal(err)
		}
		if _, err := db.Pool.Exec(ctx, `INSERT INTO charges (id, merchant_id, environment, amount, currency, status,
				payment_method, capture, card_brand, provider, created_at, updated_at, attempts)
			VALUES ($1, $2, 'sandbox', 2000, 'USD', 'failed', 'card', true, 'visa', 'sandbox', $3, $3, $4)`,
			chargeIDAt(t, created), merchantID, created, body); err != nil {
			t.Fatal(err)
		}
	}

	// Ten ended attempts of 100 ms to 1 s, six succeeded and four failed,
	// some followed by an attempt at the other connector.
	outcomes := []struct{ status, code string }{
		{"failed", "processing_error"}, {"succeeded", ""}, {"succeeded", ""}, {"failed", "card_declined"},
		{"failed", "processing_error"}, {"succeeded", ""}, {"succeeded", ""}, {"failed", "provider_unavailable"},
		{"succeeded", ""}, {"succeeded", ""},
	}
	for i, o := range outcomes {
		created := now.Add(-time.Duration(23-2*i) * time.Hour)
		first := attempt(conn, o.status, o.code, created.Add(time.Second), time.Duration(i+1)*100*time.Millisecond)
		if o.status == "failed" && o.code != "card_declined" {
			charge(a.ID, created, first, attempt(other, "succeeded", "", created.Add(3*time.Second), 7*time.Second))
			continue
		}
		charge(a.ID, created, first)
	}
	// One under way: begun, not ended.
	charge(a.ID, now.Add(-time.Minute), attempt(conn, "unknown", "", now.Add(-time.Minute), -1))
	// Not counted: a charge created before the window, another merchant's,
	// the other connector's only, and one made before connectors.
	charge(a.ID, since.Add(-time.Minute), attempt(conn, "failed", "expired_card", since.Add(-time.Minute), 5*time.Second))
	charge(b.ID, now.Add(-time.Hour), attempt(conn, "failed", "fraudulent", now.Add(-time.Hour), 9*time.Second))
	charge(a.ID, now.Add(-2*time.Hour), attempt(other, "failed", "lost_card", now.Add(-2*time.Hour), 8*time.Second))
	charge(a.ID, now.Add(-3*time.Hour))

	got, err := s.ConnectorStats(ctx, a.ID, conn, since)
	if err != nil {
		t.Fatal(err)
	}
	ms := func(n float64) *time.Duration { d := time.Duration(n * float64(time.Millisecond)); return &d }
	want := connectors.Stats{Since: since, Attempts: 11, Succeeded: 6, Failed: 4, P50: ms(550), P99: ms(991),
		Failures: []connectors.FailureCount{{Code: "processing_error", Count: 2}, {Code: "card_declined", Count: 1}, {Code: "provider_unavailable", Count: 1}}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("stats (-want +got):\n%s", diff)
	}
	if rate, ok := got.SuccessRate(); !ok || rate != 0.6 || got.Pending() != 1 {
		t.Errorf("success rate %v (%v), pending %d; want 0.6 of the ended attempts, 1 pending", rate, ok, got.Pending())
	}

	// The other connector: the fallbacks of three charges and one of its own.
	got, err = s.ConnectorStats(ctx, a.ID, other, since)
	if err != nil {
		t.Fatal(err)
	}
	if got.Attempts != 4 || got.Succeeded != 3 || got.Failed != 1 || got.P50 == nil || *got.P50 != 7*time.Second ||
		!cmp.Equal(got.Failures, []connectors.FailureCount{{Code: "lost_card", Count: 1}}) {
		t.Errorf("the other connector: %+v", got)
	}

	// No attempts: zeros, no percentiles, no rate.
	got, err = s.ConnectorStats(ctx, b.ID, other, since)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(connectors.Stats{Since: since}, got); diff != "" {
		t.Errorf("a connector without attempts (-want +got):\n%s", diff)
	}
	if _, ok := got.SuccessRate(); ok {
		t.Error("a connector without attempts has a success rate")
	}

	// A wider window takes the older charge in.
	got, err = s.ConnectorStats(ctx, a.ID, conn, since.Add(-time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if got.Attempts != 12 || got.Failed != 5 {
		t.Errorf("over 25 hours: %d attempts, %d failed; want 12, 5", got.Attempts, got.Failed)
	}
}
