package httpapi_test

import (
	"encoding/hex"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stripe/stripe-go/v84/webhook"
)

// stripeWebhookSecret is the signing secret of a Stripe connector's
// webhook endpoint in the tests.
const stripeWebhookSecret = "whsec_test_NotificationSecretNeverShown"

// stripeSigned returns the Stripe-Signature header of body signed at at.
func stripeSigned(body, secret string, at time.Time) []string {
	sig := webhook.ComputeSignature(at, []byte(body), secret)
	return []string{"Stripe-Signature", fmt.Sprintf("t=%d,v1=%s", at.Unix(), hex.EncodeToString(sig))}
}

// stripeEvent is a Stripe event about PaymentIntent pi.
func stripeEvent(id, typ, pi string) string {
	return fmt.Sprintf(`{"id":%q,"object":"event","type":%q,"data":{"object":{"id":%q,"object":"payment_intent","status":"succeeded"}}}`, id, typ, pi)
}

// api/openapi.yaml, receiveProviderNotification and
// listConnectorNotifications: a Stripe connector's notifications are taken
// only with a good signature, stored (a resent one as a duplicate) with the
// task that applies them, listed on the connector; bad ones store nothing,
// and an address that keeps sending forgeries is answered 429 while others
// are not.
func TestProviderNotifications(t *testing.T) {
	t.Parallel()
	h := newHarness(t, func(env map[string]string) {
		paymentsEnv(env)
		env["RATE_LIMIT_NOTIFICATION_FAILURES"] = "5/1m"
	})
	a := h.account("notify@example.com")
	auth := bearer(a.secret)

	conn := h.newConnector(t, a.secret, `{"provider":"stripe","name":"Stripe","credentials":{"secret_key":"sk_test_1","webhook_secret":"`+stripeWebhookSecret+`"}}`)
	id := conn.body["id"].(string)
	path := "/v1/provider_notifications/" + id
	if u, _ := conn.body["notification_url"].(string); !strings.HasSuffix(u, path) || !strings.HasPrefix(u, "http") {
		t.Fatalf("notification_url of a stripe connector: %s", conn.raw)
	}
	if strings.Contains(string(conn.raw), stripeWebhookSecret) {
		t.Fatalf("the answer carries the webhook secret: %s", conn.raw)
	}
	sandbox := h.newConnector(t, a.secret, `{"provider":"sandbox","name":"Rehearsal"}`)
	if _, ok := sandbox.body["notification_url"]; ok {
		t.Errorf("a sandbox connector has a notification_url: %s", sandbox.raw)
	}
	stored := func() int {
		return h.count(t, `SELECT count(*) FROM provider_notifications WHERE connector_id = $1`, id)
	}

	ev := stripeEvent("evt_1", "payment_intent.succeeded", "pi_unknown")
	r := h.do("POST", path, ev, stripeSigned(ev, stripeWebhookSecret, time.Now())...)
	want(t, r, 200, "")
	if r.body["received"] != true {
		t.Fatalf("acknowledgement: %s", r.raw)
	}
	if n := h.count(t, `SELECT count(*) FROM provider_notifications n JOIN outbox o ON o.task_id = 'notification:apply:' || n.id
		WHERE n.connector_id = $1 AND n.outcome = 'received'`, id); n != 1 {
		t.Fatalf("stored and queued for the worker: %d, want 1", n)
	}
	// Sent again (Stripe resends until acknowledged): acknowledged, a duplicate.
	want(t, h.do("POST", path, ev, stripeSigned(ev, stripeWebhookSecret, time.Now())...), 200, "")
	if n := h.count(t, `SELECT count(*) FROM provider_notifications WHERE connector_id = $1 AND outcome = 'duplicate'`, id); n != 1 {
		t.Fatalf("the resent notification: %d duplicates, want 1", n)
	}
	// A type the gateway does not act on is stored and acknowledged too.
	other := `{"id":"evt_2","object":"event","type":"customer.created","data":{"object":{"id":"cus_1","object":"customer"}}}`
	want(t, h.do("POST", path, other, stripeSigned(other, stripeWebhookSecret, time.Now())...), 200, "")
	if n := h.count(t, `SELECT count(*) FROM provider_notifications n WHERE n.provider_event_id = 'evt_2' AND n.outcome = 'ignored'
		AND n.processed_at IS NOT NULL AND NOT EXISTS (SELECT 1 FROM outbox o WHERE o.task_id = 'notification:apply:' || n.id)`); n != 1 {
		t.Fatalf("a type nothing acts on: %d stored as ignored without a task, want 1", n)
	}
	// A body above the API's usual 64 KiB, below 1 MiB, is taken.
	big := `{"id":"evt_3","object":"event","type":"charge.updated","data":{"object":{"id":"ch_1","object":"charge","payment_intent":"pi_x","description":"` +
		strings.Repeat("x", 200<<10) + `"}}}`
	want(t, h.do("POST", path, big, stripeSigned(big, stripeWebhookSecret, time.Now())...), 200, "")
	if n := stored(); n != 4 {
		t.Fatalf("stored %d notifications, want 4", n)
	}

	list := h.do("GET", "/v1/connectors/"+id+"/notifications", "", auth...)
	want(t, list, 200, "")
	data := list.body["data"].([]any)
	if len(data) != 4 || obj(data[0])["provider_event_id"] != "evt_3" || obj(data[3])["provider_event_id"] != "evt_1" ||
		obj(data[2])["outcome"] != "duplicate" || obj(data[3])["provider"] != "stripe" || obj(data[3])["type"] != "payment_intent.succeeded" {
		t.Fatalf("list: %s", list.raw)
	}
	if strings.Contains(string(list.raw), "pi_unknown") {
		t.Errorf("the list carries the notifications' bodies: %s", list.raw)
	}
	page := h.do("GET", "/v1/connectors/"+id+"/notifications?limit=1&starting_after="+obj(data[0])["id"].(string), "", auth...)
	if got := idsOf(page); len(got) != 1 || got[0] != obj(data[1])["id"] || page.body["has_more"] != true {
		t.Fatalf("second page: %s", page.raw)
	}
	b := h.account("notify-other@example.com")
	want(t, h.do("GET", "/v1/connectors/"+id+"/notifications", "", bearer(b.secret)...), 404, "not_found")
	want(t, h.do("GET", "/v1/connectors/conn_x/notifications", "", auth...), 404, "not_found")

	// Refused, and nothing stored: no signature, a wrong secret, a changed
	// body, a signature older than five minutes, a sandbox connector, an
	// unknown one, a body above 1 MiB.
	before := stored()
	forger := clientFrom(t, "127.0.0.91")
	ev4 := stripeEvent("evt_4", "payment_intent.succeeded", "pi_1")
	for _, c := range []struct {
		name, path, body string
		headers          []string
		status           int
		code             string
	}{
		{"no signature", path, ev4, nil, 401, "missing_authorization"},
		{"wrong secret", path, ev4, stripeSigned(ev4, "whsec_other", time.Now()), 401, "invalid_credentials"},
		{"changed body", path, ev4, stripeSigned(stripeEvent("evt_4", "payment_intent.succeeded", "pi_2"), stripeWebhookSecret, time.Now()), 401, "invalid_credentials"},
		{"old signature", path, ev4, stripeSigned(ev4, stripeWebhookSecret, time.Now().Add(-6*time.Minute)), 401, "invalid_credentials"},
		{"sandbox connector", "/v1/provider_notifications/" + sandbox.body["id"].(string), ev4, stripeSigned(ev4, stripeWebhookSecret, time.Now()), 404, "not_found"},
		{"unknown connector", "/v1/provider_notifications/conn_00000000000000000000000000", ev4, stripeSigned(ev4, stripeWebhookSecret, time.Now()), 404, "not_found"},
	} {
		want(t, h.doWith(forger, "POST", c.path, c.body, c.headers...), c.status, c.code)
	}
	huge := `{"id":"evt_5","object":"event","type":"charge.updated","data":{"object":{"description":"` + strings.Repeat("x", 1<<20) + `"}}}`
	want(t, h.do("POST", path, huge, stripeSigned(huge, stripeWebhookSecret, time.Now())...), 413, "payload_too_large")
	if n := stored(); n != before {
		t.Fatalf("refused notifications stored: %d, want %d", n, before)
	}

	// The forger's address has used 3 of its 5 refusals; two more, and it
	// is answered 429, even with a good signature, while the provider's
	// own notifications from another address go on.
	for range 2 {
		want(t, h.doWith(forger, "POST", path, ev4, stripeSigned(ev4, "whsec_other", time.Now())...), 401, "invalid_credentials")
	}
	limited := h.doWith(forger, "POST", path, ev4, stripeSigned(ev4, "whsec_other", time.Now())...)
	want(t, limited, 429, "rate_limited")
	if limited.header.Get("Retry-After") == "" {
		t.Errorf("429 without Retry-After")
	}
	want(t, h.doWith(forger, "POST", path, ev4, stripeSigned(ev4, stripeWebhookSecret, time.Now())...), 429, "rate_limited")
	want(t, h.do("POST", path, ev4, stripeSigned(ev4, stripeWebhookSecret, time.Now())...), 200, "")
	if n := stored(); n != before+1 {
		t.Fatalf("after the flood: %d stored, want %d", n, before+1)
	}

	// The connector's dashboard page lists them, newest first; a sandbox
	// connector's has no such list.
	d := h.dashClient(t)
	d.signIn("notify@example.com", "correct horse battery")
	dash := d.get("/dashboard/connectors/" + id)
	if dash.status != 200 || !strings.Contains(dash.body, `id="notification-url"`) || !strings.Contains(dash.body, path) ||
		strings.Count(dash.body, `data-notification=`) != 5 || !strings.Contains(dash.body, `data-outcome="duplicate"`) ||
		strings.Index(dash.body, "evt_4") > strings.Index(dash.body, "evt_1") {
		t.Fatalf("the connector's page: %d\n%.4000s", dash.status, dash.body)
	}
	if strings.Contains(dash.body, stripeWebhookSecret) {
		t.Errorf("the connector's page shows the webhook secret")
	}
	if p := d.get("/dashboard/connectors/" + sandbox.body["id"].(string)); p.status != 200 || strings.Contains(p.body, `id="notifications"`) {
		t.Errorf("a sandbox connector's page: %d, lists notifications: %v", p.status, strings.Contains(p.body, `id="notifications"`))
	}
}
