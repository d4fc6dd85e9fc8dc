package stripe_test

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/gatehouse-pay/gatehouse/internal/providers"
	"github.com/gatehouse-pay/gatehouse/internal/providers/stripe"
)

// A refund carries the gateway's refund id in its metadata, and Stripe's
// pending and requires_action refunds are pending results, not successes.
func TestRefundMetadataAndPending(t *testing.T) {
	for _, c := range []struct {
		status  string
		pending bool
	}{{"succeeded", false}, {"pending", true}, {"requires_action", true}} {
		f := newFakeStripe(t, answer(200, `{"id":"re_1","object":"refund","status":"`+c.status+`","amount":500}`))
		p := stripe.New(secretKey, f.URL, nil)
		res, err := p.Refund(context.Background(), providers.RefundRequest{IdempotencyKey: "gh_r_refund", Reference: "pi_1", Amount: 500, RefundID: "r-1"})
		if err != nil {
			t.Fatalf("%s: %v", c.status, err)
		}
		if res.Reference != "re_1" || res.Pending != c.pending {
			t.Errorf("%s: result %+v, want re_1 pending=%v", c.status, res, c.pending)
		}
		if got := f.seen()[0].Form.Get("metadata[" + stripe.RefundMetadataKey + "]"); got != "r-1" {
			t.Errorf("metadata %s = %q, want r-1", stripe.RefundMetadataKey, got)
		}
	}
}

// A capture that leaves the PaymentIntent processing is a pending result.
func TestCaptureProcessingIsPending(t *testing.T) {
	f := newFakeStripe(t, answer(200, `{"id":"pi_1","object":"payment_intent","status":"processing","amount":2000}`))
	res, err := stripe.New(secretKey, f.URL, nil).Capture(context.Background(), providers.CaptureRequest{IdempotencyKey: "k", Reference: "pi_1"})
	if err != nil || !res.Pending {
		t.Errorf("result %+v, err %v; want pending", res, err)
	}
}

// An authorization that leaves the PaymentIntent processing is a pending
// result with the PaymentIntent's id; a finished one is not pending.
func TestAuthorizeProcessingIsPending(t *testing.T) {
	for status, pending := range map[string]bool{"processing": true, "succeeded": false, "requires_capture": false} {
		f := newFakeStripe(t, func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/v1/payment_methods" {
				answer(200, `{"id":"pm_1","object":"payment_method"}`)(w, r)
				return
			}
			answer(200, `{"id":"pi_1","object":"payment_intent","status":"`+status+`","amount":2000}`)(w, r)
		})
		res, err := stripe.New(secretKey, f.URL, nil).Authorize(context.Background(), authorizeRequest("gh_c_authorize", true, rawCard()))
		if err != nil || res.Reference != "pi_1" || res.Pending != pending {
			t.Errorf("%s: result %+v, err %v; want pi_1, pending %v", status, res, err, pending)
		}
	}
}

// LookupRefund finds the refund by its Stripe id when known, else by the
// gateway's refund id among the PaymentIntent's refunds (across pages);
// none is ErrNothingBooked and not ErrUnavailable.
func TestLookupRefund(t *testing.T) {
	ctx := context.Background()
	list := func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.URL.Path == "/v1/refunds/re_known":
			answer(200, `{"id":"re_known","object":"refund","status":"pending"}`)(w, r)
		case r.URL.Query().Get("starting_after") == "":
			answer(200, `{"object":"list","has_more":true,"url":"/v1/refunds","data":[
				{"id":"re_a","object":"refund","status":"succeeded","metadata":{"gatehouse_refund_id":"other"}}]}`)(w, r)
		default:
			answer(200, `{"object":"list","has_more":false,"url":"/v1/refunds","data":[
				{"id":"re_b","object":"refund","status":"succeeded","metadata":{"gatehouse_refund_id":"mine"}},
				{"id":"re_c","object":"refund","status":"failed","failure_reason":"expired_or_canceled_card","metadata":{"gatehouse_refund_id":"failed"}}]}`)(w, r)
		}
	}
	f := newFakeStripe(t, list)
	p := stripe.New(secretKey, f.URL, &http.Client{Timeout: 5 * time.Second})

	res, err := p.LookupRefund(ctx, providers.RefundLookup{Reference: "pi_1", RefundID: "mine", IdempotencyKey: "gh_mine_refund"})
	if err != nil || res.Reference != "re_b" || res.Pending {
		t.Errorf("by metadata: %+v %v, want re_b", res, err)
	}
	if q := f.seen()[0]; q.Method != http.MethodGet || q.Path != "/v1/refunds" {
		t.Errorf("first request %s %s, want GET /v1/refunds", q.Method, q.Path)
	}
	if _, err := p.LookupRefund(ctx, providers.RefundLookup{Reference: "pi_1", RefundID: "failed"}); err == nil {
		t.Error("a failed refund is not a success")
	} else if d, ok := providers.AsDecline(err); !ok || d.Code != "expired_or_canceled_card" {
		t.Errorf("failed refund: %v, want a decline expired_or_canceled_card", err)
	}
	_, err = p.LookupRefund(ctx, providers.RefundLookup{Reference: "pi_1", RefundID: "absent"})
	if !providers.NothingBooked(err) || errors.Is(err, providers.ErrUnavailable) {
		t.Errorf("absent: %v, want ErrNothingBooked and not ErrUnavailable", err)
	}
	res, err = p.LookupRefund(ctx, providers.RefundLookup{Reference: "pi_1", RefundID: "mine", ProviderRefund: "re_known"})
	if err != nil || res.Reference != "re_known" || !res.Pending {
		t.Errorf("by id: %+v %v, want re_known pending", res, err)
	}
	for _, q := range f.seen() {
		if q.Method != http.MethodGet {
			t.Errorf("a lookup sent %s %s", q.Method, q.Path)
		}
	}
}

// LookupPayment reads the PaymentIntent's status and amount_received.
func TestLookupPayment(t *testing.T) {
	for _, c := range []struct {
		body string
		want providers.Payment
		err  bool
	}{
		{`{"id":"pi_1","object":"payment_intent","status":"succeeded","amount":2000,"amount_received":1500}`, providers.Payment{Reference: "pi_1", Status: providers.PaymentCaptured, Captured: 1500}, false},
		{`{"id":"pi_1","object":"payment_intent","status":"processing","amount":2000}`, providers.Payment{Reference: "pi_1", Status: providers.PaymentProcessing}, false},
		{`{"id":"pi_1","object":"payment_intent","status":"requires_capture","amount":2000}`, providers.Payment{Reference: "pi_1", Status: providers.PaymentAuthorized}, false},
		{`{"id":"pi_1","object":"payment_intent","status":"canceled","amount":2000}`, providers.Payment{Reference: "pi_1", Status: providers.PaymentCanceled}, false},
		{`{"id":"pi_1","object":"payment_intent","status":"requires_payment_method","amount":2000,
			"last_payment_error":{"type":"card_error","code":"card_declined","decline_code":"insufficient_funds","message":"Your card has insufficient funds."}}`,
			providers.Payment{Reference: "pi_1", Status: providers.PaymentFailed, Failure: &providers.Decline{Code: "insufficient_funds", Message: "Your card has insufficient funds."}}, false},
		{`{"id":"pi_1","object":"payment_intent","status":"requires_payment_method","amount":2000}`, providers.Payment{Reference: "pi_1", Status: providers.PaymentFailed}, false},
		{`{"id":"pi_1","object":"payment_intent","status":"requires_action","amount":2000}`, providers.Payment{Reference: "pi_1", Status: providers.PaymentRequiresAction}, false},
		{`{"id":"pi_1","object":"payment_intent","status":"requires_confirmation","amount":2000}`, providers.Payment{}, true},
	} {
		f := newFakeStripe(t, answer(200, c.body))
		got, err := stripe.New(secretKey, f.URL, nil).LookupPayment(context.Background(), "pi_1")
		if (err != nil) != c.err {
			t.Errorf("%s: err %v, want error %v", c.body, err, c.err)
		}
		if diff := cmp.Diff(c.want, got); diff != "" {
			t.Errorf("%s (-want +got):\n%s", c.body, diff)
		}
		if q := f.seen()[0]; q.Method != http.MethodGet || q.Path != "/v1/payment_intents/pi_1" {
			t.Errorf("request %s %s", q.Method, q.Path)
		}
	}
}

// Against stripe-mock the lookups are well-formed requests Stripe accepts.
func TestLookupsAgainstStripeMock(t *testing.T) {
	p := stripe.New(secretKey, stripeMock(t), &http.Client{Timeout: 10 * time.Second})
	ctx := context.Background()
	if _, err := p.LookupPayment(ctx, "pi_123"); err != nil && !errors.Is(err, providers.ErrUnavailable) {
		t.Errorf("LookupPayment: %v", err)
	}
	_, err := p.LookupRefund(ctx, providers.RefundLookup{Reference: "pi_123", RefundID: "r-unknown"})
	if _, declined := providers.AsDecline(err); declined {
		t.Errorf("LookupRefund: stripe-mock refused the request: %v", err)
	}
}
