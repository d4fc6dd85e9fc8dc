package disputes

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// reported is a stage and the funds phase a provider reports with it.
type reported struct {
	stage Stage
	funds int
}

// The stages and funds phases each provider's notifications report:
// Adyen's event codes (notifications.adyenDisputeCodes), and Stripe's
// statuses (notifications.StripeDisputeReport: an inquiry moved no money,
// a won dispute was reinstated, any other was withdrawn; a funds_withdrawn
// or funds_reinstated event raises the phase to its own). The sandbox's
// are Stripe's.
var (
	adyenReports = []reported{
		{InquiryOpen, FundsNone}, {InquiryReview, FundsNone}, {Open, FundsNone}, {Open, FundsWithdrawn},
		{Won, FundsReinstated}, {SecondLost, 3}, {ArbitrationWon, 4}, {ArbitrationLost, 3},
	}
	stripeReports = []reported{
		{InquiryOpen, FundsNone}, {InquiryReview, FundsNone}, {InquiryClosed, FundsNone},
		{Open, FundsWithdrawn}, {Review, FundsWithdrawn}, {Won, FundsReinstated},
		{Lost, FundsWithdrawn},
	}
)

// randomReports is a sequence of 1 to 12 reports about one dispute, drawn
// from one provider's, some naming a deadline.
func randomReports(rng *rand.Rand, base time.Time) []Report {
	from := adyenReports
	if rng.IntN(2) == 0 {
		from = stripeReports
	}
	out := make([]Report, 1+rng.IntN(12))
	for i := range out {
		pick := from[rng.IntN(len(from))]
		out[i] = Report{Reference: "dp_ref", PaymentReference: "pay_ref", Amount: 2000, Currency: "EUR",
			Reason: ReasonFraudulent, Stage: pick.stage, FundsPhase: pick.funds}
		if rng.IntN(3) == 0 {
			out[i].DueBy = base.Add(time.Duration(rng.IntN(20*24)) * time.Hour)
		}
	}
	return out
}

// outcome is what applying reports in some order ended in.
type outcome struct {
	Status        string
	Rank          int
	FundsPhase    int
	EvidenceDueBy time.Time
	// Booked counts the funds phases booked, by phase.
	Booked map[int]int
}

// applyAll merges the reports in order, the i-th at base+i seconds, and
// checks that no step moves the stage or the funds phase backwards, and
// that each step books exactly the phases it enters.
func applyAll(t *testing.T, reports []Report, base time.Time) outcome {
	t.Helper()
	var cur *Dispute
	booked := map[int]int{}
	for i, r := range reports {
		at := base.Add(time.Duration(i) * time.Second)
		next, ch := Merge(cur, r, DefaultFee, at)
		before := Dispute{}
		if cur != nil {
			before = *cur
		}
		if cur != nil && (next.Rank < before.Rank || next.FundsPhase < before.FundsPhase) {
			t.Fatalf("step %d (%+v) moved %s/%d funds %d back to %s/%d funds %d", i, r, before.Status, before.Rank,
				before.FundsPhase, next.Status, next.Rank, next.FundsPhase)
		}
		if ch.Created != (cur == nil) {
			t.Fatalf("step %d: Created %v with a dispute %v", i, ch.Created, cur != nil)
		}
		want := []int{}
		for p := before.FundsPhase + 1; p <= next.FundsPhase; p++ {
			want = append(want, p)
		}
		if !slices.Equal(want, append([]int{}, ch.Phases...)) {
			t.Fatalf("step %d booked phases %v going from %d to %d, want %v", i, ch.Phases, before.FundsPhase, next.FundsPhase, want)
		}
		if cur != nil && !ch.Changed() && !reflect.DeepEqual(next, before) {
			t.Fatalf("step %d changed the dispute without saying so: %+v -> %+v", i, before, next)
		}
		if !validStage(next.Stage()) {
			t.Fatalf("step %d: %s/%d is no stage", i, next.Status, next.Rank)
		}
		for _, p := range ch.Phases {
			booked[p]++
		}
		cur = &next
	}
	return outcome{Status: cur.Status, Rank: cur.Rank, FundsPhase: cur.FundsPhase, EvidenceDueBy: cur.EvidenceDueBy, Booked: booked}
}

func validStage(s Stage) bool {
	for _, k := range []Stage{InquiryOpen, InquiryReview, InquiryClosed, Open, Review, Won, Lost, SecondLost, ArbitrationWon, ArbitrationLost} {
		if k == s {
			return true
		}
	}
	return false
}

// Merge is the whole state table: reports about one dispute, applied in
// the order they came, in reverse, each twice, or shuffled, end in the
// same status, rank, funds phase and deadline, with the same phases
// booked, each once; and no report moves the stage or the funds phase
// backwards.
func TestMergeOrderDoesNotMatter(t *testing.T) {
	base := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	const runs = 3000
	for run := range runs {
		seed := uint64(run)
		rng := rand.New(rand.NewPCG(seed, 0x6761746568))
		reports := randomReports(rng, base)

		reversed := slices.Clone(reports)
		slices.Reverse(reversed)
		twice := make([]Report, 0, 2*len(reports))
		for _, r := range reports {
			twice = append(twice, r, r)
		}
		again := append(slices.Clone(reports), reports...)
		shuffled := slices.Clone(reports)
		rng.Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })

		t.Run(fmt.Sprint("seed ", seed), func(t *testing.T) {
			want := applyAll(t, reports, base)
			for name, order := range map[string][]Report{"reversed": reversed, "each twice": twice, "all again": again, "shuffled": shuffled} {
				got := applyAll(t, order, base)
				if !got.EvidenceDueBy.Equal(want.EvidenceDueBy) || got.Status != want.Status || got.Rank != want.Rank ||
					got.FundsPhase != want.FundsPhase || fmt.Sprint(got.Booked) != fmt.Sprint(want.Booked) {
					t.Errorf("%s: %+v, in the order they came %+v (reports %+v)", name, got, want, reports)
				}
			}

			// And that is: the furthest stage and phase reported, each phase
			// booked once, and the latest deadline named (DefaultDueIn after
			// the first report when none was).
			rank, funds, due := 0, 0, base.Add(DefaultDueIn)
			named := false
			for _, r := range reports {
				rank, funds = max(rank, r.Stage.Rank), max(funds, r.FundsPhase)
				if !r.DueBy.IsZero() && (!named || r.DueBy.After(due)) {
					due, named = r.DueBy, true
				}
			}
			booked := map[int]int{}
			for p := 1; p <= funds; p++ {
				booked[p] = 1
			}
			if want.Rank != rank || want.FundsPhase != funds || !want.EvidenceDueBy.Equal(due) || fmt.Sprint(want.Booked) != fmt.Sprint(booked) {
				t.Errorf("ended in rank %d, funds %d, due %v, booked %v; want %d, %d, %v, %v",
					want.Rank, want.FundsPhase, want.EvidenceDueBy, want.Booked, rank, funds, due, booked)
			}
		})
		if t.Failed() {
			break
		}
	}
}

// The dispute a report opens takes its amount, currency, reason, the fee
// and the first deadline; a report without a reason gives general.
func TestMergeOpens(t *testing.T) {
	at := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	d, ch := Merge(nil, Report{Reference: "dp_1", Amount: 2000, Currency: "EUR", Stage: Open, FundsPhase: FundsWithdrawn}, 1500, at)
	want := Dispute{ProviderReference: "dp_1", Amount: 2000, Currency: "EUR", Reason: ReasonGeneral, Status: StatusNeedsResponse,
		Rank: Open.Rank, FundsPhase: FundsWithdrawn, Fee: 1500, EvidenceDueBy: at.Add(DefaultDueIn), CreatedAt: at, UpdatedAt: at}
	if diff := cmp.Diff(want, d); diff != "" || !ch.Created || ch.Moved || !slices.Equal(ch.Phases, []int{FundsWithdrawn}) {
		t.Errorf("Merge: %+v; dispute (-want +got):\n%s", ch, diff)
	}

	// A later report naming an earlier deadline keeps the later one; the
	// first deadline named replaces the default, earlier or not.
	due := at.Add(48 * time.Hour)
	d, ch = Merge(&d, Report{Stage: Open, FundsPhase: FundsWithdrawn, DueBy: due}, 0, at.Add(time.Minute))
	if !d.EvidenceDueBy.Equal(due) || !d.DueReported || !ch.Moved || len(ch.Phases) != 0 {
		t.Errorf("first deadline named: %v (reported %v), %+v; want %v", d.EvidenceDueBy, d.DueReported, ch, due)
	}
	d, ch = Merge(&d, Report{Stage: Open, DueBy: due.Add(-time.Hour)}, 0, at.Add(2*time.Minute))
	if !d.EvidenceDueBy.Equal(due) || ch.Changed() {
		t.Errorf("earlier deadline: %v, %+v; want %v kept, nothing changed", d.EvidenceDueBy, ch, due)
	}
}

// ByMerchant moves a dispute forward only, and moves no money.
func TestByMerchant(t *testing.T) {
	at := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	d := Dispute{Status: StatusNeedsResponse, Rank: Open.Rank, FundsPhase: FundsWithdrawn}
	next, moved := ByMerchant(d, Review, at)
	if !moved || next.Stage() != Review || next.FundsPhase != FundsWithdrawn || !next.UpdatedAt.Equal(at) {
		t.Errorf("to review: %+v, %v", next, moved)
	}
	if back, moved := ByMerchant(next, Open, at.Add(time.Hour)); moved || !reflect.DeepEqual(back, next) {
		t.Errorf("back to open: %+v, %v; want unchanged", back, moved)
	}
}
