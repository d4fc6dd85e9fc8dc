package httpapi

import (
	"strings"

	"github.com/gofiber/fiber/v2"

	"github.com/gatehouse-pay/gatehouse/internal/customers"
)

// Customers and their saved cards (api/openapi.yaml, tag customers).

func (s *server) createCustomer(c *fiber.Ctx) error {
	var p customers.CreateParams
	idem, err := s.decodeCreate(c, &p)
	if err != nil {
		return err
	}
	pr := principal(c)
	res, err := s.Customers.Create(c.UserContext(), pr.MerchantID, pr.Environment, p, idem, renderAs[customers.Customer](fiber.StatusCreated))
	if err != nil {
		return err
	}
	return sendResult(c, res)
}

func (s *server) listCustomers(c *fiber.Ctx) error {
	p, err := listParams(c, customers.ValidID)
	if err != nil {
		return err
	}
	f := customers.Filter{Email: strings.Clone(c.Query("email"))}
	page, err := s.Customers.List(c.UserContext(), principal(c).MerchantID, f, p)
	if err != nil {
		return err
	}
	return writeJSON(c, fiber.StatusOK, newList(page, customers.Customer.View))
}

func (s *server) getCustomer(c *fiber.Ctx) error {
	cu, err := s.Customers.Get(c.UserContext(), principal(c).MerchantID, strings.Clone(c.Params("id")))
	if err != nil {
		return err
	}
	return writeJSON(c, fiber.StatusOK, cu)
}

func (s *server) updateCustomer(c *fiber.Ctx) error {
	var p customers.UpdateParams
	if err := decodeJSON(c, &p); err != nil {
		return err
	}
	cu, err := s.Customers.Update(c.UserContext(), principal(c).MerchantID, strings.Clone(c.Params("id")), p)
	if err != nil {
		return err
	}
	return writeJSON(c, fiber.StatusOK, cu)
}

func (s *server) deleteCustomer(c *fiber.Ctx) error {
	id := strings.Clone(c.Params("id"))
	if err := s.Customers.Delete(c.UserContext(), principal(c).MerchantID, id); err != nil {
		return err
	}
	return writeJSON(c, fiber.StatusOK, presentDeleted("customer", id))
}

func (s *server) createPaymentMethod(c *fiber.Ctx) error {
	var p customers.PaymentMethodParams
	idem, err := s.decodeCreate(c, &p)
	if err != nil {
		return err
	}
	pr := principal(c)
	res, err := s.Customers.CreatePaymentMethod(c.UserContext(), pr.MerchantID, pr.Environment, strings.Clone(c.Params("id")), p, idem,
		renderAs[customers.PaymentMethod](fiber.StatusCreated))
	if err != nil {
		return err
	}
	return sendResult(c, res)
}

func (s *server) listPaymentMethods(c *fiber.Ctx) error {
	p, err := listParams(c, customers.ValidPaymentMethodID)
	if err != nil {
		return err
	}
	page, err := s.Customers.ListPaymentMethods(c.UserContext(), principal(c).MerchantID, strings.Clone(c.Params("id")), p)
	if err != nil {
		return err
	}
	return writeJSON(c, fiber.StatusOK, newList(page, customers.PaymentMethod.View))
}

func (s *server) deletePaymentMethod(c *fiber.Ctx) error {
	id := strings.Clone(c.Params("pm_id"))
	if err := s.Customers.DeletePaymentMethod(c.UserContext(), principal(c).MerchantID, strings.Clone(c.Params("id")), id); err != nil {
		return err
	}
	return writeJSON(c, fiber.StatusOK, presentDeleted("payment_method", id))
}
