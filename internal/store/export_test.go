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

// DeliveryBatchStatements are the statements the batch pool runs.
func DeliveryBatchStatements() map[string]string {
	return map[string]string{"read": selectDeliveriesForWork, "record": recordAttempts}
}

// ExplainArgs are sample arguments of a batch statement for EXPLAIN EXECUTE.
func ExplainArgs(name string) string {
	if name == "read" {
		return `'{00000000-0000-7000-8000-000000000001}'`
	}
	return `'{00000000-0000-7000-8000-000000000001}', '{1}', '{succeeded}', '{1}', '{NULL}', '{2026-01-01T00:00:00Z}', '{1}', '{200}', '{NULL}', '{NULL}', '{NULL}'`
}

// MapErr is mapErr, for the deadline property.
var MapErr = mapErr

// SetAuditChains spreads audit entries over n chains until the returned
// function restores the default.
func SetAuditChains(n int) (restore func()) {
	old := auditChains
	auditChains = n
	return func() { auditChains = old }
}

// Check measures the standby's lag once, as Run does every interval.
func (sb *Standby) Check(ctx context.Context) { sb.check(ctx) }

// Fresh reports whether the last check found the standby within its lag
// bound, so that list reads that may lag go to it.
func (sb *Standby) Fresh() bool { return standbyState(sb.state.Load()) == standbyFresh }
