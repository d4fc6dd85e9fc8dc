package audit

import (
	"context"
	"sync"
	"time"
)

// Record is the audit entry of one request, made when the request is
// authenticated and written by the store in the transaction of the action
// it records, just before that commits. A request whose action writes
// nothing to the database has it written on its own after it succeeds; a
// request that fails, or that replays an earlier one (an Idempotency-Key
// seen before), leaves no entry.
type Record struct {
	mu      sync.Mutex
	entry   Entry
	state   recordState
	written bool
}

type recordState int

const (
	pending recordState = iota
	claimed             // being written by a transaction not yet committed
	done                // written, or nothing to write (a replay)
)

// NewRecord starts the record of a request with everything but the object
// id of a creation and the chain position.
func NewRecord(e Entry) *Record { return &Record{entry: e} }

type recordKey struct{}

// WithRecord returns ctx carrying r.
func WithRecord(ctx context.Context, r *Record) context.Context {
	return context.WithValue(ctx, recordKey{}, r)
}

// FromContext returns the record ctx carries, or nil.
func FromContext(ctx context.Context) *Record {
	r, _ := ctx.Value(recordKey{}).(*Record)
	return r
}

// SetObject names the object a request created, once its id is made: the
// store calls it as it writes the object.
func SetObject(ctx context.Context, objectType, id string) {
	if r := FromContext(ctx); r != nil {
		r.mu.Lock()
		r.entry.ObjectType, r.entry.ObjectID = objectType, id
		r.mu.Unlock()
	}
}

// SetActor names the account and the actor of a request that was not
// authenticated when its record was made (a sign-in, a password setup):
// the service calls it once it knows who, before the write commits.
func SetActor(ctx context.Context, merchantID, actorType, actorID string) {
	if r := FromContext(ctx); r != nil {
		r.mu.Lock()
		r.entry.MerchantID, r.entry.ActorType, r.entry.ActorID = merchantID, actorType, actorID
		r.mu.Unlock()
	}
}

// Skip marks the request as changing nothing (a replay of an earlier
// request, a dry run): no entry is written for it.
func Skip(ctx context.Context) {
	if r := FromContext(ctx); r != nil {
		r.mu.Lock()
		if r.state == pending {
			r.state = done
		}
		r.mu.Unlock()
	}
}

// Claim returns the entry to write when ctx carries a record still to be
// written, and marks it taken; the caller reports with Release whether its
// transaction committed. ok is false when there is nothing to write.
func Claim(ctx context.Context) (e Entry, ok bool) {
	r := FromContext(ctx)
	if r == nil {
		return Entry{}, false
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.state != pending {
		return Entry{}, false
	}
	r.state = claimed
	return r.entry, true
}

// Release ends a Claim: committed marks the record written, otherwise it is
// pending again.
func Release(ctx context.Context, committed bool) {
	r := FromContext(ctx)
	if r == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.state != claimed {
		return
	}
	if committed {
		r.state, r.written = done, true
		return
	}
	r.state = pending
}

// Pending reports whether ctx carries a record still to be written.
func Pending(ctx context.Context) bool {
	r := FromContext(ctx)
	if r == nil {
		return false
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.state == pending
}

// Written reports whether the record was written.
func (r *Record) Written() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.written
}

// Filter selects entries of a list.
type Filter struct {
	Actor      string // the actor's id
	Action     string
	ObjectID   string
	CreatedGTE *time.Time
	CreatedLTE *time.Time
}
