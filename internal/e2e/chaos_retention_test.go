package e2e

// The retention soak: under steady charges whose events are delivered to a
// receiver, with retention compressed to minutes, the tables written per
// event (events, webhook_deliveries, webhook_attempts: every partition,
// indexes included) stop growing once the first retention has passed,
// because the worker drops their partitions. See chaos_test.go for how the
// scale is chosen; docs/reliability.md has the latest full-scale figures.

import (
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"
)

// retentionSample is the size of the three tables at one moment.
type retentionSample struct {
	at         time.Duration // since the load started
	bytes      [3]int64      // events, deliveries, attempts: every partition, indexes included
	rows       [3]int64
	partitions []string // every partition's name, the three tables'
}

var retentionTables = [3]string{"events", "webhook_deliveries", "webhook_attempts"}

func sampleRetention(t *testing.T, st *stack, since time.Time) retentionSample {
	t.Helper()
	ctx, cancel := dbCtx()
	defer cancel()
	s := retentionSample{at: time.Since(since).Round(time.Second)}
	for i, table := range retentionTables {
		err := st.db.Pool.QueryRow(ctx, `SELECT coalesce(sum(pg_total_relation_size(inhrelid)), 0)::bigint,
	coalesce(array_agg(inhrelid::regclass::text), '{}') FROM pg_inherits WHERE inhparent = $1::regclass`, table).
			Scan(&s.bytes[i], new([]string))
		if err != nil {
			t.Fatalf("size of %s: %v", table, err)
		}
		if err := st.db.Pool.QueryRow(ctx, `SELECT count(*) FROM `+table).Scan(&s.rows[i]); err != nil {
			t.Fatalf("rows of %s: %v", table, err)
		}
	}
	rows, err := st.db.Pool.Query(ctx, `SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
WHERE i.inhparent = ANY ('{events,webhook_deliveries,webhook_attempts}'::regclass[])`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var name string
		if err := rows.Scan(&name); err != nil {
			t.Fatal(err)
		}
		s.partitions = append(s.partitions, name)
	}
	return s
}

func (s retentionSample) total() int64 { return s.bytes[0] + s.bytes[1] + s.bytes[2] }

func (s retentionSample) String() string {
	return fmt.Sprintf("t=%s total %d kB (events %d kB/%d rows, deliveries %d kB/%d, attempts %d kB/%d), %d partitions",
		s.at, s.total()/1024, s.bytes[0]/1024, s.rows[0], s.bytes[1]/1024, s.rows[1], s.bytes[2]/1024, s.rows[2], len(s.partitions))
}

// TestChaosRetentionSoak is I16: EVENT_RETENTION and WEBHOOK_LOG_RETENTION of a
// minute (smoke, a minute of load) or three (full, ten minutes), charges
// at a steady rate, each one's two events delivered to a receiver that
// answers 200. Sampled every few seconds (smoke) or 30 s (full): at least
// one partition of each table is dropped (at smoke scale, sampling goes on
// after the load until that has happened, for a loaded machine's slow
// prune), and once the first retention (plus a partition's width and a
// prune period) has passed, the tables' size stays within a bound: at full
// scale, no sample exceeds the first of that window by more than half, the
// last ends within a quarter of it, and the events table holds no more than
// the retention's worth of rows. Every charge is answered 201; an event past
// retention is gone (404) and a recent one is served.
func TestChaosRetentionSoak(t *testing.T) {
	chaosParallel(t)
	retention := chaosScale(time.Minute, 3*time.Minute)
	runFor := chaosScale(60*time.Second, 10*time.Minute)
	every := chaosScale(5*time.Second, 30*time.Second)
	env := []string{"EVENT_RETENTION=" + retention.String(), "WEBHOOK_LOG_RETENTION=" + retention.String()}
	st, m := chaosStack(t, "127.0.13.1", stackOptions{env: env})
	rcv := newReceiver(t, "soak", always(200))
	m.endpoint(t, rcv.url(), "charge.created", "charge.captured")

	start := time.Now()
	load := startChaosLoad(t, st, m, "soak", 1, 100*time.Millisecond) // about 10 charges/s, 20 deliveries/s
	var samples []retentionSample
	var oldest string // the first event, gone by the end
	tick := time.NewTicker(every)
	for time.Since(start) < runFor {
		<-tick.C
		s := sampleRetention(t, st, start)
		t.Logf("retention soak: %s", s)
		samples = append(samples, s)
		if oldest == "" {
			ctx, cancel := dbCtx()
			if err := st.db.Pool.QueryRow(ctx, `SELECT id::text FROM events ORDER BY id LIMIT 1`).Scan(&oldest); err != nil {
				t.Fatalf("the first event: %v", err)
			}
			cancel()
		}
	}
	tick.Stop()
	shots := load.end()
	created, _, other, _ := tally(t, shots)
	if created == 0 || other > 0 {
		t.Fatalf("%d charges created, %d other answers", created, other)
	}
	var lat []time.Duration
	for _, s := range shots {
		lat = append(lat, s.end.Sub(s.start))
	}
	slices.Sort(lat)

	// Partitions seen that are gone by the end: dropped. The first event is
	// gone with its partition. Until both hold, sampling goes on: the prune
	// is a task of the maintenance queue, which a loaded machine delays.
	var last retentionSample
	var dropped map[string]int
	var perTable [3]int
	oldGone := false
	for deadline := time.Now().Add(2 * waitFloor); ; {
		last = samples[len(samples)-1]
		dropped, perTable = map[string]int{}, [3]int{}
		for _, s := range samples {
			for _, p := range s.partitions {
				if !slices.Contains(last.partitions, p) {
					dropped[p] = 1
				}
			}
		}
		for p := range dropped {
			for i, table := range retentionTables {
				if strings.HasPrefix(p, table+"_p") {
					perTable[i]++
				}
			}
		}
		oldGone = m.do(t, http.MethodGet, "/v1/events/"+oldest, "").status() == http.StatusNotFound
		if (perTable[0] > 0 && perTable[1] > 0 && perTable[2] > 0 && oldGone) || time.Now().After(deadline) {
			break
		}
		time.Sleep(every)
		s := sampleRetention(t, st, start)
		t.Logf("retention soak, after the load: %s", s)
		samples = append(samples, s)
	}
	for i, table := range retentionTables {
		if perTable[i] == 0 {
			t.Errorf("no partition of %s was dropped in %s", table, last.at)
		}
	}

	// The window after the first retention: partitions are dropped a
	// width (a sixth of the retention) and a prune period (a sixth) after
	// they are due, two periods when the machine is loaded.
	settled := retention + retention/6 + 2*retention/6 + every
	var window []retentionSample
	for _, s := range samples {
		if s.at >= settled {
			window = append(window, s)
		}
	}
	peak := slices.MaxFunc(samples, func(a, b retentionSample) int { return int(a.total() - b.total()) })
	t.Logf("I16 figures: retention %s, %d charges in %s (%.1f/s), charge p50 %s p99 %s max %s, %d partitions dropped (events %d, deliveries %d, attempts %d), peak %d kB at %s, last %s",
		retention, created, runFor, float64(created)/runFor.Seconds(), quantile(lat, 0.5).Round(time.Millisecond),
		quantile(lat, 0.99).Round(time.Millisecond), lat[len(lat)-1].Round(time.Millisecond),
		len(dropped), perTable[0], perTable[1], perTable[2], peak.total()/1024, peak.at, last)
	if chaosFull() {
		if len(window) < 4 {
			t.Fatalf("only %d samples after %s", len(window), settled)
		}
		first := window[0].total()
		for _, s := range window {
			if s.total() > first*3/2 {
				t.Errorf("the tables grew past the first retention: %s, against %d kB at %s", s, first/1024, window[0].at)
			}
		}
		if last.total() > first*5/4 {
			t.Errorf("the tables end at %d kB, against %d kB at %s: still growing", last.total()/1024, first/1024, window[0].at)
		}
	}
	// Rows: no more than the retention's worth and a bit, at the rate seen.
	// How soon the prune comes is the machine's: asserted at full scale.
	rate := float64(created) / runFor.Seconds()
	if limit := int64(2 * rate * settled.Seconds()); last.rows[0] > limit+50 {
		if chaosFull() {
			t.Errorf("events holds %d rows at the end, more than %d (two events a charge over %s)", last.rows[0], limit, settled)
		} else {
			t.Logf("events holds %d rows at the end, more than %d (two events a charge over %s): the prune came late (asserted at full scale)", last.rows[0], limit, settled)
		}
	}

	// The API: an event past retention is gone, a recent one served.
	ctx, cancel := dbCtx()
	defer cancel()
	var recent string
	if err := st.db.Pool.QueryRow(ctx, `SELECT id::text FROM events ORDER BY id DESC LIMIT 1`).Scan(&recent); err != nil {
		t.Fatal(err)
	}
	e := m.do(t, http.MethodGet, "/v1/events/"+recent, "")
	mustExpect(t, e, http.StatusOK, "")
	if e := m.do(t, http.MethodGet, "/v1/events/"+oldest, ""); !oldGone || e.status() != http.StatusNotFound {
		t.Errorf("the first event, %s after it was written: %d %s, want 404", last.at, e.status(), e.body)
	}
}
