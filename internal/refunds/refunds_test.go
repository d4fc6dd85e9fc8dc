package refunds_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/gatehouse-pay/gatehouse/internal/apperr"
	"github.com/gatehouse-pay/gatehouse/internal/charges"
	"github.com/gatehouse-pay/gatehouse/internal/events"
	"github.com/gatehouse-pay/gatehouse/internal/idempotency"
	"github.com/gatehouse-pay/gatehouse/internal/listing"
	"github.com/gatehouse-pay/gatehouse/internal/outbox"
	"github.com/gatehouse-pay/gatehouse/internal/providers"
	"github.com/gatehouse-pay/gatehouse/internal/providers/providertest"
	"github.com/gatehouse-pay/gatehouse/internal/refunds"
	"github.com/gatehouse-pay/gatehouse/internal/resource"
)

const chargeID = "0193a5c2-7f1e-7b3a-9c4d-2e8f6a1b3c5d"

var testNow = time.Date(2026, 6, 15, 10, 30, 0, 123456789, time.UTC)

func ptr[T any](v T) *T { return &v }

// fakeStore is a refunds.Store whose answers the test chooses. CreateRefund
// calls plan with Charge unless CreateRefundFn is set.
type fakeStore struct {
	Charge          charges.Charge
	CreateRefundFn  func(ctx context.Context, merchantID, chargeID string, idem *idempotency.Request, plan func(charges.Charge) (refunds.Plan, error)) (*idempotency.Response, error)
	RefundForWorkFn func(ctx context.Context, id string) (refunds.Refund, charges.Charge, error)
	SettleRefundFn  func(ctx context.Context, after refunds.Refund, doneTask string, eventsFor func(refunds.Refund, charges.Charge) (refunds.Settlement, error)) (bool, error)
	ListRefundsFn   func(ctx context.Context, merchantID, chargeID string, p listing.Params) (listing.Page[refunds.Refund], error)
	RefundByIDFn    func(ctx context.Context, merchantID, id string) (refunds.Refund, error)
	createCalls     int
	plans           []refunds.Plan
	settled         []refunds.Refund
	settledTasks    []string
	deleted         []string
	mu              sync.Mutex
}

func (s *fakeStore) CreateRefund(ctx context.Context, merchantID, id string, idem *idempotency.Request, plan func(charges.Charge) (refunds.Plan, error)) (*idempotency.Response, []outbox.Task, error) {
	s.createCalls++
	if s.CreateRefundFn != nil {
		r, err := s.CreateRefundFn(ctx, merchantID, id, idem, plan)
		return r, nil, err
	}
	p, err := plan(s.Charge)
	if err != nil {
		return nil, nil, err
	}
	s.plans = append(s.plans, p)
	return nil, nil, nil
}

func (s *fakeStore) RefundByID(ctx context.Context, merchantID, id string) (refunds.Refund, error) {
	if s.RefundByIDFn != nil {
		return s.RefundByIDFn(ctx, merchantID, id)
	}
	return refunds.Refund{}, apperr.NotFound("refund")
}

func (s *fakeStore) ListRefunds(ctx context.Context, merchantID, id string, p listing.Params) (listing.Page[refunds.Refund], error) {
	if s.ListRefundsFn != nil {
		return s.ListRefundsFn(ctx, merchantID, id, p)
	}
	return listing.Page[refunds.Refund]{Items: []refunds.Refund{}}, nil
}

func (s *fakeStore) RefundForWork(ctx context.Context, id string) (refunds.Refund, charges.Charge, error) {
	if s.RefundForWorkFn != nil {
		return s.RefundForWorkFn(ctx, id)
	}
	return refunds.Refund{}, charges.Charge{}, apperr.NotFound("refund")
}

func (s *fakeStore) SettleRefund(ctx context.Context, after refunds.Refund, doneTask string, eventsFor func(refunds.Refund, charges.Charge) (refunds.Settlement, error)) (bool, []outbox.Task, error) {
	s.mu.Lock()
	s.settled = append(s.settled, after)
	s.settledTasks = append(s.settledTasks, doneTask)
	s.mu.Unlock()
	if s.SettleRefundFn != nil {
		ok, err := s.SettleRefundFn(ctx, after, doneTask, eventsFor)
		return ok, nil, err
	}
	return true, nil, nil
}

func (s *fakeStore) AwaitRefund(_ context.Context, _, _, doneTask string, _ time.Time) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.deleted = append(s.deleted, doneTask)
	return nil
}

func (s *fakeStore) DeleteTask(_ context.Context, taskID string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.deleted = append(s.deleted, taskID)
	return nil
}

type fakeQueue struct{ tasks []outbox.Task }

func (q *fakeQueue) Enqueue(_ context.Context, t outbox.Task) error {
	q.tasks = append(q.tasks, t)
	return nil
}

func render(r refunds.Refund) (idempotency.Response, error) {
	b, err := json.Marshal(r)
	return idempotency.Response{Status: 201, Body: b}, err
}

func capturedCharge() charges.Charge {
	return charges.Charge{ID: chargeID, MerchantID: "mer_a", Environment: "sandbox", Amount: 2000, AmountCaptured: 2000,
		Currency: "USD", Status: charges.StatusCaptured, Provider: "sandbox", ProviderReference: ptr("ch_ref"),
		Card: charges.Card{Brand: "visa"}, CreatedAt: testNow, UpdatedAt: testNow}
}

func TestCreateValidation(t *testing.T) {
	cases := []struct {
		name        string
		p           refunds.CreateParams
		code, param string
		kind        apperr.Kind
	}{
		{"no charge", refunds.CreateParams{}, "parameter_missing", "charge", apperr.KindInvalid},
		{"empty charge", refunds.CreateParams{Charge: ptr("")}, "parameter_missing", "charge", apperr.KindInvalid},
		{"live", refunds.CreateParams{Charge: ptr(chargeID), Environment: ptr("live")}, "live_mode_disabled", "", apperr.KindForbidden},
		{"live without a charge", refunds.CreateParams{Environment: ptr("live")}, "live_mode_disabled", "", apperr.KindForbidden},
		{"environment prod", refunds.CreateParams{Charge: ptr(chargeID), Environment: ptr("prod")}, "parameter_invalid", "environment", apperr.KindInvalid},
		{"amount 0", refunds.CreateParams{Charge: ptr(chargeID), Amount: ptr(int64(0))}, "parameter_invalid", "amount", apperr.KindInvalid},
		{"amount -1", refunds.CreateParams{Charge: ptr(chargeID), Amount: ptr(int64(-1))}, "parameter_invalid", "amount", apperr.KindInvalid},
		{"amount over the maximum", refunds.CreateParams{Charge: ptr(chargeID), Amount: ptr(int64(100_000_000))}, "parameter_invalid", "amount", apperr.KindInvalid},
		{"reason", refunds.CreateParams{Charge: ptr(chargeID), Reason: ptr("Duplicate")}, "parameter_invalid", "reason", apperr.KindInvalid},
		{"metadata key", refunds.CreateParams{Charge: ptr(chargeID), Metadata: map[string]string{strings.Repeat("k", 41): ""}}, "parameter_invalid", "metadata", apperr.KindInvalid},
		{"metadata empty key", refunds.CreateParams{Charge: ptr(chargeID), Metadata: map[string]string{"": "v"}}, "parameter_invalid", "metadata", apperr.KindInvalid},
		{"metadata value", refunds.CreateParams{Charge: ptr(chargeID), Metadata: map[string]string{"k": strings.Repeat("v", 501)}}, "parameter_invalid", "metadata", apperr.KindInvalid},
		{"malformed charge", refunds.CreateParams{Charge: ptr("ch_1")}, "not_found", "", apperr.KindNotFound},
		{"upper-case charge", refunds.CreateParams{Charge: ptr(strings.ToUpper(chargeID))}, "not_found", "", apperr.KindNotFound},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			st, q := &fakeStore{Charge: capturedCharge()}, &fakeQueue{}
			_, err := refunds.NewService(st, q, func() time.Time { return testNow }, nil).Create(context.Background(), "mer_a", c.p, nil, render)
			e, ok := apperr.As(err)
			if !ok || e.Code != c.code || e.Param != c.param || e.Kind != c.kind {
				t.Fatalf("err = %v, want %s (param %q)", err, c.code, c.param)
			}
			if st.createCalls != 0 || len(q.tasks) != 0 {
				t.Errorf("a refused request reached the store (%d) or the queue (%d)", st.createCalls, len(q.tasks))
			}
		})
	}
}

func TestCreatePlan(t *testing.T) {
	withMoney := func(status string, captured, refunded, held int64) charges.Charge {
		c := capturedCharge()
		c.Status, c.AmountCaptured, c.AmountRefunded, c.AmountRefundHeld = status, captured, refunded, held
		return c
	}
	cases := []struct {
		name       string
		charge     charges.Charge
		amount     *int64
		wantAmount int64
		code       string
	}{
		{"full by default", withMoney(charges.StatusCaptured, 2000, 0, 0), nil, 2000, ""},
		{"what remains by default", withMoney(charges.StatusCaptured, 2000, 500, 300), nil, 1200, ""},
		{"partial capture bounds the refund", withMoney(charges.StatusCaptured, 1500, 0, 0), nil, 1500, ""},
		{"exactly what remains", withMoney(charges.StatusCaptured, 2000, 500, 300), ptr(int64(1200)), 1200, ""},
		{"one more than remains", withMoney(charges.StatusCaptured, 2000, 500, 300), ptr(int64(1201)), 0, "amount_too_large"},
		{"above a partial capture", withMoney(charges.StatusCaptured, 1500, 0, 0), ptr(int64(1501)), 0, "amount_too_large"},
		{"created", withMoney(charges.StatusCreated, 0, 0, 0), nil, 0, "invalid_state"},
		{"authorized", withMoney(charges.StatusAuthorized, 0, 0, 0), ptr(int64(1)), 0, "invalid_state"},
		{"failed", withMoney(charges.StatusFailed, 0, 0, 0), nil, 0, "invalid_state"},
		{"voided", withMoney(charges.StatusVoided, 0, 0, 0), nil, 0, "invalid_state"},
		{"refunded", withMoney(charges.StatusRefunded, 2000, 2000, 0), nil, 0, "invalid_state"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			st, q := &fakeStore{Charge: c.charge}, &fakeQueue{}
			svc := refunds.NewService(st, q, func() time.Time { return testNow }, nil)
			p := refunds.CreateParams{Charge: ptr(chargeID), Amount: c.amount, Reason: ptr("fraudulent"), Metadata: map[string]string{"t": "1"}}
			res, err := svc.Create(context.Background(), "mer_a", p, nil, render)
			if c.code != "" {
				if got := apperr.CodeOf(err); got != c.code {
					t.Fatalf("err = %v, want %s", err, c.code)
				}
				if c.code == "amount_too_large" {
					if e, _ := apperr.As(err); e.Param != "amount" || e.Kind != apperr.KindInvalid {
						t.Errorf("amount_too_large with param %q kind %v", e.Param, e.Kind)
					}
				}
				if len(q.tasks) != 0 {
					t.Error("a refused refund was enqueued")
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			plan := st.plans[0]
			r := plan.Refund
			if r.ID == "" || r.ID == chargeID || r.ChargeID != chargeID || r.MerchantID != "mer_a" || r.Amount != c.wantAmount ||
				r.Currency != "USD" || r.Status != refunds.StatusPending || *r.Reason != "fraudulent" || r.Metadata["t"] != "1" ||
				!r.CreatedAt.Equal(testNow.Truncate(time.Millisecond)) {
				t.Errorf("refund = %+v", r)
			}
			if plan.Task != (outbox.Task{Type: outbox.RefundProcess, RefID: r.ID}) {
				t.Errorf("task = %+v", plan.Task)
			}
			if diff := cmp.Diff([]outbox.Task{plan.Task}, q.tasks); diff != "" {
				t.Errorf("enqueued (-want +got):\n%s", diff)
			}
			if string(plan.Response.Body) != string(res.Response.Body) || res.Replayed {
				t.Errorf("answer %s, stored %s", res.Response.Body, plan.Response.Body)
			}
			var ev resource.Event
			var data struct {
				Object string
				Charge map[string]any
				Refund map[string]any
			}
			if err := json.Unmarshal(plan.Event.Body, &ev); err != nil {
				t.Fatal(err)
			}
			raw, _ := json.Marshal(ev.Data)
			_ = json.Unmarshal(raw, &data)
			if plan.Event.Type != events.RefundCreated || ev.EventType != events.RefundCreated || data.Object != "refund" ||
				data.Refund["id"] != r.ID || data.Refund["status"] != "pending" || data.Charge["id"] != chargeID {
				t.Errorf("event = %s", plan.Event.Body)
			}
		})
	}

	t.Run("replay", func(t *testing.T) {
		stored := &idempotency.Response{Status: 201, Body: []byte(`{"id":"r"}`)}
		st := &fakeStore{CreateRefundFn: func(context.Context, string, string, *idempotency.Request, func(charges.Charge) (refunds.Plan, error)) (*idempotency.Response, error) {
			return stored, nil
		}}
		q := &fakeQueue{}
		res, err := refunds.NewService(st, q, time.Now, nil).Create(context.Background(), "mer_a", refunds.CreateParams{Charge: ptr(chargeID)}, &idempotency.Request{Key: "k"}, render)
		if err != nil || !res.Replayed || string(res.Response.Body) != `{"id":"r"}` || len(q.tasks) != 0 {
			t.Errorf("replay = %+v %v, %d tasks", res, err, len(q.tasks))
		}
	})
}

func worker(st *fakeStore, p providers.Provider) *refunds.Processor {
	reg := providers.Registry{}
	if p != nil {
		reg["sandbox"] = p
	}
	return refunds.NewProcessor(st, reg, time.Second, func() time.Time { return testNow }, slog.New(slog.NewTextHandler(io.Discard, nil)), nil)
}

func TestProcess(t *testing.T) {
	const refundID = "0193a5d0-3c4e-7a5b-8c6d-7e8f9a0b1c2d"
	pending := refunds.Refund{ID: refundID, MerchantID: "mer_a", ChargeID: chargeID, Amount: 500, Currency: "USD",
		Status: refunds.StatusPending, Reason: ptr("duplicate"), CreatedAt: testNow, UpdatedAt: testNow}
	forWork := func(r refunds.Refund, c charges.Charge) func(context.Context, string) (refunds.Refund, charges.Charge, error) {
		return func(context.Context, string) (refunds.Refund, charges.Charge, error) { return r, c, nil }
	}
	ctx := context.Background()

	t.Run("succeeded", func(t *testing.T) {
		for _, full := range []bool{false, true} {
			var got []string
			st := &fakeStore{RefundForWorkFn: forWork(pending, capturedCharge()),
				SettleRefundFn: func(_ context.Context, after refunds.Refund, _ string, eventsFor func(refunds.Refund, charges.Charge) (refunds.Settlement, error)) (bool, error) {
					c := capturedCharge()
					c.AmountRefunded = 500
					if full {
						c.Status, c.AmountRefunded = charges.StatusRefunded, 2000
					}
					st, err := eventsFor(after, c)
					if err == nil && (st.Booking == nil || st.Booking.Amount != -after.Amount || st.Booking.Check() != nil) {
						t.Errorf("a refund that succeeded books %+v", st.Booking)
					}
					for _, e := range st.Events {
						got = append(got, e.Type)
					}
					return true, err
				}}
			p := &providertest.Fake{}
			if err := worker(st, p).Process(ctx, refundID, false); err != nil {
				t.Fatal(err)
			}
			wantReq := []providers.RefundRequest{{IdempotencyKey: "gh_" + refundID + "_refund", Reference: "ch_ref", Amount: 500, Currency: "USD", Reason: "duplicate", RefundID: refundID}}
			if diff := cmp.Diff(wantReq, p.Refunds()); diff != "" {
				t.Errorf("provider calls (-want +got):\n%s", diff)
			}
			after := st.settled[0]
			if after.Status != refunds.StatusSucceeded || *after.ProviderReference != "re_"+wantReq[0].IdempotencyKey || st.settledTasks[0] != "refund:process:"+refundID {
				t.Errorf("settled %+v task %q", after, st.settledTasks[0])
			}
			want := []string{events.RefundSucceeded}
			if full {
				want = append(want, events.ChargeRefunded)
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("full=%v events (-want +got):\n%s", full, diff)
			}
		}
	})

	failures := []struct {
		name     string
		fn       func(context.Context, providers.RefundRequest) (providers.Result, error)
		final    bool
		retry    bool
		wantCode string
	}{
		{"declined", func(context.Context, providers.RefundRequest) (providers.Result, error) {
			return providers.Result{}, &providers.Decline{Code: "charge_disputed"}
		}, false, false, "charge_disputed"},
		{"down", func(context.Context, providers.RefundRequest) (providers.Result, error) {
			return providers.Result{}, providers.ErrUnavailable
		}, false, true, ""},
		{"down, final: nothing booked", func(context.Context, providers.RefundRequest) (providers.Result, error) {
			return providers.Result{}, fmt.Errorf("%w: %w", providers.ErrUnavailable, providers.ErrNothingBooked)
		}, true, false, "provider_unavailable"},
	}
	for _, c := range failures {
		t.Run(c.name, func(t *testing.T) {
			st := &fakeStore{RefundForWorkFn: forWork(pending, capturedCharge()),
				SettleRefundFn: func(_ context.Context, after refunds.Refund, _ string, eventsFor func(refunds.Refund, charges.Charge) (refunds.Settlement, error)) (bool, error) {
					st, err := eventsFor(after, capturedCharge())
					if len(st.Events) != 0 || st.Booking != nil {
						t.Errorf("a failed refund fires %d events and books %+v", len(st.Events), st.Booking)
					}
					return true, err
				}}
			err := worker(st, &providertest.Fake{RefundFn: c.fn}).Process(ctx, refundID, c.final)
			if c.retry {
				if !errors.Is(err, charges.ErrRetry) || len(st.settled) != 0 {
					t.Errorf("err = %v, settled %d, want ErrRetry and nothing settled", err, len(st.settled))
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(st.settled) != 1 || st.settled[0].Status != refunds.StatusFailed || *st.settled[0].FailureCode != c.wantCode {
				t.Errorf("settled %+v", st.settled)
			}
		})
	}

	t.Run("no reference: nothing reached the provider", func(t *testing.T) {
		noRef := capturedCharge()
		noRef.ProviderReference = nil
		st := &fakeStore{RefundForWorkFn: forWork(pending, noRef)}
		if err := worker(st, &providertest.Fake{}).Process(ctx, refundID, false); err != nil {
			t.Fatal(err)
		}
		if len(st.settled) != 1 || st.settled[0].Status != refunds.StatusFailed || *st.settled[0].FailureCode != "provider_unavailable" {
			t.Errorf("settled %+v", st.settled)
		}
	})

	t.Run("provider not configured on this worker: still pending, on the last attempt too", func(t *testing.T) {
		// An earlier attempt from a worker that had the provider may have
		// been booked: failing the refund would invite a second one.
		for _, final := range []bool{false, true} {
			st := &fakeStore{RefundForWorkFn: forWork(pending, capturedCharge())}
			err := worker(st, nil).Process(ctx, refundID, final)
			if err == nil || errors.Is(err, charges.ErrRetry) == final || len(st.settled) != 0 {
				t.Errorf("final %v: err %v, settled %+v; want an error (ErrRetry unless final) and nothing settled", final, err, st.settled)
			}
		}
	})

	t.Run("not pending: the task is dropped", func(t *testing.T) {
		for _, status := range []string{refunds.StatusSucceeded, refunds.StatusFailed} {
			r := pending
			r.Status = status
			st := &fakeStore{RefundForWorkFn: forWork(r, capturedCharge())}
			p := &providertest.Fake{}
			if err := worker(st, p).Process(ctx, refundID, false); err != nil {
				t.Fatal(err)
			}
			if len(p.Refunds()) != 0 || len(st.settled) != 0 || len(st.deleted) != 1 || st.deleted[0] != "refund:process:"+refundID {
				t.Errorf("%s: calls %d settled %d deleted %v", status, len(p.Refunds()), len(st.settled), st.deleted)
			}
		}
	})

	t.Run("unknown refund", func(t *testing.T) {
		if err := worker(&fakeStore{}, &providertest.Fake{}).Process(ctx, refundID, false); apperr.KindOf(err) != apperr.KindNotFound {
			t.Errorf("err = %v, want not found", err)
		}
	})
}

func TestGetAndList(t *testing.T) {
	st := &fakeStore{RefundByIDFn: func(context.Context, string, string) (refunds.Refund, error) {
		t.Error("the store was asked for a malformed id")
		return refunds.Refund{}, nil
	}}
	svc := refunds.NewService(st, &fakeQueue{}, time.Now, nil)
	for _, id := range []string{"", "nope", strings.ToUpper(chargeID)} {
		if _, err := svc.Get(context.Background(), "mer_a", id); apperr.KindOf(err) != apperr.KindNotFound {
			t.Errorf("Get(%q) = %v, want not found", id, err)
		}
	}
	if _, err := svc.List(context.Background(), "mer_a", "nope", listing.Params{Limit: 10}); apperr.CodeOf(err) != apperr.CodeParameterInvalid {
		t.Errorf("List with a bad charge = %v, want parameter_invalid", err)
	}
}

func TestRefundJSON(t *testing.T) {
	r := refunds.Refund{ID: "r", MerchantID: "mer_a", ChargeID: chargeID, Amount: 5, Currency: "USD", Status: refunds.StatusPending,
		ProviderReference: ptr("re_secret"), CreatedAt: testNow, UpdatedAt: testNow}
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	want := map[string]any{"id": "r", "object": "refund", "charge": chargeID, "amount": 5.0, "currency": "USD", "status": "pending",
		"reason": nil, "metadata": map[string]any{}, "failure_code": nil,
		"created_at": "2026-06-15T10:30:00.123Z", "updated_at": "2026-06-15T10:30:00.123Z"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("refund JSON (-want +got):\n%s", diff)
	}
}
