package main

import (
	"context"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
)

// step is one measured load step against one server.
type step struct {
	Phase   string // closed, fixed, half, search
	Target  string // project or floor
	Rate    float64
	Workers int
	Dur     time.Duration
	summary
	CPU cpuUse
	// RedisCalls are Redis commands per request by name; RedisUsec the
	// time Redis spent executing them per request.
	RedisCalls map[string]float64
	RedisUsec  float64
	Pass       bool
}

// results are one run's figures.
type results struct {
	Start, End time.Time
	Host       hostInfo
	Opts       options
	Steps      []step
	Max        map[string]float64 // highest rate that passed, by target
	MaxFail    map[string]float64 // lowest rate above Max that failed, by target (0: none)
	failed     map[string][]float64
	Half       float64           // half the project's closed-loop peak
	Profiles   map[string]string // perf summaries by target
	Noise      []summary         // the do-nothing server, at the start and at the end
	Webhooks   *webhookResults   // nil without -webhooks
	Path       *pathResult       // nil without the path scenario
	L2         *l2Result         // nil when the scenario did not run
	L3         *l3Result
	L4         *l4Result
	Login      *loginResult
	Notes      []string
	Plots      []plotFile // the plots drawn from this run, for the results section
}

type hostInfo struct {
	CPUs     int
	Model    string
	Kernel   string
	Go       string
	Postgres string
	Redis    string
}

func (e *environment) host(ctx context.Context) hostInfo {
	h := hostInfo{CPUs: runtime.NumCPU(), Go: runtime.Version()}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(l, ":"); ok && strings.TrimSpace(k) == "model name" {
				h.Model = strings.TrimSpace(v)
				break
			}
		}
	}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		h.Kernel = strings.TrimSpace(string(b))
	}
	_ = e.db.query(ctx, "SELECT current_setting('server_version')", nil, &h.Postgres)
	if info, err := e.rdb.info(ctx, "server"); err == nil {
		h.Redis = infoField(info, "redis_version")
	}
	return h
}

func infoField(info, name string) string {
	for _, l := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(l), name+":"); ok {
			return v
		}
	}
	return ""
}

type cmdStat struct{ calls, usec float64 }

// commandStats parses INFO commandstats.
func (e *environment) commandStats(ctx context.Context) map[string]cmdStat {
	out := map[string]cmdStat{}
	info, err := e.rdb.info(ctx, "commandstats")
	if err != nil {
		return out
	}
	for _, l := range strings.Split(info, "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(l), ":")
		name, isCmd := strings.CutPrefix(name, "cmdstat_")
		if !ok || !isCmd || name == "info" {
			continue
		}
		var s cmdStat
		for _, kv := range strings.Split(rest, ",") {
			k, v, _ := strings.Cut(kv, "=")
			f, _ := strconv.ParseFloat(v, 64)
			switch k {
			case "calls":
				s.calls = f
			case "usec":
				s.usec = f
			}
		}
		out[name] = s
	}
	return out
}

func (e *environment) target(name string) *target {
	if name == "floor" {
		return e.floor
	}
	return e.api
}

// runStep runs one step against t: open model at rate, or closed loop with
// workers when rate is 0, reading CPU and Redis counters around it.
func (e *environment) runStep(ctx context.Context, phase string, t *target, rate float64) step {
	s := step{Phase: phase, Target: t.name, Rate: rate, Dur: e.o.step}
	redisBefore := e.commandStats(ctx)
	before := takeSnapshot(t.pid(), e.redisPID(), e.postmaster, e.dbName)
	var rec *recording
	if rate > 0 {
		rec = openModel(ctx, t.client, rate, e.o.step, e.o.maxInflight, e.o.timeout)
	} else {
		s.Workers, s.Dur = e.o.workers, e.o.closedFor
		limit := int(e.o.closedFor.Seconds() * 50_000) // a bound in count, far above this box's peak
		rec = closedLoop(ctx, t.client, e.o.workers, e.o.closedFor, limit, e.o.timeout)
	}
	after := takeSnapshot(t.pid(), e.redisPID(), e.postmaster, e.dbName)
	redisAfter := e.commandStats(ctx)
	s.summary = summarize(rec)
	s.CPU = cpuBetween(before, after, s.Completed)
	if s.Completed > 0 {
		s.RedisCalls = map[string]float64{}
		for name, a := range redisAfter {
			d := a.calls - redisBefore[name].calls
			if d > 0 {
				s.RedisCalls[name] = d / float64(s.Completed)
				s.RedisUsec += (a.usec - redisBefore[name].usec) / float64(s.Completed)
			}
		}
	}
	bad := s.Errors + s.Dropped
	s.Pass = s.Completed > 0 && s.P99 < e.o.slo && float64(bad) <= 0.001*float64(s.Scheduled)
	e.logf("%-6s %-7s %s", phase, t.name, s.brief())
	return s
}

func (s step) brief() string {
	load := fmt.Sprintf("%5.0f/s", s.Rate)
	if s.Rate == 0 {
		load = fmt.Sprintf("%d workers", s.Workers)
	}
	verdict := "pass"
	if !s.Pass {
		verdict = "FAIL"
	}
	return fmt.Sprintf("%s: %6.0f/s ok, p50 %s p99 %s, %d errors, %d dropped, CPU %s/req (server %s), %s",
		load, s.Achieved, ms(s.P50), ms(s.P99), s.Errors, s.Dropped, us(s.CPU.Total()), us(s.CPU.Server), verdict)
}

func ms(d time.Duration) string { return msf(d) + "ms" }
func us(d time.Duration) string { return strconv.FormatFloat(d.Seconds()*1e6, 'f', 0, 64) + "µs" }

// pair runs a step against both servers, in the given order.
func (e *environment) pair(ctx context.Context, res *results, phase string, rate float64, floorFirst bool) {
	order := []*target{e.api, e.floor}
	if floorFirst {
		order = []*target{e.floor, e.api}
	}
	for _, t := range order {
		if ctx.Err() != nil {
			return
		}
		res.Steps = append(res.Steps, e.runStep(ctx, phase, t, rate))
		e.pause(ctx)
	}
}

// pause lets the servers settle between steps, then waits, within the run's
// budget (-quiet), until other processes use at most a third of a core, so
// fewer steps are measured while a build or a test suite runs beside them.
func (e *environment) pause(ctx context.Context) {
	select {
	case <-ctx.Done():
		return
	case <-time.After(e.o.settle):
	}
	pids := []int{e.redisPID()}
	for _, t := range []*target{e.api, e.floor} {
		pids = append(pids, t.pid())
	}
	for e.quietLeft > 0 && ctx.Err() == nil {
		const probe = 500 * time.Millisecond
		if othersCores(probe, pids, e.postmaster, e.dbName) <= 0.33 {
			return
		}
		e.quietLeft -= probe
		e.waited += probe
	}
}

func roundRate(r float64) float64 { return math.Max(50, math.Round(r/50)*50) }

// measure runs the whole schedule: warm-up, closed-loop peak, the fixed
// rates, half the project's peak, then a search for each server's highest
// rate with p99 under the SLO. Project and floor alternate throughout, and
// which goes first alternates too, so drift on a shared machine hits both.
func measure(ctx context.Context, e *environment) (*results, error) {
	res := &results{Start: time.Now().UTC(), Opts: e.o, Host: e.host(ctx),
		Max: map[string]float64{}, MaxFail: map[string]float64{}, failed: map[string][]float64{}, Profiles: map[string]string{}}
	if e.o.webhooks {
		// First, so the worker never meets the charge steps' pile of
		// charge:authorize tasks; the endpoint is deleted afterwards.
		res.Webhooks = e.measureWebhooks(ctx)
		e.pause(ctx)
	}
	if e.o.scenarios["path"] && ctx.Err() == nil {
		res.Path = e.runPath(ctx)
		e.pause(ctx)
	}
	// The worker runs during L2 and L4 only, before the charge steps leave
	// their pile of charge:authorize tasks in Redis.
	if e.o.scenarios["l2"] && ctx.Err() == nil {
		res.L2 = e.runL2(ctx)
		e.pause(ctx)
	}
	if e.o.scenarios["l4"] && ctx.Err() == nil {
		res.L4 = e.runL4(ctx)
		e.pause(ctx)
	}
	if e.o.scenarios["l1"] {
		e.chargeSteps(ctx, res)
	} else {
		res.Noise = append(res.Noise, e.noiseFloor(ctx))
	}
	if e.o.scenarios["l3"] && ctx.Err() == nil {
		res.L3 = e.runL3(ctx)
		e.pause(ctx)
	}
	if e.o.scenarios["login"] && ctx.Err() == nil {
		res.Login = e.runLogin(ctx)
	}
	res.Noise = append(res.Noise, e.noiseFloor(ctx))
	if e.waited > 0 {
		res.Notes = append(res.Notes, fmt.Sprintf("The harness waited %s in all for other processes to quiet down between steps (budget %s).",
			e.waited.Round(100*time.Millisecond), e.o.quiet))
	}
	res.End = time.Now().UTC()
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("interrupted: %w", err)
	}
	return res, nil
}

// chargeSteps is L1: the charge steps next to the floor, warm-up, closed-loop
// peak, fixed rates, half the peak, the search and the profiles.
func (e *environment) chargeSteps(ctx context.Context, res *results) {
	for _, t := range []*target{e.api, e.floor} {
		rec := openModel(ctx, t.client, 1000, e.o.warmup, e.o.maxInflight, e.o.timeout)
		if w := summarize(rec); w.Errors > 0 {
			res.Notes = append(res.Notes, fmt.Sprintf("%s warm-up: %d errors (%s)", t.name, w.Errors, strings.Join(w.Samples, "; ")))
		}
		e.pause(ctx)
	}

	res.Noise = append(res.Noise, e.noiseFloor(ctx))
	e.pause(ctx)

	flip := false
	e.pair(ctx, res, "closed", 0, flip)
	for _, r := range e.o.rates {
		flip = !flip
		e.pair(ctx, res, "fixed", r, flip)
	}
	if peak := res.find("closed", "project", 0); peak != nil && peak.Achieved > 0 {
		res.Half = roundRate(peak.Achieved / 2)
		flip = !flip
		e.pair(ctx, res, "half", res.Half, flip)
	}

	// The search starts from what the fixed steps showed.
	for _, s := range res.Steps {
		if s.Phase == "fixed" || s.Phase == "half" {
			res.observe(s)
		}
	}
	for range e.o.searchSteps {
		flip = !flip
		order := []string{"project", "floor"}
		if flip {
			order = []string{"floor", "project"}
		}
		progressed := false
		for _, name := range order {
			rate, ok := res.nextRate(name)
			if !ok || ctx.Err() != nil {
				continue
			}
			s := e.runStep(ctx, "search", e.target(name), rate)
			res.Steps = append(res.Steps, s)
			res.observe(s)
			progressed = true
			e.pause(ctx)
		}
		if !progressed {
			break
		}
	}

	if e.o.perf && ctx.Err() == nil {
		for _, t := range []*target{e.api, e.floor} {
			p, err := e.profile(ctx, t, 1000)
			if err != nil {
				res.Notes = append(res.Notes, fmt.Sprintf("perf on %s: %v", t.name, err))
				continue
			}
			res.Profiles[t.name] = p
			e.pause(ctx)
		}
	}
}

// noiseFloor runs the open model at 1000/s for 3 s against a server inside
// the harness that answers 201 at once: what this machine, at this moment,
// adds to any latency by itself.
func (e *environment) noiseFloor(ctx context.Context) summary {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return summary{}
	}
	body := []byte(`{"object":"charge","status":"created"}`)
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write(body)
	})}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Close()
	c := newClient(ln.Addr().String(), "Bearer none", "noise-", new(atomic.Int64))
	defer c.closeIdle()
	s := summarize(openModel(ctx, c, 1000, 3*time.Second, e.o.maxInflight, e.o.timeout))
	e.logf("noise  null    1000/s: p50 %s p99 %s, generator lag p99 %s", ms(s.P50), ms(s.P99), ms(s.LagP99))
	return s
}

func (r *results) find(phase, target string, rate float64) *step {
	for i := range r.Steps {
		s := &r.Steps[i]
		if s.Phase == phase && s.Target == target && (rate == 0 || s.Rate == rate) {
			return s
		}
	}
	return nil
}

// at returns the step of target at rate from the fixed or half phases.
func (r *results) at(target string, rate float64) *step {
	if s := r.find("fixed", target, rate); s != nil {
		return s
	}
	return r.find("half", target, rate)
}

func (r *results) observe(s step) {
	if s.Rate == 0 {
		return
	}
	if s.Pass {
		r.Max[s.Target] = math.Max(r.Max[s.Target], s.Rate)
	} else {
		r.failed[s.Target] = append(r.failed[s.Target], s.Rate)
	}
	// A failure below a pass is noise of the shared machine: the bracket is
	// the highest pass and the lowest failure above it.
	r.MaxFail[s.Target] = 0
	for _, f := range r.failed[s.Target] {
		if f > r.Max[s.Target] && (r.MaxFail[s.Target] == 0 || f < r.MaxFail[s.Target]) {
			r.MaxFail[s.Target] = f
		}
	}
}

// nextRate grows the rate by half while steps pass, then bisects between the
// highest pass and the lowest failure until they are within 5 %.
func (r *results) nextRate(target string) (float64, bool) {
	lo, hi := r.Max[target], r.MaxFail[target]
	var next float64
	switch {
	case hi == 0 && lo == 0:
		next = 1000
	case hi == 0:
		next = roundRate(lo * 1.5)
	default:
		if hi-lo <= math.Max(100, 0.05*lo) {
			return 0, false
		}
		next = roundRate((lo + hi) / 2)
		if next <= lo || next >= hi {
			return 0, false
		}
	}
	return next, true
}

// profile runs t at rate for one step under perf(1) and summarises where
// the server's CPU went, by package and by function.
func (e *environment) profile(ctx context.Context, t *target, rate float64) (string, error) {
	perf, err := exec.LookPath("perf")
	if err != nil {
		return "", fmt.Errorf("perf not installed")
	}
	data := filepath.Join(e.dir, t.name+".perf.data")
	secs := strconv.FormatFloat(e.o.step.Seconds(), 'f', 1, 64)
	rec := exec.CommandContext(ctx, perf, "record", "-q", "-F", "999", "-p", strconv.Itoa(t.pid()), "-o", data, "--", "sleep", secs)
	if err := rec.Start(); err != nil {
		return "", err
	}
	s := e.runStep(ctx, "perf", t, rate)
	if err := rec.Wait(); err != nil {
		return "", fmt.Errorf("perf record: %w", err)
	}
	out, err := exec.CommandContext(ctx, perf, "report", "-i", data, "--stdio", "--no-children", "--sort", "sym", "-q").Output()
	if err != nil {
		return "", fmt.Errorf("perf report: %w", err)
	}
	return fmt.Sprintf("%s at %.0f/s (%s CPU per request in the server):\n%s", t.name, rate, us(s.CPU.Server), summarizePerf(string(out))), nil
}

// summarizePerf folds perf's flat profile into packages and lists the top
// functions.
func summarizePerf(report string) string {
	type entry struct {
		name string
		pct  float64
	}
	var funcs []entry
	pkgs := map[string]float64{}
	for _, l := range strings.Split(report, "\n") {
		f := strings.Fields(l)
		if len(f) < 3 || !strings.HasSuffix(f[0], "%") {
			continue
		}
		pct, err := strconv.ParseFloat(strings.TrimSuffix(f[0], "%"), 64)
		if err != nil {
			continue
		}
		sym := strings.Join(f[2:], " ")
		funcs = append(funcs, entry{sym, pct})
		pkgs[perfPackage(f[1], sym)] += pct
	}
	var byPkg []entry
	for k, v := range pkgs {
		byPkg = append(byPkg, entry{k, v})
	}
	sort.Slice(byPkg, func(i, j int) bool { return byPkg[i].pct > byPkg[j].pct })
	var b strings.Builder
	b.WriteString("  by package:\n")
	for _, p := range byPkg[:min(len(byPkg), 14)] {
		fmt.Fprintf(&b, "    %5.1f%%  %s\n", p.pct, p.name)
	}
	b.WriteString("  top functions:\n")
	for _, f := range funcs[:min(len(funcs), 15)] {
		fmt.Fprintf(&b, "    %5.1f%%  %s\n", f.pct, f.name)
	}
	return b.String()
}

// perfPackage names the package of a Go symbol ("[.] pkg/path.Func"), or
// "kernel" for a kernel one ("[k]").
func perfPackage(kind, sym string) string {
	if kind == "[k]" {
		return "kernel (syscalls, network, scheduler)"
	}
	if strings.HasPrefix(sym, "0x") {
		return "unknown"
	}
	if i := strings.IndexAny(sym, "[("); i >= 0 { // generic shapes and receivers may hold slashes
		sym = sym[:i]
	}
	slash := strings.LastIndexByte(sym, '/')
	if dot := strings.IndexByte(sym[slash+1:], '.'); dot >= 0 {
		sym = sym[:slash+1+dot]
	}
	switch {
	case sym == "runtime" || strings.HasPrefix(sym, "runtime/"):
		return "runtime (GC, allocation, scheduler)"
	case strings.HasPrefix(sym, "github.com/gatehouse-pay/gatehouse/"):
		return strings.TrimPrefix(sym, "github.com/gatehouse-pay/gatehouse/")
	}
	return sym
}
