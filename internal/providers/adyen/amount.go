package adyen

import (
	"fmt"
	"strings"

	"github.com/gatehouse-pay/gatehouse/internal/money"
	"github.com/gatehouse-pay/gatehouse/internal/providers"
)

// Amount is Adyen's amount: a value in Adyen's minor unit of the currency.
type Amount struct {
	Currency string `json:"currency"`
	Value    int64  `json:"value"`
}

// digits is the number of decimals of currency at Adyen (money.AdyenDigits:
// ISO 4217's, which Gatehouse's amounts follow, but for four currencies).
func digits(currency string) int { return money.AdyenDigits(currency) }

func pow10(n int) int64 {
	p := int64(1)
	for range n {
		p *= 10
	}
	return p
}

// toAdyen turns amount (Gatehouse's minor units of currency) into Adyen's.
// An amount Adyen's unit cannot carry (IDR 12345 is 123.45 rupiah, and
// Adyen takes whole rupiah) and a currency that is not three letters are
// declines invalid_request: nothing is sent.
func toAdyen(amount int64, currency string) (Amount, error) {
	cur := strings.ToUpper(currency)
	if len(cur) != 3 {
		return Amount{}, &providers.Decline{Code: "invalid_request", Message: "A three-letter currency code is required."}
	}
	if amount <= 0 {
		return Amount{}, &providers.Decline{Code: "invalid_request", Message: "A positive amount is required."}
	}
	ours, theirs := money.Digits(cur), digits(cur)
	switch {
	case theirs > ours:
		f := pow10(theirs - ours)
		if amount > 1<<62/f {
			return Amount{}, &providers.Decline{Code: "invalid_request", Message: "The amount is too large."}
		}
		return Amount{Currency: cur, Value: amount * f}, nil
	case theirs < ours:
		f := pow10(ours - theirs)
		if amount%f != 0 {
			return Amount{}, &providers.Decline{Code: "invalid_request",
				Message: fmt.Sprintf("Adyen takes %s amounts in whole units of %d decimals; %s is not one.", cur, theirs, money.Format(amount, cur))}
		}
		return Amount{Currency: cur, Value: amount / f}, nil
	}
	return Amount{Currency: cur, Value: amount}, nil
}

// FromAdyen turns an Adyen amount (a notification's, say) into Gatehouse's
// minor units of its currency and the upper-case currency code. It fails
// for a currency that is not three letters and for a value that does not
// fit.
func FromAdyen(a Amount) (int64, string, error) {
	cur := strings.ToUpper(a.Currency)
	if len(cur) != 3 {
		return 0, "", fmt.Errorf("adyen: currency %q is not a three-letter code", a.Currency)
	}
	ours, theirs := money.Digits(cur), digits(cur)
	switch {
	case theirs > ours:
		f := pow10(theirs - ours)
		if a.Value%f != 0 {
			return 0, "", fmt.Errorf("adyen: %d is not a whole number of %s's minor unit", a.Value, cur)
		}
		return a.Value / f, cur, nil
	case theirs < ours:
		f := pow10(ours - theirs)
		if a.Value > 1<<62/f || a.Value < -(1<<62)/f {
			return 0, "", fmt.Errorf("adyen: the value %d %s is out of range", a.Value, cur)
		}
		return a.Value * f, cur, nil
	}
	return a.Value, cur, nil
}
