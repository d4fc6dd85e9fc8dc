package charges

import (
	"context"
	"strings"
	"time"

	"github.com/gatehouse-pay/gatehouse/internal/apperr"
	"github.com/gatehouse-pay/gatehouse/internal/idempotency"
	"github.com/gatehouse-pay/gatehouse/internal/listing"
	"github.com/gatehouse-pay/gatehouse/internal/money"
	"github.com/gatehouse-pay/gatehouse/internal/outbox"
)

// Filter narrows a list of charges.
type Filter struct {
	Status     string
	CreatedGTE *time.Time
	CreatedLTE *time.Time
	Customer   string
}

// ActionRequest asks the worker to capture or void an authorized charge. The
// store marks the charge (only if it is authorized with no action pending),
// writes the task and, with an idempotency request, the rendered response, in
// one transaction.
type ActionRequest struct {
	MerchantID string
	ChargeID   string
	Action     string
	Amount     *int64 // capture only; nil means the authorized amount
	At         time.Time
	Task       outbox.Task
	Idem       *idempotency.Request
	Render     func(Charge) (idempotency.Response, error)
}

// errNotFound is the answer for any charge id that is not the merchant's.
func errNotFound() error { return apperr.NotFound("charge") }

// ErrInvalidState refuses a move the state machine does not allow.
func ErrInvalidState(format string, args ...any) error {
	e := apperr.New(apperr.KindConflict, apperr.CodeInvalidState, format, args...)
	return e
}

// Get returns one of the merchant's charges.
func (s *Service) Get(ctx context.Context, merchantID, id string) (Charge, error) {
	if !ValidID(id) {
		return Charge{}, errNotFound()
	}
	c, err := s.store.ChargeByID(ctx, merchantID, id)
	return s.links.Rebase(c), err
}

// List returns a page of the merchant's charges, newest first.
func (s *Service) List(ctx context.Context, merchantID string, f Filter, p listing.Params) (listing.Page[Charge], error) {
	if f.Status != "" && !contains(Statuses, f.Status) {
		return listing.Page[Charge]{}, apperr.Invalid("status", "status must be one of %s.", strings.Join(Statuses, ", "))
	}
	page, err := s.store.ListCharges(ctx, merchantID, f, p)
	for i, c := range page.Items {
		page.Items[i] = s.links.Rebase(c)
	}
	return page, err
}

// Capture asks the worker to capture an authorized charge, for at most the
// authorized amount.
func (s *Service) Capture(ctx context.Context, merchantID, id string, amount *int64, idem *idempotency.Request, render func(Charge) (idempotency.Response, error)) (Result, error) {
	if amount != nil && !money.ValidAmount(*amount) {
		return Result{}, apperr.Invalid("amount", "amount must be an integer from %d to the authorized amount.", money.MinAmount)
	}
	return s.act(ctx, ActionRequest{MerchantID: merchantID, ChargeID: id, Action: ActionCapture, Amount: amount,
		Task: outbox.Task{Type: outbox.ChargeCapture, RefID: id}, Idem: idem, Render: render})
}

// Void asks the worker to release an authorized charge, or to cancel one
// that waits for the cardholder's authentication.
func (s *Service) Void(ctx context.Context, merchantID, id string, idem *idempotency.Request, render func(Charge) (idempotency.Response, error)) (Result, error) {
	return s.act(ctx, ActionRequest{MerchantID: merchantID, ChargeID: id, Action: ActionVoid,
		Task: outbox.Task{Type: outbox.ChargeVoid, RefID: id}, Idem: idem, Render: render})
}

func (s *Service) act(ctx context.Context, r ActionRequest) (Result, error) {
	if !ValidID(r.ChargeID) {
		return Result{}, errNotFound()
	}
	r.At = s.now().UTC().Truncate(time.Millisecond)
	var rendered idempotency.Response
	render := r.Render
	r.Render = func(c Charge) (idempotency.Response, error) {
		var err error
		rendered, err = render(s.links.Rebase(c))
		return rendered, err
	}
	replay, err := s.store.RequestAction(ctx, r)
	if err != nil {
		return Result{}, err
	}
	if replay != nil {
		return Result{Response: *replay, Replayed: true}, nil
	}
	s.enqueue(ctx, r.Task)
	return Result{Response: rendered}, nil
}

// CheckAction explains why a charge cannot take the action, for the store to
// call when its conditional update matched no row; nil means it can.
func CheckAction(c Charge, action string, amount *int64) error {
	switch {
	case action == ActionVoid && c.Status == StatusRequiresAction && c.Authentication.Answer != nil:
		return ErrInvalidState("The cardholder has answered the authentication; the charge is being settled.")
	case action == ActionVoid && c.Status == StatusRequiresAction && c.PendingAction == nil:
		return nil
	case c.Status != StatusAuthorized && action == ActionVoid:
		return ErrInvalidState("Cannot void a charge whose status is %s; only authorized charges and charges that require action can be.", c.Status)
	case c.Status != StatusAuthorized:
		return ErrInvalidState("Cannot %s a charge whose status is %s; only authorized charges can be.", action, c.Status)
	case c.PendingAction != nil:
		return ErrInvalidState("A %s of this charge was already requested.", *c.PendingAction)
	case amount != nil && *amount > c.Amount:
		return apperr.Invalid("amount", "amount must be at most the authorized amount, %d.", c.Amount)
	}
	return nil
}
