package charges_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/gatehouse-pay/gatehouse/internal/charges"
	"github.com/gatehouse-pay/gatehouse/internal/providers"
	"github.com/gatehouse-pay/gatehouse/internal/providers/providertest"
)

// FuzzRequiresActionMoves drives a charge whose issuer asks for
// authentication through every input the gateway can meet, in any order:
// duplicate and late tasks of every kind, the cardholder's answers (as the
// challenge page records them), capture and void requests, the clock passing
// the authentication timeout, and a provider that approves, declines, asks
// again or leaves the outcome unknown. The fake store applies a transition
// only where the real one does (same status, pending action and answer).
//
// Whatever the input, a charge leaves requires_action only on the issuer's
// answer (an answer was recorded, or the provider reported one), a requested
// void, or the timeout; it is captured or authorized only after an answer
// that was not a failure; and it fails authentication_expired only when no
// answer was recorded in time.
func FuzzRequiresActionMoves(f *testing.F) {
	f.Add([]byte{0, 4, 1})                // answered, settled
	f.Add([]byte{0, 5, 1})                // failed
	f.Add([]byte{0, 6, 1})                // expired
	f.Add([]byte{0, 7, 3})                // voided
	f.Add([]byte{0, 8, 2, 1, 9, 0, 3})    // capture refused, stray tasks
	f.Add([]byte{0, 4, 0x21, 0x41, 1})    // provider asks again, then unknown
	f.Add([]byte{0, 6, 0x33, 1, 7, 3, 1}) // cancellation refused at the timeout
	f.Add([]byte{0x10, 4, 6, 1, 0x11, 4}) // final attempts
	f.Fuzz(func(t *testing.T, script []byte) {
		if len(script) > 48 {
			script = script[:48]
		}
		ctx := context.Background()
		ch, sealed := created(t, true)
		cur := ch
		clock := testNow
		var authMode, voidMode byte // what the provider answers next
		st := &fakeStore{
			ChargeForWorkFn: func(context.Context, string) (charges.Charge, []byte, error) { return cur, sealed, nil },
			ApplyTransitionFn: func(_ context.Context, tr charges.Transition) (bool, error) {
				b := tr.Before
				if b.Status != cur.Status || deref(b.PendingAction) != deref(cur.PendingAction) ||
					deref(b.Authentication.Answer) != deref(cur.Authentication.Answer) {
					return false, nil
				}
				if cur.Status == charges.StatusRequiresAction && tr.After.Status != charges.StatusRequiresAction {
					checkLeave(t, cur, tr.After, clock)
				}
				cur = tr.After
				return true, nil
			},
		}
		prov := &providertest.Fake{
			AuthorizeFn: func(context.Context, providers.AuthorizeRequest) (providers.Result, error) {
				return providers.Result{Reference: "pa_1", Action: &providers.Action{}}, nil
			},
			AuthenticateFn: func(_ context.Context, r providers.AuthenticateRequest) (providers.Result, error) {
				switch authMode % 4 {
				case 1:
					return providers.Result{Reference: r.Reference, Action: &providers.Action{}}, nil
				case 2:
					return providers.Result{}, providers.ErrUnavailable
				case 3:
					return providers.Result{}, &providers.Decline{Code: "insufficient_funds"}
				}
				if r.Answer == providers.AnswerFailed {
					return providers.Result{}, &providers.Decline{Code: "authentication_failed"}
				}
				return providers.Result{Reference: r.Reference}, nil
			},
			VoidFn: func(_ context.Context, r providers.VoidRequest) (providers.Result, error) {
				switch voidMode % 3 {
				case 1:
					return providers.Result{}, &providers.Decline{Code: "payment_intent_unexpected_state"}
				case 2:
					return providers.Result{}, providers.ErrUnavailable
				}
				return providers.Result{Reference: r.Reference}, nil
			},
		}
		p := charges.NewProcessor(st, providers.Registry{"sandbox": prov}, testKeyring(t), time.Second,
			func() time.Time { return clock }, slog.New(slog.NewTextHandler(io.Discard, nil)), nil).
			WithAuthentication(time.Hour, charges.NewLinks("https://gw.example", testKeyring(t)), nil)
		answer := func(a string) {
			c := cur
			if c.Status == charges.StatusRequiresAction && c.PendingAction == nil && c.Authentication.Answer == nil &&
				c.Authentication.ExpiresAt != nil && clock.Before(*c.Authentication.ExpiresAt) {
				cur.Authentication.Answer = &a
			}
		}
		request := func(action string) {
			if charges.CheckAction(cur, action, nil) == nil && cur.PendingAction == nil {
				cur.PendingAction = &action
			}
		}
		for _, b := range script {
			final := b&0x10 != 0
			authMode, voidMode = b>>5, b>>5
			var err error
			switch b % 10 {
			case 0:
				err = p.Authorize(ctx, cur.ID, final)
			case 1:
				err = p.Authenticate(ctx, cur.ID, final)
			case 2:
				err = p.Capture(ctx, cur.ID, final)
			case 3:
				err = p.Void(ctx, cur.ID, final)
			case 4:
				answer(providers.AnswerSucceeded)
			case 5:
				answer(providers.AnswerFailed)
			case 6:
				clock = clock.Add(time.Hour + time.Second)
			case 7:
				request(charges.ActionVoid)
			case 8:
				request(charges.ActionCapture)
			case 9:
				err = p.Reverse(ctx, cur.ID, final)
			}
			if errors.Is(err, charges.ErrIllegalMove) {
				t.Fatalf("step %d (%d): %v", b%10, b, err)
			}
		}
	})
}

// checkLeave fails t unless the move of a charge out of requires_action,
// from before to after at now, is one the issuer's answer, a void or the
// timeout explains.
func checkLeave(t *testing.T, before, after charges.Charge, now time.Time) {
	t.Helper()
	answered := before.Authentication.Answer != nil
	voiding := before.PendingAction != nil && *before.PendingAction == charges.ActionVoid
	expired := before.Authentication.ExpiresAt != nil && !now.Before(*before.Authentication.ExpiresAt)
	switch after.Status {
	case charges.StatusCaptured, charges.StatusAuthorized:
		if !answered && !expired && !voiding {
			t.Fatalf("requires_action -> %s with no answer, void or timeout", after.Status)
		}
		if answered && *before.Authentication.Answer == providers.AnswerFailed {
			t.Fatalf("requires_action -> %s after the cardholder failed the challenge", after.Status)
		}
	case charges.StatusVoided:
		if !voiding {
			t.Fatalf("requires_action -> voided with no void requested")
		}
	case charges.StatusFailed:
		code := deref(after.FailureCode)
		switch {
		case code == "authentication_expired" && (answered || !expired):
			t.Fatalf("failed authentication_expired: answered %v, expired %v", answered, expired)
		case code != "authentication_expired" && !answered && !expired:
			t.Fatalf("failed %s with no answer and before the timeout", code)
		}
	default:
		t.Fatalf("requires_action -> %s", after.Status)
	}
}
