package store

import (
	"context"
	"time"

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
INSERT INTO sandbox_ledger (idempotency_key, operation, parent_reference, amount, currency, account, capture)
VALUES ($1, $2, $3, $4, $5, nullif($6, ''), $7)
ON CONFLICT (idempotency_key) DO UPDATE SET calls = sandbox_ledger.calls + 1, updated_at = now()
RETURNING operation, parent_reference, amount, currency, coalesce(reference, ''), calls,
	set_config('synchronous_commit', 'off', true)`

// Call implements sandbox.Ledger.
func (l *SandboxLedger) Call(ctx context.Context, e sandbox.Entry) (sandbox.Record, error) {
	r := sandbox.Record{Entry: sandbox.Entry{IdempotencyKey: e.IdempotencyKey}}
	var op, async string
	err := l.s.pool.QueryRow(ctx, ledgerCall, e.IdempotencyKey, string(e.Operation), e.Parent, e.Amount, e.Currency, e.Account, e.Capture).
		Scan(&op, &r.Parent, &r.Amount, &r.Currency, &r.Reference, &r.Calls, &async)
	r.Operation = sandbox.Operation(op)
	return r, mapErr(err, "sandbox ledger entry")
}

const ledgerBook = `UPDATE sandbox_ledger SET reference = coalesce(reference, $2), booked_at = coalesce(booked_at, now()),
	updated_at = now()
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

// ledgerBookings reads an account's bookings that moved money through
// sandbox_ledger_account_idx, each with its authorization (the unique
// reference index): for an authorization or a refund the row whose
// reference is the authorization's; for the others, their parent's.
const ledgerBookings = `
SELECT l.idempotency_key, l.operation, l.parent_reference, l.amount, l.currency, l.reference, l.calls, l.capture, l.booked_at,
	a.idempotency_key, a.amount, a.currency, a.reference
FROM sandbox_ledger l
JOIN sandbox_ledger a ON a.operation = 'authorize'
	AND a.reference = CASE WHEN l.operation = 'authorize' THEN l.reference ELSE l.parent_reference END
WHERE l.account = $1 AND l.reference IS NOT NULL AND l.booked_at >= $2 AND l.booked_at < $3
	AND (l.operation IN ('capture', 'refund') OR (l.operation IN ('authorize', 'authenticate') AND l.capture))
ORDER BY l.booked_at, l.idempotency_key`

// Bookings implements sandbox.Ledger.
func (l *SandboxLedger) Bookings(ctx context.Context, account string, from, to time.Time) ([]sandbox.Booking, error) {
	rows, err := l.s.pool.Query(ctx, ledgerBookings, account, from, to)
	if err != nil {
		return nil, mapErr(err, "sandbox ledger entry")
	}
	list, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (sandbox.Booking, error) {
		var b sandbox.Booking
		var op string
		err := row.Scan(&b.IdempotencyKey, &op, &b.Parent, &b.Amount, &b.Currency, &b.Reference, &b.Calls, &b.Capture, &b.BookedAt,
			&b.Authorization.IdempotencyKey, &b.Authorization.Amount, &b.Authorization.Currency, &b.Authorization.Reference)
		b.Operation, b.Account = sandbox.Operation(op), account
		b.Authorization.Operation, b.Authorization.Account = sandbox.OpAuthorize, account
		return b, err
	})
	return list, mapErr(err, "sandbox ledger entry")
}

// ledgerPayouts reads the payouts of a sandbox connector made in a window
// (payouts_connector_idx), and those that failed in it
// (payouts_failed_idx); a payout made and failed in the window is one row.
const ledgerPayouts = `
SELECT id, currency, amount, created_at, CASE WHEN status = 'failed' THEN updated_at END FROM payouts
WHERE connector_id = $1 AND created_at >= $2 AND created_at < $3
UNION
SELECT id, currency, amount, created_at, updated_at FROM payouts
WHERE connector_id = $1 AND status = 'failed' AND updated_at >= $2 AND updated_at < $3
ORDER BY 4, 1`

// Payouts implements sandbox.Ledger: the sandbox's bank run pays out the
// payouts the gateway makes of the connector.
func (l *SandboxLedger) Payouts(ctx context.Context, account string, from, to time.Time) ([]sandbox.Payout, error) {
	rows, err := l.s.pool.Query(ctx, ledgerPayouts, account, from, to)
	if err != nil {
		return nil, mapErr(err, "payout")
	}
	list, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (sandbox.Payout, error) {
		var p sandbox.Payout
		err := row.Scan(&p.ID, &p.Currency, &p.Amount, &p.CreatedAt, &p.FailedAt)
		return p, err
	})
	return list, mapErr(err, "payout")
}
