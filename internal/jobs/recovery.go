// Recovery of the tasks a dead worker held.
//
// asynq (v0.26.0) leases a task to the worker that takes it for 30 s, and
// the worker's heartbeat extends the lease every 5 s. When a worker dies
// (SIGKILL, a crash, the OOM killer) its tasks stay active in Redis until a
// recoverer finds their lease expired for 30 s more; the recoverer runs once
// a minute, so the tasks come back 60 to 90 s after the death, with a failed
// attempt counted. None of this is configurable. Recovery brings them back
// within about 3 s:
//
//   - Every worker keeps an entry in Redis (workersKey), renewed every
//     recoveryBeat on a connection it holds for the purpose.
//   - Every task a worker takes is claimed for it (claimsKey) in the same
//     script as asynq's dequeue (dequeueHook), and the claim is
//     released only with or after asynq's record of the task's result: in
//     the same script when the task is done, else at a beat. So at any
//     moment, a task that is active for a worker is claimed by it.
//   - Every worker polls the entries. A worker whose entry has expired and
//     whose connection Redis has not had for recoveryGrace is dead: it is
//     marked dead, and each task it claimed that is still active goes back
//     to the head of its pending list, as asynq does with the tasks it gives
//     back at shutdown (its retry count untouched).
//
// A task is never taken from a live worker: a worker that is alive but
// stalled keeps its connection open, and a task that a live worker took
// again carries that worker's claim. What Recovery cannot see is left to
// asynq's lease: a worker on a node lost without its connections being
// closed, a worker found dead long after the fact (recoveryMaxAge), a task
// put back recoveryMaxRescues times.

package jobs

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/hibiken/asynq"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
)

// The timings of Recovery. A worker renews its entry every recoveryBeat. It
// is dead when its entry has not been renewed for recoveryExpiry (by Redis'
// clock) and the connection it renews it on has been gone from Redis for
// recoveryGrace (seen by another worker polling every recoveryPoll, without
// a failed poll in between: after an outage the worker gets recoveryGrace to
// come back). A dead process's connection is closed by its kernel at once, so
// its tasks are back about max(recoveryExpiry, recoveryGrace) + recoveryPoll
// after the death; a worker that is alive but stalled (a long pause, a
// blocked Redis call) keeps its connection open and keeps its tasks.
const (
	recoveryBeat   = 500 * time.Millisecond
	recoveryExpiry = 2 * time.Second
	recoveryGrace  = 2 * time.Second
	recoveryPoll   = 500 * time.Millisecond
	// recoveryMaxAge: a worker whose last renewal is older than this when it
	// is found dead is left to asynq's own recovery. asynq's recoverer takes
	// a task no sooner than 55 s after its worker's last lease extension; 20 s
	// leaves asynq's own 30 s allowance for clocks that disagree, so a task
	// is never put back by both.
	recoveryMaxAge = 20 * time.Second
	// recoveryMaxRescues: a task put back this many times (within
	// rescuedTTL) is left to asynq's recovery, which puts it back only after
	// its lease (60 to 90 s), so a task that kills every worker that runs
	// it is not handed round every few seconds.
	recoveryMaxRescues = 3
	rescuedTTL         = 10 * time.Minute
	// tombstoneTTL: how long a dead worker's entry stays, marked dead.
	tombstoneTTL = time.Hour
	// recoveryCallTimeout bounds each Redis call of Recovery.
	recoveryCallTimeout = time.Second
)

// workersKey is the hash of the workers: instance id -> "live <deadline ms>
// <client id>" or "dead <deadline ms> <marked dead at ms>".
const workersKey = "gatehouse:{workers}"

// The per-queue keys share the queue's hash tag with asynq's own keys, so one
// script can move a task on a Redis Cluster.
func claimsKey(q string) string      { return "gatehouse:{" + q + "}:claims" }
func rescuedPrefix(q string) string  { return "gatehouse:{" + q + "}:rescued:" }
func asynqKey(q, name string) string { return "asynq:{" + q + "}:" + name }

// Recovery keeps a worker's entry alive in Redis, records which tasks the
// worker runs (its claims), and puts back in their queue the tasks of workers
// found dead. Every worker runs one.
type Recovery struct {
	rdb      redis.UniversalClient
	log      *slog.Logger
	instance string
	queues   []string
	watched  map[string]bool
	counter  *prometheus.CounterVec
	active   prometheus.GaugeFunc

	// Whether the last renewal of the worker's entry and the last look for
	// dead workers worked: Recovery is active while both do.
	beatOK, pollOK atomic.Bool
	// clientID is the CLIENT ID of the connection the entry is renewed on,
	// "" before the first renewal.
	clientID atomic.Value

	runs atomic.Uint64 // numbers the claims

	// looks are the last looks at the pending lists of the queues, one
	// per group of queues a server polls together (see pendingEmpty).
	looks map[string]*pendingLook

	mu         sync.Mutex
	held       map[string]*heldTask // the worker's claims, by queue and task id
	unreleased []claim              // releases that failed, tried again at each beat

	conn *redis.Conn // owned by the beat loop
	// owned by the poll loop: when each worker's connection was first seen
	// gone, in this process's clock
	absent map[string]time.Time

	warned atomic.Int64 // unix seconds of the last warning about Redis

	stop chan struct{}
	done sync.WaitGroup
}

type claim struct{ queue, task, holder string }

// heldTask is a claim of this worker and what became of its task.
type heldTask struct {
	claim
	at       time.Time // claimed
	running  int       // runs of the handler under way
	finished time.Time // the last run ended; zero before
}

// unstartedAfter: a claimed task whose handler has not started by then never
// will (asynq ends a task whose deadline passed without calling it).
const unstartedAfter = time.Minute

// NewRecovery returns the Recovery of the worker's queues on rdb. rdb should
// be a client of its own: Recovery holds one of its connections for good.
func NewRecovery(rdb redis.UniversalClient, log *slog.Logger, queues []string) *Recovery {
	r := &Recovery{
		rdb: rdb, log: log, instance: uuid.NewString(), queues: queues, watched: map[string]bool{},
		counter: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "gatehouse", Name: "jobs_recovered_total",
			Help: "Tasks of workers found dead, by queue and outcome: requeued (put back in their queue), left (to asynq's own recovery).",
		}, []string{"queue", "outcome"}),
		held:   map[string]*heldTask{},
		looks:  lookGroups(queues),
		absent: map[string]time.Time{},
		stop:   make(chan struct{}),
	}
	r.active = prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Namespace: "gatehouse", Name: "jobs_recovery_active",
		Help: "1 while this worker's recovery of dead workers' tasks works (its entry renewed, the others' looked at); 0 when it does not, and a dead worker's tasks wait 60 to 90 s for asynq's lease.",
	}, func() float64 {
		if r.beatOK.Load() && r.pollOK.Load() {
			return 1
		}
		return 0
	})
	for _, q := range queues {
		r.watched[q] = true
		for _, o := range []string{"requeued", "left"} {
			r.counter.WithLabelValues(q, o)
		}
	}
	return r
}

// QueueNames are the queues of Pools(deliveryQueues).
func QueueNames(deliveryQueues []string) []string {
	var out []string
	for _, p := range Pools(deliveryQueues) {
		for q := range p.Queues {
			out = append(out, q)
		}
	}
	return out
}

// Collectors are the gatehouse_jobs_recovered_total counter and the
// gatehouse_jobs_recovery_active gauge.
func (r *Recovery) Collectors() []prometheus.Collector {
	return []prometheus.Collector{r.counter, r.active}
}

// Instance is the worker's id in the workers hash.
func (r *Recovery) Instance() string { return r.instance }

// Start writes the worker's entry, then renews it and polls for dead workers
// until Stop. Start it before the servers take tasks.
func (r *Recovery) Start() {
	err := r.beat()
	r.beatOK.Store(err == nil)
	if err != nil {
		r.warn("recovery: could not write the worker's entry", err)
	}
	r.pollOK.Store(true) // until a look fails
	r.done.Add(2)
	go r.loop(recoveryBeat, func() {
		err := r.beat()
		r.beatOK.Store(err == nil)
		if err != nil {
			r.warn("recovery: could not renew the worker's entry", err)
		}
	})
	go r.loop(recoveryPoll, func() {
		err := r.poll()
		r.pollOK.Store(err == nil)
		if err != nil {
			clear(r.absent) // what is seen must be seen without a gap
			r.warn("recovery: could not look for dead workers", err)
		}
	})
}

// Stop ends the loops and removes the worker's entry and claims. Call it
// after the servers have shut down.
func (r *Recovery) Stop() {
	close(r.stop)
	r.done.Wait()
	for _, q := range r.queues {
		ctx, cancel := context.WithTimeout(context.Background(), recoveryCallTimeout)
		_, err := r.rescue(ctx, q, r.instance, 0, false)
		cancel()
		if err != nil {
			r.warn("recovery: could not remove the worker's claims", err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), recoveryCallTimeout)
	defer cancel()
	if err := r.rdb.HDel(ctx, workersKey, r.instance).Err(); err != nil {
		r.warn("recovery: could not remove the worker's entry", err)
	}
	if r.conn != nil {
		_ = r.conn.Close()
		r.conn = nil
	}
}

func (r *Recovery) loop(every time.Duration, f func()) {
	defer r.done.Done()
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-r.stop:
			return
		case <-t.C:
			f()
		}
	}
}

// Watch makes every dequeue of the asynq servers on rdb claim the task it
// takes for this worker, in the same script (see dequeueHook).
// Call it before the servers start.
func (r *Recovery) Watch(rdb redis.UniversalClient) {
	rdb.AddHook(dequeueHook{r: r, rdb: rdb})
}

// Middleware notes when the handler of each claimed task runs, so that the
// claim is released only once asynq is done with the task: at the first beat
// at least recoveryBeat after the handler returned.
func (r *Recovery) Middleware(next asynq.Handler) asynq.Handler {
	return asynq.HandlerFunc(func(ctx context.Context, t *asynq.Task) error {
		id, _ := asynq.GetTaskID(ctx)
		q, _ := asynq.GetQueueName(ctx)
		r.mu.Lock()
		h := r.held[q+"\x00"+id]
		if h != nil {
			h.running++
		}
		r.mu.Unlock()
		if h != nil {
			defer func() {
				r.mu.Lock()
				h.running--
				h.finished = time.Now()
				r.mu.Unlock()
			}()
		}
		return next.ProcessTask(ctx, t)
	})
}

// dequeueHook replaces asynq's dequeue of a watched queue (the script
// called with the keys pending, paused, active and lease of one queue) with
// one that also claims the task it takes, in the same script: no task is
// ever active for this worker without its claim. The script is asynq's,
// step for step, with the claim added (dequeueClaim); it stands in only for
// the script it was written against, known by its SHA-1. Another asynq's
// dequeue runs unchanged in a MULTI/EXEC between two scripts of ours: the
// first notes the length of the active list, the second, if the dequeue
// added a task to it, claims that task (the head of the list, where
// RPOPLPUSH put it).
type dequeueHook struct {
	r   *Recovery
	rdb redis.UniversalClient
}

func (h dequeueHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h dequeueHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

func (h dequeueHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		c, ok := cmd.(*redis.Cmd)
		if !ok {
			return next(ctx, cmd)
		}
		if q, ok := h.r.dequeueOf(c); ok {
			return h.r.dequeue(ctx, h.rdb, q, c)
		}
		if q, id, ok := h.r.doneOf(c); ok {
			if ran, err := h.r.finish(ctx, h.rdb, q, id, c); ran {
				return err
			}
		}
		return next(ctx, cmd)
	}
}

// dequeueOf reports whether c is asynq's dequeue of a watched queue, and
// which.
func (r *Recovery) dequeueOf(c *redis.Cmd) (string, bool) {
	if name := c.Name(); name != "evalsha" && name != "eval" {
		return "", false
	}
	args := c.Args()
	if len(args) < 7 || !numKeys(args[2], 4) {
		return "", false
	}
	first, _ := args[3].(string)
	q, prefixed := strings.CutPrefix(first, "asynq:{")
	q, ok := strings.CutSuffix(q, "}:pending")
	if !prefixed || !ok || !r.watched[q] {
		return "", false
	}
	for i, name := range []string{"paused", "active", "lease"} {
		if k, _ := args[4+i].(string); k != asynqKey(q, name) {
			return "", false
		}
	}
	return q, true
}

// asynqVersion is the asynq whose scripts Recovery's stand in for or
// copy: asynqDequeueSHA, asynqDoneSHA and asynqRequeueSHA are the SHA-1s
// of its dequeueCmd, doneCmd and requeueCmd. TestRecoveryScriptsOfAsynq
// checks them against the source of the asynq in go.mod, and fails when
// go.mod moves to another asynq, until they are checked again.
const asynqVersion = "v0.26.0"

// asynqRequeueSHA is the SHA-1 of asynq v0.26.0's requeueCmd, whose steps
// rescueScript repeats for each task it puts back.
const asynqRequeueSHA = "f34cbfd11d1fc8019af55b50c447fc68eb8b29e5"

// asynqDequeueSHA is the SHA-1 of asynq v0.26.0's dequeue script
// (dequeueCmd in its rdb package), which dequeueClaim stands in for.
// TestRecoveryClaimsInAsynqsScripts checks that the asynq in go.mod still
// sends it.
const asynqDequeueSHA = "a8153319360adc71cdc370107f8ab9786f204765"

// dequeueClaim is asynq's dequeue with the claim: KEYS pending, paused,
// active, lease (asynq's) and the queue's claims; ARGV the lease's end and
// the prefix of the task keys (asynq's), and the claim's holder. It returns
// asynq's answer (the task's message) and the task's id, or nil.
var dequeueClaim = redis.NewScript(`
if redis.call("EXISTS", KEYS[2]) == 0 then
	local id = redis.call("RPOPLPUSH", KEYS[1], KEYS[3])
	if id then
		local key = ARGV[2] .. id
		redis.call("HSET", key, "state", "active")
		redis.call("HDEL", key, "pending_since")
		redis.call("ZADD", KEYS[4], ARGV[1], id)
		redis.call("HSET", KEYS[5], id, ARGV[3])
		return {redis.call("HGET", key, "msg"), id}
	end
end
return nil`)

// asynqDoneSHA is the SHA-1 of asynq v0.26.0's script that records a task
// done (doneCmd in its rdb package), which doneClaim stands in for.
const asynqDoneSHA = "1241eaa1c73409baaf1fea0c08d203a4911bda15"

// doneClaim is asynq's done with the release of the task's claim: KEYS
// active, lease, the task, the day's and the total processed counts
// (asynq's) and the queue's claims; ARGV the task's id, the expiry of the
// day's count and the largest int64 (asynq's), and the claim's holder. The
// claim goes in the same script as asynq's record of the result, and only
// if asynq's steps succeeded. TestRecoveryClaimsInAsynqsScripts checks that
// the asynq in go.mod still sends asynqDoneSHA.
var doneClaim = redis.NewScript(`
if redis.call("LREM", KEYS[1], 0, ARGV[1]) == 0 then
  return redis.error_reply("NOT FOUND")
end
if redis.call("ZREM", KEYS[2], ARGV[1]) == 0 then
  return redis.error_reply("NOT FOUND")
end
if redis.call("DEL", KEYS[3]) == 0 then
  return redis.error_reply("NOT FOUND")
end
local n = redis.call("INCR", KEYS[4])
if tonumber(n) == 1 then
	redis.call("EXPIREAT", KEYS[4], ARGV[2])
end
local total = redis.call("GET", KEYS[5])
if tonumber(total) == tonumber(ARGV[3]) then
	redis.call("SET", KEYS[5], 1)
else
	redis.call("INCR", KEYS[5])
end
if redis.call("HGET", KEYS[6], ARGV[1]) == ARGV[4] then
	redis.call("HDEL", KEYS[6], ARGV[1])
end
return redis.status_reply("OK")
`)

// runsScript reports whether c runs the script whose SHA-1 is sha: EVALSHA
// of it, or EVAL of its source.
func runsScript(c *redis.Cmd, sha string) bool {
	args := c.Args()
	if len(args) < 2 {
		return false
	}
	switch c.Name() {
	case "evalsha":
		v, _ := args[1].(string)
		return v == sha
	case "eval":
		src, _ := args[1].(string)
		sum := sha1.Sum([]byte(src))
		return hex.EncodeToString(sum[:]) == sha
	}
	return false
}

// doneOf reports whether c is asynq's done of a task of a watched queue
// that doneClaim stands in for, and which queue and task.
func (r *Recovery) doneOf(c *redis.Cmd) (q, id string, ok bool) {
	args := c.Args()
	if len(args) != 11 || !numKeys(args[2], 5) {
		return "", "", false
	}
	first, _ := args[3].(string)
	q, prefixed := strings.CutPrefix(first, "asynq:{")
	if q, ok = strings.CutSuffix(q, "}:active"); !prefixed || !ok || !r.watched[q] || !runsScript(c, asynqDoneSHA) {
		return "", "", false
	}
	id, ok = args[8].(string)
	return q, id, ok
}

// finish runs asynq's done c of task id on queue q with the release of the
// task's claim, when the task is one this worker claimed; it reports
// whether it ran c (else the caller does, and the claim goes at a beat).
// The claim is forgotten here unless a run of the handler is still under
// way, which a beat then releases.
func (r *Recovery) finish(ctx context.Context, rdb redis.UniversalClient, q, id string, c *redis.Cmd) (bool, error) {
	k := q + "\x00" + id
	r.mu.Lock()
	h := r.held[k]
	r.mu.Unlock()
	if h == nil {
		return false, nil
	}
	args := c.Args()
	keys := []string{asynqKey(q, "active"), asynqKey(q, "lease"), "", "", "", claimsKey(q)}
	for i := 2; i < 5; i++ {
		if keys[i], _ = args[3+i].(string); keys[i] == "" {
			return false, nil
		}
	}
	v, err := doneClaim.Run(ctx, rdb, keys, args[8], args[9], args[10], h.holder).Result()
	if err != nil {
		return true, err
	}
	c.SetVal(v)
	r.mu.Lock()
	if r.held[k] == h && h.running == 0 {
		delete(r.held, k)
	}
	r.mu.Unlock()
	return true, nil
}

// The scripts around another asynq's dequeue, sent with EVAL inside the
// transaction (Redis caches them as it does EVALSHA's).
const beforeDequeue = `
redis.call("SET", KEYS[1], redis.call("LLEN", KEYS[2]))
return 1`

const afterDequeue = `
local before = tonumber(redis.call("GET", KEYS[3]) or "-1")
redis.call("DEL", KEYS[3])
if before >= 0 and redis.call("LLEN", KEYS[2]) > before then
	local id = redis.call("LINDEX", KEYS[2], 0)
	redis.call("HSET", KEYS[1], id, ARGV[1])
	return id
end
return false`

// dequeue runs asynq's dequeue c on queue q with the claim, and gives c
// asynq's answer. A queue whose pending list was empty at the last look
// (see pendingEmpty) is answered at once, as asynq's dequeue would answer:
// a worker polls each of its queues in turn, the delivery pool several, so
// most polls find one empty, and each would otherwise cost a round trip
// and about a dozen commands.
func (r *Recovery) dequeue(ctx context.Context, rdb redis.UniversalClient, q string, c *redis.Cmd) error {
	if r.pendingEmpty(ctx, rdb, q) {
		c.SetErr(redis.Nil)
		return redis.Nil
	}
	holder := r.instance + " " + strconv.FormatUint(r.runs.Add(1), 10)
	if args := c.Args(); len(args) == 9 && runsScript(c, asynqDequeueSHA) {
		keys := []string{asynqKey(q, "pending"), asynqKey(q, "paused"), asynqKey(q, "active"), asynqKey(q, "lease"), claimsKey(q)}
		v, err := dequeueClaim.Run(ctx, rdb, keys, args[7], args[8], holder).Slice()
		if err != nil {
			if errors.Is(err, redis.Nil) {
				r.sawEmpty(q) // another worker took it first
			}
			return err // redis.Nil when the queue had nothing
		}
		id, _ := v[1].(string)
		r.mu.Lock()
		r.held[q+"\x00"+id] = &heldTask{claim: claim{queue: q, task: id, holder: holder}, at: time.Now()}
		r.mu.Unlock()
		if v[0] == nil {
			return redis.Nil // as asynq's script answers a task without its message
		}
		c.SetVal(v[0])
		return nil
	}
	llen := "gatehouse:{" + q + "}:dequeuing"
	var inner, after *redis.Cmd
	_, _ = rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.Eval(ctx, beforeDequeue, []string{llen, asynqKey(q, "active")})
		inner = p.Do(ctx, c.Args()...)
		after = p.Eval(ctx, afterDequeue, []string{claimsKey(q), asynqKey(q, "active"), llen}, holder)
		return nil
	})
	v, err := inner.Result()
	c.SetVal(v)
	if err != nil {
		return err
	}
	if id, aerr := after.Text(); aerr == nil && id != "" {
		r.mu.Lock()
		r.held[q+"\x00"+id] = &heldTask{claim: claim{queue: q, task: id, holder: holder}, at: time.Now()}
		r.mu.Unlock()
	}
	return nil
}

// lookFor is how long one look at the pending lists of a group of queues
// serves: the polls of one round of asynq's dequeue loop (every queue of a
// server in turn) share it. A task pushed just after a look waits this much
// longer at most.
const lookFor = 5 * time.Millisecond

// pendingLook is the last look at the pending lists of a group of queues
// one server polls: the delivery queues, or the others.
type pendingLook struct {
	queues []string
	mu     sync.Mutex
	at     time.Time
	empty  map[string]bool
}

// lookGroups returns each queue's look: one shared by the delivery queues,
// one by the others.
func lookGroups(queues []string) map[string]*pendingLook {
	deliveries, others := &pendingLook{}, &pendingLook{}
	out := make(map[string]*pendingLook, len(queues))
	for _, q := range queues {
		g := others
		if q == LegacyWebhookQueue || isWebhookQueue(q) {
			g = deliveries
		}
		g.queues = append(g.queues, q)
		out[q] = g
	}
	return out
}

// pendingEmpty reports whether q's pending list was empty at the last look
// at its group, one pipeline of LLENs taken when the last is older than
// lookFor. On an error it reports false: the dequeue itself decides.
func (r *Recovery) pendingEmpty(ctx context.Context, rdb redis.UniversalClient, q string) bool {
	l := r.looks[q]
	if l == nil {
		return false
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if time.Since(l.at) >= lookFor {
		lens := make(map[string]*redis.IntCmd, len(l.queues))
		_, err := rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			for _, name := range l.queues {
				lens[name] = p.LLen(ctx, asynqKey(name, "pending"))
			}
			return nil
		})
		if err != nil {
			l.at = time.Time{}
			return false
		}
		l.empty = make(map[string]bool, len(lens))
		for name, n := range lens {
			l.empty[name] = n.Val() == 0
		}
		l.at = time.Now()
	}
	return l.empty[q]
}

// sawEmpty notes that a dequeue found q's pending list empty: until the
// next look, q's polls are answered without a dequeue, as if the look had
// found it so.
func (r *Recovery) sawEmpty(q string) {
	l := r.looks[q]
	if l == nil {
		return
	}
	l.mu.Lock()
	if l.empty != nil {
		l.empty[q] = true
	}
	l.mu.Unlock()
}

// releaseScript removes a claim if it is still the one this worker wrote.
const releaseScript = `
if redis.call("HGET", KEYS[1], ARGV[1]) == ARGV[2] then
	return redis.call("HDEL", KEYS[1], ARGV[1])
end
return 0`

// release removes the claims of the tasks asynq is done with.
func (r *Recovery) release(ctx context.Context) {
	now := time.Now()
	r.mu.Lock()
	todo := r.unreleased
	r.unreleased = nil
	for k, h := range r.held {
		if h.running > 0 {
			continue
		}
		if (!h.finished.IsZero() && now.Sub(h.finished) >= recoveryBeat) || (h.finished.IsZero() && now.Sub(h.at) >= unstartedAfter) {
			todo = append(todo, h.claim)
			delete(r.held, k)
		}
	}
	r.mu.Unlock()
	if len(todo) == 0 {
		return
	}
	cmds, _ := r.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for _, c := range todo {
			p.Eval(ctx, releaseScript, []string{claimsKey(c.queue)}, c.task, c.holder)
		}
		return nil
	})
	var failed []claim
	for i, cmd := range cmds {
		if cmd.Err() != nil && i < len(todo) {
			failed = append(failed, todo[i])
		}
	}
	if len(failed) > 0 {
		r.mu.Lock()
		r.unreleased = append(r.unreleased, failed...)
		r.mu.Unlock()
	}
}

// beatScript writes the worker's entry: alive until Redis' time plus ARGV[3]
// ms, renewed on the connection whose CLIENT ID is ARGV[2].
var beatScript = redis.NewScript(`
local t = redis.call("TIME")
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call("HSET", KEYS[1], ARGV[1], "live " .. tostring(now + tonumber(ARGV[3])) .. " " .. ARGV[2])
return 1`)

// beat renews the worker's entry on the connection Recovery holds, the one
// other workers look for, and retries the releases that failed.
func (r *Recovery) beat() error {
	ctx, cancel := context.WithTimeout(context.Background(), recoveryCallTimeout)
	defer cancel()
	if r.conn == nil {
		conn, err := r.dedicatedConn(ctx)
		if err != nil {
			return err
		}
		r.conn = conn
	}
	id, err := r.conn.ClientID(ctx).Result()
	if err == nil {
		r.clientID.Store(strconv.FormatInt(id, 10))
		err = beatScript.Run(ctx, r.conn, []string{workersKey}, r.instance, id, recoveryExpiry.Milliseconds()).Err()
	}
	if err != nil {
		_ = r.conn.Close()
		r.conn = nil
		return err
	}
	r.release(ctx)
	return nil
}

// dedicatedConn is a connection of its own on the node that holds workersKey.
func (r *Recovery) dedicatedConn(ctx context.Context) (*redis.Conn, error) {
	switch c := r.rdb.(type) {
	case *redis.Client:
		return c.Conn(), nil
	case *redis.ClusterClient:
		node, err := c.MasterForKey(ctx, workersKey)
		if err != nil {
			return nil, err
		}
		return node.Conn(), nil
	}
	return nil, fmt.Errorf("recovery: unsupported Redis client %T", r.rdb)
}

// connected reports which of the client ids have a connection open on the
// node that holds workersKey.
func (r *Recovery) connected(ctx context.Context, ids []string) (map[string]bool, error) {
	args := []any{"CLIENT", "LIST", "ID"}
	for _, id := range ids {
		args = append(args, id)
	}
	node := r.rdb
	if c, ok := r.rdb.(*redis.ClusterClient); ok {
		n, err := c.MasterForKey(ctx, workersKey)
		if err != nil {
			return nil, err
		}
		node = n
	}
	list, err := node.Do(ctx, args...).Text()
	if err != nil {
		return nil, err
	}
	out := map[string]bool{}
	for _, line := range strings.Split(list, "\n") {
		for _, f := range strings.Fields(line) {
			if id, ok := strings.CutPrefix(f, "id="); ok {
				out[id] = true
			}
		}
	}
	return out, nil
}

// scanScript returns Redis' time in ms and the workers hash.
var scanScript = redis.NewScript(`
local t = redis.call("TIME")
local out = redis.call("HGETALL", KEYS[1])
table.insert(out, 1, tostring(tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)))
return out`)

// markScript marks a worker dead if its entry is still the one seen.
var markScript = redis.NewScript(`
if redis.call("HGET", KEYS[1], ARGV[1]) ~= ARGV[2] then
	return 0
end
local t = redis.call("TIME")
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call("HSET", KEYS[1], ARGV[1], "dead " .. ARGV[3] .. " " .. tostring(now))
return 1`)

type workerEntry struct {
	live     bool
	deadline int64  // ms, Redis' clock
	client   string // live: the CLIENT ID it renews on
	marked   int64  // dead: when it was marked, ms
}

func parseEntry(v string) (workerEntry, bool) {
	f := strings.Fields(v)
	if len(f) != 3 || (f[0] != "live" && f[0] != "dead") {
		return workerEntry{}, false
	}
	deadline, err := strconv.ParseInt(f[1], 10, 64)
	if err != nil {
		return workerEntry{}, false
	}
	e := workerEntry{live: f[0] == "live", deadline: deadline}
	if e.live {
		if _, err := strconv.ParseUint(f[2], 10, 64); err != nil {
			return workerEntry{}, false
		}
		e.client = f[2]
	} else if e.marked, err = strconv.ParseInt(f[2], 10, 64); err != nil {
		return workerEntry{}, false
	}
	return e, true
}

// poll looks for dead workers once and puts their tasks back.
func (r *Recovery) poll() error {
	ctx, cancel := context.WithTimeout(context.Background(), 4*recoveryCallTimeout)
	defer cancel()
	vals, err := scanScript.Run(ctx, r.rdb, []string{workersKey}).StringSlice()
	if err != nil {
		return err
	}
	if len(vals) == 0 {
		return errors.New("recovery: empty scan")
	}
	now, err := strconv.ParseInt(vals[0], 10, 64)
	if err != nil {
		return fmt.Errorf("recovery: Redis time %q: %w", vals[0], err)
	}
	seen := map[string]bool{}
	type candidate struct {
		instance, value string
		e               workerEntry
	}
	var candidates []candidate
	for i := 1; i+1 < len(vals); i += 2 {
		instance, value := vals[i], vals[i+1]
		if instance == r.instance {
			continue
		}
		e, ok := parseEntry(value)
		if !ok {
			continue
		}
		seen[instance] = true
		switch {
		case !e.live && now-e.marked > tombstoneTTL.Milliseconds():
			r.forget(ctx, instance, value)
		case !e.live && now-e.marked <= recoveryMaxAge.Milliseconds():
			// Marked dead a moment ago: finish what the worker that
			// marked it may not have (it is idempotent).
			r.requeue(ctx, instance, e.deadline)
		case e.live:
			candidates = append(candidates, candidate{instance, value, e})
		}
	}
	for instance := range r.absent {
		if !seen[instance] {
			delete(r.absent, instance)
		}
	}
	// The worker's own connection is looked for too: a Redis that does not
	// list it (a proxy in between) could not show another's gone either.
	own, _ := r.clientID.Load().(string)
	ids := make([]string, len(candidates), len(candidates)+1)
	for i, c := range candidates {
		ids[i] = c.e.client
	}
	if own != "" {
		ids = append(ids, own)
	}
	if len(ids) == 0 {
		return nil
	}
	open, err := r.connected(ctx, ids)
	if err != nil {
		return err
	}
	if own != "" && !open[own] {
		return fmt.Errorf("recovery: CLIENT LIST does not show this worker's own connection (id %s): a proxy between the worker and Redis?", own)
	}
	for _, c := range candidates {
		if open[c.e.client] {
			delete(r.absent, c.instance) // alive, or stalled: its tasks stay
			continue
		}
		since, ok := r.absent[c.instance]
		if !ok {
			r.absent[c.instance] = time.Now()
			continue
		}
		if time.Since(since) < recoveryGrace || c.e.deadline >= now {
			continue
		}
		delete(r.absent, c.instance)
		marked, err := markScript.Run(ctx, r.rdb, []string{workersKey}, c.instance, c.value, c.e.deadline).Int()
		if err != nil {
			return err
		}
		if marked == 1 {
			r.requeue(ctx, c.instance, c.e.deadline)
		}
	}
	return nil
}

// requeue puts back the tasks a dead worker claimed, in every queue.
func (r *Recovery) requeue(ctx context.Context, instance string, deadline int64) {
	var requeued, left int64
	for _, q := range r.queues {
		n, err := r.rescue(ctx, q, instance, deadline, true)
		if err != nil {
			r.warn("recovery: could not put back a dead worker's tasks", err)
			continue
		}
		r.counter.WithLabelValues(q, "requeued").Add(float64(n[0]))
		r.counter.WithLabelValues(q, "left").Add(float64(n[1]))
		requeued += n[0]
		left += n[1]
	}
	if requeued > 0 || left > 0 {
		r.log.Warn("recovered the tasks of a worker that stopped", "worker", instance, "requeued", requeued, "left_to_asynq", left)
	}
}

// forget drops a long-dead worker's claims and entry.
func (r *Recovery) forget(ctx context.Context, instance, value string) {
	for _, q := range r.queues {
		if _, err := r.rescue(ctx, q, instance, 0, false); err != nil {
			return
		}
	}
	_ = forgetScript.Run(ctx, r.rdb, []string{workersKey}, instance, value).Err()
}

var forgetScript = redis.NewScript(`
if redis.call("HGET", KEYS[1], ARGV[1]) == ARGV[2] then
	return redis.call("HDEL", KEYS[1], ARGV[1])
end
return 0`)

// rescueScript drops every claim of worker ARGV[1] in one queue and, when
// ARGV[7] is 1 and the worker's deadline ARGV[6] is at most ARGV[5] ms ago,
// puts each claimed task that is still active back at the head of the
// pending list, as asynq's own requeue on shutdown does (asynq v0.26.0's
// requeueCmd, asynqRequeueSHA: LREM active, ZREM lease, RPUSH pending,
// state pending). A task
// put back ARGV[4] times already is left active, for asynq's recovery.
//
// KEYS: claims, asynq active, asynq lease, asynq pending.
// ARGV: instance, task key prefix, rescued key prefix, max rescues, max age
// ms, deadline ms, requeue (1/0), rescued TTL s.
var rescueScript = redis.NewScript(`
local t = redis.call("TIME")
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local requeue = ARGV[7] == "1" and now - tonumber(ARGV[6]) <= tonumber(ARGV[5])
local claims = redis.call("HGETALL", KEYS[1])
local prefix = ARGV[1] .. " "
local requeued, left = 0, 0
for i = 1, #claims, 2 do
	local id, holder = claims[i], claims[i + 1]
	if string.sub(holder, 1, #prefix) == prefix then
		redis.call("HDEL", KEYS[1], id)
		local key = ARGV[2] .. id
		if requeue and redis.call("HGET", key, "state") == "active" then
			local rk = ARGV[3] .. id
			if tonumber(redis.call("GET", rk) or "0") >= tonumber(ARGV[4]) then
				left = left + 1
			elseif redis.call("LREM", KEYS[2], 0, id) > 0 then
				redis.call("ZREM", KEYS[3], id)
				redis.call("RPUSH", KEYS[4], id)
				redis.call("HSET", key, "state", "pending")
				redis.call("INCR", rk)
				redis.call("EXPIRE", rk, ARGV[8])
				requeued = requeued + 1
			end
		end
	end
end
return {requeued, left}`)

// rescue runs rescueScript on queue q; it returns how many tasks it put back
// and how many it left to asynq.
func (r *Recovery) rescue(ctx context.Context, q, instance string, deadline int64, requeue bool) ([2]int64, error) {
	flag := "0"
	if requeue {
		flag = "1"
	}
	res, err := rescueScript.Run(ctx, r.rdb,
		[]string{claimsKey(q), asynqKey(q, "active"), asynqKey(q, "lease"), asynqKey(q, "pending")},
		instance, asynqKey(q, "t:"), rescuedPrefix(q), recoveryMaxRescues, recoveryMaxAge.Milliseconds(),
		deadline, flag, int64(rescuedTTL.Seconds())).Int64Slice()
	if err != nil {
		return [2]int64{}, err
	}
	if len(res) != 2 {
		return [2]int64{}, fmt.Errorf("recovery: unexpected answer %v", res)
	}
	return [2]int64{res[0], res[1]}, nil
}

// warn logs at most once every 10 s.
func (r *Recovery) warn(msg string, err error) {
	now := time.Now().Unix()
	last := r.warned.Load()
	if now-last < 10 || !r.warned.CompareAndSwap(last, now) {
		return
	}
	r.log.Warn(msg, "err", err)
}

// numKeys reports whether an EVAL's numkeys argument, as go-redis passes it
// (an int), is n, without formatting it on every script call.
func numKeys(arg any, n int) bool {
	switch v := arg.(type) {
	case int:
		return v == n
	case int64:
		return v == int64(n)
	case string:
		return v == strconv.Itoa(n)
	}
	return false
}
