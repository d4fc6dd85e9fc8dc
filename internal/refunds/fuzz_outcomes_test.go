package refunds_test

import (
	"context"
	"testing"
	"time"

	"github.com/gatehouse-pay/gatehouse/internal/charges"
	"github.com/gatehouse-pay/gatehouse/internal/ids"
	"github.com/gatehouse-pay/gatehouse/internal/providers"
	"github.com/gatehouse-pay/gatehouse/internal/providers/providertest"
	"github.com/gatehouse-pay/gatehouse/internal/refunds"
)

// FuzzRefundOutcomes drives one refund through a provider whose network the
// input scripts (requests lost, answers lost after booking, declines, refunds
// left pending) and whose books stay exact. Whatever happens, the refund is
// sent under one key, never after the idempotency window (the input says
// when it passes), stays pending until an answer or a lookup says how it
// ended, and then the gateway's record equals the books: succeeded with the
// provider's refund, or failed with nothing refunded.
func FuzzRefundOutcomes(f *testing.F) {
	providertest.AddSeeds(f)
	f.Fuzz(func(t *testing.T, script []byte, windowAfter, finalEvery uint8) {
		if len(script) > 64 {
			script = script[:64]
		}
		ctx := context.Background()
		c := capturedCharge()
		prov := providertest.NewScripted(script, *c.ProviderReference, c.Amount)
		books := prov.Payments[*c.ProviderReference]
		books.Captured, books.CaptureKey = c.Amount, "captured at authorization"
		cur := refunds.Refund{ID: ids.NewUUID(), MerchantID: c.MerchantID, ChargeID: c.ID, Amount: 500, Currency: "USD",
			Status: refunds.StatusPending, CreatedAt: testNow, UpdatedAt: testNow}
		st := &fakeStore{
			RefundForWorkFn: func(context.Context, string) (refunds.Refund, charges.Charge, error) { return cur, c, nil },
			SettleRefundFn: func(_ context.Context, after refunds.Refund, _ string, eventsFor func(refunds.Refund, charges.Charge) (refunds.Settlement, error)) (bool, error) {
				if cur.Status != refunds.StatusPending {
					return false, nil
				}
				cur = after
				_, err := eventsFor(after, c)
				return true, err
			},
		}
		clock := testNow
		p := refunds.NewProcessor(st, providers.Registry{"sandbox": prov}, time.Second, func() time.Time { return clock }, discard(), nil)
		key := charges.IdempotencyKey(cur.ID, "refund")
		prov.Drive(t, key, testNow, charges.DefaultIdempotencyWindow, windowAfter, finalEvery, &clock,
			func() bool { return cur.Status == refunds.StatusPending },
			func(final bool) error { return p.Process(ctx, cur.ID, final) })
		refunded := prov.Refunded(*c.ProviderReference)
		switch cur.Status {
		case refunds.StatusSucceeded:
			if refunded != cur.Amount || cur.ProviderReference == nil || *cur.ProviderReference != "re_"+key {
				t.Fatalf("gateway refunded %d (%v), provider refunded %d", cur.Amount, cur.ProviderReference, refunded)
			}
		case refunds.StatusFailed:
			if refunded != 0 {
				t.Fatalf("gateway says the refund failed, provider refunded %d", refunded)
			}
		default:
			t.Fatalf("refund ended %s", cur.Status)
		}
	})
}
