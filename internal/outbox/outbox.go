// Package outbox names the work the worker must do after a state change. A
// task row is written in the same transaction as the change that calls for it
// and deleted in the transaction that finishes it; the relay enqueues it right
// after commit and the sweeper enqueues again any row whose task went missing.
// A task's ID is its queue id, so enqueueing it twice is harmless.
package outbox

import (
	"context"
	"strconv"
	"time"
)

// Task types.
const (
	ChargeAuthorize = "charge:authorize"
	ChargeCapture   = "charge:capture"
	ChargeVoid      = "charge:void"
	// ChargeReverse releases whatever the provider may have booked for a
	// charge that failed without knowing the provider's answer.
	ChargeReverse = "charge:reverse"
	// ChargeAuthenticate settles a charge that requires action: with the
	// cardholder's answer, or, once its time is up, by expiring it.
	ChargeAuthenticate = "charge:authenticate"
	// ChargeAuthenticationTimeout is ChargeAuthenticate scheduled for the
	// moment a charge's authentication expires; it is not an outbox row
	// (the sweeper writes ChargeAuthenticate for an expired charge).
	ChargeAuthenticationTimeout = "charge:authentication_timeout"
	RefundProcess               = "refund:process"
	WebhookDeliver              = "webhook:deliver"
	// WebhookEvent makes the first attempt of every delivery of an event;
	// WebhookDeliver then carries the retries, and the deliveries the
	// event's task handed off.
	WebhookEvent = "webhook:event"
	// NotificationApply applies a provider's notification the API stored.
	NotificationApply = "notification:apply"
)

// Types lists every task type, for metrics that report each one.
var Types = []string{ChargeAuthorize, ChargeCapture, ChargeVoid, ChargeReverse, ChargeAuthenticate, ChargeAuthenticationTimeout, RefundProcess, WebhookDeliver, WebhookEvent, NotificationApply}

// Task is one unit of work about one object.
type Task struct {
	Type  string
	RefID string
	// Attempt, for a charge:authorize task, is the attempt (from 2) it
	// starts after an earlier attempt failed over to the next connector;
	// 0 for the first. It keeps the new task apart in the queue from the
	// one still running, and is not part of the outbox row's id.
	Attempt int
	// Key, for a webhook:deliver task, is its delivery's endpoint: it
	// picks the queue, so that an endpoint's deliveries share one. It is
	// not part of the ids.
	Key string
}

// ID is the task's outbox id.
func (t Task) ID() string { return t.Type + ":" + t.RefID }

// QueueID is the task's id in the queue: ID, and the attempt when there is one.
func (t Task) QueueID() string {
	if t.Attempt > 1 {
		return t.ID() + ":" + strconv.Itoa(t.Attempt)
	}
	return t.ID()
}

// Enqueuer hands tasks to the queue. A failure is not fatal: the task row is
// committed and the sweeper enqueues it later.
type Enqueuer interface {
	Enqueue(ctx context.Context, t Task) error
}

// Pending is an outbox row waiting for its task to finish.
type Pending struct {
	Task      Task
	CreatedAt time.Time
}
