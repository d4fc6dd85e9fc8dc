package charges_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/gatehouse-pay/gatehouse/internal/charges"
	"github.com/gatehouse-pay/gatehouse/internal/providers"
	"github.com/gatehouse-pay/gatehouse/internal/providers/providertest"
)

// outcome is one report to WithOutcomes.
type outcome struct{ Provider, Status string }

// outcomes records what WithOutcomes reports.
type outcomes struct {
	mu  sync.Mutex
	got []outcome
}

func (o *outcomes) report(provider, status string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.got = append(o.got, outcome{provider, status})
}

func (o *outcomes) list() []outcome {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]outcome{}, o.got...)
}

// TestProcessorReportsOutcomes: WithOutcomes is told (the charge's provider,
// the new status) for each status change the store commits, and nothing for
// a transition the store did not apply (another worker moved the charge
// first), for one that keeps the status (a declined capture) or for a retry.
func TestProcessorReportsOutcomes(t *testing.T) {
	ctx := context.Background()
	decline := &providers.Decline{Code: "card_declined"}
	declineAuth := func(context.Context, providers.AuthorizeRequest) (providers.Result, error) {
		return providers.Result{}, decline
	}
	downAuth := func(context.Context, providers.AuthorizeRequest) (providers.Result, error) {
		return providers.Result{}, providers.ErrUnavailable
	}
	declineCapture := func(context.Context, providers.CaptureRequest) (providers.Result, error) {
		return providers.Result{}, decline
	}
	lostRace := func(context.Context, charges.Transition) (bool, error) { return false, nil }
	storeDown := func(context.Context, charges.Transition) (bool, error) { return false, errors.New("connection reset") }

	// authorize runs the authorize task of a created charge.
	authorize := func(final bool) func(t *testing.T, p *charges.Processor, ch charges.Charge) error {
		return func(t *testing.T, p *charges.Processor, ch charges.Charge) error {
			return p.Authorize(ctx, ch.ID, final)
		}
	}
	capture := func(t *testing.T, p *charges.Processor, ch charges.Charge) error { return p.Capture(ctx, ch.ID, false) }
	void := func(t *testing.T, p *charges.Processor, ch charges.Charge) error { return p.Void(ctx, ch.ID, false) }

	cases := []struct {
		name      string
		capture   bool   // the charge's capture flag
		action    string // "" for an authorize; else the pending action of an authorized charge
		provider  string
		run       func(t *testing.T, p *charges.Processor, ch charges.Charge) error
		authFn    func(context.Context, providers.AuthorizeRequest) (providers.Result, error)
		captureFn func(context.Context, providers.CaptureRequest) (providers.Result, error)
		apply     func(context.Context, charges.Transition) (bool, error)
		wantErr   bool
		want      []outcome
	}{
		{name: "authorize and capture", capture: true, provider: "sandbox", run: authorize(false),
			want: []outcome{{"sandbox", charges.StatusCaptured}}},
		{name: "authorize only", provider: "sandbox", run: authorize(false),
			want: []outcome{{"sandbox", charges.StatusAuthorized}}},
		{name: "the charge's provider is reported", capture: true, provider: "stripe", run: authorize(false),
			want: []outcome{{"stripe", charges.StatusCaptured}}},
		{name: "declined", capture: true, provider: "sandbox", run: authorize(false), authFn: declineAuth,
			want: []outcome{{"sandbox", charges.StatusFailed}}},
		{name: "provider down, final attempt", capture: true, provider: "sandbox", run: authorize(true), authFn: downAuth,
			want: []outcome{{"sandbox", charges.StatusFailed}}},
		{name: "provider down, the queue retries", capture: true, provider: "sandbox", run: authorize(false), authFn: downAuth,
			wantErr: true, want: []outcome{}},
		{name: "authorized but lost the race", capture: true, provider: "sandbox", run: authorize(false), apply: lostRace,
			want: []outcome{}},
		{name: "declined but lost the race", capture: true, provider: "sandbox", run: authorize(false), authFn: declineAuth, apply: lostRace,
			want: []outcome{}},
		{name: "store error", capture: true, provider: "sandbox", run: authorize(false), apply: storeDown,
			wantErr: true, want: []outcome{}},
		{name: "capture", action: charges.ActionCapture, provider: "sandbox", run: capture,
			want: []outcome{{"sandbox", charges.StatusCaptured}}},
		{name: "void", action: charges.ActionVoid, provider: "stripe", run: void,
			want: []outcome{{"stripe", charges.StatusVoided}}},
		{name: "declined capture keeps the status", action: charges.ActionCapture, provider: "sandbox", run: capture, captureFn: declineCapture,
			want: []outcome{}},
		{name: "capture lost the race", action: charges.ActionCapture, provider: "sandbox", run: capture, apply: lostRace,
			want: []outcome{}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ch, sealed := created(t, c.capture)
			ch.Provider = c.provider
			if c.action != "" {
				action := c.action
				ch.Status, ch.ProviderReference, ch.PendingAction, sealed = charges.StatusAuthorized, ptr("ref_1"), &action, nil
			}
			st := &fakeStore{
				ChargeForWorkFn:   func(context.Context, string) (charges.Charge, []byte, error) { return ch, sealed, nil },
				ApplyTransitionFn: c.apply,
			}
			prov := &providertest.Fake{AuthorizeFn: c.authFn, CaptureFn: c.captureFn}
			reg := providers.Registry{"sandbox": prov, "stripe": prov}
			log := slog.New(slog.NewTextHandler(io.Discard, nil))
			got := &outcomes{}
			p := charges.NewProcessor(st, reg, testKeyring(t), time.Second, func() time.Time { return testNow }, log, nil)
			if p.WithOutcomes(got.report) != p {
				t.Fatal("WithOutcomes does not return its Processor")
			}
			err := c.run(t, p, ch)
			if (err != nil) != c.wantErr {
				t.Fatalf("err = %v, want error %v", err, c.wantErr)
			}
			if len(st.transitions) == 0 && !c.wantErr {
				t.Fatal("no transition was written")
			}
			if diff := cmp.Diff(c.want, got.list()); diff != "" {
				t.Errorf("outcomes (-want +got):\n%s", diff)
			}
		})
	}
}

// TestProcessorWithoutOutcomes: a processor without WithOutcomes still
// applies its transitions.
func TestProcessorWithoutOutcomes(t *testing.T) {
	ch, sealed := created(t, true)
	st := &fakeStore{ChargeForWorkFn: func(context.Context, string) (charges.Charge, []byte, error) { return ch, sealed, nil }}
	if err := worker(t, st, &providertest.Fake{}).Authorize(context.Background(), ch.ID, false); err != nil {
		t.Fatal(err)
	}
	if len(st.transitions) != 1 || st.transitions[0].After.Status != charges.StatusCaptured {
		t.Errorf("transitions %+v, want one to captured", st.transitions)
	}
}
