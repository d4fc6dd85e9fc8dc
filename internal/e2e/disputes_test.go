package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"
)

type disputeJSON struct {
	ID                 string            `json:"id"`
	Object             string            `json:"object"`
	Charge             string            `json:"charge"`
	Connector          string            `json:"connector"`
	Amount             int64             `json:"amount"`
	Currency           string            `json:"currency"`
	Reason             string            `json:"reason"`
	Status             string            `json:"status"`
	Evidence           map[string]string `json:"evidence"`
	EvidenceDueBy      string            `json:"evidence_due_by"`
	IsChargeRefundable bool              `json:"is_charge_refundable"`
	EvidenceDetails    struct {
		Submitted bool `json:"submitted"`
	} `json:"evidence_details"`
}

// disputesOf lists the disputes of a charge.
func (p *payments) disputesOf(t *testing.T, chargeID string) []disputeJSON {
	t.Helper()
	return listAll(t, func(q string) exchange {
		return p.do(t, http.MethodGet, "/v1/disputes?charge="+chargeID+"&"+q, "")
	}, func(d disputeJSON) string { return d.ID })
}

// waitDispute waits until the charge has a dispute for which done holds.
func (p *payments) waitDispute(t *testing.T, chargeID string, done func(disputeJSON) bool, within time.Duration) disputeJSON {
	t.Helper()
	within = patience(within)
	deadline := time.Now().Add(within)
	var last []disputeJSON
	for {
		last = p.disputesOf(t, chargeID)
		if len(last) == 1 && done(last[0]) {
			return last[0]
		}
		if time.Now().After(deadline) {
			rows, _ := p.st.db.Pool.Query(context.Background(), `SELECT type, outcome, payload::text FROM provider_notifications`)
			for rows.Next() {
				var a, b, c string
				_ = rows.Scan(&a, &b, &c)
				t.Logf("notification %s %s %s", a, b, c)
			}
			rows.Close()
			t.Fatalf("charge %s: disputes %+v after %s", chargeID, last, within)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// disputeMoney sums the dispute's balance transactions: amount and fee.
func (p *payments) disputeMoney(t *testing.T, disputeID string) (types map[string]int, amount, fee int64) {
	t.Helper()
	types = map[string]int{}
	for _, x := range p.transactions(t, url.Values{"source": {disputeID}}) {
		types[x.Type]++
		amount += x.Amount
		fee += x.Fee
	}
	return types, amount, fee
}

// disputeEvents counts the merchant's events of the dispute by type.
func (p *payments) disputeEvents(t *testing.T, disputeID string) map[string]int {
	t.Helper()
	n := map[string]int{}
	for _, e := range p.events(t) {
		if len(e.Data.Dispute) == 0 {
			continue
		}
		var d disputeJSON
		if err := json.Unmarshal(e.Data.Dispute, &d); err != nil {
			t.Fatalf("event %s: data.dispute: %v", e.ID, err)
		}
		if e.Data.Object != "dispute" {
			t.Errorf("event %s: data.object %q, want dispute", e.ID, e.Data.Object)
		}
		if d.ID == disputeID {
			n[e.EventType]++
		}
	}
	return n
}

// TestSandboxDisputes runs each sandbox dispute card's whole life through
// the real binaries: the capture disputed, the money withdrawn with the
// dispute fee, refunds refused beyond what is left, evidence staged
// (each bad field named in its 400), submitted once, decided after
// SANDBOX_DISPUTE_DECISION_DELAY (won: the amount reinstated; lost: not),
// an inquiry that moves no money, and a dispute accepted; every event
// once, the evidence audit-logged, and another merchant sees none of it.
func TestSandboxDisputes(t *testing.T) {
	parallel(t)
	st := newStack(t, stackOptions{env: []string{"RATE_LIMIT_DEFAULT=100000/1m"},
		workerEnv: []string{"SANDBOX_DISPUTE_DECISION_DELAY=2s"}}, "sandbox disputes")
	c := newClient(t, "127.0.0.1")
	_, token := st.signUp(t, c, "disputes", "Disputed Shop")
	p := &payments{st: st, c: c, key: st.newKey(t, c, token, "disputes").SecretKey}
	_, tokenB := st.signUp(t, c, "disputes-b", "Other Shop")
	other := &payments{st: st, c: c, key: st.newKey(t, c, tokenB, "disputes-b").SecretKey}

	charge := func(number string, amount int64) string {
		t.Helper()
		e := p.do(t, http.MethodPost, "/v1/charges", cardBody(number, true, amount, "dispute"))
		mustExpect(t, e, http.StatusCreated, "")
		var ch chargeJSON
		decode(t, e, &ch)
		return ch.ID
	}
	won, lost, inquiry, accepted := charge("4000000000000259", 5000), charge("4000000000002685", 3000),
		charge("4000000000001976", 2000), charge("4000000000000259", 1000)
	p.waitCharges(t, []string{won, lost, inquiry, accepted}, func(_, s string) bool { return s == "captured" }, 30*time.Second)
	open := func(d disputeJSON) bool { return d.Status == "needs_response" }
	dWon := p.waitDispute(t, won, open, 30*time.Second)
	dLost := p.waitDispute(t, lost, open, 30*time.Second)
	dInq := p.waitDispute(t, inquiry, func(d disputeJSON) bool { return d.Status == "warning_needs_response" }, 30*time.Second)
	dAcc := p.waitDispute(t, accepted, open, 30*time.Second)
	if !strings.HasPrefix(dWon.ID, "dp_") || dWon.Object != "dispute" || dWon.Amount != 5000 || dWon.Currency != "USD" ||
		dWon.Reason != "fraudulent" || dWon.IsChargeRefundable || dWon.EvidenceDueBy == "" || dWon.Connector == "" {
		t.Errorf("the fraudulent card's dispute: %+v", dWon)
	}
	if dLost.Reason != "product_not_received" || dLost.Amount != 3000 {
		t.Errorf("the product-not-received card's dispute: %+v", dLost)
	}
	if !dInq.IsChargeRefundable {
		t.Errorf("the inquiry: %+v, want the charge refundable", dInq)
	}
	due, err := time.Parse(time.RFC3339, dWon.EvidenceDueBy)
	if err != nil || due.Before(time.Now().Add(6*24*time.Hour)) {
		t.Errorf("evidence_due_by %q, want about a week ahead", dWon.EvidenceDueBy)
	}

	// The money left with the dispute fee; an inquiry moves none.
	if types, amount, fee := p.disputeMoney(t, dWon.ID); types["dispute"] != 1 || amount != -5000 || fee != 1500 {
		t.Errorf("the dispute's transactions: %v, amount %d, fee %d; want one dispute of -5000 with a fee of 1500", types, amount, fee)
	}
	if types, _, _ := p.disputeMoney(t, dInq.ID); len(types) != 0 {
		t.Errorf("the inquiry's transactions: %v, want none", types)
	}
	// No refund of money already withdrawn; the inquiry's charge refunds.
	mustExpect(t, p.do(t, http.MethodPost, "/v1/refunds", fmt.Sprintf(`{"charge":%q,"amount":100}`, won)), http.StatusConflict, "charge_disputed")
	mustExpect(t, p.do(t, http.MethodPost, "/v1/refunds", fmt.Sprintf(`{"charge":%q}`, won)), http.StatusConflict, "charge_disputed")
	e := p.do(t, http.MethodPost, "/v1/refunds", fmt.Sprintf(`{"charge":%q,"amount":500}`, inquiry))
	mustExpect(t, e, http.StatusCreated, "")

	// Bad evidence: each field named, nothing stored.
	path := "/v1/disputes/" + dWon.ID
	for body, param := range map[string]string{
		`{"evidence":{"bogus":"x"}}`:                                      "evidence.bogus",
		`{"evidence":{"customer_name":7}}`:                                "evidence.customer_name",
		`{"evidence":{"customer_email_address":"not an address"}}`:        "evidence.customer_email_address",
		`{"evidence":{"customer_purchase_ip":"999.1.1.1"}}`:               "evidence.customer_purchase_ip",
		`{"evidence":{"shipping_date":"2026-13-40"}}`:                     "evidence.shipping_date",
		`{"evidence":"winning_evidence"}`:                                 "evidence",
		`{"submit":false}`:                                                "evidence",
		`{"evidence":{"uncategorized_text":"x"},"submit":"yes"}`:          "submit",
		`{"evidence":{"customer_name":"a\nb"}}`:                           "evidence.customer_name",
		`{"evidence":{"uncategorized_text":"x"},"unexpected":"property"}`: "",
	} {
		e := p.do(t, http.MethodPost, path, body)
		if e.status() != http.StatusBadRequest || (param != "" && e.param() != param) {
			t.Errorf("POST %s %s: %s, want 400 naming %q", path, body, e, param)
		}
	}
	// 150,000 characters in all, staged in parts: one more is refused.
	chunk := strings.Repeat("e", 50_000)
	for _, f := range []string{"access_activity_log", "product_description", "service_documentation"} {
		mustExpect(t, p.do(t, http.MethodPost, path, fmt.Sprintf(`{"evidence":{%q:%q}}`, f, chunk)), http.StatusOK, "")
	}
	e = p.do(t, http.MethodPost, path, `{"evidence":{"customer_name":"A"}}`)
	if e.status() != http.StatusBadRequest || e.param() != "evidence" {
		t.Errorf("evidence over 150,000 characters: %s, want 400 naming evidence", e)
	}
	// Cleared again, then the answer staged, replayed by its key, submitted.
	mustExpect(t, p.do(t, http.MethodPost, path, `{"evidence":{"access_activity_log":null,"product_description":"","service_documentation":null}}`), http.StatusOK, "")
	stage := `{"evidence":{"customer_name":"Ada Lovelace","customer_email_address":"ada@example.com","uncategorized_text":"winning_evidence"}}`
	first := p.do(t, http.MethodPost, path, stage, "Idempotency-Key", "stage-"+dWon.ID)
	mustExpect(t, first, http.StatusOK, "")
	again := p.do(t, http.MethodPost, path, stage, "Idempotency-Key", "stage-"+dWon.ID)
	if again.header("Idempotent-Replayed") != "true" || string(again.body) != string(first.body) {
		t.Errorf("the replayed staging: %s", again)
	}
	var staged disputeJSON
	decode(t, first, &staged)
	if staged.Status != "needs_response" || len(staged.Evidence) != 3 || staged.Evidence["customer_name"] != "Ada Lovelace" || staged.EvidenceDetails.Submitted {
		t.Errorf("staged: %+v", staged)
	}
	if got := other.do(t, http.MethodPost, path, stage); got.status() != http.StatusNotFound {
		t.Errorf("another merchant stages evidence: %s, want 404", got)
	}
	mustExpect(t, other.do(t, http.MethodGet, path, ""), http.StatusNotFound, "not_found")
	if list := other.disputesOf(t, won); len(list) != 0 {
		t.Errorf("another merchant lists %d disputes of the charge", len(list))
	}
	submitted := p.do(t, http.MethodPost, path, `{"submit":true}`, "Idempotency-Key", "submit-"+dWon.ID)
	mustExpect(t, submitted, http.StatusOK, "")
	var sub disputeJSON
	decode(t, submitted, &sub)
	if sub.Status != "under_review" || !sub.EvidenceDetails.Submitted {
		t.Errorf("submitted: %+v, want under_review", sub)
	}
	if again := p.do(t, http.MethodPost, path, `{"submit":true}`, "Idempotency-Key", "submit-"+dWon.ID); again.header("Idempotent-Replayed") != "true" {
		t.Errorf("the replayed submission: %s", again)
	}
	mustExpect(t, p.do(t, http.MethodPost, path, `{"submit":true}`), http.StatusConflict, "invalid_state")
	mustExpect(t, p.do(t, http.MethodPost, path, `{"evidence":{"customer_name":"B"}}`), http.StatusConflict, "invalid_state")
	mustExpect(t, p.do(t, http.MethodPost, path+"/close", ""), http.StatusConflict, "invalid_state")

	// The losing evidence, and the inquiry's answer.
	mustExpect(t, p.do(t, http.MethodPost, "/v1/disputes/"+dLost.ID, `{"evidence":{"uncategorized_text":"losing_evidence"},"submit":true}`), http.StatusOK, "")
	mustExpect(t, p.do(t, http.MethodPost, "/v1/disputes/"+dInq.ID, `{"evidence":{"uncategorized_text":"winning_evidence"},"submit":true}`), http.StatusOK, "")
	// The loss accepted.
	e = p.do(t, http.MethodPost, "/v1/disputes/"+dAcc.ID+"/close", "", "Idempotency-Key", "close-"+dAcc.ID)
	mustExpect(t, e, http.StatusOK, "")
	var acc disputeJSON
	decode(t, e, &acc)
	if acc.Status != "lost" {
		t.Errorf("accepted: %+v, want lost", acc)
	}

	dWon = p.waitDispute(t, won, func(d disputeJSON) bool { return d.Status == "won" }, 30*time.Second)
	dLost = p.waitDispute(t, lost, func(d disputeJSON) bool { return d.Status == "lost" }, 30*time.Second)
	dInq = p.waitDispute(t, inquiry, func(d disputeJSON) bool { return d.Status == "warning_closed" }, 30*time.Second)
	if types, amount, fee := p.disputeMoney(t, dWon.ID); types["dispute"] != 1 || types["dispute_reversal"] != 1 || amount != 0 || fee != 1500 {
		t.Errorf("the won dispute's transactions: %v, amount %d, fee %d; want the amount back, the fee kept", types, amount, fee)
	}
	if types, amount, fee := p.disputeMoney(t, dLost.ID); types["dispute"] != 1 || len(types) != 1 || amount != -3000 || fee != 1500 {
		t.Errorf("the lost dispute's transactions: %v, amount %d, fee %d", types, amount, fee)
	}
	if types, amount, _ := p.disputeMoney(t, dAcc.ID); types["dispute"] != 1 || len(types) != 1 || amount != -1000 {
		t.Errorf("the accepted dispute's transactions: %v, amount %d", types, amount)
	}
	if types, _, _ := p.disputeMoney(t, dInq.ID); len(types) != 0 {
		t.Errorf("the closed inquiry's transactions: %v, want none", types)
	}
	// Won: the charge refunds again.
	mustExpect(t, p.do(t, http.MethodPost, "/v1/refunds", fmt.Sprintf(`{"charge":%q,"amount":100}`, won)), http.StatusCreated, "")

	// Every event once, in the catalogue's names; filters list by status.
	wantEvents := map[string]map[string]int{
		dWon.ID: {"charge.dispute.created": 1, "charge.dispute.funds_withdrawn": 1, "charge.dispute.updated": 5,
			"charge.dispute.closed": 1, "charge.dispute.funds_reinstated": 1},
		dInq.ID: {"charge.dispute.created": 1, "charge.dispute.updated": 2, "charge.dispute.closed": 1},
	}
	for id, want := range wantEvents {
		got := p.disputeEvents(t, id)
		for typ, n := range want {
			if typ == "charge.dispute.updated" {
				if got[typ] < 1 {
					t.Errorf("dispute %s: events %v, want charge.dispute.updated", id, got)
				}
				continue
			}
			if got[typ] != n {
				t.Errorf("dispute %s: %d %s events (all: %v), want %d", id, got[typ], typ, got, n)
			}
		}
	}
	var list struct {
		Data []disputeJSON `json:"data"`
	}
	e = p.do(t, http.MethodGet, "/v1/disputes?status=won", "")
	mustExpect(t, e, http.StatusOK, "")
	decode(t, e, &list)
	if len(list.Data) != 1 || list.Data[0].ID != dWon.ID {
		t.Errorf("disputes won: %+v", list.Data)
	}
	mustExpect(t, p.do(t, http.MethodGet, "/v1/disputes?status=pending", ""), http.StatusBadRequest, "parameter_invalid")
	mustExpect(t, p.do(t, http.MethodGet, "/v1/disputes/dp_nope", ""), http.StatusNotFound, "not_found")

	// The evidence's submission is in the audit log, by key.
	log := st.do(t, c, http.MethodGet, st.replicas[0]+"/v1/audit_log?action=dispute.evidence", token, "")
	mustExpect(t, log, http.StatusOK, "")
	if !strings.Contains(string(log.body), dWon.ID) {
		t.Errorf("the audit log has no dispute.evidence entry of %s: %s", dWon.ID, log.body)
	}
	if strings.Contains(string(log.body), "winning_evidence") {
		t.Errorf("the audit log holds the evidence itself: %s", log.body)
	}
}
