package e2e

import (
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	stripewebhook "github.com/stripe/stripe-go/v84/webhook"

	"github.com/gatehouse-pay/gatehouse/internal/providers/adyen"
	"github.com/gatehouse-pay/gatehouse/internal/testenv/harness"
)

// stripeDisputeFixture is the dispute stripe-mock's fixtures give (GET
// /v1/disputes/:id), as a generic object the test edits.
func stripeDisputeFixture(t *testing.T, stripeMock string) map[string]any {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, stripeMock+"/v1/disputes/dp_fixture", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer sk_test_"+harness.RandomHex(12))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("stripe-mock's dispute: %v", err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	var d map[string]any
	if resp.StatusCode != http.StatusOK || json.Unmarshal(body, &d) != nil || d["object"] != "dispute" {
		t.Fatalf("stripe-mock's dispute: %d %s", resp.StatusCode, body)
	}
	return d
}

// disputeOutcome is what the test compares between two disputes that
// were told the same things in another order.
type disputeOutcome struct {
	Status, Reason string
	Amount         int64
	Types          map[string]int
	Net, Fee       int64
}

func (m *rtMerchant) disputeOutcome(t *testing.T, chargeID string) (disputeJSON, disputeOutcome) {
	t.Helper()
	list := m.disputesOf(t, chargeID)
	if len(list) != 1 {
		t.Fatalf("charge %s: %d disputes, want 1", chargeID, len(list))
	}
	d := list[0]
	o := disputeOutcome{Status: d.Status, Reason: d.Reason, Amount: d.Amount, Types: map[string]int{}}
	for _, x := range m.transactions(t, url.Values{"source": {d.ID}}) {
		o.Types[x.Type]++
		o.Net += x.Net
		o.Fee += x.Fee
	}
	return d, o
}

// TestProviderDisputeNotifications opens disputes from what Stripe and
// Adyen send, through the binaries: Stripe's charge.dispute.* events in
// the shape stripe-mock's fixtures give, signed as Stripe signs them, and
// Adyen's chargeback notifications, signed as Adyen signs them and valid
// against its webhook description. Each provider's notifications about
// one dispute are sent once in order, and about another dispute of the
// same amount each twice in reverse order: both end in the same state and
// the same books, and what would have moved a dispute backwards is
// recorded (a duplicate) and changes nothing.
func TestProviderDisputeNotifications(t *testing.T) {
	parallel(t)
	stripeMock := startStripeMockProcess(t)
	s := newAdyenSetup(t, "127.0.0.161", "disputes by notification", "STRIPE_API_BASE="+stripeMock)
	m, nt := s.m, s.notifier
	whsec := "whsec_" + harness.RandomHex(16)
	stripe := m.createConnector(t, fmt.Sprintf(`{"provider":"stripe","name":"Stripe","credentials":{"secret_key":"sk_test_%s","webhook_secret":%q}}`, harness.RandomHex(16), whsec))

	// Stripe: two charges at the Stripe connector.
	var pis, stripeCharges []string
	for i := range 2 {
		ch := m.charge(t, routeBody("4242424242424242", 4200, "eur", false, fmt.Sprintf("stripe-dispute-%d", i), fmt.Sprintf(`"connector":%q`, stripe.ID)))
		got := m.waitRouted(t, []string{ch.ID}, settled, 30*time.Second)[ch.ID]
		if got.Provider != "stripe" || !strings.HasPrefix(chaosDeref(got.ProviderReference), "pi_") {
			t.Fatalf("charge %s at Stripe: %s at %s, reference %s", ch.ID, got.Status, got.Provider, chaosDeref(got.ProviderReference))
		}
		pis, stripeCharges = append(pis, chaosDeref(got.ProviderReference)), append(stripeCharges, ch.ID)
	}
	stripeURL := strings.Replace(nt.url, s.conn.ID, stripe.ID, 1)
	postStripe := func(body string) {
		t.Helper()
		at := time.Now()
		sig := stripewebhook.ComputeSignature(at, []byte(body), whsec)
		e, err := sendWith(nt.c, http.MethodPost, stripeURL, "", body, "Stripe-Signature", fmt.Sprintf("t=%d,v1=%s", at.Unix(), hex.EncodeToString(sig)))
		if err != nil {
			t.Fatalf("POST %s: %v", stripeURL, err)
		}
		s.st.check(t, e)
		if e.status() != http.StatusOK {
			t.Fatalf("Stripe's dispute event: %s, want 200", e)
		}
	}
	fixture := stripeDisputeFixture(t, stripeMock)
	// The life of a Stripe dispute, as its events carry it.
	steps := []struct{ typ, status string }{
		{"charge.dispute.created", "needs_response"},
		{"charge.dispute.funds_withdrawn", "needs_response"},
		{"charge.dispute.updated", "under_review"},
		{"charge.dispute.closed", "won"},
		{"charge.dispute.funds_reinstated", "won"},
	}
	stripeEvents := func(pi string) []string {
		disputeID := "dp_" + harness.RandomHex(12)
		due := time.Now().Add(10 * 24 * time.Hour).Unix()
		var out []string
		for _, st := range steps {
			d := map[string]any{}
			for k, v := range fixture {
				d[k] = v
			}
			d["id"], d["payment_intent"], d["charge"], d["amount"], d["currency"] = disputeID, pi, "ch_"+harness.RandomHex(12), 4200, "eur"
			d["status"], d["reason"] = st.status, "fraudulent"
			d["evidence_details"] = map[string]any{"due_by": due, "has_evidence": false, "past_due": false, "submission_count": 0}
			d["balance_transactions"] = []any{map[string]any{"object": "balance_transaction", "amount": -4200, "fee": 1500, "currency": "eur"}}
			body, err := json.Marshal(map[string]any{"id": "evt_" + harness.RandomHex(12), "object": "event", "type": st.typ,
				"created": time.Now().Unix(), "livemode": false, "data": map[string]any{"object": d}})
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, string(body))
		}
		return out
	}
	forward, backward := stripeEvents(pis[0]), stripeEvents(pis[1])
	for _, body := range forward {
		postStripe(body)
	}
	reversed := slices.Clone(backward)
	slices.Reverse(reversed)
	for _, body := range reversed {
		postStripe(body)
		postStripe(body)
	}
	list := m.waitNotificationsApplied(t, stripe.ID, len(forward)+2*len(backward), 60*time.Second)
	outcomes := map[string]int{}
	for _, n := range list {
		outcomes[n.Outcome]++
	}
	// The worker applies notifications side by side, not in the order
	// they came, so how many of them move a dispute depends on the order
	// it applied them in: at least one per dispute (the first applied
	// opens it, at its end when that is the last event), at most one per
	// status and funds phase. Of each resent pair one at least is a
	// duplicate, and every notification is one or the other.
	applied, dup := outcomes["applied"], outcomes["duplicate"]
	if applied < 2 || applied > 2*len(steps) || dup < len(backward) || applied+dup != len(list) {
		t.Errorf("Stripe's dispute events: %v, want from 2 to %d applied, at least %d duplicates and nothing else", outcomes, 2*len(steps), len(backward))
	}
	dA, a := m.disputeOutcome(t, stripeCharges[0])
	dB, b := m.disputeOutcome(t, stripeCharges[1])
	want := disputeOutcome{Status: "won", Reason: "fraudulent", Amount: 4200, Types: map[string]int{"dispute": 1, "dispute_reversal": 1}, Net: -1500, Fee: 1500}
	if fmt.Sprint(a) != fmt.Sprint(want) || fmt.Sprint(b) != fmt.Sprint(want) {
		t.Errorf("Stripe's disputes: in order %+v, reversed and twice %+v; want both %+v", a, b, want)
	}
	for _, d := range []disputeJSON{dA, dB} {
		due, err := time.Parse(time.RFC3339, d.EvidenceDueBy)
		if d.Connector != stripe.ID || d.Currency != "EUR" || err != nil || due.Before(time.Now().Add(9*24*time.Hour)) {
			t.Errorf("Stripe's dispute: %+v; want EUR at %s, due by Stripe's due_by", d, stripe.ID)
		}
	}
	// A dispute event about a payment the gateway does not hold changes
	// nothing (it is tried again for a while, then ignored: not waited
	// for here).
	stray := stripeEvents("pi_" + harness.RandomHex(12))[0]
	postStripe(stray)
	// A forged event is refused and stored nowhere.
	at := time.Now()
	sig := stripewebhook.ComputeSignature(at, []byte(forward[0]), "whsec_"+harness.RandomHex(16))
	e, err := sendWith(nt.c, http.MethodPost, stripeURL, "", forward[0], "Stripe-Signature", fmt.Sprintf("t=%d,v1=%s", at.Unix(), hex.EncodeToString(sig)))
	if err != nil {
		t.Fatal(err)
	}
	expect(t, e, http.StatusUnauthorized, "invalid_credentials")

	// Adyen: two payments authorized at Adyen, charged back.
	m.putRouting(t, `{"default":`+route(s.conn.ID)+`}`)
	chA, payA := s.authorizedAtAdyen(t, 3000, "adyen-dispute-a")
	chB, payB := s.authorizedAtAdyen(t, 3000, "adyen-dispute-b")
	codes := []string{"NOTIFICATION_OF_CHARGEBACK", "CHARGEBACK", "CHARGEBACK_REVERSED", "SECOND_CHARGEBACK"}
	items := func(payment string) []adyen.NotificationItem {
		dispute := strings.ToUpper(harness.RandomHex(8))
		var out []adyen.NotificationItem
		for _, c := range codes {
			out = append(out, adyenItem(c, dispute, payment, "order-"+dispute, 3000, "EUR", true))
		}
		return out
	}
	fw, bw := items(payA.psp), items(payB.psp)
	for _, it := range fw {
		nt.send(t, it)
	}
	slices.Reverse(bw)
	for _, it := range bw {
		nt.send(t, it)
		nt.send(t, it)
	}
	m.waitNotificationsApplied(t, s.conn.ID, len(fw)+2*len(bw), 60*time.Second)
	_, x := m.disputeOutcome(t, chA.ID)
	_, y := m.disputeOutcome(t, chB.ID)
	// Withdrawn, reinstated, withdrawn again: the amount is gone; Adyen
	// reports its dispute fee with settlement, so none is booked here.
	wantAdyen := disputeOutcome{Status: "lost", Reason: "general", Amount: 3000, Types: map[string]int{"dispute": 2, "dispute_reversal": 1}, Net: -3000}
	if fmt.Sprint(x) != fmt.Sprint(wantAdyen) || fmt.Sprint(y) != fmt.Sprint(wantAdyen) {
		t.Errorf("Adyen's disputes: in order %+v, reversed and twice %+v; want both %+v", x, y, wantAdyen)
	}
}
