package sandbox_test

import (
	"context"
	"testing"
	"time"

	"github.com/gatehouse-pay/gatehouse/internal/providers"
	"github.com/gatehouse-pay/gatehouse/internal/providers/sandbox"
	"github.com/gatehouse-pay/gatehouse/internal/store"
	"github.com/gatehouse-pay/gatehouse/internal/testenv"
)

// The disputed test cards on the store's books: a captured payment opens
// its dispute in sandbox_disputes, test evidence puts it under review, and
// it is decided once the decision delay has passed.
func TestDisputesOnPostgres(t *testing.T) {
	db := testenv.NewDB(t)
	ctx := context.Background()
	clock := now
	p := sandbox.New(store.New(db.Pool).SandboxLedger(), sandbox.Options{Now: func() time.Time { return clock },
		DisputeDecisionDelay: time.Minute})
	account := p.ForAccount("conn_sandbox_disputes")
	dispute := func(t *testing.T, parent string) (reference, status string) {
		t.Helper()
		if err := db.Pool.QueryRow(ctx, `SELECT reference, status FROM sandbox_disputes WHERE parent_reference = $1`, parent).
			Scan(&reference, &status); err != nil {
			t.Fatalf("the dispute of %s: %v", parent, err)
		}
		return reference, status
	}

	for _, c := range []struct {
		number, evidence, review, decided string
	}{
		{"4000000000000259", sandbox.WinningEvidence, "under_review", "won"},
		{"4000000000002685", sandbox.LosingEvidence, "under_review", "lost"},
		{"4000000000001976", sandbox.WinningEvidence, "warning_under_review", "warning_closed"},
	} {
		t.Run(c.number, func(t *testing.T) {
			res, err := account.Authorize(ctx, authorize(card(c.number), "pg-dispute-"+c.number))
			if err != nil {
				t.Fatalf("Authorize: %v", err)
			}
			ref, _ := dispute(t, res.Reference)
			r := account.(providers.DisputeResponder)
			if err := r.SubmitDisputeEvidence(ctx, ref, map[string]string{"uncategorized_text": c.evidence}); err != nil {
				t.Fatalf("SubmitDisputeEvidence: %v", err)
			}
			if _, status := dispute(t, res.Reference); status != c.review {
				t.Errorf("after the evidence: %s, want %s", status, c.review)
			}
			clock = clock.Add(2 * time.Minute)
			if err := p.DecideDisputes(ctx); err != nil {
				t.Fatalf("DecideDisputes: %v", err)
			}
			if _, status := dispute(t, res.Reference); status != c.decided {
				t.Errorf("decided: %s, want %s", status, c.decided)
			}
		})
	}
}
