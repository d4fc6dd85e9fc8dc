package resource

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
	Object  string   `json:"object"` // "charge", "refund", "payout" or "dispute"
	Charge  *Charge  `json:"charge,omitempty"`
	Refund  *Refund  `json:"refund,omitempty"`
	Payout  *Payout  `json:"payout,omitempty"`
	Dispute *Dispute `json:"dispute,omitempty"`
}
