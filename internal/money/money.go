// Package money holds Gatehouse's rules for amounts and currencies: which
// currency codes the API accepts and how it writes them, the bounds of an
// amount, how many minor-unit digits a currency has, and the conversion
// between an amount in minor units (the API's integers) and the text a
// person reads or types in the currency's major unit ("12.50").
//
// Amounts are int64 counts of the currency's minor unit everywhere else in
// Gatehouse; this package is the only place that knows where the decimal
// point goes.
package money

import (
	"errors"
	"strconv"
	"strings"

	"golang.org/x/text/currency"
)

// Bounds of an amount the API accepts, in the currency's minor unit
// (api/openapi.yaml).
const (
	MinAmount = 1
	MaxAmount = 99_999_999
)

// ValidAmount reports whether n is within [MinAmount, MaxAmount].
func ValidAmount(n int64) bool { return n >= MinAmount && n <= MaxAmount }

// Errors of ParseCurrency.
var (
	ErrCurrencyLength  = errors.New("money: a currency code has three letters")
	ErrCurrencyUnknown = errors.New("money: not an ISO 4217 currency code")
)

// ParseCurrency normalises a currency code as the API accepts it: surrounding
// space is ignored, any case is accepted, and the answer is the upper-case
// ISO 4217 code. A code that is not three characters long is
// ErrCurrencyLength; three characters that are not an ISO 4217 code are
// ErrCurrencyUnknown (with the normalised text returned all the same, for
// the message).
func ParseCurrency(s string) (string, error) {
	up := strings.ToUpper(strings.TrimSpace(s))
	if len(up) != 3 {
		return up, ErrCurrencyLength
	}
	u, err := currency.ParseISO(up)
	if err != nil || u.String() != up {
		return up, ErrCurrencyUnknown
	}
	return up, nil
}

// minorDigits lists the currencies (ISO 4217) whose minor unit is not a
// hundredth.
var minorDigits = map[string]int{
	"BIF": 0, "CLP": 0, "DJF": 0, "GNF": 0, "ISK": 0, "JPY": 0, "KMF": 0, "KRW": 0, "PYG": 0,
	"RWF": 0, "UGX": 0, "VND": 0, "VUV": 0, "XAF": 0, "XOF": 0, "XPF": 0,
	"BHD": 3, "IQD": 3, "JOD": 3, "KWD": 3, "LYD": 3, "OMR": 3, "TND": 3,
}

// Digits is the number of minor-unit digits of currency (in any case): 0
// for zero-decimal currencies such as JPY, 3 for KWD and its like, else 2.
func Digits(currency string) int {
	if d, ok := minorDigits[strings.ToUpper(currency)]; ok {
		return d
	}
	return 2
}

// adyenDigits lists the currencies whose minor unit at Adyen is not ISO
// 4217's. Adyen's table of currency codes says its own decimals lead for
// these four: CLP and ISK have 2 at Adyen (0 in ISO 4217), CVE and IDR
// have 0 (2 in ISO 4217).
var adyenDigits = map[string]int{"CLP": 2, "ISK": 2, "CVE": 0, "IDR": 0}

// AdyenDigits is the number of decimals of currency (in any case) in
// Adyen's minor unit; for every currency but four it is Digits.
func AdyenDigits(currency string) int {
	if d, ok := adyenDigits[strings.ToUpper(currency)]; ok {
		return d
	}
	return Digits(currency)
}

// FitsDigits reports whether amount, in currency's minor units, can be
// written with digits decimals: IDR 12345 (123.45 rupiah) cannot with 0,
// IDR 12300 can. Any amount fits more decimals than the currency has.
func FitsDigits(amount int64, currency string, digits int) bool {
	for d := Digits(currency); d > digits; d-- {
		if amount%10 != 0 {
			return false
		}
		amount /= 10
	}
	return true
}

// Major renders amount (minor units) in the currency's major unit, with
// exactly the currency's digits after the point: 1250 USD is "12.50", 1500
// JPY is "1500", 1 KWD is "0.001". A negative amount starts with "-".
func Major(amount int64, currency string) string {
	d := Digits(currency)
	sign := ""
	mag := uint64(amount)
	if amount < 0 {
		sign, mag = "-", -mag
	}
	s := strconv.FormatUint(mag, 10)
	if d > 0 {
		if len(s) <= d {
			s = strings.Repeat("0", d+1-len(s)) + s
		}
		s = s[:len(s)-d] + "." + s[len(s)-d:]
	}
	return sign + s
}

// Format renders amount (minor units) as the major-unit amount and the
// upper-case code: "12.50 USD".
func Format(amount int64, currency string) string {
	return Major(amount, currency) + " " + strings.ToUpper(currency)
}

// ErrAmount is the error of Parse.
var ErrAmount = errors.New("money: not a positive amount in the currency's major unit")

// maxWholeDigits bounds the digits before the point Parse reads.
const maxWholeDigits = 15

// Parse reads a positive amount typed in currency's major unit ("12.5",
// "12.50", ".5", "12") into minor units. It accepts ASCII digits and at most
// one point only: no sign, space, grouping or exponent, no more decimals than
// the currency has, no point without decimals (except for a zero-decimal
// currency, where "12." is 12), and at most 15 digits before the point.
// Parse(Major(n, c), c) == n for every n >= 1 whose whole part fits.
func Parse(text, currency string) (int64, error) {
	d := Digits(currency)
	whole, frac, _ := strings.Cut(text, ".")
	if whole == "" && frac == "" || len(frac) > d || strings.Contains(text, ".") && frac == "" && d > 0 {
		return 0, ErrAmount
	}
	if whole == "" {
		whole = "0"
	}
	for len(frac) < d {
		frac += "0"
	}
	for _, r := range whole + frac {
		if r < '0' || r > '9' {
			return 0, ErrAmount
		}
	}
	if len(whole) > maxWholeDigits {
		return 0, ErrAmount
	}
	n, err := strconv.ParseInt(whole+frac, 10, 64)
	if err != nil || n <= 0 {
		return 0, ErrAmount
	}
	return n, nil
}
