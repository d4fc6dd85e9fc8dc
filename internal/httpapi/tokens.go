package httpapi

import (
	"strings"

	"github.com/gofiber/fiber/v2"

	"github.com/gatehouse-pay/gatehouse/internal/apikeys"
	"github.com/gatehouse-pay/gatehouse/internal/apperr"
	"github.com/gatehouse-pay/gatehouse/internal/auth"
	"github.com/gatehouse-pay/gatehouse/internal/charges"
	"github.com/gatehouse-pay/gatehouse/internal/idempotency"
)

// POST /v1/tokens is the one route a browser calls on another origin, with a
// public key (api/openapi.yaml). It alone answers
// CORS: any origin, no cookies (the key is in Authorization).
const tokensPath = "/v1/tokens"

var errNeedsPublicKey = apperr.Unauthenticated(apperr.CodeInvalidTokenType,
	"This endpoint takes a public key (pk_test_...); keep secret keys and session tokens on your server.")

// allowAnyOrigin lets a page on any origin read the answer, errors included.
func allowAnyOrigin(c *fiber.Ctx) error {
	c.Set(fiber.HeaderAccessControlAllowOrigin, "*")
	return c.Next()
}

// tokensPreflight answers the browser's CORS preflight of POST /v1/tokens.
func tokensPreflight(c *fiber.Ctx) error {
	c.Set(fiber.HeaderAccessControlAllowOrigin, "*")
	c.Set(fiber.HeaderAccessControlAllowMethods, fiber.MethodPost)
	c.Set(fiber.HeaderAccessControlAllowHeaders, "Authorization, Content-Type, Idempotency-Key")
	c.Set(fiber.HeaderAccessControlMaxAge, "600")
	return c.SendStatus(fiber.StatusNoContent)
}

// authenticatePublic resolves a public key to its key pair's principal. A
// secret key or a session token is the wrong kind of token here.
func (s *server) authenticatePublic(c *fiber.Ctx) error {
	p, err := s.resolvePublic(c)
	if err != nil {
		s.Metrics.AuthFailures.WithLabelValues(apperr.CodeOf(err)).Inc()
		return err
	}
	c.Locals(localPrincipal, p)
	return c.Next()
}

func (s *server) resolvePublic(c *fiber.Ctx) (auth.Principal, error) {
	token, err := bearer(c)
	if err != nil {
		return auth.Principal{}, err
	}
	switch {
	case strings.HasPrefix(token, apikeys.PublicPrefix):
		e, err := s.Keys.AuthenticatePublic(c.UserContext(), token)
		if err != nil {
			return auth.Principal{}, err
		}
		return auth.Principal{MerchantID: e.MerchantID, KeyID: e.KeyID, Environment: e.Environment, PublicKey: true}, nil
	case strings.HasPrefix(token, apikeys.SecretLivePrefix):
		return auth.Principal{}, apperr.LiveMode()
	case strings.HasPrefix(token, "sk_"):
		return auth.Principal{}, errNeedsPublicKey
	}
	if _, err := s.Auth.VerifyToken(token); err != nil {
		return auth.Principal{}, err
	}
	return auth.Principal{}, errNeedsPublicKey
}

func (s *server) createToken(c *fiber.Ctx) error {
	var p charges.TokenParams
	idem, err := s.decodeCreate(c, &p)
	if err != nil {
		return err
	}
	pr := principal(c)
	res, err := s.Charges.CreateToken(c.UserContext(), pr.MerchantID, pr.Environment, pr.KeyID, p, idem,
		func(v any) (idempotency.Response, error) { return renderAs[any](fiber.StatusCreated)(v) })
	if err != nil {
		return err
	}
	return sendResult(c, res)
}
