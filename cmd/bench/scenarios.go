package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gatehouse-pay/gatehouse/internal/config"
)

// The load scenarios beyond L1 (the charge steps), and the login flood, as
// docs/BENCHMARKS.md describes them. Each is bounded in count and in time and
// talks to 127.0.0.1 only; the checks are computed from what the harness saw
// and from Postgres, never from the service's metrics.

// hresult is one net/http request's result. The scenarios here need headers
// and bodies and run at tens to hundreds of requests per second, so they use
// net/http rather than the charge steps' lean client.
type hresult struct {
	status     int
	err        error
	body       []byte
	header     http.Header
	sent, done time.Time
}

func newHTTPClient(conns int, timeout time.Duration) *http.Client {
	return &http.Client{Timeout: timeout, Transport: &http.Transport{
		MaxIdleConns: conns, MaxIdleConnsPerHost: conns, DisableCompression: true, IdleConnTimeout: 30 * time.Second}}
}

// post sends body to http://addr+path with a Bearer authorization (when not
// empty) and an Idempotency-Key (when not empty).
func post(ctx context.Context, hc *http.Client, addr, path, auth, idem string, body []byte) hresult {
	r := hresult{sent: time.Now()}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+addr+path, bytes.NewReader(body))
	if err != nil {
		r.err, r.done = err, time.Now()
		return r
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json")
	if auth != "" {
		req.Header.Set("Authorization", "Bearer "+auth)
	}
	if idem != "" {
		req.Header.Set("Idempotency-Key", idem)
	}
	resp, err := hc.Do(req)
	if err != nil {
		r.err, r.done = err, time.Now()
		return r
	}
	r.body, r.err = io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	resp.Body.Close()
	r.status, r.header, r.done = resp.StatusCode, resp.Header, time.Now()
	return r
}

func (h hresult) outcome() outcome {
	o := outcome{status: h.status, err: h.err}
	if h.err == nil && h.status != 201 {
		o.sample = string(h.body[:min(len(h.body), 240)])
	}
	return o
}

func (e *environment) stopWorker() {
	if e.worker != nil {
		e.worker.proc.stop()
		e.worker = nil
	}
}

// ---- L2: one Idempotency-Key, many concurrent requests ----

// l2OrderBase keeps L2's order ids apart from every other charge of the run.
const l2OrderBase = 1_000_000_000_000

type l2Result struct {
	Keys, Concurrent, Parallel int
	Raced                      int         // keys actually sent
	Status                     map[int]int // answers by status; 0 = no answer
	Replayed                   int         // answers with Idempotent-Replayed: true
	OneCharge, MoreCharges     int         // keys whose 201s named one charge id, more than one
	NoCharge                   int         // keys without a 201
	DBKeys, DBCharges, DBDups  int         // idempotency_keys rows, charges, keys with more than one charge
	LedgerAuth, LedgerCalls    int         // sandbox_ledger authorize rows of those charges, and their calls
	LedgerWait                 time.Duration
	Lat                        latencies
	Wall                       time.Duration
	CPU                        cpuUse // the API's, per request
	Notes                      []string
}

// chargeIDs returns the distinct charge ids named by the 201 answers.
func chargeIDs(rs []hresult) []string {
	seen := map[string]bool{}
	var ids []string
	for _, r := range rs {
		if r.err != nil || r.status != http.StatusCreated {
			continue
		}
		var c struct {
			ID string `json:"id"`
		}
		if json.Unmarshal(r.body, &c) == nil && c.ID != "" && !seen[c.ID] {
			seen[c.ID] = true
			ids = append(ids, c.ID)
		}
	}
	return ids
}

func (e *environment) runL2(ctx context.Context) *l2Result {
	r := &l2Result{Keys: e.o.l2Keys, Concurrent: e.o.l2Concurrent, Parallel: e.o.l2Parallel, Status: map[int]int{}}
	if err := e.startWorker(ctx); err != nil {
		r.Notes = append(r.Notes, "start the worker: "+err.Error())
		return r
	}
	defer e.stopWorker()
	hc := newHTTPClient(e.o.l2Concurrent*e.o.l2Parallel, e.o.timeout)
	defer hc.CloseIdleConnections()
	prefix := "bench-l2-" + randomHex(4) + "-"
	var (
		mu   sync.Mutex
		lat  []time.Duration
		next atomic.Int64
		wg   sync.WaitGroup
	)
	before := takeSnapshot(e.api.pid(), e.redis.pid(), e.postmaster, e.dbName)
	start := time.Now()
	end := start.Add(5 * time.Minute)
	for range e.o.l2Parallel {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil && time.Now().Before(end) {
				k := next.Add(1) - 1
				if k >= int64(e.o.l2Keys) {
					return
				}
				key, body := prefix+strconv.FormatInt(k, 10), chargeBody(nil, l2OrderBase+k)
				rs := make([]hresult, e.o.l2Concurrent)
				var race sync.WaitGroup
				gate := make(chan struct{})
				for i := range rs {
					race.Add(1)
					go func() {
						defer race.Done()
						<-gate
						rs[i] = post(ctx, hc, e.api.addr, "/v1/charges", e.apiSecret, key, body)
					}()
				}
				close(gate)
				race.Wait()
				ids := chargeIDs(rs)
				mu.Lock()
				r.Raced++
				for _, x := range rs {
					st := x.status
					if x.err != nil {
						st = 0
					}
					r.Status[st]++
					if x.header.Get("Idempotent-Replayed") == "true" {
						r.Replayed++
					}
					lat = append(lat, x.done.Sub(x.sent))
				}
				switch len(ids) {
				case 0:
					r.NoCharge++
				case 1:
					r.OneCharge++
				default:
					r.MoreCharges++
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	r.Wall = time.Since(start)
	after := takeSnapshot(e.api.pid(), e.redis.pid(), e.postmaster, e.dbName)
	r.CPU = cpuBetween(before, after, r.Raced*e.o.l2Concurrent)
	r.Lat = latenciesOf(lat)

	q := func(sql string, args []any, dest ...any) {
		if err := e.db.query(ctx, sql, args, dest...); err != nil {
			r.Notes = append(r.Notes, "query: "+err.Error())
		}
	}
	q(`SELECT count(*) FROM idempotency_keys WHERE merchant_id = $1 AND key LIKE $2`, []any{e.merchantID, prefix + "%"}, &r.DBKeys)
	const mine = `c.merchant_id = $1 AND c.metadata->>'customer' = 'cus_bench' AND (c.metadata->>'order_id')::bigint >= $2`
	var distinct int
	q(`SELECT count(*), count(DISTINCT c.metadata->>'order_id') FROM charges c WHERE `+mine, []any{e.merchantID, int64(l2OrderBase)}, &r.DBCharges, &distinct)
	q(`SELECT count(*) FROM (SELECT 1 FROM charges c WHERE `+mine+` GROUP BY c.metadata->>'order_id' HAVING count(*) > 1) d`,
		[]any{e.merchantID, int64(l2OrderBase)}, &r.DBDups)
	// The worker authorizes each charge once: one sandbox_ledger row per
	// charge, keyed by gh_<charge id>_authorize.
	waitStart := time.Now()
	for {
		q(`SELECT count(*), coalesce(sum(l.calls), 0) FROM sandbox_ledger l JOIN charges c ON l.idempotency_key = 'gh_' || c.id::text || '_authorize' WHERE `+mine,
			[]any{e.merchantID, int64(l2OrderBase)}, &r.LedgerAuth, &r.LedgerCalls)
		if r.LedgerAuth >= r.DBCharges || time.Since(waitStart) > 60*time.Second || ctx.Err() != nil || len(r.Notes) > 0 {
			break
		}
		time.Sleep(250 * time.Millisecond)
	}
	r.LedgerWait = time.Since(waitStart)
	e.logf("l2: %d keys × %d: %d with one charge, %d with more, %d with none; Postgres: %d idempotency rows, %d charges, %d keys with > 1; ledger %d authorize rows (%d calls); p99 %s",
		r.Raced, r.Concurrent, r.OneCharge, r.MoreCharges, r.NoCharge, r.DBKeys, r.DBCharges, r.DBDups, r.LedgerAuth, r.LedgerCalls, ms(r.Lat.P99))
	return r
}

// Pass is L2's verdict: one charge per key in every view.
func (r *l2Result) Pass() bool {
	return r.Raced == r.Keys && r.OneCharge == r.Keys && r.DBKeys == r.Keys && r.DBCharges == r.Keys && r.DBDups == 0 &&
		r.LedgerAuth == r.Keys && r.LedgerCalls == r.Keys && r.Status[0] == 0 && r.status5xx() == 0
}

func (r *l2Result) status5xx() int {
	n := 0
	for st, c := range r.Status {
		if st >= 500 {
			n += c
		}
	}
	return n
}

// ---- L3: one key far above its limit, on two replicas ----

type l3Result struct {
	Limit                   int
	Window                  time.Duration
	Rate                    float64
	For                     time.Duration
	Scheduled, Dropped      int
	Accepted, Limited       int
	Status                  map[int]int
	PerReplica              [2]int // accepted by each replica
	BadRetryAfter           int
	RetryMin, RetryMax      int
	Likely, Certain         int // accepted in one trailing window: by midpoints, and certainly
	LatAccepted, LatLimited latencies
	CPU                     cpuUse // both replicas, per request
	Notes                   []string
}

func (e *environment) runL3(ctx context.Context) *l3Result {
	n, w, _ := parseLimit(e.o.l3Limit)
	r := &l3Result{Limit: n, Window: w, Rate: e.o.l3Rate, For: e.o.l3For, Status: map[int]int{}}
	var reps []*target
	defer func() {
		for _, t := range reps {
			t.proc.stop()
		}
	}()
	for i := range 2 {
		addr, err := freeAddr()
		if err == nil {
			var t *target
			t, err = e.startServer(ctx, fmt.Sprintf("l3-replica-%d", i+1), e.o.api, nil,
				append(e.apiEnv(addr), "RATE_LIMIT_CHARGES="+e.o.l3Limit), addr)
			if t != nil && t.proc != nil {
				reps = append(reps, t)
			}
		}
		if err != nil {
			r.Notes = append(r.Notes, "start a replica: "+err.Error())
			return r
		}
	}
	// A key of its own: the limiter counts per key, and the bench key's log
	// holds every charge of the other steps.
	secret, err := e.apiKey(ctx, e.email, e.password)
	if err != nil {
		r.Notes = append(r.Notes, "create an API key: "+err.Error())
		return r
	}
	hc := newHTTPClient(64, e.o.timeout)
	defer hc.CloseIdleConnections()
	total := int(math.Round(e.o.l3Rate * e.o.l3For.Seconds()))
	res := make([]hresult, total)
	prefix := "bench-l3-" + randomHex(4) + "-"
	body := chargeBody(nil, 2*l2OrderBase)
	pids := []int{reps[0].pid(), reps[1].pid()}
	before := takeSnapshotOf(pids, e.redis.pid(), e.postmaster, e.dbName)
	rec := openModelDo(ctx, e.o.l3Rate, e.o.l3For, e.o.maxInflight, func(i int, due time.Time) outcome {
		cctx, cancel := context.WithDeadline(ctx, due.Add(e.o.timeout))
		defer cancel()
		res[i] = post(cctx, hc, reps[i%2].addr, "/v1/charges", secret, prefix+strconv.Itoa(i), body)
		return res[i].outcome()
	})
	after := takeSnapshotOf(pids, e.redis.pid(), e.postmaster, e.dbName)
	s := summarize(rec)
	r.Scheduled, r.Dropped = s.Scheduled, s.Dropped
	r.CPU = cpuBetween(before, after, s.Completed)
	var spans []span
	var latA, latL []time.Duration
	for i, x := range res {
		if x.sent.IsZero() {
			continue
		}
		st := x.status
		if x.err != nil {
			st = 0
		}
		r.Status[st]++
		switch st {
		case http.StatusCreated:
			r.Accepted++
			r.PerReplica[i%2]++
			spans = append(spans, span{x.sent, x.done})
			latA = append(latA, rec.latency[i])
		case http.StatusTooManyRequests:
			r.Limited++
			latL = append(latL, rec.latency[i])
			v, ok := parseRetryAfter(x.header.Get("Retry-After"))
			if !ok {
				r.BadRetryAfter++
				continue
			}
			if r.RetryMin == 0 || v < r.RetryMin {
				r.RetryMin = v
			}
			r.RetryMax = max(r.RetryMax, v)
		}
	}
	r.Likely, r.Certain = maxInWindow(midpoints(spans), w), certainInWindow(spans, w)
	r.LatAccepted, r.LatLimited = latenciesOf(latA), latenciesOf(latL)
	e.logf("l3: %d scheduled at %.0f/s over 2 replicas, limit %d/%s: %d accepted (%d + %d), %d refused with 429 (%d bad Retry-After), most accepted in one window %d (certain %d)",
		r.Scheduled, r.Rate, n, w, r.Accepted, r.PerReplica[0], r.PerReplica[1], r.Limited, r.BadRetryAfter, r.Likely, r.Certain)
	return r
}

// windowVerdict judges the accepts per window: MISSED when the limit was
// certainly exceeded, met when the midpoints stay within it too, and "not
// shown" when only the midpoints exceed it (answers too slow to tell).
func (r *l3Result) windowVerdict() string {
	switch {
	case r.Accepted == 0 || r.Limited == 0:
		return "no data"
	case r.Certain > r.Limit:
		return "MISSED"
	case r.Likely > r.Limit:
		return "not shown"
	}
	return "met"
}

// others counts answers other than 201 and 429.
func (r *l3Result) others() int {
	n := 0
	for st, c := range r.Status {
		if st != 201 && st != 429 {
			n += c
		}
	}
	return n
}

// ---- the login flood ----

type loginResult struct {
	ChargeRate, LoginRate float64
	Step                  time.Duration
	Reps                  int
	MaxHashes             string
	Alone, Flood          summary // the charges, pooled over the steps of each condition
	AloneSteps            []summary
	FloodSteps            []summary
	CPUAlone, CPUFlood    cpuUse // per charge; the flood's logins are in CPUFlood
	Logins                map[int]int
	LoginLat              latencies
	LoginDropped          int
	Change                float64         // charge p99, flood against alone, in %
	Drain                 []time.Duration // after each flood step, how long the API stayed busy
	Notes                 []string
}

// waitLogins waits, at most limit, until a login with a wrong password is
// answered within half a second: the API's queue of logins waiting for a
// hash has drained (its CPU use says little on a machine others load). It
// returns the time waited.
func (e *environment) waitLogins(ctx context.Context, hc *http.Client, limit time.Duration) time.Duration {
	start := time.Now()
	b, _ := json.Marshal(map[string]string{"email": e.email, "password": "drain-probe"})
	for ctx.Err() == nil && time.Since(start) < limit {
		pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		r := post(pctx, hc, e.api.addr, "/v1/auth/login", "", "", b)
		cancel()
		if r.err == nil && r.status == http.StatusUnauthorized && r.done.Sub(r.sent) < 500*time.Millisecond {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	return time.Since(start)
}

// pooled summarizes several steps' recordings as one.
func pooled(recs []*recording) summary {
	m := &recording{}
	var wall time.Duration
	for _, r := range recs {
		m.latency = append(m.latency, r.latency...)
		m.status = append(m.status, r.status...)
		m.lag = append(m.lag, r.lag...)
		m.scheduled += r.scheduled
		if len(m.samples) < 3 {
			m.samples = append(m.samples, r.samples...)
		}
		wall += r.finish.Sub(r.start)
	}
	m.finish = m.start.Add(wall)
	return summarize(m)
}

func (e *environment) runLogin(ctx context.Context) *loginResult {
	r := &loginResult{ChargeRate: e.o.chargeRate, LoginRate: e.o.loginRate, Step: e.o.loginStep, Reps: e.o.loginReps, Logins: map[int]int{}}
	r.MaxHashes = os.Getenv("MAX_CONCURRENT_HASHES")
	if r.MaxHashes == "" {
		r.MaxHashes = strconv.Itoa(config.DefaultMaxConcurrentHashes()) + " (the default: half the CPUs)"
	}
	hc := newHTTPClient(256, e.o.timeout)
	defer hc.CloseIdleConnections()
	var alone, flood []*recording
	var loginLat []time.Duration
	var cpuA, cpuF []cpuUse
	var nA, nF []int
	// alone, flood, flood, alone, ...: drift on a shared machine hits both.
	for i := range 2 * e.o.loginReps {
		if ctx.Err() != nil {
			break
		}
		withFlood := i%4 == 1 || i%4 == 2
		var logins *recording
		var lres []hresult
		var wg sync.WaitGroup
		before := takeSnapshot(e.api.pid(), e.redis.pid(), e.postmaster, e.dbName)
		if withFlood {
			lres = make([]hresult, int(math.Round(e.o.loginRate*e.o.loginStep.Seconds())))
			wg.Add(1)
			go func() {
				defer wg.Done()
				logins = openModelDo(ctx, e.o.loginRate, e.o.loginStep, e.o.maxInflight, func(j int, due time.Time) outcome {
					email, password := e.email, e.password
					switch {
					case j%10 == 9:
						email = "nobody-" + strconv.Itoa(j) + "@gatehouse.local"
					case j%10 != 0:
						password = "wrong-" + strconv.Itoa(j)
					}
					b, _ := json.Marshal(map[string]string{"email": email, "password": password})
					cctx, cancel := context.WithDeadline(ctx, due.Add(e.o.timeout))
					defer cancel()
					lres[j] = post(cctx, hc, e.api.addr, "/v1/auth/login", "", "", b)
					o := lres[j].outcome()
					if o.status == 200 || o.status == 401 {
						o.status = 201 // an answer a login flood should get
					}
					return o
				})
			}()
		}
		rec := openModel(ctx, e.api.client, e.o.chargeRate, e.o.loginStep, e.o.maxInflight, e.o.timeout)
		wg.Wait()
		after := takeSnapshot(e.api.pid(), e.redis.pid(), e.postmaster, e.dbName)
		s := summarize(rec)
		c := cpuBetween(before, after, s.Completed)
		label := "alone"
		if withFlood {
			flood, cpuF, nF = append(flood, rec), append(cpuF, c), append(nF, s.Completed)
			r.FloodSteps = append(r.FloodSteps, s)
			label = "flood"
			ls := summarize(logins)
			r.LoginDropped += ls.Dropped
			for j, x := range lres {
				if x.sent.IsZero() {
					continue
				}
				st := x.status
				if x.err != nil {
					st = 0
				}
				r.Logins[st]++
				loginLat = append(loginLat, logins.latency[j])
			}
		} else {
			alone, cpuA, nA = append(alone, rec), append(cpuA, c), append(nA, s.Completed)
			r.AloneSteps = append(r.AloneSteps, s)
		}
		e.logf("login  %-5s  charges %.0f/s: p50 %s p99 %s p99.9 %s, %d errors, %d dropped, API CPU %s per charge",
			label, e.o.chargeRate, ms(s.P50), ms(s.P99), ms(s.P999), s.Errors, s.Dropped, us(c.Server))
		if withFlood {
			// Logins the clients gave up on may still be queued for a hash:
			// the next step starts once the API is idle.
			d := e.waitLogins(ctx, hc, 2*time.Minute)
			r.Drain = append(r.Drain, d)
			e.logf("login  the API's login queue drained %s after the flood", d.Round(100*time.Millisecond))
		}
		e.pause(ctx)
	}
	r.Alone, r.Flood = pooled(alone), pooled(flood)
	r.CPUAlone, r.CPUFlood = meanCPU(cpuA, nA), meanCPU(cpuF, nF)
	r.LoginLat = latenciesOf(loginLat)
	r.Change = pctChange(r.Alone.P99, r.Flood.P99)
	e.logf("login: charge p99 %s alone, %s beside %.0f logins/s: %+.1f %%", ms(r.Alone.P99), ms(r.Flood.P99), r.LoginRate, r.Change)
	return r
}

// verdict judges the flood: the change counts only when the charges alone
// were answered without errors or drops, and the flood's charges must be too.
func (r *loginResult) verdict() string {
	switch {
	case r.Alone.Completed == 0 || r.Flood.Completed == 0:
		return "no data"
	case r.Alone.Errors+r.Alone.Dropped > 0:
		return "invalid (errors alone)"
	case r.Change <= 10 && r.Flood.Errors+r.Flood.Dropped == 0:
		return "met"
	}
	return "MISSED"
}

// meanCPU weighs each step's per-request CPU by its requests.
func meanCPU(cs []cpuUse, ns []int) cpuUse {
	var out cpuUse
	total := 0
	for i, c := range cs {
		n := time.Duration(ns[i])
		out.Server += c.Server * n
		out.Postgres += c.Postgres * n
		out.Redis += c.Redis * n
		out.Loadgen += c.Loadgen * n
		out.BusyCores = max(out.BusyCores, c.BusyCores)
		out.OtherCores = max(out.OtherCores, c.OtherCores)
		total += ns[i]
	}
	if total > 0 {
		n := time.Duration(total)
		out.Server, out.Postgres, out.Redis, out.Loadgen = out.Server/n, out.Postgres/n, out.Redis/n, out.Loadgen/n
	}
	return out
}

// ---- L4: fan-out with slow and failing endpoints ----

// fanReceiver serves /ep/<n>: endpoint n answers 200 at once (healthy), 200
// after a delay (slow) or 500 (failing), and every request is recorded.
type fanReceiver struct {
	srv   *http.Server
	base  string
	kinds []string
	delay time.Duration
	mu    sync.Mutex
	got   []fanReceipt
}

type fanReceipt struct {
	ep      int
	event   string
	at      time.Time
	created time.Time
}

func startFanReceiver(kinds []string, delay time.Duration) (*fanReceiver, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	f := &fanReceiver{base: "http://" + ln.Addr().String() + "/ep/", kinds: kinds, delay: delay}
	f.srv = &http.Server{ReadHeaderTimeout: 5 * time.Second, Handler: http.HandlerFunc(f.serve)}
	go func() { _ = f.srv.Serve(ln) }()
	return f, nil
}

func (f *fanReceiver) serve(w http.ResponseWriter, r *http.Request) {
	at := time.Now()
	body, _ := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	ep, err := strconv.Atoi(strings.TrimPrefix(r.URL.Path, "/ep/"))
	if err != nil || ep < 0 || ep >= len(f.kinds) {
		w.WriteHeader(http.StatusNotFound)
		return
	}
	var ev struct {
		CreatedAt string `json:"created_at"`
	}
	var created time.Time
	if json.Unmarshal(body, &ev) == nil {
		created, _ = time.Parse(time.RFC3339Nano, ev.CreatedAt)
	}
	f.mu.Lock()
	f.got = append(f.got, fanReceipt{ep: ep, event: r.Header.Get("X-Service-Event-Id"), at: at, created: created})
	f.mu.Unlock()
	switch f.kinds[ep] {
	case "slow":
		select {
		case <-time.After(f.delay):
		case <-r.Context().Done():
			return
		}
	case "failing":
		w.WriteHeader(http.StatusInternalServerError)
		return
	}
	w.WriteHeader(http.StatusOK)
}

// firstAttempts returns, for events created at or after t, the time from
// created_at to the first receipt per (endpoint, event) at endpoints of
// kind, and the receipts at each kind.
func (f *fanReceiver) firstAttempts(t time.Time, kind string) (map[string]time.Duration, map[string]int) {
	t = t.Add(-time.Millisecond) // created_at is in whole milliseconds
	f.mu.Lock()
	defer f.mu.Unlock()
	first := map[string]time.Duration{}
	byKind := map[string]int{}
	for _, r := range f.got {
		if r.created.Before(t) {
			continue
		}
		byKind[f.kinds[r.ep]]++
		if f.kinds[r.ep] != kind {
			continue
		}
		k := strconv.Itoa(r.ep) + "/" + r.event
		d := r.at.Sub(r.created)
		if old, ok := first[k]; !ok || d < old {
			first[k] = d
		}
	}
	return first, byKind
}

type l4Result struct {
	Rate                   float64
	For                    time.Duration
	Healthy, Slow, Failing int
	Delay                  time.Duration
	Charges                summary
	Expected, Delivered    int // healthy (endpoint, event) pairs
	Lat                    latencies
	SlowGot, FailingGot    int // requests the slow and failing endpoints got
	Waited                 time.Duration
	CPUWorker, CPUAPI      time.Duration // per healthy delivery; per charge
	Notes                  []string
	endpoints              []string
}

func (e *environment) runL4(ctx context.Context) *l4Result {
	r := &l4Result{Rate: e.o.l4Rate, For: e.o.l4For, Healthy: e.o.l4Healthy, Slow: e.o.l4Slow, Failing: e.o.l4Failing, Delay: e.o.l4Delay}
	var kinds []string
	// Interleaved, so no kind sits in a block of its own in the fan-out order.
	for i := 0; len(kinds) < r.Healthy+r.Slow+r.Failing; i++ {
		for _, k := range []struct {
			name string
			n    int
		}{{"healthy", r.Healthy}, {"slow", r.Slow}, {"failing", r.Failing}} {
			if i < k.n {
				kinds = append(kinds, k.name)
			}
		}
	}
	f, err := startFanReceiver(kinds, r.Delay)
	if err != nil {
		r.Notes = append(r.Notes, err.Error())
		return r
	}
	defer f.srv.Close()
	defer func() {
		dctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		for _, id := range r.endpoints {
			if err := e.request(dctx, http.MethodDelete, "/v1/me/webhook_endpoints/"+id, e.apiSecret, nil, 0, nil); err != nil {
				r.Notes = append(r.Notes, "delete an endpoint: "+err.Error())
				return
			}
		}
	}()
	for i, k := range kinds {
		var ep struct {
			Endpoint struct {
				ID string `json:"id"`
			} `json:"webhook_endpoint"`
		}
		if err := e.request(ctx, http.MethodPost, "/v1/me/webhook_endpoints", e.apiSecret,
			map[string]any{"url": f.base + strconv.Itoa(i), "events": []string{"charge.created"}, "description": "bench l4 " + k}, http.StatusCreated, &ep); err != nil {
			r.Notes = append(r.Notes, err.Error())
			return r
		}
		r.endpoints = append(r.endpoints, ep.Endpoint.ID)
	}
	if err := e.startWorker(ctx); err != nil {
		r.Notes = append(r.Notes, "start the worker: "+err.Error())
		return r
	}
	// Stopped before the endpoints are deleted (defers run last first).
	defer e.stopWorker()
	apiBefore := cpuOf(e.api.pid())
	workerBefore := cpuOf(e.worker.pid())
	t0 := time.Now()
	rec := openModel(ctx, e.api.client, r.Rate, r.For, e.o.maxInflight, e.o.timeout)
	r.Charges = summarize(rec)
	apiCPU := cpuOf(e.api.pid()) - apiBefore
	r.Expected = r.Charges.OK * r.Healthy
	waitStart := time.Now()
	var first map[string]time.Duration
	var byKind map[string]int
	for {
		first, byKind = f.firstAttempts(t0, "healthy")
		if len(first) >= r.Expected || time.Since(waitStart) > e.o.l4Wait || ctx.Err() != nil {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	r.Waited = time.Since(waitStart)
	workerCPU := cpuOf(e.worker.pid()) - workerBefore
	r.Delivered, r.SlowGot, r.FailingGot = len(first), byKind["slow"], byKind["failing"]
	lat := make([]time.Duration, 0, len(first))
	for _, d := range first {
		lat = append(lat, d)
	}
	r.Lat = latenciesOf(lat)
	if r.Delivered > 0 {
		r.CPUWorker = workerCPU / time.Duration(r.Delivered+r.SlowGot+r.FailingGot)
	}
	if r.Charges.Completed > 0 {
		r.CPUAPI = apiCPU / time.Duration(r.Charges.Completed)
	}
	e.logf("l4: %d charges at %.0f/s to %d healthy, %d slow (%s), %d failing endpoints: healthy %d/%d first attempts, p50 %s p99 %s max %s; slow got %d, failing got %d",
		r.Charges.OK, r.Rate, r.Healthy, r.Slow, r.Delay, r.Failing, r.Delivered, r.Expected, ms(r.Lat.P50), ms(r.Lat.P99), ms(r.Lat.Max), r.SlowGot, r.FailingGot)
	return r
}

// Pass is L4's verdict: every healthy delivery arrived, p99 under 250 ms.
func (r *l4Result) Pass() bool {
	return r.Expected > 0 && r.Delivered == r.Expected && r.Lat.P99 < 250*time.Millisecond
}
