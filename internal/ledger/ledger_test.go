package ledger

import (
	"testing"
	"time"
)

// Every constructor makes a transaction that balances and moves its net in
// the balance account, and names the reference a settlement report names
// it by.
func TestTransactionsBalanceAndCarryTheirReference(t *testing.T) {
	a := Account{MerchantID: "mer_1", ConnectorID: "conn_1", Currency: "USD"}
	at := time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name    string
		t       Transaction
		net     int64
		ref     string
		entries int
	}{
		{"capture", Captured(a, "ch", "sbx_ch_1", 2000, DefaultSandboxFees.For(2000), at, at), 1912, "sbx_ch_1", 3},
		{"refund", Refunded(a, "re", "sbx_re_1", 500, at), -500, "sbx_re_1", 2},
		{"payout", PaidOut(a, "po_1", 1000, at), -1000, "po_1", 2},
		{"payout returned", PayoutReturned(a, "po_1", 1000, at), 1000, "po_1", 2},
		{"fee settled", FeeSettled(a, "ch", "psp_1", 61, at), -61, "psp_1", 2},
		{"adjustment of the amount", Adjusted(a, "exc_1", "sbx_ch_1", 100, 0, at), 100, "sbx_ch_1", 2},
		{"adjustment of the fee", Adjusted(a, "exc_1", "sbx_ch_1", 0, 5, at), -5, "sbx_ch_1", 2},
		{"adjustment of both", Adjusted(a, "exc_1", "sbx_ch_1", -2000, -88, at), -1912, "sbx_ch_1", 3},
	} {
		if err := tc.t.Check(); err != nil {
			t.Errorf("%s: %v", tc.name, err)
		}
		if tc.t.Net() != tc.net || tc.t.ProviderReference != tc.ref || len(tc.t.Entries) != tc.entries {
			t.Errorf("%s: net %d, reference %q, %d entries; want %d, %q, %d", tc.name, tc.t.Net(), tc.t.ProviderReference,
				len(tc.t.Entries), tc.net, tc.ref, tc.entries)
		}
	}
	if got := FeeSettled(a, "ch_9", "", 1, at).Cause; got != "fee:ch_9" {
		t.Errorf("fee cause %q", got)
	}
	if got := Adjusted(a, "exc_9", "", 1, 0, at).Cause; got != "reconciliation:exc_9" {
		t.Errorf("adjustment cause %q", got)
	}
}
