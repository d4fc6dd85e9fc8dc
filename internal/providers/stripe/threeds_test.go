package stripe_test

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/gatehouse-pay/gatehouse/internal/providers"
	"github.com/gatehouse-pay/gatehouse/internal/providers/stripe"
)

// The recorded PaymentIntent of testdata/ and the challenge page its
// requires_action answer names.
const (
	recordedIntent    = "pi_3QxGh2LkdIwHu7ix0T2sY1aB"
	recordedChallenge = "https://hooks.stripe.com/3d_secure_2/hosted?merchant=acct_1QwFa9LkdIwHu7ix&payment_intent=pi_3QxGh2LkdIwHu7ix0T2sY1aB" +
		"&payment_intent_client_secret=pi_3QxGh2LkdIwHu7ix0T2sY1aB_secret_Zy5bVfS2lK0Xw3eQ8rTmN1pHc" +
		"&publishable_key=pk_test_51QwFa9LkdIwHu7ixRecorded&source=payatt_3QxGh2LkdIwHu7ix0l3UkX8e"
	gatewayReturn = "https://gatehouse.example/v1/charges/ch_01JM8V9X4T2Q/return"
)

// recorded is the body of testdata/name: an answer of Stripe's API.
func recorded(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// recordedStripe answers payment method creations with a PaymentMethod and
// every other request with status and the recorded body.
func recordedStripe(t *testing.T, status int, body string) *fakeStripe {
	return newFakeStripe(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/payment_methods" {
			answer(200, `{"id":"pm_1QxGh1LkdIwHu7ixkq9V3wLs","object":"payment_method","type":"card"}`)(w, r)
			return
		}
		answer(status, body)(w, r)
	})
}

// outcome is what a test expects of a call: a result or a decline code
// ("unavailable" for an error wrapping ErrUnavailable).
type outcome struct {
	res     providers.Result
	decline string
}

func checkOutcome(t *testing.T, res providers.Result, err error, want outcome) {
	t.Helper()
	switch d, declined := providers.AsDecline(err); {
	case want.decline == "unavailable":
		if !errors.Is(err, providers.ErrUnavailable) || declined {
			t.Errorf("err = %v, want unavailable", err)
		}
	case want.decline != "":
		if !declined || d.Code != want.decline {
			t.Errorf("err = %v, want decline %s", err, want.decline)
		}
	case err != nil:
		t.Errorf("err = %v, want %+v", err, want.res)
	}
	if diff := cmp.Diff(want.res, res); diff != "" {
		t.Errorf("result (-want +got):\n%s", diff)
	}
}

func challengeResult() providers.Result {
	return providers.Result{Reference: recordedIntent, Action: &providers.Action{RedirectURL: recordedChallenge}}
}

// On session the confirming creation carries the gateway's return page as
// return_url; off session it carries off_session=true and no return_url. A
// raw card still becomes a PaymentMethod first.
func TestAuthorizeSendsReturnURLOrOffSession(t *testing.T) {
	tests := []struct {
		name       string
		offSession bool
		card       providers.Card
		status     int
		body       string
		wantForm   url.Values
		want       outcome
	}{
		{"on session, raw card", false, rawCard(), 200, "pi_requires_action.json",
			url.Values{"return_url": {gatewayReturn}}, outcome{res: challengeResult()}},
		{"on session, payment method", false, providers.Card{Token: "pm_card_authenticationRequired"}, 200, "pi_requires_action.json",
			url.Values{"return_url": {gatewayReturn}}, outcome{res: challengeResult()}},
		{"off session, raw card", true, rawCard(), 402, "error_authentication_required.json",
			url.Values{"off_session": {"true"}}, outcome{decline: "authentication_required"}},
		{"off session, payment method", true, providers.Card{Token: "pm_card_authenticationRequired"}, 402, "error_authentication_required.json",
			url.Values{"off_session": {"true"}}, outcome{decline: "authentication_required"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := recordedStripe(t, tt.status, recorded(t, tt.body))
			r := authorizeRequest("charge-3ds", true, tt.card)
			r.ReturnURL, r.OffSession, r.Authenticated = gatewayReturn, tt.offSession, tt.offSession
			res, err := stripe.New(secretKey, f.URL, nil).Authorize(context.Background(), r)
			checkOutcome(t, res, err, tt.want)

			seen := f.seen()
			last := seen[len(seen)-1]
			if last.Method != http.MethodPost || last.Path != "/v1/payment_intents" || last.IdempotencyKey != "charge-3ds" {
				t.Fatalf("request %s %s key %q, want POST /v1/payment_intents key charge-3ds", last.Method, last.Path, last.IdempotencyKey)
			}
			want := url.Values{"amount": {"2000"}, "currency": {"usd"}, "confirm": {"true"}, "payment_method_types[0]": {"card"},
				"expand[0]":   {"latest_charge.balance_transaction"},
				"description": {"Order 1042"}, "metadata[order_id]": {"1042"}, "payment_method": {tt.card.Token}}
			if tt.card.Token == "" {
				want["payment_method"] = []string{"pm_1QxGh1LkdIwHu7ixkq9V3wLs"}
				if len(seen) != 2 || seen[0].Path != "/v1/payment_methods" || seen[0].Form.Get("card[number]") != tt.card.Number {
					t.Errorf("a raw card did not become a PaymentMethod first: %+v", seen)
				}
			}
			for k, v := range tt.wantForm {
				want[k] = v
			}
			if diff := cmp.Diff(want, last.Form); diff != "" {
				t.Errorf("form (-want +got):\n%s", diff)
			}
		})
	}
}

// How Authorize reads each recorded answer of a confirming creation.
func TestAuthorizeRecordedAnswers(t *testing.T) {
	sourceAction := strings.Replace(recorded(t, "pi_requires_action.json"), `"status": "requires_action"`, `"status": "requires_source_action"`, 1)
	tests := []struct {
		name       string
		offSession bool
		status     int
		body       string
		want       outcome
	}{
		{"requires_action with a challenge page", false, 200, recorded(t, "pi_requires_action.json"), outcome{res: challengeResult()}},
		{"requires_source_action with a challenge page", false, 200, sourceAction, outcome{res: challengeResult()}},
		{"requires_action for Stripe.js (no challenge page)", false, 200, recorded(t, "pi_requires_action_sdk.json"), outcome{decline: "authentication_required"}},
		{"requires_action off session", true, 200, recorded(t, "pi_requires_action.json"), outcome{decline: "authentication_required"}},
		{"402 authentication_required off session", true, 402, recorded(t, "error_authentication_required.json"), outcome{decline: "authentication_required"}},
		{"succeeded (frictionless)", false, 200, recorded(t, "pi_succeeded.json"), outcome{res: providers.Result{Reference: recordedIntent}}},
		{"succeeded off session", true, 200, recorded(t, "pi_succeeded.json"), outcome{res: providers.Result{Reference: recordedIntent}}},
		{"requires_capture", false, 200, recorded(t, "pi_requires_capture.json"), outcome{res: providers.Result{Reference: recordedIntent}}},
		{"processing", false, 200, recorded(t, "pi_processing.json"), outcome{res: providers.Result{Reference: recordedIntent, Pending: true}}},
		{"declined with a card error", false, 200, recorded(t, "pi_declined_after_auth.json"), outcome{decline: "insufficient_funds"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := recordedStripe(t, tt.status, tt.body)
			r := authorizeRequest("charge-3ds", true, rawCard())
			r.OffSession = tt.offSession
			if !tt.offSession {
				r.ReturnURL = gatewayReturn
			}
			res, err := stripe.New(secretKey, f.URL, nil).Authorize(context.Background(), r)
			checkOutcome(t, res, err, tt.want)
		})
	}
}

// A requires_action that names no challenge page says so in its decline.
func TestAuthorizeWithoutChallengePageSaysSo(t *testing.T) {
	f := recordedStripe(t, 200, recorded(t, "pi_requires_action_sdk.json"))
	r := authorizeRequest("charge-3ds", true, rawCard())
	r.ReturnURL = gatewayReturn
	_, err := stripe.New(secretKey, f.URL, nil).Authorize(context.Background(), r)
	if d, ok := providers.AsDecline(err); !ok || !strings.Contains(d.Message, "no challenge page") {
		t.Errorf("err = %v, want a decline naming the missing challenge page", err)
	}
}

// Authenticate retrieves the PaymentIntent (a GET without idempotency key)
// and settles from its status.
func TestAuthenticateRecordedAnswers(t *testing.T) {
	sourceAction := strings.Replace(recorded(t, "pi_requires_action.json"), `"status": "requires_action"`, `"status": "requires_source_action"`, 1)
	tests := []struct {
		name   string
		status int
		body   string
		want   outcome
	}{
		{"succeeded: captured", 200, recorded(t, "pi_succeeded.json"), outcome{res: providers.Result{Reference: recordedIntent}}},
		{"requires_capture: authorized", 200, recorded(t, "pi_requires_capture.json"), outcome{res: providers.Result{Reference: recordedIntent}}},
		{"processing: pending", 200, recorded(t, "pi_processing.json"), outcome{res: providers.Result{Reference: recordedIntent, Pending: true}}},
		{"requires_action: not finished", 200, recorded(t, "pi_requires_action.json"), outcome{res: challengeResult()}},
		{"requires_source_action: not finished", 200, sourceAction, outcome{res: challengeResult()}},
		{"requires_action without a challenge page", 200, recorded(t, "pi_requires_action_sdk.json"), outcome{decline: "authentication_required"}},
		{"authentication failed", 200, recorded(t, "pi_auth_failed.json"), outcome{decline: "authentication_failed"}},
		{"declined by the issuer after authentication", 200, recorded(t, "pi_declined_after_auth.json"), outcome{decline: "insufficient_funds"}},
		{"requires_payment_method without an error", 200, `{"id":"` + recordedIntent + `","object":"payment_intent","status":"requires_payment_method"}`, outcome{decline: "authentication_failed"}},
		{"canceled", 200, recorded(t, "pi_canceled.json"), outcome{decline: "processing_error"}},
		{"another status: unknown", 200, recorded(t, "pi_requires_confirmation.json"), outcome{decline: "unavailable"}},
		{"404 no such payment intent", 404, `{"error":{"code":"resource_missing","doc_url":"https://stripe.com/docs/error-codes/resource-missing","message":"No such payment_intent: '` + recordedIntent + `'","param":"intent","type":"invalid_request_error"}}`, outcome{decline: "invalid_request"}},
		{"500", 500, `{"error":{"type":"api_error","message":"Something went wrong on Stripe's end."}}`, outcome{decline: "unavailable"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := recordedStripe(t, tt.status, tt.body)
			res, err := stripe.New(secretKey, f.URL, nil).Authenticate(context.Background(), providers.AuthenticateRequest{
				IdempotencyKey: "charge-3ds-authenticate", Reference: recordedIntent, Answer: providers.AnswerReturned,
				Amount: 2000, Currency: "USD", Capture: true, Card: rawCard()})
			checkOutcome(t, res, err, tt.want)
			seen := f.seen()
			if len(seen) != 1 {
				t.Fatalf("requests = %d, want 1", len(seen))
			}
			q := seen[0]
			if q.Method != http.MethodGet || q.Path != "/v1/payment_intents/"+recordedIntent || q.IdempotencyKey != "" || len(q.Form) != 0 {
				t.Errorf("request %s %s key %q form %v, want a bare GET of the PaymentIntent", q.Method, q.Path, q.IdempotencyKey, q.Form)
			}
			if err != nil && strings.Contains(err.Error(), "4242424242424242") {
				t.Errorf("error %q carries the card number", err)
			}
		})
	}
}

func TestAuthenticateWithoutReferenceSendsNothing(t *testing.T) {
	f := recordedStripe(t, 200, `{}`)
	_, err := stripe.New(secretKey, f.URL, nil).Authenticate(context.Background(), providers.AuthenticateRequest{Answer: providers.AnswerReturned})
	if d, ok := providers.AsDecline(err); !ok || d.Code != "invalid_request" {
		t.Errorf("err = %v, want decline invalid_request", err)
	}
	if n := len(f.seen()); n != 0 {
		t.Errorf("requests = %d, want 0", n)
	}
}

// LookupPayment reads a PaymentIntent waiting for the cardholder, and one
// whose authentication failed.
func TestLookupPaymentAuthentication(t *testing.T) {
	for _, c := range []struct {
		file string
		want providers.Payment
	}{
		{"pi_requires_action.json", providers.Payment{Reference: recordedIntent, Status: providers.PaymentRequiresAction}},
		{"pi_auth_failed.json", providers.Payment{Reference: recordedIntent, Status: providers.PaymentFailed,
			Failure: &providers.Decline{Code: "authentication_failed", Message: "The cardholder's authentication failed."}}},
	} {
		f := recordedStripe(t, 200, recorded(t, c.file))
		got, err := stripe.New(secretKey, f.URL, nil).LookupPayment(context.Background(), recordedIntent)
		if err != nil {
			t.Fatalf("%s: %v", c.file, err)
		}
		if diff := cmp.Diff(c.want, got); diff != "" {
			t.Errorf("%s (-want +got):\n%s", c.file, diff)
		}
	}
}

// Against stripe-mock, which validates every request against Stripe's
// OpenAPI spec: return_url and off_session are parameters Stripe accepts,
// and Authenticate's retrieval is well-formed.
func TestAuthenticationAgainstStripeMock(t *testing.T) {
	p := stripe.New(secretKey, stripeMock(t), &http.Client{Timeout: 10 * time.Second})
	ctx := context.Background()
	for _, tt := range []struct {
		name       string
		offSession bool
		card       providers.Card
	}{
		{"on session, raw card", false, rawCard()},
		{"on session, payment method", false, providers.Card{Token: "pm_card_visa"}},
		{"off session, raw card", true, rawCard()},
		{"off session, payment method", true, providers.Card{Token: "pm_card_visa"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := authorizeRequest("charge-3ds-"+tt.name, true, tt.card)
			r.ReturnURL, r.OffSession, r.Authenticated = gatewayReturn, tt.offSession, tt.offSession
			res, err := p.Authorize(ctx, r)
			if err != nil {
				t.Fatalf("Authorize: %v", err)
			}
			if !strings.HasPrefix(res.Reference, "pi_") {
				t.Errorf("reference = %q, want a PaymentIntent id", res.Reference)
			}
		})
	}
	// stripe-mock answers every retrieval with a PaymentIntent back at
	// requires_payment_method without a card error: a failed authentication.
	_, err := p.Authenticate(ctx, providers.AuthenticateRequest{Reference: "pi_123", Answer: providers.AnswerReturned})
	if d, ok := providers.AsDecline(err); !ok || d.Code != "authentication_failed" {
		t.Errorf("Authenticate: %v, want decline authentication_failed", err)
	}
}
