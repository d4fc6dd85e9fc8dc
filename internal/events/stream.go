package events

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/gatehouse-pay/gatehouse/internal/apperr"
)

// The event stream (GET /v1/events/stream): a merchant's events in the
// order their transactions committed, from any replica, resumable by event
// id without gaps or duplicates.
//
// Order: each event records the id of the transaction that wrote it
// (events.txid). A stream reads only events whose transaction id is below
// the database's horizon, the oldest transaction still running: everything
// below it has committed or aborted, so no event can appear later in the
// part already read, and reading in (txid, id) order is a prefix that only
// grows. Event ids alone would not do: they are taken before commit, so a
// later id can commit first.
//
// Wake-ups: one Hub per replica polls, while anyone listens, which of the
// listening merchants have events below a new horizon (one indexed query per
// PollEvery for all of them) and wakes their streams, which read from their
// own cursors. A missed wake-up only delays: streams read again at every
// heartbeat. Nothing is added to the path that writes events.
//
// Revocation: every read also checks, in the same statement and so in the
// same snapshot, that the credential that opened the stream is still live,
// and returns ErrRevoked instead of events when it is not. An event committed
// after a revocation was answered committed after the revocation, so a
// snapshot that sees the event sees the revocation too: a stream never
// carries such an event, whichever replica revoked. The same poll also asks
// which of the open credentials are no longer live and wakes their streams,
// whose next read ends them, so an idle stream ends within a poll as well.

// Cursor is a position in a merchant's stream: after the event ID written by
// transaction TxID (a Postgres xid8, as text). The zero ID starts at TxID.
type Cursor struct {
	TxID string
	ID   string
}

// Credential is what opened a stream: an API key or a dashboard session, by
// id. It is live while it is not revoked (nor, for a session, expired).
type Credential struct {
	Kind string // CredentialKey or CredentialSession
	ID   string
}

// Kinds of Credential.
const (
	CredentialKey     = "api_key"
	CredentialSession = "session"
)

// ErrRevoked is what a read returns when the stream's credential is no
// longer live: the stream ends, and the client's reconnection is refused.
var ErrRevoked = apperr.Unauthenticated(apperr.CodeTokenRevoked, "The credential of this stream has been revoked.")

// Poll is one answer of the hub's poll: which merchants have events below
// the new Horizon, and which of the open credentials are no longer live.
type Poll struct {
	Woken   []string
	Revoked []Credential
	Horizon string
}

// StreamStore reads the stream. Horizon returns the oldest running
// transaction id; Poll returns which of merchants have events written by
// transactions in [from, the current horizon), that horizon, and which of
// creds are no longer live; After returns up to limit events of the merchant
// after c, below the horizon, in order, with the cursor of the last, or
// ErrRevoked when cred is no longer live, checked in the same snapshot as
// the events; CursorOf returns the cursor of one of the merchant's events
// (KindNotFound for none, or one written before the stream existed).
type StreamStore interface {
	Horizon(ctx context.Context) (string, error)
	Poll(ctx context.Context, merchants []string, creds []Credential, from string) (Poll, error)
	After(ctx context.Context, merchantID string, cred Credential, c Cursor, limit int) ([]Event, Cursor, error)
	CursorOf(ctx context.Context, merchantID, eventID string) (Cursor, error)
}

// Limits bound the open streams of one replica: in all, per merchant and
// per credential.
type Limits struct {
	Total         int
	PerMerchant   int
	PerCredential int
}

// Hub wakes the streams of one replica and bounds them.
type Hub struct {
	store     StreamStore
	pollEvery time.Duration
	limits    Limits
	log       *slog.Logger

	mu      sync.Mutex
	subs    map[string]map[*Subscription]struct{} // merchant id -> streams
	perCred map[Credential]int
	total   int
	closed  bool
	done    chan struct{}
	wake    chan struct{} // a first subscriber starts polling
}

// Subscription is one open stream.
type Subscription struct {
	hub      *Hub
	merchant string
	cred     Credential
	// Wake receives (coalesced) when the merchant may have new events.
	Wake chan struct{}
}

// NewHub returns a hub polling every pollEvery while streams are open, with
// at most the limits' streams on this replica.
func NewHub(store StreamStore, pollEvery time.Duration, limits Limits, log *slog.Logger) *Hub {
	return &Hub{store: store, pollEvery: pollEvery, limits: limits, log: log,
		subs: map[string]map[*Subscription]struct{}{}, perCred: map[Credential]int{}, done: make(chan struct{}), wake: make(chan struct{}, 1)}
}

// Store is the hub's store, for the streams' reads.
func (h *Hub) Store() StreamStore { return h.store }

// Done is closed when the replica shuts down: streams end.
func (h *Hub) Done() <-chan struct{} { return h.done }

var (
	errKeyBusy = &apperr.Error{Kind: apperr.KindRateLimited, Code: apperr.CodeRateLimited,
		Message: "Too many open event streams for this credential; close one first."}
	errMerchantBusy = &apperr.Error{Kind: apperr.KindRateLimited, Code: apperr.CodeRateLimited,
		Message: "Too many open event streams for this merchant; close one first."}
	errHubFull = apperr.Unavailable(nil)
)

// Subscribe opens a stream of the merchant's events for the credential, or
// refuses it: KindRateLimited over the merchant's or the credential's
// bound, KindUnavailable over the replica's or while shutting down.
func (h *Hub) Subscribe(merchantID string, cred Credential) (*Subscription, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	switch {
	case h.closed || h.total >= h.limits.Total:
		return nil, errHubFull
	case len(h.subs[merchantID]) >= h.limits.PerMerchant:
		return nil, errMerchantBusy
	case h.perCred[cred] >= h.limits.PerCredential:
		return nil, errKeyBusy
	}
	s := &Subscription{hub: h, merchant: merchantID, cred: cred, Wake: make(chan struct{}, 1)}
	if h.subs[merchantID] == nil {
		h.subs[merchantID] = map[*Subscription]struct{}{}
	}
	h.subs[merchantID][s] = struct{}{}
	h.perCred[cred]++
	h.total++
	select {
	case h.wake <- struct{}{}:
	default:
	}
	return s, nil
}

// Close ends the subscription.
func (s *Subscription) Close() {
	h := s.hub
	h.mu.Lock()
	defer h.mu.Unlock()
	if _, ok := h.subs[s.merchant][s]; !ok {
		return
	}
	delete(h.subs[s.merchant], s)
	if len(h.subs[s.merchant]) == 0 {
		delete(h.subs, s.merchant)
	}
	if h.perCred[s.cred]--; h.perCred[s.cred] <= 0 {
		delete(h.perCred, s.cred)
	}
	h.total--
}

// Open is the number of open streams on this replica.
func (h *Hub) Open() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.total
}

// Close ends every stream and refuses new ones (shutdown).
func (h *Hub) Close() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.closed {
		h.closed = true
		close(h.done)
	}
}

// listening returns the merchants and the credentials with open streams.
func (h *Hub) listening() ([]string, []Credential) {
	h.mu.Lock()
	defer h.mu.Unlock()
	ms := make([]string, 0, len(h.subs))
	for m := range h.subs {
		ms = append(ms, m)
	}
	creds := make([]Credential, 0, len(h.perCred))
	for c := range h.perCred {
		creds = append(creds, c)
	}
	return ms, creds
}

// notify wakes the streams of the merchants and those of the credentials.
func (h *Hub) notify(merchants []string, revoked []Credential) {
	h.mu.Lock()
	defer h.mu.Unlock()
	wake := func(s *Subscription) {
		select {
		case s.Wake <- struct{}{}:
		default:
		}
	}
	for _, m := range merchants {
		for s := range h.subs[m] {
			wake(s)
		}
	}
	if len(revoked) == 0 {
		return
	}
	gone := make(map[Credential]bool, len(revoked))
	for _, c := range revoked {
		gone[c] = true
	}
	for _, ss := range h.subs {
		for s := range ss {
			if gone[s.cred] {
				wake(s)
			}
		}
	}
}

// Run polls until ctx ends or the hub closes; it sleeps while no stream is
// open.
func (h *Hub) Run(ctx context.Context) {
	horizon := ""
	t := time.NewTicker(h.pollEvery)
	defer t.Stop()
	for {
		ms, creds := h.listening()
		if len(ms) == 0 {
			horizon = "" // idle: nothing to remember
			select {
			case <-h.wake:
				continue
			case <-ctx.Done():
				return
			case <-h.done:
				return
			}
		}
		if horizon == "" {
			var err error
			if horizon, err = h.store.Horizon(ctx); err != nil {
				h.log.WarnContext(ctx, "event stream: horizon unreadable", "err", err)
			}
		} else if p, err := h.store.Poll(ctx, ms, creds, horizon); err != nil {
			h.log.WarnContext(ctx, "event stream: poll failed", "err", err)
		} else {
			horizon = p.Horizon
			h.notify(p.Woken, p.Revoked)
		}
		select {
		case <-t.C:
		case <-ctx.Done():
			return
		case <-h.done:
			return
		}
	}
}
