package httpapi

import (
	"github.com/gofiber/fiber/v2"
	"github.com/gofiber/fiber/v2/middleware/adaptor"
	"github.com/gofiber/fiber/v2/middleware/recover"
)

// routes is the whole API surface in one place.
func (s *server) routes(app *fiber.App) {
	app.Use(s.observe, recover.New())

	app.Get("/healthz", s.healthz)
	app.Get("/readyz", s.readyz)
	if s.Config.APIMetricsAddr == "" {
		// Otherwise /metrics is served on API_METRICS_ADDR only (MetricsServer).
		app.Get("/metrics", adaptor.HTTPHandler(s.MetricsHandler))
	}

	cfg := s.Config
	login := s.limitByIP("login", cfg.RateLimitLogin)
	perIP := s.limitByIP("default", cfg.RateLimitDefault)
	session := s.authenticate(acceptSession)
	secret := s.authenticate(acceptKey)
	either := s.authenticate(acceptSession | acceptKey)

	s.elementRoutes(app)
	s.dashboardRoutes(app)
	s.challengeRoutes(app, perIP)
	app.Post(cardFieldActionPath, perIP, s.authenticatePublic, s.limitByKey("tokens", cfg.RateLimitPublicKey), s.cardFieldNextAction)

	app.Post("/v1/auth/login", login, s.login)
	app.Post("/v1/auth/setup", s.limitByIP("setup", cfg.RateLimitLogin), s.setup)
	app.Post("/v1/auth/mfa", login, s.loginMFA)
	app.Delete("/v1/auth/logout", perIP, session, s.logout)

	app.Get("/v1/me", perIP, either, s.me)
	app.Post("/v1/me/api_keys", perIP, session, s.createKey)
	app.Get("/v1/me/api_keys", perIP, either, s.listKeys)
	app.Delete("/v1/me/api_keys/:id", perIP, secret, s.revokeKey)
	app.Post("/v1/me/api_keys/:id/roll", perIP, session, s.rollKey)

	app.Post("/v1/me/mfa/totp", perIP, session, s.enrollTOTP)
	app.Post("/v1/me/mfa/totp/confirm", perIP, session, s.confirmTOTP)
	app.Get("/v1/me/settings", perIP, session, s.getSettings)
	app.Patch("/v1/me/settings", perIP, session, s.updateSettings)

	app.Post("/v1/me/members", perIP, session, s.createMember)
	app.Get("/v1/me/members", perIP, session, s.listMembers)
	app.Get("/v1/me/members/:id", perIP, session, s.getMember)
	app.Patch("/v1/me/members/:id", perIP, session, s.updateMember)
	app.Delete("/v1/me/members/:id", perIP, session, s.deleteMember)
	app.Get("/v1/audit_log", perIP, session, s.listAuditLog)

	app.Post("/v1/charges", s.authenticateCounted(acceptKey, "default", cfg.RateLimitDefault, &keyLimits{
		key: namedLimit{"charges", cfg.RateLimitCharges}, merchant: namedLimit{"charges_merchant", cfg.RateLimitChargesMerchant},
	}), s.createCharge)
	app.Options(tokensPath, tokensPreflight)
	app.Post(tokensPath, allowAnyOrigin, perIP, s.authenticatePublic, s.limitByKey("tokens", cfg.RateLimitPublicKey), s.createToken)
	app.Get("/v1/charges", perIP, secret, s.listCharges)
	app.Get("/v1/charges/:id", perIP, secret, s.getCharge)
	app.Post("/v1/charges/:id/capture", perIP, secret, s.captureCharge)
	app.Post("/v1/charges/:id/void", perIP, secret, s.voidCharge)

	app.Post("/v1/refunds", perIP, secret, s.createRefund)
	app.Get("/v1/refunds", perIP, secret, s.listRefunds)
	app.Get("/v1/refunds/:id", perIP, secret, s.getRefund)

	app.Get("/v1/balance", perIP, secret, s.getBalance)
	app.Get("/v1/balance_transactions", perIP, secret, s.listBalanceTransactions)
	app.Get("/v1/balance_transactions/:id", perIP, secret, s.getBalanceTransaction)
	app.Post("/v1/payouts", perIP, secret, s.createPayout)
	app.Get("/v1/payouts", perIP, secret, s.listPayouts)
	app.Get("/v1/payouts/:id", perIP, secret, s.getPayout)
	app.Get("/v1/disputes", perIP, secret, s.listDisputes)
	app.Get("/v1/disputes/:id", perIP, secret, s.getDispute)
	app.Post("/v1/disputes/:id", perIP, secret, s.updateDispute)
	app.Post("/v1/disputes/:id/close", perIP, secret, s.closeDispute)
	app.Post("/v1/reconciliations", perIP, secret, s.createReconciliation)
	app.Get("/v1/reconciliations", perIP, secret, s.listReconciliations)
	app.Get("/v1/reconciliations/:id", perIP, secret, s.getReconciliation)
	app.Get("/v1/reconciliations/:id/exceptions", perIP, secret, s.listReconciliationExceptions)
	app.Post("/v1/reconciliations/:id/exceptions/:exc/resolve", perIP, secret, s.resolveReconciliationException)
	app.Get("/v1/connectors/:id/settlement_report", perIP, secret, s.getSettlementReport)

	app.Post("/v1/customers", perIP, secret, s.createCustomer)
	app.Get("/v1/customers", perIP, secret, s.listCustomers)
	app.Get("/v1/customers/:id", perIP, secret, s.getCustomer)
	app.Patch("/v1/customers/:id", perIP, secret, s.updateCustomer)
	app.Delete("/v1/customers/:id", perIP, secret, s.deleteCustomer)
	app.Post("/v1/customers/:id/payment_methods", perIP, secret, s.createPaymentMethod)
	app.Get("/v1/customers/:id/payment_methods", perIP, secret, s.listPaymentMethods)
	app.Delete("/v1/customers/:id/payment_methods/:pm_id", perIP, secret, s.deletePaymentMethod)

	app.Post("/v1/connectors", perIP, secret, s.createConnector)
	app.Get("/v1/connectors", perIP, secret, s.listConnectors)
	app.Get("/v1/connectors/:id", perIP, secret, s.getConnector)
	app.Patch("/v1/connectors/:id", perIP, secret, s.updateConnector)
	app.Delete("/v1/connectors/:id", perIP, secret, s.deleteConnector)
	app.Get("/v1/connectors/:id/notifications", perIP, secret, s.listNotifications)
	s.Limiter.Declare(notificationFailures)
	app.Post(notificationsPath, s.receiveNotification)
	app.Get("/v1/routing", perIP, secret, s.getRouting)
	app.Put("/v1/routing", perIP, secret, s.putRouting)

	app.Post("/v1/me/webhook_endpoints", perIP, secret, s.createEndpoint)
	app.Get("/v1/me/webhook_endpoints", perIP, secret, s.listEndpoints)
	app.Get("/v1/me/webhook_endpoints/:id", perIP, secret, s.getEndpoint)
	app.Patch("/v1/me/webhook_endpoints/:id", perIP, secret, s.updateEndpoint)
	app.Delete("/v1/me/webhook_endpoints/:id", perIP, secret, s.deleteEndpoint)
	app.Post("/v1/me/webhook_endpoints/:id/rotate_secret", perIP, secret, s.rotateSecret)
	app.Post("/v1/me/webhook_endpoints/:id/test", perIP, secret, s.limitByEndpoint("endpoint_test", cfg.RateLimitEndpointActions), s.testEndpoint)
	app.Post("/v1/me/webhook_endpoints/:id/recover", perIP, secret, s.limitByEndpoint("endpoint_recover", cfg.RateLimitEndpointActions), s.recoverEndpoint)
	app.Get("/v1/me/webhook_endpoints/:id/deliveries", perIP, secret, s.listDeliveries)
	app.Get("/v1/me/webhook_endpoints/:id/stats", perIP, secret, s.endpointStats)
	app.Post("/v1/webhook_deliveries/:id/retry", perIP, secret, s.retryDelivery)
	app.Get("/v1/me/webhook_client_certificate", perIP, secret, s.getClientCertificate)
	app.Post("/v1/me/webhook_client_certificate/rotate", perIP, secret, s.rotateClientCertificate)

	app.Get("/v1/events", perIP, secret, s.listEvents)
	app.Get("/v1/events/stream", perIP, secret, s.eventStream)
	app.Get("/v1/events/:id", perIP, secret, s.getEvent)
	app.Get("/v1/event_types", perIP, secret, s.listEventTypes())
}
