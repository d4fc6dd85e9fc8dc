package e2e

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gatehouse-pay/gatehouse/internal/testenv"
	"github.com/gatehouse-pay/gatehouse/internal/testenv/harness"
)

// exitTimeout is how long a process may take to drain and exit after SIGTERM.
const exitTimeout = 15 * time.Second

// waitingParallel is how many tests run at once when go test is not given
// -parallel: one more than GOMAXPROCS, at least 3. A test here spends much
// of its time waiting on timers, leases and retries, not on the CPU; but
// each runs two API replicas, a worker, Redis and PgBouncer, and inside
// make test another package shares the cores. With 4 at once on two cores
// API calls took 170 ms, and workers fell seconds behind the faults the
// tests time.
func waitingParallel() int { return max(3, runtime.GOMAXPROCS(0)+1) }

func TestMain(m *testing.M) {
	flag.Parse()
	takeParallel(waitingParallel())
	code := m.Run()
	harness.RemoveBuilds()
	os.Exit(code)
}

// binaries are the paths of the built commands.
type binaries struct {
	api, worker, cli string
	took             time.Duration // how long the build took
}

// buildBinaries builds ./cmd/api, ./cmd/worker and ./cmd/gatehouse into a
// temporary directory, once per test binary: as they ship, or with the race
// detector when GATEHOUSE_E2E_RACE=1 (make chaos). make test runs the
// in-process tests of the same code with -race; building the stacks'
// binaries with it too made this package take twice the CPU, and half of
// its wall time went to argon2 hashes under the detector.
func buildBinaries(t *testing.T) binaries {
	t.Helper()
	var flags []string
	if raceBinaries() {
		flags = []string{"-race"}
	}
	b := testenv.Build(t, flags, "./cmd/api", "./cmd/worker", "./cmd/gatehouse")
	return binaries{api: b.Path("api"), worker: b.Path("worker"), cli: b.Path("gatehouse"), took: b.Took}
}

// raceBinaries reports whether the stacks' binaries are built with -race.
func raceBinaries() bool { return os.Getenv("GATEHOUSE_E2E_RACE") == "1" }

// exchange is one HTTP request and its complete response.
type exchange struct {
	req   *http.Request
	resp  *http.Response
	body  []byte
	start time.Time
	end   time.Time // when the whole body had been read
}

func (e exchange) status() int            { return e.resp.StatusCode }
func (e exchange) header(k string) string { return e.resp.Header.Get(k) }
func (e exchange) elapsed() time.Duration { return e.end.Sub(e.start) }
func (e exchange) describe() string       { return e.req.Method + " " + e.req.URL.String() }
func (e exchange) String() string {
	return fmt.Sprintf("%s -> %d %s", e.describe(), e.status(), e.body)
}
func (e exchange) is(status int, code string) bool { return e.status() == status && e.code() == code }

// code is the error code of an error body, or "" for any other body.
func (e exchange) code() string {
	var b struct {
		Error struct {
			Code string `json:"code"`
		} `json:"error"`
	}
	if json.Unmarshal(e.body, &b) != nil {
		return ""
	}
	return b.Error.Code
}

// param is the param of an error body, or "".
func (e exchange) param() string {
	var b struct {
		Error struct {
			Param string `json:"param"`
		} `json:"error"`
	}
	if json.Unmarshal(e.body, &b) != nil {
		return ""
	}
	return b.Error.Param
}

// send performs one request; it is safe to call from any goroutine. token,
// if set, is sent as a Bearer token; body, if set, as application/json.
func send(c *http.Client, method, url, token, body string) (exchange, error) {
	return sendWith(c, method, url, token, body)
}

// sendWith is send with extra request headers, given as name, value pairs.
func sendWith(c *http.Client, method, url, token, body string, headers ...string) (exchange, error) {
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, url, rd)
	if err != nil {
		return exchange{}, err
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	start := time.Now()
	resp, err := c.Do(req)
	if err != nil {
		return exchange{}, err
	}
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		return exchange{}, fmt.Errorf("%s %s: read body: %w", method, url, err)
	}
	return exchange{req: req, resp: resp, body: b, start: start, end: time.Now()}, nil
}

// newClient returns an HTTP client whose connections leave from the loopback
// address ip, so that per-IP limits see each scenario as its own client.
func newClient(t *testing.T, ip string) *http.Client {
	t.Helper()
	local := net.ParseIP(ip)
	if local == nil {
		t.Fatalf("bad client address %q", ip)
	}
	dialer := &net.Dialer{LocalAddr: &net.TCPAddr{IP: local}, Timeout: 5 * time.Second}
	tr := &http.Transport{
		DialContext:         dialer.DialContext,
		MaxIdleConns:        32,
		MaxIdleConnsPerHost: 16,
		IdleConnTimeout:     30 * time.Second,
	}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 15 * time.Second}
}

// stack is the system under test: two API replicas and one or more workers
// sharing one database and one private Redis.
type stack struct {
	bins     binaries
	db       testenv.DB
	dbEnv    []string // DATABASE_URL, and DATABASE_POOL_MODE through PgBouncer
	redis    *redisDeploy
	env      []string
	spec     *testenv.Spec // nil when api/openapi.yaml could not be loaded
	replicas [2]string     // base URLs
	probes   [2]string     // base URLs of the replicas' PROBE_ADDR (stackOptions.probes)
	worker   string        // base URL of the (first) worker's METRICS_ADDR
	workers  []*workerSlot
	apis     []*harness.Process
}

// stackOptions tune a stack started by startStackWith.
type stackOptions struct {
	env    []string // extra settings of every process, api and worker
	apiEnv []string // extra settings of the API replicas only
	// replicaEnv are extra settings of API replica 1 and of replica 2.
	replicaEnv [2][]string
	workerEnv  []string // extra settings of the workers only
	workers    int      // how many workers; 1 when 0
	probes     bool     // each API replica serves its probes on a PROBE_ADDR of its own too
	// redisMode is how Redis runs: single (one server), cluster (three
	// primaries) or sentinel (a primary, its replica and three sentinels).
	// When empty, the mode registered for the test's root (runInRedisMode),
	// or single.
	redisMode string
	// direct connects the binaries to PostgreSQL itself, never through
	// PgBouncer (see pgbouncerWanted): for binaries that need a session,
	// such as a previous release's.
	direct bool
}

// workerSlot is one worker position of the stack: its address and settings
// stay, its process changes when the test kills and restarts it.
type workerSlot struct {
	name   string
	base   string // http://METRICS_ADDR
	env    []string
	out    *harness.Output // every incarnation writes here
	mu     sync.Mutex
	proc   *harness.Process
	starts int
}

func (w *workerSlot) current() *harness.Process {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.proc
}

// newStack starts a stack with opts on a fresh database, its own Redis and
// the built binaries, every response checked against api/openapi.yaml, and
// logs how long the start took; what names what the test is about.
func newStack(t *testing.T, opts stackOptions, what string) *stack {
	t.Helper()
	redisPath := testenv.RedisServerPath(t)
	db := testenv.NewDB(t)
	bins := buildBinaries(t)
	spec := testenv.LoadSpec(t)
	start := time.Now()
	st := startStackWith(t, bins, db, redisPath, spec, opts)
	t.Logf("stack ready in %s (build %s); %s", time.Since(start).Round(time.Millisecond), bins.took.Round(time.Millisecond), what)
	return st
}

// startStack starts Redis and the binaries on db; t.Cleanup stops them in
// reverse order (the binaries first, with the SIGTERM check, then Redis).
func startStack(t *testing.T, bins binaries, db testenv.DB, redisPath string, spec *testenv.Spec) *stack {
	t.Helper()
	return startStackWith(t, bins, db, redisPath, spec, stackOptions{})
}

// startStackWith is startStack with extra settings and a number of workers.
func startStackWith(t *testing.T, bins binaries, db testenv.DB, redisPath string, spec *testenv.Spec, opts stackOptions) *stack {
	t.Helper()
	s := &stack{bins: bins, spec: spec, db: db}
	s.redis = startRedisDeploy(t, redisPath, cmp.Or(opts.redisMode, redisModeOf(t)))
	// Registered after Redis and before the binaries, so it runs once they
	// have stopped and before Redis stops and the database is dropped.
	t.Cleanup(func() { s.scanStack(t) })
	s.dbEnv = databaseEnv(t, db, opts.direct)
	s.env = append([]string{"PATH=" + os.Getenv("PATH")}, s.dbEnv...)
	s.env = append(s.env, []string{
		"REDIS_URL=" + s.redis.url(),
		"REDIS_MODE=" + s.redis.mode,
		"JWT_SECRET=" + harness.RandomHex(32),
		"ENCRYPTION_KEY=" + harness.RandomHex(32),
		"LOG_LEVEL=debug",
	}...)
	for _, k := range []string{"TMPDIR", "GORACE"} {
		if v, ok := os.LookupEnv(k); ok {
			s.env = append(s.env, k+"="+v)
		}
	}
	// Every listener binds port 0 and the stack reads the port it got from
	// the process's log (harness.AddressFromLog), so no other process can
	// take it first. API replica 1 starts first: its address is the stack's
	// PUBLIC_URL, where the worker's challenge links send cardholders, and
	// the other processes need it at start. Replica 1 itself needs none: its
	// default PUBLIC_URL names the port it took.
	base := s.env
	s.env = append(slices.Clone(base), opts.env...)
	apiEnv := func(i int) []string {
		return append(append(slices.Clone(s.env), opts.apiEnv...), opts.replicaEnv[i]...)
	}
	s.startAPI(t, 0, apiEnv(0), opts.probes)
	s.env = append(append(slices.Clone(base), "PUBLIC_URL="+s.replicas[0]), opts.env...)

	n := max(opts.workers, 1)
	for i := range n {
		name := "worker"
		if n > 1 {
			name = fmt.Sprintf("worker-%d", i+1)
		}
		w := &workerSlot{name: name, out: new(harness.Output),
			env: append(append(slices.Clone(s.env), opts.workerEnv...), "METRICS_ADDR=127.0.0.1:0")}
		w.proc = testenv.StartProcess(t, name, w.out, w.env, bins.worker)
		w.starts = 1
		s.workers = append(s.workers, w)
		// The worker that runs at the end is the one stopped with SIGTERM.
		t.Cleanup(func() { testenv.Terminate(t, w.current(), exitTimeout) })
	}
	s.startAPI(t, 1, apiEnv(1), opts.probes)
	procs := map[string]*harness.Process{s.replicas[0]: s.apis[0], s.replicas[1]: s.apis[1]}
	for _, w := range s.workers {
		addr := listenAddr(t, w.proc, "worker running", "metrics_addr")
		w.base = "http://" + addr
		// A restart (restartWorker) binds this same port again: the tests
		// find the worker where it was, and the port it held a moment
		// before is the one least likely to be taken in between.
		w.env = append(w.env, "METRICS_ADDR="+addr)
		procs[w.base] = w.proc
	}
	s.worker = s.workers[0].base

	c := newClient(t, "127.0.0.1")
	for base, p := range procs {
		s.waitReady(t, c, base, p, 60*time.Second)
	}
	// A test starts with no connection of the stack's own left open, so
	// that it can count the API's connections (HTTP_MAX_CONNS).
	c.CloseIdleConnections()
	return s
}

// startTimeout is how long a process may take to log the address it bound.
const startTimeout = 60 * time.Second

// listenAddr waits until p logs the line msg with the address key it bound
// (port 0) and returns that address; the test stops if p exits first.
func listenAddr(t *testing.T, p *harness.Process, msg, key string) string {
	t.Helper()
	addr, err := harness.AddressFromLog(p, msg, key, startTimeout)
	if err != nil {
		t.Fatalf("%v\n%s", err, p.Tail(8<<10))
	}
	return addr
}

// startAPI starts API replica i with env on port 0 (and its probes on a
// port of their own, with probes) and records the addresses it took. Without
// PUBLIC_URL in env, its default PUBLIC_URL is its own address. The test's
// cleanup stops it.
func (s *stack) startAPI(t *testing.T, i int, env []string, probes bool) {
	t.Helper()
	name := fmt.Sprintf("api-%d", i+1)
	ownURL := !slices.ContainsFunc(env, func(kv string) bool { return strings.HasPrefix(kv, "PUBLIC_URL=") })
	env = append(env, "HTTP_ADDR=127.0.0.1:0")
	if probes {
		env = append(env, "PROBE_ADDR=127.0.0.1:0")
	}
	p := testenv.StartProcess(t, name, nil, env, s.bins.api)
	t.Cleanup(func() { testenv.Terminate(t, p, exitTimeout) })
	if probes {
		s.probes[i] = "http://" + listenAddr(t, p, "api probes listening", "probe_addr")
	}
	addr := listenAddr(t, p, "api listening", "addr")
	s.replicas[i] = "http://" + addr
	s.apis = append(s.apis, p)
	if !ownURL {
		return
	}
	line, err := harness.LogLine(p, "api listening", startTimeout)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := line["public_url"]; ok {
		return
	}
	// Without PUBLIC_URL, a release from before the default named the port
	// taken (the previous release of the upgrade tests) links to port 0:
	// it starts again on the ports it took, with PUBLIC_URL set. It has
	// served nothing yet.
	if err := p.Kill(10 * time.Second); err != nil {
		t.Fatal(err)
	}
	env = append(env, "HTTP_ADDR="+addr, "PUBLIC_URL=http://"+addr)
	if probes {
		env = append(env, "PROBE_ADDR="+strings.TrimPrefix(s.probes[i], "http://"))
	}
	t.Logf("%s logs no public_url (a release from before it): started again on %s with PUBLIC_URL set", name, addr)
	fmt.Fprintf(p.Out, "\n==== test: %s started again with PUBLIC_URL ====\n", name)
	*p = *testenv.StartProcess(t, name, p.Out, env, s.bins.api)
	listenAddr(t, p, "api listening", "addr")
}

// killWorker kills worker i with SIGKILL, like a crash, and waits until it
// has exited. It must be restarted before the test ends.
func (s *stack) killWorker(t *testing.T, i int) {
	t.Helper()
	w := s.workers[i]
	p := w.current()
	if p.Exited() {
		t.Fatalf("%s exited before it was killed: %v", w.name, p.Cmd.ProcessState)
	}
	if err := p.Kill(10 * time.Second); err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(w.out, "\n==== test: %s killed with SIGKILL ====\n", w.name)
}

// restartWorker starts worker i again, with the same settings and address
// (it binds the port its first start took again), and waits until it is
// ready; it returns how long that took.
func (s *stack) restartWorker(t *testing.T, i int, c *http.Client) time.Duration {
	t.Helper()
	w := s.workers[i]
	start := time.Now()
	w.mu.Lock()
	if !w.proc.Exited() {
		w.mu.Unlock()
		t.Fatalf("%s is still running; kill it first", w.name)
	}
	w.starts++
	fmt.Fprintf(w.out, "==== test: %s start %d ====\n", w.name, w.starts)
	w.proc = testenv.StartProcess(t, w.name, w.out, w.env, s.bins.worker)
	p := w.proc
	w.mu.Unlock()
	s.waitReady(t, c, w.base, p, 60*time.Second)
	return time.Since(start)
}

// logs returns everything the processes have written so far.
func (s *stack) logs() string {
	var b strings.Builder
	for _, w := range s.workers {
		b.WriteString(w.out.Tail(1 << 62))
	}
	for _, p := range s.apis {
		b.WriteString(p.Out.Tail(1 << 62))
	}
	return b.String()
}

// waitReady polls base/readyz until it answers 200, failing at the deadline
// or as soon as the process exits (its output is dumped by its cleanup).
func (s *stack) waitReady(t *testing.T, c *http.Client, base string, p *harness.Process, within time.Duration) {
	t.Helper()
	err := harness.WaitFor(context.Background(), p, within, 50*time.Millisecond, func(context.Context) error {
		e, err := send(c, http.MethodGet, base+"/readyz", "", "")
		if err != nil {
			return err
		}
		s.check(t, e)
		if e.status() != http.StatusOK {
			return errors.New(e.String())
		}
		return nil
	})
	if err != nil {
		t.Fatalf("%s: %v", p.Name, err)
	}
}

// check validates a response against api/openapi.yaml, and the events
// GET /v1/events answers with against their types' schemas. The worker's
// operating endpoints (/healthz, /readyz, /metrics on METRICS_ADDR) answer
// exactly like the API's, so the same spec checks them.
func (s *stack) check(t *testing.T, e exchange) {
	t.Helper()
	if s.spec != nil {
		s.spec.Check(t, e.req, e.resp, e.body)
		checkEventReads(t, e)
	}
}

// do sends one request, fails the test on a transport error and validates
// the response against the spec.
func (s *stack) do(t *testing.T, c *http.Client, method, url, token, body string) exchange {
	t.Helper()
	e, err := send(c, method, url, token, body)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	s.check(t, e)
	return e
}

// login posts body to base's /v1/auth/login as a well-behaved client does: a
// 503 service_unavailable (every hashing slot busy for a second, which a
// loaded machine running -race builds reaches) is retried after its
// Retry-After, a few times. Any other answer is returned as it is.
func (s *stack) login(t *testing.T, c *http.Client, base, body string) exchange {
	t.Helper()
	for attempt := 1; ; attempt++ {
		e := s.do(t, c, http.MethodPost, base+"/v1/auth/login", "", body)
		if e.status() != http.StatusServiceUnavailable || attempt == 10 {
			return e
		}
		wait, err := strconv.Atoi(e.header("Retry-After"))
		if err != nil || wait < 1 {
			t.Fatalf("login 503 without an integer Retry-After: %q", e.header("Retry-After"))
		}
		time.Sleep(time.Duration(wait) * time.Second)
	}
}

// signUp creates a merchant named name with a random email and password,
// logs in on replica 1 through c, and returns the merchant id and the
// session token.
func (s *stack) signUp(t *testing.T, c *http.Client, label, name string) (merchantID, token string) {
	t.Helper()
	email := label + "-" + harness.RandomHex(6) + "@example.com"
	password := "correct horse " + harness.RandomHex(8)
	merchantID = s.createMerchant(t, email, password, name)
	return merchantID, s.sessionToken(t, c, email, password)
}

// sessionToken signs in on replica 1 through c and returns the session token.
func (s *stack) sessionToken(t *testing.T, c *http.Client, email, password string) string {
	t.Helper()
	login := s.login(t, c, s.replicas[0], fmt.Sprintf(`{"email":%q,"password":%q}`, email, password))
	mustExpect(t, login, http.StatusOK, "")
	var session struct {
		Token string `json:"token"`
	}
	decode(t, login, &session)
	return session.Token
}

// newKey creates an API key named name with the session token on replica 2.
func (s *stack) newKey(t *testing.T, c *http.Client, token, name string) apiKey {
	t.Helper()
	e := s.do(t, c, http.MethodPost, s.replicas[1]+"/v1/me/api_keys", token, fmt.Sprintf(`{"name":%q}`, name))
	mustExpect(t, e, http.StatusCreated, "")
	var k apiKey
	decode(t, e, &k)
	return k
}

func (s *stack) createMerchant(t *testing.T, email, password, name string) string {
	t.Helper()
	cmd := exec.Command(s.bins.api, "merchant", "create", "--email", email, "--password", password, "--name", name)
	cmd.Env = append([]string{"PATH=" + os.Getenv("PATH")}, s.dbEnv...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("api merchant create: %v\nstdout: %s\nstderr: %s", err, out, stderr.Bytes())
	}
	var m struct {
		ID    string `json:"id"`
		Email string `json:"email"`
		Name  string `json:"name"`
	}
	if err := json.Unmarshal(out, &m); err != nil {
		t.Fatalf("api merchant create: output is not a JSON merchant: %v: %s", err, out)
	}
	if !strings.HasPrefix(m.ID, "mer_") || m.Email != email || m.Name != name {
		t.Fatalf("api merchant create: got %s, want id mer_..., email %q, name %q", out, email, name)
	}
	return m.ID
}

// expect reports whether e has the status and error code ("" for a success
// body), recording a test error if not.
func expect(t *testing.T, e exchange, status int, code string) bool {
	t.Helper()
	if e.status() != status || e.code() != code {
		t.Errorf("%s: got %d %q, want %d %q; body: %s", e.describe(), e.status(), e.code(), status, code, e.body)
		return false
	}
	return true
}

// mustExpect is expect that stops the test on a mismatch.
func mustExpect(t *testing.T, e exchange, status int, code string) {
	t.Helper()
	if !expect(t, e, status, code) {
		t.FailNow()
	}
}

// decode unmarshals the response body into v or stops the test.
func decode(t *testing.T, e exchange, v any) {
	t.Helper()
	if err := json.Unmarshal(e.body, v); err != nil {
		t.Fatalf("%s: body is not the expected JSON: %v: %s", e.describe(), err, e.body)
	}
}

// intHeader returns the header as an integer, recording an error if it is
// missing or not an integer.
func intHeader(t *testing.T, e exchange, name string) (int, bool) {
	t.Helper()
	v := e.header(name)
	n, err := strconv.Atoi(v)
	if err != nil {
		t.Errorf("%s -> %d: header %s: got %q, want an integer", e.describe(), e.status(), name, v)
		return 0, false
	}
	return n, true
}

// checkRateLimitHeaders checks RateLimit-Limit (== limit), RateLimit-Remaining
// (0..limit) and RateLimit-Reset (>= 0 seconds).
func checkRateLimitHeaders(t *testing.T, e exchange, limit int) {
	t.Helper()
	if got, ok := intHeader(t, e, "RateLimit-Limit"); ok && got != limit {
		t.Errorf("%s -> %d: RateLimit-Limit: got %d, want %d", e.describe(), e.status(), got, limit)
	}
	if got, ok := intHeader(t, e, "RateLimit-Remaining"); ok && (got < 0 || got > limit) {
		t.Errorf("%s -> %d: RateLimit-Remaining: got %d, want 0..%d", e.describe(), e.status(), got, limit)
	}
	if got, ok := intHeader(t, e, "RateLimit-Reset"); ok && got < 0 {
		t.Errorf("%s -> %d: RateLimit-Reset: got %d, want >= 0", e.describe(), e.status(), got)
	}
}

// checkTooManyRequests checks a 429: the rate_limited body, Retry-After as
// whole seconds >= 1, and RateLimit-Remaining 0.
func checkTooManyRequests(t *testing.T, e exchange, limit int) {
	t.Helper()
	if !expect(t, e, http.StatusTooManyRequests, "rate_limited") {
		return
	}
	if got, ok := intHeader(t, e, "Retry-After"); ok && got < 1 {
		t.Errorf("%s -> 429: Retry-After: got %d, want >= 1", e.describe(), got)
	}
	checkRateLimitHeaders(t, e, limit)
	if got, ok := intHeader(t, e, "RateLimit-Remaining"); ok && got != 0 {
		t.Errorf("%s -> 429: RateLimit-Remaining: got %d, want 0", e.describe(), got)
	}
}

// metricSum adds up every sample of the named metric in a Prometheus text
// exposition; found is false when there is none.
func metricSum(exposition, name string) (sum float64, found bool) {
	for _, line := range strings.Split(exposition, "\n") {
		if line == "" || line[0] == '#' {
			continue
		}
		sp := strings.LastIndexByte(line, ' ')
		if sp < 0 {
			continue
		}
		series, value := line[:sp], line[sp+1:]
		if i := strings.IndexByte(series, '{'); i >= 0 {
			series = series[:i]
		}
		if series != name {
			continue
		}
		v, err := strconv.ParseFloat(value, 64)
		if err != nil {
			continue
		}
		sum, found = sum+v, true
	}
	return sum, found
}

// httpMethods are the methods a request metric may be labelled with.
var httpMethods = []string{"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"}

// labelValues returns the distinct values of label over every sample of the
// named metric in a Prometheus text exposition.
func labelValues(exposition, name, label string) []string {
	var out []string
	for _, line := range strings.Split(exposition, "\n") {
		rest, ok := strings.CutPrefix(line, name+"{")
		if !ok {
			continue
		}
		_, after, ok := strings.Cut(rest, label+`="`)
		if !ok {
			continue
		}
		v, _, _ := strings.Cut(after, `"`)
		if !slices.Contains(out, v) {
			out = append(out, v)
		}
	}
	return out
}
