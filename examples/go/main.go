// Command example charges a card through the Go client generated from
// Gatehouse's OpenAPI description (package gatehouse), safely retried under an
// Idempotency-Key, then receives the charge's webhook and verifies its
// signature before trusting it.
//
//	GATEHOUSE_API=http://127.0.0.1:8080 GATEHOUSE_SECRET_KEY=sk_test_... \
//	GATEHOUSE_WEBHOOK_SECRET=whsec_... go run .
//
// The webhook secret is the one given when an endpoint for
// http://127.0.0.1:4242/webhooks (LISTEN_ADDR) was registered; README.md says how.
package main

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/gatehouse-pay/gatehouse/examples/go/gatehouse"
)

func main() {
	base := env("GATEHOUSE_API", "http://127.0.0.1:8080")
	secretKey, webhookSecret := env("GATEHOUSE_SECRET_KEY", ""), env("GATEHOUSE_WEBHOOK_SECRET", "")
	if secretKey == "" || webhookSecret == "" {
		log.Fatal("set GATEHOUSE_SECRET_KEY (sk_test_...) and GATEHOUSE_WEBHOOK_SECRET (whsec_...)")
	}
	client, err := gatehouse.NewClientWithResponses(base,
		gatehouse.WithRequestEditorFn(func(_ context.Context, req *http.Request) error {
			req.Header.Set("Authorization", "Bearer "+secretKey)
			return nil
		}))
	if err != nil {
		log.Fatal(err)
	}

	// Receive webhooks first, so that none is missed.
	events := make(chan gatehouse.ChargeEvent, 16)
	go serveWebhooks(env("LISTEN_ADDR", "127.0.0.1:4242"), webhookSecret, events)

	// One Idempotency-Key per payment: sending the request again (after a
	// timeout, say) returns the same charge instead of charging twice.
	var card gatehouse.CreateChargeRequest_Card
	if err := card.FromCardDetails(gatehouse.CardDetails{Number: "4242424242424242", ExpMonth: 12, ExpYear: 2030, Cvc: "123"}); err != nil {
		log.Fatal(err)
	}
	description := "Order 1042"
	req := gatehouse.CreateChargeJSONRequestBody{Amount: 2000, Currency: "usd", PaymentMethod: gatehouse.CreateChargeRequestPaymentMethodCard, Card: card, Description: &description}
	params := &gatehouse.CreateChargeParams{IdempotencyKey: ptr(rand.Text())}
	var charge *gatehouse.NewCharge
	for attempt := 1; attempt <= 2; attempt++ {
		resp, err := client.CreateChargeWithResponse(context.Background(), params, req)
		if err != nil {
			log.Fatalf("create charge: %v", err) // safe to send again with the same key
		}
		if resp.JSON201 == nil {
			log.Fatalf("create charge: %d %s", resp.StatusCode(), resp.Body)
		}
		replayed := resp.Headers201.IdempotentReplayed != nil && *resp.Headers201.IdempotentReplayed == "true"
		fmt.Printf("charge %s, status %s (attempt %d, replayed %t)\n", resp.JSON201.Id, resp.JSON201.Status, attempt, replayed)
		if charge != nil && resp.JSON201.Id != charge.Id {
			log.Fatalf("the same Idempotency-Key gave two charges")
		}
		charge = resp.JSON201
	}

	// The worker captures the charge and Gatehouse sends charge.captured.
	timeout := time.After(60 * time.Second)
	for {
		select {
		case e := <-events:
			if e.EventType == gatehouse.ChargeEventEventTypeChargeCaptured && e.Data.Charge.Id == charge.Id {
				fmt.Printf("verified charge.captured for charge %s: %d %s captured\n", charge.Id, e.Data.Charge.AmountCaptured, e.Data.Charge.Currency)
				return
			}
		case <-timeout:
			log.Fatalf("no charge.captured for %s within 60s: is an endpoint registered for this address?", charge.Id)
		}
	}
}

// serveWebhooks receives deliveries on addr/webhooks, refuses any whose
// signature does not verify, and passes on the charge events.
func serveWebhooks(addr, secret string, out chan<- gatehouse.ChargeEvent) {
	http.HandleFunc("POST /webhooks", func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, 1<<20)) // the raw bytes, as signed
		if err != nil {
			http.Error(w, "cannot read body", http.StatusBadRequest)
			return
		}
		if err := verify(secret, r.Header, body, time.Now()); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		var event gatehouse.Event
		if err := json.Unmarshal(body, &event); err != nil {
			http.Error(w, "invalid event", http.StatusBadRequest)
			return
		}
		// The discriminator, event_type, says which kind of event it is.
		v, err := event.ValueByDiscriminator()
		switch e := v.(type) {
		case gatehouse.ChargeEvent:
			fmt.Printf("webhook %s for charge %s\n", e.EventType, e.Data.Charge.Id)
			out <- e
		case gatehouse.RefundEvent:
			fmt.Printf("webhook %s for refund %s\n", e.EventType, e.Data.Refund.Id)
		default:
			fmt.Printf("webhook of an unknown event type: %v\n", err) // a newer type: answer 200 all the same
		}
		w.WriteHeader(http.StatusOK) // answer at once; do slow work elsewhere
	})
	log.Fatal(http.ListenAndServe(addr, nil))
}

// verify checks the Standard Webhooks signature: an HMAC-SHA256 of
// "webhook-id.webhook-timestamp.body", keyed with the secret after "whsec_".
func verify(secret string, h http.Header, body []byte, now time.Time) error {
	id, ts := h.Get("webhook-id"), h.Get("webhook-timestamp")
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil || id == "" {
		return errors.New("missing webhook-id or webhook-timestamp")
	}
	if d := now.Sub(time.Unix(sec, 0)); d > 5*time.Minute || d < -5*time.Minute {
		return errors.New("webhook-timestamp too far from now") // a replay
	}
	key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(secret, "whsec_"))
	if err != nil {
		return errors.New("malformed webhook secret")
	}
	mac := hmac.New(sha256.New, key)
	fmt.Fprintf(mac, "%s.%s.", id, ts)
	mac.Write(body)
	want := "v1," + base64.StdEncoding.EncodeToString(mac.Sum(nil))
	for _, got := range strings.Fields(h.Get("webhook-signature")) { // two after a secret rotation
		if hmac.Equal([]byte(got), []byte(want)) {
			return nil
		}
	}
	return errors.New("no valid signature")
}

func env(name, fallback string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return fallback
}

func ptr[T any](v T) *T { return &v }
