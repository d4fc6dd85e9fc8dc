package store

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Retention is how long the rows written per event are kept: events, and
// webhook deliveries with their attempts (the delivery log).
type Retention struct {
	Events     time.Duration
	WebhookLog time.Duration
}

// DefaultRetention is 30 days of both.
var DefaultRetention = Retention{Events: 720 * time.Hour, WebhookLog: 720 * time.Hour}

// Partitioned tables (migrations/00016_partition_events_and_deliveries.sql):
// events by id, webhook_deliveries by id, webhook_attempts by delivery_id
// with the same bounds as webhook_deliveries, each partition's attempts
// referencing its deliveries. The partitions' bounds are UUIDs of instants
// (gh_uuid_floor), their width a sixth of the table's retention
// (PartitionWidth), and the worker keeps them created from now to half
// the retention ahead (PartitionsAhead) and drops each once its upper
// bound is past retention. The DEFAULT partition takes what no partition
// covers (when the worker was stopped for longer than the partitions
// ahead); it should stay empty, and the maintenance moves its rows into
// the partitions it creates for them.

// PartitionWidth is the time one partition covers for a table kept r: a
// sixth of r in whole days, hours, minutes or seconds (5 days for 30
// days, 30 s for 3 minutes), so that a table holds about 7 partitions of
// data and keeps each row at most r and a sixth. Fewer, wider partitions
// cost less on every statement: a generic plan locks and sets up every
// partition of the tables it names, and with 17 partitions the delivery
// path's Postgres CPU per delivery was twice what it is with 4 (the bench's
// webhook section, docs/scaling.md).
func PartitionWidth(r time.Duration) time.Duration {
	w := r / 6
	for _, unit := range []time.Duration{24 * time.Hour, time.Hour, time.Minute, time.Second} {
		if w >= unit {
			return w.Truncate(unit)
		}
	}
	return time.Second
}

// PartitionsAhead is how far past now the partitions of a table kept r
// are created: half of r (15 days, three partitions, for 30 days; three
// prune periods), so
// the worker may be stopped that long, or its prune run late under load,
// before rows go to the DEFAULT partition.
func PartitionsAhead(r time.Duration) time.Duration { return r / 2 }

// partitionLockTimeout bounds the wait for each step's locks: creating a
// partition locks the DEFAULT partition, dropping one the whole table,
// and statements wanting the table queue behind a waiting lock. A step
// that cannot have its locks in time is left to the next run.
const partitionLockTimeout = "1s"

// partitionMaintenanceLock is the advisory lock each step of the
// maintenance holds, so that one worker at a time changes the partitions.
const partitionMaintenanceLock = 0x67685f7061727473 // "gh_parts"

// family is a partitioned table and, for deliveries, the table whose
// partitions follow its bounds and reference its partitions.
type family struct {
	parent, key             string
	follower, followerKey   string
	retention, width, ahead time.Duration
}

func (s *Store) families() []family {
	r := s.retention
	return []family{
		{parent: "events", key: "id", retention: r.Events, width: PartitionWidth(r.Events), ahead: PartitionsAhead(r.Events)},
		{parent: "webhook_deliveries", key: "id", follower: "webhook_attempts", followerKey: "delivery_id",
			retention: r.WebhookLog, width: PartitionWidth(r.WebhookLog), ahead: PartitionsAhead(r.WebhookLog)},
	}
}

// PartitionReport is what one maintenance run did.
type PartitionReport struct {
	Created, Dropped int
	// Moved counts rows moved out of a DEFAULT partition into partitions
	// created for them; Strays the rows of a DEFAULT partition past
	// retention, deleted.
	Moved, Strays int64
	// Postponed counts the steps whose locks were not had in time, or that
	// another worker was running: the next run does them.
	Postponed int
}

// MaintainPartitions creates the partitions of events, webhook_deliveries
// and webhook_attempts up to their PartitionsAhead past now and drops those
// past retention. Each partition created or dropped is its own short
// transaction, which holds the maintenance's advisory lock (transaction
// level, so it holds through PgBouncer's transaction pooling too): one
// worker at a time changes the partitions, and a step another worker is
// running is left to the next run. It is idempotent.
func (s *Store) MaintainPartitions(ctx context.Context, now time.Time) (PartitionReport, error) {
	var rep PartitionReport
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return rep, mapErr(err, "partitions")
	}
	defer conn.Release()
	for _, f := range s.families() {
		if err := f.maintain(ctx, conn, now.UTC(), &rep); err != nil {
			return rep, err
		}
	}
	return rep, nil
}

// partition is one range partition; lo is nil for MINVALUE.
type partition struct {
	name   string
	lo, hi *time.Time
}

var partitionBound = regexp.MustCompile(`^FOR VALUES FROM \((MINVALUE|'([0-9a-f-]{36})')\) TO \('([0-9a-f-]{36})'\)$`)

// partitions lists a table's range partitions (not its DEFAULT), by lower bound.
func partitions(ctx context.Context, conn *pgxpool.Conn, parent string) ([]partition, error) {
	rows, err := conn.Query(ctx, `SELECT c.relname, pg_get_expr(c.relpartbound, c.oid) FROM pg_inherits i
JOIN pg_class c ON c.oid = i.inhrelid WHERE i.inhparent = $1::regclass`, parent)
	if err != nil {
		return nil, mapErr(err, "partitions")
	}
	defer rows.Close()
	var out []partition
	for rows.Next() {
		var name, bound string
		if err := rows.Scan(&name, &bound); err != nil {
			return nil, mapErr(err, "partitions")
		}
		m := partitionBound.FindStringSubmatch(bound)
		if m == nil {
			continue // DEFAULT
		}
		p := partition{name: name}
		if m[2] != "" {
			lo, err := uuidTime(m[2])
			if err != nil {
				return nil, err
			}
			p.lo = &lo
		}
		hi, err := uuidTime(m[3])
		if err != nil {
			return nil, err
		}
		p.hi = &hi
		out = append(out, p)
	}
	return out, mapErr(rows.Err(), "partitions")
}

// uuidTime is the millisecond a UUIDv7 bound stands for.
func uuidTime(u string) (time.Time, error) {
	ms, err := strconv.ParseInt(u[0:8]+u[9:13], 16, 64)
	if err != nil {
		return time.Time{}, fmt.Errorf("store: partition bound %q: %w", u, err)
	}
	return time.UnixMilli(ms).UTC(), nil
}

// uuidFloor is gh_uuid_floor: the least UUID of t's millisecond.
func uuidFloor(t time.Time) string {
	ms := t.UnixMilli()
	return fmt.Sprintf("%08x-%04x-0000-0000-000000000000", ms>>16, ms&0xffff)
}

func (f family) maintain(ctx context.Context, conn *pgxpool.Conn, now time.Time, rep *PartitionReport) error {
	parts, err := partitions(ctx, conn, f.parent)
	if err != nil {
		return err
	}
	// Create: from the end of the last partition (or, with none yet, from
	// the oldest row of the DEFAULT partition still retained, or now) to
	// the horizon.
	var from time.Time
	for _, p := range parts {
		if from.Before(*p.hi) {
			from = *p.hi
		}
	}
	if from.IsZero() {
		from = now.Truncate(f.width)
		var oldest *string
		if err := conn.QueryRow(ctx, `SELECT `+f.key+`::text FROM `+f.parent+`_default ORDER BY `+f.key+` LIMIT 1`).Scan(&oldest); err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return mapErr(err, "partitions")
		}
		if oldest != nil {
			if t, err := uuidTime(*oldest); err == nil && t.Before(from) && t.After(now.Add(-f.retention)) {
				from = t.Truncate(f.width)
			}
		}
	}
	// None past retention: after a long stop, the rows of that time are
	// strays of the DEFAULT partition (below).
	cutoff := now.Add(-f.retention)
	if from.Before(cutoff) {
		from = cutoff.Truncate(f.width)
	}
	for lo := from; lo.Before(now.Add(f.ahead)); {
		hi := lo.Truncate(f.width).Add(f.width)
		ok, err := f.create(ctx, conn, lo, hi, now, rep)
		if err != nil {
			return err
		}
		if !ok {
			break // no gap: the next run goes on from here
		}
		lo = hi
	}
	// Drop every partition whose rows are all past retention.
	for _, p := range parts {
		if p.hi.After(cutoff) {
			continue
		}
		if err := f.drop(ctx, conn, p, rep); err != nil {
			return err
		}
	}
	// Rows of the DEFAULT partition past retention: none, unless an id was
	// not a UUIDv7 of its time. Deleted, which is cheap on an empty table.
	err = f.step(ctx, conn, rep, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `DELETE FROM `+f.parent+`_default WHERE `+f.key+` < $1::uuid`, uuidFloor(cutoff))
		rep.Strays += tag.RowsAffected()
		return err
	})
	if errors.Is(err, errLockTimeout) {
		return nil
	}
	return err
}

// partitionName is a partition's name: its table's and its lower bound's
// time, to the second, in UTC.
func partitionName(parent string, lo time.Time) string {
	return parent + "_p" + lo.UTC().Format("20060102t150405")
}

// writersAhead is how far past the worker's clock the ids that writers
// stamp may reach (their clocks, and a statement begun a moment ago): a
// partition whose range starts before now plus this may be written now.
const writersAhead = time.Minute

// create makes the partition [lo, hi) of the family's tables, in one
// transaction. A partition is made apart and then attached, which locks
// the table SHARE UPDATE EXCLUSIVE (reads and writes go on) and its
// DEFAULT partition ACCESS EXCLUSIVE while it checks that the DEFAULT
// holds no row of the range: rows it holds there are moved first. It
// reports false when it had to give up on a lock.
//
// A partition of the present (the worker caught up after a stop) also
// holds writes of the tables back until it commits: an insert that chose
// the DEFAULT partition before the attach, then waited for its lock, would
// fail its partition check after it (SQLSTATE 23514). Partitions made
// ahead, the usual case, take no row until later and let writes go on.
func (f family) create(ctx context.Context, conn *pgxpool.Conn, lo, hi, now time.Time, rep *PartitionReport) (bool, error) {
	from, to := uuidFloor(lo), uuidFloor(hi)
	var moved int64
	err := f.step(ctx, conn, rep, func(tx pgx.Tx) error {
		type table struct{ parent, key, name string }
		tables := []table{{f.parent, f.key, partitionName(f.parent, lo)}}
		if f.follower != "" {
			tables = append(tables, table{f.follower, f.followerKey, partitionName(f.follower, lo)})
		}
		// The tables' names with suffix, in the order writers lock them
		// (deliveries before their attempts).
		names := func(suffix string) string {
			if f.follower == "" {
				return f.parent + suffix
			}
			return f.parent + suffix + ", " + f.follower + suffix
		}
		if lo.Before(now.Add(writersAhead)) {
			// EXCLUSIVE lets reads go on.
			if _, err := tx.Exec(ctx, `LOCK TABLE ONLY `+names("")+` IN EXCLUSIVE MODE`); err != nil {
				return err
			}
		}
		// The DEFAULT partitions first, which ATTACH locks anyway: no row of
		// the range can reach them between the move and the attach.
		if _, err := tx.Exec(ctx, `LOCK TABLE `+names("_default")+` IN ACCESS EXCLUSIVE MODE`); err != nil {
			return err
		}
		var exists bool
		if err := tx.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, tables[0].name).Scan(&exists); err != nil {
			return err
		}
		if exists {
			return errDone // another worker made it since the partitions were listed
		}
		for _, t := range tables {
			// LIKE copies the columns, defaults and checks; ATTACH adds the
			// table's indexes. The CHECK lets ATTACH skip reading the rows
			// moved in.
			if _, err := tx.Exec(ctx, fmt.Sprintf(`CREATE TABLE %[1]s (LIKE %[2]s INCLUDING DEFAULTS INCLUDING CONSTRAINTS INCLUDING STORAGE);
ALTER TABLE %[1]s ADD CONSTRAINT %[1]s_bound CHECK (%[3]s >= '%[4]s' AND %[3]s < '%[5]s')`, t.name, t.parent, t.key, from, to)); err != nil {
				return err
			}
		}
		// Followers' rows first: moving a delivery out of the DEFAULT
		// would otherwise cascade to its attempts there.
		for i := len(tables) - 1; i >= 0; i-- {
			t := tables[i]
			tag, err := tx.Exec(ctx, fmt.Sprintf(`WITH m AS (DELETE FROM %[2]s_default WHERE %[3]s >= $1::uuid AND %[3]s < $2::uuid RETURNING *)
INSERT INTO %[1]s SELECT * FROM m`, t.name, t.parent, t.key), from, to)
			if err != nil {
				return err
			}
			moved += tag.RowsAffected()
		}
		for _, t := range tables {
			if _, err := tx.Exec(ctx, fmt.Sprintf(`ALTER TABLE %[2]s ATTACH PARTITION %[1]s FOR VALUES FROM ('%[3]s') TO ('%[4]s');
ALTER TABLE %[1]s DROP CONSTRAINT %[1]s_bound`, t.name, t.parent, from, to)); err != nil {
				return err
			}
		}
		// Once attached, the partition has the primary key the reference needs.
		if f.follower != "" {
			if _, err := tx.Exec(ctx, fmt.Sprintf(`ALTER TABLE %[1]s ADD CONSTRAINT %[1]s_fkey FOREIGN KEY (%[2]s) REFERENCES %[3]s (%[4]s) ON DELETE CASCADE`,
				tables[1].name, f.followerKey, tables[0].name, f.key)); err != nil {
				return err
			}
		}
		return nil
	})
	if errors.Is(err, errLockTimeout) {
		return false, nil
	}
	if errors.Is(err, errDone) {
		return true, nil
	}
	if err != nil {
		return false, err
	}
	rep.Created++
	rep.Moved += moved
	return true, nil
}

// drop drops a partition (and its follower's) in one transaction, which
// locks the tables ACCESS EXCLUSIVE for the catalog change only (the
// deliveries before their attempts, the order writers lock them in):
// PostgreSQL deletes the files after the commit has released the locks
// (on a scratch database, 6.5 s for 4.5 GB, writes going on meanwhile).
func (f family) drop(ctx context.Context, conn *pgxpool.Conn, p partition, rep *PartitionReport) error {
	err := f.step(ctx, conn, rep, func(tx pgx.Tx) error {
		tables := f.parent
		drops := []string{p.name}
		if f.follower != "" {
			tables += ", " + f.follower
			// The follower's partition of the same bounds: its name, or the
			// old table's partition (lo nil) for the old table's.
			var follower string
			err := tx.QueryRow(ctx, `SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
WHERE i.inhparent = $1::regclass AND pg_get_expr(c.relpartbound, c.oid) = (SELECT pg_get_expr(relpartbound, oid) FROM pg_class WHERE relname = $2)`,
				f.follower, p.name).Scan(&follower)
			if err != nil && !errors.Is(err, pgx.ErrNoRows) {
				return err
			}
			if follower != "" {
				drops = []string{follower, p.name}
			}
		}
		if _, err := tx.Exec(ctx, `LOCK TABLE `+tables+` IN ACCESS EXCLUSIVE MODE`); err != nil {
			return err
		}
		for _, name := range drops {
			if _, err := tx.Exec(ctx, `DROP TABLE IF EXISTS `+pgx.Identifier{name}.Sanitize()); err != nil {
				return err
			}
		}
		return nil
	})
	if errors.Is(err, errLockTimeout) {
		return nil
	}
	if err == nil {
		rep.Dropped++
	}
	return err
}

var (
	errLockTimeout = errors.New("store: lock not had in time")
	errDone        = errors.New("store: already done")
)

// step runs fn in a transaction whose locks are waited for at most
// partitionLockTimeout; a lock not had in time is errLockTimeout, counted
// as postponed.
func (f family) step(ctx context.Context, conn *pgxpool.Conn, rep *PartitionReport, fn func(tx pgx.Tx) error) error {
	tx, err := conn.Begin(ctx)
	if err != nil {
		return mapErr(err, "partitions")
	}
	defer tx.Rollback(ctx) //nolint:errcheck // after Commit, a no-op
	var mine bool
	err = tx.QueryRow(ctx, `SELECT set_config('lock_timeout', '`+partitionLockTimeout+`', true), pg_try_advisory_xact_lock($1)`,
		int64(partitionMaintenanceLock)).Scan(new(string), &mine)
	if err != nil {
		return mapErr(err, "partitions")
	}
	if !mine {
		rep.Postponed++
		return errLockTimeout
	}
	err = fn(tx)
	if err == nil {
		err = tx.Commit(ctx)
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && (pgErr.Code == "55P03" || pgErr.Code == "40P01") { // lock_not_available, deadlock_detected
		rep.Postponed++
		return errLockTimeout
	}
	if err != nil {
		return fmt.Errorf("store: partitions of %s: %w", f.parent, err)
	}
	return nil
}
