// Command checkout is an example merchant checkout on its own origin. The
// browser collects the card in Gatehouse's card field (gatehouse.js, with the
// public key) and gets a token; this server charges the token with the secret
// key. Neither this server nor its page ever sees the card number.
//
// When the card's issuer asks the cardholder to authenticate (3-D Secure), the
// charge waits in requires_action: the page lets the card field show the
// challenge (gatehouse.handleNextAction), or, with "Pay on my bank's page",
// the server sends a return_url and the browser goes to the issuer's page and
// comes back to /return. "Save this card" makes a customer and a payment
// method of the token, and lets the server charge the card again later,
// off session.
//
//	GATEHOUSE_API=http://127.0.0.1:8080 GATEHOUSE_PUBLIC_KEY=pk_test_... \
//	GATEHOUSE_SECRET_KEY=sk_test_... go run ./examples/checkout   # then open http://127.0.0.1:4242
package main

import (
	"bytes"
	"context"
	"embed"
	"encoding/json"
	"fmt"
	"html/template"
	"io"
	"log"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync"
	"time"
)

//go:embed static
var static embed.FS

var pages = template.Must(template.ParseFS(static, "static/*.html"))

func main() {
	api := strings.TrimRight(env("GATEHOUSE_API", "http://127.0.0.1:8080"), "/")
	publicKey, secretKey := env("GATEHOUSE_PUBLIC_KEY", ""), env("GATEHOUSE_SECRET_KEY", "")
	addr := env("CHECKOUT_ADDR", "127.0.0.1:4242")
	if publicKey == "" || secretKey == "" {
		log.Fatal("set GATEHOUSE_PUBLIC_KEY and GATEHOUSE_SECRET_KEY (from POST /v1/me/api_keys)")
	}
	s := &shop{
		gateway: gateway{api: api, secretKey: secretKey, client: &http.Client{Timeout: 10 * time.Second}},
		self:    strings.TrimRight(env("CHECKOUT_URL", "http://"+addr), "/"),
		saved:   map[string]string{},
	}
	// The pages run their own script and Gatehouse's, and frame only the gateway.
	csp := "default-src 'self'; script-src 'self' " + api + "; frame-src " + api +
		"; connect-src 'self'; style-src 'self'; frame-ancestors 'none'"
	page := func(name string) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Security-Policy", csp)
			if err := pages.ExecuteTemplate(w, name, map[string]string{"API": api, "PublicKey": publicKey}); err != nil {
				log.Print(err)
			}
		}
	}

	mux := http.NewServeMux()
	mux.Handle("GET /static/", http.FileServerFS(static))
	mux.HandleFunc("GET /{$}", page("index.html"))
	mux.HandleFunc("GET /return", page("return.html")) // ?charge=<id>, after the issuer's page
	mux.HandleFunc("POST /pay", s.pay)
	mux.HandleFunc("GET /charges/{id}", s.status)
	mux.HandleFunc("POST /charge-again", s.chargeAgain)
	fmt.Printf("checkout on http://%s (gateway %s)\n", addr, api)
	log.Fatal(http.ListenAndServe(addr, mux))
}

// shop is the merchant's server. saved maps the customers it created to
// their saved card; a real shop keeps them with its own customer accounts.
type shop struct {
	gateway
	self  string // this server's address, for return_url
	mu    sync.Mutex
	saved map[string]string
}

// pay: POST /pay {"token": "ctok_...", "order": "...", "redirect": bool,
// "save": bool} charges the token, or saves the card and charges it.
func (s *shop) pay(w http.ResponseWriter, r *http.Request) {
	var in struct {
		Token, Order   string
		Redirect, Save bool
	}
	if err := json.NewDecoder(io.LimitReader(r.Body, 4096)).Decode(&in); err != nil || !strings.HasPrefix(in.Token, "ctok_") {
		writeError(w, http.StatusBadRequest, "send a ctok_ token")
		return
	}
	charge := map[string]any{"amount": 2000, "currency": "usd", "description": "Order " + in.Order}
	if in.Save {
		customer, pm, err := s.saveCard(r.Context(), in.Token)
		if err != nil {
			relayError(w, err)
			return
		}
		charge["customer"], charge["card"] = customer, map[string]string{"payment_method": pm}
	} else {
		charge["payment_method"], charge["card"] = "card", map[string]string{"token": in.Token}
	}
	if in.Redirect {
		charge["return_url"] = s.self + "/return"
	}
	s.createCharge(w, r, charge, "checkout-"+in.Token) // one charge per token, even if retried
}

// saveCard makes a customer and a payment method of the token.
func (s *shop) saveCard(ctx context.Context, token string) (customer, pm string, err error) {
	var c, p struct{ ID string }
	if err := s.call(ctx, http.MethodPost, "/v1/customers", map[string]any{"description": "checkout"}, "customer-"+token, &c); err != nil {
		return "", "", err
	}
	body := map[string]any{"card": map[string]string{"token": token}}
	if err := s.call(ctx, http.MethodPost, "/v1/customers/"+c.ID+"/payment_methods", body, "pm-"+token, &p); err != nil {
		return "", "", err
	}
	s.mu.Lock()
	s.saved[c.ID] = p.ID
	s.mu.Unlock()
	return c.ID, p.ID, nil
}

// chargeAgain: POST /charge-again {"customer": "cus_..."} charges a card this
// shop saved, with no cardholder present (off session).
func (s *shop) chargeAgain(w http.ResponseWriter, r *http.Request) {
	var in struct{ Customer string }
	_ = json.NewDecoder(io.LimitReader(r.Body, 4096)).Decode(&in)
	s.mu.Lock()
	pm, ok := s.saved[in.Customer]
	s.mu.Unlock()
	if !ok {
		writeError(w, http.StatusNotFound, "no card saved for this customer")
		return
	}
	s.createCharge(w, r, map[string]any{
		"amount": 2000, "currency": "usd", "customer": in.Customer,
		"card": map[string]string{"payment_method": pm}, "off_session": true,
	}, "")
}

// createCharge creates the charge and answers with it once the worker has
// taken it on: requires_action (with its next_action), or its outcome.
func (s *shop) createCharge(w http.ResponseWriter, r *http.Request, body map[string]any, idempotencyKey string) {
	var c charge
	if err := s.call(r.Context(), http.MethodPost, "/v1/charges", body, idempotencyKey, &c); err != nil {
		relayError(w, err)
		return
	}
	for deadline := time.Now().Add(10 * time.Second); c.Status == "created" && time.Now().Before(deadline); {
		time.Sleep(200 * time.Millisecond)
		if err := s.call(r.Context(), http.MethodGet, "/v1/charges/"+c.ID, nil, "", &c); err != nil {
			relayError(w, err)
			return
		}
	}
	writeJSON(w, http.StatusOK, c)
}

// status: GET /charges/{id} re-reads the charge with the secret key.
func (s *shop) status(w http.ResponseWriter, r *http.Request) {
	var c charge
	if err := s.call(r.Context(), http.MethodGet, "/v1/charges/"+url.PathEscape(r.PathValue("id")), nil, "", &c); err != nil {
		relayError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, c)
}

// charge is what the page learns of a charge.
type charge struct {
	ID             string          `json:"id"`
	Status         string          `json:"status"`
	Amount         int64           `json:"amount"`
	Currency       string          `json:"currency"`
	Customer       *string         `json:"customer"`
	FailureCode    *string         `json:"failure_code"`
	FailureMessage *string         `json:"failure_message"`
	NextAction     json.RawMessage `json:"next_action"`
}

// gateway calls Gatehouse's API with the secret key.
type gateway struct {
	api, secretKey string
	client         *http.Client
}

// apiError is an error answer of the API, relayed to the page.
type apiError struct {
	status int
	body   []byte
}

func (e *apiError) Error() string { return fmt.Sprintf("gateway answered %d", e.status) }

func (g gateway) call(ctx context.Context, method, path string, body any, idempotencyKey string, out any) error {
	var reader io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return err
		}
		reader = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, g.api+path, reader)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+g.secretKey)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if idempotencyKey != "" {
		req.Header.Set("Idempotency-Key", idempotencyKey)
	}
	res, err := g.client.Do(req)
	if err != nil {
		return err
	}
	defer res.Body.Close()
	b, err := io.ReadAll(io.LimitReader(res.Body, 1<<20))
	if err != nil {
		return err
	}
	if res.StatusCode >= 300 {
		return &apiError{status: res.StatusCode, body: b}
	}
	return json.Unmarshal(b, out)
}

// relayError answers with the API's error, or 502 when the gateway did not answer.
func relayError(w http.ResponseWriter, err error) {
	if e, ok := err.(*apiError); ok {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(e.status)
		_, _ = w.Write(e.body)
		return
	}
	log.Print(err)
	writeError(w, http.StatusBadGateway, "the gateway did not answer")
}

func writeError(w http.ResponseWriter, status int, message string) {
	writeJSON(w, status, map[string]any{"error": map[string]string{"message": message}})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func env(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}
