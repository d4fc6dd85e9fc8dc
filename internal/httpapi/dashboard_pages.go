package httpapi

import (
	"bytes"
	"encoding/json"
	"net"
	"net/netip"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gofiber/fiber/v2"

	"github.com/gatehouse-pay/gatehouse/internal/apikeys"
	"github.com/gatehouse-pay/gatehouse/internal/apperr"
	"github.com/gatehouse-pay/gatehouse/internal/authz"
	"github.com/gatehouse-pay/gatehouse/internal/charges"
	"github.com/gatehouse-pay/gatehouse/internal/customers"
	"github.com/gatehouse-pay/gatehouse/internal/events"
	"github.com/gatehouse-pay/gatehouse/internal/idempotency"
	"github.com/gatehouse-pay/gatehouse/internal/ids"
	"github.com/gatehouse-pay/gatehouse/internal/listing"
	"github.com/gatehouse-pay/gatehouse/internal/members"
	"github.com/gatehouse-pay/gatehouse/internal/money"
	"github.com/gatehouse-pay/gatehouse/internal/refunds"
	"github.com/gatehouse-pay/gatehouse/internal/resource"
	"github.com/gatehouse-pay/gatehouse/internal/webhooks"
)

// The dashboard's pages and actions. Each action calls the service the API
// route calls, with the same checks; money actions carry an idempotency key
// rendered into their form, so a double submit moves money once.

func addrOf(ip net.IP) netip.Addr {
	a, _ := netip.AddrFromSlice(ip)
	return a.Unmap()
}

// id is the route's :id, copied out of the request.
func id(c *fiber.Ctx) string { return strings.Clone(c.Params("id")) }

// ---- API keys

type keysView struct {
	Keys    []apikeys.Key
	Created *apikeys.Created
	// Rolled is set when Created replaced this key.
	Rolled *apikeys.Key
	Replay bool
	Pager  *pager
	// Resources are what the form offers: each key resource with the
	// levels within the member's role. CanSecret is set when the role may
	// make secret keys (a key never holds more than its maker's role).
	Resources []keyResource
	CanSecret bool
	// CreatedBy is the list's filter, a member id or "".
	CreatedBy string
	// creators are the makers of the listed keys, when the member may see
	// the team; role is the member's.
	creators map[string]members.Member
	role     string
}

// keyResource is one resource of the key form and the levels it offers.
type keyResource struct {
	Resource authz.Resource
	Levels   []string
}

// Creator is the member who made k, when the page may show it (owners and
// admins see the team), or nil.
func (v keysView) Creator(k apikeys.Key) *members.Member {
	if m, ok := v.creators[k.CreatedBy]; ok {
		return &m
	}
	return nil
}

// MayRoll reports whether the member's role could make k, which a roll
// remakes.
func (v keysView) MayRoll(k apikeys.Key) bool {
	_, beyond := k.Access().Beyond(authz.RolePermissions(v.role))
	return !beyond
}

// keyForm is what the key form offers to role.
func keyForm(role string) (resources []keyResource, canSecret bool) {
	rp := authz.RolePermissions(role)
	for _, r := range authz.KeyResources {
		kr := keyResource{Resource: r}
		for a := authz.None; a <= rp[r]; a++ {
			kr.Levels = append(kr.Levels, a.String())
		}
		resources = append(resources, kr)
	}
	_, beyond := authz.SecretKey.Beyond(rp)
	return resources, !beyond
}

// keyPermissions is a restricted key's permissions for people:
// "charges: write, refunds: read", "none" when it may do nothing.
func keyPermissions(k apikeys.Key) string {
	if k.Permissions == nil {
		return "all (secret key)"
	}
	var parts []string
	for _, r := range authz.KeyResources {
		if a := k.Permissions[r]; a > authz.None {
			parts = append(parts, string(r)+": "+a.String())
		}
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}

// rollOverlaps are the dashboard's choices of how long a rolled key keeps
// working, in seconds.
var rollOverlaps = []struct {
	Seconds int
	Label   string
}{{0, "now"}, {3600, "in 1 hour"}, {86400, "in 24 hours"}, {604800, "in 7 days"}}

func (s *server) keysPage(c *fiber.Ctx) error {
	return s.renderKeys(c, nil, nil, false)
}

func (s *server) renderKeys(c *fiber.Ctx, created *apikeys.Created, rolled *apikeys.Key, replay bool) error {
	p := principal(c)
	f := apikeys.Filter{CreatedBy: strings.Clone(c.Query("created_by"))}
	var filters url.Values
	if f.CreatedBy != "" {
		filters = url.Values{"created_by": {f.CreatedBy}}
	}
	pg, err := newPager(c, dashboardPath+"/keys", func(id string) bool { return ids.Valid("key", id) }, filters)
	if err != nil {
		return err
	}
	page, err := s.Keys.List(c.UserContext(), p.MerchantID, f, pg.params)
	if err != nil {
		return err
	}
	keys := pageItems(pg, page, func(k apikeys.Key) string { return k.ID })
	v, err := s.signedIn(c, "keys", "API keys")
	if err != nil {
		return err
	}
	kv := keysView{Keys: keys, Created: created, Rolled: rolled, Replay: replay, Pager: pg, CreatedBy: f.CreatedBy, role: p.Role}
	kv.Resources, kv.CanSecret = keyForm(p.Role)
	if v.Can(string(authz.Members), "read") {
		// The makers of the page's keys (a page has few), so the owner
		// sees whose keys they are and which makers were removed.
		kv.creators = map[string]members.Member{}
		for _, k := range keys {
			if _, seen := kv.creators[k.CreatedBy]; seen || k.CreatedBy == "" {
				continue
			}
			m, err := s.Members.Get(c.UserContext(), p.MerchantID, k.CreatedBy)
			if err != nil {
				if apperr.KindOf(err) == apperr.KindNotFound {
					continue
				}
				return err
			}
			kv.creators[k.CreatedBy] = m
		}
	}
	v.Canonical, v.Data = dashboardPath+"/keys", kv
	return s.render(c, fiber.StatusOK, "keys", v)
}

// dashCreateKey creates a sandbox key and shows its secret this once: the
// page is the answer to the POST (never cached), and its script replaces the
// history entry so that a reload shows the list without it.
func (s *server) dashCreateKey(c *fiber.Ctx) error {
	name, typ := form(c, "name"), form(c, "type")
	p := apikeys.Params{Environment: apikeys.Sandbox, Name: name, Type: typ, Maker: maker(c)}
	fields := []string{name, typ}
	if typ == apikeys.TypeRestricted {
		levels := map[string]string{}
		for _, r := range authz.KeyResources {
			level := form(c, "permissions."+string(r))
			if level == "" {
				level = authz.None.String()
			}
			levels[string(r)] = level
			fields = append(fields, string(r)+"="+level)
		}
		perms, err := authz.ParseKeyPermissions("permissions", levels)
		if err != nil {
			return err
		}
		p.Permissions = perms
	}
	idem, err := s.formIdem(c, fields...)
	if err != nil {
		return err
	}
	created, replay, err := s.Keys.CreateOnce(c.UserContext(), principal(c).MerchantID, p, idem,
		func(k apikeys.Key) (idempotency.Response, error) {
			return renderAs[resource.APIKey](fiber.StatusCreated)(presentKey(k))
		})
	if err != nil {
		return err
	}
	if replay != nil {
		return s.renderKeys(c, nil, nil, true)
	}
	return s.renderKeys(c, &created, nil, false)
}

// dashRollKey rolls a key and shows the new key's secret this once, like
// dashCreateKey; the old key keeps working for the chosen overlap.
func (s *server) dashRollKey(c *fiber.Ctx) error {
	secs, err := strconv.Atoi(form(c, "expires_in"))
	if err != nil {
		return apperr.Invalid("expires_in", "Choose when the old key stops working.")
	}
	if secs < 0 || secs > int(apikeys.MaxRollOverlap/time.Second) {
		return apperr.Invalid("expires_in", "expires_in must be 0 to %d seconds.", int(apikeys.MaxRollOverlap/time.Second))
	}
	r, err := s.Keys.Roll(c.UserContext(), principal(c).MerchantID, id(c), time.Duration(secs)*time.Second, maker(c))
	if err != nil {
		return err
	}
	return s.renderKeys(c, &r.Created, &r.Old, false)
}

func (s *server) dashRevokeKey(c *fiber.Ctx) error {
	if _, err := s.Keys.Revoke(c.UserContext(), principal(c).MerchantID, id(c)); err != nil {
		return err
	}
	return redirectNotice(c, dashboardPath+"/keys", "revoked")
}

// ---- Charges

type chargesView struct {
	Charges  []charges.Charge
	Statuses []string
	Status   string
	From, To string
	Pager    *pager
}

// dayQuery reads a YYYY-MM-DD filter; end selects the day's last instant.
func dayQuery(c *fiber.Ctx, name string, end bool) (string, *time.Time, error) {
	v := strings.Clone(c.Query(name))
	if v == "" {
		return "", nil, nil
	}
	t, err := time.Parse("2006-01-02", v)
	if err != nil {
		return "", nil, apperr.Invalid(name, "%s must be a date such as 2026-11-22.", name)
	}
	if end {
		t = t.Add(24*time.Hour - time.Millisecond)
	}
	return v, &t, nil
}

func (s *server) chargesPage(c *fiber.Ctx) error {
	v := chargesView{Statuses: charges.Statuses, Status: strings.Clone(c.Query("status"))}
	f := charges.Filter{Status: v.Status}
	var err error
	if v.From, f.CreatedGTE, err = dayQuery(c, "from", false); err != nil {
		return err
	}
	if v.To, f.CreatedLTE, err = dayQuery(c, "to", true); err != nil {
		return err
	}
	if v.Pager, err = newPager(c, dashboardPath+"/charges", ids.ValidUUID,
		url.Values{"status": {v.Status}, "from": {v.From}, "to": {v.To}}); err != nil {
		return err
	}
	page, err := s.Charges.List(c.UserContext(), principal(c).MerchantID, f, v.Pager.params)
	if err != nil {
		return err
	}
	v.Charges = pageItems(v.Pager, page, func(ch charges.Charge) string { return ch.ID })
	return s.page(c, "charges", "charges", "Charges", v)
}

type chargeView struct {
	Charge charges.Charge
	// Customer is the charge's customer, if it has one that still exists;
	// CustomerGone, one deleted since.
	Customer     *customers.Customer
	CustomerGone bool
	Refunds      []refunds.Refund
	Events       []events.Event
	MoreEvents   bool
	Reasons      []string
	CanCapture   bool
	CanVoid      bool
	CanRefund    bool
	Refundable   int64
}

func (s *server) chargePage(c *fiber.Ctx) error {
	ctx, merchant := c.UserContext(), principal(c).MerchantID
	// The refunds are read before the charge. A refund settles in the same
	// transaction as the charge's figures, so a refund listed as settled is
	// in the figures read after it; read the other way round, a refund
	// settled in between would be listed as succeeded beside a charge
	// still holding it as pending.
	chargeID := id(c)
	if !charges.ValidID(chargeID) {
		_, err := s.Charges.Get(ctx, merchant, chargeID) // not found
		return err
	}
	rs, err := s.Refunds.List(ctx, merchant, chargeID, listing.Params{Limit: listing.MaxLimit})
	if err != nil {
		return err
	}
	ch, err := s.Charges.Get(ctx, merchant, chargeID)
	if err != nil {
		return err
	}
	evs, err := s.Events.List(ctx, merchant, events.Filter{ChargeID: ch.ID}, listing.Params{Limit: listing.MaxLimit})
	if err != nil {
		return err
	}
	idle := ch.PendingAction == nil
	// The cardholder's answer, once recorded, is the worker's to settle.
	waiting := ch.Status == charges.StatusRequiresAction && ch.Authentication.Answer == nil
	// What the charge's state allows, and the member's role too.
	role := authz.RolePermissions(principal(c).Role)
	manage, refund := role.Allows(authz.Charges, authz.Write), role.Allows(authz.Refunds, authz.Write)
	v := chargeView{Charge: ch, Refunds: rs.Items, Events: evs.Items, MoreEvents: evs.HasMore, Reasons: refunds.Reasons,
		CanCapture: manage && idle && ch.Status == charges.StatusAuthorized,
		CanVoid:    manage && idle && (ch.Status == charges.StatusAuthorized || waiting),
		CanRefund:  refund && ch.Status == charges.StatusCaptured && ch.Refundable() > 0,
		Refundable: ch.Refundable(),
	}
	if v.Customer, v.CustomerGone, err = s.chargeCustomer(c, ch); err != nil {
		return err
	}
	view, err := s.signedIn(c, "charges", "Charge "+ch.ID)
	if err != nil {
		return err
	}
	view.Data = v
	view.Busy = ch.Status == charges.StatusCreated || ch.PendingAction != nil || ch.AmountRefundHeld > 0 ||
		ch.Status == charges.StatusRequiresAction && !waiting ||
		slices.ContainsFunc(rs.Items, func(r refunds.Refund) bool { return r.Status == refunds.StatusPending })
	return s.render(c, fiber.StatusOK, "charge", view)
}

// moneyField reads an optional amount typed in the currency's major unit.
func moneyField(c *fiber.Ctx, name, currency string) (*int64, error) {
	v := form(c, name)
	if v == "" {
		return nil, nil
	}
	n, err := money.Parse(v, currency)
	if err != nil {
		return nil, apperr.Invalid("amount", "The amount must be a positive number such as 12.50 (%s).", currency)
	}
	return &n, nil
}

func (s *server) dashCapture(c *fiber.Ctx) error {
	ctx, merchant := c.UserContext(), principal(c).MerchantID
	ch, err := s.Charges.Get(ctx, merchant, id(c))
	if err != nil {
		return err
	}
	amount, err := moneyField(c, "amount", ch.Currency)
	if err != nil {
		return err
	}
	idem, err := s.formIdem(c, form(c, "amount"))
	if err != nil {
		return err
	}
	res, err := s.Charges.Capture(ctx, merchant, ch.ID, amount, idem, renderAs[charges.Charge](fiber.StatusOK))
	if err != nil {
		return err
	}
	return redirectNotice(c, dashboardPath+"/charges/"+ch.ID, doneOr(res.Replayed, "capture"))
}

func (s *server) dashVoid(c *fiber.Ctx) error {
	chargeID := id(c)
	idem, err := s.formIdem(c)
	if err != nil {
		return err
	}
	res, err := s.Charges.Void(c.UserContext(), principal(c).MerchantID, chargeID, idem, renderAs[charges.Charge](fiber.StatusOK))
	if err != nil {
		return err
	}
	return redirectNotice(c, dashboardPath+"/charges/"+chargeID, doneOr(res.Replayed, "void"))
}

func (s *server) dashRefund(c *fiber.Ctx) error {
	ctx, merchant := c.UserContext(), principal(c).MerchantID
	ch, err := s.Charges.Get(ctx, merchant, id(c))
	if err != nil {
		return err
	}
	amount, err := moneyField(c, "amount", ch.Currency)
	if err != nil {
		return err
	}
	p := refunds.CreateParams{Charge: &ch.ID, Amount: amount}
	if r := form(c, "reason"); r != "" {
		p.Reason = &r
	}
	idem, err := s.formIdem(c, form(c, "amount"), form(c, "reason"))
	if err != nil {
		return err
	}
	res, err := s.Refunds.Create(ctx, merchant, p, idem, renderAs[refunds.Refund](fiber.StatusCreated))
	if err != nil {
		return err
	}
	return redirectNotice(c, dashboardPath+"/charges/"+ch.ID, doneOr(res.Replayed, "refund"))
}

func doneOr(replayed bool, notice string) string {
	if replayed {
		return "already_done"
	}
	return notice
}

// ---- Events

type eventsView struct {
	Events []events.Event
	Types  []string
	Type   string
	Pager  *pager
}

func (s *server) eventsPage(c *fiber.Ctx) error {
	v := eventsView{Types: events.Types, Type: strings.Clone(c.Query("type"))}
	if v.Type != "" && !events.Known(v.Type) {
		return apperr.Invalid("type", "type must be one of %s.", strings.Join(events.Types, ", "))
	}
	var err error
	if v.Pager, err = newPager(c, dashboardPath+"/events", ids.ValidUUID, url.Values{"type": {v.Type}}); err != nil {
		return err
	}
	page, err := s.Events.List(c.UserContext(), principal(c).MerchantID, events.Filter{Type: v.Type}, v.Pager.params)
	if err != nil {
		return err
	}
	v.Events = pageItems(v.Pager, page, func(e events.Event) string { return e.ID })
	return s.page(c, "events", "events", "Events", v)
}

type eventView struct {
	Event    events.Event
	ChargeID string
	Body     string
}

func (s *server) eventPage(c *fiber.Ctx) error {
	eventID := id(c)
	if !ids.ValidUUID(eventID) {
		return apperr.NotFound("event")
	}
	e, err := s.Events.Get(c.UserContext(), principal(c).MerchantID, eventID)
	if err != nil {
		return err
	}
	var b struct {
		Data struct {
			Charge struct {
				ID string `json:"id"`
			} `json:"charge"`
		} `json:"data"`
	}
	_ = json.Unmarshal(e.Body, &b)
	return s.page(c, "event", "events", "Event "+e.Type, eventView{Event: e, ChargeID: b.Data.Charge.ID, Body: prettyJSON(e.Body)})
}

// ---- Webhook endpoints

type webhooksView struct {
	Endpoints []webhooks.Endpoint
	Types     []string
	Pager     *pager
}

func (s *server) webhooksPage(c *fiber.Ctx) error {
	v := webhooksView{Types: events.Types}
	var err error
	if v.Pager, err = newPager(c, dashboardPath+"/webhooks", func(id string) bool { return ids.Valid("we", id) }, nil); err != nil {
		return err
	}
	page, err := s.Webhooks.List(c.UserContext(), principal(c).MerchantID, v.Pager.params)
	if err != nil {
		return err
	}
	v.Endpoints = pageItems(v.Pager, page, func(e webhooks.Endpoint) string { return e.ID })
	return s.page(c, "webhooks", "webhooks", "Webhook endpoints", v)
}

// formEvents is the event types ticked in a form.
func formEvents(c *fiber.Ctx) []string {
	out := []string{}
	for _, v := range c.Request().PostArgs().PeekMulti("events") {
		out = append(out, string(v))
	}
	return out
}

func optional(v string) *string {
	if v == "" {
		return nil
	}
	return &v
}

// dashCreateEndpoint registers an endpoint and shows its signing secret this
// once, as the answer to the POST.
func (s *server) dashCreateEndpoint(c *fiber.Ctx) error {
	u, desc, evs, ordered := form(c, "url"), form(c, "description"), formEvents(c), form(c, "ordered") == "on"
	idem, err := s.formIdem(c, u, desc, strings.Join(evs, ","), strconv.FormatBool(ordered))
	if err != nil {
		return err
	}
	p := webhooks.CreateParams{URL: &u, Events: evs, Description: optional(desc), Ordered: &ordered}
	if len(evs) == 0 {
		p.Events = nil // the service's "missing events"
	}
	merchant := principal(c).MerchantID
	res, err := s.Webhooks.Create(c.UserContext(), merchant, apikeys.Sandbox, p, idem,
		func(e webhooks.Endpoint, secret string) (idempotency.Response, error) {
			return renderAs[resource.WebhookEndpointWithSecret](fiber.StatusCreated)(presentEndpointWithSecret(e, secret))
		})
	if err != nil {
		return err
	}
	var out resource.WebhookEndpointWithSecret
	if err := json.Unmarshal(res.Response.Body, &out); err != nil {
		return apperr.Internal(err)
	}
	return s.renderWebhook(c, out.Endpoint.ID, out.Secret, "")
}

type webhookView struct {
	Endpoint   webhooks.Endpoint
	Secret     string
	Types      []string
	Deliveries []webhooks.Delivery
	Status     string
	Pager      *pager
	Since      string
	// Form is what the Settings form shows: the endpoint as stored, or as
	// it was posted when the change was refused.
	Form endpointForm
	// Invalid is the parameter a refusal named (url, events, filter.<path>
	// ...) and Problem its message.
	Invalid string
	Problem string
	Stats   webhooks.Stats
}

// endpointForm is the Settings form's fields; Filter is JSON ("" for none).
type endpointForm struct {
	URL, Description, Filter string
	Events                   []string
	Active, Ordered          bool
}

// Rows is how many lines the filter's textarea shows: all of the filter's,
// from 4 to 16.
func (f endpointForm) Rows() int {
	return min(max(strings.Count(f.Filter, "\n")+1, 4), 16)
}

// FieldError is the message to show next to field name (the parameter or
// its parent: "filter" for filter.data.charge.amount), "" for none.
func (v webhookView) FieldError(name string) string {
	if v.Invalid == name || strings.HasPrefix(v.Invalid, name+".") {
		return v.Problem
	}
	return ""
}

func (s *server) webhookPage(c *fiber.Ctx) error {
	return s.renderWebhook(c, id(c), "", "")
}

// renderWebhook is an endpoint's page: its settings, its actions and its
// delivery log with every attempt. secret is shown when it was just made.
func (s *server) renderWebhook(c *fiber.Ctx, endpointID, secret, notice string) error {
	return s.renderWebhookPage(c, fiber.StatusOK, endpointID, secret, notice, nil, nil)
}

// renderWebhookPage is renderWebhook with the status to answer; a refused
// change of the settings comes back with the form as it was posted (sent)
// and why, next to the field it names.
func (s *server) renderWebhookPage(c *fiber.Ctx, status int, endpointID, secret, notice string, sent *endpointForm, fail *apperr.Error) error {
	ctx, merchant := c.UserContext(), principal(c).MerchantID
	e, err := s.Webhooks.Get(ctx, merchant, endpointID)
	if err != nil {
		return err
	}
	v := webhookView{Endpoint: e, Secret: secret, Types: events.Types, Status: strings.Clone(c.Query("status")),
		Since: time.Now().UTC().Add(-24 * time.Hour).Format("2006-01-02T15:04"),
		Form:  endpointForm{URL: e.URL, Events: e.Events, Active: e.Active, Ordered: e.Ordered}}
	if e.Description != nil {
		v.Form.Description = *e.Description
	}
	if c.Method() != fiber.MethodGet {
		v.Status = ""
	}
	if v.Pager, err = newPager(c, dashboardPath+"/webhooks/"+e.ID, ids.ValidUUID, url.Values{"status": {v.Status}}); err != nil {
		return err
	}
	if c.Method() != fiber.MethodGet {
		v.Pager.params = listing.Params{Limit: dashboardPageSize}
	}
	page, err := s.Webhooks.Deliveries(ctx, merchant, e.ID, v.Status, v.Pager.params)
	if err != nil {
		return err
	}
	v.Deliveries = pageItems(v.Pager, page, func(d webhooks.Delivery) string { return d.ID })
	if v.Stats, err = s.Webhooks.Stats(ctx, merchant, e.ID); err != nil {
		return err
	}
	if e.Filter != nil {
		var b bytes.Buffer
		if json.Indent(&b, e.Filter, "", "  ") == nil {
			v.Form.Filter = b.String()
		}
	}
	if sent != nil {
		v.Form = *sent
	}
	view, err := s.signedIn(c, "webhooks", "Endpoint "+e.ID)
	if err != nil {
		return err
	}
	if notice != "" {
		view.Notice = notice
	}
	if fail != nil {
		view.Error, view.ErrorCode = fail.Message, fail.Code
		v.Invalid, v.Problem = fail.Param, fail.Message
	}
	for _, d := range page.Items {
		if d.Status == webhooks.StatusPending {
			view.Busy = secret == "" // never reload away a secret shown once
		}
	}
	view.Data, view.Canonical = v, dashboardPath+"/webhooks/"+e.ID
	return s.render(c, status, "webhook", view)
}

// dashUpdateEndpoint saves the Settings form, as PATCH
// /v1/me/webhook_endpoints/:id with every field; an empty filter removes
// it. A change the service refuses (a 400) is shown on the page with the
// form as it was posted; any other failure is the usual failure page.
func (s *server) dashUpdateEndpoint(c *fiber.Ctx) error {
	sent := endpointForm{URL: form(c, "url"), Description: form(c, "description"), Filter: form(c, "filter"),
		Events: formEvents(c), Active: form(c, "active") == "on", Ordered: form(c, "ordered") == "on"}
	p := webhooks.UpdateParams{URL: &sent.URL, Events: sent.Events, Active: &sent.Active, Description: &sent.Description,
		Ordered: &sent.Ordered, Filter: json.RawMessage("null")}
	if sent.Filter != "" {
		p.Filter = json.RawMessage(sent.Filter)
	}
	var e webhooks.Endpoint
	var err error = apperr.Invalid("events", "Choose at least one event type.")
	if len(p.Events) > 0 {
		e, err = s.Webhooks.Update(c.UserContext(), principal(c).MerchantID, id(c), p)
	}
	if ae, ok := apperr.As(err); ok && ae.Kind == apperr.KindInvalid {
		return s.renderWebhookPage(c, statusOf[ae.Kind], id(c), "", "", &sent, ae)
	} else if err != nil {
		return err
	}
	return redirectNotice(c, dashboardPath+"/webhooks/"+e.ID, "updated")
}

func (s *server) dashRotate(c *fiber.Ctx) error {
	e, secret, err := s.Webhooks.RotateSecret(c.UserContext(), principal(c).MerchantID, id(c))
	if err != nil {
		return err
	}
	return s.renderWebhook(c, e.ID, secret, "The signing secret is rotated. The previous one stays valid for 24 hours.")
}

func (s *server) dashTest(c *fiber.Ctx) error {
	pr := principal(c)
	endpointID := id(c)
	if _, err := s.Webhooks.Test(c.UserContext(), pr.MerchantID, endpointID, webhooks.SampleEvent(pr.MerchantID, apikeys.Sandbox)); err != nil {
		return err
	}
	return redirectNotice(c, dashboardPath+"/webhooks/"+endpointID, "test")
}

// dashRecover re-sends the failed deliveries since a time; the "Preview"
// button (dry_run=true) only counts them.
func (s *server) dashRecover(c *fiber.Ctx) error {
	raw := form(c, "since")
	if raw == "" {
		return apperr.Missing("since")
	}
	since, err := time.Parse("2006-01-02T15:04", raw)
	if err != nil {
		if since, err = time.Parse(time.RFC3339Nano, raw); err != nil {
			return apperr.Invalid("since", "since must be a time such as 2026-11-22T01:17 (UTC).")
		}
	}
	dry := form(c, "dry_run") == "true"
	endpointID := id(c)
	n, err := s.Webhooks.Recover(c.UserContext(), principal(c).MerchantID, endpointID, since, dry)
	if err != nil {
		return err
	}
	when := since.UTC().Format("2006-01-02 15:04 UTC")
	msg := strconv.FormatInt(n, 10) + " failed deliveries since " + when + " would be sent again. Nothing was sent."
	if !dry {
		msg = strconv.FormatInt(n, 10) + " failed deliveries since " + when + " are queued again."
	}
	return s.renderWebhook(c, endpointID, "", msg)
}

func (s *server) dashDeleteEndpoint(c *fiber.Ctx) error {
	if err := s.Webhooks.Delete(c.UserContext(), principal(c).MerchantID, id(c)); err != nil {
		return err
	}
	return redirectNotice(c, dashboardPath+"/webhooks", "deleted")
}

func (s *server) dashRetry(c *fiber.Ctx) error {
	d, err := s.Webhooks.Retry(c.UserContext(), principal(c).MerchantID, id(c))
	if err != nil {
		return err
	}
	return redirectNotice(c, dashboardPath+"/webhooks/"+d.EndpointID, "retry")
}
