package resource

// Charge is the charge object: the answer of the charge endpoints and the
// data of every event.
type Charge struct {
	ID                string            `json:"id"`
	Object            string            `json:"object"` // "charge"
	Amount            int64             `json:"amount"`
	AmountCaptured    int64             `json:"amount_captured"`
	AmountRefunded    int64             `json:"amount_refunded"`
	Currency          string            `json:"currency"`
	Status            string            `json:"status"`
	PaymentMethod     string            `json:"payment_method"`
	Card              Card              `json:"card"`
	Provider          string            `json:"provider"`
	ProviderReference *string           `json:"provider_reference"`
	Environment       string            `json:"environment"`
	Capture           bool              `json:"capture"`
	Description       *string           `json:"description"`
	Metadata          map[string]string `json:"metadata"`
	FailureCode       *string           `json:"failure_code"`
	FailureMessage    *string           `json:"failure_message"`
	Customer          *string           `json:"customer"`
	OffSession        bool              `json:"off_session"`
	Authentication    Authentication    `json:"authentication"`
	NextAction        *NextAction       `json:"next_action"`
	Connector         *string           `json:"connector"`
	Attempts          []ChargeAttempt   `json:"attempts"`
	CreatedAt         string            `json:"created_at"`
	UpdatedAt         string            `json:"updated_at"`
}

// Card is a card as Gatehouse shows it: never the number or the CVC.
type Card struct {
	Brand       string  `json:"brand"`
	Last4       *string `json:"last4"`
	ExpMonth    *int    `json:"exp_month"`
	ExpYear     *int    `json:"exp_year"`
	Fingerprint *string `json:"fingerprint"`
}

// Authentication is a charge's cardholder authentication (3-D Secure).
type Authentication struct {
	Status      string  `json:"status"`
	CompletedAt *string `json:"completed_at"`
}

// NextAction is what the cardholder must do for a charge that requires
// action: follow a redirect (with the merchant's return_url), or let the
// card field show the challenge (gatehouse.handleNextAction).
type NextAction struct {
	Type           string         `json:"type"` // "redirect_to_url" or "use_gatehouse_js"
	RedirectToURL  *RedirectToURL `json:"redirect_to_url,omitempty"`
	UseGatehouseJS *struct{}      `json:"use_gatehouse_js,omitempty"`
}

// RedirectToURL is the challenge page and where it sends the cardholder after.
type RedirectToURL struct {
	URL       string `json:"url"`
	ReturnURL string `json:"return_url"`
}

// ChargeAttempt is one try of a charge at one connector.
type ChargeAttempt struct {
	Connector         *string `json:"connector"`
	Provider          string  `json:"provider"`
	Status            string  `json:"status"`
	FailureCode       *string `json:"failure_code"`
	ProviderReference *string `json:"provider_reference"`
	StartedAt         string  `json:"started_at"`
	EndedAt           *string `json:"ended_at"`
}

// CardFieldAction is what the card field learns of a charge: its status
// and, while the cardholder's answer is awaited, the challenge page.
type CardFieldAction struct {
	Charge         string         `json:"charge"`
	Status         string         `json:"status"`
	FailureCode    *string        `json:"failure_code"`
	Authentication Authentication `json:"authentication"`
	ChallengeURL   *string        `json:"challenge_url"`
}

// Token is a card token, made with a public key.
type Token struct {
	ID        string `json:"id"`
	Object    string `json:"object"` // "token"
	Type      string `json:"type"`   // "card"
	Card      Card   `json:"card"`
	Livemode  bool   `json:"livemode"`
	Used      bool   `json:"used"`
	CreatedAt string `json:"created_at"`
	ExpiresAt string `json:"expires_at"`
}

// Refund is the refund object: the answer of the refund endpoints and the
// data of the refund events.
type Refund struct {
	ID          string            `json:"id"`
	Object      string            `json:"object"` // "refund"
	Charge      string            `json:"charge"`
	Amount      int64             `json:"amount"`
	Currency    string            `json:"currency"`
	Status      string            `json:"status"`
	Reason      *string           `json:"reason"`
	Metadata    map[string]string `json:"metadata"`
	FailureCode *string           `json:"failure_code"`
	CreatedAt   string            `json:"created_at"`
	UpdatedAt   string            `json:"updated_at"`
}

// Customer is a merchant's customer.
type Customer struct {
	ID          string            `json:"id"`
	Object      string            `json:"object"` // "customer"
	Email       *string           `json:"email"`
	Name        *string           `json:"name"`
	Description *string           `json:"description"`
	Metadata    map[string]string `json:"metadata"`
	CreatedAt   string            `json:"created_at"`
}

// PaymentMethod is a customer's saved card.
type PaymentMethod struct {
	ID        string `json:"id"`
	Object    string `json:"object"` // "payment_method"
	Type      string `json:"type"`   // "card"
	Customer  string `json:"customer"`
	Card      Card   `json:"card"`
	CreatedAt string `json:"created_at"`
}

// FeeDetail is one part of a balance transaction's fee.
type FeeDetail struct {
	Type        string `json:"type"` // "provider_fee" | "dispute_fee"
	Amount      int64  `json:"amount"`
	Description string `json:"description"`
}

// BalanceTransaction is one movement of a merchant's balance: a ledger
// transaction as the merchant sees it.
type BalanceTransaction struct {
	ID          string      `json:"id"`
	Object      string      `json:"object"` // "balance_transaction"
	Type        string      `json:"type"`
	Source      string      `json:"source"`
	Connector   string      `json:"connector"`
	Amount      int64       `json:"amount"`
	Fee         int64       `json:"fee"`
	FeeDetails  []FeeDetail `json:"fee_details"`
	Net         int64       `json:"net"`
	Currency    string      `json:"currency"`
	Status      string      `json:"status"` // "pending" | "available"
	AvailableOn string      `json:"available_on"`
	CreatedAt   string      `json:"created_at"`
}

// BalanceAmount is a balance in one currency.
type BalanceAmount struct {
	Currency string `json:"currency"`
	Amount   int64  `json:"amount"`
}

// Balance is a merchant's balance: what it may be paid out now, and what
// becomes available later.
type Balance struct {
	Object    string          `json:"object"` // "balance"
	Available []BalanceAmount `json:"available"`
	Pending   []BalanceAmount `json:"pending"`
}

// Payout is money sent from a connector's balance to the merchant's bank.
type Payout struct {
	ID             string  `json:"id"`
	Object         string  `json:"object"` // "payout"
	Connector      string  `json:"connector"`
	Amount         int64   `json:"amount"`
	Currency       string  `json:"currency"`
	Status         string  `json:"status"`
	Automatic      bool    `json:"automatic"`
	ArrivalDate    string  `json:"arrival_date"`
	Description    *string `json:"description"`
	FailureCode    *string `json:"failure_code"`
	FailureMessage *string `json:"failure_message"`
	CreatedAt      string  `json:"created_at"`
	UpdatedAt      string  `json:"updated_at"`
}

// Dispute is a cardholder's dispute of a charge (api/openapi.yaml,
// Dispute).
type Dispute struct {
	ID                 string            `json:"id"`
	Object             string            `json:"object"` // "dispute"
	Charge             string            `json:"charge"`
	Connector          string            `json:"connector"`
	Amount             int64             `json:"amount"`
	Currency           string            `json:"currency"`
	Reason             string            `json:"reason"`
	Status             string            `json:"status"`
	Evidence           map[string]string `json:"evidence"`
	EvidenceDetails    EvidenceDetails   `json:"evidence_details"`
	EvidenceDueBy      string            `json:"evidence_due_by"`
	IsChargeRefundable bool              `json:"is_charge_refundable"`
	CreatedAt          string            `json:"created_at"`
	UpdatedAt          string            `json:"updated_at"`
}

// EvidenceDetails says where a dispute's evidence stands.
type EvidenceDetails struct {
	HasEvidence bool    `json:"has_evidence"`
	Submitted   bool    `json:"submitted"`
	SubmittedAt *string `json:"submitted_at"`
}

// Reconciliation is one comparison of a connector's settlement report
// with the merchant's books, and what it found.
type Reconciliation struct {
	ID                string   `json:"id"`
	Object            string   `json:"object"` // "reconciliation"
	Connector         string   `json:"connector"`
	Status            string   `json:"status"` // "reconciled" | "open" | "resolved"
	Source            string   `json:"source"` // "upload" | "provider"
	Dates             []string `json:"dates"`
	Lines             int      `json:"lines"`
	Matched           int      `json:"matched"`
	MissingInGateway  int      `json:"missing_in_gateway"`
	MissingAtProvider int      `json:"missing_at_provider"`
	AmountMismatch    int      `json:"amount_mismatch"`
	FeeMismatch       int      `json:"fee_mismatch"`
	OpenExceptions    int      `json:"open_exceptions"`
	CreatedAt         string   `json:"created_at"`
}

// ReconciliationAmounts are one side of a settlement line.
type ReconciliationAmounts struct {
	Gross int64 `json:"gross"`
	Fee   int64 `json:"fee"`
	Net   int64 `json:"net"`
}

// ReconciliationResolution is how a person resolved an exception.
type ReconciliationResolution struct {
	Action             string  `json:"action"` // "adjust" | "accept"
	Note               *string `json:"note"`
	BalanceTransaction *string `json:"balance_transaction"`
	ResolvedAt         string  `json:"resolved_at"`
}

// ReconciliationException is a difference a reconciliation found between
// a line of the provider's report and the merchant's books.
type ReconciliationException struct {
	ID                 string                    `json:"id"`
	Object             string                    `json:"object"` // "reconciliation_exception"
	Reconciliation     string                    `json:"reconciliation"`
	Kind               string                    `json:"kind"`
	ProviderReference  string                    `json:"provider_reference"`
	Type               string                    `json:"type"`
	Currency           string                    `json:"currency"`
	Line               *int                      `json:"line"`
	GatewayObject      *string                   `json:"gateway_object"`
	BalanceTransaction *string                   `json:"balance_transaction"`
	Provider           *ReconciliationAmounts    `json:"provider"`
	Gateway            *ReconciliationAmounts    `json:"gateway"`
	Status             string                    `json:"status"` // "open" | "resolved"
	Resolution         *ReconciliationResolution `json:"resolution"`
	CreatedAt          string                    `json:"created_at"`
}
