package money

import (
	"errors"
	"math"
	"strings"
	"testing"
)

func TestParseCurrency(t *testing.T) {
	for _, tc := range []struct {
		in, want string
		err      error
	}{
		{"USD", "USD", nil}, {"usd", "USD", nil}, {"eUr", "EUR", nil}, {" jpy\t", "JPY", nil}, {"kwd", "KWD", nil},
		{"", "", ErrCurrencyLength}, {"US", "US", ErrCurrencyLength}, {"USDD", "USDD", ErrCurrencyLength},
		{"üsd", "ÜSD", ErrCurrencyLength}, {"U S", "U S", ErrCurrencyUnknown},
		{"XYZ", "XYZ", ErrCurrencyUnknown}, {"US1", "US1", ErrCurrencyUnknown}, {"---", "---", ErrCurrencyUnknown},
	} {
		got, err := ParseCurrency(tc.in)
		if got != tc.want || !errors.Is(err, tc.err) || (tc.err == nil) != (err == nil) {
			t.Errorf("ParseCurrency(%q) = %q, %v; want %q, %v", tc.in, got, err, tc.want, tc.err)
		}
	}
}

func TestValidAmount(t *testing.T) {
	for n, want := range map[int64]bool{math.MinInt64: false, -1: false, 0: false, 1: true, 2000: true,
		99_999_999: true, 100_000_000: false, math.MaxInt64: false} {
		if ValidAmount(n) != want {
			t.Errorf("ValidAmount(%d) = %v", n, !want)
		}
	}
}

func TestDigits(t *testing.T) {
	for cur, want := range map[string]int{"USD": 2, "usd": 2, "EUR": 2, "XYZ": 2, "": 2,
		"JPY": 0, "jpy": 0, "KRW": 0, "CLP": 0, "KWD": 3, "bhd": 3, "TND": 3} {
		if got := Digits(cur); got != want {
			t.Errorf("Digits(%q) = %d, want %d", cur, got, want)
		}
	}
	// Every currency listed with other digits is one the API accepts.
	for cur := range minorDigits {
		if got, err := ParseCurrency(cur); err != nil || got != cur {
			t.Errorf("minorDigits lists %q, which ParseCurrency reads as %q, %v", cur, got, err)
		}
	}
}

func TestFormat(t *testing.T) {
	for _, tc := range []struct {
		amount   int64
		currency string
		want     string
	}{
		{2000, "usd", "20.00 USD"}, {5, "usd", "0.05 USD"}, {0, "eur", "0.00 EUR"}, {1250, "EUR", "12.50 EUR"},
		{100, "gbp", "1.00 GBP"}, {99_999_999, "usd", "999999.99 USD"},
		{1500, "jpy", "1500 JPY"}, {0, "JPY", "0 JPY"}, {1, "kwd", "0.001 KWD"}, {12345, "KWD", "12.345 KWD"},
		{-5, "usd", "-0.05 USD"}, {-1500, "jpy", "-1500 JPY"}, {-1, "kwd", "-0.001 KWD"},
		{math.MaxInt64, "usd", "92233720368547758.07 USD"}, {math.MinInt64, "usd", "-92233720368547758.08 USD"},
	} {
		if got := Format(tc.amount, tc.currency); got != tc.want {
			t.Errorf("Format(%d, %s) = %q, want %q", tc.amount, tc.currency, got, tc.want)
		}
		if got, want, _ := strings.Cut(tc.want, " "); Major(tc.amount, tc.currency) != got {
			t.Errorf("Major(%d, %s) = %q, want %q (%q)", tc.amount, tc.currency, Major(tc.amount, tc.currency), got, want)
		}
	}
}

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		in, currency string
		want         int64
		ok           bool
	}{
		{"12.50", "usd", 1250, true}, {"12.5", "USD", 1250, true}, {"12", "eur", 1200, true}, {".5", "usd", 50, true},
		{"0.01", "usd", 1, true}, {"007", "usd", 700, true}, {"999999999999999.99", "usd", 99999999999999999, true},
		{"1000", "jpy", 1000, true}, {"12.", "jpy", 12, true}, {"1.234", "kwd", 1234, true}, {"1.2", "kwd", 1200, true},
		{"12.", "usd", 0, false}, {"1.5", "jpy", 0, false}, {".", "jpy", 0, false}, {"0.001", "usd", 0, false},
		{"0", "usd", 0, false}, {"0.00", "usd", 0, false}, {"0", "jpy", 0, false},
		{"-1", "usd", 0, false}, {"1e3", "usd", 0, false}, {"1,00", "usd", 0, false}, {"", "usd", 0, false},
		{".", "usd", 0, false}, {" 1", "usd", 0, false}, {"1 ", "usd", 0, false}, {"+1", "usd", 0, false},
		{"1.2.3", "kwd", 0, false}, {"1..5", "usd", 0, false}, {"١", "usd", 0, false}, {"12.50 USD", "usd", 0, false},
		{"1234567890123456", "usd", 0, false}, {"1234567890123456", "jpy", 0, false},
		{"123456789012345", "jpy", 123456789012345, true}, {"999999999999999.999", "kwd", 999999999999999999, true},
	} {
		got, err := Parse(tc.in, tc.currency)
		if (err == nil) != tc.ok || got != tc.want {
			t.Errorf("Parse(%q, %s) = %d, %v; want %d, ok %v", tc.in, tc.currency, got, err, tc.want, tc.ok)
		}
		if err != nil && !errors.Is(err, ErrAmount) {
			t.Errorf("Parse(%q, %s) = %v, want ErrAmount", tc.in, tc.currency, err)
		}
	}
}

var fuzzCurrencies = []string{"USD", "jpy", "KWD", "eur", "CLP", "BHD", "XYZ"}

// FuzzRoundTrip: every positive amount the dashboard can show, it reads
// back; every text it reads, it shows in one canonical form that reads back
// to the same amount.
func FuzzRoundTrip(f *testing.F) {
	for _, seed := range []struct {
		n    int64
		text string
		cur  uint8
	}{{1, "0.01", 0}, {1250, "12.5", 0}, {1500, "1500", 1}, {1, ".001", 2}, {99_999_999, "12.", 1}, {-7, "x", 3}} {
		f.Add(seed.n, seed.text, seed.cur)
	}
	f.Fuzz(func(t *testing.T, n int64, text string, c uint8) {
		cur := fuzzCurrencies[int(c)%len(fuzzCurrencies)]
		major := Major(n, cur)
		if n > 0 {
			whole, _, _ := strings.Cut(major, ".")
			got, err := Parse(major, cur)
			switch {
			case len(whole) <= maxWholeDigits && (err != nil || got != n):
				t.Fatalf("Parse(Major(%d, %s) = %q) = %d, %v", n, cur, major, got, err)
			case len(whole) > maxWholeDigits && err == nil:
				t.Fatalf("Parse(%q, %s) = %d: more than %d digits before the point", major, cur, got, maxWholeDigits)
			}
		} else if n < 0 && n != math.MinInt64 && major != "-"+Major(-n, cur) {
			t.Fatalf("Major(%d, %s) = %q, Major(%d) = %q", n, cur, major, -n, Major(-n, cur))
		}
		if Format(n, cur) != major+" "+strings.ToUpper(cur) {
			t.Fatalf("Format(%d, %s) = %q, Major %q", n, cur, Format(n, cur), major)
		}
		v, err := Parse(text, cur)
		if err != nil {
			return
		}
		if v <= 0 {
			t.Fatalf("Parse(%q, %s) = %d, not positive", text, cur, v)
		}
		if back, err := Parse(Major(v, cur), cur); err != nil || back != v {
			t.Fatalf("Parse(%q, %s) = %d, but Major %q reads back as %d, %v", text, cur, v, Major(v, cur), back, err)
		}
	})
}

func TestAdyenDigitsAndFit(t *testing.T) {
	for cur, want := range map[string]int{"idr": 0, "CVE": 0, "CLP": 2, "isk": 2, "EUR": 2, "JPY": 0, "KWD": 3} {
		if got := AdyenDigits(cur); got != want {
			t.Errorf("AdyenDigits(%s) = %d, want %d", cur, got, want)
		}
	}
	for _, c := range []struct {
		amount   int64
		currency string
		digits   int
		want     bool
	}{
		{12345, "IDR", 0, false}, {12300, "IDR", 0, true}, {101, "idr", 0, false}, {250, "CVE", 0, false},
		{1, "IDR", 1, false}, {10, "IDR", 1, true}, {12345, "EUR", 2, true}, {5, "JPY", 2, true}, {1234, "KWD", 2, false}, {1230, "KWD", 2, true},
	} {
		if got := FitsDigits(c.amount, c.currency, c.digits); got != c.want {
			t.Errorf("FitsDigits(%d, %s, %d) = %t, want %t", c.amount, c.currency, c.digits, got, c.want)
		}
	}
}
