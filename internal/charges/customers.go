package charges

import (
	"context"
	"net/url"
	"strings"

	"github.com/gatehouse-pay/gatehouse/internal/apperr"
)

// CustomerStore reads what a charge of a customer needs.
type CustomerStore interface {
	// CustomerExists returns nil when the merchant has the customer in
	// environment, otherwise an error of kind NotFound.
	CustomerExists(ctx context.Context, merchantID, environment, customerID string) error
	// SavedCard returns the merchant's payment method pmID, otherwise an
	// error of kind NotFound.
	SavedCard(ctx context.Context, merchantID, pmID string) (SavedCard, error)
	// ConvertSavedCard stores to as the card of the legacy saved card c
	// (see SavedCard.Legacy), its data key in the same transaction, if the
	// method still exists and still holds c.Sealed; otherwise it does
	// nothing. It reports whether it stored.
	ConvertSavedCard(ctx context.Context, c SavedCard, to SealedCard) (bool, error)
}

// WithCustomers lets the service charge customers and their saved cards.
func (s *Service) WithCustomers(cs CustomerStore) *Service {
	s.customers = cs
	return s
}

// customerFields checks customer, off_session and return_url.
func (s *Service) customerFields(c *Charge, p CreateParams) error {
	if p.Customer != nil {
		id := strings.TrimSpace(*p.Customer)
		if id == "" || len(id) > 255 {
			return apperr.Invalid("customer", "customer must be the id of a customer (cus_...).")
		}
		c.CustomerID = &id
	}
	if p.Card != nil && p.Card.PaymentMethod != nil && c.CustomerID == nil {
		return apperr.Missing("customer")
	}
	if p.OffSession != nil && *p.OffSession {
		if p.Card == nil || p.Card.PaymentMethod == nil {
			return apperr.Invalid("off_session", "off_session is only for charges of a saved card (card.payment_method).")
		}
		c.OffSession = true
	}
	if p.ReturnURL != nil {
		u, err := url.Parse(*p.ReturnURL)
		if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" || len(*p.ReturnURL) > MaxReturnURLLen {
			return apperr.Invalid("return_url", "return_url must be an absolute http or https URL of at most %d characters.", MaxReturnURLLen)
		}
		if c.OffSession {
			return apperr.Invalid("return_url", "An off-session charge has no cardholder to return: send either off_session or return_url.")
		}
		r := *p.ReturnURL
		c.ReturnURL = &r
	}
	c.Authentication.Status = AuthNotRequired
	return nil
}

var errSavedCardUnusable = apperr.Invalid("card.payment_method", "card.payment_method is not a saved card of this customer.")

// useCustomer checks the charge's customer and, for a saved card, fills n
// with the card's summary and the card, without its CVC, re-sealed under the
// charge's id. A card saved by a release before data keys is converted
// first (its CVC dropped, sealed under a data key of its own).
func (s *Service) useCustomer(ctx context.Context, n *NewCharge) error {
	c := &n.Charge
	if c.CustomerID == nil {
		return nil
	}
	if s.customers == nil {
		return apperr.Invalid("customer", "No such customer.")
	}
	if c.PaymentMethodID == nil {
		err := s.customers.CustomerExists(ctx, c.MerchantID, c.Environment, *c.CustomerID)
		if apperr.KindOf(err) == apperr.KindNotFound {
			return apperr.Invalid("customer", "No such customer: %s.", *c.CustomerID)
		}
		return err
	}
	saved, err := s.customers.SavedCard(ctx, c.MerchantID, *c.PaymentMethodID)
	if apperr.KindOf(err) == apperr.KindNotFound || (err == nil && (saved.CustomerID != *c.CustomerID || saved.Environment != c.Environment)) {
		return errSavedCardUnusable
	}
	if err != nil {
		return err
	}
	if saved.Legacy() {
		to, err := ConvertSavedCard(s.keys, saved)
		if err != nil {
			return err
		}
		if _, err := s.customers.ConvertSavedCard(ctx, saved, to); err != nil {
			return err
		}
	}
	if n.Sealed, err = chargeCopy(s.keys, saved, c.ID); err != nil {
		return err
	}
	c.Card = saved.Card
	return nil
}
