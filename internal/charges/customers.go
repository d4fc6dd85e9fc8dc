package charges

import (
	"context"
	"net"
	"net/url"
	"strconv"
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
		if !ValidReturnURL(*p.ReturnURL) {
			return apperr.Invalid("return_url", "return_url must be an absolute http or https URL with a plain host name or IP address "+
				"(an optional port, no user name, password or wildcard), of at most %d characters.", MaxReturnURLLen)
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

// ValidReturnURL reports whether u may be a charge's return_url: an
// absolute http or https URL of at most MaxReturnURLLen characters, made
// only of the characters RFC 3986 allows (no space, quote, angle bracket,
// backslash or control character), whose authority is a plain host name or
// IP address with an optional port: no user name or password, no wildcard,
// nothing a header or a policy could be built from. The cardholder is sent
// there after the challenge, so nothing else in it is trusted either.
func ValidReturnURL(u string) bool {
	if len(u) > MaxReturnURLLen || !uriChars(u) {
		return false
	}
	lower := strings.ToLower(u)
	if !strings.HasPrefix(lower, "https://") && !strings.HasPrefix(lower, "http://") {
		return false
	}
	parsed, err := url.Parse(u)
	if err != nil || parsed.Opaque != "" || parsed.User != nil || parsed.Host == "" {
		return false
	}
	host, port := parsed.Hostname(), parsed.Port()
	if strings.HasSuffix(parsed.Host, ":") {
		return false // a colon with no port
	}
	if port != "" {
		n, err := strconv.Atoi(port)
		if err != nil || n < 1 || n > 65535 || port[0] == '0' {
			return false
		}
	}
	if strings.HasPrefix(parsed.Host, "[") {
		ip := net.ParseIP(host)
		return ip != nil && ip.To4() == nil && !strings.Contains(host, "%")
	}
	return hostName(host)
}

// uriChars reports whether s holds only the characters of RFC 3986
// (unreserved, reserved and '%') less the single quote.
func uriChars(s string) bool {
	for i := 0; i < len(s); i++ {
		b := s[i]
		switch {
		case 'a' <= b && b <= 'z', 'A' <= b && b <= 'Z', '0' <= b && b <= '9':
		case strings.IndexByte("-._~:/?#[]@!$&()*+,;=%", b) >= 0:
		default:
			return false
		}
	}
	return true
}

// hostName reports whether h is a DNS host name (letters, digits and
// hyphens in dot-separated labels of 1 to 63 characters, at most 253 in
// all, an optional final dot) or an IPv4 address.
func hostName(h string) bool {
	h = strings.TrimSuffix(h, ".")
	if h == "" || len(h) > 253 {
		return false
	}
	for _, label := range strings.Split(h, ".") {
		if label == "" || len(label) > 63 || label[0] == '-' || label[len(label)-1] == '-' {
			return false
		}
		for i := 0; i < len(label); i++ {
			b := label[i]
			if !('a' <= b && b <= 'z' || 'A' <= b && b <= 'Z' || '0' <= b && b <= '9' || b == '-') {
				return false
			}
		}
	}
	return true
}
