package sandbox_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/gatehouse-pay/gatehouse/internal/providers"
	"github.com/gatehouse-pay/gatehouse/internal/providers/sandbox"
	"github.com/gatehouse-pay/gatehouse/internal/store"
	"github.com/gatehouse-pay/gatehouse/internal/testenv"
)

// The sandbox's settlement report of an account comes from its own books:
// what each of the account's calls captured (at once, in part, in full,
// after the cardholder authenticated) and refunded, and the account's
// payouts, each when it became available; never another account's, nor
// what was only authorized or voided.
func TestSettledFromTheSandboxBooks(t *testing.T) {
	db := testenv.NewDB(t)
	ctx := context.Background()
	sb := sandbox.New(store.New(db.Pool).SandboxLedger(), sandbox.Options{})
	a, other := sb.ForAccount("conn_a"), sb.ForAccount("conn_b")
	must := func(res providers.Result, err error) string {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return res.Reference
	}
	auth := func(p providers.Provider, key string, amount int64, capture bool, number string) string {
		r := authorize(card(number), key)
		r.Amount, r.Capture = amount, capture
		return must(p.Authorize(ctx, r))
	}

	atOnce := auth(a, "k1", 2000, true, "4242424242424242")
	partial := auth(a, "k2", 5000, false, "4242424242424242")
	must(a.Capture(ctx, providers.CaptureRequest{IdempotencyKey: "k2c", Reference: partial, Amount: 3000}))
	whole := auth(a, "k3", 1000, false, "4242424242424242")
	must(a.Capture(ctx, providers.CaptureRequest{IdempotencyKey: "k3c", Reference: whole}))
	refund := must(a.Refund(ctx, providers.RefundRequest{IdempotencyKey: "k1r", Reference: atOnce, Amount: 500, Currency: "USD"}))
	authOnly := auth(a, "k4", 700, false, "4242424242424242")
	must(a.Void(ctx, providers.VoidRequest{IdempotencyKey: "k4v", Reference: authOnly}))
	challenged := auth(a, "k5", 3100, true, "4000002500003155")
	challengedUnanswered := auth(a, "k6", 3200, true, "4000002500003155")
	must(a.(providers.Authenticator).Authenticate(ctx, providers.AuthenticateRequest{IdempotencyKey: "k5a", Reference: challenged,
		Answer: providers.AnswerSucceeded, Amount: 3100, Currency: "USD", Capture: true, Card: card("4000002500003155")}))
	auth(other, "k7", 9900, true, "4242424242424242")
	now := time.Now().UTC()
	if _, err := db.Pool.Exec(ctx, `INSERT INTO payouts (id, merchant_id, environment, connector_id, currency, amount, status, automatic,
	arrival_date, created_at, updated_at) VALUES
	('po_paid', 'mer_1', 'sandbox', 'conn_a', 'USD', 1200, 'paid', false, $1, $1, $1),
	('po_failed', 'mer_1', 'sandbox', 'conn_a', 'USD', 800, 'failed', false, $1, $1, $1),
	('po_other', 'mer_1', 'sandbox', 'conn_b', 'USD', 300, 'paid', false, $1, $1, $1)`, now); err != nil {
		t.Fatal(err)
	}

	fee := func(amount int64) int64 { return (amount*290+5000)/10000 + 30 }
	line := func(ref, typ string, gross, fee int64) providers.SettlementLine {
		return providers.SettlementLine{Reference: ref, Type: typ, Currency: "USD", Gross: gross, Fee: fee, Net: gross - fee}
	}
	charge := func(ref string, gross int64) providers.SettlementLine {
		return line(ref, providers.SettlementCharge, gross, fee(gross))
	}
	report := func(delay time.Duration, from, to time.Time) map[string]providers.SettlementLine {
		t.Helper()
		lines, err := sb.Settled(ctx, "conn_a", sandbox.Terms{Fee: fee, Delay: delay}, from, to)
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]providers.SettlementLine{}
		for i, l := range lines {
			if l.AvailableOn.Before(from) || !l.AvailableOn.Before(to) {
				t.Errorf("%s available %s, outside [%s, %s)", l.Reference, l.AvailableOn, from, to)
			}
			if i > 0 && l.AvailableOn.Before(lines[i-1].AvailableOn) {
				t.Errorf("lines out of order at %d", i)
			}
			l.AvailableOn = time.Time{}
			key := l.Reference + "/" + l.Type
			if l.Gross > 0 && l.Type == providers.SettlementPayout {
				key += "/returned"
			}
			out[key] = l
		}
		return out
	}
	day := now.Truncate(24 * time.Hour)
	got := report(0, day.Add(-24*time.Hour), day.Add(48*time.Hour))
	want := map[string]providers.SettlementLine{
		atOnce + "/charge":          charge(atOnce, 2000),
		partial + "/charge":         charge(partial, 3000),
		whole + "/charge":           charge(whole, 1000),
		challenged + "/charge":      charge(challenged, 3100),
		refund + "/refund":          line(refund, providers.SettlementRefund, -500, 0),
		"po_paid/payout":            line("po_paid", providers.SettlementPayout, -1200, 0),
		"po_failed/payout":          line("po_failed", providers.SettlementPayout, -800, 0),
		"po_failed/payout/returned": line("po_failed", providers.SettlementPayout, 800, 0),
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("report (-want +got):\n%s", d)
	}
	if _, ok := got[challengedUnanswered+"/charge"]; ok {
		t.Errorf("an authorization that waits for its cardholder settled")
	}

	// With a settlement delay, captures become available that much later;
	// refunds and payouts at once.
	soon := report(time.Hour, now.Add(-10*time.Minute), now.Add(10*time.Minute))
	if len(soon) != 4 || soon[refund+"/refund"].Gross != -500 {
		t.Errorf("the next minutes hold %d lines, want the refund and the 3 payout lines: %v", len(soon), soon)
	}
	later := report(time.Hour, now.Add(50*time.Minute), now.Add(70*time.Minute))
	if len(later) != 4 || later[partial+"/charge"].Gross != 3000 {
		t.Errorf("an hour later the report holds %d lines, want the 4 captures: %v", len(later), later)
	}

	if _, err := sb.Settled(ctx, "", sandbox.Terms{}, day, day.Add(time.Hour)); err == nil {
		t.Errorf("a report without an account: no error")
	}
}
