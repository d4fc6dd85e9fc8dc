package store_test

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/gatehouse-pay/gatehouse/internal/apikeys"
	"github.com/gatehouse-pay/gatehouse/internal/apperr"
	"github.com/gatehouse-pay/gatehouse/internal/auth"
	"github.com/gatehouse-pay/gatehouse/internal/ids"
	"github.com/gatehouse-pay/gatehouse/internal/listing"
	"github.com/gatehouse-pay/gatehouse/internal/merchants"
	"github.com/gatehouse-pay/gatehouse/internal/store"
	"github.com/gatehouse-pay/gatehouse/internal/testenv"
)

func newStore(t *testing.T) *store.Store {
	t.Helper()
	return store.New(testenv.NewDB(t).Pool)
}

func newMerchant(t testing.TB, s *store.Store, email string) merchants.Merchant {
	t.Helper()
	m := merchants.Merchant{ID: ids.New("mer"), Email: email, Name: "n", PasswordHash: "h", CreatedAt: time.Now().UTC().Truncate(time.Millisecond)}
	if err := s.CreateMerchant(context.Background(), m); err != nil {
		t.Fatal(err)
	}
	return m
}

func TestMerchants(t *testing.T) {
	s := newStore(t)
	ctx := context.Background()
	m := newMerchant(t, s, "ada@example.com")

	got, err := s.MerchantByID(ctx, m.ID)
	if err != nil || got.Email != m.Email || !got.CreatedAt.Equal(m.CreatedAt) {
		t.Fatalf("by id: %+v, %v", got, err)
	}
	if _, err := s.MerchantByID(ctx, "mer_missing"); apperr.KindOf(err) != apperr.KindNotFound {
		t.Fatalf("missing merchant: %v, want NotFound", err)
	}
	// One person may own several accounts (migration 00019): the email in
	// another case makes a second merchant with its own owner.
	dup := m
	dup.ID, dup.Email = ids.New("mer"), "Ada@Example.com"
	if err := s.CreateMerchant(ctx, dup); err != nil {
		t.Fatalf("a second merchant of the same owner: %v", err)
	}
	ms, err := s.MembershipsByEmail(ctx, "ada@example.COM", 5)
	if err != nil || len(ms) != 2 || ms[0].MerchantID != m.ID || ms[1].MerchantID != dup.ID {
		t.Fatalf("the owner's memberships: %+v, %v", ms, err)
	}
}

func TestSessions(t *testing.T) {
	s := newStore(t)
	ctx := context.Background()
	m := newMerchant(t, s, "ada@example.com")
	now := time.Now().UTC().Truncate(time.Second)
	live := auth.Session{ID: ids.New("ses"), MerchantID: m.ID, CreatedAt: now, ExpiresAt: now.Add(24 * time.Hour)}
	old := auth.Session{ID: ids.New("ses"), MerchantID: m.ID, CreatedAt: now.Add(-72 * time.Hour), ExpiresAt: now.Add(-48 * time.Hour)}
	for _, sess := range []auth.Session{live, old} {
		if err := s.CreateSession(ctx, sess); err != nil {
			t.Fatal(err)
		}
	}
	first, err := s.RevokeSession(ctx, live.ID)
	if err != nil || first.RevokedAt == nil {
		t.Fatalf("revoke: %+v %v", first, err)
	}
	second, err := s.RevokeSession(ctx, live.ID)
	if err != nil || !second.RevokedAt.Equal(*first.RevokedAt) {
		t.Fatalf("second revoke changed revoked_at: %v -> %v (%v)", first.RevokedAt, second.RevokedAt, err)
	}
	n, err := s.DeleteSessionsExpiredBefore(ctx, now.Add(-24*time.Hour))
	if err != nil || n != 1 {
		t.Fatalf("pruned %d (%v), want 1", n, err)
	}
	if _, err := s.SessionByID(ctx, old.ID); apperr.KindOf(err) != apperr.KindNotFound {
		t.Fatalf("pruned session still there: %v", err)
	}
	if _, err := s.RevokeSession(ctx, "ses_missing"); apperr.KindOf(err) != apperr.KindNotFound {
		t.Fatalf("revoke missing: %v", err)
	}
}

func TestKeys(t *testing.T) {
	s := newStore(t)
	ctx := context.Background()
	a := newMerchant(t, s, "a@example.com")
	b := newMerchant(t, s, "b@example.com")
	var keys []apikeys.Key
	for i := 0; i < 5; i++ {
		k := apikeys.Key{ID: ids.New("key"), MerchantID: a.ID, Environment: "sandbox", PublicKey: ids.New("pk"),
			SecretDigest: apikeys.Digest(ids.New("sk")), SecretLast4: "abcd", CreatedAt: time.Now().UTC()}
		if err := s.CreateKey(ctx, k); err != nil {
			t.Fatal(err)
		}
		keys = append(keys, k)
	}
	got, err := s.KeyByDigest(ctx, keys[2].SecretDigest)
	if err != nil || got.ID != keys[2].ID {
		t.Fatalf("by digest: %v %v", got.ID, err)
	}
	page, err := s.ListKeys(ctx, a.ID, apikeys.Filter{}, listing.Params{Limit: 2, StartingAfter: keys[4].ID})
	if err != nil || len(page.Items) != 2 || page.Items[0].ID != keys[3].ID || page.Items[1].ID != keys[2].ID || !page.HasMore {
		t.Fatalf("page after newest: %+v %v", page, err)
	}
	page, err = s.ListKeys(ctx, a.ID, apikeys.Filter{}, listing.Params{Limit: 10, EndingBefore: keys[2].ID})
	if err != nil || len(page.Items) != 2 || page.Items[0].ID != keys[4].ID || page.HasMore {
		t.Fatalf("page before the middle: %+v %v", page, err)
	}
	if page, _ := s.ListKeys(ctx, b.ID, apikeys.Filter{}, listing.Params{Limit: 10}); len(page.Items) != 0 {
		t.Fatalf("b sees a's keys: %+v", page.Items)
	}
	if _, err := s.KeyByID(ctx, b.ID, keys[0].ID); apperr.KindOf(err) != apperr.KindNotFound {
		t.Fatalf("b reads a's key: %v", err)
	}
	// The maker is kept; keys without one (made before makers were
	// recorded) read back as "". The filter keeps a member's active keys.
	maker := "mem_" + strings.TrimPrefix(a.ID, "mer_")
	made := apikeys.Key{ID: ids.New("key"), MerchantID: a.ID, Environment: "sandbox", PublicKey: ids.New("pk"),
		SecretDigest: apikeys.Digest(ids.New("sk")), SecretLast4: "abcd", CreatedAt: time.Now().UTC(), CreatedBy: maker}
	if err := s.CreateKey(ctx, made); err != nil {
		t.Fatal(err)
	}
	if got, err := s.KeyByID(ctx, a.ID, made.ID); err != nil || got.CreatedBy != maker {
		t.Fatalf("created_by: %+v %v", got, err)
	}
	if got, err := s.KeyByID(ctx, a.ID, keys[0].ID); err != nil || got.CreatedBy != "" {
		t.Fatalf("a key without a maker: %+v %v", got, err)
	}
	page, err = s.ListKeys(ctx, a.ID, apikeys.Filter{CreatedBy: maker, Active: true}, listing.Params{Limit: 10})
	if err != nil || len(page.Items) != 1 || page.Items[0].ID != made.ID {
		t.Fatalf("the maker's active keys: %+v %v", page, err)
	}
	if _, err := s.RevokeKey(ctx, a.ID, made.ID); err != nil {
		t.Fatal(err)
	}
	if page, _ := s.ListKeys(ctx, a.ID, apikeys.Filter{CreatedBy: maker, Active: true}, listing.Params{Limit: 10}); len(page.Items) != 0 {
		t.Fatalf("a revoked key is active: %+v", page.Items)
	}
	if page, _ := s.ListKeys(ctx, a.ID, apikeys.Filter{CreatedBy: maker}, listing.Params{Limit: 10}); len(page.Items) != 1 {
		t.Fatalf("the maker's keys: %+v", page.Items)
	}
	if got, err := s.KeyByID(ctx, a.ID, keys[0].ID); err != nil || got.ID != keys[0].ID || !bytes.Equal(got.SecretDigest, keys[0].SecretDigest) {
		t.Fatalf("key by id: %+v %v", got, err)
	}
	if _, err := s.RevokeKey(ctx, b.ID, keys[0].ID); apperr.KindOf(err) != apperr.KindNotFound {
		t.Fatalf("b revoked a's key: %v", err)
	}
	k, err := s.RevokeKey(ctx, a.ID, keys[0].ID)
	if err != nil || k.RevokedAt == nil {
		t.Fatalf("revoke: %+v %v", k, err)
	}
}
