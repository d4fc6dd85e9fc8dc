package store_test

import (
	"context"
	"reflect"
	"testing"
	"time"

	"github.com/gatehouse-pay/gatehouse/internal/apikeys"
	"github.com/gatehouse-pay/gatehouse/internal/apperr"
	"github.com/gatehouse-pay/gatehouse/internal/authz"
	"github.com/gatehouse-pay/gatehouse/internal/ids"
	"github.com/gatehouse-pay/gatehouse/internal/store"
	"github.com/gatehouse-pay/gatehouse/internal/testenv"
)

func newKey(merchantID string, perms authz.Permissions) apikeys.Key {
	return apikeys.Key{ID: ids.New("key"), MerchantID: merchantID, Environment: "sandbox", PublicKey: ids.New("pk"),
		SecretDigest: apikeys.Digest(ids.New("sk")), SecretLast4: "abcd", CreatedAt: time.Now().UTC().Truncate(time.Millisecond),
		Permissions: perms}
}

// Permissions round-trip: nil is a secret key, empty a restricted key that
// may do nothing, and a restricted key's levels come back as stored.
func TestKeyPermissions(t *testing.T) {
	db := testenv.NewDB(t)
	s := store.New(db.Pool)
	ctx := context.Background()
	m := newMerchant(t, s, "a@example.com")
	for _, perms := range []authz.Permissions{nil, {}, {authz.Charges: authz.Write, authz.Refunds: authz.Read}} {
		k := newKey(m.ID, perms)
		if err := s.CreateKey(ctx, k); err != nil {
			t.Fatal(err)
		}
		for name, get := range map[string]func() (apikeys.Key, error){
			"by digest": func() (apikeys.Key, error) { return s.KeyByDigest(ctx, k.SecretDigest) },
			"by id":     func() (apikeys.Key, error) { return s.KeyByID(ctx, m.ID, k.ID) },
		} {
			got, err := get()
			if err != nil || !reflect.DeepEqual(got.Permissions, perms) || got.Type() != k.Type() || got.ExpiresAt != nil {
				t.Errorf("%s: permissions %#v (%s), want %#v; %v", name, got.Permissions, got.Type(), perms, err)
			}
		}
	}
	var raw *string
	if err := db.Pool.QueryRow(ctx, `SELECT permissions::text FROM api_keys WHERE permissions IS NOT NULL AND permissions <> '{}'`).Scan(&raw); err != nil ||
		raw == nil || *raw != `{"charges": "write", "refunds": "read"}` {
		t.Fatalf("stored permissions %v (%v)", raw, err)
	}
}

func TestRollKey(t *testing.T) {
	s := newStore(t)
	ctx := context.Background()
	a := newMerchant(t, s, "a@example.com")
	b := newMerchant(t, s, "b@example.com")
	old := newKey(a.ID, authz.Permissions{authz.Charges: authz.Write})
	if err := s.CreateKey(ctx, old); err != nil {
		t.Fatal(err)
	}
	at := time.Now().UTC().Add(time.Hour).Truncate(time.Millisecond)
	next := newKey(a.ID, old.Permissions)
	if _, err := s.RollKey(ctx, b.ID, old.ID, next, at, false); apperr.KindOf(err) != apperr.KindNotFound {
		t.Fatalf("b rolls a's key: %v", err)
	}
	if _, err := s.KeyByID(ctx, a.ID, next.ID); apperr.KindOf(err) != apperr.KindNotFound {
		t.Fatalf("a failed roll stored the new key: %v", err)
	}
	got, err := s.RollKey(ctx, a.ID, old.ID, next, at, false)
	if err != nil || got.ExpiresAt == nil || !got.ExpiresAt.Equal(at) || got.RevokedAt != nil || got.ID != old.ID {
		t.Fatalf("roll: %+v %v", got, err)
	}
	stored, err := s.KeyByID(ctx, a.ID, next.ID)
	if err != nil || !reflect.DeepEqual(stored.Permissions, next.Permissions) {
		t.Fatalf("the new key: %+v %v", stored, err)
	}
	// Rolled once: a second roll stores nothing.
	again := newKey(a.ID, nil)
	if _, err := s.RollKey(ctx, a.ID, old.ID, again, at, false); apperr.CodeOf(err) != apperr.CodeInvalidState {
		t.Fatalf("second roll: %v", err)
	}
	if _, err := s.KeyByID(ctx, a.ID, again.ID); apperr.KindOf(err) != apperr.KindNotFound {
		t.Fatalf("a refused roll stored the new key: %v", err)
	}
	// Rolling with no overlap revokes at the same time.
	now := time.Now().UTC().Truncate(time.Millisecond)
	got, err = s.RollKey(ctx, a.ID, next.ID, again, now, true)
	if err != nil || got.RevokedAt == nil || !got.RevokedAt.Equal(now) || !got.ExpiresAt.Equal(now) {
		t.Fatalf("roll now: %+v %v", got, err)
	}
	// A revoked key cannot be rolled.
	third := newKey(a.ID, nil)
	if _, err := s.RevokeKey(ctx, a.ID, again.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := s.RollKey(ctx, a.ID, again.ID, third, at, false); apperr.CodeOf(err) != apperr.CodeInvalidState {
		t.Fatalf("roll of a revoked key: %v", err)
	}
}
