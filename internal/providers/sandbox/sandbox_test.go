package sandbox_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/gatehouse-pay/gatehouse/internal/apperr"
	"github.com/gatehouse-pay/gatehouse/internal/providers"
	"github.com/gatehouse-pay/gatehouse/internal/providers/sandbox"
)

// fakeLedger keeps the books in memory with the semantics the Ledger
// interface documents. It exists only to test the sandbox's decisions; the
// real ledger is internal/store's. CallFn, when set, replaces Call.
type fakeLedger struct {
	mu     sync.Mutex
	rows   map[string]*sandbox.Record
	CallFn func(context.Context, sandbox.Entry) (sandbox.Record, error)
}

func newFakeLedger() *fakeLedger { return &fakeLedger{rows: map[string]*sandbox.Record{}} }

func (l *fakeLedger) Call(ctx context.Context, e sandbox.Entry) (sandbox.Record, error) {
	if l.CallFn != nil {
		return l.CallFn(ctx, e)
	}
	if err := ctx.Err(); err != nil {
		return sandbox.Record{}, err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	r, ok := l.rows[e.IdempotencyKey]
	if !ok {
		r = &sandbox.Record{Entry: e}
		l.rows[e.IdempotencyKey] = r
	}
	r.Calls++
	return *r, nil
}

func (l *fakeLedger) CallBooked(ctx context.Context, e sandbox.Entry, reference string) (sandbox.Record, error) {
	r, err := l.Call(ctx, e)
	if err != nil || r.Reference != "" || r.Operation != e.Operation || r.Parent != e.Parent || r.Amount != e.Amount ||
		!strings.EqualFold(r.Currency, e.Currency) {
		return r, err
	}
	if r.Reference, err = l.Book(ctx, e.IdempotencyKey, reference); err != nil {
		return sandbox.Record{}, err
	}
	return r, nil
}

func (l *fakeLedger) Book(ctx context.Context, key, reference string) (string, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	r, ok := l.rows[key]
	if !ok {
		return "", apperr.New(apperr.KindNotFound, apperr.CodeNotFound, "no ledger row")
	}
	if r.Reference == "" {
		r.Reference = reference
	}
	return r.Reference, nil
}

func (l *fakeLedger) Authorization(ctx context.Context, reference string) (sandbox.Record, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, r := range l.rows {
		if r.Reference == reference && r.Operation == sandbox.OpAuthorize {
			return *r, nil
		}
	}
	return sandbox.Record{}, apperr.New(apperr.KindNotFound, apperr.CodeNotFound, "no such reference")
}

func (l *fakeLedger) Lookup(ctx context.Context, key string) (sandbox.Record, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	r, ok := l.rows[key]
	if !ok {
		return sandbox.Record{}, apperr.New(apperr.KindNotFound, apperr.CodeNotFound, "no ledger row")
	}
	return *r, nil
}

func (l *fakeLedger) Booked(ctx context.Context, reference string) ([]sandbox.Record, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []sandbox.Record
	for _, r := range l.rows {
		if r.Parent == reference && (r.Operation == sandbox.OpCapture || r.Operation == sandbox.OpVoid) && r.Reference != "" {
			out = append(out, *r)
		}
	}
	return out, nil
}

// Bookings and Payouts: the fake keeps no times; the settlement report is
// tested on the store's books (settlement_test.go).
func (l *fakeLedger) Bookings(context.Context, string, time.Time, time.Time) ([]sandbox.Booking, error) {
	return nil, errors.New("fakeLedger keeps no booking times")
}

func (l *fakeLedger) Payouts(context.Context, string, time.Time, time.Time) ([]sandbox.Payout, error) {
	return nil, errors.New("fakeLedger keeps no payouts")
}

func (l *fakeLedger) row(t *testing.T, key string) sandbox.Record {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	r, ok := l.rows[key]
	if !ok {
		t.Fatalf("ledger has no row for %q", key)
	}
	return *r
}

// charges counts provider-side charges: authorizations that booked a reference.
func (l *fakeLedger) charges() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, r := range l.rows {
		if r.Operation == sandbox.OpAuthorize && r.Reference != "" {
			n++
		}
	}
	return n
}

var now = time.Date(2026, time.November, 22, 12, 0, 0, 0, time.UTC)

func newSandbox(l sandbox.Ledger, opts sandbox.Options) *sandbox.Provider {
	if opts.Now == nil {
		opts.Now = func() time.Time { return now }
	}
	return sandbox.New(l, opts)
}

func card(number string) providers.Card {
	return providers.Card{Number: number, ExpMonth: 12, ExpYear: 2030, CVC: "123"}
}

func authorize(c providers.Card, key string) providers.AuthorizeRequest {
	return providers.AuthorizeRequest{IdempotencyKey: key, Amount: 2000, Currency: "USD", Capture: true, Card: c,
		Description: "Order 1042", Metadata: map[string]string{"order_id": "1042"}}
}

// classify turns a provider answer into "ok", "unavailable" or "decline:<code>".
func classify(t *testing.T, res providers.Result, err error) string {
	t.Helper()
	if err == nil {
		if !strings.HasPrefix(res.Reference, sandbox.ChargePrefix) && !strings.HasPrefix(res.Reference, sandbox.RefundPrefix) {
			t.Errorf("reference %q has no sandbox prefix", res.Reference)
		}
		return "ok"
	}
	if d, ok := providers.AsDecline(err); ok {
		if errors.Is(err, providers.ErrUnavailable) {
			t.Errorf("%v is both a decline and unavailable", err)
		}
		return "decline:" + d.Code
	}
	if errors.Is(err, providers.ErrUnavailable) {
		return "unavailable"
	}
	t.Errorf("error %v is neither a decline nor ErrUnavailable", err)
	return "other"
}

func TestAuthorizeOutcomes(t *testing.T) {
	tests := []struct {
		name string
		card providers.Card
		want string
	}{
		{"visa", card("4242424242424242"), "ok"},
		{"mastercard", card("5555555555554444"), "ok"},
		{"amex", card("378282246310005"), "ok"},
		{"any other Luhn-valid number", card("4111111111111111"), "ok"},
		{"declined", card("4000000000000002"), "decline:card_declined"},
		{"insufficient funds", card("4000000000009995"), "decline:insufficient_funds"},
		{"expired card (test card)", card("4000000000000069"), "decline:expired_card"},
		{"processing error", card("4000000000000119"), "decline:processing_error"},
		{"flaky card, first attempt", card("4000000000000507"), "unavailable"},
		{"not Luhn-valid", card("4242424242424241"), "decline:incorrect_number"},
		{"not digits", card("4242-4242-4242-4242"), "decline:incorrect_number"},
		{"too short", card("4242"), "decline:incorrect_number"},
		{"no card at all", providers.Card{}, "decline:incorrect_number"},
		{"expired last month", providers.Card{Number: "4242424242424242", ExpMonth: 10, ExpYear: 2026}, "decline:expired_card"},
		{"good through this month", providers.Card{Number: "4242424242424242", ExpMonth: 11, ExpYear: 2026}, "ok"},
		{"bad month", providers.Card{Number: "4242424242424242", ExpMonth: 13, ExpYear: 2030}, "decline:invalid_expiry_month"},
		{"tok_visa", providers.Card{Token: "tok_visa"}, "ok"},
		{"pm_card_visa", providers.Card{Token: "pm_card_visa"}, "ok"},
		{"pm_card_mastercard", providers.Card{Token: "pm_card_mastercard"}, "ok"},
		{"tok_chargeDeclined", providers.Card{Token: "tok_chargeDeclined"}, "decline:card_declined"},
		{"pm_card_chargeDeclined", providers.Card{Token: "pm_card_chargeDeclined"}, "decline:card_declined"},
		{"pm_card_chargeDeclinedInsufficientFunds", providers.Card{Token: "pm_card_chargeDeclinedInsufficientFunds"}, "decline:insufficient_funds"},
		{"unknown token", providers.Card{Token: "tok_nope"}, "decline:invalid_request"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := newFakeLedger()
			p := newSandbox(l, sandbox.Options{})
			res, err := p.Authorize(context.Background(), authorize(tt.card, "k1"))
			if got := classify(t, res, err); got != tt.want {
				t.Errorf("Authorize = %q (%v), want %q", got, err, tt.want)
			}
			row := l.row(t, "k1")
			wantRow := sandbox.Record{
				Entry: sandbox.Entry{IdempotencyKey: "k1", Operation: sandbox.OpAuthorize, Amount: 2000, Currency: "USD", Capture: true},
				Calls: 1, Reference: res.Reference,
			}
			if diff := cmp.Diff(wantRow, row); diff != "" {
				t.Errorf("ledger row (-want +got):\n%s", diff)
			}
			wantCharges := 0
			if tt.want == "ok" {
				wantCharges = 1
			}
			if got := l.charges(); got != wantCharges {
				t.Errorf("provider-side charges = %d, want %d (a decline books nothing)", got, wantCharges)
			}
			if err != nil && tt.card.Number != "" && strings.Contains(err.Error(), tt.card.Number) {
				t.Errorf("error %q quotes the card number", err)
			}
		})
	}
}

func TestAuthorizeRejectsBadRequests(t *testing.T) {
	tests := []struct {
		name string
		edit func(*providers.AuthorizeRequest)
	}{
		{"no idempotency key", func(r *providers.AuthorizeRequest) { r.IdempotencyKey = "" }},
		{"zero amount", func(r *providers.AuthorizeRequest) { r.Amount = 0 }},
		{"negative amount", func(r *providers.AuthorizeRequest) { r.Amount = -5 }},
		{"no currency", func(r *providers.AuthorizeRequest) { r.Currency = "" }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := newFakeLedger()
			p := newSandbox(l, sandbox.Options{})
			r := authorize(card("4242424242424242"), "k1")
			tt.edit(&r)
			res, err := p.Authorize(context.Background(), r)
			if got := classify(t, res, err); got != "decline:invalid_request" {
				t.Errorf("Authorize = %q (%v), want decline:invalid_request", got, err)
			}
			if l.charges() != 0 {
				t.Errorf("a refused request booked a charge")
			}
		})
	}
}

func TestFlakyCardFailsTwiceThenSucceedsOnce(t *testing.T) {
	l := newFakeLedger()
	p := newSandbox(l, sandbox.Options{})
	ctx := context.Background()
	r := authorize(card("4000000000000507"), "charge-1")
	var got []string
	var refs []string
	for range 5 {
		res, err := p.Authorize(ctx, r)
		got = append(got, classify(t, res, err))
		if err == nil {
			refs = append(refs, res.Reference)
		}
	}
	want := []string{"unavailable", "unavailable", "ok", "ok", "ok"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("attempts (-want +got):\n%s", diff)
	}
	if refs[0] != refs[1] || refs[1] != refs[2] {
		t.Errorf("references after success differ: %v", refs)
	}
	if row := l.row(t, "charge-1"); row.Calls != 5 || row.Reference != refs[0] {
		t.Errorf("ledger row = %+v, want 5 calls and reference %s", row, refs[0])
	}
	if n := l.charges(); n != 1 {
		t.Errorf("provider-side charges = %d, want 1", n)
	}
	// The count is per idempotency key: another key starts over.
	r.IdempotencyKey = "charge-2"
	if res, err := p.Authorize(ctx, r); classify(t, res, err) != "unavailable" {
		t.Errorf("first attempt with a new key: err = %v, want unavailable", err)
	}
}

func TestSilentCardBlocksUntilTheContextEnds(t *testing.T) {
	l := newFakeLedger()
	p := newSandbox(l, sandbox.Options{})
	const timeout = 50 * time.Millisecond
	start := time.Now() // before the deadline is set, so that elapsed covers it
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	_, err := p.Authorize(ctx, authorize(card("4000000000000606"), "k1"))
	if elapsed := time.Since(start); elapsed < timeout {
		t.Errorf("answered after %v, want no answer before the %v deadline", elapsed, timeout)
	}
	if !errors.Is(err, providers.ErrUnavailable) || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("err = %v, want ErrUnavailable and context.DeadlineExceeded", err)
	}
	if _, ok := providers.AsDecline(err); ok {
		t.Errorf("err = %v, want a retryable error, not a decline", err)
	}
	if row := l.row(t, "k1"); row.Calls != 1 || row.Reference != "" {
		t.Errorf("ledger row = %+v, want one call and nothing booked", row)
	}

	// A cancelled caller gets its cause too.
	ctx, cancel = context.WithCancel(context.Background())
	go func() { time.Sleep(10 * time.Millisecond); cancel() }()
	if _, err := p.Authorize(ctx, authorize(card("4000000000000606"), "k2")); !errors.Is(err, context.Canceled) || !errors.Is(err, providers.ErrUnavailable) {
		t.Errorf("cancelled: err = %v, want ErrUnavailable and context.Canceled", err)
	}
}

func TestAuthorizeIsIdempotentPerKey(t *testing.T) {
	l := newFakeLedger()
	p := newSandbox(l, sandbox.Options{})
	r := authorize(card("4242424242424242"), "charge-1")
	const n = 20
	refs := make([]string, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			res, err := p.Authorize(context.Background(), r)
			refs[i], errs[i] = res.Reference, err
		})
	}
	wg.Wait()
	for i := range n {
		if errs[i] != nil {
			t.Fatalf("call %d: %v", i, errs[i])
		}
		if refs[i] != refs[0] {
			t.Errorf("call %d got reference %s, call 0 got %s", i, refs[i], refs[0])
		}
	}
	if row := l.row(t, "charge-1"); row.Calls != n {
		t.Errorf("calls = %d, want %d", row.Calls, n)
	}
	if got := l.charges(); got != 1 {
		t.Errorf("provider-side charges = %d, want 1", got)
	}

	// A second key is a second charge.
	res, err := p.Authorize(context.Background(), authorize(card("4242424242424242"), "charge-2"))
	if err != nil || res.Reference == refs[0] {
		t.Errorf("second key: %v %v, want a new reference", res, err)
	}
}

func TestKeyReusedForAnotherRequestIsRefused(t *testing.T) {
	tests := []struct {
		name  string
		first func(*sandbox.Provider) error
		again func(*sandbox.Provider) error
	}{
		{"another amount",
			func(p *sandbox.Provider) error {
				_, err := p.Authorize(context.Background(), authorize(card("4242424242424242"), "k"))
				return err
			},
			func(p *sandbox.Provider) error {
				r := authorize(card("4242424242424242"), "k")
				r.Amount++
				_, err := p.Authorize(context.Background(), r)
				return err
			}},
		{"another currency",
			func(p *sandbox.Provider) error {
				_, err := p.Authorize(context.Background(), authorize(card("4242424242424242"), "k"))
				return err
			},
			func(p *sandbox.Provider) error {
				r := authorize(card("4242424242424242"), "k")
				r.Currency = "EUR"
				_, err := p.Authorize(context.Background(), r)
				return err
			}},
		{"another operation",
			func(p *sandbox.Provider) error {
				_, err := p.Authorize(context.Background(), authorize(card("4242424242424242"), "k"))
				return err
			},
			func(p *sandbox.Provider) error {
				_, err := p.Void(context.Background(), providers.VoidRequest{IdempotencyKey: "k", Reference: "sbx_ch_x"})
				return err
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := newSandbox(newFakeLedger(), sandbox.Options{})
			if err := tt.first(p); err != nil {
				t.Fatal(err)
			}
			err := tt.again(p)
			if d, ok := providers.AsDecline(err); !ok || d.Code != "invalid_request" {
				t.Errorf("err = %v, want decline invalid_request", err)
			}
		})
	}
}

// authorized returns a sandbox holding one authorization of 2000 USD.
func authorized(t *testing.T) (*sandbox.Provider, *fakeLedger, string) {
	t.Helper()
	l := newFakeLedger()
	p := newSandbox(l, sandbox.Options{})
	r := authorize(card("4242424242424242"), "auth")
	r.Capture = false
	res, err := p.Authorize(context.Background(), r)
	if err != nil {
		t.Fatal(err)
	}
	return p, l, res.Reference
}

func TestCaptureVoidRefund(t *testing.T) {
	type call func(p *sandbox.Provider, ref string) (providers.Result, error)
	capture := func(amount int64, key string) call {
		return func(p *sandbox.Provider, ref string) (providers.Result, error) {
			return p.Capture(context.Background(), providers.CaptureRequest{IdempotencyKey: key, Reference: ref, Amount: amount})
		}
	}
	void := func(key string) call {
		return func(p *sandbox.Provider, ref string) (providers.Result, error) {
			return p.Void(context.Background(), providers.VoidRequest{IdempotencyKey: key, Reference: ref})
		}
	}
	refund := func(amount int64, currency, key string) call {
		return func(p *sandbox.Provider, ref string) (providers.Result, error) {
			return p.Refund(context.Background(), providers.RefundRequest{IdempotencyKey: key, Reference: ref, Amount: amount,
				Currency: currency, Reason: "requested_by_customer"})
		}
	}
	const sameAsCharge, newRefund = "charge", "refund"
	tests := []struct {
		name    string
		ref     string // "" means the authorization's reference
		do      call
		want    string
		wantRef string // sameAsCharge or newRefund, for "ok"
	}{
		{"capture all", "", capture(0, "c1"), "ok", sameAsCharge},
		{"capture part", "", capture(1500, "c1"), "ok", sameAsCharge},
		{"capture exactly the amount", "", capture(2000, "c1"), "ok", sameAsCharge},
		{"capture more than authorized", "", capture(2001, "c1"), "decline:invalid_request", ""},
		{"capture a negative amount", "", capture(-1, "c1"), "decline:invalid_request", ""},
		{"capture an unknown reference", "sbx_ch_unknown", capture(0, "c1"), "decline:invalid_request", ""},
		{"capture someone else's reference", "pi_123", capture(0, "c1"), "decline:invalid_request", ""},
		{"capture without a key", "", capture(0, ""), "decline:invalid_request", ""},
		{"void", "", void("v1"), "ok", sameAsCharge},
		{"void an unknown reference", "sbx_ch_unknown", void("v1"), "decline:invalid_request", ""},
		{"refund part", "", refund(500, "USD", "r1"), "ok", newRefund},
		{"refund all, lower-case currency", "", refund(2000, "usd", "r1"), "ok", newRefund},
		{"refund without a currency", "", refund(500, "", "r1"), "ok", newRefund},
		{"refund zero", "", refund(0, "USD", "r1"), "decline:invalid_request", ""},
		{"refund a negative amount", "", refund(-100, "USD", "r1"), "decline:invalid_request", ""},
		{"refund more than the charge", "", refund(2001, "USD", "r1"), "decline:invalid_request", ""},
		{"refund in another currency", "", refund(500, "EUR", "r1"), "decline:invalid_request", ""},
		{"refund an unknown reference", "sbx_ch_unknown", refund(500, "USD", "r1"), "decline:invalid_request", ""},
		{"refund a refund", "sbx_re_x", refund(500, "USD", "r1"), "decline:invalid_request", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, l, auth := authorized(t)
			ref := tt.ref
			if ref == "" {
				ref = auth
			}
			res, err := tt.do(p, ref)
			got := classify(t, res, err)
			if got != tt.want {
				t.Fatalf("got %q (%v), want %q", got, err, tt.want)
			}
			if got != "ok" {
				return
			}
			switch tt.wantRef {
			case sameAsCharge:
				if res.Reference != auth {
					t.Errorf("reference = %s, want the authorization's %s", res.Reference, auth)
				}
			case newRefund:
				if !strings.HasPrefix(res.Reference, sandbox.RefundPrefix) {
					t.Errorf("reference = %s, want a %s reference", res.Reference, sandbox.RefundPrefix)
				}
			}
			// Idempotent per key: the same call answers the same reference.
			again, err := tt.do(p, ref)
			if err != nil || again.Reference != res.Reference {
				t.Errorf("repeat: %v %v, want %s", again, err, res.Reference)
			}
			if got := l.charges(); got != 1 {
				t.Errorf("provider-side charges = %d, want 1", got)
			}
		})
	}
}

func TestLedgerFailureIsUnavailable(t *testing.T) {
	l := newFakeLedger()
	l.CallFn = func(context.Context, sandbox.Entry) (sandbox.Record, error) {
		return sandbox.Record{}, errors.New("connection refused")
	}
	p := newSandbox(l, sandbox.Options{})
	_, err := p.Authorize(context.Background(), authorize(card("4242424242424242"), "k"))
	if !errors.Is(err, providers.ErrUnavailable) {
		t.Errorf("err = %v, want ErrUnavailable", err)
	}
}

func TestLatency(t *testing.T) {
	const latency = 40 * time.Millisecond
	l := newFakeLedger()
	p := newSandbox(l, sandbox.Options{Latency: latency})
	start := time.Now()
	if _, err := p.Authorize(context.Background(), authorize(card("4242424242424242"), "k1")); err != nil {
		t.Fatal(err)
	}
	if elapsed := time.Since(start); elapsed < latency {
		t.Errorf("call took %v, want at least %v", elapsed, latency)
	}

	// A caller that gives up during the wait reaches nothing.
	ctx, cancel := context.WithTimeout(context.Background(), latency/4)
	defer cancel()
	_, err := p.Authorize(ctx, authorize(card("4242424242424242"), "k2"))
	if !errors.Is(err, providers.ErrUnavailable) || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("err = %v, want ErrUnavailable and DeadlineExceeded", err)
	}
	l.mu.Lock()
	_, recorded := l.rows["k2"]
	l.mu.Unlock()
	if recorded {
		t.Errorf("a call abandoned during the latency reached the ledger")
	}
}

// No answer of the sandbox carries card data (docs/reliability.md I6).
func TestAnswersNeverCarryCardData(t *testing.T) {
	numbers := []string{"4242424242424242", "4000000000000002", "4000000000009995", "4000000000000069",
		"4000000000000119", "4000000000000507", "4242424242424241"}
	for _, n := range numbers {
		p := newSandbox(newFakeLedger(), sandbox.Options{})
		c := providers.Card{Number: n, ExpMonth: 12, ExpYear: 2030, CVC: "987"}
		res, err := p.Authorize(context.Background(), authorize(c, "k"))
		if text := fmt.Sprintf("%v %+v %#v", res, res, err); strings.Contains(text, n) {
			t.Errorf("card %s...: answer %q carries the card number", n[:4], text)
		}
		if err != nil {
			if text := err.Error(); strings.Contains(text, n[len(n)-4:]) || strings.Contains(text, "987") {
				t.Errorf("card %s...: error %q carries card data", n[:4], text)
			}
		}
	}
	if got := fmt.Sprintf("%v %+v %#v", card("4242424242424242"), card("4242424242424242"), card("4242424242424242")); strings.Contains(got, "4242") {
		t.Errorf("Card formats as %q", got)
	}
}

func TestName(t *testing.T) {
	if got := newSandbox(newFakeLedger(), sandbox.Options{}).Name(); got != "sandbox" {
		t.Errorf("Name() = %q", got)
	}
}
