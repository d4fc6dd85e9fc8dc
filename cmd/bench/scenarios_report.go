package main

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"
)

// statuses renders answers by status, "201 × 20, 409 × 3, none × 1".
func statuses(m map[int]int) string {
	var keys []int
	for k := range m {
		keys = append(keys, k)
	}
	sort.Ints(keys)
	var parts []string
	for _, k := range keys {
		name := strconv.Itoa(k)
		if k == 0 {
			name = "no answer"
		}
		parts = append(parts, fmt.Sprintf("%s × %d", name, m[k]))
	}
	if len(parts) == 0 {
		return "-"
	}
	return strings.Join(parts, ", ")
}

func lats(l latencies) string {
	return msf(l.P50) + " / " + msf(l.P99) + " / " + msf(l.P999)
}

// l1 sums the fixed-rate and half-peak steps of the project: L1's figures.
func (r *results) l1() (steps, fivexx, errors, dropped int) {
	for _, s := range r.Steps {
		if s.Target == "project" && (s.Phase == "fixed" || s.Phase == "half") {
			steps++
			fivexx += s.ServerErrors
			errors += s.Errors
			dropped += s.Dropped
		}
	}
	return
}

// scenarios is the load scenarios (docs/BENCHMARKS.md) and the login flood against
// their targets.
func (r *results) scenarios() table {
	t := table{head: []string{"scenario", "figure", "measured", "target", ""}}
	if n, fivexx, errs, dropped := r.l1(); n > 0 {
		ref := r.refRate()
		t.rows = append(t.rows, []string{"L1 charges, open model", fmt.Sprintf("5xx answers in the %d fixed-rate and half-peak steps (errors %d, dropped %d)", n, errs, dropped),
			strconv.Itoa(fivexx), "0", verdict(fivexx == 0)})
		if p, f := r.at("project", ref), r.at("floor", ref); p != nil {
			floor := ""
			if f != nil {
				floor = fmt.Sprintf("; floor %s, p99 project/floor %s", lats(latencies{P50: f.P50, P99: f.P99, P999: f.P999}), ratio(p.P99.Seconds(), f.P99.Seconds()))
			}
			t.rows = append(t.rows, []string{"L1 charges, open model", "p50 / p99 / p99.9 ms at " + rate(ref) + "/s",
				lats(latencies{P50: p.P50, P99: p.P99, P999: p.P999}) + floor, "reported", ""})
		}
	}
	if l := r.L2; l != nil {
		t.rows = append(t.rows,
			[]string{"L2 one Idempotency-Key", fmt.Sprintf("keys (of %d, %d requests each at once) whose 201s named exactly one charge", l.Keys, l.Concurrent),
				fmt.Sprintf("%d (more: %d, none: %d)", l.OneCharge, l.MoreCharges, l.NoCharge), strconv.Itoa(l.Keys), verdict(l.Pass())},
			[]string{"L2 one Idempotency-Key", "Postgres: idempotency rows / charges / keys with > 1 charge / ledger authorize rows (calls)",
				fmt.Sprintf("%d / %d / %d / %d (%d)", l.DBKeys, l.DBCharges, l.DBDups, l.LedgerAuth, l.LedgerCalls),
				fmt.Sprintf("%d / %d / 0 / %d (%d)", l.Keys, l.Keys, l.Keys, l.Keys), verdict(l.Pass())})
	}
	if l := r.L3; l != nil {
		lim := fmt.Sprintf("≤ %d", l.Limit)
		t.rows = append(t.rows,
			[]string{"L3 one key over its limit, 2 replicas", fmt.Sprintf("most accepted in one trailing %s window, certain / by midpoints", l.Window),
				fmt.Sprintf("%d / %d", l.Certain, l.Likely), lim, l.windowVerdict()},
			[]string{"L3 one key over its limit, 2 replicas", "answers other than 201 and 429", strconv.Itoa(l.others()), "0", verdict(l.others() == 0)},
			[]string{"L3 one key over its limit, 2 replicas", "429s without an integer Retry-After ≥ 1 (of the 429s)",
				fmt.Sprintf("%d (of %d)", l.BadRetryAfter, l.Limited), "0", verdict(l.BadRetryAfter == 0 && l.Limited > 0)})
	}
	if l := r.L4; l != nil {
		t.rows = append(t.rows, []string{"L4 fan-out, slow and failing endpoints",
			fmt.Sprintf("healthy endpoints' commit to first attempt p99 ms (%d/%d delivered)", l.Delivered, l.Expected),
			msf(l.Lat.P99), "< 250", verdict(l.Pass())})
	}
	if l := r.Login; l != nil {
		t.rows = append(t.rows, []string{"login flood", fmt.Sprintf("charge p99 ms at %s/s, alone → beside %s logins/s", rate(l.ChargeRate), rate(l.LoginRate)),
			fmt.Sprintf("%s → %s (%+.1f %%); errors + dropped %d → %d", msf(l.Alone.P99), msf(l.Flood.P99), l.Change,
				l.Alone.Errors+l.Alone.Dropped, l.Flood.Errors+l.Flood.Dropped), "≤ +10 %, no errors", l.verdict()})
	}
	return t
}

// scenarioDetails are the per-scenario tables; md selects Markdown.
func (r *results) scenarioDetails(md bool) string {
	var b strings.Builder
	render := func(title string, t table) {
		if md {
			b.WriteString("\n" + title + "\n\n" + t.markdown())
		} else {
			b.WriteString("\n  " + title + "\n" + t.text())
		}
	}
	line := func(s string) {
		if md {
			b.WriteString("\n" + s + "\n")
		} else {
			b.WriteString("  " + s + "\n")
		}
	}
	if l := r.L2; l != nil {
		t := table{head: []string{"keys", "requests per key", "at once (keys)", "answers", "replayed", "p50 / p99 / p99.9 ms", "max ms", "API µs per request", "took s", "ledger wait s"}}
		t.rows = append(t.rows, []string{strconv.Itoa(l.Raced), strconv.Itoa(l.Concurrent), strconv.Itoa(l.Parallel), statuses(l.Status),
			strconv.Itoa(l.Replayed), lats(l.Lat), msf(l.Lat.Max), usf(l.CPU.Server), secs(l.Wall), secs(l.LedgerWait)})
		render("L2: concurrent requests with one Idempotency-Key (latency from each request's send; bin/worker running):", t)
		for _, n := range l.Notes {
			line("- L2: " + n)
		}
	}
	if l := r.L3; l != nil {
		t := table{head: []string{"limit", "rate/s", "s", "scheduled", "dropped", "answers", "accepted per replica", "Retry-After s", "201 p50 / p99 / p99.9 ms", "429 p50 / p99 / p99.9 ms", "µs per request, 2 replicas"}}
		ra := "-"
		if l.Limited > 0 {
			ra = fmt.Sprintf("%d-%d", l.RetryMin, l.RetryMax)
		}
		t.rows = append(t.rows, []string{fmt.Sprintf("%d/%s", l.Limit, l.Window), rate(l.Rate), secs(l.For), strconv.Itoa(l.Scheduled), strconv.Itoa(l.Dropped),
			statuses(l.Status), fmt.Sprintf("%d + %d", l.PerReplica[0], l.PerReplica[1]), ra, lats(l.LatAccepted), lats(l.LatLimited), usf(l.CPU.Server)})
		render("L3: one key above its limit, alternating between two API replicas (open model):", t)
		for _, n := range l.Notes {
			line("- L3: " + n)
		}
	}
	if l := r.L4; l != nil {
		t := table{head: []string{"charges/s", "s", "charges", "endpoints healthy / slow / failing", "healthy first attempts", "p50 / p99 / p99.9 ms", "max ms", "slow got", "failing got", "waited s", "worker µs per attempt", "API µs per charge"}}
		t.rows = append(t.rows, []string{rate(l.Rate), secs(l.For), strconv.Itoa(l.Charges.OK), fmt.Sprintf("%d / %d (%s) / %d", l.Healthy, l.Slow, l.Delay, l.Failing),
			fmt.Sprintf("%d/%d", l.Delivered, l.Expected), lats(l.Lat), msf(l.Lat.Max), strconv.Itoa(l.SlowGot), strconv.Itoa(l.FailingGot), secs(l.Waited),
			usf(l.CPUWorker), usf(l.CPUAPI)})
		render("L4: charge.created fan-out (receipt minus the event's created_at, first attempt per endpoint and event):", t)
		for _, n := range l.Notes {
			line("- L4: " + n)
		}
	}
	if l := r.Login; l != nil {
		t := table{head: []string{"charges", "steps", "charges/s ok", "p50 ms", "p99 ms", "p99.9 ms", "max ms", "errors", "dropped", "API µs", "pg µs", "redis µs"}}
		for _, c := range []struct {
			name  string
			s     summary
			steps []summary
			cpu   cpuUse
		}{{"alone", l.Alone, l.AloneSteps, l.CPUAlone}, {fmt.Sprintf("beside %s logins/s", rate(l.LoginRate)), l.Flood, l.FloodSteps, l.CPUFlood}} {
			var p99s []string
			for _, s := range c.steps {
				p99s = append(p99s, msf(s.P99))
			}
			t.rows = append(t.rows, []string{c.name, fmt.Sprintf("%d (p99s %s)", len(c.steps), strings.Join(p99s, ", ")), rate(c.s.Achieved),
				msf(c.s.P50), msf(c.s.P99), msf(c.s.P999), msf(c.s.Max), strconv.Itoa(c.s.Errors), strconv.Itoa(c.s.Dropped),
				usf(c.cpu.Server), usf(c.cpu.Postgres), usf(c.cpu.Redis)})
		}
		render(fmt.Sprintf("Login flood: charges at %s/s, %s steps alone and beside the flood, pooled (CPU per charge; the flood's hashing is in it). MAX_CONCURRENT_HASHES %s:",
			rate(l.ChargeRate), l.Step, l.MaxHashes), t)
		var drains []string
		for _, d := range l.Drain {
			drains = append(drains, secs(d))
		}
		line(fmt.Sprintf("Logins (%s/s, 1 in 10 right, 8 wrong passwords, 1 unknown email): %s; dropped %d; p50 / p99 / p99.9 %s ms. "+
			"After each flood step a login with a wrong password took over 0.5 s for another %s s (the queue of logins waiting for a hash).",
			rate(l.LoginRate), statuses(l.Logins), l.LoginDropped, lats(l.LoginLat), strings.Join(drains, ", ")))
	}
	return b.String()
}

func secs(d time.Duration) string { return strconv.FormatFloat(d.Seconds(), 'f', 1, 64) }
