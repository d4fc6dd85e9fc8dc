package httpapi

import (
	"strings"

	"github.com/gofiber/fiber/v2"

	"github.com/gatehouse-pay/gatehouse/internal/authz"
	"github.com/gatehouse-pay/gatehouse/internal/disputes"
	"github.com/gatehouse-pay/gatehouse/internal/idempotency"
	"github.com/gatehouse-pay/gatehouse/internal/resource"
)

// Disputes (api/openapi.yaml, tag disputes): a cardholder's dispute of a
// charge, and the merchant's answer to it.

func (s *server) listDisputes(c *fiber.Ctx) error {
	p, err := listParams(c, disputes.ValidID)
	if err != nil {
		return err
	}
	f := disputes.Filter{ChargeID: strings.Clone(c.Query("charge")), Status: strings.Clone(c.Query("status"))}
	page, err := s.Disputes.List(c.UserContext(), principal(c).MerchantID, f, p)
	if err != nil {
		return err
	}
	return writeJSON(c, fiber.StatusOK, newList(page, disputes.Dispute.View))
}

func (s *server) getDispute(c *fiber.Ctx) error {
	d, err := s.Disputes.Get(c.UserContext(), principal(c).MerchantID, strings.Clone(c.Params("id")))
	if err != nil {
		return err
	}
	return writeJSON(c, fiber.StatusOK, d.View())
}

// renderDispute renders a dispute as a 200 answer.
func renderDispute(d disputes.Dispute) (idempotency.Response, error) {
	return renderAs[resource.Dispute](fiber.StatusOK)(d.View())
}

func (s *server) updateDispute(c *fiber.Ctx) error {
	var p disputes.UpdateParams
	idem, err := s.decodeCreate(c, &p)
	if err != nil {
		return err
	}
	if p.Submit != nil && *p.Submit {
		// Staging evidence needs dispute_evidence: write (the route's
		// row); submitting it needs disputes: write too.
		if n := write(authz.Disputes); !principal(c).Allows(n) {
			return authz.Denied(n)
		}
	}
	resp, replayed, err := s.Disputes.Update(c.UserContext(), principal(c).MerchantID, strings.Clone(c.Params("id")), p, idem, renderDispute)
	if err != nil {
		return err
	}
	return sendAnswer(c, resp, replayed)
}

func (s *server) closeDispute(c *fiber.Ctx) error {
	var p struct{}
	idem, err := s.decodeCreate(c, &p)
	if err != nil {
		return err
	}
	resp, replayed, err := s.Disputes.Close(c.UserContext(), principal(c).MerchantID, strings.Clone(c.Params("id")), idem, renderDispute)
	if err != nil {
		return err
	}
	return sendAnswer(c, resp, replayed)
}
