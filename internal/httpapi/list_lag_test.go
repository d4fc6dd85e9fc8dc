package httpapi

import (
	"testing"

	"github.com/gofiber/fiber/v2"
	"github.com/valyala/fasthttp"

	"github.com/gatehouse-pay/gatehouse/internal/ids"
	"github.com/gatehouse-pay/gatehouse/internal/listing"
)

// TestListsMayLagOnlyOnGet: a list asked for with GET (the list endpoints,
// the dashboard's list pages) may be read from the standby; one rendered
// in the answer to a form (POST) sees the write just made: the primary.
func TestListsMayLagOnlyOnGet(t *testing.T) {
	t.Parallel()
	for method, want := range map[string]bool{fiber.MethodGet: true, fiber.MethodPost: false} {
		withCtx(func(r *fasthttp.Request) {
			r.Header.SetMethod(method)
			r.SetRequestURI("/v1/list?limit=5")
		}, nil, func(c *fiber.Ctx) {
			p, err := listParams(c, ids.ValidUUID)
			if err != nil {
				t.Fatalf("%s: %v", method, err)
			}
			if p.MayLag != want {
				t.Errorf("%s: MayLag %v, want %v", method, p.MayLag, want)
			}
			if p, _ := cursors(c, listing.Params{Limit: 25}, ids.ValidUUID); p.MayLag != want {
				t.Errorf("%s: the dashboard's pager: MayLag %v, want %v", method, p.MayLag, want)
			}
		})
	}
}
