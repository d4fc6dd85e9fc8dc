package httpapi

import (
	"context"
	"net/url"
	"strings"
	"unicode/utf8"

	"github.com/gofiber/fiber/v2"

	"github.com/gatehouse-pay/gatehouse/internal/apperr"
	"github.com/gatehouse-pay/gatehouse/internal/audit"
	"github.com/gatehouse-pay/gatehouse/internal/ids"
	"github.com/gatehouse-pay/gatehouse/internal/listing"
)

// AuditLog is the store of the audit log (docs/audit.md).
type AuditLog interface {
	ListAudit(ctx context.Context, merchantID string, f audit.Filter, p listing.Params) (listing.Page[audit.Entry], error)
	// AppendAudit writes the entry ctx carries on its own if no write of
	// the action wrote it.
	AppendAudit(ctx context.Context) error
}

// auditIDPrefix starts the ids of audit log entries.
const auditIDPrefix = "al"

// auditAction is what an audited route records: the action, the type of
// the object it acts on and the route parameter naming that object ("" for
// a creation, whose object the store names as it writes it).
type auditAction struct {
	name, object, param string
}

// actions are the audit log's actions of every state-changing route of the
// API and the dashboard (TestEveryWriteRouteHasAnAction keeps it complete).
var actions = map[string]auditAction{
	"DELETE /v1/auth/logout": {"session.revoke", "session", ""},

	"POST /v1/me/api_keys":                            {"api_key.create", "api_key", ""},
	"DELETE /v1/me/api_keys/:id":                      {"api_key.revoke", "api_key", "id"},
	"POST /v1/me/api_keys/:id/roll":                   {"api_key.roll", "api_key", "id"},
	"POST /v1/me/members":                             {"member.create", "member", ""},
	"PATCH /v1/me/members/:id":                        {"member.update", "member", "id"},
	"DELETE /v1/me/members/:id":                       {"member.remove", "member", "id"},
	"PATCH /v1/me/settings":                           {"account.update", "merchant", ""},
	"POST /v1/me/mfa/totp":                            {"mfa.totp_start", "member", ""},
	"POST /v1/me/mfa/totp/confirm":                    {"mfa.totp_confirm", "member", ""},
	"POST /v1/charges":                                {"charge.create", "charge", ""},
	"POST /v1/charges/:id/capture":                    {"charge.capture", "charge", "id"},
	"POST /v1/charges/:id/void":                       {"charge.void", "charge", "id"},
	"POST /v1/refunds":                                {"refund.create", "refund", ""},
	"POST /v1/payouts":                                {"payout.create", "payout", ""},
	"POST /v1/disputes/:id":                           {"dispute.evidence", "dispute", "id"},
	"POST /v1/disputes/:id/close":                     {"dispute.close", "dispute", "id"},
	"POST /v1/customers":                              {"customer.create", "customer", ""},
	"PATCH /v1/customers/:id":                         {"customer.update", "customer", "id"},
	"DELETE /v1/customers/:id":                        {"customer.delete", "customer", "id"},
	"POST /v1/customers/:id/payment_methods":          {"payment_method.create", "payment_method", ""},
	"DELETE /v1/customers/:id/payment_methods/:pm_id": {"payment_method.delete", "payment_method", "pm_id"},
	"POST /v1/connectors":                             {"connector.create", "connector", ""},
	"PATCH /v1/connectors/:id":                        {"connector.update", "connector", "id"},
	"DELETE /v1/connectors/:id":                       {"connector.delete", "connector", "id"},
	"PUT /v1/routing":                                 {"routing.update", "routing", ""},
	"POST /v1/me/webhook_endpoints":                   {"webhook_endpoint.create", "webhook_endpoint", ""},
	"PATCH /v1/me/webhook_endpoints/:id":              {"webhook_endpoint.update", "webhook_endpoint", "id"},
	"DELETE /v1/me/webhook_endpoints/:id":             {"webhook_endpoint.delete", "webhook_endpoint", "id"},
	"POST /v1/me/webhook_endpoints/:id/rotate_secret": {"webhook_endpoint.rotate_secret", "webhook_endpoint", "id"},
	"POST /v1/me/webhook_endpoints/:id/test":          {"webhook_endpoint.test", "webhook_endpoint", "id"},
	"POST /v1/me/webhook_endpoints/:id/recover":       {"webhook_endpoint.recover", "webhook_endpoint", "id"},
	"POST /v1/webhook_deliveries/:id/retry":           {"webhook_delivery.retry", "webhook_delivery", "id"},
	"POST /v1/me/webhook_client_certificate/rotate":   {"webhook_client_certificate.rotate", "webhook_client_certificate", ""},

	"POST /v1/reconciliations":                             {"reconciliation.create", "reconciliation", ""},
	"POST /v1/reconciliations/:id/exceptions/:exc/resolve": {resolveAction, "reconciliation_exception", "exc"},

	"POST /dashboard/logout":                                      {"session.revoke", "session", ""},
	"POST /dashboard/keys":                                        {"api_key.create", "api_key", ""},
	"POST /dashboard/keys/:id/revoke":                             {"api_key.revoke", "api_key", "id"},
	"POST /dashboard/keys/:id/roll":                               {"api_key.roll", "api_key", "id"},
	"POST /dashboard/charges/:id/capture":                         {"charge.capture", "charge", "id"},
	"POST /dashboard/charges/:id/void":                            {"charge.void", "charge", "id"},
	"POST /dashboard/charges/:id/refund":                          {"refund.create", "refund", ""},
	"POST /dashboard/payouts":                                     {"payout.create", "payout", ""},
	"POST /dashboard/reconciliations":                             {"reconciliation.create", "reconciliation", ""},
	"POST /dashboard/reconciliations/:id/exceptions/:exc/resolve": {resolveAction, "reconciliation_exception", "exc"},
	"POST /dashboard/disputes/:id":                                {"dispute.evidence", "dispute", "id"},
	"POST /dashboard/disputes/:id/close":                          {"dispute.close", "dispute", "id"},
	"POST /dashboard/customers/:id/delete":                        {"customer.delete", "customer", "id"},
	"POST /dashboard/customers/:id/payment_methods/:pm_id/delete": {"payment_method.delete", "payment_method", "pm_id"},
	"POST /dashboard/connectors":                                  {"connector.create", "connector", ""},
	"POST /dashboard/connectors/:id/enabled":                      {"connector.update", "connector", "id"},
	"POST /dashboard/connectors/:id/rehearsal":                    {"connector.update", "connector", "id"},
	"POST /dashboard/connectors/:id/delete":                       {"connector.delete", "connector", "id"},
	"POST /dashboard/routing":                                     {"routing.update", "routing", ""},
	"POST /dashboard/webhooks":                                    {"webhook_endpoint.create", "webhook_endpoint", ""},
	"POST /dashboard/webhooks/:id":                                {"webhook_endpoint.update", "webhook_endpoint", "id"},
	"POST /dashboard/webhooks/:id/rotate":                         {"webhook_endpoint.rotate_secret", "webhook_endpoint", "id"},
	"POST /dashboard/webhooks/:id/test":                           {"webhook_endpoint.test", "webhook_endpoint", "id"},
	"POST /dashboard/webhooks/:id/recover":                        {"webhook_endpoint.recover", "webhook_endpoint", "id"},
	"POST /dashboard/webhooks/:id/delete":                         {"webhook_endpoint.delete", "webhook_endpoint", "id"},
	"POST /dashboard/deliveries/:id/retry":                        {"webhook_delivery.retry", "webhook_delivery", "id"},
	"POST /dashboard/team":                                        {"member.create", "member", ""},
	"POST /dashboard/team/:id/role":                               {"member.update", "member", "id"},
	"POST /dashboard/team/:id/remove":                             {"member.remove", "member", "id"},
	"POST /dashboard/team/settings":                               {"account.update", "merchant", ""},
	"POST /dashboard/security/totp":                               {"mfa.totp_start", "member", ""},
	"POST /dashboard/security/totp/confirm":                       {"mfa.totp_confirm", "member", ""},
}

// paymentTraffic are the routes of payment traffic: made with an API key,
// they are not audit-logged. The charge, refund or token and its events
// record them, with the request id, so the audit log costs the payment path
// nothing. The same actions taken by a person (a dashboard session) are.
var paymentTraffic = map[string]bool{
	"POST /v1/charges":             true,
	"POST /v1/charges/:id/capture": true,
	"POST /v1/charges/:id/void":    true,
	"POST /v1/refunds":             true,
	"POST " + tokensPath:           true,
}

// actionOf is the audit action of a route; a route missing from actions
// gets one made of its path, so nothing that changes state goes unrecorded.
func actionOf(method, path string) auditAction {
	if a, ok := actions[method+" "+path]; ok {
		return a
	}
	var parts []string
	param := ""
	for _, seg := range strings.Split(strings.Trim(path, "/"), "/") {
		switch {
		case strings.HasPrefix(seg, ":"):
			param = seg[1:]
		case seg != "v1" && seg != "me" && seg != "dashboard":
			parts = append(parts, seg)
		}
	}
	object := "unknown"
	if len(parts) > 0 {
		object = strings.TrimSuffix(parts[0], "s")
	}
	verb := strings.ToLower(method)
	if len(parts) > 1 {
		verb = parts[len(parts)-1]
	}
	return auditAction{name: object + "." + verb, object: object, param: param}
}

// userAgentMax bounds the user agent an entry keeps.
const userAgentMax = 512

// audited runs the rest of an authenticated request; a state-changing one
// carries its audit record in its context, for the store to write with the
// action (see audit.Record). The record of a request that succeeds without
// the store writing it (an action that writes nothing to the database) is
// written on its own here.
func (s *server) audited(c *fiber.Ctx) error {
	switch c.Method() {
	case fiber.MethodGet, fiber.MethodHead, fiber.MethodOptions:
		return c.Next()
	}
	if s.AuditLog == nil {
		return c.Next()
	}
	p := principal(c)
	if !p.IsSession() && paymentTraffic[c.Method()+" "+c.Route().Path] {
		return c.Next()
	}
	a := actionOf(c.Method(), c.Route().Path)
	e := audit.Entry{ID: ids.New(auditIDPrefix), MerchantID: p.MerchantID, Action: a.name, ObjectType: a.object,
		IP: s.clientIP(c).String(), UserAgent: clip(c.Get(fiber.HeaderUserAgent), userAgentMax), RequestID: requestID(c)}
	if a.param != "" {
		e.ObjectID = strings.Clone(c.Params(a.param))
	}
	switch {
	case p.IsSession():
		e.ActorType, e.ActorID = audit.ActorMember, p.MemberID
		if e.ActorID == "" {
			e.ActorID = p.SessionID
		}
		if a.object == "session" {
			e.ObjectID = p.SessionID
		}
	default:
		e.ActorType, e.ActorID = audit.ActorAPIKey, p.KeyID
	}
	if a.object == "merchant" {
		e.ObjectID = p.MerchantID
	}
	ctx := audit.WithRecord(c.UserContext(), audit.NewRecord(e))
	c.SetUserContext(ctx)
	err := c.Next()
	if err == nil && c.Response().StatusCode() < fiber.StatusBadRequest {
		if aerr := s.AuditLog.AppendAudit(ctx); aerr != nil {
			s.Log.ErrorContext(ctx, "audit log entry not written", "action", e.Action, "err", aerr)
		}
	}
	return err
}

// auditedSignIn runs a request that signs someone in or sets a password:
// it is not authenticated, so its record names the account and the member
// only once the service knows them (audit.SetActor); a request that fails
// leaves no entry.
func (s *server) auditedSignIn(c *fiber.Ctx, action string) context.Context {
	ctx := c.UserContext()
	if s.AuditLog == nil {
		return ctx
	}
	e := audit.Entry{ID: ids.New(auditIDPrefix), Action: action, ObjectType: strings.SplitN(action, ".", 2)[0],
		IP: s.clientIP(c).String(), UserAgent: clip(c.Get(fiber.HeaderUserAgent), userAgentMax), RequestID: requestID(c)}
	ctx = audit.WithRecord(ctx, audit.NewRecord(e))
	c.SetUserContext(ctx)
	return ctx
}

// clip copies s, cut to at most n bytes on a character boundary.
func clip(s string, n int) string {
	if len(s) > n {
		s = s[:n]
		for len(s) > 0 && !utf8.ValidString(s) {
			s = s[:len(s)-1]
		}
	}
	return strings.ToValidUTF8(strings.Clone(s), "\uFFFD")
}

// auditFilterMax bounds a filter's text.
const auditFilterMax = 255

// auditFilter reads the audit log's filters from the query.
func auditFilter(c *fiber.Ctx) (audit.Filter, error) {
	f := audit.Filter{Actor: strings.Clone(c.Query("actor")), Action: strings.Clone(c.Query("action")),
		ObjectID: strings.Clone(c.Query("object_id"))}
	for name, v := range map[string]string{"actor": f.Actor, "action": f.Action, "object_id": f.ObjectID} {
		if len(v) > auditFilterMax || !utf8.ValidString(v) || strings.ContainsRune(v, 0) {
			return f, apperr.Invalid(name, "%s must be at most %d characters of text.", name, auditFilterMax)
		}
	}
	var err error
	if f.CreatedGTE, err = parseTimeQuery(c, "created[gte]"); err != nil {
		return f, err
	}
	if f.CreatedLTE, err = parseTimeQuery(c, "created[lte]"); err != nil {
		return f, err
	}
	return f, nil
}

func validAuditID(id string) bool { return ids.Valid(auditIDPrefix, id) }

// listAuditLog is GET /v1/audit_log.
func (s *server) listAuditLog(c *fiber.Ctx) error {
	p, err := listParams(c, validAuditID)
	if err != nil {
		return err
	}
	f, err := auditFilter(c)
	if err != nil {
		return err
	}
	page, err := s.AuditLog.ListAudit(c.UserContext(), principal(c).MerchantID, f, p)
	if err != nil {
		return err
	}
	return writeJSON(c, fiber.StatusOK, newList(page, presentAuditEntry))
}

type auditView struct {
	Filter  audit.Filter
	Entries []audit.Entry
	Pager   *pager
}

// auditPage is the dashboard's audit log, with the API's filters but time.
func (s *server) auditPage(c *fiber.Ctx) error {
	if s.AuditLog == nil {
		return apperr.NotFound("page")
	}
	f, err := auditFilter(c)
	if err != nil {
		return err
	}
	f.CreatedGTE, f.CreatedLTE = nil, nil
	v := auditView{Filter: f}
	if v.Pager, err = newPager(c, dashboardPath+"/audit", validAuditID,
		url.Values{"actor": {f.Actor}, "action": {f.Action}, "object_id": {f.ObjectID}}); err != nil {
		return err
	}
	page, err := s.AuditLog.ListAudit(c.UserContext(), principal(c).MerchantID, f, v.Pager.params)
	if err != nil {
		return err
	}
	v.Entries = pageItems(v.Pager, page, func(e audit.Entry) string { return e.ID })
	return s.page(c, "audit", "audit", "Audit log", v)
}
