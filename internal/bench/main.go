// Command bench measures POST /v1/charges the way docs/BENCHMARKS.md
// describes: on a fresh database, a private redis-server and the real bin/api,
// with an open-model load (constant arrival rate, latency from the scheduled
// send), next to a floor program that does only the unavoidable I/O of one
// charge, alternating the two in one run and reading the CPU of every server
// process from /proc. It prints a table and rewrites the results section of
// docs/BENCHMARKS.md. `make bench` runs it; "bench floor" is the floor server,
// started by the harness itself.
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
	"runtime"
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

	webhooks     bool
	worker       string
	webhookRates []float64
	webhookStep  time.Duration
	webhookCount int
	webhookWait  time.Duration
	floorSenders []int
}

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
	whRates := fs.String("webhook-rates", "200,500", "open-model charge rates (charges/s) at which commit-to-first-attempt latency is measured")
	fs.DurationVar(&o.webhookStep, "webhook-step", 5*time.Second, "length of one webhook latency step")
	fs.IntVar(&o.webhookCount, "webhook-count", 3000, "charges created in a burst for the delivery-throughput step, and signed POSTs of the floor")
	fs.DurationVar(&o.webhookWait, "webhook-wait", 60*time.Second, "most time a webhook step waits for its deliveries")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
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
	if o.webhookCount < 1 || o.webhookCount > 100_000 {
		return o, fmt.Errorf("-webhook-count must be from 1 to 100000")
	}
	o.floorSenders = []int{4, 20}
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

// run is the whole program; it returns the exit code.
func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) int {
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
	if o.doc != "" {
		if err := writeDoc(o.doc, res.markdown()); err != nil {
			fmt.Fprintln(stderr, "bench: write", o.doc+":", err)
			return 1
		}
		e.logf("wrote the results to %s", o.doc)
	}
	return 0
}
