package apikeys

import (
	"context"
	"hash/crc32"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gatehouse-pay/gatehouse/internal/apperr"
	"github.com/gatehouse-pay/gatehouse/internal/authz"
	"github.com/gatehouse-pay/gatehouse/internal/listing"
)

func TestChecksum(t *testing.T) {
	// CRC-32 (IEEE) of "123456789" is the standard check value 0xCBF43926;
	// its checksum reads back to it as 6 base62 digits, most significant first.
	n := crc32.ChecksumIEEE([]byte("123456789"))
	if n != 0xCBF43926 {
		t.Fatalf("crc32 %x", n)
	}
	got := checksum("123456789")
	var back uint64
	for _, c := range got {
		back = back*62 + uint64(strings.IndexRune(alphabet, c))
	}
	if len(got) != checksumLen || back != uint64(n) {
		t.Fatalf("checksum = %q (= %d), want 6 base62 digits of %d", got, back, n)
	}
	// Zero pads to 6 characters.
	if c := checksum(""); c != "000000" || crc32.ChecksumIEEE(nil) != 0 {
		t.Fatalf("checksum of nothing = %q", c)
	}
}

func TestNewSecretsCarryTheirChecksum(t *testing.T) {
	for _, prefix := range []string{SecretTestPrefix, RestrictedTestPrefix} {
		s := newSecret(prefix)
		if len(s) != len(prefix)+36 || !strings.HasPrefix(s, prefix) || !base62(s[len(prefix):]) {
			t.Fatalf("newSecret(%q) = %q", prefix, s)
		}
		random := s[len(prefix) : len(prefix)+30]
		if s[len(prefix)+30:] != checksum(random) {
			t.Fatalf("%q does not end in the checksum of %q", s, random)
		}
		if !Lookable(s) || Forged(s) {
			t.Fatalf("a new key %q is not lookable", s)
		}
	}
}

func TestLookable(t *testing.T) {
	good := newSecret(SecretTestPrefix)
	rk := newSecret(RestrictedTestPrefix)
	legacy := SecretTestPrefix + randomToken(32)
	flip := func(s string, i int) string {
		b := []byte(s)
		if b[i] == 'a' {
			b[i] = 'b'
		} else {
			b[i] = 'a'
		}
		return string(b)
	}
	for _, tc := range []struct {
		name, secret string
		want         bool
	}{
		{"new secret key", good, true},
		{"new restricted key", rk, true},
		{"key of the format before checksums", legacy, true},
		{"a random character changed", flip(good, 10), false},
		{"a checksum character changed", flip(good, len(good)-1), false},
		{"restricted key with a bad checksum", flip(rk, 12), false},
		{"restricted key of the old length", RestrictedTestPrefix + randomToken(32), false},
		{"secret key with the restricted prefix", RestrictedTestPrefix + good[len(SecretTestPrefix):], true}, // same body, same checksum
		{"too short", SecretTestPrefix + randomToken(31), false},
		{"too long", good + "a", false},
		{"not base62", good[:20] + "-" + good[21:], false},
		{"old length, not base62", SecretTestPrefix + strings.Repeat("_", 32), false},
		{"live", "sk_live_" + good[8:], false},
		{"public", "pk_test_" + good[8:], false},
		{"empty", "", false},
	} {
		if got := Lookable(tc.secret); got != tc.want {
			t.Errorf("%s: Lookable(%q) = %v, want %v", tc.name, tc.secret, got, tc.want)
		}
		if forged := Forged(tc.secret); forged != (!tc.want && (strings.HasPrefix(tc.secret, SecretTestPrefix) || strings.HasPrefix(tc.secret, RestrictedTestPrefix))) {
			t.Errorf("%s: Forged(%q) = %v", tc.name, tc.secret, forged)
		}
	}
}

// memStore and memCache are the key store and cache in memory, counting
// the lookups that reach the store.
type memStore struct {
	mu      sync.Mutex
	keys    map[string]Key
	lookups int
}

func (m *memStore) CreateKey(_ context.Context, k Key) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.keys[k.ID] = k
	return nil
}
func (m *memStore) ListKeys(context.Context, string, Filter, listing.Params) (listing.Page[Key], error) {
	return listing.Page[Key]{}, nil
}
func (m *memStore) KeyByDigest(_ context.Context, d []byte) (Key, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.lookups++
	for _, k := range m.keys {
		if string(k.SecretDigest) == string(d) {
			return k, nil
		}
	}
	return Key{}, apperr.NotFound("api_key")
}
func (m *memStore) KeyByPublicKey(context.Context, string) (Key, error) {
	return Key{}, apperr.NotFound("api_key")
}
func (m *memStore) KeyByID(_ context.Context, merchantID, id string) (Key, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	k, ok := m.keys[id]
	if !ok || k.MerchantID != merchantID {
		return Key{}, apperr.NotFound("api_key")
	}
	return k, nil
}
func (m *memStore) RevokeKey(_ context.Context, merchantID, id string) (Key, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	k, ok := m.keys[id]
	if !ok || k.MerchantID != merchantID {
		return Key{}, apperr.NotFound("api_key")
	}
	if k.RevokedAt == nil {
		now := time.Now()
		k.RevokedAt = &now
	}
	m.keys[id] = k
	return k, nil
}
func (m *memStore) RollKey(_ context.Context, merchantID, oldID string, next Key, expiresAt time.Time, revoke bool) (Key, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	k, ok := m.keys[oldID]
	if !ok || k.MerchantID != merchantID {
		return Key{}, apperr.NotFound("api_key")
	}
	if k.RevokedAt != nil || k.ExpiresAt != nil {
		return Key{}, ErrNotRollable(k)
	}
	k.ExpiresAt = &expiresAt
	if revoke {
		k.RevokedAt = &expiresAt
	}
	m.keys[oldID], m.keys[next.ID] = k, next
	return k, nil
}

type memCache struct {
	mu      sync.Mutex
	entries map[string]Entry
	down    bool
}

func (c *memCache) Key(_ context.Context, d []byte) (Entry, bool, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.entries[string(d)]
	return e, ok, nil
}
func (c *memCache) FillKey(_ context.Context, d []byte, e Entry, _ time.Duration) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.entries[string(d)]; !ok {
		c.entries[string(d)] = e
	}
	return nil
}
func (c *memCache) SetKey(_ context.Context, d []byte, e Entry, _ time.Duration) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.down {
		return io.ErrUnexpectedEOF
	}
	c.entries[string(d)] = e
	return nil
}

// owner makes the keys of the tests that are not about makers.
var owner = Maker{MemberID: "mem_owner", Role: authz.Owner}

func newTestService(now *time.Time) (*Service, *memStore, *memCache) {
	st, c := &memStore{keys: map[string]Key{}}, &memCache{entries: map[string]Entry{}}
	return NewService(st, c, func() time.Time { return *now }, slog.New(slog.NewTextHandler(io.Discard, nil))), st, c
}

func TestForgedKeysCostNoLookup(t *testing.T) {
	now := time.Now()
	s, st, _ := newTestService(&now)
	for range 100 {
		forged := SecretTestPrefix + randomToken(36)
		if Lookable(forged) {
			continue // one in 62^6
		}
		if _, err := s.Authenticate(context.Background(), forged); apperr.CodeOf(err) != apperr.CodeInvalidToken {
			t.Fatalf("forged key: %v", err)
		}
	}
	if st.lookups != 0 {
		t.Fatalf("forged keys cost %d store lookups, want 0", st.lookups)
	}
	// A well-formed unknown key is looked up.
	if _, err := s.Authenticate(context.Background(), newSecret(SecretTestPrefix)); apperr.CodeOf(err) != apperr.CodeInvalidToken || st.lookups != 1 {
		t.Fatalf("unknown key: %v after %d lookups", err, st.lookups)
	}
}

func TestRestrictedKeys(t *testing.T) {
	now := time.Now()
	s, _, _ := newTestService(&now)
	ctx := context.Background()
	perms := authz.Permissions{authz.Charges: authz.Write, authz.Refunds: authz.None}
	c, err := s.Create(ctx, "mer_1", Params{Name: "r", Type: TypeRestricted, Permissions: perms, Maker: owner})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(c.Secret, RestrictedTestPrefix) || c.Key.Type() != TypeRestricted {
		t.Fatalf("restricted key %q of type %s", c.Secret, c.Key.Type())
	}
	e, err := s.Authenticate(ctx, c.Secret)
	if err != nil {
		t.Fatal(err)
	}
	if !e.Access().Allows(authz.Charges, authz.Write) || e.Access().Allows(authz.Refunds, authz.Read) || e.Access().Allows(authz.Customers, authz.Read) {
		t.Fatalf("access %v", e.Access())
	}
	// Nothing at all is allowed, and grants nothing.
	none, err := s.Create(ctx, "mer_1", Params{Type: TypeRestricted, Maker: owner})
	if err != nil || none.Key.Permissions == nil || len(none.Key.Access().Names()) != 0 {
		t.Fatalf("restricted key without permissions: %+v, %v", none.Key, err)
	}
	for _, tc := range []struct {
		p     Params
		param string
	}{
		{Params{Type: "admin", Maker: owner}, "type"},
		{Params{Permissions: authz.Permissions{authz.Charges: authz.Read}, Maker: owner}, "permissions"},
		{Params{Type: TypeSecret, Permissions: authz.Permissions{}, Maker: owner}, "permissions"},
	} {
		_, err := s.Create(ctx, "mer_1", tc.p)
		if e, ok := apperr.As(err); !ok || e.Code != apperr.CodeParameterInvalid || e.Param != tc.param {
			t.Errorf("Create(%+v) = %v, want parameter_invalid on %s", tc.p, err, tc.param)
		}
	}
	sk, err := s.Create(ctx, "mer_1", Params{Maker: owner})
	if err != nil || !strings.HasPrefix(sk.Secret, SecretTestPrefix) || sk.Key.Type() != TypeSecret || len(sk.Secret) != 44 {
		t.Fatalf("secret key %q (%v)", sk.Secret, err)
	}
}

func TestRoll(t *testing.T) {
	now := time.Date(2026, 11, 27, 10, 0, 0, 0, time.UTC)
	s, st, cache := newTestService(&now)
	ctx := context.Background()
	perms := authz.Permissions{authz.Charges: authz.Write}
	old, err := s.Create(ctx, "mer_1", Params{Name: "checkout", Type: TypeRestricted, Permissions: perms, Maker: owner})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Authenticate(ctx, old.Secret); err != nil { // cached as active
		t.Fatal(err)
	}
	if _, err := s.Roll(ctx, "mer_2", old.Key.ID, time.Hour, owner); apperr.KindOf(err) != apperr.KindNotFound {
		t.Fatalf("another merchant's roll: %v", err)
	}
	if _, err := s.Roll(ctx, "mer_1", old.Key.ID, MaxRollOverlap+time.Second, owner); apperr.CodeOf(err) != apperr.CodeParameterInvalid {
		t.Fatalf("roll beyond the limit: %v", err)
	}
	cache.down = true
	if _, err := s.Roll(ctx, "mer_1", old.Key.ID, time.Hour, owner); apperr.KindOf(err) != apperr.KindUnavailable || st.keys[old.Key.ID].ExpiresAt != nil {
		t.Fatalf("roll with the cache down: %v, stored %+v", err, st.keys[old.Key.ID])
	}
	cache.down = false
	r, err := s.Roll(ctx, "mer_1", old.Key.ID, time.Hour, owner)
	if err != nil {
		t.Fatal(err)
	}
	if r.Key.Name != "checkout" || r.Key.Type() != TypeRestricted || !r.Key.Access().Allows(authz.Charges, authz.Write) ||
		r.Key.Access().Allows(authz.Refunds, authz.Read) || r.Secret == old.Secret || !strings.HasPrefix(r.Secret, RestrictedTestPrefix) {
		t.Fatalf("rolled key %+v", r)
	}
	if r.Old.ExpiresAt == nil || !r.Old.ExpiresAt.Equal(now.Add(time.Hour)) || r.Old.RevokedAt != nil {
		t.Fatalf("old key after the roll: %+v", r.Old)
	}
	// Both work during the overlap, from the cache (no new store lookup).
	lookups := st.lookups
	for _, secret := range []string{old.Secret, r.Secret} {
		if _, err := s.Authenticate(ctx, secret); err != nil {
			t.Fatalf("during the overlap: %v", err)
		}
	}
	if st.lookups != lookups+1 { // the new key's first use
		t.Fatalf("%d lookups during the overlap", st.lookups-lookups)
	}
	if _, err := s.Roll(ctx, "mer_1", old.Key.ID, time.Hour, owner); apperr.CodeOf(err) != apperr.CodeInvalidState {
		t.Fatalf("rolling a rolled key: %v", err)
	}
	now = now.Add(time.Hour)
	if _, err := s.Authenticate(ctx, old.Secret); apperr.CodeOf(err) != apperr.CodeTokenRevoked {
		t.Fatalf("after the overlap, from the cache: %v", err)
	}
	delete(cache.entries, string(Digest(old.Secret)))
	if _, err := s.Authenticate(ctx, old.Secret); apperr.CodeOf(err) != apperr.CodeTokenRevoked {
		t.Fatalf("after the overlap, from the store: %v", err)
	}
	if e := cache.entries[string(Digest(old.Secret))]; !e.Expired(now) {
		t.Fatalf("the refilled entry %+v forgot the expiry", e)
	}
	// Rolling with no overlap revokes at once.
	r2, err := s.Roll(ctx, "mer_1", r.Key.ID, 0, owner)
	if err != nil || r2.Old.RevokedAt == nil {
		t.Fatalf("roll now: %+v, %v", r2.Old, err)
	}
	if _, err := s.Authenticate(ctx, r.Secret); apperr.CodeOf(err) != apperr.CodeTokenRevoked {
		t.Fatalf("a key rolled with no overlap: %v", err)
	}
	if _, err := s.Authenticate(ctx, r2.Secret); err != nil {
		t.Fatalf("the key that replaced it: %v", err)
	}
	if _, err := s.Roll(ctx, "mer_1", r.Key.ID, 0, owner); apperr.CodeOf(err) != apperr.CodeInvalidState {
		t.Fatalf("rolling a revoked key: %v", err)
	}
	if _, err := s.Roll(ctx, "mer_1", "key_nope", 0, owner); apperr.KindOf(err) != apperr.KindNotFound {
		t.Fatalf("rolling no key: %v", err)
	}
}

// TestKeysWithinTheMakersRole: a key never holds more than the role of the
// member who makes it. Only owners and admins make secret keys; every role
// makes restricted keys up to its own access and no further; a refused key
// is not stored; a roll obeys the same rule and records who rolled.
func TestKeysWithinTheMakersRole(t *testing.T) {
	now := time.Now()
	s, st, _ := newTestService(&now)
	ctx := context.Background()
	stored := func() int { st.mu.Lock(); defer st.mu.Unlock(); return len(st.keys) }
	denied := func(err error, param string) bool {
		e, ok := apperr.As(err)
		return ok && e.Kind == apperr.KindForbidden && e.Code == apperr.CodePermissionDenied && e.Param == param
	}
	for _, role := range authz.Roles {
		maker := Maker{MemberID: "mem_" + role, Role: role}
		rp := authz.RolePermissions(role)
		mayAll := role == authz.Owner || role == authz.Admin
		for _, typ := range []string{"", TypeSecret} {
			before := stored()
			c, err := s.Create(ctx, "mer_1", Params{Type: typ, Maker: maker})
			switch {
			case mayAll && (err != nil || c.Key.CreatedBy != maker.MemberID):
				t.Errorf("%s: secret key (type %q): %+v, %v", role, typ, c.Key, err)
			case !mayAll && !denied(err, "type"):
				t.Errorf("%s: secret key (type %q): %v, want permission_denied on type", role, typ, err)
			case !mayAll && stored() != before:
				t.Errorf("%s: a refused secret key was stored", role)
			}
		}
		// The fullest restricted key the role may make.
		own := authz.Permissions{}
		for _, r := range authz.KeyResources {
			own[r] = rp[r]
		}
		c, err := s.Create(ctx, "mer_1", Params{Type: TypeRestricted, Permissions: own, Maker: maker})
		if err != nil || c.Key.CreatedBy != maker.MemberID {
			t.Fatalf("%s: a key with the role's own access: %+v, %v", role, c.Key, err)
		}
		// One level more on any resource is refused, naming it.
		for _, r := range authz.KeyResources {
			if rp[r] == authz.Write {
				continue
			}
			more := authz.Permissions{r: rp[r] + 1}
			before := stored()
			if _, err := s.Create(ctx, "mer_1", Params{Type: TypeRestricted, Permissions: more, Maker: maker}); !denied(err, "permissions."+string(r)) {
				t.Errorf("%s: %s %s: %v, want permission_denied on permissions.%s", role, r, more[r], err, r)
			}
			if stored() != before {
				t.Errorf("%s: a refused key was stored", role)
			}
		}
	}

	// Rolling: a developer cannot roll the owner's secret key, nor an
	// admin's key with refunds write; nothing changes. It rolls its own key,
	// and an admin rolls it too: the new key is the roller's.
	dev := Maker{MemberID: "mem_dev", Role: authz.Developer}
	admin := Maker{MemberID: "mem_admin", Role: authz.Admin}
	sk, err := s.Create(ctx, "mer_1", Params{Maker: owner})
	if err != nil {
		t.Fatal(err)
	}
	refunder, err := s.Create(ctx, "mer_1", Params{Type: TypeRestricted, Permissions: authz.Permissions{authz.Refunds: authz.Write}, Maker: admin})
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []Key{sk.Key, refunder.Key} {
		before := stored()
		if _, err := s.Roll(ctx, "mer_1", k.ID, time.Hour, dev); !denied(err, "") {
			t.Errorf("a developer rolls %s key %s: %v, want permission_denied", k.Type(), k.ID, err)
		}
		if stored() != before || st.keys[k.ID].ExpiresAt != nil || st.keys[k.ID].RevokedAt != nil {
			t.Errorf("a refused roll changed %+v", st.keys[k.ID])
		}
	}
	mine, err := s.Create(ctx, "mer_1", Params{Name: "hooks", Type: TypeRestricted, Permissions: authz.Permissions{authz.WebhookEndpoints: authz.Write}, Maker: dev})
	if err != nil {
		t.Fatal(err)
	}
	r, err := s.Roll(ctx, "mer_1", mine.Key.ID, 0, dev)
	if err != nil || r.Key.CreatedBy != dev.MemberID || r.Key.Name != "hooks" || !r.Key.Access().Allows(authz.WebhookEndpoints, authz.Write) {
		t.Fatalf("a developer rolls its own key: %+v, %v", r.Key, err)
	}
	r, err = s.Roll(ctx, "mer_1", r.Key.ID, 0, admin)
	if err != nil || r.Key.CreatedBy != admin.MemberID || r.Key.Type() != TypeRestricted {
		t.Fatalf("an admin rolls the developer's key: %+v, %v", r.Key, err)
	}
}
