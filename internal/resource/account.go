package resource

// The account's objects: the merchant, its team, its keys and its audit
// log. The small bodies that were once written as maps keep the maps'
// order: their keys sorted.

// Merchant is a merchant account.
type Merchant struct {
	ID        string `json:"id"`
	Object    string `json:"object"` // "merchant"
	Email     string `json:"email"`
	Name      string `json:"name"`
	CreatedAt string `json:"created_at"`
}

// Member is a person of a merchant's team.
type Member struct {
	ID         string `json:"id"`
	Object     string `json:"object"` // "member"
	Email      string `json:"email"`
	Role       string `json:"role"`
	MFAEnabled bool   `json:"mfa_enabled"`
	CreatedAt  string `json:"created_at"`
}

// Invitation answers an invitation: the member and the page where they set
// a password. Its keys are sorted.
type Invitation struct {
	Member   Member `json:"member"`
	SetupURL string `json:"setup_url"`
}

// Session answers a completed sign-in. Its keys are sorted.
type Session struct {
	ExpiresAt string   `json:"expires_at"`
	Member    Member   `json:"member"`
	Merchant  Merchant `json:"merchant"`
	Token     string   `json:"token"`
	TokenType string   `json:"token_type"` // "Bearer"
}

// TOTPEnrollment is a new pending TOTP secret. Its keys are sorted.
type TOTPEnrollment struct {
	OtpauthURL string `json:"otpauth_url"`
	Secret     string `json:"secret"`
}

// RecoveryCodes answers a confirmed enrollment: the member, and the
// recovery codes shown this once. Its keys are sorted.
type RecoveryCodes struct {
	Member        Member   `json:"member"`
	RecoveryCodes []string `json:"recovery_codes"`
}

// AccountSettings is the account's settings.
type AccountSettings struct {
	Object      string `json:"object"` // "account_settings"
	MFARequired bool   `json:"mfa_required"`
}

// APIKey is an API key pair; SecretKey is set only in the answer that
// creates or rolls it.
type APIKey struct {
	ID          string            `json:"id"`
	Object      string            `json:"object"` // "api_key"
	Name        string            `json:"name"`
	Environment string            `json:"environment"`
	Type        string            `json:"type"`
	Permissions map[string]string `json:"permissions"`
	PublicKey   string            `json:"public_key"`
	SecretKey   string            `json:"secret_key,omitempty"`
	SecretLast4 string            `json:"secret_key_last4"`
	CreatedAt   string            `json:"created_at"`
	// CreatedBy is the member who made the key (created it, or rolled the
	// key it replaced); null for a key made before makers were recorded.
	CreatedBy *string `json:"created_by"`
	ExpiresAt *string `json:"expires_at"`
	RevokedAt *string `json:"revoked_at"`
}

// RemovedMember answers the removal of a member: what remains of it, and
// the keys it made that still work, for the owner to review (a removal does
// not revoke them: integrations run on them).
type RemovedMember struct {
	Deleted bool         `json:"deleted"`
	ID      string       `json:"id"`
	Object  string       `json:"object"` // "member"
	APIKeys List[APIKey] `json:"api_keys"`
}

// AuditEntry is one entry of the audit log.
type AuditEntry struct {
	ID         string     `json:"id"`
	Object     string     `json:"object"` // "audit_log_entry"
	CreatedAt  string     `json:"created_at"`
	Actor      AuditActor `json:"actor"`
	Action     string     `json:"action"`
	ObjectType string     `json:"object_type"`
	ObjectID   *string    `json:"object_id"`
	IP         string     `json:"ip"`
	UserAgent  string     `json:"user_agent"`
	RequestID  string     `json:"request_id"`
	Chain      int        `json:"chain"`
	Seq        int64      `json:"seq"`
	PrevHash   string     `json:"prev_hash"`
	Hash       string     `json:"hash"`
}

// AuditActor is who did what an audit entry records.
type AuditActor struct {
	Type string `json:"type"`
	ID   string `json:"id"`
}
