package e2e

import (
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gatehouse-pay/gatehouse/internal/testenv/harness"
)

// disputesJourney is what disputes.mjs saw.
type disputesJourney struct {
	journeyRun
	MoneyLinks []string        `json:"moneyLinks"`
	Listed     []disputeListed `json:"listed"`
	Refused    struct {
		Status     int    `json:"status"`
		Message    string `json:"message"`
		FieldError string `json:"fieldError"`
		Kept       string `json:"kept"`
	} `json:"refused"`
	Saved struct {
		Notice string `json:"notice"`
		Chars  string `json:"chars"`
		Kept   string `json:"kept"`
	} `json:"saved"`
	Submitted struct {
		Notice string `json:"notice"`
		Forms  int    `json:"forms"`
		Shown  string `json:"shown"`
	} `json:"submitted"`
	Decided struct {
		Status string `json:"status"`
		Funds  string `json:"funds"`
	} `json:"decided"`
	After []disputeListed `json:"after"`
}

// disputeListed is a row of the Disputes page.
type disputeListed struct {
	ID     string `json:"id"`
	Status string `json:"status"`
	Group  string `json:"group"`
	Soon   string `json:"soon"`
	Left   string `json:"left"`
}

// TestBrowserDisputes is the dashboard's disputes in Debian's chromium
// against the real binaries (disputes.mjs). A merchant's customers pay
// with the sandbox's disputed cards (a fraudulent dispute, a product not
// received and an inquiry) and one that is not disputed; the sandbox
// reports each dispute to the gateway by notification once the payment is
// captured, and the worker applies it. The journey finds the three on the
// Disputes page, each waiting for evidence and due in 7 days; on the
// fraudulent one it stages evidence (an IP address that is not one is
// refused on the page, next to its field, and corrected), then submits the
// sandbox's winning test evidence and sees the page read-only, and the
// dispute won once the sandbox decides it (SANDBOX_DISPUTE_DECISION_DELAY
// 2 s). The dispute, its books and the audit log are checked through the
// API and the database.
func TestBrowserDisputes(t *testing.T) {
	parallel(t)
	dir, chromium := browserTools(t)
	shots := screenshotDir(t)
	st := newStack(t, stackOptions{workerEnv: []string{"SANDBOX_DISPUTE_DECISION_DELAY=2s"}}, "browser disputes")
	setup := newClient(t, "127.0.0.42")
	email, password := "disputes-"+harness.RandomHex(4)+"@example.com", "correct horse "+harness.RandomHex(8)
	merchantID := st.createMerchant(t, email, password, "Dispute Shop")
	token := st.sessionToken(t, setup, email, password)
	p := &payments{st: st, c: setup, key: st.newKey(t, setup, token, "disputes").SecretKey}

	// Real captures through the routing (the server's sandbox connector):
	// three of disputed test cards, one of a card that is not.
	cards := []struct {
		number string
		amount int64
		reason string
	}{{"4000000000000259", 4200, "fraudulent"}, {"4000000000002685", 1850, "product_not_received"},
		{"4000000000001976", 990, "general"}, {"4242424242424242", 1500, ""}}
	var charged []string
	for _, c := range cards {
		body := strings.Replace(cardBody(c.number, true, c.amount, "disputes"), `,"provider":"sandbox"`, "", 1)
		e := p.do(t, http.MethodPost, "/v1/charges", body)
		mustExpect(t, e, http.StatusCreated, "")
		var ch struct {
			ID string `json:"id"`
		}
		decode(t, e, &ch)
		charged = append(charged, ch.ID)
	}
	p.waitCharges(t, charged, func(_, status string) bool { return status == "captured" }, 30*time.Second)

	// The sandbox's notifications, applied by the worker: a dispute of
	// each disputed charge, due in 7 days.
	byCharge := map[string]disputeJSON{}
	for i, c := range cards {
		if c.reason == "" {
			continue
		}
		d := p.waitDispute(t, charged[i], func(disputeJSON) bool { return true }, 30*time.Second)
		byCharge[charged[i]] = d
		status := "needs_response"
		if c.number == "4000000000001976" {
			status = "warning_needs_response"
		}
		due, err := time.Parse(time.RFC3339, d.EvidenceDueBy)
		if left := time.Until(due); err != nil || d.Status != status || d.Reason != c.reason || d.Amount != c.amount ||
			left < 6*24*time.Hour || left > 7*24*time.Hour {
			t.Errorf("the dispute of %s: %+v, want %s, %s, %d, due in 7 days", c.number, d, status, c.reason, c.amount)
		}
	}
	if got := p.disputesOf(t, charged[3]); len(got) != 0 {
		t.Errorf("the charge of a card that is not disputed has disputes %+v", got)
	}
	fraud := byCharge[charged[0]]

	cfg := map[string]string{"api": st.replicas[0], "email": email, "password": password, "shots": shots,
		"dispute": fraud.ID}
	got := journey[disputesJourney](t, dir, chromium, "disputes.mjs", cfg, 3*time.Minute)
	t.Logf("disputes journey in chromium: %d ms; steps (ms): %v; screenshots in %s", got.TookMS, got.Steps, shots)

	// The Money section lists the disputes.
	if !slices.Contains(got.MoneyLinks, "/dashboard/disputes") {
		t.Errorf("the Money section's links %v", got.MoneyLinks)
	}
	// The list: the three disputes, waiting for evidence, due in 6 days
	// and some hours (not soon).
	var listed []string
	for _, l := range got.Listed {
		listed = append(listed, l.ID)
		if l.Group != "waiting" || l.Soon != "false" || l.Left != "due in 6 days" {
			t.Errorf("listed %+v, want waiting, due in 6 days", l)
		}
	}
	var want []string
	for _, id := range charged[:3] {
		want = append(want, byCharge[id].ID)
	}
	slices.Sort(want)
	if slices.Sort(listed); !slices.Equal(listed, want) {
		t.Errorf("the Disputes page listed %v, want %v", listed, want)
	}
	// The refused evidence, then the evidence saved.
	if got.Refused.Status != http.StatusBadRequest || !strings.Contains(got.Refused.FieldError, "evidence.customer_purchase_ip must be an IPv4 or IPv6 address") ||
		got.Refused.Kept != "300.1.2.3" {
		t.Errorf("the refused evidence: %+v", got.Refused)
	}
	if !strings.Contains(got.Saved.Notice, "Evidence saved") || got.Saved.Kept != "203.0.113.7" || got.Saved.Chars == "0" {
		t.Errorf("the saved evidence: %+v", got.Saved)
	}
	// Submitted: read-only; then won.
	if !strings.Contains(got.Submitted.Notice, "Evidence submitted") || got.Submitted.Forms != 0 || got.Submitted.Shown != "winning_evidence" {
		t.Errorf("after submitting: %+v", got.Submitted)
	}
	if got.Decided.Status != "won" || !strings.Contains(got.Decided.Funds, "came back to the balance") {
		t.Errorf("the decision: %+v", got.Decided)
	}
	// The list afterwards: the two still waiting first, the won one after.
	if n := len(got.After); n != 3 || got.After[n-1].ID != fraud.ID || got.After[n-1].Group != "closed" || got.After[n-1].Status != "won" ||
		got.After[0].Group != "waiting" || got.After[1].Group != "waiting" {
		t.Errorf("the Disputes page afterwards: %+v", got.After)
	}

	// The API: the evidence submitted, the dispute won, its amount
	// withdrawn and reinstated once each, the dispute fee kept; the two
	// forms that changed it audit-logged as the member's.
	won := p.waitDispute(t, charged[0], func(d disputeJSON) bool { return d.Status == "won" }, 10*time.Second)
	if won.Evidence["uncategorized_text"] != "winning_evidence" || won.Evidence["customer_purchase_ip"] != "203.0.113.7" || !won.EvidenceDetails.Submitted {
		t.Errorf("the won dispute: %+v", won)
	}
	if types, amount, fee := p.disputeMoney(t, fraud.ID); types["dispute"] != 1 || types["dispute_reversal"] != 1 || amount != 0 || fee != 1500 {
		t.Errorf("the dispute's balance transactions: %v, amount %d, fee %d; want one of each, 0, 1500", types, amount, fee)
	}
	if n := queryInt(t, st.db, `SELECT count(*) FROM audit_log WHERE merchant_id = $1 AND action = 'dispute.evidence' AND object_id = $2
		AND actor_type = 'member'`, merchantID, fraud.ID); n != 2 {
		t.Errorf("%d audit log entries of the evidence (saved, then submitted), want 2", n)
	}
	for _, name := range []string{"disputes", "dispute", "dispute-refused", "dispute-won"} {
		if fi, err := os.Stat(filepath.Join(shots, name+".png")); err != nil || fi.Size() < 1000 {
			t.Errorf("screenshot %s: %v", name, err)
		}
	}
}
