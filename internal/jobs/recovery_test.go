package jobs_test

import (
	"bufio"
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"

	"github.com/gatehouse-pay/gatehouse/internal/jobs"
	"github.com/gatehouse-pay/gatehouse/internal/testenv"
)

// The worker process the recovery tests kill or stop: the test binary run
// again with recoveryHelperEnv set.
const recoveryHelperEnv = "GATEHOUSE_RECOVERY_HELPER"

const recoveryQueue = "recovery-test"

func TestMain(m *testing.M) {
	if os.Getenv(recoveryHelperEnv) != "" {
		os.Exit(recoveryHelper())
	}
	os.Exit(m.Run())
}

// recoveryHelper is a worker on recoveryQueue with Recovery, as cmd/worker
// runs one: it prints "running <task id>" when a task starts, holds it for
// GATEHOUSE_RECOVERY_HOLD, prints "done <task id>" and ends it; SIGTERM
// shuts it down as the worker does.
func recoveryHelper() int {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	hold, err := time.ParseDuration(os.Getenv("GATEHOUSE_RECOVERY_HOLD"))
	if err != nil {
		fmt.Fprintln(os.Stderr, "GATEHOUSE_RECOVERY_HOLD:", err)
		return 2
	}
	url := os.Getenv(recoveryHelperEnv)
	var out sync.Mutex
	rec, srv, closeAll := startRecoveryWorker(url, func(ctx context.Context, t *asynq.Task) error {
		id, _ := asynq.GetTaskID(ctx)
		out.Lock()
		fmt.Printf("running %s\n", id)
		out.Unlock()
		time.Sleep(hold)
		out.Lock()
		fmt.Printf("done %s\n", id)
		out.Unlock()
		return nil
	})
	fmt.Printf("instance %s\n", rec.Instance())
	<-ctx.Done()
	srv.Shutdown()
	rec.Stop()
	closeAll()
	return 0
}

// startRecoveryWorker starts Recovery and an asynq server on recoveryQueue
// with handler h behind Recovery's middleware, as cmd/worker does.
func startRecoveryWorker(url string, h asynq.HandlerFunc) (*jobs.Recovery, *asynq.Server, func()) {
	opts, err := redis.ParseURL(url)
	if err != nil {
		panic(err)
	}
	qrdb, lrdb := redis.NewClient(opts), redis.NewClient(opts)
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	rec := jobs.NewRecovery(lrdb, log, []string{recoveryQueue})
	rec.Watch(qrdb)
	rec.Start()
	srv := asynq.NewServerFromRedisClient(qrdb, asynq.Config{
		Queues: map[string]int{recoveryQueue: 1}, Concurrency: 4,
		TaskCheckInterval: 50 * time.Millisecond, LogLevel: asynq.FatalLevel,
	})
	if err := srv.Start(rec.Middleware(h)); err != nil {
		panic(err)
	}
	return rec, srv, func() { qrdb.Close(); lrdb.Close() }
}

// helperProcess is a running recoveryHelper and the lines it printed.
type helperProcess struct {
	cmd   *exec.Cmd
	lines chan string
}

func startHelper(t *testing.T, hold time.Duration) *helperProcess {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, "-test.run=^$")
	cmd.Env = append(os.Environ(), recoveryHelperEnv+"="+testenv.RedisURLFor(testenv.RedisDBJobs), "GATEHOUSE_RECOVERY_HOLD="+hold.String())
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &helperProcess{cmd: cmd, lines: make(chan string, 16)}
	go func() {
		defer close(p.lines)
		s := bufio.NewScanner(out)
		for s.Scan() {
			p.lines <- s.Text()
		}
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGCONT)
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	return p
}

// expect waits for the helper to print want.
func (p *helperProcess) expect(t *testing.T, want string, within time.Duration) {
	t.Helper()
	timeout := time.After(within)
	for {
		select {
		case line, ok := <-p.lines:
			if !ok {
				t.Fatalf("the worker process ended before printing %q", want)
			}
			if line == want {
				return
			}
		case <-timeout:
			t.Fatalf("the worker process did not print %q within %s", want, within)
		}
	}
}

// runs records when each task started in the in-process worker.
type runs struct {
	mu  sync.Mutex
	at  map[string][]time.Time
	ret map[string]int
	new chan string
}

func newRuns() *runs {
	return &runs{at: map[string][]time.Time{}, ret: map[string]int{}, new: make(chan string, 16)}
}

func (r *runs) handler(ctx context.Context, _ *asynq.Task) error {
	id, _ := asynq.GetTaskID(ctx)
	n, _ := asynq.GetRetryCount(ctx)
	r.mu.Lock()
	r.at[id] = append(r.at[id], time.Now())
	r.ret[id] = n
	r.mu.Unlock()
	r.new <- id
	return nil
}

func (r *runs) count(id string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.at[id])
}

func enqueueRecoveryTask(t *testing.T, id string) {
	t.Helper()
	redisOpt, err := asynq.ParseRedisURI(testenv.RedisURLFor(testenv.RedisDBJobs))
	if err != nil {
		t.Fatal(err)
	}
	client := asynq.NewClient(redisOpt)
	defer client.Close()
	if _, err := client.Enqueue(asynq.NewTask("recovery:test", nil), asynq.Queue(recoveryQueue), asynq.TaskID(id), asynq.MaxRetry(5)); err != nil {
		t.Fatal(err)
	}
}

// beforeAsynq is how long a test waits for Recovery to put a killed worker's
// task back: a safety net, shorter than asynq's own recovery, which takes a
// task no sooner than 55 s after its worker's last lease extension (see
// recoveryMaxAge). A task back by then, at the same retry count and counted
// as requeued, was put back by Recovery, however slow the machine; it takes
// about 3 s (the entry's expiry or the grace, then a poll), which is logged.
const beforeAsynq = 45 * time.Second

// A worker killed with SIGKILL while it runs a task: another worker runs the
// task again, at the same retry count, put back by Recovery instead of
// after asynq's lease (60 to 90 s).
func TestRecoveryRequeuesAKilledWorkersTask(t *testing.T) {
	rdb := testenv.NewRedis(t, testenv.RedisDBJobs)
	a := startHelper(t, time.Hour)
	enqueueRecoveryTask(t, "killed-1")
	a.expect(t, "running killed-1", 30*time.Second)
	claims := rdb.HGetAll(context.Background(), "gatehouse:{"+recoveryQueue+"}:claims").Val()
	if len(claims) != 1 || claims["killed-1"] == "" {
		t.Fatalf("claims while the task runs: %v, want killed-1's", claims)
	}

	seen := newRuns()
	rec, srv, closeAll := startRecoveryWorker(testenv.RedisURLFor(testenv.RedisDBJobs), seen.handler)
	t.Cleanup(func() { srv.Shutdown(); rec.Stop(); closeAll() })

	if err := a.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	select {
	case id := <-seen.new:
		if id != "killed-1" {
			t.Fatalf("ran %q, want killed-1", id)
		}
		t.Logf("the killed worker's task ran again %s after the kill", time.Since(killed).Round(time.Millisecond))
	case <-time.After(beforeAsynq):
		t.Fatalf("the killed worker's task did not run again within %s of the kill", beforeAsynq)
	}
	seen.mu.Lock()
	retried := seen.ret["killed-1"]
	seen.mu.Unlock()
	if retried != 0 {
		t.Errorf("retry count after recovery: %d, want 0 (put back, not failed)", retried)
	}
	if n := testutil.ToFloat64(rec.Collectors()[0].(*prometheus.CounterVec).WithLabelValues(recoveryQueue, "requeued")); n != 1 {
		t.Errorf("gatehouse_jobs_recovered_total{outcome=requeued}: %v, want 1", n)
	}
	waitNoClaims(t, rdb)
}

func waitNoClaims(t *testing.T, rdb redis.UniversalClient) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for rdb.HLen(context.Background(), "gatehouse:{"+recoveryQueue+"}:claims").Val() != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("claims left: %v", rdb.HGetAll(context.Background(), "gatehouse:{"+recoveryQueue+"}:claims").Val())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// A worker that is alive but stalled (SIGSTOP) past its entry's expiry keeps
// its task: its connection to Redis stays open, so no other worker takes the
// task, and it finishes the task once it runs again.
func TestRecoveryLeavesAStalledWorkersTask(t *testing.T) {
	rdb := testenv.NewRedis(t, testenv.RedisDBJobs)
	ctx := context.Background()
	const stall = 6 * time.Second // past the expiry (2 s) and grace (2 s), several polls
	a := startHelper(t, stall+2*time.Second)
	enqueueRecoveryTask(t, "stalled-1")
	a.expect(t, "running stalled-1", 30*time.Second)
	var instance string
	for _, v := range rdb.HKeys(ctx, "gatehouse:{workers}").Val() {
		instance = v
	}

	seen := newRuns()
	rec, srv, closeAll := startRecoveryWorker(testenv.RedisURLFor(testenv.RedisDBJobs), seen.handler)
	t.Cleanup(func() { srv.Shutdown(); rec.Stop(); closeAll() })

	if err := a.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	stopped := time.Now()
	time.Sleep(stall) // the fault's length, not a synchronisation
	// The stalled worker's entry has expired by Redis' clock: only its open
	// connection tells the other worker it is alive.
	entry := strings.Fields(rdb.HGet(ctx, "gatehouse:{workers}", instance).Val())
	tm := rdb.Time(ctx).Val()
	if len(entry) != 3 || entry[0] != "live" {
		t.Fatalf("stalled worker's entry: %v, want live", entry)
	}
	if deadline, _ := strconv.ParseInt(entry[1], 10, 64); deadline >= tm.UnixMilli() {
		t.Fatalf("stalled worker's entry still valid after %s: deadline %d, Redis time %d", time.Since(stopped), deadline, tm.UnixMilli())
	}
	if err := a.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	a.expect(t, "done stalled-1", 30*time.Second)
	if n := seen.count("stalled-1"); n != 0 {
		t.Fatalf("the stalled worker's task ran %d times in the other worker, want 0", n)
	}
	// The stalled worker completes it: the task is gone from the queue.
	inspector := asynq.NewInspectorFromRedisClient(rdb)
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, err := inspector.GetTaskInfo(recoveryQueue, "stalled-1")
		if err != nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("task still in the queue after the stalled worker finished it")
		}
		time.Sleep(20 * time.Millisecond)
	}
	// A clean shutdown removes the worker's entry and claims.
	if err := a.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := a.cmd.Wait(); err != nil {
		t.Fatalf("worker process: %v", err)
	}
	if rdb.HExists(ctx, "gatehouse:{workers}", instance).Val() {
		t.Error("the stopped worker's entry is still there")
	}
	waitNoClaims(t, rdb)
	if n := seen.count("stalled-1"); n != 0 {
		t.Fatalf("the stalled worker's task ran %d times in the other worker, want 0", n)
	}
}

// Workers killed while they take and finish many short tasks leave none of
// them behind: a task is claimed in the same script as asynq's dequeue,
// and its claim outlives asynq's own record of the result, so a kill at any
// moment leaves every task it held either claimed or finished. Whatever the
// killed workers did not finish is back in the queue and run before asynq's
// own recovery could have taken it (beforeAsynq); how soon is logged.
func TestRecoveryLeavesNoTaskBehind(t *testing.T) {
	rdb := testenv.NewRedis(t, testenv.RedisDBJobs)
	ctx := context.Background()
	const tasks = 3000
	redisOpt, err := asynq.ParseRedisURI(testenv.RedisURLFor(testenv.RedisDBJobs))
	if err != nil {
		t.Fatal(err)
	}
	client := asynq.NewClient(redisOpt)
	defer client.Close()
	for i := range tasks {
		if _, err := client.Enqueue(asynq.NewTask("recovery:test", nil), asynq.Queue(recoveryQueue), asynq.TaskID(fmt.Sprintf("short-%04d", i)), asynq.MaxRetry(5)); err != nil {
			t.Fatal(err)
		}
	}
	var lastKill time.Time
	for range 3 {
		p := startHelper(t, 2*time.Millisecond)
		for n := 0; n < 200; {
			select {
			case line, ok := <-p.lines:
				if !ok {
					t.Fatal("the worker process ended")
				}
				if strings.HasPrefix(line, "running ") {
					n++
				}
			case <-time.After(20 * time.Second):
				t.Fatal("the worker process took no task for 20 s")
			}
		}
		if err := p.cmd.Process.Kill(); err != nil {
			t.Fatal(err)
		}
		lastKill = time.Now()
	}
	seen := newRuns()
	go func() {
		for range seen.new {
		}
	}()
	rec, srv, closeAll := startRecoveryWorker(testenv.RedisURLFor(testenv.RedisDBJobs), seen.handler)
	t.Cleanup(func() { srv.Shutdown(); rec.Stop(); closeAll() })
	inspector := asynq.NewInspectorFromRedisClient(rdb)
	for {
		info, err := inspector.GetQueueInfo(recoveryQueue)
		if err != nil {
			t.Fatal(err)
		}
		if info.Pending == 0 && info.Active == 0 && info.Retry == 0 && info.Scheduled == 0 {
			seen.mu.Lock()
			n := len(seen.at)
			var retried []string
			for id, r := range seen.ret {
				if r != 0 {
					retried = append(retried, id)
				}
			}
			seen.mu.Unlock()
			// A put back counts no attempt (neither does asynq's lease
			// since isFailure, but it comes after beforeAsynq): a retry
			// count here is a task that failed instead.
			if len(retried) > 0 {
				t.Errorf("%d tasks ran again with a retry count: failed, not put back: %v", len(retried), retried)
			}
			t.Logf("queue drained %s after the last kill; %d tasks run by the last worker", time.Since(lastKill).Round(time.Millisecond), n)
			break
		}
		if time.Since(lastKill) > beforeAsynq {
			active, _ := inspector.ListActiveTasks(recoveryQueue)
			ids := []string{}
			for _, a := range active {
				ids = append(ids, a.ID)
			}
			t.Fatalf("%s after the last kill: %d pending, %d active %v, %d to retry; claims %v", beforeAsynq, info.Pending, info.Active, ids, info.Retry,
				rdb.HGetAll(ctx, "gatehouse:{"+recoveryQueue+"}:claims").Val())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// cmdCounter counts the commands named name sent through a client, alone
// or in pipelines.
type cmdCounter struct {
	name string
	n    *atomic.Int64
}

func (cmdCounter) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h cmdCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, c redis.Cmder) error {
		if c.Name() == h.name {
			h.n.Add(1)
		}
		return next(ctx, c)
	}
}
func (h cmdCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, c := range cmds {
			if c.Name() == h.name {
				h.n.Add(1)
			}
		}
		return next(ctx, cmds)
	}
}

// A worker takes a task and claims it in one script, asynq's dequeue with
// the claim added, and releases the claim in asynq's script that records
// the task done: while the handler runs, the claim is in Redis; once the
// task is done it is gone; no MULTI/EXEC and no script of Recovery's own
// was sent for either. Recovery stands in for asynq's scripts only at the
// asynq version it was written against; with another, the dequeue runs in
// a transaction between two scripts of Recovery's and the claim is released
// at a beat, and this test fails until Recovery's scripts are brought in
// line with the new asynq.
func TestRecoveryClaimsInAsynqsScripts(t *testing.T) {
	rdb := testenv.NewRedis(t, testenv.RedisDBJobs)
	ctx := context.Background()
	opts, err := redis.ParseURL(testenv.RedisURLFor(testenv.RedisDBJobs))
	if err != nil {
		t.Fatal(err)
	}
	qrdb, lrdb := redis.NewClient(opts), redis.NewClient(opts)
	defer qrdb.Close()
	defer lrdb.Close()
	var tx, evals atomic.Int64
	qrdb.AddHook(cmdCounter{"multi", &tx})
	lrdb.AddHook(cmdCounter{"eval", &evals})
	rec := jobs.NewRecovery(lrdb, slog.New(slog.DiscardHandler), []string{recoveryQueue})
	rec.Watch(qrdb)
	rec.Start()
	defer rec.Stop()
	held := make(chan string, 1)
	srv := asynq.NewServerFromRedisClient(qrdb, asynq.Config{
		Queues: map[string]int{recoveryQueue: 1}, Concurrency: 1,
		TaskCheckInterval: 50 * time.Millisecond, LogLevel: asynq.FatalLevel,
	})
	if err := srv.Start(rec.Middleware(asynq.HandlerFunc(func(ctx context.Context, _ *asynq.Task) error {
		id, _ := asynq.GetTaskID(ctx)
		held <- rdb.HGet(ctx, "gatehouse:{"+recoveryQueue+"}:claims", id).Val()
		return nil
	}))); err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown()
	enqueueRecoveryTask(t, "one-script")
	select {
	case holder := <-held:
		if !strings.HasPrefix(holder, rec.Instance()+" ") {
			t.Errorf("claim of the running task = %q, want this worker's (%s …)", holder, rec.Instance())
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the task did not run within 30 s")
	}
	if n := tx.Load(); n != 0 {
		t.Errorf("%d MULTI/EXEC sent to take the task, want 0: asynq's dequeue script is not the one Recovery's stands in for", n)
	}
	claims := "gatehouse:{" + recoveryQueue + "}:claims"
	deadline := time.Now().Add(30 * time.Second)
	for rdb.HExists(ctx, claims, "one-script").Val() {
		if time.Now().After(deadline) {
			t.Fatal("the task's claim is still there 30 s after it ran")
		}
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(1500 * time.Millisecond) // three beats, each of which would release a claim still held
	if n := evals.Load(); n != 0 {
		t.Errorf("%d claims released by a script of Recovery's own, want 0: asynq's done script is not the one Recovery's stands in for", n)
	}
}

// TestRecoveryActive: gatehouse_jobs_recovery_active is 1 while Recovery
// works and 0 for a worker whose Redis user may not run CLIENT (it can
// neither renew its entry, which names its connection, nor see another
// worker's connection gone): then a dead worker's tasks wait for asynq's
// lease, and the gauge, not only a log line, says so.
func TestRecoveryActive(t *testing.T) {
	rdb := testenv.NewRedis(t, testenv.RedisDBJobs)
	ctx := context.Background()
	active := func(rec *jobs.Recovery) float64 { return testutil.ToFloat64(rec.Collectors()[1]) }
	waitFor := func(rec *jobs.Recovery, want float64) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for active(rec) != want {
			if time.Now().After(deadline) {
				t.Fatalf("gatehouse_jobs_recovery_active = %v after 10 s, want %v", active(rec), want)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	opts, err := redis.ParseURL(testenv.RedisURLFor(testenv.RedisDBJobs))
	if err != nil {
		t.Fatal(err)
	}

	full := redis.NewClient(opts)
	defer full.Close()
	rec := jobs.NewRecovery(full, slog.New(slog.DiscardHandler), []string{recoveryQueue})
	rec.Start()
	defer rec.Stop()
	time.Sleep(1200 * time.Millisecond) // two looks for dead workers, its own connection among them
	waitFor(rec, 1)

	user := fmt.Sprintf("gh-no-client-%d", time.Now().UnixNano())
	if err := rdb.Do(ctx, "ACL", "SETUSER", user, "on", ">secret", "~*", "&*", "+@all", "-client").Err(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rdb.Do(context.Background(), "ACL", "DELUSER", user) })
	limited := *opts
	limited.Username, limited.Password = user, "secret"
	lrdb := redis.NewClient(&limited)
	defer lrdb.Close()
	denied := jobs.NewRecovery(lrdb, slog.New(slog.DiscardHandler), []string{recoveryQueue})
	denied.Start()
	defer denied.Stop()
	waitFor(denied, 0)
	time.Sleep(1200 * time.Millisecond)
	waitFor(denied, 0) // and it stays so
	waitFor(rec, 1)    // the other worker's is unaffected
}
