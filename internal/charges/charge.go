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
)

// Statuses of api/openapi.yaml.
const (
	StatusCreated    = "created"
	StatusAuthorized = "authorized"
	StatusCaptured   = "captured"
	StatusFailed     = "failed"
	StatusVoided     = "voided"
	StatusRefunded   = "refunded"
)

// Statuses lists every status.
var Statuses = []string{StatusCreated, StatusAuthorized, StatusCaptured, StatusFailed, StatusVoided, StatusRefunded}

// Pending actions requested through the API and carried out by the worker.
const (
	ActionCapture = "capture"
	ActionVoid    = "void"
)

// Card is what a charge keeps of its card: never the number or the CVC.
type Card struct {
	Brand       string
	Last4       *string
	ExpMonth    *int
	ExpYear     *int
	Fingerprint *string
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
}

// Refundable is what can still be refunded.
func (c Charge) Refundable() int64 { return c.AmountCaptured - c.AmountRefunded - c.AmountRefundHeld }

// CardView is the public form of Card.
type CardView struct {
	Brand       string  `json:"brand"`
	Last4       *string `json:"last4"`
	ExpMonth    *int    `json:"exp_month"`
	ExpYear     *int    `json:"exp_year"`
	Fingerprint *string `json:"fingerprint"`
}

// View is the public form of a charge, in API responses and event bodies.
type View struct {
	ID                string            `json:"id"`
	Object            string            `json:"object"`
	Amount            int64             `json:"amount"`
	AmountCaptured    int64             `json:"amount_captured"`
	AmountRefunded    int64             `json:"amount_refunded"`
	Currency          string            `json:"currency"`
	Status            string            `json:"status"`
	PaymentMethod     string            `json:"payment_method"`
	Card              CardView          `json:"card"`
	Provider          string            `json:"provider"`
	ProviderReference *string           `json:"provider_reference"`
	Environment       string            `json:"environment"`
	Capture           bool              `json:"capture"`
	Description       *string           `json:"description"`
	Metadata          map[string]string `json:"metadata"`
	FailureCode       *string           `json:"failure_code"`
	FailureMessage    *string           `json:"failure_message"`
	CreatedAt         string            `json:"created_at"`
	UpdatedAt         string            `json:"updated_at"`
}

// View returns the public form.
func (c Charge) View() View {
	md := c.Metadata
	if md == nil {
		md = map[string]string{}
	}
	return View{
		ID: c.ID, Object: "charge", Amount: c.Amount, AmountCaptured: c.AmountCaptured, AmountRefunded: c.AmountRefunded,
		Currency: c.Currency, Status: c.Status, PaymentMethod: c.PaymentMethod,
		Card:     CardView{Brand: c.Card.Brand, Last4: c.Card.Last4, ExpMonth: c.Card.ExpMonth, ExpYear: c.Card.ExpYear, Fingerprint: c.Card.Fingerprint},
		Provider: c.Provider, ProviderReference: c.ProviderReference, Environment: c.Environment,
		Capture: c.Capture, Description: c.Description, Metadata: md,
		FailureCode: c.FailureCode, FailureMessage: c.FailureMessage,
		CreatedAt: events.Timestamp(c.CreatedAt), UpdatedAt: events.Timestamp(c.UpdatedAt),
	}
}

// MarshalJSON renders the public form.
func (c Charge) MarshalJSON() ([]byte, error) { return json.Marshal(c.View()) }
