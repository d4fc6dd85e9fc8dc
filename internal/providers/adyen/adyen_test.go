package adyen_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gatehouse-pay/gatehouse/internal/providers"
	"github.com/gatehouse-pay/gatehouse/internal/providers/adyen"
)

const (
	apiKey   = "AQE_test_api_key_do_not_print"
	merchant = "GatehouseECOM"
	number   = "4111111111111111"
	cvc      = "737"
)

// call is a request the fake Adyen received.
type call struct {
	path   string
	header http.Header
	body   map[string]any
}

// fakeAdyen answers every request with status and body and records it.
type fakeAdyen struct {
	mu    sync.Mutex
	calls []call
}

func (f *fakeAdyen) last(t *testing.T) call {
	t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.calls) == 0 {
		t.Fatal("Adyen received no request")
	}
	return f.calls[len(f.calls)-1]
}

func (f *fakeAdyen) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.calls)
}

func newFake(t *testing.T, status int, body string) (*adyen.Adyen, *fakeAdyen) {
	t.Helper()
	f := &fakeAdyen{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		data, _ := io.ReadAll(r.Body)
		var m map[string]any
		if err := json.Unmarshal(data, &m); err != nil {
			t.Errorf("request body is not JSON: %v", err)
		}
		f.mu.Lock()
		f.calls = append(f.calls, call{path: r.URL.EscapedPath(), header: r.Header.Clone(), body: m})
		f.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_, _ = io.WriteString(w, body)
	}))
	t.Cleanup(srv.Close)
	return newAdyen(t, srv.URL+"/v71", nil), f
}

func newAdyen(t *testing.T, base string, client *http.Client) *adyen.Adyen {
	t.Helper()
	a, err := adyen.New(adyen.Config{APIKey: apiKey, MerchantAccount: merchant, BaseURL: base, HTTPClient: client, Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func authorizeRequest() providers.AuthorizeRequest {
	return providers.AuthorizeRequest{
		IdempotencyKey: "gh_ch_123_authorize", Amount: 1250, Currency: "EUR",
		Card:      providers.Card{Number: number, ExpMonth: 3, ExpYear: 2030, CVC: cvc},
		ReturnURL: "https://gatehouse.example/v1/return/ch_123",
	}
}

// outcome renders a call's result or error for comparison.
func outcome(res providers.Result, err error) string {
	if d, ok := providers.AsDecline(err); ok {
		return "decline:" + d.Code
	}
	switch {
	case errors.Is(err, adyen.ErrCredentials) && errors.Is(err, providers.ErrUnavailable):
		return "credentials"
	case errors.Is(err, providers.ErrNotSent) && errors.Is(err, providers.ErrUnavailable):
		return "unavailable,notsent"
	case errors.Is(err, providers.ErrUnavailable):
		return "unavailable"
	case err != nil:
		return "error:" + err.Error()
	case res.Action != nil:
		return fmt.Sprintf("action:%s:%s", res.Reference, res.Action.RedirectURL)
	case res.Pending:
		return "pending:" + res.Reference
	}
	return "ok:" + res.Reference
}

func TestNewRefusesIncompleteConfig(t *testing.T) {
	for _, cfg := range []adyen.Config{
		{MerchantAccount: merchant},
		{APIKey: apiKey},
		{APIKey: apiKey, MerchantAccount: merchant, BaseURL: "checkout-test.adyen.com/v71"},
		{APIKey: apiKey, MerchantAccount: merchant, BaseURL: "ftp://checkout-test.adyen.com/v71"},
		{APIKey: apiKey, MerchantAccount: merchant, BaseURL: "https://user:pw@checkout-test.adyen.com/v71"},
	} {
		if _, err := adyen.New(cfg); err == nil {
			t.Errorf("New(%v) succeeded, want an error", cfg)
		} else if strings.Contains(err.Error(), apiKey) {
			t.Errorf("New's error prints the API key: %v", err)
		}
	}
	if _, err := adyen.New(adyen.Config{APIKey: apiKey, MerchantAccount: merchant}); err != nil {
		t.Errorf("New with the default base URL: %v", err)
	}
}

func TestSecretsNeverPrinted(t *testing.T) {
	cfg := adyen.Config{APIKey: apiKey, MerchantAccount: merchant, BaseURL: "https://checkout-test.adyen.com/v71"}
	a, err := adyen.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, format := range []string{"%v", "%+v", "%#v", "%s"} {
		for _, v := range []any{cfg, &cfg, a} {
			out := fmt.Sprintf(format, v)
			if strings.Contains(out, apiKey) {
				t.Errorf("%s of %T prints the API key: %s", format, v, out)
			}
			if !strings.Contains(out, merchant) {
				t.Errorf("%s of %T does not name the merchant account: %s", format, v, out)
			}
		}
	}
}

func TestAuthorizeRequestBody(t *testing.T) {
	tests := []struct {
		name  string
		edit  func(*providers.AuthorizeRequest)
		check func(t *testing.T, body map[string]any)
	}{
		{"authorize only: manual capture, Ecommerce, redirect 3-D Secure", func(*providers.AuthorizeRequest) {}, func(t *testing.T, b map[string]any) {
			want(t, b, "additionalData", map[string]any{"manualCapture": "true"})
			absent(t, b, "captureDelayHours")
			want(t, b, "shopperInteraction", "Ecommerce")
			absent(t, b, "recurringProcessingModel")
			want(t, b, "authenticationData", map[string]any{"threeDSRequestData": map[string]any{"nativeThreeDS": "disabled"}})
		}},
		{"capture: captureDelayHours 0", func(r *providers.AuthorizeRequest) { r.Capture = true }, func(t *testing.T, b map[string]any) {
			want(t, b, "captureDelayHours", float64(0))
			absent(t, b, "additionalData")
		}},
		{"off session: ContAuth, no 3-D Secure", func(r *providers.AuthorizeRequest) { r.OffSession, r.Card.CVC = true, "" }, func(t *testing.T, b map[string]any) {
			want(t, b, "shopperInteraction", "ContAuth")
			want(t, b, "recurringProcessingModel", "UnscheduledCardOnFile")
			absent(t, b, "authenticationData")
			want(t, b, "paymentMethod", map[string]any{"type": "scheme", "number": number, "expiryMonth": "03", "expiryYear": "2030"})
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a, f := newFake(t, 200, `{"resultCode":"Authorised","pspReference":"PSP1"}`)
			r := authorizeRequest()
			tt.edit(&r)
			if got := outcome(a.Authorize(context.Background(), r)); got != "ok:PSP1" {
				t.Fatalf("Authorize: got %s, want ok:PSP1", got)
			}
			c := f.last(t)
			if c.path != "/v71/payments" {
				t.Errorf("path %s, want /v71/payments", c.path)
			}
			if got := c.header.Get("Idempotency-Key"); got != r.IdempotencyKey {
				t.Errorf("Idempotency-Key %q, want %q", got, r.IdempotencyKey)
			}
			if got := c.header.Get("X-API-Key"); got != apiKey {
				t.Errorf("X-API-Key %q, want the API key", got)
			}
			want(t, c.body, "reference", r.IdempotencyKey)
			want(t, c.body, "merchantAccount", merchant)
			want(t, c.body, "returnUrl", r.ReturnURL)
			want(t, c.body, "amount", map[string]any{"currency": "EUR", "value": float64(1250)})
			if !r.OffSession {
				want(t, c.body, "paymentMethod", map[string]any{"type": "scheme", "number": number, "expiryMonth": "03", "expiryYear": "2030", "cvc": cvc})
			}
			tt.check(t, c.body)
		})
	}
}

func TestAuthorizeAmountsInAdyensMinorUnits(t *testing.T) {
	tests := []struct {
		currency string
		amount   int64
		want     float64
	}{
		{"EUR", 1250, 1250},     // 2 decimals everywhere
		{"jpy", 1500, 1500},     // 0 decimals everywhere
		{"KWD", 1250, 1250},     // 3 decimals everywhere
		{"BHD", 1, 1},           // 3 decimals everywhere
		{"ISK", 1500, 150000},   // 0 in ISO 4217, 2 at Adyen
		{"CLP", 990, 99000},     // 0 in ISO 4217, 2 at Adyen
		{"IDR", 1500000, 15000}, // 2 in ISO 4217, 0 at Adyen
		{"CVE", 2500, 25},       // 2 in ISO 4217, 0 at Adyen
	}
	for _, tt := range tests {
		a, f := newFake(t, 200, `{"resultCode":"Authorised","pspReference":"PSP1"}`)
		r := authorizeRequest()
		r.Amount, r.Currency = tt.amount, tt.currency
		if _, err := a.Authorize(context.Background(), r); err != nil {
			t.Fatalf("%d %s: %v", tt.amount, tt.currency, err)
		}
		want(t, f.last(t).body, "amount", map[string]any{"currency": strings.ToUpper(tt.currency), "value": tt.want})
	}
	// 123.45 rupiah: Adyen takes whole rupiah, so nothing is sent.
	a, f := newFake(t, 200, `{"resultCode":"Authorised","pspReference":"PSP1"}`)
	r := authorizeRequest()
	r.Amount, r.Currency = 12345, "IDR"
	if got := outcome(a.Authorize(context.Background(), r)); got != "decline:invalid_request" || f.count() != 0 {
		t.Errorf("IDR 123.45: got %s after %d requests, want decline:invalid_request and none sent", got, f.count())
	}
}

func TestFromAdyen(t *testing.T) {
	tests := []struct {
		in     adyen.Amount
		amount int64
		cur    string
		ok     bool
	}{
		{adyen.Amount{Currency: "EUR", Value: 1250}, 1250, "EUR", true},
		{adyen.Amount{Currency: "JPY", Value: 1500}, 1500, "JPY", true},
		{adyen.Amount{Currency: "KWD", Value: 1250}, 1250, "KWD", true},
		{adyen.Amount{Currency: "ISK", Value: 150000}, 1500, "ISK", true},
		{adyen.Amount{Currency: "ISK", Value: 150050}, 0, "", false}, // half a krona: no Gatehouse amount
		{adyen.Amount{Currency: "idr", Value: 15000}, 1500000, "IDR", true},
		{adyen.Amount{Currency: "EURO", Value: 1}, 0, "", false},
	}
	for _, tt := range tests {
		amount, cur, err := adyen.FromAdyen(tt.in)
		if (err == nil) != tt.ok || amount != tt.amount || cur != tt.cur {
			t.Errorf("FromAdyen(%+v) = %d, %q, %v; want %d, %q, ok %v", tt.in, amount, cur, err, tt.amount, tt.cur, tt.ok)
		}
	}
}

func TestAuthorizeResults(t *testing.T) {
	tests := []struct {
		name    string
		off     bool
		status  int
		body    string
		outcome string
	}{
		{"authorised", false, 200, `{"resultCode":"Authorised","pspReference":"PSP1"}`, "ok:PSP1"},
		{"authorised without a pspReference", false, 200, `{"resultCode":"Authorised"}`, "unavailable"},
		{"refused", false, 200, `{"resultCode":"Refused","pspReference":"PSP1","refusalReason":"Refused","refusalReasonCode":"2"}`, "decline:card_declined"},
		{"refused, no reason code", false, 200, `{"resultCode":"Refused","pspReference":"PSP1"}`, "decline:card_declined"},
		{"refused, not enough balance", false, 200, `{"resultCode":"Refused","refusalReason":"Not enough balance","refusalReasonCode":"12"}`, "decline:insufficient_funds"},
		{"refused, expired card", false, 200, `{"resultCode":"Refused","refusalReasonCode":"6"}`, "decline:expired_card"},
		{"refused, CVC declined", false, 200, `{"resultCode":"Refused","refusalReasonCode":"24"}`, "decline:incorrect_cvc"},
		{"refused, acquirer fraud", false, 200, `{"resultCode":"Refused","refusalReasonCode":"14"}`, "decline:fraudulent"},
		{"refused, issuer suspected fraud", false, 200, `{"resultCode":"Refused","refusalReasonCode":"31"}`, "decline:fraudulent"},
		{"refused, blocked card reported lost", false, 200, `{"resultCode":"Refused","refusalReasonCode":"5","additionalData":{"refusalReasonRaw":"41 : Lost card"}}`, "decline:lost_card"},
		{"refused, blocked card reported stolen", false, 200, `{"resultCode":"Refused","refusalReasonCode":"5","additionalData":{"refusalReasonRaw":"43 : STOLEN CARD"}}`, "decline:stolen_card"},
		{"refused, acquirer error", false, 200, `{"resultCode":"Refused","refusalReasonCode":"4"}`, "decline:processing_error"},
		{"refused, issuer unavailable", false, 200, `{"resultCode":"Refused","refusalReasonCode":"9"}`, "decline:issuer_unavailable"},
		{"refused, not submitted", false, 200, `{"resultCode":"Refused","refusalReasonCode":"21"}`, "decline:processing_error"},
		{"refused, blocked to prevent retry fees", false, 200, `{"resultCode":"Refused","refusalReasonCode":"44"}`, "decline:try_again_later"},
		{"refused, authentication required", false, 200, `{"resultCode":"Refused","refusalReasonCode":"38"}`, "decline:authentication_required"},
		{"refused, 3D not authenticated before a challenge", false, 200, `{"resultCode":"Refused","refusalReasonCode":"11"}`, "decline:authentication_required"},
		{"refused, invalid amount", false, 200, `{"resultCode":"Refused","refusalReasonCode":"7"}`, "decline:invalid_request"},
		{"error", false, 200, `{"resultCode":"Error","refusalReason":"Acquirer Error"}`, "decline:processing_error"},
		{"cancelled", false, 200, `{"resultCode":"Cancelled","pspReference":"PSP1"}`, "decline:processing_error"},
		{"pending", false, 200, `{"resultCode":"Pending","pspReference":"PSP1"}`, "pending:PSP1"},
		{"received", false, 200, `{"resultCode":"Received","pspReference":"PSP1"}`, "pending:PSP1"},
		{"redirect", false, 200, `{"resultCode":"RedirectShopper","pspReference":"PSP1","action":{"type":"redirect","method":"GET","url":"https://checkoutshopper-test.adyen.com/threeDS/redirect?x=1"}}`,
			"action:PSP1:https://checkoutshopper-test.adyen.com/threeDS/redirect?x=1"},
		{"challenge with a page", false, 200, `{"resultCode":"ChallengeShopper","action":{"type":"threeDS2","url":"https://acs.example/c"}}`, "action::https://acs.example/c"},
		{"redirect by POST form", false, 200, `{"resultCode":"RedirectShopper","action":{"type":"redirect","method":"POST","url":"https://acs.example/p","data":{"MD":"x"}}}`, "decline:authentication_required"},
		{"native 3-D Secure 2 fingerprint", false, 200, `{"resultCode":"IdentifyShopper","action":{"type":"threeDS2","subtype":"fingerprint","token":"t"}}`, "decline:authentication_required"},
		{"redirect off session", true, 200, `{"resultCode":"RedirectShopper","pspReference":"PSP1","action":{"type":"redirect","method":"GET","url":"https://x.example"}}`, "decline:authentication_required"},
		{"partially authorised", false, 200, `{"resultCode":"PartiallyAuthorised","pspReference":"PSP1"}`, "unavailable"},
		{"unknown result code", false, 200, `{"resultCode":"SomethingNew","pspReference":"PSP1"}`, "unavailable"},
		{"unreadable answer", false, 200, `<html>`, "unavailable"},
		{"validation error", false, 422, `{"status":422,"errorCode":"14_030","message":"Return URL is missing.","errorType":"validation"}`, "decline:invalid_request"},
		{"bad request", false, 400, `{"status":400,"errorCode":"702","message":"Unexpected input","errorType":"validation"}`, "decline:invalid_request"},
		{"request in progress", false, 422, `{"status":422,"errorCode":"704","message":"request already processed or in progress","errorType":"validation"}`, "unavailable"},
		{"unauthorized", false, 401, `{"status":401,"errorCode":"000","message":"HTTP Status Response - Unauthorized","errorType":"security"}`, "credentials"},
		{"forbidden", false, 403, `{"status":403,"errorCode":"901","message":"Invalid Merchant Account","errorType":"security"}`, "credentials"},
		{"conflict", false, 409, `{}`, "unavailable"},
		{"rate limited", false, 429, `{}`, "unavailable"},
		{"server error", false, 500, `{"status":500,"errorCode":"905","message":"Payment details are not supported","errorType":"configuration"}`, "unavailable"},
		{"bad gateway without a body", false, 502, ``, "unavailable"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a, _ := newFake(t, tt.status, tt.body)
			r := authorizeRequest()
			r.OffSession = tt.off
			res, err := a.Authorize(context.Background(), r)
			if got := outcome(res, err); got != tt.outcome {
				t.Errorf("got %s, want %s (err %v)", got, tt.outcome, err)
			}
			if err != nil && (strings.Contains(err.Error(), number) || strings.Contains(err.Error(), apiKey)) {
				t.Errorf("the error prints card data or the API key: %v", err)
			}
		})
	}
}

func TestAuthorizeRefusedBeforeSending(t *testing.T) {
	tests := []struct {
		name string
		edit func(*providers.AuthorizeRequest)
		is   func(error) bool
	}{
		{"a token", func(r *providers.AuthorizeRequest) { r.Card = providers.Card{Token: "tok_visa"} }, func(err error) bool { return errors.Is(err, adyen.ErrUnsupported) }},
		{"no key", func(r *providers.AuthorizeRequest) { r.IdempotencyKey = " " }, isInvalid},
		{"no return URL", func(r *providers.AuthorizeRequest) { r.ReturnURL = "" }, isInvalid},
		{"no card number", func(r *providers.AuthorizeRequest) { r.Card.Number = "" }, isInvalid},
		{"month 13", func(r *providers.AuthorizeRequest) { r.Card.ExpMonth = 13 }, isInvalid},
		{"no currency", func(r *providers.AuthorizeRequest) { r.Currency = "" }, isInvalid},
		{"no amount", func(r *providers.AuthorizeRequest) { r.Amount = 0 }, isInvalid},
	}
	for _, tt := range tests {
		a, f := newFake(t, 200, `{"resultCode":"Authorised","pspReference":"PSP1"}`)
		r := authorizeRequest()
		tt.edit(&r)
		_, err := a.Authorize(context.Background(), r)
		if !tt.is(err) {
			t.Errorf("%s: got %v", tt.name, err)
		}
		if errors.Is(err, providers.ErrUnavailable) {
			t.Errorf("%s: %v wraps ErrUnavailable: the caller would retry a request that cannot succeed", tt.name, err)
		}
		if f.count() != 0 {
			t.Errorf("%s: %d requests sent, want none", tt.name, f.count())
		}
	}
}

func isInvalid(err error) bool {
	d, ok := providers.AsDecline(err)
	return ok && d.Code == "invalid_request"
}

func TestLongKeysAreDigested(t *testing.T) {
	a, f := newFake(t, 200, `{"resultCode":"Authorised","pspReference":"PSP1"}`)
	r := authorizeRequest()
	r.IdempotencyKey = "gh_" + strings.Repeat("x", 100) + "_authorize"
	for range 2 {
		if _, err := a.Authorize(context.Background(), r); err != nil {
			t.Fatal(err)
		}
	}
	f.mu.Lock()
	first, second := f.calls[0], f.calls[1]
	f.mu.Unlock()
	key := first.header.Get("Idempotency-Key")
	if key == "" || len(key) > 64 || key != second.header.Get("Idempotency-Key") {
		t.Errorf("Idempotency-Key %q then %q: want the same key of at most 64 characters", key, second.header.Get("Idempotency-Key"))
	}
	if ref, _ := first.body["reference"].(string); ref == "" || len(ref) > 80 {
		t.Errorf("reference %q: want at most 80 characters", ref)
	}
	r.IdempotencyKey += "2"
	if _, err := a.Authorize(context.Background(), r); err != nil {
		t.Fatal(err)
	}
	if got := f.last(t).header.Get("Idempotency-Key"); got == key {
		t.Errorf("two long keys share the Idempotency-Key %q", got)
	}
}

func TestCardDataNeverInErrors(t *testing.T) {
	// Adyen quoting the card back in a validation message.
	a, _ := newFake(t, 422, `{"status":422,"errorCode":"101","message":"Invalid card number `+number+` cvc `+cvc+`","errorType":"validation"}`)
	_, err := a.Authorize(context.Background(), authorizeRequest())
	d, ok := providers.AsDecline(err)
	if !ok || d.Code != "invalid_request" {
		t.Fatalf("got %v, want a decline invalid_request", err)
	}
	if strings.Contains(err.Error(), number) || strings.Contains(err.Error(), " "+cvc) {
		t.Errorf("the error prints card data: %v", err)
	}
	if got := fmt.Sprintf("%v %+v %#v", authorizeRequest().Card, authorizeRequest().Card, authorizeRequest().Card); strings.Contains(got, number) {
		t.Errorf("a card prints its number: %s", got)
	}
}

func TestUnreachable(t *testing.T) {
	// A port nothing listens on: the connection is refused, nothing is sent.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	a := newAdyen(t, "http://"+addr+"/v71", nil)
	if got := outcome(a.Authorize(context.Background(), authorizeRequest())); got != "unavailable,notsent" {
		t.Errorf("connection refused: got %s, want unavailable,notsent", got)
	}
	if got := outcome(a.Capture(context.Background(), providers.CaptureRequest{IdempotencyKey: "k", Reference: "PSP1", Amount: 1, Currency: "EUR"})); got != "unavailable,notsent" {
		t.Errorf("connection refused on capture: got %s, want unavailable,notsent", got)
	}

	// An Adyen that never answers: the timeout, after the request was sent.
	release := make(chan struct{})
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.ReadAll(r.Body)
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(slow.Close)
	t.Cleanup(func() { close(release) })
	s, err := adyen.New(adyen.Config{APIKey: apiKey, MerchantAccount: merchant, BaseURL: slow.URL, Timeout: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if got := outcome(s.Authorize(context.Background(), authorizeRequest())); got != "unavailable" {
		t.Errorf("timeout: got %s, want unavailable (sent, so not ErrNotSent)", got)
	}
}

func TestAuthenticate(t *testing.T) {
	tests := []struct {
		name    string
		details map[string]string
		body    string
		outcome string
		sent    map[string]any
	}{
		{"authorised", map[string]string{"redirectResult": "X6Xtf", "charge": "ch_123"}, `{"resultCode":"Authorised","pspReference":"PSP2"}`,
			"ok:PSP2", map[string]any{"redirectResult": "X6Xtf"}},
		{"authorised, Adyen names no pspReference", map[string]string{"redirectResult": "X"}, `{"resultCode":"Authorised"}`, "ok:PSP1", map[string]any{"redirectResult": "X"}},
		{"3D not authenticated", map[string]string{"redirectResult": "X"}, `{"resultCode":"Refused","refusalReasonCode":"11","refusalReason":"3D Not Authenticated"}`, "decline:authentication_failed", nil},
		{"shopper cancelled", map[string]string{"redirectResult": "X"}, `{"resultCode":"Refused","refusalReasonCode":"16"}`, "decline:authentication_failed", nil},
		{"cancelled", map[string]string{"redirectResult": "X"}, `{"resultCode":"Cancelled"}`, "decline:authentication_failed", nil},
		{"declined by the issuer after authentication", map[string]string{"redirectResult": "X"}, `{"resultCode":"Refused","refusalReasonCode":"12"}`, "decline:insufficient_funds", nil},
		{"pending", map[string]string{"redirectResult": "X"}, `{"resultCode":"Pending","pspReference":"PSP2"}`, "pending:PSP2", nil},
		{"another challenge", map[string]string{"threeDSResult": "eyJ"}, `{"resultCode":"ChallengeShopper","pspReference":"PSP2","action":{"type":"threeDS2","url":"https://acs.example/c"}}`,
			"action:PSP2:https://acs.example/c", map[string]any{"threeDSResult": "eyJ"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a, f := newFake(t, 200, tt.body)
			r := providers.AuthenticateRequest{IdempotencyKey: "gh_ch_123_authenticate", Reference: "PSP1", Answer: providers.AnswerReturned, Details: tt.details}
			if got := outcome(a.Authenticate(context.Background(), r)); got != tt.outcome {
				t.Errorf("got %s, want %s", got, tt.outcome)
			}
			c := f.last(t)
			if c.path != "/v71/payments/details" || c.header.Get("Idempotency-Key") != r.IdempotencyKey {
				t.Errorf("sent %s with Idempotency-Key %q", c.path, c.header.Get("Idempotency-Key"))
			}
			if tt.sent != nil {
				want(t, c.body, "details", tt.sent)
			}
		})
	}
	a, f := newFake(t, 200, `{"resultCode":"Authorised","pspReference":"PSP2"}`)
	for _, d := range []map[string]string{nil, {"charge": "ch_123"}, {"redirectResult": ""}} {
		r := providers.AuthenticateRequest{IdempotencyKey: "k", Reference: "PSP1", Answer: providers.AnswerFailed, Details: d}
		if got := outcome(a.Authenticate(context.Background(), r)); got != "decline:authentication_failed" {
			t.Errorf("details %v: got %s, want decline:authentication_failed", d, got)
		}
	}
	if f.count() != 0 {
		t.Errorf("%d requests without details, want none", f.count())
	}
}

func TestModifications(t *testing.T) {
	const received = `{"merchantAccount":"GatehouseECOM","paymentPspReference":"PSP1","pspReference":"MOD1","status":"received"}`
	tests := []struct {
		name string
		do   func(a *adyen.Adyen) (providers.Result, error)
		path string
		body map[string]any
	}{
		{"partial capture", func(a *adyen.Adyen) (providers.Result, error) {
			return a.Capture(context.Background(), providers.CaptureRequest{IdempotencyKey: "gh_ch_1_capture", Reference: "PSP1", Amount: 700, Currency: "EUR"})
		}, "/v71/payments/PSP1/captures", map[string]any{"merchantAccount": merchant, "reference": "gh_ch_1_capture", "amount": map[string]any{"currency": "EUR", "value": float64(700)}}},
		{"capture in ISK", func(a *adyen.Adyen) (providers.Result, error) {
			return a.Capture(context.Background(), providers.CaptureRequest{IdempotencyKey: "gh_ch_1_capture", Reference: "PSP1", Amount: 700, Currency: "ISK"})
		}, "/v71/payments/PSP1/captures", map[string]any{"merchantAccount": merchant, "reference": "gh_ch_1_capture", "amount": map[string]any{"currency": "ISK", "value": float64(70000)}}},
		{"void", func(a *adyen.Adyen) (providers.Result, error) {
			return a.Void(context.Background(), providers.VoidRequest{IdempotencyKey: "gh_ch_1_void", Reference: "PSP1"})
		}, "/v71/payments/PSP1/cancels", map[string]any{"merchantAccount": merchant, "reference": "gh_ch_1_void"}},
		{"refund", func(a *adyen.Adyen) (providers.Result, error) {
			return a.Refund(context.Background(), providers.RefundRequest{IdempotencyKey: "gh_re_1", Reference: "PSP1", Amount: 500, Currency: "KWD", Reason: "requested_by_customer", RefundID: "re_1"})
		}, "/v71/payments/PSP1/refunds", map[string]any{"merchantAccount": merchant, "reference": "re_1", "merchantRefundReason": "CUSTOMER REQUEST", "amount": map[string]any{"currency": "KWD", "value": float64(500)}}},
		{"refund without a reason", func(a *adyen.Adyen) (providers.Result, error) {
			return a.Refund(context.Background(), providers.RefundRequest{IdempotencyKey: "gh_re_1", Reference: "PSP1", Amount: 500, Currency: "JPY", RefundID: "re_1"})
		}, "/v71/payments/PSP1/refunds", map[string]any{"merchantAccount": merchant, "reference": "re_1", "amount": map[string]any{"currency": "JPY", "value": float64(500)}}},
		{"a reference that needs escaping", func(a *adyen.Adyen) (providers.Result, error) {
			return a.Void(context.Background(), providers.VoidRequest{IdempotencyKey: "k", Reference: "a/b?c"})
		}, "/v71/payments/a%2Fb%3Fc/cancels", map[string]any{"merchantAccount": merchant, "reference": "k"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a, f := newFake(t, 201, received)
			if got := outcome(tt.do(a)); got != "pending:MOD1" {
				t.Errorf("got %s, want pending:MOD1", got)
			}
			c := f.last(t)
			if tt.body != nil {
				if c.path != tt.path {
					t.Errorf("path %s, want %s", c.path, tt.path)
				}
				if len(c.body) != len(tt.body) {
					t.Errorf("body %v, want %v", c.body, tt.body)
				}
				for k, v := range tt.body {
					want(t, c.body, k, v)
				}
			}
			if c.header.Get("Idempotency-Key") == "" {
				t.Error("no Idempotency-Key")
			}
		})
	}

	a, f := newFake(t, 201, received)
	for name, do := range map[string]func() (providers.Result, error){
		"capture without a currency": func() (providers.Result, error) {
			return a.Capture(context.Background(), providers.CaptureRequest{IdempotencyKey: "k", Reference: "PSP1", Amount: 100})
		},
		"capture without a reference": func() (providers.Result, error) {
			return a.Capture(context.Background(), providers.CaptureRequest{IdempotencyKey: "k", Amount: 100, Currency: "EUR"})
		},
		"void without a key": func() (providers.Result, error) {
			return a.Void(context.Background(), providers.VoidRequest{Reference: "PSP1"})
		},
		"refund of IDR cents": func() (providers.Result, error) {
			return a.Refund(context.Background(), providers.RefundRequest{IdempotencyKey: "k", Reference: "PSP1", Amount: 150, Currency: "IDR"})
		},
	} {
		if got := outcome(do()); got != "decline:invalid_request" {
			t.Errorf("%s: got %s, want decline:invalid_request", name, got)
		}
	}
	if f.count() != 0 {
		t.Errorf("%d requests sent for invalid modifications, want none", f.count())
	}

	for body, wantOutcome := range map[string]string{
		`{"pspReference":"MOD1","status":"something"}`: "unavailable",
		`{"status":"received"}`:                        "unavailable",
	} {
		a, _ := newFake(t, 201, body)
		if got := outcome(a.Void(context.Background(), providers.VoidRequest{IdempotencyKey: "k", Reference: "PSP1"})); got != wantOutcome {
			t.Errorf("answer %s: got %s, want %s", body, got, wantOutcome)
		}
	}
	a, _ = newFake(t, 422, `{"status":422,"errorCode":"167","message":"Original pspReference required for this operation","errorType":"validation"}`)
	if got := outcome(a.Refund(context.Background(), providers.RefundRequest{IdempotencyKey: "k", Reference: "PSP1", Amount: 1, Currency: "EUR"})); got != "decline:invalid_request" {
		t.Errorf("422 on a refund: got %s, want decline:invalid_request", got)
	}
}

func TestLookupIsUnavailable(t *testing.T) {
	a, f := newFake(t, 200, `{}`)
	_, err := a.LookupRefund(context.Background(), providers.RefundLookup{Reference: "PSP1", RefundID: "re_1"})
	if !errors.Is(err, providers.ErrNoLookup) || !errors.Is(err, providers.ErrUnavailable) || errors.Is(err, providers.ErrNothingBooked) {
		t.Errorf("LookupRefund: %v, want ErrNoLookup and ErrUnavailable", err)
	}
	_, err = a.LookupPayment(context.Background(), "PSP1")
	if !errors.Is(err, providers.ErrNoLookup) || !errors.Is(err, providers.ErrUnavailable) {
		t.Errorf("LookupPayment: %v, want ErrNoLookup and ErrUnavailable", err)
	}
	if f.count() != 0 {
		t.Errorf("a lookup sent %d requests", f.count())
	}
}

// want checks that m[key] is v, comparing as JSON.
func want(t *testing.T, m map[string]any, key string, v any) {
	t.Helper()
	got, _ := json.Marshal(m[key])
	exp, _ := json.Marshal(v)
	if string(got) != string(exp) {
		t.Errorf("%s: got %s, want %s", key, got, exp)
	}
}

func absent(t *testing.T, m map[string]any, key string) {
	t.Helper()
	if v, ok := m[key]; ok {
		t.Errorf("%s: got %v, want it absent", key, v)
	}
}
