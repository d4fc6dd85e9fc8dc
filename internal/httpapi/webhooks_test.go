package httpapi_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/gatehouse-pay/gatehouse/internal/events"
	"github.com/gatehouse-pay/gatehouse/internal/jobs"
	"github.com/gatehouse-pay/gatehouse/internal/keyring"
	"github.com/gatehouse-pay/gatehouse/internal/providers/providertest"
	"github.com/gatehouse-pay/gatehouse/internal/store"
	"github.com/gatehouse-pay/gatehouse/internal/webhooks"
)

// strictWebhookURLs runs the API as in production: private networks are not
// allowed as webhook URLs (WEBHOOK_ALLOW_PRIVATE_NETWORKS unset).
func strictWebhookURLs(env map[string]string) {
	paymentsEnv(env)
	delete(env, "WEBHOOK_ALLOW_PRIVATE_NETWORKS")
}

// endpointBody renders a create/update body.
func endpointBody(url string, events ...string) string {
	b, _ := json.Marshal(map[string]any{"url": url, "events": events})
	return string(b)
}

// createEndpoint creates an endpoint and returns its id and secret.
func (h *harness) createEndpoint(t *testing.T, secret, url string, events ...string) (string, string) {
	t.Helper()
	r := h.with(t).do("POST", "/v1/me/webhook_endpoints", endpointBody(url, events...), bearer(secret)...)
	want(t, r, 201, "")
	return obj(r.body["webhook_endpoint"])["id"].(string), r.body["webhook_secret"].(string)
}

// whDeliveries returns the endpoint's deliveries from the database, oldest first.
type whDelivery struct {
	ID, EventID, EventType, Status string
	Attempts, Chain                int
}

func (h *harness) deliveriesOf(t *testing.T, endpointID string) []whDelivery {
	t.Helper()
	rows, err := h.db.Pool.Query(context.Background(), `SELECT id::text, event_id::text, event_type, status, attempts, chain_attempts
		FROM webhook_deliveries WHERE endpoint_id = $1 ORDER BY id`, endpointID)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []whDelivery
	for rows.Next() {
		var d whDelivery
		if err := rows.Scan(&d.ID, &d.EventID, &d.EventType, &d.Status, &d.Attempts, &d.Chain); err != nil {
			t.Fatal(err)
		}
		out = append(out, d)
	}
	if rows.Err() != nil {
		t.Fatal(rows.Err())
	}
	return out
}

// recordingSender is the outbound adapter of an in-process worker: it
// answers every POST with the status the test sets.
type recordingSender struct {
	mu     sync.Mutex
	status int
	sent   []webhooks.Outgoing
}

func (s *recordingSender) Send(_ context.Context, o webhooks.Outgoing) webhooks.Response {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sent = append(s.sent, o)
	return webhooks.Response{StatusCode: s.status, Duration: time.Millisecond}
}

func (s *recordingSender) answer(status int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.status = status
}

func (s *recordingSender) posts() []webhooks.Outgoing {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.sent)
}

// deliverer is the worker's delivery side in-process, with a one-attempt
// schedule so that a failure ends the delivery failed at once.
func (h *harness) deliverer(t *testing.T, s webhooks.Sender) *webhooks.Deliverer {
	t.Helper()
	keys, err := keyring.New(h.cfg.EncryptionKey)
	if err != nil {
		t.Fatal(err)
	}
	return webhooks.NewDeliverer(store.New(h.db.Pool), s, keys, []time.Duration{0}, time.Now,
		slog.New(slog.NewTextHandler(io.Discard, nil)), nil)
}

func deliver(t *testing.T, d *webhooks.Deliverer, id string) {
	t.Helper()
	if err := d.Deliver(context.Background(), id); err != nil {
		t.Fatalf("deliver %s: %v", id, err)
	}
}

func checkSecretShape(t *testing.T, secret string) {
	t.Helper()
	enc, ok := strings.CutPrefix(secret, "whsec_")
	if !ok {
		t.Fatalf("webhook_secret %q: want the whsec_ prefix", secret)
	}
	raw, err := base64.StdEncoding.Strict().DecodeString(enc)
	if err != nil || len(raw) != 32 {
		t.Errorf("webhook_secret %q: want whsec_ + standard base64 of 32 bytes (got %d bytes, %v)", secret, len(raw), err)
	}
}

func TestWebhookEndpoints(t *testing.T) {
	t.Parallel()
	h := newHarness(t, paymentsEnv)
	a := h.account("ada@example.com")

	before := time.Now().UTC().Truncate(time.Millisecond)
	r := h.do("POST", "/v1/me/webhook_endpoints",
		`{"url":"https://hooks.example.com/in?x=1","events":["charge.captured","refund.succeeded"],"description":"orders"}`, bearer(a.secret)...)
	want(t, r, 201, "")
	if cc := r.header.Get("Cache-Control"); cc != "no-store" {
		t.Errorf("create: Cache-Control %q, want no-store", cc)
	}
	secret, _ := r.body["webhook_secret"].(string)
	checkSecretShape(t, secret)
	ep := obj(r.body["webhook_endpoint"])
	id, _ := ep["id"].(string)
	if !strings.HasPrefix(id, "we_") || ep["object"] != "webhook_endpoint" || ep["url"] != "https://hooks.example.com/in?x=1" ||
		ep["active"] != true || ep["merchant_id"] != a.merchantID || ep["environment"] != "sandbox" || ep["description"] != "orders" {
		t.Errorf("create: got %s", r.raw)
	}
	if diff := cmp.Diff([]any{"charge.captured", "refund.succeeded"}, ep["events"]); diff != "" {
		t.Errorf("events (-want +got):\n%s", diff)
	}
	if ca, err := time.Parse(time.RFC3339Nano, fmt.Sprint(ep["created_at"])); err != nil || ca.Before(before) || ca.After(time.Now().Add(time.Second)) {
		t.Errorf("created_at %v: want the time of creation", ep["created_at"])
	}
	secretKeyB64 := strings.TrimPrefix(secret, "whsec_")

	// The secret is never shown again, nor kept in clear.
	seen := []response{}
	noSecret := func(what string, r response) {
		t.Helper()
		seen = append(seen, r)
		if strings.Contains(string(r.raw), secretKeyB64) {
			t.Errorf("%s shows the webhook secret: %s", what, r.raw)
		}
		if what != "rotate_secret" && strings.Contains(string(r.raw), "whsec_") {
			t.Errorf("%s shows a webhook secret: %s", what, r.raw)
		}
	}

	t.Run("get", func(t *testing.T) {
		r := h.with(t).do("GET", "/v1/me/webhook_endpoints/"+id, "", bearer(a.secret)...)
		want(t, r, 200, "")
		noSecret("GET", r)
		if diff := cmp.Diff(ep, r.body); diff != "" {
			t.Errorf("GET differs from the created endpoint (-created +got):\n%s", diff)
		}
	})

	t.Run("list and pagination", func(t *testing.T) {
		all := []string{id} // newest first
		for i := 0; i < 4; i++ {
			other, _ := h.createEndpoint(t, a.secret, fmt.Sprintf("https://hooks.example.com/%d", i), "charge.created")
			all = append([]string{other}, all...)
		}
		list := func(q url.Values) response {
			t.Helper()
			r := h.with(t).do("GET", "/v1/me/webhook_endpoints?"+q.Encode(), "", bearer(a.secret)...)
			want(t, r, 200, "")
			noSecret("list", r)
			if r.body["object"] != "list" {
				t.Errorf("object %v, want list", r.body["object"])
			}
			return r
		}
		for _, c := range []struct {
			name    string
			q       url.Values
			want    []string
			hasMore bool
		}{
			{"all", url.Values{}, all, false},
			{"limit 2", url.Values{"limit": {"2"}}, all[:2], true},
			{"starting_after", url.Values{"limit": {"2"}, "starting_after": {all[1]}}, all[2:4], true},
			{"last page", url.Values{"limit": {"2"}, "starting_after": {all[3]}}, all[4:], false},
			{"ending_before", url.Values{"limit": {"2"}, "ending_before": {all[3]}}, all[1:3], true},
			{"ending_before first page", url.Values{"limit": {"2"}, "ending_before": {all[1]}}, all[:1], false},
		} {
			r := list(c.q)
			if diff := cmp.Diff(c.want, idsOf(r)); diff != "" {
				t.Errorf("%s: ids (-want +got):\n%s", c.name, diff)
			}
			if r.body["has_more"] != c.hasMore {
				t.Errorf("%s: has_more %v, want %v", c.name, r.body["has_more"], c.hasMore)
			}
		}
		for _, q := range []string{"limit=0", "limit=101", "starting_after=nope", "ending_before=" + strings.ToUpper(all[0])} {
			r := h.with(t).do("GET", "/v1/me/webhook_endpoints?"+q, "", bearer(a.secret)...)
			want(t, r, 400, "parameter_invalid")
		}
		// Another merchant sees none of them.
		b := h.account("bob@example.com")
		r := h.with(t).do("GET", "/v1/me/webhook_endpoints?limit=100", "", bearer(b.secret)...)
		want(t, r, 200, "")
		if got := idsOf(r); len(got) != 0 {
			t.Errorf("B lists A's endpoints: %v", got)
		}
	})

	t.Run("patch", func(t *testing.T) {
		patch := func(body string) response {
			t.Helper()
			r := h.with(t).do("PATCH", "/v1/me/webhook_endpoints/"+id, body, bearer(a.secret)...)
			noSecret("PATCH", r)
			return r
		}
		r := patch(`{"events":["charge.failed","charge.created"]}`)
		want(t, r, 200, "")
		if diff := cmp.Diff([]any{"charge.failed", "charge.created"}, r.body["events"]); diff != "" {
			t.Errorf("events after PATCH (-want +got):\n%s", diff)
		}
		if r.body["url"] != "https://hooks.example.com/in?x=1" || r.body["active"] != true || r.body["description"] != "orders" {
			t.Errorf("PATCH of events changed other fields: %s", r.raw)
		}
		r = patch(`{"url":"https://other.example.com/hook"}`)
		want(t, r, 200, "")
		if r.body["url"] != "https://other.example.com/hook" {
			t.Errorf("url after PATCH: %v", r.body["url"])
		}
		r = patch(`{"active":false}`)
		want(t, r, 200, "")
		if r.body["active"] != false {
			t.Errorf("active after PATCH: %v", r.body["active"])
		}
		g := h.with(t).do("GET", "/v1/me/webhook_endpoints/"+id, "", bearer(a.secret)...)
		if g.body["active"] != false || g.body["url"] != "https://other.example.com/hook" {
			t.Errorf("GET after PATCHes: %s", g.raw)
		}
		r = patch(`{"active":true}`)
		want(t, r, 200, "")
		for _, c := range []struct{ body, code, param string }{
			{`{"events":["charge.exploded"]}`, "parameter_invalid", "events"},
			{`{"events":[]}`, "parameter_invalid", "events"},
			{`{"url":"ftp://hooks.example.com/"}`, "parameter_invalid", "url"},
			{`{"url":"https://u:p@hooks.example.com/"}`, "parameter_invalid", "url"},
			{`{"secret":"whsec_AAAA"}`, "parameter_invalid", ""},
			{`{"merchant_id":"mer_x"}`, "parameter_invalid", ""},
		} {
			r := patch(c.body)
			want(t, r, 400, c.code)
			if c.param != "" && r.errField("param") != c.param {
				t.Errorf("PATCH %s: param %q, want %q", c.body, r.errField("param"), c.param)
			}
		}
		if g := h.with(t).do("GET", "/v1/me/webhook_endpoints/"+id, "", bearer(a.secret)...); g.body["url"] != "https://other.example.com/hook" ||
			fmt.Sprint(g.body["events"]) != "[charge.failed charge.created]" {
			t.Errorf("a refused PATCH changed the endpoint: %s", g.raw)
		}
	})

	t.Run("rotate_secret", func(t *testing.T) {
		r := h.with(t).do("POST", "/v1/me/webhook_endpoints/"+id+"/rotate_secret", "", bearer(a.secret)...)
		want(t, r, 200, "")
		if cc := r.header.Get("Cache-Control"); cc != "no-store" {
			t.Errorf("rotate: Cache-Control %q, want no-store", cc)
		}
		fresh, _ := r.body["webhook_secret"].(string)
		checkSecretShape(t, fresh)
		if fresh == secret {
			t.Errorf("rotate_secret returned the old secret")
		}
		noSecret("rotate_secret", r) // the old one is not shown
		if obj(r.body["webhook_endpoint"])["id"] != id {
			t.Errorf("rotate: endpoint %v", r.body["webhook_endpoint"])
		}
		var until time.Time
		if err := h.db.Pool.QueryRow(context.Background(), `SELECT previous_secret_until FROM webhook_endpoints WHERE id = $1`, id).Scan(&until); err != nil {
			t.Fatal(err)
		}
		if d := time.Until(until); d < 23*time.Hour+59*time.Minute || d > 24*time.Hour {
			t.Errorf("previous secret kept for %s, want 24h", d)
		}
		// The new secret is shown once too.
		g := h.with(t).do("GET", "/v1/me/webhook_endpoints/"+id, "", bearer(a.secret)...)
		if strings.Contains(string(g.raw), strings.TrimPrefix(fresh, "whsec_")) {
			t.Errorf("GET after rotation shows the new secret")
		}
		// Neither secret is stored in clear anywhere.
		for _, s := range []string{secret, fresh} {
			var row string
			if err := h.db.Pool.QueryRow(context.Background(), `SELECT w::text FROM webhook_endpoints w WHERE id = $1`, id).Scan(&row); err != nil {
				t.Fatal(err)
			}
			key := strings.TrimPrefix(s, "whsec_")
			raw, _ := base64.StdEncoding.DecodeString(key)
			if strings.Contains(row, key) || strings.Contains(row, fmt.Sprintf("%x", raw)) {
				t.Errorf("webhook_endpoints row holds a secret in clear: %s", row)
			}
			if hits := h.scanDatabase(t, key); len(hits) > 0 {
				t.Errorf("the database holds a webhook secret in clear: %v", hits)
			}
			if hits := h.scanRedis(t, key); len(hits) > 0 {
				t.Errorf("Redis holds a webhook secret: %v", hits)
			}
		}
	})

	t.Run("validation", func(t *testing.T) {
		for _, c := range []struct {
			name, body, code, param string
		}{
			{"unknown event", endpointBody("https://hooks.example.com/", "charge.created", "charge.exploded"), "parameter_invalid", "events"},
			{"event in other case", endpointBody("https://hooks.example.com/", "Charge.Created"), "parameter_invalid", "events"},
			{"empty events", `{"url":"https://hooks.example.com/","events":[]}`, "parameter_invalid", "events"},
			{"missing events", `{"url":"https://hooks.example.com/"}`, "parameter_missing", "events"},
			{"missing url", `{"events":["charge.created"]}`, "parameter_missing", "url"},
			{"empty url", endpointBody("", "charge.created"), "parameter_missing", "url"},
			{"ftp url", endpointBody("ftp://hooks.example.com/in", "charge.created"), "parameter_invalid", "url"},
			{"relative url", endpointBody("/hooks", "charge.created"), "parameter_invalid", "url"},
			{"no scheme", endpointBody("hooks.example.com/in", "charge.created"), "parameter_invalid", "url"},
			{"javascript url", endpointBody("javascript:alert(1)", "charge.created"), "parameter_invalid", "url"},
			{"user and password", endpointBody("https://user:pass@hooks.example.com/in", "charge.created"), "parameter_invalid", "url"},
			{"user only", endpointBody("https://user@hooks.example.com/in", "charge.created"), "parameter_invalid", "url"},
			{"fragment", endpointBody("https://hooks.example.com/in#x", "charge.created"), "parameter_invalid", "url"},
			{"too long", endpointBody("https://hooks.example.com/"+strings.Repeat("a", 2048), "charge.created"), "parameter_invalid", "url"},
			{"url not a string", `{"url":42,"events":["charge.created"]}`, "parameter_invalid", ""},
			{"unknown field", `{"url":"https://hooks.example.com/","events":["charge.created"],"secret":"x"}`, "parameter_invalid", ""},
			{"live environment", `{"url":"https://hooks.example.com/","events":["charge.created"],"environment":"live"}`, "live_mode_disabled", ""},
		} {
			t.Run(c.name, func(t *testing.T) {
				before := h.count(t, `SELECT count(*) FROM webhook_endpoints`)
				r := h.with(t).do("POST", "/v1/me/webhook_endpoints", c.body, bearer(a.secret)...)
				status := 400
				if c.code == "live_mode_disabled" {
					status = 403
				}
				want(t, r, status, c.code)
				if c.param != "" && r.errField("param") != c.param {
					t.Errorf("param %q, want %q (body %s)", r.errField("param"), c.param, r.raw)
				}
				if after := h.count(t, `SELECT count(*) FROM webhook_endpoints`); after != before {
					t.Errorf("a refused create stored an endpoint")
				}
			})
		}
		// Every event name of api/openapi.yaml is accepted.
		all := []string{"charge.created", "charge.captured", "charge.failed", "charge.voided", "charge.refunded", "refund.created", "refund.succeeded"}
		r := h.with(t).do("POST", "/v1/me/webhook_endpoints", endpointBody("http://hooks.example.com/plain-http", all...), bearer(a.secret)...)
		want(t, r, 201, "")
		var got []string
		for _, e := range obj(r.body["webhook_endpoint"])["events"].([]any) {
			got = append(got, fmt.Sprint(e))
		}
		if diff := cmp.Diff(all, got); diff != "" {
			t.Errorf("all seven events (-want +got):\n%s", diff)
		}
	})

	t.Run("delete", func(t *testing.T) {
		r := h.with(t).do("DELETE", "/v1/me/webhook_endpoints/"+id, "", bearer(a.secret)...)
		want(t, r, 200, "")
		noSecret("DELETE", r)
		if diff := cmp.Diff(map[string]any{"id": id, "object": "webhook_endpoint", "deleted": true}, r.body); diff != "" {
			t.Errorf("DELETE body (-want +got):\n%s", diff)
		}
		for _, c := range []struct{ method, path, body string }{
			{"GET", "/v1/me/webhook_endpoints/" + id, ""},
			{"DELETE", "/v1/me/webhook_endpoints/" + id, ""},
			{"PATCH", "/v1/me/webhook_endpoints/" + id, `{"active":true}`},
			{"POST", "/v1/me/webhook_endpoints/" + id + "/rotate_secret", ""},
			{"POST", "/v1/me/webhook_endpoints/" + id + "/test", ""},
			{"GET", "/v1/me/webhook_endpoints/" + id + "/deliveries", ""},
		} {
			r := h.with(t).do(c.method, c.path, c.body, bearer(a.secret)...)
			if r.status != 404 || r.errCode() != "not_found" {
				t.Errorf("%s %s after DELETE: %d %s, want 404 not_found", c.method, c.path, r.status, r.raw)
			}
		}
		l := h.with(t).do("GET", "/v1/me/webhook_endpoints?limit=100", "", bearer(a.secret)...)
		if slices.Contains(idsOf(l), id) {
			t.Errorf("the deleted endpoint is still listed")
		}
	})

	for _, r := range seen {
		if strings.Contains(string(r.raw), secretKeyB64) {
			t.Errorf("an answer after creation shows the secret: %s", r.raw)
		}
	}
	if hits := h.scanDatabase(t, secretKeyB64); len(hits) > 0 {
		t.Errorf("the database holds the webhook secret in clear: %v", hits)
	}
}

// TestWebhookURLsRefusePrivateNetworks: with WEBHOOK_ALLOW_PRIVATE_NETWORKS
// unset (production), URLs at this machine or at private, loopback,
// link-local or metadata addresses are refused (docs/reliability.md I7, B3).
func TestWebhookURLsRefusePrivateNetworks(t *testing.T) {
	t.Parallel()
	h := newHarness(t, strictWebhookURLs)
	if h.cfg.WebhookAllowPrivateNetworks {
		t.Fatal("the strict harness allows private networks")
	}
	a := h.account("ada@example.com")
	id, _ := h.createEndpoint(t, a.secret, "https://hooks.example.com/in", "charge.created")
	refused := []string{
		"http://127.0.0.1/", "http://127.0.0.1:8080/hook", "http://localhost/", "http://LOCALHOST:3000/", "http://localhost./",
		"http://api.localhost/", "http://169.254.169.254/latest/meta-data/", "http://metadata.google.internal/",
		"http://10.0.0.1/", "http://172.16.5.4/", "http://192.168.1.1/", "http://100.64.0.1/", "http://0.0.0.0/",
		"http://[::1]/", "http://[::]/", "http://[fc00::1]/", "http://[fd12:3456::1]/", "http://[fe80::1]/",
		"http://[::ffff:127.0.0.1]/", "http://[::ffff:169.254.169.254]/", "https://127.0.0.2/",
	}
	for _, u := range refused {
		r := h.do("POST", "/v1/me/webhook_endpoints", endpointBody(u, "charge.created"), bearer(a.secret)...)
		if r.status != 400 || r.errCode() != "parameter_invalid" || r.errField("param") != "url" {
			t.Errorf("create with url %s: %d %s, want 400 parameter_invalid param url", u, r.status, r.raw)
		}
		r = h.do("PATCH", "/v1/me/webhook_endpoints/"+id, `{"url":"`+u+`"}`, bearer(a.secret)...)
		if r.status != 400 || r.errField("param") != "url" {
			t.Errorf("PATCH to url %s: %d %s, want 400 param url", u, r.status, r.raw)
		}
	}
	// Numeric host forms that resolvers (inet_aton) read as loopback.
	for _, u := range []string{"http://127.1/", "http://2130706433/", "http://0x7f000001/", "http://017700000001/", "http://0/"} {
		r := h.do("POST", "/v1/me/webhook_endpoints", endpointBody(u, "charge.created"), bearer(a.secret)...)
		if r.status != 400 || r.errField("param") != "url" {
			t.Errorf("create with url %s (loopback in inet_aton form): %d %s, want 400 param url", u, r.status, r.raw)
		}
	}
	for _, u := range []string{"https://hooks.example.com/in", "https://8.8.8.8/hook", "http://[2001:4860:4860::8888]/"} {
		r := h.do("POST", "/v1/me/webhook_endpoints", endpointBody(u, "charge.created"), bearer(a.secret)...)
		want(t, r, 201, "")
	}
	if g := h.do("GET", "/v1/me/webhook_endpoints/"+id, "", bearer(a.secret)...); g.body["url"] != "https://hooks.example.com/in" {
		t.Errorf("a refused PATCH changed the url: %v", g.body["url"])
	}
}

// TestWebhookFanOut: the deliveries of an event are written with it, in the
// same transaction, for every active endpoint subscribed to its type, and
// only for those.
func TestWebhookFanOut(t *testing.T) {
	t.Parallel()
	h := newHarness(t, paymentsEnv)
	a := h.account("ada@example.com")
	b := h.account("bob@example.com")
	w := h.worker(t, &providertest.Fake{})

	created, _ := h.createEndpoint(t, a.secret, "https://hooks.example.com/created", "charge.created")
	failedOnly, _ := h.createEndpoint(t, a.secret, "https://hooks.example.com/failed", "charge.failed")
	both, _ := h.createEndpoint(t, a.secret, "https://hooks.example.com/both", "charge.captured", "charge.created")
	inactive, _ := h.createEndpoint(t, a.secret, "https://hooks.example.com/inactive", "charge.created", "charge.captured")
	want(t, h.do("PATCH", "/v1/me/webhook_endpoints/"+inactive, `{"active":false}`, bearer(a.secret)...), 200, "")
	deleted, _ := h.createEndpoint(t, a.secret, "https://hooks.example.com/deleted", "charge.created", "charge.captured")
	want(t, h.do("DELETE", "/v1/me/webhook_endpoints/"+deleted, "", bearer(a.secret)...), 200, "")
	bobs, _ := h.createEndpoint(t, b.secret, "https://hooks.example.com/bob", "charge.created", "charge.captured")

	charge := h.createCharge(t, a.secret, chargeJSON()).body["id"].(string)
	// Right after the 201, before any worker ran.
	ev := h.eventsOf(t, a.secret, "charge.created")
	if len(ev) != 1 {
		t.Fatalf("charge.created events: %d, want 1", len(ev))
	}
	createdEvent := ev[0]["id"].(string)
	// A disabled endpoint gets its delivery too, failed at once and never
	// sent: it waits for a recover.
	for _, c := range []struct {
		endpoint string
		want     int
		status   string
	}{{created, 1, "pending"}, {both, 1, "pending"}, {failedOnly, 0, ""}, {inactive, 1, "failed"}, {deleted, 0, ""}, {bobs, 0, ""}} {
		ds := h.deliveriesOf(t, c.endpoint)
		if len(ds) != c.want {
			t.Errorf("endpoint %s: %d deliveries after charge.created, want %d: %+v", c.endpoint, len(ds), c.want, ds)
			continue
		}
		for _, d := range ds {
			if d.EventID != createdEvent || d.EventType != "charge.created" || d.Status != c.status || d.Attempts != 0 {
				t.Errorf("endpoint %s: delivery %+v, want %s charge.created of event %s", c.endpoint, d, c.status, createdEvent)
			}
		}
	}
	var outboxOfInactive int
	if err := h.db.Pool.QueryRow(context.Background(), `SELECT count(*) FROM outbox o JOIN webhook_deliveries d ON o.ref_id = d.id
		WHERE d.endpoint_id = $1`, inactive).Scan(&outboxOfInactive); err != nil || outboxOfInactive != 0 {
		t.Errorf("outbox rows for the disabled endpoint's delivery: %d, %v; want none", outboxOfInactive, err)
	}
	// One transaction wrote the charge, its event, the deliveries and the
	// event's one outbox row (webhook:event: the first attempts), and none
	// per delivery.
	var sameTx bool
	err := h.db.Pool.QueryRow(context.Background(), `SELECT bool_and(d.xmin = e.xmin AND d.xmin = c.xmin AND o.xmin = d.xmin) AND count(*) = 2
		FROM webhook_deliveries d JOIN events e ON e.id = d.event_id JOIN charges c ON c.id = $1
		JOIN outbox o ON o.task_id = 'webhook:event:' || d.event_id WHERE d.event_id = $2 AND d.status = 'pending'`, charge, createdEvent).Scan(&sameTx)
	if err != nil {
		t.Fatal(err)
	}
	if !sameTx {
		t.Errorf("the charge, its charge.created event, the 2 deliveries and the event's outbox row were not written by one transaction")
	}
	if n := h.count(t, `SELECT count(*) FROM outbox o JOIN webhook_deliveries d ON o.task_id = 'webhook:deliver:' || d.id WHERE d.event_id = $1`, createdEvent); n != 0 {
		t.Errorf("%d outbox rows of deliveries of the event, want none (the event's task makes the first attempts)", n)
	}
	// The API enqueued the event's one task after commit, on a delivery
	// queue picked by the event's id, and no task per delivery.
	queue := jobs.WebhookQueue(createdEvent, h.cfg.WebhookQueues)
	if n, err := h.rdb.Exists(context.Background(), "asynq:{"+queue+"}:t:webhook:event:"+createdEvent).Result(); err != nil || n != 1 {
		t.Errorf("no asynq task webhook:event:%s in queue %s (%v)", createdEvent, queue, err)
	}
	for _, ep := range []string{created, both} {
		for _, d := range h.deliveriesOf(t, ep) {
			if n, _ := h.rdb.Exists(context.Background(), "asynq:{"+jobs.WebhookQueue(ep, h.cfg.WebhookQueues)+"}:t:webhook:deliver:"+d.ID).Result(); n != 0 {
				t.Errorf("delivery %s has a task of its own before its first attempt", d.ID)
			}
		}
	}
	// The API shows the same.
	r := h.do("GET", "/v1/me/webhook_endpoints/"+created+"/deliveries", "", bearer(a.secret)...)
	want(t, r, 200, "")
	if data := r.body["data"].([]any); len(data) != 1 || obj(data[0])["event_id"] != createdEvent || obj(data[0])["status"] != "pending" ||
		obj(data[0])["endpoint"] != created || obj(data[0])["test"] != false || len(obj(data[0])["attempts"].([]any)) != 0 || obj(data[0])["next_attempt_at"] == nil {
		t.Errorf("deliveries of %s: %s", created, r.raw)
	}

	// Endpoints made after the event do not get it; they get later ones.
	late, _ := h.createEndpoint(t, a.secret, "https://hooks.example.com/late", "charge.created", "charge.captured")
	w.authorize(t, charge) // captured: a charge.captured event
	captured := h.eventsOf(t, a.secret, "charge.captured")
	if len(captured) != 1 {
		t.Fatalf("charge.captured events: %d, want 1", len(captured))
	}
	capturedEvent := captured[0]["id"].(string)
	types := func(ep string) []string {
		var out []string
		for _, d := range h.deliveriesOf(t, ep) {
			out = append(out, d.EventType)
		}
		return out
	}
	for _, c := range []struct {
		endpoint string
		want     []string
	}{
		{created, []string{"charge.created"}},
		{both, []string{"charge.created", "charge.captured"}},
		{failedOnly, nil},
		{inactive, []string{"charge.created", "charge.captured"}}, // both failed, not sent
		{deleted, nil},
		{bobs, nil},
		{late, []string{"charge.captured"}},
	} {
		if diff := cmp.Diff(c.want, types(c.endpoint)); diff != "" {
			t.Errorf("endpoint %s: delivered event types (-want +got):\n%s", c.endpoint, diff)
		}
	}
	for _, d := range h.deliveriesOf(t, late) {
		if d.EventID != capturedEvent {
			t.Errorf("late endpoint: delivery of event %s, want only %s", d.EventID, capturedEvent)
		}
	}
	// The same event has the same id in every endpoint's delivery.
	if n := h.count(t, `SELECT count(DISTINCT event_id) FROM webhook_deliveries WHERE event_type = 'charge.captured'`); n != 1 {
		t.Errorf("charge.captured deliveries name %d event ids, want 1", n)
	}
	// Reactivated, the inactive endpoint gets the next events to send.
	want(t, h.do("PATCH", "/v1/me/webhook_endpoints/"+inactive, `{"active":true}`, bearer(a.secret)...), 200, "")
	h.createCharge(t, a.secret, chargeJSON())
	if diff := cmp.Diff([]string{"charge.created", "charge.captured", "charge.created"}, types(inactive)); diff != "" {
		t.Errorf("reactivated endpoint (-want +got):\n%s", diff)
	}
	if ds := h.deliveriesOf(t, inactive); ds[2].Status != "pending" {
		t.Errorf("the reactivated endpoint's new delivery: %+v, want pending", ds[2])
	}

	// Refund events fan out the same way.
	refundsEP, _ := h.createEndpoint(t, a.secret, "https://hooks.example.com/refunds", "refund.created", "refund.succeeded", "charge.refunded")
	rf := h.do("POST", "/v1/refunds", refundJSON(charge, ""), bearer(a.secret)...)
	want(t, rf, 201, "")
	if diff := cmp.Diff([]string{"refund.created"}, types(refundsEP)); diff != "" {
		t.Errorf("refund endpoint after the refund was created (-want +got):\n%s", diff)
	}
	w.refund(t, rf.body["id"].(string))
	got := types(refundsEP)
	slices.Sort(got)
	if diff := cmp.Diff([]string{"charge.refunded", "refund.created", "refund.succeeded"}, got); diff != "" {
		t.Errorf("refund endpoint after the refund settled (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"charge.created", "charge.created"}, types(created)); diff != "" { // two charges so far
		t.Errorf("charge.created-only endpoint after the refund (-want +got):\n%s", diff)
	}
	if n := h.count(t, `SELECT count(*) FROM webhook_deliveries d LEFT JOIN events e ON e.id = d.event_id WHERE e.id IS NULL AND d.test_body IS NULL`); n != 0 {
		t.Errorf("%d deliveries name no stored event", n)
	}
}

// TestWebhookDeliveryOperations: test deliveries, the delivery log, retry and
// recover, with the worker's delivery side run in-process.
func TestWebhookDeliveryOperations(t *testing.T) {
	t.Parallel()
	h := newHarness(t, paymentsEnv)
	a := h.account("ada@example.com")
	b := h.account("bob@example.com")
	snd := &recordingSender{status: 500}
	d := h.deliverer(t, snd)

	start := time.Now().UTC().Add(-time.Second)
	ep, secret := h.createEndpoint(t, a.secret, "https://hooks.example.com/ops", "charge.created")
	path := "/v1/me/webhook_endpoints/" + ep

	t.Run("test delivery", func(t *testing.T) {
		r := h.with(t).do("POST", path+"/test", "", bearer(a.secret)...)
		want(t, r, 202, "")
		if r.body["test"] != true || r.body["status"] != "pending" || r.body["event_type"] != "charge.created" ||
			r.body["endpoint"] != ep || r.body["object"] != "webhook_delivery" || len(r.body["attempts"].([]any)) != 0 {
			t.Errorf("test delivery: %s", r.raw)
		}
		id, eventID := r.body["id"].(string), r.body["event_id"].(string)
		if n := len(h.eventsOf(t, a.secret, "charge.created")); n != 0 {
			t.Errorf("the test event is listed in /v1/events (%d events)", n)
		}
		snd.answer(200)
		deliver(t, d, id)
		posts := snd.posts()
		if len(posts) != 1 {
			t.Fatalf("POSTs for the test delivery: %d", len(posts))
		}
		o := posts[0]
		var body struct {
			ID        string `json:"id"`
			EventType string `json:"event_type"`
			Data      struct {
				Object string         `json:"object"`
				Charge map[string]any `json:"charge"`
			} `json:"data"`
		}
		if err := json.Unmarshal(o.Body, &body); err != nil {
			t.Fatalf("test body: %v: %s", err, o.Body)
		}
		if o.Headers["X-Service-Test"] != "true" || body.ID != eventID || body.EventType != "charge.created" || body.Data.Object != "charge" ||
			body.Data.Charge["id"] == nil || o.Headers["X-Service-Event-Id"] != eventID {
			t.Errorf("test POST: headers %v body %s", o.Headers, o.Body)
		}
		if !webhooks.VerifyServiceSignature(o.Body, secret, o.Headers["X-Service-Signature"]) {
			t.Errorf("test POST: the signature does not verify with the endpoint's secret")
		}
		l := h.with(t).do("GET", path+"/deliveries?status=succeeded", "", bearer(a.secret)...)
		want(t, l, 200, "")
		data := l.body["data"].([]any)
		if len(data) != 1 || obj(data[0])["id"] != id || obj(data[0])["test"] != true || obj(data[0])["next_attempt_at"] != nil {
			t.Fatalf("succeeded deliveries: %s", l.raw)
		}
		at := obj(obj(data[0])["attempts"].([]any)[0])
		if at["attempt"] != 1.0 || at["status_code"] != 200.0 || at["error"] != nil {
			t.Errorf("attempt log: %v", at)
		}
		// A succeeded delivery cannot be retried.
		rr := h.with(t).do("POST", "/v1/webhook_deliveries/"+id+"/retry", "", bearer(a.secret)...)
		want(t, rr, 409, "invalid_state")
	})

	// Three charge.created deliveries; the receiver fails them all.
	snd.answer(500)
	var ids []string
	for i := 0; i < 3; i++ {
		h.createCharge(t, a.secret, chargeJSON())
	}
	for _, dl := range h.deliveriesOf(t, ep) {
		if dl.EventType == "charge.created" && dl.Status == "pending" {
			ids = append(ids, dl.ID)
		}
	}
	if len(ids) != 3 {
		t.Fatalf("pending charge.created deliveries: %d, want 3", len(ids))
	}

	t.Run("retry of a pending delivery", func(t *testing.T) {
		r := h.with(t).do("POST", "/v1/webhook_deliveries/"+ids[0]+"/retry", "", bearer(a.secret)...)
		want(t, r, 409, "invalid_state")
	})

	for _, id := range ids {
		deliver(t, d, id)
	}

	t.Run("deliveries list and filter", func(t *testing.T) {
		list := func(q string) []any {
			t.Helper()
			r := h.with(t).do("GET", path+"/deliveries?"+q, "", bearer(a.secret)...)
			want(t, r, 200, "")
			return r.body["data"].([]any)
		}
		if n := len(list("")); n != 4 {
			t.Errorf("all deliveries: %d, want 4", n)
		}
		failed := list("status=failed")
		if len(failed) != 3 {
			t.Fatalf("failed deliveries: %d, want 3", len(failed))
		}
		for _, f := range failed {
			f := obj(f)
			at := f["attempts"].([]any)
			if f["status"] != "failed" || f["next_attempt_at"] != nil || len(at) != 1 || obj(at[0])["status_code"] != 500.0 || obj(at[0])["error"] == nil {
				t.Errorf("failed delivery: %v", f)
			}
		}
		if n := len(list("status=pending")); n != 0 {
			t.Errorf("pending deliveries: %d, want 0", n)
		}
		if got := idsOf(response{body: map[string]any{"data": list("limit=2")}}); len(got) != 2 {
			t.Errorf("limit=2: %v", got)
		}
		for _, q := range []string{"status=bogus", "status=FAILED", "limit=0", "starting_after=nope"} {
			r := h.with(t).do("GET", path+"/deliveries?"+q, "", bearer(a.secret)...)
			want(t, r, 400, "parameter_invalid")
		}
		r := h.with(t).do("GET", path+"/deliveries?status=bogus", "", bearer(a.secret)...)
		if r.errField("param") != "status" {
			t.Errorf("status=bogus: param %q, want status", r.errField("param"))
		}
	})

	t.Run("another merchant's ids", func(t *testing.T) {
		for _, c := range []struct{ method, path string }{
			{"GET", path}, {"GET", path + "/deliveries"}, {"POST", "/v1/webhook_deliveries/" + ids[0] + "/retry"},
		} {
			r := h.with(t).do(c.method, c.path, "", bearer(b.secret)...)
			if r.status != 404 || r.errCode() != "not_found" {
				t.Errorf("B: %s %s: %d %s, want 404", c.method, c.path, r.status, r.raw)
			}
		}
		r := h.with(t).do("POST", path+"/recover", `{"since":"2020-01-01T00:00:00Z"}`, bearer(b.secret)...)
		want(t, r, 404, "not_found")
		if n := h.count(t, `SELECT count(*) FROM webhook_deliveries WHERE endpoint_id = $1 AND status = 'failed'`, ep); n != 3 {
			t.Errorf("B's requests changed A's deliveries: %d failed, want 3", n)
		}
	})

	t.Run("retry", func(t *testing.T) {
		r := h.with(t).do("POST", "/v1/webhook_deliveries/"+ids[0]+"/retry", "", bearer(a.secret)...)
		want(t, r, 202, "")
		if r.body["status"] != "pending" || r.body["id"] != ids[0] || len(r.body["attempts"].([]any)) != 1 || r.body["next_attempt_at"] == nil {
			t.Errorf("retry: %s", r.raw)
		}
		if n := h.count(t, `SELECT count(*) FROM outbox WHERE task_id = $1`, "webhook:deliver:"+ids[0]); n != 1 {
			t.Errorf("retry wrote %d outbox rows, want 1", n)
		}
		if n, _ := h.rdb.Exists(context.Background(), "asynq:{"+jobs.WebhookQueue(ep, h.cfg.WebhookQueues)+"}:t:webhook:deliver:"+ids[0]).Result(); n != 1 {
			t.Errorf("retry enqueued no task")
		}
		// A second retry while pending is refused.
		want(t, h.with(t).do("POST", "/v1/webhook_deliveries/"+ids[0]+"/retry", "", bearer(a.secret)...), 409, "invalid_state")
		snd.answer(200)
		deliver(t, d, ids[0])
		snd.answer(500)
		posts := snd.posts()
		if last := posts[len(posts)-1]; last.Headers["X-Service-Delivery-Attempt"] != "2" || last.Headers["X-Service-Delivery-Id"] != ids[0] {
			t.Errorf("retry POST: attempt %q delivery %q, want attempt 2 of %s", last.Headers["X-Service-Delivery-Attempt"], last.Headers["X-Service-Delivery-Id"], ids[0])
		}
		dl := h.deliveriesOf(t, ep)
		for _, x := range dl {
			if x.ID == ids[0] && (x.Status != "succeeded" || x.Attempts != 2) {
				t.Errorf("after the retry: %+v, want succeeded with 2 attempts", x)
			}
		}
		if n := h.count(t, `SELECT count(*) FROM outbox WHERE task_id = $1`, "webhook:deliver:"+ids[0]); n != 0 {
			t.Errorf("outbox row left after the retried delivery succeeded")
		}
		for _, bad := range []string{"nope", strings.ToUpper(ids[1]), "00000000-0000-0000-0000-000000000000"} {
			want(t, h.with(t).do("POST", "/v1/webhook_deliveries/"+bad+"/retry", "", bearer(a.secret)...), 404, "not_found")
		}
	})

	t.Run("recover", func(t *testing.T) {
		rec := func(query, body string) response {
			t.Helper()
			return h.with(t).do("POST", path+"/recover"+query, body, bearer(a.secret)...)
		}
		since := start.Format(time.RFC3339Nano)
		r := rec("?dry_run=true", `{"since":"`+since+`"}`)
		want(t, r, 200, "")
		if r.body["count"] != 2.0 || r.body["dry_run"] != true || r.body["object"] != "recovery" {
			t.Errorf("dry run: %s, want count 2", r.raw)
		}
		if n := h.count(t, `SELECT count(*) FROM webhook_deliveries WHERE endpoint_id = $1 AND status = 'failed'`, ep); n != 2 {
			t.Errorf("a dry run changed deliveries: %d failed, want 2", n)
		}
		r = rec("?dry_run=true", `{"since":"`+time.Now().Add(time.Hour).UTC().Format(time.RFC3339)+`"}`)
		if r.body["count"] != 0.0 {
			t.Errorf("dry run since the future: %s, want count 0", r.raw)
		}
		r = rec("?dry_run=true", `{"since":"`+time.Now().Add(time.Hour).Format("2006-01-02T15:04:05-07:00")+`"}`)
		want(t, r, 200, "")
		for _, c := range []struct{ query, body, code, param string }{
			{"", `{}`, "parameter_missing", "since"},
			{"", `{"since":"yesterday"}`, "parameter_invalid", "since"},
			{"", `{"since":1700000000}`, "parameter_invalid", ""},
			{"?dry_run=maybe", `{"since":"` + since + `"}`, "parameter_invalid", "dry_run"},
		} {
			r := rec(c.query, c.body)
			want(t, r, 400, c.code)
			if c.param != "" && r.errField("param") != c.param {
				t.Errorf("recover%s %s: param %q, want %q", c.query, c.body, r.errField("param"), c.param)
			}
		}
		r = rec("", `{"since":"`+since+`"}`)
		want(t, r, 200, "")
		if r.body["count"] != 2.0 || r.body["dry_run"] != false {
			t.Errorf("recover: %s, want count 2", r.raw)
		}
		var pending []string
		for _, x := range h.deliveriesOf(t, ep) {
			if x.Status == "pending" {
				pending = append(pending, x.ID)
				if x.Chain != 0 || x.Attempts != 1 {
					t.Errorf("recovered delivery %+v: want a new chain (chain 0) with its 1 earlier attempt kept", x)
				}
				if n := h.count(t, `SELECT count(*) FROM outbox WHERE task_id = $1`, "webhook:deliver:"+x.ID); n != 1 {
					t.Errorf("recovered delivery %s has no outbox row", x.ID)
				}
			}
		}
		if len(pending) != 2 {
			t.Fatalf("pending after recover: %d, want 2", len(pending))
		}
		if r := rec("?dry_run=true", `{"since":"`+since+`"}`); r.body["count"] != 0.0 {
			t.Errorf("dry run after recover: %s, want 0", r.raw)
		}
		snd.answer(200)
		for _, id := range pending {
			deliver(t, d, id)
		}
		if n := h.count(t, `SELECT count(*) FROM webhook_deliveries WHERE endpoint_id = $1 AND status = 'succeeded'`, ep); n != 4 {
			t.Errorf("succeeded after recovery: %d, want 4", n)
		}
	})

	t.Run("rotated twice", func(t *testing.T) {
		snd.answer(200)
		rot, first := h.createEndpoint(t, a.secret, "https://hooks.example.com/rotate", "charge.failed")
		rotate := func() string {
			t.Helper()
			r := h.with(t).do("POST", "/v1/me/webhook_endpoints/"+rot+"/rotate_secret", "", bearer(a.secret)...)
			want(t, r, 200, "")
			return r.body["webhook_secret"].(string)
		}
		second := rotate()
		third := rotate()
		r := h.with(t).do("POST", "/v1/me/webhook_endpoints/"+rot+"/test", "", bearer(a.secret)...)
		want(t, r, 202, "")
		deliver(t, d, r.body["id"].(string))
		posts := snd.posts()
		o := posts[len(posts)-1]
		if !webhooks.VerifyServiceSignature(o.Body, third, o.Headers["X-Service-Signature"]) {
			t.Errorf("X-Service-Signature is not the newest secret's")
		}
		if !webhooks.VerifyServiceSignature(o.Body, second, o.Headers["X-Service-Signature-Previous"]) {
			t.Errorf("X-Service-Signature-Previous is not the secret just replaced")
		}
		if webhooks.VerifyStandard(o.Body, first, o.Headers["webhook-id"], o.Headers["webhook-timestamp"], o.Headers["webhook-signature"], time.Now(), 5*time.Minute) {
			t.Errorf("the first secret still signs after two rotations")
		}
		if n := len(strings.Fields(o.Headers["webhook-signature"])); n != 2 {
			t.Errorf("webhook-signature has %d values, want 2", n)
		}
	})

	t.Run("retry of a delivery whose event was pruned", func(t *testing.T) {
		// Deliveries are kept after their event's 30 days; a retry or a
		// recovery of one must end, not leave a pending delivery and an
		// outbox row that the sweeper re-sends for ever.
		snd.answer(500)
		old, _ := h.createEndpoint(t, a.secret, "https://hooks.example.com/old", "charge.created")
		h.createCharge(t, a.secret, chargeJSON())
		dl := h.deliveriesOf(t, old)
		if len(dl) != 1 {
			t.Fatalf("deliveries: %d", len(dl))
		}
		deliver(t, d, dl[0].ID)
		// Its event past retention: gone, as when its partition is dropped.
		if _, err := h.db.Pool.Exec(context.Background(), `DELETE FROM events`); err != nil {
			t.Fatal(err)
		}
		r := h.with(t).do("POST", "/v1/webhook_deliveries/"+dl[0].ID+"/retry", "", bearer(a.secret)...)
		if r.status == 202 {
			err := d.Deliver(context.Background(), dl[0].ID)
			t.Logf("retry answered 202; Deliver: %v", err)
		} else {
			t.Logf("retry answered %d %s", r.status, r.raw)
		}
		after := h.deliveriesOf(t, old)[0]
		left := h.count(t, `SELECT count(*) FROM outbox WHERE task_id = $1`, "webhook:deliver:"+dl[0].ID)
		if after.Status == "pending" || left != 0 {
			t.Errorf("delivery of a pruned event after retry: status %s, outbox rows %d; want it refused or failed, and no outbox row", after.Status, left)
		}
	})

	t.Run("disabled endpoint fails without a request", func(t *testing.T) {
		want(t, h.with(t).do("PATCH", path, `{"active":false}`, bearer(a.secret)...), 200, "")
		r := h.with(t).do("POST", path+"/test", "", bearer(a.secret)...)
		want(t, r, 202, "")
		n := len(snd.posts())
		deliver(t, d, r.body["id"].(string))
		if len(snd.posts()) != n {
			t.Errorf("a delivery to a disabled endpoint sent a request")
		}
		l := h.with(t).do("GET", path+"/deliveries?limit=1", "", bearer(a.secret)...)
		if got := obj(l.body["data"].([]any)[0]); got["id"] != r.body["id"] || got["status"] != "failed" {
			t.Errorf("test delivery to a disabled endpoint: %v, want failed", got)
		}
	})
}

// TestEndpointHealth is endpoint health (docs/webhooks.md): a 410 Gone disables
// the endpoint at once (gone); an endpoint whose attempts have done nothing
// but fail for WEBHOOK_DISABLE_AFTER is disabled at its next failure
// (failing), and a success in between starts the count again; a disabled
// endpoint is sent nothing, its deliveries wait failed, and after
// PATCH {"active": true} a recover sends them. Manual switching records
// "manual", and active always equals status == "enabled".
func TestEndpointHealth(t *testing.T) {
	t.Parallel()
	h := newHarness(t, paymentsEnv)
	a := h.account("ada@example.com")
	keys, err := keyring.New(h.cfg.EncryptionKey)
	if err != nil {
		t.Fatal(err)
	}
	sender := &recordingSender{status: 200}
	var disabled []string
	// The deliverer's clock runs with the real one, plus what the test
	// moves it on by: an hour of failures takes no hour, and however slow a
	// loaded machine makes a delivery, it moves the streak by seconds only.
	const disableAfter = time.Hour
	var ahead atomic.Int64
	now := func() time.Time { return time.Now().Add(time.Duration(ahead.Load())) }
	wait := func(d time.Duration) { ahead.Add(int64(d)) }
	d := webhooks.NewDeliverer(store.New(h.db.Pool), sender, keys, []time.Duration{0}, now,
		slog.New(slog.NewTextHandler(io.Discard, nil)), nil).WithHealth(disableAfter, func(reason string) { disabled = append(disabled, reason) })
	get := func(id string) map[string]any {
		t.Helper()
		r := h.do("GET", "/v1/me/webhook_endpoints/"+id, "", bearer(a.secret)...)
		want(t, r, 200, "")
		if (r.body["status"] == "enabled") != (r.body["active"] == true) {
			t.Errorf("active %v with status %v", r.body["active"], r.body["status"])
		}
		return r.body
	}
	// fire makes one charge.created event and delivers what it fanned out to ep.
	fire := func(ep string) whDelivery {
		t.Helper()
		h.createCharge(t, a.secret, chargeJSON())
		ds := h.deliveriesOf(t, ep)
		last := ds[len(ds)-1]
		if last.Status == "pending" {
			deliver(t, d, last.ID)
		}
		ds = h.deliveriesOf(t, ep)
		return ds[len(ds)-1]
	}

	t.Run("410 Gone disables at once", func(t *testing.T) {
		ep, _ := h.createEndpoint(t, a.secret, "https://hooks.example.com/gone", "charge.created")
		if e := get(ep); e["status"] != "enabled" || e["disabled_reason"] != nil || e["disabled_at"] != nil {
			t.Fatalf("a new endpoint: %v", e)
		}
		sender.answer(410)
		if got := fire(ep); got.Status != "failed" || got.Attempts != 1 {
			t.Errorf("the delivery answered 410: %+v, want failed after 1 attempt", got)
		}
		e := get(ep)
		if e["status"] != "disabled" || e["active"] != false || e["disabled_reason"] != "gone" || e["disabled_at"] == nil {
			t.Fatalf("after a 410: %v", e)
		}
		// Disabled: the next event's delivery is failed at once, never sent.
		sender.answer(200)
		sent := len(sender.posts())
		if got := fire(ep); got.Status != "failed" || got.Attempts != 0 {
			t.Errorf("a delivery to the disabled endpoint: %+v, want failed with no attempt", got)
		}
		if len(sender.posts()) != sent {
			t.Errorf("the disabled endpoint was sent %d requests", len(sender.posts())-sent)
		}
		// Enabled again, a recover sends both.
		r := h.do("PATCH", "/v1/me/webhook_endpoints/"+ep, `{"active":true}`, bearer(a.secret)...)
		want(t, r, 200, "")
		if r.body["status"] != "enabled" || r.body["disabled_reason"] != nil || r.body["disabled_at"] != nil {
			t.Fatalf("enabled again: %s", r.raw)
		}
		r = h.do("POST", "/v1/me/webhook_endpoints/"+ep+"/recover", `{"since":"2020-01-01T00:00:00Z"}`, bearer(a.secret)...)
		want(t, r, 200, "")
		if r.body["count"] != float64(2) {
			t.Fatalf("recover: %s, want 2", r.raw)
		}
		for _, dl := range h.deliveriesOf(t, ep) {
			deliver(t, d, dl.ID)
		}
		for _, dl := range h.deliveriesOf(t, ep) {
			if dl.Status != "succeeded" {
				t.Errorf("after recover: %+v", dl)
			}
		}
	})

	t.Run("nothing but failures for WEBHOOK_DISABLE_AFTER", func(t *testing.T) {
		ep, _ := h.createEndpoint(t, a.secret, "https://hooks.example.com/failing", "charge.created")
		sender.answer(500)
		fire(ep) // starts the streak
		wait(disableAfter / 2)
		fire(ep)
		if e := get(ep); e["status"] != "enabled" {
			t.Fatalf("disabled before WEBHOOK_DISABLE_AFTER: %v", e)
		}
		// A success ends the streak: failures after it start a new one.
		sender.answer(200)
		fire(ep)
		sender.answer(500)
		wait(disableAfter)
		fire(ep) // a new streak starts here
		if e := get(ep); e["status"] != "enabled" {
			t.Fatalf("disabled although a success came %v ago: %v", disableAfter, e)
		}
		wait(disableAfter + time.Minute)
		if got := fire(ep); got.Status != "failed" || got.Attempts != 1 {
			t.Errorf("the failure that disables: %+v", got)
		}
		if e := get(ep); e["status"] != "disabled" || e["disabled_reason"] != "failing" {
			t.Fatalf("after %v of failures: %v", disableAfter, e)
		}
	})

	t.Run("manual", func(t *testing.T) {
		ep, _ := h.createEndpoint(t, a.secret, "https://hooks.example.com/manual", "charge.created")
		r := h.do("PATCH", "/v1/me/webhook_endpoints/"+ep, `{"active":false}`, bearer(a.secret)...)
		want(t, r, 200, "")
		if r.body["status"] != "disabled" || r.body["disabled_reason"] != "manual" || r.body["disabled_at"] == nil {
			t.Fatalf("switched off: %s", r.raw)
		}
		first := r.body["disabled_at"]
		// Switching it off again keeps when and why.
		r = h.do("PATCH", "/v1/me/webhook_endpoints/"+ep, `{"active":false,"description":"paused"}`, bearer(a.secret)...)
		if r.body["disabled_at"] != first || r.body["disabled_reason"] != "manual" {
			t.Errorf("switched off twice: %s", r.raw)
		}
		// Another change leaves it disabled.
		r = h.do("PATCH", "/v1/me/webhook_endpoints/"+ep, `{"url":"https://hooks.example.com/manual2"}`, bearer(a.secret)...)
		if r.body["status"] != "disabled" || r.body["disabled_reason"] != "manual" {
			t.Errorf("after a URL change: %s", r.raw)
		}
	})

	if !slices.Equal(disabled, []string{"gone", "failing"}) {
		t.Errorf("disabled endpoints reported: %v, want gone then failing", disabled)
	}
	// Test deliveries never change an endpoint's health.
	ep, _ := h.createEndpoint(t, a.secret, "https://hooks.example.com/test-only", "charge.created")
	sender.answer(410)
	r := h.do("POST", "/v1/me/webhook_endpoints/"+ep+"/test", "", bearer(a.secret)...)
	want(t, r, 202, "")
	deliver(t, d, r.body["id"].(string))
	if e := get(ep); e["status"] != "enabled" {
		t.Errorf("a test delivery answered 410 disabled the endpoint: %v", e)
	}
}

// TestEventSequence: X-Service-Sequence numbers each object's events in the
// order they happened: a charge's charge.* events, each refund's refund.*
// events; a test delivery carries 1.
func TestEventSequence(t *testing.T) {
	t.Parallel()
	h := newHarness(t, paymentsEnv)
	a := h.account("ada@example.com")
	w := h.worker(t, &providertest.Fake{})
	sender := &recordingSender{status: 200}
	d := h.deliverer(t, sender)
	ep, _ := h.createEndpoint(t, a.secret, "https://hooks.example.com/seq", events.Types...)
	charge := h.capturedCharge(t, w, a.secret, 3000)
	for _, amount := range []int{1000, 2000} { // the second refunds the rest: charge.refunded
		r := h.do("POST", "/v1/refunds", refundJSON(charge, fmt.Sprintf(`"amount":%d`, amount)), bearer(a.secret)...)
		want(t, r, 201, "")
		w.refund(t, r.body["id"].(string))
	}
	for _, dl := range h.deliveriesOf(t, ep) {
		deliver(t, d, dl.ID)
	}
	type seen struct{ typ, object, seq string }
	var got []seen
	for _, o := range sender.posts() {
		var body struct {
			Data struct {
				Charge struct{ ID string }  `json:"charge"`
				Refund *struct{ ID string } `json:"refund"`
			} `json:"data"`
		}
		if err := json.Unmarshal(o.Body, &body); err != nil {
			t.Fatal(err)
		}
		object := "charge"
		if body.Data.Refund != nil {
			object = "refund " + body.Data.Refund.ID[len(body.Data.Refund.ID)-4:]
		}
		got = append(got, seen{o.Headers["X-Service-Event-Type"], object, o.Headers["X-Service-Sequence"]})
	}
	bySeq := map[string][]string{}
	for _, s := range got {
		bySeq[s.object] = append(bySeq[s.object], s.typ+"#"+s.seq)
	}
	if c := bySeq["charge"]; !slices.Equal(c, []string{"charge.created#1", "charge.captured#2", "charge.refunded#3"}) {
		t.Errorf("the charge's events: %v", c)
	}
	refundsSeen := 0
	for object, evs := range bySeq {
		if object == "charge" {
			continue
		}
		refundsSeen++
		if !slices.Equal(evs, []string{"refund.created#1", "refund.succeeded#2"}) {
			t.Errorf("%s's events: %v", object, evs)
		}
	}
	if refundsSeen != 2 {
		t.Errorf("events of %d refunds, want 2: %v", refundsSeen, got)
	}
	// The API's test delivery: 1.
	r := h.do("POST", "/v1/me/webhook_endpoints/"+ep+"/test", "", bearer(a.secret)...)
	want(t, r, 202, "")
	deliver(t, d, r.body["id"].(string))
	posts := sender.posts()
	if last := posts[len(posts)-1]; last.Headers["X-Service-Test"] != "true" || last.Headers["X-Service-Sequence"] != "1" {
		t.Errorf("test delivery headers: %v", last.Headers)
	}
}

// TestOrderedDelivery: an endpoint with "ordered": true gets one object's
// events in sequence order: a later delivery waits, without an attempt, until
// the earlier ones are delivered or failed for good; other objects and
// unordered endpoints do not wait.
func TestOrderedDelivery(t *testing.T) {
	t.Parallel()
	h := newHarness(t, paymentsEnv)
	a := h.account("ada@example.com")
	w := h.worker(t, &providertest.Fake{})
	sender := &recordingSender{status: 200}
	d := h.deliverer(t, sender)
	r := h.do("POST", "/v1/me/webhook_endpoints", `{"url":"https://hooks.example.com/ordered","events":["charge.created","charge.captured"],"ordered":true}`, bearer(a.secret)...)
	want(t, r, 201, "")
	ordered := obj(r.body["webhook_endpoint"])["id"].(string)
	if obj(r.body["webhook_endpoint"])["ordered"] != true {
		t.Fatalf("created: %s", r.raw)
	}
	loose, _ := h.createEndpoint(t, a.secret, "https://hooks.example.com/loose", "charge.created", "charge.captured")
	first := h.capturedCharge(t, w, a.secret, 1000)  // created #1, captured #2
	second := h.capturedCharge(t, w, a.secret, 2000) // another object
	of := func(ep, charge string) (created, captured whDelivery) {
		t.Helper()
		for _, dl := range h.deliveriesOf(t, ep) {
			var c string
			if err := h.db.Pool.QueryRow(context.Background(), `SELECT body->'data'->'charge'->>'id' FROM events WHERE id = $1`, dl.EventID).Scan(&c); err != nil {
				t.Fatal(err)
			}
			if c != charge {
				continue
			}
			if dl.EventType == "charge.created" {
				created = dl
			} else {
				captured = dl
			}
		}
		return created, captured
	}
	attempt := func(id string) error { return d.Deliver(context.Background(), id) }

	// The unordered endpoint sends the captured event first, at once.
	_, looseCaptured := of(loose, first)
	if err := attempt(looseCaptured.ID); err != nil {
		t.Fatalf("unordered: %v", err)
	}
	// The ordered endpoint holds it back: no attempt, the next one later.
	created, captured := of(ordered, first)
	sent := len(sender.posts())
	var retry *webhooks.RetryIn
	if err := attempt(captured.ID); !errors.As(err, &retry) || retry.Delay <= 0 {
		t.Fatalf("ordered, the later event first: %v, want a wait", err)
	}
	if _, c := of(ordered, first); c.Status != "pending" || c.Attempts != 0 || len(sender.posts()) != sent {
		t.Fatalf("the waiting delivery: %+v; %d sent", c, len(sender.posts())-sent)
	}
	// Another object is not held up.
	_, otherCaptured := of(ordered, second)
	otherCreated, _ := of(ordered, second)
	deliver(t, d, otherCreated.ID)
	deliver(t, d, otherCaptured.ID)
	// The earlier one delivered, the later one goes (once its postponed time
	// comes: the test moves it).
	deliver(t, d, created.ID)
	if _, err := h.db.Pool.Exec(context.Background(), `UPDATE webhook_deliveries SET next_attempt_at = now() WHERE id = $1`, captured.ID); err != nil {
		t.Fatal(err)
	}
	deliver(t, d, captured.ID)
	var order []string
	for _, o := range sender.posts()[sent:] {
		order = append(order, o.Headers["X-Service-Event-Type"]+"#"+o.Headers["X-Service-Sequence"])
	}
	if want := []string{"charge.created#1", "charge.captured#2", "charge.created#1", "charge.captured#2"}; !slices.Equal(order, want) {
		t.Errorf("ordered endpoint received %v, want %v", order, want)
	}

	// Failed for good lets the next one go: a third charge whose created
	// event fails (one attempt in this schedule).
	third := h.capturedCharge(t, w, a.secret, 3000)
	c3, p3 := of(ordered, third)
	sender.answer(500)
	deliver(t, d, c3.ID)
	sender.answer(200)
	if err := attempt(p3.ID); err != nil {
		t.Fatalf("after the earlier delivery failed for good: %v", err)
	}
	if _, p := of(ordered, third); p.Status != "succeeded" {
		t.Errorf("the later delivery: %+v, want succeeded", p)
	}
}
