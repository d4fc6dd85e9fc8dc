package httpapi

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/gofiber/fiber/v2"

	"github.com/gatehouse-pay/gatehouse/internal/apperr"
	"github.com/gatehouse-pay/gatehouse/internal/connectors"
	"github.com/gatehouse-pay/gatehouse/internal/ledger"
	"github.com/gatehouse-pay/gatehouse/internal/listing"
	"github.com/gatehouse-pay/gatehouse/internal/money"
	"github.com/gatehouse-pay/gatehouse/internal/resource"
)

// The dashboard's books (docs/ledger.md, "The dashboard"): the Balance page
// (available and pending per currency, and a chart of the last 30 days'
// daily gross, fees and net), the payouts with the form that pays out by
// hand, and each payout with the balance transactions it paid out, through
// the same ledger.Service as /v1/balance and /v1/payouts.

// ---- Balance

type balanceView struct {
	// Balances are the merchant's, per currency (the sum of its accounts).
	Balances []ledger.Sum
	// Currencies are those with a balance or a booking in the window;
	// Chart is Currency's.
	Currencies []string
	Currency   string
	Chart      chart
	// Active are the chart's days with bookings, newest first.
	Active []ledger.Day
}

func (s *server) balancePage(c *fiber.Ctx) error {
	ctx, merchant := c.UserContext(), principal(c).MerchantID
	accounts, err := s.Ledger.Accounts(ctx, merchant)
	if err != nil {
		return err
	}
	series, err := s.Ledger.Daily(ctx, merchant, ledger.ChartDays)
	if err != nil {
		return err
	}
	v := balanceView{Balances: sumByCurrency(accounts)}
	seen := map[string]bool{}
	for _, b := range v.Balances {
		seen[b.Currency] = true
		v.Currencies = append(v.Currencies, b.Currency)
	}
	for _, sr := range series {
		if !seen[sr.Currency] {
			seen[sr.Currency] = true
			v.Currencies = append(v.Currencies, sr.Currency)
		}
	}
	v.Currency = strings.Clone(c.Query("currency"))
	switch {
	case v.Currency != "":
		cur, err := money.ParseCurrency(v.Currency)
		if err != nil {
			return apperr.Invalid("currency", "currency must be an ISO 4217 code, such as USD.")
		}
		v.Currency = cur
	case len(series) > 0:
		// The currency that captured the most in the window.
		best := series[0]
		for _, sr := range series[1:] {
			if sr.Total.Gross > best.Total.Gross {
				best = sr
			}
		}
		v.Currency = best.Currency
	case len(v.Currencies) > 0:
		v.Currency = v.Currencies[0]
	default:
		v.Currency = "USD"
	}
	chosen := emptySeries(s.Ledger.Now(), v.Currency)
	for _, sr := range series {
		if sr.Currency == v.Currency {
			chosen = sr
		}
	}
	v.Chart = newChart(chosen)
	for i := len(chosen.Days) - 1; i >= 0; i-- {
		if d := chosen.Days[i]; d.Captures != 0 || d.Returned != 0 {
			v.Active = append(v.Active, d)
		}
	}
	return s.page(c, "balance", "balance", "Balance", v)
}

// sumByCurrency adds up the accounts of each currency (they come sorted by
// currency).
func sumByCurrency(accounts []ledger.AccountSum) []ledger.Sum {
	var out []ledger.Sum
	for _, a := range accounts {
		if n := len(out); n > 0 && out[n-1].Currency == a.Currency {
			out[n-1].Available += a.Available
			out[n-1].Pending += a.Pending
			continue
		}
		out = append(out, ledger.Sum{Currency: a.Currency, Available: a.Available, Pending: a.Pending})
	}
	return out
}

// emptySeries is a currency's window without bookings.
func emptySeries(now time.Time, currency string) ledger.Series {
	until := now.UTC().Truncate(24 * time.Hour).Add(24 * time.Hour)
	since := until.AddDate(0, 0, -ledger.ChartDays)
	sr := ledger.Series{Currency: currency, Days: make([]ledger.Day, ledger.ChartDays), Total: ledger.Day{Day: since, Currency: currency}}
	for i := range sr.Days {
		sr.Days[i] = ledger.Day{Day: since.AddDate(0, 0, i), Currency: currency}
	}
	return sr
}

// ---- Payouts

// payoutAccount is an account a payout can be made from, as the form
// offers it: a live sandbox connector's balance in one currency.
type payoutAccount struct {
	ledger.AccountSum
	Connector *connectors.Connector
}

// Value is the account's value in the form: connector/currency.
func (a payoutAccount) Value() string { return a.ConnectorID + "/" + a.Currency }

// payoutForm is what the form was sent with, to show it again.
type payoutForm struct {
	Account     string
	Amount      string
	Description string
	// asked is Amount read in the account's currency.
	asked int64
}

type payoutsView struct {
	// Accounts are every account with a balance; Payable those a payout
	// can be made from.
	Accounts []payoutAccount
	Payable  []payoutAccount
	Names    map[string]*connectors.Connector
	Payouts  []ledger.Payout
	Statuses []string
	Status   string
	Pager    *pager
	Form     payoutForm
	MaxDesc  int
}

func (s *server) payoutsPage(c *fiber.Ctx) error {
	return s.renderPayouts(c, fiber.StatusOK, payoutForm{}, nil)
}

// renderPayouts is the payouts page; a form that was refused comes back
// with its values and why.
func (s *server) renderPayouts(c *fiber.Ctx, status int, f payoutForm, fail *apperr.Error) error {
	ctx, merchant := c.UserContext(), principal(c).MerchantID
	v := payoutsView{Statuses: ledger.PayoutStatuses, Form: f, MaxDesc: ledger.MaxDescriptionLen}
	if c.Method() == fiber.MethodGet {
		v.Status = strings.Clone(c.Query("status"))
	}
	var err error
	if v.Accounts, v.Names, err = s.payoutAccounts(ctx, merchant); err != nil {
		return err
	}
	for _, a := range v.Accounts {
		if a.Connector != nil && a.Connector.Provider == connectors.ProviderSandbox {
			v.Payable = append(v.Payable, a)
		}
	}
	if v.Pager, err = newPager(c, dashboardPath+"/payouts", ledger.ValidPayoutID, url.Values{"status": {v.Status}}); err != nil {
		return err
	}
	if c.Method() != fiber.MethodGet {
		v.Pager.params = listing.Params{Limit: dashboardPageSize}
	}
	page, err := s.Ledger.Payouts(ctx, merchant, ledger.PayoutFilter{Status: v.Status}, v.Pager.params)
	if err != nil {
		return err
	}
	v.Payouts = pageItems(v.Pager, page, func(p ledger.Payout) string { return p.ID })
	view, err := s.signedIn(c, "payouts", "Payouts")
	if err != nil {
		return err
	}
	view.Data = v
	if c.Method() != fiber.MethodGet {
		view.Canonical = dashboardPath + "/payouts" // the answer to the form
	}
	if fail != nil {
		view.Error, view.ErrorCode = fail.Message, fail.Code
		if fail.Code == apperr.CodeInsufficientBalance {
			view.Error = insufficientMessage(v, f)
		}
	}
	return s.render(c, status, "payouts", view)
}

// payoutAccounts are the merchant's accounts with their connectors (nil
// for a deleted one), and its live connectors by id.
func (s *server) payoutAccounts(ctx context.Context, merchantID string) ([]payoutAccount, map[string]*connectors.Connector, error) {
	sums, err := s.Ledger.Accounts(ctx, merchantID)
	if err != nil {
		return nil, nil, err
	}
	all, err := s.allConnectors(ctx, merchantID)
	if err != nil {
		return nil, nil, err
	}
	names := map[string]*connectors.Connector{}
	for i := range all {
		names[all[i].ID] = &all[i]
	}
	out := make([]payoutAccount, len(sums))
	for i, a := range sums {
		out[i] = payoutAccount{AccountSum: a, Connector: names[a.ConnectorID]}
	}
	return out, names, nil
}

// insufficientMessage says why a payout of more than was available was
// refused, in the page's words: what was asked, what is available now.
func insufficientMessage(v payoutsView, f payoutForm) string {
	for _, a := range v.Accounts {
		if a.Value() != f.Account {
			continue
		}
		name := a.ConnectorID
		if a.Connector != nil {
			name = a.Connector.Name
		}
		return fmt.Sprintf("Not enough available: you asked to pay out %s, but %s has %s available now. Nothing was paid out.",
			money.Format(f.asked, a.Currency), name, money.Format(a.Available, a.Currency))
	}
	return "Not enough available in this account to pay out " + f.Amount + ". Nothing was paid out."
}

// dashCreatePayout pays out by hand, as POST /v1/payouts, with the form's
// idempotency key. A payout the service refuses (more than is available,
// or a field it cannot take) shows the page again with the reason.
func (s *server) dashCreatePayout(c *fiber.Ctx) error {
	f := payoutForm{Account: form(c, "account"), Amount: form(c, "amount"), Description: form(c, "description")}
	refused := func(err error) error {
		ae, ok := apperr.As(err)
		if !ok || ae.Kind != apperr.KindInvalid && ae.Code != apperr.CodeInsufficientBalance {
			return err
		}
		return s.renderPayouts(c, statusOf[ae.Kind], f, ae)
	}
	connector, currency, _ := strings.Cut(f.Account, "/")
	cur, err := money.ParseCurrency(currency)
	if connector == "" || err != nil {
		return refused(apperr.Invalid("account", "Choose the account to pay out from."))
	}
	if f.Amount == "" {
		return refused(apperr.Invalid("amount", "Enter the amount to pay out, such as 12.50 (%s).", cur))
	}
	amount, err := money.Parse(f.Amount, cur)
	f.asked = amount
	if err != nil {
		return refused(apperr.Invalid("amount", "The amount must be a positive number such as 12.50 (%s).", cur))
	}
	idem, err := s.formIdem(c, f.Account, f.Amount, f.Description)
	if err != nil {
		return err
	}
	p := ledger.PayoutParams{Connector: &connector, Amount: &amount, Currency: &cur, Description: optional(f.Description)}
	res, err := s.Ledger.CreatePayout(c.UserContext(), principal(c).MerchantID, p, idem, renderAs[resource.Payout](fiber.StatusCreated))
	if err != nil {
		return refused(err)
	}
	var made resource.Payout
	if err := json.Unmarshal(res.Response.Body, &made); err != nil {
		return apperr.Internal(err)
	}
	return redirectNotice(c, dashboardPath+"/payouts/"+made.ID, doneOr(res.Replayed, "payout_created"))
}

type payoutView struct {
	Payout ledger.Payout
	// Connector is the payout's, nil once deleted.
	Connector *connectors.Connector
	// Own are the payout's own transactions: the one that took its amount
	// from the balance, and the one that returned it if it failed.
	Own []ledger.Transaction
	// Settled are (a page of) the transactions it paid out, and Total
	// what all of them sum to.
	Settled []ledger.Transaction
	Total   ledger.Settled
	Pager   *pager
	Now     time.Time
}

// Balances reports whether what the payout paid out sums to its amount.
func (v payoutView) Balances() bool { return v.Total.Net == v.Payout.Amount }

// payoutBusyWithin is how close a payout in transit must be to its arrival
// for its page to reload itself until it arrives.
const payoutBusyWithin = 2 * time.Minute

func (s *server) payoutPage(c *fiber.Ctx) error {
	ctx, merchant := c.UserContext(), principal(c).MerchantID
	po, err := s.Ledger.Payout(ctx, merchant, id(c))
	if err != nil {
		return err
	}
	v := payoutView{Payout: po, Now: s.Ledger.Now()}
	if v.Pager, err = newPager(c, dashboardPath+"/payouts/"+po.ID, ledger.ValidTransactionID, nil); err != nil {
		return err
	}
	page, err := s.Ledger.Transactions(ctx, merchant, ledger.Filter{PayoutID: po.ID}, v.Pager.params)
	if err != nil {
		return err
	}
	v.Settled = pageItems(v.Pager, page, func(t ledger.Transaction) string { return t.ID })
	if v.Total, err = s.Ledger.PayoutSettled(ctx, merchant, po.ID); err != nil {
		return err
	}
	own, err := s.Ledger.Transactions(ctx, merchant, ledger.Filter{Source: po.ID}, listing.Params{Limit: 10})
	if err != nil {
		return err
	}
	v.Own = own.Items
	if cn, err := s.Connectors.Get(ctx, merchant, po.ConnectorID); err == nil {
		v.Connector = &cn
	} else if apperr.KindOf(err) != apperr.KindNotFound {
		return err
	}
	view, err := s.signedIn(c, "payouts", "Payout "+po.ID)
	if err != nil {
		return err
	}
	view.Data = v
	if c.Query("notice") != "" {
		// A reload (the page reloads itself while the payout is on its
		// way) shows it without the notice of its creation.
		view.Canonical = dashboardPath + "/payouts/" + po.ID
	}
	view.Busy = po.Status == ledger.PayoutPending ||
		po.Status == ledger.PayoutInTransit && po.ArrivalDate.Sub(v.Now) < payoutBusyWithin
	return s.render(c, fiber.StatusOK, "payout", view)
}
