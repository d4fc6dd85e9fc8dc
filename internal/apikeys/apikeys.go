// Package apikeys issues, authenticates and revokes API key pairs. A secret key
// is shown once, at creation, and stored only as its SHA-256 digest. A shared
// read-through cache maps the digests of existing keys to them; a revoke marks
// the key revoked in that cache before it commits in Postgres, and fails if it
// cannot, so a revoked key is refused by every replica at once. Postgres stays
// the truth when the cache is down or was flushed. Digests that match no key
// are never cached: a caller choosing them could grow the cache without bound
// (the per-address limit of failed authentications bounds their lookups).
//
// A key is made (created or rolled) by a member and records it; it never
// holds more than that member's role (Maker).
package apikeys

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"log/slog"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/gatehouse-pay/gatehouse/internal/apperr"
	"github.com/gatehouse-pay/gatehouse/internal/authz"
	"github.com/gatehouse-pay/gatehouse/internal/ids"
	"github.com/gatehouse-pay/gatehouse/internal/listing"
)

// Environments a key can carry. Live is refused in this instance.
const (
	Sandbox = "sandbox"
	Live    = "live"
)

// Key prefixes of api/openapi.yaml.
const (
	SecretTestPrefix = "sk_test_"
	SecretLivePrefix = "sk_live_"
	PublicTestPrefix = "pk_test_"
	PublicPrefix     = "pk_"
)

// Types of key.
const (
	TypeSecret     = "secret"
	TypeRestricted = "restricted"
)

// Key is the stored half of a key pair; the secret itself is never kept.
type Key struct {
	ID           string
	MerchantID   string
	Name         string
	Environment  string
	PublicKey    string
	SecretDigest []byte
	SecretLast4  string
	CreatedAt    time.Time
	RevokedAt    *time.Time
	// Permissions are a restricted key's (empty when it may do nothing);
	// nil for a secret key.
	Permissions authz.Permissions
	// ExpiresAt is set when the key was rolled: it is refused from then on,
	// as if revoked.
	ExpiresAt *time.Time
	// CreatedBy is the member who made the key, by creating it or rolling
	// the key it replaced; "" for a key made before makers were recorded.
	CreatedBy string
}

// Type is TypeSecret or TypeRestricted.
func (k Key) Type() string {
	if k.Permissions != nil {
		return TypeRestricted
	}
	return TypeSecret
}

// Access is what the key may do (Entry.Access).
func (k Key) Access() authz.Permissions { return entryOf(k).Access() }

// Expired reports whether the key is past its expiry at now.
func (k Key) Expired(now time.Time) bool { return k.ExpiresAt != nil && !now.Before(*k.ExpiresAt) }

// entryOf is what the cache knows of k.
func entryOf(k Key) Entry {
	e := Entry{KeyID: k.ID, MerchantID: k.MerchantID, Environment: k.Environment, Revoked: k.RevokedAt != nil, Permissions: k.Permissions}
	if k.ExpiresAt != nil {
		e.ExpiresAt = *k.ExpiresAt
	}
	return e
}

// Filter narrows a list of keys. CreatedBy keeps the keys that member made;
// Active keeps the keys that are neither revoked nor rolled (a rolled key is
// on its way out).
type Filter struct {
	CreatedBy string
	Active    bool
}

// Store persists keys. KeyByDigest, KeyByID and RevokeKey return
// KindNotFound when there is no such key (for that merchant). RevokeKey is
// idempotent and keeps the first revocation time. RollKey stores next and
// sets old's expiry (and, when revoke is set, its revocation) to expiresAt
// in one transaction; an old key that is revoked or has an expiry already
// is a KindConflict invalid_state, and nothing is stored.
type Store interface {
	RollKey(ctx context.Context, merchantID, oldID string, next Key, expiresAt time.Time, revoke bool) (Key, error)
	CreateKey(ctx context.Context, k Key) error
	ListKeys(ctx context.Context, merchantID string, f Filter, p listing.Params) (listing.Page[Key], error)
	KeyByDigest(ctx context.Context, digest []byte) (Key, error)
	KeyByPublicKey(ctx context.Context, publicKey string) (Key, error)
	KeyByID(ctx context.Context, merchantID, id string) (Key, error)
	RevokeKey(ctx context.Context, merchantID, id string) (Key, error)
}

// Entry is what the cache knows of the digest of an existing key.
type Entry struct {
	KeyID       string
	MerchantID  string
	Environment string
	Revoked     bool
	// Permissions are a restricted key's; nil for a secret key.
	Permissions authz.Permissions
	// ExpiresAt is a rolled key's expiry; zero when it has none.
	ExpiresAt time.Time
}

// Expired reports whether the key is past its expiry at now.
func (e Entry) Expired(now time.Time) bool { return !e.ExpiresAt.IsZero() && !now.Before(e.ExpiresAt) }

// Access is what the key may do: its permissions if it is restricted,
// everything a key reaches if it is a secret key.
func (e Entry) Access() authz.Permissions {
	if e.Permissions != nil {
		return e.Permissions
	}
	return authz.SecretKey
}

// Cache is the shared digest cache. Errors mean it is unreachable. Fill writes
// only when no entry exists, so a fill racing a revoke can never bring the key
// back; Set always overwrites and is what a revoke uses.
type Cache interface {
	Key(ctx context.Context, digest []byte) (Entry, bool, error)
	FillKey(ctx context.Context, digest []byte, e Entry, ttl time.Duration) error
	SetKey(ctx context.Context, digest []byte, e Entry, ttl time.Duration) error
}

// Cache lifetimes. A revoke overwrites the entry before it commits, so an
// "active" entry is never served after a revoke was answered; the TTLs bound
// memory. When a "revoked" entry expires, the next lookup reads Postgres.
const (
	activeTTL  = 10 * time.Minute
	revokedTTL = 24 * time.Hour
)

// Service manages key pairs.
type Service struct {
	store Store
	cache Cache
	now   func() time.Time
	log   *slog.Logger
}

// NewService wires the key service.
func NewService(store Store, cache Cache, now func() time.Time, log *slog.Logger) *Service {
	return &Service{store: store, cache: cache, now: now, log: log}
}

// Digest is the stored form of a secret key.
func Digest(secret string) []byte {
	d := sha256.Sum256([]byte(secret))
	return d[:]
}

const alphabet = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"

// randomToken returns n characters of base62 from crypto/rand (about 5.95 bits each).
func randomToken(n int) string {
	out := make([]byte, n)
	buf := make([]byte, n*2)
	for i := 0; i < n; {
		if _, err := rand.Read(buf); err != nil {
			panic(err) // crypto/rand never fails on supported platforms
		}
		for _, b := range buf {
			if b < 248 && i < n { // 248 = 4*62: unbiased
				out[i] = alphabet[int(b)%62]
				i++
			}
		}
	}
	return string(out)
}

// Created is a new key with its secret, which exists only in this value.
type Created struct {
	Key    Key
	Secret string
}

// Params are what a new key is made of. Environment "" means sandbox; Type
// "" means a secret key. A restricted key does what Permissions grant and
// nothing else (nothing at all when they are empty); a secret key takes no
// permissions. Maker is the member making it.
type Params struct {
	Environment string
	Name        string
	Type        string
	Permissions authz.Permissions
	Maker       Maker
}

// Maker is the member who creates or rolls a key. A key never holds more
// than its maker's role: a secret key may do everything a key can, so only
// a role that may do all of it (owner, admin) makes one; any other role
// makes restricted keys whose access to every resource is at most the
// role's. The key records MemberID as its creator.
type Maker struct {
	MemberID string
	Role     string
}

// mayMake refuses, with permission_denied, a key of type typ whose access
// is beyond the maker's role. For a new key the error names the request
// field at fault; a roll names none (the key is what it is).
func (m Maker) mayMake(typ string, access authz.Permissions, rolling bool) error {
	role := authz.RolePermissions(m.Role)
	r, beyond := access.Beyond(role)
	if !beyond {
		return nil
	}
	const rule = "a key never holds more than the role of the member who makes it"
	e := &apperr.Error{Kind: apperr.KindForbidden, Code: apperr.CodePermissionDenied}
	switch {
	case rolling:
		e.Message = "This " + typ + " key has " + access[r].String() + " access to " + string(r) + ", more than the " + m.Role +
			" role, so a " + m.Role + " cannot roll it: " + rule + ". Ask an owner or admin."
	case typ == TypeSecret:
		e.Param = "type"
		e.Message = "Only owners and admins make secret keys: " + rule + ". " +
			"Make a restricted key (\"type\": \"restricted\") with permissions within the " + m.Role + " role."
	default:
		e.Param = "permissions." + string(r)
		has := role[r].String() + " access"
		if role[r] == authz.None {
			has = "no access"
		}
		e.Message = "The " + m.Role + " role has " + has + " to " + string(r) + ", so a key it makes cannot have " +
			access[r].String() + " access: " + rule + "."
	}
	return e
}

// Create issues a key pair for the merchant, made by p.Maker. Environment
// "live" is refused with live_mode_disabled; a key beyond the maker's role
// with permission_denied (see Maker), and nothing is stored.
func (s *Service) Create(ctx context.Context, merchantID string, p Params) (Created, error) {
	c, err := s.newKey(merchantID, p)
	if err != nil {
		return Created{}, err
	}
	if err := s.store.CreateKey(ctx, c.Key); err != nil {
		return Created{}, err
	}
	return c, nil
}

// newKey checks the parameters and makes a key pair.
func (s *Service) newKey(merchantID string, p Params) (Created, error) {
	name := p.Name
	switch p.Environment {
	case "", Sandbox:
	case Live:
		return Created{}, apperr.LiveMode()
	default:
		return Created{}, apperr.Invalid("environment", "environment must be sandbox or live.")
	}
	name = strings.TrimSpace(name)
	if utf8.RuneCountInString(name) > 100 {
		return Created{}, apperr.Invalid("name", "name must be at most 100 characters.")
	}
	prefix, perms := SecretTestPrefix, authz.Permissions(nil)
	switch p.Type {
	case "", TypeSecret:
		if p.Permissions != nil {
			return Created{}, apperr.Invalid("permissions", "permissions are for restricted keys: send \"type\": \"restricted\" with them.")
		}
	case TypeRestricted:
		prefix, perms = RestrictedTestPrefix, authz.Permissions{}
		for r, a := range p.Permissions {
			if a > authz.None {
				perms[r] = a
			}
		}
	default:
		return Created{}, apperr.Invalid("type", "type must be secret or restricted.")
	}
	typ, access := TypeSecret, authz.SecretKey
	if perms != nil {
		typ, access = TypeRestricted, perms
	}
	if err := p.Maker.mayMake(typ, access, false); err != nil {
		return Created{}, err
	}
	secret := newSecret(prefix)
	k := Key{
		Permissions:  perms,
		ID:           ids.New("key"),
		MerchantID:   merchantID,
		Name:         name,
		Environment:  Sandbox,
		PublicKey:    PublicTestPrefix + randomToken(24),
		SecretDigest: Digest(secret),
		SecretLast4:  secret[len(secret)-4:],
		CreatedAt:    s.now().UTC().Truncate(time.Millisecond),
		CreatedBy:    p.Maker.MemberID,
	}
	return Created{Key: k, Secret: secret}, nil
}

// List returns one page of the merchant's keys that f keeps, newest first.
// A CreatedBy that is not a member id is parameter_invalid on created_by.
func (s *Service) List(ctx context.Context, merchantID string, f Filter, p listing.Params) (listing.Page[Key], error) {
	if f.CreatedBy != "" && !ids.Valid("mem", f.CreatedBy) {
		return listing.Page[Key]{}, apperr.Invalid("created_by", "created_by must be a member id (mem_...).")
	}
	return s.store.ListKeys(ctx, merchantID, f, p)
}

// maxSecretLen bounds the secrets that are looked up at all.
const maxSecretLen = 128

var (
	errUnknownKey = apperr.Unauthenticated(apperr.CodeInvalidToken, "Invalid API key.")
	errRevokedKey = apperr.Unauthenticated(apperr.CodeTokenRevoked, "This API key has been revoked.")
)

// Authenticate resolves a secret key to its entry. It returns invalid_token
// for an unknown key, token_revoked for a revoked one and live_mode_disabled
// for a live key.
func (s *Service) Authenticate(ctx context.Context, secret string) (Entry, error) {
	if strings.HasPrefix(secret, SecretLivePrefix) || strings.HasPrefix(secret, RestrictedLivePrefix) {
		return Entry{}, apperr.LiveMode()
	}
	if !Lookable(secret) {
		return Entry{}, errUnknownKey
	}
	digest := Digest(secret)
	e, found, cerr := s.cache.Key(ctx, digest)
	if cerr != nil || !found {
		k, err := s.store.KeyByDigest(ctx, digest)
		switch {
		case err == nil:
			e = entryOf(k)
		case apperr.KindOf(err) == apperr.KindNotFound:
			return Entry{}, errUnknownKey // not cached: see the package comment
		default:
			return Entry{}, err
		}
		if cerr == nil {
			if err := s.cache.FillKey(ctx, digest, e, s.ttlOf(e)); err != nil {
				s.log.WarnContext(ctx, "key cache unavailable", "op", "fill", "err", err)
			}
		}
	}
	switch {
	case e.Revoked, e.Expired(s.now()):
		return Entry{}, errRevokedKey
	case e.Environment == Live:
		return Entry{}, apperr.LiveMode()
	}
	return e, nil
}

// Usable reports whether a cached entry lets its key in now: not revoked,
// not expired, a sandbox key.
func (s *Service) Usable(e Entry) bool {
	return !e.Revoked && !e.Expired(s.now()) && e.Environment == Sandbox
}

// PublicLivePrefix is a live public key's prefix.
const PublicLivePrefix = "pk_live_"

// AuthenticatePublic resolves a public key, which only creates card tokens
// (api/openapi.yaml), to its key pair's entry. It
// returns invalid_token for an unknown key, token_revoked for a key pair that
// was revoked and live_mode_disabled for a live key. Public keys are not
// secret, so they are looked up in Postgres without a cache; the per-address
// limit in front bounds the lookups.
func (s *Service) AuthenticatePublic(ctx context.Context, publicKey string) (Entry, error) {
	if strings.HasPrefix(publicKey, PublicLivePrefix) {
		return Entry{}, apperr.LiveMode()
	}
	if !strings.HasPrefix(publicKey, PublicTestPrefix) || len(publicKey) > maxSecretLen {
		return Entry{}, errUnknownKey
	}
	k, err := s.store.KeyByPublicKey(ctx, publicKey)
	switch {
	case apperr.KindOf(err) == apperr.KindNotFound:
		return Entry{}, errUnknownKey
	case err != nil:
		return Entry{}, err
	case k.RevokedAt != nil, k.Expired(s.now()):
		return Entry{}, errRevokedKey
	case k.Environment == Live:
		return Entry{}, apperr.LiveMode()
	}
	return Entry{KeyID: k.ID, MerchantID: k.MerchantID, Environment: k.Environment}, nil
}

func (s *Service) ttlOf(e Entry) time.Duration {
	if e.Revoked || e.Expired(s.now()) {
		return revokedTTL
	}
	return activeTTL
}

// Revoke revokes one of the merchant's keys so that every replica refuses it
// from the next request on. It marks the key revoked in the shared cache
// first and commits the revocation in Postgres only once that write
// succeeded: replicas serve "active" only from that cache, so when the write
// fails nothing is revoked and the error is KindUnavailable (the caller
// retries; a revoke is idempotent). If Postgres fails after the cache write,
// the key is already refused and the retry completes the revocation.
// Revoking a revoked key returns it unchanged. A key of another merchant is
// not found.
func (s *Service) Revoke(ctx context.Context, merchantID, id string) (Key, error) {
	if !ids.Valid("key", id) {
		return Key{}, apperr.NotFound("api_key")
	}
	k, err := s.store.KeyByID(ctx, merchantID, id)
	if err != nil {
		return Key{}, err
	}
	e := entryOf(k)
	e.Revoked = true
	if err := s.cache.SetKey(ctx, k.SecretDigest, e, revokedTTL); err != nil {
		s.log.ErrorContext(ctx, "key not revoked: the key cache cannot be updated", "key_id", k.ID, "err", err)
		return Key{}, apperr.Unavailable(err)
	}
	return s.store.RevokeKey(ctx, merchantID, id)
}
