// Package mfa is two-factor sign-in (docs/team.md): a member enrolls a TOTP
// authenticator (RFC 6238: SHA-1, 6 digits, 30-second steps), confirms it
// with a first code and receives ten single-use recovery codes; from then on
// a sign-in with the right password gets a short-lived challenge, which a
// code turns into a session. An owner may require two-factor sign-in of
// every member of the account.
//
// The secret is sealed with ENCRYPTION_KEY (internal/keyring), bound to the
// member; recovery codes and challenges are kept as SHA-256 digests. A code
// is accepted for the current step or the one either side, and only for a
// step later than the last one accepted, so the same code never works twice.
package mfa

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base32"
	"encoding/base64"
	"strings"
	"time"

	"github.com/pquerna/otp"
	"github.com/pquerna/otp/hotp"
	"github.com/pquerna/otp/totp"

	"github.com/gatehouse-pay/gatehouse/internal/apperr"
	"github.com/gatehouse-pay/gatehouse/internal/keyring"
	"github.com/gatehouse-pay/gatehouse/internal/members"
)

// The TOTP parameters (api/openapi.yaml).
const (
	Issuer = "Gatehouse"
	Period = 30 * time.Second
	Digits = 6
	// Skew is how many steps either side of the current one are accepted.
	Skew = 1
	// RecoveryCodes is how many recovery codes a confirmation issues.
	RecoveryCodes = 10
	// ChallengeTTL is how long the second step of a sign-in waits.
	ChallengeTTL = 5 * time.Minute
	// ChallengeFailures is how many codes a challenge checks at most: each
	// check is counted before the code is compared, so concurrent wrong
	// codes cannot check more, and the last wrong one ends it.
	ChallengeFailures = 5
)

// Challenge is the stored second step of a sign-in.
type Challenge struct {
	Digest     []byte
	MerchantID string
	MemberID   string
	ExpiresAt  time.Time
}

// Store persists secrets, recovery codes, challenges and the account's
// policy. SetPendingTOTP returns ErrEnabled for a member who has
// two-factor sign-in on; EnableTOTP returns ErrNoEnrollment when the
// pending secret is no longer the one given. PendingTOTP, TOTPSecret and
// MFAChallenge return KindNotFound when there is none. AttemptMFAChallenge
// counts one code against the unexpired challenge in one atomic step, when
// it has counted fewer than max, and returns how many it may still count;
// KindNotFound when it may not (gone, expired or spent).
type Store interface {
	SetPendingTOTP(ctx context.Context, merchantID, memberID string, sealed []byte, now time.Time) error
	PendingTOTP(ctx context.Context, merchantID, memberID string) ([]byte, error)
	EnableTOTP(ctx context.Context, merchantID, memberID string, pending []byte, step int64, recovery [][]byte, now time.Time) error
	TOTPSecret(ctx context.Context, merchantID, memberID string) ([]byte, error)
	UseTOTPStep(ctx context.Context, memberID string, step int64) (bool, error)
	UseRecoveryCode(ctx context.Context, memberID string, digest []byte, now time.Time) (bool, error)
	RecoveryCodesLeft(ctx context.Context, memberID string) (int, error)
	CreateMFAChallenge(ctx context.Context, c Challenge) error
	MFAChallenge(ctx context.Context, digest []byte, now time.Time) (Challenge, error)
	AttemptMFAChallenge(ctx context.Context, digest []byte, now time.Time, max int) (left int, err error)
	ConsumeMFAChallenge(ctx context.Context, digest []byte, now time.Time) (bool, error)
	DeleteMFAChallengesExpiredBefore(ctx context.Context, t time.Time) (int64, error)
	MFARequired(ctx context.Context, merchantID string) (bool, error)
	SetMFARequired(ctx context.Context, merchantID string, required bool) error
}

// Errors of the API contract.
var (
	ErrEnabled = &apperr.Error{Kind: apperr.KindConflict, Code: apperr.CodeInvalidState,
		Message: "Two-factor sign-in is already on for this member."}
	ErrNoEnrollment = &apperr.Error{Kind: apperr.KindConflict, Code: apperr.CodeInvalidState,
		Message: "There is no two-factor setup to confirm: start one with POST /v1/me/mfa/totp."}
	// ErrWrongCode is the answer to a wrong, used or replayed code at sign-in.
	ErrWrongCode = apperr.Unauthenticated(apperr.CodeInvalidCredentials, "Invalid two-factor code.")
	// ErrBadChallenge is the answer to an unknown, used or expired challenge.
	ErrBadChallenge = apperr.Unauthenticated(apperr.CodeInvalidToken, "This sign-in has expired or was already completed. Sign in again with your password.")
	errCodeFormat   = apperr.Invalid("code", "Enter the %d-digit code your authenticator app shows.", Digits)
	errWrongConfirm = apperr.Invalid("code", "That code does not match. Check your device's clock and enter the code your authenticator app shows now.")
	errOwnFirst     = &apperr.Error{Kind: apperr.KindConflict, Code: apperr.CodeInvalidState,
		Message: "Turn on two-factor sign-in for yourself first (POST /v1/me/mfa/totp, or the dashboard's Security page), then require it of everyone."}
)

// Service enrolls and checks second factors.
type Service struct {
	store Store
	keys  *keyring.Keyring
	now   func() time.Time
}

// NewService wires two-factor sign-in.
func NewService(store Store, keys *keyring.Keyring, now func() time.Time) *Service {
	return &Service{store: store, keys: keys, now: now}
}

// Enrollment is a pending secret, shown to its member to load into an
// authenticator app.
type Enrollment struct {
	Secret string // base32, no padding
	URL    string // otpauth://totp/...
}

// Enroll makes a new pending secret for m, replacing any pending one.
// A member with two-factor sign-in on gets ErrEnabled.
func (s *Service) Enroll(ctx context.Context, m members.Member) (Enrollment, error) {
	if m.MFAEnabled {
		return Enrollment{}, ErrEnabled
	}
	secret := make([]byte, 20)
	if _, err := rand.Read(secret); err != nil {
		return Enrollment{}, apperr.Internal(err)
	}
	e, err := enrollment(secret, m.Email)
	if err != nil {
		return Enrollment{}, err
	}
	sealed, err := s.keys.Seal(keyring.PurposeTOTP, []byte(e.Secret), []byte(m.ID))
	if err != nil {
		return Enrollment{}, apperr.Internal(err)
	}
	if err := s.store.SetPendingTOTP(ctx, m.MerchantID, m.ID, sealed, s.now().UTC()); err != nil {
		return Enrollment{}, err
	}
	return e, nil
}

// Pending returns m's pending enrollment, if there is one.
func (s *Service) Pending(ctx context.Context, m members.Member) (Enrollment, bool, error) {
	if m.MFAEnabled {
		return Enrollment{}, false, nil
	}
	sealed, err := s.store.PendingTOTP(ctx, m.MerchantID, m.ID)
	if apperr.KindOf(err) == apperr.KindNotFound {
		return Enrollment{}, false, nil
	}
	if err != nil {
		return Enrollment{}, false, err
	}
	secret, err := s.open(sealed, m.ID)
	if err != nil {
		return Enrollment{}, false, err
	}
	raw, err := b32.DecodeString(secret)
	if err != nil {
		return Enrollment{}, false, apperr.Internal(err)
	}
	e, err := enrollment(raw, m.Email)
	return e, err == nil, err
}

var b32 = base32.StdEncoding.WithPadding(base32.NoPadding)

func enrollment(secret []byte, email string) (Enrollment, error) {
	key, err := totp.Generate(totp.GenerateOpts{Issuer: Issuer, AccountName: email, Period: uint(Period / time.Second),
		Secret: secret, Digits: otp.DigitsSix, Algorithm: otp.AlgorithmSHA1})
	if err != nil {
		return Enrollment{}, apperr.Internal(err)
	}
	return Enrollment{Secret: key.Secret(), URL: key.URL()}, nil
}

func (s *Service) open(sealed []byte, memberID string) (string, error) {
	plain, err := s.keys.Open(keyring.PurposeTOTP, sealed, []byte(memberID))
	if err != nil {
		return "", apperr.Internal(err)
	}
	return string(plain), nil
}

// Confirm turns m's pending secret on with a code it produced and returns
// the recovery codes, which exist only here. The code's step counts as
// used.
func (s *Service) Confirm(ctx context.Context, m members.Member, code string) ([]string, error) {
	code = strings.TrimSpace(code)
	switch {
	case code == "":
		return nil, apperr.Missing("code")
	case !isTOTPCode(strings.ReplaceAll(code, " ", "")):
		return nil, errCodeFormat
	case m.MFAEnabled:
		return nil, ErrEnabled
	}
	code = strings.ReplaceAll(code, " ", "")
	sealed, err := s.store.PendingTOTP(ctx, m.MerchantID, m.ID)
	if apperr.KindOf(err) == apperr.KindNotFound {
		return nil, ErrNoEnrollment
	}
	if err != nil {
		return nil, err
	}
	secret, err := s.open(sealed, m.ID)
	if err != nil {
		return nil, err
	}
	steps := MatchingSteps(secret, code, s.now())
	if len(steps) == 0 {
		return nil, errWrongConfirm
	}
	codes := make([]string, RecoveryCodes)
	digests := make([][]byte, RecoveryCodes)
	for i := range codes {
		codes[i] = newRecoveryCode()
		digests[i] = Digest(normalizeRecovery(codes[i]))
	}
	if err := s.store.EnableTOTP(ctx, m.MerchantID, m.ID, sealed, steps[len(steps)-1], digests, s.now().UTC()); err != nil {
		return nil, err
	}
	return codes, nil
}

// Verify checks a code of m's at sign-in: a TOTP code for a step later than
// the last one used (which it then uses), or an unused recovery code (which
// it uses up). Anything else is ErrWrongCode.
func (s *Service) Verify(ctx context.Context, m members.Member, code string) error {
	code = strings.ReplaceAll(strings.TrimSpace(code), " ", "")
	if code == "" || len(code) > 64 || !m.MFAEnabled {
		return ErrWrongCode
	}
	if isTOTPCode(code) {
		sealed, err := s.store.TOTPSecret(ctx, m.MerchantID, m.ID)
		if apperr.KindOf(err) == apperr.KindNotFound {
			return ErrWrongCode
		}
		if err != nil {
			return err
		}
		secret, err := s.open(sealed, m.ID)
		if err != nil {
			return err
		}
		for _, step := range MatchingSteps(secret, code, s.now()) {
			ok, err := s.store.UseTOTPStep(ctx, m.ID, step)
			if err != nil {
				return err
			}
			if ok {
				return nil
			}
		}
		return ErrWrongCode
	}
	ok, err := s.store.UseRecoveryCode(ctx, m.ID, Digest(normalizeRecovery(code)), s.now().UTC())
	if err != nil {
		return err
	}
	if !ok {
		return ErrWrongCode
	}
	return nil
}

// RecoveryCodesLeft counts m's unused recovery codes.
func (s *Service) RecoveryCodesLeft(ctx context.Context, m members.Member) (int, error) {
	return s.store.RecoveryCodesLeft(ctx, m.ID)
}

// Step is the TOTP time step of t.
func Step(t time.Time) int64 { return t.Unix() / int64(Period/time.Second) }

// Code is the TOTP code of secret (base32) for step.
func Code(secret string, step int64) (string, error) {
	return hotp.GenerateCodeCustom(secret, uint64(step), hotp.ValidateOpts{Digits: otp.DigitsSix, Algorithm: otp.AlgorithmSHA1})
}

// MatchingSteps returns the steps within Skew of now whose code is code,
// earliest first (in practice at most one).
func MatchingSteps(secret, code string, now time.Time) []int64 {
	var out []int64
	cur := Step(now)
	for step := cur - Skew; step <= cur+Skew; step++ {
		want, err := Code(secret, step)
		if err == nil && subtle.ConstantTimeCompare([]byte(want), []byte(code)) == 1 {
			out = append(out, step)
		}
	}
	return out
}

func isTOTPCode(code string) bool {
	if len(code) != Digits {
		return false
	}
	for i := 0; i < len(code); i++ {
		if code[i] < '0' || code[i] > '9' {
			return false
		}
	}
	return true
}

// recoveryAlphabet has no letters easily mistaken for one another.
const recoveryAlphabet = "abcdefghjkmnpqrstuvwxyz23456789"

// newRecoveryCode is 12 random characters (about 59 bits) as xxxx-xxxx-xxxx.
func newRecoveryCode() string {
	var b [12]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err) // crypto/rand never fails on supported platforms
	}
	var sb strings.Builder
	for i, x := range b {
		if i > 0 && i%4 == 0 {
			sb.WriteByte('-')
		}
		// 256 % 31 != 0: the bias is under 1% per character, immaterial here.
		sb.WriteByte(recoveryAlphabet[int(x)%len(recoveryAlphabet)])
	}
	return sb.String()
}

// normalizeRecovery reads a recovery code as typed: any case, with or
// without its dashes and spaces.
func normalizeRecovery(code string) string {
	code = strings.ToLower(code)
	return strings.NewReplacer("-", "", " ", "").Replace(code)
}

// Digest is the stored form of a recovery code or a challenge.
func Digest(s string) []byte {
	d := sha256.Sum256([]byte(s))
	return d[:]
}

// Challenge starts the second step of m's sign-in and returns its token,
// which works once, for ChallengeTTL.
func (s *Service) Challenge(ctx context.Context, m members.Member) (string, time.Time, error) {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", time.Time{}, apperr.Internal(err)
	}
	token := "mfa_" + base64.RawURLEncoding.EncodeToString(b[:])
	expires := s.now().UTC().Add(ChallengeTTL)
	c := Challenge{Digest: Digest(token), MerchantID: m.MerchantID, MemberID: m.ID, ExpiresAt: expires}
	if err := s.store.CreateMFAChallenge(ctx, c); err != nil {
		return "", time.Time{}, err
	}
	// Challenges are few and short-lived: each new one clears the expired
	// ones (best effort; a failure leaves them for the next).
	_, _ = s.PruneExpired(ctx)
	return token, expires, nil
}

// Challenged returns the unexpired, unused challenge of token, or
// ErrBadChallenge.
func (s *Service) Challenged(ctx context.Context, token string) (Challenge, error) {
	if token == "" || len(token) > 128 {
		return Challenge{}, ErrBadChallenge
	}
	c, err := s.store.MFAChallenge(ctx, Digest(token), s.now().UTC())
	if apperr.KindOf(err) == apperr.KindNotFound {
		return Challenge{}, ErrBadChallenge
	}
	return c, err
}

// Redeem completes the challenge c of m with code. Each code is counted
// against the challenge before it is compared, in one atomic update, so
// that ChallengeFailures codes at most are ever checked, however many
// arrive at once; a challenge that has counted them answers
// ErrBadChallenge, the right code too. A wrong code is ErrWrongCode (the
// last one ends the challenge); a right one uses the challenge up.
func (s *Service) Redeem(ctx context.Context, c Challenge, m members.Member, code string) error {
	left, err := s.store.AttemptMFAChallenge(ctx, c.Digest, s.now().UTC(), ChallengeFailures)
	if apperr.KindOf(err) == apperr.KindNotFound {
		return ErrBadChallenge
	}
	if err != nil {
		return err
	}
	if err := s.Verify(ctx, m, code); err != nil {
		if left == 0 && apperr.CodeOf(err) == apperr.CodeInvalidCredentials {
			if _, cerr := s.store.ConsumeMFAChallenge(ctx, c.Digest, s.now().UTC()); cerr != nil {
				return cerr
			}
		}
		return err
	}
	ok, err := s.store.ConsumeMFAChallenge(ctx, c.Digest, s.now().UTC())
	if err != nil {
		return err
	}
	if !ok {
		return ErrBadChallenge
	}
	return nil
}

// PruneExpired deletes challenges that expired more than an hour ago.
func (s *Service) PruneExpired(ctx context.Context) (int64, error) {
	return s.store.DeleteMFAChallengesExpiredBefore(ctx, s.now().Add(-time.Hour))
}

// Required reports whether the account requires two-factor sign-in.
func (s *Service) Required(ctx context.Context, merchantID string) (bool, error) {
	return s.store.MFARequired(ctx, merchantID)
}

// SetRequired sets the account's policy; the owner who requires it must
// have it on already, so that the change never shuts its author out.
func (s *Service) SetRequired(ctx context.Context, by members.Member, required bool) error {
	if required && !by.MFAEnabled {
		return errOwnFirst
	}
	return s.store.SetMFARequired(ctx, by.MerchantID, required)
}
