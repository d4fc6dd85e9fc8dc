package store_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/gatehouse-pay/gatehouse/internal/disputes"
	"github.com/gatehouse-pay/gatehouse/internal/idempotency"
	"github.com/gatehouse-pay/gatehouse/internal/listing"
	"github.com/gatehouse-pay/gatehouse/internal/outbox"
	"github.com/gatehouse-pay/gatehouse/internal/store"
	"github.com/gatehouse-pay/gatehouse/internal/testenv"
)

type discardQueue struct{}

func (discardQueue) Enqueue(context.Context, outbox.Task) error { return nil }

// A report that names no payment (Adyen's later notifications of a
// dispute carry the dispute's pspReference alone) changes the dispute the
// connector holds under that reference, and nothing when there is none.
func TestApplyDisputeWithoutPaymentReference(t *testing.T) {
	db := testenv.NewDB(t)
	s := store.New(db.Pool)
	ctx := context.Background()
	m := newMerchant(t, s, "disputes@example.com")
	chargeID := uuid.NewString()
	if _, err := db.Pool.Exec(ctx, `INSERT INTO charges (id, merchant_id, environment, amount, amount_captured, currency, status, payment_method,
			capture, card_brand, provider, provider_reference, created_at, updated_at)
		VALUES ($1, $2, 'sandbox', 1000, 1000, 'EUR', 'captured', 'card', true, 'visa', 'adyen', '9913140798220028', now(), now())`,
		chargeID, m.ID); err != nil {
		t.Fatal(err)
	}
	svc := disputes.NewService(s, nil, discardQueue{}, time.Now, slog.New(slog.NewTextHandler(io.Discard, nil)), nil)
	zero := int64(0)
	report := func(paymentRef string, stage disputes.Stage, funds int) disputes.Report {
		return disputes.Report{Reference: "QFQTPCQ8HXSKGK82", PaymentReference: paymentRef, Amount: 1000, Currency: "EUR",
			Reason: disputes.ReasonGeneral, Stage: stage, FundsPhase: funds, Fee: &zero}
	}

	// Before the dispute is known, a report without the payment finds nothing.
	res, err := svc.Apply(ctx, m.ID, "conn_adyen", "adyen", report("", disputes.Won, disputes.FundsReinstated))
	if err != nil || res.Found || res.Changed {
		t.Fatalf("reversal before the chargeback: %+v, %v; want not found", res, err)
	}
	res, err = svc.Apply(ctx, m.ID, "conn_adyen", "adyen", report("9913140798220028", disputes.Open, disputes.FundsWithdrawn))
	if err != nil || !res.Found || !res.Changed || res.ChargeID != chargeID {
		t.Fatalf("chargeback: %+v, %v; want it opened on %s", res, err, chargeID)
	}
	res, err = svc.Apply(ctx, m.ID, "conn_adyen", "adyen", report("", disputes.Won, disputes.FundsReinstated))
	if err != nil || !res.Found || !res.Changed || res.ChargeID != chargeID {
		t.Fatalf("reversal: %+v, %v; want the dispute won", res, err)
	}
	page, err := s.ListDisputes(ctx, m.ID, disputes.Filter{ChargeID: chargeID}, listing.Params{Limit: 10})
	if err != nil || len(page.Items) != 1 {
		t.Fatalf("disputes of the charge: %+v, %v", page, err)
	}
	if d := page.Items[0]; d.Status != disputes.StatusWon || d.FundsPhase != disputes.FundsReinstated {
		t.Errorf("dispute %s, funds phase %d; want won, %d", d.Status, d.FundsPhase, disputes.FundsReinstated)
	}

	// Another connector's, or another merchant's, report of the reference finds nothing.
	if res, err := svc.Apply(ctx, m.ID, "conn_other", "adyen", report("", disputes.SecondLost, 3)); err != nil || res.Found {
		t.Errorf("another connector: %+v, %v; want not found", res, err)
	}
	other := newMerchant(t, s, "other@example.com")
	if res, err := svc.Apply(ctx, other.ID, "conn_adyen", "adyen", report("", disputes.SecondLost, 3)); err != nil || res.Found {
		t.Errorf("another merchant: %+v, %v; want not found", res, err)
	}

	// The merchant's evidence, submitted on a dispute the gateway holds:
	// the dispute moves under review and the worker's task is written.
	secondCharge := uuid.NewString()
	if _, err := db.Pool.Exec(ctx, `INSERT INTO charges (id, merchant_id, environment, amount, amount_captured, currency, status, payment_method,
			capture, card_brand, provider, provider_reference, created_at, updated_at)
		VALUES ($1, $2, 'sandbox', 1000, 1000, 'EUR', 'captured', 'card', true, 'visa', 'adyen', '9913140798220029', now(), now())`,
		secondCharge, m.ID); err != nil {
		t.Fatal(err)
	}
	r := report("9913140798220029", disputes.Open, disputes.FundsWithdrawn)
	r.Reference = "QFQTPCQ8HXSKGK83"
	if res, err := svc.Apply(ctx, m.ID, "conn_adyen", "adyen", r); err != nil || !res.Changed {
		t.Fatalf("second chargeback: %+v, %v", res, err)
	}
	page, err = s.ListDisputes(ctx, m.ID, disputes.Filter{ChargeID: secondCharge}, listing.Params{Limit: 10})
	if err != nil || len(page.Items) != 1 {
		t.Fatalf("disputes of the second charge: %+v, %v", page, err)
	}
	submit := true
	render := func(disputes.Dispute) (idempotency.Response, error) { return idempotency.Response{Status: 200}, nil }
	if _, _, err := svc.Update(ctx, m.ID, page.Items[0].ID, disputes.UpdateParams{Evidence: json.RawMessage(`{"uncategorized_text":"Delivered."}`),
		Submit: &submit}, nil, render); err != nil {
		t.Fatalf("Update: %v", err)
	}
	d, err := s.DisputeByID(ctx, m.ID, page.Items[0].ID)
	if err != nil || d.Status != disputes.StatusUnderReview || d.EvidenceSubmittedAt == nil || d.Evidence["uncategorized_text"] != "Delivered." {
		t.Errorf("after the evidence: %+v, %v; want under_review with the evidence submitted", d, err)
	}
	var tasks int
	if err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM outbox WHERE task_type = $1`, disputes.TaskSubmit).Scan(&tasks); err != nil || tasks != 1 {
		t.Errorf("%d %s tasks (%v), want 1", tasks, disputes.TaskSubmit, err)
	}
}
