package auth

import (
	"errors"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// SessionTTL is the life of a session token (api/openapi.yaml).
const SessionTTL = 24 * time.Hour

// Tokens issues and verifies session JWTs: HS256 only, with issuer, audience,
// subject (the merchant id), jti (the session id), iat and exp all required.
type Tokens struct {
	secret   []byte
	issuer   string
	audience string
	now      func() time.Time
	parser   *jwt.Parser
}

// NewTokens returns Tokens signing with secret (at least 32 bytes).
func NewTokens(secret []byte, issuer, audience string, now func() time.Time) *Tokens {
	return &Tokens{
		secret:   secret,
		issuer:   issuer,
		audience: audience,
		now:      now,
		parser: jwt.NewParser(
			jwt.WithValidMethods([]string{jwt.SigningMethodHS256.Alg()}),
			jwt.WithIssuer(issuer),
			jwt.WithAudience(audience),
			jwt.WithExpirationRequired(),
			jwt.WithIssuedAt(),
			jwt.WithTimeFunc(now),
			jwt.WithLeeway(5*time.Second),
		),
	}
}

// Claims are the verified contents of a session token.
type Claims struct {
	MerchantID string
	// MemberID is the member signed in ("" in tokens made before teams).
	MemberID  string
	SessionID string
	IssuedAt  time.Time
	ExpiresAt time.Time
}

// Issue signs a token for the session; the times are whole seconds as JWT requires.
func (t *Tokens) Issue(merchantID, memberID, sessionID string, issuedAt, expiresAt time.Time) (string, error) {
	claims := sessionClaims{
		RegisteredClaims: jwt.RegisteredClaims{
			Issuer:    t.issuer,
			Audience:  jwt.ClaimStrings{t.audience},
			Subject:   merchantID,
			ID:        sessionID,
			IssuedAt:  jwt.NewNumericDate(issuedAt),
			ExpiresAt: jwt.NewNumericDate(expiresAt),
		},
		Member: memberID,
	}
	return jwt.NewWithClaims(jwt.SigningMethodHS256, claims).SignedString(t.secret)
}

// sessionClaims are the registered claims and the member ("mem").
type sessionClaims struct {
	jwt.RegisteredClaims
	Member string `json:"mem,omitempty"`
}

// ErrBadToken is returned for any token that fails verification.
var ErrBadToken = errors.New("auth: invalid session token")

// Verify checks the signature, algorithm and every registered claim.
func (t *Tokens) Verify(token string) (Claims, error) {
	var sc sessionClaims
	_, err := t.parser.ParseWithClaims(token, &sc, func(*jwt.Token) (any, error) { return t.secret, nil })
	rc := sc.RegisteredClaims
	if err != nil || rc.Subject == "" || rc.ID == "" || rc.IssuedAt == nil {
		return Claims{}, ErrBadToken
	}
	return Claims{MerchantID: rc.Subject, MemberID: sc.Member, SessionID: rc.ID, IssuedAt: rc.IssuedAt.Time, ExpiresAt: rc.ExpiresAt.Time}, nil
}
