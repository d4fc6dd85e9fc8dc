package store

import (
	"context"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/gatehouse-pay/gatehouse/internal/events"
	"github.com/gatehouse-pay/gatehouse/internal/listing"
)

// eventCharge is the id of the charge an event is about, as indexed by
// events_merchant_charge_idx (migrations/00005_event_charge.sql).
const eventCharge = `(body -> 'data' -> 'charge' ->> 'id')`

const eventColumns = `id, merchant_id, environment, type, body, created_at`

func scanEvent(row pgx.Row) (events.Event, error) {
	var e events.Event
	err := row.Scan(&e.ID, &e.MerchantID, &e.Environment, &e.Type, &e.Body, &e.CreatedAt)
	return e, err
}

// Events older than the retention period are never served, pruned or not.
var retained = ` AND created_at > ` + cutoff(events.Retention)

var selectEvent = `SELECT ` + eventColumns + ` FROM events WHERE id = $1 AND merchant_id = $2` + retained

// EventByID returns the merchant's event or NotFound.
func (s *Store) EventByID(ctx context.Context, merchantID, id string) (events.Event, error) {
	e, err := scanEvent(s.pool.QueryRow(ctx, selectEvent, id, merchantID))
	return e, mapErr(err, "event")
}

// ListEvents returns a page of the merchant's events, newest first.
func (s *Store) ListEvents(ctx context.Context, merchantID string, f events.Filter, p listing.Params) (listing.Page[events.Event], error) {
	query := `SELECT ` + eventColumns + ` FROM events WHERE merchant_id = $1` + retained
	args := []any{merchantID}
	if f.Type != "" {
		args = append(args, f.Type)
		query += ` AND type = $` + strconv.Itoa(len(args))
	}
	if f.ChargeID != "" {
		// Every event body holds its charge (refund events too), and
		// events_merchant_charge_idx indexes this expression.
		args = append(args, f.ChargeID)
		query += ` AND ` + eventCharge + ` = $` + strconv.Itoa(len(args))
	}
	return listPage(ctx, s, query, args, p, scanEvent, "event")
}

const deleteEventsBefore = `DELETE FROM events WHERE created_at < $1`

// DeleteEventsBefore prunes events older than t.
func (s *Store) DeleteEventsBefore(ctx context.Context, t time.Time) (int64, error) {
	tag, err := s.pool.Exec(ctx, deleteEventsBefore, t)
	return tag.RowsAffected(), mapErr(err, "event")
}
