package resource

// WebhookEndpoint is where a merchant receives events: never its secret.
type WebhookEndpoint struct {
	ID             string   `json:"id"`
	Object         string   `json:"object"` // "webhook_endpoint"
	URL            string   `json:"url"`
	Events         []string `json:"events"`
	Active         bool     `json:"active"`
	Status         string   `json:"status"`
	DisabledReason *string  `json:"disabled_reason"`
	DisabledAt     *string  `json:"disabled_at"`
	Ordered        bool     `json:"ordered"`
	Description    *string  `json:"description"`
	MerchantID     string   `json:"merchant_id"`
	Environment    string   `json:"environment"`
	CreatedAt      string   `json:"created_at"`
	UpdatedAt      string   `json:"updated_at"`
}

// WebhookEndpointWithSecret answers the creation of an endpoint and the
// roll of its secret: the one time the secret is shown.
type WebhookEndpointWithSecret struct {
	Endpoint WebhookEndpoint `json:"webhook_endpoint"`
	Secret   string          `json:"webhook_secret"`
}

// WebhookDelivery is one event (or test) for one endpoint, with its attempts.
type WebhookDelivery struct {
	ID            string           `json:"id"`
	Object        string           `json:"object"` // "webhook_delivery"
	Endpoint      string           `json:"endpoint"`
	EventID       string           `json:"event_id"`
	EventType     string           `json:"event_type"`
	Status        string           `json:"status"`
	Test          bool             `json:"test"`
	Attempts      []WebhookAttempt `json:"attempts"`
	NextAttemptAt *string          `json:"next_attempt_at"`
	CreatedAt     string           `json:"created_at"`
	UpdatedAt     string           `json:"updated_at"`
}

// WebhookAttempt is one try of a delivery.
type WebhookAttempt struct {
	Attempt      int     `json:"attempt"`
	StartedAt    string  `json:"started_at"`
	DurationMS   int     `json:"duration_ms"`
	StatusCode   *int    `json:"status_code"`
	Error        *string `json:"error"`
	ResponseBody *string `json:"response_body"`
}

// WebhookRecovery answers a recovery of an endpoint's events: how many
// deliveries it made (or would make, in a dry run). Its keys are sorted.
type WebhookRecovery struct {
	Count  int64  `json:"count"`
	DryRun bool   `json:"dry_run"`
	Object string `json:"object"` // "recovery"
	Since  string `json:"since"`
}
