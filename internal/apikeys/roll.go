package apikeys

import (
	"context"
	"time"

	"github.com/gatehouse-pay/gatehouse/internal/apperr"
	"github.com/gatehouse-pay/gatehouse/internal/ids"
)

// MaxRollOverlap is the longest an old key keeps working after a roll.
const MaxRollOverlap = 7 * 24 * time.Hour

// Rolled is the answer to a roll: the new key with its secret, and the old
// key with its expiry.
type Rolled struct {
	Created
	Old Key
}

// Roll replaces one of the merchant's keys with a new one of the same type,
// name, environment and permissions, whose secret exists only in the
// answer. The old key keeps working for overlap (0 to MaxRollOverlap) and
// from then on is refused with token_revoked, by every replica: like
// Revoke, Roll writes the old key's new state to the shared cache first (its
// expiry, or revoked when overlap is 0) and commits in Postgres only once
// that write succeeded, and answers KindUnavailable, having changed nothing,
// when it cannot. A key that is revoked or was rolled already is a
// KindConflict invalid_state; a key of another merchant is not found. The
// maker must be able to make the key it rolls (see Maker): otherwise the
// answer is permission_denied and nothing changes. The new key records the
// maker as its creator.
func (s *Service) Roll(ctx context.Context, merchantID, id string, overlap time.Duration, maker Maker) (Rolled, error) {
	if overlap < 0 || overlap > MaxRollOverlap {
		return Rolled{}, apperr.Invalid("expires_in", "expires_in must be 0 to %d seconds.", int(MaxRollOverlap/time.Second))
	}
	if !ids.Valid("key", id) {
		return Rolled{}, apperr.NotFound("api_key")
	}
	old, err := s.store.KeyByID(ctx, merchantID, id)
	if err != nil {
		return Rolled{}, err
	}
	if err := maker.mayMake(old.Type(), old.Access(), true); err != nil {
		return Rolled{}, err
	}
	if err := rollable(old); err != nil {
		return Rolled{}, err
	}
	c, err := s.newKey(merchantID, Params{Environment: old.Environment, Name: old.Name, Type: old.Type(), Permissions: old.Permissions, Maker: maker})
	if err != nil {
		return Rolled{}, err
	}
	expiresAt := s.now().UTC().Truncate(time.Millisecond).Add(overlap)
	revoke := overlap == 0
	e := entryOf(old)
	e.ExpiresAt, e.Revoked = expiresAt, revoke
	if err := s.cache.SetKey(ctx, old.SecretDigest, e, s.ttlOf(e)); err != nil {
		s.log.ErrorContext(ctx, "key not rolled: the key cache cannot be updated", "key_id", old.ID, "err", err)
		return Rolled{}, apperr.Unavailable(err)
	}
	rolled, err := s.store.RollKey(ctx, merchantID, id, c.Key, expiresAt, revoke)
	if err != nil {
		if apperr.KindOf(err) == apperr.KindConflict {
			// A concurrent roll or revoke won: put back what it committed.
			if k, kerr := s.store.KeyByID(ctx, merchantID, id); kerr == nil {
				if err := s.cache.SetKey(ctx, k.SecretDigest, entryOf(k), s.ttlOf(entryOf(k))); err != nil {
					s.log.WarnContext(ctx, "key cache unavailable", "op", "restore", "err", err)
				}
			}
		}
		return Rolled{}, err
	}
	return Rolled{Created: c, Old: rolled}, nil
}

// ErrNotRollable is the answer to rolling a key that is revoked or was
// rolled already.
func ErrNotRollable(k Key) error {
	msg := "This key was rolled already; roll the key that replaced it."
	if k.RevokedAt != nil {
		msg = "This key is revoked; create a new key instead."
	}
	return &apperr.Error{Kind: apperr.KindConflict, Code: apperr.CodeInvalidState, Message: msg}
}

func rollable(k Key) error {
	if k.RevokedAt != nil || k.ExpiresAt != nil {
		return ErrNotRollable(k)
	}
	return nil
}
