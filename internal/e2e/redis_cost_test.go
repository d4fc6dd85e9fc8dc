package e2e

import (
	"context"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// TestRedisCostPerCharge measures what a charge costs Redis with a
// merchant whose three endpoints take every event: charges created and
// captured (two events, six deliveries each), one after another, and the
// Redis commands (INFO commandstats) and Redis CPU (used_cpu_user +
// used_cpu_sys) from the first charge to the last delivery's arrival. An
// idle stretch before measures what the processes cost Redis doing nothing
// (the workers' polls); the figures are given with and without it. It
// runs only with GATEHOUSE_MEASURE_REDIS=1 (a measurement, not a check);
// GATEHOUSE_MEASURE_CHARGES sets how many charges (300).
func TestRedisCostPerCharge(t *testing.T) {
	if os.Getenv("GATEHOUSE_MEASURE_REDIS") != "1" {
		t.Skip("a measurement: set GATEHOUSE_MEASURE_REDIS=1")
	}
	charges := 300
	if n, err := strconv.Atoi(os.Getenv("GATEHOUSE_MEASURE_CHARGES")); err == nil && n > 0 {
		charges = n
	}
	st := newStack(t, stackOptions{env: webhooksStackEnv, workerEnv: webhooksWorkerEnv, redisMode: "single"}, "Redis cost per charge")
	bag := &secretBag{}
	m := newWebhookMerchant(t, st, bag, "127.0.0.62", "cost")
	rcv := newReceiver(t, "cost", always(http.StatusOK))
	for i := range 3 {
		m.endpoint(t, rcv.url()+"/"+strconv.Itoa(i), "charge.created", "charge.captured")
	}
	rdb := st.redis.primaries(t)[0]
	ctx := context.Background()

	time.Sleep(2 * time.Second) // the stack settles
	idle0, idleAt := redisCost(ctx, t, rdb), time.Now()
	time.Sleep(5 * time.Second)
	idle1 := redisCost(ctx, t, rdb)
	idleFor := time.Since(idleAt)

	c0, start := redisCost(ctx, t, rdb), time.Now()
	for i := range charges {
		m.charge(t, "cost-"+strconv.Itoa(i))
	}
	want := charges * 2 * 3
	for rcv.count() < want && time.Since(start) < 2*time.Minute {
		time.Sleep(20 * time.Millisecond)
	}
	took := time.Since(start)
	c1 := redisCost(ctx, t, rdb)
	if got := rcv.count(); got < want {
		t.Fatalf("%d of %d deliveries arrived", got, want)
	}
	idleCmds := float64(idle1.commands-idle0.commands) / idleFor.Seconds()
	idleCPU := (idle1.cpu - idle0.cpu) / idleFor.Seconds()
	cmds := float64(c1.commands - c0.commands)
	cpu := c1.cpu - c0.cpu
	n := float64(charges)
	t.Logf("figures: %d charges, %d deliveries in %s; Redis per charge: %.1f commands, %.0f µs CPU; without the idle rate (%.0f commands/s, %.0f µs CPU/s): %.1f commands, %.0f µs CPU",
		charges, want, took.Round(time.Millisecond), cmds/n, cpu/n*1e6, idleCmds, idleCPU*1e6,
		(cmds-idleCmds*took.Seconds())/n, (cpu-idleCPU*took.Seconds())/n*1e6)
	metrics := string(st.do(t, m.c, http.MethodGet, st.worker+"/metrics", "", "").body)
	var handOffs []string
	for _, r := range []string{"scheduled", "ordered", "endpoint_unknown", "endpoint_not_fast", "endpoint_busy", "merchant_busy"} {
		handOffs = append(handOffs, r+"="+strconv.FormatFloat(metricValue(metrics, `gatehouse_webhook_handoffs_total{reason="`+r+`"}`), 'f', 0, 64))
	}
	t.Logf("first attempts the event tasks handed off (the worker's gatehouse_webhook_handoffs_total): %s", strings.Join(handOffs, " "))
	t.Logf("commands per charge by name: %s", perCharge(c0.byName, c1.byName, n))
	t.Logf("µs of command time per charge by name (a script's includes its commands'): %s", perCharge(c0.usec, c1.usec, n))
}

type redisCostSnapshot struct {
	commands int64
	cpu      float64 // seconds
	byName   map[string]int64
	usec     map[string]int64 // by name; a script's includes its commands'
}

// redisCost reads the server's command counts and CPU.
func redisCost(ctx context.Context, t *testing.T, rdb *redis.Client) redisCostSnapshot {
	t.Helper()
	stats, err := rdb.Info(ctx, "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	cpu, err := rdb.Info(ctx, "cpu").Result()
	if err != nil {
		t.Fatal(err)
	}
	s := redisCostSnapshot{byName: map[string]int64{}, usec: map[string]int64{}}
	for line := range strings.SplitSeq(stats, "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":calls=")
		if !ok {
			continue
		}
		calls, rest, _ := strings.Cut(rest, ",usec=")
		usec, _, _ := strings.Cut(rest, ",")
		v, _ := strconv.ParseInt(calls, 10, 64)
		u, _ := strconv.ParseInt(usec, 10, 64)
		name = strings.TrimPrefix(name, "cmdstat_")
		s.byName[name], s.usec[name] = v, u
		s.commands += v
	}
	for line := range strings.SplitSeq(cpu, "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if ok && (k == "used_cpu_user" || k == "used_cpu_sys") {
			f, _ := strconv.ParseFloat(v, 64)
			s.cpu += f
		}
	}
	return s
}

func perCharge(before, after map[string]int64, n float64) string {
	var b strings.Builder
	for name, v := range after {
		if d := float64(v-before[name]) / n; d >= 0.05 {
			b.WriteString(name + "=" + strconv.FormatFloat(d, 'f', 1, 64) + " ")
		}
	}
	return b.String()
}
