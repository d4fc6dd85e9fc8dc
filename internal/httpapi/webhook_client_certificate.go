package httpapi

import (
	"github.com/gofiber/fiber/v2"
)

// getClientCertificate answers the public half of the client certificate
// the merchant's deliveries present to mTLS receivers (made on first need).
func (s *server) getClientCertificate(c *fiber.Ctx) error {
	pr := principal(c)
	v, err := s.Webhooks.ClientCertificate(c.UserContext(), pr.MerchantID, pr.Environment)
	if err != nil {
		return err
	}
	return writeJSON(c, fiber.StatusOK, v)
}

// rotateClientCertificate makes a new client certificate, presented from
// now on; the previous one is shown for a day.
func (s *server) rotateClientCertificate(c *fiber.Ctx) error {
	var req struct{} // no body, or an empty object; anything else is refused
	if err := decodeJSON(c, &req); err != nil {
		return err
	}
	pr := principal(c)
	v, err := s.Webhooks.RotateClientCertificate(c.UserContext(), pr.MerchantID, pr.Environment)
	if err != nil {
		return err
	}
	return writeJSON(c, fiber.StatusOK, v)
}
