package sandbox_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/gatehouse-pay/gatehouse/internal/providers"
	"github.com/gatehouse-pay/gatehouse/internal/providers/sandbox"
)

// The sandbox vouches that it booked nothing under a key only when it read
// its books: for the flaky and the silent cards. A ledger failure or a caller
// that gave up before the ledger leaves the outcome unknown.
func TestNothingBookedOnlyWhenTheBooksSaySo(t *testing.T) {
	short := func() (context.Context, context.CancelFunc) {
		return context.WithTimeout(context.Background(), 20*time.Millisecond)
	}
	cases := []struct {
		name string
		call func() error
		want bool
	}{
		{"flaky card", func() error {
			_, err := newSandbox(newFakeLedger(), sandbox.Options{}).Authorize(context.Background(), authorize(card("4000000000000507"), "k"))
			return err
		}, true},
		{"silent card", func() error {
			ctx, cancel := short()
			defer cancel()
			_, err := newSandbox(newFakeLedger(), sandbox.Options{}).Authorize(ctx, authorize(card("4000000000000606"), "k"))
			return err
		}, true},
		{"ledger failure", func() error {
			l := newFakeLedger()
			l.CallFn = func(context.Context, sandbox.Entry) (sandbox.Record, error) {
				return sandbox.Record{}, errors.New("connection reset")
			}
			_, err := newSandbox(l, sandbox.Options{}).Authorize(context.Background(), authorize(card("4242424242424242"), "k"))
			return err
		}, false},
		{"gave up during the latency", func() error {
			ctx, cancel := short()
			defer cancel()
			_, err := newSandbox(newFakeLedger(), sandbox.Options{Latency: time.Second}).Authorize(ctx, authorize(card("4242424242424242"), "k"))
			return err
		}, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := c.call()
			if !errors.Is(err, providers.ErrUnavailable) {
				t.Fatalf("err = %v, want ErrUnavailable", err)
			}
			if got := providers.NothingBooked(err); got != c.want {
				t.Errorf("NothingBooked(%v) = %v, want %v", err, got, c.want)
			}
		})
	}
}
