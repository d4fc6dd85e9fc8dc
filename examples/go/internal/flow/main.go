// Command flow drives the whole Gatehouse API through the generated Go client
// (package gatehouse) and nothing else: sign in, an API key, a webhook
// endpoint, a charge until it is captured, a refund, the lists and gets of
// charges, refunds and events, deleting the endpoint, and revoking the key,
// after which the key is refused. It is not an example to copy:
// internal/e2e/sdk_test.go runs it against the real binaries, so that a change
// to api/openapi.yaml that breaks generated clients breaks the build.
//
// Each step prints "ok STEP DETAIL"; the first unexpected answer prints
// "FAIL STEP: ..." to stderr and exits 1. Settings: GATEHOUSE_API,
// GATEHOUSE_EMAIL, GATEHOUSE_PASSWORD and GATEHOUSE_WEBHOOK_URL (the
// endpoint to register).
package main

import (
	"context"
	"crypto/rand"
	"fmt"
	"net/http"
	"os"
	"strings"
	"time"

	openapi_types "github.com/oapi-codegen/runtime/types"

	"github.com/gatehouse-pay/gatehouse/examples/go/gatehouse"
)

// fail reports step as failed and exits.
func fail(step, format string, args ...any) {
	fmt.Fprintf(os.Stderr, "FAIL %s: %s\n", step, fmt.Sprintf(format, args...))
	os.Exit(1)
}

// must fails step unless ok.
func must(step string, ok bool, format string, args ...any) {
	if !ok {
		fail(step, format, args...)
	}
}

// answer is what every generated response has.
type answer interface {
	StatusCode() int
}

// check fails step unless the call worked and answered want. The body is
// shown on a mismatch: it is an error body, never one with a secret.
func check(step string, r answer, body []byte, err error, want int) {
	if err != nil {
		fail(step, "%v", err)
	}
	if got := r.StatusCode(); got != want {
		fail(step, "status %d, want %d: %s", got, want, body)
	}
}

// bearer authenticates each request with token.
func bearer(token string) gatehouse.ClientOption {
	return gatehouse.WithRequestEditorFn(func(_ context.Context, req *http.Request) error {
		req.Header.Set("Authorization", "Bearer "+token)
		return nil
	})
}

func client(base string, opts ...gatehouse.ClientOption) *gatehouse.ClientWithResponses {
	c, err := gatehouse.NewClientWithResponses(base, append(opts, gatehouse.WithHTTPClient(&http.Client{Timeout: 15 * time.Second}))...)
	if err != nil {
		fail("client", "%v", err)
	}
	return c
}

// eventually calls fn every 100 ms until it returns true, for at most 30 s.
func eventually(step string, fn func() bool) {
	for deadline := time.Now().Add(30 * time.Second); !fn(); time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			fail(step, "not done after 30s")
		}
	}
}

func main() {
	ctx := context.Background()
	base, email, password, hook := os.Getenv("GATEHOUSE_API"), os.Getenv("GATEHOUSE_EMAIL"), os.Getenv("GATEHOUSE_PASSWORD"), os.Getenv("GATEHOUSE_WEBHOOK_URL")
	must("settings", base != "" && email != "" && password != "" && hook != "",
		"GATEHOUSE_API, GATEHOUSE_EMAIL, GATEHOUSE_PASSWORD and GATEHOUSE_WEBHOOK_URL are required")

	// Sign in; the session token manages API keys.
	anon := client(base)
	login, err := anon.LoginWithResponse(ctx, nil, gatehouse.LoginJSONRequestBody{Email: openapi_types.Email(email), Password: password})
	check("login", login, login.Body, err, http.StatusOK)
	// A member with two-factor sign-in on gets 401 mfa_required with a
	// challenge for POST /v1/auth/mfa instead; this account has it off.
	session := login.JSON200
	must("login", session.TokenType == gatehouse.Bearer && session.Token != "" &&
		strings.EqualFold(string(session.Merchant.Email), email), "unexpected session for %s", session.Merchant.Email)
	fmt.Printf("ok login merchant %s\n", session.Merchant.Id)
	dashboard := client(base, bearer(session.Token))

	name := "sdk flow"
	created, err := dashboard.CreateApiKeyWithResponse(ctx, nil, gatehouse.CreateApiKeyJSONRequestBody{Name: &name})
	check("create_key", created, created.Body, err, http.StatusCreated)
	key := created.JSON201
	must("create_key", key.SecretKey != nil && strings.HasPrefix(*key.SecretKey, "sk_test_") &&
		key.RevokedAt == nil && strings.HasPrefix(key.Id, "key_") && key.Name == name,
		"unexpected key %s (secret present: %t)", key.Id, key.SecretKey != nil)
	fmt.Printf("ok create_key %s\n", key.Id)

	keys, err := dashboard.ListApiKeysWithResponse(ctx, nil)
	check("list_keys", keys, keys.Body, err, http.StatusOK)
	must("list_keys", contains(keys.JSON200.Data, func(k gatehouse.ApiKey) bool { return k.Id == key.Id }), "%s is not listed", key.Id)
	fmt.Printf("ok list_keys %d keys\n", len(keys.JSON200.Data))

	api := client(base, bearer(*key.SecretKey))

	// A webhook endpoint, and the list that holds it.
	description := "sdk flow"
	ep, err := api.CreateWebhookEndpointWithResponse(ctx, nil, gatehouse.CreateWebhookEndpointJSONRequestBody{
		Url:         hook,
		Events:      gatehouse.WebhookEventTypes{gatehouse.EventTypeChargeCaptured, gatehouse.EventTypeRefundSucceeded},
		Description: &description,
	})
	check("create_endpoint", ep, ep.Body, err, http.StatusCreated)
	endpoint := ep.JSON201.WebhookEndpoint
	must("create_endpoint", strings.HasPrefix(ep.JSON201.WebhookSecret, "whsec_") &&
		endpoint.Status == gatehouse.Enabled && endpoint.DisabledReason == nil && endpoint.Url == hook,
		"unexpected endpoint %s", endpoint.Id)
	fmt.Printf("ok create_endpoint %s\n", endpoint.Id)

	endpoints, err := api.ListWebhookEndpointsWithResponse(ctx, nil)
	check("list_endpoints", endpoints, endpoints.Body, err, http.StatusOK)
	must("list_endpoints", contains(endpoints.JSON200.Data, func(e gatehouse.WebhookEndpoint) bool { return e.Id == endpoint.Id }),
		"%s is not listed", endpoint.Id)
	fmt.Printf("ok list_endpoints %d endpoints\n", len(endpoints.JSON200.Data))

	// A charge, sent twice under one Idempotency-Key: one charge.
	var card gatehouse.CreateChargeRequest_Card
	if err := card.FromCardDetails(gatehouse.CardDetails{Number: "4242424242424242", ExpMonth: 12, ExpYear: 2030, Cvc: "123"}); err != nil {
		fail("create_charge", "%v", err)
	}
	chargeReq := gatehouse.CreateChargeJSONRequestBody{Amount: 2000, Currency: "usd", PaymentMethod: gatehouse.CreateChargeRequestPaymentMethodCard, Card: card}
	idem := rand.Text()
	first, err := api.CreateChargeWithResponse(ctx, &gatehouse.CreateChargeParams{IdempotencyKey: &idem}, chargeReq)
	check("create_charge", first, first.Body, err, http.StatusCreated)
	charge := first.JSON201
	must("create_charge", charge.Status == gatehouse.NewChargeStatusCreated && charge.Amount == 2000 && charge.Currency == "USD" &&
		charge.Card.Last4 != nil && *charge.Card.Last4 == "4242", "unexpected charge %s: status %s", charge.Id, charge.Status)
	fmt.Printf("ok create_charge %s\n", charge.Id)

	again, err := api.CreateChargeWithResponse(ctx, &gatehouse.CreateChargeParams{IdempotencyKey: &idem}, chargeReq)
	check("replay_charge", again, again.Body, err, http.StatusCreated)
	must("replay_charge", again.JSON201.Id == charge.Id && again.Headers201.IdempotentReplayed != nil && *again.Headers201.IdempotentReplayed == "true",
		"a replay answered charge %s, Idempotent-Replayed %v", again.JSON201.Id, again.Headers201.IdempotentReplayed)
	fmt.Printf("ok replay_charge %s\n", again.JSON201.Id)

	var captured *gatehouse.Charge
	eventually("captured", func() bool {
		got, err := api.GetChargeWithResponse(ctx, charge.Id, nil)
		check("captured", got, got.Body, err, http.StatusOK)
		must("captured", got.JSON200.Status != gatehouse.ChargeStatusFailed, "the charge failed: %v", got.JSON200.FailureCode)
		captured = got.JSON200
		return captured.Status == gatehouse.ChargeStatusCaptured
	})
	must("captured", captured.AmountCaptured == 2000, "amount_captured %d", captured.AmountCaptured)
	fmt.Printf("ok captured %s\n", captured.Id)

	// A partial refund, until the provider settles it.
	refundAmount, reason := 500, gatehouse.CreateRefundRequestReasonRequestedByCustomer
	rf, err := api.CreateRefundWithResponse(ctx, nil, gatehouse.CreateRefundJSONRequestBody{Charge: charge.Id, Amount: &refundAmount, Reason: &reason})
	check("create_refund", rf, rf.Body, err, http.StatusCreated)
	refund := rf.JSON201
	must("create_refund", refund.Status == gatehouse.NewRefundStatusPending && refund.Amount == 500 && refund.Charge == charge.Id &&
		refund.Reason != nil && string(*refund.Reason) == string(reason), "unexpected refund %s: status %s", refund.Id, refund.Status)
	fmt.Printf("ok create_refund %s\n", refund.Id)
	eventually("refund_succeeded", func() bool {
		got, err := api.GetRefundWithResponse(ctx, refund.Id, nil)
		check("refund_succeeded", got, got.Body, err, http.StatusOK)
		must("refund_succeeded", got.JSON200.Status != gatehouse.RefundStatusFailed, "the refund failed: %v", got.JSON200.FailureCode)
		return got.JSON200.Status == gatehouse.RefundStatusSucceeded
	})
	fmt.Printf("ok refund_succeeded %s\n", refund.Id)

	// Lists and gets.
	limit := gatehouse.Limit(10)
	charges, err := api.ListChargesWithResponse(ctx, &gatehouse.ListChargesParams{Limit: &limit})
	check("list_charges", charges, charges.Body, err, http.StatusOK)
	must("list_charges", contains(charges.JSON200.Data, func(c gatehouse.Charge) bool { return c.Id == charge.Id && c.AmountRefunded == 500 }),
		"%s with amount_refunded 500 is not listed", charge.Id)
	fmt.Printf("ok list_charges %d charges\n", len(charges.JSON200.Data))
	gotCharge, err := api.GetChargeWithResponse(ctx, charge.Id, nil)
	check("get_charge", gotCharge, gotCharge.Body, err, http.StatusOK)
	must("get_charge", gotCharge.JSON200.Id == charge.Id, "got charge %s", gotCharge.JSON200.Id)
	fmt.Printf("ok get_charge %s\n", gotCharge.JSON200.Id)

	refunds, err := api.ListRefundsWithResponse(ctx, &gatehouse.ListRefundsParams{Charge: &charge.Id})
	check("list_refunds", refunds, refunds.Body, err, http.StatusOK)
	must("list_refunds", contains(refunds.JSON200.Data, func(r gatehouse.Refund) bool { return r.Id == refund.Id }), "%s is not listed", refund.Id)
	fmt.Printf("ok list_refunds %d refunds\n", len(refunds.JSON200.Data))
	gotRefund, err := api.GetRefundWithResponse(ctx, refund.Id, nil)
	check("get_refund", gotRefund, gotRefund.Body, err, http.StatusOK)
	must("get_refund", gotRefund.JSON200.Id == refund.Id && gotRefund.JSON200.Status == gatehouse.RefundStatusSucceeded, "got refund %s", gotRefund.JSON200.Id)
	fmt.Printf("ok get_refund %s\n", gotRefund.JSON200.Id)

	// Events: the discriminator tells a charge event from a refund event.
	var capturedEvent, refundEvent *openapi_types.UUID
	eventually("list_events", func() bool {
		all := gatehouse.Limit(100)
		events, err := api.ListEventsWithResponse(ctx, &gatehouse.ListEventsParams{Limit: &all})
		check("list_events", events, events.Body, err, http.StatusOK)
		for _, e := range events.JSON200.Data {
			v, err := e.ValueByDiscriminator()
			if err != nil {
				fail("list_events", "%v", err)
			}
			switch ev := v.(type) {
			case gatehouse.ChargeEvent:
				if ev.EventType == gatehouse.ChargeEventEventTypeChargeCaptured && ev.Data.Charge.Id == charge.Id {
					capturedEvent = &ev.Id
				}
			case gatehouse.RefundEvent:
				if ev.EventType == gatehouse.RefundEventEventTypeRefundSucceeded && ev.Data.Refund.Id == refund.Id {
					must("list_events", ev.Data.Charge.Id == charge.Id, "refund event %s holds charge %s", ev.Id, ev.Data.Charge.Id)
					refundEvent = &ev.Id
				}
			default:
				fail("list_events", "event of type %T", v)
			}
		}
		return capturedEvent != nil && refundEvent != nil
	})
	fmt.Printf("ok list_events charge.captured %s, refund.succeeded %s\n", *capturedEvent, *refundEvent)
	gotEvent, err := api.GetEventWithResponse(ctx, *refundEvent, nil)
	check("get_event", gotEvent, gotEvent.Body, err, http.StatusOK)
	ev, err := gotEvent.JSON200.AsRefundEvent()
	must("get_event", err == nil && ev.Id == *refundEvent && ev.EventType == gatehouse.RefundEventEventTypeRefundSucceeded &&
		ev.Data.Refund.Amount == 500, "got event %s %s (%v)", ev.Id, ev.EventType, err)
	fmt.Printf("ok get_event %s %s\n", ev.Id, ev.EventType)

	// Delete the endpoint; it is gone.
	del, err := api.DeleteWebhookEndpointWithResponse(ctx, endpoint.Id, nil)
	check("delete_endpoint", del, del.Body, err, http.StatusOK)
	must("delete_endpoint", del.JSON200.Id == endpoint.Id && del.JSON200.Deleted == gatehouse.DeletedWebhookEndpointDeletedTrue, "unexpected answer %s", del.Body)
	gone, err := api.GetWebhookEndpointWithResponse(ctx, endpoint.Id, nil)
	check("delete_endpoint", gone, gone.Body, err, http.StatusNotFound)
	must("delete_endpoint", gone.JSON404.Error.Code == gatehouse.NotFoundErrorErrorCodeNotFound, "code %s", gone.JSON404.Error.Code)
	fmt.Printf("ok delete_endpoint %s\n", endpoint.Id)

	// The key revokes itself: it is refused from then on.
	revoked, err := api.RevokeApiKeyWithResponse(ctx, key.Id, nil)
	check("revoke_key", revoked, revoked.Body, err, http.StatusOK)
	must("revoke_key", revoked.JSON200.Id == key.Id && !revoked.JSON200.RevokedAt.IsZero(), "unexpected answer for %s", revoked.JSON200.Id)
	fmt.Printf("ok revoke_key %s\n", key.Id)
	refused, err := api.GetChargeWithResponse(ctx, charge.Id, nil)
	check("revoked_refused", refused, refused.Body, err, http.StatusUnauthorized)
	must("revoked_refused", refused.JSON401.Error.Code == gatehouse.AuthenticationErrorErrorCodeTokenRevoked, "code %s", refused.JSON401.Error.Code)
	fmt.Printf("ok revoked_refused %s\n", refused.JSON401.Error.Code)

	fmt.Println("ok done")
}

func contains[T any](items []T, match func(T) bool) bool {
	for _, it := range items {
		if match(it) {
			return true
		}
	}
	return false
}
