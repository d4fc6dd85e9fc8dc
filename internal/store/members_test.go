package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"

	"github.com/gatehouse-pay/gatehouse/internal/apperr"
	"github.com/gatehouse-pay/gatehouse/internal/authz"
	"github.com/gatehouse-pay/gatehouse/internal/members"
	"github.com/gatehouse-pay/gatehouse/internal/store"
	"github.com/gatehouse-pay/gatehouse/internal/testenv"
	"github.com/gatehouse-pay/gatehouse/migrations"
)

// TestMembersMigration: migration 00012 makes every existing merchant's
// login its owner member, with the same email and password hash, and gives
// the merchant's open sessions that member, so sign-ins and tokens of the
// release before teams keep working.
func TestMembersMigration(t *testing.T) {
	ctx := context.Background()
	db := testenv.NewDB(t)
	p, err := goose.NewProvider(goose.DialectPostgres, stdlib.OpenDBFromPool(db.Pool), migrations.FS)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.DownTo(ctx, 11); err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC().Truncate(time.Millisecond)
	const merchantID = "mer_06h023gc1dp994pbbop4in9kd0"
	if _, err := db.Pool.Exec(ctx, `INSERT INTO merchants (id, email, name, password_hash, created_at) VALUES ($1, 'old@example.com', 'Old', 'hash', $2)`, merchantID, now); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Pool.Exec(ctx, `INSERT INTO sessions (id, merchant_id, created_at, expires_at) VALUES ('ses_1', $1, $2, $3)`, merchantID, now, now.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Up(ctx); err != nil {
		t.Fatal(err)
	}
	s := store.New(db.Pool)
	m, err := s.MemberByEmail(ctx, merchantID, "OLD@example.com")
	if err != nil {
		t.Fatal(err)
	}
	if m.ID != members.OwnerID(merchantID) || m.MerchantID != merchantID || m.Role != authz.Owner || m.PasswordHash != "hash" || !m.CreatedAt.Equal(now) {
		t.Errorf("the migrated owner: %+v", m)
	}
	sess, err := s.SessionByID(ctx, "ses_1")
	if err != nil || sess.MemberID != m.ID {
		t.Errorf("the migrated session: %+v, %v", sess, err)
	}
}

// TestLastOwnerUnderConcurrency: two owners demoting each other at once
// leave one owner, never none.
func TestLastOwnerUnderConcurrency(t *testing.T) {
	ctx := context.Background()
	db := testenv.NewDB(t)
	s := store.New(db.Pool)
	m := newMerchant(t, s, "pair@example.com")
	second := members.Member{ID: "mem_06h023gc1dp994pbbop4in9kd4", MerchantID: m.ID, Email: "second@example.com", Role: authz.Owner, CreatedAt: time.Now()}
	if err := s.CreateMember(ctx, second, nil, time.Time{}); err != nil {
		t.Fatal(err)
	}
	check := func(mem members.Member, owners int) error {
		if mem.Role == authz.Owner && owners <= 1 {
			return apperr.New(apperr.KindConflict, apperr.CodeInvalidState, "last owner")
		}
		return nil
	}
	errs := make(chan error, 2)
	for _, id := range []string{members.OwnerID(m.ID), second.ID} {
		go func() {
			_, err := s.UpdateRole(ctx, m.ID, id, authz.Admin, time.Now(), check)
			errs <- err
		}()
	}
	failed := 0
	for range 2 {
		if err := <-errs; err != nil {
			if apperr.KindOf(err) != apperr.KindConflict {
				t.Fatalf("unexpected error: %v", err)
			}
			failed++
		}
	}
	var owners int
	if err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM members WHERE merchant_id = $1 AND role = 'owner'`, m.ID).Scan(&owners); err != nil {
		t.Fatal(err)
	}
	if owners != 1 || failed != 1 {
		t.Errorf("%d owners left, %d demotions refused; want 1 and 1", owners, failed)
	}
}
