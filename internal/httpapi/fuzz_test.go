package httpapi

// docs/reliability.md B1: fuzz targets for what the API parses from a client before
// anything else runs: request bodies, the Authorization, Idempotency-Key and
// X-Request-Id headers, X-Forwarded-For behind trusted proxies, and the list
// parameters. Their seeds run as ordinary tests; `make fuzz` explores further.

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"mime"
	"net"
	"net/netip"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/gofiber/fiber/v2"
	"github.com/valyala/fasthttp"

	"github.com/gatehouse-pay/gatehouse/internal/apikeys"
	"github.com/gatehouse-pay/gatehouse/internal/apperr"
	"github.com/gatehouse-pay/gatehouse/internal/auth"
	"github.com/gatehouse-pay/gatehouse/internal/authz"
	"github.com/gatehouse-pay/gatehouse/internal/charges"
	"github.com/gatehouse-pay/gatehouse/internal/idempotency"
	"github.com/gatehouse-pay/gatehouse/internal/ids"
	"github.com/gatehouse-pay/gatehouse/internal/keyring"
	"github.com/gatehouse-pay/gatehouse/internal/listing"
	"github.com/gatehouse-pay/gatehouse/internal/members"
	"github.com/gatehouse-pay/gatehouse/internal/merchants"
	"github.com/gatehouse-pay/gatehouse/internal/refunds"
	"github.com/gatehouse-pay/gatehouse/internal/webhooks"
)

var fuzzApp = fiber.New()

// withCtx runs f on a Fiber context for a request prepared by setup.
func withCtx(setup func(r *fasthttp.Request), remote net.Addr, f func(c *fiber.Ctx)) {
	var fctx fasthttp.RequestCtx
	var req fasthttp.Request
	setup(&req)
	fctx.Init(&req, remote, nil)
	c := fuzzApp.AcquireCtx(&fctx)
	defer fuzzApp.ReleaseCtx(c)
	f(c)
}

// Bodies -------------------------------------------------------------------

// decodeSeeds are realistic bodies of every request type and hostile ones.
var decodeSeeds = []string{
	``, ` `, `{}`, `null`, `[]`, `"x"`, `1`, `true`, `{`, `{"amount":`, `{"amount":1`, `{}{}`, `{} x`, `{}[]`,
	`{"amount":2000,"currency":"USD","payment_method":"card","card":{"number":"4242424242424242","exp_month":12,"exp_year":2030,"cvc":"123"},"capture":true,"description":"Order 1","metadata":{"order":"1"}}`,
	`{"amount":2000,"currency":"USD","payment_method":"card","card":{"number":"4242424242424242","exp_month":12,"exp_year":2030,"cvc":"123","bogus":1}}`,
	`{"charge":"0190f4b6-3c2a-7d4e-8f00-000000000001","amount":500,"reason":"requested_by_customer","metadata":{}}`,
	`{"url":"https://example.com/hooks","events":["charge.captured","refund.created"],"description":"main"}`,
	`{"url":"https://example.com/hooks","events":["*"],"active":false}`,
	`{"email":"merchant@example.com","password":"correct horse battery"}`,
	`{"environment":"test","name":"server"}`,
	`{"amount":100}`, `{"since":"2026-01-01T00:00:00Z"}`,
	`{"amount":1e400}`, `{"amount":-0}`, `{"amount":9223372036854775808}`, `{"amount":-9223372036854775809}`, `{"amount":1.5}`, `{"amount":"100"}`,
	`{"amount":1,"amount":2}`, `{"AMOUNT":1}`, `{"Amount":1}`, `{"amount":null}`, `{"metadata":{"a":"b","a":"c"}}`,
	`{"metadata":{"k\u0000":"v"}}`, `{"description":"a\u0000b"}`, `{"events":["a\u0000"]}`, "{\"description\":\"\xff\xfe\"}", "{\"description\":\"\xed\xa0\x80\"}",
	`{"description":"\ud800"}`, `{"metadata":[]}`, `{"card":[]}`, `{"card":"x"}`, `{"events":"charge.captured"}`, `{"events":[1]}`,
	`{"x":` + strings.Repeat(`[`, 10001) + strings.Repeat(`]`, 10001) + `}`,
	`{"metadata":` + strings.Repeat(`{"a":`, 5000) + `1` + strings.Repeat(`}`, 5000) + `}`,
	`{"card":{"number":"4242424242424242","number":"4000000000000002"}}`,
	"\xef\xbb\xbf{}", "{\"email\":\"a@b\"}\x00", " \t\r\n{}\n",
}

// decodeTargets are the request types of every route that decodes a body.
var decodeTargets = map[string]func() any{
	"charges.create":   func() any { return new(charges.CreateParams) },
	"charges.capture":  func() any { return new(captureRequest) },
	"charges.void":     func() any { return new(struct{}) }, // also rotate_secret, test and retry
	"refunds.create":   func() any { return new(refunds.CreateParams) },
	"endpoints.create": func() any { return new(webhooks.CreateParams) },
	"endpoints.update": func() any { return new(webhooks.UpdateParams) },
	"endpoints.recover": func() any {
		return new(recoverRequest)
	},
	"login":      func() any { return new(loginRequest) },
	"key.create": func() any { return new(createKeyRequest) },
}

func decode(body []byte, contentType string, dst any) error {
	var err error
	withCtx(func(r *fasthttp.Request) {
		r.Header.SetMethod(fiber.MethodPost)
		r.SetRequestURI("/v1/x")
		if contentType != "" {
			r.Header.SetContentType(contentType)
		}
		r.SetBody(body)
	}, nil, func(c *fiber.Ctx) { err = decodeJSON(c, dst) })
	return err
}

// fuzzDecode checks decodeJSON on one request type: it never panics; a
// refusal is a 400 invalid_request (or 415 for a body that is not JSON); an
// accepted body is one JSON object, holds no NUL, and its value re-encodes
// to JSON that decodes to the same value.
func fuzzDecode(f *testing.F, target string) {
	newDst := decodeTargets[target]
	for _, s := range decodeSeeds {
		f.Add([]byte(s), "application/json")
	}
	f.Add([]byte(`{"environment":"live"}`), "application/json")
	f.Add([]byte(`{"environment":"LIVE","amount":1}`), "application/json")
	f.Add([]byte(`{"environment":"\u006cive"}`), "application/json")
	f.Add([]byte(`{"metadata":{"environment":"live"}}`), "application/json")
	f.Add([]byte(`{}`), "text/plain")
	f.Add([]byte(`{}`), "application/json; charset=utf-8")
	f.Add([]byte(`{}`), "application/merge-patch+json")
	f.Add([]byte(`{}`), "application/x-www-form-urlencoded")
	f.Add([]byte(`{}`), "application/json; charset")
	f.Add([]byte(`amount=1`), "")
	f.Fuzz(func(t *testing.T, body []byte, contentType string) {
		dst := newDst()
		err := decode(body, contentType, dst)
		empty := len(bytes.TrimSpace(body)) == 0
		if err != nil {
			e, ok := apperr.As(err)
			switch {
			case !ok:
				t.Fatalf("decode(%q) = %v: not an apperr", body, err)
			case empty:
				t.Fatalf("decode of an empty body = %v, want an empty object", err)
			case e.Kind == apperr.KindUnsupportedMedia:
				if mt, _, err := mime.ParseMediaType(contentType); err == nil && mt == "application/json" {
					t.Fatalf("Content-Type %q refused as not JSON", contentType)
				}
			case e.Code == apperr.CodeLiveModeDisabled:
				var top map[string]any
				_ = json.Unmarshal(body, &top)
				env, _ := top["environment"].(string)
				if e.Message != apperr.LiveModeMessage || !strings.EqualFold(strings.TrimSpace(env), "live") {
					t.Fatalf("decode(%q) = %v: live mode refused without a live environment", body, err)
				}
			case e.Kind != apperr.KindInvalid:
				t.Fatalf("decode(%q) = %v (kind %d), want kind Invalid", body, err, e.Kind)
			case e.Message == "":
				t.Fatalf("decode(%q): an error without a message", body)
			}
			return
		}
		if empty {
			if !reflect.ValueOf(dst).Elem().IsZero() {
				t.Fatalf("an empty body filled %+v", dst)
			}
			return
		}
		if !json.Valid(body) || body[firstNonSpace(body)] != '{' {
			t.Fatalf("accepted %q, which is not one JSON object", body)
		}
		if hasNUL(reflect.ValueOf(dst)) {
			t.Fatalf("accepted %q with a NUL in %+v", body, dst)
		}
		again, err := json.Marshal(dst)
		if err != nil {
			t.Fatalf("re-encoding %+v: %v", dst, err)
		}
		dst2 := newDst()
		if err := decode(again, "application/json", dst2); err != nil {
			t.Fatalf("the re-encoding %s of accepted %q is refused: %v", again, body, err)
		}
		if !reflect.DeepEqual(dst, dst2) {
			t.Fatalf("%q decodes to %+v, its re-encoding %s to %+v", body, dst, again, dst2)
		}
	})
}

func firstNonSpace(b []byte) int {
	return len(b) - len(bytes.TrimLeft(b, " \t\r\n"))
}

func hasNUL(v reflect.Value) bool {
	switch v.Kind() {
	case reflect.Pointer, reflect.Interface:
		return !v.IsNil() && hasNUL(v.Elem())
	case reflect.String:
		return strings.IndexByte(v.String(), 0) >= 0
	case reflect.Struct:
		for i := 0; i < v.NumField(); i++ {
			if v.Type().Field(i).IsExported() && hasNUL(v.Field(i)) {
				return true
			}
		}
	case reflect.Map:
		for it := v.MapRange(); it.Next(); {
			if hasNUL(it.Key()) || hasNUL(it.Value()) {
				return true
			}
		}
	case reflect.Slice:
		for i := 0; i < v.Len(); i++ {
			if hasNUL(v.Index(i)) {
				return true
			}
		}
	}
	return false
}

func FuzzDecodeChargeCreate(f *testing.F)    { fuzzDecode(f, "charges.create") }
func FuzzDecodeChargeCapture(f *testing.F)   { fuzzDecode(f, "charges.capture") }
func FuzzDecodeChargeVoid(f *testing.F)      { fuzzDecode(f, "charges.void") }
func FuzzDecodeRefundCreate(f *testing.F)    { fuzzDecode(f, "refunds.create") }
func FuzzDecodeEndpointCreate(f *testing.F)  { fuzzDecode(f, "endpoints.create") }
func FuzzDecodeEndpointUpdate(f *testing.F)  { fuzzDecode(f, "endpoints.update") }
func FuzzDecodeEndpointRecover(f *testing.F) { fuzzDecode(f, "endpoints.recover") }
func FuzzDecodeLogin(f *testing.F)           { fuzzDecode(f, "login") }
func FuzzDecodeAPIKeyCreate(f *testing.F)    { fuzzDecode(f, "key.create") }

// Headers ------------------------------------------------------------------

var requestIDOracle = regexp.MustCompile(`^[A-Za-z0-9._:-]{1,64}$`)

// FuzzRequestID: a client's X-Request-Id is kept only when it is 1 to 64
// characters of [A-Za-z0-9._:-]; so nothing kept can split a log line or a
// header. observe answers with the kept id or a fresh UUID.
func FuzzRequestID(f *testing.F) {
	for _, s := range []string{"", "req_123", "0190f4b6-3c2a-7d4e-8f00-000000000001", strings.Repeat("a", 64), strings.Repeat("a", 65),
		"a b", "a\r\nSet-Cookie: x=1", "a\x00", "a\x7f", "é", "a\tb", "trace:1.2", "../../etc", "<script>", "%0d%0a"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, id string) {
		ok := validRequestID(id)
		if ok != requestIDOracle.MatchString(id) {
			t.Fatalf("validRequestID(%q) = %v, the rule says %v", id, ok, !ok)
		}
		if ok && strings.IndexFunc(id, func(r rune) bool { return r < 0x20 || r == 0x7f || r == ' ' }) >= 0 {
			t.Fatalf("validRequestID accepted %q with a control character", id)
		}
	})
}

var idempotencyKeyOracle = regexp.MustCompile(`^[\x20-\x7e]{1,255}$`)

// FuzzIdempotencyKey: the Idempotency-Key is taken as sent when it is 1 to
// 255 printable ASCII characters, and refused with a 400 naming the header
// otherwise; a stored key never holds a control character.
func FuzzIdempotencyKey(f *testing.F) {
	if idempotency.MaxKeyLen != 255 {
		f.Fatalf("MaxKeyLen = %d: update the oracle", idempotency.MaxKeyLen)
	}
	for _, s := range []string{"order-1", "0190f4b6-3c2a-7d4e-8f00-000000000001", strings.Repeat("k", 255), strings.Repeat("k", 256),
		"a b", " ", "a\x00", "a\r\nX: y", "a\x7f", "clé", "\t", "k\x1b[31m"} {
		f.Add(s)
	}
	kr, err := keyring.New(bytes.Repeat([]byte{0xab}, 32))
	if err != nil {
		f.Fatal(err)
	}
	s := &server{Deps: Deps{Keyring: kr}}
	f.Fuzz(func(t *testing.T, key string) {
		err := idempotency.Validate(key)
		want := idempotencyKeyOracle.MatchString(key)
		if (err == nil) != want {
			t.Fatalf("Validate(%q) = %v, the rule says valid=%v", key, err, want)
		}
		if err != nil {
			if e, ok := apperr.As(err); !ok || e.Kind != apperr.KindInvalid || e.Param != "Idempotency-Key" {
				t.Fatalf("Validate(%q) = %#v, want Invalid naming Idempotency-Key", key, err)
			}
		}
		// Through the header: what the server keeps is exactly what was
		// validated (headers cannot carry every byte; skip those fasthttp alters).
		withCtx(func(r *fasthttp.Request) {
			r.Header.SetMethod(fiber.MethodPost)
			r.SetRequestURI("/v1/charges")
			r.Header.Set(headerIdempotencyKey, key)
		}, nil, func(c *fiber.Ctx) {
			sent := c.Get(headerIdempotencyKey)
			req, err := s.idempotent(c)
			switch {
			case sent == "" && (req != nil || err != nil):
				t.Fatalf("no key: idempotent = %v, %v", req, err)
			case sent == "":
			case (err == nil) != idempotencyKeyOracle.MatchString(sent):
				t.Fatalf("idempotent(%q) = %v", sent, err)
			case err == nil && (req == nil || req.Key != sent || len(req.Fingerprint) == 0):
				t.Fatalf("idempotent(%q) = %+v", sent, req)
			}
		})
	})
}

// FuzzClientIP: X-Forwarded-For is believed only from a trusted proxy, and
// then only from the right: the address the rate limits see is the peer, or a
// hop every address to the right of which parsed and is a trusted proxy.
func FuzzClientIP(f *testing.F) {
	f.Add("10.0.0.5", "203.0.113.7", true)
	f.Add("10.0.0.5", "203.0.113.7, 10.0.0.9", true)
	f.Add("10.0.0.5", "1.1.1.1, 203.0.113.7", true)
	f.Add("10.0.0.5", "garbage, 203.0.113.7", true)
	f.Add("10.0.0.5", "203.0.113.7, garbage", true)
	f.Add("10.0.0.5", "10.0.0.6, 10.0.0.7", true)
	f.Add("10.0.0.5", "", true)
	f.Add("10.0.0.5", ",,,", true)
	f.Add("203.0.113.9", "127.0.0.1", true)
	f.Add("::ffff:10.0.0.5", "::ffff:198.51.100.1", true)
	f.Add("fd00::1", "2001:db8::1%eth0", true)
	f.Add("10.0.0.5", "203.0.113.7\x00, 10.0.0.9", true)
	f.Add("10.0.0.5", "203.0.113.7", false)
	trusted := trustedProxies{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("fd00::/8")}
	f.Fuzz(func(t *testing.T, peerText, xff string, trust bool) {
		peer, err := netip.ParseAddr(peerText)
		if err != nil || peer.Zone() != "" {
			return
		}
		s := &server{}
		if trust {
			s.trusted = trusted
		}
		var got netip.Addr
		withCtx(func(r *fasthttp.Request) {
			r.SetRequestURI("/v1/charges")
			r.Header.Set(fiber.HeaderXForwardedFor, xff)
		}, &net.TCPAddr{IP: peer.AsSlice(), Port: 40000}, func(c *fiber.Ctx) {
			xff = c.Get(fiber.HeaderXForwardedFor) // as the server reads it
			got = s.clientIP(c)
		})
		peer = peer.Unmap()
		if !got.IsValid() {
			t.Fatalf("clientIP(peer %s, XFF %q) is not an address", peer, xff)
		}
		if got == peer {
			return
		}
		if !s.trusted.contains(peer) {
			t.Fatalf("peer %s is not trusted, yet clientIP = %s from XFF %q", peer, got, xff)
		}
		hops := strings.Split(xff, ",")
		at := -1
		for i := len(hops) - 1; i >= 0; i-- {
			if a, err := netip.ParseAddr(strings.TrimSpace(hops[i])); err == nil && a.Unmap() == got {
				at = i
				break
			}
		}
		if at < 0 {
			t.Fatalf("clientIP = %s appears nowhere in XFF %q", got, xff)
		}
		for _, h := range hops[at+1:] {
			a, err := netip.ParseAddr(strings.TrimSpace(h))
			if err != nil || !s.trusted.contains(a.Unmap()) {
				t.Fatalf("clientIP = %s from XFF %q skipped %q, which is not a trusted proxy", got, xff, h)
			}
		}
		if strings.ContainsAny(got.String(), "\x00\r\n ,") {
			t.Fatalf("clientIP renders as %q", got.String())
		}
	})
}

// fakeKeys knows one secret key, and one more that was revoked.
type fakeKeys struct{ digest, revoked []byte }

func (f fakeKeys) CreateKey(context.Context, apikeys.Key) error { return nil }
func (f fakeKeys) ListKeys(context.Context, string, apikeys.Filter, listing.Params) (listing.Page[apikeys.Key], error) {
	return listing.Page[apikeys.Key]{}, nil
}
func (f fakeKeys) KeyByDigest(_ context.Context, d []byte) (apikeys.Key, error) {
	if bytes.Equal(d, f.digest) {
		return apikeys.Key{ID: "key_1", MerchantID: "mer_1", Environment: "test"}, nil
	}
	if f.revoked != nil && bytes.Equal(d, f.revoked) {
		at := time.Date(2026, 1, 2, 0, 0, 0, 0, time.UTC)
		return apikeys.Key{ID: "key_2", MerchantID: "mer_1", Environment: "test", RevokedAt: &at}, nil
	}
	return apikeys.Key{}, apperr.NotFound("key")
}
func (f fakeKeys) KeyByPublicKey(context.Context, string) (apikeys.Key, error) {
	return apikeys.Key{}, apperr.NotFound("key")
}
func (f fakeKeys) KeyByID(context.Context, string, string) (apikeys.Key, error) {
	return apikeys.Key{}, apperr.NotFound("key")
}
func (f fakeKeys) RevokeKey(context.Context, string, string) (apikeys.Key, error) {
	return apikeys.Key{}, nil
}

func (f fakeKeys) RollKey(context.Context, string, string, apikeys.Key, time.Time, bool) (apikeys.Key, error) {
	return apikeys.Key{}, apperr.NotFound("api_key")
}

// downCache is a cache that is unreachable, so every lookup reaches the store.
type downCache struct{}

var errCacheDown = apperr.Unavailable(io.ErrUnexpectedEOF)

func (downCache) Key(context.Context, []byte) (apikeys.Entry, bool, error) {
	return apikeys.Entry{}, false, errCacheDown
}
func (downCache) FillKey(context.Context, []byte, apikeys.Entry, time.Duration) error {
	return errCacheDown
}
func (downCache) SetKey(context.Context, []byte, apikeys.Entry, time.Duration) error {
	return errCacheDown
}
func (downCache) SessionState(context.Context, string) (string, bool, error) {
	return "", false, errCacheDown
}
func (downCache) FillSessionState(context.Context, string, string, time.Duration) error {
	return errCacheDown
}
func (downCache) SetSessionState(context.Context, string, string, time.Duration) error {
	return errCacheDown
}

// fakeSessions knows one open session of mer_1 (ses_1) and one that was
// logged out (ses_3).
type fakeSessions struct{}

func (fakeSessions) CreateSession(context.Context, auth.Session) error { return nil }
func (fakeSessions) SessionByID(_ context.Context, id string) (auth.Session, error) {
	switch id {
	case "ses_1":
		return auth.Session{ID: id, MerchantID: "mer_1", ExpiresAt: time.Now().Add(time.Hour)}, nil
	case "ses_3":
		at := time.Date(2026, 1, 2, 0, 0, 0, 0, time.UTC)
		return auth.Session{ID: id, MerchantID: "mer_1", ExpiresAt: time.Now().Add(time.Hour), RevokedAt: &at}, nil
	}
	return auth.Session{}, apperr.NotFound("session")
}
func (fakeSessions) RevokeSession(context.Context, string) (auth.Session, error) {
	return auth.Session{}, nil
}
func (fakeSessions) DeleteSessionsExpiredBefore(context.Context, time.Time) (int64, error) {
	return 0, nil
}

// oneOwner has no one to sign in, and every session's member is an owner.
type oneOwner struct{}

func (oneOwner) MemberByEmail(context.Context, string, string) (members.Member, error) {
	return members.Member{}, apperr.NotFound("member")
}

func (oneOwner) MembershipsByEmail(context.Context, string, int) ([]members.Member, error) {
	return nil, nil
}

func (oneOwner) MemberByID(_ context.Context, merchantID, id string) (members.Member, error) {
	return members.Member{ID: id, MerchantID: merchantID, Role: authz.Owner}, nil
}

// FuzzAuthorization: the Authorization header yields a principal only when
// its token is byte for byte a credential that was issued and not revoked
// (surrounding whitespace aside) and of a kind the route accepts: no
// spelling of a revoked key or a logged-out session's token gets in. Every
// refusal is a 401 (or the 403 of live mode), never another kind of error.
func FuzzAuthorization(f *testing.F) {
	// Keys of the checksummed format (docs/keys.md): 30 characters and the
	// CRC-32 of them in base62.
	const secret = "sk_test_0123456789ABCDEFGHIJabcdefghij4Us3aw"
	const revokedSecret = "sk_test_REVOKED789ABCDEFGHIJabcdefghij4aYtPo"
	// Fixed times, so that every fuzzing worker process issues the same
	// tokens as the one that sent it the seed corpus.
	issued, expires := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), time.Date(2099, 1, 1, 0, 0, 0, 0, time.UTC)
	tokens := auth.NewTokens([]byte("0123456789abcdef0123456789abcdef-fuzz"), "gatehouse", "gatehouse-api", time.Now)
	jwt, err := tokens.Issue("mer_1", "mem_1", "ses_1", issued, expires)
	if err != nil {
		f.Fatal(err)
	}
	other, err := tokens.Issue("mer_1", "mem_1", "ses_2", issued, expires)
	if err != nil {
		f.Fatal(err)
	}
	loggedOut, err := tokens.Issue("mer_1", "mem_1", "ses_3", issued, expires)
	if err != nil {
		f.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	s := &server{Deps: Deps{
		Keys: apikeys.NewService(fakeKeys{digest: apikeys.Digest(secret), revoked: apikeys.Digest(revokedSecret)}, downCache{}, time.Now, log),
		Auth: auth.NewService(oneOwner{}, fakeSessions{}, downCache{}, auth.NewHasher(1), tokens, time.Now, log),
	}}
	for _, h := range []string{"Bearer " + secret, "bearer " + secret, "BEARER  " + secret + " ", "Bearer " + jwt, "Bearer " + other,
		"Bearer " + secret + "x", "Bearer " + secret[:len(secret)-1], "Bearer " + secret + "\x00", "Bearer " + secret + "\r\nX: y",
		"Bearer\t" + secret, "Basic " + secret, secret, "Bearer", "Bearer ", "", "Bearer pk_test_abc", "Bearer sk_live_abc",
		"Bearer " + jwt[:len(jwt)-2], "Bearer " + jwt + ".x", "Bearer eyJhbGciOiJub25lIn0.e30.", "Bearer sk_" + strings.Repeat("a", 200),
		"Bearer " + revokedSecret, "bearer  " + revokedSecret + " ", "Bearer " + loggedOut, "BEARER " + loggedOut + "\t"} {
		f.Add(h, uint8(3))
		f.Add(h, uint8(1))
		f.Add(h, uint8(2))
	}
	// The fakes do accept what was issued, or the target would prove nothing.
	for _, tc := range []struct {
		token   string
		allowed accept
	}{{secret, acceptKey}, {jwt, acceptSession}} {
		withCtx(func(r *fasthttp.Request) { r.Header.Set(fiber.HeaderAuthorization, "Bearer "+tc.token) }, nil, func(c *fiber.Ctx) {
			if p, err := s.resolve(c, tc.allowed); err != nil || p.MerchantID != "mer_1" {
				f.Fatalf("the issued %.10s... is refused: %+v, %v", tc.token, p, err)
			}
		})
	}
	// And they refuse what was revoked, or the target would prove nothing of it.
	for _, tc := range []struct {
		token   string
		allowed accept
	}{{revokedSecret, acceptKey}, {loggedOut, acceptSession}} {
		withCtx(func(r *fasthttp.Request) { r.Header.Set(fiber.HeaderAuthorization, "Bearer "+tc.token) }, nil, func(c *fiber.Ctx) {
			if p, err := s.resolve(c, tc.allowed); err == nil {
				f.Fatalf("the revoked %.10s... is accepted as %+v", tc.token, p)
			}
		})
	}
	f.Fuzz(func(t *testing.T, header string, allow uint8) {
		allowed := accept(allow & 3)
		var p auth.Principal
		var err error
		withCtx(func(r *fasthttp.Request) {
			r.SetRequestURI("/v1/me")
			r.Header.Set(fiber.HeaderAuthorization, header)
		}, nil, func(c *fiber.Ctx) {
			header = c.Get(fiber.HeaderAuthorization)
			p, err = s.resolve(c, allowed)
		})
		if err != nil {
			e, ok := apperr.As(err)
			if !ok || (e.Kind != apperr.KindUnauthenticated && !(e.Kind == apperr.KindForbidden && e.Code == apperr.CodeLiveModeDisabled)) {
				t.Fatalf("resolve(%q) = %v, want a 401", header, err)
			}
			return
		}
		_, token, _ := strings.Cut(strings.TrimSpace(header), " ")
		token = strings.TrimSpace(token)
		switch {
		case p.MerchantID != "mer_1":
			t.Fatalf("resolve(%q) = %+v: not the issued credential's merchant", header, p)
		case token == secret && allowed&acceptKey != 0 && p.KeyID == "key_1":
		case token == jwt && allowed&acceptSession != 0 && p.SessionID == "ses_1":
		default:
			t.Fatalf("resolve(%q, allowed %d) accepted token %q as %+v", header, allowed, token, p)
		}
		if !utf8.ValidString(token) || strings.ContainsFunc(token, func(r rune) bool { return r < 0x21 || r == 0x7f }) {
			t.Fatalf("resolve accepted a token with a control character: %q", token)
		}
	})
}

// Lists --------------------------------------------------------------------

var (
	prefixedIDOracle = regexp.MustCompile(`^we_[0-9a-v]{26}$`)
	uuidOracle       = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`)
)

// FuzzListParams: limit, starting_after and ending_before are accepted only
// when limit is an integer from 1 to 100 and at most one cursor is given, and
// that one has the shape of an id of the listed kind; every refusal is a 400
// naming the parameter.
func FuzzListParams(f *testing.F) {
	we, uid := ids.New("we"), ids.NewUUID()
	for _, q := range []string{"", "limit=10", "limit=100", "limit=101", "limit=0", "limit=-1", "limit=1e2", "limit=+5", "limit=05",
		"limit=9223372036854775808", "limit=%20%35", "limit=", "limit=1&limit=2",
		"starting_after=" + we, "ending_before=" + we, "starting_after=" + uid, "ending_before=" + uid,
		"starting_after=" + we + "&ending_before=" + we, "starting_after=" + strings.ToUpper(we), "starting_after=we_", "starting_after=" + we + "%00",
		"starting_after=" + we[:len(we)-1], "starting_after=" + we + "0", "starting_after=key_" + we[3:], "starting_after=%27%20OR%201%3D1--",
		"starting_after=" + strings.ToUpper(uid), "starting_after=" + strings.ReplaceAll(uid, "-", ""), "starting_after={" + uid + "}",
		"starting_after=urn:uuid:" + uid, "starting_after=" + uid + "%0a"} {
		f.Add(q, true)
		f.Add(q, false)
	}
	f.Fuzz(func(t *testing.T, query string, prefixed bool) {
		valid, oracle := ids.ValidUUID, uuidOracle
		if prefixed {
			valid, oracle = func(id string) bool { return ids.Valid("we", id) }, prefixedIDOracle
		}
		var p listing.Params
		var err error
		var args *fasthttp.Args
		withCtx(func(r *fasthttp.Request) {
			r.SetRequestURI("/v1/list")
			r.URI().SetQueryString(query)
		}, nil, func(c *fiber.Ctx) {
			args = c.Context().QueryArgs()
			p, err = listParams(c, valid)
			if err != nil {
				return
			}
			if l := string(args.Peek("limit")); l != "" {
				if n, perr := strconv.Atoi(l); perr != nil || n != p.Limit {
					t.Fatalf("limit=%q became Limit %d", l, p.Limit)
				}
			} else if p.Limit != listing.DefaultLimit {
				t.Fatalf("no limit became Limit %d", p.Limit)
			}
			if p.StartingAfter != string(args.Peek("starting_after")) || p.EndingBefore != string(args.Peek("ending_before")) {
				t.Fatalf("query %q became cursors %q %q", query, p.StartingAfter, p.EndingBefore)
			}
		})
		if err != nil {
			if e, ok := apperr.As(err); !ok || e.Kind != apperr.KindInvalid || e.Param == "" {
				t.Fatalf("listParams(%q) = %#v, want Invalid naming a parameter", query, err)
			}
			return
		}
		switch {
		case p.Limit < 1 || p.Limit > listing.MaxLimit:
			t.Fatalf("listParams(%q) accepted Limit %d", query, p.Limit)
		case p.StartingAfter != "" && p.EndingBefore != "":
			t.Fatalf("listParams(%q) accepted both cursors", query)
		case p.StartingAfter != "" && !oracle.MatchString(p.StartingAfter):
			t.Fatalf("listParams(%q) accepted starting_after %q", query, p.StartingAfter)
		case p.EndingBefore != "" && !oracle.MatchString(p.EndingBefore):
			t.Fatalf("listParams(%q) accepted ending_before %q", query, p.EndingBefore)
		}
	})
}

// FuzzLoginAccount: the key of an account's login budget is 32 hex digits
// for any email a client sends, the same for every spelling that signs in
// to the same account (case, surrounding spaces), and holds nothing of the
// email itself.
func FuzzLoginAccount(f *testing.F) {
	for _, e := range []string{"ada@example.com", " ADA@Example.com\t", "", "\x00", "é@example.com", strings.Repeat("a", 1000)} {
		f.Add(e)
	}
	f.Fuzz(func(t *testing.T, email string) {
		k := accountOf(email)
		if len(k) != 32 || strings.Trim(k, "0123456789abcdef") != "" {
			t.Fatalf("accountOf(%q) = %q, want 32 lowercase hex digits", email, k)
		}
		if other := accountOf(" " + strings.ToUpper(email) + "\n"); merchants.NormalizeEmail(strings.ToUpper(email)) == merchants.NormalizeEmail(email) && other != k {
			t.Fatalf("accountOf differs for spellings of %q: %q vs %q", email, k, other)
		}
	})
}
