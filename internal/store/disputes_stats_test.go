package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/gatehouse-pay/gatehouse/internal/store"
	"github.com/gatehouse-pay/gatehouse/internal/testenv"
)

// gatehouse_disputes_due_soon counts the disputes waiting for the
// merchant's evidence (needs_response or warning_needs_response, nothing
// submitted) due within 72 hours, past due ones included;
// gatehouse_disputes_overdue counts the past due ones alone.
func TestDisputesCollector(t *testing.T) {
	db := testenv.NewDB(t)
	f := newOutboxFixture(t, db.Pool)
	chargeID := uuid.NewString()
	f.exec(t, `INSERT INTO charges (id, merchant_id, environment, amount, amount_captured, currency, status, payment_method, capture,
			card_brand, provider, provider_reference, created_at, updated_at)
		VALUES ($1, $2, 'sandbox', 2000, 2000, 'USD', 'captured', 'card', true, 'visa', 'sandbox', 'sbx_ch_1', now() - interval '10 days', now() - interval '10 days')`,
		chargeID, f.merchantID)
	// dispute writes a dispute of status whose evidence is due in dueIn
	// (negative: past due), submitted or not.
	dispute := func(status string, dueIn time.Duration, submitted bool) {
		f.exec(t, `INSERT INTO disputes (id, merchant_id, environment, charge_id, connector_id, provider, provider_reference, amount, currency,
				reason, status, rank, evidence_submitted_at, evidence_due_by, created_at, updated_at)
			VALUES ($1, $2, 'sandbox', $3, 'conn_1', 'sandbox', $4, 2000, 'USD', 'fraudulent', $5, 40,
				CASE WHEN $6 THEN now() END, now() + $7::interval, now() - interval '5 days', now())`,
			"dp_"+uuid.NewString(), f.merchantID, chargeID, uuid.NewString(), status, submitted, dueIn.String())
	}
	empty := map[string]float64{"gatehouse_disputes_due_soon": 0, "gatehouse_disputes_overdue": 0}
	if diff := cmp.Diff(empty, collectValues(t, store.DisputesCollector(db.Pool, 0))); diff != "" {
		t.Errorf("no disputes (-want +got):\n%s", diff)
	}

	dispute("needs_response", 24*time.Hour, false)         // due in a day: counts
	dispute("warning_needs_response", 48*time.Hour, false) // an inquiry due in two days: counts
	dispute("needs_response", 100*time.Hour, false)        // due in 100 h: not yet
	dispute("needs_response", 24*time.Hour, true)          // evidence submitted: no
	dispute("under_review", 24*time.Hour, false)           // under review: no
	dispute("warning_under_review", 24*time.Hour, false)   // an inquiry under review: no
	dispute("lost", -24*time.Hour, false)                  // over: no
	dispute("needs_response", -2*time.Hour, false)         // past due: due soon and overdue
	dispute("warning_needs_response", -time.Hour, true)    // past due, but submitted: no

	c := store.DisputesCollector(db.Pool, 0)
	want := map[string]float64{"gatehouse_disputes_due_soon": 3, "gatehouse_disputes_overdue": 1}
	if diff := cmp.Diff(want, collectValues(t, c)); diff != "" {
		t.Errorf("series (-want +got):\n%s", diff)
	}
	problems, err := testutil.CollectAndLint(c)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("lint: %s: %s", p.Metric, p.Text)
	}

	t.Run("a second scrape within minInterval reuses the first", func(t *testing.T) {
		cached := store.DisputesCollector(db.Pool, time.Hour)
		first := collectValues(t, cached)
		dispute("needs_response", time.Hour, false)
		if diff := cmp.Diff(first, collectValues(t, cached)); diff != "" {
			t.Errorf("second scrape within minInterval differs from the first (-first +second):\n%s", diff)
		}
		if got := collectValues(t, store.DisputesCollector(db.Pool, 0))["gatehouse_disputes_due_soon"]; got != 4 {
			t.Errorf("due_soon with minInterval 0: %v, want 4", got)
		}
	})

	t.Run("a failed query leaves the metrics out", func(t *testing.T) {
		pool, err := pgxpool.New(context.Background(), db.URL)
		if err != nil {
			t.Fatal(err)
		}
		pool.Close()
		if n := testutil.CollectAndCount(store.DisputesCollector(pool, 0)); n != 0 {
			t.Errorf("series from a closed pool: %d, want 0", n)
		}
	})
}
