package refunds_test

import (
	"context"
	"testing"
	"time"

	"github.com/gatehouse-pay/gatehouse/internal/charges"
	"github.com/gatehouse-pay/gatehouse/internal/events"
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
	f.Add([]byte{}, uint8(255), uint8(0))
	f.Add([]byte{2, 2, 2, 0}, uint8(255), uint8(3))                 // booked, answers lost, then one arrives
	f.Add([]byte{1, 1, 1}, uint8(2), uint8(1))                      // never reaches the provider, then the window passes
	f.Add([]byte{2, 1, 1, 2, 1}, uint8(2), uint8(2))                // booked and lost, then looked up after the window
	f.Add([]byte{4, 4, 4, 2, 4, 0}, uint8(255), uint8(1))           // left pending, followed
	f.Add([]byte{3}, uint8(255), uint8(0))                          // declined
	f.Add([]byte{2, 3, 3, 1, 4, 4, 2, 0, 1}, uint8(3), uint8(2))    // mixed
	f.Add([]byte{1, 2, 1, 4, 1, 1, 4, 4, 0, 2}, uint8(1), uint8(5)) // window passes at once
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
			SettleRefundFn: func(_ context.Context, after refunds.Refund, _ string, eventsFor func(refunds.Refund, charges.Charge) ([]events.Event, error)) (bool, error) {
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
		for attempt := 0; cur.Status == refunds.StatusPending; attempt++ {
			if attempt > 2*len(script)+4 {
				t.Fatalf("still pending after %d attempts, with an honest provider since the script ran out", attempt)
			}
			past := attempt >= int(windowAfter)
			clock = testNow.Add(time.Minute)
			if past {
				clock = testNow.Add(charges.DefaultIdempotencyWindow + time.Hour)
			}
			final := finalEvery > 0 && attempt%int(finalEvery) == int(finalEvery)-1
			sent := len(prov.Keys)
			err := p.Process(ctx, cur.ID, final)
			if past && len(prov.Keys) != sent {
				t.Fatalf("attempt %d: the refund was sent after the idempotency window", attempt)
			}
			if cur.Status == refunds.StatusPending && err == nil {
				t.Fatalf("attempt %d: the refund is still pending and the attempt reported success", attempt)
			}
		}
		for _, k := range prov.Keys {
			if k != key {
				t.Fatalf("a refund was sent under %q, want only %q", k, key)
			}
		}
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
