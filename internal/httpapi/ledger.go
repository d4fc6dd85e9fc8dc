package httpapi

import (
	"strings"

	"github.com/gofiber/fiber/v2"

	"github.com/gatehouse-pay/gatehouse/internal/apperr"
	"github.com/gatehouse-pay/gatehouse/internal/connectors"
	"github.com/gatehouse-pay/gatehouse/internal/ledger"
	"github.com/gatehouse-pay/gatehouse/internal/resource"
)

// The merchant's books: its balance, balance transactions and payouts
// (api/openapi.yaml, tag balance).

// connectorFilter reads the connector a list or the balance is narrowed
// to: "" for none; an id that cannot be a connector's is a 400.
func connectorFilter(c *fiber.Ctx) (string, error) {
	id := strings.Clone(c.Query("connector"))
	if id != "" && !connectors.ValidID(id) {
		return "", apperr.Invalid("connector", "connector must be a connector id (conn_...).")
	}
	return id, nil
}

func (s *server) getBalance(c *fiber.Ctx) error {
	conn, err := connectorFilter(c)
	if err != nil {
		return err
	}
	b, err := s.Ledger.Balance(c.UserContext(), principal(c).MerchantID, conn)
	if err != nil {
		return err
	}
	return writeJSON(c, fiber.StatusOK, b)
}

func (s *server) listBalanceTransactions(c *fiber.Ctx) error {
	p, err := listParams(c, ledger.ValidTransactionID)
	if err != nil {
		return err
	}
	conn, err := connectorFilter(c)
	if err != nil {
		return err
	}
	f := ledger.Filter{Type: strings.Clone(c.Query("type")), Source: strings.Clone(c.Query("source")),
		PayoutID: strings.Clone(c.Query("payout")), ConnectorID: conn}
	if f.CreatedGTE, err = parseTimeQuery(c, "created[gte]"); err != nil {
		return err
	}
	if f.CreatedLTE, err = parseTimeQuery(c, "created[lte]"); err != nil {
		return err
	}
	page, err := s.Ledger.Transactions(c.UserContext(), principal(c).MerchantID, f, p)
	if err != nil {
		return err
	}
	now := s.Ledger.Now()
	return writeJSON(c, fiber.StatusOK, newList(page, func(t ledger.Transaction) resource.BalanceTransaction { return t.View(now) }))
}

func (s *server) getBalanceTransaction(c *fiber.Ctx) error {
	t, err := s.Ledger.Transaction(c.UserContext(), principal(c).MerchantID, strings.Clone(c.Params("id")))
	if err != nil {
		return err
	}
	return writeJSON(c, fiber.StatusOK, t.View(s.Ledger.Now()))
}

func (s *server) createPayout(c *fiber.Ctx) error {
	var p ledger.PayoutParams
	idem, err := s.decodeCreate(c, &p)
	if err != nil {
		return err
	}
	res, err := s.Ledger.CreatePayout(c.UserContext(), principal(c).MerchantID, p, idem,
		renderAs[resource.Payout](fiber.StatusCreated))
	if err != nil {
		return err
	}
	return sendAnswer(c, res.Response, res.Replayed)
}

func (s *server) listPayouts(c *fiber.Ctx) error {
	p, err := listParams(c, ledger.ValidPayoutID)
	if err != nil {
		return err
	}
	conn, err := connectorFilter(c)
	if err != nil {
		return err
	}
	f := ledger.PayoutFilter{Status: strings.Clone(c.Query("status")), ConnectorID: conn}
	page, err := s.Ledger.Payouts(c.UserContext(), principal(c).MerchantID, f, p)
	if err != nil {
		return err
	}
	return writeJSON(c, fiber.StatusOK, newList(page, ledger.Payout.View))
}

func (s *server) getPayout(c *fiber.Ctx) error {
	po, err := s.Ledger.Payout(c.UserContext(), principal(c).MerchantID, strings.Clone(c.Params("id")))
	if err != nil {
		return err
	}
	return writeJSON(c, fiber.StatusOK, po.View())
}
