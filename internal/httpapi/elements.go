package httpapi

import (
	"embed"

	"github.com/gofiber/fiber/v2"
)

// The card field of client-side card collection (api/openapi.yaml): gatehouse.js,
// which a merchant's checkout page loads, and the gateway's own page that it
// frames, where the card is typed. Both are embedded and served as they are.
//
//go:embed elements/gatehouse.js elements/card.html elements/card.js elements/card.css
var elementFiles embed.FS

// Content-Security-Policy of the card field: nothing but its own script,
// style and calls to this origin's API; no inline script; any page may frame
// it (that is its purpose). It frames only the issuer's challenge of a charge
// (gatehouse.handleNextAction): the gateway's own page, or a provider's,
// which is served over https.
const cardFieldCSP = "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; " +
	"img-src 'self'; form-action 'none'; base-uri 'none'; frame-src 'self' https:; frame-ancestors *"

// scriptCSP is the policy of the static scripts and styles themselves.
const scriptCSP = "default-src 'none'; frame-ancestors *"

// element serves one embedded file with its type, policy and caching.
func element(name, contentType, csp, cacheControl string) fiber.Handler {
	body, err := elementFiles.ReadFile("elements/" + name)
	if err != nil {
		panic(err) // embedded at build time: a missing file is a build error
	}
	return func(c *fiber.Ctx) error {
		c.Set(fiber.HeaderContentType, contentType)
		c.Set(fiber.HeaderContentSecurityPolicy, csp)
		c.Set(fiber.HeaderXContentTypeOptions, "nosniff")
		c.Set(fiber.HeaderReferrerPolicy, "no-referrer")
		c.Set(fiber.HeaderCacheControl, cacheControl)
		return c.Send(body)
	}
}

// elementRoutes serves the card field.
func (s *server) elementRoutes(app *fiber.App) {
	const js, css = "text/javascript; charset=utf-8", "text/css; charset=utf-8"
	app.Get("/js/v1/gatehouse.js", element("gatehouse.js", js, scriptCSP, "public, max-age=300"))
	app.Get("/elements/v1/card", element("card.html", "text/html; charset=utf-8", cardFieldCSP, "no-store"))
	app.Get("/elements/v1/card.js", element("card.js", js, scriptCSP, "public, max-age=300"))
	app.Get("/elements/v1/card.css", element("card.css", css, scriptCSP, "public, max-age=300"))
}
