package httpapi

import (
	"strings"

	"github.com/gofiber/fiber/v2"

	"github.com/gatehouse-pay/gatehouse/internal/apperr"
	"github.com/gatehouse-pay/gatehouse/internal/connectors"
	"github.com/gatehouse-pay/gatehouse/internal/notifications"
)

// Connectors and routing (api/openapi.yaml, tag routing).

func (s *server) createConnector(c *fiber.Ctx) error {
	var p connectors.CreateParams
	idem, err := s.decodeCreate(c, &p)
	if err != nil {
		return err
	}
	res, err := s.Connectors.Create(c.UserContext(), principal(c).MerchantID, p, idem, renderAs[connectors.Connector](fiber.StatusCreated))
	if err != nil {
		return err
	}
	return sendAnswer(c, res.Response, res.Replayed)
}

func (s *server) listConnectors(c *fiber.Ctx) error {
	p, err := listParams(c, connectors.ValidID)
	if err != nil {
		return err
	}
	page, err := s.Connectors.List(c.UserContext(), principal(c).MerchantID, p)
	if err != nil {
		return err
	}
	return writeJSON(c, fiber.StatusOK, newList(page, connectors.Connector.View))
}

func (s *server) getConnector(c *fiber.Ctx) error {
	conn, err := s.Connectors.Get(c.UserContext(), principal(c).MerchantID, strings.Clone(c.Params("id")))
	if err != nil {
		return err
	}
	return writeJSON(c, fiber.StatusOK, conn)
}

func (s *server) updateConnector(c *fiber.Ctx) error {
	var p connectors.UpdateParams
	if err := decodeJSON(c, &p); err != nil {
		return err
	}
	conn, err := s.Connectors.Update(c.UserContext(), principal(c).MerchantID, strings.Clone(c.Params("id")), p)
	if err != nil {
		return err
	}
	return writeJSON(c, fiber.StatusOK, conn)
}

func (s *server) deleteConnector(c *fiber.Ctx) error {
	id := strings.Clone(c.Params("id"))
	if err := s.Connectors.Delete(c.UserContext(), principal(c).MerchantID, id); err != nil {
		return err
	}
	return writeJSON(c, fiber.StatusOK, presentDeleted("connector", id))
}

func (s *server) getRouting(c *fiber.Ctx) error {
	r, err := s.Connectors.Routing(c.UserContext(), principal(c).MerchantID)
	if err != nil {
		return err
	}
	return writeJSON(c, fiber.StatusOK, r.View())
}

func (s *server) putRouting(c *fiber.Ctx) error {
	var p connectors.RoutingParams
	if err := decodeJSON(c, &p); err != nil {
		return err
	}
	r, err := s.Connectors.PutRouting(c.UserContext(), principal(c).MerchantID, p)
	if err != nil {
		return err
	}
	return writeJSON(c, fiber.StatusOK, r.View())
}

// notificationFailures is the limit on notifications refused for their
// signature, per client address (RATE_LIMIT_NOTIFICATION_FAILURES).
const notificationFailures = "notification_failures"

// receiveNotification takes a provider's notification: no API key, the
// provider's signature is the credential. An address over its budget of
// refused signatures is answered 429 before anything is checked;
// notifications that verify never count against it.
func (s *server) receiveNotification(c *fiber.Ctx) error {
	ip := s.clientIP(c).String()
	if d, over := s.Limiter.Over(notificationFailures, ip); over {
		return limited(c, d)
	}
	if liveMode(c.BodyRaw()) {
		return apperr.LiveMode()
	}
	ack, err := s.Notifications.Receive(c.UserContext(), strings.Clone(c.Params("connector_id")), fiberHeaders{c}, c.BodyRaw())
	if err != nil {
		if notifications.SignatureRefused(err) {
			s.Limiter.Allow(c.UserContext(), notificationFailures, ip, s.Config.RateLimitNotificationFailures)
		}
		return err
	}
	c.Set(fiber.HeaderContentType, ack.ContentType+"; charset=utf-8")
	return c.Status(fiber.StatusOK).Send(ack.Body)
}

// fiberHeaders reads a request's headers for the notifications package.
type fiberHeaders struct{ c *fiber.Ctx }

func (h fiberHeaders) Get(name string) string { return h.c.Get(name) }

func (s *server) listNotifications(c *fiber.Ctx) error {
	p, err := listParams(c, notifications.ValidID)
	if err != nil {
		return err
	}
	page, err := s.Notifications.List(c.UserContext(), principal(c).MerchantID, strings.Clone(c.Params("id")), p)
	if err != nil {
		return err
	}
	return writeJSON(c, fiber.StatusOK, newList(page, notifications.Notification.View))
}
