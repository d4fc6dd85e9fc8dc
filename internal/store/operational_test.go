package store_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/gatehouse-pay/gatehouse/internal/events"
	"github.com/gatehouse-pay/gatehouse/internal/outbox"
	"github.com/gatehouse-pay/gatehouse/internal/store"
	"github.com/gatehouse-pay/gatehouse/internal/testenv"
	"github.com/gatehouse-pay/gatehouse/internal/webhooks"
)

// TestFilterMatch: the database's reading of a filter, as ParseFilter
// stores it, against event bodies: each operator, absent paths, types that
// do not compare, and conditions ANDed.
func TestFilterMatch(t *testing.T) {
	db := testenv.NewDB(t)
	body := `{"event_type":"charge.captured","data":{"object":"charge","charge":{"amount":2500,"currency":"USD",
		"captured":true,"description":null,"created_at":"2026-11-20T10:00:00.000Z","metadata":{"order":"A-1"},"items":[{"sku":"x"}]}}}`
	for _, tc := range []struct {
		filter string
		want   bool
	}{
		{`{"data.charge.currency": "USD"}`, true},
		{`{"data.charge.currency": {"$eq": "EUR"}}`, false},
		{`{"data.charge.currency": {"$neq": "EUR"}}`, true},
		{`{"data.charge.nope": {"$neq": "EUR"}}`, true},
		{`{"data.charge.nope": {"$eq": null}}`, false},
		{`{"data.charge.description": {"$eq": null}}`, true},
		{`{"data.charge.currency": {"$in": ["EUR", "USD"]}}`, true},
		{`{"data.charge.currency": {"$in": ["EUR"]}}`, false},
		{`{"data.charge.currency": {"$nin": ["EUR"]}}`, true},
		{`{"data.charge.nope": {"$nin": ["EUR"]}}`, true},
		{`{"data.charge.amount": {"$gte": 2500}}`, true},
		{`{"data.charge.amount": {"$gt": 2500}}`, false},
		{`{"data.charge.amount": {"$lt": 2500.5}}`, true},
		{`{"data.charge.amount": {"$lte": 100}}`, false},
		{`{"data.charge.amount": {"$gt": 1000, "$lt": 3000}}`, true},
		{`{"data.charge.amount": {"$gt": "1000"}}`, false}, // a number is not compared with a string
		{`{"data.charge.created_at": {"$gte": "2026-11-01T00:00:00.000Z"}}`, true},
		{`{"data.charge.created_at": {"$lt": "2026-11-01T00:00:00.000Z"}}`, false},
		{`{"data.charge.nope": {"$gt": 1}}`, false},
		{`{"data.charge.metadata.order": {"$exist": true}}`, true},
		{`{"data.charge.metadata.other": {"$exist": true}}`, false},
		{`{"data.charge.metadata.other": {"$exist": false}}`, true},
		{`{"data.charge.description": {"$exist": true}}`, true}, // null is there
		{`{"data.charge.items.0.sku": "x"}`, true},
		{`{"data.charge.captured": true}`, true},
		{`{"data.charge.currency": "USD", "data.charge.amount": {"$gte": 5000}}`, false},
		{`{"data.charge.currency": {"$in": ["USD"]}, "data.charge.amount": {"$gte": 1000}}`, true},
	} {
		f, err := webhooks.ParseFilter(json.RawMessage(tc.filter))
		if err != nil {
			t.Fatalf("ParseFilter(%s): %v", tc.filter, err)
		}
		var got bool
		if err := db.Pool.QueryRow(context.Background(), `SELECT gh_webhook_filter_match($1::jsonb, $2::jsonb)`, f, body).Scan(&got); err != nil {
			t.Fatal(err)
		}
		if got != tc.want {
			t.Errorf("filter %s (stored %s) = %t, want %t", tc.filter, f, got, tc.want)
		}
	}
}

// TestOperationalEvents: a health change writes its event in the same
// transaction, delivered to the merchant's other subscribed endpoints and
// never to the endpoint it is about; a change that already happened writes
// nothing; a filter turns operational events away like any other.
func TestOperationalEvents(t *testing.T) {
	db := testenv.NewDB(t)
	s := store.New(db.Pool)
	f := newOutboxFixture(t, db.Pool)
	ctx := context.Background()
	all := `{webhook_endpoint.failing,webhook_endpoint.disabled,webhook_endpoint.recovered,charge.captured}`
	f.exec(t, `UPDATE webhook_endpoints SET events = $2 WHERE id = $1`, f.endpointID, all)
	endpoint := func(id, filter string) {
		f.exec(t, `INSERT INTO webhook_endpoints (id, merchant_id, environment, url, events, secret_sealed, created_at, updated_at, filter)
			VALUES ($1, $2, 'sandbox', 'https://ops.example.com/in', $3, '\x00', now(), now(), nullif($4, '')::jsonb)`, id, f.merchantID, all, filter)
	}
	endpoint("we_ops", "")
	endpoint("we_filtered", `{"data.webhook_endpoint.disabled_reason": {"$eq": "gone"}}`)
	f.exec(t, `UPDATE webhook_endpoints SET filter = NULL WHERE id = 'we_ops'`)

	deliveries := func(eventType string) map[string]string {
		rows, err := db.Pool.Query(ctx, `SELECT endpoint_id, status FROM webhook_deliveries WHERE event_type = $1`, eventType)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		got := map[string]string{}
		for rows.Next() {
			var ep, st string
			if err := rows.Scan(&ep, &st); err != nil {
				t.Fatal(err)
			}
			got[ep] = st
		}
		return got
	}
	now := time.Now().UTC().Truncate(time.Millisecond)
	start := now.Add(-2 * time.Hour)
	if res, err := s.UpdateHealth(ctx, webhooks.Health{EndpointID: f.endpointID, Failing: true, At: start}); err != nil || res.Event != "" {
		t.Fatalf("start of a streak = %+v, %v; want no event", res, err)
	}

	if due, err := s.FailingUnannounced(ctx, now.Add(-3*time.Hour), 10); err != nil || len(due) != 0 {
		t.Errorf("failing for 3 h: %v, %v; want none", due, err)
	}
	if due, err := s.FailingUnannounced(ctx, now.Add(-time.Hour), 10); err != nil || len(due) != 1 || due[0] != f.endpointID {
		t.Errorf("failing for 1 h: %v, %v; want %s", due, err, f.endpointID)
	}
	announce := webhooks.Health{EndpointID: f.endpointID, Announce: true, FailingBefore: now.Add(-time.Hour), At: now}
	res, err := s.UpdateHealth(ctx, announce)
	if err != nil || res.Event != events.EndpointFailing || len(res.Tasks) != 1 || res.Tasks[0].Type != outbox.WebhookEvent {
		t.Fatalf("announce = %+v, %v; want webhook_endpoint.failing and one task", res, err)
	}
	got := deliveries(events.EndpointFailing)
	if len(got) != 2 || got["we_ops"] != "pending" || got["we_filtered"] != "filtered" || got[f.endpointID] != "" {
		t.Errorf("failing deliveries = %v; want we_ops pending, we_filtered filtered, none to %s", got, f.endpointID)
	}
	var body []byte
	if err := db.Pool.QueryRow(ctx, `SELECT body FROM events WHERE type = $1`, events.EndpointFailing).Scan(&body); err != nil {
		t.Fatal(err)
	}
	var ev struct {
		Data struct {
			Object          string `json:"object"`
			WebhookEndpoint struct {
				ID           string  `json:"id"`
				FailingSince *string `json:"failing_since"`
			} `json:"webhook_endpoint"`
		} `json:"data"`
	}
	if err := json.Unmarshal(body, &ev); err != nil || ev.Data.Object != "webhook_endpoint" || ev.Data.WebhookEndpoint.ID != f.endpointID ||
		ev.Data.WebhookEndpoint.FailingSince == nil || *ev.Data.WebhookEndpoint.FailingSince != events.Timestamp(start) {
		t.Errorf("failing event body %s (%v)", body, err)
	}
	if res, err := s.UpdateHealth(ctx, announce); err != nil || res.Event != "" {
		t.Errorf("a second announcement = %+v, %v; want nothing", res, err)
	}
	if due, err := s.FailingUnannounced(ctx, now.Add(-time.Hour), 10); err != nil || len(due) != 0 {
		t.Errorf("failing, once announced: %v, %v; want none", due, err)
	}

	gone := webhooks.Health{EndpointID: f.endpointID, Disable: webhooks.DisabledGone, At: now.Add(time.Second)}
	if res, err := s.UpdateHealth(ctx, gone); err != nil || !res.Disabled || res.Event != events.EndpointDisabled {
		t.Fatalf("disable = %+v, %v", res, err)
	}
	if got := deliveries(events.EndpointDisabled); len(got) != 2 || got["we_ops"] != "pending" || got["we_filtered"] != "pending" {
		t.Errorf("disabled deliveries = %v; want both other endpoints pending (the filter asks for gone)", got)
	}
	if res, err := s.UpdateHealth(ctx, gone); err != nil || res.Disabled || res.Event != "" {
		t.Errorf("disabling again = %+v, %v; want nothing", res, err)
	}

	// Enabled again by hand, then a success: recovered, once.
	f.exec(t, `UPDATE webhook_endpoints SET active = true, disabled_reason = NULL, disabled_at = NULL, failing_since = NULL WHERE id = $1`, f.endpointID)
	ok := webhooks.Health{EndpointID: f.endpointID, Recovered: true, At: now.Add(2 * time.Second)}
	if res, err := s.UpdateHealth(ctx, ok); err != nil || res.Event != events.EndpointRecovered {
		t.Fatalf("recovery = %+v, %v", res, err)
	}
	if res, err := s.UpdateHealth(ctx, ok); err != nil || res.Event != "" {
		t.Errorf("a second recovery = %+v, %v; want nothing", res, err)
	}
	var seqs []int
	if err := db.Pool.QueryRow(ctx, `SELECT array_agg(sequence ORDER BY created_at) FROM events WHERE type LIKE 'webhook_endpoint.%'`).Scan(&seqs); err != nil {
		t.Fatal(err)
	}
	if len(seqs) != 3 || seqs[0] != 1 || seqs[1] != 2 || seqs[2] != 3 {
		t.Errorf("operational event sequences %v, want 1 2 3", seqs)
	}

	// A streak that was never announced ends without an event.
	f.exec(t, `UPDATE webhook_endpoints SET failing_since = now() WHERE id = $1`, f.endpointID)
	if res, err := s.UpdateHealth(ctx, ok); err != nil || res.Event != "" {
		t.Errorf("an unannounced recovery = %+v, %v; want no event", res, err)
	}
	st, err := s.EndpointStats(ctx, "we_filtered")
	if err != nil || st.Filtered != 2 || st.Pending != 1 {
		t.Errorf("stats of we_filtered = %+v, %v; want 2 filtered (failing, recovered), 1 pending (disabled: gone)", st, err)
	}
}
