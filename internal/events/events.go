// Package events defines what Gatehouse tells merchants happened: the event
// types (Catalogue, which api/openapi.yaml and GET /v1/event_types show) and
// the rendering of the event body
// (resource.Event), which is both what GET /v1/events returns and what a
// webhook delivers. Events are written in the same transaction as the state
// change they describe.
package events

import (
	"context"
	"encoding/json"
	"time"

	"github.com/gatehouse-pay/gatehouse/internal/listing"
	"github.com/gatehouse-pay/gatehouse/internal/resource"
)

// Event types.
const (
	ChargeCreated = "charge.created"
	// ChargeRequiresAction: the charge waits for the cardholder's
	// authentication (3-D Secure).
	ChargeRequiresAction = "charge.requires_action"
	ChargeCaptured       = "charge.captured"
	ChargeFailed         = "charge.failed"
	ChargeVoided         = "charge.voided"
	// ChargeCaptureFailed: a capture the provider had received failed; the
	// charge is authorized again.
	ChargeCaptureFailed = "charge.capture_failed"
	ChargeRefunded      = "charge.refunded"
	RefundCreated       = "refund.created"
	RefundSucceeded     = "refund.succeeded"
	// Payouts: made, paid into the merchant's bank, or failed (its money
	// back in the balance).
	PayoutCreated = "payout.created"
	PayoutPaid    = "payout.paid"
	PayoutFailed  = "payout.failed"
	// Disputes: opened, changed (a status, the evidence, its deadline),
	// closed (won, lost, or an inquiry closed), and the money withdrawn
	// from the balance or reinstated.
	DisputeCreated         = "charge.dispute.created"
	DisputeUpdated         = "charge.dispute.updated"
	DisputeClosed          = "charge.dispute.closed"
	DisputeFundsWithdrawn  = "charge.dispute.funds_withdrawn"
	DisputeFundsReinstated = "charge.dispute.funds_reinstated"
	// Operational events, about the merchant's own webhook endpoints: its
	// deliveries have failed for WEBHOOK_FAILING_AFTER, it was disabled, or
	// it delivered again after failing. Never sent to the endpoint they are
	// about.
	EndpointFailing   = "webhook_endpoint.failing"
	EndpointDisabled  = "webhook_endpoint.disabled"
	EndpointRecovered = "webhook_endpoint.recovered"
)

// Types lists every event type in the order of api/openapi.yaml: the
// names of Catalogue.
var Types = catalogueNames()

// Known reports whether t is an event type of Catalogue.
func Known(t string) bool {
	_, ok := Lookup(t)
	return ok
}

// Event is one stored event. Body is the JSON of the webhook body, rendered
// once when the event is written, so every reader and every delivery attempt
// sees the same bytes.
type Event struct {
	ID          string
	MerchantID  string
	Environment string
	Type        string
	Body        json.RawMessage
	CreatedAt   time.Time
	// Sequence is the event's number among its object's events (0 when
	// unknown); read by the event stream only.
	Sequence int
}

// New renders an event (resource.Event). charge and refund are the public
// forms of the objects as they are after the change; refund is nil for
// charge events.
func New(id, merchantID, environment, typ string, at time.Time, charge resource.Charge, refund *resource.Refund) (Event, error) {
	data := resource.EventData{Object: "charge", Charge: &charge}
	if refund != nil {
		data.Object, data.Refund = "refund", refund
	}
	body, err := json.Marshal(resource.Event{ID: id, Object: "event", EventType: typ, CreatedAt: Timestamp(at), Data: data})
	if err != nil {
		return Event{}, err
	}
	return Event{ID: id, MerchantID: merchantID, Environment: environment, Type: typ, Body: body, CreatedAt: at}, nil
}

// NewPayout renders an event of a payout, as it is after the change.
func NewPayout(id, merchantID, environment, typ string, at time.Time, payout resource.Payout) (Event, error) {
	body, err := json.Marshal(resource.Event{ID: id, Object: "event", EventType: typ, CreatedAt: Timestamp(at),
		Data: resource.EventData{Object: "payout", Payout: &payout}})
	if err != nil {
		return Event{}, err
	}
	return Event{ID: id, MerchantID: merchantID, Environment: environment, Type: typ, Body: body, CreatedAt: at}, nil
}

// NewDispute renders an event of a dispute, as it is after the change.
func NewDispute(id, merchantID, environment, typ string, at time.Time, dispute resource.Dispute) (Event, error) {
	body, err := json.Marshal(resource.Event{ID: id, Object: "event", EventType: typ, CreatedAt: Timestamp(at),
		Data: resource.EventData{Object: "dispute", Dispute: &dispute}})
	if err != nil {
		return Event{}, err
	}
	return Event{ID: id, MerchantID: merchantID, Environment: environment, Type: typ, Body: body, CreatedAt: at}, nil
}

// NewEndpoint renders an operational event about a webhook endpoint, as it
// is after the change.
func NewEndpoint(id, merchantID, environment, typ string, at time.Time, endpoint resource.WebhookEndpoint) (Event, error) {
	body, err := json.Marshal(resource.Event{ID: id, Object: "event", EventType: typ, CreatedAt: Timestamp(at),
		Data: resource.EventData{Object: "webhook_endpoint", WebhookEndpoint: &endpoint}})
	if err != nil {
		return Event{}, err
	}
	return Event{ID: id, MerchantID: merchantID, Environment: environment, Type: typ, Body: body, CreatedAt: at}, nil
}

// Timestamp renders t as RFC 3339 UTC with milliseconds, the form of every
// time Gatehouse shows.
func Timestamp(t time.Time) string { return t.UTC().Format("2006-01-02T15:04:05.000Z") }

// Filter narrows a list of events.
type Filter struct {
	Type string
	// ChargeID keeps the events of one charge: its own and its refunds'.
	ChargeID string
}

// Store reads events; those past their retention (EVENT_RETENTION) are
// gone, as the worker drops them by partition. EventByID returns
// KindNotFound for an unknown id or an event of another merchant.
type Store interface {
	EventByID(ctx context.Context, merchantID, id string) (Event, error)
	ListEvents(ctx context.Context, merchantID string, f Filter, p listing.Params) (listing.Page[Event], error)
}

// Service reads events.
type Service struct {
	store Store
	now   func() time.Time
}

// NewService returns a Service.
func NewService(store Store, now func() time.Time) *Service { return &Service{store: store, now: now} }

// Get returns one of the merchant's events.
func (s *Service) Get(ctx context.Context, merchantID, id string) (Event, error) {
	return s.store.EventByID(ctx, merchantID, id)
}

// List returns a page of the merchant's events, newest first.
func (s *Service) List(ctx context.Context, merchantID string, f Filter, p listing.Params) (listing.Page[Event], error) {
	return s.store.ListEvents(ctx, merchantID, f, p)
}
