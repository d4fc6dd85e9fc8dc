package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// clockTick is the unit of utime and stime in /proc/<pid>/stat (USER_HZ).
var clockTick = func() time.Duration {
	if out, err := exec.Command("getconf", "CLK_TCK").Output(); err == nil {
		if hz, err := strconv.Atoi(strings.TrimSpace(string(out))); err == nil && hz > 0 {
			return time.Second / time.Duration(hz)
		}
	}
	return 10 * time.Millisecond
}()

// procStat is what the harness reads of one process.
type procStat struct {
	ppid int
	cpu  time.Duration // utime + stime, all threads
}

// readProcStat parses /proc/<pid>/stat; the command name may hold spaces and
// parentheses, so fields are counted from the last ')'.
func readProcStat(pid int) (procStat, bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return procStat{}, false
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return procStat{}, false
	}
	f := strings.Fields(string(b[i+1:]))
	// f[0] is field 3 (state): ppid is field 4, utime 14, stime 15.
	if len(f) < 13 {
		return procStat{}, false
	}
	ppid, _ := strconv.Atoi(f[1])
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return procStat{ppid: ppid, cpu: time.Duration(ut+st) * clockTick}, true
}

func cpuOf(pid int) time.Duration {
	s, _ := readProcStat(pid)
	return s.cpu
}

// pgAux are the cluster's background processes; their work (WAL writing,
// checkpoints) is caused by whoever writes, so it is counted with Postgres.
var pgAux = []string{"checkpointer", "background writer", "walwriter", "autovacuum launcher",
	"logical replication launcher", "archiver", "stats collector", "walsender"}

// postgresProcs returns the CPU of the postmaster, its background processes
// and the backends (and autovacuum workers) of database db, by pid. Backends
// of other databases on the shared server are left out.
func postgresProcs(postmaster int, db string) map[int]time.Duration {
	out := map[int]time.Duration{}
	if postmaster <= 0 {
		return out
	}
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	for _, d := range dirs {
		pid, err := strconv.Atoi(filepath.Base(d))
		if err != nil {
			continue
		}
		s, ok := readProcStat(pid)
		if !ok || (pid != postmaster && s.ppid != postmaster) {
			continue
		}
		if pid != postmaster {
			cmd, _ := os.ReadFile(d + "/cmdline")
			line := " " + strings.ReplaceAll(string(cmd), "\x00", " ") + " "
			keep := strings.Contains(line, " "+db+" ")
			for _, a := range pgAux {
				keep = keep || strings.Contains(line, ": "+a+" ")
			}
			if !keep {
				continue
			}
		}
		out[pid] = s.cpu
	}
	return out
}

// boxTimes reads the machine's busy and total CPU time from /proc/stat.
func boxTimes() (busy, total time.Duration) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, 0
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 5 || f[0] != "cpu" {
		return 0, 0
	}
	for i, v := range f[1:] {
		n, _ := strconv.ParseInt(v, 10, 64)
		if i >= 8 { // guest time is already in user
			break
		}
		total += time.Duration(n) * clockTick
		if i != 3 && i != 4 { // idle, iowait
			busy += time.Duration(n) * clockTick
		}
	}
	return busy, total
}

// cpuSnapshot is every counter a step compares before and after.
type cpuSnapshot struct {
	at        time.Time
	server    time.Duration
	redis     time.Duration
	self      time.Duration
	pg        map[int]time.Duration
	busy, all time.Duration
}

func takeSnapshot(serverPid, redisPid, postmaster int, db string) cpuSnapshot {
	return takeSnapshotOf([]int{serverPid}, redisPid, postmaster, db)
}

// takeSnapshotOf counts the CPU of several server processes (replicas, or
// an API and a worker) as the server's.
func takeSnapshotOf(serverPids []int, redisPid, postmaster int, db string) cpuSnapshot {
	s := cpuSnapshot{at: time.Now(), redis: cpuOf(redisPid), self: cpuOf(os.Getpid()), pg: postgresProcs(postmaster, db)}
	for _, p := range serverPids {
		s.server += cpuOf(p)
	}
	s.busy, s.all = boxTimes()
	return s
}

// cpuUse is the CPU spent during a step, per request and in cores.
type cpuUse struct {
	Server, Postgres, Redis, Loadgen time.Duration // per request
	BusyCores, OtherCores            float64       // whole machine; other = busy minus the four above
}

// Total is the server side: the server under test, Postgres and Redis.
func (c cpuUse) Total() time.Duration { return c.Server + c.Postgres + c.Redis }

func cpuBetween(a, b cpuSnapshot, requests int) cpuUse {
	var pg time.Duration
	for pid, t := range b.pg {
		pg += t - a.pg[pid] // a backend born during the step counts whole
	}
	server, redis, self := b.server-a.server, b.redis-a.redis, b.self-a.self
	wall := b.at.Sub(a.at).Seconds()
	var u cpuUse
	if wall > 0 {
		u.BusyCores = (b.busy - a.busy).Seconds() / wall
		u.OtherCores = max(0, u.BusyCores-(server+redis+self+pg).Seconds()/wall)
	}
	if requests > 0 {
		n := time.Duration(requests)
		u.Server, u.Postgres, u.Redis, u.Loadgen = server/n, pg/n, redis/n, self/n
	}
	return u
}

// othersCores measures, over d, how many cores the machine spent outside the
// given processes and the bench database's Postgres.
func othersCores(d time.Duration, pids []int, postmaster int, db string) float64 {
	ours := func() time.Duration {
		t := cpuOf(os.Getpid())
		for _, p := range pids {
			t += cpuOf(p)
		}
		for _, c := range postgresProcs(postmaster, db) {
			t += c
		}
		return t
	}
	b0, _ := boxTimes()
	o0, t0 := ours(), time.Now()
	time.Sleep(d)
	b1, _ := boxTimes()
	o1, wall := ours(), time.Since(t0).Seconds()
	return max(0, ((b1-b0)-(o1-o0)).Seconds()/wall)
}

// pgByKind splits the Postgres CPU between two snapshots by process: the
// database's backends, autovacuum workers, and each background process.
func pgByKind(a, b cpuSnapshot) map[string]time.Duration {
	out := map[string]time.Duration{}
	for pid, t := range b.pg {
		d := t - a.pg[pid]
		if d <= 0 {
			continue
		}
		cmd, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
		line := strings.ReplaceAll(string(cmd), "\x00", " ")
		kind := "backends"
		switch {
		case strings.Contains(line, "autovacuum worker"):
			kind = "autovacuum"
		case len(cmd) == 0:
			kind = "exited"
		default:
			for _, aux := range pgAux {
				if strings.Contains(line, ": "+aux) {
					kind = aux
				}
			}
			if !strings.HasPrefix(line, "postgres: ") && kind == "backends" {
				kind = "postmaster"
			}
		}
		out[kind] += d
	}
	return out
}

// kindsText is pgByKind per delivery, largest first, as "backends 120µs, ...".
func kindsText(m map[string]time.Duration, n int) string {
	type kv struct {
		k string
		v time.Duration
	}
	var list []kv
	for k, v := range m {
		list = append(list, kv{k, v})
	}
	slices.SortFunc(list, func(a, b kv) int { return int(b.v - a.v) })
	parts := make([]string, 0, len(list))
	for _, e := range list {
		parts = append(parts, e.k+" "+us(e.v/time.Duration(max(n, 1))))
	}
	return strings.Join(parts, ", ")
}
