package notifications

import (
	"context"
	"crypto/subtle"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/stripe/stripe-go/v84/webhook"

	"github.com/gatehouse-pay/gatehouse/internal/apperr"
	"github.com/gatehouse-pay/gatehouse/internal/connectors"
	"github.com/gatehouse-pay/gatehouse/internal/ids"
	"github.com/gatehouse-pay/gatehouse/internal/keyring"
	"github.com/gatehouse-pay/gatehouse/internal/listing"
	"github.com/gatehouse-pay/gatehouse/internal/outbox"
	"github.com/gatehouse-pay/gatehouse/internal/providers/adyen"
)

// StripeTolerance is how old a Stripe signature may be (Stripe's own
// default): a replayed notification older than this is refused.
const StripeTolerance = webhook.DefaultTolerance

// Headers reads a request's headers.
type Headers interface {
	Get(name string) string
}

// Ack is the answer that acknowledges stored notifications.
type Ack struct {
	ContentType string
	Body        []byte
	// Stored are the notifications as stored, outcomes set.
	Stored []Notification
}

// Receiver is the API side: it checks, stores and acknowledges.
type Receiver struct {
	store Store
	keys  *keyring.Keyring
	queue outbox.Enqueuer
	now   func() time.Time
	// stripeSecret verifies the notifications of server-account Stripe
	// connectors (STRIPE_WEBHOOK_SECRET); "" refuses them.
	stripeSecret string
	onEnqueue    func(error)
	metrics      *Metrics
}

// WithMetrics counts the notifications refused and those stored as
// duplicates on m.
func (r *Receiver) WithMetrics(m *Metrics) *Receiver {
	r.metrics = m
	return r
}

// List pages the notifications of one of the merchant's connectors.
func (r *Receiver) List(ctx context.Context, merchantID, connectorID string, p listing.Params) (listing.Page[Notification], error) {
	return List(ctx, r.store, merchantID, connectorID, p)
}

// NewReceiver returns the API side. queue takes the apply tasks after the
// notifications are stored (their outbox rows cover a failure).
func NewReceiver(store Store, keys *keyring.Keyring, queue outbox.Enqueuer, stripeSecret string, now func() time.Time, onEnqueue func(error)) *Receiver {
	return &Receiver{store: store, keys: keys, queue: queue, stripeSecret: stripeSecret, now: now, onEnqueue: onEnqueue}
}

// Errors of a refused notification; the API answers them 401.
var (
	errNoSignature  = apperr.Unauthenticated(apperr.CodeMissingAuthorization, "The notification carries no signature.")
	errBadSignature = apperr.Unauthenticated(apperr.CodeInvalidCredentials, "The notification's signature does not verify with the connector's secret.")
	errNoSecret     = apperr.Unauthenticated(apperr.CodeInvalidCredentials,
		"The connector has no secret to verify notifications with: set its credentials' webhook_secret (or, for the server's own Stripe account, STRIPE_WEBHOOK_SECRET).")
)

// SignatureRefused reports whether err refused a notification for its
// signature (or credentials): the failures a flood of forgeries makes.
func SignatureRefused(err error) bool {
	return errors.Is(err, errNoSignature) || errors.Is(err, errBadSignature) || errors.Is(err, errNoSecret)
}

// Receive checks the notification body sent to the connector's URL, stores
// it and returns the answer that acknowledges it. Nothing is stored unless
// every signature verifies.
func (r *Receiver) Receive(ctx context.Context, connectorID string, h Headers, body []byte) (Ack, error) {
	if !connectors.ValidID(connectorID) {
		return Ack{}, apperr.NotFound("connector")
	}
	c, err := r.store.ConnectorForWork(ctx, connectorID)
	if err != nil {
		return Ack{}, err
	}
	var ns []Notification
	var ack Ack
	switch c.Provider {
	case connectors.ProviderStripe:
		ns, err = r.stripe(c, h, body)
		ack = Ack{ContentType: "application/json", Body: []byte(`{"received":true}`)}
	case connectors.ProviderAdyen:
		ns, err = r.adyen(c, h, body)
		ack = Ack{ContentType: "text/plain", Body: []byte("[accepted]")}
	default:
		return Ack{}, apperr.New(apperr.KindNotFound, apperr.CodeNotFound, "A %s connector sends no notifications.", c.Provider)
	}
	if err != nil {
		if SignatureRefused(err) {
			r.metrics.Count(c.Provider, OutcomeRefused)
		}
		return Ack{}, err
	}
	at := r.now().UTC().Truncate(time.Microsecond)
	for i := range ns {
		ns[i].ID, ns[i].ConnectorID, ns[i].MerchantID, ns[i].Provider, ns[i].ReceivedAt = ids.NewUUID(), c.ID, c.MerchantID, c.Provider, at
		if !Handled(c.Provider, ns[i].Type) {
			ns[i].Outcome = OutcomeIgnored
		}
	}
	stored, err := r.store.ReceiveNotifications(ctx, ns)
	if err != nil {
		return Ack{}, err
	}
	for _, n := range stored {
		if n.Outcome != OutcomeReceived {
			r.metrics.Count(n.Provider, n.Outcome) // duplicates, and types nothing acts on
			continue
		}
		if err := r.queue.Enqueue(ctx, ApplyTask(n.ID)); err != nil && r.onEnqueue != nil {
			r.onEnqueue(err)
		}
	}
	ack.Stored = stored
	return ack, nil
}

// ApplyTask is the worker's task that applies notification id.
func ApplyTask(id string) outbox.Task { return outbox.Task{Type: outbox.NotificationApply, RefID: id} }

// stripeEvent is what the gateway reads of a Stripe event.
type stripeEvent struct {
	ID   string `json:"id"`
	Type string `json:"type"`
	Data struct {
		Object struct {
			ID     string `json:"id"`
			Object string `json:"object"`
		} `json:"object"`
	} `json:"data"`
}

// stripe checks a Stripe event's Stripe-Signature with the connector's
// webhook secret (Stripe's scheme: stripe-go's webhook package, 5 min
// tolerance) and reads it.
func (r *Receiver) stripe(c connectors.Connector, h Headers, body []byte) ([]Notification, error) {
	sig := h.Get("Stripe-Signature")
	if strings.TrimSpace(sig) == "" {
		return nil, errNoSignature
	}
	secret := r.stripeSecret
	if c.Sealed != nil {
		cr, err := connectors.OpenCredentials(r.keys, c)
		if err != nil {
			return nil, apperr.Internal(fmt.Errorf("notifications: credentials of %s: %w", c.ID, err))
		}
		secret = cr.WebhookSecret
	}
	if secret == "" {
		return nil, errNoSecret
	}
	if err := webhook.ValidatePayloadWithTolerance(body, sig, secret, StripeTolerance); err != nil {
		return nil, errBadSignature
	}
	var ev stripeEvent
	if err := json.Unmarshal(body, &ev); err != nil {
		return nil, apperr.New(apperr.KindInvalid, apperr.CodeInvalidJSON, "The notification is not a Stripe event: %s", jsonProblem(err))
	}
	if ev.ID == "" || ev.Type == "" {
		return nil, apperr.Invalid("id", "A Stripe event has an id and a type.")
	}
	return []Notification{{ProviderEventID: ev.ID, DedupKey: ev.ID, Type: ev.Type, Payload: json.RawMessage(body)}}, nil
}

// adyen checks an Adyen notification: the Basic auth when the connector
// has a notification user name, and the HMAC signature of every item with
// the connector's HMAC key; one item that does not verify refuses them all.
// A live notification is refused: live mode is not activated.
func (r *Receiver) adyen(c connectors.Connector, h Headers, body []byte) ([]Notification, error) {
	if c.Sealed == nil {
		return nil, errNoSecret
	}
	cr, err := connectors.OpenCredentials(r.keys, c)
	if err != nil {
		return nil, apperr.Internal(fmt.Errorf("notifications: credentials of %s: %w", c.ID, err))
	}
	if cr.HMACKey == "" {
		return nil, errNoSecret
	}
	if cr.NotificationUsername != "" {
		user, pass, ok := basicAuth(h.Get("Authorization"))
		if !ok {
			return nil, errNoSignature
		}
		if subtle.ConstantTimeCompare([]byte(user), []byte(cr.NotificationUsername))&
			subtle.ConstantTimeCompare([]byte(pass), []byte(cr.NotificationPassword)) != 1 {
			return nil, errBadSignature
		}
	}
	n, err := adyen.Parse(body)
	if err != nil {
		return nil, apperr.New(apperr.KindInvalid, apperr.CodeInvalidJSON, "The notification is not an Adyen notification: %s", strings.TrimPrefix(err.Error(), "adyen: "))
	}
	if len(n.Items) == 0 {
		return nil, apperr.Invalid("notificationItems", "An Adyen notification holds at least one item.")
	}
	out := make([]Notification, 0, len(n.Items))
	for _, w := range n.Items {
		item := w.Item
		if item.HMACSignature() == "" {
			return nil, errNoSignature
		}
		if !adyen.VerifyHMAC(item, cr.HMACKey) {
			return nil, errBadSignature
		}
		payload, err := json.Marshal(item)
		if err != nil {
			return nil, apperr.Internal(err)
		}
		out = append(out, Notification{ProviderEventID: item.PSPReference, DedupKey: adyen.DedupKey(item), Type: item.EventCode, Payload: payload})
	}
	if n.Live == "true" {
		return nil, apperr.LiveMode()
	}
	return out, nil
}

// basicAuth reads an Authorization header of the Basic scheme.
func basicAuth(header string) (user, pass string, ok bool) {
	scheme, enc, found := strings.Cut(header, " ")
	if !found || !strings.EqualFold(scheme, "Basic") {
		return "", "", false
	}
	raw, err := base64.StdEncoding.DecodeString(strings.TrimSpace(enc))
	if err != nil {
		return "", "", false
	}
	return strings.Cut(string(raw), ":")
}

// jsonProblem says what is wrong with a body that is not JSON, without
// quoting it.
func jsonProblem(err error) string {
	var se *json.SyntaxError
	if errors.As(err, &se) {
		return fmt.Sprintf("invalid JSON at byte %d.", se.Offset)
	}
	return "it does not have the shape of one."
}

// List pages the notifications of one of the merchant's connectors.
func List(ctx context.Context, s Store, merchantID, connectorID string, p listing.Params) (listing.Page[Notification], error) {
	if !connectors.ValidID(connectorID) {
		return listing.Page[Notification]{}, apperr.NotFound("connector")
	}
	if _, err := s.ConnectorByID(ctx, merchantID, connectorID); err != nil {
		return listing.Page[Notification]{}, err
	}
	return s.ListNotifications(ctx, connectorID, p)
}
