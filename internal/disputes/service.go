package disputes

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/gatehouse-pay/gatehouse/internal/apperr"
	"github.com/gatehouse-pay/gatehouse/internal/events"
	"github.com/gatehouse-pay/gatehouse/internal/idempotency"
	"github.com/gatehouse-pay/gatehouse/internal/ids"
	"github.com/gatehouse-pay/gatehouse/internal/ledger"
	"github.com/gatehouse-pay/gatehouse/internal/listing"
	"github.com/gatehouse-pay/gatehouse/internal/outbox"
	"github.com/gatehouse-pay/gatehouse/internal/providers"
)

// Task types of the provider work a merchant's answer calls for: the
// evidence sent, the loss accepted.
const (
	TaskSubmit = "dispute:submit"
	TaskClose  = "dispute:close"
)

// Task is the outbox task of work on dispute d (its id as a UUID: the
// outbox's reference).
func Task(typ string, d Dispute) outbox.Task {
	u, _ := ids.UUIDOf(Prefix, d.ID)
	return outbox.Task{Type: typ, RefID: u}
}

// IDOfTask is the dispute id a task's reference names.
func IDOfTask(ref string) (string, bool) { return ids.FromUUID(Prefix, ref) }

// Payment is the disputed charge as the books need it.
type Payment struct {
	ChargeID    string
	Environment string
	ConnectorID string
}

// Plan is what one change of a dispute writes, in one transaction: the
// dispute as it is after it, the ledger transactions it books (each once,
// by its cause), its events, and the provider work it calls for.
type Plan struct {
	Dispute      Dispute
	Created      bool
	Transactions []ledger.Transaction
	Events       []events.Event
	Task         *outbox.Task
	// Response is the answer stored with the request's Idempotency-Key.
	Response *idempotency.Response
}

// Filter narrows a list of disputes.
type Filter struct {
	ChargeID string
	Status   string
}

// Store keeps disputes.
type Store interface {
	// ApplyDispute finds the merchant's charge with the provider reference
	// paymentRef (paymentRef "": the charge of the connector's dispute
	// reference) and, with that charge's row locked, the connector's
	// dispute reference (nil when new), and writes what plan returns
	// (nothing for a nil plan). found is false when there is no such charge.
	ApplyDispute(ctx context.Context, merchantID, connectorID, paymentRef, reference string,
		plan func(cur *Dispute, p Payment) (*Plan, error)) (found bool, tasks []outbox.Task, err error)
	// ActOnDispute locks the merchant's dispute id and writes what plan
	// returns, with the request's Idempotency-Key (replay: the stored
	// answer of an earlier request with the key).
	ActOnDispute(ctx context.Context, merchantID, id string, idem *idempotency.Request,
		plan func(d Dispute) (*Plan, error)) (replay *idempotency.Response, tasks []outbox.Task, err error)
	DisputeByID(ctx context.Context, merchantID, id string) (Dispute, error)
	ListDisputes(ctx context.Context, merchantID string, f Filter, p listing.Params) (listing.Page[Dispute], error)
	// DisputesByDeadline pages the merchant's disputes by deadline: those
	// waiting for the merchant's evidence, then those under review, each
	// soonest due first, then the closed ones, latest deadline first. A page
	// starts after the dispute after ("" for the first) and holds at most
	// limit disputes.
	DisputesByDeadline(ctx context.Context, merchantID string, f Filter, after string, limit int) (listing.Page[Dispute], error)
	// DisputeForWork reads a dispute of any merchant, for the worker.
	DisputeForWork(ctx context.Context, id string) (Dispute, error)
	// FinishDisputeTask deletes the outbox row of task t.
	FinishDisputeTask(ctx context.Context, t outbox.Task) error
}

// Applied is what applying a report did.
type Applied struct {
	// Found: the gateway holds the disputed charge.
	Found bool
	// Changed: the report moved the dispute (or opened it).
	Changed  bool
	ChargeID string
}

// Service is disputes' API side and their worker side.
type Service struct {
	store     Store
	providers providers.Resolver
	queue     outbox.Enqueuer
	now       func() time.Time
	log       *slog.Logger
	onEnqueue func(error)
}

// NewService returns the service. providers resolves a dispute's connector
// to its provider for the worker's calls (nil on the API side).
func NewService(store Store, reg providers.Resolver, queue outbox.Enqueuer, now func() time.Time, log *slog.Logger, onEnqueue func(error)) *Service {
	return &Service{store: store, providers: reg, queue: queue, now: now, log: log, onEnqueue: onEnqueue}
}

func (s *Service) enqueue(ctx context.Context, tasks []outbox.Task) {
	for _, t := range tasks {
		if err := s.queue.Enqueue(ctx, t); err != nil && s.onEnqueue != nil {
			s.onEnqueue(err)
		}
	}
}

func (s *Service) at() time.Time { return s.now().UTC().Truncate(time.Millisecond) }

// Get returns one of the merchant's disputes.
func (s *Service) Get(ctx context.Context, merchantID, id string) (Dispute, error) {
	if !ValidID(id) {
		return Dispute{}, apperr.NotFound("dispute")
	}
	return s.store.DisputeByID(ctx, merchantID, id)
}

// List pages the merchant's disputes, newest first.
func (s *Service) List(ctx context.Context, merchantID string, f Filter, p listing.Params) (listing.Page[Dispute], error) {
	if f.Status != "" && !ValidStatus(f.Status) {
		return listing.Page[Dispute]{}, apperr.Invalid("status", "status must be one of %v.", Statuses)
	}
	if f.ChargeID != "" && !ids.ValidUUID(f.ChargeID) {
		return listing.Page[Dispute]{}, nil
	}
	return s.store.ListDisputes(ctx, merchantID, f, p)
}

// ByDeadline pages the merchant's disputes by deadline, as the dashboard
// lists them (Store.DisputesByDeadline): after is the last dispute of the
// previous page, "" for the first. f.ChargeID is not taken.
func (s *Service) ByDeadline(ctx context.Context, merchantID string, f Filter, after string, limit int) (listing.Page[Dispute], error) {
	if f.Status != "" && !ValidStatus(f.Status) {
		return listing.Page[Dispute]{}, apperr.Invalid("status", "status must be one of %v.", Statuses)
	}
	if after != "" && !ValidID(after) {
		return listing.Page[Dispute]{}, apperr.Invalid("starting_after", "starting_after must be a dispute id (dp_...).")
	}
	limit = min(max(limit, 1), listing.MaxLimit)
	return s.store.DisputesByDeadline(ctx, merchantID, Filter{Status: f.Status}, after, limit)
}

// Now is the service's clock, for what a page says of a deadline.
func (s *Service) Now() time.Time { return s.now() }

// Apply applies a provider's report of one of its disputes on the
// connector's payment (notifications.DisputeApplier).
func (s *Service) Apply(ctx context.Context, merchantID, connectorID, provider string, r Report) (Applied, error) {
	var res Applied
	at := s.at()
	found, tasks, err := s.store.ApplyDispute(ctx, merchantID, connectorID, r.PaymentReference, r.Reference,
		func(cur *Dispute, p Payment) (*Plan, error) {
			res.ChargeID = p.ChargeID
			fee := int64(DefaultFee)
			if r.Fee != nil {
				fee = *r.Fee
			}
			d, ch := Merge(cur, r, fee, at)
			if !ch.Changed() {
				return nil, nil
			}
			res.Changed = true
			if cur == nil {
				d.ID, d.MerchantID, d.Environment, d.ChargeID = ids.New(Prefix), merchantID, p.Environment, p.ChargeID
				d.ConnectorID, d.Provider = connectorID, provider
			}
			return s.plan(d, ch, at)
		})
	if err != nil {
		return Applied{}, err
	}
	res.Found = found
	s.enqueue(ctx, tasks)
	return res, nil
}

// plan is the writing of a change of d: its bookings and events.
func (s *Service) plan(d Dispute, ch Change, at time.Time) (*Plan, error) {
	p := &Plan{Dispute: d, Created: ch.Created}
	a := ledger.Account{MerchantID: d.MerchantID, ConnectorID: d.ConnectorID, Currency: d.Currency}
	var types []string
	if ch.Created {
		types = append(types, EventCreated)
	} else if ch.Moved {
		types = append(types, EventUpdated)
	}
	for _, phase := range ch.Phases {
		if Withdrawn(phase) {
			fee := int64(0)
			if phase == FundsWithdrawn {
				fee = d.Fee
			}
			p.Transactions = append(p.Transactions, ledger.DisputeWithdrawn(a, d.ID, d.ProviderReference, d.Amount, fee, phase, at))
			types = append(types, EventFundsWithdrawn)
		} else {
			p.Transactions = append(p.Transactions, ledger.DisputeReinstated(a, d.ID, d.ProviderReference, d.Amount, phase, at))
			types = append(types, EventFundsReinstated)
		}
	}
	if ch.Moved && Closed(d.Status) {
		types = append(types, EventClosed)
	}
	for _, typ := range types {
		ev, err := events.NewDispute(ids.NewUUID(), d.MerchantID, d.Environment, typ, at, d.View())
		if err != nil {
			return nil, apperr.Internal(err)
		}
		p.Events = append(p.Events, ev)
	}
	return p, nil
}

// UpdateParams is the body of POST /v1/disputes/:id.
type UpdateParams struct {
	Evidence json.RawMessage `json:"evidence"`
	Submit   *bool           `json:"submit"`
}

// ErrAlreadySubmitted answers a change of evidence already submitted.
func ErrAlreadySubmitted() error {
	return apperr.New(apperr.KindConflict, apperr.CodeInvalidState, "The evidence of this dispute was submitted; it can no longer change.")
}

// Update stages evidence on the merchant's dispute and, with submit,
// submits it: the dispute moves under review and the worker sends the
// evidence to the provider. Evidence submitted once never changes again.
func (s *Service) Update(ctx context.Context, merchantID, id string, p UpdateParams, idem *idempotency.Request,
	render func(Dispute) (idempotency.Response, error)) (idempotency.Response, bool, error) {
	if !ValidID(id) {
		return idempotency.Response{}, false, apperr.NotFound("dispute")
	}
	var change map[string]*string
	if p.Evidence != nil {
		var err error
		if change, err = ParseEvidence(p.Evidence); err != nil {
			return idempotency.Response{}, false, err
		}
	}
	submit := p.Submit != nil && *p.Submit
	if change == nil && !submit {
		return idempotency.Response{}, false, apperr.Missing("evidence")
	}
	at := s.at()
	return s.act(ctx, merchantID, id, idem, render, func(d Dispute) (*Plan, error) {
		if d.EvidenceSubmittedAt != nil {
			return nil, ErrAlreadySubmitted()
		}
		if Closed(d.Status) {
			return nil, apperr.New(apperr.KindConflict, apperr.CodeInvalidState, "This dispute is %s; it takes no evidence.", d.Status)
		}
		ev, err := d.Evidence.Apply(change)
		if err != nil {
			return nil, err
		}
		d.Evidence, d.UpdatedAt = ev, at
		var task *outbox.Task
		if submit {
			if len(d.Evidence) == 0 {
				return nil, apperr.Invalid("evidence", "Stage some evidence before submitting it.")
			}
			d.EvidenceSubmittedAt = &at
			stage := Review
			if Inquiry(d.Status) {
				stage = InquiryReview
			}
			d, _ = ByMerchant(d, stage, at)
			t := Task(TaskSubmit, d)
			task = &t
		}
		plan, err := s.plan(d, Change{Moved: true}, at)
		if err != nil {
			return nil, err
		}
		plan.Task = task
		return plan, nil
	})
}

// Close accepts the loss of the merchant's dispute: a chargeback is lost,
// an inquiry closed; the worker tells the provider.
func (s *Service) Close(ctx context.Context, merchantID, id string, idem *idempotency.Request,
	render func(Dispute) (idempotency.Response, error)) (idempotency.Response, bool, error) {
	if !ValidID(id) {
		return idempotency.Response{}, false, apperr.NotFound("dispute")
	}
	at := s.at()
	return s.act(ctx, merchantID, id, idem, render, func(d Dispute) (*Plan, error) {
		if Closed(d.Status) {
			return nil, apperr.New(apperr.KindConflict, apperr.CodeInvalidState, "This dispute is already %s.", d.Status)
		}
		if d.EvidenceSubmittedAt != nil {
			return nil, apperr.New(apperr.KindConflict, apperr.CodeInvalidState, "The evidence of this dispute was submitted; the provider decides it now.")
		}
		stage := Lost
		if Inquiry(d.Status) {
			stage = InquiryClosed
		}
		d, _ = ByMerchant(d, stage, at)
		d.ClosedByMerchant = true
		plan, err := s.plan(d, Change{Moved: true}, at)
		if err != nil {
			return nil, err
		}
		t := Task(TaskClose, d)
		plan.Task = &t
		return plan, nil
	})
}

func (s *Service) act(ctx context.Context, merchantID, id string, idem *idempotency.Request,
	render func(Dispute) (idempotency.Response, error), change func(Dispute) (*Plan, error)) (idempotency.Response, bool, error) {
	var resp idempotency.Response
	replay, tasks, err := s.store.ActOnDispute(ctx, merchantID, id, idem, func(d Dispute) (*Plan, error) {
		plan, err := change(d)
		if err != nil {
			return nil, err
		}
		if resp, err = render(plan.Dispute); err != nil {
			return nil, apperr.Internal(err)
		}
		plan.Response = &resp
		return plan, nil
	})
	if err != nil {
		return idempotency.Response{}, false, err
	}
	if replay != nil {
		return *replay, true, nil
	}
	s.enqueue(ctx, tasks)
	return resp, false, nil
}

// Respond carries the merchant's answer to the dispute's provider (the
// worker's dispute:submit and dispute:close tasks). A provider that
// declines it (the deadline passed, the dispute is decided) is logged: the
// provider's notifications say what becomes of the dispute.
func (s *Service) Respond(ctx context.Context, typ, ref string) error {
	id, ok := IDOfTask(ref)
	if !ok {
		return fmt.Errorf("disputes: %q names no dispute", ref)
	}
	d, err := s.store.DisputeForWork(ctx, id)
	if err != nil {
		return err
	}
	t := Task(typ, d)
	p, err := s.providers.Resolve(ctx, &d.ConnectorID, d.Provider)
	if err != nil {
		return err
	}
	r, ok := p.(providers.DisputeResponder)
	if !ok {
		r = noDisputeAPI{}
	}
	switch typ {
	case TaskSubmit:
		err = r.SubmitDisputeEvidence(ctx, d.ProviderReference, d.Evidence)
	case TaskClose:
		err = r.AcceptDispute(ctx, d.ProviderReference)
	default:
		return fmt.Errorf("disputes: unknown task %s", typ)
	}
	if errors.Is(err, providers.ErrNoDisputeAPI) {
		s.log.WarnContext(ctx, "the dispute's provider takes no answer through the gateway; answer it in the provider's dashboard",
			"dispute", d.ID, "provider", d.Provider)
		err = nil
	}
	if dec, declined := providers.AsDecline(err); declined {
		s.log.WarnContext(ctx, "the provider declined the merchant's answer to a dispute", "dispute", d.ID, "task", typ,
			"code", dec.Code, "message", dec.Message)
		err = nil
	}
	if err != nil {
		return err
	}
	return s.store.FinishDisputeTask(ctx, t)
}

// noDisputeAPI answers for a provider that takes no dispute answers.
type noDisputeAPI struct{}

func (noDisputeAPI) SubmitDisputeEvidence(context.Context, string, map[string]string) error {
	return providers.ErrNoDisputeAPI
}

func (noDisputeAPI) AcceptDispute(context.Context, string) error { return providers.ErrNoDisputeAPI }
