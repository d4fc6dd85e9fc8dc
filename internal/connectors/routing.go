package connectors

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/gatehouse-pay/gatehouse/internal/apperr"
	"github.com/gatehouse-pay/gatehouse/internal/events"
	"github.com/gatehouse-pay/gatehouse/internal/money"
	"github.com/gatehouse-pay/gatehouse/internal/resource"
)

// Limits on routing (api/openapi.yaml).
const (
	MaxRules           = 50
	MaxRouteConnectors = 10
	MaxWeight          = 1000
	// DefaultMaxAttempts is ROUTING_MAX_ATTEMPTS's default: how many
	// connectors one charge tries at most.
	DefaultMaxAttempts = 3
)

// CardBrands are the brands a rule may match.
var CardBrands = []string{"visa", "mastercard", "amex", "discover", "unknown"}

// Routing is a merchant's rules: the first rule whose condition matches a
// charge gives its route, and Default the route of every other charge.
type Routing struct {
	Rules     []Rule     `json:"rules"`
	Default   Route      `json:"default"`
	Version   int64      `json:"-"`
	UpdatedAt *time.Time `json:"-"`
}

// Rule routes the charges its condition matches.
type Rule struct {
	If   Condition `json:"if"`
	Then Route     `json:"then"`
}

// Condition matches a charge; every field set must hold, an empty condition
// matches every charge.
type Condition struct {
	Currency  []string `json:"currency,omitempty"`
	AmountGTE *int64   `json:"amount_gte,omitempty"`
	AmountLTE *int64   `json:"amount_lte,omitempty"`
	CardBrand []string `json:"card_brand,omitempty"`
}

// Route is either an ordered list of connectors (the first, then the others
// as fallbacks) or a weighted split (the first pick by weight, the others
// after it as fallbacks, heaviest first).
type Route struct {
	Connectors []string   `json:"connectors,omitempty"`
	Split      []Weighted `json:"split,omitempty"`
}

// Weighted is one connector of a split.
type Weighted struct {
	Connector string `json:"connector"`
	Weight    int    `json:"weight"`
}

// View returns the public form.
func (r Routing) View() resource.Routing {
	v := resource.Routing{Object: "routing", Rules: make([]resource.RoutingRule, len(r.Rules)), Default: r.Default.view()}
	for i, rule := range r.Rules {
		v.Rules[i] = resource.RoutingRule{If: resource.RoutingCondition(rule.If), Then: rule.Then.view()}
	}
	if r.UpdatedAt != nil {
		ts := events.Timestamp(*r.UpdatedAt)
		v.UpdatedAt = &ts
	}
	return v
}

func (r Route) view() resource.Route {
	out := resource.Route{Connectors: r.Connectors}
	if r.Split != nil {
		out.Split = make([]resource.RouteWeight, len(r.Split))
		for i, w := range r.Split {
			out.Split[i] = resource.RouteWeight(w)
		}
	}
	return out
}

// RoutingParams is the body of PUT /v1/routing.
type RoutingParams struct {
	Rules   *[]Rule `json:"rules"`
	Default *Route  `json:"default"`
}

// Snapshot is what the charge path needs of a merchant: its live
// connectors (oldest first) and its routing (nil when it set none).
type Snapshot struct {
	Connectors []Connector
	Routing    *Routing
}

func (s Snapshot) connector(id string) (Connector, bool) {
	for _, c := range s.Connectors {
		if c.ID == id {
			return c, true
		}
	}
	return Connector{}, false
}

// Ref names the connector of an attempt and its provider.
type Ref struct {
	ID       string
	Provider string
	// ServerAccount: the connector uses the server's own account at its
	// provider (see Connector.ServerAccount).
	ServerAccount bool
}

func refOf(c Connector) Ref {
	return Ref{ID: c.ID, Provider: c.Provider, ServerAccount: c.ServerAccount}
}

// PlanInput is what routing reads of a charge.
type PlanInput struct {
	Connector *string // the charge names this connector: only it
	Provider  *string // the charge names this provider: its first enabled connector
	Currency  string  // upper-case ISO 4217
	Amount    int64
	CardBrand string
}

// Routing returns the merchant's routing as the API shows it: the one it
// set, or the server's default when it set none.
func (s *Service) Routing(ctx context.Context, merchantID string) (Routing, error) {
	// Read from the store, not the directory's cache: a routing just put
	// through another replica, whose change notice has not arrived here
	// yet, is read back as it was stored.
	snap, err := s.store.Snapshot(ctx, merchantID, s.available, s.stamp())
	if err != nil {
		return Routing{}, err
	}
	if snap.Routing != nil {
		return *snap.Routing, nil
	}
	r := Routing{Rules: []Rule{}, Default: Route{Connectors: []string{}}}
	if c, ok := firstOf(snap, s.dir.fallback); ok {
		r.Default.Connectors = []string{c.ID}
	}
	return r, nil
}

// PutRouting checks p against the merchant's connectors and stores it.
func (s *Service) PutRouting(ctx context.Context, merchantID string, p RoutingParams) (Routing, error) {
	if p.Default == nil {
		return Routing{}, apperr.Missing("default")
	}
	r := Routing{Default: *p.Default, Rules: []Rule{}}
	if p.Rules != nil {
		r.Rules = *p.Rules
	}
	snap, err := s.store.Snapshot(ctx, merchantID, s.available, s.stamp())
	if err != nil {
		return Routing{}, err
	}
	if err := Check(&r, snap); err != nil {
		return Routing{}, err
	}
	saved, err := s.store.PutRouting(ctx, merchantID, r, s.stamp())
	if err != nil {
		return Routing{}, err
	}
	s.dir.Changed(ctx, merchantID)
	return saved, nil
}

// Check validates r against the merchant's connectors and normalizes it
// (currencies upper-case, brands lower-case).
func Check(r *Routing, snap Snapshot) error {
	if len(r.Rules) > MaxRules {
		return apperr.Invalid("rules", "rules may hold at most %d rules.", MaxRules)
	}
	for i := range r.Rules {
		param := fmt.Sprintf("rules[%d]", i)
		if err := checkCondition(param+".if", &r.Rules[i].If); err != nil {
			return err
		}
		if err := checkRoute(param+".then", &r.Rules[i].Then, snap); err != nil {
			return err
		}
	}
	return checkRoute("default", &r.Default, snap)
}

func checkCondition(param string, c *Condition) error {
	for i, cur := range c.Currency {
		up, err := money.ParseCurrency(cur)
		if err != nil {
			return apperr.Invalid(param+".currency", "%s.currency must list ISO 4217 codes.", param)
		}
		c.Currency[i] = up
	}
	for i, b := range c.CardBrand {
		lb := strings.ToLower(strings.TrimSpace(b))
		if !oneOf(CardBrands, lb) {
			return apperr.Invalid(param+".card_brand", "%s.card_brand must list brands among: %s.", param, strings.Join(CardBrands, ", "))
		}
		c.CardBrand[i] = lb
	}
	for _, a := range []*int64{c.AmountGTE, c.AmountLTE} {
		if a != nil && *a < 0 {
			return apperr.Invalid(param, "%s: amounts must not be negative.", param)
		}
	}
	if c.AmountGTE != nil && c.AmountLTE != nil && *c.AmountGTE > *c.AmountLTE {
		return apperr.Invalid(param+".amount_gte", "%s.amount_gte must not be above amount_lte.", param)
	}
	return nil
}

func checkRoute(param string, r *Route, snap Snapshot) error {
	ids := r.Connectors
	switch {
	case len(r.Connectors) > 0 && len(r.Split) > 0:
		return apperr.Invalid(param, "%s takes either connectors or split, not both.", param)
	case len(r.Connectors) == 0 && len(r.Split) == 0:
		return apperr.Invalid(param, "%s needs connectors (in order) or a split.", param)
	case len(r.Split) > 0:
		ids = nil
		for _, w := range r.Split {
			if w.Weight < 1 || w.Weight > MaxWeight {
				return apperr.Invalid(param+".split", "%s.split weights must be integers from 1 to %d.", param, MaxWeight)
			}
			ids = append(ids, w.Connector)
		}
	}
	if len(ids) > MaxRouteConnectors {
		return apperr.Invalid(param, "%s may name at most %d connectors.", param, MaxRouteConnectors)
	}
	seen := map[string]bool{}
	for _, id := range ids {
		c, ok := snap.connector(id)
		switch {
		case !ok:
			return apperr.Invalid(param, "%s names %q, which is not one of your connectors.", param, id)
		case !c.Enabled:
			return apperr.Invalid(param, "%s names %q, which is disabled.", param, id)
		case seen[id]:
			return apperr.Invalid(param, "%s names %q twice.", param, id)
		}
		seen[id] = true
	}
	return nil
}

// Plan is the connectors a charge tries, in order, at most maxAttempts:
// the connector it names, or the first enabled connector of the provider it
// names, or its route by the merchant's routing, or (with no routing) the
// first enabled connector of fallback, the server's default provider. pick
// draws a split's first connector (rand.IntN, or a test's source).
func Plan(snap Snapshot, in PlanInput, fallback string, maxAttempts int, pick func(n int) int) ([]Ref, error) {
	if maxAttempts < 1 {
		maxAttempts = DefaultMaxAttempts
	}
	switch {
	case in.Connector != nil && in.Provider != nil:
		return nil, apperr.Invalid("connector", "Name a connector or a provider, not both.")
	case in.Connector != nil:
		c, ok := snap.connector(*in.Connector)
		if !ok || !c.Enabled {
			return nil, apperr.Invalid("connector", "connector must be one of your enabled connectors.")
		}
		return []Ref{refOf(c)}, nil
	case in.Provider != nil:
		c, ok := firstOf(snap, *in.Provider)
		if !ok {
			return nil, apperr.Invalid("provider", "You have no enabled connector of provider %q.", *in.Provider)
		}
		return []Ref{refOf(c)}, nil
	case snap.Routing == nil:
		c, ok := firstOf(snap, fallback)
		if !ok {
			return nil, apperr.New(apperr.KindConflict, apperr.CodeInvalidState, "You have no enabled connector of the default provider %q; set a routing.", fallback)
		}
		return []Ref{refOf(c)}, nil
	}
	route := snap.Routing.Default
	for _, r := range snap.Routing.Rules {
		if r.If.matches(in) {
			route = r.Then
			break
		}
	}
	var out []Ref
	for _, id := range route.order(pick) {
		if c, ok := snap.connector(id); ok && c.Enabled {
			out = append(out, refOf(c))
		}
	}
	if len(out) == 0 {
		return nil, apperr.New(apperr.KindConflict, apperr.CodeInvalidState, "Every connector of this charge's route is disabled or deleted; change the routing.")
	}
	if len(out) > maxAttempts {
		out = out[:maxAttempts]
	}
	return out, nil
}

// Pick is the production source of a split's draw.
func Pick(n int) int { return rand.IntN(n) }

func (c Condition) matches(in PlanInput) bool {
	if len(c.Currency) > 0 && !slices.Contains(c.Currency, in.Currency) {
		return false
	}
	if c.AmountGTE != nil && in.Amount < *c.AmountGTE {
		return false
	}
	if c.AmountLTE != nil && in.Amount > *c.AmountLTE {
		return false
	}
	if len(c.CardBrand) > 0 && !slices.Contains(c.CardBrand, in.CardBrand) {
		return false
	}
	return true
}

// order is the route's connectors in the order a charge tries them.
func (r Route) order(pick func(n int) int) []string {
	if len(r.Split) == 0 {
		return r.Connectors
	}
	total := 0
	for _, w := range r.Split {
		total += w.Weight
	}
	n := pick(total)
	first := len(r.Split) - 1
	for i, w := range r.Split {
		if n < w.Weight {
			first = i
			break
		}
		n -= w.Weight
	}
	rest := make([]Weighted, 0, len(r.Split)-1)
	rest = append(rest, r.Split[:first]...)
	rest = append(rest, r.Split[first+1:]...)
	sort.SliceStable(rest, func(i, j int) bool { return rest[i].Weight > rest[j].Weight })
	out := []string{r.Split[first].Connector}
	for _, w := range rest {
		out = append(out, w.Connector)
	}
	return out
}

// firstOf is the merchant's first enabled connector of provider.
func firstOf(snap Snapshot, provider string) (Connector, bool) {
	for _, c := range snap.Connectors {
		if c.Provider == provider && c.Enabled {
			return c, true
		}
	}
	return Connector{}, false
}
