// Package merchants holds the Merchant, the account every other object belongs
// to, and the service that creates and finds merchants.
package merchants

import (
	"context"
	"net/mail"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/gatehouse-pay/gatehouse/internal/apperr"
	"github.com/gatehouse-pay/gatehouse/internal/ids"
)

// Merchant is an account. PasswordHash is an argon2id PHC string and never
// leaves the service layer.
type Merchant struct {
	ID           string
	Email        string
	Name         string
	PasswordHash string
	CreatedAt    time.Time
}

// Store persists merchants. MerchantByID returns a KindNotFound error when
// there is none. An email is no key of a merchant: the first owner may be a
// member, even the owner, of other merchants too.
type Store interface {
	CreateMerchant(ctx context.Context, m Merchant) error
	MerchantByID(ctx context.Context, id string) (Merchant, error)
}

// Hasher turns a password into a storable hash.
type Hasher interface {
	Hash(ctx context.Context, password string) (string, error)
}

// Service creates and finds merchants.
type Service struct {
	store  Store
	hasher Hasher
	now    func() time.Time
}

// NewService returns a Service; now is the clock (time.Now in production).
func NewService(store Store, hasher Hasher, now func() time.Time) *Service {
	return &Service{store: store, hasher: hasher, now: now}
}

// Password length bounds: long enough to resist guessing, short enough that
// hashing cost stays bounded.
const (
	MinPasswordLen = 8
	MaxPasswordLen = 256
)

// NormalizeEmail lower-cases and trims an address; member emails are unique
// per merchant in this form.
func NormalizeEmail(email string) string { return strings.ToLower(strings.TrimSpace(email)) }

// Create validates the input and stores a new merchant and its first owner.
// It returns KindInvalid errors naming the bad parameter. An email that
// belongs to members of other merchants is no obstacle: the owner is a
// membership of its own, with its own password.
func (s *Service) Create(ctx context.Context, email, password, name string) (Merchant, error) {
	email = NormalizeEmail(email)
	name = strings.TrimSpace(name)
	switch {
	case email == "":
		return Merchant{}, apperr.Missing("email")
	case !ValidEmail(email):
		return Merchant{}, apperr.Invalid("email", "Invalid email address.")
	case password == "":
		return Merchant{}, apperr.Missing("password")
	case utf8.RuneCountInString(password) < MinPasswordLen || len(password) > MaxPasswordLen:
		return Merchant{}, apperr.Invalid("password", "Password must be %d to %d characters.", MinPasswordLen, MaxPasswordLen)
	case name == "":
		return Merchant{}, apperr.Missing("name")
	case utf8.RuneCountInString(name) > 200:
		return Merchant{}, apperr.Invalid("name", "Name must be at most 200 characters.")
	}
	hash, err := s.hasher.Hash(ctx, password)
	if err != nil {
		return Merchant{}, err
	}
	m := Merchant{
		ID:           ids.New("mer"),
		Email:        email,
		Name:         name,
		PasswordHash: hash,
		CreatedAt:    s.now().UTC().Truncate(time.Millisecond),
	}
	if err := s.store.CreateMerchant(ctx, m); err != nil {
		return Merchant{}, err
	}
	return m, nil
}

// Get returns the merchant with the given id, or a KindNotFound error.
func (s *Service) Get(ctx context.Context, id string) (Merchant, error) {
	return s.store.MerchantByID(ctx, id)
}

// ValidEmail reports whether email is a plain, normalized address with a dotted domain.
func ValidEmail(email string) bool {
	if len(email) > 254 {
		return false
	}
	a, err := mail.ParseAddress(email)
	return err == nil && a.Address == email && strings.Contains(email[strings.LastIndexByte(email, '@'):], ".")
}
