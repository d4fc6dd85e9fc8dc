package e2e

// Compressed request bodies against the real bin/api: gzip bombs that would
// expand to gigabytes are answered 415 at once, with flat memory.

import (
	"bytes"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gatehouse-pay/gatehouse/internal/testenv"
)

// procStatus returns the process's resident set (VmRSS) in bytes and its CPU
// time (user + system) from /proc.
func procStatus(t *testing.T, pid int) (rss int64, cpu time.Duration) {
	t.Helper()
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(status), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			if err != nil {
				t.Fatalf("VmRSS %q: %v", rest, err)
			}
			rss = kb << 10
		}
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		t.Fatal(err)
	}
	// Fields after the command name (which may hold spaces): state is the
	// first, utime the 12th and stime the 13th, in clock ticks (100 a second).
	fields := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+1:]))
	utime, _ := strconv.ParseInt(fields[11], 10, 64)
	stime, _ := strconv.ParseInt(fields[12], 10, 64)
	return rss, time.Duration(utime+stime) * 10 * time.Millisecond
}

// TestCompressedBodyBombs is B6: bodies that expand to 1.6 GiB (gzip over one or
// two layers, and under every other coding name) sent to the login route,
// the charge route with a valid key and a route that takes no body are all
// answered 415 unsupported_media_type, and the API's resident memory grows
// by less than 64 MiB over all of them.
func TestCompressedBodyBombs(t *testing.T) {
	parallel(t)
	st := newStack(t, stackOptions{}, "compressed request bodies")
	c := newClient(t, "127.0.0.1")
	_, token := st.signUp(t, c, "bomb", "Bomb Shop")
	key := st.newKey(t, c, token, "bomb")
	pid := st.apis[0].Cmd.Process.Pid
	base := st.replicas[0]

	single := testenv.GzipBomb(t, 200)                  // 1.6 MB on the wire, 1.6 GiB expanded
	double := testenv.Gzip(t, testenv.GzipBomb(t, 200)) // a few KB, 1.6 GiB after two gunzips
	t.Logf("bodies: gzip %d bytes, gzip of gzip %d bytes; each expands to %d MiB", len(single), len(double), 200*8)
	routes := []struct {
		method, path, token string
	}{
		{http.MethodPost, "/v1/auth/login", ""},
		{http.MethodPost, "/v1/charges", key.SecretKey},
		{http.MethodGet, "/v1/me", key.SecretKey},
	}
	encodings := []struct {
		name  string
		lines []string
		body  []byte
	}{
		{"gzip", []string{"gzip"}, single},
		{"gzip, gzip", []string{"gzip, gzip"}, double},
		{"gzip on two lines", []string{"gzip", "gzip"}, double},
		{"GZIP", []string{"GZIP"}, single},
		{"deflate", []string{"deflate"}, double},
		{"br", []string{"br"}, double},
		{"zstd", []string{"zstd"}, double},
	}

	rssBefore, cpuBefore := procStatus(t, pid)
	var slowest time.Duration
	var times []time.Duration
	for _, r := range routes {
		for _, e := range encodings {
			req, err := http.NewRequest(r.method, base+r.path, bytes.NewReader(e.body))
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("Content-Type", "application/json")
			req.Header["Content-Encoding"] = e.lines
			if r.token != "" {
				req.Header.Set("Authorization", "Bearer "+r.token)
			}
			start := time.Now()
			resp, err := c.Do(req)
			if err != nil {
				t.Fatalf("%s %s (%s): %v", r.method, r.path, e.name, err)
			}
			var body bytes.Buffer
			_, _ = body.ReadFrom(resp.Body)
			resp.Body.Close()
			took := time.Since(start)
			slowest = max(slowest, took)
			times = append(times, took)
			ex := exchange{req: req, resp: resp, body: body.Bytes(), start: start, end: time.Now()}
			st.check(t, ex)
			if !expect(t, ex, http.StatusUnsupportedMediaType, "unsupported_media_type") {
				t.Errorf("%s %s with Content-Encoding %q: %d %s", r.method, r.path, e.lines, resp.StatusCode, body.Bytes())
			}
			t.Logf("%s %s, Content-Encoding %q, %d bytes: %d in %s", r.method, r.path, e.lines, len(e.body), resp.StatusCode, took.Round(time.Microsecond))
		}
	}
	rssAfter, cpuAfter := procStatus(t, pid)
	grown := rssAfter - rssBefore
	p50, _, _ := quantiles(times)
	t.Logf("api RSS before %.1f MiB, after %.1f MiB (grown %.1f MiB); CPU %s over %d requests; answer p50 %s, slowest %s",
		float64(rssBefore)/(1<<20), float64(rssAfter)/(1<<20), float64(grown)/(1<<20), cpuAfter-cpuBefore,
		len(routes)*len(encodings), p50.Round(time.Microsecond), slowest.Round(time.Millisecond))
	if grown > 64<<20 {
		t.Errorf("the API's RSS grew by %.1f MiB over the bombs, want under 64 MiB", float64(grown)/(1<<20))
	}

	// The API still serves: identity and no Content-Encoding work.
	ok := st.do(t, c, http.MethodGet, base+"/v1/me", key.SecretKey, "")
	mustExpect(t, ok, http.StatusOK, "")
}
