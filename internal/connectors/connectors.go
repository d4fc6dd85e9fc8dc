// Package connectors holds a merchant's accounts at providers (connectors)
// and the routing rules that choose connectors for each charge.
//
// A connector's credentials are sealed under its id and never leave the
// worker: the API answers without them. Every merchant has a connector for
// each provider the server itself has an account with (the sandbox always,
// Stripe when STRIPE_SECRET_KEY is set), created on first use, so charges
// that name only a provider keep working. A deleted connector keeps its
// row: the captures, voids and refunds of the charges it took still go to
// it.
package connectors

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/gatehouse-pay/gatehouse/internal/apperr"
	"github.com/gatehouse-pay/gatehouse/internal/events"
	"github.com/gatehouse-pay/gatehouse/internal/idempotency"
	"github.com/gatehouse-pay/gatehouse/internal/ids"
	"github.com/gatehouse-pay/gatehouse/internal/keyring"
	"github.com/gatehouse-pay/gatehouse/internal/ledger"
	"github.com/gatehouse-pay/gatehouse/internal/listing"
	"github.com/gatehouse-pay/gatehouse/internal/resource"
)

// Prefix is the id prefix of connectors.
const Prefix = "conn"

// ValidID reports whether id can be a connector's.
func ValidID(id string) bool { return ids.Valid(Prefix, id) }

// Providers a connector can be at.
const (
	ProviderSandbox = "sandbox"
	ProviderStripe  = "stripe"
	ProviderAdyen   = "adyen"
)

// Providers lists them.
var Providers = []string{ProviderSandbox, ProviderStripe, ProviderAdyen}

// MaxNameLen bounds a connector's name.
const MaxNameLen = 100

// MaxLatencyMS bounds the sandbox's rehearsed latency.
const MaxLatencyMS = 5000

// RehearsalDeclines are the decline codes a sandbox connector may be set to
// answer every authorization with: the soft declines routing moves on
// after, and the hard ones it never moves on after.
var RehearsalDeclines = []string{"processing_error", "issuer_unavailable", "try_again_later",
	"card_declined", "insufficient_funds", "expired_card", "incorrect_cvc", "fraudulent", "lost_card", "stolen_card"}

// SoftDeclines are the failure codes after which a charge moves on to its
// next connector: another provider may well take the card.
var SoftDeclines = []string{"processing_error", "issuer_unavailable", "try_again_later"}

// Soft reports whether a decline code lets routing move on.
func Soft(code string) bool {
	for _, c := range SoftDeclines {
		if c == code {
			return true
		}
	}
	return false
}

// Sandbox is a sandbox connector's rehearsal: it lets a merchant see
// routing move on without a real outage.
type Sandbox struct {
	// Unavailable: every call fails as an outage would, before anything is
	// booked.
	Unavailable bool `json:"unavailable"`
	// DeclineCode, when set, is the answer to every authorization.
	DeclineCode *string `json:"decline_code"`
	// LatencyMS is added before every call.
	LatencyMS int `json:"latency_ms"`
	// PayoutFailure, when set, is the bank's answer every payout of the
	// connector fails with once in transit (its money returns to the
	// balance).
	PayoutFailure *string `json:"payout_failure"`
}

// Connector is one of a merchant's accounts at a provider.
type Connector struct {
	ID         string
	MerchantID string
	Provider   string
	Name       string
	Enabled    bool
	// ServerAccount: the connector uses the server's own account at its
	// provider instead of credentials of its own.
	ServerAccount bool
	// Sealed is the sealed credentials (nil for none); only the worker
	// opens them.
	Sealed  []byte
	Sandbox *Sandbox
	// Fees is a sandbox connector's fee schedule (nil: the default one);
	// other providers report each fee.
	Fees *ledger.FeeSchedule
	// PayoutSchedule is a sandbox connector's: manual or daily.
	PayoutSchedule string
	CreatedAt      time.Time
	UpdatedAt      time.Time
	DeletedAt      *time.Time
	// NotificationURL is where the provider sends its notifications about
	// the connector's payments (NotificationPath under PUBLIC_URL); "" for
	// the sandbox, which sends none. The Service sets it.
	NotificationURL string
}

// NotificationPath is the path of a connector's notification URL.
func NotificationPath(id string) string { return "/v1/provider_notifications/" + id }

// View returns the public form.
func (c Connector) View() resource.Connector {
	v := resource.Connector{ID: c.ID, Object: "connector", Provider: c.Provider, Name: c.Name, Enabled: c.Enabled,
		ServerAccount: c.ServerAccount, HasCredentials: c.Sealed != nil,
		CreatedAt: events.Timestamp(c.CreatedAt), UpdatedAt: events.Timestamp(c.UpdatedAt)}
	if c.NotificationURL != "" {
		v.NotificationURL = &c.NotificationURL
	}
	if c.Provider == ProviderSandbox {
		s := resource.Sandbox{}
		if c.Sandbox != nil {
			s = resource.Sandbox(*c.Sandbox)
		}
		v.Sandbox = &s
		f := c.FeeSchedule()
		v.Fees = &resource.FeeSchedule{PercentBPS: f.PercentBPS, Fixed: f.Fixed}
		ps := c.PayoutSchedule
		if ps == "" {
			ps = ledger.ScheduleDaily
		}
		v.PayoutSchedule = &ps
	}
	return v
}

// FeeSchedule is a sandbox connector's fee schedule, its own or the
// default.
func (c Connector) FeeSchedule() ledger.FeeSchedule {
	if c.Fees != nil {
		return *c.Fees
	}
	return ledger.DefaultSandboxFees
}

// Terms are what the connector's provider charges and when it pays:
// settlementDelay is the sandbox's (SANDBOX_SETTLEMENT_DELAY); Stripe and
// Adyen report each fee themselves.
func (c Connector) Terms(settlementDelay time.Duration) ledger.Terms {
	if c.Provider == ProviderSandbox {
		f := c.FeeSchedule()
		return ledger.Terms{Fees: &f, SettlementDelay: settlementDelay}
	}
	return ledger.Terms{SettlementDelay: ledger.DefaultSettlementDelay}
}

// MarshalJSON renders the public form.
func (c Connector) MarshalJSON() ([]byte, error) { return json.Marshal(c.View()) }

// Credentials is what a connector needs to reach its provider's account.
type Credentials struct {
	SecretKey string `json:"secret_key"`
	// WebhookSecret is the signing secret (whsec_...) of the Stripe
	// account's webhook endpoint that sends to the connector's
	// notification URL; "" when none was given.
	WebhookSecret string `json:"webhook_secret,omitempty"`

	// An Adyen connector's: the API key of its web service user, its
	// merchant account, the HMAC key (hex) its notifications are signed
	// with, and the Basic auth its notifications carry when set.
	APIKey               string `json:"api_key,omitempty"`
	MerchantAccount      string `json:"merchant_account,omitempty"`
	HMACKey              string `json:"hmac_key,omitempty"`
	NotificationUsername string `json:"notification_username,omitempty"`
	NotificationPassword string `json:"notification_password,omitempty"`
}

// String never prints the secret.
func (Credentials) String() string { return "[credentials]" }

// GoString never prints the secret.
func (Credentials) GoString() string { return "[credentials]" }

// CreateParams is the body of POST /v1/connectors.
type CreateParams struct {
	Provider    *string            `json:"provider"`
	Name        *string            `json:"name"`
	Credentials *map[string]string `json:"credentials"`
	Enabled     *bool              `json:"enabled"`
	Sandbox     *SandboxParams     `json:"sandbox"`
	// Fees and PayoutSchedule: a sandbox connector's terms.
	Fees           *ledger.FeeSchedule `json:"fees"`
	PayoutSchedule *string             `json:"payout_schedule"`
}

// SandboxParams sets a sandbox connector's rehearsal; an absent field keeps
// its value.
type SandboxParams struct {
	Unavailable *bool   `json:"unavailable"`
	DeclineCode *string `json:"decline_code"`
	// declineSet tells an explicit null (clear it) from an absent field.
	declineSet bool
	LatencyMS  *int `json:"latency_ms"`
	// PayoutFailure: null clears it.
	PayoutFailure *string `json:"payout_failure"`
	failureSet    bool
}

// Rehearsal is a whole rehearsal, every field set (a nil declineCode
// clears it), as a form sends it.
func Rehearsal(unavailable bool, declineCode *string, latencyMS int) *SandboxParams {
	return &SandboxParams{Unavailable: &unavailable, DeclineCode: declineCode, declineSet: true, LatencyMS: &latencyMS}
}

// sandboxFields are the names SandboxParams takes, exactly.
var sandboxFields = map[string]bool{"unavailable": true, "decline_code": true, "latency_ms": true, "payout_failure": true}

// UnmarshalJSON tells "decline_code": null from no decline_code. It takes
// the exact names only (encoding/json would fill LatencyMS from
// "LATENCY_MS") and refuses any other, in the words of encoding/json's own
// unknown-field error, which the API answers 400 naming the field.
func (p *SandboxParams) UnmarshalJSON(b []byte) error {
	type plain SandboxParams
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(b, &raw); err != nil {
		return err
	}
	for k := range raw {
		if !sandboxFields[k] {
			return fmt.Errorf("json: unknown field %q", "sandbox."+k)
		}
	}
	var v plain
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	*p = SandboxParams(v)
	_, p.declineSet = raw["decline_code"]
	_, p.failureSet = raw["payout_failure"]
	return nil
}

// UpdateParams is the body of PATCH /v1/connectors/:id; absent fields keep
// their values.
type UpdateParams struct {
	Name        *string            `json:"name"`
	Credentials *map[string]string `json:"credentials"`
	Enabled     *bool              `json:"enabled"`
	Sandbox     *SandboxParams     `json:"sandbox"`
	// Fees and PayoutSchedule: a sandbox connector's terms.
	Fees           *ledger.FeeSchedule `json:"fees"`
	PayoutSchedule *string             `json:"payout_schedule"`
}

// Patch is a checked update.
type Patch struct {
	Name           *string
	Enabled        *bool
	Sealed         []byte // nil keeps the credentials
	Sandbox        *Sandbox
	Fees           *ledger.FeeSchedule
	PayoutSchedule *string
	At             time.Time
}

// Store persists connectors and routing. Every method that takes a
// merchant id answers NotFound for another merchant's objects.
type Store interface {
	CreateConnector(ctx context.Context, c Connector, idem *idempotency.Request, first idempotency.Response) (*idempotency.Response, error)
	ConnectorByID(ctx context.Context, merchantID, id string) (Connector, error)
	ListConnectors(ctx context.Context, merchantID string, p listing.Params) (listing.Page[Connector], error)
	UpdateConnector(ctx context.Context, merchantID, id string, p Patch) (Connector, error)
	// DeleteConnector marks the connector deleted unless the routing names
	// it (a Conflict).
	DeleteConnector(ctx context.Context, merchantID, id string, at time.Time) error
	// Snapshot reads what routing needs of a merchant: its live connectors
	// (creating the server-account ones for serverProviders first, if
	// missing) and its routing.
	Snapshot(ctx context.Context, merchantID string, serverProviders []string, at time.Time) (Snapshot, error)
	// PutRouting replaces the merchant's routing if every connector it
	// names is still live and enabled.
	PutRouting(ctx context.Context, merchantID string, r Routing, at time.Time) (Routing, error)
	// ConnectorForWork reads a connector by id for the worker, deleted or not.
	ConnectorForWork(ctx context.Context, id string) (Connector, error)
	// ConnectorStats sums up the connector's attempts of the merchant's
	// charges created since since.
	ConnectorStats(ctx context.Context, merchantID, id string, since time.Time) (Stats, error)
}

// Service is the API side of connectors and routing.
type Service struct {
	store     Store
	keys      *keyring.Keyring
	dir       *Directory
	now       func() time.Time
	available []string
	publicURL string
}

// WithPublicURL sets the base of the connectors' notification URLs
// (PUBLIC_URL).
func (s *Service) WithPublicURL(u string) *Service {
	s.publicURL = strings.TrimRight(u, "/")
	return s
}

// located sets c's notification URL.
func (s *Service) located(c Connector) Connector {
	if c.Provider != ProviderSandbox && s.publicURL != "" {
		c.NotificationURL = s.publicURL + NotificationPath(c.ID)
	}
	return c
}

// NewService returns the API-side service. available are the providers the
// server has an account with (its server-account connectors); dir is the
// routing cache the charge path reads, told of every change.
func NewService(store Store, keys *keyring.Keyring, dir *Directory, available []string, now func() time.Time) *Service {
	return &Service{store: store, keys: keys, dir: dir, now: now, available: available}
}

// Result is a created or replayed answer.
type Result struct {
	Response idempotency.Response
	Replayed bool
}

func (s *Service) stamp() time.Time { return s.now().UTC().Truncate(time.Millisecond) }

func errNotFound() error { return apperr.NotFound("connector") }

// Create checks p and stores a new connector of the merchant.
func (s *Service) Create(ctx context.Context, merchantID string, p CreateParams, idem *idempotency.Request, render func(Connector) (idempotency.Response, error)) (Result, error) {
	if err := refuseLive(p.Credentials); err != nil {
		return Result{}, err
	}
	if p.Provider == nil || *p.Provider == "" {
		return Result{}, apperr.Missing("provider")
	}
	if !oneOf(Providers, *p.Provider) {
		return Result{}, apperr.Invalid("provider", "provider must be one of: %s.", strings.Join(Providers, ", "))
	}
	if p.Name == nil {
		return Result{}, apperr.Missing("name")
	}
	if err := checkName(*p.Name); err != nil {
		return Result{}, err
	}
	now := s.stamp()
	c := Connector{ID: ids.New(Prefix), MerchantID: merchantID, Provider: *p.Provider, Name: strings.TrimSpace(*p.Name),
		Enabled: true, CreatedAt: now, UpdatedAt: now}
	if p.Enabled != nil {
		c.Enabled = *p.Enabled
	}
	if err := s.credentials(&c, p.Credentials, true); err != nil {
		return Result{}, err
	}
	sb, err := sandboxOf(c.Provider, nil, p.Sandbox)
	if err != nil {
		return Result{}, err
	}
	c.Sandbox = sb
	if c.Fees, c.PayoutSchedule, err = termsOf(c.Provider, p.Fees, p.PayoutSchedule); err != nil {
		return Result{}, err
	}
	if c.Provider == ProviderSandbox && c.PayoutSchedule == "" {
		c.PayoutSchedule = ledger.ScheduleDaily
	}
	first, err := render(s.located(c))
	if err != nil {
		return Result{}, apperr.Internal(err)
	}
	replay, err := s.store.CreateConnector(ctx, c, idem, first)
	if err != nil {
		return Result{}, err
	}
	if replay != nil {
		return Result{Response: *replay, Replayed: true}, nil
	}
	s.dir.Changed(ctx, merchantID)
	return Result{Response: first}, nil
}

// Get returns one of the merchant's connectors.
func (s *Service) Get(ctx context.Context, merchantID, id string) (Connector, error) {
	if !ValidID(id) {
		return Connector{}, errNotFound()
	}
	c, err := s.store.ConnectorByID(ctx, merchantID, id)
	return s.located(c), err
}

// GetAny returns one of the merchant's connectors, deleted or not: a
// connector's books, and what its provider settled, outlive it.
func (s *Service) GetAny(ctx context.Context, merchantID, id string) (Connector, error) {
	if !ValidID(id) {
		return Connector{}, errNotFound()
	}
	c, err := s.store.ConnectorForWork(ctx, id)
	if err != nil {
		return Connector{}, err
	}
	if c.MerchantID != merchantID {
		return Connector{}, errNotFound()
	}
	return s.located(c), nil
}

// List returns a page of the merchant's connectors, the server-account
// ones included.
func (s *Service) List(ctx context.Context, merchantID string, p listing.Params) (listing.Page[Connector], error) {
	if _, err := s.dir.Snapshot(ctx, merchantID); err != nil { // creates the server-account connectors
		return listing.Page[Connector]{}, err
	}
	page, err := s.store.ListConnectors(ctx, merchantID, p)
	for i := range page.Items {
		page.Items[i] = s.located(page.Items[i])
	}
	return page, err
}

// Update changes a connector's name, credentials, enabled flag or sandbox
// rehearsal.
func (s *Service) Update(ctx context.Context, merchantID, id string, p UpdateParams) (Connector, error) {
	if err := refuseLive(p.Credentials); err != nil {
		return Connector{}, err
	}
	if p.Name != nil {
		if err := checkName(*p.Name); err != nil {
			return Connector{}, err
		}
		n := strings.TrimSpace(*p.Name)
		p.Name = &n
	}
	if !ValidID(id) {
		return Connector{}, errNotFound()
	}
	cur, err := s.store.ConnectorByID(ctx, merchantID, id)
	if err != nil {
		return Connector{}, err
	}
	patch := Patch{Name: p.Name, Enabled: p.Enabled, At: s.stamp()}
	if p.Credentials != nil {
		if cur.ServerAccount {
			return Connector{}, apperr.Invalid("credentials", "This connector uses the server's own account; create a connector for other credentials.")
		}
		next := cur
		if err := s.credentials(&next, p.Credentials, false); err != nil {
			return Connector{}, err
		}
		patch.Sealed = next.Sealed
	}
	if p.Sandbox != nil {
		sb, err := sandboxOf(cur.Provider, cur.Sandbox, p.Sandbox)
		if err != nil {
			return Connector{}, err
		}
		patch.Sandbox = sb
	}
	fees, schedule, err := termsOf(cur.Provider, p.Fees, p.PayoutSchedule)
	if err != nil {
		return Connector{}, err
	}
	patch.Fees = fees
	if schedule != "" {
		patch.PayoutSchedule = &schedule
	}
	c, err := s.store.UpdateConnector(ctx, merchantID, id, patch)
	if err != nil {
		return Connector{}, err
	}
	s.dir.Changed(ctx, merchantID)
	return s.located(c), nil
}

// Delete deletes a connector the routing does not name.
func (s *Service) Delete(ctx context.Context, merchantID, id string) error {
	if !ValidID(id) {
		return errNotFound()
	}
	if err := s.store.DeleteConnector(ctx, merchantID, id, s.stamp()); err != nil {
		return err
	}
	s.dir.Changed(ctx, merchantID)
	return nil
}

// credentials checks and seals the credentials of c's provider. A sandbox
// connector takes none; a Stripe one needs a secret key (required says the
// credentials must be given).
func (s *Service) credentials(c *Connector, in *map[string]string, required bool) error {
	if c.Provider == ProviderSandbox {
		if in != nil && len(*in) > 0 {
			return apperr.Invalid("credentials", "A sandbox connector takes no credentials.")
		}
		return nil
	}
	if in == nil {
		if required {
			return apperr.Missing("credentials")
		}
		return nil
	}
	if c.Provider == ProviderAdyen {
		return s.adyenCredentials(c, *in)
	}
	for k := range *in {
		if k != "secret_key" && k != "webhook_secret" {
			return apperr.Invalid("credentials."+k, "A stripe connector's credentials are {\"secret_key\": \"sk_test_...\", \"webhook_secret\": \"whsec_...\"} (webhook_secret optional).")
		}
	}
	hook := strings.TrimSpace((*in)["webhook_secret"])
	if _, given := (*in)["webhook_secret"]; given && (!strings.HasPrefix(hook, "whsec_") || len(hook) > 255 || strings.ContainsAny(hook, " \t\r\n\x00")) {
		return apperr.Invalid("credentials.webhook_secret", "credentials.webhook_secret must be the signing secret of a Stripe webhook endpoint (whsec_...).")
	}
	key := strings.TrimSpace((*in)["secret_key"])
	if key == "" {
		return apperr.Missing("credentials.secret_key")
	}
	if !(strings.HasPrefix(key, "sk_test_") || strings.HasPrefix(key, "rk_test_")) || len(key) > 255 || strings.ContainsAny(key, " \t\r\n\x00") {
		return apperr.Invalid("credentials.secret_key", "credentials.secret_key must be a Stripe secret or restricted key of test mode (sk_test_..., rk_test_...).")
	}
	return s.seal(c, Credentials{SecretKey: key, WebhookSecret: hook})
}

// seal seals the connector's credentials under its id.
func (s *Service) seal(c *Connector, cr Credentials) error {
	plain, err := json.Marshal(cr)
	if err != nil {
		return apperr.Internal(err)
	}
	sealed, err := s.keys.Seal(keyring.PurposeConnector, plain, []byte(c.ID))
	if err != nil {
		return apperr.Internal(err)
	}
	c.Sealed = sealed
	return nil
}

// adyenFields are the credentials an Adyen connector takes.
var adyenFields = map[string]bool{"api_key": true, "merchant_account": true, "hmac_key": true,
	"live_url_prefix": true, "notification_username": true, "notification_password": true}

// adyenCredentials checks and seals an Adyen connector's credentials: the
// API key, the merchant account and the HMAC key are required; a live URL
// prefix is live mode, which is not activated; the notifications' Basic
// auth is both a user name and a password, or neither.
func (s *Service) adyenCredentials(c *Connector, in map[string]string) error {
	for k := range in {
		if !adyenFields[k] {
			return apperr.Invalid("credentials."+k, "An adyen connector's credentials are api_key, merchant_account, hmac_key, and optionally notification_username and notification_password.")
		}
	}
	if strings.TrimSpace(in["live_url_prefix"]) != "" {
		return apperr.LiveMode()
	}
	cr := Credentials{APIKey: strings.TrimSpace(in["api_key"]), MerchantAccount: strings.TrimSpace(in["merchant_account"]),
		HMACKey: strings.ToUpper(strings.TrimSpace(in["hmac_key"])), NotificationUsername: in["notification_username"],
		NotificationPassword: in["notification_password"]}
	for _, f := range []struct{ name, v string }{{"api_key", cr.APIKey}, {"merchant_account", cr.MerchantAccount}, {"hmac_key", cr.HMACKey}} {
		if f.v == "" {
			return apperr.Missing("credentials." + f.name)
		}
	}
	if len(cr.APIKey) > 1024 || strings.ContainsAny(cr.APIKey, " \t\r\n\x00") {
		return apperr.Invalid("credentials.api_key", "credentials.api_key must be the API key of an Adyen web service user.")
	}
	if len(cr.MerchantAccount) > 255 || strings.ContainsAny(cr.MerchantAccount, " \t\r\n\x00/") {
		return apperr.Invalid("credentials.merchant_account", "credentials.merchant_account must be an Adyen merchant account's name.")
	}
	if b, err := hex.DecodeString(cr.HMACKey); err != nil || len(b) < 16 || len(b) > 128 {
		return apperr.Invalid("credentials.hmac_key", "credentials.hmac_key must be the HMAC key of the Adyen webhook, in hexadecimal (32 to 256 digits).")
	}
	if (cr.NotificationUsername == "") != (cr.NotificationPassword == "") {
		return apperr.Invalid("credentials.notification_username", "Give both notification_username and notification_password, or neither.")
	}
	if len(cr.NotificationUsername) > 255 || len(cr.NotificationPassword) > 255 {
		return apperr.Invalid("credentials.notification_password", "notification_username and notification_password are at most 255 characters each.")
	}
	return s.seal(c, cr)
}

// livePrefixes are the prefixes of the providers' live-mode credentials:
// Stripe's live secret and restricted keys, and its live publishable key
// (never a secret, but live all the same).
var livePrefixes = []string{"sk_live_", "rk_live_", "pk_live_"}

// LiveCredential reports whether key is a live-mode credential of a
// provider.
func LiveCredential(key string) bool {
	k := strings.ToLower(strings.TrimSpace(key))
	for _, p := range livePrefixes {
		if strings.HasPrefix(k, p) {
			return true
		}
	}
	return false
}

// refuseLive answers live_mode_disabled (403) for credentials that hold a
// live-mode credential anywhere: live mode is not activated, so no
// connector takes one, whatever else the request says.
func refuseLive(in *map[string]string) error {
	if in == nil {
		return nil
	}
	for _, v := range *in {
		if LiveCredential(v) {
			return apperr.LiveMode()
		}
	}
	return nil
}

// OpenCredentials opens a connector's sealed credentials.
func OpenCredentials(keys *keyring.Keyring, c Connector) (Credentials, error) {
	var cr Credentials
	plain, err := keys.Open(keyring.PurposeConnector, c.Sealed, []byte(c.ID))
	if err != nil {
		return cr, err
	}
	err = json.Unmarshal(plain, &cr)
	return cr, err
}

func checkName(n string) error {
	t := strings.TrimSpace(n)
	if t == "" || utf8.RuneCountInString(t) > MaxNameLen || strings.IndexByte(t, 0) >= 0 {
		return apperr.Invalid("name", "name must be 1 to %d characters.", MaxNameLen)
	}
	return nil
}

// termsOf checks a sandbox connector's fee schedule and payout schedule;
// other providers set their own.
func termsOf(provider string, fees *ledger.FeeSchedule, schedule *string) (*ledger.FeeSchedule, string, error) {
	if provider != ProviderSandbox {
		if fees != nil {
			return nil, "", apperr.Invalid("fees", "Only a sandbox connector has a fee schedule; %s reports each fee.", provider)
		}
		if schedule != nil {
			return nil, "", apperr.Invalid("payout_schedule", "Only a sandbox connector has a payout schedule; %s pays out on its own.", provider)
		}
		return nil, "", nil
	}
	if fees != nil && !fees.Valid() {
		return nil, "", apperr.Invalid("fees", "fees.percent_bps must be from 0 to %d and fees.fixed from 0 to %d.", ledger.MaxPercentBPS, ledger.MaxFixed)
	}
	out := ""
	if schedule != nil {
		if *schedule != ledger.ScheduleManual && *schedule != ledger.ScheduleDaily {
			return nil, "", apperr.Invalid("payout_schedule", "payout_schedule must be manual or daily.")
		}
		out = *schedule
	}
	return fees, out, nil
}

// sandboxOf applies p to a sandbox connector's rehearsal cur.
func sandboxOf(provider string, cur *Sandbox, p *SandboxParams) (*Sandbox, error) {
	if provider != ProviderSandbox {
		if p != nil {
			return nil, apperr.Invalid("sandbox", "Only a sandbox connector has rehearsal settings.")
		}
		return nil, nil
	}
	s := Sandbox{}
	if cur != nil {
		s = *cur
	}
	if p == nil {
		return &s, nil
	}
	if p.Unavailable != nil {
		s.Unavailable = *p.Unavailable
	}
	if p.declineSet {
		if p.DeclineCode != nil && !oneOf(RehearsalDeclines, *p.DeclineCode) {
			return nil, apperr.Invalid("sandbox.decline_code", "sandbox.decline_code must be null or one of: %s.", strings.Join(RehearsalDeclines, ", "))
		}
		s.DeclineCode = p.DeclineCode
	}
	if p.LatencyMS != nil {
		if *p.LatencyMS < 0 || *p.LatencyMS > MaxLatencyMS {
			return nil, apperr.Invalid("sandbox.latency_ms", "sandbox.latency_ms must be from 0 to %d.", MaxLatencyMS)
		}
		s.LatencyMS = *p.LatencyMS
	}
	if p.failureSet {
		if p.PayoutFailure != nil && !oneOf(ledger.PayoutFailures, *p.PayoutFailure) {
			return nil, apperr.Invalid("sandbox.payout_failure", "sandbox.payout_failure must be null or one of: %s.", strings.Join(ledger.PayoutFailures, ", "))
		}
		s.PayoutFailure = p.PayoutFailure
	}
	return &s, nil
}

func oneOf(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// Payee finds the connector a payout is made from: the merchant's
// connector id, or for "" its server-account sandbox connector.
func (s *Service) Payee(ctx context.Context, merchantID, id string) (ledger.ConnectorInfo, error) {
	if id == "" {
		snap, err := s.dir.Snapshot(ctx, merchantID)
		if err != nil {
			return ledger.ConnectorInfo{}, err
		}
		for _, c := range snap.Connectors {
			if c.Provider == ProviderSandbox && c.ServerAccount {
				return ledger.ConnectorInfo{ID: c.ID, Provider: c.Provider}, nil
			}
		}
		return ledger.ConnectorInfo{}, errNotFound()
	}
	c, err := s.Get(ctx, merchantID, id)
	return ledger.ConnectorInfo{ID: c.ID, Provider: c.Provider}, err
}
