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

// MemberFinder finds the members signing in, and the member of a session:
// every session request reads its member, so a role change or a removal
// holds on every replica from the next request on. An address may belong to
// members of several merchants: MemberByEmail finds the one of a merchant
// (KindNotFound when there is none); MembershipsByEmail returns at most
// limit of them, of any merchants, those that can sign in first, then the
// oldest.
type MemberFinder interface {
	MemberByEmail(ctx context.Context, merchantID, email string) (members.Member, error)
	MembershipsByEmail(ctx context.Context, email string, limit int) ([]members.Member, error)
	MemberByID(ctx context.Context, merchantID, id string) (members.Member, error)
}

// PasswordChecker checks a password against stored hashes, one answer per
// hash; an empty hash is checked against a dummy that costs the same and
// never matches. Hasher is the one in use.
type PasswordChecker interface {
	VerifyEach(ctx context.Context, hashes []string, password string) ([]bool, error)
}

// Service logs merchants in and out and authenticates session tokens.
type Service struct {
	members MemberFinder
	store   Store
	cache   Cache
	hasher  PasswordChecker
	tokens  *Tokens
	now     func() time.Time
	log     *slog.Logger
}

// NewService wires the session service.
func NewService(m MemberFinder, store Store, cache Cache, hasher PasswordChecker, tokens *Tokens, now func() time.Time, log *slog.Logger) *Service {
	return &Service{members: m, store: store, cache: cache, hasher: hasher, tokens: tokens, now: now, log: log}
}

// activeCacheTTL bounds how long an "active" state may be served from the
// cache and so the memory of open sessions; a logout overwrites it before it
// commits (see Logout).
const activeCacheTTL = 5 * time.Minute

// Login is the result of a successful sign-in: a session, or, for a member
// with two-factor sign-in on, SecondFactor and no session yet (the caller
// opens one with OpenSession once the member's code is checked), or, when
// the password opened several memberships of the address and no merchant
// was named, Choices and no session: the members whose merchant the caller
// must choose from (and sign in again naming it).
type Login struct {
	Token        string
	ExpiresAt    time.Time
	Member       members.Member
	SecondFactor bool
	Choices      []members.Member
}

// SignInChecks is how many of an address's memberships a sign-in without a
// merchant checks the password against. Every such sign-in checks exactly
// this many hashes, padding with dummies, so that neither its answer nor
// its time tells whether the address belongs to no account, one or several.
// A sign-in that names its merchant checks one. An address with more
// memberships reaches the others by naming their merchant.
const SignInChecks = 3

// ErrInvalidCredentials is the one answer to a wrong email or a wrong password.
var errInvalidCredentials = apperr.Unauthenticated(apperr.CodeInvalidCredentials, "Invalid email or password.")

// Login checks the credentials and opens a 24-hour session, unless the
// member has two-factor sign-in on: then it answers SecondFactor without a
// session. A wrong email and a wrong password give the same error after the
// same amount of hashing.
//
// An address may belong to members of several merchants, each with its own
// password. merchantID, when set, names the merchant to sign in to: one
// hash is checked, the member's or a dummy. Without it, the password is
// checked against SignInChecks memberships of the address (see there): if
// it opens one, that member signs in; if it opens several, the answer is
// Choices, naming only those.
func (s *Service) Login(ctx context.Context, email, password, merchantID string) (Login, error) {
	if email == "" {
		return Login{}, apperr.Missing("email")
	}
	if password == "" {
		return Login{}, apperr.Missing("password")
	}
	if merchantID != "" && !ids.Valid("mer", merchantID) {
		return Login{}, apperr.Invalid("merchant", "merchant must be the id of an account (mer_...).")
	}
	if len(password) > merchants.MaxPasswordLen {
		return Login{}, errInvalidCredentials
	}
	email = merchants.NormalizeEmail(email)
	var candidates []members.Member
	checks := SignInChecks
	if merchantID != "" {
		checks = 1
		m, err := s.members.MemberByEmail(ctx, merchantID, email)
		switch {
		case err == nil:
			candidates = []members.Member{m}
		case apperr.KindOf(err) != apperr.KindNotFound:
			return Login{}, err
		}
	} else {
		var err error
		if candidates, err = s.members.MembershipsByEmail(ctx, email, SignInChecks); err != nil {
			return Login{}, err
		}
	}
	hashes := make([]string, checks) // "" for a dummy check
	for i, m := range candidates[:min(len(candidates), checks)] {
		hashes[i] = m.PasswordHash
	}
	ok, err := s.hasher.VerifyEach(ctx, hashes, password)
	if err != nil {
		return Login{}, err
	}
	var opened []members.Member
	for i, m := range candidates[:min(len(candidates), checks)] {
		if ok[i] {
			opened = append(opened, m)
		}
	}
	switch {
	case len(opened) == 0:
		return Login{}, errInvalidCredentials
	case len(opened) > 1:
		return Login{Choices: opened}, nil
	case opened[0].MFAEnabled:
		return Login{Member: opened[0], SecondFactor: true}, nil
	}
	return s.OpenSession(ctx, opened[0])
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
