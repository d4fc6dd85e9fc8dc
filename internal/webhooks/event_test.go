package webhooks_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/gatehouse-pay/gatehouse/internal/outbox"
	"github.com/gatehouse-pay/gatehouse/internal/webhooks"
)

// enqueued records what the deliverer enqueues.
type enqueued struct {
	mu    sync.Mutex
	tasks []outbox.Task
	in    []time.Duration
}

func (e *enqueued) enqueue(_ context.Context, t outbox.Task, in time.Duration) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.tasks, e.in = append(e.tasks, t), append(e.in, in)
	return nil
}

func (e *enqueued) all() ([]outbox.Task, []time.Duration) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]outbox.Task(nil), e.tasks...), append([]time.Duration(nil), e.in...)
}

// eventRig is a rig whose delivery waits for its event's task: the event's
// outbox row, none of its own.
func eventRig(t *testing.T) (*rig, *enqueued) {
	r := newRig(t, defaultSchedule)
	q := &enqueued{}
	r.d.WithQueue(q.enqueue)
	r.store.tasks = map[string]bool{webhooks.EventTask(eventID).ID(): true}
	return r, q
}

// fresh makes the rig's delivery a new one of the event, waiting for its
// first attempt.
func (r *rig) fresh() {
	r.store.mu.Lock()
	defer r.store.mu.Unlock()
	created := r.clock.now()
	r.store.delivery.Status, r.store.delivery.Attempts, r.store.delivery.ChainAttempts = webhooks.StatusPending, 0, 0
	r.store.delivery.NextAttemptAt, r.store.delivery.Log = &created, nil
	r.store.tasks = map[string]bool{webhooks.EventTask(eventID).ID(): true}
}

// TestEventTaskProbesThenHandsOffWhenNotFast: the event's task makes the
// first attempt to an endpoint this process has not heard from itself, as
// the endpoint's probe, and goes on making them while the endpoint answers
// fast (under 100 ms). Once its answers take longer, the event's task hands
// the delivery off to a task of its own, on the endpoint's queue, written
// with the event task's deletion (it could hang and hold the task). Run
// again (a crash after the attempt), it attempts nothing.
func TestEventTaskProbesThenHandsOffWhenNotFast(t *testing.T) {
	r, q := eventRig(t)
	var reasons []string
	r.d.WithHandOffs(func(reason string) { reasons = append(reasons, reason) })
	ctx := context.Background()
	own := webhooks.Task(deliveryID).ID()

	// The probe: 20 ms, 200.
	if err := r.d.DeliverEvent(ctx, eventID); err != nil {
		t.Fatal(err)
	}
	del, tasks, _ := r.store.state()
	if n := len(r.sender.posts()); n != 1 || del.Status != webhooks.StatusSucceeded || del.Attempts != 1 {
		t.Fatalf("%d attempts, delivery %s with %d attempts; want the event's task's probe, succeeded", n, del.Status, del.Attempts)
	}
	if len(tasks) != 0 || len(reasons) != 0 {
		t.Fatalf("outbox %v and hand-offs %v after the probe, want none", tasks, reasons)
	}
	// The event's one delivery: its attempt's record deleted the event's
	// task, and no FinishEvent followed.
	if _, _, records := r.store.state(); len(records) != 1 || records[0].DoneTask != webhooks.EventTask(eventID).ID() || r.store.finishes != 0 {
		t.Fatalf("records %+v, %d FinishEvent calls; want the event's task done with the attempt, none", records, r.store.finishes)
	}
	// Run again after a crash: nothing is attempted twice.
	r.store.mu.Lock()
	r.store.tasks[webhooks.EventTask(eventID).ID()] = true
	r.store.mu.Unlock()
	if err := r.d.DeliverEvent(ctx, eventID); err != nil {
		t.Fatal(err)
	}
	if n := len(r.sender.posts()); n != 1 {
		t.Fatalf("the event's task run again made %d attempts in all, want 1", n)
	}
	if _, tasks, _ := r.store.state(); len(tasks) != 0 {
		t.Fatalf("outbox %v after the run again, want empty", tasks)
	}

	// The endpoint slows to 150 ms: the event's task attempts while its
	// recent answers average under 100 ms, then hands off.
	r.sender.answer = answer(200, 150*time.Millisecond)
	attempts := 1
	for range 10 {
		r.fresh()
		if err := r.d.DeliverEvent(ctx, eventID); err != nil {
			t.Fatal(err)
		}
		if len(reasons) > 0 {
			break
		}
		attempts++
		if n := len(r.sender.posts()); n != attempts {
			t.Fatalf("%d attempts, want %d", n, attempts)
		}
	}
	if len(reasons) != 1 || reasons[0] != webhooks.HandOffEndpointNotFast {
		t.Fatalf("hand-offs reported %v, want [%s]", reasons, webhooks.HandOffEndpointNotFast)
	}
	if attempts < 3 {
		t.Fatalf("handed off after %d attempts, want the moving average to take a few slow answers", attempts)
	}
	_, tasks, _ = r.store.state()
	if !tasks[own] || tasks[webhooks.EventTask(eventID).ID()] {
		t.Fatalf("after the hand-off the outbox holds %v, want the delivery's own task and not the event's", tasks)
	}
	if r.store.finishes != 2 { // the run again (nothing to attempt) and the hand-off
		t.Fatalf("%d FinishEvent calls, want 2", r.store.finishes)
	}
	got, in := q.all()
	if len(got) != 1 || got[0].ID() != own || got[0].Key != endpointID || in[0] != 0 {
		t.Fatalf("enqueued %v in %v, want the delivery's own task on its endpoint's queue, at once", got, in)
	}
	// Its own task makes the attempt.
	if err := r.d.Deliver(ctx, deliveryID); err != nil {
		t.Fatal(err)
	}
	if n := len(r.sender.posts()); n != attempts+1 {
		t.Fatalf("%d attempts after the handed-off task ran, want %d", n, attempts+1)
	}
}

// TestEventTaskRetryIsATaskOfTheDelivery: a failed first attempt made by
// the event's task writes the delivery's own task with the attempt and
// enqueues it for the schedule's next delay; that task carries the retry.
func TestEventTaskRetryIsATaskOfTheDelivery(t *testing.T) {
	r, q := eventRig(t)
	ctx := context.Background()
	// Known fast first: one attempt through the delivery's own task.
	r.store.tasks[webhooks.Task(deliveryID).ID()] = true
	if err := r.d.Deliver(ctx, deliveryID); err != nil {
		t.Fatal(err)
	}
	r.fresh()
	r.sender.answer = answer(500, 20*time.Millisecond)
	if err := r.d.DeliverEvent(ctx, eventID); err != nil {
		t.Fatal(err)
	}
	del, tasks, records := r.store.state()
	if del.Status != webhooks.StatusPending || del.Attempts != 1 || del.NextAttemptAt == nil {
		t.Fatalf("delivery %s, %d attempts, next %v; want pending after one failed attempt", del.Status, del.Attempts, del.NextAttemptAt)
	}
	if last := records[len(records)-1]; !last.NewTask {
		t.Fatalf("the failed first attempt's record does not write the delivery's task: %+v", last)
	}
	if !tasks[webhooks.Task(deliveryID).ID()] || tasks[webhooks.EventTask(eventID).ID()] {
		t.Fatalf("outbox %v, want the delivery's own task only", tasks)
	}
	got, in := q.all()
	if len(got) != 1 || got[0].ID() != webhooks.Task(deliveryID).ID() || in[0] < defaultSchedule[1] || in[0] > defaultSchedule[1]*11/10 {
		t.Fatalf("enqueued %v in %v, want the delivery's task in %s (+10 %%)", got, in, defaultSchedule[1])
	}
}
