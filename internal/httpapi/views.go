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
	"github.com/gatehouse-pay/gatehouse/internal/resource"
	"github.com/gatehouse-pay/gatehouse/internal/webhooks"
)

// The bodies the API answers with (api/openapi.yaml) are declared in
// internal/resource, one type per object. The objects of the payment
// domain render their own form (charges.Charge.View, refunds.Refund.View,
// charges.Token.View, customers.Customer.View,
// customers.PaymentMethod.View, connectors.Connector.View,
// connectors.Routing.View, webhooks.Endpoint.View, webhooks.Delivery.View,
// and events.New for an event), since the worker writes a charge's and a
// refund's form as event data too. The present functions below fill the
// others.

func newList[T, U any](page listing.Page[T], present func(T) U) resource.List[U] {
	out := resource.List[U]{Object: "list", Data: make([]U, 0, len(page.Items)), HasMore: page.HasMore}
	for _, item := range page.Items {
		out.Data = append(out.Data, present(item))
	}
	return out
}

func presentError(ae *apperr.Error, requestID string) resource.Error {
	e := resource.Error{Error: resource.ErrorDetail{Code: ae.Code, Message: ae.Message, Param: ae.Param, RequestID: requestID,
		Challenge: ae.Challenge}}
	for _, m := range ae.Merchants {
		e.Error.Merchants = append(e.Error.Merchants, resource.MerchantChoice{ID: m.ID, Name: m.Name})
	}
	return e
}

func presentDeleted(object, id string) resource.Deleted {
	return resource.Deleted{Deleted: true, ID: id, Object: object}
}

// PresentMerchant is the public form of a merchant, shared with the CLI.
func PresentMerchant(m merchants.Merchant) resource.Merchant {
	return resource.Merchant{ID: m.ID, Object: "merchant", Email: m.Email, Name: m.Name, CreatedAt: timestamp(m.CreatedAt)}
}

func presentMember(m members.Member) resource.Member {
	return resource.Member{ID: m.ID, Object: "member", Email: m.Email, Role: m.Role, MFAEnabled: m.MFAEnabled, CreatedAt: timestamp(m.CreatedAt)}
}

func presentSession(l auth.Login, m merchants.Merchant) resource.Session {
	return resource.Session{ExpiresAt: timestamp(l.ExpiresAt), Member: presentMember(l.Member), Merchant: PresentMerchant(m),
		Token: l.Token, TokenType: "Bearer"}
}

func presentEnrollment(e mfa.Enrollment) resource.TOTPEnrollment {
	return resource.TOTPEnrollment{OtpauthURL: e.URL, Secret: e.Secret}
}

func presentSettings(mfaRequired bool) resource.AccountSettings {
	return resource.AccountSettings{Object: "account_settings", MFARequired: mfaRequired}
}

func presentKey(k apikeys.Key) resource.APIKey {
	out := resource.APIKey{
		ID: k.ID, Object: "api_key", Name: k.Name, Environment: k.Environment, Type: k.Type(),
		Permissions: k.Access().Strings(), PublicKey: k.PublicKey, SecretLast4: k.SecretLast4,
		CreatedAt: timestamp(k.CreatedAt), ExpiresAt: timestampOrNil(k.ExpiresAt), RevokedAt: timestampOrNil(k.RevokedAt),
	}
	if k.CreatedBy != "" {
		by := k.CreatedBy
		out.CreatedBy = &by
	}
	return out
}

func presentAuditEntry(e audit.Entry) resource.AuditEntry {
	out := resource.AuditEntry{ID: e.ID, Object: "audit_log_entry", CreatedAt: e.At.UTC().Format("2006-01-02T15:04:05.000000Z"),
		Actor: resource.AuditActor{Type: e.ActorType, ID: e.ActorID}, Action: e.Action, ObjectType: e.ObjectType,
		IP: e.IP, UserAgent: e.UserAgent, RequestID: e.RequestID, Chain: e.Chain, Seq: e.Seq,
		PrevHash: hex.EncodeToString(e.PrevHash), Hash: hex.EncodeToString(e.Hash)}
	if e.ObjectID != "" {
		id := e.ObjectID
		out.ObjectID = &id
	}
	return out
}

func presentEndpointWithSecret(e webhooks.Endpoint, secret string) resource.WebhookEndpointWithSecret {
	return resource.WebhookEndpointWithSecret{Endpoint: e.View(), Secret: secret}
}

func presentRecovery(since time.Time, count int64, dryRun bool) resource.WebhookRecovery {
	return resource.WebhookRecovery{Count: count, DryRun: dryRun, Object: "recovery", Since: events.Timestamp(since)}
}

func presentCardFieldAction(ch charges.Charge) resource.CardFieldAction {
	out := resource.CardFieldAction{Charge: ch.ID, Status: ch.Status, FailureCode: ch.FailureCode, Authentication: ch.View().Authentication}
	if ch.Status == charges.StatusRequiresAction && ch.Authentication.Answer == nil && ch.PendingAction == nil {
		out.ChallengeURL = ch.Authentication.NextActionURL
	}
	return out
}
