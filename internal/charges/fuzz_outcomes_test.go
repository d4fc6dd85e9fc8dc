package charges_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/gatehouse-pay/gatehouse/internal/charges"
	"github.com/gatehouse-pay/gatehouse/internal/ids"
	"github.com/gatehouse-pay/gatehouse/internal/providers"
	"github.com/gatehouse-pay/gatehouse/internal/providers/providertest"
)

// FuzzCaptureOutcomes drives one requested capture through a provider whose
// network the input scripts (requests lost, answers lost after booking,
// declines, captures left processing) and whose books stay exact. Whatever
// happens, the gateway never guesses: the capture is sent under one key,
// never after the idempotency window (the input says when it passes), the
// charge stays authorized with its capture pending until an answer or a
// lookup says how it ended, and then the gateway's record equals the books:
// captured with the amount the provider took, or authorized with nothing
// captured.
func FuzzCaptureOutcomes(f *testing.F) {
	f.Add([]byte{}, uint8(255), uint8(0))
	f.Add([]byte{2, 2, 2, 0}, uint8(255), uint8(3))                 // booked, answers lost, then one arrives
	f.Add([]byte{1, 1, 1}, uint8(2), uint8(1))                      // never reaches the provider, then the window passes
	f.Add([]byte{2, 1, 1, 2, 1}, uint8(2), uint8(2))                // booked and lost, then looked up after the window
	f.Add([]byte{4, 4, 4, 2, 4, 0}, uint8(255), uint8(1))           // left processing, followed
	f.Add([]byte{3}, uint8(255), uint8(0))                          // declined
	f.Add([]byte{2, 3, 3, 1, 4, 4, 2, 0, 1}, uint8(3), uint8(2))    // mixed
	f.Add([]byte{1, 2, 1, 4, 1, 1, 4, 4, 0, 2}, uint8(1), uint8(5)) // window passes at once
	f.Fuzz(func(t *testing.T, script []byte, windowAfter, finalEvery uint8) {
		if len(script) > 64 {
			script = script[:64]
		}
		ctx := context.Background()
		prov := providertest.NewScripted(script, "pi_1", 2000)
		capture, amount := charges.ActionCapture, int64(1500)
		cur := charges.Charge{ID: ids.NewUUID(), MerchantID: "mer_a", Environment: "sandbox", Amount: 2000, Currency: "USD",
			Status: charges.StatusAuthorized, PendingAction: &capture, CaptureAmount: &amount, Provider: "sandbox",
			ProviderReference: ptr("pi_1"), CreatedAt: testNow, UpdatedAt: testNow}
		st := &fakeStore{
			ChargeForWorkFn: func(context.Context, string) (charges.Charge, []byte, error) { return cur, nil, nil },
			ApplyTransitionFn: func(_ context.Context, tr charges.Transition) (bool, error) {
				if tr.Before.Status != cur.Status || deref(tr.Before.PendingAction) != deref(cur.PendingAction) {
					return false, nil
				}
				cur = tr.After
				return true, nil
			},
		}
		clock := testNow
		p := charges.NewProcessor(st, providers.Registry{"sandbox": prov}, testKeyring(t), time.Second, func() time.Time { return clock },
			slog.New(slog.DiscardHandler), nil)
		key := charges.IdempotencyKey(cur.ID, "capture")
		for attempt := 0; cur.PendingAction != nil; attempt++ {
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
			err := p.Capture(ctx, cur.ID, final)
			if past && len(prov.Keys) != sent {
				t.Fatalf("attempt %d: the capture was sent after the idempotency window", attempt)
			}
			if cur.PendingAction != nil && err == nil {
				t.Fatalf("attempt %d: the capture is still pending and the attempt reported success", attempt)
			}
		}
		for _, k := range prov.Keys {
			if k != key {
				t.Fatalf("a capture was sent under %q, want only %q", k, key)
			}
		}
		books := prov.Payments["pi_1"]
		switch cur.Status {
		case charges.StatusCaptured:
			if books.CaptureKey == "" || books.Captured != cur.AmountCaptured {
				t.Fatalf("gateway captured %d, provider captured %d (key %q)", cur.AmountCaptured, books.Captured, books.CaptureKey)
			}
		case charges.StatusAuthorized:
			if books.CaptureKey != "" {
				t.Fatalf("gateway says nothing was captured, provider captured %d", books.Captured)
			}
		default:
			t.Fatalf("charge ended %s", cur.Status)
		}
	})
}
