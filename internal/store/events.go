package store

import (
	"context"
	"strconv"

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

// retainedQueries are the reads of events, which never serve an event
// older than the retention, dropped or not yet.
type retainedQueries struct {
	selectEvent, listEvents, streamAfterKey, streamAfterSession, cursorOf string
}

func newRetainedQueries(r Retention) retainedQueries {
	retained := ` AND created_at > ` + cutoff(r.Events)
	return retainedQueries{
		selectEvent:        `SELECT ` + eventColumns + ` FROM events WHERE id = $1 AND merchant_id = $2` + retained,
		listEvents:         `SELECT ` + eventColumns + ` FROM events WHERE merchant_id = $1` + retained,
		streamAfterKey:     streamAfter(liveKey, retained),
		streamAfterSession: streamAfter(liveSession, retained),
		cursorOf:           `SELECT txid::text FROM events WHERE id = $1 AND merchant_id = $2 AND txid IS NOT NULL` + retained,
	}
}

// EventByID returns the merchant's event or NotFound.
func (s *Store) EventByID(ctx context.Context, merchantID, id string) (events.Event, error) {
	e, err := scanEvent(s.pool.QueryRow(ctx, s.q.selectEvent, id, merchantID))
	return e, mapErr(err, "event")
}

// ListEvents returns a page of the merchant's events, newest first.
func (s *Store) ListEvents(ctx context.Context, merchantID string, f events.Filter, p listing.Params) (listing.Page[events.Event], error) {
	query := s.q.listEvents
	args := []any{merchantID}
	if f.Type != "" {
		args = append(args, f.Type)
		query += ` AND type = $` + strconv.Itoa(len(args))
	}
	if f.ChargeID != "" {
		// events_merchant_charge_idx: the charge's events and its refunds'.
		args = append(args, f.ChargeID)
		query += ` AND charge_id = $` + strconv.Itoa(len(args)) + `::uuid`
	}
	return listPage(ctx, s, query, args, p, scanEvent, "event")
}

// fillEventCharges sets charge_id, in batches, on events written without it
// (before migration 00005, or by a replica of an earlier release): the
// charge of every event is data.charge.id of its body. An event without one
// gets the nil UUID, so that it leaves events_charge_missing_idx.
const fillEventCharges = `
UPDATE events SET charge_id = coalesce((body -> 'data' -> 'charge' ->> 'id')::uuid, '00000000-0000-0000-0000-000000000000')
WHERE id IN (SELECT id FROM events WHERE charge_id IS NULL LIMIT 5000)`

// FillEventCharges fills charge_id on every event without it and returns
// how many it filled. Each batch is its own statement.
func (s *Store) FillEventCharges(ctx context.Context) (int64, error) {
	var total int64
	for {
		tag, err := s.pool.Exec(ctx, fillEventCharges)
		if err != nil {
			return total, mapErr(err, "event")
		}
		total += tag.RowsAffected()
		if tag.RowsAffected() < 5000 {
			return total, nil
		}
	}
}
