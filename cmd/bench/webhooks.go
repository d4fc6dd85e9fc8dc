package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hibiken/asynq"

	"github.com/gatehouse-pay/gatehouse/internal/config"
	"github.com/gatehouse-pay/gatehouse/internal/jobs"
	"github.com/gatehouse-pay/gatehouse/internal/testenv/harness"
)

// The webhook section runs bin/worker next to bin/api, registers
// -webhook-endpoints endpoints (three by default, as a merchant with three
// endpoints has) on a receiver inside the harness (127.0.0.1, one port per
// endpoint, as distinct hosts; answering 200 at once) and measures, for
// charge.created deliveries, one per charge and endpoint:
//
//   - delivery cost, isolated: a backlog of charges created while no worker
//     runs; the worker starts with the delivery queues paused, so it
//     first authorizes the charges (measured as its own row); then the queue
//     is resumed and the deliveries are timed at the receiver, first to last
//     receipt, with the worker's, Postgres's and Redis's CPU; once with one
//     worker process, once with two;
//   - the floor: one asynq task per delivery on the same Redis, run by "bench
//     webhook-floor" (asynq.Server, the worker's concurrency and poll
//     interval) whose handler signs the same body as a delivery and POSTs it
//     to the same receiver, and nothing else; and, for reference, the signer
//     loop alone without asynq;
//   - commit to first attempt: charges at fixed arrival rates (open model)
//     with one worker running, which also authorizes them, and a held step
//     (-webhook-hold at -webhook-hold-rate); per delivery, the receiver's
//     clock at the request minus the event's created_at, read from the body.

// receipt is one request the receiver got.
type receipt struct {
	at      time.Time
	created time.Time // the event's created_at
	event   string
	attempt string
	to      int // the endpoint: the index of the receiver's URL
}

// receiver records every delivery it is sent, on one port per endpoint.
type receiver struct {
	srvs []*http.Server
	urls []string
	mu   sync.Mutex
	got  []receipt
	body atomic.Pointer[[]byte] // the last body received, for the floor
	bad  atomic.Int64           // bodies without a readable created_at
	n    atomic.Int64           // deliveries received (not floor POSTs)

	floorMu sync.Mutex
	floorAt []time.Time // arrival of each floor POST with a floorHeader
}

// floorHeader marks the asynq floor's POSTs, so the receiver times them.
const floorHeader = "X-Bench-Floor"

// startReceiver listens on endpoints ports of 127.0.0.1, one URL each.
func startReceiver(endpoints int) (*receiver, error) {
	rc := &receiver{}
	for i := range max(endpoints, 1) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			rc.close()
			return nil, err
		}
		srv := &http.Server{ReadHeaderTimeout: 5 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			rc.serve(w, r, i)
		})}
		rc.srvs = append(rc.srvs, srv)
		rc.urls = append(rc.urls, "http://"+ln.Addr().String()+"/hook")
		go func() { _ = srv.Serve(ln) }()
	}
	return rc, nil
}

func (rc *receiver) close() {
	for _, s := range rc.srvs {
		_ = s.Close()
	}
}

func (rc *receiver) serve(w http.ResponseWriter, r *http.Request, to int) {
	at := time.Now()
	body, _ := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	w.WriteHeader(http.StatusOK)
	id := r.Header.Get("X-Service-Event-Id")
	if id == "" { // the floors' POSTs
		if r.Header.Get(floorHeader) != "" {
			rc.floorMu.Lock()
			rc.floorAt = append(rc.floorAt, at)
			rc.floorMu.Unlock()
		}
		return
	}
	var ev struct {
		CreatedAt string `json:"created_at"`
	}
	created, err := time.Time{}, json.Unmarshal(body, &ev)
	if err == nil {
		created, err = time.Parse(time.RFC3339Nano, ev.CreatedAt)
	}
	if err != nil {
		rc.bad.Add(1)
	}
	rc.body.Store(&body)
	rc.mu.Lock()
	rc.got = append(rc.got, receipt{at: at, created: created, event: id, attempt: r.Header.Get("X-Service-Delivery-Attempt"), to: to})
	rc.mu.Unlock()
	rc.n.Add(1)
}

// floorSince returns the floor POSTs received from index i on.
func (rc *receiver) floorSince(i int) []time.Time {
	rc.floorMu.Lock()
	defer rc.floorMu.Unlock()
	return slices.Clone(rc.floorAt[min(i, len(rc.floorAt)):])
}

// since returns the receipts of events created at or after t.
func (rc *receiver) since(t time.Time) []receipt {
	t = t.Add(-time.Millisecond) // created_at is in whole milliseconds
	rc.mu.Lock()
	defer rc.mu.Unlock()
	var out []receipt
	for _, r := range rc.got {
		if !r.created.Before(t) {
			out = append(out, r)
		}
	}
	return out
}

// mark is a point in the receiver's count, taken with the time passed to waitFor.
type mark struct {
	t time.Time
	n int64
}

func (rc *receiver) mark() mark { return mark{t: time.Now(), n: rc.n.Load()} }

// waitFor waits until n distinct deliveries (event and endpoint) of events
// created since m have arrived, or limit passes; it returns their receipts.
func (rc *receiver) waitFor(ctx context.Context, m mark, n int, limit time.Duration) []receipt {
	end := time.Now().Add(limit)
	t := m.t
	for {
		// Count before copying: the harness shares the machine with what it measures.
		if rc.n.Load()-m.n < int64(n) && time.Now().Before(end) && ctx.Err() == nil {
			time.Sleep(20 * time.Millisecond)
			continue
		}
		got := rc.since(t)
		if distinct(got) >= n || time.Now().After(end) || ctx.Err() != nil {
			return got
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// delivery names a receipt's delivery: its event at its endpoint.
func (r receipt) delivery() string { return r.event + "@" + strconv.Itoa(r.to) }

func distinct(rs []receipt) int {
	seen := make(map[string]bool, len(rs))
	for _, r := range rs {
		seen[r.delivery()] = true
	}
	return len(seen)
}

// whLatency is one commit-to-first-attempt step.
type whLatency struct {
	Rate                float64
	For                 time.Duration
	Created, Received   int // charges answered 201; distinct deliveries (event and endpoint) received
	Expected            int // deliveries: Created × endpoints
	Duplicates, Retries int // receipts beyond the first per delivery; receipts with attempt > 1
	ChargeP99           time.Duration
	P50, P99, Max       time.Duration
	Dropped, Errors     int
}

// whThroughput is a backlog drain, or a floor run.
type whThroughput struct {
	Name              string
	Senders           int // worker processes, or floor goroutines
	Expected, Got     int
	Wall              time.Duration // first to last receipt
	Rate              float64       // deliveries per second over Wall
	Worker, PG, Redis time.Duration // CPU per delivery of the worker(s) or the floor process, Postgres, Redis
	CPU               bool          // the CPU columns were measured
	PGKinds           string        // Postgres CPU per delivery by process (drains only)
	Batches           string        // mean deliveries per read and record statement, and hand-offs (drains only)
}

// batchSizes reads gatehouse_webhook_batch_size from the workers' metrics:
// the mean deliveries per statement, by statement; and
// gatehouse_webhook_handoffs_total: the first attempts the event tasks
// handed off, by reason.
func batchSizes(workers []*target) string {
	sum, count, handOffs := map[string]float64{}, map[string]float64{}, map[string]float64{}
	for _, w := range workers {
		resp, err := http.Get("http://" + w.addr + "/metrics")
		if err != nil {
			return ""
		}
		raw, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		for _, line := range strings.Split(string(raw), "\n") {
			if rest, ok := strings.CutPrefix(line, `gatehouse_webhook_handoffs_total{reason="`); ok {
				if reason, v, ok := strings.Cut(rest, `"} `); ok {
					f, _ := strconv.ParseFloat(v, 64)
					handOffs[reason] += f
				}
			}
			for _, st := range []string{"read", "record"} {
				for name, into := range map[string]map[string]float64{"_sum": sum, "_count": count} {
					prefix := "gatehouse_webhook_batch_size" + name + `{statement="` + st + `"} `
					if v, ok := strings.CutPrefix(line, prefix); ok {
						f, _ := strconv.ParseFloat(v, 64)
						into[st] += f
					}
				}
			}
		}
	}
	if count["read"] == 0 || count["record"] == 0 {
		return ""
	}
	out := fmt.Sprintf("%.1f per read, %.1f per record", sum["read"]/count["read"], sum["record"]/count["record"])
	var reasons []string
	for r, n := range handOffs {
		if n > 0 {
			reasons = append(reasons, fmt.Sprintf("%s %.0f", r, n))
		}
	}
	if len(reasons) > 0 {
		slices.Sort(reasons)
		out += "; first attempts handed off: " + strings.Join(reasons, ", ")
	}
	return out
}

// whAuth is the authorization phase of a backlog: the worker authorizing
// the backlog's charges with the deliveries held back.
type whAuth struct {
	Charges           int
	Wall              time.Duration
	Worker, PG, Redis time.Duration // CPU per charge
}

// webhookResults are the webhook section's figures.
type webhookResults struct {
	Latency  []whLatency
	Hold     *whLatency     // the held step
	Drains   []whThroughput // one worker, two workers
	Auth     *whAuth        // authorization phase of the one-worker backlog
	Create   *whAuth        // creation of the one-worker backlog: the API's CPU in Worker
	Floor    *whThroughput  // asynq task + signed POST
	Signer   *whThroughput  // signed POST loop, no asynq (reference)
	BodySize int
	// Endpoints is how many endpoints each charge.created goes to.
	Endpoints int
	Notes     []string
}

// measureWebhooks runs the webhook section; failures become notes.
func (e *environment) measureWebhooks(ctx context.Context) *webhookResults {
	w := &webhookResults{}
	if err := e.webhooks(ctx, w); err != nil {
		w.Notes = append(w.Notes, "webhook section: "+err.Error())
		e.logf("webhooks: %v", err)
	}
	return w
}

func (e *environment) webhooks(ctx context.Context, w *webhookResults) error {
	if _, err := os.Stat(e.o.worker); err != nil {
		return fmt.Errorf("%s: %w (run make build)", e.o.worker, err)
	}
	rc, err := startReceiver(e.o.webhookEndpoints)
	if err != nil {
		return err
	}
	defer rc.close()
	w.Endpoints = len(rc.urls)
	var ids []string
	// The charge steps that follow measure creation without fan-out.
	deleteEndpoints := func() {
		dctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		for _, id := range ids {
			if err := e.request(dctx, http.MethodDelete, "/v1/me/webhook_endpoints/"+id, e.apiSecret, nil, 0, nil); err != nil {
				w.Notes = append(w.Notes, "delete a bench endpoint: "+err.Error())
			}
		}
		ids = nil
	}
	defer deleteEndpoints()
	// createEndpoints registers one endpoint per receiver port.
	createEndpoints := func(events []string, ordered bool) error {
		for i, u := range rc.urls {
			var ep struct {
				Endpoint struct {
					ID string `json:"id"`
				} `json:"webhook_endpoint"`
			}
			if err := e.request(ctx, http.MethodPost, "/v1/me/webhook_endpoints", e.apiSecret,
				map[string]any{"url": u, "events": events, "ordered": ordered, "description": fmt.Sprintf("bench receiver %d", i+1)},
				http.StatusCreated, &ep); err != nil {
				return err
			}
			ids = append(ids, ep.Endpoint.ID)
		}
		return nil
	}
	if err := createEndpoints([]string{"charge.created"}, false); err != nil {
		return err
	}
	queue := asynq.NewInspector(asynq.RedisClientOpt{Addr: e.redis.Addr()})
	defer queue.Close()

	for _, workers := range []int{1, 2} {
		if ctx.Err() != nil {
			break
		}
		d, create, auth, err := e.drain(ctx, rc, queue, workers)
		if err != nil {
			return err
		}
		w.Drains = append(w.Drains, d)
		if d.PGKinds != "" {
			w.Notes = append(w.Notes, d.Name+": Postgres CPU per delivery by process: "+d.PGKinds+"; deliveries per statement: "+d.Batches)
		}
		if workers == 1 {
			w.Create, w.Auth = &create, &auth
		}
		e.pauseWorker(ctx)
	}
	// Ordered against unordered: endpoints taking charge.created and
	// charge.captured, so each charge is two events of one object per
	// endpoint; the ordered ones send a charge's captured event only after
	// its created one.
	if e.o.webhookOrdered {
		for _, ordered := range []bool{false, true} {
			if ctx.Err() != nil {
				break
			}
			deleteEndpoints()
			if err := createEndpoints([]string{"charge.created", "charge.captured"}, ordered); err != nil {
				return err
			}
			name := "project, 1 worker, created+captured, unordered"
			if ordered {
				name = "project, 1 worker, created+captured, ordered"
			}
			d, _, _, err := e.drainNamed(ctx, rc, queue, 1, name, 2)
			if err != nil {
				return err
			}
			w.Drains = append(w.Drains, d)
			e.pauseWorker(ctx)
		}
		deleteEndpoints()
		if err := createEndpoints([]string{"charge.created"}, false); err != nil {
			return err
		}
	}
	if p := rc.body.Load(); p != nil {
		w.BodySize = len(*p)
	}
	body := bytes.Repeat([]byte("x"), max(w.BodySize, 1024))
	if p := rc.body.Load(); p != nil {
		body = *p
	}

	// The floors: the same body to the same receiver.
	if ctx.Err() == nil {
		f, err := e.asynqFloor(ctx, rc, body)
		if err != nil {
			w.Notes = append(w.Notes, "asynq floor: "+err.Error())
		} else {
			w.Floor = &f
			e.logf("webhooks: floor, asynq task + signed POST: %d at %.0f/s, floor process %s and Redis %s per delivery", f.Got, f.Rate, us(f.Worker), us(f.Redis))
		}
		e.pauseWorker(ctx)
	}
	if ctx.Err() == nil {
		f := signerFloor(ctx, rc.urls, body, 20, e.o.webhookCount*len(rc.urls))
		w.Signer = &f
		e.logf("webhooks: signed POST loop, 20 senders: %d at %.0f/s", f.Got, f.Rate)
	}

	// Commit to first attempt, open model, one worker authorizing the same charges.
	if err := e.startWorker(ctx); err != nil {
		return err
	}
	defer func() {
		e.worker.stop()
		e.worker = nil
	}()
	// A fresh worker's first seconds, right after the drains, are not what
	// these steps measure: warm it up at the first rate, unreported.
	if len(e.o.webhookRates) > 0 {
		m := rc.mark()
		s := summarize(openModel(ctx, e.api.client, e.o.webhookRates[0], min(e.o.webhookStep, 3*time.Second), e.o.maxInflight, e.o.timeout))
		rc.waitFor(ctx, m, s.OK*len(rc.urls), min(e.o.webhookWait, 30*time.Second))
	}
	e.pauseWorker(ctx)
	steps := make([]whLatency, 0, len(e.o.webhookRates)+1)
	for _, r := range e.o.webhookRates {
		steps = append(steps, whLatency{Rate: r, For: e.o.webhookStep})
	}
	if e.o.webhookHold > 0 {
		steps = append(steps, whLatency{Rate: e.o.webhookHoldRate, For: e.o.webhookHold})
	}
	for i, st := range steps {
		if ctx.Err() != nil {
			break
		}
		m := rc.mark()
		rec := openModel(ctx, e.api.client, st.Rate, st.For, e.o.maxInflight, e.o.timeout)
		s := summarize(rec)
		got := rc.waitFor(ctx, m, s.OK*len(rc.urls), min(e.o.webhookWait, 30*time.Second))
		l := latencyOf(st.Rate, s, got, len(rc.urls))
		l.For = st.For
		if e.o.webhookHold > 0 && i == len(steps)-1 {
			w.Hold = &l
		} else {
			w.Latency = append(w.Latency, l)
		}
		e.logf("webhooks: %4.0f charges/s for %s: %d/%d delivered, commit to first attempt p50 %s p99 %s max %s",
			st.Rate, st.For, l.Received, l.Expected, ms(l.P50), ms(l.P99), ms(l.Max))
		e.pauseWorker(ctx)
	}
	if bad := rc.bad.Load(); bad > 0 {
		w.Notes = append(w.Notes, fmt.Sprintf("%d deliveries had no readable created_at", bad))
	}
	// A step above what the machine carries leaves a backlog, which must not
	// reach the scenarios after this section: delete the endpoints, so their
	// deliveries end without a request, and let the worker finish the rest.
	deleteEndpoints()
	if n := e.settle(ctx, queue); n != "" {
		w.Notes = append(w.Notes, n)
	}
	return nil
}

// deliveryQueues are the worker's delivery queues (WEBHOOK_QUEUES of the
// bench's environment, which the API and worker inherit, or its default).
func deliveryQueues() []string {
	n, err := strconv.Atoi(os.Getenv("WEBHOOK_QUEUES"))
	if err != nil || n < 1 {
		n = config.DefaultWebhookQueues
	}
	return jobs.DeliveryQueues(n, nil)
}

// settleQueues are the worker's queues that the section fills.
var settleQueues = append([]string{"critical"}, deliveryQueues()...)

// pauseDeliveries pauses (or, resume, resumes) every delivery queue.
func pauseDeliveries(queue *asynq.Inspector, resume bool) error {
	for _, q := range deliveryQueues() {
		op := queue.PauseQueue
		if resume {
			op = queue.UnpauseQueue
		}
		if err := op(q); err != nil && !strings.Contains(err.Error(), "paused") { // already (un)paused is fine

			return err
		}
	}
	return nil
}

// settle waits, up to twice -webhook-wait, until no charge is left created
// and the worker's queues are empty. What is left then (tasks and their
// outbox rows) is deleted, and said in the returned note.
func (e *environment) settle(ctx context.Context, queue *asynq.Inspector) string {
	n, waited, ok := e.settleWithin(ctx, queue, 2*e.o.webhookWait)
	if ok {
		e.logf("webhooks: the steps' backlog was done %s after the last step", waited.Round(time.Second))
		return ""
	}
	note := fmt.Sprintf("the steps left %d tasks and created charges %s after the last step; the tasks were deleted", n, waited.Round(time.Second))
	e.logf("webhooks: %s", note)
	return note
}

// settleWithin waits up to limit until no charge is left created and the
// worker's queues are empty, and reports how long it waited. When limit
// passes first, it deletes what is left (tasks and their outbox rows) and
// returns how much that was and ok false.
func (e *environment) settleWithin(ctx context.Context, queue *asynq.Inspector, limit time.Duration) (left int, waited time.Duration, ok bool) {
	start := time.Now()
	count := func() int {
		n := 0
		for _, q := range settleQueues {
			if info, err := queue.GetQueueInfo(q); err == nil {
				n += info.Pending + info.Active + info.Scheduled + info.Retry
			}
		}
		var created int
		if err := e.db.query(ctx, "SELECT count(*) FROM charges WHERE status = 'created'", nil, &created); err == nil {
			n += created
		}
		return n
	}
	for time.Since(start) < limit && ctx.Err() == nil {
		if count() == 0 {
			return 0, time.Since(start), true
		}
		time.Sleep(250 * time.Millisecond)
	}
	left = count()
	for _, q := range settleQueues {
		_, _ = queue.DeleteAllPendingTasks(q)
		_, _ = queue.DeleteAllScheduledTasks(q)
		_, _ = queue.DeleteAllRetryTasks(q)
	}
	_ = e.db.exec(ctx, "DELETE FROM outbox")
	return left, time.Since(start), false
}

// drain measures one backlog: -webhook-count charges created while no worker
// runs, then workers started with the webhooks queue paused. They authorize
// the charges first (the auth row); then the queue is resumed and the
// deliveries timed at the receiver.
func (e *environment) drain(ctx context.Context, rc *receiver, queue *asynq.Inspector, workers int) (whThroughput, whAuth, whAuth, error) {
	name := "project, 1 worker"
	if workers > 1 {
		name = fmt.Sprintf("project, %d workers", workers)
	}
	return e.drainNamed(ctx, rc, queue, workers, name, 1)
}

// drainNamed is drain with a name and perCharge deliveries per charge and
// endpoint (2 when the endpoints take charge.created and charge.captured).
func (e *environment) drainNamed(ctx context.Context, rc *receiver, queue *asynq.Inspector, workers int, name string, perCharge int) (whThroughput, whAuth, whAuth, error) {
	m := rc.mark()
	start := time.Now()
	c0 := takeSnapshotOf([]int{e.api.pid()}, e.redisPID(), e.postmaster, e.dbName)
	rec := closedLoop(ctx, e.api.client, 16, 30*time.Second, e.o.webhookCount, e.o.timeout)
	c1 := takeSnapshotOf([]int{e.api.pid()}, e.redisPID(), e.postmaster, e.dbName)
	created := summarize(rec).OK
	create := whAuth{Charges: created, Wall: time.Since(start)}
	if c := cpuBetween(c0, c1, created); created > 0 {
		create.Worker, create.PG, create.Redis = c.Server, c.Postgres, c.Redis
	}
	e.logf("webhooks: %d charges created in %s for a backlog (%s): API %s, Postgres %s, Redis %s per charge with its %d deliveries",
		created, create.Wall.Round(time.Millisecond), name, us(create.Worker), us(create.PG), us(create.Redis), len(rc.urls))
	if err := pauseDeliveries(queue, false); err != nil {
		return whThroughput{}, whAuth{}, whAuth{}, fmt.Errorf("pause the webhooks queue: %w", err)
	}
	resumed := false
	defer func() {
		if !resumed {
			_ = pauseDeliveries(queue, true)
		}
	}()
	var procs []*target
	defer func() {
		for _, p := range procs {
			p.stop()
		}
	}()
	pids := func() []int {
		out := make([]int, len(procs))
		for i, p := range procs {
			out[i] = p.pid()
		}
		return out
	}
	for i := range workers {
		t, err := e.startWorkerNamed(ctx, fmt.Sprintf("worker-%d-%d", workers, i+1))
		if err != nil {
			return whThroughput{}, whAuth{}, whAuth{}, err
		}
		procs = append(procs, t)
	}
	snap := func() cpuSnapshot { return takeSnapshotOf(pids(), e.redisPID(), e.postmaster, e.dbName) }
	a0, t0 := snap(), time.Now()
	for end := time.Now().Add(e.o.webhookWait); time.Now().Before(end) && ctx.Err() == nil; {
		var left int
		if err := e.db.query(ctx, "SELECT count(*) FROM charges WHERE status = 'created'", nil, &left); err == nil && left == 0 {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	auth := whAuth{Charges: created, Wall: time.Since(t0)}
	e.pauseWorker(ctx)
	a1 := snap()
	if c := cpuBetween(a0, a1, created); created > 0 {
		auth.Worker, auth.PG, auth.Redis = c.Server, c.Postgres, c.Redis
	}
	e.logf("webhooks: %s authorized %d charges in %s: worker %s, Postgres %s, Redis %s per charge", name, created,
		auth.Wall.Round(time.Millisecond), us(auth.Worker), us(auth.PG), us(auth.Redis))

	before := snap()
	if err := pauseDeliveries(queue, true); err != nil {
		return whThroughput{}, create, auth, fmt.Errorf("resume the webhooks queue: %w", err)
	}
	resumed = true
	got := rc.waitFor(ctx, m, perCharge*created*len(rc.urls), e.o.webhookWait)
	after := snap()
	d := throughputOf(name, workers, perCharge*created*len(rc.urls), got)
	if d.Got > 0 {
		c := cpuBetween(before, after, d.Got)
		d.Worker, d.PG, d.Redis, d.CPU = c.Server, c.Postgres, c.Redis, true
	}
	if d.CPU {
		d.PGKinds = kindsText(pgByKind(before, after), d.Got)
	}
	d.Batches = batchSizes(procs)
	e.logf("webhooks: %s: backlog of %d: %d delivered at %.0f/s; per delivery worker %s, Postgres %s (%s), Redis %s",
		name, created, d.Got, d.Rate, us(d.Worker), us(d.PG), d.PGKinds, us(d.Redis))
	return d, create, auth, nil
}

// pauseWorker is e.pause with the worker counted as one of the measured
// processes.
func (e *environment) pauseWorker(ctx context.Context) {
	select {
	case <-ctx.Done():
	case <-time.After(e.o.settle):
	}
}

func (e *environment) startWorker(ctx context.Context) error {
	t, err := e.startWorkerNamed(ctx, "worker")
	e.worker = t
	return err
}

func (e *environment) startWorkerNamed(ctx context.Context, name string) (*target, error) {
	addr, err := harness.FreeAddr()
	if err != nil {
		return nil, err
	}
	env := append(e.apiEnv("127.0.0.1:0"), "METRICS_ADDR="+addr) // the later METRICS_ADDR wins
	return e.startServer(ctx, name, e.o.worker, nil, env, addr)
}

func throughputOf(name string, senders, expected int, got []receipt) whThroughput {
	t := whThroughput{Name: name, Senders: senders, Expected: expected, Got: distinct(got)}
	if len(got) > 1 {
		first, last := got[0].at, got[0].at
		for _, r := range got {
			first, last = minTime(first, r.at), maxTime(last, r.at)
		}
		t.Wall = last.Sub(first)
		if t.Wall > 0 {
			t.Rate = float64(len(got)-1) / t.Wall.Seconds()
		}
	}
	return t
}

func latencyOf(rate float64, s summary, got []receipt, endpoints int) whLatency {
	l := whLatency{Rate: rate, Created: s.OK, Expected: s.OK * endpoints, ChargeP99: s.P99, Dropped: s.Dropped, Errors: s.Errors}
	first := map[string]time.Duration{}
	for _, r := range got {
		if r.attempt != "1" {
			l.Retries++
		}
		d := r.at.Sub(r.created)
		if old, ok := first[r.delivery()]; ok {
			l.Duplicates++
			d = min(d, old)
		}
		first[r.delivery()] = d
	}
	lat := make([]time.Duration, 0, len(first))
	for _, d := range first {
		lat = append(lat, d)
	}
	slices.Sort(lat)
	l.Received = len(lat)
	l.P50, l.P99 = quantile(lat, 0.5), quantile(lat, 0.99)
	if len(lat) > 0 {
		l.Max = lat[len(lat)-1]
	}
	return l
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// floorSecret is the floor's signing key, in the project's secret format.
var floorSecret = "whsec_" + base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{7}, 32))

// signerFloor sends n signed POSTs of body to urls in turn from senders
// goroutines, without asynq: the signing and the HTTP alone, for reference.
func signerFloor(ctx context.Context, urls []string, body []byte, senders, n int) whThroughput {
	tr := &http.Transport{MaxIdleConnsPerHost: senders, MaxConnsPerHost: senders, DisableCompression: true}
	defer tr.CloseIdleConnections()
	hc := &http.Client{Transport: tr, Timeout: 5 * time.Second}
	var next, ok atomic.Int64
	var wg sync.WaitGroup
	deadline := time.Now().Add(30 * time.Second)
	start := time.Now()
	for range senders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil && time.Now().Before(deadline) {
				i := next.Add(1)
				if i > int64(n) {
					return
				}
				url := urls[int(i)%len(urls)]
				if code, err := signedPost(ctx, hc, url, body, "evt_floor_"+strconv.FormatInt(i, 10), false); err == nil && code == http.StatusOK {
					ok.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	wall := time.Since(start)
	t := whThroughput{Name: "signed POST loop, no asynq", Senders: senders, Expected: n, Got: int(ok.Load()), Wall: wall}
	if wall > 0 {
		t.Rate = float64(t.Got) / wall.Seconds()
	}
	return t
}

// latencyTable is the commit-to-first-attempt steps, the held one last.
func (w *webhookResults) latencyTable() table {
	t := table{head: []string{"charges/s", "for s", "charges", "deliveries", "delivered", "p50 ms", "p99 ms", "max ms", "duplicates", "attempts > 1", "charge p99 ms"}}
	steps := w.Latency
	if w.Hold != nil {
		steps = append(slices.Clone(steps), *w.Hold)
	}
	for _, l := range steps {
		t.rows = append(t.rows, []string{rate(l.Rate), strconv.FormatFloat(l.For.Seconds(), 'f', 0, 64), strconv.Itoa(l.Created),
			strconv.Itoa(l.Expected), strconv.Itoa(l.Received), msf(l.P50), msf(l.P99), msf(l.Max), strconv.Itoa(l.Duplicates), strconv.Itoa(l.Retries), msf(l.ChargeP99)})
	}
	return t
}

// throughputTable is the backlog drains and the floor runs.
func (w *webhookResults) throughputTable() table {
	t := table{head: []string{"", "processes / senders", "expected", "delivered", "first to last s", "deliveries/s", "worker µs", "pg µs", "redis µs"}}
	row := func(x whThroughput) []string {
		r := []string{x.Name, strconv.Itoa(x.Senders), strconv.Itoa(x.Expected), strconv.Itoa(x.Got),
			strconv.FormatFloat(x.Wall.Seconds(), 'f', 2, 64), rate(x.Rate), "-", "-", "-"}
		if x.CPU {
			r[6], r[7], r[8] = usf(x.Worker), usf(x.PG), usf(x.Redis)
		}
		return r
	}
	for _, d := range w.Drains {
		t.rows = append(t.rows, row(d))
	}
	for _, f := range []*whThroughput{w.Floor, w.Signer} {
		if f != nil {
			t.rows = append(t.rows, row(*f))
		}
	}
	if c := w.Create; c != nil {
		t.rows = append(t.rows, []string{"creating the backlog's charges with their deliveries (per charge; the API process in the worker column)", "16", strconv.Itoa(c.Charges), "-",
			strconv.FormatFloat(c.Wall.Seconds(), 'f', 2, 64), "-", usf(c.Worker), usf(c.PG), usf(c.Redis)})
	}
	if a := w.Auth; a != nil {
		t.rows = append(t.rows, []string{"authorizing the backlog's charges (per charge)", "1", strconv.Itoa(a.Charges), "-",
			strconv.FormatFloat(a.Wall.Seconds(), 'f', 2, 64), "-", usf(a.Worker), usf(a.PG), usf(a.Redis)})
	}
	return t
}

// targets compares the section with its targets (docs/BENCHMARKS.md).
func (w *webhookResults) targets() table {
	t := table{head: []string{"", "project", "floor", "project/floor", "target", ""}}
	var one *whThroughput
	if len(w.Drains) > 0 {
		one = &w.Drains[0]
	}
	if one != nil && w.Floor != nil {
		t.rows = append(t.rows, []string{"deliveries/s with one attempt row each, one worker (backlog of " + strconv.Itoa(one.Expected) + ")",
			rate(one.Rate), rate(w.Floor.Rate), ratio(one.Rate, w.Floor.Rate), "≥ 0.50 of the asynq floor and ≥ 5000",
			verdict(one.Rate >= 5000 && shown(one.Rate, w.Floor.Rate) >= 0.5 && one.Got == one.Expected)})
	}
	if one != nil && one.CPU {
		t.rows = append(t.rows, []string{"Postgres CPU per delivery, µs", usf(one.PG), "", "", "≤ 150", verdict(one.PG <= 150*time.Microsecond)})
	}
	if l := w.Hold; l != nil {
		t.rows = append(t.rows, []string{"commit to first attempt, p99 ms at " + rate(l.Rate) + " charges/s held " +
			strconv.FormatFloat(l.For.Seconds(), 'f', 0, 64) + " s, the worker authorizing them (" + strconv.Itoa(l.Received) + "/" +
			strconv.Itoa(l.Expected) + " delivered)", msf(l.P99), "", "", "< 250 at 1000/s for 60 s",
			verdict(l.P99 < 250*time.Millisecond && l.Received == l.Expected && l.Rate >= 1000 && l.For >= time.Minute)})
	}
	if len(w.Drains) > 1 {
		two := w.Drains[1]
		t.rows = append(t.rows, []string{"deliveries/s, two workers (against one)", rate(two.Rate), rate(one.Rate), ratio(two.Rate, one.Rate), "shown", ""})
	}
	return t
}

func (w *webhookResults) text() string {
	var b strings.Builder
	fmt.Fprintf(&b, "\nWebhooks (charge.created to %d endpoints on a receiver in the harness, bin/worker):\n", w.Endpoints)
	b.WriteString(w.targets().text())
	b.WriteString("\n  Commit to first attempt (receipt minus the event's created_at):\n")
	b.WriteString(w.latencyTable().text())
	b.WriteString("\n  Delivery throughput (CPU columns are µs per delivery):\n")
	b.WriteString(w.throughputTable().text())
	for _, n := range w.Notes {
		b.WriteString("  - " + n + "\n")
	}
	return b.String()
}

func (w *webhookResults) markdown() string {
	var b strings.Builder
	b.WriteString("\n### Webhooks\n\n")
	fmt.Fprintf(&b, "`charge.created` deliveries from `bin/worker` to %d endpoints (one port each) of a receiver inside the harness: one delivery per charge and endpoint; "+
		"event bodies of %d bytes. The floor runs one asynq task per delivery on the same Redis and signs and POSTs the same body to the same ports (see the method).\n\n", w.Endpoints, w.BodySize)
	b.WriteString(w.targets().markdown())
	b.WriteString("\nCommit to first attempt, open model, one worker also authorizing the charges (receipt time minus the event's `created_at`):\n\n")
	b.WriteString(w.latencyTable().markdown())
	b.WriteString("\nDelivery throughput (first to last receipt; CPU columns are µs per delivery over the drain, of the worker processes or the floor process):\n\n")
	b.WriteString(w.throughputTable().markdown())
	if len(w.Notes) > 0 {
		b.WriteString("\n")
		for _, n := range w.Notes {
			b.WriteString("- " + n + "\n")
		}
	}
	return b.String()
}
