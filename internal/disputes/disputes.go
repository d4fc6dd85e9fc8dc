// Package disputes follows a cardholder's dispute of a payment (dp_...):
// what its provider reports of it by notification, the evidence the
// merchant stages and submits in answer, and the money it moves (the
// disputed amount and the dispute fee withdrawn from the balance, the
// amount reinstated when the merchant wins). docs/disputes.md explains the
// design.
//
// A provider's notifications arrive late, twice and out of order. Two
// parts of a dispute's state only move forward, each on its own: its stage
// (how far its life has gone; the status follows from it) and its funds
// phase (how often its money moved). A notification applied in any order,
// any number of times, ends in the same dispute and the same books: what
// would move either backwards is recorded and ignored.
package disputes

import (
	"time"

	"github.com/gatehouse-pay/gatehouse/internal/events"
	"github.com/gatehouse-pay/gatehouse/internal/ids"
	"github.com/gatehouse-pay/gatehouse/internal/resource"
)

// Prefix of a dispute's id.
const Prefix = "dp"

// ValidID reports whether id can be a dispute's.
func ValidID(id string) bool { return ids.Valid(Prefix, id) }

// Statuses.
const (
	// An inquiry (a retrieval request): the issuer asks before it charges
	// back; no money moves.
	StatusWarningNeedsResponse = "warning_needs_response"
	StatusWarningUnderReview   = "warning_under_review"
	StatusWarningClosed        = "warning_closed"
	// A chargeback.
	StatusNeedsResponse = "needs_response"
	StatusUnderReview   = "under_review"
	StatusWon           = "won"
	StatusLost          = "lost"
)

// Statuses lists them in the order of api/openapi.yaml.
var Statuses = []string{StatusWarningNeedsResponse, StatusWarningUnderReview, StatusWarningClosed,
	StatusNeedsResponse, StatusUnderReview, StatusWon, StatusLost}

// ValidStatus reports whether s is a status.
func ValidStatus(s string) bool {
	for _, k := range Statuses {
		if k == s {
			return true
		}
	}
	return false
}

// Stage is how far a dispute's life has gone: a status and its rank. A
// dispute moves only to a stage of a higher rank. Two stages may share a
// status (Adyen's second chargeback is lost again, after a reversal).
type Stage struct {
	Status string
	Rank   int
}

// The stages, in the order a dispute may pass them.
var (
	InquiryOpen     = Stage{StatusWarningNeedsResponse, 10}
	InquiryReview   = Stage{StatusWarningUnderReview, 20}
	InquiryClosed   = Stage{StatusWarningClosed, 30}
	Open            = Stage{StatusNeedsResponse, 40}
	Review          = Stage{StatusUnderReview, 50}
	Won             = Stage{StatusWon, 60}
	Lost            = Stage{StatusLost, 70}
	SecondLost      = Stage{StatusLost, 80}
	ArbitrationWon  = Stage{StatusWon, 90}
	ArbitrationLost = Stage{StatusLost, 100}
)

// StageOf is the first stage of status: the stage a provider's report of
// only a status means.
func StageOf(status string) (Stage, bool) {
	for _, s := range []Stage{InquiryOpen, InquiryReview, InquiryClosed, Open, Review, Won, Lost} {
		if s.Status == status {
			return s, true
		}
	}
	return Stage{}, false
}

// Closed reports whether a dispute of status is over: won, lost, or an
// inquiry closed.
func Closed(status string) bool {
	return status == StatusWon || status == StatusLost || status == StatusWarningClosed
}

// NeedsResponse reports whether a dispute of status waits for the
// merchant's evidence.
func NeedsResponse(status string) bool {
	return status == StatusNeedsResponse || status == StatusWarningNeedsResponse
}

// Inquiry reports whether status is an inquiry's.
func Inquiry(status string) bool {
	return status == StatusWarningNeedsResponse || status == StatusWarningUnderReview || status == StatusWarningClosed
}

// Funds phases: 0 nothing moved; an odd phase has the money withdrawn, an
// even one (from 2) reinstated. Adyen's second chargeback withdraws again
// (3), and an arbitration won reinstates again (4).
const (
	FundsNone       = 0
	FundsWithdrawn  = 1
	FundsReinstated = 2
	MaxFundsPhase   = 4
)

// Withdrawn reports whether the money is out of the balance in phase p.
func Withdrawn(p int) bool { return p%2 == 1 }

// DefaultFee is the dispute fee, in minor units of the dispute's currency,
// of a provider that does not report one with the dispute (the sandbox).
const DefaultFee = 1500

// Reasons of the sandbox's and Stripe's disputes; a provider's other
// reasons are kept as they come, or "general".
const (
	ReasonFraudulent         = "fraudulent"
	ReasonProductNotReceived = "product_not_received"
	ReasonGeneral            = "general"
)

// Dispute is a dispute as stored.
type Dispute struct {
	ID                string
	MerchantID        string
	Environment       string
	ChargeID          string
	ConnectorID       string
	Provider          string
	ProviderReference string
	Amount            int64
	Currency          string
	Reason            string
	Status            string
	Rank              int
	FundsPhase        int
	// Fee is the dispute fee, withdrawn with the amount the first time.
	Fee                 int64
	Evidence            Evidence
	EvidenceSubmittedAt *time.Time
	EvidenceDueBy       time.Time
	// DueReported: a provider named the deadline (otherwise it is
	// DefaultDueIn after the dispute was opened).
	DueReported      bool
	ClosedByMerchant bool
	CreatedAt        time.Time
	UpdatedAt        time.Time
}

// Stage is the dispute's stage.
func (d Dispute) Stage() Stage { return Stage{Status: d.Status, Rank: d.Rank} }

// ChargeRefundable reports whether the charge may still be refunded in
// full: as long as the dispute holds none of its money withdrawn (an
// inquiry, a chargeback the provider has not debited yet, or one won).
// While it does, a refund of that money would pay the cardholder twice.
func (d Dispute) ChargeRefundable() bool { return !Withdrawn(d.FundsPhase) }

// View is the public form (api/openapi.yaml, Dispute).
func (d Dispute) View() resource.Dispute {
	ev := d.Evidence
	if ev == nil {
		ev = Evidence{}
	}
	v := resource.Dispute{ID: d.ID, Object: "dispute", Charge: d.ChargeID, Connector: d.ConnectorID, Amount: d.Amount,
		Currency: d.Currency, Reason: d.Reason, Status: d.Status, Evidence: ev,
		EvidenceDetails: resource.EvidenceDetails{HasEvidence: len(d.Evidence) > 0, Submitted: d.EvidenceSubmittedAt != nil},
		EvidenceDueBy:   events.Timestamp(d.EvidenceDueBy), IsChargeRefundable: d.ChargeRefundable(),
		CreatedAt: events.Timestamp(d.CreatedAt), UpdatedAt: events.Timestamp(d.UpdatedAt)}
	if d.EvidenceSubmittedAt != nil {
		at := events.Timestamp(*d.EvidenceSubmittedAt)
		v.EvidenceDetails.SubmittedAt = &at
	}
	return v
}

// Report is what a provider reports of one of its disputes at one moment,
// read from one notification.
type Report struct {
	// Reference is the provider's id of the dispute.
	Reference string
	// PaymentReference is the provider's reference of the disputed payment
	// (the charge's provider reference); "" when the report does not name
	// it (Adyen's later notifications of a dispute): such a report changes
	// only a dispute already opened with the reference.
	PaymentReference string
	Amount           int64
	Currency         string
	Reason           string
	Stage            Stage
	// FundsPhase is the funds phase the report shows (FundsNone when it
	// shows none).
	FundsPhase int
	// Fee is the dispute fee the provider reported; nil when it reports
	// none (DefaultFee for the sandbox, 0 for a provider that reports it
	// with settlement).
	Fee *int64
	// DueBy is when the evidence is due; zero when the report does not say.
	DueBy time.Time
}

// Event types of a dispute.
const (
	EventCreated         = events.DisputeCreated
	EventUpdated         = events.DisputeUpdated
	EventClosed          = events.DisputeClosed
	EventFundsWithdrawn  = events.DisputeFundsWithdrawn
	EventFundsReinstated = events.DisputeFundsReinstated
)

// DefaultDueIn is how long a merchant has to answer a dispute whose
// provider names no deadline.
const DefaultDueIn = 7 * 24 * time.Hour

// Change is what applying a report or an action did to a dispute.
type Change struct {
	Created bool
	// Moved: the stage moved forward.
	Moved bool
	// Phases are the funds phases entered, in order (each one books once).
	Phases []int
}

// Changed reports whether anything changed.
func (c Change) Changed() bool { return c.Created || c.Moved || len(c.Phases) > 0 }

// Merge applies r to cur (nil: the dispute is new) and returns the dispute
// after it and what changed. The stage and the funds phase each take the
// further of the two; the amount, currency, reason, fee and deadline are
// the first report's; the deadline is the latest one a report named
// (DefaultDueIn after opening while none did). Merge is the whole state
// table: applying the same reports in any order gives the same dispute.
func Merge(cur *Dispute, r Report, fee int64, at time.Time) (Dispute, Change) {
	var d Dispute
	var ch Change
	if cur == nil {
		ch.Created = true
		d = Dispute{ProviderReference: r.Reference, Amount: r.Amount, Currency: r.Currency, Reason: r.Reason,
			Status: r.Stage.Status, Rank: r.Stage.Rank, Fee: fee, EvidenceDueBy: at.Add(DefaultDueIn), CreatedAt: at, UpdatedAt: at}
		if d.Reason == "" {
			d.Reason = ReasonGeneral
		}
	} else {
		d = *cur
		if r.Stage.Rank > d.Rank {
			d.Status, d.Rank = r.Stage.Status, r.Stage.Rank
			ch.Moved = true
		}
	}
	if !r.DueBy.IsZero() && (!d.DueReported || r.DueBy.After(d.EvidenceDueBy)) {
		d.EvidenceDueBy, d.DueReported = r.DueBy, true
		ch.Moved = ch.Moved || !ch.Created
	}
	for p := d.FundsPhase + 1; p <= min(r.FundsPhase, MaxFundsPhase); p++ {
		ch.Phases = append(ch.Phases, p)
		d.FundsPhase = p
	}
	if ch.Changed() {
		d.UpdatedAt = at
	}
	return d, ch
}

// ByMerchant moves d to stage on the merchant's word (evidence submitted,
// the loss accepted): the stage only moves forward, and no money moves.
func ByMerchant(d Dispute, stage Stage, at time.Time) (Dispute, bool) {
	if stage.Rank <= d.Rank {
		return d, false
	}
	d.Status, d.Rank, d.UpdatedAt = stage.Status, stage.Rank, at
	return d, true
}
