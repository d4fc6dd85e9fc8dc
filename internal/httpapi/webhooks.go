package httpapi

import (
	"strings"
	"time"

	"github.com/gofiber/fiber/v2"

	"github.com/gatehouse-pay/gatehouse/internal/apperr"
	"github.com/gatehouse-pay/gatehouse/internal/idempotency"
	"github.com/gatehouse-pay/gatehouse/internal/ids"
	"github.com/gatehouse-pay/gatehouse/internal/resource"
	"github.com/gatehouse-pay/gatehouse/internal/webhooks"
)

func (s *server) createEndpoint(c *fiber.Ctx) error {
	var p webhooks.CreateParams
	idem, err := s.decodeCreate(c, &p)
	if err != nil {
		return err
	}
	pr := principal(c)
	res, err := s.Webhooks.Create(c.UserContext(), pr.MerchantID, pr.Environment, p, idem,
		func(e webhooks.Endpoint, secret string) (idempotency.Response, error) {
			return renderAs[resource.WebhookEndpointWithSecret](fiber.StatusCreated)(presentEndpointWithSecret(e, secret))
		})
	if err != nil {
		return err
	}
	c.Set(fiber.HeaderCacheControl, "no-store")
	return sendAnswer(c, res.Response, res.Replayed)
}

func (s *server) listEndpoints(c *fiber.Ctx) error {
	p, err := listParams(c, func(id string) bool { return ids.Valid("we", id) })
	if err != nil {
		return err
	}
	page, err := s.Webhooks.List(c.UserContext(), principal(c).MerchantID, p)
	if err != nil {
		return err
	}
	return writeJSON(c, fiber.StatusOK, newList(page, webhooks.Endpoint.View))
}

func (s *server) getEndpoint(c *fiber.Ctx) error {
	e, err := s.Webhooks.Get(c.UserContext(), principal(c).MerchantID, strings.Clone(c.Params("id")))
	if err != nil {
		return err
	}
	return writeJSON(c, fiber.StatusOK, e.View())
}

func (s *server) updateEndpoint(c *fiber.Ctx) error {
	var p webhooks.UpdateParams
	if err := decodeJSON(c, &p); err != nil {
		return err
	}
	e, err := s.Webhooks.Update(c.UserContext(), principal(c).MerchantID, strings.Clone(c.Params("id")), p)
	if err != nil {
		return err
	}
	return writeJSON(c, fiber.StatusOK, e.View())
}

func (s *server) deleteEndpoint(c *fiber.Ctx) error {
	id := strings.Clone(c.Params("id"))
	if err := s.Webhooks.Delete(c.UserContext(), principal(c).MerchantID, id); err != nil {
		return err
	}
	return writeJSON(c, fiber.StatusOK, presentDeleted("webhook_endpoint", id))
}

func (s *server) rotateSecret(c *fiber.Ctx) error {
	var req struct{} // no body, or an empty object; anything else is refused
	if err := decodeJSON(c, &req); err != nil {
		return err
	}
	e, secret, err := s.Webhooks.RotateSecret(c.UserContext(), principal(c).MerchantID, strings.Clone(c.Params("id")))
	if err != nil {
		return err
	}
	c.Set(fiber.HeaderCacheControl, "no-store")
	return writeJSON(c, fiber.StatusOK, presentEndpointWithSecret(e, secret))
}

func (s *server) testEndpoint(c *fiber.Ctx) error {
	var req struct{} // no body, or an empty object; anything else is refused
	if err := decodeJSON(c, &req); err != nil {
		return err
	}
	pr := principal(c)
	d, err := s.Webhooks.Test(c.UserContext(), pr.MerchantID, strings.Clone(c.Params("id")), webhooks.SampleEvent(pr.MerchantID, pr.Environment))
	if err != nil {
		return err
	}
	return writeJSON(c, fiber.StatusAccepted, d.View())
}

type recoverRequest struct {
	Since *string `json:"since"`
}

func (s *server) recoverEndpoint(c *fiber.Ctx) error {
	var req recoverRequest
	if err := decodeJSON(c, &req); err != nil {
		return err
	}
	if req.Since == nil || *req.Since == "" {
		return apperr.Missing("since")
	}
	since, err := time.Parse(time.RFC3339Nano, *req.Since)
	if err != nil {
		return apperr.Invalid("since", "since must be an RFC 3339 time such as 2026-11-22T01:17:13Z.")
	}
	dry := false
	switch v := c.Query("dry_run"); v {
	case "", "false":
	case "true":
		dry = true
	default:
		return apperr.Invalid("dry_run", "dry_run must be true or false.")
	}
	n, err := s.Webhooks.Recover(c.UserContext(), principal(c).MerchantID, strings.Clone(c.Params("id")), since, dry)
	if err != nil {
		return err
	}
	return writeJSON(c, fiber.StatusOK, presentRecovery(since, n, dry))
}

func (s *server) listDeliveries(c *fiber.Ctx) error {
	p, err := listParams(c, ids.ValidUUID)
	if err != nil {
		return err
	}
	page, err := s.Webhooks.Deliveries(c.UserContext(), principal(c).MerchantID, strings.Clone(c.Params("id")), strings.Clone(c.Query("status")), p)
	if err != nil {
		return err
	}
	return writeJSON(c, fiber.StatusOK, newList(page, webhooks.Delivery.View))
}

func (s *server) endpointStats(c *fiber.Ctx) error {
	st, err := s.Webhooks.Stats(c.UserContext(), principal(c).MerchantID, strings.Clone(c.Params("id")))
	if err != nil {
		return err
	}
	return writeJSON(c, fiber.StatusOK, st.View())
}

func (s *server) retryDelivery(c *fiber.Ctx) error {
	var req struct{} // no body, or an empty object; anything else is refused
	if err := decodeJSON(c, &req); err != nil {
		return err
	}
	d, err := s.Webhooks.Retry(c.UserContext(), principal(c).MerchantID, strings.Clone(c.Params("id")))
	if err != nil {
		return err
	}
	return writeJSON(c, fiber.StatusAccepted, d.View())
}
