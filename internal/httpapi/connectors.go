package httpapi

import (
	"strings"

	"github.com/gofiber/fiber/v2"

	"github.com/gatehouse-pay/gatehouse/internal/connectors"
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
