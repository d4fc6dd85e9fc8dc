package httpapi

import (
	"encoding/json"
	"strings"
	"time"

	"github.com/gofiber/fiber/v2"

	"github.com/gatehouse-pay/gatehouse/internal/apperr"
	"github.com/gatehouse-pay/gatehouse/internal/authz"
	"github.com/gatehouse-pay/gatehouse/internal/charges"
	"github.com/gatehouse-pay/gatehouse/internal/events"
	"github.com/gatehouse-pay/gatehouse/internal/idempotency"
	"github.com/gatehouse-pay/gatehouse/internal/ids"
	"github.com/gatehouse-pay/gatehouse/internal/keyring"
	"github.com/gatehouse-pay/gatehouse/internal/refunds"
)

const headerIdempotencyKey = "Idempotency-Key"

// idempotent reads the Idempotency-Key header, in the space of the request's
// kind of credential: a public key's requests never meet the merchant's own.
// The fingerprint is keyed, so the stored record reveals nothing of the body
// (which may hold card data).
func (s *server) idempotent(c *fiber.Ctx) (*idempotency.Request, error) {
	key := c.Get(headerIdempotencyKey)
	if key == "" {
		return nil, nil
	}
	if err := idempotency.Validate(key); err != nil {
		return nil, err
	}
	fp := s.Keyring.MAC(keyring.PurposeIdempotency, []byte(c.Method()), []byte(c.Path()), c.BodyRaw())
	scope := idempotency.ScopeServer
	if principal(c).PublicKey {
		scope = idempotency.ScopePublic
	}
	return idempotency.NewRequest(scope, strings.Clone(key), fp), nil
}

// decodeCreate decodes the body of a creating POST into dst, then reads its
// Idempotency-Key (nil without one).
func (s *server) decodeCreate(c *fiber.Ctx, dst any) (*idempotency.Request, error) {
	if err := decodeJSON(c, dst); err != nil {
		return nil, err
	}
	return s.idempotent(c)
}

// renderAs returns a renderer of v as the JSON answer with status.
func renderAs[T any](status int) func(T) (idempotency.Response, error) {
	return func(v T) (idempotency.Response, error) {
		b, err := json.Marshal(v)
		return idempotency.Response{Status: status, Body: b}, err
	}
}

// sendResult writes a created or replayed answer, byte for byte.
func sendResult(c *fiber.Ctx, r charges.Result) error {
	return sendAnswer(c, r.Response, r.Replayed)
}

// sendAnswer writes a first or replayed answer, byte for byte; a replay
// carries Idempotent-Replayed: true.
func sendAnswer(c *fiber.Ctx, r idempotency.Response, replayed bool) error {
	if replayed {
		c.Set("Idempotent-Replayed", "true")
	}
	c.Status(r.Status)
	c.Set(fiber.HeaderContentType, contentTypeJSON)
	return c.Send(r.Body)
}

// chargeSavedCard is what charging a saved card needs besides charges
// write: the card is the customer's, so the caller must be allowed to read
// customers.
var chargeSavedCard = authz.Need{Resource: authz.Customers, Access: authz.Read}

func (s *server) createCharge(c *fiber.Ctx) error {
	var p charges.CreateParams
	idem, err := s.decodeCreate(c, &p)
	if err != nil {
		return err
	}
	pr := principal(c)
	// Before anything looks at the method, so a caller without the
	// permission learns nothing of whether it exists.
	if p.Card != nil && p.Card.PaymentMethod != nil && !pr.Allows(chargeSavedCard) {
		s.Metrics.AuthFailures.WithLabelValues("permission_denied").Inc()
		return authz.Denied(chargeSavedCard)
	}
	res, err := s.Charges.Create(c.UserContext(), pr.MerchantID, pr.Environment, p, idem,
		func(v any) (idempotency.Response, error) { return renderAs[any](fiber.StatusCreated)(v) })
	if err != nil {
		return err
	}
	if !res.Replayed {
		s.Metrics.ChargesCreated.WithLabelValues(res.Provider).Inc()
	}
	return sendResult(c, res)
}

func (s *server) getCharge(c *fiber.Ctx) error {
	ch, err := s.Charges.Get(c.UserContext(), principal(c).MerchantID, strings.Clone(c.Params("id")))
	if err != nil {
		return err
	}
	return writeJSON(c, fiber.StatusOK, ch)
}

func parseTimeQuery(c *fiber.Ctx, name string) (*time.Time, error) {
	v := c.Query(name)
	if v == "" {
		return nil, nil
	}
	t, err := time.Parse(time.RFC3339Nano, v)
	if err != nil {
		return nil, apperr.Invalid(name, "%s must be an RFC 3339 time such as 2026-11-22T01:17:13Z.", name)
	}
	return &t, nil
}

func (s *server) listCharges(c *fiber.Ctx) error {
	p, err := listParams(c, ids.ValidUUID)
	if err != nil {
		return err
	}
	f := charges.Filter{Status: strings.Clone(c.Query("status")), Customer: strings.Clone(c.Query("customer"))}
	if f.CreatedGTE, err = parseTimeQuery(c, "created[gte]"); err != nil {
		return err
	}
	if f.CreatedLTE, err = parseTimeQuery(c, "created[lte]"); err != nil {
		return err
	}
	page, err := s.Charges.List(c.UserContext(), principal(c).MerchantID, f, p)
	if err != nil {
		return err
	}
	return writeJSON(c, fiber.StatusOK, newList(page, charges.Charge.View))
}

type captureRequest struct {
	Amount *int64 `json:"amount"`
}

func (s *server) captureCharge(c *fiber.Ctx) error {
	var req captureRequest
	idem, err := s.decodeCreate(c, &req)
	if err != nil {
		return err
	}
	res, err := s.Charges.Capture(c.UserContext(), principal(c).MerchantID, strings.Clone(c.Params("id")), req.Amount, idem, renderAs[charges.Charge](fiber.StatusOK))
	if err != nil {
		return err
	}
	return sendResult(c, res)
}

func (s *server) voidCharge(c *fiber.Ctx) error {
	var req struct{}
	idem, err := s.decodeCreate(c, &req)
	if err != nil {
		return err
	}
	res, err := s.Charges.Void(c.UserContext(), principal(c).MerchantID, strings.Clone(c.Params("id")), idem, renderAs[charges.Charge](fiber.StatusOK))
	if err != nil {
		return err
	}
	return sendResult(c, res)
}

func (s *server) createRefund(c *fiber.Ctx) error {
	var p refunds.CreateParams
	idem, err := s.decodeCreate(c, &p)
	if err != nil {
		return err
	}
	res, err := s.Refunds.Create(c.UserContext(), principal(c).MerchantID, p, idem, renderAs[refunds.Refund](fiber.StatusCreated))
	if err != nil {
		return err
	}
	return sendResult(c, res)
}

func (s *server) getRefund(c *fiber.Ctx) error {
	r, err := s.Refunds.Get(c.UserContext(), principal(c).MerchantID, strings.Clone(c.Params("id")))
	if err != nil {
		return err
	}
	return writeJSON(c, fiber.StatusOK, r)
}

func (s *server) listRefunds(c *fiber.Ctx) error {
	p, err := listParams(c, ids.ValidUUID)
	if err != nil {
		return err
	}
	page, err := s.Refunds.List(c.UserContext(), principal(c).MerchantID, strings.Clone(c.Query("charge")), p)
	if err != nil {
		return err
	}
	return writeJSON(c, fiber.StatusOK, newList(page, refunds.Refund.View))
}

func (s *server) getEvent(c *fiber.Ctx) error {
	id := strings.Clone(c.Params("id"))
	if !ids.ValidUUID(id) {
		return apperr.NotFound("event")
	}
	e, err := s.Events.Get(c.UserContext(), principal(c).MerchantID, id)
	if err != nil {
		return err
	}
	return writeJSON(c, fiber.StatusOK, e.Body)
}

func (s *server) listEvents(c *fiber.Ctx) error {
	p, err := listParams(c, ids.ValidUUID)
	if err != nil {
		return err
	}
	f := events.Filter{Type: strings.Clone(c.Query("type"))}
	if f.Type != "" && !events.Known(f.Type) {
		return apperr.Invalid("type", "type must be one of %s.", strings.Join(events.Types, ", "))
	}
	page, err := s.Events.List(c.UserContext(), principal(c).MerchantID, f, p)
	if err != nil {
		return err
	}
	return writeJSON(c, fiber.StatusOK, newList(page, func(e events.Event) json.RawMessage { return e.Body }))
}
