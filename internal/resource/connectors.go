package resource

// Connector is one of a merchant's accounts at a provider: never its
// credentials.
type Connector struct {
	ID             string   `json:"id"`
	Object         string   `json:"object"` // "connector"
	Provider       string   `json:"provider"`
	Name           string   `json:"name"`
	Enabled        bool     `json:"enabled"`
	ServerAccount  bool     `json:"server_account"`
	HasCredentials bool     `json:"has_credentials"`
	Sandbox        *Sandbox `json:"sandbox,omitempty"` // the sandbox provider's only
	// Fees and PayoutSchedule: a sandbox connector's terms.
	Fees           *FeeSchedule `json:"fees,omitempty"`
	PayoutSchedule *string      `json:"payout_schedule,omitempty"`
	// NotificationURL is where the provider sends its notifications; a
	// real provider's connectors only.
	NotificationURL *string `json:"notification_url,omitempty"`
	CreatedAt       string  `json:"created_at"`
	UpdatedAt       string  `json:"updated_at"`
}

// Sandbox is how a sandbox connector behaves.
type Sandbox struct {
	Unavailable bool    `json:"unavailable"`
	DeclineCode *string `json:"decline_code"`
	LatencyMS   int     `json:"latency_ms"`
	// PayoutFailure: every payout fails with this bank answer.
	PayoutFailure *string `json:"payout_failure"`
}

// FeeSchedule is a sandbox connector's price: basis points of the amount
// plus a fixed part in minor units.
type FeeSchedule struct {
	PercentBPS int64 `json:"percent_bps"`
	Fixed      int64 `json:"fixed"`
}

// Routing is a merchant's routing: the first rule whose condition matches
// a charge gives its route, Default the route of every other charge.
type Routing struct {
	Object    string        `json:"object"` // "routing"
	Rules     []RoutingRule `json:"rules"`
	Default   Route         `json:"default"`
	UpdatedAt *string       `json:"updated_at"`
}

// RoutingRule routes the charges its condition matches.
type RoutingRule struct {
	If   RoutingCondition `json:"if"`
	Then Route            `json:"then"`
}

// RoutingCondition matches a charge; every field set must hold.
type RoutingCondition struct {
	Currency  []string `json:"currency,omitempty"`
	AmountGTE *int64   `json:"amount_gte,omitempty"`
	AmountLTE *int64   `json:"amount_lte,omitempty"`
	CardBrand []string `json:"card_brand,omitempty"`
}

// Route is either an ordered list of connectors or a weighted split.
type Route struct {
	Connectors []string      `json:"connectors,omitempty"`
	Split      []RouteWeight `json:"split,omitempty"`
}

// RouteWeight is one connector of a split.
type RouteWeight struct {
	Connector string `json:"connector"`
	Weight    int    `json:"weight"`
}
