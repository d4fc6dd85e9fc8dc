// Package auth signs merchants in and out and says who is calling. Passwords
// are argon2id hashes; sessions are HS256 JWTs whose state lives in Postgres
// (the truth) and is cached in Redis, so a logout is seen by every replica at
// once and survives a Redis flush or outage.
package auth

import (
	"context"
	"log/slog"
	"strings"
	"time"

	"github.com/gatehouse-pay/gatehouse/internal/apperr"
	"github.com/gatehouse-pay/gatehouse/internal/audit"
	"github.com/gatehouse-pay/gatehouse/internal/authz"
	"github.com/gatehouse-pay/gatehouse/internal/ids"
	"github.com/gatehouse-pay/gatehouse/internal/members"
	"github.com/gatehouse-pay/gatehouse/internal/merchants"
)

// Principal is the authenticated caller of a request: a dashboard session
// (SessionID set) or an API key (KeyID and Environment set): the secret key,
// or on POST /v1/tokens the public key (PublicKey set).
type Principal struct {
	MerchantID string
	// MemberID and Role name the signed-in member of a session.
	MemberID    string
	Role        string
	SessionID   string
	KeyID       string
	Environment string
	// Permissions are a key's: authz.SecretKey for a secret key, its own
	// for a restricted key.
	Permissions authz.Permissions
	// PublicKey is set when the caller used the key pair's public key,
	// which anyone can read in a checkout page.
	PublicKey bool
	// MFAPending marks a member whose account requires two-factor sign-in
	// and who has not set it up: the session may do only what
	// authz.Anyone needs (read its account, sign out, set up two-factor
	// sign-in) until it is on.
	MFAPending bool
}

// IsSession reports whether the caller used a session token.
func (p Principal) IsSession() bool { return p.SessionID != "" }

// Allows reports whether the caller may do what n needs: a member by its
// role, a key by its permissions.
func (p Principal) Allows(n authz.Need) bool {
	if p.IsSession() {
		if p.MFAPending {
			return n == authz.Anyone
		}
		return authz.RolePermissions(p.Role).Allows(n.Resource, n.Access)
	}
	return p.Permissions.Allows(n.Resource, n.Access)
}

// Session is one login. RevokedAt is set by logout.
type Session struct {
	ID         string
	MerchantID string
	MemberID   string
	CreatedAt  time.Time
	ExpiresAt  time.Time
	RevokedAt  *time.Time
}

// Store persists sessions. SessionByID returns KindNotFound when there is none.
// RevokeSession is idempotent and keeps the first revocation time.
type Store interface {
	CreateSession(ctx context.Context, s Session) error
	SessionByID(ctx context.Context, id string) (Session, error)
	RevokeSession(ctx context.Context, id string) (Session, error)
	DeleteSessionsExpiredBefore(ctx context.Context, t time.Time) (int64, error)
}

// Session states held by the cache (with the merchant id, see cacheValue).
const (
	StateActive  = "active"
	StateRevoked = "revoked"
)

// Cache is a shared read-through cache of session states. Errors mean the cache
// is unreachable; the service then asks the Store. FillSessionState writes only
// when no entry exists, so a fill racing a logout can never overwrite "revoked";
// SetSessionState always overwrites and is what a logout uses.
type Cache interface {
	SessionState(ctx context.Context, sessionID string) (state string, found bool, err error)
	FillSessionState(ctx context.Context, sessionID, state string, ttl time.Duration) error
	SetSessionState(ctx context.Context, sessionID, state string, ttl time.Duration) error
}

// MemberFinder finds the member signing in, and the member of a session:
// every session request reads its member, so a role change or a removal
// holds on every replica from the next request on.
type MemberFinder interface {
	MemberByEmail(ctx context.Context, email string) (members.Member, error)
	MemberByID(ctx context.Context, merchantID, id string) (members.Member, error)
}

// Service logs merchants in and out and authenticates session tokens.
type Service struct {
	members MemberFinder
	store   Store
	cache   Cache
	hasher  *Hasher
	tokens  *Tokens
	now     func() time.Time
	log     *slog.Logger
}

// NewService wires the session service.
func NewService(m MemberFinder, store Store, cache Cache, hasher *Hasher, tokens *Tokens, now func() time.Time, log *slog.Logger) *Service {
	return &Service{members: m, store: store, cache: cache, hasher: hasher, tokens: tokens, now: now, log: log}
}

// activeCacheTTL bounds how long an "active" state may be served from the
// cache and so the memory of open sessions; a logout overwrites it before it
// commits (see Logout).
const activeCacheTTL = 5 * time.Minute

// Login is the result of a successful sign-in: a session, or, for a member
// with two-factor sign-in on, SecondFactor and no session yet (the caller
// opens one with OpenSession once the member's code is checked).
type Login struct {
	Token        string
	ExpiresAt    time.Time
	Member       members.Member
	SecondFactor bool
}

// ErrInvalidCredentials is the one answer to a wrong email or a wrong password.
var errInvalidCredentials = apperr.Unauthenticated(apperr.CodeInvalidCredentials, "Invalid email or password.")

// Login checks the credentials and opens a 24-hour session, unless the
// member has two-factor sign-in on: then it answers SecondFactor without a
// session. A wrong email and a wrong password give the same error after the
// same amount of hashing.
func (s *Service) Login(ctx context.Context, email, password string) (Login, error) {
	if email == "" {
		return Login{}, apperr.Missing("email")
	}
	if password == "" {
		return Login{}, apperr.Missing("password")
	}
	if len(password) > merchants.MaxPasswordLen {
		return Login{}, errInvalidCredentials
	}
	m, err := s.members.MemberByEmail(ctx, merchants.NormalizeEmail(email))
	if err != nil && apperr.KindOf(err) != apperr.KindNotFound {
		return Login{}, err
	}
	ok, verr := s.hasher.Verify(ctx, m.PasswordHash, password) // m is zero when unknown: a dummy hash runs
	if verr != nil {
		return Login{}, verr
	}
	if err != nil || !ok {
		return Login{}, errInvalidCredentials
	}
	if m.MFAEnabled {
		return Login{Member: m, SecondFactor: true}, nil
	}
	return s.OpenSession(ctx, m)
}

// OpenSession opens a 24-hour session for m, whose credentials (and second
// factor, when it has one) the caller has checked.
func (s *Service) OpenSession(ctx context.Context, m members.Member) (Login, error) {
	issued := s.now().UTC().Truncate(time.Second)
	sess := Session{ID: ids.New("ses"), MerchantID: m.MerchantID, MemberID: m.ID, CreatedAt: issued, ExpiresAt: issued.Add(SessionTTL)}
	audit.SetActor(ctx, m.MerchantID, audit.ActorMember, m.ID)
	audit.SetObject(ctx, "session", sess.ID)
	if err := s.store.CreateSession(ctx, sess); err != nil {
		return Login{}, err
	}
	token, err := s.tokens.Issue(m.MerchantID, m.ID, sess.ID, sess.CreatedAt, sess.ExpiresAt)
	if err != nil {
		return Login{}, apperr.Internal(err)
	}
	if err := s.cache.FillSessionState(ctx, sess.ID, cacheValue(StateActive, m.MerchantID), activeCacheTTL); err != nil {
		s.log.WarnContext(ctx, "session cache unavailable", "op", "login", "err", err)
	}
	return Login{Token: token, ExpiresAt: sess.ExpiresAt, Member: m}, nil
}

var (
	errBadToken     = apperr.Unauthenticated(apperr.CodeInvalidToken, "Invalid or expired session token.")
	errRevokedToken = apperr.Unauthenticated(apperr.CodeTokenRevoked, "This session token has been revoked.")
)

// VerifyToken checks a token's signature and claims without looking up its state.
func (s *Service) VerifyToken(token string) (Claims, error) {
	c, err := s.tokens.Verify(token)
	if err != nil {
		return Claims{}, errBadToken
	}
	return c, nil
}

// Authenticate verifies a session token and checks that its session is still
// open: the cache answers when it can, Postgres otherwise, so a logged-out
// token is refused even when Redis is down or was flushed.
func (s *Service) Authenticate(ctx context.Context, token string) (Principal, error) {
	c, err := s.VerifyToken(token)
	if err != nil {
		return Principal{}, err
	}
	p := Principal{MerchantID: c.MerchantID, MemberID: c.MemberID, SessionID: c.SessionID}
	if p.MemberID == "" { // a token issued before teams: its merchant's first owner
		p.MemberID = members.OwnerID(c.MerchantID)
	}

	cached, found, cerr := s.cache.SessionState(ctx, c.SessionID)
	if cerr == nil && found {
		state, merchantID, _ := strings.Cut(cached, ":")
		switch {
		case merchantID != c.MerchantID:
			return Principal{}, errBadToken
		case state == StateActive:
			return s.withMember(ctx, p)
		}
		return Principal{}, errRevokedToken
	}

	sess, err := s.store.SessionByID(ctx, c.SessionID)
	if err != nil {
		if apperr.KindOf(err) == apperr.KindNotFound {
			return Principal{}, errBadToken
		}
		return Principal{}, err
	}
	if sess.MerchantID != c.MerchantID {
		return Principal{}, errBadToken
	}
	state := StateActive
	if sess.RevokedAt != nil {
		state = StateRevoked
	}
	if cerr == nil {
		if err := s.cache.FillSessionState(ctx, sess.ID, cacheValue(state, sess.MerchantID), s.ttl(state, sess.ExpiresAt)); err != nil {
			s.log.WarnContext(ctx, "session cache unavailable", "op", "fill", "err", err)
		}
	}
	if state == StateRevoked {
		return Principal{}, errRevokedToken
	}
	return s.withMember(ctx, p)
}

// withMember completes the principal of an open session with its member's
// current role; a removed member's sessions are revoked.
func (s *Service) withMember(ctx context.Context, p Principal) (Principal, error) {
	m, err := s.members.MemberByID(ctx, p.MerchantID, p.MemberID)
	switch {
	case apperr.KindOf(err) == apperr.KindNotFound:
		return Principal{}, errBadToken
	case err != nil:
		return Principal{}, err
	case m.RemovedAt != nil:
		return Principal{}, errRevokedToken
	}
	p.Role = m.Role
	p.MFAPending = m.MFARequired && !m.MFAEnabled
	return p, nil
}

// cacheValue is a session's cache entry: its state and the merchant it belongs
// to, so a token naming another merchant is refused even on a cache hit.
func cacheValue(state, merchantID string) string { return state + ":" + merchantID }

func (s *Service) ttl(state string, expiresAt time.Time) time.Duration {
	left := expiresAt.Sub(s.now()) + time.Minute
	if state == StateActive {
		return max(time.Second, min(activeCacheTTL, left))
	}
	return max(time.Second, left)
}

// Logout ends the caller's session so that every replica refuses its token
// from the next request on. It marks the session revoked in the shared cache
// first, for longer than any token lives, and commits the revocation in
// Postgres only once that write succeeded: replicas serve "active" only from
// that cache, so when the write fails nothing is revoked and the error is
// KindUnavailable (the client retries with the same token). If Postgres fails
// after the cache write, the token is already refused everywhere.
func (s *Service) Logout(ctx context.Context, p Principal) error {
	if err := s.cache.SetSessionState(ctx, p.SessionID, cacheValue(StateRevoked, p.MerchantID), SessionTTL+time.Minute); err != nil {
		s.log.ErrorContext(ctx, "session not revoked: the session cache cannot be updated", "session_id", p.SessionID, "err", err)
		return apperr.Unavailable(err)
	}
	_, err := s.store.RevokeSession(ctx, p.SessionID)
	return err
}

// PruneExpired deletes sessions that expired more than a day ago and returns how many.
func (s *Service) PruneExpired(ctx context.Context) (int64, error) {
	return s.store.DeleteSessionsExpiredBefore(ctx, s.now().Add(-24*time.Hour))
}
