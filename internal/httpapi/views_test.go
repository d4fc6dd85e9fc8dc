package httpapi

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/gatehouse-pay/gatehouse/internal/apperr"
	"github.com/gatehouse-pay/gatehouse/internal/auth"
	"github.com/gatehouse-pay/gatehouse/internal/members"
	"github.com/gatehouse-pay/gatehouse/internal/merchants"
	"github.com/gatehouse-pay/gatehouse/internal/mfa"
	"github.com/gatehouse-pay/gatehouse/internal/resource"
)

// TestSmallBodiesBytes pins the exact bytes of the small answers: their
// keys are sorted, as they always were, and nothing is omitted.
func TestSmallBodiesBytes(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 3, 4, 5, 6, 7, 891_000_000, time.FixedZone("x", 3600))
	member := members.Member{ID: "mem_1", Email: "a@example.com", Role: "owner", CreatedAt: at}
	const memberOut = `{"id":"mem_1","object":"member","email":"a@example.com","role":"owner","mfa_enabled":false,"created_at":"2026-03-04T04:06:07.891Z"}`
	merchant := merchants.Merchant{ID: "mer_1", Email: "a@example.com", Name: "Shop", CreatedAt: at}
	const merchantOut = `{"id":"mer_1","object":"merchant","email":"a@example.com","name":"Shop","created_at":"2026-03-04T04:06:07.891Z"}`
	for _, tc := range []struct {
		name string
		v    any
		want string
	}{
		{"deleted", presentDeleted("customer", "cus_1"), `{"deleted":true,"id":"cus_1","object":"customer"}`},
		{"health", resource.Health{Status: "ok"}, `{"status":"ok"}`},
		{"readiness", resource.Readiness{Checks: map[string]string{"redis": "ok", "postgres": "ok"}, Status: "ok"},
			`{"checks":{"postgres":"ok","redis":"ok"},"status":"ok"}`},
		{"invitation", resource.Invitation{Member: presentMember(member), SetupURL: "https://x/setup?token=t"},
			`{"member":` + memberOut + `,"setup_url":"https://x/setup?token=t"}`},
		{"session", presentSession(auth.Login{Token: "tok", ExpiresAt: at, Member: member}, merchant),
			`{"expires_at":"2026-03-04T04:06:07.891Z","member":` + memberOut + `,"merchant":` + merchantOut + `,"token":"tok","token_type":"Bearer"}`},
		{"enrollment", presentEnrollment(mfa.Enrollment{Secret: "S", URL: "otpauth://totp/x"}), `{"otpauth_url":"otpauth://totp/x","secret":"S"}`},
		{"recovery codes", resource.RecoveryCodes{Member: presentMember(member), RecoveryCodes: []string{"a", "b"}},
			`{"member":` + memberOut + `,"recovery_codes":["a","b"]}`},
		{"no recovery codes", resource.RecoveryCodes{Member: presentMember(member)}, `{"member":` + memberOut + `,"recovery_codes":null}`},
		{"settings", presentSettings(true), `{"object":"account_settings","mfa_required":true}`},
		{"recovery", presentRecovery(at, 3, true), `{"count":3,"dry_run":true,"object":"recovery","since":"2026-03-04T04:06:07.891Z"}`},
		{"error", presentError(apperr.Invalid("amount", "bad"), "req"), `{"error":{"code":"parameter_invalid","message":"bad","param":"amount","request_id":"req"}}`},
		{"error without param", presentError(apperr.New(apperr.KindUnavailable, apperr.CodeUnavailable, "later"), "req"),
			`{"error":{"code":"` + apperr.CodeUnavailable + `","message":"later","request_id":"req"}}`},
		{"mfa challenge", presentError(secondFactorDue("mfa_c"), "req"),
			`{"error":{"code":"mfa_required","message":"` + secondFactorDue("").Message + `","request_id":"req","challenge":"mfa_c"}}`},
	} {
		got, err := json.Marshal(tc.v)
		if err != nil || string(got) != tc.want {
			t.Errorf("%s: %s, %v\nwant %s", tc.name, got, err, tc.want)
		}
	}
}
