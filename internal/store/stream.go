package store

import (
	"context"
	"time"

	"github.com/gatehouse-pay/gatehouse/internal/events"
)

// The event stream's reads (events.StreamStore), on events_stream_idx. The
// horizon is the oldest transaction still running; every event below it is
// committed (or its transaction aborted), so reads below it never miss one.
//
// Each read of a stream checks, in the same statement (one snapshot), that
// the credential that opened it is still live: a snapshot that sees an event
// committed after a revocation was answered also sees the revocation, so no
// such event is ever returned.
const (
	horizon     = `pg_snapshot_xmin(pg_current_snapshot())`
	readHorizon = `SELECT ` + horizon + `::text`
	// Whether the credential $5 is live: not revoked, and not expired either
	// (a rolled key's expiry, a session's).
	liveKey     = `SELECT 1 FROM api_keys WHERE id = $5 AND merchant_id = $1 AND revoked_at IS NULL AND (expires_at IS NULL OR expires_at > now())`
	liveSession = `SELECT 1 FROM sessions WHERE id = $5 AND merchant_id = $1 AND revoked_at IS NULL AND expires_at > now()`
	// poll: which of the merchants $1 have events in [$2, horizon), and
	// which of the keys $3 and sessions $4 are no longer live.
	poll = `WITH h AS (SELECT ` + horizon + ` AS x)
SELECT (SELECT x::text FROM h), coalesce(array(SELECT DISTINCT merchant_id FROM events, h
	WHERE merchant_id = ANY($1::text[]) AND txid >= $2::xid8 AND txid < h.x), '{}'),
	coalesce(array(SELECT k FROM unnest($3::text[]) k
	WHERE NOT EXISTS (SELECT 1 FROM api_keys WHERE id = k AND revoked_at IS NULL AND (expires_at IS NULL OR expires_at > now()))), '{}'),
	coalesce(array(SELECT s FROM unnest($4::text[]) s
	WHERE NOT EXISTS (SELECT 1 FROM sessions WHERE id = s AND revoked_at IS NULL AND expires_at > now())), '{}')`
)

// streamAfter reads a stream's next events with its credential's liveness,
// as one statement: one row with live false when the credential is not
// live, one row of NULLs when it is and there is nothing to read, else one
// row per event.
func streamAfter(live, retained string) string {
	return `SELECT l.ok, e.id, e.merchant_id, e.environment, e.type, e.body, e.created_at, e.seq, e.tx
FROM (SELECT EXISTS (` + live + `) AS ok) l LEFT JOIN LATERAL (
	SELECT ` + eventColumns + `, coalesce(sequence, 0) AS seq, txid, txid::text AS tx FROM events
	WHERE l.ok AND merchant_id = $1 AND txid IS NOT NULL AND (txid, id) > ($2::xid8, $3::uuid) AND txid < ` + horizon + retained + `
	ORDER BY txid, id LIMIT $4) e ON true
ORDER BY e.txid, e.id`
}

// zeroUUID starts a cursor at its transaction id.
const zeroUUID = "00000000-0000-0000-0000-000000000000"

// Horizon implements events.StreamStore.
func (s *Store) Horizon(ctx context.Context) (string, error) {
	var h string
	err := s.pool.QueryRow(ctx, readHorizon).Scan(&h)
	return h, mapErr(err, "event")
}

// Poll implements events.StreamStore.
func (s *Store) Poll(ctx context.Context, merchants []string, creds []events.Credential, from string) (events.Poll, error) {
	keys, sessions := []string{}, []string{}
	for _, c := range creds {
		switch c.Kind {
		case events.CredentialKey:
			keys = append(keys, c.ID)
		case events.CredentialSession:
			sessions = append(sessions, c.ID)
		}
	}
	var p events.Poll
	var revokedKeys, revokedSessions []string
	err := s.pool.QueryRow(ctx, poll, merchants, from, keys, sessions).Scan(&p.Horizon, &p.Woken, &revokedKeys, &revokedSessions)
	if err != nil {
		return events.Poll{}, mapErr(err, "event")
	}
	for _, id := range revokedKeys {
		p.Revoked = append(p.Revoked, events.Credential{Kind: events.CredentialKey, ID: id})
	}
	for _, id := range revokedSessions {
		p.Revoked = append(p.Revoked, events.Credential{Kind: events.CredentialSession, ID: id})
	}
	return p, nil
}

// After implements events.StreamStore. A credential of an unknown kind is
// never live.
func (s *Store) After(ctx context.Context, merchantID string, cred events.Credential, c events.Cursor, limit int) ([]events.Event, events.Cursor, error) {
	var query string
	switch cred.Kind {
	case events.CredentialKey:
		query = s.q.streamAfterKey
	case events.CredentialSession:
		query = s.q.streamAfterSession
	default:
		return nil, c, events.ErrRevoked
	}
	id := c.ID
	if id == "" {
		id = zeroUUID
	}
	rows, err := s.pool.Query(ctx, query, merchantID, c.TxID, id, limit, cred.ID)
	if err != nil {
		return nil, c, mapErr(err, "event")
	}
	defer rows.Close()
	out := []events.Event{}
	next := c
	live := false
	for rows.Next() {
		var (
			eid, merchant, env, typ, tx *string
			body                        []byte
			created                     *time.Time
			seq                         *int
		)
		if err := rows.Scan(&live, &eid, &merchant, &env, &typ, &body, &created, &seq, &tx); err != nil {
			return nil, c, mapErr(err, "event")
		}
		if eid == nil {
			continue // no event: the row only carries live
		}
		out = append(out, events.Event{ID: *eid, MerchantID: *merchant, Environment: *env, Type: *typ, Body: body, CreatedAt: *created, Sequence: *seq})
		next = events.Cursor{TxID: *tx, ID: *eid}
	}
	if err := rows.Err(); err != nil {
		return nil, c, mapErr(err, "event")
	}
	if !live {
		return nil, c, events.ErrRevoked
	}
	return out, next, nil
}

// CursorOf implements events.StreamStore.
func (s *Store) CursorOf(ctx context.Context, merchantID, eventID string) (events.Cursor, error) {
	var tx string
	if err := s.pool.QueryRow(ctx, s.q.cursorOf, eventID, merchantID).Scan(&tx); err != nil {
		return events.Cursor{}, mapErr(err, "event")
	}
	return events.Cursor{TxID: tx, ID: eventID}, nil
}
