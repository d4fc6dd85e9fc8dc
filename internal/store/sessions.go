package store

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/gatehouse-pay/gatehouse/internal/auth"
)

const sessionColumns = `id, merchant_id, coalesce(member_id, ''), created_at, expires_at, revoked_at`

const insertSession = `INSERT INTO sessions (id, merchant_id, member_id, created_at, expires_at, revoked_at) VALUES ($1, $2, $3, $4, $5, NULL)`

// CreateSession stores a new open session.
func (s *Store) CreateSession(ctx context.Context, sess auth.Session) error {
	return s.audited(ctx, func(q dbtx) error {
		_, err := q.Exec(ctx, insertSession, sess.ID, sess.MerchantID, sess.MemberID, sess.CreatedAt, sess.ExpiresAt)
		return mapErr(err, "session")
	})
}

const selectSession = `SELECT ` + sessionColumns + ` FROM sessions WHERE id = $1`

// SessionByID returns the session or NotFound.
func (s *Store) SessionByID(ctx context.Context, id string) (auth.Session, error) {
	rows, _ := s.pool.Query(ctx, selectSession, id)
	sess, err := pgx.CollectExactlyOneRow(rows, pgx.RowToStructByPos[auth.Session])
	return sess, mapErr(err, "session")
}

const revokeSession = `UPDATE sessions SET revoked_at = COALESCE(revoked_at, now())
WHERE id = $1 RETURNING ` + sessionColumns

// RevokeSession marks the session revoked, keeping the first revocation time.
func (s *Store) RevokeSession(ctx context.Context, id string) (sess auth.Session, err error) {
	err = s.audited(ctx, func(q dbtx) error {
		rows, _ := q.Query(ctx, revokeSession, id)
		sess, err = pgx.CollectExactlyOneRow(rows, pgx.RowToStructByPos[auth.Session])
		return mapErr(err, "session")
	})
	return sess, err
}

const deleteExpiredSessions = `DELETE FROM sessions WHERE expires_at < $1`

// DeleteSessionsExpiredBefore removes sessions that expired before t.
func (s *Store) DeleteSessionsExpiredBefore(ctx context.Context, t time.Time) (int64, error) {
	tag, err := s.pool.Exec(ctx, deleteExpiredSessions, t)
	return tag.RowsAffected(), mapErr(err, "session")
}
