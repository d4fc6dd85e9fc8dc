package store_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/gatehouse-pay/gatehouse/internal/charges"
	"github.com/gatehouse-pay/gatehouse/internal/events"
	"github.com/gatehouse-pay/gatehouse/internal/ids"
	"github.com/gatehouse-pay/gatehouse/internal/ledger"
	"github.com/gatehouse-pay/gatehouse/internal/outbox"
	"github.com/gatehouse-pay/gatehouse/internal/store"
	"github.com/gatehouse-pay/gatehouse/internal/testenv"
)

// BenchmarkCaptureBooking measures what the ledger adds to a capture: the
// charge's capture transition (one statement: the charge's update, its
// event, its task) without and with the booking of the capture in the same
// statement. Per charge: the CPU of the server process that runs it
// ("pg-µs/charge", read from /proc), the WAL it writes ("wal-B/charge"),
// and the wall time. The ledger's share is the difference of the two.
func BenchmarkCaptureBooking(b *testing.B) {
	for _, booked := range []bool{false, true} {
		b.Run(fmt.Sprintf("booked=%t", booked), func(b *testing.B) { benchCapture(b, booked) })
	}
}

func benchCapture(b *testing.B, booked bool) {
	db := testenv.NewDB(b)
	ctx := context.Background()
	pool := onePool(b, db.URL)
	s := store.New(pool)
	m := newMerchant(b, s, "bench@example.com")
	conn := ids.New("conn")
	at := time.Now().UTC().Truncate(time.Millisecond)
	work := make([]charges.Transition, b.N)
	for i := range work {
		c := charges.Charge{ID: ids.NewUUID(), MerchantID: m.ID, Environment: "sandbox", Amount: 2000, Currency: "USD",
			Status: charges.StatusCreated, PaymentMethod: "card", Capture: true, Provider: "sandbox", Metadata: map[string]string{},
			CreatedAt: at, UpdatedAt: at, ConnectorID: &conn}
		c.Card.Brand, c.Card.Last4 = "visa", ptr("4242")
		ev, err := events.New(ids.NewUUID(), m.ID, "sandbox", events.ChargeCreated, at, c.View(), nil)
		if err != nil {
			b.Fatal(err)
		}
		authorize := outbox.Task{Type: outbox.ChargeAuthorize, RefID: c.ID}
		if _, _, err := s.CreateCharge(ctx, charges.NewCharge{Charge: c, Sealed: []byte("sealed"), Event: ev, Task: authorize}); err != nil {
			b.Fatal(err)
		}
		after := c
		after.Status, after.AmountCaptured, after.ProviderReference, after.UpdatedAt = charges.StatusCaptured, 2000, ptr("sbx_ch_"+c.ID), at
		cev, err := events.New(ids.NewUUID(), m.ID, "sandbox", events.ChargeCaptured, at, after.View(), nil)
		if err != nil {
			b.Fatal(err)
		}
		t := charges.Transition{Before: c, After: after, Event: &cev, DoneTask: authorize.ID(), PurgeCard: true}
		if booked {
			bk := ledger.Captured(charges.AccountOf(after), c.ID, *after.ProviderReference, 2000,
				ledger.DefaultSandboxFees.For(2000), at, at.Add(48*time.Hour))
			t.Booking = &bk
		}
		work[i] = t
	}
	if _, err := db.Pool.Exec(ctx, `VACUUM ANALYZE charges, events, outbox`); err != nil {
		b.Fatal(err)
	}
	backend := backendCPU(b, pool)
	var walBefore, walAfter string
	if err := pool.QueryRow(ctx, `SELECT pg_current_wal_insert_lsn()::text`).Scan(&walBefore); err != nil {
		b.Fatal(err)
	}
	before := backend()
	b.ResetTimer()
	for i := range b.N {
		applied, _, err := s.ApplyTransition(ctx, work[i])
		if err != nil || !applied {
			b.Fatalf("capture %d: applied %v, %v", i, applied, err)
		}
	}
	b.StopTimer()
	cpu := backend() - before
	var wal float64
	if err := pool.QueryRow(ctx, `SELECT pg_current_wal_insert_lsn()::text, pg_wal_lsn_diff(pg_current_wal_insert_lsn(), $1::pg_lsn)`, walBefore).
		Scan(&walAfter, &wal); err != nil {
		b.Fatal(err)
	}
	if booked {
		var n int
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM balance_transactions WHERE merchant_id = $1`, m.ID).Scan(&n); err != nil || n != b.N {
			b.Fatalf("%d captures booked, want %d (%v)", n, b.N, err)
		}
	}
	b.ReportMetric(float64(cpu.Microseconds())/float64(b.N), "pg-µs/charge")
	b.ReportMetric(wal/float64(b.N), "wal-B/charge")
	b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N), "wall-µs/charge")
}
