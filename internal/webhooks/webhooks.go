// Package webhooks registers merchants' endpoints and delivers events to them:
// signed, at least once, on the retry schedule of api/openapi.yaml. A
// delivery row per subscribed endpoint is written in the same transaction as
// the event (see internal/store), so no committed event is lost; the worker
// sends each delivery, records every attempt and schedules the next.
package webhooks

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/netip"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/gatehouse-pay/gatehouse/internal/apperr"
	"github.com/gatehouse-pay/gatehouse/internal/events"
	"github.com/gatehouse-pay/gatehouse/internal/idempotency"
	"github.com/gatehouse-pay/gatehouse/internal/ids"
	"github.com/gatehouse-pay/gatehouse/internal/keyring"
	"github.com/gatehouse-pay/gatehouse/internal/listing"
	"github.com/gatehouse-pay/gatehouse/internal/outbox"
	"github.com/gatehouse-pay/gatehouse/internal/resource"
)

// Delivery statuses.
const (
	StatusPending   = "pending"
	StatusSucceeded = "succeeded"
	StatusFailed    = "failed"
	// StatusFiltered: the endpoint's filter turned the event away when it
	// was written; never sent.
	StatusFiltered = "filtered"
)

// Stats counts an endpoint's deliveries by status.
type Stats struct {
	EndpointID                           string
	Delivered, Filtered, Failed, Pending int64
}

// View returns the public form.
func (s Stats) View() resource.WebhookEndpointStats {
	return resource.WebhookEndpointStats{Object: "webhook_endpoint_stats", Endpoint: s.EndpointID,
		Delivered: s.Delivered, Filtered: s.Filtered, Failed: s.Failed, Pending: s.Pending}
}

// RotationOverlap is how long the previous secret keeps signing after a rotation.
const RotationOverlap = 24 * time.Hour

// Endpoint is a merchant's receiver of events. The secrets are kept sealed.
type Endpoint struct {
	ID                   string
	MerchantID           string
	Environment          string
	URL                  string
	Events               []string
	Active               bool
	Description          *string
	SecretSealed         []byte
	PreviousSecretSealed []byte
	PreviousSecretUntil  *time.Time
	CreatedAt            time.Time
	UpdatedAt            time.Time
	DeletedAt            *time.Time
	// DisabledReason says why Active is false: DisabledManual,
	// DisabledGone or DisabledFailing; nil while the endpoint is enabled.
	DisabledReason *string
	DisabledAt     *time.Time
	// FailingSince is the first failed attempt since the last success.
	FailingSince *time.Time
	// Ordered endpoints receive one object's events in sequence order.
	Ordered bool
	// Filter is the endpoint's conditions on the event body, as ParseFilter
	// returns them; nil delivers every subscribed event.
	Filter json.RawMessage
	// HealthAnnounced: a webhook_endpoint.failing or .disabled event told
	// the merchant of the endpoint's trouble; its next success sends
	// webhook_endpoint.recovered.
	HealthAnnounced bool
	// Auth is how deliveries authenticate to the receiver beyond the
	// signature (AuthOAuth2 or AuthMTLS); nil for none. AuthSecretSealed
	// holds the OAuth 2.0 client secret, sealed, bound to the endpoint.
	Auth             *ReceiverAuth
	AuthSecretSealed []byte
	// HeaderNames are the static headers sent with every attempt, sorted;
	// HeadersSealed holds them with their values (a JSON object), sealed.
	HeaderNames   []string
	HeadersSealed []byte
}

// Endpoint statuses and the reasons an endpoint is disabled (docs/webhooks.md,
// endpoint health).
const (
	EndpointEnabled  = "enabled"
	EndpointDisabled = "disabled"
	// DisabledManual: by the merchant (PATCH "active": false).
	DisabledManual = "manual"
	// DisabledGone: its receiver answered 410 Gone.
	DisabledGone = "gone"
	// DisabledFailing: every attempt failed for WEBHOOK_DISABLE_AFTER.
	DisabledFailing = "failing"
)

// Status is EndpointEnabled or EndpointDisabled; it follows Active.
func (e Endpoint) Status() string {
	if e.Active {
		return EndpointEnabled
	}
	return EndpointDisabled
}

// View returns the public form.
func (e Endpoint) View() resource.WebhookEndpoint {
	v := resource.WebhookEndpoint{ID: e.ID, Object: "webhook_endpoint", URL: e.URL, Events: e.Events, Active: e.Active,
		Status: e.Status(), Ordered: e.Ordered, Description: e.Description, MerchantID: e.MerchantID, Environment: e.Environment,
		CreatedAt: events.Timestamp(e.CreatedAt), UpdatedAt: events.Timestamp(e.UpdatedAt), Filter: e.Filter}
	if e.FailingSince != nil {
		ts := events.Timestamp(*e.FailingSince)
		v.FailingSince = &ts
	}
	v.Auth, v.Headers = e.receiverView()
	if !e.Active {
		// Switched off by a release without endpoint health: by hand.
		reason := DisabledManual
		if e.DisabledReason != nil {
			reason = *e.DisabledReason
		}
		v.DisabledReason = &reason
		at := e.UpdatedAt
		if e.DisabledAt != nil {
			at = *e.DisabledAt
		}
		ts := events.Timestamp(at)
		v.DisabledAt = &ts
	}
	return v
}

// Attempt is one try of a delivery.
type Attempt struct {
	Attempt      int
	StartedAt    time.Time
	DurationMS   int
	StatusCode   *int
	Error        *string
	ResponseBody *string
}

// Delivery is one event (or test) for one endpoint.
type Delivery struct {
	ID            string
	EndpointID    string
	MerchantID    string
	EventID       string
	EventType     string
	Test          bool
	Status        string
	Attempts      int
	ChainAttempts int
	NextAttemptAt *time.Time
	CreatedAt     time.Time
	UpdatedAt     time.Time
	Log           []Attempt
	// Sequence is the event's number among its object's events (0 for
	// events written before sequences were counted); a test delivery's is 1.
	Sequence int
	// OrderedObject names the object of a delivery to an ordered endpoint:
	// it waits for the object's earlier deliveries to that endpoint.
	OrderedObject *string
}

// View returns the public form.
func (d Delivery) View() resource.WebhookDelivery {
	v := resource.WebhookDelivery{ID: d.ID, Object: "webhook_delivery", Endpoint: d.EndpointID, EventID: d.EventID,
		EventType: d.EventType, Status: d.Status, Test: d.Test, Attempts: make([]resource.WebhookAttempt, 0, len(d.Log)),
		CreatedAt: events.Timestamp(d.CreatedAt), UpdatedAt: events.Timestamp(d.UpdatedAt)}
	if d.NextAttemptAt != nil && d.Status == StatusPending {
		s := events.Timestamp(*d.NextAttemptAt)
		v.NextAttemptAt = &s
	}
	for _, a := range d.Log {
		v.Attempts = append(v.Attempts, resource.WebhookAttempt{Attempt: a.Attempt, StartedAt: events.Timestamp(a.StartedAt),
			DurationMS: a.DurationMS, StatusCode: a.StatusCode, Error: a.Error, ResponseBody: a.ResponseBody})
	}
	return v
}

// Patch is a partial update of an endpoint. Turning Active off records
// DisabledManual at At (unless it is already off); turning it on clears the
// reason and the failing streak.
type Patch struct {
	URL         *string
	Events      []string
	Active      *bool
	Description *string
	Ordered     *bool
	// SetFilter replaces the filter with Filter (nil removes it).
	SetFilter bool
	Filter    json.RawMessage
	At        time.Time
	// SetAuth replaces the receiver authentication with Auth and
	// AuthSecretSealed (nil removes it); SetHeaders replaces the static
	// headers with HeaderNames and HeadersSealed (nil clears them).
	SetAuth          bool
	Auth             *ReceiverAuth
	AuthSecretSealed []byte
	SetHeaders       bool
	HeaderNames      []string
	HeadersSealed    []byte
}

// Health is a change of an endpoint's health that an attempt calls for.
type Health struct {
	EndpointID string
	// Failing starts the failing streak at At, unless one is running.
	Failing bool
	// Recovered ends the failing streak.
	Recovered bool
	// Disable switches the endpoint off with this reason (DisabledGone, or
	// DisabledFailing when its streak started at or before FailingBefore).
	Disable string
	// Announce tells the merchant that the endpoint's streak, started at or
	// before FailingBefore, has lasted WEBHOOK_FAILING_AFTER
	// (webhook_endpoint.failing), once per streak.
	Announce      bool
	FailingBefore time.Time
	At            time.Time
}

// HealthResult is what a health change did: whether it disabled the
// endpoint, and the operational event that tells of it ("" for none) with
// the tasks of that event's deliveries, to enqueue.
type HealthResult struct {
	Disabled bool
	Event    string
	Tasks    []outbox.Task
}

// Store persists endpoints and deliveries. Every method that takes a
// merchant id answers NotFound for another merchant's objects. Methods that
// create work return the outbox tasks they wrote, for the caller to enqueue.
type Store interface {
	// CreateEndpoint stores the endpoint; with idem it also records first
	// under the key, in the same transaction, unless the key was used: then
	// it creates nothing and returns the stored response (ErrReused when it
	// answered another request).
	CreateEndpoint(ctx context.Context, e Endpoint, idem *idempotency.Request, first idempotency.Response) (*idempotency.Response, error)
	EndpointByID(ctx context.Context, merchantID, id string) (Endpoint, error)
	ListEndpoints(ctx context.Context, merchantID string, p listing.Params) (listing.Page[Endpoint], error)
	UpdateEndpoint(ctx context.Context, merchantID, id string, p Patch) (Endpoint, error)
	DeleteEndpoint(ctx context.Context, merchantID, id string, at time.Time) error
	RotateSecret(ctx context.Context, merchantID, id string, sealed, previous []byte, until, at time.Time) (Endpoint, error)
	CreateTestDelivery(ctx context.Context, d Delivery, body []byte) (outbox.Task, error)
	ListDeliveries(ctx context.Context, merchantID, endpointID, status string, p listing.Params) (listing.Page[Delivery], error)
	// EndpointStats counts the endpoint's deliveries (tests excepted) by
	// status.
	EndpointStats(ctx context.Context, endpointID string) (Stats, error)
	DeliveryByID(ctx context.Context, merchantID, id string) (Delivery, error)
	RetryDelivery(ctx context.Context, merchantID, id string, at time.Time) (Delivery, outbox.Task, error)
	RecoverDeliveries(ctx context.Context, merchantID, endpointID string, since time.Time, dryRun bool, at time.Time) (int64, []outbox.Task, error)

	// DeliveryForWork returns a delivery, its endpoint (even if deleted) and
	// the body to send, nil when the event was pruned.
	DeliveryForWork(ctx context.Context, id string) (Delivery, Endpoint, []byte, error)
	RecordAttempt(ctx context.Context, r AttemptRecord) (bool, error)
	// WaitInOrder reports whether an ordered delivery must wait for an
	// earlier delivery of its object to the same endpoint, still pending;
	// then it moves the delivery's next attempt to until(the earlier ones'
	// earliest next attempt) and returns that time. Unordered deliveries
	// and first events never wait (and cost no query).
	WaitInOrder(ctx context.Context, d Delivery, until func(earliest *time.Time) time.Time) (bool, time.Time, error)
	// UpdateHealth applies h and writes the operational event that tells of
	// it (webhook_endpoint.failing, .disabled or .recovered, delivered to
	// the merchant's other endpoints), in one transaction. Nothing happens
	// when the endpoint was already off, deleted, announced or recovered
	// meanwhile.
	UpdateHealth(ctx context.Context, h Health) (HealthResult, error)
	// FailingUnannounced names up to limit enabled endpoints whose run of
	// failures began at or before before and was not announced.
	FailingUnannounced(ctx context.Context, before time.Time, limit int) ([]string, error)
	DeleteTask(ctx context.Context, taskID string) error
	// EventFirsts returns the deliveries of an event still waiting for
	// their first attempt (pending, never attempted, not handed off), each
	// with its endpoint and body as DeliveryForWork returns them, oldest
	// first.
	EventFirsts(ctx context.Context, eventID string) ([]Work, error)
	// FinishEvent writes the tasks of the deliveries handed off and
	// deletes the event's task, at once.
	FinishEvent(ctx context.Context, eventID string, handOff []string) error
}

// Work is a delivery as an attempt needs it: with its endpoint (even if
// deleted) and the body to send, nil when the event was pruned.
type Work struct {
	Delivery Delivery
	Endpoint Endpoint
	Body     []byte
}

// Service manages endpoints on the API side.
type Service struct {
	store        Store
	queue        outbox.Enqueuer
	keys         *keyring.Keyring
	allowPrivate bool
	now          func() time.Time
	onEnqueue    func(error)
	certs        ClientCertStore
	// hasPath reports whether events of a type can have a path; a filter
	// must name paths that some event the endpoint receives can have.
	hasPath func(eventType, path string) bool
}

// WithFilterPaths makes the service refuse a filter naming a path that no
// event type the endpoint receives can have (by the types' schemas, see
// GET /v1/event_types): a misspelt field would turn every event away.
func (s *Service) WithFilterPaths(hasPath func(eventType, path string) bool) *Service {
	s.hasPath = hasPath
	return s
}

// checkFilterPaths holds filter's paths to the events the endpoint receives.
func (s *Service) checkFilterPaths(filter json.RawMessage, evs []string) error {
	if s.hasPath == nil || filter == nil {
		return nil
	}
	var conds map[string]json.RawMessage
	if err := json.Unmarshal(filter, &conds); err != nil {
		return apperr.Internal(err)
	}
	for _, path := range slices.Sorted(maps.Keys(conds)) {
		if !slices.ContainsFunc(evs, func(t string) bool { return s.hasPath(t, path) }) {
			return apperr.Invalid("filter."+path, "filter condition %q: no event this endpoint receives (%s) has this field; "+
				"GET /v1/event_types shows their schemas.", path, strings.Join(evs, ", "))
		}
	}
	return nil
}

// NewService returns the endpoint service. allowPrivate admits URLs on
// private and loopback addresses (development and tests only).
func NewService(store Store, queue outbox.Enqueuer, keys *keyring.Keyring, allowPrivate bool, now func() time.Time, onEnqueueErr func(error)) *Service {
	certs, _ := store.(ClientCertStore) // internal/store keeps them; nil makes the certificate routes fail
	return &Service{store: store, queue: queue, keys: keys, allowPrivate: allowPrivate, now: now, onEnqueue: onEnqueueErr, certs: certs}
}

// CreateParams is the body of POST /v1/me/webhook_endpoints.
type CreateParams struct {
	URL         *string  `json:"url"`
	Events      []string `json:"events"`
	Description *string  `json:"description"`
	Environment *string  `json:"environment"`
	Ordered     *bool    `json:"ordered"`
	// Filter is absent (nil) or JSON null for none, else checked by
	// ParseFilter.
	Filter json.RawMessage `json:"filter,omitempty"`
	// Auth is the receiver authentication (an object with "type"), absent
	// (nil) or JSON null for none.
	Auth json.RawMessage `json:"auth,omitempty"`
	// Headers are the static headers (an object of name to value), absent
	// (nil) or JSON null for none.
	Headers json.RawMessage `json:"headers,omitempty"`
}

// UpdateParams is the body of PATCH /v1/me/webhook_endpoints/:id.
type UpdateParams struct {
	URL         *string  `json:"url"`
	Events      []string `json:"events"`
	Active      *bool    `json:"active"`
	Description *string  `json:"description"`
	Environment *string  `json:"environment"`
	Ordered     *bool    `json:"ordered"`
	// Filter is absent (nil) or JSON null for none, else checked by
	// ParseFilter.
	Filter json.RawMessage `json:"filter,omitempty"`
	// Auth replaces the receiver authentication; JSON null removes it,
	// absent (nil) leaves it.
	Auth json.RawMessage `json:"auth,omitempty"`
	// Headers replace the whole set of static headers; JSON null or {}
	// clears them, absent (nil) leaves them.
	Headers json.RawMessage `json:"headers,omitempty"`
}

func (s *Service) stamp() time.Time { return s.now().UTC().Truncate(time.Millisecond) }

func notFound() error { return apperr.NotFound("webhook_endpoint") }

// Created is the answer to an endpoint creation: the first response, or the
// stored one replayed for a repeated Idempotency-Key.
type Created struct {
	Response idempotency.Response
	Replayed bool
}

// Create registers an endpoint and answers with render(endpoint, secret):
// the secret exists in clear only in that answer. With an Idempotency-Key
// the answer is stored with the endpoint, in the same transaction, sealed
// with ENCRYPTION_KEY (it holds the secret), and a repeat of the request
// within 24 hours gets it back, secret included, creating nothing; another
// request under the key gets idempotency_key_reused, one while the first
// still runs idempotency_key_in_use.
func (s *Service) Create(ctx context.Context, merchantID, environment string, p CreateParams, idem *idempotency.Request, render func(Endpoint, string) (idempotency.Response, error)) (Created, error) {
	e, secret, err := s.newEndpoint(merchantID, environment, p)
	if err != nil {
		return Created{}, err
	}
	first, err := render(e, secret)
	if err != nil {
		return Created{}, apperr.Internal(err)
	}
	stored := first
	if idem != nil {
		if stored.Body, err = s.keys.Seal(keyring.PurposeWebhook, first.Body, idempotencyAAD(merchantID, idem.Key)); err != nil {
			return Created{}, apperr.Internal(err)
		}
	}
	replay, err := s.store.CreateEndpoint(ctx, e, idem, stored)
	if err != nil {
		return Created{}, err
	}
	if replay == nil {
		return Created{Response: first}, nil
	}
	body, err := s.keys.Open(keyring.PurposeWebhook, replay.Body, idempotencyAAD(merchantID, idem.Key))
	if err != nil {
		return Created{}, apperr.Internal(fmt.Errorf("webhooks: open the stored answer of an idempotency key: %w", err))
	}
	return Created{Response: idempotency.Response{Status: replay.Status, Body: body}, Replayed: true}, nil
}

// idempotencyAAD binds a sealed stored answer to its merchant and key.
func idempotencyAAD(merchantID, key string) []byte {
	return []byte("idempotency\x00" + merchantID + "\x00" + key)
}

// newEndpoint checks the parameters and makes the endpoint and its secret.
func (s *Service) newEndpoint(merchantID, environment string, p CreateParams) (Endpoint, string, error) {
	if err := checkEnvironment(p.Environment); err != nil {
		return Endpoint{}, "", err
	}
	if p.URL == nil || *p.URL == "" {
		return Endpoint{}, "", apperr.Missing("url")
	}
	u, err := s.checkURL(*p.URL)
	if err != nil {
		return Endpoint{}, "", err
	}
	if p.Events == nil {
		return Endpoint{}, "", apperr.Missing("events")
	}
	evs, err := checkEvents(p.Events)
	if err != nil {
		return Endpoint{}, "", err
	}
	if err := checkDescription(p.Description); err != nil {
		return Endpoint{}, "", err
	}
	secret, err := NewSecret()
	if err != nil {
		return Endpoint{}, "", apperr.Internal(err)
	}
	now := s.stamp()
	filter, err := ParseFilter(p.Filter)
	if err != nil {
		return Endpoint{}, "", err
	}
	if err := s.checkFilterPaths(filter, evs); err != nil {
		return Endpoint{}, "", err
	}
	e := Endpoint{ID: ids.New("we"), MerchantID: merchantID, Environment: environment, URL: u, Events: evs,
		Active: true, Description: p.Description, Ordered: p.Ordered != nil && *p.Ordered, Filter: filter, CreatedAt: now, UpdatedAt: now}
	rc, err := s.parseReceiver(e.ID, e.URL, nil, p.Auth, p.Headers)
	if err != nil {
		return Endpoint{}, "", err
	}
	e.Auth, e.AuthSecretSealed, e.HeaderNames, e.HeadersSealed = rc.auth, rc.secretSealed, rc.headerNames, rc.headersSealed
	if e.SecretSealed, err = s.keys.Seal(keyring.PurposeWebhook, []byte(secret), []byte(e.ID)); err != nil {
		return Endpoint{}, "", apperr.Internal(err)
	}
	return e, secret, nil
}

// Get returns one of the merchant's endpoints.
func (s *Service) Get(ctx context.Context, merchantID, id string) (Endpoint, error) {
	if !ids.Valid("we", id) {
		return Endpoint{}, notFound()
	}
	return s.store.EndpointByID(ctx, merchantID, id)
}

// List returns a page of the merchant's endpoints, newest first.
func (s *Service) List(ctx context.Context, merchantID string, p listing.Params) (listing.Page[Endpoint], error) {
	return s.store.ListEndpoints(ctx, merchantID, p)
}

// Update changes an endpoint's URL, events, active flag or description.
func (s *Service) Update(ctx context.Context, merchantID, id string, p UpdateParams) (Endpoint, error) {
	if err := checkEnvironment(p.Environment); err != nil {
		return Endpoint{}, err
	}
	if !ids.Valid("we", id) {
		return Endpoint{}, notFound()
	}
	patch := Patch{Active: p.Active, Description: p.Description, Ordered: p.Ordered, At: s.stamp()}
	if p.URL != nil {
		u, err := s.checkURL(*p.URL)
		if err != nil {
			return Endpoint{}, err
		}
		patch.URL = &u
	}
	if p.Events != nil {
		evs, err := checkEvents(p.Events)
		if err != nil {
			return Endpoint{}, err
		}
		patch.Events = evs
	}
	if err := checkDescription(p.Description); err != nil {
		return Endpoint{}, err
	}
	if p.Filter != nil {
		f, err := ParseFilter(p.Filter)
		if err != nil {
			return Endpoint{}, err
		}
		evs := patch.Events
		if evs == nil && f != nil && s.hasPath != nil {
			cur, err := s.store.EndpointByID(ctx, merchantID, id)
			if err != nil {
				return Endpoint{}, err
			}
			evs = cur.Events
		}
		if err := s.checkFilterPaths(f, evs); err != nil {
			return Endpoint{}, err
		}
		patch.SetFilter, patch.Filter = true, f
	} else if patch.Events != nil && s.hasPath != nil {
		// New events, the same filter: its paths must still be ones these
		// events can have.
		cur, err := s.store.EndpointByID(ctx, merchantID, id)
		if err != nil {
			return Endpoint{}, err
		}
		if err := s.checkFilterPaths(cur.Filter, patch.Events); err != nil {
			return Endpoint{}, err
		}
	}
	if p.Auth != nil || p.Headers != nil || p.URL != nil {
		// Checked against what the endpoint keeps: an mtls endpoint's url
		// stays https, an oauth2 one sends no Authorization header of its own.
		cur, err := s.store.EndpointByID(ctx, merchantID, id)
		if err != nil {
			return Endpoint{}, err
		}
		u := cur.URL
		if patch.URL != nil {
			u = *patch.URL
		}
		rc, err := s.parseReceiver(id, u, &cur, p.Auth, p.Headers)
		if err != nil {
			return Endpoint{}, err
		}
		patch.SetAuth, patch.Auth, patch.AuthSecretSealed = rc.setAuth, rc.auth, rc.secretSealed
		patch.SetHeaders, patch.HeaderNames, patch.HeadersSealed = rc.setHeaders, rc.headerNames, rc.headersSealed
	}
	return s.store.UpdateEndpoint(ctx, merchantID, id, patch)
}

// Delete removes an endpoint; its pending deliveries stop.
func (s *Service) Delete(ctx context.Context, merchantID, id string) error {
	if !ids.Valid("we", id) {
		return notFound()
	}
	return s.store.DeleteEndpoint(ctx, merchantID, id, s.stamp())
}

// RotateSecret gives the endpoint a new secret; the old one keeps signing
// (X-Service-Signature-Previous) for RotationOverlap.
func (s *Service) RotateSecret(ctx context.Context, merchantID, id string) (Endpoint, string, error) {
	e, err := s.Get(ctx, merchantID, id)
	if err != nil {
		return Endpoint{}, "", err
	}
	secret, err := NewSecret()
	if err != nil {
		return Endpoint{}, "", apperr.Internal(err)
	}
	sealed, err := s.keys.Seal(keyring.PurposeWebhook, []byte(secret), []byte(e.ID))
	if err != nil {
		return Endpoint{}, "", apperr.Internal(err)
	}
	now := s.stamp()
	e, err = s.store.RotateSecret(ctx, merchantID, id, sealed, e.SecretSealed, now.Add(RotationOverlap), now)
	return e, secret, err
}

// Test sends one delivery of a sample event of the endpoint's first
// subscribed type, marked X-Service-Test; it is not stored as an event.
func (s *Service) Test(ctx context.Context, merchantID, id string, sample func(eventType string, at time.Time) (events.Event, error)) (Delivery, error) {
	e, err := s.Get(ctx, merchantID, id)
	if err != nil {
		return Delivery{}, err
	}
	now := s.stamp()
	ev, err := sample(e.Events[0], now)
	if err != nil {
		return Delivery{}, apperr.Internal(err)
	}
	d := Delivery{ID: ids.NewUUID(), EndpointID: e.ID, MerchantID: merchantID, EventID: ev.ID, EventType: ev.Type,
		Test: true, Status: StatusPending, NextAttemptAt: &now, CreatedAt: now, UpdatedAt: now, Sequence: 1}
	task, err := s.store.CreateTestDelivery(ctx, d, ev.Body)
	if err != nil {
		return Delivery{}, err
	}
	s.enqueue(ctx, task)
	return d, nil
}

// Deliveries lists an endpoint's deliveries with their attempts.
func (s *Service) Deliveries(ctx context.Context, merchantID, id, status string, p listing.Params) (listing.Page[Delivery], error) {
	if _, err := s.Get(ctx, merchantID, id); err != nil {
		return listing.Page[Delivery]{}, err
	}
	switch status {
	case "", StatusPending, StatusSucceeded, StatusFailed, StatusFiltered:
	default:
		return listing.Page[Delivery]{}, apperr.Invalid("status", "status must be pending, succeeded, failed or filtered.")
	}
	return s.store.ListDeliveries(ctx, merchantID, id, status, p)
}

// Stats counts the deliveries in an endpoint's log by what became of them.
func (s *Service) Stats(ctx context.Context, merchantID, id string) (Stats, error) {
	if _, err := s.Get(ctx, merchantID, id); err != nil {
		return Stats{}, err
	}
	return s.store.EndpointStats(ctx, id)
}

// Retry starts a new attempt chain for a failed delivery.
func (s *Service) Retry(ctx context.Context, merchantID, deliveryID string) (Delivery, error) {
	if !ids.ValidUUID(deliveryID) {
		return Delivery{}, apperr.NotFound("webhook_delivery")
	}
	d, task, err := s.store.RetryDelivery(ctx, merchantID, deliveryID, s.stamp())
	if err != nil {
		return Delivery{}, err
	}
	s.enqueue(ctx, task)
	return d, nil
}

// Recover re-sends every failed delivery of the endpoint created since the
// given time; with dryRun it only counts them.
func (s *Service) Recover(ctx context.Context, merchantID, id string, since time.Time, dryRun bool) (int64, error) {
	if _, err := s.Get(ctx, merchantID, id); err != nil {
		return 0, err
	}
	n, tasks, err := s.store.RecoverDeliveries(ctx, merchantID, id, since, dryRun, s.stamp())
	if err != nil {
		return 0, err
	}
	for _, t := range tasks {
		s.enqueue(ctx, t)
	}
	return n, nil
}

func (s *Service) enqueue(ctx context.Context, t outbox.Task) {
	if err := s.queue.Enqueue(ctx, t); err != nil && s.onEnqueue != nil {
		s.onEnqueue(err)
	}
}

func checkEnvironment(env *string) error {
	if env == nil || *env == "sandbox" {
		return nil
	}
	if *env == "live" {
		return apperr.LiveMode()
	}
	return apperr.Invalid("environment", "environment must be sandbox or live.")
}

func checkDescription(d *string) error {
	if d != nil && utf8.RuneCountInString(*d) > 500 {
		return apperr.Invalid("description", "description must be at most 500 characters.")
	}
	return nil
}

func checkEvents(list []string) ([]string, error) {
	if len(list) == 0 {
		return nil, apperr.Invalid("events", "events must name at least one event type.")
	}
	seen := map[string]bool{}
	out := make([]string, 0, len(list))
	for _, e := range list {
		if !events.Known(e) {
			return nil, apperr.Invalid("events", "Unknown event type %q; use %s.", e, strings.Join(events.Types, ", "))
		}
		if !seen[e] {
			seen[e] = true
			out = append(out, e)
		}
	}
	return out, nil
}

// checkURL accepts an absolute http(s) URL without credentials; unless
// private networks are allowed, a literal private, loopback, link-local or
// metadata address (or localhost) is refused here too. Names are checked
// again on the resolved address when a delivery dials.
func (s *Service) checkURL(raw string) (string, error) { return s.checkURLAs("url", raw) }

// checkURLAs is checkURL for the URL in parameter param (an OAuth 2.0
// token URL is checked by the same rules).
func (s *Service) checkURLAs(param, raw string) (string, error) {
	bad := func(why string) error { return apperr.Invalid(param, "%s %s.", param, why) }
	if len(raw) > 2048 {
		return "", bad("must be at most 2048 characters")
	}
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" || u.Opaque != "" {
		return "", bad("must be an absolute http:// or https:// URL")
	}
	if u.User != nil {
		return "", bad("must not carry a user name or password")
	}
	if u.Fragment != "" {
		return "", bad("must not have a fragment")
	}
	if !s.allowPrivate {
		host := strings.ToLower(strings.TrimSuffix(u.Hostname(), "."))
		if host == "localhost" || strings.HasSuffix(host, ".localhost") || host == "metadata.google.internal" {
			return "", bad("must not point at this machine or a private network")
		}
		if a, err := netip.ParseAddr(host); err == nil && !publicAddr(a.Unmap()) {
			return "", bad("must not point at a private, loopback, link-local or metadata address")
		}
		if a, ok := inetAton(host); ok && !publicAddr(a) {
			return "", bad("must not point at a private, loopback, link-local or metadata address")
		}
	}
	return u.String(), nil
}

// inetAton reads the legacy numeric IPv4 forms some resolvers accept
// ("127.1", "2130706433", "0x7f000001", "017700000001").
func inetAton(host string) (netip.Addr, bool) {
	parts := strings.Split(host, ".")
	if len(parts) > 4 {
		return netip.Addr{}, false
	}
	nums := make([]uint64, len(parts))
	for i, p := range parts {
		n, err := strconv.ParseUint(p, 0, 32)
		if err != nil {
			return netip.Addr{}, false
		}
		nums[i] = n
	}
	var v uint64
	last := len(nums) - 1
	for i := 0; i < last; i++ {
		if nums[i] > 255 {
			return netip.Addr{}, false
		}
		v |= nums[i] << (24 - 8*i)
	}
	if nums[last] >= 1<<(8*(4-last)) {
		return netip.Addr{}, false
	}
	v |= nums[last]
	return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)}), true
}

var cgnat = netip.MustParsePrefix("100.64.0.0/10")

func publicAddr(a netip.Addr) bool {
	return a.IsGlobalUnicast() && !a.IsPrivate() && !cgnat.Contains(a)
}
