package resource

import "encoding/json"

// Event is what Gatehouse tells a merchant happened: the body of a
// webhook and of GET /v1/events.
type Event struct {
	ID        string    `json:"id"`
	Object    string    `json:"object"` // "event"
	EventType string    `json:"event_type"`
	CreatedAt string    `json:"created_at"`
	Data      EventData `json:"data"`
}

// EventData is the object an event is about, as it is after the change:
// the charge, and for a refund event the refund too.
type EventData struct {
	Object          string           `json:"object"` // "charge", "refund", "payout", "dispute" or "webhook_endpoint"
	Charge          *Charge          `json:"charge,omitempty"`
	Refund          *Refund          `json:"refund,omitempty"`
	Payout          *Payout          `json:"payout,omitempty"`
	Dispute         *Dispute         `json:"dispute,omitempty"`
	WebhookEndpoint *WebhookEndpoint `json:"webhook_endpoint,omitempty"`
}

// EventType is one type of event the gateway sends, as GET /v1/event_types
// lists it: Schema is the JSON Schema (2020-12, self-contained) of its
// webhook body and Example a body of that type.
type EventType struct {
	Name        string          `json:"name"`
	Description string          `json:"description"`
	Schema      json.RawMessage `json:"schema"`
	Example     json.RawMessage `json:"example"`
	Deprecated  bool            `json:"deprecated"`
}
