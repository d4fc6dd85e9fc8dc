package resource

// List is a page of objects: every list endpoint's answer.
type List[T any] struct {
	Object  string `json:"object"` // "list"
	Data    []T    `json:"data"`
	HasMore bool   `json:"has_more"`
}

// Error is every error answer.
type Error struct {
	Error ErrorDetail `json:"error"`
}

// ErrorDetail is what went wrong; Param names the parameter at fault.
type ErrorDetail struct {
	Code      string `json:"code"`
	Message   string `json:"message"`
	Param     string `json:"param,omitempty"`
	RequestID string `json:"request_id"`
	// Merchants answers a sign-in that must name its merchant: the
	// accounts the password opened.
	Merchants []MerchantChoice `json:"merchants,omitempty"`
	// Challenge answers the right password of a member with two-factor
	// sign-in on (code mfa_required): what POST /v1/auth/mfa completes.
	Challenge string `json:"challenge,omitempty"`
}

// MerchantChoice is an account a sign-in may choose.
type MerchantChoice struct {
	ID   string `json:"id"`
	Name string `json:"name"`
}

// Deleted answers the deletion of any object.
type Deleted struct {
	Deleted bool   `json:"deleted"`
	ID      string `json:"id"`
	Object  string `json:"object"` // the deleted object's type
}

// Health is /healthz's answer.
type Health struct {
	Status string `json:"status"`
}

// Readiness is /readyz's answer: every check's state.
type Readiness struct {
	Checks map[string]string `json:"checks"`
	Status string            `json:"status"`
}
