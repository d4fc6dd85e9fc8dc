package httpapi

import (
	"net/url"
	"strings"

	"github.com/gofiber/fiber/v2"

	"github.com/gatehouse-pay/gatehouse/internal/apperr"
	"github.com/gatehouse-pay/gatehouse/internal/charges"
	"github.com/gatehouse-pay/gatehouse/internal/customers"
	"github.com/gatehouse-pay/gatehouse/internal/ids"
	"github.com/gatehouse-pay/gatehouse/internal/listing"
)

// The dashboard's customers: the list, a customer's page with its saved
// cards and its charges, and the deletion of a saved card or a customer,
// through the same customers and charges services as /v1/customers and
// GET /v1/charges?customer=.

type customersView struct {
	Customers []customers.Customer
	Email     string
	Pager     *pager
}

func (s *server) customersPage(c *fiber.Ctx) error {
	v := customersView{Email: strings.TrimSpace(strings.Clone(c.Query("email")))}
	var err error
	if v.Pager, err = newPager(c, dashboardPath+"/customers", customers.ValidID, url.Values{"email": {v.Email}}); err != nil {
		return err
	}
	page, err := s.Customers.List(c.UserContext(), principal(c).MerchantID, customers.Filter{Email: v.Email}, v.Pager.params)
	if err != nil {
		return err
	}
	v.Customers = pageItems(v.Pager, page, func(cu customers.Customer) string { return cu.ID })
	return s.page(c, "customers", "customers", "Customers", v)
}

type customerView struct {
	Customer customers.Customer
	Cards    []customers.PaymentMethod
	// MoreCards: the customer has more saved cards than the page shows.
	MoreCards bool
	Charges   []charges.Charge
	Pager     *pager
}

// customerPage is a customer's fields, its saved cards and a page of its
// charges, newest first.
func (s *server) customerPage(c *fiber.Ctx) error {
	ctx, merchant := c.UserContext(), principal(c).MerchantID
	cu, err := s.Customers.Get(ctx, merchant, id(c))
	if err != nil {
		return err
	}
	v := customerView{Customer: cu}
	cards, err := s.Customers.ListPaymentMethods(ctx, merchant, cu.ID, listing.Params{Limit: listing.MaxLimit})
	if err != nil {
		return err
	}
	v.Cards, v.MoreCards = cards.Items, cards.HasMore
	if v.Pager, err = newPager(c, dashboardPath+"/customers/"+cu.ID, ids.ValidUUID, nil); err != nil {
		return err
	}
	page, err := s.Charges.List(ctx, merchant, charges.Filter{Customer: cu.ID}, v.Pager.params)
	if err != nil {
		return err
	}
	v.Charges = pageItems(v.Pager, page, func(ch charges.Charge) string { return ch.ID })
	return s.page(c, "customer", "customers", "Customer "+customerName(cu), v)
}

// customerName is what a customer is called on its page: its name, its
// email, or its id.
func customerName(cu customers.Customer) string {
	for _, p := range []*string{cu.Name, cu.Email} {
		if p != nil && *p != "" {
			return *p
		}
	}
	return cu.ID
}

// dashDeleteCustomer deletes a customer and its saved cards, as
// DELETE /v1/customers/:id.
func (s *server) dashDeleteCustomer(c *fiber.Ctx) error {
	if err := s.Customers.Delete(c.UserContext(), principal(c).MerchantID, id(c)); err != nil {
		return err
	}
	return redirectNotice(c, dashboardPath+"/customers", "customer_deleted")
}

// dashDeleteCard deletes one of a customer's saved cards, as
// DELETE /v1/customers/:id/payment_methods/:pm_id.
func (s *server) dashDeleteCard(c *fiber.Ctx) error {
	customerID, methodID := id(c), strings.Clone(c.Params("pm_id"))
	if err := s.Customers.DeletePaymentMethod(c.UserContext(), principal(c).MerchantID, customerID, methodID); err != nil {
		return err
	}
	return redirectNotice(c, dashboardPath+"/customers/"+customerID, "card_deleted")
}

// chargeCustomer is the customer a charge's page names: nil for a charge of
// no customer; gone when the customer was deleted since.
func (s *server) chargeCustomer(c *fiber.Ctx, ch charges.Charge) (cu *customers.Customer, gone bool, err error) {
	if ch.CustomerID == nil {
		return nil, false, nil
	}
	got, err := s.Customers.Get(c.UserContext(), principal(c).MerchantID, *ch.CustomerID)
	if apperr.KindOf(err) == apperr.KindNotFound {
		return nil, true, nil
	}
	if err != nil {
		return nil, false, err
	}
	return &got, false, nil
}
