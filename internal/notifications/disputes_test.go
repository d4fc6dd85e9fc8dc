package notifications

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/gatehouse-pay/gatehouse/internal/connectors"
	"github.com/gatehouse-pay/gatehouse/internal/disputes"
	"github.com/gatehouse-pay/gatehouse/internal/providers/adyen"
	"github.com/gatehouse-pay/gatehouse/internal/testenv/harness"
)

// missing skips the test for a missing tool or file, or fails it when
// services are required (testenv.Missing, which this package's tests
// cannot import: testenv imports the store, which imports this package).
func missing(t *testing.T, format string, args ...any) {
	t.Helper()
	if os.Getenv("GATEHOUSE_REQUIRE_SERVICES") == "1" || os.Getenv("CI") == "true" {
		t.Fatalf(format, args...)
	}
	t.Skipf(format+" (set GATEHOUSE_REQUIRE_SERVICES=1 to fail instead)", args...)
}

// stripeMockGet starts stripe-mock (STRIPE_MOCK_BIN, else stripe-mock on
// PATH) and returns a function that GETs a path of it as a JSON object.
// Without stripe-mock the test is skipped, or fails when services are
// required.
func stripeMockGet(t *testing.T) func(path string) map[string]any {
	t.Helper()
	bin := os.Getenv("STRIPE_MOCK_BIN")
	if bin == "" {
		var err error
		if bin, err = exec.LookPath("stripe-mock"); err != nil {
			missing(t, "stripe-mock is not installed (deploy/local/tools.sh installs it into bin/tools)")
		}
	}
	p, err := harness.Start("stripe-mock", harness.Command(os.Environ(), bin, "-http-addr", "127.0.0.1:", "-https-addr", "127.0.0.1:"),
		new(harness.Output))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Stop(os.Interrupt, 5*time.Second) })
	addr, err := harness.WaitOutput(p, 30*time.Second, func(line string) (string, bool) {
		a, ok := strings.CutPrefix(line, "Listening for HTTP at address: ")
		return strings.TrimSpace(a), ok
	})
	if err != nil {
		t.Fatalf("stripe-mock: %v\n%s", err, p.Tail(4<<10))
	}
	base := "http://" + addr
	if err := harness.WaitFor(context.Background(), p, 30*time.Second, 50*time.Millisecond,
		harness.HTTPOK(http.DefaultClient, base+"/v1/balance", "Authorization", "Bearer sk_test_123")); err != nil {
		t.Fatalf("stripe-mock at %s: %v\n%s", base, err, p.Tail(4<<10))
	}
	return func(path string) map[string]any {
		t.Helper()
		req, _ := http.NewRequest(http.MethodGet, base+path, nil)
		req.Header.Set("Authorization", "Bearer sk_test_123")
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		var obj map[string]any
		if err := json.NewDecoder(res.Body).Decode(&obj); err != nil || res.StatusCode != http.StatusOK {
			t.Fatalf("GET %s: status %d, %v", path, res.StatusCode, err)
		}
		return obj
	}
}

// clone copies a JSON object deeply.
func clone(t *testing.T, obj map[string]any) map[string]any {
	t.Helper()
	b, err := json.Marshal(obj)
	if err != nil {
		t.Fatal(err)
	}
	var out map[string]any
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	return out
}

// StripeDisputeReport reads the dispute of each charge.dispute.* event, in
// the shapes stripe-mock serves (Stripe's own fixtures): the dispute as it
// comes, and as Stripe shows it at each stage, with the balance
// transactions that moved its money.
func TestStripeDisputeReport(t *testing.T) {
	get := stripeMockGet(t)
	fixture := get("/v1/disputes/dp_gatehouse")
	event := get("/v1/events/evt_gatehouse")
	bt := get("/v1/balance_transactions/txn_gatehouse")
	chargeID, _ := fixture["charge"].(string)
	if !strings.HasPrefix(chargeID, "ch_") || fixture["payment_intent"] != nil || fixture["status"] != "warning_needs_response" {
		t.Fatalf("stripe-mock's dispute changed shape: charge %v, payment_intent %v, status %v",
			fixture["charge"], fixture["payment_intent"], fixture["status"])
	}
	dueBy := time.Unix(int64(fixture["evidence_details"].(map[string]any)["due_by"].(float64)), 0).UTC()

	// Balance transactions as Stripe books a dispute's: the amount and the
	// fee withdrawn, and the amount reinstated when the merchant wins.
	withdrawal, reinstatement := clone(t, bt), clone(t, bt)
	withdrawal["amount"], withdrawal["fee"], withdrawal["net"], withdrawal["type"] = -1000, 1500, -2500, "adjustment"
	withdrawal["reporting_category"] = "dispute"
	reinstatement["amount"], reinstatement["fee"], reinstatement["net"], reinstatement["type"] = 1000, 0, 1000, "adjustment"
	reinstatement["reporting_category"] = "dispute_reversal"

	fee := func(n int64) *int64 { return &n }
	type want struct {
		stage   disputes.Stage
		funds   int
		fee     *int64
		payment string
		dueBy   time.Time
	}
	tests := []struct {
		name   string
		typ    string
		status string
		edit   func(d map[string]any)
		want   want
	}{
		{"an inquiry, as stripe-mock serves it", "charge.dispute.created", "", nil,
			want{disputes.InquiryOpen, disputes.FundsNone, nil, "", dueBy}},
		{"an inquiry under review", "charge.dispute.updated", "warning_under_review", nil,
			want{disputes.InquiryReview, disputes.FundsNone, nil, "", dueBy}},
		{"an inquiry closed", "charge.dispute.closed", "warning_closed", nil,
			want{disputes.InquiryClosed, disputes.FundsNone, nil, "", dueBy}},
		{"a chargeback opened", "charge.dispute.created", "needs_response",
			func(d map[string]any) { d["balance_transactions"] = []any{withdrawal} },
			want{disputes.Open, disputes.FundsWithdrawn, fee(1500), "", dueBy}},
		{"its funds withdrawn", "charge.dispute.funds_withdrawn", "needs_response",
			func(d map[string]any) { d["balance_transactions"] = []any{withdrawal} },
			want{disputes.Open, disputes.FundsWithdrawn, fee(1500), "", dueBy}},
		{"its funds withdrawn, the transaction not yet listed", "charge.dispute.funds_withdrawn", "needs_response", nil,
			want{disputes.Open, disputes.FundsWithdrawn, nil, "", dueBy}},
		{"under review, with its PaymentIntent", "charge.dispute.updated", "under_review",
			func(d map[string]any) {
				d["balance_transactions"], d["payment_intent"] = []any{withdrawal}, "pi_gatehouse"
			},
			want{disputes.Review, disputes.FundsWithdrawn, fee(1500), "pi_gatehouse", dueBy}},
		{"won, its PaymentIntent expanded", "charge.dispute.closed", "won",
			func(d map[string]any) {
				d["balance_transactions"] = []any{withdrawal, reinstatement}
				d["payment_intent"] = map[string]any{"id": "pi_gatehouse", "object": "payment_intent"}
			},
			want{disputes.Won, disputes.FundsReinstated, fee(1500), "pi_gatehouse", dueBy}},
		{"its funds reinstated", "charge.dispute.funds_reinstated", "won",
			func(d map[string]any) { d["balance_transactions"] = []any{withdrawal, reinstatement} },
			want{disputes.Won, disputes.FundsReinstated, fee(1500), "", dueBy}},
		{"lost, no deadline any more", "charge.dispute.closed", "lost",
			func(d map[string]any) {
				d["balance_transactions"] = []any{withdrawal}
				d["evidence_details"].(map[string]any)["due_by"] = nil
			},
			want{disputes.Lost, disputes.FundsWithdrawn, fee(1500), "", time.Time{}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := clone(t, fixture)
			if tt.status != "" {
				d["status"] = tt.status
			}
			if tt.edit != nil {
				tt.edit(d)
			}
			ev := clone(t, event)
			ev["type"] = tt.typ
			ev["data"] = map[string]any{"object": d}
			payload, _ := json.Marshal(ev)
			r, charge, ok := StripeDisputeReport(tt.typ, payload)
			if !ok {
				t.Fatal("not read as a dispute")
			}
			if charge != chargeID {
				t.Errorf("charge %q, want %q", charge, chargeID)
			}
			wantReport := disputes.Report{Reference: "dp_gatehouse", PaymentReference: tt.want.payment, Amount: 1000, Currency: "USD",
				Reason: "general", Stage: tt.want.stage, FundsPhase: tt.want.funds, Fee: tt.want.fee, DueBy: tt.want.dueBy}
			if diff := cmp.Diff(wantReport, r); diff != "" {
				t.Errorf("report (-want +got):\n%s", diff)
			}
		})
	}

	for name, edit := range map[string]func(d map[string]any){
		"not a dispute":     func(d map[string]any) { d["object"] = "charge" },
		"no id":             func(d map[string]any) { d["id"] = "" },
		"an unknown status": func(d map[string]any) { d["status"] = "prevailed" },
		"no amount":         func(d map[string]any) { d["amount"] = 0 },
		"no currency":       func(d map[string]any) { d["currency"] = "" },
	} {
		t.Run(name, func(t *testing.T) {
			d := clone(t, fixture)
			edit(d)
			payload, _ := json.Marshal(map[string]any{"type": "charge.dispute.updated", "data": map[string]any{"object": d}})
			if _, _, ok := StripeDisputeReport("charge.dispute.updated", payload); ok {
				t.Error("read as a dispute")
			}
		})
	}
}

// adyenExamples are the notification items of Adyen's published webhook
// description (shared/third_party/adyen-openapi/Webhooks-v1.json), by
// event code.
func adyenExamples(t *testing.T) map[string]adyen.NotificationItem {
	t.Helper()
	root, err := harness.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	doc, err := os.ReadFile(filepath.Join(filepath.Dir(root), "shared", "third_party", "adyen-openapi", "Webhooks-v1.json"))
	if err != nil {
		missing(t, "Adyen's webhook description: %v", err)
	}
	var spec struct {
		Components struct {
			Examples map[string]struct {
				Value json.RawMessage `json:"value"`
			} `json:"examples"`
		} `json:"components"`
	}
	if err := json.Unmarshal(doc, &spec); err != nil {
		t.Fatal(err)
	}
	items := map[string]adyen.NotificationItem{}
	for name, ex := range spec.Components.Examples {
		if !strings.Contains(string(ex.Value), "NotificationRequestItem") {
			continue
		}
		n, err := adyen.Parse(ex.Value)
		if err != nil {
			t.Fatalf("example %s: %v", name, err)
		}
		for _, w := range n.Items {
			items[w.Item.EventCode] = w.Item
		}
	}
	return items
}

// AdyenDisputeReport reads Adyen's own example of each dispute
// notification as the table in disputes.go says, and the codes it does
// not map as nothing. The later notifications of a dispute
// (CHARGEBACK_REVERSED, SECOND_CHARGEBACK, PREARBITRATION_WON and _LOST)
// come without originalReference: they are read with the dispute's
// pspReference alone.
func TestAdyenDisputeReport(t *testing.T) {
	items := adyenExamples(t)
	fee := int64(0)
	due := func(s string) time.Time {
		at, err := time.Parse(time.RFC3339, s)
		if err != nil {
			t.Fatal(err)
		}
		return at.UTC()
	}
	tests := []struct {
		code    string
		stage   disputes.Stage
		funds   int
		payment string
		reason  string
		dueBy   time.Time
	}{
		{"REQUEST_FOR_INFORMATION", disputes.InquiryOpen, disputes.FundsNone, "9913140798220028", "general", time.Time{}},
		{"INFORMATION_SUPPLIED", disputes.InquiryReview, disputes.FundsNone, "9914444444444444", "general", time.Time{}},
		{"NOTIFICATION_OF_CHARGEBACK", disputes.Open, disputes.FundsNone, "9913140798220028", "general", due("2021-07-31T03:03:08+02:00")},
		{"CHARGEBACK", disputes.Open, disputes.FundsWithdrawn, "9913140798220028", "general", due("2021-07-31T03:03:07+02:00")},
		{"CHARGEBACK_REVERSED", disputes.Won, disputes.FundsReinstated, "", "fraudulent", time.Time{}},
		{"SECOND_CHARGEBACK", disputes.SecondLost, 3, "", "general", time.Time{}},
		{"PREARBITRATION_WON", disputes.ArbitrationWon, 4, "", "general", time.Time{}},
		{"PREARBITRATION_LOST", disputes.ArbitrationLost, 3, "", "fraudulent", time.Time{}},
	}
	for _, tt := range tests {
		t.Run(tt.code, func(t *testing.T) {
			item, ok := items[tt.code]
			if !ok {
				t.Fatalf("Adyen's description has no example of %s", tt.code)
			}
			if item.OriginalReference != tt.payment {
				t.Errorf("Adyen's example changed: originalReference %q, want %q", item.OriginalReference, tt.payment)
			}
			amount, currency, err := adyen.FromAdyen(item.Amount)
			if err != nil {
				t.Fatal(err)
			}
			r, ok := AdyenDisputeReport(item)
			if !ok {
				t.Fatal("not read as a dispute")
			}
			want := disputes.Report{Reference: item.PSPReference, PaymentReference: tt.payment, Amount: amount, Currency: currency,
				Reason: tt.reason, Stage: tt.stage, FundsPhase: tt.funds, Fee: &fee, DueBy: tt.dueBy}
			if diff := cmp.Diff(want, r); diff != "" {
				t.Errorf("report (-want +got):\n%s", diff)
			}
		})
	}
	for _, code := range []string{"NOTIFICATION_OF_FRAUD", "ISSUER_COMMENTS", "PREARBITRATION_OPEN"} {
		t.Run(code, func(t *testing.T) {
			item, ok := items[code]
			if !ok {
				// Adyen publishes no example of it: one in the shape of the others.
				item = items["SECOND_CHARGEBACK"]
				item.EventCode = code
			}
			if _, ok := AdyenDisputeReport(item); ok {
				t.Error("read as a report; want nothing")
			}
			// Stored as ignored when it arrives: the worker never applies it.
			if Handled(connectors.ProviderAdyen, code) {
				t.Error("handled by the worker")
			}
		})
	}
	t.Run("no dispute reference", func(t *testing.T) {
		item := items["CHARGEBACK"]
		item.PSPReference = ""
		if _, ok := AdyenDisputeReport(item); ok {
			t.Error("read as a report")
		}
	})
}

// fakeDisputes records the reports it is given.
type fakeDisputes struct {
	reports []disputes.Report
	found   bool
}

func (f *fakeDisputes) Apply(_ context.Context, _, _, _ string, r disputes.Report) (disputes.Applied, error) {
	f.reports = append(f.reports, r)
	return disputes.Applied{Found: f.found, Changed: true, ChargeID: "ch_1"}, nil
}

// An Adyen dispute notification without the payment's reference reaches
// the disputes (which find the dispute by its own reference); one whose
// code changes nothing is ignored without them.
func TestAdyenDisputeNotificationsApplied(t *testing.T) {
	items := adyenExamples(t)
	f := &fakeDisputes{found: true}
	a := NewApplier(nil, nil, nil, slog.New(slog.NewTextHandler(io.Discard, nil)), time.Now).WithDisputes(f)
	for code, want := range map[string]string{"CHARGEBACK": OutcomeApplied, "CHARGEBACK_REVERSED": OutcomeApplied,
		"SECOND_CHARGEBACK": OutcomeApplied, "NOTIFICATION_OF_FRAUD": OutcomeIgnored, "ISSUER_COMMENTS": OutcomeIgnored} {
		f.reports = nil
		payload, _ := json.Marshal(items[code])
		got, _, err := a.dispute(context.Background(), Notification{Provider: connectors.ProviderAdyen, Type: code, Payload: payload})
		if err != nil || got != want {
			t.Errorf("%s: %s, %v; want %s", code, got, err, want)
		}
		if applied := len(f.reports) == 1; applied != (want == OutcomeApplied) {
			t.Errorf("%s: %d reports applied", code, len(f.reports))
		}
	}
}
