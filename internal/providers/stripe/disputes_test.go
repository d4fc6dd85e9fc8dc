package stripe_test

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/gatehouse-pay/gatehouse/internal/disputes"
	"github.com/gatehouse-pay/gatehouse/internal/providers"
	"github.com/gatehouse-pay/gatehouse/internal/providers/stripe"
)

// recorder is a transport that records each request's method, path,
// Idempotency-Key and form before passing it on.
type recorder struct {
	mu       sync.Mutex
	requests []request
}

func (r *recorder) RoundTrip(req *http.Request) (*http.Response, error) {
	var body []byte
	if req.Body != nil {
		var err error
		if body, err = io.ReadAll(req.Body); err != nil {
			return nil, err
		}
		req.Body.Close()
		req = req.Clone(req.Context())
		req.Body = io.NopCloser(bytes.NewReader(body))
	}
	form, _ := url.ParseQuery(string(body))
	r.mu.Lock()
	r.requests = append(r.requests, request{Method: req.Method, Path: req.URL.Path, IdempotencyKey: req.Header.Get("Idempotency-Key"), Form: form})
	r.mu.Unlock()
	return http.DefaultTransport.RoundTrip(req)
}

func (r *recorder) last(t *testing.T) request {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.requests) == 0 {
		t.Fatal("no request was sent")
	}
	return r.requests[len(r.requests)-1]
}

// fullEvidence sets every evidence field the gateway takes to a value of
// its kind, naming the field.
func fullEvidence() map[string]string {
	ev := map[string]string{}
	for _, name := range disputes.FieldNames() {
		ev[name] = "the " + name
	}
	ev["customer_email_address"] = "jane@example.com"
	ev["customer_purchase_ip"] = "203.0.113.7"
	ev["service_date"] = "2026-01-02"
	ev["shipping_date"] = "2026-01-03"
	return ev
}

// fileOnly are the evidence fields Stripe takes only as uploaded files.
var fileOnly = map[string]string{
	"customer_communication": "Customer communication",
	"receipt":                "Receipt",
	"service_documentation":  "Service documentation",
	"shipping_documentation": "Shipping documentation",
}

// wantEvidenceForm is the form SubmitDisputeEvidence sends for ev (fields
// of the gateway only).
func wantEvidenceForm(ev map[string]string) url.Values {
	want := url.Values{"submit": {"true"}}
	var sections []string
	if v := ev["uncategorized_text"]; v != "" {
		sections = append(sections, v)
	}
	for _, name := range disputes.FieldNames() {
		v := ev[name]
		switch {
		case v == "" || name == "uncategorized_text":
		case fileOnly[name] != "":
			sections = append(sections, fileOnly[name]+":\n"+v)
		default:
			want.Set("evidence["+name+"]", v)
		}
	}
	if len(sections) > 0 {
		want.Set("evidence[uncategorized_text]", strings.Join(sections, "\n\n"))
	}
	return want
}

// Against stripe-mock: the answers to a dispute and the read of a charge
// are requests Stripe takes. stripe-mock checks the parameters it knows
// against Stripe's OpenAPI description but lets unknown evidence keys and
// over-long values through, so the form each request carried is compared
// field by field.
func TestDisputesAgainstStripeMock(t *testing.T) {
	rec := &recorder{}
	p := stripe.New(secretKey, stripeMock(t), &http.Client{Transport: rec, Timeout: 10 * time.Second})
	ctx := context.Background()

	t.Run("submit every field", func(t *testing.T) {
		ev := fullEvidence()
		if err := p.SubmitDisputeEvidence(ctx, "dp_1Gatehouse", ev); err != nil {
			t.Fatalf("SubmitDisputeEvidence: %v", err)
		}
		got := rec.last(t)
		if got.Method != http.MethodPost || got.Path != "/v1/disputes/dp_1Gatehouse" {
			t.Errorf("request %s %s, want POST /v1/disputes/dp_1Gatehouse", got.Method, got.Path)
		}
		if diff := cmp.Diff(wantEvidenceForm(ev), got.Form); diff != "" {
			t.Errorf("form (-want +got):\n%s", diff)
		}
		if got.IdempotencyKey == "" {
			t.Error("no Idempotency-Key")
		}
	})

	t.Run("submit some fields, unknown ones never sent", func(t *testing.T) {
		ev := map[string]string{"uncategorized_text": disputes.WinningEvidence, "customer_name": "Jane Doe",
			"customer_signature": "file_123", "uncategorized_file": "file_456", "not_a_field": "x", "product_description": ""}
		if err := p.SubmitDisputeEvidence(ctx, "dp_2Gatehouse", ev); err != nil {
			t.Fatalf("SubmitDisputeEvidence: %v", err)
		}
		want := url.Values{"submit": {"true"}, "evidence[uncategorized_text]": {disputes.WinningEvidence},
			"evidence[customer_name]": {"Jane Doe"}}
		if diff := cmp.Diff(want, rec.last(t).Form); diff != "" {
			t.Errorf("form (-want +got):\n%s", diff)
		}
	})

	t.Run("file-only fields go into uncategorized_text", func(t *testing.T) {
		ev := map[string]string{"receipt": "Order 1042, paid 2026-01-02", "shipping_documentation": "Label 1Z999"}
		if err := p.SubmitDisputeEvidence(ctx, "dp_3Gatehouse", ev); err != nil {
			t.Fatalf("SubmitDisputeEvidence: %v", err)
		}
		want := url.Values{"submit": {"true"},
			"evidence[uncategorized_text]": {"Receipt:\nOrder 1042, paid 2026-01-02\n\nShipping documentation:\nLabel 1Z999"}}
		if diff := cmp.Diff(want, rec.last(t).Form); diff != "" {
			t.Errorf("form (-want +got):\n%s", diff)
		}
	})

	t.Run("accept", func(t *testing.T) {
		if err := p.AcceptDispute(ctx, "dp_1Gatehouse"); err != nil {
			t.Fatalf("AcceptDispute: %v", err)
		}
		got := rec.last(t)
		if got.Method != http.MethodPost || got.Path != "/v1/disputes/dp_1Gatehouse/close" || len(got.Form) != 0 {
			t.Errorf("request %s %s %v, want POST /v1/disputes/dp_1Gatehouse/close with no fields", got.Method, got.Path, got.Form)
		}
		if got.IdempotencyKey == "" {
			t.Error("no Idempotency-Key")
		}
	})

	t.Run("payment of a charge", func(t *testing.T) {
		ref, err := p.PaymentOfCharge(ctx, "ch_1Gatehouse")
		if err != nil {
			t.Fatalf("PaymentOfCharge: %v", err)
		}
		// stripe-mock's charge has no PaymentIntent: the charge's own id.
		if !strings.HasPrefix(ref, "ch_") && !strings.HasPrefix(ref, "pi_") {
			t.Errorf("reference %q, want the charge's PaymentIntent or its own id", ref)
		}
		got := rec.last(t)
		if got.Method != http.MethodGet || got.Path != "/v1/charges/ch_1Gatehouse" {
			t.Errorf("request %s %s, want GET /v1/charges/ch_1Gatehouse", got.Method, got.Path)
		}
	})
}

// A retried answer is the same request: the same Idempotency-Key, one per
// dispute and answer.
func TestDisputeAnswersKeys(t *testing.T) {
	f := newFakeStripe(t, answer(200, `{"id":"dp_1","object":"dispute","status":"under_review"}`))
	p := stripe.New(secretKey, f.URL, nil)
	ctx := context.Background()
	for range 2 {
		if err := p.SubmitDisputeEvidence(ctx, "dp_1", map[string]string{"uncategorized_text": "x"}); err != nil {
			t.Fatal(err)
		}
		if err := p.AcceptDispute(ctx, "dp_1"); err != nil {
			t.Fatal(err)
		}
	}
	if err := p.AcceptDispute(ctx, "dp_2"); err != nil {
		t.Fatal(err)
	}
	seen := f.seen()
	keys := []string{seen[0].IdempotencyKey, seen[1].IdempotencyKey, seen[4].IdempotencyKey}
	if seen[2].IdempotencyKey != keys[0] || seen[3].IdempotencyKey != keys[1] {
		t.Errorf("retried answers carry other keys: %q", seen)
	}
	if keys[0] == "" || keys[0] == keys[1] || keys[1] == keys[2] {
		t.Errorf("keys %q: want one per dispute and answer", keys)
	}
}

// PaymentOfCharge reads the charge's PaymentIntent, an id or expanded, and
// names the charge itself when it has none.
func TestPaymentOfCharge(t *testing.T) {
	for _, c := range []struct{ body, want string }{
		{`{"id":"ch_1","object":"charge","payment_intent":"pi_1"}`, "pi_1"},
		{`{"id":"ch_1","object":"charge","payment_intent":{"id":"pi_1","object":"payment_intent"}}`, "pi_1"},
		{`{"id":"ch_1","object":"charge","payment_intent":null}`, "ch_1"},
	} {
		f := newFakeStripe(t, answer(200, c.body))
		got, err := stripe.New(secretKey, f.URL, nil).PaymentOfCharge(context.Background(), "ch_1")
		if err != nil || got != c.want {
			t.Errorf("%s: got %q, %v; want %q", c.body, got, err, c.want)
		}
	}
}

// The dispute calls sort Stripe's answers like the adapter's other calls:
// Stripe's refusals are declines invalid_request, outages
// ErrUnavailable. A call without a reference is refused before any request.
func TestDisputeCallsMapErrors(t *testing.T) {
	ops := map[string]func(*stripe.Provider, string) error{
		"submit": func(p *stripe.Provider, ref string) error {
			return p.SubmitDisputeEvidence(context.Background(), ref, map[string]string{"uncategorized_text": "x"})
		},
		"accept": func(p *stripe.Provider, ref string) error { return p.AcceptDispute(context.Background(), ref) },
		"payment of charge": func(p *stripe.Provider, ref string) error {
			_, err := p.PaymentOfCharge(context.Background(), ref)
			return err
		},
	}
	answers := []struct {
		name    string
		respond http.HandlerFunc
		want    string
	}{
		{"400 invalid_request_error", answer(400, `{"error":{"type":"invalid_request_error","message":"This dispute is already closed"}}`), "decline:invalid_request"},
		{"404 resource_missing", answer(404, `{"error":{"type":"invalid_request_error","code":"resource_missing","message":"No such dispute"}}`), "decline:invalid_request"},
		{"500 api_error", answer(500, `{"error":{"type":"api_error","message":"oops"}}`), "unavailable"},
		{"429", answer(429, `{"error":{"type":"invalid_request_error","code":"rate_limit","message":"slow down"}}`), "unavailable"},
		{"401", answer(401, `{"error":{"type":"invalid_request_error","message":"Invalid API Key provided: `+secretKey+`"}}`), "unavailable"},
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := "http://" + l.Addr().String()
	l.Close()
	for name, op := range ops {
		for _, a := range answers {
			t.Run(name+" "+a.name, func(t *testing.T) {
				f := newFakeStripe(t, a.respond)
				err := op(stripe.New(secretKey, f.URL, nil), "dp_1")
				if got := kind(t, providers.Result{}, err); got != a.want {
					t.Errorf("got %q (%v), want %q", got, err, a.want)
				}
				if n := len(f.seen()); n != 1 {
					t.Errorf("requests = %d, want 1", n)
				}
				if err != nil && strings.Contains(err.Error(), secretKey) {
					t.Errorf("error %q carries the secret key", err)
				}
			})
		}
		t.Run(name+" connection refused", func(t *testing.T) {
			err := op(stripe.New(secretKey, closed, &http.Client{Timeout: 5 * time.Second}), "dp_1")
			if got := kind(t, providers.Result{}, err); got != "unavailable" {
				t.Errorf("got %q (%v), want unavailable", got, err)
			}
		})
		t.Run(name+" no reference", func(t *testing.T) {
			f := newFakeStripe(t, answer(200, `{}`))
			err := op(stripe.New(secretKey, f.URL, nil), " ")
			if got := kind(t, providers.Result{}, err); got != "decline:invalid_request" {
				t.Errorf("got %q (%v), want decline:invalid_request", got, err)
			}
			if n := len(f.seen()); n != 0 {
				t.Errorf("requests = %d, want none", n)
			}
		})
	}
}
