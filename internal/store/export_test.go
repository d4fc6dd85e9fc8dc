package store

import (
	"context"

	"github.com/gatehouse-pay/gatehouse/internal/webhooks"
)

// ReadBatch and RecordBatch run one delivery batch of the given size, for
// the benchmarks.
func (s *Store) ReadBatch(ctx context.Context, ids []string) error {
	_, err := s.deliveriesForWork(ctx, ids)
	return err
}

func (s *Store) RecordBatch(ctx context.Context, rs []webhooks.AttemptRecord) ([]bool, error) {
	return s.recordAttempts(ctx, rs)
}
