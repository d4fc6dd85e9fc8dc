package ledger

import (
	"errors"
	"testing"
	"time"
)

func TestFeeScheduleRoundsHalfUp(t *testing.T) {
	f := FeeSchedule{PercentBPS: 290, Fixed: 30}
	for amount, want := range map[int64]int64{2000: 88, 1: 30, 50: 31, 17: 30, 18: 31, 100000: 2930, 0: 30} {
		if got := f.For(amount).Amount; got != want {
			t.Errorf("fee of %d: %d, want %d", amount, got, want)
		}
	}
	if d := f.For(2000).Details; len(d) != 1 || d[0].Amount != 88 || d[0].Type != FeeProvider {
		t.Errorf("fee details %+v", d)
	}
	for _, bad := range []FeeSchedule{{-1, 0}, {10001, 0}, {0, -1}, {0, MaxFixed + 1}} {
		if bad.Valid() {
			t.Errorf("%+v is valid", bad)
		}
	}
	if f := (Terms{}).FeeFor(100); !f.Pending || f.Amount != 0 || f.Details != nil {
		t.Error("terms without a schedule leave the fee to the provider")
	}
}

// Every transaction the package makes balances, whatever its amounts: the
// database would refuse it otherwise.
func TestTransactionsBalance(t *testing.T) {
	a := Account{MerchantID: "mer_1", ConnectorID: "conn_1", Currency: "USD"}
	at := time.Now()
	for _, tt := range []struct {
		name    string
		tx      Transaction
		net     int64
		entries int
	}{
		{"capture", Captured(a, "ch", "ref", 2000, Fee{Amount: 88}, at, at), 1912, 3},
		{"capture without a fee yet", Captured(a, "ch", "ref", 2000, Fee{Pending: true}, at, at), 2000, 2},
		{"capture eaten by its fee", Captured(a, "ch", "ref", 30, Fee{Amount: 30}, at, at), 0, 2},
		{"capture below its fee", Captured(a, "ch", "ref", 10, Fee{Amount: 30}, at, at), -20, 3},
		{"refund", Refunded(a, "re", "ref", 500, at), -500, 2},
		{"payout", PaidOut(a, "po", 700, at), -700, 2},
		{"payout returned", PayoutReturned(a, "po", 700, at), 700, 2},
		{"dispute", DisputeWithdrawn(a, "dp", "ref", 2000, 1500, 1, at), -3500, 3},
	} {
		if err := tt.tx.Check(); err != nil || tt.tx.Net() != tt.net || len(tt.tx.Entries) != tt.entries {
			t.Errorf("%s: net %d in %d entries (%v); want %d in %d", tt.name, tt.tx.Net(), len(tt.tx.Entries), err, tt.net, tt.entries)
		}
	}
	bad := PaidOut(a, "po", 700, at)
	bad.Entries[0].Amount++
	if err := bad.Check(); !errors.Is(err, ErrUnbalanced) {
		t.Errorf("an unbalanced transaction: %v", err)
	}
	if s := (Transaction{AvailableOn: at}).Status(at.Add(-time.Second)); s != StatusPending {
		t.Errorf("before available_on: %s", s)
	}
}

func TestPayoutMoves(t *testing.T) {
	for _, tt := range []struct{ from, to, next string }{
		{PayoutPending, PayoutPaid, PayoutInTransit},
		{PayoutPending, PayoutFailed, PayoutFailed},
		{PayoutInTransit, PayoutPaid, PayoutPaid},
		{PayoutPaid, PayoutFailed, PayoutFailed},
		{PayoutPaid, PayoutInTransit, ""},
		{PayoutFailed, PayoutPaid, ""},
		{PayoutInTransit, PayoutPending, ""},
	} {
		if got := nextStatus(tt.from, tt.to); got != tt.next {
			t.Errorf("from %s towards %s: %q, want %q", tt.from, tt.to, got, tt.next)
		}
		if tt.next != "" && !CanMovePayout(tt.from, tt.next) {
			t.Errorf("the step %s to %s is not a move", tt.from, tt.next)
		}
	}
	if CanMovePayout(PayoutFailed, PayoutPaid) || CanMovePayout(PayoutPaid, PayoutPending) {
		t.Error("a payout moved back")
	}
}
