// Package customers holds customers and their saved cards (payment methods).
// A payment method keeps its card sealed under its own id for as long as it
// exists; deleting the method, or its customer, deletes the row and the
// sealed card with it. A card comes from a raw card, checked as a charge's
// card is, or from a Gatehouse card token, which the method uses up. It
// depends on charges (the card rules), never the reverse.
package customers

import (
	"context"
	"encoding/json"
	"net/mail"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/gatehouse-pay/gatehouse/internal/apperr"
	"github.com/gatehouse-pay/gatehouse/internal/charges"
	"github.com/gatehouse-pay/gatehouse/internal/events"
	"github.com/gatehouse-pay/gatehouse/internal/idempotency"
	"github.com/gatehouse-pay/gatehouse/internal/ids"
	"github.com/gatehouse-pay/gatehouse/internal/keyring"
	"github.com/gatehouse-pay/gatehouse/internal/listing"
	"github.com/gatehouse-pay/gatehouse/internal/resource"
)

// Limits on customer input (api/openapi.yaml); metadata has the limits of
// charges (charges.CheckMetadata).
const (
	MaxEmailLen = 512
	MaxTextLen  = 1000
)

// Id prefixes.
const (
	CustomerPrefix      = "cus"
	PaymentMethodPrefix = "pm"
)

// ValidID reports whether id can be a customer's.
func ValidID(id string) bool { return ids.Valid(CustomerPrefix, id) }

// ValidPaymentMethodID reports whether id can be a payment method's.
func ValidPaymentMethodID(id string) bool { return ids.Valid(PaymentMethodPrefix, id) }

// Customer is a merchant's customer, who can have saved cards.
type Customer struct {
	ID          string
	MerchantID  string
	Environment string
	Email       *string
	Name        *string
	Description *string
	Metadata    map[string]string
	CreatedAt   time.Time
	UpdatedAt   time.Time
}

// View returns the public form.
func (c Customer) View() resource.Customer {
	md := c.Metadata
	if md == nil {
		md = map[string]string{}
	}
	return resource.Customer{ID: c.ID, Object: "customer", Email: c.Email, Name: c.Name, Description: c.Description,
		Metadata: md, CreatedAt: events.Timestamp(c.CreatedAt)}
}

// MarshalJSON renders the public form.
func (c Customer) MarshalJSON() ([]byte, error) { return json.Marshal(c.View()) }

// Filter narrows a list of customers.
type Filter struct {
	// Email keeps the customers with this email, in any case.
	Email string
}

// Patch is a partial update of a customer: a Text left unset keeps its
// value, nil Metadata keeps the metadata.
type Patch struct {
	Email       Text
	Name        Text
	Description Text
	Metadata    map[string]string
	At          time.Time
}

// Store persists customers and payment methods. Every method that takes a
// merchant id answers NotFound for another merchant's objects.
//
// CreateCustomer and CreatePaymentMethod store the object and, with an
// idempotency request, the first response under its key, in one
// transaction; a key used before creates nothing and returns its stored
// response (or idempotency.ErrReused for another request).
//
// CreatePaymentMethod writes the method only while its customer exists, and
// marks the card token it was made from used in the same transaction: a
// token used meanwhile rolls it back with charges.ErrTokenUnusable.
//
// DeleteCustomer deletes the customer and its payment methods, sealed cards
// included, in one transaction.
type Store interface {
	CreateCustomer(ctx context.Context, c Customer, idem *idempotency.Request, first idempotency.Response) (*idempotency.Response, error)
	CustomerByID(ctx context.Context, merchantID, id string) (Customer, error)
	ListCustomers(ctx context.Context, merchantID string, f Filter, p listing.Params) (listing.Page[Customer], error)
	UpdateCustomer(ctx context.Context, merchantID, id string, p Patch) (Customer, error)
	DeleteCustomer(ctx context.Context, merchantID, id string) error

	CreatePaymentMethod(ctx context.Context, n NewPaymentMethod) (*idempotency.Response, error)
	ListPaymentMethods(ctx context.Context, merchantID, customerID string, p listing.Params) (listing.Page[PaymentMethod], error)
	DeletePaymentMethod(ctx context.Context, merchantID, customerID, id string) error

	// UsableToken and StoredResponse are charges.TokenStore's.
	UsableToken(ctx context.Context, merchantID, environment, id string, now time.Time) (charges.Token, []byte, error)
	StoredResponse(ctx context.Context, merchantID string, idem *idempotency.Request) (*idempotency.Response, error)
}

// Service is the API side of customers and payment methods.
type Service struct {
	store Store
	keys  *keyring.Keyring
	now   func() time.Time
}

// NewService returns the service; keys seals the saved cards.
func NewService(store Store, keys *keyring.Keyring, now func() time.Time) *Service {
	return &Service{store: store, keys: keys, now: now}
}

// Result is a created or replayed answer.
type Result = charges.Result

// CreateParams is the body of POST /v1/customers.
type CreateParams struct {
	Email       *string           `json:"email"`
	Name        *string           `json:"name"`
	Description *string           `json:"description"`
	Metadata    map[string]string `json:"metadata"`
	Environment *string           `json:"environment"`
}

// UpdateParams is the body of PATCH /v1/customers/:id.
type UpdateParams struct {
	Email       Text              `json:"email"`
	Name        Text              `json:"name"`
	Description Text              `json:"description"`
	Metadata    map[string]string `json:"metadata"`
}

func (s *Service) stamp() time.Time { return s.now().UTC().Truncate(time.Millisecond) }

func errNotFound() error { return apperr.NotFound("customer") }

// Create stores a customer of the merchant in environment and answers with
// render(customer); with an Idempotency-Key a repeat replays the answer.
func (s *Service) Create(ctx context.Context, merchantID, environment string, p CreateParams, idem *idempotency.Request, render func(Customer) (idempotency.Response, error)) (Result, error) {
	if err := checkEnvironment(p.Environment); err != nil {
		return Result{}, err
	}
	for _, f := range []struct {
		param string
		value *string
	}{{"email", p.Email}, {"name", p.Name}, {"description", p.Description}} {
		if err := checkText(f.param, f.value); err != nil {
			return Result{}, err
		}
	}
	if err := charges.CheckMetadata(p.Metadata); err != nil {
		return Result{}, err
	}
	now := s.stamp()
	c := Customer{ID: ids.New(CustomerPrefix), MerchantID: merchantID, Environment: environment, Email: p.Email,
		Name: p.Name, Description: p.Description, Metadata: p.Metadata, CreatedAt: now, UpdatedAt: now}
	if c.Metadata == nil {
		c.Metadata = map[string]string{}
	}
	first, err := render(c)
	if err != nil {
		return Result{}, apperr.Internal(err)
	}
	replay, err := s.store.CreateCustomer(ctx, c, idem, first)
	if err != nil {
		return Result{}, err
	}
	if replay != nil {
		return Result{Response: *replay, Replayed: true}, nil
	}
	return Result{Response: first}, nil
}

// Get returns one of the merchant's customers.
func (s *Service) Get(ctx context.Context, merchantID, id string) (Customer, error) {
	if !ValidID(id) {
		return Customer{}, errNotFound()
	}
	return s.store.CustomerByID(ctx, merchantID, id)
}

// List returns a page of the merchant's customers, newest first.
func (s *Service) List(ctx context.Context, merchantID string, f Filter, p listing.Params) (listing.Page[Customer], error) {
	if f.Email != "" && (utf8.RuneCountInString(f.Email) > MaxEmailLen || !utf8.ValidString(f.Email) || strings.IndexByte(f.Email, 0) >= 0) {
		return listing.Page[Customer]{}, apperr.Invalid("email", "email must be at most %d characters of text.", MaxEmailLen)
	}
	return s.store.ListCustomers(ctx, merchantID, f, p)
}

// Update changes any of a customer's email, name, description and
// metadata: null clears a text field, metadata replaces the whole set.
func (s *Service) Update(ctx context.Context, merchantID, id string, p UpdateParams) (Customer, error) {
	for _, f := range []struct {
		param string
		value Text
	}{{"email", p.Email}, {"name", p.Name}, {"description", p.Description}} {
		if err := checkText(f.param, f.value.value); err != nil {
			return Customer{}, err
		}
	}
	if err := charges.CheckMetadata(p.Metadata); err != nil {
		return Customer{}, err
	}
	if !ValidID(id) {
		return Customer{}, errNotFound()
	}
	return s.store.UpdateCustomer(ctx, merchantID, id, Patch{Email: p.Email, Name: p.Name, Description: p.Description,
		Metadata: p.Metadata, At: s.stamp()})
}

// Delete deletes a customer and its payment methods, their sealed cards
// with them.
func (s *Service) Delete(ctx context.Context, merchantID, id string) error {
	if !ValidID(id) {
		return errNotFound()
	}
	return s.store.DeleteCustomer(ctx, merchantID, id)
}

func checkEnvironment(env *string) error {
	if env == nil {
		return nil
	}
	switch *env {
	case "live":
		return apperr.LiveMode()
	case "sandbox":
		return nil
	}
	return apperr.Invalid("environment", "environment must be sandbox or live.")
}

// checkText checks a text field of a customer (nil is no value).
func checkText(param string, v *string) error {
	if v == nil {
		return nil
	}
	if strings.IndexByte(*v, 0) >= 0 {
		return apperr.Invalid(param, "%s must not contain NUL characters.", param)
	}
	if param == "email" {
		if utf8.RuneCountInString(*v) > MaxEmailLen || !looksLikeEmail(*v) {
			return apperr.Invalid("email", "email must be an email address of at most %d characters.", MaxEmailLen)
		}
		return nil
	}
	if utf8.RuneCountInString(*v) > MaxTextLen {
		return apperr.Invalid(param, "%s must be at most %d characters.", param, MaxTextLen)
	}
	return nil
}

// looksLikeEmail reports whether s is a bare address (name@domain.tld).
func looksLikeEmail(s string) bool {
	a, err := mail.ParseAddress(s)
	if err != nil || a.Address != s {
		return false
	}
	at := strings.LastIndexByte(s, '@')
	return at > 0 && strings.Contains(s[at+1:], ".") && !strings.HasSuffix(s, ".")
}

// Text is a text field of a patch: left out, it keeps its value; null
// clears it; a string sets it.
type Text struct {
	set   bool
	value *string
}

// SetText is a Text that sets v; ClearText one that clears the field.
func SetText(v string) Text { return Text{set: true, value: &v} }

// ClearText is a Text that clears the field.
func ClearText() Text { return Text{set: true} }

// Get returns the new value (nil to clear) and whether the field changes.
func (t Text) Get() (value *string, set bool) { return t.value, t.set }

// UnmarshalJSON reads null or a string.
func (t *Text) UnmarshalJSON(b []byte) error {
	t.set = true
	if string(b) == "null" {
		t.value = nil
		return nil
	}
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return err
	}
	t.value = &s
	return nil
}
