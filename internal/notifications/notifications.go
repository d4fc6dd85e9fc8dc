// Package notifications takes what providers report by notification after
// their first answer: Stripe's events and, for the providers that settle
// captures, cancels and refunds that way, their notification items.
//
// A notification reaches the API at its connector's notification URL,
// signed by the provider. The API checks the signature with the
// connector's secret, stores the notification (deduplicated on the
// provider's own identity of it) together with the outbox row of the task
// that applies it, and only then acknowledges it: an acknowledged
// notification is never lost. The worker's task applies each stored
// notification once, as a move the charge's state machine allows; a resent,
// late or out-of-order notification changes nothing twice.
package notifications

import (
	"context"
	"encoding/json"
	"time"

	"github.com/gatehouse-pay/gatehouse/internal/connectors"
	"github.com/gatehouse-pay/gatehouse/internal/events"
	"github.com/gatehouse-pay/gatehouse/internal/ids"
	"github.com/gatehouse-pay/gatehouse/internal/listing"
)

// Outcomes of a notification.
const (
	// OutcomeReceived: stored and acknowledged; the worker has not applied
	// it yet.
	OutcomeReceived = "received"
	// OutcomeApplied: it moved, or set in motion, what it reports.
	OutcomeApplied = "applied"
	// OutcomeDuplicate: the provider sent it again, or what it reports was
	// already so; it changed nothing.
	OutcomeDuplicate = "duplicate"
	// OutcomeIgnored: a type the gateway does not act on, or about nothing
	// the gateway holds.
	OutcomeIgnored = "ignored"
)

// MaxBody is the largest notification body taken (1 MiB).
const MaxBody = 1 << 20

// ValidID reports whether id can be a notification's.
func ValidID(id string) bool { return ids.ValidUUID(id) }

// Notification is one notification as stored.
type Notification struct {
	ID          string
	ConnectorID string
	MerchantID  string
	Provider    string
	// ProviderEventID is the provider's id of what it reports: Stripe's
	// event id, Adyen's pspReference.
	ProviderEventID string
	// DedupKey is the provider's identity of the notification: two with
	// the same key are the same notification sent twice.
	DedupKey string
	Type     string
	// Payload is the notification as the provider sent it (one item of a
	// batch), for the worker.
	Payload     json.RawMessage
	Outcome     string
	ChargeID    *string
	ReceivedAt  time.Time
	ProcessedAt *time.Time
}

// View is the public form (api/openapi.yaml, ProviderNotification): no
// payload, so neither secrets nor card data.
type View struct {
	ID              string  `json:"id"`
	Object          string  `json:"object"` // "provider_notification"
	Connector       string  `json:"connector"`
	Provider        string  `json:"provider"`
	ProviderEventID string  `json:"provider_event_id"`
	Type            string  `json:"type"`
	Outcome         string  `json:"outcome"`
	Charge          *string `json:"charge"`
	ReceivedAt      string  `json:"received_at"`
	ProcessedAt     *string `json:"processed_at"`
}

// View returns the public form.
func (n Notification) View() View {
	v := View{ID: n.ID, Object: "provider_notification", Connector: n.ConnectorID, Provider: n.Provider,
		ProviderEventID: n.ProviderEventID, Type: n.Type, Outcome: n.Outcome, Charge: n.ChargeID,
		ReceivedAt: events.Timestamp(n.ReceivedAt)}
	if n.ProcessedAt != nil {
		at := events.Timestamp(*n.ProcessedAt)
		v.ProcessedAt = &at
	}
	return v
}

// MarshalJSON renders the public form.
func (n Notification) MarshalJSON() ([]byte, error) { return json.Marshal(n.View()) }

// Store persists notifications.
type Store interface {
	// ConnectorForWork reads a connector by id, of any merchant, deleted
	// or not: a deleted connector's payments are still in flight.
	ConnectorForWork(ctx context.Context, id string) (connectors.Connector, error)
	// ConnectorByID reads a live connector of the merchant (NotFound for
	// another merchant's).
	ConnectorByID(ctx context.Context, merchantID, id string) (connectors.Connector, error)
	// ReceiveNotifications stores ns in one transaction. The first of a
	// dedup key is stored as received, with the outbox row of its apply
	// task, or as ignored (no task) when its Outcome says so already; one
	// whose key is already stored is stored as a duplicate. It returns ns
	// with their outcomes set.
	ReceiveNotifications(ctx context.Context, ns []Notification) ([]Notification, error)
	// ListNotifications pages the connector's notifications, newest first.
	ListNotifications(ctx context.Context, connectorID string, p listing.Params) (listing.Page[Notification], error)
}
