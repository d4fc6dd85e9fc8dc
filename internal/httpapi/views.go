package httpapi

import (
	"encoding/hex"
	"time"

	"github.com/gatehouse-pay/gatehouse/internal/apikeys"
	"github.com/gatehouse-pay/gatehouse/internal/apperr"
	"github.com/gatehouse-pay/gatehouse/internal/audit"
	"github.com/gatehouse-pay/gatehouse/internal/auth"
	"github.com/gatehouse-pay/gatehouse/internal/charges"
	"github.com/gatehouse-pay/gatehouse/internal/events"
	"github.com/gatehouse-pay/gatehouse/internal/listing"
	"github.com/gatehouse-pay/gatehouse/internal/members"
	"github.com/gatehouse-pay/gatehouse/internal/merchants"
	"github.com/gatehouse-pay/gatehouse/internal/mfa"
	"github.com/gatehouse-pay/gatehouse/internal/webhooks"
)

// The bodies the API answers with (api/openapi.yaml), one type and one
// present function per object, each defined once.
//
// The objects of the payment domain have their public form beside them,
// and every answer renders it (through View, or MarshalJSON, which renders
// View):
// charges.View (with its card, authentication, next_action and attempts),
// refunds.View, charges.TokenView, customers.View,
// customers.PaymentMethodView, connectors.View, connectors.RoutingView,
// webhooks.EndpointView, webhooks.DeliveryView and events.Body. A charge's
// and a refund's public form is also the data of their webhook events,
// which charges and refunds write in the worker as well as in the API, so
// it cannot live here; the others follow the same rule. Everything else is
// here.
//
// Field order is the order of the JSON. The small bodies below that were
// once written as maps keep the maps' order: their keys sorted.

// list is the contract's list body.
type list[T any] struct {
	Object  string `json:"object"`
	Data    []T    `json:"data"`
	HasMore bool   `json:"has_more"`
}

func newList[T, U any](page listing.Page[T], present func(T) U) list[U] {
	out := list[U]{Object: "list", Data: make([]U, 0, len(page.Items)), HasMore: page.HasMore}
	for _, item := range page.Items {
		out.Data = append(out.Data, present(item))
	}
	return out
}

// errorBody is every error answer.
type errorBody struct {
	Error errorDetail `json:"error"`
}

type errorDetail struct {
	Code      string `json:"code"`
	Message   string `json:"message"`
	Param     string `json:"param,omitempty"`
	RequestID string `json:"request_id"`
}

func presentError(ae *apperr.Error, requestID string) errorBody {
	return errorBody{Error: errorDetail{Code: ae.Code, Message: ae.Message, Param: ae.Param, RequestID: requestID}}
}

// deletedJSON answers the deletion of any object.
type deletedJSON struct {
	Deleted bool   `json:"deleted"`
	ID      string `json:"id"`
	Object  string `json:"object"`
}

func presentDeleted(object, id string) deletedJSON {
	return deletedJSON{Deleted: true, ID: id, Object: object}
}

// healthJSON is /healthz's answer.
type healthJSON struct {
	Status string `json:"status"`
}

// readinessJSON is /readyz's answer: every check's state.
type readinessJSON struct {
	Checks map[string]string `json:"checks"`
	Status string            `json:"status"`
}

type merchantJSON struct {
	ID        string `json:"id"`
	Object    string `json:"object"`
	Email     string `json:"email"`
	Name      string `json:"name"`
	CreatedAt string `json:"created_at"`
}

// PresentMerchant is the public form of a merchant, shared with the CLI.
func PresentMerchant(m merchants.Merchant) merchantJSON {
	return merchantJSON{ID: m.ID, Object: "merchant", Email: m.Email, Name: m.Name, CreatedAt: timestamp(m.CreatedAt)}
}

type memberJSON struct {
	ID         string `json:"id"`
	Object     string `json:"object"`
	Email      string `json:"email"`
	Role       string `json:"role"`
	MFAEnabled bool   `json:"mfa_enabled"`
	CreatedAt  string `json:"created_at"`
}

func presentMember(m members.Member) memberJSON {
	return memberJSON{ID: m.ID, Object: "member", Email: m.Email, Role: m.Role, MFAEnabled: m.MFAEnabled, CreatedAt: timestamp(m.CreatedAt)}
}

// invitationJSON answers an invitation: the member and the page where
// they set a password.
type invitationJSON struct {
	Member   memberJSON `json:"member"`
	SetupURL string     `json:"setup_url"`
}

// sessionJSON answers a completed sign-in.
type sessionJSON struct {
	ExpiresAt string       `json:"expires_at"`
	Member    memberJSON   `json:"member"`
	Merchant  merchantJSON `json:"merchant"`
	Token     string       `json:"token"`
	TokenType string       `json:"token_type"`
}

func presentSession(l auth.Login, m merchants.Merchant) sessionJSON {
	return sessionJSON{ExpiresAt: timestamp(l.ExpiresAt), Member: presentMember(l.Member), Merchant: PresentMerchant(m),
		Token: l.Token, TokenType: "Bearer"}
}

// mfaChallengeJSON answers a right password of a member with two-factor
// sign-in: the challenge the second step completes.
type mfaChallengeJSON struct {
	Challenge   string `json:"challenge"`
	MFARequired bool   `json:"mfa_required"`
}

// totpEnrollmentJSON is a new pending TOTP secret.
type totpEnrollmentJSON struct {
	OtpauthURL string `json:"otpauth_url"`
	Secret     string `json:"secret"`
}

func presentEnrollment(e mfa.Enrollment) totpEnrollmentJSON {
	return totpEnrollmentJSON{OtpauthURL: e.URL, Secret: e.Secret}
}

// recoveryCodesJSON answers a confirmed enrollment: the member, and the
// recovery codes shown this once.
type recoveryCodesJSON struct {
	Member        memberJSON `json:"member"`
	RecoveryCodes []string   `json:"recovery_codes"`
}

type settingsJSON struct {
	Object      string `json:"object"`
	MFARequired bool   `json:"mfa_required"`
}

func presentSettings(mfaRequired bool) settingsJSON {
	return settingsJSON{Object: "account_settings", MFARequired: mfaRequired}
}

type keyJSON struct {
	ID          string            `json:"id"`
	Object      string            `json:"object"`
	Name        string            `json:"name"`
	Environment string            `json:"environment"`
	Type        string            `json:"type"`
	Permissions map[string]string `json:"permissions"`
	PublicKey   string            `json:"public_key"`
	SecretKey   string            `json:"secret_key,omitempty"`
	SecretLast4 string            `json:"secret_key_last4"`
	CreatedAt   string            `json:"created_at"`
	ExpiresAt   *string           `json:"expires_at"`
	RevokedAt   *string           `json:"revoked_at"`
}

func presentKey(k apikeys.Key) keyJSON {
	return keyJSON{
		ID: k.ID, Object: "api_key", Name: k.Name, Environment: k.Environment, Type: k.Type(),
		Permissions: k.Access().Strings(), PublicKey: k.PublicKey, SecretLast4: k.SecretLast4,
		CreatedAt: timestamp(k.CreatedAt), ExpiresAt: timestampOrNil(k.ExpiresAt), RevokedAt: timestampOrNil(k.RevokedAt),
	}
}

// auditEntryJSON is an audit_log_entry of api/openapi.yaml.
type auditEntryJSON struct {
	ID         string    `json:"id"`
	Object     string    `json:"object"`
	CreatedAt  string    `json:"created_at"`
	Actor      actorJSON `json:"actor"`
	Action     string    `json:"action"`
	ObjectType string    `json:"object_type"`
	ObjectID   *string   `json:"object_id"`
	IP         string    `json:"ip"`
	UserAgent  string    `json:"user_agent"`
	RequestID  string    `json:"request_id"`
	Chain      int       `json:"chain"`
	Seq        int64     `json:"seq"`
	PrevHash   string    `json:"prev_hash"`
	Hash       string    `json:"hash"`
}

type actorJSON struct {
	Type string `json:"type"`
	ID   string `json:"id"`
}

func presentAuditEntry(e audit.Entry) auditEntryJSON {
	out := auditEntryJSON{ID: e.ID, Object: "audit_log_entry", CreatedAt: e.At.UTC().Format("2006-01-02T15:04:05.000000Z"),
		Actor: actorJSON{Type: e.ActorType, ID: e.ActorID}, Action: e.Action, ObjectType: e.ObjectType,
		IP: e.IP, UserAgent: e.UserAgent, RequestID: e.RequestID, Chain: e.Chain, Seq: e.Seq,
		PrevHash: hex.EncodeToString(e.PrevHash), Hash: hex.EncodeToString(e.Hash)}
	if e.ObjectID != "" {
		id := e.ObjectID
		out.ObjectID = &id
	}
	return out
}

// endpointWithSecret answers the creation of an endpoint and the roll of
// its secret: the one time the secret is shown.
type endpointWithSecret struct {
	Endpoint webhooks.EndpointView `json:"webhook_endpoint"`
	Secret   string                `json:"webhook_secret"`
}

func presentEndpointWithSecret(e webhooks.Endpoint, secret string) endpointWithSecret {
	return endpointWithSecret{Endpoint: e.View(), Secret: secret}
}

// recoveryJSON answers a recovery of an endpoint's events: how many
// deliveries it made (or would make, in a dry run).
type recoveryJSON struct {
	Count  int64  `json:"count"`
	DryRun bool   `json:"dry_run"`
	Object string `json:"object"`
	Since  string `json:"since"`
}

func presentRecovery(since time.Time, count int64, dryRun bool) recoveryJSON {
	return recoveryJSON{Count: count, DryRun: dryRun, Object: "recovery", Since: events.Timestamp(since)}
}

// cardFieldAction is what the card field learns of the charge: its status
// and, while the cardholder's answer is awaited, the challenge page.
type cardFieldAction struct {
	Charge         string                     `json:"charge"`
	Status         string                     `json:"status"`
	FailureCode    *string                    `json:"failure_code"`
	Authentication charges.AuthenticationView `json:"authentication"`
	ChallengeURL   *string                    `json:"challenge_url"`
}

func presentCardFieldAction(ch charges.Charge) cardFieldAction {
	out := cardFieldAction{Charge: ch.ID, Status: ch.Status, FailureCode: ch.FailureCode, Authentication: ch.View().Authentication}
	if ch.Status == charges.StatusRequiresAction && ch.Authentication.Answer == nil && ch.PendingAction == nil {
		out.ChallengeURL = ch.Authentication.NextActionURL
	}
	return out
}
