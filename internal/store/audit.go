package store

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/gatehouse-pay/gatehouse/internal/audit"
	"github.com/gatehouse-pay/gatehouse/internal/listing"
)

// errNothingDone ends an audited write that found nothing to change: its
// transaction rolls back, so no entry is written.
var errNothingDone = errors.New("store: nothing done")

// dbtx is what a write runs on: the pool, or a transaction.
type dbtx interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// appendAudit is the call that appends an entry to its merchant's chain
// (migrations/00013_audit_log.sql): it locks the chain's head until the
// transaction ends.
const appendAudit = `SELECT audit_append($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)`

// auditChains is audit.Chains; the benchmarks vary it.
var auditChains = audit.Chains

// auditArgs are appendAudit's arguments for e, on a chain picked at random.
func auditArgs(e audit.Entry) []any {
	return []any{e.ID, e.MerchantID, rand.IntN(auditChains), e.ActorType, e.ActorID, e.Action,
		e.ObjectType, e.ObjectID, e.IP, e.UserAgent, e.RequestID}
}

// commitAudited commits tx, first appending the audit entry ctx carries if
// it is still to be written: the entry commits with the action or not at
// all. The append comes last, so the chain's head is locked only for the
// commit.
func commitAudited(ctx context.Context, tx pgx.Tx) error {
	e, ok := audit.Claim(ctx)
	if !ok {
		return mapErr(tx.Commit(ctx), "transaction")
	}
	committed := false
	defer func() { audit.Release(ctx, committed) }()
	if _, err := tx.Exec(ctx, appendAudit, auditArgs(e)...); err != nil {
		return mapErr(err, "audit log")
	}
	if err := tx.Commit(ctx); err != nil {
		return mapErr(err, "transaction")
	}
	committed = true
	return nil
}

// audited runs a request's single-statement write fn: on the pool, or, when
// ctx carries an audit entry still to be written, in a transaction that
// writes the entry too.
func (s *Store) audited(ctx context.Context, fn func(q dbtx) error) error {
	if !audit.Pending(ctx) {
		return fn(s.pool)
	}
	return s.inTx(ctx, func(tx pgx.Tx) error { return fn(tx) })
}

// AppendAudit writes the audit entry ctx carries on its own, if it is still
// to be written: for a request whose action wrote nothing to the database.
func (s *Store) AppendAudit(ctx context.Context) error {
	if !audit.Pending(ctx) {
		return nil
	}
	return s.inTx(ctx, func(pgx.Tx) error { return nil })
}

const auditColumns = `id, merchant_id, chain, seq, at, actor_type, actor_id, action, object_type, object_id,
ip, user_agent, request_id, prev_hash, hash`

func scanAudit(r pgx.Row) (audit.Entry, error) {
	var e audit.Entry
	err := r.Scan(&e.ID, &e.MerchantID, &e.Chain, &e.Seq, &e.At, &e.ActorType, &e.ActorID, &e.Action, &e.ObjectType,
		&e.ObjectID, &e.IP, &e.UserAgent, &e.RequestID, &e.PrevHash, &e.Hash)
	return e, err
}

// ListAudit returns a page of the merchant's audit log, newest first.
func (s *Store) ListAudit(ctx context.Context, merchantID string, f audit.Filter, p listing.Params) (listing.Page[audit.Entry], error) {
	query := `SELECT ` + auditColumns + ` FROM audit_log WHERE merchant_id = $1`
	args := []any{merchantID}
	add := func(cond string, v any) {
		args = append(args, v)
		query += ` AND ` + cond + ` $` + strconv.Itoa(len(args))
	}
	if f.Actor != "" {
		add("actor_id =", f.Actor)
	}
	if f.Action != "" {
		add("action =", f.Action)
	}
	if f.ObjectID != "" {
		add("object_id =", f.ObjectID)
	}
	if f.CreatedGTE != nil {
		add("at >=", *f.CreatedGTE)
	}
	if f.CreatedLTE != nil {
		add("at <=", *f.CreatedLTE)
	}
	return listPage(ctx, s, query, args, p, scanAudit, "audit log entry")
}

// AuditPartitionsAhead is how many months ahead of the current one the
// audit log's partitions are kept created.
const AuditPartitionsAhead = 3

// MaintainAuditLog creates the audit log's monthly partitions up to
// AuditPartitionsAhead months after now's and drops those that ended
// audit.Retention before now, anchoring each chain at its last dropped
// entry.
func (s *Store) MaintainAuditLog(ctx context.Context, now time.Time) (created, dropped int, err error) {
	if err := s.pool.QueryRow(ctx, `SELECT audit_ensure_partitions($1, $2)`, now, AuditPartitionsAhead).Scan(&created); err != nil {
		return 0, 0, mapErr(err, "audit log partitions")
	}
	if err := s.pool.QueryRow(ctx, `SELECT audit_drop_before($1)`, now.Add(-audit.Retention)).Scan(&dropped); err != nil {
		return created, 0, mapErr(err, "audit log partitions")
	}
	return created, dropped, nil
}

// VerifyAudit checks every chain of the audit log in one snapshot, entry by
// entry from its anchor to its head, and every month's partition ever made
// (there, or its drop recorded by retention), and returns what it found.
func (s *Store) VerifyAudit(ctx context.Context) (audit.Summary, error) {
	tx, err := s.pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		return audit.Summary{}, mapErr(err, "audit log")
	}
	defer tx.Rollback(context.Background()) //nolint:errcheck // read only
	links := func(query string) ([]audit.Link, error) {
		rows, _ := tx.Query(ctx, query)
		return pgx.CollectRows(rows, func(r pgx.CollectableRow) (audit.Link, error) {
			var l audit.Link
			err := r.Scan(&l.MerchantID, &l.Chain, &l.Seq, &l.Hash)
			return l, err
		})
	}
	anchors, err := links(`SELECT DISTINCT ON (merchant_id, chain) merchant_id, chain, seq, hash FROM audit_anchors ORDER BY merchant_id, chain, seq DESC`)
	if err != nil {
		return audit.Summary{}, fmt.Errorf("store: audit anchors: %w", err)
	}
	heads, err := links(`SELECT merchant_id, chain, seq, hash FROM audit_heads`)
	if err != nil {
		return audit.Summary{}, fmt.Errorf("store: audit heads: %w", err)
	}
	missing, err := missingMonths(ctx, tx)
	if err != nil {
		return audit.Summary{}, err
	}
	v := audit.NewVerifier(anchors, heads)
	rows, err := tx.Query(ctx, `SELECT `+auditColumns+` FROM audit_log ORDER BY merchant_id, chain, seq`)
	if err != nil {
		return audit.Summary{}, fmt.Errorf("store: audit log: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		e, err := scanAudit(rows)
		if err != nil {
			return audit.Summary{}, fmt.Errorf("store: audit log: %w", err)
		}
		v.Add(e)
	}
	if err := rows.Err(); err != nil {
		return audit.Summary{}, fmt.Errorf("store: audit log: %w", err)
	}
	sum := v.Finish()
	sum.Missing = missing
	return sum, nil
}

// missingMonths reads every month's partition ever made
// (audit_partition_months), those of audit_log now and the drops retention
// recorded (audit_partition_drops), and returns the months gone unrecorded.
func missingMonths(ctx context.Context, tx pgx.Tx) ([]audit.Month, error) {
	rows, _ := tx.Query(ctx, `SELECT month, partition FROM audit_partition_months ORDER BY month`)
	made, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (audit.Month, error) {
		var m audit.Month
		err := r.Scan(&m.Month, &m.Partition)
		return m, err
	})
	if err != nil {
		return nil, fmt.Errorf("store: audit partitions made: %w", err)
	}
	names := func(query string) (map[string]bool, error) {
		rows, _ := tx.Query(ctx, query)
		list, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			return nil, err
		}
		set := make(map[string]bool, len(list))
		for _, n := range list {
			set[n] = true
		}
		return set, nil
	}
	present, err := names(`SELECT c.relname::text FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid WHERE i.inhparent = 'audit_log'::regclass`)
	if err != nil {
		return nil, fmt.Errorf("store: audit partitions: %w", err)
	}
	dropped, err := names(`SELECT partition FROM audit_partition_drops`)
	if err != nil {
		return nil, fmt.Errorf("store: audit partition drops: %w", err)
	}
	return audit.MissingMonths(made, present, dropped), nil
}
