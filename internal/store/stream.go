package store

import (
	"context"

	"github.com/gatehouse-pay/gatehouse/internal/events"
)

// The event stream's reads (events.StreamStore), on events_stream_idx. The
// horizon is the oldest transaction still running; every event below it is
// committed (or its transaction aborted), so reads below it never miss one.
const (
	horizon     = `pg_snapshot_xmin(pg_current_snapshot())`
	readHorizon = `SELECT ` + horizon + `::text`
	// woken: which of the merchants have events in [$2, horizon).
	woken = `WITH h AS (SELECT ` + horizon + ` AS x)
SELECT (SELECT x::text FROM h), coalesce(array(SELECT DISTINCT merchant_id FROM events, h
	WHERE merchant_id = ANY($1::text[]) AND txid >= $2::xid8 AND txid < h.x), '{}')`
)

var (
	streamAfter = `SELECT ` + eventColumns + `, coalesce(sequence, 0), txid::text FROM events
WHERE merchant_id = $1 AND txid IS NOT NULL AND (txid, id) > ($2::xid8, $3::uuid) AND txid < ` + horizon + retained + `
ORDER BY txid, id LIMIT $4`
	cursorOf = `SELECT txid::text FROM events WHERE id = $1 AND merchant_id = $2 AND txid IS NOT NULL` + retained
)

// zeroUUID starts a cursor at its transaction id.
const zeroUUID = "00000000-0000-0000-0000-000000000000"

// Horizon implements events.StreamStore.
func (s *Store) Horizon(ctx context.Context) (string, error) {
	var h string
	err := s.pool.QueryRow(ctx, readHorizon).Scan(&h)
	return h, mapErr(err, "event")
}

// Woken implements events.StreamStore.
func (s *Store) Woken(ctx context.Context, merchants []string, from string) ([]string, string, error) {
	var h string
	var ms []string
	err := s.pool.QueryRow(ctx, woken, merchants, from).Scan(&h, &ms)
	return ms, h, mapErr(err, "event")
}

// After implements events.StreamStore.
func (s *Store) After(ctx context.Context, merchantID string, c events.Cursor, limit int) ([]events.Event, events.Cursor, error) {
	id := c.ID
	if id == "" {
		id = zeroUUID
	}
	rows, err := s.pool.Query(ctx, streamAfter, merchantID, c.TxID, id, limit)
	if err != nil {
		return nil, c, mapErr(err, "event")
	}
	defer rows.Close()
	out := []events.Event{}
	next := c
	for rows.Next() {
		var e events.Event
		var tx string
		if err := rows.Scan(&e.ID, &e.MerchantID, &e.Environment, &e.Type, &e.Body, &e.CreatedAt, &e.Sequence, &tx); err != nil {
			return nil, c, mapErr(err, "event")
		}
		out = append(out, e)
		next = events.Cursor{TxID: tx, ID: e.ID}
	}
	if err := rows.Err(); err != nil {
		return nil, c, mapErr(err, "event")
	}
	return out, next, nil
}

// CursorOf implements events.StreamStore.
func (s *Store) CursorOf(ctx context.Context, merchantID, eventID string) (events.Cursor, error) {
	var tx string
	if err := s.pool.QueryRow(ctx, cursorOf, eventID, merchantID).Scan(&tx); err != nil {
		return events.Cursor{}, mapErr(err, "event")
	}
	return events.Cursor{TxID: tx, ID: eventID}, nil
}
