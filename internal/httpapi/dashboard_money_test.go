package httpapi

import "testing"

func TestDashboardMoney(t *testing.T) {
	for _, tc := range []struct {
		in, currency string
		want         int64
		ok           bool
	}{
		{"12.50", "usd", 1250, true}, {"12.5", "USD", 1250, true}, {"12", "eur", 1200, true}, {".5", "usd", 50, true},
		{"0.01", "usd", 1, true}, {"1000", "jpy", 1000, true}, {"1.234", "kwd", 1234, true},
		{"12.", "usd", 0, false}, {"1.5", "jpy", 0, false}, {"0.001", "usd", 0, false}, {"0", "usd", 0, false},
		{"-1", "usd", 0, false}, {"1e3", "usd", 0, false}, {"1,00", "usd", 0, false}, {"", "usd", 0, false},
		{".", "usd", 0, false}, {" 1", "usd", 0, false}, {"1234567890123456", "usd", 0, false}, {"+1", "usd", 0, false},
	} {
		got, err := parseMoney(tc.in, tc.currency)
		if (err == nil) != tc.ok || got != tc.want {
			t.Errorf("parseMoney(%q, %s) = %d, %v; want %d, ok %v", tc.in, tc.currency, got, err, tc.want, tc.ok)
		}
	}
	for _, tc := range []struct {
		amount   int64
		currency string
		want     string
	}{{2000, "usd", "20.00 USD"}, {5, "usd", "0.05 USD"}, {0, "eur", "0.00 EUR"}, {1500, "jpy", "1500 JPY"}, {1, "kwd", "0.001 KWD"}} {
		if got := formatMoney(tc.amount, tc.currency); got != tc.want {
			t.Errorf("formatMoney(%d, %s) = %q, want %q", tc.amount, tc.currency, got, tc.want)
		}
	}
}
