package charges_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/gatehouse-pay/gatehouse/internal/charges"
	"github.com/gatehouse-pay/gatehouse/internal/outbox"
	"github.com/gatehouse-pay/gatehouse/internal/providers"
	"github.com/gatehouse-pay/gatehouse/internal/providers/providertest"
	"github.com/gatehouse-pay/gatehouse/internal/resource"
)

// routed is a created charge whose route is conn_a then conn_b, at its
// first attempt; begun: an earlier run recorded the attempt before its call.
func routed(t *testing.T, begun bool) (charges.Charge, []byte) {
	t.Helper()
	ch, sealed := created(t, true)
	ch.ConnectorID = ptr("conn_a")
	ch.Route = []charges.RouteStep{{Connector: "conn_a", Provider: "sandbox"}, {Connector: "conn_b", Provider: "sandbox"}}
	if begun {
		ch.Attempts = []charges.Attempt{{Connector: "conn_a", Provider: "sandbox", Status: charges.AttemptUnknown, StartedAt: testNow.Add(-time.Minute)}}
	}
	return ch, sealed
}

// TestFailover: a charge moves on to its next connector only when the
// attempt's outcome is known to be "no money taken" (a soft decline, an
// outage the provider vouches for, or calls that never reached it), and
// never while an answer may have been lost.
func TestFailover(t *testing.T) {
	ctx := context.Background()
	decline := func(code string) error { return &providers.Decline{Code: code} }
	nothingBooked := fmt.Errorf("%w: %w", providers.ErrUnavailable, providers.ErrNothingBooked)
	circuitOpen := fmt.Errorf("%w: %w: %w", providers.ErrUnavailable, providers.ErrCircuitOpen, providers.ErrNotSent)
	refused := fmt.Errorf("%w: dial refused: %w", providers.ErrUnavailable, providers.ErrNotSent)
	timeout := fmt.Errorf("%w: %w", providers.ErrUnavailable, context.DeadlineExceeded)
	type want int
	const (
		moveOn  want = iota
		fail         // the charge fails where it is, nothing to release
		reverse      // the charge fails and its reverse releases what may be booked
		retry        // the task runs again at the same connector
	)
	cases := []struct {
		name  string
		err   error
		begun bool
		final bool
		want  want
		code  string
	}{
		{"soft decline", decline("processing_error"), false, false, moveOn, "processing_error"},
		{"issuer unavailable", decline("issuer_unavailable"), false, false, moveOn, "issuer_unavailable"},
		{"try again later", decline("try_again_later"), false, false, moveOn, "try_again_later"},
		{"hard decline", decline("card_declined"), false, false, fail, "card_declined"},
		{"stolen card", decline("stolen_card"), false, false, fail, "stolen_card"},
		{"authentication outcome", decline("authentication_required"), false, false, fail, "authentication_required"},
		{"nothing booked", nothingBooked, false, false, moveOn, "provider_unavailable"},
		{"nothing booked after an earlier run", nothingBooked, true, true, moveOn, "provider_unavailable"},
		{"breaker open on the attempt's first run", circuitOpen, false, false, moveOn, "provider_unavailable"},
		{"breaker open after an earlier run sent it", circuitOpen, true, false, retry, ""},
		{"breaker open after an earlier run sent it, last try", circuitOpen, true, true, reverse, "provider_unavailable"},
		{"refused", refused, false, false, moveOn, "provider_unavailable"},
		{"refused after an earlier run sent it", refused, true, false, retry, ""},
		{"timeout: the answer may be lost", timeout, false, false, retry, ""},
		{"timeout, last try", timeout, false, true, reverse, "provider_unavailable"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ch, sealed := routed(t, c.begun)
			st := &fakeStore{ChargeForWorkFn: func(context.Context, string) (charges.Charge, []byte, error) { return ch, sealed, nil }}
			prov := &providertest.Fake{AuthorizeFn: func(context.Context, providers.AuthorizeRequest) (providers.Result, error) {
				return providers.Result{}, c.err
			}}
			err := worker(t, st, prov).Authorize(ctx, ch.ID, c.final)
			if len(prov.Authorizes()) != 1 || prov.Authorizes()[0].IdempotencyKey != charges.IdempotencyKey(ch.ID, "authorize") {
				t.Fatalf("calls %v, want one under the first attempt's key", prov.Authorizes())
			}
			if c.want == retry {
				if !errors.Is(err, charges.ErrRetry) || len(st.transitions) != 0 {
					t.Fatalf("err %v, transitions %d: want a retry and nothing written", err, len(st.transitions))
				}
			} else if err != nil || len(st.transitions) != 1 {
				t.Fatalf("err %v, transitions %d", err, len(st.transitions))
			}
			if len(st.begun) != 1 && !c.begun {
				t.Errorf("attempt records %v: want the attempt recorded before its call", st.begun)
			}
			if c.want == retry {
				return
			}
			tr := st.transitions[0]
			last := tr.After.Attempts[len(tr.After.Attempts)-1]
			if len(tr.After.Attempts) != 1 || last.Connector != "conn_a" || deref(last.FailureCode) != c.code || last.EndedAt == nil {
				t.Errorf("attempts %+v, want conn_a ended with %s", tr.After.Attempts, c.code)
			}
			switch c.want {
			case moveOn:
				if tr.Cause != charges.CauseFailover || tr.After.Status != charges.StatusCreated || deref(tr.After.ConnectorID) != "conn_b" ||
					tr.Then == nil || tr.Then.Type != outbox.ChargeAuthorize || tr.Then.QueueID() == tr.Then.ID() || last.Status != charges.AttemptFailed {
					t.Errorf("transition %+v then %+v: want a move to conn_b in a new task", tr.After, tr.Then)
				}
			case fail:
				if tr.After.Status != charges.StatusFailed || tr.Then != nil || deref(tr.After.ConnectorID) != "conn_a" || last.Status != charges.AttemptFailed {
					t.Errorf("transition %+v: want failed at conn_a", tr.After)
				}
			case reverse:
				if tr.After.Status != charges.StatusFailed || tr.Then == nil || tr.Then.Type != outbox.ChargeReverse || last.Status != charges.AttemptUnknown {
					t.Errorf("transition %+v then %+v: want failed with a reverse, the attempt unknown", tr.After, tr.Then)
				}
			}
		})
	}
}

// TestSecondAttempt: the next connector's attempt has its own idempotency
// key, and its success records both attempts; a soft decline at the last
// connector fails the charge.
func TestSecondAttempt(t *testing.T) {
	ctx := context.Background()
	ch, sealed := routed(t, false)
	ended := testNow.Add(-time.Second)
	ch.ConnectorID = ptr("conn_b")
	ch.Attempts = []charges.Attempt{{Connector: "conn_a", Provider: "sandbox", Status: charges.AttemptFailed,
		FailureCode: ptr("processing_error"), StartedAt: ended, EndedAt: &ended}}
	st := &fakeStore{ChargeForWorkFn: func(context.Context, string) (charges.Charge, []byte, error) { return ch, sealed, nil }}
	prov := &providertest.Fake{}
	if err := worker(t, st, prov).Authorize(ctx, ch.ID, false); err != nil {
		t.Fatal(err)
	}
	if got := prov.Authorizes()[0].IdempotencyKey; got != charges.IdempotencyKey(ch.ID, "authorize_2") {
		t.Errorf("key %s, want the second attempt's", got)
	}
	tr := st.transitions[0]
	if tr.After.Status != charges.StatusCaptured || len(tr.After.Attempts) != 2 || tr.After.Attempts[1].Status != charges.AttemptSucceeded ||
		tr.After.Attempts[0].Status != charges.AttemptFailed || deref(tr.After.Attempts[1].ProviderReference) == "" {
		t.Errorf("after %+v", tr.After.Attempts)
	}
	if len(st.begun) != 0 {
		t.Errorf("the last connector's attempt was recorded before its call: %v (nothing can move on after it)", st.begun)
	}
	var body struct {
		Data struct {
			Charge resource.Charge `json:"charge"`
		} `json:"data"`
	}
	if err := json.Unmarshal(tr.Event.Body, &body); err != nil {
		t.Fatal(err)
	}
	if got := body.Data.Charge.Attempts; len(got) != 2 || got[1].Status != charges.AttemptSucceeded || deref(body.Data.Charge.Connector) != "conn_b" {
		t.Errorf("the charge.captured event shows attempts %+v at %s, want both, the last succeeded at conn_b", got, deref(body.Data.Charge.Connector))
	}

	st = &fakeStore{ChargeForWorkFn: func(context.Context, string) (charges.Charge, []byte, error) { return ch, sealed, nil }}
	prov = &providertest.Fake{AuthorizeFn: func(context.Context, providers.AuthorizeRequest) (providers.Result, error) {
		return providers.Result{}, &providers.Decline{Code: "processing_error"}
	}}
	if err := worker(t, st, prov).Authorize(ctx, ch.ID, false); err != nil {
		t.Fatal(err)
	}
	if tr := st.transitions[0]; tr.After.Status != charges.StatusFailed || deref(tr.After.FailureCode) != "processing_error" || len(tr.After.Attempts) != 2 {
		t.Errorf("a soft decline at the last connector: %+v", tr.After)
	}
}

// TestStaleAttemptTask: the task of an attempt the charge has left makes no
// call and leaves the outbox row to the current attempt's task; the
// current attempt's task and a task of no attempt run it.
func TestStaleAttemptTask(t *testing.T) {
	ctx := context.Background()
	ch, sealed := routed(t, false)
	ch.ConnectorID = ptr("conn_b") // the charge is at its second attempt
	for _, c := range []struct {
		attempt int
		calls   int
	}{{3, 0}, {2, 1}, {0, 1}} {
		st := &fakeStore{ChargeForWorkFn: func(context.Context, string) (charges.Charge, []byte, error) { return ch, sealed, nil }}
		prov := &providertest.Fake{}
		if err := worker(t, st, prov).AuthorizeAttempt(ctx, ch.ID, c.attempt, false); err != nil {
			t.Fatal(err)
		}
		if len(prov.Authorizes()) != c.calls {
			t.Errorf("task of attempt %d: %d calls, want %d", c.attempt, len(prov.Authorizes()), c.calls)
		}
		if c.calls == 0 && (len(st.deleted) != 0 || len(st.transitions) != 0) {
			t.Errorf("a stale task wrote: deleted %v, transitions %d", st.deleted, len(st.transitions))
		}
	}
}
