package httpapi_test

// Hostile request input: compressed bodies (never expanded), X-Forwarded-For
// over several header lines, and "environment": "live" in every body.

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/gatehouse-pay/gatehouse/internal/apperr"
	"github.com/gatehouse-pay/gatehouse/internal/testenv"
)

// sendReq sends a prepared request and checks the answer against the spec.
func (h *harness) sendReq(t *testing.T, req *http.Request) response {
	t.Helper()
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", req.Method, req.URL.Path, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	h.spec.Check(t, req, resp, raw)
	r := response{status: resp.StatusCode, header: resp.Header, raw: raw}
	_ = json.Unmarshal(raw, &r.body)
	return r
}

// TestEncodedBodiesRefused: a body sent with any Content-Encoding other than
// identity is answered 415 unsupported_media_type at once, on every route, and
// is never decompressed; identity still works. Each encoding list is sent as
// the header lines given.
func TestEncodedBodiesRefused(t *testing.T) {
	// Not parallel: it measures the process's allocations, which other tests would add to.
	h := newHarness(t, paymentsEnv)
	a := h.account("encoded@example.com")
	login := []byte(`{"email":"encoded@example.com","password":"correct horse battery"}`)

	bomb := testenv.GzipBomb(t, 7)                      // 56 KB, under the body limit; 56 MiB expanded
	big := testenv.GzipBomb(t, 200)                     // 1.6 MB, over the body limit; 1.6 GiB expanded
	double := testenv.Gzip(t, testenv.GzipBomb(t, 200)) // a few KB; "gzip, gzip" expands it to 1.6 GiB
	jsonGzip := testenv.Gzip(t, login)                  // a real compressed login
	routes := []struct {
		method, path string
		auth         []string
	}{
		{"POST", "/v1/auth/login", nil},
		{"POST", "/v1/charges", bearer(a.secret)},
		{"GET", "/v1/me", bearer(a.secret)}, // takes no body
	}
	encodings := []struct {
		name  string
		lines []string
		body  []byte
	}{
		{"gzip", []string{"gzip"}, bomb},
		{"gzip over the body limit", []string{"gzip"}, big},
		{"gzip, gzip", []string{"gzip, gzip"}, double},
		{"gzip of real JSON", []string{"gzip"}, jsonGzip},
		{"deflate", []string{"deflate"}, bomb},
		{"br", []string{"br"}, bomb},
		{"zstd", []string{"zstd"}, bomb},
		{"mixed case", []string{"GZip"}, bomb},
		{"x-gzip", []string{"x-gzip"}, bomb},
		{"identity then gzip in one line", []string{"identity, gzip"}, bomb},
		{"two lines, gzip last", []string{"identity", "gzip"}, bomb},
		{"two lines, gzip first", []string{"gzip", "identity"}, bomb},
		{"two lines of gzip", []string{"gzip", "gzip"}, double},
		{"an unknown coding", []string{"snappy"}, bomb},
	}
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	for _, r := range routes {
		for _, e := range encodings {
			t.Run(r.method+" "+r.path+"/"+e.name, func(t *testing.T) {
				req, err := http.NewRequest(r.method, h.base+r.path, bytes.NewReader(e.body))
				if err != nil {
					t.Fatal(err)
				}
				req.Header.Set("Content-Type", "application/json")
				req.Header["Content-Encoding"] = e.lines // one header line per value
				if r.auth != nil {
					req.Header.Set(r.auth[0], r.auth[1])
				}
				got := h.sendReq(t, req)
				want(t, got, 415, "unsupported_media_type")
				if !strings.Contains(got.errField("message"), "Content-Encoding") {
					t.Errorf("message %q does not name Content-Encoding", got.errField("message"))
				}
			})
		}
	}
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	// The API runs in this process: had any body been expanded, the heap
	// would have grown by at least 56 MiB (gigabytes for most of them).
	if grown := int64(after.TotalAlloc) - int64(before.TotalAlloc); grown > 48<<20 {
		t.Errorf("the requests allocated %d MiB: a body was expanded", grown>>20)
	}

	t.Run("identity is accepted", func(t *testing.T) {
		for _, lines := range [][]string{{"identity"}, {"Identity"}, {"identity", "IDENTITY"}, {""}} {
			req, _ := http.NewRequest("POST", h.base+"/v1/auth/login", bytes.NewReader(login))
			req.Header.Set("Content-Type", "application/json")
			req.Header["Content-Encoding"] = lines
			want(t, h.sendReq(t, req), 200, "")
		}
	})
}

// TestNoDecodingBodyReads: the package reads request bodies raw only.
// Ctx.Body decodes Content-Encoding (gzip, deflate, br, nested) with no size
// limit, so a call to it anywhere would reopen the gzip bomb.
func TestNoDecodingBodyReads(t *testing.T) {
	t.Parallel()
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	// c.Body(), c.Request().Body() is raw and allowed; so is Response().Body().
	call := regexp.MustCompile(`\b(c|ctx|fc)\.Body\(\)|BodyGunzip|BodyInflate|BodyUnbrotli|BodyUncompressed|BodyUnzstd`)
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for i, line := range strings.Split(string(src), "\n") {
			if call.MatchString(line) {
				t.Errorf("%s:%d: %s: read the body with BodyRaw", f, i+1, strings.TrimSpace(line))
			}
		}
	}
}

// TestForwardedForLines: behind a trusted proxy the client is the right-most
// untrusted X-Forwarded-For entry over every header line. A client that
// sends its own X-Forwarded-For line, to which the proxy appends another line
// with the real address, must not choose the address the login limit counts.
func TestForwardedForLines(t *testing.T) {
	t.Parallel()
	h := newHarness(t, func(env map[string]string) {
		env["TRUSTED_PROXIES"] = "127.0.0.1/32,10.0.0.0/8"
		env["RATE_LIMIT_LOGIN"] = "3/1m"
	})
	loginAs := func(lines ...string) response {
		req, _ := http.NewRequest("POST", h.base+"/v1/auth/login", strings.NewReader(`{"email":"x@example.com","password":"whatever1"}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header["X-Forwarded-For"] = lines
		return h.sendReq(t, req)
	}
	// The client spoofs a new first line each time; the proxy (10.0.0.2)
	// appends the real peer 203.0.113.7 on a line of its own.
	spoofs := []string{"198.51.100.1", "198.51.100.2", "198.51.100.3", "198.51.100.4", "198.51.100.5"}
	var codes []int
	for _, spoof := range spoofs {
		codes = append(codes, loginAs(spoof, "203.0.113.7, 10.0.0.2").status)
	}
	if want := []int{401, 401, 401, 429, 429}; !equalInts(codes, want) {
		t.Fatalf("logins with a spoofed first X-Forwarded-For line answered %v, want %v (one client, limit 3)", codes, want)
	}
	// Another real client behind the same proxy is counted apart.
	want(t, loginAs("203.0.113.7", "198.51.100.9"), 401, "invalid_credentials")
	// A trusted hop on the last line is skipped; the untrusted entry before it counts.
	want(t, loginAs("198.51.100.10, 203.0.113.7", "10.0.0.3"), 429, "rate_limited")
}

func equalInts(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestLiveModeInEveryBody: "environment": "live" in the body of any route
// that takes one answers 403 live_mode_disabled with the exact message, for
// routes that take an environment and routes that do not.
func TestLiveModeInEveryBody(t *testing.T) {
	t.Parallel()
	h := newHarness(t, paymentsEnv)
	a := h.account("live@example.com")
	ids := map[string]string{
		"/v1/charges/:id/capture":                         "0193a4b2-3c4d-7e5f-8a9b-0c1d2e3f4a5b",
		"/v1/charges/:id/void":                            "0193a4b2-3c4d-7e5f-8a9b-0c1d2e3f4a5b",
		"/v1/webhook_deliveries/:id/retry":                "0193a4b2-3c4d-7e5f-8a9b-0c1d2e3f4a5b",
		"/v1/me/webhook_endpoints/:id":                    "we_0000000000000000000000000",
		"/v1/me/webhook_endpoints/:id/rotate_secret":      "we_0000000000000000000000000",
		"/v1/me/webhook_endpoints/:id/test":               "we_0000000000000000000000000",
		"/v1/me/webhook_endpoints/:id/recover":            "we_0000000000000000000000000",
		"/v1/customers/:id":                               "cus_0000000000000000000000000",
		"/v1/customers/:id/payment_methods":               "cus_0000000000000000000000000",
		"/v1/connectors/:id":                              "conn_00000000000000000000000000",
		"/v1/me/members/:id":                              "mem_00000000000000000000000000",
		"/v1/me/api_keys/:id/roll":                        "key_00000000000000000000000000",
		"/v1/reconciliations/:id/exceptions/:exc/resolve": "rec_00000000000000000000000000",
		"/v1/disputes/:id":                                "dp_00000000000000000000000000",
		"/v1/disputes/:id/close":                          "dp_00000000000000000000000000",
	}
	bodies := []string{
		`{"environment":"live"}`,
		`{"environment":"LIVE"}`,
		`{"environment":"live","unknown_field":1}`,
	}
	seen := 0
	for _, route := range served(h) {
		method, path, _ := strings.Cut(route, " ")
		if method != http.MethodPost && method != http.MethodPatch && method != http.MethodPut {
			continue
		}
		if isChallengePath(path) { // an HTML form with one field and no environment
			continue
		}
		seen++
		row, ok := authzRoutes[route]
		if !ok {
			t.Errorf("%s: no row in authzRoutes", route)
			continue
		}
		if strings.Contains(path, ":id") {
			id, ok := ids[path]
			if !ok {
				t.Errorf("%s: no id for the route in this test", route)
				continue
			}
			path = strings.Replace(path, ":id", id, 1)
			path = strings.Replace(path, ":exc", "exc_00000000000000000000000000", 1)
		}
		var auth []string
		switch {
		case row.auth == public:
		case row.auth.key():
			auth = bearer(a.secret)
		case row.auth == publicKeyOnly:
			auth = bearer(h.publicKeyOf(a.secret))
		default:
			auth = bearer(a.token)
		}
		for _, body := range bodies {
			t.Run(route+"/"+body, func(t *testing.T) {
				got := h.do(method, path, body, auth...)
				want(t, got, 403, "live_mode_disabled")
				if msg := got.errField("message"); msg != apperr.LiveModeMessage {
					t.Errorf("message %q, want %q", msg, apperr.LiveModeMessage)
				}
			})
		}
	}
	if seen < 10 {
		t.Fatalf("only %d body-taking routes found", seen)
	}
	// Data that merely mentions live mode is not a live-mode request.
	r := h.do("POST", "/v1/charges", chargeJSON(set("metadata", map[string]string{"environment": "live"})), bearer(a.secret)...)
	want(t, r, 201, "")
}

// closedWithin reports whether the server closes conn (a read returns EOF or
// an error other than the client's own deadline) within bound; whatever it
// writes first (a 408) is read and ignored.
func closedWithin(conn net.Conn, bound time.Duration) bool {
	_ = conn.SetReadDeadline(time.Now().Add(bound))
	buf := make([]byte, 4096)
	for {
		_, err := conn.Read(buf)
		if err == nil {
			continue
		}
		var ne net.Error
		return !(errors.As(err, &ne) && ne.Timeout())
	}
}

// TestSlowSendersAndIdleConnections: against the real server with a 1 s read
// and idle timeout, a client that sends its headers one byte at a time,
// slower than the read timeout allows, is cut off; an idle keep-alive
// connection is closed. The bound is generous (a loaded machine): what is
// asserted is that the connection is closed, not when.
func TestSlowSendersAndIdleConnections(t *testing.T) {
	t.Parallel()
	h := newHarness(t, func(env map[string]string) {
		env["HTTP_READ_TIMEOUT"] = "1s"
		env["HTTP_IDLE_TIMEOUT"] = "1s"
	})
	addr := strings.TrimPrefix(h.base, "http://")
	const bound = 30 * time.Second

	t.Run("slow headers", func(t *testing.T) {
		conn, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		// 200 ms a byte: the request line alone takes 6 s, the read timeout is 1 s.
		request := "POST /v1/auth/login HTTP/1.1\r\nHost: gatehouse\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}"
		closed := make(chan bool, 1)
		go func() { closed <- closedWithin(conn, bound) }()
		sent := 0
		deadline := time.Now().Add(bound)
		for sent < len(request) && time.Now().Before(deadline) {
			if _, err := conn.Write([]byte{request[sent]}); err != nil {
				break // the server closed the connection: a reset on write
			}
			sent++
			select {
			case ok := <-closed:
				if !ok {
					t.Fatalf("the connection was not closed within %s", bound)
				}
				if sent == len(request) {
					t.Fatal("the whole request was sent before the server cut the connection")
				}
				t.Logf("cut off after %d of %d bytes", sent, len(request))
				return
			case <-time.After(200 * time.Millisecond):
			}
		}
		if ok := <-closed; !ok || sent == len(request) {
			t.Fatalf("a slow sender was not cut off (closed %v, %d of %d bytes sent)", ok, sent, len(request))
		}
	})

	t.Run("idle keep-alive", func(t *testing.T) {
		conn, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		if _, err := conn.Write([]byte("GET /healthz HTTP/1.1\r\nHost: gatehouse\r\n\r\n")); err != nil {
			t.Fatal(err)
		}
		br := bufio.NewReader(conn)
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || resp.Close {
			t.Fatalf("first answer %d (close %v), want 200 on a kept-alive connection", resp.StatusCode, resp.Close)
		}
		_ = conn.SetReadDeadline(time.Now().Add(bound))
		if _, err := br.ReadByte(); err == nil {
			t.Fatal("the server sent bytes on an idle connection")
		} else if ne, ok := err.(net.Error); ok && ne.Timeout() {
			t.Fatalf("an idle keep-alive connection was not closed within %s", bound)
		}
	})
}
