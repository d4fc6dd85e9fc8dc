package sandbox

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/gatehouse-pay/gatehouse/internal/providers"
)

// Terms are what the sandbox charges an account and when it pays: the fee
// of a capture of an amount, and how long a capture's money waits before
// it is available.
type Terms struct {
	Fee   func(amount int64) int64
	Delay time.Duration
}

// ErrNoAccount is the error of Settled without an account.
var ErrNoAccount = errors.New("sandbox: a settlement report is an account's")

// Settled is the sandbox's settlement report of an account: what became
// available in it in [from, to), read from the sandbox's own books. A
// capture (an authorization or an authentication that captured, or a
// capture: of its amount, the whole authorization for 0) becomes available
// terms.Delay after the sandbox booked it, with the fee terms.Fee of its
// amount; a refund takes its amount back at once, without a fee; a payout
// leaves when it is made and comes back when it fails. Each line names the
// authorization's reference (captures), the refund's (refunds) or the
// payout's id (payouts); lines are ordered by when they became available,
// then by reference. Errors wrap providers.ErrUnavailable when the books
// cannot be read.
func (p *Provider) Settled(ctx context.Context, account string, t Terms, from, to time.Time) ([]providers.SettlementLine, error) {
	if account == "" {
		return nil, ErrNoAccount
	}
	within := func(at time.Time) bool { return !at.Before(from) && at.Before(to) }
	bookings, err := p.ledger.Bookings(ctx, account, from.Add(-t.Delay), to)
	if err != nil {
		return nil, fmt.Errorf("%w: sandbox ledger: %w", providers.ErrUnavailable, err)
	}
	var lines []providers.SettlementLine
	for _, b := range bookings {
		auth := b.Authorization
		switch {
		case b.Operation == OpRefund:
			if within(b.BookedAt) {
				lines = append(lines, providers.SettlementLine{Reference: b.Reference, Type: providers.SettlementRefund,
					Currency: auth.Currency, Gross: -b.Amount, Net: -b.Amount, AvailableOn: b.BookedAt})
			}
			continue
		case b.Operation == OpCapture:
		case b.Operation == OpAuthenticate && b.Capture:
		// An authorization that waited for the cardholder captured
		// nothing yet: its authentication does.
		case b.Operation == OpAuthorize && b.Capture && strings.HasPrefix(b.Reference, ChargePrefix):
		default:
			continue
		}
		amount := b.Amount
		if b.Operation != OpCapture || amount == 0 {
			amount = auth.Amount
		}
		at := b.BookedAt.Add(t.Delay)
		if !within(at) {
			continue
		}
		var fee int64
		if t.Fee != nil {
			fee = t.Fee(amount)
		}
		lines = append(lines, providers.SettlementLine{Reference: auth.Reference, Type: providers.SettlementCharge,
			Currency: auth.Currency, Gross: amount, Fee: fee, Net: amount - fee, AvailableOn: at})
	}
	payouts, err := p.ledger.Payouts(ctx, account, from, to)
	if err != nil {
		return nil, fmt.Errorf("%w: sandbox ledger: %w", providers.ErrUnavailable, err)
	}
	for _, po := range payouts {
		if within(po.CreatedAt) {
			lines = append(lines, providers.SettlementLine{Reference: po.ID, Type: providers.SettlementPayout,
				Currency: po.Currency, Gross: -po.Amount, Net: -po.Amount, AvailableOn: po.CreatedAt})
		}
		if po.FailedAt != nil && within(*po.FailedAt) {
			lines = append(lines, providers.SettlementLine{Reference: po.ID, Type: providers.SettlementPayout,
				Currency: po.Currency, Gross: po.Amount, Net: po.Amount, AvailableOn: *po.FailedAt})
		}
	}
	sort.SliceStable(lines, func(i, j int) bool {
		if !lines[i].AvailableOn.Equal(lines[j].AvailableOn) {
			return lines[i].AvailableOn.Before(lines[j].AvailableOn)
		}
		return lines[i].Reference < lines[j].Reference
	})
	return lines, nil
}
