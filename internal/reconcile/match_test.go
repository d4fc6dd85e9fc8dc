package reconcile

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/gatehouse-pay/gatehouse/internal/ledger"
	"github.com/gatehouse-pay/gatehouse/internal/providers"
)

// The comparison of a day: each kind of exception once, everything else
// matched, line by line.
func TestCompare(t *testing.T) {
	d := day("2026-11-28")
	at := d.Add(3 * time.Hour)
	a := ledger.Account{MerchantID: "mer_1", ConnectorID: "conn_1", Currency: "USD"}
	fee := ledger.DefaultSandboxFees
	line := func(row int, ref, typ string, gross, fee int64) Line {
		return Line{Row: row, SettlementLine: providers.SettlementLine{Reference: ref, Type: typ, Currency: "USD", Gross: gross,
			Fee: fee, Net: gross - fee, AvailableOn: d}}
	}
	mv := func(t ledger.Transaction) Movement { return Movement{Transaction: t} }
	pending := ledger.Captured(a, "ch_adyen", "psp_1", 3000, ledger.Fee{Pending: true}, at, at)
	pendingMatched := ledger.Captured(a, "ch_adyen2", "psp_2", 1000, ledger.Fee{Pending: true}, at, at)
	pendingSettled := ledger.Captured(a, "ch_adyen3", "psp_3", 1500, ledger.Fee{Pending: true}, at, at)
	resolvedEarlier := ledger.Adjusted(a, "exc_old", "sbx_ch_gone", 700, 50, at.Add(24*time.Hour))
	books := []Movement{
		mv(ledger.Captured(a, "ch_ok", "sbx_ch_ok", 2000, fee.For(2000), at, at)),
		mv(ledger.Captured(a, "ch_amount", "sbx_ch_amount", 5000, fee.For(5000), at, at)),
		mv(ledger.Captured(a, "ch_fee", "sbx_ch_fee", 1000, fee.For(1000), at, at)),
		mv(ledger.Captured(a, "ch_extra", "sbx_ch_extra", 400, fee.For(400), at, at)),
		mv(ledger.Refunded(a, "re_ok", "sbx_re_ok", 500, at)),
		mv(ledger.PaidOut(a, "po_failed", 900, at)),
		mv(ledger.PayoutReturned(a, "po_failed", 900, at.Add(time.Hour))),
		mv(ledger.PaidOut(a, "po_ok", 1200, at)),
		mv(pending), mv(pendingMatched), mv(pendingSettled),
		// Without a reference: nothing a report can name.
		mv(ledger.Captured(a, "ch_legacy", "", 100, fee.For(100), at, at)),
	}
	adjustments := []Movement{
		{Transaction: resolvedEarlier, ExceptionType: providers.SettlementCharge},
		// The fee of psp_3 was booked by an earlier run.
		mv(ledger.FeeSettled(a, "ch_adyen3", "psp_3", 40, at)),
		// An adjustment of a reference of other days counts nowhere.
		{Transaction: ledger.Adjusted(a, "exc_other", "sbx_ch_elsewhere", 1, 0, at), ExceptionType: providers.SettlementCharge},
	}
	rep := Report{Dates: []time.Time{d}, Lines: []Line{
		line(2, "sbx_ch_ok", "charge", 2000, 88),
		line(3, "sbx_ch_amount", "charge", 5100, 178),
		line(4, "sbx_ch_fee", "charge", 1000, 61),
		line(5, "sbx_ch_unknown", "charge", 300, 39),
		line(6, "sbx_re_ok", "refund", -500, 0),
		line(7, "po_failed", "payout", -900, 0),
		line(8, "po_failed", "payout", 900, 0),
		line(9, "po_ok", "payout", -1200, 0),
		line(10, "psp_1", "charge", 3000, 117),
		line(11, "psp_2", "charge", 1000, 0),
		line(12, "psp_3", "charge", 1500, 40),
		line(13, "sbx_ch_gone", "charge", 700, 50),
	}}
	got := Compare(rep, books, adjustments)

	amounts := func(gross, fee int64) *Amounts { return &Amounts{Gross: gross, Fee: fee, Net: gross - fee} }
	want := []Exception{
		{Kind: KindAmountMismatch, ProviderReference: "sbx_ch_amount", Type: "charge", Currency: "USD", Line: 3,
			GatewayObject: "ch_amount", GatewayTransaction: books[1].ID, Provider: amounts(5100, 178), Gateway: amounts(5000, 175)},
		{Kind: KindFeeMismatch, ProviderReference: "sbx_ch_fee", Type: "charge", Currency: "USD", Line: 4,
			GatewayObject: "ch_fee", GatewayTransaction: books[2].ID, Provider: amounts(1000, 61), Gateway: amounts(1000, 59)},
		{Kind: KindMissingInGateway, ProviderReference: "sbx_ch_unknown", Type: "charge", Currency: "USD", Line: 5,
			Provider: amounts(300, 39)},
		{Kind: KindMissingAtProvider, ProviderReference: "sbx_ch_extra", Type: "charge", Currency: "USD",
			GatewayObject: "ch_extra", GatewayTransaction: books[3].ID, Gateway: amounts(400, 42)},
	}
	if d := cmp.Diff(want, got.Exceptions); d != "" {
		t.Errorf("exceptions (-want +got):\n%s", d)
	}
	// ok, refund, the failed payout (made and returned), the paid payout,
	// the three pending fees, and the line an earlier adjustment made whole.
	if got.Matched != 8 {
		t.Errorf("matched %d, want 8", got.Matched)
	}
	// The pending fee of psp_1 is the report's; psp_2's is 0, nothing to
	// book; psp_3's was booked before.
	if len(got.Fees) != 1 || got.Fees[0].Charge.ID != pending.ID || got.Fees[0].Fee != 117 {
		t.Errorf("fees to book: %+v, want psp_1's 117", got.Fees)
	}
	if amount, fee := got.Exceptions[0].Difference(); amount != 100 || fee != 3 {
		t.Errorf("difference of the amount mismatch: %d, %d", amount, fee)
	}
	if amount, fee := got.Exceptions[3].Difference(); amount != -400 || fee != -42 {
		t.Errorf("difference of the transaction the provider lacks: %d, %d", amount, fee)
	}
}

// A charge whose fee is pending and whose gross differs is an amount
// mismatch, its fee the report's once booked.
func TestComparePendingFeeWithAnotherGross(t *testing.T) {
	d := day("2026-11-28")
	a := ledger.Account{MerchantID: "mer_1", ConnectorID: "conn_1", Currency: "EUR"}
	c := ledger.Captured(a, "ch", "psp", 3000, ledger.Fee{Pending: true}, d, d)
	rep := Report{Dates: []time.Time{d}, Lines: []Line{{Row: 2, SettlementLine: providers.SettlementLine{Reference: "psp",
		Type: "charge", Currency: "EUR", Gross: 2900, Fee: 100, Net: 2800, AvailableOn: d}}}}
	got := Compare(rep, []Movement{{Transaction: c}}, nil)
	if len(got.Exceptions) != 1 || got.Exceptions[0].Kind != KindAmountMismatch || got.Exceptions[0].Gateway.Fee != 100 ||
		got.Exceptions[0].Gateway.Gross != 3000 || len(got.Fees) != 1 || got.Fees[0].Fee != 100 {
		t.Errorf("%+v", got)
	}
	// Another currency is another line: both sides miss it.
	rep.Lines[0].Currency = "USD"
	got = Compare(rep, []Movement{{Transaction: c}}, nil)
	if len(got.Exceptions) != 2 || got.Exceptions[0].Kind != KindMissingInGateway || got.Exceptions[1].Kind != KindMissingAtProvider {
		t.Errorf("another currency: %+v", got.Exceptions)
	}
}

func TestInDays(t *testing.T) {
	a := ledger.Account{MerchantID: "m", ConnectorID: "c", Currency: "USD"}
	mk := func(at time.Time) Movement { return Movement{Transaction: ledger.Refunded(a, "re", "r", 1, at)} }
	ms := []Movement{mk(day("2026-11-27").Add(-time.Millisecond)), mk(day("2026-11-27")), mk(day("2026-11-28").Add(-time.Millisecond)),
		mk(day("2026-11-29")), mk(day("2026-11-30"))}
	got := InDays(ms, []time.Time{day("2026-11-27"), day("2026-11-29")})
	if len(got) != 3 || got[0].AvailableOn != ms[1].AvailableOn || got[2].AvailableOn != ms[3].AvailableOn {
		t.Errorf("%v", got)
	}
}
