package store

import (
	"time"

	"github.com/gatehouse-pay/gatehouse/internal/ids"
	"github.com/gatehouse-pay/gatehouse/internal/ledger"
)

// SetBookingCause replaces the key bookings are written under, for a test
// that shows what the key protects; it returns the restore.
func SetBookingCause(f func(string) string) (restore func()) {
	old := bookingCause
	bookingCause = f
	return func() { bookingCause = old }
}

// DailyQuery is the statement Daily runs and its arguments, to explain it.
func DailyQuery(merchantID string, since, until time.Time) (string, []any) {
	return selectDaily, []any{merchantID, ids.Floor(ledger.PrefixTransaction, since.Add(-dailySlack)),
		ids.Floor(ledger.PrefixTransaction, until.Add(dailySlack)), since, until}
}
