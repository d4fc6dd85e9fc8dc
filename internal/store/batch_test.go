package store

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestBatcherCoalescesConcurrentCalls: calls made while a batch is in flight
// run together in the next one, each gets its own result, and an idle call
// runs at once, alone.
func TestBatcherCoalescesConcurrentCalls(t *testing.T) {
	release := make(chan struct{})
	var mu sync.Mutex
	var sizes []int
	b := newBatcher(50, 1, 0, time.Second, func(_ context.Context, reqs []int) ([]int, error) {
		mu.Lock()
		sizes = append(sizes, len(reqs))
		first := len(sizes) == 1
		mu.Unlock()
		if first {
			<-release // hold the first batch while the others queue
		}
		out := make([]int, len(reqs))
		for i, r := range reqs {
			out[i] = r * 10
		}
		return out, nil
	})
	ctx := context.Background()
	firstDone := make(chan int)
	go func() {
		v, _ := b.do(ctx, 1)
		firstDone <- v
	}()
	waitFor(t, func() bool { mu.Lock(); defer mu.Unlock(); return len(sizes) == 1 })

	var wg sync.WaitGroup
	results := make([]int, 30)
	for i := range results {
		wg.Add(1)
		go func() {
			defer wg.Done()
			v, err := b.do(ctx, i+2)
			if err != nil {
				t.Error(err)
			}
			results[i] = v
		}()
	}
	waitFor(t, func() bool { b.mu.Lock(); defer b.mu.Unlock(); return len(b.queue) == 30 })
	close(release)
	wg.Wait()
	if v := <-firstDone; v != 10 {
		t.Errorf("first call: %d, want 10", v)
	}
	for i, v := range results {
		if v != (i+2)*10 {
			t.Errorf("call %d: %d, want %d", i+2, v, (i+2)*10)
		}
	}
	if len(sizes) != 2 || sizes[0] != 1 || sizes[1] != 30 {
		t.Errorf("batch sizes %v, want [1 30]: the 30 calls made during the first batch run as one", sizes)
	}
	if v, err := b.do(ctx, 7); v != 70 || err != nil || sizes[len(sizes)-1] != 1 {
		t.Errorf("idle call: %d, %v, last batch size %d; want 70, nil, 1", v, err, sizes[len(sizes)-1])
	}
}

// TestBatcherBoundsBatchesAndSharesErrors: no batch is larger than max, at
// most parallel run at once, a failed statement fails every call in it, and
// every loop ends once the queue is empty.
func TestBatcherBoundsBatchesAndSharesErrors(t *testing.T) {
	var mu sync.Mutex
	running, most, largest := 0, 0, 0
	fail := errors.New("statement failed")
	b := newBatcher(4, 2, 0, time.Second, func(_ context.Context, reqs []int) ([]int, error) {
		mu.Lock()
		running++
		most, largest = max(most, running), max(largest, len(reqs))
		mu.Unlock()
		time.Sleep(5 * time.Millisecond)
		mu.Lock()
		running--
		mu.Unlock()
		return nil, fail
	})
	var wg sync.WaitGroup
	for i := range 40 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := b.do(context.Background(), i); !errors.Is(err, fail) {
				t.Errorf("call %d: %v, want the statement's error", i, err)
			}
		}()
	}
	wg.Wait()
	if largest > 4 || most > 2 {
		t.Errorf("largest batch %d (max 4), most in flight %d (parallel 2)", largest, most)
	}
	// A loop closes its last calls' channels before it sees the empty queue
	// and leaves, so the callers can return just before it does.
	waitFor(t, func() bool {
		b.mu.Lock()
		defer b.mu.Unlock()
		return b.inFlight == 0 && len(b.queue) == 0
	})
}

// TestBatcherCallerGivesUp: a caller whose context ends stops waiting; the
// batch still runs under its own context.
func TestBatcherCallerGivesUp(t *testing.T) {
	release := make(chan struct{})
	ran := make(chan error, 1)
	b := newBatcher(10, 1, 0, time.Second, func(ctx context.Context, reqs []int) ([]int, error) {
		<-release
		ran <- ctx.Err()
		return make([]int, len(reqs)), nil
	})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := b.do(ctx, 1); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled caller: %v, want context.Canceled", err)
	}
	close(release)
	if err := <-ran; err != nil {
		t.Errorf("the batch's own context: %v, want live", err)
	}
}

// waitFor polls cond until it holds; a safety net of 30 s, for a loaded
// machine, not a bound on how long it takes.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	for end := time.Now().Add(30 * time.Second); !cond(); {
		if time.Now().After(end) {
			t.Fatal("condition not reached in 30 s")
		}
		time.Sleep(time.Millisecond)
	}
}

// TestBatcherLingersOnlyUnderLoad: an idle batcher's call runs at once,
// without the linger; while a batch is in flight, the next batch lingers
// and the calls made meanwhile run together in it.
func TestBatcherLingersOnlyUnderLoad(t *testing.T) {
	var mu sync.Mutex
	var sizes []int
	hold := make(chan struct{})
	held := make(chan struct{})
	b := newBatcher(50, 2, time.Second, 5*time.Second, func(_ context.Context, reqs []int) ([]int, error) {
		mu.Lock()
		sizes = append(sizes, len(reqs))
		mu.Unlock()
		if reqs[0] == -1 {
			close(held)
			<-hold
		}
		return make([]int, len(reqs)), nil
	})
	// The linger, as the test sees it: told when it starts, and over when
	// the test says so once the calls it waits for are queued, however slow
	// the machine. Until then a linger is only counted.
	var lingers atomic.Int64
	var gate atomic.Pointer[chan struct{}]
	lingering := make(chan struct{}, 1)
	b.sleep = func(time.Duration) {
		lingers.Add(1)
		if g := gate.Load(); g != nil {
			lingering <- struct{}{}
			<-*g
		}
	}
	if _, err := b.do(context.Background(), 0); err != nil {
		t.Fatal(err)
	}
	if n := lingers.Load(); n != 0 {
		t.Errorf("an idle batcher's call lingered %d times, want it run at once", n)
	}
	// One batch in flight: the next lingers and gathers the calls.
	resume := make(chan struct{})
	gate.Store(&resume)
	done := make(chan struct{})
	go func() {
		defer close(done)
		if _, err := b.do(context.Background(), -1); err != nil {
			t.Error(err)
		}
	}()
	<-held
	var wg sync.WaitGroup
	for i := range 4 {
		wg.Go(func() {
			if _, err := b.do(context.Background(), i+1); err != nil {
				t.Error(err)
			}
		})
	}
	<-lingering
	waitFor(t, func() bool { b.mu.Lock(); defer b.mu.Unlock(); return len(b.queue) == 4 })
	close(resume)
	wg.Wait()
	close(hold)
	<-done
	mu.Lock()
	defer mu.Unlock()
	if len(sizes) != 3 || sizes[0] != 1 || sizes[1] != 1 || sizes[2] != 4 {
		t.Errorf("batch sizes %v, want [1 1 4]: the calls made under load run together", sizes)
	}
}
