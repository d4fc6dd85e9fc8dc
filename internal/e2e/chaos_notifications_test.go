package e2e

import (
	"fmt"
	"math/rand/v2"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gatehouse-pay/gatehouse/internal/providers/adyen"
	"github.com/gatehouse-pay/gatehouse/internal/testenv/harness"
)

// adyenFlow is one charge of F14 and what Adyen booked for it.
type adyenFlow struct {
	charge            routedJSON
	pay, capt, refund adyenCall
	refundID          string
}

// f14Flood is a flood of forged notifications (signed with keys that are
// not the connector's) from one client address, to both API replicas.
type f14Flood struct {
	mu       sync.Mutex
	statuses map[int]int
	noRetry  int // 429s without Retry-After
	errs     int // transport errors
	stop     chan struct{}
	done     sync.WaitGroup
	began    time.Time
	ended    time.Time
}

// startF14Flood starts senders goroutines, each posting forged Adyen
// notifications from ip as fast as they are answered, until stop.
func startF14Flood(t *testing.T, s *adyenSetup, ip string, senders int) *f14Flood {
	t.Helper()
	f := &f14Flood{statuses: map[int]int{}, stop: make(chan struct{}), began: time.Now()}
	c := newClient(t, ip)
	path := strings.TrimPrefix(s.notifier.url, s.st.replicas[0])
	for g := range senders {
		f.done.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-f.stop:
					return
				default:
				}
				item := adyenItem("CAPTURE", strings.ToUpper(harness.RandomHex(8)), strings.ToUpper(harness.RandomHex(8)), "forged", 1000, "EUR", true)
				body := s.notifier.body(t, strings.ToUpper(harness.RandomHex(32)), item)
				e, err := send(c, http.MethodPost, s.st.replicas[(g+i)%2]+path, "", body)
				f.mu.Lock()
				if err != nil {
					f.errs++
				} else {
					f.statuses[e.status()]++
					if e.status() == http.StatusTooManyRequests && e.header("Retry-After") == "" {
						f.noRetry++
					}
				}
				f.mu.Unlock()
			}
		})
	}
	return f
}

// end stops the flood and waits for its senders.
func (f *f14Flood) end() {
	close(f.stop)
	f.done.Wait()
	f.ended = time.Now()
}

// count is how many answers of status the flood has had so far.
func (f *f14Flood) count(status int) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.statuses[status]
}

// TestChaosAdyenNotifications is F14: Adyen's notifications against
// the real binaries, late, early, twice and out of order, while another
// address floods the connector's notification URL with forged ones.
//
// Two identical sets of charges are each authorized at Adyen (Prism behind
// the recorder), captured in part and refunded in part. Set A's
// notifications come in order, one each, after the calls' answers, with
// nothing else going on. Set B's come twice each, shuffled among the
// charges, some alone and some two to a request, and before Adyen's
// answers to the capture and refund calls they settle (the recorder holds
// those answers until the notifications were applied); the CAPTURE ones
// come a third and fourth time among the REFUND ones. All through set B,
// one address sends forged notifications as fast as it is answered.
//
// Asserted at both scales: both sets end the same (statuses, amounts,
// events); every notification is stored and each event applied exactly
// once, the copies duplicates; Adyen booked each operation once; the
// flood got only 401 and then 429 with Retry-After, no more 401s than the
// per-address limit lets through, stored nothing, and another address's
// forged notification is still answered 401. At full scale, good
// notifications' answer time p99 beside the flood is at most twice that
// of set A (plus 50 ms).
func TestChaosAdyenNotifications(t *testing.T) {
	chaosParallel(t)
	began := time.Now()
	var (
		perSet  = chaosScale(3, 12)
		senders = chaosScale(2, 8)
	)
	// Adyen's answers are held for seconds: a call may take that long.
	s := newAdyenSetup(t, "127.0.0.161", "F14 adyen notifications", "PROVIDER_TIMEOUT=30s")
	m, rec, nt := s.m, s.rec, s.notifier
	m.putRouting(t, `{"default":`+route(s.conn.ID)+`}`)
	amounts := make([]int64, perSet)
	for i := range amounts {
		amounts[i] = int64(2000 + 1000*i)
	}
	captureOf := func(i int) int64 { return amounts[i] - 100*int64(i+1) }
	const refundAmount = 500

	// Every good notification's answer time, and how often each event was
	// sent.
	var quiet, flooded []time.Duration
	sent := map[string]int{}
	want := map[string]string{} // eventCode:pspReference -> charge
	deliver := func(into *[]time.Duration, items ...adyen.NotificationItem) {
		e := nt.send(t, items...)
		*into = append(*into, e.elapsed())
		for _, it := range items {
			sent[it.EventCode+":"+it.PSPReference]++
		}
	}
	start := func(set string) []*adyenFlow {
		var flows []*adyenFlow
		for i, a := range amounts {
			ch, pay := s.authorizedAtAdyen(t, a, fmt.Sprintf("%s-%d", set, i))
			flows = append(flows, &adyenFlow{charge: ch, pay: pay})
		}
		return flows
	}
	capture := func(f *adyenFlow, i int) {
		mustExpect(t, m.call(t, http.MethodPost, "/v1/charges/"+f.charge.ID+"/capture", fmt.Sprintf(`{"amount":%d}`, captureOf(i))), http.StatusOK, "")
	}
	refund := func(f *adyenFlow) {
		e := m.call(t, http.MethodPost, "/v1/refunds", fmt.Sprintf(`{"charge":%q,"amount":%d}`, f.charge.ID, refundAmount))
		mustExpect(t, e, http.StatusCreated, "")
		var r refundJSON
		decode(t, e, &r)
		f.refundID = r.ID
	}
	captureItem := func(f *adyenFlow, i int) adyen.NotificationItem {
		want["CAPTURE:"+f.capt.psp] = f.charge.ID
		return adyenItem("CAPTURE", f.capt.psp, f.pay.psp, f.capt.reference, captureOf(i), "EUR", true)
	}
	refundItem := func(f *adyenFlow) adyen.NotificationItem {
		want["REFUND:"+f.refund.psp] = f.charge.ID
		return adyenItem("REFUND", f.refund.psp, f.pay.psp, f.refundID, refundAmount, "EUR", true)
	}
	ids := func(flows []*adyenFlow) []string {
		var out []string
		for _, f := range flows {
			out = append(out, f.charge.ID)
		}
		return out
	}

	// Set A, in order, nothing else going on.
	a := start("a")
	for i, f := range a {
		capture(f, i)
	}
	m.waitRouted(t, ids(a), func(c routedJSON) bool { return c.Status == "capturing" }, 30*time.Second)
	for i, f := range a {
		f.capt = rec.booked(t, "captures", "gh_"+f.charge.ID+"_capture", 10*time.Second)
		deliver(&quiet, captureItem(f, i))
	}
	m.waitRouted(t, ids(a), func(c routedJSON) bool { return c.Status == "captured" }, 30*time.Second)
	for _, f := range a {
		refund(f)
		f.refund = rec.booked(t, "refunds", "gh_"+f.refundID+"_refund", 30*time.Second)
	}
	for _, f := range a {
		deliver(&quiet, refundItem(f))
	}
	for _, f := range a {
		if r := m.waitRefund(t, f.refundID, 30*time.Second); r.Status != "succeeded" {
			t.Errorf("set A: refund %s: %s, want succeeded", f.refundID, r.Status)
		}
	}

	// Set B: the flood begins, the charges are authorized, and Adyen's
	// answers to captures and refunds are held until the test
	// lets them go, after the notifications were applied.
	flood := startF14Flood(t, s, "127.0.0.170", senders)
	b := start("b")
	floodEnded := false
	defer func() {
		if !floodEnded {
			flood.end()
		}
	}()
	gate := newAnswerGate("captures", "refunds")
	rec.setHold(gate.hold)
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 14))
	deliverShuffled := func(items []adyen.NotificationItem) {
		twice := append(slices.Clone(items), items...)
		rng.Shuffle(len(twice), func(i, j int) { twice[i], twice[j] = twice[j], twice[i] })
		// Some alone, some in a batch of two, as Adyen batches them.
		for k := 0; k < len(twice); {
			n := min(1+rng.IntN(2), len(twice)-k)
			deliver(&flooded, twice[k:k+n]...)
			k += n
		}
	}
	jobsOK := func(typ string) int {
		e := s.st.do(t, newClient(t, "127.0.0.1"), http.MethodGet, s.st.worker+"/metrics", "", "")
		n, _ := metricSum(filterMetric(string(e.body), "gatehouse_jobs_processed_total", `outcome="ok"`, fmt.Sprintf("type=%q", typ)), "gatehouse_jobs_processed_total")
		return int(n)
	}
	capturesBefore, refundsBefore := jobsOK("charge:capture"), jobsOK("refund:process")
	for i, f := range b {
		capture(f, i)
	}
	var items []adyen.NotificationItem
	for i, f := range b {
		f.capt = rec.booked(t, "captures", "gh_"+f.charge.ID+"_capture", 30*time.Second)
		items = append(items, captureItem(f, i))
	}
	// Every capture is booked at Adyen and its answer held: the charges
	// are still authorized, their capture in flight.
	for _, f := range b {
		if c := m.routed(t, f.charge.ID); c.Status != "authorized" {
			t.Errorf("set B: charge %s while Adyen's answer to its capture is held: %s, want authorized", f.charge.ID, c.Status)
		}
	}
	deliverShuffled(items)
	m.waitRouted(t, ids(b), func(c routedJSON) bool { return c.Status == "captured" }, 30*time.Second)
	gate.release(t, len(b))
	// The capture calls' own answers came after: their tasks end, finding
	// the charges captured.
	waitCount(t, "charge:capture tasks of set B", func() int { return jobsOK("charge:capture") - capturesBefore }, len(b))

	items = items[:0]
	for _, f := range b {
		refund(f)
	}
	for _, f := range b {
		f.refund = rec.booked(t, "refunds", "gh_"+f.refundID+"_refund", 30*time.Second)
		items = append(items, refundItem(f))
	}
	// The CAPTURE notifications again, late, among the REFUND ones.
	for i, f := range b {
		items = append(items, captureItem(f, i))
	}
	deliverShuffled(items)
	for _, f := range b {
		if r := m.waitRefund(t, f.refundID, 30*time.Second); r.Status != "succeeded" {
			t.Errorf("set B: refund %s: %s, want succeeded", f.refundID, r.Status)
		}
	}
	gate.release(t, len(b))
	rec.setHold(nil)
	waitCount(t, "refund:process tasks of set B", func() int { return jobsOK("refund:process") - refundsBefore }, len(b))

	// The limit is per address: another address's forged notification is
	// checked, and refused for its signature, while the flood is limited.
	if flood.count(http.StatusTooManyRequests) == 0 {
		waitCount(t, "429s of the flood", func() int { return flood.count(http.StatusTooManyRequests) }, 1)
	}
	other := adyenNotifier{st: s.st, c: newClient(t, "127.0.0.171"), url: nt.url}
	forged := other.post(t, other.body(t, strings.ToUpper(harness.RandomHex(32)), adyenItem("CAPTURE", strings.ToUpper(harness.RandomHex(8)), b[0].pay.psp, "forged", 1, "EUR", true)))
	expect(t, forged, http.StatusUnauthorized, "invalid_credentials")
	flood.end()
	floodEnded = true

	// Every notification sent is stored, each event applied once; the
	// flood stored none.
	total := 0
	for _, n := range sent {
		total += n
	}
	list := m.waitNotificationsApplied(t, s.conn.ID, total, 30*time.Second)
	checkAppliedOnce(t, list, want, sent)

	// Both sets end the same.
	all := m.events(t)
	for i := range amounts {
		fa, fb := a[i], b[i]
		ca, cb := m.routed(t, fa.charge.ID), m.routed(t, fb.charge.ID)
		ra, rb := m.refundOf(t, fa.refundID), m.refundOf(t, fb.refundID)
		if ca.Status != "captured" || ca.AmountCaptured != captureOf(i) || ca.AmountRefunded != refundAmount {
			t.Errorf("set A, charge %d: %s, captured %d, refunded %d; want captured, %d, %d", i, ca.Status, ca.AmountCaptured, ca.AmountRefunded, captureOf(i), refundAmount)
		}
		if cb.Status != ca.Status || cb.AmountCaptured != ca.AmountCaptured || cb.AmountRefunded != ca.AmountRefunded || rb.Status != ra.Status || rb.Amount != ra.Amount {
			t.Errorf("charge %d: set B %s, captured %d, refunded %d, refund %s; set A %s, %d, %d, refund %s",
				i, cb.Status, cb.AmountCaptured, cb.AmountRefunded, rb.Status, ca.Status, ca.AmountCaptured, ca.AmountRefunded, ra.Status)
		}
		ea, eb := chargeEvents(t, all, fa.charge.ID), chargeEvents(t, all, fb.charge.ID)
		if !mapsEqual(ea, eb) || ea["charge.captured"] != 1 || ea["refund.succeeded"] != 1 {
			t.Errorf("charge %d: events of set A %v, of set B %v; want the same, one charge.captured and one refund.succeeded each", i, ea, eb)
		}
	}
	var booked []adyenBooking
	for i, f := range append(slices.Clone(a), b...) {
		booked = append(booked,
			adyenBooking{"payments", "gh_" + f.charge.ID + "_authorize", "", amounts[i%len(amounts)], f.pay.psp},
			adyenBooking{"captures", "gh_" + f.charge.ID + "_capture", f.pay.psp, captureOf(i % len(amounts)), f.capt.psp},
			adyenBooking{"refunds", "gh_" + f.refundID + "_refund", f.pay.psp, refundAmount, f.refund.psp})
	}
	checkAdyenBooks(t, rec.all(), booked)

	// The flood: refused for its signatures up to the per-address limit,
	// then limited; nothing else.
	floodFor := flood.ended.Sub(flood.began)
	const limit, window = 30, time.Minute // RATE_LIMIT_NOTIFICATION_FAILURES
	refused, limited := flood.statuses[http.StatusUnauthorized], flood.statuses[http.StatusTooManyRequests]
	// In each window the limit, and the requests already past the check
	// on each replica when the limit was reached.
	most := limit*(1+int(floodFor/window)) + 2*senders
	others := 0
	for st, n := range flood.statuses {
		if st != http.StatusUnauthorized && st != http.StatusTooManyRequests {
			others += n
			t.Errorf("the flood got %d answers %d, want only 401 and 429", n, st)
		}
	}
	if refused == 0 || refused > most || limited == 0 || flood.noRetry != 0 || flood.errs != 0 {
		t.Errorf("the flood: %d answered 401, %d 429 (%d without Retry-After), %d transport errors over %s; want 1 to %d 401s, then 429s with Retry-After",
			refused, limited, flood.noRetry, flood.errs, floodFor.Round(time.Millisecond), most)
	}

	slices.Sort(quiet)
	slices.Sort(flooded)
	qp50, qp99 := quantile(quiet, 0.5), quantile(quiet, 0.99)
	fp50, fp99 := quantile(flooded, 0.5), quantile(flooded, 0.99)
	t.Logf("F14 figures: scale %s, %d charges per set, %d notifications sent (%d events), each applied once; good notifications' answer p50/p99: alone %s/%s (%d), beside the flood %s/%s (%d); flood from one address by %d senders over %s: %d requests (%.0f/s), %d answered 401, %d answered 429, %d other; %d calls to Adyen; in %s",
		chaosScale("smoke", "full"), perSet, total, len(want), qp50.Round(time.Millisecond), qp99.Round(time.Millisecond), len(quiet),
		fp50.Round(time.Millisecond), fp99.Round(time.Millisecond), len(flooded), senders, floodFor.Round(time.Millisecond),
		refused+limited+others, float64(refused+limited+others)/floodFor.Seconds(), refused, limited, others, len(rec.all()), time.Since(began).Round(time.Millisecond))
	if chaosFull() && fp99 > 2*qp99+50*time.Millisecond {
		t.Errorf("good notifications beside the flood: p99 %s, want at most twice the %s alone, plus 50 ms", fp99, qp99)
	}
}

// checkAppliedOnce checks the connector's notifications: each was sent by
// the test (want: eventCode:pspReference -> charge), is listed as often as
// it was sent, and exactly one of its copies was applied to its charge,
// the others duplicates.
func checkAppliedOnce(t *testing.T, list []notificationJSON, want map[string]string, sent map[string]int) {
	t.Helper()
	listed, applied := map[string]int{}, map[string]int{}
	for _, n := range list {
		k := n.Type + ":" + n.ProviderEventID
		charge, ok := want[k]
		switch {
		case !ok:
			t.Errorf("notification %s (%s %s): not one the test sent", n.ID, n.Type, n.ProviderEventID)
			continue
		case n.ProcessedAt == nil:
			t.Errorf("notification %s (%s): not processed", n.ID, k)
		case n.Outcome == "applied":
			applied[k]++
			if chaosDeref(n.Charge) != charge {
				t.Errorf("notification %s (%s): applied to %s, want %s", n.ID, k, chaosDeref(n.Charge), charge)
			}
		case n.Outcome != "duplicate":
			t.Errorf("notification %s (%s): outcome %s, want applied or duplicate", n.ID, k, n.Outcome)
		}
		listed[k]++
	}
	for k := range want {
		if applied[k] != 1 || listed[k] != sent[k] {
			t.Errorf("event %s: applied %d times, listed %d times; want applied once, listed %d times (as sent)", k, applied[k], listed[k], sent[k])
		}
	}
}
