package charges

import (
	"context"
	"strings"
	"time"

	"github.com/gatehouse-pay/gatehouse/internal/apperr"
	"github.com/gatehouse-pay/gatehouse/internal/outbox"
	"github.com/gatehouse-pay/gatehouse/internal/providers"
)

// ChallengeStore keeps what the challenge pages and the card field read and
// record of charges that require action.
type ChallengeStore interface {
	// ChallengeCharge returns the charge id, whatever its merchant.
	ChallengeCharge(ctx context.Context, id string) (Charge, error)
	// RecordAnswer records the cardholder's answer and writes task, once,
	// while the charge requires action with no answer, no void pending
	// and time left; otherwise ErrChallengeClosed.
	// details are what the provider's page sent the cardholder back with.
	RecordAnswer(ctx context.Context, chargeID, answer string, details map[string]string, at time.Time, task outbox.Task) (Charge, error)
	// ElementsCharge returns the merchant's charge whose card came from one
	// of tokens (directly or through a payment method made from one).
	ElementsCharge(ctx context.Context, merchantID, environment, chargeID string, tokens []string) (Charge, error)
}

// WithChallenges lets the service serve challenge links made by links.
func (s *Service) WithChallenges(cs ChallengeStore, links Links) *Service {
	s.challenges, s.links = cs, links
	return s
}

var errNoChallenge = apperr.NotFound("challenge")

// Challenge returns the charge of a challenge link: NotFound for a link
// that is not one, ErrChallengeClosed (with the charge) for a charge that no
// longer waits for its cardholder.
func (s *Service) Challenge(ctx context.Context, id, token string) (Charge, error) {
	if s.challenges == nil || !ValidID(id) || !s.links.Valid(id, token) {
		return Charge{}, errNoChallenge
	}
	c, err := s.challenges.ChallengeCharge(ctx, id)
	if err != nil {
		return c, err
	}
	if c.Status != StatusRequiresAction || c.PendingAction != nil || c.Authentication.Answer != nil ||
		(c.Authentication.ExpiresAt != nil && !s.now().Before(*c.Authentication.ExpiresAt)) {
		return c, ErrChallengeClosed
	}
	return c, nil
}

// Emulated reports whether c's challenge is the gateway's own emulated
// issuer page (the sandbox), as opposed to a provider's.
func (s *Service) Emulated(c Charge) bool {
	u := c.Authentication.NextActionURL
	return u != nil && strings.HasSuffix(*u, ChallengePath+c.ID+"/"+s.links.token(c.ID))
}

// Answer records the cardholder's answer on the emulated issuer page:
// succeeded or failed. The worker then settles the charge with it.
func (s *Service) Answer(ctx context.Context, id, token, answer string) (Charge, error) {
	c, err := s.Challenge(ctx, id, token)
	if err != nil {
		return c, err
	}
	if !s.Emulated(c) {
		return Charge{}, errNoChallenge
	}
	if answer != providers.AnswerSucceeded && answer != providers.AnswerFailed {
		return Charge{}, apperr.Invalid("answer", "answer must be succeeded or failed.")
	}
	return s.record(ctx, c, answer, nil)
}

// Returned records that the cardholder came back from the provider's own
// challenge page, with the details the page sent along (Adyen's
// redirectResult); the worker asks the provider how it ended.
func (s *Service) Returned(ctx context.Context, id, token string, details map[string]string) (Charge, error) {
	c, err := s.Challenge(ctx, id, token)
	if err != nil {
		return c, err
	}
	if s.Emulated(c) {
		return c, ErrChallengeClosed // the emulated page records its own answer
	}
	return s.record(ctx, c, providers.AnswerReturned, details)
}

func (s *Service) record(ctx context.Context, c Charge, answer string, details map[string]string) (Charge, error) {
	task := outbox.Task{Type: outbox.ChargeAuthenticate, RefID: c.ID}
	got, err := s.challenges.RecordAnswer(ctx, c.ID, answer, details, s.now().UTC().Truncate(time.Millisecond), task)
	if err != nil {
		return c, err
	}
	s.enqueue(ctx, task)
	return got, nil
}

// ForCardField returns the merchant's charge that the card field holding
// tokens may show the challenge of; NotFound for any other.
func (s *Service) ForCardField(ctx context.Context, merchantID, environment, chargeID string, tokens []string) (Charge, error) {
	if s.challenges == nil || !ValidID(chargeID) || len(tokens) == 0 {
		return Charge{}, errNotFound()
	}
	c, err := s.challenges.ElementsCharge(ctx, merchantID, environment, chargeID, tokens)
	return s.links.Rebase(c), err
}
