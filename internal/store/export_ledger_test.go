package store

// SetBookingCause replaces the key bookings are written under, for a test
// that shows what the key protects; it returns the restore.
func SetBookingCause(f func(string) string) (restore func()) {
	old := bookingCause
	bookingCause = f
	return func() { bookingCause = old }
}
