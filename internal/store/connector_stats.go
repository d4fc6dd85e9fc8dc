package store

import (
	"context"
	"encoding/json"
	"math"
	"time"

	"github.com/gatehouse-pay/gatehouse/internal/apperr"
	"github.com/gatehouse-pay/gatehouse/internal/connectors"
	"github.com/gatehouse-pay/gatehouse/internal/ids"
)

// connectorStats sums up one connector's attempts ($2) of a merchant's ($1)
// charges created since $4. The charges are found through
// charges_merchant_id_idx: their ids are UUIDv7, so those created since $4
// have ids from $3 on (the least UUIDv7 of a moment a little before $4);
// created_at then draws the exact line. Each charge's attempts are one
// jsonb array, unnested here; a duration is ended_at - started_at of an
// attempt that ended.
const connectorStats = `
WITH a AS (
	SELECT e->>'status' AS status, e->>'failure_code' AS code,
		extract(epoch FROM (e->>'ended_at')::timestamptz - (e->>'started_at')::timestamptz)::float8 AS took
	FROM charges c CROSS JOIN LATERAL jsonb_array_elements(c.attempts) AS e
	WHERE c.merchant_id = $1 AND c.id >= $3::uuid AND c.created_at >= $4 AND e->>'connector' = $2
)
SELECT count(*),
	count(*) FILTER (WHERE status = 'succeeded'),
	count(*) FILTER (WHERE status = 'failed'),
	percentile_cont(0.5) WITHIN GROUP (ORDER BY took) FILTER (WHERE took IS NOT NULL),
	percentile_cont(0.99) WITHIN GROUP (ORDER BY took) FILTER (WHERE took IS NOT NULL),
	(SELECT coalesce(jsonb_agg(jsonb_build_array(f.code, f.n) ORDER BY f.n DESC, f.code), '[]')
		FROM (SELECT coalesce(code, '') AS code, count(*) AS n FROM a WHERE status = 'failed' GROUP BY 1) f)
FROM a`

// idSlack is how far before a window's start the id range begins: an id
// is made a moment before or after its row's created_at, never this far.
const idSlack = time.Minute

// ConnectorStats implements connectors.Store.
func (s *Store) ConnectorStats(ctx context.Context, merchantID, id string, since time.Time) (connectors.Stats, error) {
	st := connectors.Stats{Since: since}
	var p50, p99 *float64
	var failures []byte
	err := s.pool.QueryRow(ctx, connectorStats, merchantID, id, ids.UUIDFloor(since.Add(-idSlack)), since).
		Scan(&st.Attempts, &st.Succeeded, &st.Failed, &p50, &p99, &failures)
	if err != nil {
		return st, mapErr(err, "connector")
	}
	st.P50, st.P99 = seconds(p50), seconds(p99)
	var rows [][2]json.RawMessage
	if err := json.Unmarshal(failures, &rows); err != nil {
		return st, apperr.Internal(err)
	}
	for _, r := range rows {
		var f connectors.FailureCount
		if err := json.Unmarshal(r[0], &f.Code); err != nil {
			return st, apperr.Internal(err)
		}
		if err := json.Unmarshal(r[1], &f.Count); err != nil {
			return st, apperr.Internal(err)
		}
		st.Failures = append(st.Failures, f)
	}
	return st, nil
}

// seconds is a duration in seconds, to the microsecond.
func seconds(v *float64) *time.Duration {
	if v == nil {
		return nil
	}
	d := time.Duration(math.Round(*v*1e6)) * time.Microsecond
	return &d
}
