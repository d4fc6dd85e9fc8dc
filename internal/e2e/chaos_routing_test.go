package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/gatehouse-pay/gatehouse/internal/providers/adyen"
	"github.com/gatehouse-pay/gatehouse/internal/testenv/harness"
)

// F11's cards: good ones, and the hard declines of the sandbox, which the
// Stripe recorder declines the same way (stripeDeclines).
var (
	f11Good = []string{"4242424242424242", "5555555555554444"}
	f11Hard = map[string]string{"4000000000000002": "card_declined", "4000000000009995": "insufficient_funds"}
)

// f11Shot is one charge of the F11 load.
type f11Shot struct {
	tag    string
	card   string
	amount int64
	phase  int
	sent   time.Time
	id     string
}

// f11Attempt is an attempt as Postgres holds it.
type f11Attempt struct {
	Connector         string     `json:"connector"`
	Provider          string     `json:"provider"`
	Status            string     `json:"status"`
	FailureCode       *string    `json:"failure_code"`
	ProviderReference *string    `json:"provider_reference"`
	StartedAt         time.Time  `json:"started_at"`
	EndedAt           *time.Time `json:"ended_at"`
}

// f11Charge is a charge of F11 as Postgres holds it.
type f11Charge struct {
	ID, Tag, Status  string
	Connector        string
	Amount, Captured int64
	Reference        *string
	FailureCode      *string
	CreatedAt        time.Time
	Attempts         []f11Attempt
}

// TestChaosConnectorFailover is F11: the connectors of a route fail one
// after another under a steady load of charges, across the three kinds of
// provider. The route is sandbox A, sandbox B, Stripe S (stripe-mock behind
// the recorder), Adyen Y (Prism behind the recorder, which refuses the
// hard-decline cards as Adyen would), sandbox C. Phase 0: all healthy.
// Phase 1: A rehearses an outage (PATCH). Phase 2: B declines every
// authorization with processing_error as well. Phase 3: Stripe goes away
// (the recorder stops and stripe-mock is killed). Phase 4: Adyen goes away
// too (its recorder stops). Each phase leaves one healthy connector: A, B,
// S, Y, C. Every good card is captured by the next connector that works; a
// hard decline is never tried at another connector; what each provider
// booked equals what the gateway captured through it; no charge has two
// succeeded attempts. Afterwards the test sends the AUTHORISATION
// notifications Adyen sends for its payments, and refunds a few of them,
// each settled by Adyen's REFUND notification: Adyen's refunds are the
// gateway's.
func TestChaosConnectorFailover(t *testing.T) {
	chaosParallel(t)
	var (
		rate  = chaosScale(20, 40) // charges per second
		phase = chaosScale(4*time.Second, 20*time.Second)
		// A charge sent this long after a fault began is routed with it in
		// force: the worker reads its connectors again every second.
		margin = 2 * time.Second
	)
	mock, mockProc := startStripeMock(t)
	rec := newStripeRecorder(t, mock)
	yrec := newAdyenRecorder(t, startAdyenPrism(t))
	yrec.refusals = map[string]string{"4000000000000002": "2", "4000000000009995": "12"} // card_declined, insufficient_funds
	st, wm := chaosStack(t, "127.0.0.110", stackOptions{env: []string{
		"STRIPE_API_BASE=" + rec.url(),
		// Production's breaker, a few quick retries, and room for five connectors.
		"PROVIDER_BREAKER_FAILURES=20", "PROVIDER_MAX_ATTEMPTS=3", "ROUTING_MAX_ATTEMPTS=5",
	}, workerEnv: []string{"ADYEN_API_BASE=" + yrec.url()}})
	m := &rtMerchant{payments: wm.payments, id: wm.id}
	a := m.sandboxConnector(t, "A", "")
	b := m.sandboxConnector(t, "B", "")
	s := m.createConnector(t, fmt.Sprintf(`{"provider":"stripe","name":"S","credentials":{"secret_key":"sk_test_%s"}}`, harness.RandomHex(16)))
	y, ynt := m.adyenConnector(t, st, "127.0.0.111", "Y")
	c := m.sandboxConnector(t, "C", "")
	// The routing's notice is handed to every replica before the load
	// starts, so neither routes by a copy from before it.
	notices := st.redis.client.Subscribe(context.Background(), "gatehouse:routing:changed")
	if _, err := notices.Receive(context.Background()); err != nil {
		t.Fatalf("subscribe to the routing notices: %v", err)
	}
	m.putRouting(t, `{"default":`+route(a.ID, b.ID, s.ID, y.ID, c.ID)+`}`)
	select {
	case <-notices.Channel():
	case <-time.After(waitFloor):
		t.Fatalf("no routing notice within %s of the PUT", waitFloor)
	}
	notices.Close()
	order := map[string]int{a.ID: 0, b.ID: 1, s.ID: 2, y.ID: 3, c.ID: 4}
	names := map[string]string{a.ID: "A", b.ID: "B", s.ID: "S", y.ID: "Y", c.ID: "C"}
	providerOf := map[string]string{a.ID: "sandbox", b.ID: "sandbox", s.ID: "stripe", y.ID: "adyen", c.ID: "sandbox"}

	// The load: rate charges a second, one in ten a hard decline.
	var (
		mu     sync.Mutex
		shots  []f11Shot
		wg     sync.WaitGroup
		cur    int // the phase
		faults [5]time.Time
		// At smoke scale the load pauses before each fault until every
		// charge sent has settled (see next).
		paused   bool
		inflight atomic.Int64
	)
	slots := make(chan struct{}, 64)
	stop, genDone := make(chan struct{}), make(chan struct{})
	began := time.Now()
	faults[0] = began
	go func() {
		defer close(genDone)
		tick := time.NewTicker(time.Second / time.Duration(rate))
		defer tick.Stop()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			card := f11Good[i%len(f11Good)]
			if i%10 == 9 {
				card = []string{"4000000000000002", "4000000000009995"}[(i/10)%2]
			}
			sh := f11Shot{tag: fmt.Sprintf("f11-%05d", i), card: card, amount: int64(1000 + (i*7919)%9000), sent: time.Now()}
			if sh.amount == 1313 || sh.amount == adyenThreeDSAmount { // the sandbox's lost answer, the recorder's 3-D Secure
				sh.amount++
			}
			mu.Lock()
			if paused {
				mu.Unlock()
				continue
			}
			sh.phase = cur
			inflight.Add(1)
			mu.Unlock()
			slots <- struct{}{}
			wg.Go(func() {
				defer func() { <-slots; inflight.Add(-1) }()
				e, err := sendWith(m.c, http.MethodPost, st.replicas[i%2]+"/v1/charges", m.key,
					routeBody(sh.card, sh.amount, "usd", true, sh.tag, ""), "Idempotency-Key", sh.tag)
				if err != nil {
					t.Errorf("charge %s: %v", sh.tag, err)
					return
				}
				st.check(t, e)
				if e.status() != http.StatusCreated {
					t.Errorf("charge %s: %s, want 201", sh.tag, e)
					return
				}
				sh.id = chargeFrom(t, e)
				mu.Lock()
				shots = append(shots, sh)
				mu.Unlock()
			})
		}
	}()
	// The worker's backlog: the most tasks waiting in the critical queue.
	var maxPending, maxRetry int
	inspector := st.redis.inspector()
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		for {
			select {
			case <-genDone:
				return
			case <-time.After(250 * time.Millisecond):
			}
			if qi, err := inspector.GetQueueInfo("critical"); err == nil {
				maxPending, maxRetry = max(maxPending, qi.Pending), max(maxRetry, qi.Retry+qi.Scheduled)
			}
		}
	}()
	// At full scale the load runs on while the faults come, every phase
	// seconds. At smoke scale, on two cores shared with the rest of make
	// test, the worker can fall more than a phase behind the load, and a
	// phase's charges would be routed under the next phase's faults (in
	// one run none reached S). So there the load pauses before each fault until every
	// charge sent has settled, and each phase has its own phase of load.
	unsettled := func() int64 {
		return queryInt(t, st.db, `SELECT count(*) FROM charges WHERE merchant_id = $1 AND status = 'created'`, m.id)
	}
	phaseStart := began
	next := func(p int, what string, fault func()) {
		time.Sleep(time.Until(phaseStart.Add(phase)))
		drained := time.Duration(0)
		if !chaosFull() {
			mu.Lock()
			paused = true
			mu.Unlock()
			from := time.Now()
			for deadline := from.Add(60 * time.Second); ; time.Sleep(100 * time.Millisecond) {
				if inflight.Load() == 0 && unsettled() == 0 {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("phase %d: charges still unsettled 60 s after the load paused", p-1)
				}
			}
			drained = time.Since(from)
		}
		fault()
		mu.Lock()
		cur, faults[p], paused = p, time.Now(), false
		phaseStart = faults[p]
		mu.Unlock()
		t.Logf("phase %d at %s: %s (after %s for the charges sent to settle)", p, faults[p].Sub(began).Round(time.Millisecond), what, drained.Round(time.Millisecond))
	}
	next(1, "A rehearses an outage", func() { m.patchConnector(t, a.ID, `{"sandbox":{"unavailable":true}}`) })
	next(2, "B declines every authorization with processing_error", func() {
		m.patchConnector(t, b.ID, `{"sandbox":{"decline_code":"processing_error"}}`)
	})
	next(3, "Stripe stopped", func() {
		rec.stop()
		if err := mockProc.Cmd.Process.Kill(); err != nil {
			t.Errorf("kill stripe-mock: %v", err)
		}
		<-mockProc.Done()
	})
	// Before Adyen goes away, its word on what it took so far: the
	// notifications it sends, and refunds that wait for theirs.
	var word f11AdyenWord
	next(4, "Adyen stopped", func() {
		word = f11AdyenNotifications(t, st, m, yrec, ynt, y.ID)
		yrec.stop()
	})
	time.Sleep(time.Until(phaseStart.Add(phase)))
	close(stop)
	<-genDone
	<-sampled
	wg.Wait()
	loadEnded := time.Now()

	// Every charge settles.
	for deadline := time.Now().Add(90 * time.Second); ; time.Sleep(250 * time.Millisecond) {
		n := unsettled()
		if n == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d charges still created 90 s after the load", n)
		}
	}
	settledAfter := time.Since(loadEnded)
	charges := f11Charges(t, st, m.id)

	// The provider's books: the sandbox's booked authorizations and the
	// payment intents stripe-mock created, by charge.
	type booking struct {
		key, reference string
		amount         int64
	}
	sandboxBooked := map[string][]booking{}
	ctx, cancel := dbCtx()
	defer cancel()
	rows, err := st.db.Pool.Query(ctx, `SELECT idempotency_key, amount, reference FROM sandbox_ledger
		WHERE operation = 'authorize' AND reference IS NOT NULL`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var bk booking
		if err := rows.Scan(&bk.key, &bk.amount, &bk.reference); err != nil {
			t.Fatal(err)
		}
		id := f11ChargeOfKey(bk.key)
		sandboxBooked[id] = append(sandboxBooked[id], bk)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	stripeBooked := map[string][]booking{}
	intentIDs := map[string]int{}
	for key, calls := range rec.intents() {
		id := f11ChargeOfKey(key)
		for _, call := range calls {
			stripeBooked[id] = append(stripeBooked[id], booking{key: key, reference: call.id, amount: call.amount})
			intentIDs[call.id]++
		}
	}

	// Adyen's payments (Authorised: Refused ones book nothing), by charge.
	adyenBooked := map[string][]booking{}
	for _, call := range yrec.all() {
		if call.op == "payments" && !call.replayed && call.status/100 == 2 && !call.refused {
			id := f11ChargeOfKey(call.key)
			adyenBooked[id] = append(adyenBooked[id], booking{key: call.key, reference: call.psp, amount: call.amount})
		}
	}
	books := map[string]map[string][]booking{"sandbox": sandboxBooked, "stripe": stripeBooked, "adyen": adyenBooked}

	byID := map[string]f11Charge{}
	for _, ch := range charges {
		byID[ch.ID] = ch
	}
	var (
		goodSent, goodCaptured, hardSent, hardOK int
		doubleSucceeded, unknownAttempts         int
		gateway, booked                          = map[string]int64{}, map[string]int64{}
		captures                                 = map[string]int{} // charges captured, by provider
		single, multi                            []time.Duration
		perAttempts                              = map[int][]time.Duration{}
		perPhase                                 [5][]time.Duration
		settledAt                                = map[string]int{}
		early                                    int
		phaseTally                               [5]map[string]int
	)
	for i := range phaseTally {
		phaseTally[i] = map[string]int{}
	}
	mu.Lock()
	sent := slices.Clone(shots)
	mu.Unlock()
	for _, sh := range sent {
		ch, ok := byID[sh.id]
		if !ok {
			t.Errorf("charge %s (%s): answered 201 but not in Postgres", sh.tag, sh.id)
			continue
		}
		succeeded, unknown := 0, 0
		for _, at := range ch.Attempts {
			switch at.Status {
			case "succeeded":
				succeeded++
			case "unknown":
				unknown++
			}
		}
		if succeeded > 1 {
			doubleSucceeded++
			t.Errorf("charge %s: %d succeeded attempts %s", ch.ID, succeeded, f11Path(ch, names))
		}
		if unknown > 0 {
			// Stripe was stopped between calls: no answer was lost.
			unknownAttempts += unknown
			t.Errorf("charge %s: an attempt's outcome is unknown %s", ch.ID, f11Path(ch, names))
		}
		bookings := 0
		for _, byCharge := range books {
			bookings += len(byCharge[ch.ID])
		}
		hard, isHard := f11Hard[sh.card]
		switch {
		case !isHard:
			goodSent++
			phaseTally[sh.phase][names[ch.Connector]]++
			last := len(ch.Attempts) - 1
			if ch.Status != "captured" || ch.Captured != sh.amount || last < 0 || ch.Attempts[last].Status != "succeeded" ||
				ch.Attempts[last].Connector != ch.Connector || succeeded != 1 {
				t.Errorf("good card %s (%s, phase %d): %s, captured %d of %d %s; want captured by its last attempt",
					ch.ID, sh.tag, sh.phase, ch.Status, ch.Captured, sh.amount, f11Path(ch, names))
				continue
			}
			goodCaptured++
			settledAt[names[ch.Connector]]++
			// Faults only add up: a charge sent well after a fault began is
			// never taken by a connector that fault broke.
			for p := len(faults) - 1; p >= 1; p-- {
				if sh.sent.After(faults[p].Add(margin)) && order[ch.Connector] < p {
					early++
					t.Errorf("good card %s sent %s after phase %d began was captured at %s %s", ch.ID,
						sh.sent.Sub(faults[p]).Round(time.Millisecond), p, names[ch.Connector], f11Path(ch, names))
					break
				}
			}
			// One booking, at the connector that settled the charge, under
			// its attempt's key, for the amount the gateway captured.
			want := "gh_" + ch.ID + "_authorize"
			if n := order[ch.Connector]; n > 0 {
				want += fmt.Sprintf("_%d", n+1)
			}
			prov := providerOf[ch.Connector]
			got := books[prov][ch.ID]
			captures[prov]++
			gateway[prov] += ch.Captured
			if bookings != len(got) {
				t.Errorf("charge %s captured at %s (%s) has bookings at other providers: %d in all", ch.ID, names[ch.Connector], prov, bookings)
			}
			if len(got) != 1 || got[0].key != want || got[0].amount != ch.Amount || ch.Reference == nil || got[0].reference != *ch.Reference {
				t.Errorf("charge %s captured at %s (reference %s): bookings %+v, want one under %s", ch.ID, names[ch.Connector], chaosDeref(ch.Reference), got, want)
			}
		default:
			hardSent++
			// Exactly one attempt was declined, by the card's issuer, and
			// it is the last: no connector was tried after it. Every
			// attempt before it failed in a way that moves on.
			declines, moved := 0, true
			for i, at := range ch.Attempts {
				code := chaosDeref(at.FailureCode)
				if code == hard {
					declines++
					continue
				}
				if i == len(ch.Attempts)-1 || at.Status != "failed" || (code != "provider_unavailable" && code != "processing_error") {
					moved = false
				}
			}
			last := len(ch.Attempts) - 1
			if ch.Status != "failed" || chaosDeref(ch.FailureCode) != hard || declines != 1 || !moved || last < 0 ||
				chaosDeref(ch.Attempts[last].FailureCode) != hard || bookings != 0 {
				t.Errorf("hard decline %s (%s, phase %d): %s %q %s, bookings %d; want failed %s in exactly one declined attempt, the last",
					ch.ID, sh.card[len(sh.card)-4:], sh.phase, ch.Status, chaosDeref(ch.FailureCode), f11Path(ch, names), bookings, hard)
				continue
			}
			hardOK++
		}
		// The latency a failover adds: from the charge's creation to the
		// end of its last attempt.
		if last := len(ch.Attempts) - 1; last >= 0 && ch.Attempts[last].EndedAt != nil {
			d := ch.Attempts[last].EndedAt.Sub(ch.CreatedAt)
			perPhase[sh.phase] = append(perPhase[sh.phase], d)
			perAttempts[len(ch.Attempts)] = append(perAttempts[len(ch.Attempts)], d)
			if len(ch.Attempts) == 1 {
				single = append(single, d)
			} else {
				multi = append(multi, d)
			}
		}
	}
	for prov, byCharge := range books {
		for id, bks := range byCharge {
			if _, ok := byID[id]; !ok {
				t.Errorf("%s bookings for no charge of the test: %+v", prov, bks)
			}
			for _, bk := range bks {
				booked[prov] += bk.amount
			}
		}
		if booked[prov] != gateway[prov] || len(byCharge) != captures[prov] {
			t.Errorf("%s: booked %d for %d charges, the gateway captured %d of %d charges there", prov, booked[prov], len(byCharge), gateway[prov], captures[prov])
		}
	}
	for pi, n := range intentIDs {
		if n > 1 {
			t.Errorf("payment intent %s answered %d times", pi, n)
		}
	}
	if goodCaptured != goodSent || hardOK != hardSent || len(sent) != len(charges) {
		t.Errorf("good cards captured %d of %d, hard declines as expected %d of %d, charges %d answered 201 and %d in Postgres",
			goodCaptured, goodSent, hardOK, hardSent, len(sent), len(charges))
	}
	for _, name := range []string{"A", "B", "S", "Y", "C"} {
		if settledAt[name] == 0 {
			t.Errorf("no good card was captured at %s: the phase did not happen", name)
		}
	}
	// Adyen's refunds are the gateway's.
	var adyenRefunds int64
	for _, call := range yrec.all() {
		if call.op == "refunds" && !call.replayed && call.status/100 == 2 {
			adyenRefunds += call.amount
		}
	}
	gatewayRefunds := queryInt(t, st.db, `SELECT coalesce(sum(amount_refunded), 0) FROM charges WHERE merchant_id = $1`, m.id)
	if word.refunds == 0 || adyenRefunds != gatewayRefunds || adyenRefunds != word.refunded {
		t.Errorf("refunds: Adyen booked %d, the gateway refunded %d, the test asked for %d in %d refunds; want them equal, and at least one",
			adyenRefunds, gatewayRefunds, word.refunded, word.refunds)
	}
	if n := queryInt(t, st.db, `SELECT count(*) FROM outbox WHERE task_type = 'charge:reverse'`); n != 0 {
		t.Errorf("charge:reverse tasks in the outbox: %d, want 0 (no answer was lost)", n)
	}
	for p, tally := range phaseTally {
		ds := perPhase[p]
		slices.Sort(ds)
		var p50, p99 time.Duration
		if len(ds) > 0 {
			p50, p99 = quantile(ds, 0.5), quantile(ds, 0.99)
		}
		t.Logf("F11 phase %d: good cards sent %d, captured at A %d, B %d, S %d, Y %d, C %d; settled after creation p50 %s, p99 %s", p,
			tally["A"]+tally["B"]+tally["S"]+tally["Y"]+tally["C"], tally["A"], tally["B"], tally["S"], tally["Y"], tally["C"],
			p50.Round(time.Millisecond), p99.Round(time.Millisecond))
	}
	// Authorizations sent more than once under one key (a task run twice;
	// harmless, the key books once).
	repeated := queryInt(t, st.db, `SELECT coalesce(sum(calls - 1), 0) FROM sandbox_ledger WHERE operation = 'authorize'`)
	stripeRepeats := 0
	for _, call := range rec.all() {
		if call.replayed && call.path == "/v1/payment_intents" {
			stripeRepeats++
		}
	}
	var stripeTook []time.Duration
	for _, call := range rec.all() {
		if call.path == "/v1/payment_intents" && !call.replayed && call.status/100 == 2 {
			stripeTook = append(stripeTook, call.took)
		}
	}
	slices.Sort(stripeTook)
	var stripeP50, stripeP99 time.Duration
	if len(stripeTook) > 0 {
		stripeP50, stripeP99 = quantile(stripeTook, 0.5), quantile(stripeTook, 0.99)
	}
	var adyenTook []time.Duration
	for _, call := range yrec.all() {
		if call.op == "payments" && !call.replayed && call.status/100 == 2 {
			adyenTook = append(adyenTook, call.took)
		}
	}
	slices.Sort(adyenTook)
	attempts := 0
	for _, ch := range charges {
		attempts += len(ch.Attempts)
	}
	wmx := st.do(t, m.c, http.MethodGet, st.worker+"/metrics", "", "")
	runs := 0.0
	for _, line := range strings.Split(string(wmx.body), "\n") {
		if strings.HasPrefix(line, "gatehouse_jobs_processed_total{") && strings.Contains(line, `type="charge:authorize"`) && strings.Contains(line, `outcome="ok"`) {
			v, _ := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
			runs += v
		}
	}
	t.Logf("F11 worker: critical queue at most %d pending and %d scheduled or retrying; charge:authorize runs ended ok %.0f for %d attempts; authorizations repeated under their key: sandbox %d, Stripe %d; stripe-mock's payment intent creation p50 %s, p99 %s; Prism's payment p50 %s, p99 %s",
		maxPending, maxRetry, runs, attempts, repeated, stripeRepeats, stripeP50.Round(time.Millisecond), stripeP99.Round(time.Millisecond),
		quantile(adyenTook, 0.5).Round(time.Millisecond), quantile(adyenTook, 0.99).Round(time.Millisecond))
	for n := 1; n <= len(order); n++ {
		ds := perAttempts[n]
		slices.Sort(ds)
		if len(ds) > 0 {
			t.Logf("F11 charges with %d attempts: %d, settled after creation p50 %s, p99 %s, max %s", n, len(ds),
				quantile(ds, 0.5).Round(time.Millisecond), quantile(ds, 0.99).Round(time.Millisecond), ds[len(ds)-1].Round(time.Millisecond))
		}
	}
	slices.Sort(single)
	slices.Sort(multi)
	var p99Single, p99Multi time.Duration
	if len(single) > 0 {
		p99Single = quantile(single, 0.99)
	}
	if len(multi) > 0 {
		p99Multi = quantile(multi, 0.99)
	}
	t.Logf("F11 figures: scale %s, %d charges at %d/s over %s (phases of %s); good cards %d, captured %d (%.2f%%): at A %d, B %d, S %d, Y %d, C %d; hard declines %d, declined once and never tried further %d; charges with two succeeded attempts %d; unknown attempts %d; sandbox booked %d for %d charges, gateway %d; Stripe booked %d in %d payment intents, gateway %d for %d charges; Adyen booked %d in %d payments, gateway %d for %d charges; settle latency p99: one attempt %s (%d), after failover %s (%d), added %s; all settled %s after the load",
		chaosScale("smoke", "full"), len(sent), rate, loadEnded.Sub(began).Round(time.Millisecond), phase,
		goodSent, goodCaptured, 100*float64(goodCaptured)/float64(max(goodSent, 1)), settledAt["A"], settledAt["B"], settledAt["S"], settledAt["Y"], settledAt["C"],
		hardSent, hardOK, doubleSucceeded, unknownAttempts, booked["sandbox"], len(sandboxBooked), gateway["sandbox"],
		booked["stripe"], len(intentIDs), gateway["stripe"], captures["stripe"], booked["adyen"], len(adyenBooked), gateway["adyen"], captures["adyen"],
		p99Single.Round(time.Millisecond), len(single), p99Multi.Round(time.Millisecond), len(multi), (p99Multi - p99Single).Round(time.Millisecond),
		settledAfter.Round(time.Millisecond))
}

// f11AdyenWord is what F11 heard from Adyen before it went away.
type f11AdyenWord struct {
	authorisations, refunds int
	refunded                int64
}

// f11AdyenNotifications sends the AUTHORISATION notification Adyen sends
// for each payment the charges captured at its connector so far (each
// answered Authorised: nothing is left to move, and each is stored as a
// duplicate of that answer), then refunds part of up to three of them,
// each pending until the REFUND notification the test sends once Adyen
// booked it. Every notification is acknowledged, stored and processed.
func f11AdyenNotifications(t *testing.T, st *stack, m *rtMerchant, rec *adyenRecorder, nt adyenNotifier, connector string) f11AdyenWord {
	t.Helper()
	payments := map[string]adyenCall{}
	for _, call := range rec.all() {
		if call.op == "payments" && !call.replayed && call.status/100 == 2 && !call.refused {
			payments[f11ChargeOfKey(call.key)] = call
		}
	}
	var (
		word  f11AdyenWord
		items []adyen.NotificationItem
		taken []string
	)
	outcomes := map[string]string{} // eventCode:pspReference -> the outcome wanted
	for _, ch := range f11Charges(t, st, m.id) {
		pay, ok := payments[ch.ID]
		if ch.Connector != connector || ch.Status != "captured" || !ok {
			continue
		}
		items = append(items, adyenItem("AUTHORISATION", pay.psp, "", pay.reference, pay.amount, pay.currency, true))
		outcomes["AUTHORISATION:"+pay.psp] = "duplicate"
		taken = append(taken, ch.ID)
	}
	if len(taken) == 0 {
		t.Errorf("no charge was captured at Adyen before it went away")
		return word
	}
	word.authorisations = len(items)
	for len(items) > 0 { // Adyen sends up to a few items a request
		n := min(5, len(items))
		nt.send(t, items[:n]...)
		items = items[n:]
	}
	const part = 100
	for _, id := range taken[:min(3, len(taken))] {
		e := m.call(t, http.MethodPost, "/v1/refunds", fmt.Sprintf(`{"charge":%q,"amount":%d}`, id, part))
		mustExpect(t, e, http.StatusCreated, "")
		var r refundJSON
		decode(t, e, &r)
		call := rec.booked(t, "refunds", "gh_"+r.ID+"_refund", 30*time.Second)
		if call.payment != payments[id].psp || call.amount != part {
			t.Errorf("refund %s at Adyen: %+v; want %d of %s", r.ID, call, part, payments[id].psp)
		}
		nt.send(t, adyenItem("REFUND", call.psp, call.payment, r.ID, part, call.currency, true))
		outcomes["REFUND:"+call.psp] = "applied"
		if got := m.waitRefund(t, r.ID, 30*time.Second); got.Status != "succeeded" {
			t.Errorf("refund %s after Adyen's REFUND: %s, want succeeded", r.ID, got.Status)
		}
		word.refunds++
		word.refunded += part
	}
	list := m.waitNotificationsApplied(t, connector, len(outcomes), 30*time.Second)
	for _, n := range list {
		if want := outcomes[n.Type+":"+n.ProviderEventID]; n.Outcome != want || n.Charge == nil {
			t.Errorf("Adyen's %s %s: outcome %s, charge %s; want %s, of its charge", n.Type, n.ProviderEventID, n.Outcome, chaosDeref(n.Charge), want)
		}
	}
	t.Logf("F11 Adyen: %d AUTHORISATION notifications, %d refunds settled by REFUND notifications", word.authorisations, word.refunds)
	return word
}

// f11Charges reads every charge of the merchant with its attempts.
func f11Charges(t *testing.T, st *stack, merchant string) []f11Charge {
	t.Helper()
	ctx, cancel := dbCtx()
	defer cancel()
	rows, err := st.db.Pool.Query(ctx, `SELECT id::text, coalesce(metadata->>'tag', ''), status, coalesce(connector_id, ''),
			amount, amount_captured, provider_reference, failure_code, created_at, attempts::text
		FROM charges WHERE merchant_id = $1`, merchant)
	if err != nil {
		t.Fatalf("query charges: %v", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (f11Charge, error) {
		var c f11Charge
		var attempts string
		if err := r.Scan(&c.ID, &c.Tag, &c.Status, &c.Connector, &c.Amount, &c.Captured, &c.Reference, &c.FailureCode, &c.CreatedAt, &attempts); err != nil {
			return c, err
		}
		return c, json.Unmarshal([]byte(attempts), &c.Attempts)
	})
	if err != nil {
		t.Fatalf("read charges: %v", err)
	}
	return out
}

// f11ChargeOfKey is the charge id in a provider key gh_<charge>_authorize[_n].
func f11ChargeOfKey(key string) string {
	rest, _ := strings.CutPrefix(key, "gh_")
	id, _, _ := strings.Cut(rest, "_")
	return id
}

// f11Path is a charge's attempts in short form, with the connectors' names.
func f11Path(c f11Charge, names map[string]string) string {
	parts := make([]string, len(c.Attempts))
	for i, a := range c.Attempts {
		parts[i] = names[a.Connector] + ":" + a.Status
		if a.FailureCode != nil {
			parts[i] += "(" + *a.FailureCode + ")"
		}
	}
	return "[" + strings.Join(parts, " ") + "]"
}
