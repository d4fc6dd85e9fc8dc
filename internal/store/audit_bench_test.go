package store_test

import (
	"context"
	"testing"

	"github.com/gatehouse-pay/gatehouse/internal/audit"
	"github.com/gatehouse-pay/gatehouse/internal/store"
	"github.com/gatehouse-pay/gatehouse/internal/testenv"
)

// BenchmarkCreateChargeAudit is the cost of the audit entry on the charge
// path: one merchant's charges created one at a time (serial), and by 32
// concurrent callers, without an entry, and with one on 1 and on
// audit.Chains chains (docs/audit.md has the figures).
func BenchmarkCreateChargeAudit(b *testing.B) {
	for _, c := range []struct {
		name   string
		chains int // 0: no audit entry
		serial bool
	}{{"serial_plain", 0, true}, {"serial_audited", audit.Chains, true},
		{"plain", 0, false}, {"audited_1_chain", 1, false}, {"audited_8_chains", audit.Chains, false},
		{"audited_32_chains", 32, false}} {
		b.Run(c.name, func(b *testing.B) {
			db := testenv.NewDB(b)
			s := store.New(db.Pool)
			m := newMerchant(b, s, "bench@example.com")
			if c.chains > 0 {
				defer store.SetAuditChains(c.chains)()
			}
			create := func() bool {
				ctx := context.Background()
				if c.chains > 0 {
					ctx = auditCtx(m.ID, "charge.create")
				}
				if _, _, err := s.CreateCharge(ctx, newCharge(b, m.ID)); err != nil {
					b.Error(err)
					return false
				}
				return true
			}
			b.ResetTimer()
			if c.serial {
				for range b.N {
					if !create() {
						return
					}
				}
			} else {
				b.SetParallelism(16) // 16 x GOMAXPROCS callers
				b.RunParallel(func(pb *testing.PB) {
					for pb.Next() && create() {
					}
				})
			}
			b.StopTimer()
			if c.chains > 0 {
				if sum, err := s.VerifyAudit(context.Background()); err != nil || len(sum.Broken) > 0 {
					b.Fatalf("verify: %+v %v", sum, err)
				}
			}
		})
	}
}
