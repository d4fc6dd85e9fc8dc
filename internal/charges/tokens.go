package charges

import (
	"context"
	"encoding/json"
	"strings"
	"time"

	"github.com/gatehouse-pay/gatehouse/internal/apperr"
	"github.com/gatehouse-pay/gatehouse/internal/events"
	"github.com/gatehouse-pay/gatehouse/internal/idempotency"
	"github.com/gatehouse-pay/gatehouse/internal/ids"
	"github.com/gatehouse-pay/gatehouse/internal/resource"
)

// Card tokens (api/openapi.yaml). A checkout page
// sends the card to POST /v1/tokens with the merchant's public key; the
// merchant's server then charges the token with its secret key, so the card
// number never reaches the merchant. A token is single-use and expires
// TokenTTL after creation; its card is kept only sealed, under the token's id.
const (
	TokenPrefix = "ctok_"
	TokenTTL    = 15 * time.Minute
	// TokenRetention is how long a token's row (never its card) is kept.
	TokenRetention = 30 * 24 * time.Hour
)

// Token is a card collected with a public key.
type Token struct {
	ID          string
	MerchantID  string
	Environment string
	KeyID       string // the key pair whose public key created it
	Card        Card
	Used        bool
	CreatedAt   time.Time
	ExpiresAt   time.Time
}

// View returns the public form.
func (t Token) View() resource.Token {
	return resource.Token{
		ID: t.ID, Object: "token", Type: "card",
		Card:     t.Card.View(),
		Livemode: t.Environment == "live", Used: t.Used,
		CreatedAt: events.Timestamp(t.CreatedAt), ExpiresAt: events.Timestamp(t.ExpiresAt),
	}
}

// MarshalJSON renders the public form.
func (t Token) MarshalJSON() ([]byte, error) { return json.Marshal(t.View()) }

// RawCard is the card of POST /v1/tokens.
type RawCard struct {
	Number   *string `json:"number"`
	ExpMonth *int    `json:"exp_month"`
	ExpYear  *int    `json:"exp_year"`
	CVC      *string `json:"cvc"`
}

// TokenParams is the body of POST /v1/tokens.
type TokenParams struct {
	Card *RawCard `json:"card"`
}

// TokenStore keeps tokens.
type TokenStore interface {
	// CreateToken stores the token with its sealed card and, with an
	// idempotency request, the first response, in one transaction; a used
	// key returns its stored response (or idempotency.ErrReused).
	CreateToken(ctx context.Context, t Token, sealed []byte, idem *idempotency.Request, first idempotency.Response) (*idempotency.Response, error)
	// UsableToken returns the merchant's token in environment with its
	// sealed card while it is unused and unexpired at now; otherwise
	// NotFound.
	UsableToken(ctx context.Context, merchantID, environment, id string, now time.Time) (Token, []byte, error)
	// StoredResponse returns the response recorded under an Idempotency-Key,
	// nil if the key is unused, or idempotency.ErrReused for another request.
	StoredResponse(ctx context.Context, merchantID string, idem *idempotency.Request) (*idempotency.Response, error)
}

// WithTokens lets the service create tokens and charge them.
func (s *Service) WithTokens(ts TokenStore) *Service {
	s.tokens = ts
	return s
}

// errTokenUnusable is the answer for any token a charge cannot use: unknown,
// used, expired, or another merchant's or environment's (api/openapi.yaml).
var errTokenUnusable = apperr.Invalid("card.token", "card.token is not a usable token: it is unknown, used or expired.")

// ErrTokenUnusable is errTokenUnusable, for the store, which finds a token
// used by a concurrent charge only when it marks it.
func ErrTokenUnusable() error { return errTokenUnusable }

// CreateToken checks and seals the card and stores a token of the merchant's
// key pair keyID.
func (s *Service) CreateToken(ctx context.Context, merchantID, environment, keyID string, p TokenParams, idem *idempotency.Request, render Renderer) (Result, error) {
	if s.tokens == nil {
		return Result{}, apperr.Internal(errNoTokens)
	}
	now := s.now().UTC().Truncate(time.Millisecond)
	if p.Card == nil {
		return Result{}, apperr.Missing("card")
	}
	card, secret, err := rawCard(*p.Card, now)
	if err != nil {
		return Result{}, err
	}
	t := Token{ID: ids.New("ctok"), MerchantID: merchantID, Environment: environment, KeyID: keyID,
		Card: card, CreatedAt: now, ExpiresAt: now.Add(TokenTTL)}
	sealed, err := sealSecret(s.keys, &t.Card, merchantID, secret, t.ID)
	if err != nil {
		return Result{}, err
	}
	resp, err := render(t)
	if err != nil {
		return Result{}, apperr.Internal(err)
	}
	replay, err := s.tokens.CreateToken(ctx, t, sealed, idem, resp)
	if err != nil {
		return Result{}, err
	}
	if replay != nil {
		return Result{Response: *replay, Replayed: true}, nil
	}
	return Result{Response: resp}, nil
}

// useToken fills n with the card of the token id: its summary, and the card
// re-sealed under the charge's id. The store marks the token used in the
// charge's transaction. A token that cannot be used is answered 400, unless
// the request repeats an Idempotency-Key whose first request used it: then
// its stored answer is replayed.
func (s *Service) useToken(ctx context.Context, n *NewCharge, id string, now time.Time) (replay *idempotency.Response, err error) {
	if s.tokens == nil {
		return nil, errTokenUnusable
	}
	c := &n.Charge
	t, sealed, err := s.tokens.UsableToken(ctx, c.MerchantID, c.Environment, id, now)
	if apperr.KindOf(err) == apperr.KindNotFound {
		if n.Idem != nil {
			if replay, err := s.tokens.StoredResponse(ctx, c.MerchantID, n.Idem); replay != nil || err != nil {
				return replay, err
			}
		}
		return nil, errTokenUnusable
	}
	if err != nil {
		return nil, err
	}
	if n.Sealed, err = ResealCard(s.keys, sealed, t.ID, c.ID); err != nil {
		return nil, err
	}
	c.Card = t.Card
	n.TokenID = t.ID
	return nil, nil
}

// isCardToken reports whether a card.token names a Gatehouse token rather
// than a provider's (tok_visa, pm_card_visa, ...).
func isCardToken(tok string) bool { return strings.HasPrefix(tok, TokenPrefix) }
