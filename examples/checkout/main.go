// Command checkout is an example merchant checkout on its own origin. The
// browser collects the card in Gatehouse's card field (gatehouse.js, with the
// public key) and gets a token; this server charges the token with the secret
// key. Neither this server nor its page ever sees the card number.
//
//	GATEHOUSE_API=http://127.0.0.1:8080 GATEHOUSE_PUBLIC_KEY=pk_test_... \
//	GATEHOUSE_SECRET_KEY=sk_test_... go run ./examples/checkout   # then open http://127.0.0.1:4242
package main

import (
	"bytes"
	"embed"
	"encoding/json"
	"fmt"
	"html/template"
	"io"
	"log"
	"net/http"
	"os"
	"strings"
	"time"
)

//go:embed static
var static embed.FS

var page = template.Must(template.ParseFS(static, "static/index.html"))

func main() {
	api := strings.TrimRight(env("GATEHOUSE_API", "http://127.0.0.1:8080"), "/")
	publicKey, secretKey := env("GATEHOUSE_PUBLIC_KEY", ""), env("GATEHOUSE_SECRET_KEY", "")
	addr := env("CHECKOUT_ADDR", "127.0.0.1:4242")
	if publicKey == "" || secretKey == "" {
		log.Fatal("set GATEHOUSE_PUBLIC_KEY and GATEHOUSE_SECRET_KEY (from POST /v1/me/api_keys)")
	}
	client := &http.Client{Timeout: 10 * time.Second}

	mux := http.NewServeMux()
	mux.Handle("GET /static/", http.FileServerFS(static))
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		// The page runs its own script and Gatehouse's, and frames only the gateway.
		w.Header().Set("Content-Security-Policy", "default-src 'self'; script-src 'self' "+api+
			"; frame-src "+api+"; connect-src 'self'; style-src 'self'; frame-ancestors 'none'")
		if err := page.Execute(w, map[string]string{"API": api, "PublicKey": publicKey}); err != nil {
			log.Print(err)
		}
	})
	// POST /pay {"token": "ctok_...", "order": "..."}: charge the token.
	mux.HandleFunc("POST /pay", func(w http.ResponseWriter, r *http.Request) {
		var in struct{ Token, Order string }
		if err := json.NewDecoder(io.LimitReader(r.Body, 4096)).Decode(&in); err != nil || !strings.HasPrefix(in.Token, "ctok_") {
			http.Error(w, `{"error":"send a ctok_ token"}`, http.StatusBadRequest)
			return
		}
		body, _ := json.Marshal(map[string]any{
			"amount": 2000, "currency": "usd", "payment_method": "card",
			"card": map[string]string{"token": in.Token}, "description": "Order " + in.Order,
		})
		req, _ := http.NewRequestWithContext(r.Context(), http.MethodPost, api+"/v1/charges", bytes.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+secretKey)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Idempotency-Key", "checkout-"+in.Token) // one charge per token, even if retried
		res, err := client.Do(req)
		if err != nil {
			http.Error(w, `{"error":"the gateway did not answer"}`, http.StatusBadGateway)
			return
		}
		defer res.Body.Close()
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(res.StatusCode)
		_, _ = io.Copy(w, res.Body)
	})
	fmt.Printf("checkout on http://%s (gateway %s)\n", addr, api)
	log.Fatal(http.ListenAndServe(addr, mux))
}

func env(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}
