package sandbox

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/gatehouse-pay/gatehouse/internal/providers"
)

// The disputes of the sandbox's test cards (api/openapi.yaml, Disputes):
// once the payment is captured the cardholder disputes it, as Stripe's
// test cards do. The sandbox tells the gateway by notification, in the
// shape of Stripe's charge.dispute.* events.
const (
	DisputeFraudulent         = "fraudulent"           // 4000000000000259
	DisputeProductNotReceived = "product_not_received" // 4000000000002685
	DisputeInquiry            = "inquiry"              // 4000000000001976: no money moves
)

// DisputePrefix is the prefix of the sandbox's dispute references.
const DisputePrefix = "sbx_dp_"

// DisputeDueIn is how long the merchant has to answer a sandbox dispute.
const DisputeDueIn = 7 * 24 * time.Hour

// Test evidence (Stripe's convention): a dispute whose submitted
// uncategorized_text is WinningEvidence is won, LosingEvidence lost, after
// Options.DisputeDecisionDelay; any other evidence leaves it under review.
const (
	WinningEvidence = "winning_evidence"
	LosingEvidence  = "losing_evidence"
)

// Dispute is one of the sandbox's disputes, in its own books.
type Dispute struct {
	Reference string
	// Parent is the authorization disputed.
	Parent   string
	Account  string
	Amount   int64
	Currency string
	Reason   string
	Inquiry  bool
	// Status is Stripe's: needs_response, under_review, won, lost, or an
	// inquiry's warning_needs_response, warning_under_review,
	// warning_closed.
	Status string
	// Outcome is what the submitted evidence decides: won, lost, or "".
	Outcome   string
	DecideAt  *time.Time
	DueBy     time.Time
	CreatedAt time.Time
}

// Notice is a notification the sandbox sends the gateway: the account's
// connector receives it as a provider notification.
type Notice struct {
	EventID string
	Type    string
	Payload []byte
}

// DisputeBooks keeps the sandbox's disputes, and sends each notice with
// the change it reports (internal/store implements it with the ledger).
type DisputeBooks interface {
	// OpenDispute records d, unless its authorization has a dispute
	// already, and sends n; it returns the id of the notification stored
	// for the gateway ("" when nothing was recorded, or the account has no
	// connector).
	OpenDispute(ctx context.Context, d Dispute, n func(Dispute) Notice) (string, error)
	// ChangeDispute locks the dispute reference and records what change
	// makes of it, with its notice (nil: nothing changes). A *Decline from
	// change is returned as it is.
	ChangeDispute(ctx context.Context, reference string, change func(Dispute) (*Dispute, *Notice, error)) (string, error)
	// DecideDisputes records the decision of every dispute whose decision
	// is due at now, with its notice, and returns the notifications' ids.
	DecideDisputes(ctx context.Context, now time.Time, decide func(Dispute) (Dispute, Notice)) ([]string, error)
}

func (p *Provider) disputeBooks() (DisputeBooks, bool) {
	b, ok := p.ledger.(DisputeBooks)
	return b, ok
}

// openDispute opens the dispute of a captured authorization of a disputed
// test card.
func (p *Provider) openDispute(ctx context.Context, auth Record) error {
	books, ok := p.disputeBooks()
	if !ok || auth.Account == "" {
		return nil
	}
	now := p.opts.Now().UTC()
	d := Dispute{Reference: newReference(DisputePrefix), Parent: auth.Reference, Account: auth.Account, Amount: auth.Amount,
		Currency: auth.Currency, Reason: auth.Dispute, Status: "needs_response", DueBy: now.Add(DisputeDueIn).Truncate(time.Second),
		CreatedAt: now}
	if auth.Dispute == DisputeInquiry {
		d.Inquiry, d.Reason, d.Status = true, "general", "warning_needs_response"
	}
	id, err := books.OpenDispute(ctx, d, func(d Dispute) Notice { return notice("charge.dispute.created", d) })
	if err != nil {
		return fmt.Errorf("%w: sandbox disputes: %w", providers.ErrUnavailable, err)
	}
	p.notified(ctx, id)
	return nil
}

func (p *Provider) notified(ctx context.Context, ids ...string) {
	for _, id := range ids {
		if id != "" && p.opts.Notified != nil {
			p.opts.Notified(ctx, id)
		}
	}
}

var _ providers.DisputeResponder = (*Provider)(nil)

// SubmitDisputeEvidence takes the merchant's evidence: the dispute goes
// under review, and test evidence decides it after the decision delay. A
// dispute answered before is not changed again; a closed one declines.
func (p *Provider) SubmitDisputeEvidence(ctx context.Context, reference string, evidence map[string]string) error {
	if err := p.wait(ctx); err != nil {
		return err
	}
	return p.changeDispute(ctx, reference, func(d Dispute) (*Dispute, *Notice, error) {
		switch d.Status {
		case "under_review", "warning_under_review":
			return nil, nil, nil // submitted before
		case "needs_response":
			d.Status = "under_review"
		case "warning_needs_response":
			d.Status = "warning_under_review"
		default:
			return nil, nil, &providers.Decline{Code: "invalid_request", Message: "This dispute is closed; it takes no evidence."}
		}
		switch evidence["uncategorized_text"] {
		case WinningEvidence:
			d.Outcome = "won"
		case LosingEvidence:
			d.Outcome = "lost"
		}
		if d.Outcome != "" {
			at := p.opts.Now().UTC().Add(p.opts.DisputeDecisionDelay)
			d.DecideAt = &at
		}
		n := notice("charge.dispute.updated", d)
		return &d, &n, nil
	})
}

// AcceptDispute closes the dispute as lost (an inquiry: closed). A dispute
// closed before is not changed again.
func (p *Provider) AcceptDispute(ctx context.Context, reference string) error {
	if err := p.wait(ctx); err != nil {
		return err
	}
	return p.changeDispute(ctx, reference, func(d Dispute) (*Dispute, *Notice, error) {
		switch d.Status {
		case "needs_response", "under_review":
			d.Status = "lost"
		case "warning_needs_response", "warning_under_review":
			d.Status = "warning_closed"
		default:
			return nil, nil, nil
		}
		d.DecideAt = nil
		n := notice("charge.dispute.closed", d)
		return &d, &n, nil
	})
}

func (p *Provider) changeDispute(ctx context.Context, reference string, change func(Dispute) (*Dispute, *Notice, error)) error {
	books, ok := p.disputeBooks()
	if !ok || !strings.HasPrefix(reference, DisputePrefix) {
		return &providers.Decline{Code: "invalid_request", Message: "No such dispute."}
	}
	id, err := books.ChangeDispute(ctx, reference, change)
	if _, declined := providers.AsDecline(err); declined {
		return err
	}
	if err != nil {
		return fmt.Errorf("%w: sandbox disputes: %w", providers.ErrUnavailable, err)
	}
	p.notified(ctx, id)
	return nil
}

// DecideDisputes decides the disputes whose submitted test evidence is due
// for a decision: won or lost (an inquiry is closed either way). The
// worker runs it periodically.
func (p *Provider) DecideDisputes(ctx context.Context) error {
	books, ok := p.disputeBooks()
	if !ok {
		return nil
	}
	ids, err := books.DecideDisputes(ctx, p.opts.Now().UTC(), func(d Dispute) (Dispute, Notice) {
		switch {
		case d.Inquiry:
			d.Status = "warning_closed"
		default:
			d.Status = d.Outcome
		}
		d.DecideAt = nil
		return d, notice("charge.dispute.closed", d)
	})
	p.notified(ctx, ids...)
	return err
}

// notice renders the notification of a dispute's change: a Stripe event of
// type typ whose object is the dispute as it is after the change.
func notice(typ string, d Dispute) Notice {
	id := newReference("sbx_evt_")
	type balanceTransaction struct {
		Amount int64 `json:"amount"`
		Fee    int64 `json:"fee"`
	}
	var bts []balanceTransaction
	if !d.Inquiry {
		bts = append(bts, balanceTransaction{Amount: -d.Amount, Fee: DisputeFee})
		if d.Status == "won" {
			bts = append(bts, balanceTransaction{Amount: d.Amount})
		}
	}
	obj := map[string]any{
		"id": d.Reference, "object": "dispute", "amount": d.Amount, "currency": strings.ToLower(d.Currency),
		"payment_intent": d.Parent, "reason": d.Reason, "status": d.Status, "created": d.CreatedAt.Unix(),
		"balance_transactions": bts, "evidence_details": map[string]any{"due_by": d.DueBy.Unix()},
		"is_charge_refundable": d.Inquiry,
	}
	body, _ := json.Marshal(map[string]any{"id": id, "object": "event", "type": typ, "created": time.Now().Unix(),
		"data": map[string]any{"object": obj}})
	return Notice{EventID: id, Type: typ, Payload: body}
}

// DisputeFee is the sandbox's dispute fee, in minor units of the dispute's
// currency.
const DisputeFee = 1500
