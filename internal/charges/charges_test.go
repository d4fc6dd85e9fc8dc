package charges_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/gatehouse-pay/gatehouse/internal/apperr"
	"github.com/gatehouse-pay/gatehouse/internal/charges"
	"github.com/gatehouse-pay/gatehouse/internal/events"
	"github.com/gatehouse-pay/gatehouse/internal/idempotency"
	"github.com/gatehouse-pay/gatehouse/internal/keyring"
	"github.com/gatehouse-pay/gatehouse/internal/listing"
	"github.com/gatehouse-pay/gatehouse/internal/outbox"
	"github.com/gatehouse-pay/gatehouse/internal/providers"
	"github.com/gatehouse-pay/gatehouse/internal/providers/providertest"
)

func TestLuhn(t *testing.T) {
	cases := []struct {
		number string
		want   bool
	}{
		{"4242424242424242", true},
		{"4242424242424241", false},
		{"5555555555554444", true},
		{"378282246310005", true},
		{"6011111111111117", true},
		{"4000000000000002", true},
		{"79927398713", true},
		{"79927398710", false},
		{"0000000000000000", true},
		{"1234567812345678", false},
		{"1234567812345670", true},
		{"4242424242424224", false}, // two digits swapped
	}
	for _, c := range cases {
		if got := charges.Luhn(c.number); got != c.want {
			t.Errorf("Luhn(%s) = %v, want %v", c.number, got, c.want)
		}
	}
}

func TestBrand(t *testing.T) {
	cases := []struct{ number, want string }{
		{"4242424242424242", "visa"},
		{"4000056655665556", "visa"},
		{"4111111111111", "visa"},
		{"5555555555554444", "mastercard"},
		{"5105105105105100", "mastercard"},
		{"5200828282828210", "mastercard"},
		{"2223003122003222", "mastercard"},
		{"2720999999999996", "mastercard"},
		{"2221000000000009", "mastercard"},
		{"2220990000000000", "unknown"},
		{"2721000000000000", "unknown"},
		{"5600000000000000", "unknown"},
		{"378282246310005", "amex"},
		{"371449635398431", "amex"},
		{"6011111111111117", "discover"},
		{"6500000000000002", "discover"},
		{"3056930009020004", "unknown"}, // Diners
		{"3566002020360505", "unknown"}, // JCB
		{"6200000000000005", "unknown"}, // UnionPay
	}
	for _, c := range cases {
		if got := charges.Brand(c.number); got != c.want {
			t.Errorf("Brand(%s) = %q, want %q", c.number, got, c.want)
		}
	}
}

// fakeStore is a charges.Store whose answers the test chooses.
type fakeStore struct {
	CreateChargeFn    func(context.Context, charges.NewCharge) (*idempotency.Response, error)
	ChargeByIDFn      func(ctx context.Context, merchantID, id string) (charges.Charge, error)
	ListChargesFn     func(ctx context.Context, merchantID string, f charges.Filter, p listing.Params) (listing.Page[charges.Charge], error)
	RequestActionFn   func(context.Context, charges.ActionRequest) (*idempotency.Response, error)
	ChargeForWorkFn   func(ctx context.Context, id string) (charges.Charge, []byte, error)
	ApplyTransitionFn func(context.Context, charges.Transition) (bool, error)
	DeleteTaskFn      func(ctx context.Context, taskID string) error

	mu          sync.Mutex
	created     []charges.NewCharge
	transitions []charges.Transition
	deleted     []string
	begun       []charges.Attempt
}

func (s *fakeStore) CreateCharge(ctx context.Context, n charges.NewCharge) (*idempotency.Response, []outbox.Task, error) {
	s.mu.Lock()
	s.created = append(s.created, n)
	s.mu.Unlock()
	if s.CreateChargeFn != nil {
		r, err := s.CreateChargeFn(ctx, n)
		return r, nil, err
	}
	return nil, nil, nil
}

func (s *fakeStore) ChargeByID(ctx context.Context, merchantID, id string) (charges.Charge, error) {
	if s.ChargeByIDFn != nil {
		return s.ChargeByIDFn(ctx, merchantID, id)
	}
	return charges.Charge{}, apperr.NotFound("charge")
}

func (s *fakeStore) ListCharges(ctx context.Context, merchantID string, f charges.Filter, p listing.Params) (listing.Page[charges.Charge], error) {
	if s.ListChargesFn != nil {
		return s.ListChargesFn(ctx, merchantID, f, p)
	}
	return listing.Page[charges.Charge]{Items: []charges.Charge{}}, nil
}

func (s *fakeStore) RequestAction(ctx context.Context, r charges.ActionRequest) (*idempotency.Response, error) {
	if s.RequestActionFn != nil {
		return s.RequestActionFn(ctx, r)
	}
	return nil, errors.New("fakeStore: RequestAction not expected")
}

func (s *fakeStore) ChargeForWork(ctx context.Context, id string) (charges.Charge, []byte, error) {
	if s.ChargeForWorkFn != nil {
		return s.ChargeForWorkFn(ctx, id)
	}
	return charges.Charge{}, nil, apperr.NotFound("charge")
}

func (s *fakeStore) ActionDetails(context.Context, string) (map[string]string, error) {
	return nil, nil
}

func (s *fakeStore) ApplyTransition(ctx context.Context, tr charges.Transition) (bool, []outbox.Task, error) {
	s.mu.Lock()
	s.transitions = append(s.transitions, tr)
	s.mu.Unlock()
	if s.ApplyTransitionFn != nil {
		ok, err := s.ApplyTransitionFn(ctx, tr)
		return ok, nil, err
	}
	return true, nil, nil
}

func (s *fakeStore) BeginAttempt(ctx context.Context, chargeID string, before int, a charges.Attempt) (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.begun = append(s.begun, a)
	return true, nil
}

func (s *fakeStore) DeleteTask(ctx context.Context, taskID string) error {
	s.mu.Lock()
	s.deleted = append(s.deleted, taskID)
	s.mu.Unlock()
	if s.DeleteTaskFn != nil {
		return s.DeleteTaskFn(ctx, taskID)
	}
	return nil
}

// fakeQueue records enqueued tasks.
type fakeQueue struct {
	EnqueueFn func(context.Context, outbox.Task) error
	mu        sync.Mutex
	tasks     []outbox.Task
}

func (q *fakeQueue) Enqueue(ctx context.Context, t outbox.Task) error {
	q.mu.Lock()
	q.tasks = append(q.tasks, t)
	q.mu.Unlock()
	if q.EnqueueFn != nil {
		return q.EnqueueFn(ctx, t)
	}
	return nil
}

var testNow = time.Date(2026, 6, 15, 10, 30, 0, 123456789, time.UTC)

func testKeyring(t *testing.T) *keyring.Keyring {
	t.Helper()
	k, err := keyring.New(bytes.Repeat([]byte{7}, 32))
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func newService(t *testing.T, st *fakeStore, q *fakeQueue) *charges.Service {
	t.Helper()
	return charges.NewService(st, q, testKeyring(t), []string{"sandbox", "stripe"}, "sandbox", func() time.Time { return testNow }, nil)
}

func render(v any) (idempotency.Response, error) {
	b, err := json.Marshal(v)
	return idempotency.Response{Status: 201, Body: b}, err
}

func ptr[T any](v T) *T { return &v }

func deref(s *string) string {
	if s == nil {
		return "<nil>"
	}
	return *s
}

// params is a good create request, June 2026 being "now".
func params() charges.CreateParams {
	return charges.CreateParams{
		Amount: ptr(int64(2000)), Currency: ptr("usd"), PaymentMethod: ptr("card"),
		Card: &charges.CardInput{Number: ptr("4242424242424242"), ExpMonth: ptr(12), ExpYear: ptr(2030), CVC: ptr("123")},
	}
}

func TestCreateValidation(t *testing.T) {
	long := func(n int, s string) *string { return ptr(strings.Repeat(s, n)) }
	meta := func(n int) map[string]string {
		m := map[string]string{}
		for i := 0; i < n; i++ {
			m["key"+strconv.Itoa(i)] = "v"
		}
		return m
	}
	cases := []struct {
		name        string
		mod         func(p *charges.CreateParams)
		code, param string // "" code: accepted
		kind        apperr.Kind
	}{
		{"good", func(p *charges.CreateParams) {}, "", "", 0},
		{"amount 1", func(p *charges.CreateParams) { p.Amount = ptr(int64(1)) }, "", "", 0},
		{"amount max", func(p *charges.CreateParams) { p.Amount = ptr(int64(99_999_999)) }, "", "", 0},
		{"amount 0", func(p *charges.CreateParams) { p.Amount = ptr(int64(0)) }, "parameter_invalid", "amount", apperr.KindInvalid},
		{"amount max+1", func(p *charges.CreateParams) { p.Amount = ptr(int64(100_000_000)) }, "parameter_invalid", "amount", apperr.KindInvalid},
		{"amount nil", func(p *charges.CreateParams) { p.Amount = nil }, "parameter_missing", "amount", apperr.KindInvalid},
		{"currency empty", func(p *charges.CreateParams) { p.Currency = ptr("") }, "parameter_missing", "currency", apperr.KindInvalid},
		{"currency with spaces", func(p *charges.CreateParams) { p.Currency = ptr(" eur ") }, "", "", 0},
		{"currency mixed case", func(p *charges.CreateParams) { p.Currency = ptr("jPy") }, "", "", 0},
		{"currency unknown", func(p *charges.CreateParams) { p.Currency = ptr("XYZ") }, "parameter_invalid", "currency", apperr.KindInvalid},
		{"currency 4 letters", func(p *charges.CreateParams) { p.Currency = ptr("USDD") }, "parameter_invalid", "currency", apperr.KindInvalid},
		{"payment_method empty", func(p *charges.CreateParams) { p.PaymentMethod = ptr("") }, "parameter_missing", "payment_method", apperr.KindInvalid},
		{"payment_method Card", func(p *charges.CreateParams) { p.PaymentMethod = ptr("Card") }, "parameter_invalid", "payment_method", apperr.KindInvalid},
		{"provider stripe", func(p *charges.CreateParams) { p.Provider = ptr("stripe") }, "", "", 0},
		{"provider unknown", func(p *charges.CreateParams) { p.Provider = ptr("adyen") }, "parameter_invalid", "provider", apperr.KindInvalid},
		{"environment live", func(p *charges.CreateParams) { p.Environment = ptr("live") }, "live_mode_disabled", "", apperr.KindForbidden},
		{"environment live wins over bad fields", func(p *charges.CreateParams) { p.Environment = ptr("live"); p.Amount = nil }, "live_mode_disabled", "", apperr.KindForbidden},
		{"environment test", func(p *charges.CreateParams) { p.Environment = ptr("test") }, "parameter_invalid", "environment", apperr.KindInvalid},
		{"description 1000", func(p *charges.CreateParams) { p.Description = long(1000, "é") }, "", "", 0},
		{"description 1001", func(p *charges.CreateParams) { p.Description = long(1001, "d") }, "parameter_invalid", "description", apperr.KindInvalid},
		{"metadata 50 keys", func(p *charges.CreateParams) { p.Metadata = meta(50) }, "", "", 0},
		{"metadata 51 keys", func(p *charges.CreateParams) { p.Metadata = meta(51) }, "parameter_invalid", "metadata", apperr.KindInvalid},
		{"metadata 40-rune key", func(p *charges.CreateParams) { p.Metadata = map[string]string{strings.Repeat("ü", 40): "v"} }, "", "", 0},
		{"metadata 41-rune key", func(p *charges.CreateParams) { p.Metadata = map[string]string{strings.Repeat("k", 41): "v"} }, "parameter_invalid", "metadata", apperr.KindInvalid},
		{"metadata 500-rune value", func(p *charges.CreateParams) { p.Metadata = map[string]string{"k": *long(500, "ü")} }, "", "", 0},
		{"metadata 501 value", func(p *charges.CreateParams) { p.Metadata = map[string]string{"k": *long(501, "v")} }, "parameter_invalid", "metadata", apperr.KindInvalid},
		{"card nil", func(p *charges.CreateParams) { p.Card = nil }, "parameter_missing", "card", apperr.KindInvalid},
		{"card empty", func(p *charges.CreateParams) { p.Card = &charges.CardInput{} }, "parameter_missing", "card.number", apperr.KindInvalid},
		{"number with spaces", func(p *charges.CreateParams) { p.Card.Number = ptr("4242 4242 4242 4242") }, "", "", 0},
		{"number with dashes", func(p *charges.CreateParams) { p.Card.Number = ptr("4242-4242-4242-4242") }, "", "", 0},
		{"number 11 digits", func(p *charges.CreateParams) { p.Card.Number = ptr("79927398713") }, "parameter_invalid", "card.number", apperr.KindInvalid},
		{"number 19 digits", func(p *charges.CreateParams) { p.Card.Number = ptr("4000000000000000006") }, "", "", 0},
		{"number 20 digits", func(p *charges.CreateParams) { p.Card.Number = ptr("40000000000000000002") }, "parameter_invalid", "card.number", apperr.KindInvalid},
		{"number with a dot", func(p *charges.CreateParams) { p.Card.Number = ptr("4242.4242.4242.4242") }, "parameter_invalid", "card.number", apperr.KindInvalid},
		{"number fails Luhn", func(p *charges.CreateParams) { p.Card.Number = ptr("4242424242424243") }, "parameter_invalid", "card.number", apperr.KindInvalid},
		{"expires this month", func(p *charges.CreateParams) { p.Card.ExpMonth, p.Card.ExpYear = ptr(6), ptr(2026) }, "", "", 0},
		{"expired last month", func(p *charges.CreateParams) { p.Card.ExpMonth, p.Card.ExpYear = ptr(5), ptr(2026) }, "parameter_invalid", "card.exp_year", apperr.KindInvalid},
		{"expired last year", func(p *charges.CreateParams) { p.Card.ExpMonth, p.Card.ExpYear = ptr(12), ptr(2025) }, "parameter_invalid", "card.exp_year", apperr.KindInvalid},
		{"exp_month 13", func(p *charges.CreateParams) { p.Card.ExpMonth = ptr(13) }, "parameter_invalid", "card.exp_month", apperr.KindInvalid},
		{"exp_month 0", func(p *charges.CreateParams) { p.Card.ExpMonth = ptr(0) }, "parameter_invalid", "card.exp_month", apperr.KindInvalid},
		{"exp_year 2101", func(p *charges.CreateParams) { p.Card.ExpYear = ptr(2101) }, "parameter_invalid", "card.exp_year", apperr.KindInvalid},
		{"exp_year nil", func(p *charges.CreateParams) { p.Card.ExpYear = nil }, "parameter_missing", "card.exp_year", apperr.KindInvalid},
		{"cvc 4 digits", func(p *charges.CreateParams) { p.Card.CVC = ptr("1234") }, "", "", 0},
		{"cvc 2 digits", func(p *charges.CreateParams) { p.Card.CVC = ptr("12") }, "parameter_invalid", "card.cvc", apperr.KindInvalid},
		{"cvc 5 digits", func(p *charges.CreateParams) { p.Card.CVC = ptr("12345") }, "parameter_invalid", "card.cvc", apperr.KindInvalid},
		{"cvc empty", func(p *charges.CreateParams) { p.Card.CVC = ptr("") }, "parameter_missing", "card.cvc", apperr.KindInvalid},
		{"cvc unicode digits", func(p *charges.CreateParams) { p.Card.CVC = ptr("١٢٣") }, "parameter_invalid", "card.cvc", apperr.KindInvalid},
		{"token", func(p *charges.CreateParams) { p.Card = &charges.CardInput{Token: ptr("pm_card_visa")} }, "", "", 0},
		{"token and cvc", func(p *charges.CreateParams) { p.Card = &charges.CardInput{Token: ptr("tok_visa"), CVC: ptr("123")} }, "parameter_invalid", "card", apperr.KindInvalid},
		{"token blank", func(p *charges.CreateParams) { p.Card = &charges.CardInput{Token: ptr("   ")} }, "parameter_invalid", "card.token", apperr.KindInvalid},
		{"token 256", func(p *charges.CreateParams) { p.Card = &charges.CardInput{Token: long(256, "t")} }, "parameter_invalid", "card.token", apperr.KindInvalid},
		// Without connectors a charge goes to the server's own account,
		// which takes only the provider's documented test tokens.
		{"token of the server's account", func(p *charges.CreateParams) { p.Card = &charges.CardInput{Token: ptr("pm_1QxGh1LkdIwHu7ixkq9V3wLs")} }, "parameter_invalid", "card.token", apperr.KindInvalid},
		{"made-up test token", func(p *charges.CreateParams) { p.Card = &charges.CardInput{Token: ptr("pm_card_visa_x")} }, "parameter_invalid", "card.token", apperr.KindInvalid},
		{"test token tok_", func(p *charges.CreateParams) {
			p.Card = &charges.CardInput{Token: ptr("tok_chargeDeclinedExpiredCard")}
		}, "", "", 0},
		{"return_url", func(p *charges.CreateParams) { p.ReturnURL = ptr("https://shop.example/done?x=1") }, "", "", 0},
		{"return_url with address and port", func(p *charges.CreateParams) { p.ReturnURL = ptr("http://127.0.0.1:8080/r") }, "", "", 0},
		{"return_url wildcard", func(p *charges.CreateParams) { p.ReturnURL = ptr("https://*") }, "parameter_invalid", "return_url", apperr.KindInvalid},
		{"return_url directive", func(p *charges.CreateParams) { p.ReturnURL = ptr("https://evil.example;sandbox/x") }, "parameter_invalid", "return_url", apperr.KindInvalid},
		{"return_url script", func(p *charges.CreateParams) { p.ReturnURL = ptr("javascript:alert(1)") }, "parameter_invalid", "return_url", apperr.KindInvalid},
		{"return_url user", func(p *charges.CreateParams) { p.ReturnURL = ptr("https://user:pw@x.example") }, "parameter_invalid", "return_url", apperr.KindInvalid},
		{"return_url no scheme", func(p *charges.CreateParams) { p.ReturnURL = ptr("//x.example") }, "parameter_invalid", "return_url", apperr.KindInvalid},
		{"return_url relative", func(p *charges.CreateParams) { p.ReturnURL = ptr("/done") }, "parameter_invalid", "return_url", apperr.KindInvalid},
		{"return_url space", func(p *charges.CreateParams) { p.ReturnURL = ptr("https://x.example/a b") }, "parameter_invalid", "return_url", apperr.KindInvalid},
		{"return_url too long", func(p *charges.CreateParams) { p.ReturnURL = ptr("https://x.example/" + *long(2048, "a")) }, "parameter_invalid", "return_url", apperr.KindInvalid},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			st, q := &fakeStore{}, &fakeQueue{}
			p := params()
			c.mod(&p)
			_, err := newService(t, st, q).Create(context.Background(), "mer_a", "sandbox", p, nil, render)
			if c.code == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				if len(st.created) != 1 || len(q.tasks) != 1 {
					t.Errorf("%d charges written, %d tasks enqueued, want 1 and 1", len(st.created), len(q.tasks))
				}
				return
			}
			e, ok := apperr.As(err)
			if !ok || e.Code != c.code || e.Param != c.param || e.Kind != c.kind {
				t.Fatalf("err = %v, want %s (param %q, kind %d)", err, c.code, c.param, c.kind)
			}
			if len(st.created) != 0 || len(q.tasks) != 0 {
				t.Errorf("a refused request wrote %d charges and enqueued %d tasks", len(st.created), len(q.tasks))
			}
		})
	}
}

func TestCreate(t *testing.T) {
	st, q := &fakeStore{}, &fakeQueue{}
	svc := newService(t, st, q)
	ctx := context.Background()
	p := params()
	p.Description, p.Metadata, p.Capture = ptr("Order 1"), map[string]string{"order": "1"}, ptr(false)
	p.Card.Number = ptr("4242 4242 4242 4242")
	idem := &idempotency.Request{Key: "k1", Fingerprint: []byte("fp")}
	res, err := svc.Create(ctx, "mer_a", "sandbox", p, idem, render)
	if err != nil {
		t.Fatal(err)
	}
	if res.Replayed {
		t.Error("a first request is marked replayed")
	}
	n := st.created[0]
	c := n.Charge
	if c.ID == "" || c.MerchantID != "mer_a" || c.Environment != "sandbox" || c.Status != charges.StatusCreated ||
		c.Amount != 2000 || c.Currency != "USD" || c.Capture || c.Provider != "sandbox" || *c.Description != "Order 1" {
		t.Errorf("charge = %+v", c)
	}
	wantNow := testNow.Truncate(time.Millisecond)
	if !c.CreatedAt.Equal(wantNow) || !c.UpdatedAt.Equal(wantNow) {
		t.Errorf("times %v %v, want %v", c.CreatedAt, c.UpdatedAt, wantNow)
	}
	if c.Card.Brand != "visa" || *c.Card.Last4 != "4242" || *c.Card.ExpMonth != 12 || *c.Card.ExpYear != 2030 || c.Card.Fingerprint == nil || c.CardToken != nil {
		t.Errorf("card = %+v", c.Card)
	}
	if n.Sealed == nil || bytes.Contains(n.Sealed, []byte("4242424242424242")) {
		t.Errorf("sealed card = %q", n.Sealed)
	}
	if n.Task != (outbox.Task{Type: outbox.ChargeAuthorize, RefID: c.ID}) {
		t.Errorf("task = %+v", n.Task)
	}
	if diff := cmp.Diff([]outbox.Task{n.Task}, q.tasks); diff != "" {
		t.Errorf("enqueued (-want +got):\n%s", diff)
	}
	if n.Idem != idem || n.Response == nil || !bytes.Equal(n.Response.Body, res.Response.Body) || n.Response.Status != 201 {
		t.Errorf("idempotency record %+v / %+v, response %+v", n.Idem, n.Response, res.Response)
	}
	// The event is the charge.created body with the charge as answered.
	if n.Event.Type != events.ChargeCreated || n.Event.MerchantID != "mer_a" || n.Event.ID == "" || n.Event.ID == c.ID {
		t.Errorf("event = %+v", n.Event)
	}
	var body struct {
		ID, Object, EventType, CreatedAt string
		Data                             struct {
			Object string
			Charge json.RawMessage
			Refund json.RawMessage
		}
	}
	if err := json.Unmarshal(n.Event.Body, &body); err != nil {
		t.Fatal(err)
	}
	if body.ID != n.Event.ID || body.Object != "event" || body.Data.Object != "charge" || body.Data.Refund != nil {
		t.Errorf("event body = %s", n.Event.Body)
	}
	if !jsonEqual(t, body.Data.Charge, res.Response.Body) {
		t.Errorf("event charge %s\n!= answer %s", body.Data.Charge, res.Response.Body)
	}
	for _, leak := range []string{"4242424242424242", `"cvc"`, `"123"`} {
		if bytes.Contains(n.Event.Body, []byte(leak)) || bytes.Contains(res.Response.Body, []byte(leak)) {
			t.Errorf("event or answer holds %s", leak)
		}
	}

	t.Run("fingerprints", func(t *testing.T) {
		fp := func(merchant, number string) string {
			t.Helper()
			p := params()
			p.Card.Number = ptr(number)
			before := len(st.created)
			if _, err := svc.Create(ctx, merchant, "sandbox", p, nil, render); err != nil {
				t.Fatal(err)
			}
			return *st.created[before].Charge.Card.Fingerprint
		}
		a := fp("mer_a", "4242424242424242")
		if a != *c.Card.Fingerprint {
			t.Errorf("same card and merchant: %s != %s", a, *c.Card.Fingerprint)
		}
		if fp("mer_b", "4242424242424242") == a {
			t.Error("same fingerprint for another merchant")
		}
		if fp("mer_a", "5555555555554444") == a {
			t.Error("same fingerprint for another card")
		}
		if len(a) < 32 {
			t.Errorf("fingerprint %q is too short for a keyed hash", a)
		}
	})

	t.Run("token", func(t *testing.T) {
		p := params()
		p.Card = &charges.CardInput{Token: ptr(" tok_mastercard ")}
		before := len(st.created)
		if _, err := svc.Create(ctx, "mer_a", "sandbox", p, nil, render); err != nil {
			t.Fatal(err)
		}
		n := st.created[before]
		if n.Sealed != nil || n.Charge.CardToken == nil || *n.Charge.CardToken != "tok_mastercard" ||
			n.Charge.Card.Brand != "mastercard" || n.Charge.Card.Last4 != nil || n.Charge.Card.Fingerprint != nil {
			t.Errorf("token charge = %+v sealed %v", n.Charge, n.Sealed)
		}
	})

	t.Run("replay", func(t *testing.T) {
		stored := &idempotency.Response{Status: 201, Body: []byte(`{"id":"first"}`)}
		st := &fakeStore{CreateChargeFn: func(context.Context, charges.NewCharge) (*idempotency.Response, error) { return stored, nil }}
		q := &fakeQueue{}
		res, err := newService(t, st, q).Create(ctx, "mer_a", "sandbox", params(), idem, render)
		if err != nil {
			t.Fatal(err)
		}
		if !res.Replayed || string(res.Response.Body) != `{"id":"first"}` || len(q.tasks) != 0 {
			t.Errorf("replay = %+v, %d tasks enqueued", res, len(q.tasks))
		}
	})

	t.Run("store errors pass through, enqueue errors do not", func(t *testing.T) {
		st := &fakeStore{CreateChargeFn: func(context.Context, charges.NewCharge) (*idempotency.Response, error) {
			return nil, idempotency.ErrReused()
		}}
		_, err := newService(t, st, &fakeQueue{}).Create(ctx, "mer_a", "sandbox", params(), idem, render)
		if apperr.CodeOf(err) != apperr.CodeIdempotencyReused {
			t.Errorf("err = %v, want idempotency_key_reused", err)
		}
		var told error
		q := &fakeQueue{EnqueueFn: func(context.Context, outbox.Task) error { return errors.New("redis down") }}
		svc := charges.NewService(&fakeStore{}, q, testKeyring(t), []string{"sandbox"}, "sandbox", func() time.Time { return testNow }, func(err error) { told = err })
		if _, err := svc.Create(ctx, "mer_a", "sandbox", params(), nil, render); err != nil {
			t.Errorf("a failed enqueue failed the request: %v", err)
		}
		if told == nil {
			t.Error("a failed enqueue was not reported")
		}
	})
}

func jsonEqual(t *testing.T, a, b []byte) bool {
	t.Helper()
	var x, y any
	if err := json.Unmarshal(a, &x); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &y); err != nil {
		t.Fatal(err)
	}
	return cmp.Equal(x, y)
}

func TestGetAndActionsRefuseMalformedIDs(t *testing.T) {
	st := &fakeStore{
		ChargeByIDFn: func(context.Context, string, string) (charges.Charge, error) {
			t.Error("the store was asked for a malformed id")
			return charges.Charge{}, nil
		},
		RequestActionFn: func(context.Context, charges.ActionRequest) (*idempotency.Response, error) {
			t.Error("the store was asked to act on a malformed id")
			return nil, nil
		},
	}
	svc := newService(t, st, &fakeQueue{})
	ctx := context.Background()
	rend := func(charges.Charge) (idempotency.Response, error) { return idempotency.Response{}, nil }
	for _, id := range []string{"", "nope", "0193A5C2-7F1E-7B3A-9C4D-2E8F6A1B3C5D", "0193a5c27f1e7b3a9c4d2e8f6a1b3c5d", "0193a5c2-7f1e-7b3a-9c4d-2e8f6a1b3c5d "} {
		if _, err := svc.Get(ctx, "mer_a", id); apperr.KindOf(err) != apperr.KindNotFound {
			t.Errorf("Get(%q) = %v, want not found", id, err)
		}
		if _, err := svc.Capture(ctx, "mer_a", id, nil, nil, rend); apperr.KindOf(err) != apperr.KindNotFound {
			t.Errorf("Capture(%q) = %v, want not found", id, err)
		}
		if _, err := svc.Void(ctx, "mer_a", id, nil, rend); apperr.KindOf(err) != apperr.KindNotFound {
			t.Errorf("Void(%q) = %v, want not found", id, err)
		}
	}
	if _, err := svc.List(ctx, "mer_a", charges.Filter{Status: "pending"}, listing.Params{Limit: 10}); apperr.CodeOf(err) != apperr.CodeParameterInvalid {
		t.Errorf("List with a bad status = %v, want parameter_invalid", err)
	}
}

func TestCaptureAndVoidRequests(t *testing.T) {
	const id = "0193a5c2-7f1e-7b3a-9c4d-2e8f6a1b3c5d"
	var got []charges.ActionRequest
	st := &fakeStore{RequestActionFn: func(_ context.Context, r charges.ActionRequest) (*idempotency.Response, error) {
		got = append(got, r)
		_, err := r.Render(charges.Charge{ID: r.ChargeID, Status: charges.StatusAuthorized})
		return nil, err
	}}
	q := &fakeQueue{}
	svc := newService(t, st, q)
	ctx := context.Background()
	rend := func(c charges.Charge) (idempotency.Response, error) {
		return idempotency.Response{Status: 200, Body: []byte(c.ID)}, nil
	}
	res, err := svc.Capture(ctx, "mer_a", id, ptr(int64(500)), nil, rend)
	if err != nil || string(res.Response.Body) != id || res.Response.Status != 200 {
		t.Fatalf("capture = %+v, %v", res, err)
	}
	if _, err := svc.Void(ctx, "mer_a", id, nil, rend); err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].Action != charges.ActionCapture || *got[0].Amount != 500 || got[0].MerchantID != "mer_a" ||
		got[1].Action != charges.ActionVoid || got[1].Amount != nil || !got[0].At.Equal(testNow.Truncate(time.Millisecond)) {
		t.Errorf("requests = %+v", got)
	}
	wantTasks := []outbox.Task{{Type: outbox.ChargeCapture, RefID: id}, {Type: outbox.ChargeVoid, RefID: id}}
	if diff := cmp.Diff(wantTasks, q.tasks); diff != "" {
		t.Errorf("tasks (-want +got):\n%s", diff)
	}
	for _, amount := range []int64{0, -1, 100_000_000} {
		if _, err := svc.Capture(ctx, "mer_a", id, &amount, nil, rend); apperr.CodeOf(err) != apperr.CodeParameterInvalid {
			t.Errorf("capture of %d = %v, want parameter_invalid", amount, err)
		}
	}
}

func TestCheckAction(t *testing.T) {
	capture := charges.ActionCapture
	cases := []struct {
		name   string
		c      charges.Charge
		action string
		amount *int64
		code   string
	}{
		{"authorized", charges.Charge{Status: charges.StatusAuthorized, Amount: 100}, capture, nil, ""},
		{"authorized, partial", charges.Charge{Status: charges.StatusAuthorized, Amount: 100}, capture, ptr(int64(100)), ""},
		{"authorized, too much", charges.Charge{Status: charges.StatusAuthorized, Amount: 100}, capture, ptr(int64(101)), "parameter_invalid"},
		{"pending", charges.Charge{Status: charges.StatusAuthorized, Amount: 100, PendingAction: &capture}, charges.ActionVoid, nil, "invalid_state"},
		{"created", charges.Charge{Status: charges.StatusCreated, Amount: 100}, capture, nil, "invalid_state"},
		{"captured", charges.Charge{Status: charges.StatusCaptured, Amount: 100}, charges.ActionVoid, nil, "invalid_state"},
		{"failed", charges.Charge{Status: charges.StatusFailed, Amount: 100}, capture, ptr(int64(1000)), "invalid_state"},
		{"voided", charges.Charge{Status: charges.StatusVoided, Amount: 100}, capture, nil, "invalid_state"},
		{"refunded", charges.Charge{Status: charges.StatusRefunded, Amount: 100}, capture, nil, "invalid_state"},
	}
	for _, c := range cases {
		err := charges.CheckAction(c.c, c.action, c.amount)
		got := ""
		if err != nil {
			got = apperr.CodeOf(err)
		}
		if got != c.code {
			t.Errorf("%s: CheckAction = %v, want %q", c.name, err, c.code)
		}
		if got == "invalid_state" && apperr.KindOf(err) != apperr.KindConflict {
			t.Errorf("%s: kind %v, want conflict", c.name, apperr.KindOf(err))
		}
	}
}

func TestRefundable(t *testing.T) {
	c := charges.Charge{Amount: 1000, AmountCaptured: 800, AmountRefunded: 300, AmountRefundHeld: 200}
	if got := c.Refundable(); got != 300 {
		t.Errorf("Refundable = %d, want 300", got)
	}
}

func TestView(t *testing.T) {
	c := charges.Charge{ID: "id", Amount: 5, Currency: "USD", Status: charges.StatusCreated, PaymentMethod: "card",
		Card: charges.Card{Brand: "visa"}, CardToken: ptr("tok_secret"), Provider: "sandbox", Environment: "sandbox",
		CreatedAt: time.Date(2026, 11, 22, 1, 17, 13, 123456789, time.FixedZone("", 3600)), UpdatedAt: time.Date(2026, 11, 22, 1, 17, 13, 0, time.UTC)}
	b, err := json.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	want := map[string]any{
		"id": "id", "object": "charge", "amount": 5.0, "amount_captured": 0.0, "amount_refunded": 0.0, "currency": "USD", "status": "created",
		"payment_method": "card", "card": map[string]any{"brand": "visa", "last4": nil, "exp_month": nil, "exp_year": nil, "fingerprint": nil},
		"provider": "sandbox", "provider_reference": nil, "environment": "sandbox", "capture": false, "description": nil,
		"metadata": map[string]any{}, "failure_code": nil, "failure_message": nil,
		"customer": nil, "off_session": false, "next_action": nil,
		"authentication": map[string]any{"status": "not_required", "completed_at": nil},
		"connector":      nil, "attempts": []any{},
		"created_at": "2026-11-22T00:17:13.123Z", "updated_at": "2026-11-22T01:17:13.000Z",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("charge JSON (-want +got):\n%s", diff)
	}
}

// worker builds a Processor over st with p as the sandbox provider.
func worker(t *testing.T, st *fakeStore, p *providertest.Fake) *charges.Processor {
	t.Helper()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	return charges.NewProcessor(st, providers.Registry{"sandbox": p}, testKeyring(t), time.Second, func() time.Time { return testNow }, log, nil)
}

// created returns a charge as the API writes it, with its sealed card.
func created(t *testing.T, capture bool) (charges.Charge, []byte) {
	t.Helper()
	st := &fakeStore{}
	p := params()
	p.Capture = &capture
	p.Card.CVC = ptr("987")
	if _, err := newService(t, st, &fakeQueue{}).Create(context.Background(), "mer_a", "sandbox", p, nil, render); err != nil {
		t.Fatal(err)
	}
	return st.created[0].Charge, st.created[0].Sealed
}

func TestAuthorize(t *testing.T) {
	ctx := context.Background()
	decline := func(code string) func(context.Context, providers.AuthorizeRequest) (providers.Result, error) {
		return func(context.Context, providers.AuthorizeRequest) (providers.Result, error) {
			return providers.Result{}, &providers.Decline{Code: code}
		}
	}
	down := func(context.Context, providers.AuthorizeRequest) (providers.Result, error) {
		return providers.Result{}, errors.Join(providers.ErrUnavailable, providers.ErrNothingBooked)
	}
	cases := []struct {
		name        string
		capture     bool
		fn          func(context.Context, providers.AuthorizeRequest) (providers.Result, error)
		final       bool
		wantRetry   bool
		wantStatus  string
		wantEvent   string
		wantFailure string
	}{
		{"capture", true, nil, false, false, charges.StatusCaptured, events.ChargeCaptured, ""},
		{"authorize only", false, nil, false, false, charges.StatusAuthorized, "", ""},
		{"declined", true, decline("card_declined"), false, false, charges.StatusFailed, events.ChargeFailed, "card_declined"},
		{"insufficient funds", false, decline("insufficient_funds"), false, false, charges.StatusFailed, events.ChargeFailed, "insufficient_funds"},
		{"down, not final", true, down, false, true, "", "", ""},
		{"down, final", true, down, true, false, charges.StatusFailed, events.ChargeFailed, "provider_unavailable"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ch, sealed := created(t, c.capture)
			st := &fakeStore{ChargeForWorkFn: func(context.Context, string) (charges.Charge, []byte, error) { return ch, sealed, nil }}
			p := &providertest.Fake{AuthorizeFn: c.fn}
			err := worker(t, st, p).Authorize(ctx, ch.ID, c.final)
			if c.wantRetry {
				if !errors.Is(err, charges.ErrRetry) || len(st.transitions) != 0 {
					t.Fatalf("err = %v with %d transitions, want ErrRetry and none", err, len(st.transitions))
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(p.Authorizes()) != 1 {
				t.Fatalf("%d provider calls, want 1", len(p.Authorizes()))
			}
			req := p.Authorizes()[0]
			wantReq := providers.AuthorizeRequest{IdempotencyKey: "gh_" + ch.ID + "_authorize", Amount: 2000, Currency: "USD", Capture: c.capture,
				Card: providers.Card{Number: "4242424242424242", ExpMonth: 12, ExpYear: 2030, CVC: "987"}, Metadata: map[string]string{}}
			if diff := cmp.Diff(wantReq, req); diff != "" {
				t.Errorf("provider request (-want +got):\n%s", diff)
			}
			if len(st.transitions) != 1 {
				t.Fatalf("%d transitions, want 1", len(st.transitions))
			}
			tr := st.transitions[0]
			if tr.Before.Status != charges.StatusCreated || tr.After.Status != c.wantStatus || !tr.PurgeCard || tr.DoneTask != "charge:authorize:"+ch.ID {
				t.Errorf("transition %s -> %s purge %v task %q", tr.Before.Status, tr.After.Status, tr.PurgeCard, tr.DoneTask)
			}
			if !tr.After.UpdatedAt.Equal(testNow.Truncate(time.Millisecond)) {
				t.Errorf("updated_at %v", tr.After.UpdatedAt)
			}
			gotEvent := ""
			if tr.Event != nil {
				gotEvent = tr.Event.Type
				if !bytes.Contains(tr.Event.Body, []byte(`"status":"`+c.wantStatus+`"`)) {
					t.Errorf("event body does not show the new status: %s", tr.Event.Body)
				}
			}
			if gotEvent != c.wantEvent {
				t.Errorf("event %q, want %q", gotEvent, c.wantEvent)
			}
			gotFailure := ""
			if tr.After.FailureCode != nil {
				gotFailure = *tr.After.FailureCode
				if tr.After.FailureMessage == nil || *tr.After.FailureMessage == "" {
					t.Error("a failure without a message")
				}
			}
			if gotFailure != c.wantFailure {
				t.Errorf("failure code %q, want %q", gotFailure, c.wantFailure)
			}
			switch c.wantStatus {
			case charges.StatusCaptured:
				if tr.After.AmountCaptured != 2000 || tr.After.ProviderReference == nil {
					t.Errorf("captured %d reference %v", tr.After.AmountCaptured, tr.After.ProviderReference)
				}
			case charges.StatusAuthorized:
				if tr.After.AmountCaptured != 0 || tr.After.ProviderReference == nil {
					t.Errorf("captured %d reference %v", tr.After.AmountCaptured, tr.After.ProviderReference)
				}
			}
		})
	}

	t.Run("token", func(t *testing.T) {
		ch, _ := created(t, true)
		ch.CardToken = ptr("pm_card_visa")
		st := &fakeStore{ChargeForWorkFn: func(context.Context, string) (charges.Charge, []byte, error) { return ch, nil, nil }}
		p := &providertest.Fake{}
		if err := worker(t, st, p).Authorize(ctx, ch.ID, false); err != nil {
			t.Fatal(err)
		}
		if p.Authorizes()[0].Card != (providers.Card{Token: "pm_card_visa"}) {
			t.Errorf("card = %#v", p.Authorizes()[0].Card.Token)
		}
	})

	t.Run("unreadable card data fails the charge without a provider call", func(t *testing.T) {
		ch, sealed := created(t, true)
		sealed[len(sealed)-1] ^= 1
		st := &fakeStore{ChargeForWorkFn: func(context.Context, string) (charges.Charge, []byte, error) { return ch, sealed, nil }}
		p := &providertest.Fake{}
		if err := worker(t, st, p).Authorize(ctx, ch.ID, false); err != nil {
			t.Fatal(err)
		}
		if len(p.Authorizes()) != 0 || len(st.transitions) != 1 || st.transitions[0].After.Status != charges.StatusFailed {
			t.Errorf("%d provider calls, transitions %+v", len(p.Authorizes()), st.transitions)
		}
	})

	t.Run("sealed data is bound to its charge", func(t *testing.T) {
		_, sealed := created(t, true)
		other, _ := created(t, true)
		st := &fakeStore{ChargeForWorkFn: func(context.Context, string) (charges.Charge, []byte, error) { return other, sealed, nil }}
		p := &providertest.Fake{}
		if err := worker(t, st, p).Authorize(ctx, other.ID, false); err != nil {
			t.Fatal(err)
		}
		if len(p.Authorizes()) != 0 {
			t.Error("card data sealed for one charge was used for another")
		}
	})

	t.Run("already moved: the task is dropped", func(t *testing.T) {
		for _, status := range []string{charges.StatusCaptured, charges.StatusAuthorized, charges.StatusFailed, charges.StatusVoided} {
			ch, _ := created(t, true)
			ch.Status = status
			st := &fakeStore{ChargeForWorkFn: func(context.Context, string) (charges.Charge, []byte, error) { return ch, nil, nil }}
			p := &providertest.Fake{}
			if err := worker(t, st, p).Authorize(ctx, ch.ID, false); err != nil {
				t.Fatal(err)
			}
			if len(p.Authorizes()) != 0 || len(st.transitions) != 0 || len(st.deleted) != 1 || st.deleted[0] != "charge:authorize:"+ch.ID {
				t.Errorf("%s: %d calls, %d transitions, deleted %v", status, len(p.Authorizes()), len(st.transitions), st.deleted)
			}
		}
	})

	t.Run("unknown charge", func(t *testing.T) {
		err := worker(t, &fakeStore{}, &providertest.Fake{}).Authorize(ctx, "0193a5c2-7f1e-7b3a-9c4d-2e8f6a1b3c5d", false)
		if apperr.KindOf(err) != apperr.KindNotFound {
			t.Errorf("err = %v, want not found", err)
		}
	})

	t.Run("provider not configured on the worker", func(t *testing.T) {
		ch, sealed := created(t, true)
		ch.Provider = "stripe"
		st := &fakeStore{ChargeForWorkFn: func(context.Context, string) (charges.Charge, []byte, error) { return ch, sealed, nil }}
		if err := worker(t, st, &providertest.Fake{}).Authorize(ctx, ch.ID, false); err != nil {
			t.Fatal(err)
		}
		// An earlier attempt from a worker that had the provider may have
		// been booked: the charge fails with its reverse, the card kept for it.
		if len(st.transitions) != 1 || *st.transitions[0].After.FailureCode != "provider_unavailable" ||
			st.transitions[0].Then == nil || st.transitions[0].Then.Type != outbox.ChargeReverse || st.transitions[0].PurgeCard {
			t.Errorf("transitions %+v", st.transitions)
		}
	})

	t.Run("provider not configured, the charge already authorized: a duplicate task is dropped", func(t *testing.T) {
		ch, _ := created(t, true)
		ch.Provider, ch.Status, ch.AmountCaptured, ch.ProviderReference = "stripe", charges.StatusCaptured, ch.Amount, ptr("pi_1")
		st := &fakeStore{ChargeForWorkFn: func(context.Context, string) (charges.Charge, []byte, error) { return ch, nil, nil }}
		if err := worker(t, st, &providertest.Fake{}).Authorize(ctx, ch.ID, false); err != nil {
			t.Fatal(err)
		}
		if len(st.transitions) != 0 || len(st.deleted) != 1 || st.deleted[0] != "charge:authorize:"+ch.ID {
			t.Errorf("transitions %+v, deleted %v; want none and the task dropped", st.transitions, st.deleted)
		}
	})
}

func TestSettle(t *testing.T) {
	ctx := context.Background()
	authorized := func(t *testing.T, action string, amount *int64) charges.Charge {
		ch, _ := created(t, false)
		ch.Status, ch.ProviderReference = charges.StatusAuthorized, ptr("ref_1")
		if action != "" {
			ch.PendingAction = &action
		}
		ch.CaptureAmount = amount
		return ch
	}
	t.Run("capture in part", func(t *testing.T) {
		ch := authorized(t, charges.ActionCapture, ptr(int64(1500)))
		st := &fakeStore{ChargeForWorkFn: func(context.Context, string) (charges.Charge, []byte, error) { return ch, nil, nil }}
		p := &providertest.Fake{}
		if err := worker(t, st, p).Capture(ctx, ch.ID, false); err != nil {
			t.Fatal(err)
		}
		want := []providers.CaptureRequest{{IdempotencyKey: "gh_" + ch.ID + "_capture", Reference: "ref_1", Amount: 1500, Currency: ch.Currency}}
		if diff := cmp.Diff(want, p.Captures()); diff != "" {
			t.Errorf("provider calls (-want +got):\n%s", diff)
		}
		tr := st.transitions[0]
		if tr.After.Status != charges.StatusCaptured || tr.After.AmountCaptured != 1500 || tr.After.PendingAction != nil ||
			tr.After.CaptureAmount != nil || tr.Event == nil || tr.Event.Type != events.ChargeCaptured || tr.DoneTask != "charge:capture:"+ch.ID {
			t.Errorf("transition %+v", tr)
		}
	})
	t.Run("capture in full", func(t *testing.T) {
		ch := authorized(t, charges.ActionCapture, nil)
		st := &fakeStore{ChargeForWorkFn: func(context.Context, string) (charges.Charge, []byte, error) { return ch, nil, nil }}
		p := &providertest.Fake{}
		if err := worker(t, st, p).Capture(ctx, ch.ID, false); err != nil {
			t.Fatal(err)
		}
		if p.Captures()[0].Amount != 2000 || st.transitions[0].After.AmountCaptured != 2000 {
			t.Errorf("captured %d / %d, want 2000", p.Captures()[0].Amount, st.transitions[0].After.AmountCaptured)
		}
	})
	t.Run("void", func(t *testing.T) {
		ch := authorized(t, charges.ActionVoid, nil)
		st := &fakeStore{ChargeForWorkFn: func(context.Context, string) (charges.Charge, []byte, error) { return ch, nil, nil }}
		p := &providertest.Fake{}
		if err := worker(t, st, p).Void(ctx, ch.ID, false); err != nil {
			t.Fatal(err)
		}
		tr := st.transitions[0]
		if len(p.Voids()) != 1 || p.Voids()[0].IdempotencyKey != "gh_"+ch.ID+"_void" || tr.After.Status != charges.StatusVoided ||
			tr.Event == nil || tr.Event.Type != events.ChargeVoided || tr.After.AmountCaptured != 0 {
			t.Errorf("void: calls %+v transition %+v", p.Voids(), tr)
		}
	})
	t.Run("declined capture keeps the authorization", func(t *testing.T) {
		ch := authorized(t, charges.ActionCapture, nil)
		st := &fakeStore{ChargeForWorkFn: func(context.Context, string) (charges.Charge, []byte, error) { return ch, nil, nil }}
		p := &providertest.Fake{CaptureFn: func(context.Context, providers.CaptureRequest) (providers.Result, error) {
			return providers.Result{}, &providers.Decline{Code: "processing_error"}
		}}
		if err := worker(t, st, p).Capture(ctx, ch.ID, false); err != nil {
			t.Fatal(err)
		}
		tr := st.transitions[0]
		if tr.After.Status != charges.StatusAuthorized || tr.After.PendingAction != nil || tr.Event != nil || *tr.After.FailureCode != "processing_error" {
			t.Errorf("transition %+v", tr)
		}
	})
	t.Run("provider down", func(t *testing.T) {
		ch := authorized(t, charges.ActionVoid, nil)
		st := &fakeStore{ChargeForWorkFn: func(context.Context, string) (charges.Charge, []byte, error) { return ch, nil, nil }}
		p := &providertest.Fake{VoidFn: func(context.Context, providers.VoidRequest) (providers.Result, error) {
			return providers.Result{}, providers.ErrUnavailable
		}}
		if err := worker(t, st, p).Void(ctx, ch.ID, false); !errors.Is(err, charges.ErrRetry) {
			t.Errorf("not final: err = %v, want ErrRetry", err)
		}
		if err := worker(t, st, p).Void(ctx, ch.ID, true); err != nil {
			t.Fatal(err)
		}
		if len(st.transitions) != 1 || st.transitions[0].After.Status != charges.StatusAuthorized || *st.transitions[0].After.FailureCode != "provider_unavailable" {
			t.Errorf("transitions %+v", st.transitions)
		}
	})
	t.Run("a capture after a declined one clears the failure", func(t *testing.T) {
		ch := authorized(t, charges.ActionCapture, nil)
		ch.FailureCode, ch.FailureMessage = ptr("processing_error"), ptr("An error occurred while processing the card.")
		st := &fakeStore{ChargeForWorkFn: func(context.Context, string) (charges.Charge, []byte, error) { return ch, nil, nil }}
		if err := worker(t, st, &providertest.Fake{}).Capture(ctx, ch.ID, false); err != nil {
			t.Fatal(err)
		}
		after := st.transitions[0].After
		if after.Status != charges.StatusCaptured || after.FailureCode != nil || after.FailureMessage != nil {
			t.Errorf("captured charge keeps failure %v / %v", deref(after.FailureCode), deref(after.FailureMessage))
		}
	})
	t.Run("nothing requested: the task is dropped", func(t *testing.T) {
		for _, ch := range []charges.Charge{
			authorized(t, "", nil),
			authorized(t, charges.ActionVoid, nil), // a capture task for a void
		} {
			st := &fakeStore{ChargeForWorkFn: func(context.Context, string) (charges.Charge, []byte, error) { return ch, nil, nil }}
			p := &providertest.Fake{}
			if err := worker(t, st, p).Capture(ctx, ch.ID, false); err != nil {
				t.Fatal(err)
			}
			if len(p.Captures()) != 0 || len(st.transitions) != 0 || len(st.deleted) != 1 || st.deleted[0] != "charge:capture:"+ch.ID {
				t.Errorf("calls %d transitions %d deleted %v", len(p.Captures()), len(st.transitions), st.deleted)
			}
		}
	})
}

func TestValidReturnURL(t *testing.T) {
	for u, want := range map[string]bool{
		"https://shop.example/done?x=1":               true,
		"http://127.0.0.1:8080/r":                     true,
		"HTTPS://Shop.Example:443/a;b,c?d=e&f#g":      true,
		"http://[::1]:3000/":                          true,
		"https://xn--bcher-kva.example/":              true,
		"https://*":                                   false,
		"https://*.example/":                          false,
		"https://evil.example;sandbox/x":              false,
		"https://evil.example,other.example/":         false,
		"https://evil.example%3Bsandbox/":             false,
		"javascript:alert(1)":                         false,
		"https://user:pw@x.example":                   false,
		"https://@x.example/":                         false,
		"//x.example":                                 false,
		"/done":                                       false,
		"https://x.example/a b":                       false,
		"https://x.example/\"onload=":                 false,
		"https://x.example/'":                         false,
		"https://x.example\n/":                        false,
		"https://x.example:99999/":                    false,
		"https://x.example:/":                         false,
		"https://[::1%25eth0]/":                       false,
		"https://" + strings.Repeat("a", 64) + ".ex/": false,
		"https://x.example/" + strings.Repeat("a", charges.MaxReturnURLLen): false,
	} {
		if got := charges.ValidReturnURL(u); got != want {
			t.Errorf("ValidReturnURL(%q) = %v, want %v", u, got, want)
		}
	}
}
