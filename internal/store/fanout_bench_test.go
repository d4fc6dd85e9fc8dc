package store_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/gatehouse-pay/gatehouse/internal/ids"
	"github.com/gatehouse-pay/gatehouse/internal/store"
	"github.com/gatehouse-pay/gatehouse/internal/testenv"
)

// BenchmarkChargeFanout is the cost of a charge's creation, its event and
// the event's deliveries, by the merchant's endpoints: none, two without a
// filter, two with one (one that lets the charge through, one that turns it
// away), and two whose filters test a top-level field only (the cost of
// reading the body and calling the match, whatever the filter). It reports Postgres's CPU per charge ("pg-µs/charge",
// the one server process of a one-connection pool) and the wall time.
func BenchmarkChargeFanout(b *testing.B) {
	for _, c := range []struct {
		name    string
		filters []string // one endpoint each; "" for none
	}{
		{"endpoints=0", nil},
		{"endpoints=2", []string{"", ""}},
		{"endpoints=2_filtered", []string{`{"data.charge.currency":{"$in":["USD"]}}`, `{"data.charge.amount":{"$gte":100000}}`}},
		{"endpoints=2_trivial", []string{`{"object":{"$eq":"event"}}`, `{"object":{"$eq":"x"}}`}},
	} {
		b.Run(c.name, func(b *testing.B) {
			db := testenv.NewDB(b)
			ctx := context.Background()
			pool := onePool(b, db.URL)
			s := store.New(pool)
			m := newMerchant(b, s, "fanout@example.com")
			for i, f := range c.filters {
				if _, err := db.Pool.Exec(ctx, `INSERT INTO webhook_endpoints (id, merchant_id, environment, url, events, secret_sealed, created_at, updated_at)
					VALUES ($1, $2, 'sandbox', $3, '{charge.created}', '\x00', now(), now())`, ids.New("we"), m.ID, fmt.Sprintf("https://hooks.example.com/%d", i)); err != nil {
					b.Fatal(err)
				}
				if f != "" {
					if _, err := db.Pool.Exec(ctx, `UPDATE webhook_endpoints SET filter = $2::jsonb WHERE url = $1`, fmt.Sprintf("https://hooks.example.com/%d", i), f); err != nil {
						b.Fatal(err)
					}
				}
			}
			backend := backendCPU(b, pool)
			before := backend()
			b.ResetTimer()
			for range b.N {
				if _, _, err := s.CreateCharge(ctx, newCharge(b, m.ID)); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			b.ReportMetric(float64((backend()-before).Microseconds())/float64(b.N), "pg-µs/charge")
		})
	}
}
