package outbox

import (
	"context"
	"sync"
	"time"
)

// Relay enqueues tasks off the request path: Enqueue hands the task to one of
// a few goroutines and returns at once, so the API answers without waiting
// for the queue. That is safe because of the outbox: the task's row committed
// before Enqueue is called, and whatever the relay does not hand to the queue
// (a failure, a full relay at shutdown, a killed process) the sweeper
// enqueues once the row is OUTBOX_SWEEP_AFTER old. When every goroutine is
// busy and the buffer is full, Enqueue enqueues inline, as if there were no
// relay, so a slow queue slows the callers rather than growing memory.
type Relay struct {
	next    Enqueuer
	onErr   func(error)
	timeout time.Duration

	mu      sync.RWMutex
	stopped bool
	tasks   chan relayed
	done    sync.WaitGroup
}

type relayed struct {
	ctx  context.Context
	task Task
}

// NewRelay starts workers goroutines that enqueue on next, with a buffer of
// depth tasks. onErr, when not nil, hears of every task the relay could not
// enqueue (the sweeper will); timeout bounds each enqueue.
func NewRelay(next Enqueuer, workers, depth int, timeout time.Duration, onErr func(error)) *Relay {
	r := &Relay{next: next, onErr: onErr, timeout: timeout, tasks: make(chan relayed, depth)}
	for range workers {
		r.done.Add(1)
		go r.run()
	}
	return r
}

// Enqueue hands t to the relay. Its error is the inline enqueue's when the
// relay is full or closed, else nil: a later failure goes to onErr. ctx's
// values (the trace) go with the task; its cancellation does not, since the
// request that called may be answered before the task is enqueued.
func (r *Relay) Enqueue(ctx context.Context, t Task) error {
	r.mu.RLock()
	if !r.stopped {
		select {
		case r.tasks <- relayed{ctx: context.WithoutCancel(ctx), task: t}:
			r.mu.RUnlock()
			return nil
		default:
		}
	}
	r.mu.RUnlock()
	return r.next.Enqueue(ctx, t)
}

func (r *Relay) run() {
	defer r.done.Done()
	for it := range r.tasks {
		ctx, cancel := context.WithTimeout(it.ctx, r.timeout)
		err := r.next.Enqueue(ctx, it.task)
		cancel()
		if err != nil && r.onErr != nil {
			r.onErr(err)
		}
	}
}

// Waiting is the number of tasks in the buffer.
func (r *Relay) Waiting() int { return len(r.tasks) }

// Close stops taking tasks (later ones are enqueued inline) and waits until
// the buffered ones are enqueued or ctx is done; what is left then is the
// sweeper's.
func (r *Relay) Close(ctx context.Context) error {
	r.mu.Lock()
	if !r.stopped {
		r.stopped = true
		close(r.tasks)
	}
	r.mu.Unlock()
	finished := make(chan struct{})
	go func() {
		r.done.Wait()
		close(finished)
	}()
	select {
	case <-finished:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
