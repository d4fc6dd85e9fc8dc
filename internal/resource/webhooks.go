package resource

import "encoding/json"

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
	// Filter is the endpoint's conditions on the event body, null for none.
	Filter json.RawMessage `json:"filter"`
	// FailingSince is when the endpoint's current run of failed attempts
	// began; null while its last attempt succeeded.
	FailingSince *string `json:"failing_since"`
	Description  *string `json:"description"`
	MerchantID   string  `json:"merchant_id"`
	Environment  string  `json:"environment"`
	CreatedAt    string  `json:"created_at"`
	UpdatedAt    string  `json:"updated_at"`
	// Auth is how deliveries authenticate to the receiver beyond the
	// signature, null for none; never the client secret.
	Auth *WebhookEndpointAuth `json:"auth"`
	// Headers are the static headers sent with every delivery: their
	// names, each value replaced by a mask.
	Headers map[string]string `json:"headers"`
}

// WebhookEndpointAuth is an endpoint's receiver authentication:
// {"type": "mtls"}, or "oauth2_client_credentials" with the token URL,
// the client id and the scopes (omitted when none). The client secret is
// never shown.
type WebhookEndpointAuth struct {
	Type     string   `json:"type"`
	TokenURL *string  `json:"token_url,omitempty"`
	ClientID *string  `json:"client_id,omitempty"`
	Scopes   []string `json:"scopes,omitempty"`
}

// WebhookClientCertificate is the public half of the client certificate a
// merchant's deliveries present to receivers that ask for one (mTLS), and
// the previous one for 24 hours after a rotation.
type WebhookClientCertificate struct {
	Object string `json:"object"` // "webhook_client_certificate"
	WebhookClientCertificateDetails
	Previous *WebhookClientCertificateDetails `json:"previous"`
}

// WebhookClientCertificateDetails is one client certificate: PEM, the
// SHA-256 fingerprint of its DER (lowercase hex) and its validity.
type WebhookClientCertificateDetails struct {
	Certificate       string `json:"certificate"`
	FingerprintSHA256 string `json:"fingerprint_sha256"`
	NotBefore         string `json:"not_before"`
	NotAfter          string `json:"not_after"`
	CreatedAt         string `json:"created_at"`
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

// WebhookEndpointStats counts an endpoint's deliveries kept in its log
// (WEBHOOK_LOG_RETENTION), by what became of them: delivered, turned away
// by the endpoint's filter, failed for good, or still pending. Deliveries
// of POST .../test are not counted.
type WebhookEndpointStats struct {
	Object    string `json:"object"` // "webhook_endpoint_stats"
	Endpoint  string `json:"webhook_endpoint"`
	Delivered int64  `json:"delivered"`
	Filtered  int64  `json:"filtered"`
	Failed    int64  `json:"failed"`
	Pending   int64  `json:"pending"`
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
