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

// Cursor is a position in a merchant's stream: after the event ID written by
// transaction TxID (a Postgres xid8, as text). The zero ID starts at TxID.
type Cursor struct {
	TxID string
	ID   string
}

// StreamStore reads the stream. Horizon returns the oldest running
// transaction id; Woken returns which of merchants have events written by
// transactions in [from, the current horizon) and that horizon; After
// returns up to limit events of the merchant after c, below the horizon, in
// order, with the cursor of the last; CursorOf returns the cursor of one of
// the merchant's events (KindNotFound for none, or one written before the
// stream existed).
type StreamStore interface {
	Horizon(ctx context.Context) (string, error)
	Woken(ctx context.Context, merchants []string, from string) ([]string, string, error)
	After(ctx context.Context, merchantID string, c Cursor, limit int) ([]Event, Cursor, error)
	CursorOf(ctx context.Context, merchantID, eventID string) (Cursor, error)
}

// Hub wakes the streams of one replica and bounds them.
type Hub struct {
	store     StreamStore
	pollEvery time.Duration
	maxTotal  int
	maxPerKey int
	log       *slog.Logger

	mu     sync.Mutex
	subs   map[string]map[*Subscription]struct{} // merchant id -> streams
	perKey map[string]int
	total  int
	closed bool
	done   chan struct{}
	wake   chan struct{} // a first subscriber starts polling
}

// Subscription is one open stream.
type Subscription struct {
	hub      *Hub
	merchant string
	key      string
	// Wake receives (coalesced) when the merchant may have new events.
	Wake chan struct{}
}

// NewHub returns a hub polling every pollEvery while streams are open, with
// at most maxTotal streams on this replica and maxPerKey per API key.
func NewHub(store StreamStore, pollEvery time.Duration, maxTotal, maxPerKey int, log *slog.Logger) *Hub {
	return &Hub{store: store, pollEvery: pollEvery, maxTotal: maxTotal, maxPerKey: maxPerKey, log: log,
		subs: map[string]map[*Subscription]struct{}{}, perKey: map[string]int{}, done: make(chan struct{}), wake: make(chan struct{}, 1)}
}

// Store is the hub's store, for the streams' reads.
func (h *Hub) Store() StreamStore { return h.store }

// Done is closed when the replica shuts down: streams end.
func (h *Hub) Done() <-chan struct{} { return h.done }

var (
	errKeyBusy = &apperr.Error{Kind: apperr.KindRateLimited, Code: apperr.CodeRateLimited,
		Message: "Too many open event streams for this API key; close one first."}
	errHubFull = apperr.Unavailable(nil)
)

// Subscribe opens a stream of the merchant's events for the key, or refuses
// it: 429 over the key's bound, 503 over the replica's or while shutting down.
func (h *Hub) Subscribe(merchantID, keyID string) (*Subscription, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	switch {
	case h.closed || h.total >= h.maxTotal:
		return nil, errHubFull
	case h.perKey[keyID] >= h.maxPerKey:
		return nil, errKeyBusy
	}
	s := &Subscription{hub: h, merchant: merchantID, key: keyID, Wake: make(chan struct{}, 1)}
	if h.subs[merchantID] == nil {
		h.subs[merchantID] = map[*Subscription]struct{}{}
	}
	h.subs[merchantID][s] = struct{}{}
	h.perKey[keyID]++
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
	if h.perKey[s.key]--; h.perKey[s.key] <= 0 {
		delete(h.perKey, s.key)
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

func (h *Hub) merchants() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make([]string, 0, len(h.subs))
	for m := range h.subs {
		out = append(out, m)
	}
	return out
}

func (h *Hub) notify(merchants []string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, m := range merchants {
		for s := range h.subs[m] {
			select {
			case s.Wake <- struct{}{}:
			default:
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
		ms := h.merchants()
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
		} else if woken, next, err := h.store.Woken(ctx, ms, horizon); err != nil {
			h.log.WarnContext(ctx, "event stream: poll failed", "err", err)
		} else {
			horizon = next
			h.notify(woken)
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
