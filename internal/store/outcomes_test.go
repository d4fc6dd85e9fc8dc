package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/gatehouse-pay/gatehouse/internal/store"
	"github.com/gatehouse-pay/gatehouse/internal/testenv"
)

// gatehouse_provider_outcomes_unknown counts, by operation, the payments the
// provider accepted and has not finished (created charges with a provider
// reference), the captures (authorized charges with the capture pending) and
// the refunds (pending) waiting for the provider longer than the bound, and
// nothing younger or settled.
func TestOutcomesCollector(t *testing.T) {
	db := testenv.NewDB(t)
	f := newOutboxFixture(t, db.Pool)
	chargeAt := func(provider, status string, action *string, age time.Duration) string {
		id := uuid.NewString()
		f.exec(t, `INSERT INTO charges (id, merchant_id, environment, amount, amount_captured, currency, status, pending_action,
				payment_method, capture, card_brand, provider, provider_reference, created_at, updated_at)
			VALUES ($1, $2, 'sandbox', 2000, CASE WHEN $3 IN ('captured') THEN 2000 ELSE 0 END, 'USD', $3, $4, 'card', false, 'visa',
				$6, 'sbx_ch_1', now() - $5::interval, now() - $5::interval)`, id, f.merchantID, status, action, age.String(), provider)
		return id
	}
	charge := func(status string, action *string, age time.Duration) string {
		return chargeAt("sandbox", status, action, age)
	}
	refundRef := func(chargeID, status string, age time.Duration, ref *string) {
		f.exec(t, `INSERT INTO refunds (id, merchant_id, charge_id, amount, currency, status, provider_reference, created_at, updated_at)
			VALUES ($1, $2, $3, 100, 'USD', $4, $6, now() - $5::interval, now() - $5::interval)`, uuid.NewString(), f.merchantID, chargeID, status, age.String(), ref)
	}
	refund := func(chargeID, status string, age time.Duration) { refundRef(chargeID, status, age, nil) }
	capture, void := "capture", "void"
	charge("authorized", &capture, 3*time.Hour) // unknown for 3 h
	charge("authorized", &capture, 3*time.Hour) // and another
	charge("authorized", &capture, time.Minute) // too young
	charge("authorized", &void, 3*time.Hour)    // a void, not a capture
	charge("authorized", nil, 3*time.Hour)      // nothing requested
	charge("created", nil, 2*time.Hour)         // a payment processing for 2 h
	charge("created", nil, time.Minute)         // too young
	unsent := charge("created", nil, 2*time.Hour)
	f.exec(t, `UPDATE charges SET provider_reference = NULL WHERE id = $1`, unsent) // not sent yet: nothing is at the provider
	captured := charge("captured", nil, 5*time.Hour)
	refund(captured, "pending", 2*time.Hour) // unknown for 2 h
	refund(captured, "pending", time.Minute) // too young
	refund(captured, "succeeded", 5*time.Hour)
	refund(captured, "failed", 5*time.Hour)

	// At a provider that settles by notification (Adyen): what it received
	// waits for its notification, overdue past the confirmation timeout
	// (2 h here), and is never an unknown outcome.
	psp := "adyen_ref_1"
	chargeAt("adyen", "capturing", nil, 3*time.Hour) // overdue
	chargeAt("adyen", "capturing", nil, time.Hour)   // within the timeout
	chargeAt("adyen", "voiding", nil, 3*time.Hour)   // overdue
	received := chargeAt("adyen", "captured", nil, 5*time.Hour)
	refundRef(received, "pending", 3*time.Hour, &psp) // received, overdue
	refundRef(received, "pending", time.Hour, &psp)   // received, within the timeout
	refund(received, "pending", 3*time.Hour)          // never answered: unknown

	c := store.OutcomesCollector(db.Pool, time.Hour, 2*time.Hour, 0)
	want := map[string]float64{"gatehouse_provider_outcomes_unknown{authorize}": 1, "gatehouse_provider_outcomes_unknown{capture}": 2,
		"gatehouse_provider_outcomes_unknown{refund}":       2,
		"gatehouse_provider_confirmations_overdue{capture}": 1, "gatehouse_provider_confirmations_overdue{void}": 1,
		"gatehouse_provider_confirmations_overdue{refund}": 1}
	if diff := cmp.Diff(want, collectValues(t, c)); diff != "" {
		t.Errorf("series (-want +got):\n%s", diff)
	}
	problems, err := testutil.CollectAndLint(c)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("lint: %s: %s", p.Metric, p.Text)
	}
	want = map[string]float64{"gatehouse_provider_outcomes_unknown{authorize}": 0, "gatehouse_provider_outcomes_unknown{capture}": 0,
		"gatehouse_provider_outcomes_unknown{refund}":       0,
		"gatehouse_provider_confirmations_overdue{capture}": 0, "gatehouse_provider_confirmations_overdue{void}": 0,
		"gatehouse_provider_confirmations_overdue{refund}": 0}
	if diff := cmp.Diff(want, collectValues(t, store.OutcomesCollector(db.Pool, 24*time.Hour, 24*time.Hour, 0))); diff != "" {
		t.Errorf("with a 24 h bound (-want +got):\n%s", diff)
	}
}

// Reconcile re-creates the task of a pending refund that lost it, but not
// of one a provider that settles by notification received: that one waits
// for its notification.
func TestReconcileLeavesReceivedRefunds(t *testing.T) {
	db := testenv.NewDB(t)
	f := newOutboxFixture(t, db.Pool)
	charge := func(provider string) string {
		id := uuid.NewString()
		f.exec(t, `INSERT INTO charges (id, merchant_id, environment, amount, amount_captured, currency, status, payment_method, capture,
				card_brand, provider, provider_reference, created_at, updated_at)
			VALUES ($1, $2, 'sandbox', 2000, 2000, 'EUR', 'captured', 'card', true, 'visa', $3, 'psp_1', now() - interval '1 hour', now() - interval '1 hour')`,
			id, f.merchantID, provider)
		return id
	}
	refund := func(chargeID string, ref *string) string {
		id := uuid.NewString()
		f.exec(t, `INSERT INTO refunds (id, merchant_id, charge_id, amount, currency, status, provider_reference, created_at, updated_at)
			VALUES ($1, $2, $3, 100, 'EUR', 'pending', $4, now() - interval '1 hour', now() - interval '1 hour')`, id, f.merchantID, chargeID, ref)
		return id
	}
	psp := "psp_refund_1"
	received := refund(charge("adyen"), &psp)
	unsent := refund(charge("adyen"), nil)
	atSandbox := refund(charge("sandbox"), &psp)
	n, err := store.New(db.Pool).Reconcile(context.Background(), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	tasks := map[string]bool{}
	rows, err := db.Pool.Query(context.Background(), `SELECT ref_id::text FROM outbox WHERE task_type = 'refund:process'`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			t.Fatal(err)
		}
		tasks[id] = true
	}
	if rows.Err() != nil {
		t.Fatal(rows.Err())
	}
	if n != 2 || tasks[received] || !tasks[unsent] || !tasks[atSandbox] {
		t.Errorf("reconciled %d; tasks: received by Adyen %v (want none), not sent yet %v, at the sandbox %v (want both)",
			n, tasks[received], tasks[unsent], tasks[atSandbox])
	}
}
