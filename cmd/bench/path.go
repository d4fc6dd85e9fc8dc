package main

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/hibiken/asynq"
)

// The path scenario measures the whole path of a captured charge to a
// merchant's one webhook endpoint, as a busy shop with one endpoint has it:
// charges created through the API at a fixed rate (open model), authorized
// and captured by bin/worker against the sandbox, and both of each charge's
// events (charge.created and charge.captured) delivered by the same worker
// to one endpoint of a receiver inside the harness that answers 200 at once.
// Each step is held for -path-hold. Rates are in events per second, two per
// charge. After the fixed rates (-path-rates) it searches for the highest
// rate that holds (see pathStep.Holds), at most -path-search steps more.

// pathStep is one held rate of the path scenario.
type pathStep struct {
	Events   float64 // events/s asked: twice the charges/s
	For      time.Duration
	Search   bool // a step of the search, not of -path-rates
	Charges  summary
	Expected int // deliveries: charges answered 201 × 2
	Received int // distinct deliveries received within the wait
	Late     int // first attempts after the step's wait: never, counted as missing
	Lat      latencies
	Rate     float64 // first receipts per second in the step's second half
	Attempts int     // receipts with an attempt number above 1
	Busy     float64 // cores busy, whole machine, during the step
	Others   float64 // of which processes other than the path's
	// CPU per charge over the step and its tail, until every delivery came.
	API, Worker, PG, Redis time.Duration
	Tail                   time.Duration // from the end of the step to the last delivery
	PGKinds                string        // Postgres CPU per charge by process
	WAL                    string        // WAL per charge and checkpoints during the step
	Statements             string        // top Postgres statements, when pg_stat_statements is loaded
}

// pathSLO is the commit-to-first-attempt p99 under which a step holds.
const pathSLO = 250 * time.Millisecond

// Holds reports whether the pipeline kept up: every delivery arrived, the
// first attempts' p99 stayed under pathSLO, and at most 0.1 % of the charges
// failed or were dropped.
func (s pathStep) Holds() bool {
	bad := s.Charges.Errors + s.Charges.Dropped
	return s.Expected > 0 && s.Received == s.Expected && s.Lat.P99 < pathSLO &&
		float64(bad) <= 0.001*float64(max(s.Charges.Scheduled, 1))
}

// pathResult is the path scenario.
type pathResult struct {
	Steps []pathStep
	Best  *pathStep // the highest rate that held
	Notes []string
}

// pathEvents are the events of a captured charge, both sent to the endpoint.
var pathEvents = []string{"charge.created", "charge.captured"}

func (e *environment) runPath(ctx context.Context) *pathResult {
	r := &pathResult{}
	rc, err := startReceiver(1)
	if err != nil {
		r.Notes = append(r.Notes, err.Error())
		return r
	}
	defer rc.close()
	var ep struct {
		Endpoint struct {
			ID string `json:"id"`
		} `json:"webhook_endpoint"`
	}
	if err := e.request(ctx, http.MethodPost, "/v1/me/webhook_endpoints", e.apiSecret,
		map[string]any{"url": rc.urls[0], "events": pathEvents, "description": "bench path"}, http.StatusCreated, &ep); err != nil {
		r.Notes = append(r.Notes, "create the endpoint: "+err.Error())
		return r
	}
	defer func() {
		dctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := e.request(dctx, http.MethodDelete, "/v1/me/webhook_endpoints/"+ep.Endpoint.ID, e.apiSecret, nil, 0, nil); err != nil {
			r.Notes = append(r.Notes, "delete the endpoint: "+err.Error())
		}
	}()
	if err := e.startWorker(ctx); err != nil {
		r.Notes = append(r.Notes, "start the worker: "+err.Error())
		return r
	}
	defer e.stopWorker()
	queue := asynq.NewInspector(asynq.RedisClientOpt{Addr: e.redis.Addr()})
	defer queue.Close()
	stmts := e.statementStats(ctx)
	if !stmts {
		r.Notes = append(r.Notes, "pg_stat_statements is not loaded on the bench's PostgreSQL (shared_preload_libraries), so the steps show no statements")
	}

	// Warm up, unreported: a fresh worker's first seconds are not what is measured.
	if len(e.o.pathRates) > 0 {
		m := rc.mark()
		s := summarize(openModel(ctx, e.api.client, e.o.pathRates[0]/2, 3*time.Second, e.o.maxInflight, e.o.timeout))
		rc.waitFor(ctx, m, 2*s.OK, 30*time.Second)
		e.pathSettle(ctx, queue)
	}
	run := func(events float64, search bool) {
		st := e.pathStep(ctx, rc, events, search, stmts)
		r.Steps = append(r.Steps, st)
		e.logf("path: %4.0f events/s for %s: %d/%d delivered, first attempt p50 %s p99 %s, %.0f delivered/s, %.2f cores busy; per charge API %s worker %s Postgres %s Redis %s",
			st.Events, st.For, st.Received, st.Expected, ms(st.Lat.P50), ms(st.Lat.P99), st.Rate, st.Busy,
			us(st.API), us(st.Worker), us(st.PG), us(st.Redis))
		if st.Received < st.Expected || st.Tail > 5*time.Second {
			// A backlog must not reach the next step.
			if n := e.pathSettle(ctx, queue); n != "" {
				r.Notes = append(r.Notes, n)
			}
		}
		e.pauseWorker(ctx)
	}
	for _, ev := range e.o.pathRates {
		if ctx.Err() != nil {
			break
		}
		run(ev, false)
	}
	// The search: from the highest rate that held, up by half while steps
	// hold, then halfway to the lowest that did not.
	for range e.o.pathSearch {
		if ctx.Err() != nil {
			break
		}
		next, ok := nextPathRate(r.Steps)
		if !ok {
			break
		}
		run(next, true)
	}
	for i := range r.Steps {
		if s := &r.Steps[i]; s.Holds() && (r.Best == nil || s.Events > r.Best.Events) {
			r.Best = s
		}
	}
	e.afterPath(ctx, r)
	return r
}

// afterPath vacuums the tables the steps filled and forces a checkpoint, so
// the scenarios after this one do not meet the autovacuum of those rows or
// a checkpoint writing their pages in the middle of a step.
func (e *environment) afterPath(ctx context.Context, r *pathResult) {
	start := time.Now()
	for _, stmt := range []string{"VACUUM (ANALYZE)", "CHECKPOINT"} {
		if err := e.db.exec(ctx, stmt); err != nil {
			r.Notes = append(r.Notes, stmt+" after the steps: "+err.Error())
		}
	}
	e.logf("path: vacuumed and checkpointed in %s", time.Since(start).Round(100*time.Millisecond))
}

// nextPathRate is the search's next rate in events/s, rounded to 50: half
// again the highest that held while nothing above it failed, else the middle
// between it and the lowest failure above it, until they are within 10 %.
func nextPathRate(steps []pathStep) (float64, bool) {
	hi, lo := 0.0, math.Inf(1)
	for _, s := range steps {
		if s.Holds() {
			hi = max(hi, s.Events)
		}
	}
	for _, s := range steps {
		if !s.Holds() && s.Events > hi {
			lo = min(lo, s.Events)
		}
	}
	if hi == 0 {
		return 0, false // nothing held: the fixed steps say it all
	}
	next := hi * 1.5
	if !math.IsInf(lo, 1) {
		if lo-hi <= 0.1*hi {
			return 0, false
		}
		next = (hi + lo) / 2
	}
	next = math.Round(next/50) * 50
	for _, s := range steps {
		if s.Events == next {
			return 0, false
		}
	}
	return next, next > hi
}

// pathStep holds events/s (charges at half that) for -path-hold and waits
// up to -path-wait for the deliveries.
func (e *environment) pathStep(ctx context.Context, rc *receiver, events float64, search, stmts bool) pathStep {
	st := pathStep{Events: events, For: e.o.pathHold, Search: search}
	if stmts {
		_ = e.db.exec(ctx, "SELECT pg_stat_statements_reset()")
	}
	api, worker := e.api.pid(), e.worker.pid()
	snap := func() (cpuSnapshot, time.Duration, time.Duration) {
		return takeSnapshotOf([]int{api, worker}, e.redisPID(), e.postmaster, e.dbName), cpuOf(api), cpuOf(worker)
	}
	w0s, werr := e.walStats(ctx)
	m := rc.mark()
	c0, a0, w0 := snap()
	rec := openModel(ctx, e.api.client, events/2, st.For, e.o.maxInflight, e.o.timeout)
	c1, _, _ := snap()
	end := time.Now()
	st.Charges = summarize(rec)
	st.Expected = 2 * st.Charges.OK
	got := rc.waitFor(ctx, m, st.Expected, e.o.pathWait)
	c2, a2, w2 := snap()
	step := cpuBetween(c0, c1, 0)
	st.Busy, st.Others = step.BusyCores, step.OtherCores
	if n := st.Charges.OK; n > 0 {
		all := cpuBetween(c0, c2, n)
		st.PG, st.Redis = all.Postgres, all.Redis
		st.API, st.Worker = (a2-a0)/time.Duration(n), (w2-w0)/time.Duration(n)
		st.PGKinds = kindsText(pgByKind(c0, c2), n)
		if w1s, err := e.walStats(ctx); err == nil && werr == nil {
			st.WAL = fmt.Sprintf("WAL %.1f kB and %.2f full-page images per charge, %d checkpoints",
				float64(w1s.bytes-w0s.bytes)/1024/float64(n), float64(w1s.fpi-w0s.fpi)/float64(n), w1s.checkpoints-w0s.checkpoints)
		}
	}
	first := map[string]receipt{}
	for _, g := range got {
		if g.attempt != "1" {
			st.Attempts++
		}
		if old, ok := first[g.delivery()]; !ok || g.at.Before(old.at) {
			first[g.delivery()] = g
		}
	}
	lat := make([]time.Duration, 0, len(first))
	half := m.t.Add(st.For / 2)
	var inHalf int
	var last time.Time
	for _, g := range first {
		lat = append(lat, g.at.Sub(g.created))
		if !g.at.Before(half) && g.at.Before(end) {
			inHalf++
		}
		last = maxTime(last, g.at)
	}
	st.Received, st.Lat = len(first), latenciesOf(lat)
	if d := end.Sub(half).Seconds(); d > 0 {
		st.Rate = float64(inHalf) / d
	}
	if last.After(end) {
		st.Tail = last.Sub(end)
	}
	if stmts {
		st.Statements = e.topStatements(ctx, st.Charges.OK)
	}
	return st
}

// pathSettle waits, up to -path-wait, until no charge is left created and
// the worker's queues are empty; what is left then is deleted and said.
func (e *environment) pathSettle(ctx context.Context, queue *asynq.Inspector) string {
	n, waited, ok := e.settleWithin(ctx, queue, e.o.pathWait)
	if ok {
		return ""
	}
	return fmt.Sprintf("path: a step left %d tasks and created charges %s after it; they were deleted", n, waited.Round(time.Second))
}

// walCounters are the server's WAL and checkpoint counters.
type walCounters struct{ bytes, fpi, checkpoints int64 }

// walStats reads the server's WAL written, its full-page images and the
// checkpoints done (the whole server's: other databases' writes count too).
func (e *environment) walStats(ctx context.Context) (walCounters, error) {
	var w walCounters
	err := e.db.query(ctx, `SELECT wal_bytes::bigint, wal_fpi, (SELECT checkpoints_timed + checkpoints_req FROM pg_stat_bgwriter) FROM pg_stat_wal`,
		nil, &w.bytes, &w.fpi, &w.checkpoints)
	return w, err
}

// statementStats reports whether pg_stat_statements can be read in the
// bench database (it creates the extension there when the server loads it).
func (e *environment) statementStats(ctx context.Context) bool {
	var loaded string
	if err := e.db.query(ctx, "SELECT current_setting('shared_preload_libraries')", nil, &loaded); err != nil ||
		!strings.Contains(loaded, "pg_stat_statements") {
		return false
	}
	return e.db.exec(ctx, "CREATE EXTENSION IF NOT EXISTS pg_stat_statements") == nil
}

// topStatements lists the bench database's statements by their share of
// execution time since the last reset, as "ms per charge, calls per charge:
// the statement's first words", and the sandbox ledger's share apart: a
// real provider keeps no ledger in the gateway's database.
func (e *environment) topStatements(ctx context.Context, charges int) string {
	if charges <= 0 {
		return ""
	}
	var out string
	err := e.db.query(ctx, `
WITH s AS (
  SELECT regexp_replace(left(query, 60), '\s+', ' ', 'g') AS q, calls, total_exec_time + total_plan_time AS t,
         query ILIKE '%sandbox_ledger%' AS ledger
  FROM pg_stat_statements WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
), top AS (SELECT * FROM s ORDER BY t DESC LIMIT 8)
SELECT format('all %s ms (sandbox ledger %s ms); ', round((SELECT sum(t) FROM s)::numeric / $1, 3), round(coalesce((SELECT sum(t) FROM s WHERE ledger), 0)::numeric / $1, 3))
    || string_agg(format('%s ms × %s: %s', round(t::numeric / $1, 3), round(calls::numeric / $1, 2), q), '; ' ORDER BY t DESC)
FROM top`, []any{charges}, &out)
	if err != nil {
		return "pg_stat_statements: " + err.Error()
	}
	return out
}

// table is the path scenario's steps in run order.
func (p *pathResult) table() table {
	t := table{head: []string{"events/s", "for s", "charges", "delivered", "p50 ms", "p99 ms", "delivered/s", "busy cores", "others",
		"API µs", "worker µs", "Postgres µs", "Redis µs", "tail s", "holds"}}
	for _, s := range p.Steps {
		name := rate(s.Events)
		if s.Search {
			name += " (search)"
		}
		holds := "yes"
		if !s.Holds() {
			holds = "no"
		}
		t.rows = append(t.rows, []string{name, fmt.Sprintf("%.0f", s.For.Seconds()), fmt.Sprint(s.Charges.OK),
			fmt.Sprintf("%d/%d", s.Received, s.Expected), msf(s.Lat.P50), msf(s.Lat.P99), rate(s.Rate),
			fmt.Sprintf("%.2f", s.Busy), fmt.Sprintf("%.2f", s.Others),
			usf(s.API), usf(s.Worker), usf(s.PG), usf(s.Redis), fmt.Sprintf("%.1f", s.Tail.Seconds()), holds})
	}
	return t
}

func (p *pathResult) verdict() string {
	if p.Best == nil {
		return "no step held"
	}
	return fmt.Sprintf("the highest rate that held: %s events/s (%s charges/s), first attempt p99 %s, %.2f of the machine's cores busy",
		rate(p.Best.Events), rate(p.Best.Events/2), ms(p.Best.Lat.P99), p.Best.Busy)
}

func (p *pathResult) text() string {
	var b strings.Builder
	b.WriteString("\nOne endpoint, the whole path (charge created, authorized and captured by the worker, 2 events delivered; CPU per charge):\n")
	b.WriteString(p.table().text())
	b.WriteString("  " + p.verdict() + "\n")
	for _, s := range p.Steps {
		fmt.Fprintf(&b, "  Postgres CPU per charge at %s events/s: %s; %s\n", rate(s.Events), s.PGKinds, s.WAL)
		if s.Statements != "" {
			fmt.Fprintf(&b, "  Postgres statements at %s events/s: %s\n", rate(s.Events), s.Statements)
		}
	}
	for _, n := range p.Notes {
		b.WriteString("  note: " + n + "\n")
	}
	return b.String()
}

func (p *pathResult) markdown() string {
	var b strings.Builder
	b.WriteString("\n### One endpoint, the whole path\n\n")
	b.WriteString("Charges created at a fixed rate, authorized and captured by one worker against the sandbox, " +
		"both events of each charge delivered to one endpoint answering at once (method: *One endpoint, the whole path* above). " +
		"Rates are events/s (two per charge); CPU columns are µs per charge; *holds*: every delivery arrived and the first attempts' p99 is under 250 ms.\n\n")
	b.WriteString(p.table().markdown())
	b.WriteString("\n" + capitalize(p.verdict()) + ".\n")
	var kinds, stmts []string
	for _, s := range p.Steps {
		kinds = append(kinds, fmt.Sprintf("- at %s events/s: %s; %s", rate(s.Events), s.PGKinds, s.WAL))
		if s.Statements != "" {
			stmts = append(stmts, fmt.Sprintf("- at %s events/s: %s", rate(s.Events), s.Statements))
		}
	}
	if len(kinds) > 0 {
		b.WriteString("\nPostgres CPU per charge by process:\n\n" + strings.Join(kinds, "\n") + "\n")
	}
	if len(stmts) > 0 {
		b.WriteString("\nPostgres statements per charge (execution and planning time, pg_stat_statements):\n\n" + strings.Join(stmts, "\n") + "\n")
	}
	for _, n := range p.Notes {
		b.WriteString("\n- " + n)
	}
	if len(p.Notes) > 0 {
		b.WriteString("\n")
	}
	return b.String()
}

// parseRates parses a comma-separated list of rates within [1, limit].
func parseRates(flagName, s string, limit float64) ([]float64, error) {
	var out []float64
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		var v float64
		if _, err := fmt.Sscan(f, &v); err != nil || v < 1 || v > limit {
			return nil, fmt.Errorf("%s: %q is not a rate from 1 to %.0f", flagName, f, limit)
		}
		out = append(out, v)
	}
	slices.Sort(out)
	return out, nil
}
