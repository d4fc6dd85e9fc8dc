package connectors

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gatehouse-pay/gatehouse/internal/apperr"
	"github.com/gatehouse-pay/gatehouse/internal/keyring"
	"github.com/gatehouse-pay/gatehouse/internal/ledger"
	"github.com/gatehouse-pay/gatehouse/internal/providers"
)

// DefaultRefresh is how often the worker reads a connector again: a change
// of its credentials or rehearsal reaches the worker within it.
const DefaultRefresh = time.Second

// Build makes the provider of a connector that has credentials of its own
// (a Stripe account other than the server's).
type Build func(c Connector, cr Credentials) (providers.Provider, error)

// Wrap puts a provider behind a circuit breaker of its own, named name.
type Wrap func(name string, p providers.Provider) providers.Provider

// Resolver is the worker's providers.Resolver: it finds the provider of a
// connector, each connector behind a circuit breaker of its own.
type Resolver struct {
	store   Store
	keys    *keyring.Keyring
	server  providers.Registry // the server's own accounts, unwrapped
	build   Build
	wrap    Wrap
	refresh time.Duration
	now     func() time.Time

	mu     sync.Mutex
	byID   map[string]*resolved
	legacy map[string]providers.Provider
}

type resolved struct {
	prov      providers.Provider
	sealed    []byte
	rehearsal *atomic.Pointer[Sandbox]
	terms     *atomic.Pointer[Connector] // the connector as last read, for Terms
	fetched   time.Time
}

// NewResolver returns the worker's resolver. server holds the providers of
// the server's own accounts (unwrapped); build makes a provider for a
// connector's own credentials; wrap adds a breaker.
func NewResolver(store Store, keys *keyring.Keyring, server providers.Registry, build Build, wrap Wrap, refresh time.Duration, now func() time.Time) *Resolver {
	if refresh <= 0 {
		refresh = DefaultRefresh
	}
	return &Resolver{store: store, keys: keys, server: server, build: build, wrap: wrap, refresh: refresh, now: now,
		byID: map[string]*resolved{}, legacy: map[string]providers.Provider{}}
}

var _ providers.Resolver = (*Resolver)(nil)

// Resolve implements providers.Resolver.
func (r *Resolver) Resolve(ctx context.Context, connectorID *string, provider string) (providers.Provider, error) {
	if connectorID == nil {
		return r.legacyProvider(provider)
	}
	now := r.now()
	r.mu.Lock()
	e := r.byID[*connectorID]
	fresh := e != nil && now.Sub(e.fetched) < r.refresh // fetched is written under mu
	r.mu.Unlock()
	if fresh {
		return e.prov, nil
	}
	c, err := r.store.ConnectorForWork(ctx, *connectorID)
	if err != nil {
		if e != nil && apperr.KindOf(err) != apperr.KindNotFound {
			return e.prov, nil // Postgres is away: the last copy serves
		}
		return nil, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if e = r.byID[c.ID]; e != nil && string(e.sealed) == string(c.Sealed) {
		e.rehearsal.Store(c.Sandbox)
		e.terms.Store(&c)
		e.fetched = now
		return e.prov, nil
	}
	base, err := r.base(c)
	if err != nil {
		return nil, err
	}
	e = &resolved{sealed: c.Sealed, rehearsal: &atomic.Pointer[Sandbox]{}, terms: &atomic.Pointer[Connector]{}, fetched: now}
	e.rehearsal.Store(c.Sandbox)
	e.terms.Store(&c)
	if c.Provider == ProviderSandbox {
		base = &rehearsed{Provider: base, settings: e.rehearsal}
	}
	e.prov = r.wrap(c.ID, base)
	r.byID[c.ID] = e
	return e.prov, nil
}

// Terms are the terms of a charge's connector (its provider's, for a
// charge made before connectors), as fresh as Resolve keeps them:
// settlementDelay is the sandbox's.
func (r *Resolver) Terms(ctx context.Context, connectorID *string, provider string, settlementDelay time.Duration) (ledger.Terms, error) {
	if connectorID == nil {
		return Connector{Provider: provider}.Terms(settlementDelay), nil
	}
	if _, err := r.Resolve(ctx, connectorID, provider); err != nil && !errors.Is(err, providers.ErrNotConfigured) {
		return ledger.Terms{}, err
	}
	r.mu.Lock()
	e := r.byID[*connectorID]
	r.mu.Unlock()
	if e == nil {
		c, err := r.store.ConnectorForWork(ctx, *connectorID)
		if err != nil {
			return ledger.Terms{}, err
		}
		return c.Terms(settlementDelay), nil
	}
	return e.terms.Load().Terms(settlementDelay), nil
}

// PayoutFailure is the failure a sandbox connector rehearses for its
// payouts, "" for none, read fresh.
func (r *Resolver) PayoutFailure(ctx context.Context, connectorID string) (string, error) {
	c, err := r.store.ConnectorForWork(ctx, connectorID)
	if err != nil || c.Sandbox == nil || c.Sandbox.PayoutFailure == nil {
		return "", err
	}
	return *c.Sandbox.PayoutFailure, nil
}

// accounts is a provider that keeps books per account (the sandbox): each
// connector is an account of its own.
type accounts interface {
	ForAccount(account string) providers.Provider
}

// base is the unwrapped provider of c.
func (r *Resolver) base(c Connector) (providers.Provider, error) {
	if c.Sealed == nil {
		p, ok := r.server[c.Provider]
		if !ok {
			return nil, fmt.Errorf("%w: %q (connector %s uses the server's account)", providers.ErrNotConfigured, c.Provider, c.ID)
		}
		if a, ok := p.(accounts); ok {
			return a.ForAccount(c.ID), nil
		}
		return p, nil
	}
	cr, err := OpenCredentials(r.keys, c)
	if err != nil {
		return nil, fmt.Errorf("connectors: credentials of %s cannot be opened: %w", c.ID, err)
	}
	if r.build == nil {
		return nil, fmt.Errorf("%w: %q with credentials of its own", providers.ErrNotConfigured, c.Provider)
	}
	return r.build(c, cr)
}

// legacyProvider is the server's provider for charges made before
// connectors, behind one breaker per provider.
func (r *Resolver) legacyProvider(provider string) (providers.Provider, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if p, ok := r.legacy[provider]; ok {
		return p, nil
	}
	p, ok := r.server[provider]
	if !ok {
		return nil, fmt.Errorf("%w: %q", providers.ErrNotConfigured, provider)
	}
	w := r.wrap(provider, p)
	r.legacy[provider] = w
	return w, nil
}

// rehearsed is a sandbox connector with its rehearsal applied: added
// latency, an outage before anything is booked, or a decline of every
// authorization.
type rehearsed struct {
	providers.Provider
	settings *atomic.Pointer[Sandbox]
}

// errRehearsedOutage: the sandbox vouches nothing was booked.
var errRehearsedOutage = fmt.Errorf("%w: the connector rehearses an outage: %w", providers.ErrUnavailable, providers.ErrNothingBooked)

func (r *rehearsed) before(ctx context.Context) (Sandbox, error) {
	s := r.settings.Load()
	if s == nil {
		return Sandbox{}, nil
	}
	if s.LatencyMS > 0 {
		t := time.NewTimer(time.Duration(s.LatencyMS) * time.Millisecond)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
			return *s, fmt.Errorf("%w: %w: %w", providers.ErrUnavailable, ctx.Err(), providers.ErrNothingBooked)
		}
	}
	return *s, nil
}

func (r *rehearsed) Authorize(ctx context.Context, req providers.AuthorizeRequest) (providers.Result, error) {
	s, err := r.before(ctx)
	switch {
	case err != nil:
		return providers.Result{}, err
	case s.Unavailable:
		return providers.Result{}, errRehearsedOutage
	case s.DeclineCode != nil:
		return providers.Result{}, &providers.Decline{Code: *s.DeclineCode, Message: "The connector's rehearsal declines every authorization."}
	}
	return r.Provider.Authorize(ctx, req)
}

// outage: for any other call the outage is an unknown outcome (the caller
// keeps trying), never a proof about earlier calls.
func (r *rehearsed) outage(ctx context.Context) error {
	s, err := r.before(ctx)
	if err != nil {
		return providers.ErrUnavailable
	}
	if s.Unavailable {
		return fmt.Errorf("%w: the connector rehearses an outage", providers.ErrUnavailable)
	}
	return nil
}

func (r *rehearsed) Capture(ctx context.Context, req providers.CaptureRequest) (providers.Result, error) {
	if err := r.outage(ctx); err != nil {
		return providers.Result{}, err
	}
	return r.Provider.Capture(ctx, req)
}

func (r *rehearsed) Void(ctx context.Context, req providers.VoidRequest) (providers.Result, error) {
	if err := r.outage(ctx); err != nil {
		return providers.Result{}, err
	}
	return r.Provider.Void(ctx, req)
}

func (r *rehearsed) Refund(ctx context.Context, req providers.RefundRequest) (providers.Result, error) {
	if err := r.outage(ctx); err != nil {
		return providers.Result{}, err
	}
	return r.Provider.Refund(ctx, req)
}

func (r *rehearsed) LookupRefund(ctx context.Context, req providers.RefundLookup) (providers.Result, error) {
	l, ok := r.Provider.(providers.Lookup)
	if !ok {
		return providers.Result{}, fmt.Errorf("%w: %w", providers.ErrUnavailable, providers.ErrNoLookup)
	}
	if err := r.outage(ctx); err != nil {
		return providers.Result{}, err
	}
	return l.LookupRefund(ctx, req)
}

func (r *rehearsed) LookupPayment(ctx context.Context, reference string) (providers.Payment, error) {
	l, ok := r.Provider.(providers.Lookup)
	if !ok {
		return providers.Payment{}, fmt.Errorf("%w: %w", providers.ErrUnavailable, providers.ErrNoLookup)
	}
	if err := r.outage(ctx); err != nil {
		return providers.Payment{}, err
	}
	return l.LookupPayment(ctx, reference)
}

func (r *rehearsed) Authenticate(ctx context.Context, req providers.AuthenticateRequest) (providers.Result, error) {
	a, ok := r.Provider.(providers.Authenticator)
	if !ok {
		return providers.Result{}, &providers.Decline{Code: "invalid_request", Message: "This provider does not authenticate cardholders."}
	}
	if err := r.outage(ctx); err != nil {
		return providers.Result{}, err
	}
	return a.Authenticate(ctx, req)
}

// IsNotConfigured reports whether err says the worker lacks the provider.
func IsNotConfigured(err error) bool { return errors.Is(err, providers.ErrNotConfigured) }

// SubmitDisputeEvidence passes a merchant's evidence on to the sandbox
// (rehearsals are about payments, not disputes).
func (r *rehearsed) SubmitDisputeEvidence(ctx context.Context, reference string, evidence map[string]string) error {
	d, ok := r.Provider.(providers.DisputeResponder)
	if !ok {
		return providers.ErrNoDisputeAPI
	}
	return d.SubmitDisputeEvidence(ctx, reference, evidence)
}

// AcceptDispute passes a merchant's acceptance of a dispute on to the
// sandbox.
func (r *rehearsed) AcceptDispute(ctx context.Context, reference string) error {
	d, ok := r.Provider.(providers.DisputeResponder)
	if !ok {
		return providers.ErrNoDisputeAPI
	}
	return d.AcceptDispute(ctx, reference)
}
