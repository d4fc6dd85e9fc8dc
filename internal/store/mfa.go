package store

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/gatehouse-pay/gatehouse/internal/apperr"
	"github.com/gatehouse-pay/gatehouse/internal/mfa"
)

// Two-factor sign-in (internal/mfa, migration 00015).

// SetPendingTOTP stores a member's pending, sealed secret in place of any
// pending one. A member who has two-factor sign-in on already is a Conflict.
func (s *Store) SetPendingTOTP(ctx context.Context, merchantID, memberID string, sealed []byte, now time.Time) error {
	var enabled bool
	err := s.pool.QueryRow(ctx, `UPDATE members SET mfa_pending_sealed = CASE WHEN mfa_secret_sealed IS NULL THEN $3 ELSE mfa_pending_sealed END,
updated_at = $4 WHERE id = $1 AND merchant_id = $2 AND removed_at IS NULL RETURNING mfa_secret_sealed IS NOT NULL`,
		memberID, merchantID, sealed, now).Scan(&enabled)
	if err != nil {
		return mapErr(err, "member")
	}
	if enabled {
		return mfa.ErrEnabled
	}
	return nil
}

// PendingTOTP returns the member's pending sealed secret, or NotFound.
func (s *Store) PendingTOTP(ctx context.Context, merchantID, memberID string) ([]byte, error) {
	var sealed []byte
	err := s.pool.QueryRow(ctx, `SELECT mfa_pending_sealed FROM members WHERE id = $1 AND merchant_id = $2 AND removed_at IS NULL AND mfa_pending_sealed IS NOT NULL`,
		memberID, merchantID).Scan(&sealed)
	return sealed, mapErr(err, "enrollment")
}

// EnableTOTP makes the pending secret the member's, when it is still the
// one given, remembers step as used, and replaces the recovery codes with
// the given digests, in one transaction. A pending secret replaced or
// already confirmed in the meantime is a Conflict.
func (s *Store) EnableTOTP(ctx context.Context, merchantID, memberID string, pending []byte, step int64, recovery [][]byte, now time.Time) error {
	return s.inTx(ctx, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `UPDATE members SET mfa_secret_sealed = mfa_pending_sealed, mfa_pending_sealed = NULL,
mfa_last_step = $4, mfa_enabled_at = $5, updated_at = $5
WHERE id = $1 AND merchant_id = $2 AND removed_at IS NULL AND mfa_secret_sealed IS NULL AND mfa_pending_sealed = $3`,
			memberID, merchantID, pending, step, now)
		if err != nil {
			return mapErr(err, "member")
		}
		if tag.RowsAffected() != 1 {
			return mfa.ErrNoEnrollment
		}
		if _, err := tx.Exec(ctx, `DELETE FROM mfa_recovery_codes WHERE member_id = $1`, memberID); err != nil {
			return mapErr(err, "recovery code")
		}
		rows := make([][]any, len(recovery))
		for i, d := range recovery {
			rows[i] = []any{memberID, d}
		}
		_, err = tx.CopyFrom(ctx, pgx.Identifier{"mfa_recovery_codes"}, []string{"member_id", "digest"}, pgx.CopyFromRows(rows))
		return mapErr(err, "recovery code")
	})
}

// TOTPSecret returns the member's confirmed sealed secret, or NotFound.
func (s *Store) TOTPSecret(ctx context.Context, merchantID, memberID string) ([]byte, error) {
	var sealed []byte
	err := s.pool.QueryRow(ctx, `SELECT mfa_secret_sealed FROM members WHERE id = $1 AND merchant_id = $2 AND removed_at IS NULL AND mfa_secret_sealed IS NOT NULL`,
		memberID, merchantID).Scan(&sealed)
	return sealed, mapErr(err, "member")
}

// UseTOTPStep records step as the member's last used one, when it is later
// than the last; false when it is not (the code was used already).
func (s *Store) UseTOTPStep(ctx context.Context, memberID string, step int64) (bool, error) {
	tag, err := s.pool.Exec(ctx, `UPDATE members SET mfa_last_step = $2
WHERE id = $1 AND mfa_secret_sealed IS NOT NULL AND (mfa_last_step IS NULL OR mfa_last_step < $2)`, memberID, step)
	if err != nil {
		return false, mapErr(err, "member")
	}
	return tag.RowsAffected() == 1, nil
}

// UseRecoveryCode marks the member's unused recovery code with digest used;
// false when there is none.
func (s *Store) UseRecoveryCode(ctx context.Context, memberID string, digest []byte, now time.Time) (bool, error) {
	tag, err := s.pool.Exec(ctx, `UPDATE mfa_recovery_codes SET used_at = $3 WHERE member_id = $1 AND digest = $2 AND used_at IS NULL`,
		memberID, digest, now)
	if err != nil {
		return false, mapErr(err, "recovery code")
	}
	return tag.RowsAffected() == 1, nil
}

// RecoveryCodesLeft counts the member's unused recovery codes.
func (s *Store) RecoveryCodesLeft(ctx context.Context, memberID string) (int, error) {
	var n int
	err := s.pool.QueryRow(ctx, `SELECT count(*) FROM mfa_recovery_codes WHERE member_id = $1 AND used_at IS NULL`, memberID).Scan(&n)
	return n, mapErr(err, "recovery code")
}

// CreateMFAChallenge stores a sign-in's second step.
func (s *Store) CreateMFAChallenge(ctx context.Context, c mfa.Challenge) error {
	_, err := s.pool.Exec(ctx, `INSERT INTO mfa_challenges (digest, merchant_id, member_id, expires_at) VALUES ($1, $2, $3, $4)`,
		c.Digest, c.MerchantID, c.MemberID, c.ExpiresAt)
	return mapErr(err, "challenge")
}

// MFAChallenge returns the unexpired challenge with digest, or NotFound.
func (s *Store) MFAChallenge(ctx context.Context, digest []byte, now time.Time) (mfa.Challenge, error) {
	c := mfa.Challenge{Digest: digest}
	err := s.pool.QueryRow(ctx, `SELECT merchant_id, member_id, expires_at FROM mfa_challenges WHERE digest = $1 AND expires_at > $2`,
		digest, now).Scan(&c.MerchantID, &c.MemberID, &c.ExpiresAt)
	return c, mapErr(err, "challenge")
}

// AttemptMFAChallenge counts one code against the unexpired challenge with
// digest when it has counted fewer than max, in one statement, so that
// concurrent codes never check more than max; it returns how many it may
// still count, or NotFound (gone, expired or spent). The column keeps its
// name of migration 00015, failures: a right code ends the challenge.
func (s *Store) AttemptMFAChallenge(ctx context.Context, digest []byte, now time.Time, max int) (int, error) {
	var counted int
	err := s.pool.QueryRow(ctx, `UPDATE mfa_challenges SET failures = failures + 1
WHERE digest = $1 AND expires_at > $2 AND failures < $3 RETURNING failures`, digest, now, max).Scan(&counted)
	if err != nil {
		return 0, mapErr(err, "challenge")
	}
	return max - counted, nil
}

// ConsumeMFAChallenge deletes the unexpired challenge; false when there was
// none (expired, or used by a concurrent request).
func (s *Store) ConsumeMFAChallenge(ctx context.Context, digest []byte, now time.Time) (bool, error) {
	tag, err := s.pool.Exec(ctx, `DELETE FROM mfa_challenges WHERE digest = $1 AND expires_at > $2`, digest, now)
	if err != nil {
		return false, mapErr(err, "challenge")
	}
	return tag.RowsAffected() == 1, nil
}

// DeleteMFAChallengesExpiredBefore deletes challenges that expired before t.
func (s *Store) DeleteMFAChallengesExpiredBefore(ctx context.Context, t time.Time) (int64, error) {
	tag, err := s.pool.Exec(ctx, `DELETE FROM mfa_challenges WHERE expires_at < $1`, t)
	return tag.RowsAffected(), mapErr(err, "challenge")
}

// MFARequired reports whether the merchant requires two-factor sign-in of
// every member.
func (s *Store) MFARequired(ctx context.Context, merchantID string) (bool, error) {
	var required bool
	err := s.pool.QueryRow(ctx, `SELECT mfa_required FROM merchants WHERE id = $1`, merchantID).Scan(&required)
	return required, mapErr(err, "merchant")
}

// SetMFARequired sets the merchant's policy.
func (s *Store) SetMFARequired(ctx context.Context, merchantID string, required bool) error {
	tag, err := s.pool.Exec(ctx, `UPDATE merchants SET mfa_required = $2 WHERE id = $1`, merchantID, required)
	if err != nil {
		return mapErr(err, "merchant")
	}
	if tag.RowsAffected() != 1 {
		return apperr.NotFound("merchant")
	}
	return nil
}
