package reconcile

import (
	"slices"
	"strings"
	"time"

	"github.com/gatehouse-pay/gatehouse/internal/ledger"
	"github.com/gatehouse-pay/gatehouse/internal/providers"
)

// Movement is one of the gateway's balance transactions as reconciliation
// sees it: the ledger transaction, and for an adjustment that resolved an
// exception, the type of the exception's line.
type Movement struct {
	ledger.Transaction
	ExceptionType string
}

// lineType is the type of the report line a movement is counted in, ""
// for none: a payout's failure is counted with its payout, the fee a
// provider reported later with its charge, and an adjustment that
// resolved an exception with the exception's line.
func (m Movement) lineType() string {
	switch m.Type {
	case ledger.TypePayoutFailure:
		return providers.SettlementPayout
	case ledger.TypeAdjustment:
		if strings.HasPrefix(m.Cause, ledger.FeeCause("")) {
			return providers.SettlementCharge
		}
		return m.ExceptionType
	}
	if slices.Contains(providers.SettlementTypes, m.Type) {
		return m.Type
	}
	return ""
}

// key names a line: the provider's reference, its type and currency.
// Lines of one key are summed (a payout and its return, a charge and its
// later fee).
type key struct {
	reference, typ, currency string
}

// provided is the provider's side of a key.
type provided struct {
	Amounts
	row int // the first line's number (0 for a fetched report)
	at  int // the first line's index, to keep the report's order
}

// booked is the gateway's side of a key.
type booked struct {
	Amounts
	txns     []Movement // its transactions, adjustments last
	primary  bool       // a transaction of the days compared, not only adjustments
	pending  *Movement  // a charge whose fee the provider reports later, still unbooked
	feeTaken bool
}

// Amounts are one side of a line: gross, fee and net (gross - fee).
type Amounts struct {
	Gross int64
	Fee   int64
	Net   int64
}

func (a *Amounts) add(gross, fee int64) {
	a.Gross, a.Fee, a.Net = a.Gross+gross, a.Fee+fee, a.Net+gross-fee
}

// Found is what one comparison found: how many lines matched, the
// exceptions (in the report's order, then the gateway's extra
// transactions by reference), and the fees to book: those of charges whose
// provider reports the fee with settlement (fee_pending), as the report
// has them.
type Found struct {
	Matched    int
	Exceptions []Exception
	Fees       []FeeDue
}

// FeeDue is a fee the report settles: the charge's transaction and the
// fee.
type FeeDue struct {
	Charge ledger.Transaction
	Fee    int64
}

// Compare matches a report line by line with the gateway's books. books
// are the connector's transactions that became available on the report's
// days and carry a provider reference; adjustments are its adjustments of
// the references of either side, whenever they were booked (a fee reported
// later, a resolved exception), counted with the line they adjust.
//
// Lines and transactions are matched by provider reference, type and
// currency, and summed per key on each side. A key of the report alone is
// missing_in_gateway; of the books alone, missing_at_provider; on both,
// a different gross is amount_mismatch, else a different fee fee_mismatch.
// A charge booked with its fee pending is no exception: its fee is the
// report's, to be booked (Fees), and its line matches if its gross does.
// The returned exceptions have no ids.
func Compare(rep Report, books, adjustments []Movement) Found {
	var order []key
	prov := map[key]*provided{}
	for i, l := range rep.Lines {
		k := key{l.Reference, l.Type, l.Currency}
		p := prov[k]
		if p == nil {
			p = &provided{row: l.Row, at: i}
			prov[k] = p
			order = append(order, k)
		}
		p.add(l.Gross, l.Fee)
	}
	gw := map[key]*booked{}
	var extra []key
	for _, m := range books {
		t := m.lineType()
		if t == "" || m.ProviderReference == "" || m.Type == ledger.TypeAdjustment {
			continue
		}
		k := key{m.ProviderReference, t, m.Currency}
		b := gw[k]
		if b == nil {
			b = &booked{}
			gw[k] = b
			if prov[k] == nil {
				extra = append(extra, k)
			}
		}
		b.primary = true
		b.txns = append(b.txns, m)
		b.add(m.Amount, m.Fee)
		if m.FeePending && m.Type == ledger.TypeCharge {
			pending := m
			b.pending = &pending
		}
	}
	for _, m := range adjustments {
		t := m.lineType()
		k := key{m.ProviderReference, t, m.Currency}
		if t == "" || (prov[k] == nil && gw[k] == nil) {
			continue // it adjusts a line of other days
		}
		b := gw[k]
		if b == nil {
			b = &booked{}
			gw[k] = b
		}
		b.txns = append(b.txns, m)
		b.add(m.Amount, m.Fee)
		if strings.HasPrefix(m.Cause, ledger.FeeCause("")) {
			b.feeTaken = true
		}
	}
	slices.SortFunc(extra, func(a, b key) int {
		return strings.Compare(a.reference+"\x00"+a.typ+"\x00"+a.currency, b.reference+"\x00"+b.typ+"\x00"+b.currency)
	})

	var f Found
	for _, k := range append(order, extra...) {
		p, b := prov[k], gw[k]
		e := Exception{ProviderReference: k.reference, Type: k.typ, Currency: k.currency}
		if p != nil {
			e.Line, e.Provider = p.row, &p.Amounts
		}
		if b != nil {
			first := b.txns[0]
			e.GatewayObject, e.GatewayTransaction = first.Source, first.ID
			e.Gateway = &b.Amounts
		}
		switch {
		case b == nil:
			e.Kind = KindMissingInGateway
		case p == nil:
			e.Kind = KindMissingAtProvider
		default:
			if b.pending != nil && !b.feeTaken {
				if due := p.Fee - b.Fee; due != 0 {
					f.Fees = append(f.Fees, FeeDue{Charge: b.pending.Transaction, Fee: due})
				}
				settled := b.Amounts
				settled.add(0, p.Fee-b.Fee)
				e.Gateway = &settled
			}
			switch {
			case e.Gateway.Gross != p.Gross:
				e.Kind = KindAmountMismatch
			case e.Gateway.Fee != p.Fee:
				e.Kind = KindFeeMismatch
			default:
				f.Matched++
				continue
			}
		}
		f.Exceptions = append(f.Exceptions, e)
	}
	return f
}

// InDays keeps the movements that became available on one of days.
func InDays(ms []Movement, days []time.Time) []Movement {
	var out []Movement
	for _, m := range ms {
		if slices.ContainsFunc(days, func(d time.Time) bool { return Day(m.AvailableOn).Equal(d) }) {
			out = append(out, m)
		}
	}
	return out
}
