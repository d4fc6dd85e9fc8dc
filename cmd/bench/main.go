// Command bench measures POST /v1/charges the way docs/BENCHMARKS.md
// describes: on a fresh database, a private redis-server and the real bin/api,
// with an open-model load (constant arrival rate, latency from the scheduled
// send), next to a floor program that does only the unavoidable I/O of one
// charge, alternating the two in one run and reading the CPU of every server
// process from /proc. It prints a table, draws SVG plots of the steps into
// docs/img and rewrites the results section of docs/BENCHMARKS.md. `make
// bench` runs it; "bench floor" is the floor server, started by the harness
// itself.
//
// Everything it starts listens on 127.0.0.1, and every load step stops by
// itself in time and in count.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr))
}

// options are the harness's flags.
type options struct {
	api         string
	redisServer string
	dbURL       string
	doc         string
	plots       string // directory of the SVG plots; "" draws none
	floorTables string
	step        time.Duration
	warmup      time.Duration
	settle      time.Duration
	quiet       time.Duration
	closedFor   time.Duration
	timeout     time.Duration
	slo         time.Duration
	rates       []float64
	maxInflight int
	workers     int
	searchSteps int
	perf        bool
	keep        bool

	webhooks         bool
	worker           string
	webhookRates     []float64
	webhookStep      time.Duration
	webhookCount     int
	webhookEndpoints int
	webhookWait      time.Duration
	webhookHold      time.Duration
	webhookHoldRate  float64
	webhookOrdered   bool

	pathRates  []float64 // events/s
	pathHold   time.Duration
	pathWait   time.Duration
	pathSearch int

	scenarios    map[string]bool // l1, l2, l3, l4, login, webhooks
	l2Keys       int
	l2Concurrent int
	l2Parallel   int
	l3Limit      string
	l3Rate       float64
	l3For        time.Duration
	l4Rate       float64
	l4For        time.Duration
	l4Healthy    int
	l4Slow       int
	l4Failing    int
	l4Delay      time.Duration
	l4Wait       time.Duration
	loginRate    float64
	chargeRate   float64
	loginStep    time.Duration
	loginReps    int
}

// allScenarios are the -scenarios names, in run order.
var allScenarios = []string{"webhooks", "path", "l2", "l4", "l1", "l3", "login"}

func parseOptions(args []string, getenv func(string) string, stderr io.Writer) (options, error) {
	var o options
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	dbDefault := getenv("TEST_DATABASE_URL")
	if dbDefault == "" {
		dbDefault = "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"
	}
	fs.StringVar(&o.api, "api", "bin/api", "the API binary (make build)")
	fs.StringVar(&o.redisServer, "redis-server", "redis-server", "the redis-server binary; a private one is started on a free port")
	fs.StringVar(&o.dbURL, "db", dbDefault, "a Postgres server URL; a fresh database is created on it and dropped at the end")
	fs.StringVar(&o.floorTables, "floor-tables", "copy", "the floor's tables: copy (the project's columns, checks and indexes) or lean (columns and primary keys only)")
	fs.StringVar(&o.doc, "doc", "docs/BENCHMARKS.md", `file whose results section is rewritten ("" to skip)`)
	fs.StringVar(&o.plots, "plots", "", `directory the SVG plots are drawn into ("" for none; default: img beside -doc, none without -doc)`)
	fs.DurationVar(&o.step, "step", 5*time.Second, "length of one open-model step")
	fs.DurationVar(&o.warmup, "warmup", 2*time.Second, "unreported warm-up of each server at 1000/s")
	fs.DurationVar(&o.settle, "settle", time.Second, "pause between steps")
	fs.DurationVar(&o.quiet, "quiet", 20*time.Second, "most time the run waits, in all, for other processes on the machine to quiet down before steps")
	fs.DurationVar(&o.closedFor, "closed", 5*time.Second, "length of the closed-loop peak step")
	fs.DurationVar(&o.timeout, "timeout", 5*time.Second, "per-request timeout")
	fs.DurationVar(&o.slo, "slo", 10*time.Millisecond, "p99 a step must stay under to pass")
	rates := fs.String("rates", "500,1000,2000", "fixed open-model rates (requests/s), comma-separated")
	fs.IntVar(&o.maxInflight, "max-inflight", 512, "outstanding requests at most; a due request beyond it is dropped")
	fs.IntVar(&o.workers, "workers", 32, "closed-loop workers")
	fs.IntVar(&o.searchSteps, "search-steps", 5, "steps per server searching the highest rate with p99 under -slo")
	fs.BoolVar(&o.perf, "perf", false, "also profile both servers with perf(1) at 1000/s and report where the CPU goes")
	fs.BoolVar(&o.keep, "keep", false, "keep the database and the logs")
	fs.BoolVar(&o.webhooks, "webhooks", true, "also measure webhook deliveries through bin/worker (before the charge steps)")
	fs.StringVar(&o.worker, "worker", "bin/worker", "the worker binary (make build), for -webhooks")
	whRates := fs.String("webhook-rates", "200,500,1000", "open-model charge rates (charges/s) at which commit-to-first-attempt latency is measured, -webhook-step each")
	fs.Float64Var(&o.webhookHoldRate, "webhook-hold-rate", 1000, "charges/s of the held commit-to-first-attempt step")
	fs.DurationVar(&o.webhookHold, "webhook-hold", 60*time.Second, "length of the held step (0 skips it)")
	fs.DurationVar(&o.webhookStep, "webhook-step", 5*time.Second, "length of one webhook latency step")
	fs.BoolVar(&o.webhookOrdered, "webhook-ordered", true, "also drain a backlog of charge.created and charge.captured to unordered, then ordered endpoints (one worker): the cost of ordered delivery")
	fs.IntVar(&o.webhookEndpoints, "webhook-endpoints", 3, "endpoints subscribed to charge.created, each on its own port of the receiver: a charge is this many deliveries")
	fs.IntVar(&o.webhookCount, "webhook-count", 3000, "charges created for each delivery backlog (one worker, two workers); each floor runs this many tasks per endpoint")
	fs.DurationVar(&o.webhookWait, "webhook-wait", 60*time.Second, "most time a webhook step waits for its deliveries")
	pathRates := fs.String("path-rates", "200,500,1000,2000", "path scenario: event rates (events/s, two per captured charge) each held -path-hold")
	fs.DurationVar(&o.pathHold, "path-hold", 60*time.Second, "path scenario: length of each step")
	fs.DurationVar(&o.pathWait, "path-wait", 30*time.Second, "path scenario: most time a step waits for its deliveries after it ends")
	fs.IntVar(&o.pathSearch, "path-search", 3, "path scenario: steps of the search for the highest rate that holds, after -path-rates")
	scen := fs.String("scenarios", "l1,l2,l3,l4,login,webhooks,path", "scenarios to run, comma-separated: l1 (charge steps next to the floor), l2 (one Idempotency-Key, concurrent), "+
		"l3 (rate limit on two replicas), l4 (webhook fan-out with slow and failing endpoints), login (charges beside a login flood), webhooks (delivery latency and throughput), "+
		"path (charges authorized, captured and their events delivered to one endpoint, held steps)")
	fs.IntVar(&o.l2Keys, "l2-keys", 1000, "L2: Idempotency-Keys, each sent by -l2-concurrent requests at once")
	fs.IntVar(&o.l2Concurrent, "l2-concurrent", 20, "L2: concurrent requests per key")
	fs.IntVar(&o.l2Parallel, "l2-parallel", 2, "L2: keys raced at the same time")
	fs.StringVar(&o.l3Limit, "l3-limit", "100/10s", "L3: RATE_LIMIT_CHARGES of the two replicas")
	fs.Float64Var(&o.l3Rate, "l3-rate", 100, "L3: open-model charges/s with one key, spread over the two replicas")
	fs.DurationVar(&o.l3For, "l3-for", 25*time.Second, "L3: length of the load")
	fs.Float64Var(&o.l4Rate, "l4-rate", 20, "L4: open-model charges/s, each fanned out to every endpoint")
	fs.DurationVar(&o.l4For, "l4-for", 10*time.Second, "L4: length of the load")
	fs.IntVar(&o.l4Healthy, "l4-healthy", 8, "L4: endpoints answering 200 at once")
	fs.IntVar(&o.l4Slow, "l4-slow", 4, "L4: endpoints answering 200 after -l4-delay")
	fs.IntVar(&o.l4Failing, "l4-failing", 4, "L4: endpoints answering 500")
	fs.DurationVar(&o.l4Delay, "l4-delay", 2*time.Second, "L4: the slow endpoints' delay")
	fs.DurationVar(&o.l4Wait, "l4-wait", 30*time.Second, "L4: most time waited after the load for the healthy endpoints' deliveries")
	fs.Float64Var(&o.loginRate, "login-rate", 50, "login flood: open-model logins/s (8 in 10 with a wrong password, 1 with an unknown email)")
	fs.Float64Var(&o.chargeRate, "login-charge-rate", 300, "login flood: open-model charges/s, alone and beside the flood")
	fs.DurationVar(&o.loginStep, "login-step", 8*time.Second, "login flood: length of one step")
	fs.IntVar(&o.loginReps, "login-reps", 2, "login flood: steps per condition (alone, flood), in the order alone, flood, flood, alone, ...")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	o.plots = plotsDir(fs, o.doc, o.plots)
	for _, r := range strings.Split(*rates, ",") {
		if r = strings.TrimSpace(r); r == "" {
			continue
		}
		v, err := strconv.ParseFloat(r, 64)
		if err != nil || v <= 0 || v > 100_000 {
			return o, fmt.Errorf("-rates: %q is not a rate from 1 to 100000", r)
		}
		o.rates = append(o.rates, v)
	}
	for _, r := range strings.Split(*whRates, ",") {
		if r = strings.TrimSpace(r); r == "" {
			continue
		}
		v, err := strconv.ParseFloat(r, 64)
		if err != nil || v <= 0 || v > 10_000 {
			return o, fmt.Errorf("-webhook-rates: %q is not a rate from 1 to 10000", r)
		}
		o.webhookRates = append(o.webhookRates, v)
	}
	if o.webhookStep <= 0 || o.webhookStep > time.Minute || o.webhookWait <= 0 || o.webhookWait > 5*time.Minute {
		return o, fmt.Errorf("-webhook-step must be within (0, 1m] and -webhook-wait within (0, 5m]")
	}
	if o.webhookEndpoints < 1 || o.webhookEndpoints > 16 {
		return o, fmt.Errorf("-webhook-endpoints must be from 1 to 16")
	}
	if o.webhookCount < 1 || o.webhookCount > 100_000 {
		return o, fmt.Errorf("-webhook-count must be from 1 to 100000")
	}
	if o.webhookHold < 0 || o.webhookHold > 5*time.Minute || o.webhookHoldRate <= 0 || o.webhookHoldRate > 10_000 {
		return o, fmt.Errorf("-webhook-hold must be within [0, 5m] and -webhook-hold-rate from 1 to 10000")
	}
	var err error
	if o.pathRates, err = parseRates("-path-rates", *pathRates, 20_000); err != nil {
		return o, err
	}
	if o.pathHold < time.Second || o.pathHold > 10*time.Minute || o.pathWait <= 0 || o.pathWait > 5*time.Minute || o.pathSearch < 0 || o.pathSearch > 10 {
		return o, fmt.Errorf("-path-hold must be within [1s, 10m], -path-wait within (0, 5m] and -path-search from 0 to 10")
	}
	o.scenarios = map[string]bool{}
	for _, n := range strings.Split(*scen, ",") {
		if n = strings.ToLower(strings.TrimSpace(n)); n == "" {
			continue
		}
		if !slices.Contains(allScenarios, n) {
			return o, fmt.Errorf("-scenarios: unknown %q (know %s)", n, strings.Join(allScenarios, ", "))
		}
		o.scenarios[n] = true
	}
	o.webhooks = o.webhooks && o.scenarios["webhooks"]
	if o.l2Keys < 1 || o.l2Keys > 100_000 || o.l2Concurrent < 1 || o.l2Concurrent > 200 || o.l2Parallel < 1 || o.l2Parallel > 50 {
		return o, fmt.Errorf("-l2-keys must be from 1 to 100000, -l2-concurrent from 1 to 200, -l2-parallel from 1 to 50")
	}
	if _, _, err := parseLimit(o.l3Limit); err != nil {
		return o, fmt.Errorf("-l3-limit: %w", err)
	}
	for _, r := range []float64{o.l3Rate, o.l4Rate, o.loginRate, o.chargeRate} {
		if r <= 0 || r > 10_000 {
			return o, fmt.Errorf("-l3-rate, -l4-rate, -login-rate and -login-charge-rate must be from 1 to 10000")
		}
	}
	for _, d := range []time.Duration{o.l3For, o.l4For, o.l4Delay, o.l4Wait, o.loginStep} {
		if d <= 0 || d > 2*time.Minute {
			return o, fmt.Errorf("-l3-for, -l4-for, -l4-delay, -l4-wait and -login-step must be within (0, 2m]")
		}
	}
	if o.l4Healthy < 1 || o.l4Healthy+o.l4Slow+o.l4Failing > 100 || o.l4Slow < 0 || o.l4Failing < 0 || o.loginReps < 1 || o.loginReps > 10 {
		return o, fmt.Errorf("L4 needs 1 to 100 endpoints with at least one healthy; -login-reps must be from 1 to 10")
	}
	if o.step <= 0 || o.step > time.Minute || o.closedFor <= 0 || o.closedFor > time.Minute {
		return o, fmt.Errorf("-step and -closed must be within (0, 1m]")
	}
	if o.floorTables != "copy" && o.floorTables != "lean" {
		return o, fmt.Errorf("-floor-tables must be copy or lean")
	}
	if o.maxInflight < 1 || o.workers < 1 {
		return o, fmt.Errorf("-max-inflight and -workers must be positive")
	}
	return o, nil
}

// plotsDir is where the plots go: -plots when it was given, else the
// directory img beside the doc, and nowhere without a doc.
func plotsDir(fs *flag.FlagSet, doc, plots string) string {
	given := false
	fs.Visit(func(f *flag.Flag) { given = given || f.Name == "plots" })
	if given || doc == "" {
		return plots
	}
	return filepath.Join(filepath.Dir(doc), "img")
}

// run is the whole program; it returns the exit code.
func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	if len(args) > 0 && args[0] == "webhook-floor" {
		if err := serveWebhookFloor(ctx, args[1:]); err != nil {
			fmt.Fprintln(stderr, "bench webhook-floor:", err)
			return 1
		}
		return 0
	}
	if len(args) > 0 && args[0] == "floor" {
		if err := serveFloor(ctx, args[1:], getenv); err != nil {
			fmt.Fprintln(stderr, "bench floor:", err)
			return 1
		}
		return 0
	}
	o, err := parseOptions(args, getenv, stderr)
	if err != nil {
		fmt.Fprintln(stderr, "bench:", err)
		return 2
	}
	// The dispatcher sleeps on a locked thread; one more P keeps the request
	// goroutines from waiting for it.
	runtime.GOMAXPROCS(runtime.NumCPU() + 1)

	e := &environment{o: o, log: stderr, quietLeft: o.quiet}
	defer e.close()
	e.logf("setting up (fresh database, private redis-server, %s, floor)", o.api)
	if err := e.setup(ctx); err != nil {
		fmt.Fprintln(stderr, "bench: setup:", err)
		return 1
	}
	res, err := measure(ctx, e)
	if err != nil {
		fmt.Fprintln(stderr, "bench:", err)
		return 1
	}
	fmt.Fprint(stdout, res.text())
	code := 0
	if o.plots != "" {
		var err error
		if res.Plots, err = writePlots(res, o.plots); err != nil {
			fmt.Fprintln(stderr, "bench: plots:", err)
			code = 1
		}
		for _, p := range res.Plots {
			e.logf("drew %s", p.Path)
		}
	}
	if o.doc != "" {
		if err := writeDoc(o.doc, res.markdown()); err != nil {
			fmt.Fprintln(stderr, "bench: write", o.doc+":", err)
			return 1
		}
		e.logf("wrote the results to %s", o.doc)
	}
	return code
}
