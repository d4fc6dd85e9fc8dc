package store

import (
	"context"
	"sync"
	"time"
)

// batcher runs the calls made at the same time as one database statement.
// A call joins the queue; while fewer than parallel batches are in flight, a
// new one starts and takes every call queued (up to max); while it runs, the
// calls that arrive queue for the next. So each round trip, commit and plan
// serves as many calls as arrived meanwhile: the busier the worker, the
// larger the batches. A batch lingers for more calls only when another is
// in flight already, that is when there is a queue to gather: an idle
// worker's call runs at once. On a 2-core machine a statement for one
// delivery costs Postgres about 4 times as much CPU per delivery as one for
// 16 (BenchmarkDeliveryStatements), so under load a few milliseconds of
// linger buy most of that.
//
// The statement runs under its own context with a timeout, not a caller's: a
// caller that gives up stops waiting, and its call may still be applied, as
// with any statement whose answer is lost.
type batcher[Req, Res any] struct {
	run      func(ctx context.Context, reqs []Req) ([]Res, error)
	max      int
	parallel int
	linger   time.Duration
	timeout  time.Duration
	sleep    func(time.Duration) // time.Sleep; a test's stands in for the linger

	mu       sync.Mutex
	queue    []*batchCall[Req, Res]
	inFlight int
	observe  func(size int)
}

type batchCall[Req, Res any] struct {
	req  Req
	res  Res
	err  error
	done chan struct{}
}

func newBatcher[Req, Res any](max, parallel int, linger, timeout time.Duration, run func(ctx context.Context, reqs []Req) ([]Res, error)) *batcher[Req, Res] {
	return &batcher[Req, Res]{run: run, max: max, parallel: parallel, linger: linger, timeout: timeout, sleep: time.Sleep}
}

func (b *batcher[Req, Res]) setObserver(f func(size int)) {
	b.mu.Lock()
	b.observe = f
	b.mu.Unlock()
}

// do queues req and waits for its result (or for ctx).
func (b *batcher[Req, Res]) do(ctx context.Context, req Req) (Res, error) {
	c := &batchCall[Req, Res]{req: req, done: make(chan struct{})}
	b.mu.Lock()
	b.queue = append(b.queue, c)
	if b.inFlight < b.parallel {
		b.inFlight++
		go b.loop(b.inFlight > 1)
	}
	b.mu.Unlock()
	select {
	case <-c.done:
		return c.res, c.err
	case <-ctx.Done():
		var zero Res
		return zero, ctx.Err()
	}
}

// loop runs batches until the queue is empty; with linger (another batch
// is in flight) the first lingers for more calls unless max are queued
// already.
func (b *batcher[Req, Res]) loop(linger bool) {
	if linger && b.linger > 0 {
		b.mu.Lock()
		full := len(b.queue) >= b.max
		b.mu.Unlock()
		if !full {
			b.sleep(b.linger)
		}
	}
	for {
		b.mu.Lock()
		n := min(len(b.queue), b.max)
		if n == 0 {
			b.inFlight--
			b.mu.Unlock()
			return
		}
		calls := make([]*batchCall[Req, Res], n)
		copy(calls, b.queue)
		b.queue = b.queue[n:]
		if len(b.queue) == 0 {
			b.queue = nil // let the backing array go
		}
		observe := b.observe
		b.mu.Unlock()
		if observe != nil {
			observe(n)
		}
		b.runBatch(calls)
	}
}

func (b *batcher[Req, Res]) runBatch(calls []*batchCall[Req, Res]) {
	reqs := make([]Req, len(calls))
	for i, c := range calls {
		reqs[i] = c.req
	}
	ctx, cancel := context.WithTimeout(context.Background(), b.timeout)
	res, err := b.run(ctx, reqs)
	cancel()
	for i, c := range calls {
		if err != nil {
			c.err = err
		} else {
			c.res = res[i]
		}
		close(c.done)
	}
}
