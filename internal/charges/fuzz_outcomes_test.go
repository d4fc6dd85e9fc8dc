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
	providertest.AddSeeds(f)
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
		prov.Drive(t, charges.IdempotencyKey(cur.ID, "capture"), testNow, charges.DefaultIdempotencyWindow, windowAfter, finalEvery, &clock,
			func() bool { return cur.PendingAction != nil },
			func(final bool) error { return p.Capture(ctx, cur.ID, final) })
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
