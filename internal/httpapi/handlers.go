package httpapi

import (
	"strings"
	"time"

	"github.com/gofiber/fiber/v2"

	"github.com/gatehouse-pay/gatehouse/internal/apikeys"
	"github.com/gatehouse-pay/gatehouse/internal/apperr"
	"github.com/gatehouse-pay/gatehouse/internal/authz"
	"github.com/gatehouse-pay/gatehouse/internal/health"
	"github.com/gatehouse-pay/gatehouse/internal/idempotency"
	"github.com/gatehouse-pay/gatehouse/internal/ids"
	"github.com/gatehouse-pay/gatehouse/internal/members"
	"github.com/gatehouse-pay/gatehouse/internal/resource"
)

func (s *server) healthz(c *fiber.Ctx) error {
	return writeJSON(c, fiber.StatusOK, resource.Health{Status: "ok"})
}

// readyz answers 200 only while every check answers and the process is not
// draining, so a load balancer stops sending before shutdown. The checks
// named by ?exclude= (repeated, or comma-separated: the kube-apiserver's
// convention) still run and are reported, but do not make the answer 503:
// the api serves safely without Redis (a local rate limiter, revocations
// read from Postgres), so its Kubernetes probe excludes redis. Draining is
// never excluded. An unknown name is a bad parameter (400).
func (s *server) readyz(c *fiber.Ctx) error {
	if s.Draining.Load() {
		e := apperr.Unavailable(nil)
		e.Message = "Not ready: shutting down."
		return e
	}
	checks := health.Checks(s.Checks)
	var values []string
	for _, v := range c.Context().QueryArgs().PeekMulti("exclude") {
		values = append(values, string(v))
	}
	excluded, err := checks.Exclude(values)
	if err != nil {
		return apperr.Invalid("exclude", "%s", err.Error())
	}
	states, failed := checks.Run(c.UserContext(), excluded)
	if len(failed) > 0 {
		e := apperr.Unavailable(nil)
		e.Message = "Not ready: " + strings.Join(failed, ", ") + " unreachable."
		return e
	}
	return writeJSON(c, fiber.StatusOK, resource.Readiness{Checks: states, Status: "ok"})
}

type loginRequest struct {
	Email    string `json:"email"`
	Password string `json:"password"`
	Merchant string `json:"merchant"`
}

func (s *server) login(c *fiber.Ctx) error {
	var req loginRequest
	if err := decodeJSON(c, &req); err != nil {
		return err
	}
	attempted, err := s.guardLogin(c, req.Email, req.Password)
	if err != nil {
		return err
	}
	l, err := s.Auth.Login(s.auditedSignIn(c, "session.create"), req.Email, req.Password, req.Merchant)
	if err != nil || l.Token != "" {
		// The password step of a two-factor sign-in, or of one that must
		// name its merchant, is no sign-in yet: it does not make the
		// address known to the account.
		attempted(err)
	}
	if err != nil {
		s.countAuthFailure(err)
		return err
	}
	if l.Choices != nil {
		return s.chooseMerchant(c, l.Choices)
	}
	if l.SecondFactor {
		challenge, err := s.challenge(c, l.Member)
		if err != nil {
			return err
		}
		c.Set(fiber.HeaderCacheControl, "no-store")
		return secondFactorDue(challenge)
	}
	return s.writeSession(c, l)
}

// chooseMerchant is the answer to a password that opened memberships of
// several merchants, when the sign-in named none: 400 parameter_missing on
// merchant, listing those merchants, and only those.
func (s *server) chooseMerchant(c *fiber.Ctx, choices []members.Member) error {
	e := &apperr.Error{Kind: apperr.KindInvalid, Code: apperr.CodeParameterMissing, Param: "merchant",
		Message: "This email belongs to several accounts: sign in again with merchant set to the id of the one you want."}
	for _, m := range choices {
		mer, err := s.Merchants.Get(c.UserContext(), m.MerchantID)
		if err != nil {
			return err
		}
		e.Merchants = append(e.Merchants, apperr.Merchant{ID: mer.ID, Name: mer.Name})
	}
	c.Set(fiber.HeaderCacheControl, "no-store")
	return e
}

func (s *server) logout(c *fiber.Ctx) error {
	if err := s.Auth.Logout(c.UserContext(), principal(c)); err != nil {
		return err
	}
	return c.SendStatus(fiber.StatusNoContent)
}

func (s *server) me(c *fiber.Ctx) error {
	m, err := s.Merchants.Get(c.UserContext(), principal(c).MerchantID)
	if err != nil {
		return err
	}
	return writeJSON(c, fiber.StatusOK, PresentMerchant(m))
}

type createKeyRequest struct {
	Environment string            `json:"environment"`
	Name        string            `json:"name"`
	Type        string            `json:"type"`
	Permissions map[string]string `json:"permissions"`
}

// params reads the request's type and permissions (docs/keys.md); maker
// makes the key.
func (r createKeyRequest) params(maker apikeys.Maker) (apikeys.Params, error) {
	p := apikeys.Params{Environment: r.Environment, Name: r.Name, Type: r.Type, Maker: maker}
	if r.Permissions != nil {
		perms, err := authz.ParseKeyPermissions("permissions", r.Permissions)
		if err != nil {
			return apikeys.Params{}, err
		}
		p.Permissions = perms
	}
	return p, nil
}

func (s *server) createKey(c *fiber.Ctx) error {
	var req createKeyRequest
	idem, err := s.decodeCreate(c, &req)
	if err != nil {
		return err
	}
	params, err := req.params(maker(c))
	if err != nil {
		return err
	}
	var created apikeys.Created
	if idem == nil {
		created, err = s.Keys.Create(c.UserContext(), principal(c).MerchantID, params)
	} else {
		// The record holds the key without its secret (kept only as a
		// digest): a repeat gets the same key object, no secret_key.
		var replay *idempotency.Response
		created, replay, err = s.Keys.CreateOnce(c.UserContext(), principal(c).MerchantID, params, idem,
			func(k apikeys.Key) (idempotency.Response, error) {
				return renderAs[resource.APIKey](fiber.StatusCreated)(presentKey(k))
			})
		if err == nil && replay != nil {
			c.Set(fiber.HeaderCacheControl, "no-store")
			return sendAnswer(c, *replay, true)
		}
	}
	if err != nil {
		return err
	}
	return revealKey(c, created)
}

// revealKey answers a new key with its secret: the one time it is shown.
func revealKey(c *fiber.Ctx, created apikeys.Created) error {
	out := presentKey(created.Key)
	out.SecretKey = created.Secret
	c.Set(fiber.HeaderCacheControl, "no-store")
	return writeJSON(c, fiber.StatusCreated, out)
}

// maker is the signed-in member making or rolling a key: a key never holds
// more than its maker's role (docs/keys.md).
func maker(c *fiber.Ctx) apikeys.Maker {
	p := principal(c)
	return apikeys.Maker{MemberID: p.MemberID, Role: p.Role}
}

func (s *server) listKeys(c *fiber.Ctx) error {
	p, err := listParams(c, func(id string) bool { return ids.Valid("key", id) })
	if err != nil {
		return err
	}
	f := apikeys.Filter{CreatedBy: strings.Clone(c.Query("created_by"))}
	page, err := s.Keys.List(c.UserContext(), principal(c).MerchantID, f, p)
	if err != nil {
		return err
	}
	return writeJSON(c, fiber.StatusOK, newList(page, presentKey))
}

func (s *server) revokeKey(c *fiber.Ctx) error {
	k, err := s.Keys.Revoke(c.UserContext(), principal(c).MerchantID, strings.Clone(c.Params("id")))
	if err != nil {
		return err
	}
	return writeJSON(c, fiber.StatusOK, presentKey(k))
}

type rollKeyRequest struct {
	ExpiresIn *int64 `json:"expires_in"`
}

// rollKey replaces a key with a new one of the same kind; the old one keeps
// working for expires_in seconds (0, the default, refuses it at once).
func (s *server) rollKey(c *fiber.Ctx) error {
	var req rollKeyRequest
	if err := decodeJSON(c, &req); err != nil {
		return err
	}
	var overlap time.Duration
	if req.ExpiresIn != nil {
		if *req.ExpiresIn < 0 || *req.ExpiresIn > int64(apikeys.MaxRollOverlap/time.Second) {
			return apperr.Invalid("expires_in", "expires_in must be 0 to %d seconds.", int64(apikeys.MaxRollOverlap/time.Second))
		}
		overlap = time.Duration(*req.ExpiresIn) * time.Second
	}
	r, err := s.Keys.Roll(c.UserContext(), principal(c).MerchantID, strings.Clone(c.Params("id")), overlap, maker(c))
	if err != nil {
		return err
	}
	return revealKey(c, r.Created)
}
