package ledger

import (
	"context"
	"fmt"
	"sort"
	"time"

	"github.com/gatehouse-pay/gatehouse/internal/apperr"
	"github.com/gatehouse-pay/gatehouse/internal/events"
	"github.com/gatehouse-pay/gatehouse/internal/idempotency"
	"github.com/gatehouse-pay/gatehouse/internal/ids"
	"github.com/gatehouse-pay/gatehouse/internal/listing"
	"github.com/gatehouse-pay/gatehouse/internal/money"
	"github.com/gatehouse-pay/gatehouse/internal/outbox"
	"github.com/gatehouse-pay/gatehouse/internal/resource"
)

// Sum is an account's balance in one currency: what is available now, and
// what becomes available later.
type Sum struct {
	Currency  string
	Available int64
	Pending   int64
}

// Filter narrows a list of balance transactions.
type Filter struct {
	Type        string
	Source      string
	PayoutID    string
	ConnectorID string
	CreatedGTE  *time.Time
	CreatedLTE  *time.Time
}

// PayoutFilter narrows a list of payouts.
type PayoutFilter struct {
	Status      string
	ConnectorID string
}

// PayoutPlan is what creating a payout writes: the payout, the transaction
// that takes its amount from the balance, its event, and the answer.
type PayoutPlan struct {
	Payout      Payout
	Transaction Transaction
	Event       events.Event
	Response    idempotency.Response
}

// PayoutMove is a payout's change of status, if it is still Before: its
// event, and for a failure the transaction that returns its money.
type PayoutMove struct {
	Before      string
	After       Payout
	Event       *events.Event
	Transaction *Transaction
}

// Store keeps the books. Every write of a transaction is in the same
// database transaction as the change that causes it; a transaction whose
// cause was booked already is not written again.
type Store interface {
	Balance(ctx context.Context, merchantID, connectorID string, at time.Time) ([]Sum, error)
	ListTransactions(ctx context.Context, merchantID string, f Filter, p listing.Params) (listing.Page[Transaction], error)
	TransactionByID(ctx context.Context, merchantID, id string) (Transaction, error)

	// CreatePayout claims the key, then, with the account locked, calls
	// plan with its available balance and writes what it returns.
	CreatePayout(ctx context.Context, idem *idempotency.Request, a Account, at time.Time, plan func(available int64) (PayoutPlan, error)) (*idempotency.Response, []outbox.Task, error)
	PayoutByID(ctx context.Context, merchantID, id string) (Payout, error)
	ListPayouts(ctx context.Context, merchantID string, f PayoutFilter, p listing.Params) (listing.Page[Payout], error)

	// OpenPayouts returns payouts pending or in transit, oldest change first.
	OpenPayouts(ctx context.Context, limit int) ([]Payout, error)
	MovePayout(ctx context.Context, m PayoutMove) (bool, []outbox.Task, error)
	// ScheduledAccounts returns the accounts of sandbox connectors on the
	// daily schedule that have a balance.
	ScheduledAccounts(ctx context.Context) ([]Account, error)
	// PayoutByReference finds a payout a provider reported, by the
	// provider's reference; false when none.
	PayoutByReference(ctx context.Context, connectorID, reference string) (Payout, bool, error)
	// ImportPayout writes a payout a provider made (plan.Payout carries its
	// reference), its transaction and its event, unless the connector has a
	// payout of that reference already: then it writes nothing (false).
	ImportPayout(ctx context.Context, plan PayoutPlan) (bool, []outbox.Task, error)
	// CreateAutomaticPayout, with the account locked, picks its balance
	// transactions available at `at` that no automatic payout paid out
	// yet, and calls plan with the sum of their net; it writes what plan
	// returns (nothing for a nil plan) with the payout's settlement of them.
	// One automatic payout per account and slot: false when the slot has
	// one already.
	CreateAutomaticPayout(ctx context.Context, a Account, slot, at time.Time, plan func(total int64) (*PayoutPlan, error)) (bool, []outbox.Task, error)

	// Accounts returns the balance of each of the merchant's accounts at
	// `at`, in no particular order.
	Accounts(ctx context.Context, merchantID string, at time.Time) ([]AccountSum, error)
	// Daily sums the merchant's balance transactions created in [since,
	// until) per UTC day and currency (see Day): one row per day and
	// currency that has any, in no particular order.
	Daily(ctx context.Context, merchantID string, since, until time.Time) ([]Day, error)
	// PayoutSettled sums the balance transactions an automatic payout
	// paid out.
	PayoutSettled(ctx context.Context, merchantID, payoutID string) (Settled, error)
}

// ConnectorInfo is what payouts need of a connector.
type ConnectorInfo struct {
	ID       string
	Provider string
}

// Connectors finds a merchant's connector ("" for its sandbox connector).
type Connectors func(ctx context.Context, merchantID, connectorID string) (ConnectorInfo, error)

// Service is the API side of the books.
type Service struct {
	store       Store
	connectors  Connectors
	queue       outbox.Enqueuer
	now         func() time.Time
	payoutDelay time.Duration
	onEnqueue   func(error)
}

// NewService returns the API-side service; payoutDelay is how long a
// sandbox payout is in transit.
func NewService(store Store, connectors Connectors, queue outbox.Enqueuer, now func() time.Time, payoutDelay time.Duration, onEnqueueErr func(error)) *Service {
	return &Service{store: store, connectors: connectors, queue: queue, now: now, payoutDelay: payoutDelay, onEnqueue: onEnqueueErr}
}

// Balance returns the merchant's balance per currency, of one connector
// when connectorID is set.
func (s *Service) Balance(ctx context.Context, merchantID, connectorID string) (resource.Balance, error) {
	sums, err := s.store.Balance(ctx, merchantID, connectorID, s.now())
	if err != nil {
		return resource.Balance{}, err
	}
	sort.Slice(sums, func(i, j int) bool { return sums[i].Currency < sums[j].Currency })
	b := resource.Balance{Object: "balance", Available: []resource.BalanceAmount{}, Pending: []resource.BalanceAmount{}}
	for _, x := range sums {
		b.Available = append(b.Available, resource.BalanceAmount{Currency: x.Currency, Amount: x.Available})
		b.Pending = append(b.Pending, resource.BalanceAmount{Currency: x.Currency, Amount: x.Pending})
	}
	return b, nil
}

// Transactions returns a page of the merchant's balance transactions.
func (s *Service) Transactions(ctx context.Context, merchantID string, f Filter, p listing.Params) (listing.Page[Transaction], error) {
	if f.Type != "" && !contains(Types, f.Type) {
		return listing.Page[Transaction]{}, apperr.Invalid("type", "type must be one of %v.", Types)
	}
	if f.PayoutID != "" && !ValidPayoutID(f.PayoutID) {
		return listing.Page[Transaction]{}, apperr.NotFound("payout")
	}
	if f.PayoutID != "" {
		if _, err := s.store.PayoutByID(ctx, merchantID, f.PayoutID); err != nil {
			return listing.Page[Transaction]{}, err
		}
	}
	return s.store.ListTransactions(ctx, merchantID, f, p)
}

// Transaction returns one of the merchant's balance transactions.
func (s *Service) Transaction(ctx context.Context, merchantID, id string) (Transaction, error) {
	if !ValidTransactionID(id) {
		return Transaction{}, apperr.NotFound("balance transaction")
	}
	return s.store.TransactionByID(ctx, merchantID, id)
}

// Now is the service's clock, for views.
func (s *Service) Now() time.Time { return s.now() }

// PayoutParams is the body of POST /v1/payouts.
type PayoutParams struct {
	Connector   *string `json:"connector"`
	Amount      *int64  `json:"amount"`
	Currency    *string `json:"currency"`
	Description *string `json:"description"`
	Environment *string `json:"environment"`
}

// MaxDescriptionLen bounds a payout's description.
const MaxDescriptionLen = 500

// Result is a created or replayed answer.
type Result struct {
	Response idempotency.Response
	Replayed bool
}

// CreatePayout pays out amount of a sandbox connector's available balance
// by hand.
func (s *Service) CreatePayout(ctx context.Context, merchantID string, p PayoutParams, idem *idempotency.Request,
	render func(resource.Payout) (idempotency.Response, error)) (Result, error) {
	if p.Environment != nil && *p.Environment == "live" {
		return Result{}, apperr.LiveMode()
	}
	if p.Environment != nil && *p.Environment != "sandbox" {
		return Result{}, apperr.Invalid("environment", "environment must be sandbox or live.")
	}
	if p.Amount == nil {
		return Result{}, apperr.Missing("amount")
	}
	if !money.ValidAmount(*p.Amount) {
		return Result{}, apperr.Invalid("amount", "amount must be a positive integer (minor units).")
	}
	if p.Currency == nil {
		return Result{}, apperr.Missing("currency")
	}
	cur, err := money.ParseCurrency(*p.Currency)
	if err != nil {
		return Result{}, apperr.Invalid("currency", "currency must be an ISO 4217 code, such as USD.")
	}
	if p.Description != nil && len(*p.Description) > MaxDescriptionLen {
		return Result{}, apperr.Invalid("description", "description must be at most %d characters.", MaxDescriptionLen)
	}
	connectorID := ""
	if p.Connector != nil {
		connectorID = *p.Connector
		if connectorID == "" {
			return Result{}, apperr.Invalid("connector", "connector must be a connector id.")
		}
	}
	conn, err := s.connectors(ctx, merchantID, connectorID)
	if err != nil {
		if apperr.KindOf(err) == apperr.KindNotFound {
			return Result{}, apperr.Invalid("connector", "No such connector: %s.", connectorID)
		}
		return Result{}, err
	}
	if conn.Provider != "sandbox" {
		return Result{}, apperr.Invalid("connector", "Payouts of a %s connector are made by %s and imported; only sandbox connectors pay out through Gatehouse.", conn.Provider, conn.Provider)
	}
	now := s.now().UTC().Truncate(time.Millisecond)
	a := Account{MerchantID: merchantID, ConnectorID: conn.ID, Currency: cur}
	var made PayoutPlan
	replay, deliveries, err := s.store.CreatePayout(ctx, idem, a, now, func(available int64) (PayoutPlan, error) {
		if *p.Amount > available {
			return PayoutPlan{}, &apperr.Error{Kind: apperr.KindConflict, Code: apperr.CodeInsufficientBalance, Param: "amount",
				Message: fmt.Sprintf("amount %d exceeds the available balance of %s in %s, %d.", *p.Amount, conn.ID, cur, available)}
		}
		plan, err := NewPayoutPlan(a, environment, *p.Amount, false, p.Description, now, s.payoutDelay)
		if err != nil {
			return PayoutPlan{}, err
		}
		if plan.Response, err = render(plan.Payout.View()); err != nil {
			return PayoutPlan{}, apperr.Internal(err)
		}
		made = plan
		return plan, nil
	})
	if err != nil {
		return Result{}, err
	}
	if replay != nil {
		return Result{Response: *replay, Replayed: true}, nil
	}
	s.enqueue(ctx, deliveries)
	return Result{Response: made.Response}, nil
}

func (s *Service) enqueue(ctx context.Context, tasks []outbox.Task) {
	for _, t := range tasks {
		if err := s.queue.Enqueue(ctx, t); err != nil && s.onEnqueue != nil {
			s.onEnqueue(err)
		}
	}
}

// NewPayoutPlan is a new payout of amount from a, its transaction and its
// payout.created event.
func NewPayoutPlan(a Account, environment string, amount int64, automatic bool, description *string, now time.Time, delay time.Duration) (PayoutPlan, error) {
	po := Payout{ID: ids.New(PrefixPayout), MerchantID: a.MerchantID, Environment: environment, ConnectorID: a.ConnectorID,
		Currency: a.Currency, Amount: amount, Status: PayoutPending, Automatic: automatic, Description: description,
		ArrivalDate: now.Add(delay), CreatedAt: now, UpdatedAt: now}
	ev, err := events.NewPayout(ids.NewUUID(), a.MerchantID, environment, events.PayoutCreated, now, po.View())
	if err != nil {
		return PayoutPlan{}, apperr.Internal(err)
	}
	return PayoutPlan{Payout: po, Transaction: PaidOut(a, po.ID, amount, now), Event: ev}, nil
}

// Payout returns one of the merchant's payouts.
func (s *Service) Payout(ctx context.Context, merchantID, id string) (Payout, error) {
	if !ValidPayoutID(id) {
		return Payout{}, apperr.NotFound("payout")
	}
	return s.store.PayoutByID(ctx, merchantID, id)
}

// Payouts returns a page of the merchant's payouts.
func (s *Service) Payouts(ctx context.Context, merchantID string, f PayoutFilter, p listing.Params) (listing.Page[Payout], error) {
	if f.Status != "" && !contains(PayoutStatuses, f.Status) {
		return listing.Page[Payout]{}, apperr.Invalid("status", "status must be one of %v.", PayoutStatuses)
	}
	return s.store.ListPayouts(ctx, merchantID, f, p)
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
