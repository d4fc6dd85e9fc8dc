package store

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/gatehouse-pay/gatehouse/internal/ids"
	"github.com/gatehouse-pay/gatehouse/internal/notifications"
	"github.com/gatehouse-pay/gatehouse/internal/providers"
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
INSERT INTO sandbox_ledger (idempotency_key, operation, parent_reference, amount, currency, account, capture, dispute)
VALUES ($1, $2, $3, $4, $5, nullif($6, ''), $7, nullif($8, ''))
ON CONFLICT (idempotency_key) DO UPDATE SET calls = sandbox_ledger.calls + 1, updated_at = now()
RETURNING operation, parent_reference, amount, currency, coalesce(reference, ''), calls,
	set_config('synchronous_commit', 'off', true)`

// Call implements sandbox.Ledger.
func (l *SandboxLedger) Call(ctx context.Context, e sandbox.Entry) (sandbox.Record, error) {
	return l.call(ctx, ledgerCall, e)
}

// ledgerCallBooked is ledgerCall that books $9 with the call when the row
// has no reference and the call asks for what the first one did.
const ledgerCallBooked = `
INSERT INTO sandbox_ledger AS l (idempotency_key, operation, parent_reference, amount, currency, account, capture, dispute,
	reference, booked_at)
VALUES ($1, $2, $3, $4, $5, nullif($6, ''), $7, nullif($8, ''), $9, now())
ON CONFLICT (idempotency_key) DO UPDATE SET calls = l.calls + 1, updated_at = now(),
	reference = CASE WHEN ` + sameCall + ` THEN coalesce(l.reference, EXCLUDED.reference) ELSE l.reference END,
	booked_at = CASE WHEN ` + sameCall + ` THEN coalesce(l.booked_at, now()) ELSE l.booked_at END
RETURNING operation, parent_reference, amount, currency, coalesce(reference, ''), calls,
	set_config('synchronous_commit', 'off', true)`

// sameCall: the call asks for what the key's first call asked.
const sameCall = `(l.operation, l.parent_reference, l.amount, upper(l.currency))
		= (EXCLUDED.operation, EXCLUDED.parent_reference, EXCLUDED.amount, upper(EXCLUDED.currency))`

// CallBooked implements sandbox.Ledger.
func (l *SandboxLedger) CallBooked(ctx context.Context, e sandbox.Entry, reference string) (sandbox.Record, error) {
	return l.call(ctx, ledgerCallBooked, e, reference)
}

// call runs ledgerCall or ledgerCallBooked (with the reference in more).
func (l *SandboxLedger) call(ctx context.Context, query string, e sandbox.Entry, more ...any) (sandbox.Record, error) {
	r := sandbox.Record{Entry: sandbox.Entry{IdempotencyKey: e.IdempotencyKey}}
	var op, async string
	args := append([]any{e.IdempotencyKey, string(e.Operation), e.Parent, e.Amount, e.Currency, e.Account, e.Capture, e.Dispute}, more...)
	err := l.s.pool.QueryRow(ctx, query, args...).Scan(&op, &r.Parent, &r.Amount, &r.Currency, &r.Reference, &r.Calls, &async)
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

const ledgerAuthorization = `SELECT idempotency_key, operation, parent_reference, amount, currency, reference, calls,
	coalesce(account, ''), coalesce(dispute, '')
FROM sandbox_ledger WHERE reference = $1 AND operation = 'authorize'`

// Authorization implements sandbox.Ledger.
func (l *SandboxLedger) Authorization(ctx context.Context, reference string) (sandbox.Record, error) {
	var r sandbox.Record
	var op string
	err := l.s.pool.QueryRow(ctx, ledgerAuthorization, reference).
		Scan(&r.IdempotencyKey, &op, &r.Parent, &r.Amount, &r.Currency, &r.Reference, &r.Calls, &r.Account, &r.Dispute)
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

var _ sandbox.DisputeBooks = (*SandboxLedger)(nil)

const sandboxDisputeColumns = `reference, parent_reference, account, amount, currency, reason, inquiry, status,
coalesce(evidence_outcome, ''), decide_at, due_by, created_at`

func scanSandboxDispute(row pgx.Row) (sandbox.Dispute, error) {
	var d sandbox.Dispute
	err := row.Scan(&d.Reference, &d.Parent, &d.Account, &d.Amount, &d.Currency, &d.Reason, &d.Inquiry, &d.Status,
		&d.Outcome, &d.DecideAt, &d.DueBy, &d.CreatedAt)
	return d, err
}

const (
	// insertSandboxDispute names the columns itself: sandboxDisputeColumns
	// reads evidence_outcome through coalesce, which no INSERT's column
	// list can take.
	insertSandboxDispute = `INSERT INTO sandbox_disputes (reference, parent_reference, account, amount, currency, reason, inquiry,
status, evidence_outcome, decide_at, due_by, created_at)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, nullif($9, ''), $10, $11, $12) ON CONFLICT (parent_reference) DO NOTHING`
	updateSandboxDispute = `UPDATE sandbox_disputes SET status = $2, evidence_outcome = nullif($3, ''), decide_at = $4
WHERE reference = $1`
	lockSandboxDispute  = `SELECT ` + sandboxDisputeColumns + ` FROM sandbox_disputes WHERE reference = $1 FOR UPDATE`
	dueSandboxDisputes  = `SELECT ` + sandboxDisputeColumns + ` FROM sandbox_disputes WHERE decide_at <= $1 ORDER BY decide_at LIMIT 100 FOR UPDATE SKIP LOCKED`
	sandboxNoticeTarget = `SELECT merchant_id FROM connectors WHERE id = $1`
)

// notifySandbox stores a notice of the sandbox for the account's connector
// as a provider notification, with the outbox row of the task that applies
// it; "" when the account is no connector.
func notifySandbox(ctx context.Context, tx pgx.Tx, account string, n sandbox.Notice) (string, error) {
	var merchantID string
	err := tx.QueryRow(ctx, sandboxNoticeTarget, account).Scan(&merchantID)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	id := ids.NewUUID()
	tag, err := tx.Exec(ctx, insertNotification, id, account, merchantID, sandbox.Name, n.EventID, n.EventID, n.Type, n.Payload,
		time.Now().UTC().Truncate(time.Microsecond), notifications.OutcomeReceived)
	if err != nil || tag.RowsAffected() == 0 {
		return "", err
	}
	t := notifications.ApplyTask(id)
	_, err = tx.Exec(ctx, insertOutbox, t.ID(), t.Type, id)
	return id, err
}

// OpenDispute implements sandbox.DisputeBooks.
func (l *SandboxLedger) OpenDispute(ctx context.Context, d sandbox.Dispute, n func(sandbox.Dispute) sandbox.Notice) (string, error) {
	var id string
	err := l.s.inTx(ctx, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, insertSandboxDispute, d.Reference, d.Parent, d.Account, d.Amount, d.Currency, d.Reason,
			d.Inquiry, d.Status, d.Outcome, d.DecideAt, d.DueBy, d.CreatedAt)
		if err != nil || tag.RowsAffected() == 0 {
			return err
		}
		id, err = notifySandbox(ctx, tx, d.Account, n(d))
		return err
	})
	return id, mapErr(err, "sandbox dispute")
}

// ChangeDispute implements sandbox.DisputeBooks.
func (l *SandboxLedger) ChangeDispute(ctx context.Context, reference string, change func(sandbox.Dispute) (*sandbox.Dispute, *sandbox.Notice, error)) (string, error) {
	var id string
	err := l.s.inTx(ctx, func(tx pgx.Tx) error {
		d, err := scanSandboxDispute(tx.QueryRow(ctx, lockSandboxDispute, reference))
		if errors.Is(err, pgx.ErrNoRows) {
			return &providers.Decline{Code: "invalid_request", Message: "No such dispute."}
		}
		if err != nil {
			return err
		}
		next, n, err := change(d)
		if err != nil || next == nil {
			return err
		}
		if _, err := tx.Exec(ctx, updateSandboxDispute, next.Reference, next.Status, next.Outcome, next.DecideAt); err != nil {
			return err
		}
		if n != nil {
			id, err = notifySandbox(ctx, tx, next.Account, *n)
		}
		return err
	})
	if _, declined := providers.AsDecline(err); declined {
		return "", err
	}
	return id, mapErr(err, "sandbox dispute")
}

// DecideDisputes implements sandbox.DisputeBooks.
func (l *SandboxLedger) DecideDisputes(ctx context.Context, now time.Time, decide func(sandbox.Dispute) (sandbox.Dispute, sandbox.Notice)) ([]string, error) {
	var out []string
	err := l.s.inTx(ctx, func(tx pgx.Tx) error {
		out = out[:0]
		rows, err := tx.Query(ctx, dueSandboxDisputes, now)
		if err != nil {
			return err
		}
		due, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (sandbox.Dispute, error) { return scanSandboxDispute(r) })
		if err != nil {
			return err
		}
		for _, d := range due {
			next, n := decide(d)
			if _, err := tx.Exec(ctx, updateSandboxDispute, next.Reference, next.Status, next.Outcome, next.DecideAt); err != nil {
				return err
			}
			id, err := notifySandbox(ctx, tx, next.Account, n)
			if err != nil {
				return err
			}
			if id != "" {
				out = append(out, id)
			}
		}
		return nil
	})
	return out, mapErr(err, "sandbox dispute")
}
