package httpapi

import (
	"encoding/json"

	"github.com/gofiber/fiber/v2"

	"github.com/gatehouse-pay/gatehouse/internal/apperr"
	"github.com/gatehouse-pay/gatehouse/internal/eventtypes"
	"github.com/gatehouse-pay/gatehouse/internal/resource"
)

// eventTypesMaxAge is how long a client may keep GET /v1/event_types'
// answer: the catalogue changes only with a release.
const eventTypesMaxAge = "private, max-age=3600"

// listEventTypes answers GET /v1/event_types: every event type with its
// description, schema and example (internal/eventtypes), rendered once
// when the routes are made, since it never changes while the API runs.
func (s *server) listEventTypes() fiber.Handler {
	body, err := renderEventTypes()
	return func(c *fiber.Ctx) error {
		if err != nil {
			return apperr.Internal(err)
		}
		c.Set(fiber.HeaderCacheControl, eventTypesMaxAge)
		c.Status(fiber.StatusOK)
		c.Set(fiber.HeaderContentType, contentTypeJSON)
		return c.Send(body)
	}
}

func renderEventTypes() ([]byte, error) {
	list, err := eventtypes.List()
	if err != nil {
		return nil, err
	}
	return json.Marshal(resource.List[resource.EventType]{Object: "list", Data: list, HasMore: false})
}
