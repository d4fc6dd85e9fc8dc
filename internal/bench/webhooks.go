package main

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
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
)

// The webhook section runs bin/worker next to bin/api, registers an endpoint
// on a receiver inside the harness (127.0.0.1, answering 200 at once) and
// measures, for charge.created deliveries:
//
//   - commit to first attempt: charges at a fixed arrival rate (open model);
//     per delivery, the receiver's clock at the request minus the event's
//     created_at, read from the body it got;
//   - delivery throughput: a burst of charges created while the worker is
//     stopped, then the worker started and the backlog timed at the receiver,
//     first to last receipt, with the worker's, Postgres's and Redis's CPU;
//   - a floor: goroutines doing only a signed POST of a body of the same size
//     to the same receiver.
//
// The floor cannot go through asynq: internal/bench may not import asynq (see
// internal/archtest) and internal/jobs exposes no way to enqueue and handle a
// task of an arbitrary type, so the floor is the plain signer loop.

// receipt is one request the receiver got.
type receipt struct {
	at      time.Time
	created time.Time // the event's created_at
	event   string
	attempt string
}

// receiver records every delivery it is sent.
type receiver struct {
	srv  *http.Server
	url  string
	mu   sync.Mutex
	got  []receipt
	body atomic.Pointer[[]byte] // the last body received, for the floor
	bad  atomic.Int64           // bodies without a readable created_at
}

func startReceiver() (*receiver, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	rc := &receiver{url: "http://" + ln.Addr().String() + "/hook"}
	rc.srv = &http.Server{ReadHeaderTimeout: 5 * time.Second, Handler: http.HandlerFunc(rc.serve)}
	go func() { _ = rc.srv.Serve(ln) }()
	return rc, nil
}

func (rc *receiver) serve(w http.ResponseWriter, r *http.Request) {
	at := time.Now()
	body, _ := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	w.WriteHeader(http.StatusOK)
	id := r.Header.Get("X-Service-Event-Id")
	if id == "" { // the floor's POSTs
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
	rc.got = append(rc.got, receipt{at: at, created: created, event: id, attempt: r.Header.Get("X-Service-Delivery-Attempt")})
	rc.mu.Unlock()
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

// waitFor waits until n distinct events created since t have arrived, or
// limit passes; it returns their receipts.
func (rc *receiver) waitFor(ctx context.Context, t time.Time, n int, limit time.Duration) []receipt {
	end := time.Now().Add(limit)
	for {
		got := rc.since(t)
		if distinct(got) >= n || time.Now().After(end) || ctx.Err() != nil {
			return got
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func distinct(rs []receipt) int {
	seen := make(map[string]bool, len(rs))
	for _, r := range rs {
		seen[r.event] = true
	}
	return len(seen)
}

// whLatency is one commit-to-first-attempt step.
type whLatency struct {
	Rate                float64
	Created, Received   int // charges answered 201; distinct events delivered
	Duplicates, Retries int // receipts beyond the first per event; receipts with attempt > 1
	ChargeP99           time.Duration
	P50, P99, Max       time.Duration
	Dropped, Errors     int
}

// whThroughput is the burst step, or a floor run.
type whThroughput struct {
	Name              string
	Senders           int
	Expected, Got     int
	Wall              time.Duration // first to last receipt
	Rate              float64       // deliveries per second over Wall
	Worker, PG, Redis time.Duration // CPU per delivery (project only)
}

// webhookResults are the webhook section's figures.
type webhookResults struct {
	Latency  []whLatency
	Burst    *whThroughput
	Floors   []whThroughput
	BodySize int
	Notes    []string
}

// bestFloor is the floor run with the highest rate.
func (w *webhookResults) bestFloor() *whThroughput {
	var best *whThroughput
	for i := range w.Floors {
		if best == nil || w.Floors[i].Rate > best.Rate {
			best = &w.Floors[i]
		}
	}
	return best
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
	rc, err := startReceiver()
	if err != nil {
		return err
	}
	defer rc.srv.Close()
	var ep struct {
		Endpoint struct {
			ID string `json:"id"`
		} `json:"webhook_endpoint"`
	}
	if err := e.request(ctx, http.MethodPost, "/v1/me/webhook_endpoints", e.apiSecret,
		map[string]any{"url": rc.url, "events": []string{"charge.created"}, "description": "bench receiver"}, http.StatusCreated, &ep); err != nil {
		return err
	}
	// The charge steps that follow measure creation without fan-out.
	defer func() {
		dctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := e.request(dctx, http.MethodDelete, "/v1/me/webhook_endpoints/"+ep.Endpoint.ID, e.apiSecret, nil, 0, nil); err != nil {
			w.Notes = append(w.Notes, "delete the bench endpoint: "+err.Error())
		}
	}()

	// Throughput: a backlog of charges made while no worker runs, drained by
	// a worker started afterwards.
	n := e.o.webhookCount
	start := time.Now()
	rec := closedLoop(ctx, e.api.client, 16, 30*time.Second, n, e.o.timeout)
	created := summarize(rec).OK
	e.logf("webhooks: %d charges created in %s for the delivery backlog", created, time.Since(start).Round(time.Millisecond))
	if err := e.startWorker(ctx); err != nil {
		return err
	}
	defer func() {
		e.worker.proc.stop(5 * time.Second)
		e.worker = nil
	}()
	before := takeSnapshot(e.worker.pid(), e.redis.pid(), e.postmaster, e.dbName)
	got := rc.waitFor(ctx, start, created, e.o.webhookWait)
	after := takeSnapshot(e.worker.pid(), e.redis.pid(), e.postmaster, e.dbName)
	b := throughputOf("project (bin/worker)", 0, created, got)
	if b.Got > 0 {
		c := cpuBetween(before, after, b.Got)
		b.Worker, b.PG, b.Redis = c.Server, c.Postgres, c.Redis
	}
	w.Burst = &b
	e.logf("webhooks: backlog of %d: %d delivered at %.0f/s, worker CPU %s per delivery", created, b.Got, b.Rate, us(b.Worker))
	if p := rc.body.Load(); p != nil {
		w.BodySize = len(*p)
	}
	e.pauseWorker(ctx)

	// Commit to first attempt, open model.
	for _, r := range e.o.webhookRates {
		if ctx.Err() != nil {
			break
		}
		t0 := time.Now()
		rec := openModel(ctx, e.api.client, r, e.o.webhookStep, e.o.maxInflight, e.o.timeout)
		s := summarize(rec)
		got := rc.waitFor(ctx, t0, s.OK, min(e.o.webhookWait, 20*time.Second))
		l := latencyOf(r, s, got)
		w.Latency = append(w.Latency, l)
		e.logf("webhooks: %4.0f charges/s: %d/%d delivered, commit to first attempt p50 %s p99 %s max %s",
			r, l.Received, l.Created, ms(l.P50), ms(l.P99), ms(l.Max))
		e.pauseWorker(ctx)
	}

	// The floor: signed POSTs of a body of the same size, same receiver.
	body := bytes.Repeat([]byte("x"), max(w.BodySize, 1024))
	if p := rc.body.Load(); p != nil {
		body = *p
	}
	for _, senders := range e.o.floorSenders {
		if ctx.Err() != nil {
			break
		}
		f := signerFloor(ctx, rc.url, body, senders, n)
		w.Floors = append(w.Floors, f)
		e.logf("webhooks: floor, %d senders: %d signed POSTs at %.0f/s", senders, f.Got, f.Rate)
	}
	if bad := rc.bad.Load(); bad > 0 {
		w.Notes = append(w.Notes, fmt.Sprintf("%d deliveries had no readable created_at", bad))
	}
	return nil
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
	addr, err := freeAddr()
	if err != nil {
		return err
	}
	env := append(e.apiEnv("127.0.0.1:0"), "METRICS_ADDR="+addr) // the later METRICS_ADDR wins
	e.worker, err = e.startServer(ctx, "worker", e.o.worker, nil, env, addr)
	return err
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

func latencyOf(rate float64, s summary, got []receipt) whLatency {
	l := whLatency{Rate: rate, Created: s.OK, ChargeP99: s.P99, Dropped: s.Dropped, Errors: s.Errors}
	first := map[string]time.Duration{}
	for _, r := range got {
		if r.attempt != "1" {
			l.Retries++
		}
		d := r.at.Sub(r.created)
		if old, ok := first[r.event]; ok {
			l.Duplicates++
			d = min(d, old)
		}
		first[r.event] = d
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

// signerFloor sends n signed POSTs of body to url from senders goroutines:
// per POST, the two HMAC-SHA256 signatures a project delivery carries
// (X-Service-Signature over the body; the Standard Webhooks signature over
// id.timestamp.body), over net/http with kept-alive connections.
func signerFloor(ctx context.Context, url string, body []byte, senders, n int) whThroughput {
	tr := &http.Transport{MaxIdleConnsPerHost: senders, MaxConnsPerHost: senders, DisableCompression: true}
	defer tr.CloseIdleConnections()
	hc := &http.Client{Transport: tr, Timeout: 5 * time.Second}
	key, _ := base64.StdEncoding.DecodeString(floorSecret[len("whsec_"):])
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
				id := "evt_floor_" + strconv.FormatInt(i, 10)
				ts := strconv.FormatInt(time.Now().Unix(), 10)
				m := hmac.New(sha256.New, []byte(floorSecret))
				m.Write(body)
				svc := "sha256=" + hex.EncodeToString(m.Sum(nil))
				m = hmac.New(sha256.New, key)
				m.Write([]byte(id + "." + ts + "."))
				m.Write(body)
				std := "v1," + base64.StdEncoding.EncodeToString(m.Sum(nil))
				req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
				if err != nil {
					continue
				}
				req.Header.Set("Content-Type", "application/json")
				req.Header.Set("X-Service-Signature", svc)
				req.Header.Set("webhook-id", id)
				req.Header.Set("webhook-timestamp", ts)
				req.Header.Set("webhook-signature", std)
				resp, err := hc.Do(req)
				if err != nil {
					continue
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode == http.StatusOK {
					ok.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	wall := time.Since(start)
	t := whThroughput{Name: "floor (signed POST loop)", Senders: senders, Expected: n, Got: int(ok.Load()), Wall: wall}
	if wall > 0 {
		t.Rate = float64(t.Got) / wall.Seconds()
	}
	return t
}

// request calls the API with the bench key and decodes the answer into out
// (when not nil); want 0 accepts any 2xx.
func (e *environment) request(ctx context.Context, method, path, token string, body any, want int, out any) error {
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, "http://"+e.api.addr+path, rd)
	if err != nil {
		return err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	rb, _ := io.ReadAll(resp.Body)
	if (want != 0 && resp.StatusCode != want) || (want == 0 && resp.StatusCode/100 != 2) {
		return fmt.Errorf("%s %s: %d %s", method, path, resp.StatusCode, rb)
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(rb, out); err != nil {
		return errors.New(method + " " + path + ": unreadable answer")
	}
	return nil
}

// latencyTable is the commit-to-first-attempt steps.
func (w *webhookResults) latencyTable() table {
	t := table{head: []string{"charges/s", "created", "delivered", "p50 ms", "p99 ms", "max ms", "duplicates", "attempts > 1", "charge p99 ms"}}
	for _, l := range w.Latency {
		t.rows = append(t.rows, []string{rate(l.Rate), strconv.Itoa(l.Created), strconv.Itoa(l.Received), msf(l.P50), msf(l.P99), msf(l.Max),
			strconv.Itoa(l.Duplicates), strconv.Itoa(l.Retries), msf(l.ChargeP99)})
	}
	return t
}

// throughputTable is the backlog step and the floor runs.
func (w *webhookResults) throughputTable() table {
	t := table{head: []string{"", "senders", "expected", "delivered", "first to last s", "deliveries/s", "worker µs", "pg µs", "redis µs"}}
	row := func(x whThroughput, cpu bool) []string {
		senders := "-"
		if x.Senders > 0 {
			senders = strconv.Itoa(x.Senders)
		}
		r := []string{x.Name, senders, strconv.Itoa(x.Expected), strconv.Itoa(x.Got),
			strconv.FormatFloat(x.Wall.Seconds(), 'f', 2, 64), rate(x.Rate), "-", "-", "-"}
		if cpu {
			r[6], r[7], r[8] = usf(x.Worker), usf(x.PG), usf(x.Redis)
		}
		return r
	}
	if w.Burst != nil {
		t.rows = append(t.rows, row(*w.Burst, true))
	}
	for _, f := range w.Floors {
		t.rows = append(t.rows, row(f, false))
	}
	return t
}

// targets compares the section with PERFORMANCE.md.
func (w *webhookResults) targets() table {
	t := table{head: []string{"", "project", "floor", "project/floor", "target", ""}}
	if n := len(w.Latency); n > 0 {
		l := w.Latency[n-1]
		t.rows = append(t.rows, []string{"commit to first attempt, p99 ms at " + rate(l.Rate) + " charges/s (" +
			strconv.Itoa(l.Received) + "/" + strconv.Itoa(l.Created) + " delivered)", msf(l.P99), "", "",
			"< 250 at 1000/s", verdict(l.P99 < 250*time.Millisecond && l.Received == l.Created)})
	}
	if b, f := w.Burst, w.bestFloor(); b != nil && f != nil {
		t.rows = append(t.rows, []string{"deliveries/s with one attempt row each (backlog of " + strconv.Itoa(b.Expected) + ")",
			rate(b.Rate), rate(f.Rate), ratio(b.Rate, f.Rate), "≥ 5000 and ≥ 0.50",
			verdict(b.Rate >= 5000 && shown(b.Rate, f.Rate) >= 0.5 && b.Got == b.Expected)})
	}
	return t
}

func (w *webhookResults) text() string {
	var b strings.Builder
	b.WriteString("\nWebhooks (charge.created to a receiver in the harness, bin/worker):\n")
	b.WriteString(w.targets().text("  "))
	b.WriteString("\n  Commit to first attempt (receipt minus the event's created_at):\n")
	b.WriteString(w.latencyTable().text("  "))
	b.WriteString("\n  Delivery throughput (CPU columns are µs per delivery):\n")
	b.WriteString(w.throughputTable().text("  "))
	for _, n := range w.Notes {
		b.WriteString("  - " + n + "\n")
	}
	return b.String()
}

func (w *webhookResults) markdown() string {
	var b strings.Builder
	b.WriteString("\n### Webhooks\n\n")
	fmt.Fprintf(&b, "`charge.created` deliveries from `bin/worker` to a receiver inside the harness; event bodies of %d bytes. "+
		"The floor signs (two HMAC-SHA256) and POSTs the same body to the same receiver, without asynq (see the method).\n\n", w.BodySize)
	b.WriteString(w.targets().markdown())
	b.WriteString("\nCommit to first attempt, open model (receipt time minus the event's `created_at`):\n\n")
	b.WriteString(w.latencyTable().markdown())
	b.WriteString("\nDelivery throughput (first to last receipt; CPU columns are µs per delivery, over the whole drain):\n\n")
	b.WriteString(w.throughputTable().markdown())
	if len(w.Notes) > 0 {
		b.WriteString("\n")
		for _, n := range w.Notes {
			b.WriteString("- " + n + "\n")
		}
	}
	return b.String()
}
