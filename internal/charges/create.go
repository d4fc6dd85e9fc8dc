package charges

import (
	"context"
	"errors"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/gatehouse-pay/gatehouse/internal/apperr"
	"github.com/gatehouse-pay/gatehouse/internal/connectors"
	"github.com/gatehouse-pay/gatehouse/internal/events"
	"github.com/gatehouse-pay/gatehouse/internal/idempotency"
	"github.com/gatehouse-pay/gatehouse/internal/ids"
	"github.com/gatehouse-pay/gatehouse/internal/keyring"
	"github.com/gatehouse-pay/gatehouse/internal/listing"
	"github.com/gatehouse-pay/gatehouse/internal/money"
	"github.com/gatehouse-pay/gatehouse/internal/outbox"
	"github.com/gatehouse-pay/gatehouse/internal/providers"
)

// Limits on charge input (api/openapi.yaml).
const (
	MaxMetadataKeys   = 50
	MaxMetadataKeyLen = 40
	MaxMetadataValLen = 500
	MaxDescriptionLen = 1000
)

// CardInput is the card of a create request: raw card data or a provider token.
type CardInput struct {
	Number   *string `json:"number"`
	ExpMonth *int    `json:"exp_month"`
	ExpYear  *int    `json:"exp_year"`
	CVC      *string `json:"cvc"`
	Token    *string `json:"token"`
	// PaymentMethod is a saved card of the charge's customer (pm_...).
	PaymentMethod *string `json:"payment_method"`
}

// CreateParams is the body of POST /v1/charges.
type CreateParams struct {
	Amount        *int64            `json:"amount"`
	Currency      *string           `json:"currency"`
	PaymentMethod *string           `json:"payment_method"`
	Card          *CardInput        `json:"card"`
	Capture       *bool             `json:"capture"`
	Provider      *string           `json:"provider"`
	Connector     *string           `json:"connector"`
	Description   *string           `json:"description"`
	Metadata      map[string]string `json:"metadata"`
	Environment   *string           `json:"environment"`
	Customer      *string           `json:"customer"`
	OffSession    *bool             `json:"off_session"`
	ReturnURL     *string           `json:"return_url"`
}

// MaxReturnURLLen bounds return_url.
const MaxReturnURLLen = 2048

// secretCard is the part of the card sealed until the provider answers. A
// saved card, and a charge's copy of one, has no CVC.
type secretCard struct {
	Number   string `json:"n"`
	CVC      string `json:"c,omitempty"`
	ExpMonth int    `json:"m"`
	ExpYear  int    `json:"y"`
}

// NewCharge is everything the creation writes in one transaction.
type NewCharge struct {
	Charge Charge
	Sealed []byte // the card, encrypted; nil for a provider token
	// TokenID is the Gatehouse card token the charge uses, which the
	// transaction marks used; "" for none.
	TokenID  string
	Event    events.Event
	Task     outbox.Task
	Idem     *idempotency.Request
	Response *idempotency.Response
}

// Store persists charges. CreateCharge writes the charge, its event (with a
// webhook delivery per subscribed endpoint), its outbox task and, with an
// idempotency request, the first response, in one transaction; if the key was
// used before it writes nothing and returns the stored response (same
// fingerprint) or idempotency.ErrReused (another one). Writes that add events
// return the delivery tasks they created, for the caller to enqueue.
type Store interface {
	CreateCharge(ctx context.Context, n NewCharge) (replay *idempotency.Response, deliveries []outbox.Task, err error)
	ChargeByID(ctx context.Context, merchantID, id string) (Charge, error)
	ListCharges(ctx context.Context, merchantID string, f Filter, p listing.Params) (listing.Page[Charge], error)
	RequestAction(ctx context.Context, r ActionRequest) (replay *idempotency.Response, err error)
	ChargeForWork(ctx context.Context, id string) (Charge, []byte, error)
	// ActionDetails reads what the provider's challenge page sent the
	// cardholder back with (Service.Returned), nil for nothing.
	ActionDetails(ctx context.Context, chargeID string) (map[string]string, error)
	// BeginAttempt appends a as the charge's current attempt if the charge
	// is still created with before attempts.
	BeginAttempt(ctx context.Context, chargeID string, before int, a Attempt) (bool, error)
	ApplyTransition(ctx context.Context, t Transition) (applied bool, deliveries []outbox.Task, err error)
	DeleteTask(ctx context.Context, taskID string) error
}

// Renderer turns the object a request created into the response to store and
// send (status and body), so a replay is byte for byte the first answer.
type Renderer func(v any) (idempotency.Response, error)

// Service is the API side of charges.
type Service struct {
	store      Store
	queue      outbox.Enqueuer
	keys       *keyring.Keyring
	providers  []string
	fallback   string
	now        func() time.Time
	onEnqueue  func(error)
	tokens     TokenStore
	customers  CustomerStore
	challenges ChallengeStore
	links      Links
	router     Router
	// maxAttempts is ROUTING_MAX_ATTEMPTS.
	maxAttempts int
}

// Router plans the connectors a charge tries (connectors.Directory).
type Router interface {
	Plan(ctx context.Context, merchantID string, in connectors.PlanInput, maxAttempts int) ([]connectors.Ref, error)
}

// WithRouter makes the service route every charge by its merchant's
// connectors and routing, trying at most maxAttempts connectors. Without
// one a charge goes to the provider it names or the default provider.
func (s *Service) WithRouter(r Router, maxAttempts int) *Service {
	s.router, s.maxAttempts = r, maxAttempts
	return s
}

var errNoTokens = errors.New("charges: no token store")

// NewService returns the API-side service; providers are the names a charge
// may ask for and defaultProvider the one used when it names none. onEnqueueErr
// is told of a failed enqueue (logged and counted by the caller).
func NewService(store Store, queue outbox.Enqueuer, keys *keyring.Keyring, providers []string, defaultProvider string, now func() time.Time, onEnqueueErr func(error)) *Service {
	return &Service{store: store, queue: queue, keys: keys, providers: providers, fallback: defaultProvider, now: now, onEnqueue: onEnqueueErr}
}

// Result is a created or replayed answer.
type Result struct {
	Response idempotency.Response
	Replayed bool
	// Provider is the new charge's provider; empty for a replay.
	Provider string
}

// Create validates p, seals the card and writes the charge, its
// charge.created event and its authorize task in one transaction, then hands
// the task to the queue.
func (s *Service) Create(ctx context.Context, merchantID, environment string, p CreateParams, idem *idempotency.Request, render Renderer) (Result, error) {
	now := s.now().UTC().Truncate(time.Millisecond)
	c, secret, tokenID, err := s.validate(p, now)
	if err != nil {
		return Result{}, err
	}
	c.ID = ids.NewUUID()
	c.MerchantID = merchantID
	c.Environment = environment
	c.Status = StatusCreated
	c.CreatedAt, c.UpdatedAt = now, now

	n := NewCharge{Charge: c, Task: outbox.Task{Type: outbox.ChargeAuthorize, RefID: c.ID}, Idem: idem}
	if secret != nil {
		if n.Sealed, err = sealSecret(s.keys, &n.Charge.Card, merchantID, secret, c.ID); err != nil {
			return Result{}, err
		}
	}
	if err := s.useCustomer(ctx, &n); err != nil {
		return Result{}, err
	}
	if tokenID != "" {
		replay, err := s.useToken(ctx, &n, tokenID, now)
		if err != nil {
			return Result{}, err
		}
		if replay != nil {
			return Result{Response: *replay, Replayed: true}, nil
		}
	}
	if err := s.route(ctx, &n.Charge, p); err != nil {
		return Result{}, err
	}
	if n.Event, err = events.New(ids.NewUUID(), merchantID, environment, events.ChargeCreated, now, n.Charge.View(), nil); err != nil {
		return Result{}, apperr.Internal(err)
	}
	resp, err := render(n.Charge)
	if err != nil {
		return Result{}, apperr.Internal(err)
	}
	n.Response = &resp
	replay, deliveries, err := s.store.CreateCharge(ctx, n)
	if err != nil {
		return Result{}, err
	}
	if replay != nil {
		return Result{Response: *replay, Replayed: true}, nil
	}
	s.enqueue(ctx, n.Task)
	for _, t := range deliveries {
		s.enqueue(ctx, t)
	}
	return Result{Response: resp, Provider: n.Charge.Provider}, nil
}

// route plans c's connectors: the first takes the charge, the others are
// its fallbacks.
func (s *Service) route(ctx context.Context, c *Charge, p CreateParams) error {
	if s.router == nil {
		if p.Connector != nil {
			return apperr.Invalid("connector", "Connectors are not available on this server.")
		}
		// Without connectors every charge goes to the server's own account.
		return serverAccountToken(c)
	}
	in := connectors.PlanInput{Connector: p.Connector, Provider: p.Provider, Currency: c.Currency, Amount: c.Amount, CardBrand: c.Card.Brand}
	plan, err := s.router.Plan(ctx, c.MerchantID, in, s.maxAttempts)
	if err != nil {
		return err
	}
	if c.CardToken != nil {
		// A provider's own token (pm_..., tok_...) means nothing at
		// another connector: no fallbacks.
		plan = plan[:1]
		if plan[0].Provider == connectors.ProviderAdyen {
			return errAdyenToken
		}
		if plan[0].ServerAccount {
			if err := serverAccountToken(c); err != nil {
				return err
			}
		}
	}
	plan, err = adyenCarries(plan, c)
	if err != nil {
		return err
	}
	c.ConnectorID, c.Provider = &plan[0].ID, plan[0].Provider
	c.Route = make([]RouteStep, len(plan))
	for i, r := range plan {
		c.Route[i] = RouteStep{Connector: r.ID, Provider: r.Provider}
	}
	return nil
}

// adyenCarries refuses, as a 400, a charge whose first connector is an
// Adyen one when Adyen cannot carry its amount (Adyen takes IDR and CVE in
// whole units: IDR 123.45 cannot be sent), and leaves such connectors out
// of its fallbacks, where the charge would only be declined.
func adyenCarries(plan []connectors.Ref, c *Charge) ([]connectors.Ref, error) {
	err := CheckProviderAmount(connectors.ProviderAdyen, c.Currency, c.Amount)
	if err == nil {
		return plan, nil
	}
	if plan[0].Provider == connectors.ProviderAdyen {
		return nil, err
	}
	return slices.DeleteFunc(plan, func(p connectors.Ref) bool { return p.Provider == connectors.ProviderAdyen }), nil
}

// CheckProviderAmount refuses, as a 400 on amount, an amount of currency
// that provider cannot carry: an Adyen connector takes CVE and IDR in
// whole units (money.AdyenDigits), so IDR 123.45 cannot be sent to it, as
// a charge, a capture or a refund.
func CheckProviderAmount(provider, currency string, amount int64) error {
	if provider != connectors.ProviderAdyen {
		return nil
	}
	digits := money.AdyenDigits(currency)
	if money.FitsDigits(amount, currency, digits) {
		return nil
	}
	return apperr.Invalid("amount", "An adyen connector takes %s amounts in whole units of %d decimals; %s is not one.",
		strings.ToUpper(currency), digits, money.Format(amount, currency))
}

// errAdyenToken refuses a provider token on an Adyen connector: the
// Adyen adapter carries card details only.
var errAdyenToken = apperr.Invalid("card.token", "An adyen connector does not take provider tokens yet: send the card's details, "+
	"or a token made with your public key (ctok_...).")

// errServerAccountToken refuses a provider token on the server's own
// account at its provider (api/openapi.yaml, card.token).
var errServerAccountToken = apperr.Invalid("card.token", "On the server's own account at a provider, card.token must be a token "+
	"made with your public key (ctok_...) or one of the provider's documented test tokens (tok_visa, pm_card_visa, ...).")

// serverAccountToken checks the provider token of c, a charge that goes
// to the server's own account at its provider (the one STRIPE_SECRET_KEY
// names, or the sandbox): only the provider's documented test tokens are
// taken there, so that no merchant can name an object of the operator's
// account (another customer's saved card, say). A merchant's own connector
// takes any token of its own account.
func serverAccountToken(c *Charge) error {
	if c.CardToken != nil && !providers.TestToken(*c.CardToken) {
		return errServerAccountToken
	}
	return nil
}

func (s *Service) enqueue(ctx context.Context, t outbox.Task) {
	if err := s.queue.Enqueue(ctx, t); err != nil && s.onEnqueue != nil {
		s.onEnqueue(err)
	}
}

// validate checks p. The card comes back as its summary in the charge and
// either the raw card to seal, a provider token (in CardToken), or the id of
// a Gatehouse token.
func (s *Service) validate(p CreateParams, now time.Time) (c Charge, secret *secretCard, tokenID string, err error) {
	c, secret, err = s.validateFields(p, now)
	if err != nil {
		return c, nil, "", err
	}
	if c.CardToken != nil && isCardToken(*c.CardToken) {
		tokenID, c.CardToken, c.Card = *c.CardToken, nil, Card{}
	}
	return c, secret, tokenID, nil
}

func (s *Service) validateFields(p CreateParams, now time.Time) (Charge, *secretCard, error) {
	if p.Environment != nil {
		switch *p.Environment {
		case "live":
			return Charge{}, nil, apperr.LiveMode()
		case "sandbox":
		default:
			return Charge{}, nil, apperr.Invalid("environment", "environment must be sandbox or live.")
		}
	}
	c := Charge{Capture: true, Metadata: map[string]string{}}
	switch {
	case p.Amount == nil:
		return c, nil, apperr.Missing("amount")
	case !money.ValidAmount(*p.Amount):
		return c, nil, apperr.Invalid("amount", "amount must be an integer from %d to %d (minor units).", money.MinAmount, money.MaxAmount)
	}
	c.Amount = *p.Amount
	if p.Currency == nil || *p.Currency == "" {
		return c, nil, apperr.Missing("currency")
	}
	cur, err := parseCurrency(*p.Currency)
	if err != nil {
		return c, nil, err
	}
	c.Currency = cur
	switch {
	case (p.PaymentMethod == nil || *p.PaymentMethod == "") && p.Card != nil && p.Card.PaymentMethod != nil:
		p.PaymentMethod = ptr("card") // a saved card is a card
	}
	switch {
	case p.PaymentMethod == nil || *p.PaymentMethod == "":
		return c, nil, apperr.Missing("payment_method")
	case *p.PaymentMethod != "card":
		return c, nil, apperr.Invalid("payment_method", "payment_method must be card.")
	}
	c.PaymentMethod = "card"
	if p.Capture != nil {
		c.Capture = *p.Capture
	}
	c.Provider = s.fallback
	known := s.providers
	if s.router != nil {
		known = connectors.Providers // a merchant's own connector may serve one the server has no account with
	}
	if p.Provider != nil {
		if !contains(known, *p.Provider) {
			return c, nil, apperr.Invalid("provider", "provider must be one of: %s.", strings.Join(known, ", "))
		}
		c.Provider = *p.Provider
	}
	if p.Connector != nil && !connectors.ValidID(*p.Connector) {
		return c, nil, apperr.Invalid("connector", "connector must be the id of one of your connectors (conn_...).")
	}
	if err := s.customerFields(&c, p); err != nil {
		return c, nil, err
	}
	if p.Description != nil {
		if utf8.RuneCountInString(*p.Description) > MaxDescriptionLen {
			return c, nil, apperr.Invalid("description", "description must be at most %d characters.", MaxDescriptionLen)
		}
		d := *p.Description
		c.Description = &d
	}
	if err := CheckMetadata(p.Metadata); err != nil {
		return c, nil, err
	}
	for k, v := range p.Metadata {
		c.Metadata[k] = v
	}
	secret, err := s.card(&c, p.Card, now)
	return c, secret, err
}

func (s *Service) card(c *Charge, in *CardInput, now time.Time) (*secretCard, error) {
	if in == nil {
		return nil, apperr.Missing("card")
	}
	if in.PaymentMethod != nil {
		if in.Token != nil || in.Number != nil || in.CVC != nil || in.ExpMonth != nil || in.ExpYear != nil {
			return nil, apperr.Invalid("card", "Send card.payment_method alone, without a token or the card's number.")
		}
		pm := strings.TrimSpace(*in.PaymentMethod)
		if pm == "" {
			return nil, apperr.Invalid("card.payment_method", "card.payment_method must be the id of a saved card (pm_...).")
		}
		c.PaymentMethodID = &pm
		return nil, nil
	}
	if in.Token != nil {
		if in.Number != nil || in.CVC != nil || in.ExpMonth != nil || in.ExpYear != nil {
			return nil, apperr.Invalid("card", "Send either card.token or the card's number, exp_month, exp_year and cvc, not both.")
		}
		tok := strings.TrimSpace(*in.Token)
		if tok == "" || len(tok) > 255 {
			return nil, apperr.Invalid("card.token", "card.token must be 1 to 255 characters.")
		}
		c.CardToken = &tok
		c.Card = Card{Brand: brandOfToken(tok)}
		return nil, nil
	}
	card, secret, err := rawCard(RawCard{Number: in.Number, ExpMonth: in.ExpMonth, ExpYear: in.ExpYear, CVC: in.CVC}, now)
	c.Card = card
	return secret, err
}

// rawCard checks a card's number (Luhn), expiry and CVC and returns its
// summary (no fingerprint yet) and the part to seal.
func rawCard(in RawCard, now time.Time) (Card, *secretCard, error) {
	switch {
	case in.Number == nil || *in.Number == "":
		return Card{}, nil, apperr.Missing("card.number")
	case in.ExpMonth == nil:
		return Card{}, nil, apperr.Missing("card.exp_month")
	case in.ExpYear == nil:
		return Card{}, nil, apperr.Missing("card.exp_year")
	case in.CVC == nil || *in.CVC == "":
		return Card{}, nil, apperr.Missing("card.cvc")
	}
	number := strings.NewReplacer(" ", "", "-", "").Replace(*in.Number)
	if len(number) < 12 || len(number) > 19 || !digits(number) || !Luhn(number) {
		return Card{}, nil, apperr.Invalid("card.number", "card.number is not a valid card number.")
	}
	month, year := *in.ExpMonth, *in.ExpYear
	if month < 1 || month > 12 {
		return Card{}, nil, apperr.Invalid("card.exp_month", "card.exp_month must be from 1 to 12.")
	}
	if year < 2000 || year > 2100 {
		return Card{}, nil, apperr.Invalid("card.exp_year", "card.exp_year must be a four-digit year.")
	}
	if year < now.Year() || (year == now.Year() && month < int(now.Month())) {
		return Card{}, nil, apperr.Invalid("card.exp_year", "The card has expired.")
	}
	cvc := *in.CVC
	if len(cvc) < 3 || len(cvc) > 4 || !digits(cvc) {
		return Card{}, nil, apperr.Invalid("card.cvc", "card.cvc must be 3 or 4 digits.")
	}
	last4 := number[len(number)-4:]
	return Card{Brand: Brand(number), Last4: &last4, ExpMonth: &month, ExpYear: &year},
		&secretCard{Number: number, CVC: cvc, ExpMonth: month, ExpYear: year}, nil
}

// CheckMetadata enforces the metadata limits of charges and refunds: at most
// 50 keys of 1 to 40 characters, values of at most 500 characters.
func CheckMetadata(md map[string]string) error {
	if len(md) > MaxMetadataKeys {
		return apperr.Invalid("metadata", "metadata can have at most %d keys.", MaxMetadataKeys)
	}
	for k, v := range md {
		if k == "" || utf8.RuneCountInString(k) > MaxMetadataKeyLen {
			return apperr.Invalid("metadata", "metadata keys must be 1 to %d characters.", MaxMetadataKeyLen)
		}
		if utf8.RuneCountInString(v) > MaxMetadataValLen {
			return apperr.Invalid("metadata", "metadata values must be at most %d characters.", MaxMetadataValLen)
		}
	}
	return nil
}

func parseCurrency(s string) (string, error) {
	up, err := money.ParseCurrency(s)
	switch {
	case errors.Is(err, money.ErrCurrencyLength):
		return "", apperr.Invalid("currency", "currency must be a three-letter ISO 4217 code.")
	case err != nil:
		return "", apperr.Invalid("currency", "currency %q is not an ISO 4217 code.", up)
	}
	return up, nil
}

func digits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return s != ""
}

// Luhn reports whether number (digits only) passes the Luhn check.
func Luhn(number string) bool {
	sum, double := 0, false
	for i := len(number) - 1; i >= 0; i-- {
		d := int(number[i] - '0')
		if double {
			if d *= 2; d > 9 {
				d -= 9
			}
		}
		sum += d
		double = !double
	}
	return sum%10 == 0
}

// Brand names the card network of a number.
func Brand(number string) string {
	p2 := number[:2]
	switch {
	case number[0] == '4':
		return "visa"
	case p2 >= "51" && p2 <= "55", len(number) >= 4 && number[:4] >= "2221" && number[:4] <= "2720":
		return "mastercard"
	case p2 == "34" || p2 == "37":
		return "amex"
	case strings.HasPrefix(number, "6011") || p2 == "65":
		return "discover"
	}
	return "unknown"
}

func brandOfToken(tok string) string {
	for _, b := range []string{"visa", "mastercard", "amex", "discover"} {
		if strings.Contains(strings.ToLower(tok), b) {
			return b
		}
	}
	return "unknown"
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}
