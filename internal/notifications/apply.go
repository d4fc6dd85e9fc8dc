package notifications

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gatehouse-pay/gatehouse/internal/apperr"
	"github.com/gatehouse-pay/gatehouse/internal/charges"
	"github.com/gatehouse-pay/gatehouse/internal/connectors"
	"github.com/gatehouse-pay/gatehouse/internal/ids"
	"github.com/gatehouse-pay/gatehouse/internal/ledger"
	"github.com/gatehouse-pay/gatehouse/internal/outbox"
	"github.com/gatehouse-pay/gatehouse/internal/providers"
	"github.com/gatehouse-pay/gatehouse/internal/providers/adyen"
)

// Payment is the charge a notification names, as the worker needs it.
type Payment struct {
	ChargeID string
	// InFlight are the outbox tasks of the work still in flight on the
	// charge and its pending refunds: an authorization, capture or void
	// the provider has not settled, a refund it has not either.
	InFlight []outbox.Task
}

// WorkStore is what the worker reads and writes.
type WorkStore interface {
	NotificationForWork(ctx context.Context, id string) (Notification, error)
	// PaymentByReference finds the merchant's charge with the provider
	// reference; found is false when there is none.
	PaymentByReference(ctx context.Context, merchantID, reference string) (p Payment, found bool, err error)
	// RefundOfCharge reports whether refund refundID is one of the charge's.
	RefundOfCharge(ctx context.Context, refundID, chargeID string) (bool, error)
	// FinishNotification records the outcome of a notification still
	// received, and deletes its task's outbox row.
	FinishNotification(ctx context.Context, id, outcome string, chargeID *string, at time.Time) error
}

// Waker runs a task now: one waiting for its retry runs at once, one not
// queued is enqueued.
type Waker interface {
	Wake(ctx context.Context, t outbox.Task) error
}

// Metrics counts notifications by provider and outcome, in both
// processes: the API counts the duplicates it stored and the refused, the
// worker what applying the others did.
type Metrics struct {
	Notifications *prometheus.CounterVec
}

// NewMetrics registers the counter on reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{Notifications: prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "gatehouse", Name: "provider_notifications_total",
		Help: "Provider notifications, by provider and outcome: refused (bad signature, API), duplicate (API or worker), applied and ignored (worker).",
	}, []string{"provider", "outcome"})}
	reg.MustRegister(m.Notifications)
	for _, p := range []string{connectors.ProviderStripe, connectors.ProviderAdyen} {
		for _, o := range []string{OutcomeRefused, OutcomeApplied, OutcomeDuplicate, OutcomeIgnored} {
			m.Notifications.WithLabelValues(p, o)
		}
	}
	return m
}

// OutcomeRefused labels, in the metric only, a notification refused for
// its signature: it is never stored.
const OutcomeRefused = "refused"

// Count adds one notification of provider with outcome.
func (m *Metrics) Count(provider, outcome string) {
	if m != nil {
		m.Notifications.WithLabelValues(provider, outcome).Inc()
	}
}

// ChargeConfirmer settles a capture or void the provider received
// (charges.Processor).
type ChargeConfirmer interface {
	Confirm(ctx context.Context, chargeID string, cf charges.Confirmation) (bool, error)
}

// RefundConfirmer settles a refund the provider received
// (refunds.Processor).
type RefundConfirmer interface {
	Confirm(ctx context.Context, refundID string, success bool, providerReference string) (bool, error)
}

// PayoutImporter books a payout a provider reports (ledger.Importer).
type PayoutImporter interface {
	Import(ctx context.Context, merchantID, connectorID string, r ledger.Reported) (bool, error)
}

// Applier is the worker side.
type Applier struct {
	payouts   PayoutImporter
	providers providers.Resolver
	store     WorkStore
	waker     Waker
	metrics   *Metrics
	log       *slog.Logger
	now       func() time.Time
	charges   ChargeConfirmer
	refunds   RefundConfirmer
	disputes  DisputeApplier
}

// WithConfirmers sets what settles the captures, voids and refunds of the
// providers that settle by notification (Adyen).
func (a *Applier) WithConfirmers(c ChargeConfirmer, r RefundConfirmer) *Applier {
	a.charges, a.refunds = c, r
	return a
}

// WithPayouts makes the applier import the payouts a provider reports
// (Stripe's payout.* events), read from the provider's own books through
// reg.
func (a *Applier) WithPayouts(im PayoutImporter, reg providers.Resolver) *Applier {
	a.payouts, a.providers = im, reg
	return a
}

// NewApplier returns the worker side.
func NewApplier(store WorkStore, waker Waker, metrics *Metrics, log *slog.Logger, now func() time.Time) *Applier {
	return &Applier{store: store, waker: waker, metrics: metrics, log: log, now: now}
}

// Apply applies notification id once. A notification already applied (a
// task that ran twice) changes nothing.
//
// What a notification reports is never taken on its word: it wakes the
// task of the work in flight that it is about (an authorization,
// capture, void or refund the provider had not settled), and that task
// reads the provider's own books, as it would on its next retry, and moves
// the charge only as its state machine allows. A notification about work
// already settled, or about an object the gateway does not hold, changes
// nothing.
func (a *Applier) Apply(ctx context.Context, id string) error {
	n, err := a.store.NotificationForWork(ctx, id)
	if err != nil {
		if apperr.KindOf(err) == apperr.KindNotFound {
			return nil // retention removed it
		}
		return err
	}
	if n.Outcome != OutcomeReceived {
		return nil
	}
	outcome, chargeID, err := a.apply(ctx, n)
	if err != nil {
		return err
	}
	if err := a.store.FinishNotification(ctx, n.ID, outcome, chargeID, a.now().UTC()); err != nil {
		return err
	}
	a.metrics.Count(n.Provider, outcome)
	return nil
}

func (a *Applier) apply(ctx context.Context, n Notification) (outcome string, chargeID *string, err error) {
	if isDispute(n.Provider, n.Type) {
		return a.dispute(ctx, n)
	}
	var reference string
	switch n.Provider {
	case connectors.ProviderStripe:
		if strings.HasPrefix(n.Type, "payout.") {
			return a.stripePayout(ctx, n)
		}
		reference = stripePayment(n)
	case connectors.ProviderAdyen:
		return a.adyen(ctx, n)
	}
	if reference == "" {
		return OutcomeIgnored, nil, nil
	}
	p, found, err := a.store.PaymentByReference(ctx, n.MerchantID, reference)
	if err != nil {
		return "", nil, err
	}
	if !found {
		return OutcomeIgnored, nil, nil
	}
	if len(p.InFlight) == 0 {
		return OutcomeDuplicate, &p.ChargeID, nil
	}
	for _, t := range p.InFlight {
		if err := a.waker.Wake(ctx, t); err != nil {
			return "", nil, fmt.Errorf("notifications: wake %s: %w", t.QueueID(), err)
		}
	}
	return OutcomeApplied, &p.ChargeID, nil
}

// stripeTypes are the prefixes of the Stripe event types about a
// payment's authorization, capture, cancel or refunds, and about payouts.
var stripeTypes = []string{"payment_intent.", "charge.refund.", "charge.", "refund.", "payout."}

// stripePayout imports the payout a Stripe payout.* event is about, as
// Stripe's own books show it now (the event is only the signal to read
// them): the payout and its balance transaction when it is new, then its
// status. Without an importer, or for an event that names no payout, it is
// ignored.
func (a *Applier) stripePayout(ctx context.Context, n Notification) (string, *string, error) {
	var ev stripeEvent
	if a.payouts == nil || json.Unmarshal(n.Payload, &ev) != nil || ev.Data.Object.Object != "payout" || ev.Data.Object.ID == "" {
		return OutcomeIgnored, nil, nil
	}
	p, err := a.providers.Resolve(ctx, &n.ConnectorID, n.Provider)
	if err != nil {
		return "", nil, err
	}
	reader, ok := p.(providers.PayoutReader)
	if !ok {
		return OutcomeIgnored, nil, nil
	}
	po, err := reader.Payout(ctx, ev.Data.Object.ID)
	if err != nil {
		if _, declined := providers.AsDecline(err); declined {
			return OutcomeIgnored, nil, nil // Stripe holds no such payout
		}
		return "", nil, err
	}
	changed, err := a.payouts.Import(ctx, n.MerchantID, n.ConnectorID, ledger.Reported{Reference: po.Reference, Amount: po.Amount,
		Currency: po.Currency, Status: po.Status, Automatic: po.Automatic, ArrivalDate: po.ArrivalDate, FailureCode: po.FailureCode})
	if errors.Is(err, ledger.ErrBadReport) {
		a.log.WarnContext(ctx, "a payout Stripe reported cannot be booked", "connector", n.ConnectorID, "payout", po.Reference, "err", err)
		return OutcomeIgnored, nil, nil
	}
	if err != nil {
		return "", nil, err
	}
	if !changed {
		return OutcomeDuplicate, nil, nil
	}
	return OutcomeApplied, nil, nil
}

// adyenCodes are the Adyen event codes the worker applies.
var adyenCodes = map[string]bool{"AUTHORISATION": true, "CAPTURE": true, "CAPTURE_FAILED": true, "CANCELLATION": true, "REFUND": true, "REFUND_FAILED": true}

// Handled reports whether the worker acts on notifications of type typ
// from provider; the others are stored as ignored when they arrive.
func Handled(provider, typ string) bool {
	switch provider {
	case connectors.ProviderStripe:
		for _, p := range stripeTypes {
			if strings.HasPrefix(typ, p) {
				return true
			}
		}
	case connectors.ProviderAdyen:
		_, dispute := adyenDisputeCodes[typ]
		return adyenCodes[typ] || dispute
	case ProviderSandbox:
		return isDispute(provider, typ)
	}
	return false
}

// stripePayment is the PaymentIntent a Stripe event is about (the
// gateway's provider reference of a Stripe charge), or "" for an event
// the gateway does not act on. Disputes (charge.dispute.*) are applied
// by dispute.
func stripePayment(n Notification) string {
	if strings.HasPrefix(n.Type, "charge.dispute.") {
		return ""
	}
	handled := false
	for _, p := range stripeTypes {
		if strings.HasPrefix(n.Type, p) {
			handled = true
			break
		}
	}
	if !handled {
		return ""
	}
	var ev struct {
		Data struct {
			Object struct {
				ID            string          `json:"id"`
				Object        string          `json:"object"`
				PaymentIntent json.RawMessage `json:"payment_intent"`
			} `json:"object"`
		} `json:"data"`
	}
	if json.Unmarshal(n.Payload, &ev) != nil {
		return ""
	}
	o := ev.Data.Object
	if o.Object == "payment_intent" {
		return o.ID
	}
	// payment_intent is an id, or the object when expanded.
	var id string
	if json.Unmarshal(o.PaymentIntent, &id) == nil {
		return id
	}
	var obj struct {
		ID string `json:"id"`
	}
	if json.Unmarshal(o.PaymentIntent, &obj) == nil {
		return obj.ID
	}
	return ""
}

// adyen applies one Adyen notification item. Adyen's notifications are the
// only word on its captures, cancels and refunds (its Checkout API has no
// lookup); their HMAC signature was verified when they arrived.
//   - AUTHORISATION: the outcome of the payment pspReference, which the
//     answer to /payments (or /payments/details) already gave: a duplicate
//     of that answer when the gateway holds the payment, ignored when it
//     does not (an answer that was lost leaves no reference to find it by);
//   - CAPTURE, CAPTURE_FAILED: the capture of the payment originalReference;
//   - CANCELLATION: its void;
//   - REFUND, REFUND_FAILED: the refund whose id is merchantReference (the
//     reference the refund was sent with), of that payment.
//
// Each moves the charge or refund only as its state machine allows: sent
// again, late or out of order, it changes nothing twice.
func (a *Applier) adyen(ctx context.Context, n Notification) (string, *string, error) {
	var item adyen.NotificationItem
	if err := json.Unmarshal(n.Payload, &item); err != nil {
		return OutcomeIgnored, nil, nil
	}
	if a.charges == nil || a.refunds == nil {
		return "", nil, fmt.Errorf("notifications: this worker does not settle %s notifications", n.Provider)
	}
	var cf charges.Confirmation
	refund := false
	switch item.EventCode {
	case "CAPTURE", "CAPTURE_FAILED":
		cf = charges.Confirmation{Action: charges.ActionCapture, Success: item.EventCode == "CAPTURE" && item.Succeeded(), Reason: item.Reason}
		if amount, _, err := adyen.FromAdyen(item.Amount); err == nil {
			cf.Amount = amount
		}
	case "CANCELLATION":
		cf = charges.Confirmation{Action: charges.ActionVoid, Success: item.Succeeded(), Reason: item.Reason}
	case "REFUND", "REFUND_FAILED":
		refund = true
	case "AUTHORISATION":
		p, found, err := a.store.PaymentByReference(ctx, n.MerchantID, item.PSPReference)
		if err != nil || !found {
			return OutcomeIgnored, nil, err
		}
		return OutcomeDuplicate, &p.ChargeID, nil
	default:
		return OutcomeIgnored, nil, nil
	}
	if item.OriginalReference == "" {
		return OutcomeIgnored, nil, nil
	}
	p, found, err := a.store.PaymentByReference(ctx, n.MerchantID, item.OriginalReference)
	if err != nil {
		return "", nil, err
	}
	if !found {
		return OutcomeIgnored, nil, nil
	}
	var moved bool
	if refund {
		if !ids.ValidUUID(item.MerchantReference) {
			return OutcomeIgnored, &p.ChargeID, nil
		}
		ok, err := a.store.RefundOfCharge(ctx, item.MerchantReference, p.ChargeID)
		if err != nil {
			return "", nil, err
		}
		if !ok {
			return OutcomeIgnored, &p.ChargeID, nil
		}
		moved, err = a.refunds.Confirm(ctx, item.MerchantReference, item.EventCode == "REFUND" && item.Succeeded(), item.PSPReference)
		if err != nil {
			return "", nil, err
		}
	} else if moved, err = a.charges.Confirm(ctx, p.ChargeID, cf); err != nil {
		return "", nil, err
	}
	if !moved {
		return OutcomeDuplicate, &p.ChargeID, nil
	}
	return OutcomeApplied, &p.ChargeID, nil
}
