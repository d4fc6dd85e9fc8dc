// Package httpapi is Gatehouse's REST API on Fiber: the route table, the
// middleware (tracing when on, request ids, metrics, client IPs,
// authentication, rate limits), request decoding and the one table from
// error kind to HTTP status. Handlers call the domain services and return
// errors; they never render one.
package httpapi

import (
	"context"
	"log/slog"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"github.com/gofiber/contrib/otelfiber/v2"
	"github.com/gofiber/fiber/v2"
	"github.com/gofiber/fiber/v2/middleware/recover"
	"github.com/google/uuid"
	"go.opentelemetry.io/otel/attribute"

	"github.com/gatehouse-pay/gatehouse/internal/apikeys"
	"github.com/gatehouse-pay/gatehouse/internal/auth"
	"github.com/gatehouse-pay/gatehouse/internal/charges"
	"github.com/gatehouse-pay/gatehouse/internal/config"
	"github.com/gatehouse-pay/gatehouse/internal/connectors"
	"github.com/gatehouse-pay/gatehouse/internal/customers"
	"github.com/gatehouse-pay/gatehouse/internal/disputes"
	"github.com/gatehouse-pay/gatehouse/internal/events"
	"github.com/gatehouse-pay/gatehouse/internal/keyring"
	"github.com/gatehouse-pay/gatehouse/internal/ledger"
	"github.com/gatehouse-pay/gatehouse/internal/members"
	"github.com/gatehouse-pay/gatehouse/internal/merchants"
	"github.com/gatehouse-pay/gatehouse/internal/metrics"
	"github.com/gatehouse-pay/gatehouse/internal/mfa"
	"github.com/gatehouse-pay/gatehouse/internal/notifications"
	"github.com/gatehouse-pay/gatehouse/internal/ratelimit"
	"github.com/gatehouse-pay/gatehouse/internal/reconcile"
	"github.com/gatehouse-pay/gatehouse/internal/refunds"
	"github.com/gatehouse-pay/gatehouse/internal/tracing"
	"github.com/gatehouse-pay/gatehouse/internal/webhooks"
)

// BodyLimit is the largest request body accepted (api/openapi.yaml: 64 KiB).
const BodyLimit = 64 << 10

// notificationsPath is the route of the providers' notifications, whose
// bodies may be up to notifications.MaxBody (a provider batches them).
const notificationsPath = "/v1/provider_notifications/:connector_id"

// bodyLimitOf is the largest body the request's route takes.
func bodyLimitOf(c *fiber.Ctx) int {
	if c.Method() == fiber.MethodPost && strings.HasPrefix(c.Path(), "/v1/provider_notifications/") {
		return notifications.MaxBody
	}
	if c.Method() == fiber.MethodPost && (c.Path() == "/v1/reconciliations" || c.Path() == dashboardPath+"/reconciliations") {
		return reconciliationBodyLimit
	}
	if c.Method() == fiber.MethodPost && evidenceFormPath(c.Path()) {
		return evidenceBodyLimit
	}
	return BodyLimit
}

// readLimit is what the server reads before refusing a request outright. A
// body between BodyLimit and readLimit (2 MiB) is read whole and answered
// with a clean 413; refusing it unread would reset the connection under a
// client still sending, which then never sees the answer. Larger bodies are
// refused unread. The cost is bounded: at most readLimit per connection.
const readLimit = 32 * BodyLimit

// KeyGate is the API key cache as a rate-limit gate: Gate is open while
// the key's entry says active, and Decode reads the entry the gate returns.
type KeyGate interface {
	Gate(digest []byte) ratelimit.Gate
	Decode(value string) (apikeys.Entry, bool)
	// OwnedBy is the prefix of the values of the merchant's keys' entries.
	OwnedBy(merchantID string) string
}

// Deps are everything the API needs.
type Deps struct {
	Config config.Config
	Log    *slog.Logger
	Auth   *auth.Service
	Keys   *apikeys.Service
	// KeyCache, when set, lets the charge route read a key's cached entry and
	// count its rate limit in one Redis round trip (cache.Cache).
	KeyCache  KeyGate
	Merchants *merchants.Service
	Members   *members.Service
	// MFA is two-factor sign-in (enrollment, the second step, the policy).
	MFA       *mfa.Service
	Charges   *charges.Service
	Refunds   *refunds.Service
	Customers *customers.Service
	// Connectors are the merchant's accounts at providers and the routing.
	Connectors *connectors.Service
	// Disputes are cardholders' disputes of charges, and the merchants'
	// answers.
	Disputes *disputes.Service
	// Ledger is the merchant's books: balance, balance transactions and
	// payouts.
	Ledger *ledger.Service
	// Reconcile compares the books with the providers' settlement reports.
	Reconcile *reconcile.Service
	// Notifications takes the providers' notifications.
	Notifications *notifications.Receiver
	Events        *events.Service
	Webhooks      *webhooks.Service
	// AuditLog records every state-changing request and lists the records
	// (docs/audit.md); nil records nothing.
	AuditLog AuditLog
	// Stream serves GET /v1/events/stream; nil answers 503.
	Stream  *events.Hub
	Keyring *keyring.Keyring
	Limiter *ratelimit.Limiter
	Metrics *metrics.HTTP
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
	dash    *dashboard
	owners  keyOwners // see resolveLimited
}

// NewServer returns the API as a Fiber app with every route registered.
func NewServer(d Deps) *fiber.App {
	if d.Draining == nil {
		d.Draining = new(atomic.Bool)
	}
	s := &server{Deps: d, trusted: trustedProxies(d.Config.TrustedProxies), dash: newDashboard()}
	// Slow senders and idle connections (docs/settings.md): a request
	// must arrive whole within the read timeout of its first byte (the
	// deadline is not extended per byte); a keep-alive connection that
	// sends nothing is closed after the idle timeout; the request line and
	// headers must fit the 16 KiB read buffer (431 otherwise).
	//
	// HTTP_MAX_CONNS is enforced by LimitListener, which answers the surplus
	// in the contract's error body. fasthttp's Concurrency is the size of its
	// worker pool, one goroutine per connection served, and over it fasthttp
	// writes a plain-text 503 of its own. It stays well above the cap: a
	// worker closes its connection, freeing a place under the cap, an
	// instant before it is ready to serve the next one, so with equal limits
	// a connection accepted in that instant would meet fasthttp's 503.
	// Workers are started on demand, so the headroom costs nothing.
	app := fiber.New(fiber.Config{
		AppName:               "gatehouse",
		BodyLimit:             readLimit,
		ReadTimeout:           d.Config.HTTPReadTimeout,
		WriteTimeout:          d.Config.HTTPWriteTimeout,
		IdleTimeout:           d.Config.HTTPIdleTimeout,
		Concurrency:           max(fiber.DefaultConcurrency, 2*d.Config.HTTPMaxConns),
		ReadBufferSize:        16 << 10,
		DisableStartupMessage: true,
		ErrorHandler:          s.renderError,
	})
	if tracing.Enabled() {
		app.Use(s.traced())
	}
	s.routes(app)
	return app
}

// NewProbeServer returns /healthz and /readyz alone, answered as NewServer
// answers them, for the listener of PROBE_ADDR: the kubelet's probes reach
// it while HTTP_MAX_CONNS connections fill the public port, whose limit it
// does not share. Draining and the checks are d's, as on the public port.
func NewProbeServer(d Deps) *fiber.App {
	if d.Draining == nil {
		d.Draining = new(atomic.Bool)
	}
	s := &server{Deps: d, trusted: trustedProxies(d.Config.TrustedProxies)}
	app := fiber.New(fiber.Config{
		AppName:               "gatehouse-probes",
		BodyLimit:             BodyLimit,
		ReadTimeout:           5 * time.Second,
		WriteTimeout:          5 * time.Second,
		IdleTimeout:           2 * time.Minute,
		DisableStartupMessage: true,
		ErrorHandler:          s.renderError,
	})
	app.Use(s.observe, recover.New())
	app.Get("/healthz", s.healthz)
	app.Get("/readyz", s.readyz)
	return app
}

// MetricsServer serves GET /metrics with h and nothing else, for the
// listener of API_METRICS_ADDR; NewServer then leaves /metrics off
// HTTP_ADDR. Like every API answer, each carries an X-Request-Id (the
// client's when it is safe to echo).
func MetricsServer(h http.Handler) *http.Server {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", h)
	return &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			id := r.Header.Get(headerRequestID)
			if !validRequestID(id) {
				id = uuid.NewString()
			}
			w.Header().Set(headerRequestID, id)
			mux.ServeHTTP(w, r)
		}),
		ReadHeaderTimeout: 5 * time.Second,
		IdleTimeout:       2 * time.Minute,
	}
}

// traced is the tracing middleware, first in the chain so that every later
// one runs within the request's span. The span continues the caller's trace
// (a W3C traceparent header) and is named after the method and the route
// template, never the raw path. The client address is the one the rate
// limits see (TRUSTED_PROXIES). The operating endpoints are not traced.
func (s *server) traced() fiber.Handler {
	return otelfiber.Middleware(
		otelfiber.WithCollectClientIP(false),
		otelfiber.WithCustomAttributes(func(c *fiber.Ctx) []attribute.KeyValue {
			return []attribute.KeyValue{attribute.String("client.address", s.clientIP(c).String())}
		}),
		otelfiber.WithNext(func(c *fiber.Ctx) bool {
			switch c.Path() {
			case "/healthz", "/readyz", "/metrics":
				return true
			}
			return false
		}),
		otelfiber.WithSpanNameFormatter(func(c *fiber.Ctx) string {
			method := methodLabel(c.Method())
			if r := c.Route(); r != nil && r.Method != "USE" {
				return method + " " + r.Path
			}
			return method // no route matched: the path is anything a client sent
		}),
	)
}
