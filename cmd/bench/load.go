package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// client sends POST /v1/charges over kept-alive HTTP/1.1 connections. It is
// hand-written so the load generator, which shares the two cores with the
// servers it measures, spends a few microseconds per request instead of the
// 20-30 of net/http's client. Each request has a unique Idempotency-Key and
// order id; the bodies are otherwise the example charge of api/openapi.yaml.
type client struct {
	addr    string
	head    []byte // request line and fixed headers, up to "Idempotency-Key: "
	keyBase string // Idempotency-Key prefix, unique per run and target
	seq     *atomic.Int64

	mu   sync.Mutex
	idle []*conn
}

func newClient(addr, authorization, keyBase string, seq *atomic.Int64) *client {
	head := "POST /v1/charges HTTP/1.1\r\nHost: " + addr + "\r\nAuthorization: " + authorization +
		"\r\nContent-Type: application/json\r\nAccept: application/json\r\nIdempotency-Key: "
	return &client{addr: addr, head: []byte(head), keyBase: keyBase, seq: seq}
}

// chargeBody is the body of one charge: the 4242 test card, captured, with
// metadata; expYear keeps the card valid whatever the date.
func chargeBody(dst []byte, orderID int64) []byte {
	dst = append(dst, `{"amount":2000,"currency":"usd","payment_method":"card","card":{"number":"4242424242424242","exp_month":12,"exp_year":`...)
	dst = strconv.AppendInt(dst, int64(time.Now().Year()+3), 10)
	dst = append(dst, `,"cvc":"123"},"capture":true,"description":"Order `...)
	dst = strconv.AppendInt(dst, orderID, 10)
	dst = append(dst, `","metadata":{"order_id":"`...)
	dst = strconv.AppendInt(dst, orderID, 10)
	return append(dst, `","customer":"cus_bench"}}`...)
}

type conn struct {
	nc     net.Conn
	br     *bufio.Reader
	req    []byte
	body   []byte
	reused bool
}

// get returns an idle connection, or a new one when there is none or fresh
// is set.
func (c *client) get(fresh bool) (*conn, error) {
	c.mu.Lock()
	if n := len(c.idle); n > 0 && !fresh {
		cn := c.idle[n-1]
		c.idle = c.idle[:n-1]
		c.mu.Unlock()
		cn.reused = true
		return cn, nil
	}
	c.mu.Unlock()
	nc, err := net.DialTimeout("tcp", c.addr, 2*time.Second)
	if err != nil {
		return nil, err
	}
	if tc, ok := nc.(*net.TCPConn); ok {
		_ = tc.SetNoDelay(true)
	}
	return &conn{nc: nc, br: bufio.NewReaderSize(nc, 16<<10), req: make([]byte, 0, 1024)}, nil
}

func (c *client) put(cn *conn) {
	c.mu.Lock()
	c.idle = append(c.idle, cn)
	c.mu.Unlock()
}

// closeIdle closes every idle connection.
func (c *client) closeIdle() {
	c.mu.Lock()
	idle := c.idle
	c.idle = nil
	c.mu.Unlock()
	for _, cn := range idle {
		cn.nc.Close()
	}
}

// outcome is the result of one request.
type outcome struct {
	status int    // 0 when no response arrived
	err    error  // transport error or a malformed 201
	sample string // the start of a non-201 body, for the report
}

var errBadCreated = errors.New("201 without a created charge in the body")

// do sends one charge and reads the answer, before deadline. A kept-alive
// connection the server closed while idle is retried once on a newly dialled
// one, not on the next idle one, which after a long pause may be closed too
// (the Idempotency-Key makes the retry safe).
func (c *client) do(deadline time.Time, wantSample bool) outcome {
	seq := c.seq.Add(1)
	for attempt := 0; ; attempt++ {
		cn, err := c.get(attempt > 0)
		if err != nil {
			return outcome{err: err}
		}
		o, keep := c.roundTrip(cn, seq, deadline, wantSample)
		if keep {
			c.put(cn)
		} else {
			cn.nc.Close()
		}
		if o.status == 0 && cn.reused && attempt == 0 && time.Now().Before(deadline) {
			continue
		}
		return o
	}
}

func (c *client) roundTrip(cn *conn, seq int64, deadline time.Time, wantSample bool) (outcome, bool) {
	_ = cn.nc.SetDeadline(deadline)
	body := chargeBody(cn.body[:0], seq)
	cn.body = body
	r := append(cn.req[:0], c.head...)
	r = append(r, c.keyBase...)
	r = strconv.AppendInt(r, seq, 10)
	r = append(r, "\r\nContent-Length: "...)
	r = strconv.AppendInt(r, int64(len(body)), 10)
	r = append(r, "\r\n\r\n"...)
	r = append(r, body...)
	cn.req = r
	if _, err := cn.nc.Write(r); err != nil {
		return outcome{err: err}, false
	}
	status, keep, resp, err := readResponse(cn.br, cn.body[:0])
	cn.body = resp[:0]
	if err != nil {
		return outcome{err: err}, false
	}
	o := outcome{status: status}
	switch {
	case status == 201 && !bytes.Contains(resp, []byte(`"status":"created"`)):
		o.err = errBadCreated
	case status != 201 && wantSample:
		o.sample = string(resp[:min(len(resp), 240)])
	}
	return o, keep
}

var errMalformed = errors.New("malformed HTTP response")

// readResponse reads one HTTP/1.x response, its body into buf. keep reports
// whether the connection can carry another request.
func readResponse(br *bufio.Reader, buf []byte) (status int, keep bool, body []byte, err error) {
	line, err := br.ReadSlice('\n')
	if err != nil {
		return 0, false, buf, err
	}
	if len(line) < 13 || !bytes.HasPrefix(line, []byte("HTTP/1.")) || line[12] != ' ' && line[12] != '\r' {
		return 0, false, buf, errMalformed
	}
	status, err = strconv.Atoi(string(line[9:12]))
	if err != nil {
		return 0, false, buf, errMalformed
	}
	keep = line[7] == '1'
	length, chunked := -1, false
	for {
		line, err = br.ReadSlice('\n')
		if err != nil {
			return 0, false, buf, err
		}
		if len(bytes.TrimRight(line, "\r\n")) == 0 {
			break
		}
		name, value, ok := bytes.Cut(line, []byte(":"))
		if !ok {
			return 0, false, buf, errMalformed
		}
		value = bytes.TrimSpace(value)
		switch {
		case bytes.EqualFold(name, []byte("Content-Length")):
			if length, err = strconv.Atoi(string(value)); err != nil || length < 0 {
				return 0, false, buf, errMalformed
			}
		case bytes.EqualFold(name, []byte("Transfer-Encoding")):
			chunked = bytes.Contains(bytes.ToLower(value), []byte("chunked"))
		case bytes.EqualFold(name, []byte("Connection")):
			if bytes.EqualFold(value, []byte("close")) {
				keep = false
			}
		}
	}
	switch {
	case chunked:
		body, err = readChunked(br, buf)
	case length >= 0:
		body = slices.Grow(buf, length)[:length]
		_, err = io.ReadFull(br, body)
	default: // the body runs to the end of the connection
		var b bytes.Buffer
		_, err = b.ReadFrom(br)
		body, keep = append(buf, b.Bytes()...), false
	}
	if err != nil {
		return 0, false, buf, err
	}
	return status, keep, body, nil
}

func readChunked(br *bufio.Reader, buf []byte) ([]byte, error) {
	for {
		line, err := br.ReadSlice('\n')
		if err != nil {
			return buf, err
		}
		sz, _, _ := bytes.Cut(bytes.TrimSpace(line), []byte(";"))
		n, err := strconv.ParseInt(string(sz), 16, 32)
		if err != nil || n < 0 {
			return buf, errMalformed
		}
		if n == 0 {
			for { // trailers, then the empty line
				line, err = br.ReadSlice('\n')
				if err != nil {
					return buf, err
				}
				if len(bytes.TrimRight(line, "\r\n")) == 0 {
					return buf, nil
				}
			}
		}
		start := len(buf)
		buf = slices.Grow(buf, int(n))[:start+int(n)]
		if _, err := io.ReadFull(br, buf[start:]); err != nil {
			return buf, err
		}
		if _, err := br.Discard(2); err != nil {
			return buf, err
		}
	}
}

// recording holds one step's per-request results, indexed by request.
type recording struct {
	latency   []time.Duration // from the scheduled (open) or actual (closed) send to the answer
	lag       []time.Duration // open model: how late the generator dispatched each request
	status    []int16         // statusDropped, statusFailed, or the HTTP status
	samples   []string        // a few error bodies or transport errors
	sampleMu  sync.Mutex
	start     time.Time
	finish    time.Time // the last answer
	scheduled int
}

const (
	statusNone    = 0
	statusDropped = -1
	statusFailed  = -2
)

func (r *recording) note(o outcome) {
	r.sampleMu.Lock()
	defer r.sampleMu.Unlock()
	if len(r.samples) >= 3 {
		return
	}
	switch {
	case o.err != nil:
		r.samples = append(r.samples, o.err.Error())
	case o.sample != "":
		r.samples = append(r.samples, fmt.Sprintf("%d %s", o.status, o.sample))
	}
}

// classify maps an outcome to its status slot, noting a sample of failures.
func (r *recording) classify(o outcome) int16 {
	if o.err != nil || o.status != 201 {
		r.note(o)
	}
	if o.status == 0 || o.err != nil { // no answer, or a 201 without a created charge
		return statusFailed
	}
	return int16(o.status)
}

func (r *recording) record(i int, o outcome, sent time.Time) {
	r.latency[i] = time.Since(sent)
	r.status[i] = r.classify(o)
}

// openModel sends rate requests per second for dur on a fixed timetable
// (constant arrival rate). Request i is due at start + i/rate whatever
// happened to the earlier ones, and its latency runs from that due time, so a
// server that stalls is charged for the whole queue it built (no coordinated
// omission). When maxInflight requests are outstanding the due request is
// dropped and counted, as k6 counts dropped iterations.
func openModel(ctx context.Context, c *client, rate float64, dur time.Duration, maxInflight int, timeout time.Duration) *recording {
	return openModelDo(ctx, rate, dur, maxInflight, func(_ int, due time.Time) outcome { return c.do(due.Add(timeout), true) })
}

// openModelDo is openModel for any request: do sends request i, due at due,
// and returns its outcome (a 201 counts as ok).
func openModelDo(ctx context.Context, rate float64, dur time.Duration, maxInflight int, do func(i int, due time.Time) outcome) *recording {
	n := int(math.Round(rate * dur.Seconds()))
	rec := &recording{latency: make([]time.Duration, n), status: make([]int16, n), lag: make([]time.Duration, 0, n), scheduled: n}
	var inflight atomic.Int64
	var wg sync.WaitGroup
	dispatched := make(chan struct{})
	go func() {
		// A locked thread sleeping in nanosleep(2) keeps the timetable to
		// tens of microseconds (see preciseSleep). The thread is handed back,
		// at its old priority, rather than left to exit with the goroutine:
		// a child process started from it would get its Pdeathsig.
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		defer boostThread()()
		defer close(dispatched)
		rec.start = time.Now().Add(2 * time.Millisecond)
		for i := range n {
			due := rec.start.Add(time.Duration(float64(i) * float64(time.Second) / rate))
			if d := time.Until(due); d > 0 {
				preciseSleep(d)
			}
			if ctx.Err() != nil {
				return
			}
			rec.lag = append(rec.lag, max(0, time.Since(due)))
			if inflight.Load() >= int64(maxInflight) {
				rec.status[i] = statusDropped
				continue
			}
			inflight.Add(1)
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer inflight.Add(-1)
				rec.record(i, do(i, due), due)
			}()
		}
	}()
	<-dispatched
	wg.Wait()
	rec.finish = time.Now()
	return rec
}

// closedLoop runs workers that each send the next request as soon as the last
// one is answered, for dur or until limit requests; its throughput is the
// peak, its latencies are not comparable with the open model's.
func closedLoop(ctx context.Context, c *client, workers int, dur time.Duration, limit int, timeout time.Duration) *recording {
	type result struct {
		latency time.Duration
		status  int16
	}
	per := make([][]result, workers)
	rec := &recording{}
	var count atomic.Int64
	var wg sync.WaitGroup
	rec.start = time.Now()
	end := rec.start.Add(dur)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil && time.Now().Before(end) && count.Add(1) <= int64(limit) {
				sent := time.Now()
				o := c.do(sent.Add(timeout), true)
				per[w] = append(per[w], result{time.Since(sent), rec.classify(o)})
			}
		}()
	}
	wg.Wait()
	rec.finish = time.Now()
	for _, rs := range per {
		for _, r := range rs {
			rec.latency = append(rec.latency, r.latency)
			rec.status = append(rec.status, r.status)
		}
	}
	rec.scheduled = len(rec.status)
	return rec
}

// summary is what a step reports of its recording.
type summary struct {
	Scheduled, Completed, OK, Errors, Dropped int
	ServerErrors                              int     // 5xx answers
	Achieved                                  float64 // 201s per second of the step
	P50, P99, P999, Max                       time.Duration
	LagP99                                    time.Duration // open model: the generator's own dispatch delay
	Samples                                   []string
}

func summarize(r *recording) summary {
	s := summary{Scheduled: r.scheduled, Samples: r.samples}
	lat := make([]time.Duration, 0, len(r.latency))
	for i, st := range r.status {
		switch {
		case st == statusDropped:
			s.Dropped++
			continue
		case st == statusNone: // never sent: the run was interrupted
			continue
		case st == 201:
			s.OK++
		default:
			s.Errors++
			if st >= 500 {
				s.ServerErrors++
			}
		}
		s.Completed++
		lat = append(lat, r.latency[i])
	}
	if wall := r.finish.Sub(r.start).Seconds(); wall > 0 {
		s.Achieved = float64(s.OK) / wall
	}
	slices.Sort(lat)
	slices.Sort(r.lag)
	s.LagP99 = quantile(r.lag, 0.99)
	s.P50, s.P99, s.P999 = quantile(lat, 0.50), quantile(lat, 0.99), quantile(lat, 0.999)
	if len(lat) > 0 {
		s.Max = lat[len(lat)-1]
	}
	return s
}

// quantile is the nearest-rank quantile of sorted values.
func quantile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(math.Ceil(q*float64(len(sorted)))) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}
