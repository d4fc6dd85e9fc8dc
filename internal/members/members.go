// Package members holds a merchant's team: the people who sign in to it,
// each with an email, a password and a role (internal/authz says what each
// role may do). A member is invited by an owner or admin and sets a
// password through a single-use setup link; removing a member ends their
// sessions at once (the store revokes them in the same transaction, and
// every session request reads the member).
package members

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/gatehouse-pay/gatehouse/internal/apperr"
	"github.com/gatehouse-pay/gatehouse/internal/authz"
	"github.com/gatehouse-pay/gatehouse/internal/ids"
	"github.com/gatehouse-pay/gatehouse/internal/listing"
	"github.com/gatehouse-pay/gatehouse/internal/merchants"
)

// Member is one person of a merchant's team. PasswordHash is empty until
// the person used the setup link; it never leaves the service layer.
type Member struct {
	ID           string
	MerchantID   string
	Email        string
	Role         string
	PasswordHash string
	// MFAEnabled is set once the member confirmed a TOTP authenticator
	// (internal/mfa); MFARequired when the account requires two-factor
	// sign-in of every member.
	MFAEnabled  bool
	MFARequired bool
	CreatedAt   time.Time
	RemovedAt   *time.Time
}

// OwnerID is the id of the member a merchant is created with (and that
// every merchant made before teams existed has).
func OwnerID(merchantID string) string { return "mem_" + strings.TrimPrefix(merchantID, "mer_") }

// Store persists members. MemberByID and MemberByEmail return KindNotFound
// when there is none (removed members are not found by email). Emails are
// unique per merchant: CreateMember returns KindConflict when the email
// belongs to a current member of the same merchant, and never because of a
// member of another.
// UpdateRole and RemoveMember run check on the member and the account's
// current owners, under a lock that keeps them current until the change
// commits, and change nothing when check fails; RemoveMember also revokes
// the member's sessions in the same transaction. CompleteSetup sets the
// password of the member whose unexpired setup digest matches and clears
// the digest, or returns KindNotFound.
type Store interface {
	CreateMember(ctx context.Context, m Member, setupDigest []byte, setupExpires time.Time) error
	ListMembers(ctx context.Context, merchantID string, p listing.Params) (listing.Page[Member], error)
	MemberByID(ctx context.Context, merchantID, id string) (Member, error)
	MemberByEmail(ctx context.Context, merchantID, email string) (Member, error)
	CompleteSetup(ctx context.Context, digest []byte, passwordHash string, now time.Time) (Member, error)
	UpdateRole(ctx context.Context, merchantID, id, role string, now time.Time, check func(m Member, owners int) error) (Member, error)
	RemoveMember(ctx context.Context, merchantID, id string, now time.Time, check func(m Member, owners int) error) (Member, error)
}

// Hasher turns a password into a storable hash.
type Hasher interface {
	Hash(ctx context.Context, password string) (string, error)
}

// Service manages a merchant's team.
type Service struct {
	store  Store
	hasher Hasher
	now    func() time.Time
}

// NewService wires the team service.
func NewService(store Store, hasher Hasher, now func() time.Time) *Service {
	return &Service{store: store, hasher: hasher, now: now}
}

// SetupTTL is how long an invitation's setup link works.
const SetupTTL = 72 * time.Hour

// Actor is the member making a change.
type Actor struct {
	MerchantID string
	MemberID   string
	Role       string
}

// Invited is a new member and its setup token, which exists only here.
type Invited struct {
	Member Member
	Token  string
}

// Digest is the stored form of a setup token.
func Digest(token string) []byte {
	d := sha256.Sum256([]byte(token))
	return d[:]
}

var (
	errOwnersOnly = &apperr.Error{Kind: apperr.KindForbidden, Code: apperr.CodePermissionDenied,
		Message: "Only an owner can add, change or remove an owner."}
	errLastOwner = &apperr.Error{Kind: apperr.KindConflict, Code: apperr.CodeInvalidState,
		Message: "An account keeps at least one owner: make another member owner first."}
	errBadSetup = apperr.Invalid("token", "This setup link is invalid, used or expired. Ask an owner or admin for a new invitation.")
)

// Invite adds a member who signs in once they set a password with the
// returned token (valid SetupTTL, once). Only an owner invites an owner.
// An address that is a member of the same merchant already is refused; one
// that is a member of other merchants is invited like any other, so that
// the answer tells nothing about other accounts: the person gets a
// membership of its own here, with its own password and second factor.
func (s *Service) Invite(ctx context.Context, a Actor, email, role string) (Invited, error) {
	email = merchants.NormalizeEmail(email)
	switch {
	case email == "":
		return Invited{}, apperr.Missing("email")
	case !merchants.ValidEmail(email):
		return Invited{}, apperr.Invalid("email", "Invalid email address.")
	case role == "":
		return Invited{}, apperr.Missing("role")
	case !authz.ValidRole(role):
		return Invited{}, apperr.Invalid("role", "role must be one of %s.", strings.Join(authz.Roles, ", "))
	case role == authz.Owner && a.Role != authz.Owner:
		return Invited{}, errOwnersOnly
	}
	token := newToken()
	now := s.now().UTC().Truncate(time.Millisecond)
	m := Member{ID: ids.New("mem"), MerchantID: a.MerchantID, Email: email, Role: role, CreatedAt: now}
	if err := s.store.CreateMember(ctx, m, Digest(token), now.Add(SetupTTL)); err != nil {
		if apperr.KindOf(err) == apperr.KindConflict {
			return Invited{}, apperr.Invalid("email", "This email already belongs to a member.")
		}
		return Invited{}, err
	}
	return Invited{Member: m, Token: token}, nil
}

// Setup sets the password of the invited member whose token this is. The
// token works once.
func (s *Service) Setup(ctx context.Context, token, password string) (Member, error) {
	switch {
	case token == "":
		return Member{}, apperr.Missing("token")
	case len(token) > 128:
		return Member{}, errBadSetup
	case password == "":
		return Member{}, apperr.Missing("password")
	case utf8.RuneCountInString(password) < merchants.MinPasswordLen || len(password) > merchants.MaxPasswordLen:
		return Member{}, apperr.Invalid("password", "Password must be %d to %d characters.", merchants.MinPasswordLen, merchants.MaxPasswordLen)
	}
	hash, err := s.hasher.Hash(ctx, password)
	if err != nil {
		return Member{}, err
	}
	m, err := s.store.CompleteSetup(ctx, Digest(token), hash, s.now().UTC())
	if apperr.KindOf(err) == apperr.KindNotFound {
		return Member{}, errBadSetup
	}
	return m, err
}

// List returns one page of the team, newest first.
func (s *Service) List(ctx context.Context, merchantID string, p listing.Params) (listing.Page[Member], error) {
	return s.store.ListMembers(ctx, merchantID, p)
}

// Get returns one member of the merchant, or not_found.
func (s *Service) Get(ctx context.Context, merchantID, id string) (Member, error) {
	if !ids.Valid("mem", id) {
		return Member{}, apperr.NotFound("member")
	}
	return s.store.MemberByID(ctx, merchantID, id)
}

// SetRole changes a member's role. Only an owner makes, changes or demotes
// an owner, and the last owner stays one.
func (s *Service) SetRole(ctx context.Context, a Actor, id, role string) (Member, error) {
	switch {
	case role == "":
		return Member{}, apperr.Missing("role")
	case !authz.ValidRole(role):
		return Member{}, apperr.Invalid("role", "role must be one of %s.", strings.Join(authz.Roles, ", "))
	case !ids.Valid("mem", id):
		return Member{}, apperr.NotFound("member")
	case role == authz.Owner && a.Role != authz.Owner:
		return Member{}, errOwnersOnly
	}
	return s.store.UpdateRole(ctx, a.MerchantID, id, role, s.now().UTC(), func(m Member, owners int) error {
		switch {
		case m.Role == authz.Owner && a.Role != authz.Owner:
			return errOwnersOnly
		case m.Role == authz.Owner && role != authz.Owner && owners <= 1:
			return errLastOwner
		}
		return nil
	})
}

// Remove removes a member and ends every session it has. Only an owner
// removes an owner, and the last owner stays.
func (s *Service) Remove(ctx context.Context, a Actor, id string) (Member, error) {
	if !ids.Valid("mem", id) {
		return Member{}, apperr.NotFound("member")
	}
	return s.store.RemoveMember(ctx, a.MerchantID, id, s.now().UTC(), func(m Member, owners int) error {
		switch {
		case m.Role == authz.Owner && a.Role != authz.Owner:
			return errOwnersOnly
		case m.Role == authz.Owner && owners <= 1:
			return errLastOwner
		}
		return nil
	})
}

// newToken is 32 random bytes, URL-safe.
func newToken() string {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		panic(err) // crypto/rand never fails on supported platforms
	}
	return base64.RawURLEncoding.EncodeToString(b)
}
