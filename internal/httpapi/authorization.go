package httpapi

import (
	"github.com/gofiber/fiber/v2"

	"github.com/gatehouse-pay/gatehouse/internal/authz"
)

// needs is the one authorization table: what each authenticated route of
// the API and each dashboard page and action needs, keyed "METHOD /path" as
// the routes are registered. A route that authenticates but has no row is
// refused (and TestEveryRouteHasANeed fails), so nothing is reachable by
// being forgotten here. docs/team.md lists it for people.
var needs = map[string]authz.Need{
	"DELETE /v1/auth/logout": authz.Anyone,

	"GET /v1/me":                       authz.Anyone,
	"POST /v1/me/mfa/totp":             authz.Anyone,
	"POST /v1/me/mfa/totp/confirm":     authz.Anyone,
	"GET /v1/me/settings":              read(authz.Account),
	"PATCH /v1/me/settings":            write(authz.Account),
	"POST /v1/me/api_keys":             write(authz.APIKeys),
	"GET /v1/me/api_keys":              read(authz.APIKeys),
	"POST /v1/me/api_keys/:id/roll":    write(authz.APIKeys),
	"DELETE /v1/me/api_keys/:id":       write(authz.APIKeys),
	"POST /v1/me/members":              write(authz.Members),
	"GET /v1/me/members":               read(authz.Members),
	"GET /v1/me/members/:id":           read(authz.Members),
	"PATCH /v1/me/members/:id":         write(authz.Members),
	"DELETE /v1/me/members/:id":        write(authz.Members),
	"GET /v1/audit_log":                read(authz.AuditLog),
	"POST /v1/charges":                 write(authz.Charges),
	"GET /v1/charges":                  read(authz.Charges),
	"GET /v1/charges/:id":              read(authz.Charges),
	"POST /v1/charges/:id/capture":     write(authz.Charges),
	"POST /v1/charges/:id/void":        write(authz.Charges),
	"POST /v1/refunds":                 write(authz.Refunds),
	"GET /v1/refunds":                  read(authz.Refunds),
	"GET /v1/refunds/:id":              read(authz.Refunds),
	"GET /v1/balance":                  read(authz.Balance),
	"GET /v1/balance_transactions":     read(authz.Balance),
	"GET /v1/balance_transactions/:id": read(authz.Balance),
	"POST /v1/payouts":                 write(authz.Balance),
	"GET /v1/payouts":                  read(authz.Balance),
	"GET /v1/payouts/:id":              read(authz.Balance),
	"GET /v1/disputes":                 read(authz.Disputes),
	"GET /v1/disputes/:id":             read(authz.Disputes),
	// Staging evidence; submitting it needs write access to disputes as
	// well (updateDispute checks it).
	"POST /v1/disputes/:id":                           write(authz.DisputeEvidence),
	"POST /v1/disputes/:id/close":                     write(authz.Disputes),
	"POST /v1/customers":                              write(authz.Customers),
	"GET /v1/customers":                               read(authz.Customers),
	"GET /v1/customers/:id":                           read(authz.Customers),
	"PATCH /v1/customers/:id":                         write(authz.Customers),
	"DELETE /v1/customers/:id":                        write(authz.Customers),
	"POST /v1/customers/:id/payment_methods":          write(authz.Customers),
	"GET /v1/customers/:id/payment_methods":           read(authz.Customers),
	"DELETE /v1/customers/:id/payment_methods/:pm_id": write(authz.Customers),
	"POST /v1/connectors":                             write(authz.Connectors),
	"GET /v1/connectors":                              read(authz.Connectors),
	"GET /v1/connectors/:id":                          read(authz.Connectors),
	"GET /v1/connectors/:id/notifications":            read(authz.Connectors),
	"PATCH /v1/connectors/:id":                        write(authz.Connectors),
	"DELETE /v1/connectors/:id":                       write(authz.Connectors),
	"GET /v1/routing":                                 read(authz.Connectors),
	"PUT /v1/routing":                                 write(authz.Connectors),
	"POST /v1/me/webhook_endpoints":                   write(authz.WebhookEndpoints),
	"GET /v1/me/webhook_endpoints":                    read(authz.WebhookEndpoints),
	"GET /v1/me/webhook_endpoints/:id":                read(authz.WebhookEndpoints),
	"PATCH /v1/me/webhook_endpoints/:id":              write(authz.WebhookEndpoints),
	"DELETE /v1/me/webhook_endpoints/:id":             write(authz.WebhookEndpoints),
	"POST /v1/me/webhook_endpoints/:id/rotate_secret": write(authz.WebhookEndpoints),
	"POST /v1/me/webhook_endpoints/:id/test":          write(authz.WebhookEndpoints),
	"POST /v1/me/webhook_endpoints/:id/recover":       write(authz.WebhookEndpoints),
	"GET /v1/me/webhook_endpoints/:id/deliveries":     read(authz.WebhookEndpoints),
	"GET /v1/me/webhook_endpoints/:id/stats":          read(authz.WebhookEndpoints),
	"POST /v1/webhook_deliveries/:id/retry":           write(authz.WebhookEndpoints),
	"GET /v1/me/webhook_client_certificate":           read(authz.WebhookEndpoints),
	"POST /v1/me/webhook_client_certificate/rotate":   write(authz.WebhookEndpoints),
	"GET /v1/events":                                  read(authz.Events),
	"GET /v1/events/stream":                           read(authz.Events),
	"GET /v1/events/:id":                              read(authz.Events),
	"GET /v1/event_types":                             read(authz.Events),

	"POST /v1/reconciliations":                             write(authz.Balance),
	"GET /v1/reconciliations":                              read(authz.Balance),
	"GET /v1/reconciliations/:id":                          read(authz.Balance),
	"GET /v1/reconciliations/:id/exceptions":               read(authz.Balance),
	"POST /v1/reconciliations/:id/exceptions/:exc/resolve": write(authz.Balance),
	"GET /v1/connectors/:id/settlement_report":             read(authz.Balance),

	"POST /dashboard/logout":                                      authz.Anyone,
	"GET /dashboard":                                              authz.Anyone,
	"GET /dashboard/security":                                     authz.Anyone,
	"POST /dashboard/security/totp":                               authz.Anyone,
	"POST /dashboard/security/totp/confirm":                       authz.Anyone,
	"GET /dashboard/keys":                                         read(authz.APIKeys),
	"POST /dashboard/keys":                                        write(authz.APIKeys),
	"POST /dashboard/keys/:id/revoke":                             write(authz.APIKeys),
	"POST /dashboard/keys/:id/roll":                               write(authz.APIKeys),
	"GET /dashboard/charges":                                      read(authz.Charges),
	"GET /dashboard/charges/:id":                                  read(authz.Charges),
	"POST /dashboard/charges/:id/capture":                         write(authz.Charges),
	"POST /dashboard/charges/:id/void":                            write(authz.Charges),
	"POST /dashboard/charges/:id/refund":                          write(authz.Refunds),
	"GET /dashboard/balance":                                      read(authz.Balance),
	"GET /dashboard/payouts":                                      read(authz.Balance),
	"POST /dashboard/payouts":                                     write(authz.Balance),
	"GET /dashboard/payouts/:id":                                  read(authz.Balance),
	"GET /dashboard/reconciliations":                              read(authz.Balance),
	"POST /dashboard/reconciliations":                             write(authz.Balance),
	"GET /dashboard/reconciliations/:id":                          read(authz.Balance),
	"POST /dashboard/reconciliations/:id/exceptions/:exc/resolve": write(authz.Balance),
	"GET /dashboard/disputes":                                     read(authz.Disputes),
	"GET /dashboard/disputes/:id":                                 read(authz.Disputes),
	// Staging evidence; submitting it needs write access to disputes as
	// well (dashUpdateDispute checks it).
	"POST /dashboard/disputes/:id":                                write(authz.DisputeEvidence),
	"POST /dashboard/disputes/:id/close":                          write(authz.Disputes),
	"GET /dashboard/customers":                                    read(authz.Customers),
	"GET /dashboard/customers/:id":                                read(authz.Customers),
	"POST /dashboard/customers/:id/delete":                        write(authz.Customers),
	"POST /dashboard/customers/:id/payment_methods/:pm_id/delete": write(authz.Customers),
	"GET /dashboard/connectors":                                   read(authz.Connectors),
	"POST /dashboard/connectors":                                  write(authz.Connectors),
	"GET /dashboard/connectors/:id":                               read(authz.Connectors),
	"POST /dashboard/connectors/:id/enabled":                      write(authz.Connectors),
	"POST /dashboard/connectors/:id/rehearsal":                    write(authz.Connectors),
	"POST /dashboard/connectors/:id/delete":                       write(authz.Connectors),
	"GET /dashboard/routing":                                      read(authz.Connectors),
	"POST /dashboard/routing":                                     write(authz.Connectors),
	"GET /dashboard/events":                                       read(authz.Events),
	"GET /dashboard/events/:id":                                   read(authz.Events),
	"GET /dashboard/webhooks":                                     read(authz.WebhookEndpoints),
	"POST /dashboard/webhooks":                                    write(authz.WebhookEndpoints),
	"GET /dashboard/webhooks/:id":                                 read(authz.WebhookEndpoints),
	"POST /dashboard/webhooks/:id":                                write(authz.WebhookEndpoints),
	"POST /dashboard/webhooks/:id/rotate":                         write(authz.WebhookEndpoints),
	"POST /dashboard/webhooks/:id/test":                           write(authz.WebhookEndpoints),
	"POST /dashboard/webhooks/:id/recover":                        write(authz.WebhookEndpoints),
	"POST /dashboard/webhooks/:id/delete":                         write(authz.WebhookEndpoints),
	"POST /dashboard/deliveries/:id/retry":                        write(authz.WebhookEndpoints),
	"GET /dashboard/audit":                                        read(authz.AuditLog),
	"GET /dashboard/team":                                         read(authz.Members),
	"POST /dashboard/team":                                        write(authz.Members),
	"POST /dashboard/team/:id/role":                               write(authz.Members),
	"POST /dashboard/team/:id/remove":                             write(authz.Members),
	"POST /dashboard/team/settings":                               write(authz.Account),
}

// Needs returns a copy of the authorization table, for tests and docs.
func Needs() map[string]authz.Need {
	out := make(map[string]authz.Need, len(needs))
	for k, v := range needs {
		out[k] = v
	}
	return out
}

// authorize checks the authenticated caller against the route's row of the
// table: 403 permission_denied when the caller's role or key does not grant
// it. It runs inside the authentication handlers, so every route that
// authenticates is checked.
func (s *server) authorize(c *fiber.Ctx) error {
	r := c.Route()
	method := r.Method
	if method == fiber.MethodHead {
		method = fiber.MethodGet
	}
	n, ok := needs[method+" "+r.Path]
	if !ok {
		return authz.Denied(authz.Need{Resource: "this route", Access: authz.Write})
	}
	if p := principal(c); !p.Allows(n) {
		s.Metrics.AuthFailures.WithLabelValues("permission_denied").Inc()
		if p.MFAPending {
			return errMFAFirst
		}
		return authz.Denied(n)
	}
	return nil
}

func read(r authz.Resource) authz.Need  { return authz.Need{Resource: r, Access: authz.Read} }
func write(r authz.Resource) authz.Need { return authz.Need{Resource: r, Access: authz.Write} }
