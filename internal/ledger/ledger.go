// Package ledger keeps a merchant's books: every movement of its money is a
// transaction of entries in its accounts per connector and currency that sum
// to zero (double entry), booked in the same database transaction as the
// state change that causes it and keyed by that cause, so nothing is booked
// twice. A transaction is shown to the merchant as a balance transaction
// (txn_...); balances, payouts (po_...) and their schedules are built on it.
// docs/ledger.md explains the design.
package ledger

import (
	"errors"
	"fmt"
	"time"

	"github.com/gatehouse-pay/gatehouse/internal/events"
	"github.com/gatehouse-pay/gatehouse/internal/ids"
	"github.com/gatehouse-pay/gatehouse/internal/resource"
)

// Id prefixes.
const (
	PrefixTransaction = "txn"
	PrefixPayout      = "po"
)

// ValidTransactionID reports whether id can be a balance transaction's.
func ValidTransactionID(id string) bool { return ids.Valid(PrefixTransaction, id) }

// ValidPayoutID reports whether id can be a payout's.
func ValidPayoutID(id string) bool { return ids.Valid(PrefixPayout, id) }

// Transaction types.
const (
	TypeCharge          = "charge"
	TypeRefund          = "refund"
	TypeDispute         = "dispute"
	TypeDisputeReversal = "dispute_reversal"
	TypePayout          = "payout"
	TypePayoutFailure   = "payout_failure"
	TypeAdjustment      = "adjustment"
)

// Types lists them in the order of api/openapi.yaml.
var Types = []string{TypeCharge, TypeRefund, TypeDispute, TypeDisputeReversal, TypePayout, TypePayoutFailure, TypeAdjustment}

// Accounts: each entry moves money into (positive) or out of (negative) one
// of a merchant's accounts at one connector in one currency.
const (
	// AccountBalance is what the merchant is owed: its balance.
	AccountBalance = "balance"
	// AccountProvider is what came in from, or went back to, cardholders
	// through the provider.
	AccountProvider = "provider"
	// AccountFees is what the provider kept.
	AccountFees = "fees"
	// AccountPayouts is what was sent to the merchant's bank.
	AccountPayouts = "payouts"
	// AccountAdjustments is the other side of corrections a person decided.
	AccountAdjustments = "adjustments"
)

// Fee detail types.
const (
	FeeProvider = "provider_fee"
	FeeDispute  = "dispute_fee"
)

// Transaction statuses, from its available_on.
const (
	StatusPending   = "pending"
	StatusAvailable = "available"
)

// Entry is one line of a transaction.
type Entry struct {
	Account string
	Amount  int64
}

// FeeDetail is one part of a fee.
type FeeDetail struct {
	Type        string `json:"type"`
	Amount      int64  `json:"amount"`
	Description string `json:"description"`
}

// Transaction is a ledger transaction: the header the merchant sees as a
// balance transaction, and its entries.
type Transaction struct {
	ID          string
	MerchantID  string
	ConnectorID string
	Currency    string
	Type        string
	// Source is the object that moved the money: a charge, refund, payout,
	// dispute or reconciliation exception.
	Source string
	// Cause is the booking's key: the state change that made it, unique per
	// merchant, so a repeated change books nothing.
	Cause      string
	Amount     int64
	Fee        int64
	FeeDetails []FeeDetail
	// FeePending: the provider reports the fee later (with settlement).
	FeePending        bool
	ProviderReference string
	AvailableOn       time.Time
	CreatedAt         time.Time
	Entries           []Entry
}

// Net is what the transaction moves in the merchant's balance.
func (t Transaction) Net() int64 { return t.Amount - t.Fee }

// ErrUnbalanced is the error of a transaction whose entries do not balance.
var ErrUnbalanced = errors.New("ledger: transaction does not balance")

// Check reports whether t balances: two entries or more, none zero, summing
// to zero, and moving its net in the balance account. The database checks
// the same when it is written; this finds the mistake before.
func (t Transaction) Check() error {
	var sum, toBalance int64
	for _, e := range t.Entries {
		if e.Amount == 0 {
			return fmt.Errorf("%w: %s has a zero entry", ErrUnbalanced, t.Cause)
		}
		sum += e.Amount
		if e.Account == AccountBalance {
			toBalance += e.Amount
		}
	}
	if len(t.Entries) < 2 || sum != 0 || toBalance != t.Net() {
		return fmt.Errorf("%w: %s (entries %v, net %d)", ErrUnbalanced, t.Cause, t.Entries, t.Net())
	}
	return nil
}

// Status is pending until available_on, available from then.
func (t Transaction) Status(now time.Time) string {
	if now.Before(t.AvailableOn) {
		return StatusPending
	}
	return StatusAvailable
}

// View is the balance transaction as of now.
func (t Transaction) View(now time.Time) resource.BalanceTransaction {
	fd := make([]resource.FeeDetail, 0, len(t.FeeDetails))
	for _, d := range t.FeeDetails {
		fd = append(fd, resource.FeeDetail(d))
	}
	return resource.BalanceTransaction{ID: t.ID, Object: "balance_transaction", Type: t.Type, Source: t.Source,
		Connector: t.ConnectorID, Amount: t.Amount, Fee: t.Fee, FeeDetails: fd, Net: t.Net(), Currency: t.Currency,
		Status: t.Status(now), AvailableOn: events.Timestamp(t.AvailableOn), CreatedAt: events.Timestamp(t.CreatedAt)}
}

// entries builds the usual shape: amount from (or to) the counter account,
// the fee to fees, the net to the balance; zero lines are left out.
func entries(counter string, amount, fee int64) []Entry {
	var es []Entry
	for _, e := range []Entry{{counter, -amount}, {AccountFees, fee}, {AccountBalance, amount - fee}} {
		if e.Amount != 0 {
			es = append(es, e)
		}
	}
	return es
}

// Account names a merchant's accounts at one connector in one currency.
type Account struct {
	MerchantID  string
	ConnectorID string
	Currency    string
}

// Fee is what the provider keeps of a movement: known now, or pending (it
// is reported later, and booked then).
type Fee struct {
	Amount  int64
	Details []FeeDetail
	Pending bool
}

// Cause keys.
func chargeCause(chargeID string) string        { return "charge:" + chargeID }
func refundCause(refundID string) string        { return "refund:" + refundID }
func payoutCause(payoutID string) string        { return "payout:" + payoutID }
func payoutFailureCause(payoutID string) string { return "payout_failure:" + payoutID }

// Captured is the transaction of a charge's capture: amount comes in from
// the provider, its fee goes to fees, the rest to the balance, available
// at availableOn.
func Captured(a Account, chargeID, providerReference string, amount int64, fee Fee, at, availableOn time.Time) Transaction {
	return Transaction{ID: ids.New(PrefixTransaction), MerchantID: a.MerchantID, ConnectorID: a.ConnectorID, Currency: a.Currency,
		Type: TypeCharge, Source: chargeID, Cause: chargeCause(chargeID), Amount: amount, Fee: fee.Amount,
		FeeDetails: fee.Details, FeePending: fee.Pending, ProviderReference: providerReference,
		AvailableOn: availableOn, CreatedAt: at, Entries: entries(AccountProvider, amount, fee.Amount)}
}

// Refunded is the transaction of a refund that succeeded: the amount goes
// back to the cardholder from the balance at once. The charge's fee is not
// returned.
func Refunded(a Account, refundID, providerReference string, amount int64, at time.Time) Transaction {
	return Transaction{ID: ids.New(PrefixTransaction), MerchantID: a.MerchantID, ConnectorID: a.ConnectorID, Currency: a.Currency,
		Type: TypeRefund, Source: refundID, Cause: refundCause(refundID), Amount: -amount,
		ProviderReference: providerReference, AvailableOn: at, CreatedAt: at,
		Entries: entries(AccountProvider, -amount, 0)}
}

// PaidOut is the transaction of a payout: its amount leaves the balance for
// the merchant's bank. A sandbox payout is its own provider reference: the
// sandbox's settlement report names it by its id.
func PaidOut(a Account, payoutID string, amount int64, at time.Time) Transaction {
	return Transaction{ID: ids.New(PrefixTransaction), MerchantID: a.MerchantID, ConnectorID: a.ConnectorID, Currency: a.Currency,
		Type: TypePayout, Source: payoutID, Cause: payoutCause(payoutID), Amount: -amount, ProviderReference: payoutID,
		AvailableOn: at, CreatedAt: at, Entries: entries(AccountPayouts, -amount, 0)}
}

// PayoutReturned is the transaction of a failed payout: its amount comes
// back to the balance, under the payout's reference.
func PayoutReturned(a Account, payoutID string, amount int64, at time.Time) Transaction {
	return Transaction{ID: ids.New(PrefixTransaction), MerchantID: a.MerchantID, ConnectorID: a.ConnectorID, Currency: a.Currency,
		Type: TypePayoutFailure, Source: payoutID, Cause: payoutFailureCause(payoutID), Amount: amount, ProviderReference: payoutID,
		AvailableOn: at, CreatedAt: at, Entries: entries(AccountPayouts, amount, 0)}
}

// FeeCause is the key of the fee of a charge whose provider reported it
// after the capture: one per charge.
func FeeCause(chargeID string) string { return "fee:" + chargeID }

// AdjustmentCause is the key of the adjustment that resolves a
// reconciliation exception: one per exception.
func AdjustmentCause(exceptionID string) string { return "reconciliation:" + exceptionID }

// FeeSettled is the transaction of a capture's fee that its provider
// reported later, with settlement (Adyen): the capture was booked at its
// gross with its fee pending, and the fee now goes from the balance to
// fees. Its source is the charge and its reference the charge's, so it is
// counted with the capture's line of a settlement report. fee must not be
// zero (nothing would move).
func FeeSettled(a Account, chargeID, providerReference string, fee int64, at time.Time) Transaction {
	return Transaction{ID: ids.New(PrefixTransaction), MerchantID: a.MerchantID, ConnectorID: a.ConnectorID, Currency: a.Currency,
		Type: TypeAdjustment, Source: chargeID, Cause: FeeCause(chargeID), Fee: fee,
		FeeDetails:        []FeeDetail{{Type: FeeProvider, Amount: fee, Description: "Processing fee reported at settlement"}},
		ProviderReference: providerReference, AvailableOn: at, CreatedAt: at, Entries: entries(AccountProvider, 0, fee)}
}

// Adjusted is the transaction of a correction a person decided: the
// resolution of a reconciliation exception by adjusting the books to what
// the provider reported. amount moves between the balance and the
// adjustments account, fee between the balance and fees; the balance moves
// by amount - fee. Its source is the exception. amount and fee must not
// both be zero.
func Adjusted(a Account, exceptionID, providerReference string, amount, fee int64, at time.Time) Transaction {
	var details []FeeDetail
	if fee != 0 {
		details = []FeeDetail{{Type: FeeProvider, Amount: fee, Description: "Fee correction from reconciliation"}}
	}
	return Transaction{ID: ids.New(PrefixTransaction), MerchantID: a.MerchantID, ConnectorID: a.ConnectorID, Currency: a.Currency,
		Type: TypeAdjustment, Source: exceptionID, Cause: AdjustmentCause(exceptionID), Amount: amount, Fee: fee,
		FeeDetails: details, ProviderReference: providerReference, AvailableOn: at, CreatedAt: at,
		Entries: entries(AccountAdjustments, amount, fee)}
}

// DisputeCause is the key of a dispute's funds moving for the phase-th
// time (disputes' funds phases): phase 1 is dispute:<id>, its reversal
// (2) dispute_reversal:<id>; a second chargeback's withdrawal (3) and
// reinstatement (4) carry the phase.
func DisputeCause(disputeID string, phase int) string {
	base := "dispute:"
	if phase%2 == 0 {
		base = "dispute_reversal:"
	}
	if phase <= 2 {
		return base + disputeID
	}
	return fmt.Sprintf("%s%s:%d", base, disputeID, phase)
}

// DisputeWithdrawn is the transaction of a dispute's funds withdrawn: the
// disputed amount goes back to the cardholder and the dispute fee to the
// provider, both from the balance at once. phase is the dispute's funds
// phase (1, or 3 after a second chargeback).
func DisputeWithdrawn(a Account, disputeID, providerReference string, amount, fee int64, phase int, at time.Time) Transaction {
	var details []FeeDetail
	if fee != 0 {
		details = []FeeDetail{{Type: FeeDispute, Amount: fee, Description: "Dispute fee"}}
	}
	return Transaction{ID: ids.New(PrefixTransaction), MerchantID: a.MerchantID, ConnectorID: a.ConnectorID, Currency: a.Currency,
		Type: TypeDispute, Source: disputeID, Cause: DisputeCause(disputeID, phase), Amount: -amount, Fee: fee, FeeDetails: details,
		ProviderReference: providerReference, AvailableOn: at, CreatedAt: at, Entries: entries(AccountProvider, -amount, fee)}
}

// DisputeReinstated is the transaction of a won dispute's amount coming
// back to the balance (the dispute fee does not). phase is the dispute's
// funds phase (2, or 4 after an arbitration won).
func DisputeReinstated(a Account, disputeID, providerReference string, amount int64, phase int, at time.Time) Transaction {
	return Transaction{ID: ids.New(PrefixTransaction), MerchantID: a.MerchantID, ConnectorID: a.ConnectorID, Currency: a.Currency,
		Type: TypeDisputeReversal, Source: disputeID, Cause: DisputeCause(disputeID, phase), Amount: amount,
		ProviderReference: providerReference, AvailableOn: at, CreatedAt: at, Entries: entries(AccountProvider, amount, 0)}
}

// FeeSchedule is a connector's price: basis points of the amount, rounded
// half up, plus a fixed part in minor units of the charge's currency.
type FeeSchedule struct {
	PercentBPS int64 `json:"percent_bps"`
	Fixed      int64 `json:"fixed"`
}

// DefaultSandboxFees is a sandbox connector's schedule unless it names one.
var DefaultSandboxFees = FeeSchedule{PercentBPS: 290, Fixed: 30}

// Bounds of a schedule.
const (
	MaxPercentBPS = 10000
	MaxFixed      = 1_000_000
)

// Valid reports whether the schedule is within its bounds.
func (f FeeSchedule) Valid() bool {
	return f.PercentBPS >= 0 && f.PercentBPS <= MaxPercentBPS && f.Fixed >= 0 && f.Fixed <= MaxFixed
}

// For is the fee of a capture of amount.
func (f FeeSchedule) For(amount int64) Fee {
	fee := (amount*f.PercentBPS+5000)/10000 + f.Fixed
	return Fee{Amount: fee, Details: []FeeDetail{{Type: FeeProvider, Amount: fee,
		Description: fmt.Sprintf("Sandbox processing fee (%d.%02d%% + %d)", f.PercentBPS/100, f.PercentBPS%100, f.Fixed)}}}
}

// Terms are what a connector's provider charges and when it pays: the fee
// schedule (nil when the provider reports each fee itself) and the
// settlement delay.
type Terms struct {
	Fees            *FeeSchedule
	SettlementDelay time.Duration
}

// DefaultSettlementDelay is how long a capture waits before its money is
// available, unless the provider says otherwise.
const DefaultSettlementDelay = 48 * time.Hour

// FeeFor is the fee of a capture of amount under the terms: by the
// schedule, or pending until the provider reports it.
func (t Terms) FeeFor(amount int64) Fee {
	if t.Fees == nil {
		return Fee{Pending: true}
	}
	return t.Fees.For(amount)
}
