package httpapi_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/gatehouse-pay/gatehouse/internal/providers"
	"github.com/gatehouse-pay/gatehouse/internal/providers/providertest"
)

func refundJSON(chargeID string, rest string) string {
	if rest == "" {
		return `{"charge":"` + chargeID + `"}`
	}
	return `{"charge":"` + chargeID + `",` + rest + `}`
}

func TestRefunds(t *testing.T) {
	t.Parallel()
	h := newHarness(t, paymentsEnv)
	a := h.account("ada@example.com")
	w := h.worker(t, &providertest.Fake{})
	id := h.capturedCharge(t, w, a.secret, 2000)

	t.Run("validation", func(t *testing.T) {
		cases := []struct {
			name, body  string
			status      int
			code, param string
		}{
			{"empty", "", 400, "parameter_missing", "charge"},
			{"charge missing", `{"amount":100}`, 400, "parameter_missing", "charge"},
			{"charge a number", `{"charge":5}`, 400, "parameter_invalid", "charge"},
			{"amount zero", refundJSON(id, `"amount":0`), 400, "parameter_invalid", "amount"},
			{"amount negative", refundJSON(id, `"amount":-1`), 400, "parameter_invalid", "amount"},
			{"amount float", refundJSON(id, `"amount":1.5`), 400, "parameter_invalid", "amount"},
			{"amount string", refundJSON(id, `"amount":"100"`), 400, "parameter_invalid", "amount"},
			{"amount over the charge", refundJSON(id, `"amount":2001`), 400, "amount_too_large", "amount"},
			{"amount over the maximum", refundJSON(id, `"amount":100000000`), 400, "parameter_invalid", "amount"},
			{"reason unknown", refundJSON(id, `"reason":"changed_mind"`), 400, "parameter_invalid", "reason"},
			{"metadata 41-char key", refundJSON(id, `"metadata":{"`+strings.Repeat("k", 41)+`":"v"}`), 400, "parameter_invalid", "metadata"},
			{"metadata number", refundJSON(id, `"metadata":{"k":1}`), 400, "parameter_invalid", "metadata"},
			{"read-only status", refundJSON(id, `"status":"succeeded"`), 400, "parameter_invalid", "status"},
			{"read-only currency", refundJSON(id, `"currency":"EUR"`), 400, "parameter_invalid", "currency"},
			{"read-only merchant_id", refundJSON(id, `"merchant_id":"mer_x"`), 400, "parameter_invalid", "merchant_id"},
			{"environment live", refundJSON(id, `"environment":"live"`), 403, "live_mode_disabled", ""},
			{"not JSON", `{"charge":`, 400, "invalid_json", ""},
			{"unknown charge", refundJSON("0193a5c2-7f1e-7b3a-9c4d-2e8f6a1b3c5d", ""), 404, "not_found", ""},
			{"malformed charge", refundJSON("ch_123", ""), 404, "not_found", ""},
		}
		for _, c := range cases {
			t.Run(c.name, func(t *testing.T) {
				r := h.with(t).do("POST", "/v1/refunds", c.body, bearer(a.secret)...)
				want(t, r, c.status, c.code)
				if r.errField("param") != c.param {
					t.Errorf("param = %q, want %q", r.errField("param"), c.param)
				}
			})
		}
		if n := h.count(t, "SELECT count(*) FROM refunds"); n != 0 {
			t.Errorf("%d refunds after bad requests, want 0", n)
		}
		if row := h.chargeRow(t, id); row.Held != 0 || row.Refunded != 0 {
			t.Errorf("bad requests moved money: %+v", row)
		}
		r := h.with(t).do("POST", "/v1/refunds", refundJSON(id, ""), append(bearer(a.secret), "Content-Type", "text/plain")...)
		want(t, r, 415, "unsupported_media_type")
	})

	var first map[string]any
	t.Run("create", func(t *testing.T) {
		r := h.with(t).do("POST", "/v1/refunds", refundJSON(id, `"amount":500,"reason":"requested_by_customer","metadata":{"ticket":"SUP-881"}`), bearer(a.secret)...)
		want(t, r, 201, "")
		first = r.body
		wantRefund := map[string]any{
			"id": r.body["id"], "object": "refund", "charge": id, "amount": 500.0, "currency": "USD", "status": "pending",
			"reason": "requested_by_customer", "metadata": map[string]any{"ticket": "SUP-881"}, "failure_code": nil,
			"created_at": r.body["created_at"], "updated_at": r.body["created_at"],
		}
		if diff := cmp.Diff(wantRefund, r.body); diff != "" {
			t.Errorf("refund (-want +got):\n%s", diff)
		}
		g := h.with(t).do("GET", "/v1/refunds/"+r.body["id"].(string), "", bearer(a.secret)...)
		want(t, g, 200, "")
		if diff := cmp.Diff(r.body, g.body); diff != "" {
			t.Errorf("GET differs (-create +get):\n%s", diff)
		}
		evs := h.eventsOf(t, a.secret, "refund.created")
		if len(evs) != 1 {
			t.Fatalf("%d refund.created events, want 1", len(evs))
		}
		data := obj(evs[0]["data"])
		if data["object"] != "refund" {
			t.Errorf("data.object = %v, want refund", data["object"])
		}
		if diff := cmp.Diff(r.body, data["refund"]); diff != "" {
			t.Errorf("data.refund (-refund +event):\n%s", diff)
		}
		if c := obj(data["charge"]); c["id"] != id || c["status"] != "captured" {
			t.Errorf("data.charge = %v", c)
		}
		if row := h.chargeRow(t, id); row.Held != 500 || row.Refunded != 0 || row.Status != "captured" {
			t.Errorf("charge row = %+v, want 500 held", row)
		}
		if n := h.count(t, "SELECT count(*) FROM outbox WHERE task_id = $1", "refund:process:"+r.body["id"].(string)); n != 1 {
			t.Errorf("%d refund tasks, want 1", n)
		}
		// The charge reads as before until the provider settles.
		c := h.with(t).do("GET", "/v1/charges/"+id, "", bearer(a.secret)...)
		if c.body["amount_refunded"] != 0.0 || c.body["status"] != "captured" {
			t.Errorf("charge with a pending refund: %s", c.raw)
		}
	})

	t.Run("amount above what remains", func(t *testing.T) {
		r := h.with(t).do("POST", "/v1/refunds", refundJSON(id, `"amount":1501`), bearer(a.secret)...)
		want(t, r, 400, "amount_too_large")
		if r.errField("param") != "amount" {
			t.Errorf("param = %q, want amount", r.errField("param"))
		}
	})

	t.Run("idempotency", func(t *testing.T) {
		body := refundJSON(id, `"amount":100`)
		r1 := h.with(t).do("POST", "/v1/refunds", body, append(bearer(a.secret), "Idempotency-Key", "ref-1")...)
		want(t, r1, 201, "")
		r2 := h.with(t).do("POST", "/v1/refunds", body, append(bearer(a.secret), "Idempotency-Key", "ref-1")...)
		if r2.status != 201 || string(r2.raw) != string(r1.raw) || r2.header.Get("Idempotent-Replayed") != "true" {
			t.Errorf("replay = %d %s replayed=%q, want the first answer", r2.status, r2.raw, r2.header.Get("Idempotent-Replayed"))
		}
		want(t, h.with(t).do("POST", "/v1/refunds", refundJSON(id, `"amount":101`), append(bearer(a.secret), "Idempotency-Key", "ref-1")...), 422, "idempotency_key_reused")
		if row := h.chargeRow(t, id); row.Held != 600 {
			t.Errorf("held %d, want 600 (500 + one 100)", row.Held)
		}
	})

	t.Run("settle", func(t *testing.T) {
		w.refund(t, first["id"].(string))
		g := h.with(t).do("GET", "/v1/refunds/"+first["id"].(string), "", bearer(a.secret)...)
		if g.body["status"] != "succeeded" || g.body["amount"] != 500.0 {
			t.Errorf("settled refund: %s", g.raw)
		}
		if row := h.chargeRow(t, id); row.Held != 100 || row.Refunded != 500 || row.Status != "captured" {
			t.Errorf("charge row = %+v, want 500 refunded, 100 held", row)
		}
		c := h.with(t).do("GET", "/v1/charges/"+id, "", bearer(a.secret)...)
		if c.body["amount_refunded"] != 500.0 || c.body["status"] != "captured" {
			t.Errorf("charge after a partial refund: %s", c.raw)
		}
		evs := h.eventsOf(t, a.secret, "refund.succeeded")
		if len(evs) != 1 || obj(obj(evs[0]["data"])["refund"])["status"] != "succeeded" ||
			obj(obj(evs[0]["data"])["charge"])["amount_refunded"] != 500.0 {
			t.Errorf("refund.succeeded events: %v", evs)
		}
		// A duplicate task does nothing.
		w.refund(t, first["id"].(string))
		if row := h.chargeRow(t, id); row.Refunded != 500 {
			t.Errorf("a duplicate task refunded again: %+v", row)
		}
	})

	t.Run("provider declines", func(t *testing.T) {
		declining := h.worker(t, &providertest.Fake{RefundFn: func(context.Context, providers.RefundRequest) (providers.Result, error) {
			return providers.Result{}, &providers.Decline{Code: "insufficient_funds"}
		}})
		r := h.with(t).do("POST", "/v1/refunds", refundJSON(id, `"amount":300`), bearer(a.secret)...)
		want(t, r, 201, "")
		declining.refund(t, r.body["id"].(string))
		g := h.with(t).do("GET", "/v1/refunds/"+r.body["id"].(string), "", bearer(a.secret)...)
		if g.body["status"] != "failed" || g.body["failure_code"] != "insufficient_funds" {
			t.Errorf("declined refund: %s", g.raw)
		}
		if row := h.chargeRow(t, id); row.Held != 100 || row.Refunded != 500 {
			t.Errorf("charge row = %+v, want the declined 300 released", row)
		}
	})

	t.Run("provider unavailable", func(t *testing.T) {
		down := h.worker(t, &providertest.Fake{RefundFn: func(context.Context, providers.RefundRequest) (providers.Result, error) {
			return providers.Result{}, providers.ErrUnavailable
		}})
		r := h.with(t).do("POST", "/v1/refunds", refundJSON(id, `"amount":50`), bearer(a.secret)...)
		want(t, r, 201, "")
		rid := r.body["id"].(string)
		if err := down.refunds.Process(context.Background(), rid, false); err == nil {
			t.Fatal("an unavailable provider did not ask for a retry")
		}
		if row := h.chargeRow(t, id); row.Held != 150 {
			t.Errorf("held %d during the outage, want 150", row.Held)
		}
		// The provider may have paid the refund out: the last attempt
		// leaves it pending, its amount held, never failed on a guess.
		if err := down.refunds.Process(context.Background(), rid, true); err == nil {
			t.Fatal("the last attempt without an answer settled the refund")
		}
		g := h.with(t).do("GET", "/v1/refunds/"+rid, "", bearer(a.secret)...)
		if g.body["status"] != "pending" {
			t.Errorf("refund after the last attempt: %s, want pending", g.raw)
		}
		if row := h.chargeRow(t, id); row.Held != 150 {
			t.Errorf("held %d after the last attempt, want 150", row.Held)
		}
		// The provider answers again: the refund succeeds.
		w.refund(t, rid)
		g = h.with(t).do("GET", "/v1/refunds/"+rid, "", bearer(a.secret)...)
		if g.body["status"] != "succeeded" {
			t.Errorf("refund once the provider answers: %s", g.raw)
		}
		if row := h.chargeRow(t, id); row.Held != 100 || row.Refunded != 550 {
			t.Errorf("charge row = %+v, want 100 held and 550 refunded", row)
		}
	})

	t.Run("refund the rest", func(t *testing.T) {
		r := h.with(t).do("POST", "/v1/refunds", refundJSON(id, `"reason":"duplicate"`), bearer(a.secret)...)
		want(t, r, 201, "")
		if r.body["amount"] != 1350.0 {
			t.Errorf("default amount %v, want the 1350 that remains", r.body["amount"])
		}
		list := h.with(t).do("GET", "/v1/refunds?charge="+id+"&limit=100", "", bearer(a.secret)...)
		want(t, list, 200, "")
		pending := 0
		for _, it := range list.body["data"].([]any) {
			if obj(it)["status"] == "pending" {
				pending++
				w.refund(t, obj(it)["id"].(string))
			}
		}
		if pending != 2 {
			t.Errorf("%d pending refunds, want 2 (100 and 1350)", pending)
		}
		row := h.chargeRow(t, id)
		if row.Status != "refunded" || row.Refunded != 2000 || row.Held != 0 {
			t.Errorf("charge row = %+v, want refunded 2000", row)
		}
		c := h.with(t).do("GET", "/v1/charges/"+id, "", bearer(a.secret)...)
		if c.body["status"] != "refunded" || c.body["amount_refunded"] != 2000.0 {
			t.Errorf("charge: %s", c.raw)
		}
		evs := h.eventsOf(t, a.secret, "charge.refunded")
		if len(evs) != 1 {
			t.Fatalf("%d charge.refunded events, want 1", len(evs))
		}
		if diff := cmp.Diff(c.body, obj(evs[0]["data"])["charge"]); diff != "" {
			t.Errorf("charge.refunded data.charge (-charge +event):\n%s", diff)
		}
		want(t, h.with(t).do("POST", "/v1/refunds", refundJSON(id, ""), bearer(a.secret)...), 409, "invalid_state")
		want(t, h.with(t).do("POST", "/v1/refunds", refundJSON(id, `"amount":1`), bearer(a.secret)...), 409, "invalid_state")
	})

	t.Run("list", func(t *testing.T) {
		other := h.capturedCharge(t, w, a.secret, 900)
		otherRefund := h.with(t).do("POST", "/v1/refunds", refundJSON(other, `"amount":10`), bearer(a.secret)...)
		want(t, otherRefund, 201, "")

		all := h.with(t).do("GET", "/v1/refunds?limit=100", "", bearer(a.secret)...)
		want(t, all, 200, "")
		ids := idsOf(all)
		if len(ids) != 6 || ids[0] != otherRefund.body["id"] {
			t.Fatalf("refunds %v, want 6 with the newest first", ids)
		}
		for i := 1; i < len(ids); i++ {
			if ids[i-1] <= ids[i] {
				t.Errorf("not newest first: %v", ids)
			}
		}
		ofCharge := h.with(t).do("GET", "/v1/refunds?charge="+id+"&limit=100", "", bearer(a.secret)...)
		if diff := cmp.Diff(ids[1:], idsOf(ofCharge)); diff != "" {
			t.Errorf("refunds of %s (-want +got):\n%s", id, diff)
		}
		page := h.with(t).do("GET", "/v1/refunds?limit=2&starting_after="+ids[1], "", bearer(a.secret)...)
		if diff := cmp.Diff(ids[2:4], idsOf(page)); diff != "" || page.body["has_more"] != true {
			t.Errorf("page (-want +got):\n%s has_more %v", diff, page.body["has_more"])
		}
		page = h.with(t).do("GET", "/v1/refunds?limit=2&charge="+id+"&ending_before="+ids[3], "", bearer(a.secret)...)
		if diff := cmp.Diff(ids[1:3], idsOf(page)); diff != "" || page.body["has_more"] != false {
			t.Errorf("ending_before page (-want +got):\n%s has_more %v", diff, page.body["has_more"])
		}
		for _, q := range []string{"charge=nope", "limit=0", "starting_after=nope"} {
			want(t, h.with(t).do("GET", "/v1/refunds?"+q, "", bearer(a.secret)...), 400, "parameter_invalid")
		}
		none := h.with(t).do("GET", "/v1/refunds?charge=0193a5c2-7f1e-7b3a-9c4d-2e8f6a1b3c5d", "", bearer(a.secret)...)
		want(t, none, 200, "")
		if len(idsOf(none)) != 0 {
			t.Errorf("refunds of an unknown charge: %s", none.raw)
		}
	})
}

// TestRefundOfFullyHeldCharge: while pending refunds hold the whole amount,
// another refund asks for more than remains (0): api/openapi.yaml says 400
// amount_too_large, and the charge is still captured, so not invalid_state.
func TestRefundOfFullyHeldCharge(t *testing.T) {
	t.Parallel()
	h := newHarness(t, paymentsEnv)
	a := h.account("ada@example.com")
	w := h.worker(t, &providertest.Fake{})
	id := h.capturedCharge(t, w, a.secret, 1000)
	want(t, h.do("POST", "/v1/refunds", refundJSON(id, ""), bearer(a.secret)...), 201, "")
	r := h.do("POST", "/v1/refunds", refundJSON(id, `"amount":1`), bearer(a.secret)...)
	want(t, r, 400, "amount_too_large")
	if r.errField("param") != "amount" {
		t.Errorf("param = %q, want amount", r.errField("param"))
	}
}

// TestRefundMetadataLimitsMatchCharges: metadata limits count characters, as
// for charges (a 40-character key of accented letters is fine).
func TestRefundMetadataLimitsMatchCharges(t *testing.T) {
	t.Parallel()
	h := newHarness(t, paymentsEnv)
	a := h.account("ada@example.com")
	w := h.worker(t, &providertest.Fake{})
	id := h.capturedCharge(t, w, a.secret, 1000)
	md := `"metadata":{"` + strings.Repeat("é", 40) + `":"` + strings.Repeat("é", 500) + `"}`
	h.createCharge(t, a.secret, `{"amount":100,"currency":"USD","payment_method":"card","card":{"token":"tok_visa"},`+md+`}`)
	r := h.do("POST", "/v1/refunds", refundJSON(id, `"amount":1,`+md), bearer(a.secret)...)
	want(t, r, 201, "")
}

// TestConcurrentRefunds is docs/reliability.md I3: refunds never exceed the charge.
func TestConcurrentRefunds(t *testing.T) {
	t.Parallel()
	h := newHarness(t, paymentsEnv)
	a := h.account("ada@example.com")
	w := h.worker(t, &providertest.Fake{})
	id := h.capturedCharge(t, w, a.secret, 10000)

	answers := burst(t, 10, func(int) (response, error) {
		return h.try("POST", "/v1/refunds", refundJSON(id, `"amount":3000`), bearer(a.secret)...)
	})
	got := map[string]int{}
	var refundIDs []string
	for _, r := range answers {
		got[fmt.Sprintf("%d %s", r.status, r.errCode())]++
		if r.status == 201 {
			refundIDs = append(refundIDs, r.body["id"].(string))
		}
	}
	if diff := cmp.Diff(map[string]int{"201 ": 3, "400 amount_too_large": 7}, got); diff != "" {
		t.Fatalf("answers (-want +got):\n%s", diff)
	}
	row := h.chargeRow(t, id)
	if row.Held != 9000 || row.Refunded != 0 || row.Held+row.Refunded > row.Amount {
		t.Errorf("charge row = %+v, want 9000 held", row)
	}

	// Each refund task delivered twice at once: settled once.
	var pwg sync.WaitGroup
	perrs := make([]error, 2*len(refundIDs))
	for i, rid := range refundIDs {
		for j := 0; j < 2; j++ {
			pwg.Add(1)
			go func() {
				defer pwg.Done()
				perrs[2*i+j] = w.refunds.Process(context.Background(), rid, false)
			}()
		}
	}
	pwg.Wait()
	if err := errors.Join(perrs...); err != nil {
		t.Fatal(err)
	}
	row = h.chargeRow(t, id)
	if row.Refunded != 9000 || row.Held != 0 || row.Status != "captured" {
		t.Errorf("after settling: %+v, want 9000 refunded, captured", row)
	}
	c := h.do("GET", "/v1/charges/"+id, "", bearer(a.secret)...)
	if c.body["amount_refunded"] != 9000.0 || c.body["status"] != "captured" {
		t.Errorf("charge: %s", c.raw)
	}

	last := h.do("POST", "/v1/refunds", refundJSON(id, `"amount":1000`), bearer(a.secret)...)
	want(t, last, 201, "")
	w.refund(t, last.body["id"].(string))
	row = h.chargeRow(t, id)
	if row.Status != "refunded" || row.Refunded != 10000 || row.Held != 0 {
		t.Errorf("after the last refund: %+v, want refunded 10000", row)
	}
	counts := map[string]int{}
	for _, typ := range []string{"refund.created", "refund.succeeded", "charge.refunded", "charge.captured", "charge.created"} {
		counts[typ] = len(h.eventsOf(t, a.secret, typ))
	}
	wantCounts := map[string]int{"refund.created": 4, "refund.succeeded": 4, "charge.refunded": 1, "charge.captured": 1, "charge.created": 1}
	if diff := cmp.Diff(wantCounts, counts); diff != "" {
		t.Errorf("events (-want +got):\n%s", diff)
	}
	list := h.do("GET", "/v1/refunds?charge="+id, "", bearer(a.secret)...)
	total := 0.0
	for _, it := range list.body["data"].([]any) {
		if obj(it)["status"] != "succeeded" {
			t.Errorf("refund %v is %v", obj(it)["id"], obj(it)["status"])
		}
		total += obj(it)["amount"].(float64)
	}
	if total != 10000 {
		t.Errorf("refunds add up to %v, want 10000", total)
	}
}

// TestPartialRefundMovesUpdatedAt: a settled refund changes the charge's
// amount_refunded, so it changes its updated_at too.
func TestPartialRefundMovesUpdatedAt(t *testing.T) {
	t.Parallel()
	h := newHarness(t, paymentsEnv)
	a := h.account("ada@example.com")
	w := h.worker(t, &providertest.Fake{})
	id := h.capturedCharge(t, w, a.secret, 1000)
	before := h.do("GET", "/v1/charges/"+id, "", bearer(a.secret)...)
	r := h.do("POST", "/v1/refunds", refundJSON(id, `"amount":100`), bearer(a.secret)...)
	want(t, r, 201, "")
	time.Sleep(5 * time.Millisecond)
	w.refund(t, r.body["id"].(string))
	after := h.do("GET", "/v1/charges/"+id, "", bearer(a.secret)...)
	if after.body["amount_refunded"] != 100.0 {
		t.Fatalf("amount_refunded = %v, want 100", after.body["amount_refunded"])
	}
	if after.body["updated_at"] == before.body["updated_at"] {
		t.Errorf("updated_at stayed %v although amount_refunded moved from 0 to 100", after.body["updated_at"])
	}
}

// TestConcurrentRefundsOneKey: one Idempotency-Key sent 10 times at once
// makes one refund.
func TestConcurrentRefundsOneKey(t *testing.T) {
	t.Parallel()
	h := newHarness(t, paymentsEnv)
	a := h.account("ada@example.com")
	w := h.worker(t, &providertest.Fake{})
	id := h.capturedCharge(t, w, a.secret, 1000)
	answers := burst(t, 10, func(int) (response, error) {
		return h.try("POST", "/v1/refunds", refundJSON(id, `"amount":100`), append(bearer(a.secret), "Idempotency-Key", "one")...)
	})
	var created []string
	for i, r := range answers {
		switch {
		case r.status == 201:
			created = append(created, string(r.raw))
		case r.status == 409 && r.errCode() == "idempotency_key_in_use":
		default:
			t.Errorf("answer %d: %d %s", i, r.status, r.raw)
		}
	}
	if len(created) == 0 {
		t.Fatal("no 201")
	}
	for _, c := range created[1:] {
		if c != created[0] {
			t.Errorf("201 bodies differ:\n%s\n%s", created[0], c)
		}
	}
	if n := h.count(t, "SELECT count(*) FROM refunds"); n != 1 {
		t.Errorf("%d refunds, want 1", n)
	}
	if row := h.chargeRow(t, id); row.Held != 100 {
		t.Errorf("held %d, want 100", row.Held)
	}
}
