package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"
)

// opsFailingAfter is WEBHOOK_FAILING_AFTER in TestWebhookFiltersAndOperationalEvents:
// longer than the compressed retry schedule (5 attempts in 3 s), so a
// failing endpoint's delivery has failed for good before then and no
// attempt is left to tell: the worker's webhooks:health sweep does.
// (An attempt past it tells too: internal/webhooks and internal/store.)
const opsFailingAfter = 4 * time.Second

var endpointEventTypes = []string{"webhook_endpoint.failing", "webhook_endpoint.disabled", "webhook_endpoint.recovered"}

// TestWebhookFiltersAndOperationalEvents runs the real binaries:
//   - filters: a bad filter is refused with the param naming its path and
//     changes nothing; events the filter turns away are logged as filtered,
//     never sent, and counted by GET .../stats; PATCH replaces and removes it;
//   - operational events: an endpoint that does nothing but fail for
//     WEBHOOK_FAILING_AFTER makes webhook_endpoint.failing, its next success
//     webhook_endpoint.recovered, a 410 Gone webhook_endpoint.disabled; each
//     is listed by GET /v1/events, carried by the event stream and delivered
//     to the merchant's other subscribed endpoints, never to the endpoint
//     it is about.
func TestWebhookFiltersAndOperationalEvents(t *testing.T) {
	parallel(t)
	st := newStack(t, stackOptions{env: webhooksStackEnv,
		workerEnv: append(slices.Clone(webhooksWorkerEnv), "WEBHOOK_FAILING_AFTER="+opsFailingAfter.String())},
		fmt.Sprintf("schedule %s, failing after %s", whScheduleEnv(), opsFailingAfter))
	bag := &secretBag{}
	m := newWebhookMerchant(t, st, bag, "127.0.0.43", "ops")
	t.Run("filters", func(t *testing.T) { filters(t, m) })
	t.Run("operational_events", func(t *testing.T) { operationalEvents(t, st, m) })
	checkNoWebhookSecrets(t, st, bag.all())
}

type endpointStatsJSON struct {
	Object    string `json:"object"`
	Endpoint  string `json:"webhook_endpoint"`
	Delivered int64  `json:"delivered"`
	Filtered  int64  `json:"filtered"`
	Failed    int64  `json:"failed"`
	Pending   int64  `json:"pending"`
}

func (m *whMerchant) stats(t *testing.T, endpoint string) endpointStatsJSON {
	t.Helper()
	e := m.do(t, http.MethodGet, "/v1/me/webhook_endpoints/"+endpoint+"/stats", "")
	mustExpect(t, e, http.StatusOK, "")
	var s endpointStatsJSON
	decode(t, e, &s)
	return s
}

func (m *whMerchant) chargeOf(t *testing.T, amount int64, currency, tag string) string {
	t.Helper()
	body := strings.Replace(cardBody("4242424242424242", false, amount, tag), `"currency":"usd"`, `"currency":"`+currency+`"`, 1)
	e := m.do(t, http.MethodPost, "/v1/charges", body)
	mustExpect(t, e, http.StatusCreated, "")
	var ch chargeJSON
	decode(t, e, &ch)
	return ch.ID
}

func filters(t *testing.T, m *whMerchant) {
	rcv := newReceiver(t, "filtered", always(http.StatusOK))
	// Bad filters: 400 naming the path, nothing created.
	for _, tc := range []struct{ filter, param string }{
		{`{"data.charge.amount": {"$gte": "a", "$like": 1}}`, "filter.data.charge.amount"},
		{`{"data.charge.currency": ["USD"]}`, "filter.data.charge.currency"},
		{`{"data..x": 1}`, "filter.data..x"},
		{`[1]`, "filter"},
		{`{"data.charge.currencyy": "USD"}`, "filter.data.charge.currencyy"}, // no charge.created event has it
		{`{"data.refund.amount": {"$gt": 0}}`, "filter.data.refund.amount"},
	} {
		e := m.do(t, http.MethodPost, "/v1/me/webhook_endpoints",
			`{"url":"`+rcv.url()+`","events":["charge.created"],"filter":`+tc.filter+`}`)
		if !expect(t, e, http.StatusBadRequest, "parameter_invalid") || e.param() != tc.param || !strings.Contains(e.String(), strings.TrimPrefix(tc.param, "filter.")) {
			t.Errorf("filter %s: %s; want 400 with param %s named in the message", tc.filter, e, tc.param)
		}
	}
	if e := m.do(t, http.MethodGet, "/v1/me/webhook_endpoints", ""); !strings.Contains(string(e.body), `"data":[]`) {
		t.Errorf("a refused filter created an endpoint: %s", e.body)
	}

	filter := `{"data.charge.currency": {"$in": ["USD"]}, "data.charge.amount": {"$gte": 1000}}`
	e := m.do(t, http.MethodPost, "/v1/me/webhook_endpoints", `{"url":"`+rcv.url()+`","events":["charge.created"],"filter":`+filter+`}`)
	mustExpect(t, e, http.StatusCreated, "")
	var created struct {
		Endpoint struct {
			ID     string          `json:"id"`
			Filter json.RawMessage `json:"filter"`
		} `json:"webhook_endpoint"`
		Secret string `json:"webhook_secret"`
	}
	decode(t, e, &created)
	m.secrets.add(created.Secret)
	ep := created.Endpoint.ID
	if !sameJSON(created.Endpoint.Filter, []byte(filter)) {
		t.Errorf("filter shown as %s, want %s", created.Endpoint.Filter, filter)
	}
	// A bad PATCH changes nothing.
	e = m.do(t, http.MethodPatch, "/v1/me/webhook_endpoints/"+ep, `{"filter":{"data.charge.amount":{"$gt":[1]}},"description":"x"}`)
	if !expect(t, e, http.StatusBadRequest, "parameter_invalid") || e.param() != "filter.data.charge.amount" {
		t.Errorf("bad PATCH filter: %s", e)
	}
	// New events are checked against the filter the endpoint keeps.
	e = m.do(t, http.MethodPatch, "/v1/me/webhook_endpoints/"+ep, `{"events":["payout.paid"]}`)
	if !expect(t, e, http.StatusBadRequest, "parameter_invalid") || e.param() != "filter.data.charge.amount" {
		t.Errorf("PATCH events that lack the filter's paths: %s", e)
	}
	// Checked against the endpoint's own events when the PATCH names none.
	e = m.do(t, http.MethodPatch, "/v1/me/webhook_endpoints/"+ep, `{"filter":{"data.refund.amount":{"$gt":0}}}`)
	if !expect(t, e, http.StatusBadRequest, "parameter_invalid") || e.param() != "filter.data.refund.amount" {
		t.Errorf("PATCH filter with a path charge.created events lack: %s", e)
	}
	e = m.do(t, http.MethodGet, "/v1/me/webhook_endpoints/"+ep, "")
	if !strings.Contains(string(e.body), `"description":null`) || !strings.Contains(string(e.body), `"$gte":1000`) {
		t.Errorf("a refused PATCH changed the endpoint: %s", e.body)
	}

	pass := m.chargeOf(t, 1500, "usd", "filter-pass")
	m.chargeOf(t, 999, "usd", "filter-small")
	m.chargeOf(t, 1500, "eur", "filter-eur")
	got := m.waitDeliveries(t, ep, 3, func(d deliveryJSON) bool { return d.Status == "succeeded" || d.Status == "filtered" }, 20*time.Second)
	var filtered int
	for _, d := range got {
		if d.Status == "filtered" {
			filtered++
			if len(d.Attempts) != 0 || d.NextAttemptAt != nil {
				t.Errorf("filtered delivery %s has attempts %v or a next attempt %v", d.ID, d.codes(), d.NextAttemptAt)
			}
		}
	}
	hits := rcv.all()
	if filtered != 2 || len(hits) != 1 {
		t.Fatalf("%d filtered deliveries and %d requests; want 2 and 1", filtered, len(hits))
	}
	var body eventJSON
	if err := json.Unmarshal(hits[0].body, &body); err != nil || body.charge(t).ID != pass {
		t.Errorf("the receiver got %s, want the event of charge %s", hits[0].body, pass)
	}
	if s := m.stats(t, ep); s.Object != "webhook_endpoint_stats" || s.Endpoint != ep || s.Delivered != 1 || s.Filtered != 2 || s.Failed != 0 || s.Pending != 0 {
		t.Errorf("stats %+v; want 1 delivered, 2 filtered", s)
	}
	e = m.do(t, http.MethodGet, "/v1/me/webhook_endpoints/"+ep+"/deliveries?status=filtered", "")
	if mustExpect(t, e, http.StatusOK, ""); strings.Count(string(e.body), `"status":"filtered"`) != 2 {
		t.Errorf("?status=filtered: %s", e.body)
	}

	// Removed: every subscribed event is delivered again.
	e = m.do(t, http.MethodPatch, "/v1/me/webhook_endpoints/"+ep, `{"filter":null}`)
	if mustExpect(t, e, http.StatusOK, ""); !strings.Contains(string(e.body), `"filter":null`) {
		t.Errorf("PATCH filter null: %s", e.body)
	}
	m.chargeOf(t, 5, "eur", "filter-removed")
	m.waitDeliveries(t, ep, 4, func(d deliveryJSON) bool { return d.Status == "succeeded" || d.Status == "filtered" }, 20*time.Second)
	if s := m.stats(t, ep); s.Delivered != 2 || s.Filtered != 2 {
		t.Errorf("stats after the filter was removed %+v; want 2 delivered, 2 filtered", s)
	}
	// Its receiver closes with this subtest.
	mustExpect(t, m.do(t, http.MethodDelete, "/v1/me/webhook_endpoints/"+ep, ""), http.StatusOK, "")
}

func operationalEvents(t *testing.T, st *stack, m *whMerchant) {
	stream, refused := openLiveStream(t, st, st.replicas[0], m.key)
	if stream == nil {
		t.Fatalf("stream: %s", refused)
	}
	ops := newReceiver(t, "ops", always(http.StatusOK))
	opsEP, _ := m.endpoint(t, ops.url(), endpointEventTypes...)
	failing := newReceiver(t, "failing", always(http.StatusInternalServerError))
	failingEP, _ := m.endpoint(t, failing.url(), append([]string{"charge.created"}, endpointEventTypes...)...)
	// The failing endpoint's five attempts end before WEBHOOK_FAILING_AFTER.
	failedAt := time.Now()
	m.chargeOf(t, 2000, "usd", "ops-failing")
	about := func(h hit) string {
		var ev struct {
			Data struct {
				Object          string `json:"object"`
				WebhookEndpoint struct {
					ID     string `json:"id"`
					Status string `json:"status"`
				} `json:"webhook_endpoint"`
			} `json:"data"`
		}
		if err := json.Unmarshal(h.body, &ev); err != nil || ev.Data.Object != "webhook_endpoint" {
			t.Errorf("operational event body %s (%v)", h.body, err)
		}
		return ev.Data.WebhookEndpoint.ID
	}
	waitHit := func(r *receiver, typ string) hit {
		t.Helper()
		deadline := time.Now().Add(patience(30 * time.Second))
		for {
			for _, h := range r.all() {
				if h.header.Get("X-Service-Event-Type") == typ {
					return h
				}
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s did not receive %s", r.name, typ)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	h := waitHit(ops, "webhook_endpoint.failing")
	if about(h) != failingEP.ID {
		t.Errorf("webhook_endpoint.failing is about %s, want %s", about(h), failingEP.ID)
	}
	if took := h.at.Sub(failedAt); took < opsFailingAfter {
		t.Errorf("webhook_endpoint.failing came %s after the first failure, before WEBHOOK_FAILING_AFTER (%s)", took, opsFailingAfter)
	}
	failingEvent := h.eventID()
	e := m.do(t, http.MethodGet, "/v1/me/webhook_endpoints/"+failingEP.ID, "")
	if !strings.Contains(string(e.body), `"failing_since":"`) {
		t.Errorf("a failing endpoint shows no failing_since: %s", e.body)
	}

	// Its next success: recovered.
	failing.setRespond(always(http.StatusOK))
	m.chargeOf(t, 2100, "usd", "ops-recovered")
	if h := waitHit(ops, "webhook_endpoint.recovered"); about(h) != failingEP.ID {
		t.Errorf("webhook_endpoint.recovered is about %s, want %s", about(h), failingEP.ID)
	}

	// A 410 Gone disables at once; the formerly failing endpoint is
	// subscribed too and gets this one, which is not about it.
	gone := newReceiver(t, "gone", always(http.StatusGone))
	goneEP, _ := m.endpoint(t, gone.url(), "charge.created")
	m.chargeOf(t, 2200, "usd", "ops-gone")
	for _, r := range []*receiver{ops, failing} {
		if h := waitHit(r, "webhook_endpoint.disabled"); about(h) != goneEP.ID {
			t.Errorf("%s: webhook_endpoint.disabled is about %s, want %s", r.name, about(h), goneEP.ID)
		}
	}

	// Never to the endpoint it is about.
	for _, h := range failing.all() {
		if strings.HasPrefix(h.header.Get("X-Service-Event-Type"), "webhook_endpoint.") && about(h) == failingEP.ID {
			t.Errorf("endpoint %s was sent %s about itself", failingEP.ID, h.header.Get("X-Service-Event-Type"))
		}
	}
	if n := gone.count(); n != 1 {
		t.Errorf("the gone endpoint got %d requests, want 1", n)
	}

	// Listed, once each.
	byType := map[string][]string{}
	for _, ev := range m.events(t) {
		if strings.HasPrefix(ev.EventType, "webhook_endpoint.") {
			byType[ev.EventType] = append(byType[ev.EventType], ev.ID)
		}
	}
	for _, typ := range endpointEventTypes {
		if len(byType[typ]) != 1 {
			t.Errorf("GET /v1/events lists %d %s events, want 1", len(byType[typ]), typ)
		}
	}
	if len(byType["webhook_endpoint.failing"]) == 1 && byType["webhook_endpoint.failing"][0] != failingEvent {
		t.Errorf("the delivered failing event %s is not the listed one %s", failingEvent, byType["webhook_endpoint.failing"][0])
	}
	e = m.do(t, http.MethodGet, "/v1/events?type=webhook_endpoint.disabled", "")
	if mustExpect(t, e, http.StatusOK, ""); !strings.Contains(string(e.body), goneEP.ID) {
		t.Errorf("GET /v1/events?type=webhook_endpoint.disabled: %s", e.body)
	}

	// Streamed.
	streamed := map[string]bool{}
	timeout := time.After(patience(20 * time.Second))
	for len(streamed) < len(endpointEventTypes) {
		select {
		case ev, ok := <-stream.events:
			if !ok {
				t.Fatal("the stream ended")
			}
			if strings.HasPrefix(ev.typ, "webhook_endpoint.") {
				streamed[ev.typ] = true
			}
		case <-timeout:
			t.Fatalf("the stream carried %v of %v", streamed, endpointEventTypes)
		}
	}
	if got := m.stats(t, opsEP.ID); got.Delivered != 3 {
		t.Errorf("ops endpoint stats %+v; want 3 delivered", got)
	}
}
