package store

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/gatehouse-pay/gatehouse/internal/events"
	"github.com/gatehouse-pay/gatehouse/internal/listing"
)

const eventColumns = `id, merchant_id, environment, type, body, created_at`

func scanEvent(row pgx.Row) (events.Event, error) {
	var e events.Event
	err := row.Scan(&e.ID, &e.MerchantID, &e.Environment, &e.Type, &e.Body, &e.CreatedAt)
	return e, err
}

// Events older than the retention period are never served, pruned or not.
const retained = ` AND created_at > now() - interval '30 days'`

const selectEvent = `SELECT ` + eventColumns + ` FROM events WHERE id = $1 AND merchant_id = $2` + retained

// EventByID returns the merchant's event or NotFound.
func (s *Store) EventByID(ctx context.Context, merchantID, id string) (events.Event, error) {
	e, err := scanEvent(s.pool.QueryRow(ctx, selectEvent, id, merchantID))
	return e, mapErr(err, "event")
}

// ListEvents returns a page of the merchant's events, newest first.
func (s *Store) ListEvents(ctx context.Context, merchantID string, f events.Filter, p listing.Params) (listing.Page[events.Event], error) {
	query := `SELECT ` + eventColumns + ` FROM events WHERE merchant_id = $1 AND ($2::text IS NULL OR type = $2)` + retained
	var typ, cursor *string
	if f.Type != "" {
		typ = &f.Type
	}
	order := "DESC"
	switch {
	case p.StartingAfter != "":
		query += ` AND id < $4`
		cursor = &p.StartingAfter
	case p.EndingBefore != "":
		query += ` AND id > $4`
		cursor = &p.EndingBefore
		order = "ASC"
	default:
		query += ` AND $4::uuid IS NULL`
	}
	query += ` ORDER BY id ` + order + ` LIMIT $3`
	rows, err := s.pool.Query(ctx, query, merchantID, typ, p.Limit+1, cursor)
	if err != nil {
		return listing.Page[events.Event]{}, mapErr(err, "event")
	}
	list, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (events.Event, error) { return scanEvent(r) })
	if err != nil {
		return listing.Page[events.Event]{}, mapErr(err, "event")
	}
	return listing.Trim(list, p), nil
}

const deleteEventsBefore = `DELETE FROM events WHERE created_at < $1`

// DeleteEventsBefore prunes events older than t.
func (s *Store) DeleteEventsBefore(ctx context.Context, t time.Time) (int64, error) {
	tag, err := s.pool.Exec(ctx, deleteEventsBefore, t)
	return tag.RowsAffected(), mapErr(err, "event")
}
