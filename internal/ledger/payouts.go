package ledger

import (
	"time"

	"github.com/gatehouse-pay/gatehouse/internal/events"
	"github.com/gatehouse-pay/gatehouse/internal/resource"
)

// Payout statuses: pending -> in_transit -> paid | failed.
const (
	PayoutPending   = "pending"
	PayoutInTransit = "in_transit"
	PayoutPaid      = "paid"
	PayoutFailed    = "failed"
)

// PayoutStatuses lists them in order.
var PayoutStatuses = []string{PayoutPending, PayoutInTransit, PayoutPaid, PayoutFailed}

// Payout schedules of a sandbox connector.
const (
	ScheduleManual = "manual"
	ScheduleDaily  = "daily"
)

// PayoutFailures are the codes a sandbox connector may rehearse a payout
// failure with, as a bank would answer.
var PayoutFailures = []string{"account_closed", "no_account", "invalid_account_number", "could_not_process"}

// payoutFailureMessages say what each means.
var payoutFailureMessages = map[string]string{
	"account_closed":         "The bank account has been closed.",
	"no_account":             "The bank account could not be found.",
	"invalid_account_number": "The bank account number is not valid.",
	"could_not_process":      "The bank could not process this payout.",
}

// FailureMessage is the message of a payout failure code.
func FailureMessage(code string) string {
	if m, ok := payoutFailureMessages[code]; ok {
		return m
	}
	return "The payout failed."
}

// Payout is money sent from one connector's balance in one currency to the
// merchant's bank.
type Payout struct {
	ID          string
	MerchantID  string
	Environment string
	ConnectorID string
	Currency    string
	Amount      int64
	Status      string
	// Automatic: made by the connector's payout schedule; it pays out the
	// balance transactions that were available, which
	// GET /v1/balance_transactions?payout= lists.
	Automatic      bool
	Description    *string
	FailureCode    *string
	FailureMessage *string
	// ProviderReference is the provider's id of a payout it made on its own
	// and reported (Stripe's po_...); nil for the sandbox's.
	ProviderReference *string
	ArrivalDate       time.Time
	CreatedAt         time.Time
	UpdatedAt         time.Time
}

// View returns the public form.
func (p Payout) View() resource.Payout {
	return resource.Payout{ID: p.ID, Object: "payout", Connector: p.ConnectorID, Amount: p.Amount, Currency: p.Currency,
		Status: p.Status, Automatic: p.Automatic, ArrivalDate: events.Timestamp(p.ArrivalDate), Description: p.Description,
		FailureCode: p.FailureCode, FailureMessage: p.FailureMessage,
		CreatedAt: events.Timestamp(p.CreatedAt), UpdatedAt: events.Timestamp(p.UpdatedAt)}
}

// Account is the account the payout is paid from.
func (p Payout) Account() Account {
	return Account{MerchantID: p.MerchantID, ConnectorID: p.ConnectorID, Currency: p.Currency}
}

// payoutMoves are the only status changes of a payout.
var payoutMoves = map[[2]string]bool{
	{PayoutPending, PayoutInTransit}: true,
	{PayoutPending, PayoutFailed}:    true,
	{PayoutInTransit, PayoutPaid}:    true,
	{PayoutInTransit, PayoutFailed}:  true,
	// A bank may return a payout after it arrived (Stripe reports it so).
	{PayoutPaid, PayoutFailed}: true,
}

// CanMovePayout reports whether a payout may go from one status to another.
func CanMovePayout(from, to string) bool { return payoutMoves[[2]string{from, to}] }

// eventOf is the event a payout's move to status fires, "" for none.
func eventOf(status string) string {
	switch status {
	case PayoutPaid:
		return events.PayoutPaid
	case PayoutFailed:
		return events.PayoutFailed
	}
	return ""
}
