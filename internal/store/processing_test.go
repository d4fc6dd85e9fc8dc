package store_test

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/gatehouse-pay/gatehouse/internal/charges"
	"github.com/gatehouse-pay/gatehouse/internal/events"
	"github.com/gatehouse-pay/gatehouse/internal/ids"
	"github.com/gatehouse-pay/gatehouse/internal/keyring"
	"github.com/gatehouse-pay/gatehouse/internal/outbox"
	"github.com/gatehouse-pay/gatehouse/internal/providers"
	"github.com/gatehouse-pay/gatehouse/internal/providers/providertest"
	"github.com/gatehouse-pay/gatehouse/internal/store"
	"github.com/gatehouse-pay/gatehouse/internal/testenv"
)

// processingProvider accepts every payment as processing (as Stripe leaves a
// PaymentIntent processing) and answers lookups from payments, in turn; the
// last one repeats. A capture, a void or a refund is not expected.
func processingProvider(payments ...providers.Payment) *providertest.FakeLookup {
	notExpected := func() (providers.Result, error) { return providers.Result{}, providertest.ErrNotExpected }
	p := &providertest.FakeLookup{Fake: &providertest.Fake{
		AuthorizeFn: func(context.Context, providers.AuthorizeRequest) (providers.Result, error) {
			return providers.Result{Reference: "pi_processing", Pending: true}, nil
		},
		CaptureFn: func(context.Context, providers.CaptureRequest) (providers.Result, error) { return notExpected() },
		VoidFn:    func(context.Context, providers.VoidRequest) (providers.Result, error) { return notExpected() },
		RefundFn:  func(context.Context, providers.RefundRequest) (providers.Result, error) { return notExpected() },
	}}
	p.LookupPaymentFn = func(context.Context, string) (providers.Payment, error) {
		// This lookup is recorded already: the first is number 1.
		return payments[min(len(p.PaymentLookups()), len(payments))-1], nil
	}
	return p
}

// A payment the provider accepted and left processing is never guessed: the
// charge stays created with the provider's reference, its card sealed and
// its charge:authorize row in the outbox, through the last attempt; the
// authorization is sent once and then only looked up, until the provider
// says how it ended.
func TestProcessingPaymentIsFollowedUntilFinal(t *testing.T) {
	processing := providers.Payment{Reference: "pi_processing", Status: providers.PaymentProcessing}
	for _, c := range []struct {
		name        string
		capture     bool
		final       providers.Payment
		wantStatus  string
		wantCapture int64
		wantEvent   string
		wantCode    string
	}{
		{"captured", true, providers.Payment{Reference: "pi_processing", Status: providers.PaymentCaptured, Captured: 2000},
			charges.StatusCaptured, 2000, events.ChargeCaptured, ""},
		{"authorized", false, providers.Payment{Reference: "pi_processing", Status: providers.PaymentAuthorized},
			charges.StatusAuthorized, 0, "", ""},
		{"failed with the bank's reason", true, providers.Payment{Reference: "pi_processing", Status: providers.PaymentFailed,
			Failure: &providers.Decline{Code: "insufficient_funds"}}, charges.StatusFailed, 0, events.ChargeFailed, "insufficient_funds"},
		{"canceled", true, providers.Payment{Reference: "pi_processing", Status: providers.PaymentCanceled},
			charges.StatusFailed, 0, events.ChargeFailed, "processing_error"},
	} {
		t.Run(c.name, func(t *testing.T) {
			db := testenv.NewDB(t)
			s := store.New(db.Pool)
			ctx := context.Background()
			m := newMerchant(t, s, "processing@example.com")
			now := time.Now().UTC().Truncate(time.Millisecond)
			ch := charges.Charge{ID: ids.NewUUID(), MerchantID: m.ID, Environment: "sandbox", Amount: 2000, Currency: "USD",
				Status: charges.StatusCreated, PaymentMethod: "card", Capture: c.capture, Provider: "sandbox", Metadata: map[string]string{},
				CardToken: ptr("pm_card_visa"), CreatedAt: now, UpdatedAt: now}
			ch.Card.Brand = "visa"
			ev, err := events.New(ids.NewUUID(), m.ID, ch.Environment, events.ChargeCreated, now, ch.View(), nil)
			if err != nil {
				t.Fatal(err)
			}
			task := outbox.Task{Type: outbox.ChargeAuthorize, RefID: ch.ID}
			if _, _, err := s.CreateCharge(ctx, charges.NewCharge{Charge: ch, Sealed: []byte("sealed card"), Event: ev, Task: task}); err != nil {
				t.Fatal(err)
			}
			keys, err := keyring.New(make([]byte, 32))
			if err != nil {
				t.Fatal(err)
			}
			prov := processingProvider(processing, processing, c.final)
			p := charges.NewProcessor(s, providers.Registry{"sandbox": prov}, keys, time.Second, time.Now, slog.New(slog.DiscardHandler), nil)

			type state struct {
				status    string
				reference *string
				sealed    bool
				queued    bool
				events    int
			}
			read := func() state {
				t.Helper()
				var st state
				if err := db.Pool.QueryRow(ctx, `SELECT status, provider_reference, card_sealed IS NOT NULL,
						EXISTS (SELECT 1 FROM outbox WHERE task_id = $2), (SELECT count(*) FROM events WHERE merchant_id = $3)
					FROM charges WHERE id = $1`, ch.ID, task.ID(), m.ID).Scan(&st.status, &st.reference, &st.sealed, &st.queued, &st.events); err != nil {
					t.Fatal(err)
				}
				return st
			}
			// Sent, answered processing; then looked up twice, still
			// processing, the second time on the last attempt.
			for i, final := range []bool{false, false, true} {
				err := p.Authorize(ctx, ch.ID, final)
				if err == nil || errors.Is(err, charges.ErrRetry) == final {
					t.Fatalf("attempt %d (final %v): err = %v, want ErrRetry, or a plain error on the last attempt", i+1, final, err)
				}
				st := read()
				if st.status != charges.StatusCreated || st.reference == nil || *st.reference != "pi_processing" || !st.sealed || !st.queued || st.events != 1 {
					t.Fatalf("after attempt %d: %+v; want created with the reference, the card sealed, the task queued, no new event", i+1, st)
				}
			}
			// The sweeper sends the task again: the lookup finds it final.
			if err := p.Authorize(ctx, ch.ID, false); err != nil {
				t.Fatal(err)
			}
			st := read()
			if st.status != c.wantStatus || st.sealed || st.queued {
				t.Errorf("final: %+v; want %s, the card purged, the task done", st, c.wantStatus)
			}
			if a, l := len(prov.Authorizes()), len(prov.PaymentLookups()); a != 1 || l != 3 {
				t.Errorf("authorizations sent %d, lookups %d; want 1 and 3", a, l)
			}
			got, err := s.ChargeByID(ctx, m.ID, ch.ID)
			if err != nil {
				t.Fatal(err)
			}
			if got.AmountCaptured != c.wantCapture || deref(got.FailureCode) != c.wantCode {
				t.Errorf("amount_captured %d, failure_code %q; want %d, %q", got.AmountCaptured, deref(got.FailureCode), c.wantCapture, c.wantCode)
			}
			var typ string
			err = db.Pool.QueryRow(ctx, `SELECT coalesce(max(type) FILTER (WHERE type <> $2), '') FROM events WHERE merchant_id = $1`, m.ID, events.ChargeCreated).Scan(&typ)
			if err != nil {
				t.Fatal(err)
			}
			if typ != c.wantEvent {
				t.Errorf("event %q, want %q", typ, c.wantEvent)
			}
			// A task sent again after that is a no-op.
			if err := p.Authorize(ctx, ch.ID, false); err != nil || len(prov.Authorizes()) != 1 || len(prov.PaymentLookups()) != 3 {
				t.Errorf("a repeat: err %v, %d authorizations, %d lookups", err, len(prov.Authorizes()), len(prov.PaymentLookups()))
			}
		})
	}
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}
