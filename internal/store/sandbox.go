package store

import (
	"context"

	"github.com/jackc/pgx/v5"

	"github.com/gatehouse-pay/gatehouse/internal/providers/sandbox"
)

// SandboxLedger implements sandbox.Ledger on the sandbox_ledger table: the
// books of the built-in test provider, kept in the same database so the
// sandbox is idempotent across worker restarts like a real provider.
//
// Its writes commit without waiting for the disk (synchronous_commit off for
// their transaction): they stand for a provider's books, not Gatehouse's. A
// charge's own transition is committed durably after them, and that flush
// carries every earlier WAL record, so a crash can only lose ledger entries
// whose charge did not move either; its task then calls the sandbox again
// with the same idempotency key and books it afresh.
type SandboxLedger struct{ s *Store }

// SandboxLedger returns the sandbox provider's books.
func (s *Store) SandboxLedger() *SandboxLedger { return &SandboxLedger{s: s} }

const ledgerCall = `
INSERT INTO sandbox_ledger (idempotency_key, operation, parent_reference, amount, currency)
VALUES ($1, $2, $3, $4, $5)
ON CONFLICT (idempotency_key) DO UPDATE SET calls = sandbox_ledger.calls + 1, updated_at = now()
RETURNING operation, parent_reference, amount, currency, coalesce(reference, ''), calls,
	set_config('synchronous_commit', 'off', true)`

// Call implements sandbox.Ledger.
func (l *SandboxLedger) Call(ctx context.Context, e sandbox.Entry) (sandbox.Record, error) {
	r := sandbox.Record{Entry: sandbox.Entry{IdempotencyKey: e.IdempotencyKey}}
	var op, async string
	err := l.s.pool.QueryRow(ctx, ledgerCall, e.IdempotencyKey, string(e.Operation), e.Parent, e.Amount, e.Currency).
		Scan(&op, &r.Parent, &r.Amount, &r.Currency, &r.Reference, &r.Calls, &async)
	r.Operation = sandbox.Operation(op)
	return r, mapErr(err, "sandbox ledger entry")
}

const ledgerBook = `UPDATE sandbox_ledger SET reference = coalesce(reference, $2), updated_at = now()
WHERE idempotency_key = $1 RETURNING reference, set_config('synchronous_commit', 'off', true)`

// Book implements sandbox.Ledger.
func (l *SandboxLedger) Book(ctx context.Context, idempotencyKey, reference string) (string, error) {
	var ref, async string
	err := l.s.pool.QueryRow(ctx, ledgerBook, idempotencyKey, reference).Scan(&ref, &async)
	return ref, mapErr(err, "sandbox ledger entry")
}

const ledgerAuthorization = `SELECT idempotency_key, operation, parent_reference, amount, currency, reference, calls
FROM sandbox_ledger WHERE reference = $1 AND operation = 'authorize'`

// Authorization implements sandbox.Ledger.
func (l *SandboxLedger) Authorization(ctx context.Context, reference string) (sandbox.Record, error) {
	var r sandbox.Record
	var op string
	err := l.s.pool.QueryRow(ctx, ledgerAuthorization, reference).
		Scan(&r.IdempotencyKey, &op, &r.Parent, &r.Amount, &r.Currency, &r.Reference, &r.Calls)
	r.Operation = sandbox.Operation(op)
	return r, mapErr(err, "sandbox authorization")
}

const ledgerLookup = `SELECT idempotency_key, operation, parent_reference, amount, currency, coalesce(reference, ''), calls
FROM sandbox_ledger WHERE idempotency_key = $1`

// Lookup implements sandbox.Ledger.
func (l *SandboxLedger) Lookup(ctx context.Context, idempotencyKey string) (sandbox.Record, error) {
	var r sandbox.Record
	var op string
	err := l.s.pool.QueryRow(ctx, ledgerLookup, idempotencyKey).
		Scan(&r.IdempotencyKey, &op, &r.Parent, &r.Amount, &r.Currency, &r.Reference, &r.Calls)
	r.Operation = sandbox.Operation(op)
	return r, mapErr(err, "sandbox ledger entry")
}

const ledgerBooked = `SELECT idempotency_key, operation, parent_reference, amount, currency, reference, calls
FROM sandbox_ledger WHERE parent_reference = $1 AND operation IN ('authenticate', 'capture', 'void') AND reference IS NOT NULL
ORDER BY created_at, idempotency_key`

// Booked implements sandbox.Ledger.
func (l *SandboxLedger) Booked(ctx context.Context, reference string) ([]sandbox.Record, error) {
	rows, err := l.s.pool.Query(ctx, ledgerBooked, reference)
	if err != nil {
		return nil, mapErr(err, "sandbox ledger entry")
	}
	list, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (sandbox.Record, error) {
		var r sandbox.Record
		var op string
		err := row.Scan(&r.IdempotencyKey, &op, &r.Parent, &r.Amount, &r.Currency, &r.Reference, &r.Calls)
		r.Operation = sandbox.Operation(op)
		return r, err
	})
	return list, mapErr(err, "sandbox ledger entry")
}
