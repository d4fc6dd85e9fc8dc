package charges_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/gatehouse-pay/gatehouse/internal/charges"
	"github.com/gatehouse-pay/gatehouse/internal/events"
	"github.com/gatehouse-pay/gatehouse/internal/outbox"
	"github.com/gatehouse-pay/gatehouse/internal/providers"
	"github.com/gatehouse-pay/gatehouse/internal/providers/providertest"
)

// TestAuthorizeFinalOutcome: on the last attempt, an outcome the provider may
// have booked fails the charge and writes charge:reverse in the same
// transition, keeping the sealed card for it; a decline, or a provider that
// vouches it booked nothing under the key, fails the charge without it.
func TestAuthorizeFinalOutcome(t *testing.T) {
	ctx := context.Background()
	timeout := fmt.Errorf("%w: stripe: %w", providers.ErrUnavailable, context.DeadlineExceeded)
	circuitOpen := fmt.Errorf("%w: stripe: %w", providers.ErrUnavailable, providers.ErrCircuitOpen)
	nothingBooked := fmt.Errorf("%w: sandbox: no answer: %w", providers.ErrUnavailable, providers.ErrNothingBooked)
	cases := []struct {
		name        string
		err         error
		wantReverse bool
		wantCode    string
	}{
		{"timeout", timeout, true, "provider_unavailable"},
		{"reset", fmt.Errorf("%w: stripe: read: connection reset by peer", providers.ErrUnavailable), true, "provider_unavailable"},
		// Never sent, but an earlier attempt with the key may have been booked.
		{"circuit open", circuitOpen, true, "provider_unavailable"},
		{"nothing booked under the key", nothingBooked, false, "provider_unavailable"},
		{"declined", &providers.Decline{Code: "card_declined"}, false, "card_declined"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ch, sealed := created(t, true)
			st := &fakeStore{ChargeForWorkFn: func(context.Context, string) (charges.Charge, []byte, error) { return ch, sealed, nil }}
			q := &fakeQueue{}
			p := &providertest.Fake{AuthorizeFn: func(context.Context, providers.AuthorizeRequest) (providers.Result, error) {
				return providers.Result{}, c.err
			}}
			if err := worker(t, st, p).WithQueue(q).Authorize(ctx, ch.ID, true); err != nil {
				t.Fatal(err)
			}
			if len(st.transitions) != 1 {
				t.Fatalf("%d transitions, want 1", len(st.transitions))
			}
			tr := st.transitions[0]
			if tr.After.Status != charges.StatusFailed || deref(tr.After.FailureCode) != c.wantCode || tr.Event == nil || tr.Event.Type != events.ChargeFailed {
				t.Errorf("transition to %s %s, event %v; want failed %s with charge.failed", tr.After.Status, deref(tr.After.FailureCode), tr.Event, c.wantCode)
			}
			if tr.DoneTask != "charge:authorize:"+ch.ID {
				t.Errorf("done task %q", tr.DoneTask)
			}
			reverse := outbox.Task{Type: outbox.ChargeReverse, RefID: ch.ID}
			if !c.wantReverse {
				if tr.Then != nil || !tr.PurgeCard {
					t.Errorf("then %v, purge %v; want no task and the card purged", tr.Then, tr.PurgeCard)
				}
				if len(q.tasks) != 0 {
					t.Errorf("enqueued %v, want nothing", q.tasks)
				}
				return
			}
			if tr.Then == nil || *tr.Then != reverse {
				t.Fatalf("then %v, want %v", tr.Then, reverse)
			}
			if tr.PurgeCard {
				t.Error("the card was purged: the reverse cannot send the authorization again")
			}
			if msg := deref(tr.After.FailureMessage); msg != "The provider did not answer; any authorization it made is being released." {
				t.Errorf("failure message %q", msg)
			}
			if len(q.tasks) != 1 || q.tasks[0] != reverse {
				t.Errorf("enqueued %v, want %v after the commit", q.tasks, reverse)
			}
		})
	}

	t.Run("not final: retried, nothing written", func(t *testing.T) {
		ch, sealed := created(t, true)
		st := &fakeStore{ChargeForWorkFn: func(context.Context, string) (charges.Charge, []byte, error) { return ch, sealed, nil }}
		p := &providertest.Fake{AuthorizeFn: func(context.Context, providers.AuthorizeRequest) (providers.Result, error) {
			return providers.Result{}, timeout
		}}
		if err := worker(t, st, p).Authorize(ctx, ch.ID, false); !errors.Is(err, charges.ErrRetry) || len(st.transitions) != 0 {
			t.Errorf("err %v with %d transitions, want ErrRetry and none", err, len(st.transitions))
		}
	})
}

// failedUnknown returns a charge as failUnknown leaves it: failed, its card
// still sealed.
func failedUnknown(t *testing.T, capture bool) (charges.Charge, []byte) {
	t.Helper()
	ch, sealed := created(t, capture)
	ch.Status = charges.StatusFailed
	ch.FailureCode = ptr("provider_unavailable")
	ch.FailureMessage = ptr("The provider did not answer; any authorization it made is being released.")
	return ch, sealed
}

func TestReverse(t *testing.T) {
	ctx := context.Background()
	type want struct {
		voids, refunds int
		finished       bool // the transition that purges the card and drops the task
		retry          bool
	}
	timeout := fmt.Errorf("%w: stripe: %w", providers.ErrUnavailable, context.DeadlineExceeded)
	cases := []struct {
		name      string
		capture   bool
		authorize error
		release   error
		final     bool
		want      want
	}{
		{"booked, not captured: voided", false, nil, nil, false, want{voids: 1, finished: true}},
		{"booked and captured: refunded", true, nil, nil, false, want{refunds: 1, finished: true}},
		{"declined: nothing was booked", true, &providers.Decline{Code: "card_declined"}, nil, false, want{finished: true}},
		{"still unknown: retried", true, timeout, nil, false, want{retry: true}},
		{"still unknown on the last attempt: an error, the task stays", true, timeout, nil, true, want{}},
		{"release unknown: retried", true, nil, timeout, false, want{refunds: 1, retry: true}},
		{"release refused: finished, logged for a human", false, nil, &providers.Decline{Code: "invalid_request"}, false, want{voids: 1, finished: true}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ch, sealed := failedUnknown(t, c.capture)
			st := &fakeStore{ChargeForWorkFn: func(context.Context, string) (charges.Charge, []byte, error) { return ch, sealed, nil }}
			var refunds []providers.RefundRequest
			p := &providertest.Fake{
				AuthorizeFn: func(context.Context, providers.AuthorizeRequest) (providers.Result, error) {
					if c.authorize != nil {
						return providers.Result{}, c.authorize
					}
					return providers.Result{Reference: "pi_booked"}, nil
				},
				VoidFn: func(_ context.Context, r providers.VoidRequest) (providers.Result, error) {
					return providers.Result{Reference: r.Reference}, c.release
				},
				RefundFn: func(_ context.Context, r providers.RefundRequest) (providers.Result, error) {
					refunds = append(refunds, r)
					return providers.Result{Reference: "re_1"}, c.release
				},
			}
			err := worker(t, st, p).Reverse(ctx, ch.ID, c.final)
			switch {
			case c.want.retry:
				if !errors.Is(err, charges.ErrRetry) {
					t.Errorf("err = %v, want ErrRetry", err)
				}
			case c.want.finished:
				if err != nil {
					t.Errorf("err = %v", err)
				}
			default:
				if err == nil || errors.Is(err, charges.ErrRetry) {
					t.Errorf("err = %v, want a final error", err)
				}
			}
			if len(p.Authorizes()) != 1 {
				t.Fatalf("%d authorizations sent, want 1", len(p.Authorizes()))
			}
			if a := p.Authorizes()[0]; a.IdempotencyKey != "gh_"+ch.ID+"_authorize" || a.Amount != ch.Amount || a.Capture != c.capture || a.Card.Number != "4242424242424242" {
				t.Errorf("authorization sent again with key %q amount %d capture %v: want the original request", a.IdempotencyKey, a.Amount, a.Capture)
			}
			if len(p.Voids()) != c.want.voids || len(refunds) != c.want.refunds {
				t.Errorf("voids %d, refunds %d; want %d, %d", len(p.Voids()), len(refunds), c.want.voids, c.want.refunds)
			}
			for _, v := range p.Voids() {
				if v.Reference != "pi_booked" || v.IdempotencyKey != "gh_"+ch.ID+"_reverse" {
					t.Errorf("void %+v", v)
				}
			}
			for _, r := range refunds {
				if r.Reference != "pi_booked" || r.IdempotencyKey != "gh_"+ch.ID+"_reverse" || r.Amount != ch.Amount || r.Currency != ch.Currency {
					t.Errorf("refund %+v, want all of pi_booked under gh_%s_reverse", r, ch.ID)
				}
			}
			if !c.want.finished {
				if len(st.transitions) != 0 || len(st.deleted) != 0 {
					t.Errorf("transitions %d, deleted %v: the task must stay", len(st.transitions), st.deleted)
				}
				return
			}
			if len(st.transitions) != 1 {
				t.Fatalf("%d transitions, want 1", len(st.transitions))
			}
			tr := st.transitions[0]
			if tr.Before.Status != charges.StatusFailed || tr.After.Status != charges.StatusFailed || !tr.PurgeCard ||
				tr.DoneTask != "charge:reverse:"+ch.ID || tr.Event != nil || tr.Then != nil {
				t.Errorf("transition %s -> %s purge %v task %q event %v then %v", tr.Before.Status, tr.After.Status, tr.PurgeCard, tr.DoneTask, tr.Event, tr.Then)
			}
		})
	}

	t.Run("already finished: the card is purged, nothing is sent", func(t *testing.T) {
		ch, _ := failedUnknown(t, true)
		st := &fakeStore{ChargeForWorkFn: func(context.Context, string) (charges.Charge, []byte, error) { return ch, nil, nil }}
		p := &providertest.Fake{}
		if err := worker(t, st, p).Reverse(ctx, ch.ID, false); err != nil {
			t.Fatal(err)
		}
		if len(p.Authorizes()) != 0 || len(st.transitions) != 0 || len(st.deleted) != 1 || st.deleted[0] != "charge:reverse:"+ch.ID {
			t.Errorf("%d calls, %d transitions, deleted %v", len(p.Authorizes()), len(st.transitions), st.deleted)
		}
	})
}

// A reverse whose authorization is answered as still processing neither
// voids nor refunds it (neither is possible yet, and the key only replays
// that answer): the payment is looked up, and released as it ended.
func TestReverseOfAProcessingPayment(t *testing.T) {
	ctx := context.Background()
	for _, c := range []struct {
		status          string
		voids, refunds  int
		finished, retry bool
	}{
		{providers.PaymentProcessing, 0, 0, false, true},
		{providers.PaymentCaptured, 0, 1, true, false},
		{providers.PaymentAuthorized, 1, 0, true, false},
		{providers.PaymentFailed, 0, 0, true, false},
		{providers.PaymentCanceled, 0, 0, true, false},
	} {
		t.Run(c.status, func(t *testing.T) {
			ch, sealed := failedUnknown(t, true)
			st := &fakeStore{ChargeForWorkFn: func(context.Context, string) (charges.Charge, []byte, error) { return ch, sealed, nil }}
			var refunds int
			prov := &providertest.FakeLookup{Fake: &providertest.Fake{
				AuthorizeFn: func(context.Context, providers.AuthorizeRequest) (providers.Result, error) {
					return providers.Result{Reference: "pi_processing", Pending: true}, nil
				},
				RefundFn: func(context.Context, providers.RefundRequest) (providers.Result, error) {
					refunds++
					return providers.Result{Reference: "re_1"}, nil
				},
			}}
			prov.LookupPaymentFn = func(_ context.Context, ref string) (providers.Payment, error) {
				if ref != "pi_processing" {
					t.Errorf("looked up %q", ref)
				}
				return providers.Payment{Reference: ref, Status: c.status, Captured: ch.Amount}, nil
			}
			err := captureWorker(t, st, prov, testNow, nil).Reverse(ctx, ch.ID, false)
			if c.retry != errors.Is(err, charges.ErrRetry) || (!c.retry && err != nil) {
				t.Fatalf("err = %v, want retry %v", err, c.retry)
			}
			if len(prov.PaymentLookups()) != 1 || len(prov.Voids()) != c.voids || refunds != c.refunds {
				t.Errorf("lookups %d, voids %d, refunds %d; want 1, %d, %d", len(prov.PaymentLookups()), len(prov.Voids()), refunds, c.voids, c.refunds)
			}
			if finished := len(st.transitions) == 1 && st.transitions[0].PurgeCard; finished != c.finished {
				t.Errorf("finished %v (transitions %+v), want %v", finished, st.transitions, c.finished)
			}
		})
	}
}
