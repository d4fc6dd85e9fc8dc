package customers

import (
	"context"
	"encoding/json"
	"strings"
	"time"

	"github.com/gatehouse-pay/gatehouse/internal/apperr"
	"github.com/gatehouse-pay/gatehouse/internal/charges"
	"github.com/gatehouse-pay/gatehouse/internal/events"
	"github.com/gatehouse-pay/gatehouse/internal/idempotency"
	"github.com/gatehouse-pay/gatehouse/internal/ids"
	"github.com/gatehouse-pay/gatehouse/internal/keyring"
	"github.com/gatehouse-pay/gatehouse/internal/listing"
	"github.com/gatehouse-pay/gatehouse/internal/resource"
)

// PaymentMethod is a customer's saved card. The card itself (number and
// expiry, never the CVC) is kept only sealed, under a data key of the
// method's own that is deleted with it (see charges.SaveCard).
type PaymentMethod struct {
	ID          string
	MerchantID  string
	Environment string
	CustomerID  string
	// Card is the summary: brand, last 4 digits, expiry and fingerprint.
	Card charges.Card
	// TokenID is the card token the method was made from, if any.
	TokenID *string
	// AuthenticatedAt is when the cardholder first authenticated a charge
	// of the card (3-D Secure), if ever.
	AuthenticatedAt *time.Time
	CreatedAt       time.Time
}

// View returns the public form.
func (m PaymentMethod) View() resource.PaymentMethod {
	return resource.PaymentMethod{ID: m.ID, Object: "payment_method", Type: "card", Customer: m.CustomerID,
		Card:      m.Card.View(),
		CreatedAt: events.Timestamp(m.CreatedAt)}
}

// MarshalJSON renders the public form.
func (m PaymentMethod) MarshalJSON() ([]byte, error) { return json.Marshal(m.View()) }

// NewPaymentMethod is everything the creation of a payment method writes in
// one transaction.
type NewPaymentMethod struct {
	Method PaymentMethod
	// Sealed is the card, sealed under the method's data key, and the
	// wrapped data key, stored in a row of its own.
	Sealed charges.SealedCard
	// TokenID is the card token to mark used by the method; "" for a raw card.
	TokenID  string
	Idem     *idempotency.Request
	Response idempotency.Response
}

// CardParams is the card of POST /v1/customers/:id/payment_methods: a
// Gatehouse card token, or the raw card.
type CardParams struct {
	Token    *string `json:"token"`
	Number   *string `json:"number"`
	ExpMonth *int    `json:"exp_month"`
	ExpYear  *int    `json:"exp_year"`
	CVC      *string `json:"cvc"`
}

// PaymentMethodParams is the body of POST /v1/customers/:id/payment_methods.
type PaymentMethodParams struct {
	Card *CardParams `json:"card"`
}

func errPaymentMethodNotFound() error { return apperr.NotFound("payment_method") }

// CreatePaymentMethod saves a card for one of the merchant's customers and
// answers with render(method). The card is a raw card, checked (its CVC
// too), or a card token of the merchant in environment, which is used up in
// the same transaction; either way its CVC is dropped (saving authorizes
// nothing, and no CVC may be kept after an authorization) and the rest is
// sealed under a new data key of the method's (charges.SaveCard). A token that cannot be used answers 400 (param
// card.token), unless the request repeats an Idempotency-Key whose first
// request used it: then its stored answer is replayed.
func (s *Service) CreatePaymentMethod(ctx context.Context, merchantID, environment, customerID string, p PaymentMethodParams, idem *idempotency.Request, render func(PaymentMethod) (idempotency.Response, error)) (Result, error) {
	if !ValidID(customerID) {
		return Result{}, errNotFound()
	}
	tokenID, raw, err := checkCard(p.Card)
	if err != nil {
		return Result{}, err
	}
	now := s.stamp()
	n := NewPaymentMethod{Idem: idem, Method: PaymentMethod{ID: ids.New(PaymentMethodPrefix), MerchantID: merchantID,
		Environment: environment, CustomerID: customerID, CreatedAt: now}}
	if tokenID == "" {
		n.Method.Card, n.Sealed, err = charges.SaveCard(s.keys, merchantID, raw, n.Method.ID, now)
	} else {
		var replay *idempotency.Response
		if replay, err = s.useToken(ctx, &n, tokenID, now); replay != nil {
			return Result{Response: *replay, Replayed: true}, nil
		}
	}
	if err != nil {
		return Result{}, err
	}
	if n.Response, err = render(n.Method); err != nil {
		return Result{}, apperr.Internal(err)
	}
	replay, err := s.store.CreatePaymentMethod(ctx, n)
	if err != nil {
		return Result{}, err
	}
	if replay != nil {
		return Result{Response: *replay, Replayed: true}, nil
	}
	return Result{Response: n.Response}, nil
}

// checkCard returns the token id, or the raw card, of p.
func checkCard(p *CardParams) (tokenID string, raw charges.RawCard, err error) {
	if p == nil {
		return "", raw, apperr.Missing("card")
	}
	if p.Token == nil {
		return "", charges.RawCard{Number: p.Number, ExpMonth: p.ExpMonth, ExpYear: p.ExpYear, CVC: p.CVC}, nil
	}
	if p.Number != nil || p.CVC != nil || p.ExpMonth != nil || p.ExpYear != nil {
		return "", raw, apperr.Invalid("card", "Send either card.token or the card's number, exp_month, exp_year and cvc, not both.")
	}
	// Only Gatehouse tokens (charges.TokenPrefix) can be saved, not a provider's.
	tok := strings.TrimSpace(*p.Token)
	if !ids.Valid("ctok", tok) {
		return "", raw, charges.ErrTokenUnusable()
	}
	return tok, raw, nil
}

// useToken fills n with the card of the token id: its summary, and the card
// without its CVC sealed for the method.
func (s *Service) useToken(ctx context.Context, n *NewPaymentMethod, id string, now time.Time) (*idempotency.Response, error) {
	m := &n.Method
	t, sealed, err := s.store.UsableToken(ctx, m.MerchantID, m.Environment, id, now)
	if apperr.KindOf(err) == apperr.KindNotFound {
		if n.Idem != nil {
			if replay, err := s.store.StoredResponse(ctx, m.MerchantID, n.Idem); replay != nil || err != nil {
				return replay, err
			}
		}
		return nil, charges.ErrTokenUnusable()
	}
	if err != nil {
		return nil, err
	}
	if n.Sealed, err = charges.SaveTokenCard(s.keys, m.MerchantID, sealed, t.ID, m.ID); err != nil {
		return nil, err
	}
	m.Card, m.TokenID, n.TokenID = t.Card, &t.ID, t.ID
	return nil, nil
}

// ListPaymentMethods returns a page of a customer's payment methods, newest
// first; a customer that is not the merchant's is NotFound.
func (s *Service) ListPaymentMethods(ctx context.Context, merchantID, customerID string, p listing.Params) (listing.Page[PaymentMethod], error) {
	if !ValidID(customerID) {
		return listing.Page[PaymentMethod]{}, errNotFound()
	}
	return s.store.ListPaymentMethods(ctx, merchantID, customerID, p)
}

// DeletePaymentMethod deletes a customer's payment method, its sealed card
// and its data key with it, in one transaction: a copy of the sealed card
// left behind (a dead row version, WAL, a backup) then opens only with a
// copy of the wrapped key that outlived it (docs/customers.md).
// Any miss (customer or method) is NotFound of the method.
func (s *Service) DeletePaymentMethod(ctx context.Context, merchantID, customerID, id string) error {
	if !ValidID(customerID) || !ValidPaymentMethodID(id) {
		return errPaymentMethodNotFound()
	}
	return s.store.DeletePaymentMethod(ctx, merchantID, customerID, id)
}

// CardStore is what the saved cards' housekeeping needs of the store.
type CardStore interface {
	// LegacySavedCards returns, in the order of their ids, up to limit
	// payment methods with an id above after whose card is still sealed as
	// before data keys (charges.SavedCard.Legacy).
	LegacySavedCards(ctx context.Context, after string, limit int) ([]charges.SavedCard, error)
	// ConvertSavedCard is charges.CustomerStore's.
	ConvertSavedCard(ctx context.Context, c charges.SavedCard, to charges.SealedCard) (bool, error)
	// VacuumSavedCards vacuums the table of data keys when it holds rows
	// deleted since the last vacuum, and the payment methods' table too
	// when methods were converted; it reports which it vacuumed.
	VacuumSavedCards(ctx context.Context, converted bool) (keys, methods bool, err error)
}

// CardHousekeeping is the worker's periodic care of saved cards: it
// converts the cards an earlier release saved (with their CVC, under the
// card key) and has the data keys of deleted methods vacuumed away soon
// after they were deleted.
type CardHousekeeping struct {
	store CardStore
	keys  *keyring.Keyring
}

// NewCardHousekeeping returns the housekeeping of saved cards.
func NewCardHousekeeping(store CardStore, keys *keyring.Keyring) *CardHousekeeping {
	return &CardHousekeeping{store: store, keys: keys}
}

// HousekeepingReport is what one run of the housekeeping did.
type HousekeepingReport struct {
	// Converted counts the legacy cards converted; Unreadable those that
	// could not be opened (another ENCRYPTION_KEY), left as they are.
	Converted, Unreadable int
	// KeysVacuumed and MethodsVacuumed say which tables were vacuumed.
	KeysVacuumed, MethodsVacuumed bool
}

// Run converts every legacy saved card, batch cards at a time, then
// vacuums as VacuumSavedCards says. A card that cannot be opened is counted
// and left as it is (its charges fail processing_error, as they would
// have); the next run tries it again.
func (h *CardHousekeeping) Run(ctx context.Context, batch int) (HousekeepingReport, error) {
	var r HousekeepingReport
	for after := ""; ; {
		legacy, err := h.store.LegacySavedCards(ctx, after, batch)
		if err != nil {
			return r, err
		}
		for _, c := range legacy {
			after = c.PaymentMethodID
			to, err := charges.ConvertSavedCard(h.keys, c)
			if err != nil {
				r.Unreadable++
				continue
			}
			ok, err := h.store.ConvertSavedCard(ctx, c, to)
			if err != nil {
				return r, err
			}
			if ok {
				r.Converted++
			}
		}
		if len(legacy) < batch {
			break
		}
	}
	var err error
	r.KeysVacuumed, r.MethodsVacuumed, err = h.store.VacuumSavedCards(ctx, r.Converted > 0)
	return r, err
}
