package mfa_test

import (
	"bytes"
	"context"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gatehouse-pay/gatehouse/internal/apperr"
	"github.com/gatehouse-pay/gatehouse/internal/keyring"
	"github.com/gatehouse-pay/gatehouse/internal/members"
	"github.com/gatehouse-pay/gatehouse/internal/mfa"
)

// memStore is mfa.Store in memory, for one merchant.
type memStore struct {
	mu         sync.Mutex
	pending    map[string][]byte
	secret     map[string][]byte
	lastStep   map[string]int64
	recovery   map[string]map[string]bool // member -> digest -> used
	challenges map[string]mfa.Challenge
	failures   map[string]int
	required   bool
}

func newMemStore() *memStore {
	return &memStore{pending: map[string][]byte{}, secret: map[string][]byte{}, lastStep: map[string]int64{},
		recovery: map[string]map[string]bool{}, challenges: map[string]mfa.Challenge{}, failures: map[string]int{}}
}

func (s *memStore) SetPendingTOTP(_ context.Context, _, id string, sealed []byte, _ time.Time) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.secret[id] != nil {
		return mfa.ErrEnabled
	}
	s.pending[id] = sealed
	return nil
}

func (s *memStore) PendingTOTP(_ context.Context, _, id string) ([]byte, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.pending[id] == nil {
		return nil, apperr.NotFound("enrollment")
	}
	return s.pending[id], nil
}

func (s *memStore) EnableTOTP(_ context.Context, _, id string, pending []byte, step int64, recovery [][]byte, _ time.Time) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.secret[id] != nil || !bytes.Equal(s.pending[id], pending) {
		return mfa.ErrNoEnrollment
	}
	s.secret[id], s.pending[id], s.lastStep[id] = pending, nil, step
	s.recovery[id] = map[string]bool{}
	for _, d := range recovery {
		s.recovery[id][string(d)] = false
	}
	return nil
}

func (s *memStore) TOTPSecret(_ context.Context, _, id string) ([]byte, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.secret[id] == nil {
		return nil, apperr.NotFound("member")
	}
	return s.secret[id], nil
}

func (s *memStore) UseTOTPStep(_ context.Context, id string, step int64) (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if last, ok := s.lastStep[id]; ok && last >= step {
		return false, nil
	}
	s.lastStep[id] = step
	return true, nil
}

func (s *memStore) UseRecoveryCode(_ context.Context, id string, digest []byte, _ time.Time) (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	used, ok := s.recovery[id][string(digest)]
	if !ok || used {
		return false, nil
	}
	s.recovery[id][string(digest)] = true
	return true, nil
}

func (s *memStore) RecoveryCodesLeft(_ context.Context, id string) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, used := range s.recovery[id] {
		if !used {
			n++
		}
	}
	return n, nil
}

func (s *memStore) CreateMFAChallenge(_ context.Context, c mfa.Challenge) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.challenges[string(c.Digest)] = c
	return nil
}

func (s *memStore) MFAChallenge(_ context.Context, digest []byte, now time.Time) (mfa.Challenge, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c, ok := s.challenges[string(digest)]
	if !ok || !c.ExpiresAt.After(now) {
		return mfa.Challenge{}, apperr.NotFound("challenge")
	}
	return c, nil
}

func (s *memStore) AttemptMFAChallenge(_ context.Context, digest []byte, now time.Time, max int) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c, ok := s.challenges[string(digest)]
	if !ok || !c.ExpiresAt.After(now) || s.failures[string(digest)] >= max {
		return 0, apperr.NotFound("challenge")
	}
	s.failures[string(digest)]++
	return max - s.failures[string(digest)], nil
}

func (s *memStore) ConsumeMFAChallenge(_ context.Context, digest []byte, now time.Time) (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c, ok := s.challenges[string(digest)]
	delete(s.challenges, string(digest))
	return ok && c.ExpiresAt.After(now), nil
}

func (s *memStore) DeleteMFAChallengesExpiredBefore(context.Context, time.Time) (int64, error) {
	return 0, nil
}

func (s *memStore) MFARequired(context.Context, string) (bool, error) { return s.required, nil }

func (s *memStore) SetMFARequired(_ context.Context, _ string, required bool) error {
	s.required = required
	return nil
}

type clock struct{ t time.Time }

func (c *clock) now() time.Time { return c.t }

func newService(t *testing.T) (*mfa.Service, *memStore, *clock) {
	t.Helper()
	keys, err := keyring.New(bytes.Repeat([]byte{7}, 32))
	if err != nil {
		t.Fatal(err)
	}
	st := newMemStore()
	c := &clock{t: time.Date(2026, 11, 27, 10, 0, 0, 0, time.UTC)}
	return mfa.NewService(st, keys, c.now), st, c
}

var alice = members.Member{ID: "mem_alice", MerchantID: "mer_alice", Email: "alice@example.com", Role: "owner"}

func code(t *testing.T, secret string, at time.Time) string {
	t.Helper()
	c, err := mfa.Code(secret, mfa.Step(at))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// enrolled returns alice with two-factor sign-in on, her secret and her
// recovery codes.
func enrolled(t *testing.T, s *mfa.Service, c *clock) (members.Member, string, []string) {
	t.Helper()
	ctx := context.Background()
	e, err := s.Enroll(ctx, alice)
	if err != nil {
		t.Fatal(err)
	}
	codes, err := s.Confirm(ctx, alice, code(t, e.Secret, c.t))
	if err != nil {
		t.Fatal(err)
	}
	m := alice
	m.MFAEnabled = true
	return m, e.Secret, codes
}

func TestEnrollment(t *testing.T) {
	s, _, c := newService(t)
	ctx := context.Background()
	e, err := s.Enroll(ctx, alice)
	if err != nil {
		t.Fatal(err)
	}
	u, err := url.Parse(e.URL)
	if err != nil || u.Scheme != "otpauth" || u.Host != "totp" {
		t.Fatalf("otpauth url %q", e.URL)
	}
	q := u.Query()
	if q.Get("secret") != e.Secret || q.Get("issuer") != "Gatehouse" || q.Get("digits") != "6" || q.Get("period") != "30" ||
		q.Get("algorithm") != "SHA1" || !strings.Contains(u.Path, "alice@example.com") {
		t.Fatalf("otpauth url %q", e.URL)
	}
	if len(e.Secret) != 32 { // 20 bytes, base32
		t.Fatalf("secret %q", e.Secret)
	}
	// The pending one is shown again; a new enrollment replaces it.
	p, ok, err := s.Pending(ctx, alice)
	if err != nil || !ok || p.Secret != e.Secret {
		t.Fatalf("pending: %+v %v %v", p, ok, err)
	}
	e2, err := s.Enroll(ctx, alice)
	if err != nil || e2.Secret == e.Secret {
		t.Fatalf("re-enroll: %v", err)
	}
	// A code of the replaced secret does not confirm.
	if _, err := s.Confirm(ctx, alice, code(t, e.Secret, c.t)); apperr.CodeOf(err) != apperr.CodeParameterInvalid {
		t.Fatalf("old secret's code: %v", err)
	}
	for _, bad := range []string{"12345", "abcdef", "1234567"} {
		if _, err := s.Confirm(ctx, alice, bad); apperr.CodeOf(err) != apperr.CodeParameterInvalid {
			t.Fatalf("code %q: %v", bad, err)
		}
	}
	if _, err := s.Confirm(ctx, alice, ""); apperr.CodeOf(err) != apperr.CodeParameterMissing {
		t.Fatalf("no code: %v", err)
	}
	codes, err := s.Confirm(ctx, alice, code(t, e2.Secret, c.t))
	if err != nil {
		t.Fatal(err)
	}
	if len(codes) != mfa.RecoveryCodes {
		t.Fatalf("%d recovery codes", len(codes))
	}
	seen := map[string]bool{}
	for _, rc := range codes {
		if len(rc) != 14 || seen[rc] {
			t.Fatalf("recovery code %q", rc)
		}
		seen[rc] = true
	}
	on := alice
	on.MFAEnabled = true
	if _, err := s.Enroll(ctx, on); err != mfa.ErrEnabled {
		t.Fatalf("enroll when on: %v", err)
	}
	// The confirming code is used: it does not sign in.
	if err := s.Verify(ctx, on, code(t, e2.Secret, c.t)); err != mfa.ErrWrongCode {
		t.Fatalf("the confirming code signed in: %v", err)
	}
}

func TestConfirmWithoutEnrollment(t *testing.T) {
	s, _, _ := newService(t)
	if _, err := s.Confirm(context.Background(), alice, "123456"); err != mfa.ErrNoEnrollment {
		t.Fatalf("got %v", err)
	}
}

// TestVerifyWindow: the current step and one either side are accepted,
// two away are not.
func TestVerifyWindow(t *testing.T) {
	for _, tc := range []struct {
		offset time.Duration
		ok     bool
	}{{0, true}, {-30 * time.Second, true}, {30 * time.Second, true}, {-60 * time.Second, false}, {60 * time.Second, false}} {
		s, _, c := newService(t)
		m, secret, _ := enrolled(t, s, c)
		c.t = c.t.Add(2 * time.Minute) // past the confirming code's steps
		err := s.Verify(context.Background(), m, code(t, secret, c.t.Add(tc.offset)))
		if tc.ok && err != nil || !tc.ok && err != mfa.ErrWrongCode {
			t.Errorf("code of now%+v: %v", tc.offset, err)
		}
	}
}

// TestReplayRefused: a code works once, and a code of an earlier step than
// one used does not work at all.
func TestReplayRefused(t *testing.T) {
	s, _, c := newService(t)
	m, secret, _ := enrolled(t, s, c)
	ctx := context.Background()
	c.t = c.t.Add(5 * time.Minute)
	now := code(t, secret, c.t)
	if err := s.Verify(ctx, m, now); err != nil {
		t.Fatal(err)
	}
	if err := s.Verify(ctx, m, now); err != mfa.ErrWrongCode {
		t.Fatalf("replay: %v", err)
	}
	c.t = c.t.Add(30 * time.Second)
	if err := s.Verify(ctx, m, code(t, secret, c.t.Add(-30*time.Second))); err != mfa.ErrWrongCode {
		t.Fatalf("previous step after a later one: %v", err)
	}
	if err := s.Verify(ctx, m, code(t, secret, c.t)); err != nil {
		t.Fatalf("next step: %v", err)
	}
	// A member without two-factor sign-in has no code that works.
	if err := s.Verify(ctx, alice, code(t, secret, c.t.Add(30*time.Second))); err != mfa.ErrWrongCode {
		t.Fatalf("off: %v", err)
	}
}

func TestRecoveryCodesSingleUse(t *testing.T) {
	s, _, c := newService(t)
	m, _, codes := enrolled(t, s, c)
	ctx := context.Background()
	if err := s.Verify(ctx, m, codes[0]); err != nil {
		t.Fatal(err)
	}
	if err := s.Verify(ctx, m, codes[0]); err != mfa.ErrWrongCode {
		t.Fatalf("reused: %v", err)
	}
	// Typed in capitals, without dashes: the same code.
	if err := s.Verify(ctx, m, strings.ToUpper(strings.ReplaceAll(codes[1], "-", ""))); err != nil {
		t.Fatalf("as typed: %v", err)
	}
	if err := s.Verify(ctx, m, "abcd-efgh-jkmn"); err != mfa.ErrWrongCode {
		t.Fatalf("made up: %v", err)
	}
	if n, _ := s.RecoveryCodesLeft(ctx, m); n != mfa.RecoveryCodes-2 {
		t.Fatalf("%d left", n)
	}
}

func TestChallenge(t *testing.T) {
	s, _, c := newService(t)
	m, secret, _ := enrolled(t, s, c)
	ctx := context.Background()
	c.t = c.t.Add(time.Minute)
	token, expires, err := s.Challenge(ctx, m)
	if err != nil || !expires.Equal(c.t.Add(mfa.ChallengeTTL)) {
		t.Fatal(err, expires)
	}
	ch, err := s.Challenged(ctx, token)
	if err != nil || ch.MemberID != m.ID {
		t.Fatalf("%+v %v", ch, err)
	}
	if err := s.Redeem(ctx, ch, m, "000000"); err != mfa.ErrWrongCode {
		t.Fatalf("wrong code: %v", err)
	}
	if err := s.Redeem(ctx, ch, m, code(t, secret, c.t)); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Challenged(ctx, token); err != mfa.ErrBadChallenge {
		t.Fatalf("used twice: %v", err)
	}

	// Expired.
	token, _, _ = s.Challenge(ctx, m)
	c.t = c.t.Add(mfa.ChallengeTTL + time.Second)
	if _, err := s.Challenged(ctx, token); err != mfa.ErrBadChallenge {
		t.Fatalf("expired: %v", err)
	}

	// Too many wrong codes end it.
	token, _, _ = s.Challenge(ctx, m)
	ch, _ = s.Challenged(ctx, token)
	for i := 0; i < mfa.ChallengeFailures; i++ {
		_ = s.Redeem(ctx, ch, m, "000000")
	}
	if _, err := s.Challenged(ctx, token); err != mfa.ErrBadChallenge {
		t.Fatalf("after %d wrong codes: %v", mfa.ChallengeFailures, err)
	}
	if _, err := s.Challenged(ctx, "made-up"); err != mfa.ErrBadChallenge {
		t.Fatalf("made up: %v", err)
	}
}

func TestRequireOwnFirst(t *testing.T) {
	s, st, c := newService(t)
	ctx := context.Background()
	if err := s.SetRequired(ctx, alice, true); apperr.CodeOf(err) != apperr.CodeInvalidState || st.required {
		t.Fatalf("required by an owner without it: %v", err)
	}
	m, _, _ := enrolled(t, s, c)
	if err := s.SetRequired(ctx, m, true); err != nil || !st.required {
		t.Fatal(err)
	}
	if err := s.SetRequired(ctx, alice, false); err != nil || st.required {
		t.Fatal(err)
	}
}
