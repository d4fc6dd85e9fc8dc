package httpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gofiber/fiber/v2"

	"github.com/gatehouse-pay/gatehouse/internal/apperr"
	"github.com/gatehouse-pay/gatehouse/internal/connectors"
	"github.com/gatehouse-pay/gatehouse/internal/listing"
	"github.com/gatehouse-pay/gatehouse/internal/notifications"
	"github.com/gatehouse-pay/gatehouse/internal/resource"
)

// The dashboard's connectors and routing: the list of connectors with the
// creation form, a connector's page with its last 24 hours (attempts,
// success rate, latency, failure codes) and its settings, and the routing
// page, through the same connectors service as /v1/connectors and
// /v1/routing.

type connectorsView struct {
	Connectors []connectors.Connector
	Providers  []string
	// Current is the rehearsal the form starts from: none.
	Current    *connectors.Sandbox
	Declines   []string
	MaxLatency int
	Pager      *pager
}

func (s *server) connectorsPage(c *fiber.Ctx) error {
	v := connectorsView{Providers: connectors.Providers, Declines: connectors.RehearsalDeclines, MaxLatency: connectors.MaxLatencyMS}
	var err error
	if v.Pager, err = newPager(c, dashboardPath+"/connectors", connectors.ValidID, nil); err != nil {
		return err
	}
	page, err := s.Connectors.List(c.UserContext(), principal(c).MerchantID, v.Pager.params)
	if err != nil {
		return err
	}
	v.Connectors = pageItems(v.Pager, page, func(cn connectors.Connector) string { return cn.ID })
	return s.page(c, "connectors", "connectors", "Connectors", v)
}

// rehearsalForm reads a form's sandbox rehearsal: "unavailable" ticked, a
// "decline_code" (empty for none) and "latency_ms" (empty for 0). set
// reports whether it asks for anything.
func rehearsalForm(c *fiber.Ctx) (p *connectors.SandboxParams, set bool, err error) {
	unavailable := form(c, "unavailable") == "on"
	var decline *string
	if d := form(c, "decline_code"); d != "" {
		decline = &d
	}
	latency := 0
	if raw := form(c, "latency_ms"); raw != "" {
		if latency, err = strconv.Atoi(raw); err != nil {
			return nil, false, apperr.Invalid("sandbox.latency_ms", "The latency must be a whole number of milliseconds from 0 to %d.", connectors.MaxLatencyMS)
		}
	}
	return connectors.Rehearsal(unavailable, decline, latency), unavailable || decline != nil || latency != 0, nil
}

// dashCreateConnector creates a connector as POST /v1/connectors, with the
// form's idempotency key. A Stripe secret key goes into the service and is
// sealed there; no page shows it again.
func (s *server) dashCreateConnector(c *fiber.Ctx) error {
	provider, name, enabled := form(c, "provider"), form(c, "name"), form(c, "enabled") == "on"
	secret := form(c, "secret_key")
	rehearsal, rehearsed, err := rehearsalForm(c)
	if err != nil {
		return err
	}
	// The credentials the form has fields for; an empty field says nothing.
	creds := map[string]string{}
	for _, f := range []string{"secret_key", "webhook_secret", "api_key", "merchant_account", "hmac_key"} {
		if v := form(c, f); v != "" {
			creds[f] = v
		}
	}
	idem, err := s.formIdem(c, provider, name, strconv.FormatBool(enabled), secret, creds["webhook_secret"], creds["api_key"],
		creds["merchant_account"], creds["hmac_key"], form(c, "unavailable"), form(c, "decline_code"), form(c, "latency_ms"))
	if err != nil {
		return err
	}
	p := connectors.CreateParams{Provider: &provider, Name: &name, Enabled: &enabled}
	if len(creds) > 0 {
		p.Credentials = &creds
	}
	// A Stripe connector has no rehearsal: the fields left as they are
	// say nothing; filled in, the service says why not.
	if provider == connectors.ProviderSandbox || rehearsed {
		p.Sandbox = rehearsal
	}
	res, err := s.Connectors.Create(c.UserContext(), principal(c).MerchantID, p, idem, renderAs[connectors.Connector](fiber.StatusCreated))
	if err != nil {
		return err
	}
	var made resource.Connector
	if err := json.Unmarshal(res.Response.Body, &made); err != nil {
		return apperr.Internal(err)
	}
	return redirectNotice(c, dashboardPath+"/connectors/"+made.ID, doneOr(res.Replayed, "conn_created"))
}

type connectorView struct {
	Connector connectors.Connector
	Stats     connectors.Stats
	// Rate is the success rate in per cent, "" when no attempt ended.
	Rate       string
	Routed     bool
	Declines   []string
	MaxLatency int
	// Current is the rehearsal the form starts from: the connector's.
	Current *connectors.Sandbox
	// Notifications are the newest notifications the provider sent to
	// the connector (a real provider's connectors only).
	Notifications []notifications.Notification
	// MoreNotifications: older ones exist beyond those shown.
	MoreNotifications bool
}

// dashNotifications is how many notifications a connector's page shows.
const dashNotifications = 20

// connectorPage is a connector's settings and its last 24 hours.
func (s *server) connectorPage(c *fiber.Ctx) error {
	ctx, merchant := c.UserContext(), principal(c).MerchantID
	cn, err := s.Connectors.Get(ctx, merchant, id(c))
	if err != nil {
		return err
	}
	st, err := s.Connectors.Stats(ctx, merchant, cn.ID)
	if err != nil {
		return err
	}
	r, err := s.Connectors.Routing(ctx, merchant)
	if err != nil {
		return err
	}
	v := connectorView{Connector: cn, Stats: st, Routed: slices.Contains(routedIDs(r), cn.ID),
		Declines: connectors.RehearsalDeclines, MaxLatency: connectors.MaxLatencyMS, Current: cn.Sandbox}
	if rate, ok := st.SuccessRate(); ok {
		v.Rate = strconv.FormatFloat(rate*100, 'f', 1, 64) + "%"
	}
	if cn.NotificationURL != "" && s.Notifications != nil {
		page, err := s.Notifications.List(ctx, merchant, cn.ID, listing.Params{Limit: dashNotifications, MayLag: true})
		if err != nil {
			return err
		}
		v.Notifications, v.MoreNotifications = page.Items, page.HasMore
	}
	return s.page(c, "connector", "connectors", "Connector "+cn.Name, v)
}

// routedIDs are the connectors a routing names, in its rules or its
// default.
func routedIDs(r connectors.Routing) []string {
	var out []string
	for _, route := range append([]connectors.Route{r.Default}, rulesRoutes(r.Rules)...) {
		out = append(out, route.Connectors...)
		for _, w := range route.Split {
			out = append(out, w.Connector)
		}
	}
	return out
}

func rulesRoutes(rules []connectors.Rule) []connectors.Route {
	out := make([]connectors.Route, len(rules))
	for i, r := range rules {
		out[i] = r.Then
	}
	return out
}

// dashConnectorEnabled enables or disables a connector ("enabled" true or
// false), as PATCH /v1/connectors/:id. "return" list goes back to the list.
func (s *server) dashConnectorEnabled(c *fiber.Ctx) error {
	enabled, err := strconv.ParseBool(form(c, "enabled"))
	if err != nil {
		return apperr.Invalid("enabled", "enabled must be true or false.")
	}
	cn, err := s.Connectors.Update(c.UserContext(), principal(c).MerchantID, id(c), connectors.UpdateParams{Enabled: &enabled})
	if err != nil {
		return err
	}
	notice := "conn_disabled"
	if enabled {
		notice = "conn_enabled"
	}
	if form(c, "return") == "list" {
		return redirectNotice(c, dashboardPath+"/connectors", notice)
	}
	return redirectNotice(c, dashboardPath+"/connectors/"+cn.ID, notice)
}

// dashConnectorRehearsal sets a sandbox connector's rehearsal, as PATCH
// /v1/connectors/:id with "sandbox".
func (s *server) dashConnectorRehearsal(c *fiber.Ctx) error {
	rehearsal, _, err := rehearsalForm(c)
	if err != nil {
		return err
	}
	cn, err := s.Connectors.Update(c.UserContext(), principal(c).MerchantID, id(c), connectors.UpdateParams{Sandbox: rehearsal})
	if err != nil {
		return err
	}
	return redirectNotice(c, dashboardPath+"/connectors/"+cn.ID, "rehearsal_saved")
}

// dashDeleteConnector deletes a connector, as DELETE /v1/connectors/:id:
// not one the routing names, nor a server account.
func (s *server) dashDeleteConnector(c *fiber.Ctx) error {
	if err := s.Connectors.Delete(c.UserContext(), principal(c).MerchantID, id(c)); err != nil {
		return err
	}
	return redirectNotice(c, dashboardPath+"/connectors", "conn_deleted")
}

// ---- Routing

type routingView struct {
	// Set: the merchant set a routing; otherwise it is the server's
	// default.
	Set       bool
	UpdatedAt *time.Time
	Routing   connectors.Routing
	// Names are the merchant's live connectors by id.
	Names map[string]*connectors.Connector
	// Enabled are the connectors a route may name, oldest first; Disabled
	// the others.
	Enabled  []connectors.Connector
	Disabled []connectors.Connector
	// Slots are the choices of the ordered form, each preset to the
	// current default's connector at that place.
	Slots []string
	// Weights are the current default split's weights by connector.
	Weights map[string]int
	// JSON is the routing as the JSON form shows it: the current one, or
	// the one just refused.
	JSON string
}

func (s *server) routingPage(c *fiber.Ctx) error {
	return s.renderRouting(c, fiber.StatusOK, "", nil)
}

// renderRouting is the routing page; posted is a refused JSON routing to
// show again, fail why it was refused.
func (s *server) renderRouting(c *fiber.Ctx, status int, posted string, fail *apperr.Error) error {
	ctx, merchant := c.UserContext(), principal(c).MerchantID
	r, err := s.Connectors.Routing(ctx, merchant)
	if err != nil {
		return err
	}
	all, err := s.allConnectors(ctx, merchant)
	if err != nil {
		return err
	}
	v := routingView{Set: r.UpdatedAt != nil, UpdatedAt: r.UpdatedAt, Routing: r, Names: map[string]*connectors.Connector{},
		Weights: map[string]int{}, JSON: posted}
	for i := range all {
		v.Names[all[i].ID] = &all[i]
		if all[i].Enabled {
			v.Enabled = append(v.Enabled, all[i])
		} else {
			v.Disabled = append(v.Disabled, all[i])
		}
	}
	v.Slots = make([]string, min(len(v.Enabled), connectors.MaxRouteConnectors))
	copy(v.Slots, r.Default.Connectors)
	for _, w := range r.Default.Split {
		v.Weights[w.Connector] = w.Weight
	}
	if posted == "" {
		b, err := json.MarshalIndent(connectors.RoutingParams{Rules: &r.Rules, Default: &r.Default}, "", "  ")
		if err != nil {
			return apperr.Internal(err)
		}
		v.JSON = string(b)
	}
	view, err := s.signedIn(c, "routing", "Routing")
	if err != nil {
		return err
	}
	view.Data, view.Canonical = v, dashboardPath+"/routing"
	if fail != nil {
		view.Error, view.ErrorCode = fail.Message, fail.Code
	}
	return s.render(c, status, "routing", view)
}

// allConnectors is every live connector of the merchant, oldest first.
func (s *server) allConnectors(ctx context.Context, merchantID string) ([]connectors.Connector, error) {
	var out []connectors.Connector
	p := listing.Params{Limit: listing.MaxLimit}
	for {
		page, err := s.Connectors.List(ctx, merchantID, p)
		if err != nil {
			return nil, err
		}
		out = append(out, page.Items...)
		if !page.HasMore || len(page.Items) == 0 {
			break
		}
		p.StartingAfter = page.Items[len(page.Items)-1].ID
	}
	slices.Reverse(out)
	return out, nil
}

// dashPutRouting sets the routing, as PUT /v1/routing. The form says how:
// "ordered" (the default route as the connectors chosen in order; the
// rules kept), "split" (the default route as weights; the rules kept) or
// "json" (the whole routing, rules and default, as PUT /v1/routing's
// body). A routing the service refuses is shown again with its message.
func (s *server) dashPutRouting(c *fiber.Ctx) error {
	ctx, merchant := c.UserContext(), principal(c).MerchantID
	var p connectors.RoutingParams
	posted := ""
	switch kind := form(c, "form"); kind {
	case "ordered", "split":
		cur, err := s.Connectors.Routing(ctx, merchant)
		if err != nil {
			return err
		}
		route, err := formRoute(c, kind)
		if err != nil {
			return s.routingRefused(c, "", err)
		}
		p = connectors.RoutingParams{Rules: &cur.Rules, Default: &route}
	case "json":
		posted = strings.Clone(c.FormValue("routing"))
		if len(bytes.TrimSpace([]byte(posted))) == 0 {
			return s.routingRefused(c, posted, apperr.Missing("routing"))
		}
		if err := decodeObject([]byte(posted), &p); err != nil {
			if ae, ok := apperr.As(err); ok && ae.Code == apperr.CodeInvalidJSON {
				err = &apperr.Error{Kind: ae.Kind, Code: ae.Code, Param: "routing",
					Message: `The routing is not one valid JSON object: write {"rules": [...], "default": {...}} as PUT /v1/routing takes it.`}
			}
			return s.routingRefused(c, posted, err)
		}
	default:
		return apperr.Invalid("form", "form must be ordered, split or json.")
	}
	if _, err := s.Connectors.PutRouting(ctx, merchant, p); err != nil {
		return s.routingRefused(c, posted, err)
	}
	return redirectNotice(c, dashboardPath+"/routing", "routing_saved")
}

// routingRefused shows the routing page with the reason a routing was
// refused (a 400); any other failure is the usual failure page.
func (s *server) routingRefused(c *fiber.Ctx, posted string, err error) error {
	ae, ok := apperr.As(err)
	if !ok || ae.Kind != apperr.KindInvalid {
		return err
	}
	return s.renderRouting(c, statusOf[ae.Kind], posted, ae)
}

// formRoute is the default route of the ordered form (the "connector"
// choices in order, blanks skipped) or of the split form ("split_connector"
// and "split_weight" pairs, blank or 0 weights skipped).
func formRoute(c *fiber.Ctx, kind string) (connectors.Route, error) {
	args := c.Request().PostArgs()
	if kind == "ordered" {
		route := connectors.Route{Connectors: []string{}}
		for _, v := range args.PeekMulti("connector") {
			if id := strings.TrimSpace(string(v)); id != "" {
				route.Connectors = append(route.Connectors, id)
			}
		}
		return route, nil
	}
	ids, weights := args.PeekMulti("split_connector"), args.PeekMulti("split_weight")
	if len(ids) != len(weights) {
		return connectors.Route{}, apperr.Invalid("split_weight", "Give each connector of the split a weight (or leave it empty).")
	}
	route := connectors.Route{Split: []connectors.Weighted{}}
	for i := range ids {
		raw := strings.TrimSpace(string(weights[i]))
		if raw == "" || raw == "0" {
			continue
		}
		w, err := strconv.Atoi(raw)
		if err != nil {
			return connectors.Route{}, apperr.Invalid("split_weight", "Weights must be whole numbers from 1 to %d (0 or empty leaves the connector out).", connectors.MaxWeight)
		}
		route.Split = append(route.Split, connectors.Weighted{Connector: string(ids[i]), Weight: w})
	}
	return route, nil
}

// msOf renders a duration in milliseconds (in seconds from 1 s on).
func msOf(d *time.Duration) string {
	switch {
	case d == nil:
		return "—"
	case *d >= time.Second:
		return strconv.FormatFloat(d.Seconds(), 'f', 2, 64) + " s"
	case *d >= 100*time.Millisecond:
		return strconv.FormatInt(d.Round(time.Millisecond).Milliseconds(), 10) + " ms"
	}
	return strconv.FormatFloat(float64(d.Microseconds())/1000, 'f', 1, 64) + " ms"
}

// routeOf is a route with the merchant's connectors, for the page.
type routeOf struct {
	Route connectors.Route
	Names map[string]*connectors.Connector
	Total int
}

func newRouteOf(r connectors.Route, names map[string]*connectors.Connector) routeOf {
	v := routeOf{Route: r, Names: names}
	for _, w := range r.Split {
		v.Total += w.Weight
	}
	return v
}

// share is a split weight in per cent of the total.
func share(weight, total int) string {
	if total == 0 {
		return ""
	}
	return strconv.FormatFloat(float64(weight)*100/float64(total), 'f', 0, 64) + "%"
}
