// Package charges holds the Charge, its state machine and the services that
// create it on the API side and carry it through the provider on the worker
// side. Every move is a conditional update on the charge's current state, so
// two workers or two requests can never both move one charge; the event that
// announces the move and the outbox row that asks for the next step are written
// in the same transaction.
package charges

import (
	"encoding/json"
	"time"

	"github.com/gatehouse-pay/gatehouse/internal/events"
	"github.com/gatehouse-pay/gatehouse/internal/resource"
)

// Statuses of api/openapi.yaml.
const (
	StatusCreated = "created"
	// StatusRequiresAction: the issuer asked the cardholder to
	// authenticate (3-D Secure); the charge waits for the answer.
	StatusRequiresAction = "requires_action"
	StatusAuthorized     = "authorized"
	// StatusCapturing and StatusVoiding: a provider that settles by
	// notification (Adyen) received the capture or void; its notification
	// settles the charge.
	StatusCapturing = "capturing"
	StatusVoiding   = "voiding"
	StatusCaptured  = "captured"
	StatusFailed    = "failed"
	StatusVoided    = "voided"
	StatusRefunded  = "refunded"
)

// Statuses lists every status.
var Statuses = []string{StatusCreated, StatusRequiresAction, StatusAuthorized, StatusCapturing, StatusVoiding, StatusCaptured, StatusFailed, StatusVoided, StatusRefunded}

// Pending actions requested through the API and carried out by the worker.
const (
	ActionCapture = "capture"
	ActionVoid    = "void"
)

// Authentication statuses of a charge.
const (
	AuthNotRequired = "not_required"
	AuthPending     = "pending"
	AuthSucceeded   = "succeeded"
	AuthFailed      = "failed"
)

// Authentication is the cardholder authentication (3-D Secure) of a charge.
type Authentication struct {
	Status      string
	CompletedAt *time.Time
	// NextActionURL is the challenge page while the charge requires action.
	NextActionURL *string
	// ExpiresAt is until when the cardholder may answer.
	ExpiresAt *time.Time
	// Answer is the cardholder's answer as the challenge page recorded it
	// (providers.Answer*), until the worker settles the charge with it.
	Answer *string
}

// Card is what a charge keeps of its card: never the number or the CVC.
type Card struct {
	Brand       string
	Last4       *string
	ExpMonth    *int
	ExpYear     *int
	Fingerprint *string
}

// View returns the public form.
func (c Card) View() resource.Card {
	return resource.Card{Brand: c.Brand, Last4: c.Last4, ExpMonth: c.ExpMonth, ExpYear: c.ExpYear, Fingerprint: c.Fingerprint}
}

// Charge is a payment of Amount in Currency through Provider.
type Charge struct {
	ID                string
	MerchantID        string
	Environment       string
	Amount            int64
	AmountCaptured    int64
	AmountRefunded    int64
	AmountRefundHeld  int64 // refunds requested and not yet settled
	Currency          string
	Status            string
	PendingAction     *string
	CaptureAmount     *int64
	PaymentMethod     string
	Capture           bool
	Card              Card
	CardToken         *string
	Provider          string
	ProviderReference *string
	Description       *string
	Metadata          map[string]string
	FailureCode       *string
	FailureMessage    *string
	CreatedAt         time.Time
	UpdatedAt         time.Time

	CustomerID      *string
	PaymentMethodID *string // the customer's saved card the charge used
	OffSession      bool
	ReturnURL       *string
	Authentication  Authentication
	// SavedCardAuthenticated (read for the worker): the cardholder
	// authenticated an earlier charge of the saved card.
	SavedCardAuthenticated bool

	// AmountDisputed is what the charge's disputes hold withdrawn; read
	// with the charge's row locked when a refund is decided, never stored
	// on it.
	AmountDisputed int64
	// ConnectorID is the connector of the current attempt, the one that
	// took the money once the charge is settled; nil for charges made
	// before connectors.
	ConnectorID *string
	// Route is the connectors planned for the charge, in order.
	Route []RouteStep
	// Attempts are the attempts begun, the last the current one.
	Attempts []Attempt
	// attemptStarted is when this run began the current attempt.
	attemptStarted time.Time
}

// Refundable is what can still be refunded.
func (c Charge) Refundable() int64 { return c.AmountCaptured - c.AmountRefunded - c.AmountRefundHeld }

// Next action types.
const (
	NextActionRedirect    = "redirect_to_url"
	NextActionGatehouseJS = "use_gatehouse_js"
)

// View returns the public form.
func (c Charge) View() resource.Charge {
	md := c.Metadata
	if md == nil {
		md = map[string]string{}
	}
	pm := c.PaymentMethod
	if c.PaymentMethodID != nil {
		pm = *c.PaymentMethodID
	}
	auth := resource.Authentication{Status: c.Authentication.Status}
	if auth.Status == "" {
		auth.Status = AuthNotRequired
	}
	if t := c.Authentication.CompletedAt; t != nil {
		ts := events.Timestamp(*t)
		auth.CompletedAt = &ts
	}
	return resource.Charge{
		ID: c.ID, Object: "charge", Amount: c.Amount, AmountCaptured: c.AmountCaptured, AmountRefunded: c.AmountRefunded,
		Currency: c.Currency, Status: c.Status, PaymentMethod: pm, Customer: c.CustomerID, OffSession: c.OffSession,
		Authentication: auth, NextAction: c.nextAction(), Connector: c.ConnectorID, Attempts: attemptViews(c.Attempts),
		Card:     c.Card.View(),
		Provider: c.Provider, ProviderReference: c.ProviderReference, Environment: c.Environment,
		Capture: c.Capture, Description: c.Description, Metadata: md,
		FailureCode: c.FailureCode, FailureMessage: c.FailureMessage,
		CreatedAt: events.Timestamp(c.CreatedAt), UpdatedAt: events.Timestamp(c.UpdatedAt),
	}
}

// nextAction is the charge's next action while it requires action.
func (c Charge) nextAction() *resource.NextAction {
	if c.Status != StatusRequiresAction || c.Authentication.NextActionURL == nil {
		return nil
	}
	if c.ReturnURL == nil {
		return &resource.NextAction{Type: NextActionGatehouseJS, UseGatehouseJS: &struct{}{}}
	}
	return &resource.NextAction{Type: NextActionRedirect, RedirectToURL: &resource.RedirectToURL{URL: *c.Authentication.NextActionURL, ReturnURL: *c.ReturnURL}}
}

// MarshalJSON renders the public form.
func (c Charge) MarshalJSON() ([]byte, error) { return json.Marshal(c.View()) }
