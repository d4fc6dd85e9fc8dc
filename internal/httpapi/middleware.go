package httpapi

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/gofiber/fiber/v2/utils"
	"github.com/google/uuid"
	"github.com/valyala/fasthttp"

	"github.com/gatehouse-pay/gatehouse/internal/apikeys"
	"github.com/gatehouse-pay/gatehouse/internal/apperr"
	"github.com/gatehouse-pay/gatehouse/internal/auth"
	"github.com/gatehouse-pay/gatehouse/internal/config"
	"github.com/gatehouse-pay/gatehouse/internal/ids"
	"github.com/gatehouse-pay/gatehouse/internal/logging"
	"github.com/gatehouse-pay/gatehouse/internal/merchants"
	"github.com/gatehouse-pay/gatehouse/internal/ratelimit"
)

const (
	headerRequestID = "X-Request-Id"
	localRequestID  = "gatehouse.request_id"
	localPrincipal  = "gatehouse.principal"
)

// validRequestID accepts at most 64 characters from a safe set; anything else
// a client sends is replaced, so ids are safe to log and echo.
func validRequestID(id string) bool {
	if id == "" || len(id) > 64 {
		return false
	}
	for i := 0; i < len(id); i++ {
		b := id[i]
		if !('a' <= b && b <= 'z' || 'A' <= b && b <= 'Z' || '0' <= b && b <= '9' || b == '-' || b == '_' || b == '.' || b == ':') {
			return false
		}
	}
	return true
}

// requestID returns the request's id, assigning one if the request never
// went through observe (errors raised while reading the request).
func requestID(c *fiber.Ctx) string {
	if id, ok := c.Locals(localRequestID).(string); ok {
		return id
	}
	id := uuid.NewString()
	c.Locals(localRequestID, id)
	c.Set(headerRequestID, id)
	return id
}

// observe assigns the request id, renders any error the chain returns, and
// records the request's metrics and access log with its final status.
func (s *server) observe(c *fiber.Ctx) error {
	start := time.Now()
	id := c.Get(headerRequestID)
	if validRequestID(id) {
		id = utils.CopyString(id)
	} else {
		id = uuid.NewString()
	}
	c.Locals(localRequestID, id)
	c.Set(headerRequestID, id)
	c.SetUserContext(logging.WithRequestID(c.UserContext(), id))
	s.Metrics.InFlight.Inc()
	defer s.Metrics.InFlight.Dec()

	var err error
	route := "unmatched" // never a raw path: labels stay bounded
	// The body is only ever read raw (BodyRaw): Ctx.Body would decode a
	// Content-Encoding without any size limit, so a 1 KB gzip bomb would
	// expand to gigabytes before any check. Encoded bodies are refused unread.
	body := c.BodyRaw()
	if len(body) > 0 && encoded(&c.Request().Header) {
		err = errEncodedBody
	} else if len(body) > bodyLimitOf(c) {
		err = fiber.ErrRequestEntityTooLarge
	} else if err = c.Next(); !isRoutingError(err) {
		route = c.Route().Path
	}
	if err != nil {
		if rerr := s.renderError(c, err); rerr != nil {
			return rerr
		}
	}
	if s.Draining.Load() {
		// Shutting down: clients must not reuse this connection, or a request
		// sent on it as the listener closes would be lost.
		c.Context().SetConnectionClose()
	}
	status := c.Response().StatusCode()
	elapsed := time.Since(start)
	method := methodLabel(c.Method())
	s.Metrics.Requests.WithLabelValues(method, route, strconv.Itoa(status)).Inc()
	s.Metrics.Duration.WithLabelValues(method, route).Observe(elapsed.Seconds())
	s.Log.DebugContext(c.UserContext(), "request",
		"method", method, "route", route, "status", status, "duration_ms", float64(elapsed.Microseconds())/1000)
	return nil
}

// methodLabel maps the request method to a fixed set of label values: Fiber
// reuses the method's buffer, and clients may send any method name.
func methodLabel(m string) string {
	switch m {
	case fiber.MethodGet:
		return fiber.MethodGet
	case fiber.MethodPost:
		return fiber.MethodPost
	case fiber.MethodPatch:
		return fiber.MethodPatch
	case fiber.MethodPut:
		return fiber.MethodPut
	case fiber.MethodDelete:
		return fiber.MethodDelete
	case fiber.MethodHead:
		return fiber.MethodHead
	case fiber.MethodOptions:
		return fiber.MethodOptions
	}
	return "OTHER"
}

var errEncodedBody = &apperr.Error{Kind: apperr.KindUnsupportedMedia, Code: apperr.CodeUnsupportedMedia,
	Message: "Compressed request bodies are not accepted: send the JSON body without Content-Encoding (or with Content-Encoding: identity)."}

// encoded reports whether any Content-Encoding header line names a coding
// other than identity. Every line counts, each a comma-separated list, names
// compared without regard to case (RFC 9110 8.4).
func encoded(h *fasthttp.RequestHeader) bool {
	found := false
	h.VisitAll(func(k, v []byte) {
		if found || !strings.EqualFold(string(k), fiber.HeaderContentEncoding) {
			return
		}
		for _, coding := range strings.Split(string(v), ",") {
			if c := strings.TrimSpace(coding); c != "" && !strings.EqualFold(c, "identity") {
				found = true
			}
		}
	})
	return found
}

// isRoutingError reports whether the router found no route for the request.
func isRoutingError(err error) bool {
	var fe *fiber.Error
	return errors.As(err, &fe) && (fe.Code == fiber.StatusNotFound || fe.Code == fiber.StatusMethodNotAllowed)
}

// trustedProxies are the peers whose X-Forwarded-For is believed.
type trustedProxies []netip.Prefix

func (t trustedProxies) contains(a netip.Addr) bool {
	for _, p := range t {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// clientIP is the socket peer, unless the peer is a trusted proxy: then the
// right-most X-Forwarded-For entry that is not itself a trusted proxy.
func (s *server) clientIP(c *fiber.Ctx) netip.Addr {
	peer, _ := netip.AddrFromSlice(c.Context().RemoteIP())
	peer = peer.Unmap()
	if len(s.trusted) == 0 || !s.trusted.contains(peer) {
		return peer
	}
	return forwardedClient(&c.Request().Header, peer, s.trusted)
}

// forwardedClient is the right-most X-Forwarded-For entry that is not a
// trusted proxy, the header's lines read in order as if joined with commas:
// a proxy that appends its own line must not leave the client's first line
// in charge. peer is the answer when no entry can be believed.
func forwardedClient(h *fasthttp.RequestHeader, peer netip.Addr, trusted trustedProxies) netip.Addr {
	var hops []string
	h.VisitAll(func(k, v []byte) {
		if strings.EqualFold(string(k), fiber.HeaderXForwardedFor) {
			hops = append(hops, strings.Split(string(v), ",")...)
		}
	})
	client := peer
	for i := len(hops) - 1; i >= 0; i-- {
		a, err := netip.ParseAddr(strings.TrimSpace(hops[i]))
		if err != nil {
			break // a garbled entry: trust nothing to its left
		}
		client = a.Unmap()
		if !trusted.contains(client) {
			break
		}
	}
	return client
}

// limit applies the named limit to the key keyOf derives from the request and
// sets the RateLimit-* headers; over the limit it answers 429 with Retry-After.
func (s *server) limit(name string, l config.Limit, keyOf func(*fiber.Ctx) string) fiber.Handler {
	s.Limiter.Declare(name)
	return func(c *fiber.Ctx) error {
		d := s.Limiter.Allow(c.UserContext(), name, keyOf(c), l)
		if err := limited(c, d); err != nil {
			return err
		}
		return c.Next()
	}
}

// limited sets the RateLimit-* headers of d and, when d refuses, Retry-After
// and returns the 429 error.
func limited(c *fiber.Ctx, d ratelimit.Decision) error {
	c.Set("RateLimit-Limit", strconv.Itoa(d.Limit))
	c.Set("RateLimit-Remaining", strconv.Itoa(d.Remaining))
	c.Set("RateLimit-Reset", strconv.Itoa(d.ResetSeconds()))
	if d.Allowed {
		return nil
	}
	c.Set(fiber.HeaderRetryAfter, strconv.Itoa(d.RetryAfter()))
	return &apperr.Error{Kind: apperr.KindRateLimited, Code: apperr.CodeRateLimited,
		Message: "Too many requests. Retry after " + strconv.Itoa(d.RetryAfter()) + " seconds."}
}

func (s *server) limitByIP(name string, l config.Limit) fiber.Handler {
	return s.limit(name, l, func(c *fiber.Ctx) string { return s.clientIP(c).String() })
}

// limitByKey limits per API key pair; it runs after authentication.
func (s *server) limitByKey(name string, l config.Limit) fiber.Handler {
	return s.limit(name, l, func(c *fiber.Ctx) string { return principal(c).KeyID })
}

// limitByEndpoint limits per webhook endpoint of the caller's merchant; it
// runs after authentication. The count is the merchant's own, so another
// merchant naming the endpoint's id spends nothing of it. An id that is not
// an endpoint id's shape is left to the handler's 404 and counts nothing, so
// made-up ids cannot fill Redis with counts.
func (s *server) limitByEndpoint(name string, l config.Limit) fiber.Handler {
	limit := s.limit(name, l, func(c *fiber.Ctx) string {
		return principal(c).MerchantID + "/" + c.Params("id")
	})
	return func(c *fiber.Ctx) error {
		if !ids.Valid("we", c.Params("id")) {
			return c.Next()
		}
		return limit(c)
	}
}

type accept int

const (
	acceptSession accept = 1 << iota
	acceptKey
)

func principal(c *fiber.Ctx) auth.Principal {
	p, _ := c.Locals(localPrincipal).(auth.Principal)
	return p
}

var (
	errNoAuth        = apperr.Unauthenticated(apperr.CodeMissingAuthorization, "Missing Authorization header. Send Authorization: Bearer <token>.")
	errMalformedAuth = apperr.Unauthenticated(apperr.CodeInvalidToken, "Malformed Authorization header. Send Authorization: Bearer <token>.")
	errPublicKey     = apperr.Unauthenticated(apperr.CodeInvalidTokenType, "Public keys identify your account client-side and cannot authenticate API requests; use your secret key.")
	errNeedsSession  = apperr.Unauthenticated(apperr.CodeInvalidTokenType, "This endpoint requires a session token from POST /v1/auth/login.")
	errNeedsKey      = apperr.Unauthenticated(apperr.CodeInvalidTokenType, "This endpoint requires a secret API key; session tokens are for the dashboard only.")
)

// authenticate resolves the Bearer token to a Principal, accepting the kinds
// of token the route allows.
func (s *server) authenticate(allowed accept) fiber.Handler {
	return func(c *fiber.Ctx) error {
		p, err := s.resolve(c, allowed)
		if err != nil {
			s.Metrics.AuthFailures.WithLabelValues(apperr.CodeOf(err)).Inc()
			return err
		}
		c.Locals(localPrincipal, p)
		if err := s.authorize(c); err != nil {
			return err
		}
		return s.audited(c)
	}
}

// authenticateCounted is authenticate for a route that is not limited per
// address before it authenticates (the charge route is limited per key,
// which an unknown key does not have): every failed authentication counts
// against the per-address limit l under name, and the one over it is
// answered 429 instead of 401. An address this replica already saw over
// that limit is refused at once, before its key is looked up, until its
// window frees: a flood of unknown keys costs Postgres at most about the
// limit of lookups per window, and valid traffic pays no extra round trip.
//
// perKey, when not nil, is the key's own limit and its merchant's (the
// charge route's): the request is counted against the key, in the same
// Redis round trip that reads the key's cache entry, then against the key's
// merchant over all its keys (see resolveLimited), and answered 429 over
// either.
func (s *server) authenticateCounted(allowed accept, name string, l config.Limit, perKey *keyLimits) fiber.Handler {
	s.Limiter.Declare(name)
	if perKey != nil {
		s.Limiter.Declare(perKey.key.name)
		s.Limiter.Declare(perKey.merchant.name)
	}
	return func(c *fiber.Ctx) error {
		ip := s.clientIP(c).String()
		if d, over := s.Limiter.Over(name, ip); over {
			s.Metrics.AuthFailures.WithLabelValues(apperr.CodeRateLimited).Inc()
			return limited(c, d)
		}
		var p auth.Principal
		var d ratelimit.Decision
		var err error
		if perKey != nil {
			p, d, err = s.resolveLimited(c, allowed, *perKey)
		} else {
			p, err = s.resolve(c, allowed)
		}
		if err != nil {
			s.Metrics.AuthFailures.WithLabelValues(apperr.CodeOf(err)).Inc()
			if token, _ := bearer(c); apikeys.Forged(token) {
				// Refused by its shape or checksum, before any lookup: not
				// counted either, so a flood of made-up keys costs no Redis.
				return err
			}
			switch apperr.KindOf(err) {
			case apperr.KindUnauthenticated, apperr.KindForbidden:
				if lerr := limited(c, s.Limiter.Allow(c.UserContext(), name, ip, l)); lerr != nil {
					return lerr
				}
			}
			return err
		}
		c.Locals(localPrincipal, p)
		if err := s.authorize(c); err != nil {
			return err
		}
		if perKey != nil {
			if err := limited(c, d); err != nil {
				return err
			}
		}
		return s.audited(c)
	}
}

// namedLimit is a limit and the name its decisions are counted under.
type namedLimit struct {
	name  string
	limit config.Limit
}

// keyLimits are the limits of a route limited per API key: the key's own,
// and its merchant's over all its keys.
type keyLimits struct {
	key, merchant namedLimit
}

// keyOwners remembers, per replica, which merchant owns the keys it has
// authenticated (by the key's Redis tag), so that the charge route's
// script can count a request against the merchant's limit in the same
// round trip as the key's (ratelimit.Limiter.AllowGatedAlso). A key never
// changes merchant; the script checks the guess against the key's entry.
// Only authenticated keys are remembered, at most maxKeyOwners of them.
type keyOwners struct {
	mu     sync.Mutex
	owners map[string]string
}

// maxKeyOwners bounds keyOwners: when full it starts again empty.
const maxKeyOwners = 10_000

func (k *keyOwners) get(tag string) (string, bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	m, ok := k.owners[tag]
	return m, ok
}

func (k *keyOwners) put(tag, merchantID string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.owners == nil || len(k.owners) >= maxKeyOwners {
		k.owners = map[string]string{}
	}
	k.owners[tag] = merchantID
}

// tighter is the decision of two limits of one request that the caller
// sees: the one that refused it, else the one with fewer requests left.
func tighter(key, merchant ratelimit.Decision) ratelimit.Decision {
	switch {
	case !key.Allowed:
		return key
	case !merchant.Allowed, merchant.Remaining < key.Remaining:
		return merchant
	}
	return key
}

// loginAccount names the per-account budget of failed logins.
const loginAccount = "login_account"

// accountOf keys an account's login budget: a digest of the normalized
// email, so that Redis holds no email addresses. An email that matches no
// merchant has its budget too, so the answers and the work are the same
// whether it exists or not.
func accountOf(email string) string {
	d := sha256.Sum256([]byte(merchants.NormalizeEmail(email)))
	return hex.EncodeToString(d[:16])
}

// guardLogin applies the per-account budget of failed logins
// (RATE_LIMIT_LOGIN_ACCOUNT) to a sign-in attempt, which the per-address
// login limit has already counted. While the account has failed more than
// the budget in the window, from any addresses, an attempt is refused with
// 429 and Retry-After, unless it comes from an address that signed in to the
// account successfully in the last 30 days: attackers spread over many
// addresses are slowed down, and cannot lock the owner out of the places the
// owner signs in from. attempted reports the attempt's outcome: a wrong
// email or password is charged to the budget, a success remembers the
// address. Attempts without an email or password are left to Login (400).
func (s *server) guardLogin(c *fiber.Ctx, email, password string) (attempted func(error), err error) {
	if email == "" || password == "" {
		return func(error) {}, nil
	}
	return s.guardAccount(c, email)
}

// guardAccount is guardLogin's budget for any attempt to sign in to the
// account of email: a password, or the code of a two-factor sign-in.
func (s *server) guardAccount(c *fiber.Ctx, email string) (attempted func(error), err error) {
	ctx, account, ip := c.UserContext(), accountOf(email), s.clientIP(c).String()
	limit := s.Config.RateLimitLoginAccount
	if d := s.Limiter.Failures(ctx, loginAccount, account, limit); !d.Allowed && !s.Limiter.Known(ctx, loginAccount, account, ip) {
		s.Metrics.AuthFailures.WithLabelValues(apperr.CodeRateLimited).Inc()
		return nil, limited(c, d)
	}
	return func(err error) {
		switch {
		case err == nil:
			s.Limiter.Remember(ctx, loginAccount, account, ip)
		case apperr.CodeOf(err) == apperr.CodeInvalidCredentials:
			s.Limiter.Fail(ctx, loginAccount, account, limit)
		}
	}, nil
}

// resolveLimited is resolve for a route that takes only secret keys, which
// also counts the request under the key's own limit, whose identity is
// apikeys.Tag of the secret's digest, and, when the key allows it, under
// its merchant's limit over all its keys; it returns the decision the
// caller sees (see tighter). When the key's entry is cached as active (the
// usual case) all of it takes one Redis round trip: the limiter's script
// reads the entry (KeyCache's gate) and counts the request under both,
// the merchant being the one this replica saw own the key before (the
// script checks it against the entry). The first request of a key on a
// replica, and every request on a Redis Cluster (where the merchant's
// window is in another slot than the key's), count the merchant's limit in
// a second round trip. A miss, a revoked or malformed entry, or an unreachable
// Redis takes the usual way: the key service's lookup (Postgres when the
// cache cannot answer), then the limits alone in the same windows (the
// replica's own memory when Redis is down). A key that does not
// authenticate is not counted; a request its key's limit refuses is not
// counted against the merchant; one the merchant's limit refuses stays
// counted against its key.
func (s *server) resolveLimited(c *fiber.Ctx, allowed accept, l keyLimits) (auth.Principal, ratelimit.Decision, error) {
	token, err := bearer(c)
	if err != nil {
		return auth.Principal{}, ratelimit.Decision{}, err
	}
	if allowed != acceptKey || !(strings.HasPrefix(token, apikeys.SecretTestPrefix) || strings.HasPrefix(token, apikeys.RestrictedTestPrefix)) {
		p, err := s.resolve(c, allowed)
		if err == nil {
			err = apperr.Internal(errors.New("httpapi: a per-key limit on a route that takes other tokens"))
		}
		return p, ratelimit.Decision{}, err
	}
	ctx := c.UserContext()
	if s.KeyCache != nil && apikeys.Lookable(token) {
		digest := apikeys.Digest(token)
		tag := apikeys.Tag(digest)
		var also *ratelimit.Also
		if m, ok := s.owners.get(tag); ok {
			also = &ratelimit.Also{Name: l.merchant.name, Key: m, Limit: l.merchant.limit, Prefix: s.KeyCache.OwnedBy(m)}
		}
		g, err := s.Limiter.AllowGatedAlso(ctx, l.key.name, tag, l.key.limit, s.KeyCache.Gate(digest), also)
		if err == nil && g.Counted {
			if e, ok := s.KeyCache.Decode(g.Value); ok && s.Keys.Usable(e) {
				s.owners.put(tag, e.MerchantID)
				if !g.AlsoCounted {
					return keyPrincipal(e), s.merchantLimit(ctx, l, e.MerchantID, g.Decision), nil
				}
				return keyPrincipal(e), tighter(g.Decision, g.Also), nil
			}
		}
	}
	e, err := s.Keys.Authenticate(ctx, token)
	if err != nil {
		return auth.Principal{}, ratelimit.Decision{}, err
	}
	tag := apikeys.Tag(apikeys.Digest(token))
	s.owners.put(tag, e.MerchantID)
	d := s.Limiter.Allow(ctx, l.key.name, tag, l.key.limit)
	return keyPrincipal(e), s.merchantLimit(ctx, l, e.MerchantID, d), nil
}

// merchantLimit counts a request its key's limit allowed (key) under the
// merchant's limit and returns the decision the caller sees; one the key's
// limit refused is returned as it is, not counted again.
func (s *server) merchantLimit(ctx context.Context, l keyLimits, merchantID string, key ratelimit.Decision) ratelimit.Decision {
	if !key.Allowed {
		return key
	}
	return tighter(key, s.Limiter.Allow(ctx, l.merchant.name, merchantID, l.merchant.limit))
}

// bearer is the token of the Authorization header.
func bearer(c *fiber.Ctx) (string, error) {
	header := c.Get(fiber.HeaderAuthorization)
	if strings.TrimSpace(header) == "" {
		return "", errNoAuth
	}
	scheme, token, ok := strings.Cut(strings.TrimSpace(header), " ")
	token = strings.TrimSpace(token)
	if !ok || !strings.EqualFold(scheme, "Bearer") || token == "" {
		return "", errMalformedAuth
	}
	return token, nil
}

func (s *server) resolve(c *fiber.Ctx, allowed accept) (auth.Principal, error) {
	token, err := bearer(c)
	if err != nil {
		return auth.Principal{}, err
	}
	ctx := c.UserContext()
	switch {
	case strings.HasPrefix(token, apikeys.PublicPrefix):
		return auth.Principal{}, errPublicKey
	case strings.HasPrefix(token, apikeys.SecretLivePrefix), strings.HasPrefix(token, apikeys.RestrictedLivePrefix):
		return auth.Principal{}, apperr.LiveMode()
	case strings.HasPrefix(token, "sk_"), strings.HasPrefix(token, "rk_"):
		if allowed&acceptKey == 0 {
			return auth.Principal{}, errNeedsSession
		}
		e, err := s.Keys.Authenticate(ctx, token)
		if err != nil {
			return auth.Principal{}, err
		}
		return keyPrincipal(e), nil
	}
	if allowed&acceptSession == 0 {
		if _, err := s.Auth.VerifyToken(token); err != nil {
			return auth.Principal{}, err
		}
		return auth.Principal{}, errNeedsKey
	}
	return s.Auth.Authenticate(ctx, token)
}

// keyPrincipal is the caller of a secret or restricted key.
func keyPrincipal(e apikeys.Entry) auth.Principal {
	return auth.Principal{MerchantID: e.MerchantID, KeyID: e.KeyID, Environment: e.Environment, Permissions: e.Access()}
}
