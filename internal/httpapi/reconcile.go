package httpapi

import (
	"strings"

	"github.com/gofiber/fiber/v2"

	"github.com/gatehouse-pay/gatehouse/internal/reconcile"
	"github.com/gatehouse-pay/gatehouse/internal/resource"
)

// Reconciliation of the books with the providers' settlement reports
// (api/openapi.yaml, tag balance).

// reconciliationBodyLimit is the largest body POST /v1/reconciliations
// takes: a report of reconcile.MaxReportBytes, JSON-escaped; and the
// dashboard's form, which uploads one as a file (multipart).
const reconciliationBodyLimit = 1 << 20

func (s *server) createReconciliation(c *fiber.Ctx) error {
	var p reconcile.CreateParams
	idem, err := s.decodeCreate(c, &p)
	if err != nil {
		return err
	}
	res, err := s.Reconcile.Create(c.UserContext(), principal(c).MerchantID, p, idem, renderAs[resource.Reconciliation](fiber.StatusCreated))
	if err != nil {
		return err
	}
	return sendAnswer(c, res.Response, res.Replayed)
}

func (s *server) listReconciliations(c *fiber.Ctx) error {
	p, err := listParams(c, reconcile.ValidID)
	if err != nil {
		return err
	}
	page, err := s.Reconcile.List(c.UserContext(), principal(c).MerchantID, reconcile.Filter{ConnectorID: strings.Clone(c.Query("connector"))}, p)
	if err != nil {
		return err
	}
	return writeJSON(c, fiber.StatusOK, newList(page, reconcile.Reconciliation.View))
}

func (s *server) getReconciliation(c *fiber.Ctx) error {
	r, err := s.Reconcile.Get(c.UserContext(), principal(c).MerchantID, strings.Clone(c.Params("id")))
	if err != nil {
		return err
	}
	return writeJSON(c, fiber.StatusOK, r.View())
}

func (s *server) listReconciliationExceptions(c *fiber.Ctx) error {
	p, err := listParams(c, reconcile.ValidExceptionID)
	if err != nil {
		return err
	}
	f := reconcile.ExceptionFilter{Status: strings.Clone(c.Query("status")), Kind: strings.Clone(c.Query("kind"))}
	page, err := s.Reconcile.Exceptions(c.UserContext(), principal(c).MerchantID, strings.Clone(c.Params("id")), f, p)
	if err != nil {
		return err
	}
	return writeJSON(c, fiber.StatusOK, newList(page, reconcile.Exception.View))
}

func (s *server) resolveReconciliationException(c *fiber.Ctx) error {
	var p reconcile.ResolveParams
	idem, err := s.decodeCreate(c, &p)
	if err != nil {
		return err
	}
	res, err := s.Reconcile.Resolve(c.UserContext(), principal(c).MerchantID, strings.Clone(c.Params("id")), strings.Clone(c.Params("exc")),
		p, idem, renderAs[resource.ReconciliationException](fiber.StatusOK))
	if err != nil {
		return err
	}
	return sendAnswer(c, res.Response, res.Replayed)
}

// getSettlementReport serves a connector's settlement report of a day as
// CSV, to download.
func (s *server) getSettlementReport(c *fiber.Ctx) error {
	id, date := strings.Clone(c.Params("id")), strings.Clone(c.Query("date"))
	csv, err := s.Reconcile.SettlementReport(c.UserContext(), principal(c).MerchantID, id, date)
	if err != nil {
		return err
	}
	c.Set(fiber.HeaderContentType, "text/csv; charset=utf-8")
	c.Set(fiber.HeaderContentDisposition, `attachment; filename="settlement_`+id+`_`+date+`.csv"`)
	return c.Status(fiber.StatusOK).Send(csv)
}
