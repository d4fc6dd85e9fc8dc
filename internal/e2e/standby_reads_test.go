package e2e

// Lists read from a streaming standby (DATABASE_READ_URL): the stack runs on
// a project-local primary with an asynchronous hot standby, whose replay the
// test pauses and resumes, then stops.

import (
	"context"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/gatehouse-pay/gatehouse/internal/testenv"
)

// TestListsReadTheStandby: replica 1 reads its lists from the standby with
// a lag bound of an hour, replica 2 with one of 2 s. With the standby's
// replay paused, a charge just created answers 200 from both replicas (one
// object: the primary), while replica 1's list does not show it (the list
// reads the standby) and replica 2's list does once the standby is more
// than 2 s behind (it falls back to the primary). Replay resumed, replica
// 1's list shows it. With the standby stopped, both lists still answer 200,
// from the primary, and the fallbacks are counted.
func TestListsReadTheStandby(t *testing.T) {
	parallel(t)
	redisPath := testenv.RedisServerPath(t)
	// Asynchronous streaming: a paused or stopped standby holds no commit up.
	primary := startPostgres(t, "wal_level=replica", "max_wal_senders=4")
	primary.allowReplication(t)
	bins := buildBinaries(t)
	db := primary.newDB(t, bins, "gatehouse_reads")
	standby := copyStandby(t, primary)
	primary.waitStreaming(t, 30*time.Second)

	st := startStackWith(t, bins, db, redisPath, testenv.LoadSpec(t), stackOptions{
		apiEnv: []string{"DATABASE_READ_URL=" + standby.url(db.Name)},
		replicaEnv: [2][]string{
			{"DATABASE_READ_MAX_LAG=1h"},
			{"DATABASE_READ_MAX_LAG=2s"},
		},
	})
	c := newClient(t, "127.0.0.91")
	_, token := st.signUp(t, c, "reads", "Standby Reads")
	key := st.newKey(t, c, token, "reads").SecretKey
	r1, r2 := st.replicas[0], st.replicas[1]

	listed := func(base string) []string {
		t.Helper()
		e := st.do(t, c, http.MethodGet, base+"/v1/charges?limit=100", key, "")
		mustExpect(t, e, http.StatusOK, "")
		var page struct {
			Data []struct {
				ID string `json:"id"`
			} `json:"data"`
		}
		decode(t, e, &page)
		var ids []string
		for _, ch := range page.Data {
			ids = append(ids, ch.ID)
		}
		return ids
	}
	create := func(tag string) string {
		t.Helper()
		e := st.do(t, c, http.MethodPost, r1+"/v1/charges", key, cardBody("4242424242424242", true, 1500, tag))
		mustExpect(t, e, http.StatusCreated, "")
		var ch struct {
			ID string `json:"id"`
		}
		decode(t, e, &ch)
		return ch.ID
	}
	metric := func(base, series string) float64 {
		t.Helper()
		return metricValue(string(st.do(t, c, http.MethodGet, base+"/metrics", "", "").body), series)
	}
	// eventually polls cond every 50 ms for up to within.
	eventually := func(within time.Duration, what string, cond func() bool) {
		t.Helper()
		within = patience(within)
		deadline := time.Now().Add(within)
		for !cond() {
			if time.Now().After(deadline) {
				t.Fatalf("%s: not within %s", what, within)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}

	// A charge made with the standby streaming reaches replica 1's list,
	// served by the standby.
	first := create("before")
	eventually(15*time.Second, "replica 1's list shows a charge from the standby", func() bool {
		return slices.Contains(listed(r1), first) && metric(r1, "gatehouse_db_standby_reads_total") > 0
	})

	// Replay paused: the standby stays where it is.
	standby.exec(t, `SELECT pg_wal_replay_pause()`)
	eventually(10*time.Second, "replay paused", func() bool {
		var state string
		standby.queryRow(t, `SELECT pg_get_wal_replay_pause_state()`, &state)
		return state == "paused"
	})
	second := create("paused")
	for _, base := range []string{r1, r2} {
		mustExpect(t, st.do(t, c, http.MethodGet, base+"/v1/charges/"+second, key, ""), http.StatusOK, "")
	}
	if ids := listed(r1); slices.Contains(ids, second) || !slices.Contains(ids, first) {
		t.Fatalf("replica 1's list with replay paused: %v; want %s and not %s (the list reads the standby)", ids, first, second)
	}
	// Replica 2 bounds the lag at 2 s: past it, its lists read the primary.
	eventually(15*time.Second, "replica 2's list shows the charge once the standby is 2 s behind", func() bool {
		return slices.Contains(listed(r2), second)
	})
	if n := metric(r2, `gatehouse_db_read_fallbacks_total{reason="lagging"}`); n < 1 {
		t.Errorf("replica 2 counted %v lagging fallbacks, want at least 1", n)
	}
	if lag := metric(r2, "gatehouse_db_standby_lag_seconds"); lag < 2 {
		t.Errorf("replica 2's gatehouse_db_standby_lag_seconds = %v with replay paused for over 2 s", lag)
	}
	if slices.Contains(listed(r1), second) {
		t.Fatalf("replica 1's list shows %s while replay is still paused", second)
	}

	// Replay resumed: the standby catches up and replica 1's list shows it.
	standby.exec(t, `SELECT pg_wal_replay_resume()`)
	eventually(15*time.Second, "replica 1's list shows the charge after replay resumed", func() bool {
		return slices.Contains(listed(r1), second)
	})

	// The standby stopped: every list still answers 200, from the primary.
	standby.stop(t)
	for range 3 {
		for _, base := range []string{r1, r2} {
			if ids := listed(base); !slices.Contains(ids, second) {
				t.Errorf("%s: list with the standby stopped lacks %s: %v", base, second, ids)
			}
		}
	}
	for _, path := range []string{"/v1/refunds", "/v1/customers", "/v1/events", "/v1/connectors", "/v1/me/webhook_endpoints", "/v1/me/api_keys"} {
		expect(t, st.do(t, c, http.MethodGet, r1+path, key, ""), http.StatusOK, "")
	}
	for _, path := range []string{"/v1/audit_log", "/v1/me/members"} {
		expect(t, st.do(t, c, http.MethodGet, r1+path, token, ""), http.StatusOK, "")
	}
	unreachable := metric(r1, `gatehouse_db_read_fallbacks_total{reason="unreachable"}`)
	failed := metric(r1, `gatehouse_db_read_fallbacks_total{reason="error"}`)
	if unreachable+failed < 1 {
		t.Errorf("replica 1 counted no fallback with the standby stopped (unreachable %v, error %v)", unreachable, failed)
	}
	t.Logf("standby stopped: replica 1 fell back %v times as unreachable, %v after a failed read", unreachable, failed)
}

// waitStreaming polls pg_stat_replication until a standby streams from p.
func (p *pgServer) waitStreaming(t *testing.T, within time.Duration) {
	t.Helper()
	within = patience(within)
	deadline := time.Now().Add(within)
	for {
		var n int
		p.queryRow(t, `SELECT count(*) FROM pg_stat_replication WHERE state = 'streaming'`, &n)
		if n > 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no standby streaming from the primary after %s", within)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// exec runs one statement on the server's postgres database.
func (p *pgServer) exec(t *testing.T, sql string) {
	t.Helper()
	p.onConn(t, func(ctx context.Context, conn *pgx.Conn) error {
		_, err := conn.Exec(ctx, sql)
		return err
	}, sql)
}

// queryRow runs a query of one row on the server's postgres database and
// scans it into dst.
func (p *pgServer) queryRow(t *testing.T, sql string, dst ...any) {
	t.Helper()
	p.onConn(t, func(ctx context.Context, conn *pgx.Conn) error {
		return conn.QueryRow(ctx, sql).Scan(dst...)
	}, sql)
}

// onConn runs f on a connection of its own to the postgres database.
func (p *pgServer) onConn(t *testing.T, f func(context.Context, *pgx.Conn) error, what string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, p.url("postgres"))
	if err != nil {
		t.Fatalf("connect to the server on port %d: %v", p.port, err)
	}
	defer conn.Close(context.Background())
	if err := f(ctx, conn); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}
