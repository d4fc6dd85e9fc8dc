package apikeys

import (
	"context"
	"errors"

	"github.com/gatehouse-pay/gatehouse/internal/apperr"
	"github.com/gatehouse-pay/gatehouse/internal/idempotency"
)

// OnceStore is the part of the store that creates a key together with the
// record of its Idempotency-Key, in one transaction.
type OnceStore interface {
	// CreateKeyOnce stores the key and records first under the key, unless
	// the key was used: then it creates nothing and returns the stored
	// response (ErrReused when it answered another request).
	CreateKeyOnce(ctx context.Context, k Key, idem *idempotency.Request, first idempotency.Response) (*idempotency.Response, error)
}

// CreateOnce is Create under an Idempotency-Key. The secret key is stored
// only as a digest, so the recorded answer is render(key) without it: the
// first call returns the new key and its secret; a repeat of the same
// request within 24 hours returns that recorded answer (the same key object,
// no secret) with replay set, and creates nothing. Another request under the
// key gets idempotency_key_reused, one while the first still runs
// idempotency_key_in_use.
func (s *Service) CreateOnce(ctx context.Context, merchantID string, p Params, idem *idempotency.Request, render func(Key) (idempotency.Response, error)) (created Created, replay *idempotency.Response, err error) {
	st, ok := s.store.(OnceStore)
	if !ok {
		return Created{}, nil, apperr.Internal(errors.New("apikeys: the store cannot record idempotency keys"))
	}
	c, err := s.newKey(merchantID, p)
	if err != nil {
		return Created{}, nil, err
	}
	first, err := render(c.Key)
	if err != nil {
		return Created{}, nil, apperr.Internal(err)
	}
	if replay, err = st.CreateKeyOnce(ctx, c.Key, idem, first); err != nil || replay != nil {
		return Created{}, replay, err
	}
	return c, nil, nil
}
