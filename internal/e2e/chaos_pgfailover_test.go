package e2e

// F8 of docs/reliability.md: the stack runs on a project-local PostgreSQL primary
// with a synchronous streaming standby, through a multi-host DATABASE_URL;
// the primary is killed under load and the standby promoted.

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/gatehouse-pay/gatehouse/internal/testenv"
	"github.com/gatehouse-pay/gatehouse/internal/testenv/harness"
)

// pgPrimarySettings make a private server the primary of a synchronous
// streaming standby: a commit is acknowledged only once the standby has
// flushed it, so a commit the stack saw answered survives the primary.
var pgPrimarySettings = []string{
	"wal_level=replica", "max_wal_senders=4",
	"synchronous_standby_names=*", "synchronous_commit=on",
}

// pgStandbySettings: a hot standby that, once promoted, commits on its own.
// It has no synchronous_standby_names, or every commit after the promotion
// would wait for a standby that does not exist.
var pgStandbySettings = []string{"hot_standby=on", "synchronous_commit=on"}

// allowReplication makes sure pg_hba.conf lets a replication connection from
// 127.0.0.1 in without a password (initdb -A trust writes such a line; a
// packaged pg_hba.conf may not), reloading the server if it had to add one.
func (p *pgServer) allowReplication(t *testing.T) {
	t.Helper()
	ctx, cancel := dbCtx()
	defer cancel()
	c, err := pgx.Connect(ctx, p.url("postgres"))
	if err != nil {
		t.Fatalf("connect to the primary: %v", err)
	}
	defer c.Close(ctx)
	const rule = `SELECT count(*) FROM pg_hba_file_rules WHERE error IS NULL AND type = 'host'
		AND 'replication' = ANY(database) AND address = '127.0.0.1' AND auth_method = 'trust'`
	var n int
	if err := c.QueryRow(ctx, rule).Scan(&n); err != nil {
		t.Fatalf("read pg_hba_file_rules: %v", err)
	}
	if n > 0 {
		return
	}
	f, err := os.OpenFile(filepath.Join(p.dir, "pg_hba.conf"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	_, err = f.WriteString("\nhost replication all 127.0.0.1/32 trust\n")
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		t.Fatalf("allow replication in pg_hba.conf: %v", err)
	}
	if _, err := c.Exec(ctx, `SELECT pg_reload_conf()`); err != nil {
		t.Fatalf("reload the primary: %v", err)
	}
}

// startStandby copies primary with pg_basebackup -R (which writes
// standby.signal and primary_conninfo) into a directory of its own, starts
// it as a hot standby on a free port and waits until the primary streams to
// it synchronously. It is stopped and its directory removed when the test
// ends.
func startStandby(t *testing.T, primary *pgServer) *pgServer {
	t.Helper()
	s := copyStandby(t, primary)
	primary.waitSyncStandby(t, 30*time.Second)
	return s
}

// copyStandby is startStandby without waiting for the primary to stream.
func copyStandby(t *testing.T, primary *pgServer) *pgServer {
	t.Helper()
	dir := serviceDir(t, primary.cred, "gatehouse-pg-standby-")
	s := &pgServer{bin: primary.bin, dir: filepath.Join(dir, "data"), port: testenv.FreePort(t), cred: primary.cred,
		out: new(harness.Output), settings: pgStandbySettings}
	if out, err := s.tool("pg_basebackup", "-D", s.dir, "-h", "127.0.0.1",
		"-p", strconv.Itoa(primary.port), "-U", "postgres", "-X", "stream", "-R", "-c", "fast", "--no-sync"); err != nil {
		testenv.Missing(t, "project-local PostgreSQL standby: pg_basebackup: %v\n%s", err, out)
	}
	s.cleanup(t, "standby postgres")
	s.start(t)
	return s
}

// waitSyncStandby polls pg_stat_replication until a standby streams from
// p as its synchronous standby.
func (p *pgServer) waitSyncStandby(t *testing.T, within time.Duration) {
	t.Helper()
	within = patience(within)
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	c, err := pgx.Connect(ctx, p.url("postgres"))
	if err != nil {
		t.Fatalf("connect to the primary: %v", err)
	}
	defer c.Close(context.Background())
	for {
		var n int
		err := c.QueryRow(ctx, `SELECT count(*) FROM pg_stat_replication WHERE state = 'streaming' AND sync_state = 'sync'`).Scan(&n)
		if err == nil && n > 0 {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("no synchronous standby streaming from the primary after %s (last error: %v)", within, err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// crash kills the server and every process it forked with SIGKILL, as when
// its machine dies: no shutdown, no checkpoint, no message to the clients,
// whose connections the kernel closes. The postmaster is stopped first, so
// that it forks nothing more while its children are listed.
func (p *pgServer) crash(t *testing.T) {
	t.Helper()
	pid := p.proc.Cmd.Process.Pid
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatalf("SIGSTOP postgres: %v", err)
	}
	pids := append(childPIDs(t, pid), pid)
	for _, c := range pids {
		_ = syscall.Kill(c, syscall.SIGSTOP)
	}
	for _, c := range pids {
		_ = syscall.Kill(c, syscall.SIGKILL)
	}
	select {
	case <-p.proc.Done():
	case <-time.After(10 * time.Second):
		t.Fatalf("postgres did not exit 10s after SIGKILL")
	}
	fmt.Fprintf(p.out, "\n==== test: postgres and its %d processes killed with SIGKILL ====\n", len(pids)-1)
	p.proc = nil
}

// childPIDs lists the processes whose parent is ppid, from /proc.
func childPIDs(t *testing.T, ppid int) []int {
	t.Helper()
	stats, err := filepath.Glob("/proc/[0-9]*/stat")
	if err != nil {
		t.Fatal(err)
	}
	var out []int
	for _, f := range stats {
		b, err := os.ReadFile(f)
		if err != nil {
			continue // it exited meanwhile
		}
		// pid (comm) state ppid ...; comm may hold spaces and parentheses.
		i := strings.LastIndexByte(string(b), ')')
		if i < 0 {
			continue
		}
		fields := strings.Fields(string(b[i+1:]))
		if len(fields) < 2 || fields[1] != strconv.Itoa(ppid) {
			continue
		}
		if pid, err := strconv.Atoi(filepath.Base(filepath.Dir(f))); err == nil {
			out = append(out, pid)
		}
	}
	return out
}

// promote ends recovery on a standby with pg_ctl promote and waits until it
// accepts writes.
func (p *pgServer) promote(t *testing.T) {
	t.Helper()
	if out, err := p.tool("pg_ctl", "promote", "-D", p.dir, "-w", "-t", "60"); err != nil {
		t.Fatalf("pg_ctl promote: %v\n%s", err, out)
	}
}

// failoverDB is the database name as the stack and the test reach it on
// either server: a multi-host URL whose target_session_attrs=read-write
// makes every new connection skip a server that is down or read-only.
func failoverDB(t *testing.T, name string, servers ...*pgServer) testenv.DB {
	t.Helper()
	hosts := make([]string, len(servers))
	for i, s := range servers {
		hosts[i] = fmt.Sprintf("127.0.0.1:%d", s.port)
	}
	url := fmt.Sprintf("postgres://postgres@%s/%s?sslmode=disable&target_session_attrs=read-write", strings.Join(hosts, ","), name)
	ctx, cancel := dbCtx()
	defer cancel()
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		t.Fatalf("open %s: %v", name, err)
	}
	t.Cleanup(pool.Close)
	return testenv.DB{Pool: pool, URL: url, Name: name}
}

// TestChaosPostgresFailover is F8: the stack runs on a primary with a
// synchronous streaming standby, through DATABASE_URL with both hosts and
// target_session_attrs=read-write. Under load the primary and all its
// processes are killed with SIGKILL; after a detection delay the standby is
// promoted with pg_ctl promote. Charges answer 201 or 503, never another 5xx
// or no answer; every charge answered 201 is in the promoted database exactly
// once; a key refused during the failover completes when repeated; the worker
// captures every charge and every event reaches the receiver.
func TestChaosPostgresFailover(t *testing.T) {
	chaosParallel(t)
	var (
		before  = chaosScale(500*time.Millisecond, 2*time.Second) // load before the fault
		detect  = chaosScale(time.Second, 3*time.Second)          // from the kill to the promotion
		after   = chaosScale(time.Second, 5*time.Second)          // load after the first 201
		senders = 4
		pace    = chaosScale(80*time.Millisecond, 20*time.Millisecond)
		retryBy = waitFloor // how long a key from the failover is repeated: a safety net
	)
	redisPath := testenv.RedisServerPath(t)
	primary := startPostgres(t, pgPrimarySettings...)
	primary.allowReplication(t)
	standby := startStandby(t, primary)
	bins := buildBinaries(t)
	// Created and migrated on the primary; each commit waits for the standby.
	created := primary.newDB(t, bins, "gatehouse_failover")
	db := failoverDB(t, created.Name, primary, standby)
	st, m := chaosStackOn(t, bins, db, redisPath, "127.0.0.84", stackOptions{})
	rcv := newReceiver(t, "f8", always(http.StatusOK))
	m.endpoint(t, rcv.url(), "charge.created", "charge.captured")

	load := startChaosLoad(t, st, m, "f8", senders, pace)
	time.Sleep(before) // the fault's rhythm, not a synchronisation
	primary.crash(t)
	killed := time.Now()
	time.Sleep(detect) // what a failover manager takes to decide
	standby.promote(t)
	promoted := time.Now()
	// The test's own connections to the dead primary go; new ones find the
	// promoted standby.
	db.Pool.Reset()

	// Load goes on until the first 201 of a request sent after the
	// promotion, and a while more.
	recovered := load.first201After(promoted, waitFloor)
	time.Sleep(after)
	shots := load.end()

	ok, unavailable, other, retry := tally(t, shots)
	var slowest time.Duration
	for _, s := range shots {
		if s.start.After(killed) && s.start.Before(promoted) {
			slowest = max(slowest, s.end.Sub(s.start))
		}
	}
	recovery := time.Duration(-1)
	if recovered.IsZero() {
		t.Errorf("no 201 within %s after the promotion", waitFloor)
	} else if recovery = recovered.Sub(promoted); chaosFull() && recovery > 5*time.Second {
		t.Errorf("first 201 %s after the promotion, want within 5s", recovery)
	}
	if unavailable == 0 {
		t.Errorf("no 503 during the failover; the test did not exercise the fault")
	}

	// No committed charge lost: every 201 is in the promoted database,
	// once, with the id it answered.
	// A request whose connection broke under its commit answers 503 though
	// the charge may be there; its repeat below answers with it.
	rows := byTag(chargeRows(t, st.db, m.id))
	lost, inDoubt := 0, 0
	for _, s := range shots {
		if s.status != http.StatusCreated {
			if len(rows[s.key]) > 0 {
				inDoubt++
			}
			continue
		}
		switch cs := rows[s.key]; {
		case len(cs) == 0:
			lost++
			t.Errorf("key %s answered 201 with %s: no charge in the promoted database", s.key, s.charge)
		case cs[0].ID != s.charge:
			t.Errorf("key %s answered 201 with %s: charge %s in the promoted database", s.key, s.charge, cs[0].ID)
		}
	}

	// Every key refused during the failover completes when repeated.
	c := newClient(t, "127.0.0.85")
	stuck, completed, conflicts := 0, 0, 0
	for i, key := range retry {
		deadline := time.Now().Add(retryBy)
		for {
			s := postCharge(t, st, c, st.replicas[i%2], m.key, key, true)
			if s.err == nil && s.status == http.StatusCreated {
				completed++
				break
			}
			if s.is409() {
				conflicts++
			}
			if time.Now().After(deadline) {
				stuck++
				t.Errorf("key %s used during the failover, repeated for %s after it: %d %s %v, want 201", key, retryBy, s.status, s.code, s.err)
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
	}

	// One charge per key; the worker captures each; every event reaches
	// the receiver.
	drained, eventsLost := waitDrained(t, st, m, []*receiver{rcv}, promoted, 60*time.Second)
	rows = byTag(chargeRows(t, st.db, m.id))
	double, unbooked, extraCalls := 0, 0, 0
	for _, s := range shots {
		cs := rows[s.key]
		if len(cs) != 1 {
			double += max(len(cs)-1, 0)
			t.Errorf("key %s: %d charges, want 1", s.key, len(cs))
			continue
		}
		if !cs[0].Booked {
			unbooked++
			t.Errorf("key %s: charge %s %s without a booked sandbox authorization", s.key, cs[0].ID, cs[0].Status)
		}
		if cs[0].Calls > 1 {
			extraCalls++ // the same provider idempotency key sent again: allowed, counted
		}
	}
	// The provider's books match the gateway's: one booked authorization per
	// charge, with the charge's reference, for the amount captured; none for
	// anything else.
	booked := queryInt(t, st.db, `SELECT count(*) FROM charges c JOIN sandbox_ledger l ON l.idempotency_key = 'gh_' || c.id::text || '_authorize'
		WHERE c.merchant_id = $1 AND l.reference IS NOT NULL AND l.reference = c.provider_reference AND l.amount = c.amount_captured`, m.id)
	orphans := orphanAuthorizations(t, st.db)
	if booked != int64(len(shots)) || orphans != 0 {
		t.Errorf("provider: %d authorizations booked as the gateway captured them for %d charges, %d authorizations without a charge; want %d and 0",
			booked, len(shots), orphans, len(shots))
	}
	// An event a receiver got was committed; it must be in the promoted
	// database too.
	known := map[string]bool{}
	for _, id := range merchantEvents(t, st.db, m.id) {
		known[id] = true
	}
	unknown := map[string]bool{}
	for _, h := range rcv.all() {
		if !known[h.eventID()] {
			unknown[h.eventID()] = true
		}
	}
	if len(unknown) != 0 {
		t.Errorf("events received but not in the promoted database: %d, want 0", len(unknown))
	}
	t.Logf("F8 figures: primary killed, standby promoted %s later (detection %s), recovery (first 201 after the promotion) %s, charges sent %d, 201 %d, 503 %d (of which committed %d), 5xx other than 503 and errors %d, slowest answer while no primary %s, charges lost %d, keys from the failover repeated %d: completed %d, stuck %d, 409 while repeating %d, double charges %d, charges without a booked authorization %d, keys with provider calls repeated %d, events lost %d, events received but not in the promoted database %d, drained %s after the promotion",
		promoted.Sub(killed).Round(time.Millisecond), detect, recovery.Round(time.Millisecond), len(shots), ok, unavailable, inDoubt, other, slowest.Round(time.Millisecond),
		lost, len(retry), completed, stuck, conflicts, double, unbooked, extraCalls, eventsLost, len(unknown), drained.Round(time.Millisecond))
}
