package sandbox_test

import (
	"context"
	"errors"
	"testing"

	"github.com/gatehouse-pay/gatehouse/internal/providers"
	"github.com/gatehouse-pay/gatehouse/internal/providers/sandbox"
)

// On its Postgres books: captures and refunds of LostAnswerAmount are booked
// and then lose their answer for LostAnswerFailures calls with the key; the
// next call answers with the one booking. Lookups read the books and send
// nothing.
func TestLostAnswersAndLookupsOnPostgres(t *testing.T) {
	p, count := onPostgres(t)
	ctx := context.Background()
	auth := authorize(card("4242424242424242"), "lost-auth")
	auth.Capture, auth.Amount = false, sandbox.LostAnswerAmount
	res, err := p.Authorize(ctx, auth)
	if err != nil {
		t.Fatal(err)
	}
	ref := res.Reference

	pay, err := p.LookupPayment(ctx, ref)
	if err != nil || pay.Status != providers.PaymentAuthorized {
		t.Fatalf("before the capture: %+v %v, want authorized", pay, err)
	}
	capture := providers.CaptureRequest{IdempotencyKey: "lost-capture", Reference: ref, Amount: sandbox.LostAnswerAmount}
	for i := range sandbox.LostAnswerFailures {
		_, err := p.Capture(ctx, capture)
		if !errors.Is(err, providers.ErrUnavailable) || !errors.Is(err, context.DeadlineExceeded) || providers.NothingBooked(err) {
			t.Fatalf("capture call %d: %v, want a lost answer (unavailable, deadline, not nothing-booked)", i+1, err)
		}
		pay, err := p.LookupPayment(ctx, ref)
		if err != nil || pay.Status != providers.PaymentCaptured || pay.Captured != sandbox.LostAnswerAmount {
			t.Fatalf("after lost capture %d: %+v %v, want captured %d", i+1, pay, err, sandbox.LostAnswerAmount)
		}
	}
	if res, err := p.Capture(ctx, capture); err != nil || res.Reference != ref {
		t.Fatalf("capture call %d: %+v %v, want the booking", sandbox.LostAnswerFailures+1, res, err)
	}

	key := "lost-refund"
	refund := providers.RefundRequest{IdempotencyKey: key, Reference: ref, Amount: sandbox.LostAnswerAmount, Currency: "USD", RefundID: "r-1"}
	look := providers.RefundLookup{Reference: ref, RefundID: "r-1", IdempotencyKey: key}
	if _, err := p.LookupRefund(ctx, look); !providers.NothingBooked(err) || errors.Is(err, providers.ErrUnavailable) {
		t.Fatalf("lookup before any call: %v, want nothing booked", err)
	}
	if _, err := p.Refund(ctx, refund); !errors.Is(err, providers.ErrUnavailable) {
		t.Fatalf("refund call 1: %v, want a lost answer", err)
	}
	found, err := p.LookupRefund(ctx, look)
	if err != nil || found.Reference == "" || found.Pending {
		t.Fatalf("lookup after a lost answer: %+v %v, want the booked refund", found, err)
	}
	if n := count(t, `SELECT calls FROM sandbox_ledger WHERE idempotency_key = $1`, key); n != 1 {
		t.Errorf("calls after the lookup: %d, want 1 (a lookup is no call)", n)
	}
	if _, err := p.Refund(ctx, refund); !errors.Is(err, providers.ErrUnavailable) {
		t.Fatalf("refund call 2: %v, want a lost answer", err)
	}
	again, err := p.Refund(ctx, refund)
	if err != nil || again.Reference != found.Reference {
		t.Fatalf("refund call 3: %+v %v, want the booking %s", again, err, found.Reference)
	}
	if n := count(t, `SELECT count(*) FROM sandbox_ledger WHERE operation = 'refund' AND reference IS NOT NULL`); n != 1 {
		t.Errorf("refunds booked: %d, want 1", n)
	}
	if _, err := p.LookupRefund(ctx, providers.RefundLookup{Reference: ref, IdempotencyKey: "lost-capture"}); err == nil {
		t.Error("a capture's key looked up as a refund answers a refund")
	}

	// A void: the payment reads canceled.
	auth2, err := p.Authorize(ctx, providers.AuthorizeRequest{IdempotencyKey: "void-auth", Amount: 2000, Currency: "USD", Card: card("4242424242424242")})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Void(ctx, providers.VoidRequest{IdempotencyKey: "void", Reference: auth2.Reference}); err != nil {
		t.Fatal(err)
	}
	if pay, err := p.LookupPayment(ctx, auth2.Reference); err != nil || pay.Status != providers.PaymentCanceled {
		t.Errorf("after a void: %+v %v, want canceled", pay, err)
	}
	if _, err := p.LookupPayment(ctx, "sbx_ch_unknown"); err == nil {
		t.Error("an unknown payment was found")
	}
}

// Options.LoseAnswer loses the answers it chooses, after the booking.
func TestLoseAnswerHook(t *testing.T) {
	l := newFakeLedger()
	p := newSandbox(l, sandbox.Options{LoseAnswer: func(op sandbox.Operation, calls int64) bool { return op == sandbox.OpRefund && calls == 1 }})
	ctx := context.Background()
	res, err := p.Authorize(ctx, authorize(card("4242424242424242"), "hook-auth"))
	if err != nil {
		t.Fatal(err)
	}
	r := providers.RefundRequest{IdempotencyKey: "hook-refund", Reference: res.Reference, Amount: 500, Currency: "USD"}
	if _, err := p.Refund(ctx, r); !errors.Is(err, providers.ErrUnavailable) {
		t.Fatalf("call 1: %v, want a lost answer", err)
	}
	if row := l.row(t, "hook-refund"); row.Reference == "" {
		t.Fatal("the lost call booked nothing")
	}
	if got, err := p.Refund(ctx, r); err != nil || got.Reference != l.row(t, "hook-refund").Reference {
		t.Fatalf("call 2: %+v %v, want the booking", got, err)
	}
}
