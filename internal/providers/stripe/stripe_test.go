package stripe_test

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/gatehouse-pay/gatehouse/internal/providers"
	"github.com/gatehouse-pay/gatehouse/internal/providers/stripe"
)

const secretKey = "sk_test_123gatehouse"

func rawCard() providers.Card {
	return providers.Card{Number: "4242424242424242", ExpMonth: 12, ExpYear: 2030, CVC: "123"}
}

func authorizeRequest(key string, capture bool, c providers.Card) providers.AuthorizeRequest {
	return providers.AuthorizeRequest{IdempotencyKey: key, Amount: 2000, Currency: "USD", Capture: capture, Card: c,
		Description: "Order 1042", Metadata: map[string]string{"order_id": "1042"}}
}

// Against stripe-mock, which validates every request against Stripe's
// OpenAPI spec: each operation succeeds and returns a reference.
func TestAgainstStripeMock(t *testing.T) {
	base := stripeMock(t)
	p := stripe.New(secretKey, base, &http.Client{Timeout: 10 * time.Second})
	ctx := context.Background()

	authorizations := []struct {
		name    string
		capture bool
		card    providers.Card
	}{
		{"raw card, capture", true, rawCard()},
		{"raw card, authorize only", false, rawCard()},
		{"pm_card_visa, capture", true, providers.Card{Token: "pm_card_visa"}},
		{"pm_card_visa, authorize only", false, providers.Card{Token: "pm_card_visa"}},
		{"tok_visa, capture", true, providers.Card{Token: "tok_visa"}},
		{"tok_visa, authorize only", false, providers.Card{Token: "tok_visa"}},
	}
	for _, tt := range authorizations {
		t.Run("authorize "+tt.name, func(t *testing.T) {
			res, err := p.Authorize(ctx, authorizeRequest("charge-"+tt.name, tt.capture, tt.card))
			if err != nil {
				t.Fatalf("Authorize: %v", err)
			}
			if !strings.HasPrefix(res.Reference, "pi_") {
				t.Errorf("reference = %q, want a PaymentIntent id", res.Reference)
			}
		})
	}

	auth, err := p.Authorize(ctx, authorizeRequest("charge-auth", false, rawCard()))
	if err != nil {
		t.Fatalf("Authorize: %v", err)
	}
	ops := []struct {
		name       string
		call       func() (providers.Result, error)
		wantPrefix string
	}{
		{"capture part", func() (providers.Result, error) {
			return p.Capture(ctx, providers.CaptureRequest{IdempotencyKey: "capture-1", Reference: auth.Reference, Amount: 1500})
		}, "pi_"},
		{"capture all", func() (providers.Result, error) {
			return p.Capture(ctx, providers.CaptureRequest{IdempotencyKey: "capture-2", Reference: auth.Reference})
		}, "pi_"},
		{"void", func() (providers.Result, error) {
			return p.Void(ctx, providers.VoidRequest{IdempotencyKey: "void-1", Reference: auth.Reference})
		}, "pi_"},
		{"refund", func() (providers.Result, error) {
			return p.Refund(ctx, providers.RefundRequest{IdempotencyKey: "refund-1", Reference: auth.Reference, Amount: 500,
				Currency: "USD", Reason: "requested_by_customer"})
		}, "re_"},
		{"refund without a reason", func() (providers.Result, error) {
			return p.Refund(ctx, providers.RefundRequest{IdempotencyKey: "refund-2", Reference: auth.Reference, Amount: 500, Currency: "USD"})
		}, "re_"},
	}
	for _, tt := range ops {
		t.Run(tt.name, func(t *testing.T) {
			res, err := tt.call()
			if err != nil {
				t.Fatalf("%s: %v", tt.name, err)
			}
			if !strings.HasPrefix(res.Reference, tt.wantPrefix) {
				t.Errorf("reference = %q, want prefix %q", res.Reference, tt.wantPrefix)
			}
		})
	}

	t.Run("unknown parameter values are invalid requests", func(t *testing.T) {
		_, err := p.Refund(ctx, providers.RefundRequest{IdempotencyKey: "refund-3", Reference: auth.Reference, Amount: 500, Reason: "because"})
		if d, ok := providers.AsDecline(err); !ok || d.Code != "invalid_request" {
			t.Errorf("err = %v, want decline invalid_request", err)
		}
	})
}

// request is what the fake Stripe saw of one request.
type request struct {
	Method, Path, IdempotencyKey, Authorization string
	Form                                        url.Values
}

// fakeStripe answers every request with respond and records what it saw.
type fakeStripe struct {
	*httptest.Server
	mu       sync.Mutex
	requests []request
}

func newFakeStripe(t *testing.T, respond http.HandlerFunc) *fakeStripe {
	t.Helper()
	f := &fakeStripe{}
	f.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		form, _ := url.ParseQuery(string(body))
		f.mu.Lock()
		f.requests = append(f.requests, request{r.Method, r.URL.Path, r.Header.Get("Idempotency-Key"), r.Header.Get("Authorization"), form})
		f.mu.Unlock()
		respond(w, r)
	}))
	t.Cleanup(f.Close)
	return f
}

func (f *fakeStripe) seen() []request {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]request(nil), f.requests...)
}

func answer(status int, body string, header ...string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		for i := 0; i+1 < len(header); i += 2 {
			w.Header().Set(header[i], header[i+1])
		}
		if body != "" && body[0] == '{' {
			w.Header().Set("Content-Type", "application/json")
		}
		w.Header().Set("Request-Id", "req_fake")
		w.WriteHeader(status)
		_, _ = io.WriteString(w, body)
	}
}

const (
	intentRequiresCapture = `{"id":"pi_fake","object":"payment_intent","status":"requires_capture","amount":2000}`
	intentSucceeded       = `{"id":"pi_fake","object":"payment_intent","status":"succeeded","amount":2000}`
)

// kind is what a test expects of an answer: "ok", "unavailable" or "decline:<code>".
func kind(t *testing.T, res providers.Result, err error) string {
	t.Helper()
	if err == nil {
		return "ok:" + res.Reference
	}
	if d, ok := providers.AsDecline(err); ok {
		if errors.Is(err, providers.ErrUnavailable) {
			t.Errorf("%v is both a decline and unavailable", err)
		}
		return "decline:" + d.Code
	}
	if errors.Is(err, providers.ErrUnavailable) {
		return "unavailable"
	}
	t.Errorf("error %v is neither a decline nor ErrUnavailable", err)
	return "other"
}

func TestErrorMapping(t *testing.T) {
	tests := []struct {
		name    string
		respond http.HandlerFunc
		want    string
	}{
		{"success", answer(200, intentSucceeded), "ok:pi_fake"},
		{"402 card_declined, generic", answer(402, `{"error":{"type":"card_error","code":"card_declined","decline_code":"generic_decline","message":"Your card was declined."}}`), "decline:card_declined"},
		{"402 card_declined, insufficient funds", answer(402, `{"error":{"type":"card_error","code":"card_declined","decline_code":"insufficient_funds","message":"Your card has insufficient funds."}}`), "decline:insufficient_funds"},
		{"402 expired_card", answer(402, `{"error":{"type":"card_error","code":"expired_card","message":"Your card has expired."}}`), "decline:expired_card"},
		{"402 incorrect_cvc", answer(402, `{"error":{"type":"card_error","code":"incorrect_cvc","message":"Your card's security code is incorrect."}}`), "decline:incorrect_cvc"},
		{"402 processing_error", answer(402, `{"error":{"type":"card_error","code":"processing_error","message":"An error occurred."}}`), "decline:processing_error"},
		{"400 invalid_request_error", answer(400, `{"error":{"type":"invalid_request_error","code":"parameter_invalid_integer","param":"amount","message":"Invalid integer"}}`), "decline:invalid_request"},
		{"404 resource_missing", answer(404, `{"error":{"type":"invalid_request_error","code":"resource_missing","message":"No such payment_intent"}}`), "decline:invalid_request"},
		{"400 idempotency_error", answer(400, `{"error":{"type":"idempotency_error","message":"Keys for idempotent requests can only be used with the same parameters"}}`), "decline:invalid_request"},
		{"500 api_error", answer(500, `{"error":{"type":"api_error","message":"Something went wrong on Stripe's end."}}`), "unavailable"},
		{"500 that asks not to retry", answer(500, `{"error":{"type":"api_error","message":"oops"}}`, "Stripe-Should-Retry", "false"), "unavailable"},
		{"api_error with another status", answer(400, `{"error":{"type":"api_error","message":"oops"}}`), "unavailable"},
		{"502 with an HTML page", answer(502, `<html>Bad Gateway</html>`), "unavailable"},
		{"503 with no body", answer(503, ``), "unavailable"},
		{"429 rate limited", answer(429, `{"error":{"type":"invalid_request_error","code":"rate_limit","message":"Too many requests"}}`), "unavailable"},
		{"429 lock timeout", answer(429, `{"error":{"type":"invalid_request_error","code":"lock_timeout","message":"lock timeout"}}`), "unavailable"},
		{"409 key in use", answer(409, `{"error":{"type":"invalid_request_error","code":"idempotency_key_in_use","message":"in use"}}`), "unavailable"},
		{"401 bad key", answer(401, `{"error":{"type":"invalid_request_error","message":"Invalid API Key provided: `+secretKey+`"}}`), "unavailable"},
		{"403 restricted key", answer(403, `{"error":{"type":"invalid_request_error","message":"The provided key does not have the required permissions"}}`), "unavailable"},
		{"200 requires_action naming no challenge page", answer(200, `{"id":"pi_fake","object":"payment_intent","status":"requires_action"}`), "decline:authentication_required"},
		{"200 requires_payment_method without a card error (stripe-mock's answer)", answer(200, `{"id":"pi_fake","object":"payment_intent","status":"requires_payment_method","last_payment_error":{"type":"idempotency_error"}}`), "ok:pi_fake"},
		{"200 with a last payment error", answer(200, `{"id":"pi_fake","object":"payment_intent","status":"requires_payment_method","last_payment_error":{"type":"card_error","code":"card_declined","decline_code":"insufficient_funds"}}`), "decline:insufficient_funds"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFakeStripe(t, tt.respond)
			p := stripe.New(secretKey, f.URL, &http.Client{Timeout: 5 * time.Second})
			res, err := p.Authorize(context.Background(), authorizeRequest("charge-1", true, providers.Card{Token: "pm_card_visa"}))
			if got := kind(t, res, err); got != tt.want {
				t.Errorf("Authorize = %q (%v), want %q", got, err, tt.want)
			}
			// stripe-go's own retries are off: every call is one request.
			if n := len(f.seen()); n != 1 {
				t.Errorf("requests = %d, want 1", n)
			}
			if err != nil && strings.Contains(err.Error(), secretKey) {
				t.Errorf("error %q carries the secret key", err)
			}
		})
	}
}

func TestTransportFailuresAreUnavailable(t *testing.T) {
	// A server that accepts the request and never answers.
	hang := make(chan struct{})
	silent := newFakeStripe(t, func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-hang:
		}
	})
	t.Cleanup(func() { close(hang) }) // runs before the server's Close
	// A port nobody listens on.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := "http://" + l.Addr().String()
	l.Close()

	tests := []struct {
		name      string
		base      string
		client    *http.Client
		ctx       func() (context.Context, context.CancelFunc)
		wantCause error
	}{
		{"client timeout", silent.URL, &http.Client{Timeout: 100 * time.Millisecond}, nil, nil},
		{"context deadline", silent.URL, &http.Client{Timeout: time.Minute},
			func() (context.Context, context.CancelFunc) {
				return context.WithTimeout(context.Background(), 100*time.Millisecond)
			}, context.DeadlineExceeded},
		{"connection refused", closed, &http.Client{Timeout: 5 * time.Second}, nil, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.Background(), context.CancelFunc(func() {})
			if tt.ctx != nil {
				ctx, cancel = tt.ctx()
			}
			defer cancel()
			p := stripe.New(secretKey, tt.base, tt.client)
			before := len(silent.seen())
			start := time.Now()
			_, err := p.Authorize(ctx, authorizeRequest("charge-1", true, providers.Card{Token: "pm_card_visa"}))
			// stripe-go must neither retry (a second request) nor wait past
			// the timeout; the silent server holds a request until the test
			// ends, so ignoring the timeout shows as a hang far past this
			// bound, which leaves a loaded machine plenty of room.
			if tt.base == silent.URL {
				// The server records a request when its handler runs, which
				// a loaded machine may delay past the client's timeout.
				for deadline := time.Now().Add(10 * time.Second); len(silent.seen()) == before && time.Now().Before(deadline); {
					time.Sleep(10 * time.Millisecond)
				}
				if n := len(silent.seen()) - before; n != 1 {
					t.Errorf("%d requests reached the provider, want 1: stripe-go retried", n)
				}
			}
			if elapsed := time.Since(start); elapsed > 20*time.Second {
				t.Errorf("took %v: stripe-go ignored the timeout", elapsed)
			}
			if got := kind(t, providers.Result{}, err); got != "unavailable" {
				t.Errorf("err = %v, want unavailable", err)
			}
			if tt.wantCause != nil && !errors.Is(err, tt.wantCause) {
				t.Errorf("err = %v, want it to wrap %v", err, tt.wantCause)
			}
		})
	}
}

func TestEveryOperationMapsErrors(t *testing.T) {
	ops := map[string]func(*stripe.Provider) (providers.Result, error){
		"capture": func(p *stripe.Provider) (providers.Result, error) {
			return p.Capture(context.Background(), providers.CaptureRequest{IdempotencyKey: "k", Reference: "pi_1"})
		},
		"void": func(p *stripe.Provider) (providers.Result, error) {
			return p.Void(context.Background(), providers.VoidRequest{IdempotencyKey: "k", Reference: "pi_1"})
		},
		"refund": func(p *stripe.Provider) (providers.Result, error) {
			return p.Refund(context.Background(), providers.RefundRequest{IdempotencyKey: "k", Reference: "pi_1", Amount: 100})
		},
		"authorize with a raw card": func(p *stripe.Provider) (providers.Result, error) {
			return p.Authorize(context.Background(), authorizeRequest("k", true, rawCard()))
		},
	}
	answers := []struct {
		name    string
		respond http.HandlerFunc
		want    string
	}{
		{"500", answer(500, `{"error":{"type":"api_error","message":"oops"}}`), "unavailable"},
		{"400", answer(400, `{"error":{"type":"invalid_request_error","message":"bad"}}`), "decline:invalid_request"},
		{"402", answer(402, `{"error":{"type":"card_error","code":"card_declined","message":"declined"}}`), "decline:card_declined"},
	}
	for name, op := range ops {
		for _, a := range answers {
			t.Run(name+" "+a.name, func(t *testing.T) {
				f := newFakeStripe(t, a.respond)
				res, err := op(stripe.New(secretKey, f.URL, nil))
				if got := kind(t, res, err); got != a.want {
					t.Errorf("got %q (%v), want %q", got, err, a.want)
				}
				if n := len(f.seen()); n != 1 {
					t.Errorf("requests = %d, want 1", n)
				}
				if err != nil && strings.Contains(err.Error(), "4242424242424242") {
					t.Errorf("error %q carries the card number", err)
				}
			})
		}
	}
}

// Whatever Stripe's messages quote, no error carries the card's number or CVC.
func TestErrorsNeverQuoteCardData(t *testing.T) {
	quote := `Invalid card: 4242424242424242 / 123`
	for _, a := range []http.HandlerFunc{
		answer(400, `{"error":{"type":"invalid_request_error","message":"`+quote+`"}}`),
		answer(402, `{"error":{"type":"card_error","code":"incorrect_number","message":"`+quote+`"}}`),
		answer(500, `{"error":{"type":"api_error","message":"`+quote+`"}}`),
		answer(502, quote),
	} {
		f := newFakeStripe(t, a)
		_, err := stripe.New(secretKey, f.URL, nil).Authorize(context.Background(), authorizeRequest("k", true, rawCard()))
		if err == nil {
			t.Fatal("want an error")
		}
		text := err.Error()
		if d, ok := providers.AsDecline(err); ok {
			text += " " + d.Message
		}
		if strings.Contains(text, "4242424242424242") || strings.Contains(text, "123") {
			t.Errorf("error %q quotes card data", text)
		}
	}
}

// The requests the adapter sends, field by field.
func TestRequestShapes(t *testing.T) {
	respond := func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.URL.Path == "/v1/payment_methods":
			answer(200, `{"id":"pm_fake","object":"payment_method"}`)(w, r)
		case r.URL.Path == "/v1/refunds":
			answer(200, `{"id":"re_fake","object":"refund","status":"succeeded"}`)(w, r)
		default:
			answer(200, intentRequiresCapture)(w, r)
		}
	}
	tests := []struct {
		name    string
		call    func(*stripe.Provider) (providers.Result, error)
		wantRef string
		want    []request
	}{
		{"authorize a raw card, capture later",
			func(p *stripe.Provider) (providers.Result, error) {
				return p.Authorize(context.Background(), authorizeRequest("charge-1", false, rawCard()))
			}, "pi_fake",
			[]request{
				{Method: "POST", Path: "/v1/payment_methods", Form: url.Values{
					"type": {"card"}, "card[number]": {"4242424242424242"}, "card[exp_month]": {"12"},
					"card[exp_year]": {"2030"}, "card[cvc]": {"123"}}},
				{Method: "POST", Path: "/v1/payment_intents", IdempotencyKey: "charge-1", Form: url.Values{
					"amount": {"2000"}, "currency": {"usd"}, "confirm": {"true"}, "capture_method": {"manual"},
					"payment_method": {"pm_fake"}, "payment_method_types[0]": {"card"},
					"description": {"Order 1042"}, "metadata[order_id]": {"1042"}}},
			}},
		{"authorize a payment method, capture now",
			func(p *stripe.Provider) (providers.Result, error) {
				r := authorizeRequest("charge-2", true, providers.Card{Token: "pm_card_visa"})
				r.Description, r.Metadata = "", nil
				return p.Authorize(context.Background(), r)
			}, "pi_fake",
			[]request{
				{Method: "POST", Path: "/v1/payment_intents", IdempotencyKey: "charge-2", Form: url.Values{
					"amount": {"2000"}, "currency": {"usd"}, "confirm": {"true"}, "expand[0]": {"latest_charge.balance_transaction"},
					"payment_method": {"pm_card_visa"}, "payment_method_types[0]": {"card"}}},
			}},
		{"authorize a tok_ token",
			func(p *stripe.Provider) (providers.Result, error) {
				r := authorizeRequest("charge-3", true, providers.Card{Token: "tok_visa"})
				r.Description, r.Metadata = "", nil
				return p.Authorize(context.Background(), r)
			}, "pi_fake",
			[]request{
				{Method: "POST", Path: "/v1/payment_methods", Form: url.Values{"type": {"card"}, "card[token]": {"tok_visa"}}},
				{Method: "POST", Path: "/v1/payment_intents", IdempotencyKey: "charge-3", Form: url.Values{
					"amount": {"2000"}, "currency": {"usd"}, "confirm": {"true"}, "expand[0]": {"latest_charge.balance_transaction"},
					"payment_method": {"pm_fake"}, "payment_method_types[0]": {"card"}}},
			}},
		{"capture part",
			func(p *stripe.Provider) (providers.Result, error) {
				return p.Capture(context.Background(), providers.CaptureRequest{IdempotencyKey: "cap-1", Reference: "pi_fake", Amount: 1500})
			}, "pi_fake",
			[]request{{Method: "POST", Path: "/v1/payment_intents/pi_fake/capture", IdempotencyKey: "cap-1",
				Form: url.Values{"amount_to_capture": {"1500"}, "expand[0]": {"latest_charge.balance_transaction"}}}}},
		{"capture all",
			func(p *stripe.Provider) (providers.Result, error) {
				return p.Capture(context.Background(), providers.CaptureRequest{IdempotencyKey: "cap-2", Reference: "pi_fake"})
			}, "pi_fake",
			[]request{{Method: "POST", Path: "/v1/payment_intents/pi_fake/capture", IdempotencyKey: "cap-2",
				Form: url.Values{"expand[0]": {"latest_charge.balance_transaction"}}}}},
		{"void",
			func(p *stripe.Provider) (providers.Result, error) {
				return p.Void(context.Background(), providers.VoidRequest{IdempotencyKey: "void-1", Reference: "pi_fake"})
			}, "pi_fake",
			[]request{{Method: "POST", Path: "/v1/payment_intents/pi_fake/cancel", IdempotencyKey: "void-1", Form: url.Values{}}}},
		{"refund",
			func(p *stripe.Provider) (providers.Result, error) {
				return p.Refund(context.Background(), providers.RefundRequest{IdempotencyKey: "ref-1", Reference: "pi_fake",
					Amount: 500, Currency: "USD", Reason: "duplicate"})
			}, "re_fake",
			[]request{{Method: "POST", Path: "/v1/refunds", IdempotencyKey: "ref-1",
				Form: url.Values{"payment_intent": {"pi_fake"}, "amount": {"500"}, "reason": {"duplicate"}}}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFakeStripe(t, respond)
			res, err := tt.call(stripe.New(secretKey, f.URL+"/", nil))
			if err != nil {
				t.Fatal(err)
			}
			if res.Reference != tt.wantRef {
				t.Errorf("reference = %q, want %q", res.Reference, tt.wantRef)
			}
			got := f.seen()
			for i := range got {
				if got[i].Authorization != "Bearer "+secretKey {
					t.Errorf("request %d: Authorization = %q", i, got[i].Authorization)
				}
				got[i].Authorization = ""
				if got[i].Path == "/v1/payment_methods" {
					// Derived from the charge's key: stable across retries, never the key itself.
					if k := got[i].IdempotencyKey; k == "" || strings.HasPrefix(k, "charge-") {
						t.Errorf("payment method idempotency key = %q", k)
					}
					got[i].IdempotencyKey = ""
				}
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("requests (-want +got):\n%s", diff)
			}
		})
	}
}

// A retried authorization sends the same idempotency keys, the derived one
// for the payment method included, so Stripe replays instead of charging again.
func TestRetrySendsTheSameKeys(t *testing.T) {
	f := newFakeStripe(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/payment_methods" {
			answer(200, `{"id":"pm_fake","object":"payment_method"}`)(w, r)
			return
		}
		answer(500, `{"error":{"type":"api_error","message":"oops"}}`)(w, r)
	})
	p := stripe.New(secretKey, f.URL, nil)
	for range 2 {
		if _, err := p.Authorize(context.Background(), authorizeRequest("charge-1", true, rawCard())); !errors.Is(err, providers.ErrUnavailable) {
			t.Fatalf("err = %v, want unavailable", err)
		}
	}
	var keys []string
	for _, r := range f.seen() {
		keys = append(keys, r.Path+" "+r.IdempotencyKey)
	}
	if len(keys) != 4 || keys[0] != keys[2] || keys[1] != keys[3] || keys[0] == keys[1] {
		t.Errorf("keys = %q, want the same pair twice", keys)
	}
	// A longer key still fits Stripe's 255-character limit once derived.
	long := strings.Repeat("k", 255)
	if _, err := p.Authorize(context.Background(), authorizeRequest(long, true, rawCard())); !errors.Is(err, providers.ErrUnavailable) {
		t.Fatalf("err = %v", err)
	}
}

func TestBadIdempotencyKeysAreRefusedWithoutARequest(t *testing.T) {
	f := newFakeStripe(t, answer(200, intentSucceeded))
	p := stripe.New(secretKey, f.URL, nil)
	for _, key := range []string{"", "   ", strings.Repeat("k", 256)} {
		_, err := p.Authorize(context.Background(), authorizeRequest(key, true, providers.Card{Token: "pm_card_visa"}))
		if d, ok := providers.AsDecline(err); !ok || d.Code != "invalid_request" {
			t.Errorf("key of %d characters: err = %v, want decline invalid_request", len(key), err)
		}
		_, err = p.Refund(context.Background(), providers.RefundRequest{IdempotencyKey: key, Reference: "pi_1", Amount: 1})
		if d, ok := providers.AsDecline(err); !ok || d.Code != "invalid_request" {
			t.Errorf("refund, key of %d characters: err = %v, want decline invalid_request", len(key), err)
		}
	}
	if n := len(f.seen()); n != 0 {
		t.Errorf("requests = %d, want 0", n)
	}
}

func TestName(t *testing.T) {
	if got := stripe.New(secretKey, "", nil).Name(); got != "stripe" {
		t.Errorf("Name() = %q", got)
	}
}
