package e2e

import (
	"context"
	"fmt"
	"maps"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gatehouse-pay/gatehouse/internal/testenv/harness"
)

// TestAuthFlood is docs/reliability.md B7 against the real binaries: floods of
// unknown secret keys, bad session tokens and wrong passwords from one
// address each are limited (429 with the contract's headers), Postgres sees
// at most about the limit of lookups, Redis holds a flat number of keys, and
// the figures (Redis memory, the API process's RSS and CPU time) are logged.
func TestAuthFlood(t *testing.T) {
	parallel(t)
	const perIP = 200
	st := newStack(t, stackOptions{apiEnv: []string{"RATE_LIMIT_DEFAULT=" + strconv.Itoa(perIP) + "/1m"}}, "B7 floods of failed authentication")
	owner := newClient(t, "127.0.0.1")
	_, token := st.signUp(t, owner, "b7", "B7 owner")
	victim, victimPassword := "b7-victim-"+harness.RandomHex(4)+"@example.com", "the right password "+harness.RandomHex(4)
	st.createMerchant(t, victim, victimPassword, "B7 victim")
	home := newClient(t, "127.0.0.24") // where the victim signs in from
	victimLogin := fmt.Sprintf(`{"email":%q,"password":%q}`, victim, victimPassword)
	mustExpect(t, st.do(t, home, http.MethodPost, st.replicas[1]+"/v1/auth/login", "", victimLogin), http.StatusOK, "")
	api := st.replicas[0]
	pid := st.apis[0].Cmd.Process.Pid

	keyScans := func() int64 { return tableScans(t, st, "api_keys") }
	// Sign-ins look members up by email (and read their merchant's policy).
	merchantScans := func() int64 { return tableScans(t, st, "members") }
	settle(t, keyScans)
	checksumFlood(t, st, pid, keyScans)
	keysBefore, merchantsBefore := keyScans(), merchantScans()
	dbsizeBefore, memBefore := redisKeys(t, st), redisMemory(t, st)
	rssBefore, cpuBefore := procRSS(t, pid), procCPU(t, pid)

	// One flood: n requests from one address; the counts by status, with
	// every 429 checked for the contract's headers, and the time to answer
	// (request sent to body read), a figure, not an assertion.
	flood := func(name, ip string, n int, limit int, req func(i int) (method, url, token, body string)) map[int]int {
		c := newClient(t, ip)
		got := map[int]int{}
		var took answerTimes
		for i := range n {
			method, url, tok, body := req(i)
			e := st.do(t, c, method, url, tok, body)
			got[e.status()]++
			took.add(e)
			if e.status() == http.StatusTooManyRequests {
				checkTooManyRequests(t, e, limit)
			}
		}
		t.Logf("%s: %d requests from %s: %v", name, n, ip, got)
		t.Logf("%s: time to answer %s", name, took)
		if got[http.StatusTooManyRequests] == 0 {
			t.Errorf("%s: no 429 in %d requests from one address", name, n)
		}
		for status := range got {
			if status >= 500 {
				t.Errorf("%s: %d answers %d", name, got[status], status)
			}
		}
		return got
	}

	const n = 1000
	keys := flood("unknown secret keys on POST /v1/charges", "127.0.0.21", n, perIP, func(int) (string, string, string, string) {
		return http.MethodPost, api + "/v1/charges", "sk_test_" + harness.RandomHex(16), `{"amount":100,"currency":"usd","source":"tok_visa"}`
	})
	if keys[http.StatusUnauthorized] > perIP {
		t.Errorf("unknown keys: %d answered 401 (each a Postgres lookup), want at most the per-IP limit %d", keys[http.StatusUnauthorized], perIP)
	}
	bad := token[:len(token)-4] + "AAAA"
	flood("bad session tokens on POST /v1/me/api_keys", "127.0.0.22", n, perIP, func(i int) (string, string, string, string) {
		tok := bad
		if i%2 == 1 {
			tok = "eyJhbGciOiJIUzI1NiJ9." + harness.RandomHex(8) + ".x"
		}
		return http.MethodPost, api + "/v1/me/api_keys", tok, `{"name":"b7"}`
	})
	flood("wrong passwords on POST /v1/auth/login", "127.0.0.23", 100, 10, func(i int) (string, string, string, string) {
		return http.MethodPost, api + "/v1/auth/login", "", fmt.Sprintf(`{"email":%q,"password":"wrong %d"}`, victim, i)
	})

	// The same account guessed from many addresses, each under its own
	// limit: the account's budget of failures (20 per 15 minutes, 10 of them
	// spent above) stops the guesses on both replicas, and the victim still
	// signs in from home.
	spread := map[int]int{}
	var spreadTook answerTimes
	for i := range 60 {
		c := newClient(t, fmt.Sprintf("127.0.2.%d", 1+i%30))
		e := st.do(t, c, http.MethodPost, st.replicas[i%2]+"/v1/auth/login", "", fmt.Sprintf(`{"email":%q,"password":"spread %d"}`, victim, i))
		spread[e.status()]++
		spreadTook.add(e)
		if e.status() == http.StatusTooManyRequests {
			checkTooManyRequests(t, e, 20)
		} else {
			expect(t, e, http.StatusUnauthorized, "invalid_credentials")
		}
	}
	t.Logf("wrong passwords for one account from 30 addresses on both replicas: %v; time to answer %s", spread, spreadTook)
	if spread[http.StatusUnauthorized] > 20-10 || spread[http.StatusTooManyRequests] == 0 {
		t.Errorf("wrong passwords from 30 addresses: %v, want at most 10 x 401 (the account's budget left) and then 429", spread)
	}
	for _, base := range st.replicas {
		expect(t, st.do(t, home, http.MethodPost, base+"/v1/auth/login", "", victimLogin), http.StatusOK, "")
	}

	settle(t, keyScans)
	keyLookups, merchantLookups := keyScans()-keysBefore, merchantScans()-merchantsBefore
	dbsizeAfter, memAfter := redisKeys(t, st), redisMemory(t, st)
	rssAfter, cpuAfter := procRSS(t, pid), procCPU(t, pid)
	// The process's memory and CPU are figures, not assertions: a race build's
	// RSS grows with any 2,100 requests, flood or not.
	t.Logf("B7 figures: api_keys lookups %d (limit %d), members lookups %d; Redis keys outside the task queue %d -> %d, used_memory %d -> %d bytes; api-1 RSS %d kB -> %d kB; api-1 CPU %s",
		keyLookups, perIP, merchantLookups, dbsizeBefore, dbsizeAfter, memBefore, memAfter, rssBefore, rssAfter, cpuAfter-cpuBefore)
	if keyLookups > perIP+10 {
		t.Errorf("Postgres saw %d key lookups for %d unknown keys from one address, want at most about the limit %d", keyLookups, n, perIP)
	}
	// 10 from one address, at most 10 more from many, 3 sign-ins of the victim.
	if merchantLookups > 10+10+3+2 {
		t.Errorf("Postgres saw %d member lookups for wrong passwords, want at most about the login limit 10 plus the account's budget", merchantLookups)
	}
	// One limiter window per client address (3 + 30), the account's budget
	// and known addresses, the victim's sessions: never one key per request.
	// The task queue's keys are not counted (redisKeys).
	if grew := dbsizeAfter - dbsizeBefore; grew > 33+8 {
		t.Errorf("Redis grew by %d keys during the floods from 33 addresses, want at most one per address and a few more (41)", grew)
	}
}

// checksumFlood sends 1,000 made-up secret keys of the checksummed format
// (docs/keys.md) from one address to POST /v1/charges: their checksum is
// wrong, so each is refused 401 invalid_token before any lookup. It logs
// what they cost the API (api_keys lookups in Postgres, the API's Redis
// commands, its CPU time) and fails unless that is nothing: no lookup and
// no Redis command. Each refusal costs one CRC32 of 30 bytes.
func checksumFlood(t *testing.T, st *stack, pid int, keyScans func() int64) {
	t.Helper()
	const n = 1000
	api := st.replicas[0]
	mc := newClient(t, "127.0.0.1")
	redisCommands := func() float64 {
		text := string(st.do(t, mc, http.MethodGet, api+"/metrics", "", "").body)
		hits, _ := metricSum(text, "gatehouse_redis_pool_hits_total")
		misses, _ := metricSum(text, "gatehouse_redis_pool_misses_total")
		return hits + misses
	}
	lookupsBefore, redisBefore, cpuBefore := keyScans(), redisCommands(), procCPU(t, pid)
	c := newClient(t, "127.0.0.25")
	got := map[int]int{}
	var took answerTimes
	for range n {
		e := st.do(t, c, http.MethodPost, api+"/v1/charges", "sk_test_"+harness.RandomHex(18), `{"amount":100,"currency":"usd","source":"tok_visa"}`)
		got[e.status()]++
		took.add(e)
		if e.status() == http.StatusUnauthorized && e.code() != "invalid_token" {
			t.Errorf("a made-up key with a bad checksum: %s", e.describe())
		}
	}
	redisUsed, cpu := redisCommands()-redisBefore, procCPU(t, pid)-cpuBefore
	settle(t, keyScans)
	lookups := keyScans() - lookupsBefore
	t.Logf("B7 checksum flood: %d made-up checksummed keys on POST /v1/charges from one address: %v; time to answer %s", n, got, took)
	t.Logf("B7 checksum figures: api_keys lookups %d, api-1 Redis commands %.0f (%.2f per request), api-1 CPU %s (%s per request)",
		lookups, redisUsed, redisUsed/n, cpu, cpu/n)
	if got[http.StatusUnauthorized] != n {
		t.Errorf("made-up checksummed keys: %v, want %d x 401 invalid_token", got, n)
	}
	// The metrics scrape itself and the API's own background work may use
	// Redis a few times; a lookup per key would be 1,000 or more.
	if lookups != 0 || redisUsed > 20 {
		t.Errorf("made-up checksummed keys cost %d api_keys lookups and %.0f Redis commands, want none", lookups, redisUsed)
	}
}

// answerTimes collects the time to answer of requests (sent to body read),
// overall and by status, for the figures the floods log.
type answerTimes struct {
	all      []time.Duration
	byStatus map[int][]time.Duration
}

func (a *answerTimes) add(e exchange) {
	if a.byStatus == nil {
		a.byStatus = map[int][]time.Duration{}
	}
	a.all = append(a.all, e.elapsed())
	a.byStatus[e.status()] = append(a.byStatus[e.status()], e.elapsed())
}

// quantiles returns the p50, p99 (nearest rank) and max of ds.
func quantiles(ds []time.Duration) (p50, p99, top time.Duration) {
	if len(ds) == 0 {
		return 0, 0, 0
	}
	s := slices.Sorted(slices.Values(ds))
	rank := func(p float64) time.Duration {
		i := int(p*float64(len(s))+0.999999) - 1
		return s[min(max(i, 0), len(s)-1)]
	}
	return rank(0.50), rank(0.99), s[len(s)-1]
}

// String is "p50 x, p99 y, max z" over all requests, then the same by status.
func (a answerTimes) String() string {
	r := func(d time.Duration) time.Duration { return d.Round(time.Microsecond) }
	p50, p99, top := quantiles(a.all)
	var b strings.Builder
	fmt.Fprintf(&b, "p50 %s, p99 %s, max %s", r(p50), r(p99), r(top))
	for _, s := range slices.Sorted(maps.Keys(a.byStatus)) {
		p50, p99, top := quantiles(a.byStatus[s])
		fmt.Fprintf(&b, "; %d (%d): p50 %s, p99 %s, max %s", s, len(a.byStatus[s]), r(p50), r(p99), r(top))
	}
	return b.String()
}

// redisMemory is the stack's Redis used_memory in bytes.
func redisMemory(t *testing.T, st *stack) int64 {
	t.Helper()
	var total int64
	for _, c := range st.redis.primaries(t) {
		info, err := c.Info(context.Background(), "memory").Result()
		if err != nil {
			t.Fatal(err)
		}
		n, err := strconv.ParseInt(infoField(info, "used_memory"), 10, 64)
		if err != nil {
			t.Fatalf("used_memory in INFO memory of %s: %v", c.Options().Addr, err)
		}
		total += n
	}
	return total
}

// infoField is a field of an INFO answer, or "".
func infoField(info, name string) string {
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), name+":"); ok {
			return v
		}
	}
	return ""
}

// tableScans is how many scans Postgres has counted on table (index and
// sequential) in the stack's database.
func tableScans(t *testing.T, st *stack, table string) int64 {
	t.Helper()
	var n int64
	err := st.db.Pool.QueryRow(context.Background(),
		`SELECT coalesce(seq_scan, 0) + coalesce(idx_scan, 0) FROM pg_stat_user_tables WHERE relname = $1`, table).Scan(&n)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// settle waits until Postgres has the API's statistics: backends report
// theirs when idle, at least every 10 s (PostgreSQL 15), so the count is read
// until it holds for 3 s after 11 s have passed.
func settle(t *testing.T, count func() int64) {
	t.Helper()
	start, last, since := time.Now(), count(), time.Now()
	for time.Since(start) < 40*time.Second {
		time.Sleep(500 * time.Millisecond)
		if n := count(); n != last {
			last, since = n, time.Now()
		} else if time.Since(start) > 11*time.Second && time.Since(since) > 3*time.Second {
			return
		}
	}
}

// procRSS is the resident set of process pid in kB.
func procRSS(t *testing.T, pid int) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			n, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	t.Fatalf("no VmRSS in /proc/%d/status", pid)
	return 0
}

// procCPU is the user and system CPU time process pid has used.
func procCPU(t *testing.T, pid int) time.Duration {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		t.Fatal(err)
	}
	// Fields after the command name, which is in parentheses and may hold spaces.
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+2:]))
	utime, _ := strconv.ParseInt(f[11], 10, 64)
	stime, _ := strconv.ParseInt(f[12], 10, 64)
	const hz = 100 // USER_HZ on Linux
	return time.Duration(utime+stime) * time.Second / hz
}

// redisKeys is the number of keys of the stack's Redis, on every primary,
// but for the task queue's (asynq:...): those of the periodic tasks come
// and go with their schedule, whatever the requests.
func redisKeys(t *testing.T, st *stack) int64 {
	t.Helper()
	var n int64
	for _, c := range st.redis.primaries(t) {
		iter := c.Scan(context.Background(), 0, "*", 1000).Iterator()
		for iter.Next(context.Background()) {
			if !strings.HasPrefix(iter.Val(), "asynq:") {
				n++
			}
		}
		if err := iter.Err(); err != nil {
			t.Fatalf("redis SCAN: %v", err)
		}
	}
	return n
}
