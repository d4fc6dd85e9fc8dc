package store_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/gatehouse-pay/gatehouse/internal/charges"
	"github.com/gatehouse-pay/gatehouse/internal/events"
	"github.com/gatehouse-pay/gatehouse/internal/idempotency"
	"github.com/gatehouse-pay/gatehouse/internal/ids"
	"github.com/gatehouse-pay/gatehouse/internal/ledger"
	"github.com/gatehouse-pay/gatehouse/internal/listing"
	"github.com/gatehouse-pay/gatehouse/internal/outbox"
	"github.com/gatehouse-pay/gatehouse/internal/refunds"
	"github.com/gatehouse-pay/gatehouse/internal/store"
	"github.com/gatehouse-pay/gatehouse/internal/testenv"
)

// The database itself keeps the books whole: it refuses a transaction
// whose entries do not sum to zero, do not move its net in the balance
// account, are fewer than two, hold a zero or name an unknown account, and
// any change or removal of a transaction.
func TestLedgerDatabaseRefusesWhatDoesNotBalance(t *testing.T) {
	db := testenv.NewDB(t)
	ctx := context.Background()
	insert := func(id string, net int64, accounts []string, amounts []int64) error {
		_, err := db.Pool.Exec(ctx, `INSERT INTO balance_transactions (id, merchant_id, connector_id, currency, type, source, cause,
	amount, fee, net, available_on, created_at, accounts, amounts)
VALUES ($1, 'mer_x', 'conn_x', 'USD', 'adjustment', 's', $1, $2, 0, $2, now(), now(), $3, $4)`, id, net, accounts, amounts)
		return err
	}
	refused := func(what string, err error, code string) {
		t.Helper()
		var pgErr *pgconn.PgError
		if !errors.As(err, &pgErr) || pgErr.Code != code {
			t.Errorf("%s: %v, want SQLSTATE %s", what, err, code)
		}
	}
	two := []string{"balance", "adjustments"}
	if err := insert("txn_ok", 100, two, []int64{100, -100}); err != nil {
		t.Fatalf("a balanced transaction: %v", err)
	}
	if err := insert("txn_fee", 0, []string{"fees", "adjustments"}, []int64{7, -7}); err != nil {
		t.Fatalf("a balanced transaction outside the balance: %v", err)
	}
	refused("entries summing to 1", insert("txn_sum", 100, two, []int64{100, -99}), "23514")
	refused("a net the balance entry does not move", insert("txn_net", 50, two, []int64{100, -100}), "23514")
	refused("one entry", insert("txn_one", 0, []string{"balance"}, []int64{0}), "23514")
	refused("no entry", insert("txn_none", 0, []string{}, []int64{}), "23514")
	refused("a zero entry", insert("txn_zero", 0, []string{"balance", "fees", "adjustments"}, []int64{0, 5, -5}), "23514")
	refused("an unknown account", insert("txn_acct", 100, []string{"balance", "elsewhere"}, []int64{100, -100}), "23514")
	refused("more accounts than amounts", insert("txn_len", 100, []string{"balance", "adjustments", "fees"}, []int64{100, -100}), "23514")
	for _, q := range []string{
		`UPDATE balance_transactions SET amounts = '{101,-101}', amount = 101, net = 101 WHERE id = 'txn_ok'`,
		`UPDATE balance_transactions SET fee = 1, net = net - 1`,
		`DELETE FROM balance_transactions`,
		`TRUNCATE balance_transactions`,
	} {
		_, err := db.Pool.Exec(ctx, q)
		refused(q, err, "42501")
	}
	_, err := db.Pool.Exec(ctx, `INSERT INTO ledger_entries (txn_id, seq, merchant_id, connector_id, currency, account, amount, available_on)
VALUES ('txn_ok', 3, 'mer_x', 'conn_x', 'USD', 'fees', 5, now())`)
	if err == nil {
		t.Error("an entry added to a written transaction")
	}
	var n, sum int64
	if err := db.Pool.QueryRow(ctx, `SELECT count(*), sum(amount) FROM ledger_entries`).Scan(&n, &sum); err != nil || n != 4 || sum != 0 {
		t.Fatalf("entries after the refusals: %d summing to %d, %v; want the 4 of txn_ok and txn_fee, summing to 0", n, sum, err)
	}
}

// ledgerWorld drives one merchant's money through every kind of booking in
// random order, each step sometimes crashed before its commit (and then
// retried) and sometimes repeated (a retried task, a resent notification,
// a replayed request), and checks the books after every step.
type ledgerWorld struct {
	ctx  context.Context
	s    *store.Store
	pool *pgxpool.Pool
	rng  *rand.Rand
	m    string
	conn string
	now  time.Time

	captured []charges.Charge // captured charges, with what remains refundable
	refunded map[string]int64
	payouts  []ledger.Payout // pending or in transit
	// want is what the books must hold: the net of every cause booked, and
	// the balance per currency.
	want    map[string]int64
	balance int64
	steps   int
}

func newLedgerWorld(t *testing.T, seed uint64) *ledgerWorld {
	db := testenv.NewDB(t)
	s := store.New(db.Pool)
	m := newMerchant(t, s, fmt.Sprintf("ledger%d@example.com", seed))
	return &ledgerWorld{ctx: context.Background(), s: s, pool: db.Pool, rng: rand.New(rand.NewPCG(seed, 7)), m: m.ID,
		conn: ids.New("conn"), now: time.Now().UTC().Add(-time.Hour).Truncate(time.Millisecond),
		refunded: map[string]int64{}, want: map[string]int64{}}
}

func (w *ledgerWorld) account() ledger.Account {
	return ledger.Account{MerchantID: w.m, ConnectorID: w.conn, Currency: "USD"}
}

func (w *ledgerWorld) tick() time.Time {
	w.now = w.now.Add(time.Second)
	return w.now
}

// run does op as a worker would: sometimes it crashes before the commit
// (a cancelled context: nothing may be written) and is retried, and
// sometimes it runs again after it succeeded.
func (w *ledgerWorld) run(op func(ctx context.Context) error) error {
	if w.rng.IntN(5) == 0 {
		crashed, cancel := context.WithCancel(w.ctx)
		cancel()
		if err := op(crashed); err == nil {
			return errors.New("an operation on a cancelled context succeeded")
		}
	}
	if err := op(w.ctx); err != nil {
		return err
	}
	if w.rng.IntN(3) == 0 {
		return op(w.ctx)
	}
	return nil
}

func (w *ledgerWorld) capture() error {
	at := w.tick()
	c := charges.Charge{ID: ids.NewUUID(), MerchantID: w.m, Environment: "sandbox", Amount: 1000 + w.rng.Int64N(9000),
		Currency: "USD", Status: charges.StatusCreated, PaymentMethod: "card", Capture: true, Provider: "sandbox",
		Metadata: map[string]string{}, CreatedAt: at, UpdatedAt: at, ConnectorID: &w.conn}
	c.Card.Brand, c.Card.Last4 = "visa", ptr("4242")
	ev, err := events.New(ids.NewUUID(), w.m, c.Environment, events.ChargeCreated, at, c.View(), nil)
	if err != nil {
		return err
	}
	authorize := outbox.Task{Type: outbox.ChargeAuthorize, RefID: c.ID}
	if _, _, err := w.s.CreateCharge(w.ctx, charges.NewCharge{Charge: c, Sealed: []byte("sealed"), Event: ev, Task: authorize}); err != nil {
		return err
	}
	after := c
	after.Status, after.AmountCaptured, after.ProviderReference = charges.StatusCaptured, c.Amount-w.rng.Int64N(2)*500, ptr("sbx_ch_"+c.ID)
	after.UpdatedAt = w.tick()
	b := ledger.Captured(charges.AccountOf(after), c.ID, *after.ProviderReference, after.AmountCaptured,
		ledger.DefaultSandboxFees.For(after.AmountCaptured), after.UpdatedAt, after.UpdatedAt.Add(-time.Minute))
	err = w.run(func(ctx context.Context) error {
		_, _, err := w.s.ApplyTransition(ctx, charges.Transition{Before: c, After: after, DoneTask: authorize.ID(), Booking: &b})
		return err
	})
	if err != nil {
		return err
	}
	w.want["charge:"+c.ID] = b.Net()
	w.balance += b.Net()
	w.captured = append(w.captured, after)
	return nil
}

func (w *ledgerWorld) refund() error {
	if len(w.captured) == 0 {
		return nil
	}
	c := w.captured[w.rng.IntN(len(w.captured))]
	left := c.AmountCaptured - w.refunded[c.ID]
	if left <= 0 {
		return nil
	}
	amount := 1 + w.rng.Int64N(left)
	at := w.tick()
	var r refunds.Refund
	_, _, err := w.s.CreateRefund(w.ctx, w.m, c.ID, nil, func(charges.Charge) (refunds.Plan, error) {
		r = refunds.Refund{ID: ids.NewUUID(), MerchantID: w.m, ChargeID: c.ID, Amount: amount, Currency: "USD",
			Status: refunds.StatusPending, Metadata: map[string]string{}, CreatedAt: at, UpdatedAt: at}
		ev, err := events.New(ids.NewUUID(), w.m, "sandbox", events.RefundCreated, at, c.View(), nil)
		return refunds.Plan{Refund: r, Event: ev, Task: outbox.Task{Type: outbox.RefundProcess, RefID: r.ID}}, err
	})
	if err != nil {
		return err
	}
	after := r
	after.Status, after.ProviderReference, after.UpdatedAt = refunds.StatusSucceeded, ptr("sbx_re_"+r.ID), w.tick()
	task := outbox.Task{Type: outbox.RefundProcess, RefID: r.ID}
	err = w.run(func(ctx context.Context) error {
		_, _, err := w.s.SettleRefund(ctx, after, task.ID(), func(r refunds.Refund, c charges.Charge) (refunds.Settlement, error) {
			b := ledger.Refunded(charges.AccountOf(c), r.ID, *r.ProviderReference, r.Amount, r.UpdatedAt)
			return refunds.Settlement{Booking: &b}, nil
		})
		return err
	})
	if err != nil {
		return err
	}
	w.refunded[c.ID] += amount
	w.want["refund:"+r.ID] = -amount
	w.balance -= amount
	return nil
}

// dispute books a dispute's withdrawal as a provider's notification
// reports it: nothing but the booking's key stands between a resent
// notification and a second withdrawal.
func (w *ledgerWorld) dispute() error {
	if len(w.captured) == 0 {
		return nil
	}
	c := w.captured[w.rng.IntN(len(w.captured))]
	dp, at := ids.New("dp"), w.tick()
	var b ledger.Transaction
	err := w.run(func(ctx context.Context) error {
		// Each notification is read afresh: a new transaction each time.
		b = ledger.DisputeWithdrawn(charges.AccountOf(c), dp, *c.ProviderReference, c.AmountCaptured, 1500, 1, at)
		_, err := w.s.Book(ctx, b)
		return err
	})
	if err != nil {
		return err
	}
	w.want["dispute:"+dp] = b.Net()
	w.balance += b.Net()
	return nil
}

func (w *ledgerWorld) payout() error {
	amount := 1 + w.rng.Int64N(20000)
	at := w.tick()
	key := &idempotency.Request{Key: ids.New("idem"), Fingerprint: []byte("f")}
	var made *ledger.Payout
	err := w.run(func(ctx context.Context) error {
		_, _, err := w.s.CreatePayout(ctx, key, w.account(), at, func(available int64) (ledger.PayoutPlan, error) {
			if amount > available {
				return ledger.PayoutPlan{}, errors.New("insufficient")
			}
			p, err := ledger.NewPayoutPlan(w.account(), "sandbox", amount, false, nil, at, time.Second)
			p.Response = idempotency.Response{Status: 201, Body: []byte(`{}`)}
			made = &p.Payout
			return p, err
		})
		return err
	})
	if err != nil && err.Error() == "insufficient" {
		return nil
	}
	if err != nil {
		return err
	}
	w.want["payout:"+made.ID] = -amount
	w.balance -= amount
	w.payouts = append(w.payouts, *made)
	return nil
}

// settlePayout moves a payout on; one in two in transit fails and returns
// its money.
func (w *ledgerWorld) settlePayout() error {
	if len(w.payouts) == 0 {
		return nil
	}
	i := w.rng.IntN(len(w.payouts))
	p := w.payouts[i]
	after := p
	after.UpdatedAt = w.tick()
	m := ledger.PayoutMove{Before: p.Status, After: after}
	switch {
	case p.Status == ledger.PayoutPending:
		after.Status = ledger.PayoutInTransit
		m.After = after
	case w.rng.IntN(2) == 0:
		after.Status = ledger.PayoutPaid
		m.After = after
	default:
		after.Status, after.FailureCode = ledger.PayoutFailed, ptr("account_closed")
		b := ledger.PayoutReturned(p.Account(), p.ID, p.Amount, after.UpdatedAt)
		m.After, m.Transaction = after, &b
	}
	if err := w.run(func(ctx context.Context) error { _, _, err := w.s.MovePayout(ctx, m); return err }); err != nil {
		return err
	}
	if after.Status == ledger.PayoutFailed {
		w.want["payout_failure:"+p.ID] = p.Amount
		w.balance += p.Amount
	}
	if after.Status == ledger.PayoutInTransit {
		w.payouts[i] = after
	} else {
		w.payouts = append(w.payouts[:i], w.payouts[i+1:]...)
	}
	return nil
}

func (w *ledgerWorld) automaticPayout() error {
	slot := w.tick()
	var made *ledger.PayoutPlan
	err := w.run(func(ctx context.Context) error {
		_, _, err := w.s.CreateAutomaticPayout(ctx, w.account(), slot, slot, func(total int64) (*ledger.PayoutPlan, error) {
			if total <= 0 {
				return nil, nil
			}
			p, err := ledger.NewPayoutPlan(w.account(), "sandbox", total, true, nil, slot, time.Second)
			made = &p
			return &p, err
		})
		return err
	})
	if err != nil || made == nil {
		return err
	}
	// What it paid out sums to its amount.
	page, err := w.s.ListTransactions(w.ctx, w.m, ledger.Filter{PayoutID: made.Payout.ID}, listing.Params{Limit: listing.MaxLimit})
	if err != nil {
		return err
	}
	var sum int64
	for _, t := range page.Items {
		sum += t.Net()
	}
	if sum != made.Payout.Amount || page.HasMore {
		return fmt.Errorf("automatic payout %s of %d paid out transactions summing to %d", made.Payout.ID, made.Payout.Amount, sum)
	}
	w.want["payout:"+made.Payout.ID] = -made.Payout.Amount
	w.balance -= made.Payout.Amount
	w.payouts = append(w.payouts, made.Payout)
	return nil
}

// errBooks is a check's finding.
var errBooks = errors.New("the books are wrong")

// check compares the books with what the steps booked.
func (w *ledgerWorld) check() error {
	if err := w.checkBooks(); err != nil {
		return fmt.Errorf("%w: %w", errBooks, err)
	}
	return nil
}

func (w *ledgerWorld) checkBooks() error {
	var bad string
	err := w.pool.QueryRow(w.ctx, `SELECT coalesce(string_agg(txn_id, ','), '') FROM (
	SELECT e.txn_id FROM ledger_entries e JOIN balance_transactions t ON t.id = e.txn_id
	GROUP BY e.txn_id, t.net HAVING sum(e.amount) <> 0 OR count(*) < 2
		OR coalesce(sum(e.amount) FILTER (WHERE e.account = 'balance'), 0) <> t.net
) x`).Scan(&bad)
	if err != nil || bad != "" {
		return fmt.Errorf("transactions that do not balance: %q (%v)", bad, err)
	}
	// By what moved the money, not by the booking's key: the key is what
	// TestLedgerCheckFailsWithoutTheBookingKey takes away.
	rows, err := w.pool.Query(w.ctx, `SELECT type || ':' || source, net FROM balance_transactions WHERE merchant_id = $1`, w.m)
	if err != nil {
		return err
	}
	got := map[string]int64{}
	n := 0
	for rows.Next() {
		var cause string
		var net int64
		if err := rows.Scan(&cause, &net); err != nil {
			return err
		}
		got[cause] += net
		n++
	}
	if err := rows.Err(); err != nil {
		return err
	}
	if n != len(w.want) {
		return fmt.Errorf("after %d steps: %d transactions booked for %d causes", w.steps, n, len(w.want))
	}
	for cause, net := range w.want {
		if got[cause] != net {
			return fmt.Errorf("after %d steps: %s booked %d, want %d", w.steps, cause, got[cause], net)
		}
	}
	sums, err := w.s.Balance(w.ctx, w.m, "", w.now.Add(time.Hour))
	if err != nil {
		return err
	}
	var balance int64
	for _, x := range sums {
		balance += x.Available + x.Pending
	}
	if balance != w.balance {
		return fmt.Errorf("after %d steps: the balance is %d, the steps booked %d", w.steps, balance, w.balance)
	}
	return nil
}

// drive runs n random steps, checking the books after each.
func (w *ledgerWorld) drive(n int) error {
	ops := []func() error{w.capture, w.capture, w.refund, w.dispute, w.payout, w.settlePayout, w.automaticPayout}
	for w.steps = 1; w.steps <= n; w.steps++ {
		if err := ops[w.rng.IntN(len(ops))](); err != nil {
			return fmt.Errorf("step %d: %w", w.steps, err)
		}
		if err := w.check(); err != nil {
			return err
		}
	}
	return nil
}

func TestLedgerBooksEveryCauseOnce(t *testing.T) {
	for seed := uint64(1); seed <= 3; seed++ {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			if err := newLedgerWorld(t, seed).drive(200); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// Without its key, a repeated booking is booked twice, and the check
// above sees it: the key is what keeps the books whole.
func TestLedgerCheckFailsWithoutTheBookingKey(t *testing.T) {
	restore := store.SetBookingCause(func(cause string) string { return cause + ":" + ids.NewUUID() })
	defer restore()
	err := newLedgerWorld(t, 1).drive(200)
	if !errors.Is(err, errBooks) {
		t.Fatalf("without the key: %v; want the check to find a cause booked twice", err)
	}
	t.Log(err)
}

// nopQueue drops what it is given: the outbox rows stay for the sweeper.
type nopQueue struct{}

func (nopQueue) Enqueue(context.Context, outbox.Task) error { return nil }

// A payout a provider made is booked when it is first reported, then moves
// with each later report: once, whatever is reported again, and a failure
// after it arrived returns its money once.
func TestImportedPayouts(t *testing.T) {
	db := testenv.NewDB(t)
	s := store.New(db.Pool)
	ctx := context.Background()
	m := newMerchant(t, s, "imports@example.com")
	conn := ids.New("conn")
	im := ledger.NewImporter(s, nopQueue{}, time.Now, slog.New(slog.NewTextHandler(io.Discard, nil)))
	report := ledger.Reported{Reference: "po_1Stripe", Amount: 1100, Currency: "usd", Status: "in_transit", Automatic: true,
		ArrivalDate: time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)}
	state := func() (string, int64, int) {
		t.Helper()
		p, found, err := s.PayoutByReference(ctx, conn, "po_1Stripe")
		if err != nil || !found {
			t.Fatalf("the imported payout: %v, found %v", err, found)
		}
		var net int64
		var n int
		if err := db.Pool.QueryRow(ctx, `SELECT coalesce(sum(net), 0), count(*) FROM balance_transactions WHERE merchant_id = $1 AND source = $2`,
			m.ID, p.ID).Scan(&net, &n); err != nil {
			t.Fatal(err)
		}
		return p.Status, net, n
	}
	steps := []struct {
		status      string
		wantChanged bool
		wantStatus  string
		wantNet     int64
		wantTxns    int
	}{
		{"in_transit", true, "in_transit", -1100, 1},
		{"in_transit", false, "in_transit", -1100, 1},
		{"pending", false, "in_transit", -1100, 1}, // behind it: nothing
		{"paid", true, "paid", -1100, 1},
		{"failed", true, "failed", 0, 2},
		{"failed", false, "failed", 0, 2},
		{"paid", false, "failed", 0, 2},
	}
	for i, st := range steps {
		r := report
		r.Status = st.status
		changed, err := im.Import(ctx, m.ID, conn, r)
		if err != nil || changed != st.wantChanged {
			t.Fatalf("step %d (%s): changed %v, %v; want %v", i, st.status, changed, err, st.wantChanged)
		}
		if status, net, n := state(); status != st.wantStatus || net != st.wantNet || n != st.wantTxns {
			t.Fatalf("step %d (%s): %s, net %d in %d transactions; want %s, %d in %d", i, st.status, status, net, n, st.wantStatus, st.wantNet, st.wantTxns)
		}
	}
	p, _, _ := s.PayoutByReference(ctx, conn, "po_1Stripe")
	if !p.Automatic || p.Currency != "USD" || p.FailureCode == nil || *p.FailureCode != "could_not_process" || !p.ArrivalDate.Equal(report.ArrivalDate) {
		t.Fatalf("the imported payout: %+v", p)
	}
	var evs []string
	rows, err := db.Pool.Query(ctx, `SELECT type FROM events WHERE merchant_id = $1 ORDER BY sequence`, m.ID)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var typ string
		if err := rows.Scan(&typ); err != nil {
			t.Fatal(err)
		}
		evs = append(evs, typ)
	}
	if want := []string{"payout.created", "payout.paid", "payout.failed"}; fmt.Sprint(evs) != fmt.Sprint(want) {
		t.Fatalf("events %v, want %v", evs, want)
	}
	for _, bad := range []ledger.Reported{{Reference: "po_x", Amount: 0, Currency: "usd", Status: "paid"},
		{Reference: "po_x", Amount: 10, Currency: "usdx", Status: "paid"}, {Reference: "", Amount: 10, Currency: "usd", Status: "paid"},
		{Reference: "po_x", Amount: 10, Currency: "usd", Status: "lost"}} {
		if _, err := im.Import(ctx, m.ID, conn, bad); !errors.Is(err, ledger.ErrBadReport) {
			t.Errorf("import %+v: %v, want ErrBadReport", bad, err)
		}
	}
}
