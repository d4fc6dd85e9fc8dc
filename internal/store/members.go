package store

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/gatehouse-pay/gatehouse/internal/apperr"
	"github.com/gatehouse-pay/gatehouse/internal/audit"
	"github.com/gatehouse-pay/gatehouse/internal/authz"
	"github.com/gatehouse-pay/gatehouse/internal/listing"
	"github.com/gatehouse-pay/gatehouse/internal/members"
)

// memberColumns include whether the member has two-factor sign-in on and
// whether the account requires it of every member (migration 00015).
const memberColumns = `id, merchant_id, email, role, coalesce(password_hash, ''), mfa_secret_sealed IS NOT NULL,
coalesce((SELECT mfa_required FROM merchants WHERE merchants.id = members.merchant_id), false), created_at, removed_at`

func scanMember(r pgx.Row) (members.Member, error) {
	var m members.Member
	err := r.Scan(&m.ID, &m.MerchantID, &m.Email, &m.Role, &m.PasswordHash, &m.MFAEnabled, &m.MFARequired, &m.CreatedAt, &m.RemovedAt)
	return m, err
}

const insertMember = `INSERT INTO members (id, merchant_id, email, role, password_hash, setup_digest, setup_expires_at, created_at, updated_at)
VALUES ($1, $2, $3, $4, NULLIF($5, ''), $6, $7, $8, $8)`

// CreateMember stores an invited member; a taken email is a Conflict.
func (s *Store) CreateMember(ctx context.Context, m members.Member, setupDigest []byte, setupExpires time.Time) error {
	audit.SetObject(ctx, "member", m.ID)
	return s.audited(ctx, func(q dbtx) error {
		_, err := q.Exec(ctx, insertMember, m.ID, m.MerchantID, m.Email, m.Role, m.PasswordHash, setupDigest, setupExpires, m.CreatedAt)
		return mapErr(err, "member")
	})
}

// ListMembers returns a page of the merchant's current members, newest first.
func (s *Store) ListMembers(ctx context.Context, merchantID string, p listing.Params) (listing.Page[members.Member], error) {
	return listPage(ctx, s, `SELECT `+memberColumns+` FROM members WHERE merchant_id = $1 AND removed_at IS NULL`,
		[]any{merchantID}, p, scanMember, "member")
}

const selectMember = `SELECT ` + memberColumns + ` FROM members WHERE id = $1 AND merchant_id = $2`

// MemberByID returns the merchant's member, removed or not, or NotFound.
func (s *Store) MemberByID(ctx context.Context, merchantID, id string) (members.Member, error) {
	m, err := scanMember(s.pool.QueryRow(ctx, selectMember, id, merchantID))
	return m, mapErr(err, "member")
}

const selectMemberByEmail = `SELECT ` + memberColumns + ` FROM members WHERE merchant_id = $1 AND lower(email) = lower($2) AND removed_at IS NULL`

// MemberByEmail returns the merchant's current member with that email (any
// case) or NotFound.
func (s *Store) MemberByEmail(ctx context.Context, merchantID, email string) (members.Member, error) {
	m, err := scanMember(s.pool.QueryRow(ctx, selectMemberByEmail, merchantID, email))
	return m, mapErr(err, "member")
}

// Those that can sign in (a password set) first, then the oldest.
const selectMembershipsByEmail = `SELECT ` + memberColumns + ` FROM members WHERE lower(email) = lower($1) AND removed_at IS NULL
ORDER BY password_hash IS NULL, created_at, id LIMIT $2`

// MembershipsByEmail returns at most limit current members with that email
// (any case), of any merchants: those that can sign in first, then the
// oldest.
func (s *Store) MembershipsByEmail(ctx context.Context, email string, limit int) ([]members.Member, error) {
	rows, _ := s.pool.Query(ctx, selectMembershipsByEmail, email, limit)
	ms, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (members.Member, error) { return scanMember(r) })
	return ms, mapErr(err, "member")
}

const completeSetup = `UPDATE members SET password_hash = $2, setup_digest = NULL, setup_expires_at = NULL, updated_at = $3
WHERE setup_digest = $1 AND setup_expires_at > $3 AND removed_at IS NULL
RETURNING ` + memberColumns

// CompleteSetup sets the password of the member the unexpired digest
// belongs to and clears the digest, so the link works once.
// The member is the actor of the audit entry the request carries, if any.
func (s *Store) CompleteSetup(ctx context.Context, digest []byte, passwordHash string, now time.Time) (members.Member, error) {
	var m members.Member
	err := s.audited(ctx, func(q dbtx) error {
		var err error
		if m, err = scanMember(q.QueryRow(ctx, completeSetup, digest, passwordHash, now)); err != nil {
			return mapErr(err, "member")
		}
		audit.SetActor(ctx, m.MerchantID, audit.ActorMember, m.ID)
		audit.SetObject(ctx, "member", m.ID)
		return nil
	})
	return m, err
}

// lockOwners locks the merchant's current owners (so that two changes
// cannot each leave the other the last owner) and the member, and returns
// the member and how many owners there are.
func lockOwners(ctx context.Context, tx pgx.Tx, merchantID, id string) (members.Member, int, error) {
	var owners int
	if err := tx.QueryRow(ctx, `SELECT count(*) FROM (SELECT 1 FROM members WHERE merchant_id = $1 AND role = $2 AND removed_at IS NULL FOR UPDATE) o`,
		merchantID, authz.Owner).Scan(&owners); err != nil {
		return members.Member{}, 0, mapErr(err, "member")
	}
	m, err := scanMember(tx.QueryRow(ctx, selectMember+` AND removed_at IS NULL FOR UPDATE`, id, merchantID))
	if errors.Is(err, pgx.ErrNoRows) {
		return members.Member{}, 0, apperr.NotFound("member")
	}
	return m, owners, mapErr(err, "member")
}

// changeMember runs change on a current member of the merchant in one
// transaction, once check allowed it with the member and the account's
// owners locked (lockOwners); change returns the member as it leaves it.
func (s *Store) changeMember(ctx context.Context, merchantID, id string, check func(members.Member, int) error,
	change func(tx pgx.Tx) (members.Member, error)) (members.Member, error) {
	var out members.Member
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		m, owners, err := lockOwners(ctx, tx, merchantID, id)
		if err != nil {
			return err
		}
		if err := check(m, owners); err != nil {
			return err
		}
		out, err = change(tx)
		return err
	})
	return out, err
}

// UpdateRole changes a current member's role when check allows it.
func (s *Store) UpdateRole(ctx context.Context, merchantID, id, role string, now time.Time, check func(members.Member, int) error) (members.Member, error) {
	return s.changeMember(ctx, merchantID, id, check, func(tx pgx.Tx) (members.Member, error) {
		m, err := scanMember(tx.QueryRow(ctx, `UPDATE members SET role = $3, updated_at = $4 WHERE id = $1 AND merchant_id = $2 RETURNING `+memberColumns,
			id, merchantID, role, now))
		return m, mapErr(err, "member")
	})
}

// RemoveMember marks a current member removed when check allows it, and
// revokes its open sessions in the same transaction.
func (s *Store) RemoveMember(ctx context.Context, merchantID, id string, now time.Time, check func(members.Member, int) error) (members.Member, error) {
	return s.changeMember(ctx, merchantID, id, check, func(tx pgx.Tx) (members.Member, error) {
		m, err := scanMember(tx.QueryRow(ctx, `UPDATE members SET removed_at = $3, updated_at = $3, setup_digest = NULL WHERE id = $1 AND merchant_id = $2 RETURNING `+memberColumns,
			id, merchantID, now))
		if err != nil {
			return m, mapErr(err, "member")
		}
		_, err = tx.Exec(ctx, `UPDATE sessions SET revoked_at = $2 WHERE member_id = $1 AND revoked_at IS NULL`, id, now)
		return m, mapErr(err, "session")
	})
}
