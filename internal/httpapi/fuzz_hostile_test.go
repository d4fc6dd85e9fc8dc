package httpapi

// Fuzz targets for hostile request input: Content-Encoding over several
// lines, X-Forwarded-For over several lines, and the fingerprint that makes
// a creating POST idempotent. Their seeds run as ordinary tests.

import (
	"bufio"
	"bytes"
	"net"
	"net/netip"
	"strings"
	"testing"

	"github.com/gofiber/fiber/v2"
	"github.com/valyala/fasthttp"

	"github.com/gatehouse-pay/gatehouse/internal/keyring"
)

// parseRequest reads a raw HTTP/1.1 request as the server would; false when
// fasthttp refuses it.
func parseRequest(raw string) (*fasthttp.Request, bool) {
	req := new(fasthttp.Request)
	if err := req.Read(bufio.NewReader(strings.NewReader(raw))); err != nil {
		return nil, false
	}
	return req, true
}

// headerLines renders each value as its own header line named name; values
// holding CR or LF are dropped (they cannot be one line).
func headerLines(name string, values []string) string {
	var b strings.Builder
	for _, v := range values {
		if strings.ContainsAny(v, "\r\n") {
			continue
		}
		b.WriteString(name + ": " + v + "\r\n")
	}
	return b.String()
}

// FuzzContentEncoding: a request is treated as encoded exactly when some
// comma-separated token of some Content-Encoding line, whatever the case of
// the header's name, is neither empty nor identity, as the server parses the
// request.
func FuzzContentEncoding(f *testing.F) {
	for _, seed := range [][2]string{
		{"gzip", ""}, {"gzip, gzip", ""}, {"identity", ""}, {"Identity", "IDENTITY"}, {"identity", "gzip"},
		{"gzip", "identity"}, {"", ""}, {" , ,", ""}, {"deflate", ""}, {"br", ""}, {"zstd", ""}, {"GZIP", ""},
		{"x-gzip", ""}, {"identity,br", ""}, {"identity\tgzip", ""}, {"identity;q=1", ""},
	} {
		f.Add(seed[0], seed[1], false)
		f.Add(seed[0], seed[1], true)
	}
	f.Fuzz(func(t *testing.T, first, second string, lowerName bool) {
		name := "Content-Encoding"
		if lowerName {
			name = "content-encoding"
		}
		raw := "POST /v1/auth/login HTTP/1.1\r\nHost: gatehouse\r\nContent-Type: application/json\r\n" +
			headerLines(name, []string{first, second}) + "Content-Length: 2\r\n\r\n{}"
		req, ok := parseRequest(raw)
		if !ok {
			return
		}
		var lines []string
		req.Header.VisitAll(func(k, v []byte) {
			if strings.EqualFold(string(k), "Content-Encoding") {
				lines = append(lines, string(v))
			}
		})
		want := false
		for _, line := range lines {
			for _, tok := range strings.Split(line, ",") {
				tok = strings.Trim(tok, " \t")
				if tok != "" && !strings.EqualFold(tok, "identity") {
					want = true
				}
			}
		}
		if got := encoded(&req.Header); got != want {
			t.Fatalf("encoded(lines %q) = %v, want %v", lines, got, want)
		}
	})
}

// FuzzClientIPLines: the client behind trusted proxies is the same whether
// X-Forwarded-For comes as several lines or as one line joined with commas,
// so a client's own first line can never outrank a line a proxy appended.
func FuzzClientIPLines(f *testing.F) {
	f.Add("198.51.100.1", "203.0.113.7, 10.0.0.2", "")
	f.Add("198.51.100.1", "203.0.113.7", "10.0.0.3")
	f.Add("garbage", "203.0.113.7", "")
	f.Add("203.0.113.7", "garbage", "")
	f.Add("10.0.0.9", "10.0.0.8", "10.0.0.7")
	f.Add("", "", "")
	f.Add("::ffff:198.51.100.1", "2001:db8::1", "fd00::1")
	trusted := trustedProxies{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("fd00::/8")}
	peer := netip.MustParseAddr("10.0.0.1")
	f.Fuzz(func(t *testing.T, a, b, c string) {
		lines := []string{a, b, c}
		many, ok := parseRequest("GET /v1/me HTTP/1.1\r\nHost: gatehouse\r\n" + headerLines("X-Forwarded-For", lines) + "\r\n")
		if !ok {
			return
		}
		var seen []string
		many.Header.VisitAll(func(k, v []byte) {
			if strings.EqualFold(string(k), fiber.HeaderXForwardedFor) {
				seen = append(seen, string(v))
			}
		})
		one, ok := parseRequest("GET /v1/me HTTP/1.1\r\nHost: gatehouse\r\n" + headerLines("X-Forwarded-For", []string{strings.Join(seen, ",")}) + "\r\n")
		if !ok {
			return
		}
		got := forwardedClient(&many.Header, peer, trusted)
		joined := forwardedClient(&one.Header, peer, trusted)
		if len(seen) > 0 && got != joined {
			t.Fatalf("lines %q give %s, joined %s", seen, got, joined)
		}
		// Through a Fiber context with the peer trusted, as the server runs.
		s := &server{trusted: trusted}
		var viaCtx netip.Addr
		withCtx(func(r *fasthttp.Request) { many.CopyTo(r) }, &net.TCPAddr{IP: peer.AsSlice(), Port: 40000},
			func(c *fiber.Ctx) { viaCtx = s.clientIP(c) })
		if viaCtx != got {
			t.Fatalf("clientIP = %s, forwardedClient = %s for lines %q", viaCtx, got, seen)
		}
	})
}

// FuzzCreateFingerprint: the fingerprint that keys a creating POST (webhook
// endpoint, API key, charge) is a function of method, path and raw body: the
// same request gives the same fingerprint, a different body or route another
// one, and it never contains the body (which may hold a secret or a card).
func FuzzCreateFingerprint(f *testing.F) {
	for _, b := range []string{
		`{"url":"https://hooks.example.com/a","events":["charge.captured"]}`,
		`{"url":"https://hooks.example.com/a","events":["charge.captured"] }`,
		`{"name":"ci"}`, `{}`, ``, `{"environment":"live"}`,
	} {
		f.Add([]byte(b), []byte(`{"name":"other"}`))
	}
	kr, err := keyring.New(bytes.Repeat([]byte{0xcd}, 32))
	if err != nil {
		f.Fatal(err)
	}
	s := &server{Deps: Deps{Keyring: kr}}
	fingerprint := func(path string, body []byte) []byte {
		var fp []byte
		withCtx(func(r *fasthttp.Request) {
			r.Header.SetMethod(fiber.MethodPost)
			r.SetRequestURI(path)
			r.Header.Set(headerIdempotencyKey, "k-1")
			r.SetBody(body)
		}, nil, func(c *fiber.Ctx) {
			req, err := s.idempotent(c)
			if err != nil || req == nil {
				panic("idempotent refused a valid key")
			}
			fp = req.Fingerprint
		})
		return fp
	}
	f.Fuzz(func(t *testing.T, body, other []byte) {
		const endpoints, keys = "/v1/me/webhook_endpoints", "/v1/me/api_keys"
		a, again := fingerprint(endpoints, body), fingerprint(endpoints, bytes.Clone(body))
		if !bytes.Equal(a, again) {
			t.Fatalf("one body, two fingerprints: %x %x", a, again)
		}
		if !bytes.Equal(body, other) && bytes.Equal(a, fingerprint(endpoints, other)) {
			t.Fatalf("bodies %q and %q share a fingerprint", body, other)
		}
		if bytes.Equal(a, fingerprint(keys, body)) {
			t.Fatalf("one fingerprint for two routes")
		}
		if len(body) >= 8 && bytes.Contains(a, body) {
			t.Fatalf("the fingerprint holds the body")
		}
	})
}
