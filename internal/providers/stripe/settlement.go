package stripe

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	stripego "github.com/stripe/stripe-go/v84"

	"github.com/gatehouse-pay/gatehouse/internal/providers"
)

// SettlementLookback is how long before a day Settled reads Stripe's
// balance transactions from: Stripe lists them by creation, and a
// transaction becomes available up to this long after it was created
// (2 days for most accounts; longer for new accounts and some countries).
const SettlementLookback = 14 * 24 * time.Hour

// MaxSettlementReads bounds the balance transactions one report reads.
const MaxSettlementReads = 50_000

// Settled is the account's settlement report of [from, to): its balance
// transactions that became available in the window, read with stripe-go
// (those created SettlementLookback before from until to, kept by
// available_on). Charges and payments are charge lines named by their
// PaymentIntent (the reference the gateway keeps for a charge; the charge
// id when it has none), refunds refund lines named by the refund, dispute
// withdrawals and reinstatements dispute and dispute_reversal lines named
// by their source, and payouts (their failures and cancellations too)
// payout lines named by the payout. Other balance transactions (Stripe's
// own fees, transfers, top-ups) are not the gateway's and are left out.
// An error wraps providers.ErrUnavailable when Stripe did not answer or
// may answer later; any other error is Stripe's refusal (a key without
// access).
func (p *Provider) Settled(ctx context.Context, from, to time.Time) ([]providers.SettlementLine, error) {
	params := &stripego.BalanceTransactionListParams{CreatedRange: &stripego.RangeQueryParams{
		GreaterThanOrEqual: from.Add(-SettlementLookback).Unix(), LesserThan: to.Unix()}}
	params.Limit = stripego.Int64(100)
	params.AddExpand("data.source")
	var out []providers.SettlementLine
	read := 0
	for bt, err := range p.client.V1BalanceTransactions.List(ctx, params) {
		if err != nil {
			return nil, settlementError(err)
		}
		if read++; read > MaxSettlementReads {
			return nil, fmt.Errorf("stripe: more than %d balance transactions to read for one report", MaxSettlementReads)
		}
		at := time.Unix(bt.AvailableOn, 0).UTC()
		if at.Before(from) || !at.Before(to) {
			continue
		}
		typ, ref := settlementOf(bt)
		if typ == "" || ref == "" {
			continue
		}
		out = append(out, providers.SettlementLine{Reference: ref, Type: typ, Currency: strings.ToUpper(string(bt.Currency)),
			Gross: bt.Amount, Fee: bt.Fee, Net: bt.Net, AvailableOn: at})
	}
	return out, nil
}

// settlementOf is the line type and reference of a balance transaction,
// "" for one that is not the gateway's.
func settlementOf(bt *stripego.BalanceTransaction) (typ, ref string) {
	src := ""
	if bt.Source != nil {
		src = bt.Source.ID
	}
	switch bt.Type {
	case stripego.BalanceTransactionTypeCharge, stripego.BalanceTransactionTypePayment:
		if bt.Source != nil && bt.Source.Charge != nil && bt.Source.Charge.PaymentIntent != nil && bt.Source.Charge.PaymentIntent.ID != "" {
			return providers.SettlementCharge, bt.Source.Charge.PaymentIntent.ID
		}
		return providers.SettlementCharge, src
	case stripego.BalanceTransactionTypeRefund, stripego.BalanceTransactionTypePaymentRefund:
		return providers.SettlementRefund, src
	case stripego.BalanceTransactionTypePayout, stripego.BalanceTransactionTypePayoutFailure, stripego.BalanceTransactionTypePayoutCancel:
		return providers.SettlementPayout, src
	case stripego.BalanceTransactionTypeAdjustment:
		switch bt.ReportingCategory {
		case stripego.BalanceTransactionReportingCategoryDispute:
			return providers.SettlementDispute, src
		case stripego.BalanceTransactionReportingCategoryDisputeReversal:
			return providers.SettlementDisputeReversal, src
		}
	}
	return "", ""
}

// settlementError is Stripe's failure to list: an outage (no answer, 429,
// 409, 5xx) wraps providers.ErrUnavailable; a refusal never quotes
// Stripe's message, which can quote the key.
func settlementError(err error) error {
	var se *stripego.Error
	if !errors.As(err, &se) {
		return fmt.Errorf("%w: stripe: %w", providers.ErrUnavailable, err)
	}
	status := se.HTTPStatusCode
	if status == http.StatusTooManyRequests || status == http.StatusConflict || status >= 500 || se.Type == stripego.ErrorTypeAPI {
		return fmt.Errorf("%w: stripe: %s (status %d, request %s)", providers.ErrUnavailable, se.Type, status, se.RequestID)
	}
	return fmt.Errorf("stripe: the balance transactions were refused: %s %s (status %d, request %s)", se.Type, se.Code, status, se.RequestID)
}
