package connectors

import (
	"context"
	"sync"
	"time"

	"github.com/gatehouse-pay/gatehouse/internal/apperr"
)

// DefaultSnapshotTTL is how long the API keeps a merchant's snapshot when
// no change notice arrives: the bound on staleness if a notice is lost.
const DefaultSnapshotTTL = 30 * time.Second

// Notifier carries change notices between the replicas that cache
// snapshots (Redis pub/sub in production).
type Notifier interface {
	// Publish tells every replica that merchantID's connectors or routing
	// changed.
	Publish(ctx context.Context, merchantID string) error
}

// Directory is the charge path's cache of merchants' snapshots: a charge
// is routed without a Postgres round trip once its merchant's snapshot is
// loaded. A change through any replica publishes a notice that drops the
// snapshot everywhere (Forget); the TTL bounds how long a lost notice
// leaves a stale copy.
type Directory struct {
	store     Store
	notify    Notifier
	available []string
	fallback  string
	ttl       time.Duration
	now       func() time.Time
	onLoad    func()

	mu      sync.Mutex
	entries map[string]entry
	// gen counts Forget calls per merchant, so a load that raced a change
	// is not cached.
	gen map[string]uint64
	all uint64 // counts ForgetAll calls
}

type entry struct {
	snap   Snapshot
	expiry time.Time
}

// NewDirectory returns a directory over store. available are the providers
// the server has an account with, fallback the default provider; notify
// may be nil (one replica).
func NewDirectory(store Store, notify Notifier, available []string, fallback string, ttl time.Duration, now func() time.Time) *Directory {
	if ttl <= 0 {
		ttl = DefaultSnapshotTTL
	}
	return &Directory{store: store, notify: notify, available: available, fallback: fallback, ttl: ttl, now: now,
		entries: map[string]entry{}, gen: map[string]uint64{}}
}

// OnLoad sets a function told of every snapshot read from Postgres (a
// metric, or a test's counter).
func (d *Directory) OnLoad(f func()) *Directory {
	d.onLoad = f
	return d
}

// Snapshot returns merchantID's snapshot, from the cache when it holds one.
func (d *Directory) Snapshot(ctx context.Context, merchantID string) (Snapshot, error) {
	now := d.now()
	d.mu.Lock()
	e, ok := d.entries[merchantID]
	gen := d.gen[merchantID] + d.all
	d.mu.Unlock()
	if ok && now.Before(e.expiry) {
		return e.snap, nil
	}
	snap, err := d.store.Snapshot(ctx, merchantID, d.available, now.UTC().Truncate(time.Millisecond))
	if err != nil {
		if apperr.KindOf(err) == apperr.KindInternal {
			return Snapshot{}, apperr.Unavailable(err)
		}
		return Snapshot{}, err
	}
	if d.onLoad != nil {
		d.onLoad()
	}
	d.mu.Lock()
	if d.gen[merchantID]+d.all == gen {
		d.entries[merchantID] = entry{snap: snap, expiry: now.Add(d.ttl)}
	}
	d.mu.Unlock()
	return snap, nil
}

// Plan routes a charge of merchantID (see Plan).
func (d *Directory) Plan(ctx context.Context, merchantID string, in PlanInput, maxAttempts int) ([]Ref, error) {
	snap, err := d.Snapshot(ctx, merchantID)
	if err != nil {
		return nil, err
	}
	return Plan(snap, in, d.fallback, maxAttempts, Pick)
}

// Forget drops merchantID's snapshot (a change notice arrived).
func (d *Directory) Forget(merchantID string) {
	d.mu.Lock()
	delete(d.entries, merchantID)
	d.gen[merchantID]++
	d.mu.Unlock()
}

// Changed drops merchantID's snapshot here and tells the other replicas.
// A notice that cannot be published is not an error: the TTL ends the
// other replicas' copies.
func (d *Directory) Changed(ctx context.Context, merchantID string) {
	d.Forget(merchantID)
	if d.notify != nil {
		_ = d.notify.Publish(ctx, merchantID)
	}
}

// ForgetAll drops every snapshot (the change notices were interrupted).
func (d *Directory) ForgetAll() {
	d.mu.Lock()
	d.all++
	d.entries = map[string]entry{}
	d.mu.Unlock()
}
