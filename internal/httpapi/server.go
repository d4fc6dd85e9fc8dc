// Package httpapi is Gatehouse's REST API on Fiber: the route table, the
// middleware (request ids, metrics, client IPs, authentication, rate limits),
// request decoding and the one table from error kind to HTTP status. Handlers
// call the domain services and return errors; they never render one.
package httpapi

import (
	"context"
	"log/slog"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/gofiber/fiber/v2"

	"github.com/gatehouse-pay/gatehouse/internal/apikeys"
	"github.com/gatehouse-pay/gatehouse/internal/auth"
	"github.com/gatehouse-pay/gatehouse/internal/charges"
	"github.com/gatehouse-pay/gatehouse/internal/config"
	"github.com/gatehouse-pay/gatehouse/internal/events"
	"github.com/gatehouse-pay/gatehouse/internal/keyring"
	"github.com/gatehouse-pay/gatehouse/internal/merchants"
	"github.com/gatehouse-pay/gatehouse/internal/metrics"
	"github.com/gatehouse-pay/gatehouse/internal/ratelimit"
	"github.com/gatehouse-pay/gatehouse/internal/refunds"
	"github.com/gatehouse-pay/gatehouse/internal/webhooks"
)

// BodyLimit is the largest request body accepted (CONTRACT.md: 64 KiB).
const BodyLimit = 64 << 10

// readLimit is what the server reads before refusing a request outright. A
// body between BodyLimit and readLimit is read whole and answered with a clean
// 413; refusing it unread would reset the connection under a client still
// sending, which then never sees the answer.
const readLimit = 4 * BodyLimit

// Deps are everything the API needs.
type Deps struct {
	Config    config.Config
	Log       *slog.Logger
	Auth      *auth.Service
	Keys      *apikeys.Service
	Merchants *merchants.Service
	Charges   *charges.Service
	Refunds   *refunds.Service
	Events    *events.Service
	Webhooks  *webhooks.Service
	Keyring   *keyring.Keyring
	Limiter   *ratelimit.Limiter
	Metrics   *metrics.HTTP
	// MetricsHandler serves /metrics.
	MetricsHandler http.Handler
	// Checks are the readiness probes by dependency name.
	Checks map[string]func(context.Context) error
	// Draining turns readiness false while the process shuts down.
	Draining *atomic.Bool
}

type server struct {
	Deps
	trusted trustedProxies
}

// NewServer returns the API as a Fiber app with every route registered.
func NewServer(d Deps) *fiber.App {
	if d.Draining == nil {
		d.Draining = new(atomic.Bool)
	}
	s := &server{Deps: d, trusted: trustedProxies(d.Config.TrustedProxies)}
	app := fiber.New(fiber.Config{
		AppName:               "gatehouse",
		BodyLimit:             readLimit,
		ReadTimeout:           15 * time.Second,
		WriteTimeout:          15 * time.Second,
		IdleTimeout:           75 * time.Second,
		ReadBufferSize:        16 << 10,
		DisableStartupMessage: true,
		ErrorHandler:          s.renderError,
	})
	s.routes(app)
	return app
}
