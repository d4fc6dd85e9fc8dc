package resource

import (
	"encoding/json"
	"testing"
)

// TestShapesBytes pins what the shapes' tags promise: field order, null
// for an unset pointer, and the members omitted when empty.
func TestShapesBytes(t *testing.T) {
	s := func(v string) *string { return &v }
	charge := Charge{ID: "ch_1", Object: "charge", Amount: 100, Currency: "USD", Status: "created", PaymentMethod: "card",
		Card: Card{Brand: "visa"}, Provider: "sandbox", Environment: "test", Capture: true, Metadata: map[string]string{},
		Authentication: Authentication{Status: "not_required"}, Attempts: []ChargeAttempt{}, CreatedAt: "t0", UpdatedAt: "t1"}
	const chargeOut = `{"id":"ch_1","object":"charge","amount":100,"amount_captured":0,"amount_refunded":0,"currency":"USD","status":"created",` +
		`"payment_method":"card","card":{"brand":"visa","last4":null,"exp_month":null,"exp_year":null,"fingerprint":null},` +
		`"provider":"sandbox","provider_reference":null,"environment":"test","capture":true,"description":null,"metadata":{},` +
		`"failure_code":null,"failure_message":null,"customer":null,"off_session":false,` +
		`"authentication":{"status":"not_required","completed_at":null},"next_action":null,"connector":null,"attempts":[],` +
		`"created_at":"t0","updated_at":"t1"}`
	refund := Refund{ID: "re_1", Object: "refund", Charge: "ch_1", Amount: 5, Currency: "USD", Status: "pending", Metadata: map[string]string{}, CreatedAt: "t0", UpdatedAt: "t0"}
	const refundOut = `{"id":"re_1","object":"refund","charge":"ch_1","amount":5,"currency":"USD","status":"pending","reason":null,"metadata":{},"failure_code":null,"created_at":"t0","updated_at":"t0"}`
	for _, tc := range []struct {
		name string
		v    any
		want string
	}{
		{"charge", charge, chargeOut},
		{"redirect", NextAction{Type: "redirect_to_url", RedirectToURL: &RedirectToURL{URL: "u", ReturnURL: "r"}},
			`{"type":"redirect_to_url","redirect_to_url":{"url":"u","return_url":"r"}}`},
		{"card field", NextAction{Type: "use_gatehouse_js", UseGatehouseJS: &struct{}{}}, `{"type":"use_gatehouse_js","use_gatehouse_js":{}}`},
		{"charge event", Event{ID: "ev_1", Object: "event", EventType: "charge.created", CreatedAt: "t0", Data: EventData{Object: "charge", Charge: &charge}},
			`{"id":"ev_1","object":"event","event_type":"charge.created","created_at":"t0","data":{"object":"charge","charge":` + chargeOut + `}}`},
		{"refund event", EventData{Object: "refund", Charge: &charge, Refund: &refund},
			`{"object":"refund","charge":` + chargeOut + `,"refund":` + refundOut + `}`},
		{"connector", Connector{ID: "con_1", Object: "connector", Provider: "stripe", Name: "n", CreatedAt: "t0", UpdatedAt: "t0"},
			`{"id":"con_1","object":"connector","provider":"stripe","name":"n","enabled":false,"server_account":false,"has_credentials":false,"created_at":"t0","updated_at":"t0"}`},
		{"sandbox connector", Connector{ID: "con_2", Object: "connector", Provider: "sandbox", Sandbox: &Sandbox{LatencyMS: 5}},
			`{"id":"con_2","object":"connector","provider":"sandbox","name":"","enabled":false,"server_account":false,"has_credentials":false,` +
				`"sandbox":{"unavailable":false,"decline_code":null,"latency_ms":5,"payout_failure":null},"created_at":"","updated_at":""}`},
		{"routing", Routing{Object: "routing", Rules: []RoutingRule{{Then: Route{Split: []RouteWeight{{Connector: "a", Weight: 1}}}}}, Default: Route{Connectors: []string{"b"}}},
			`{"object":"routing","rules":[{"if":{},"then":{"split":[{"connector":"a","weight":1}]}}],"default":{"connectors":["b"]},"updated_at":null}`},
		{"list", List[Refund]{Object: "list", Data: []Refund{}}, `{"object":"list","data":[],"has_more":false}`},
		{"error", Error{Error: ErrorDetail{Code: "c", Message: "m", RequestID: "r"}}, `{"error":{"code":"c","message":"m","request_id":"r"}}`},
		{"key", APIKey{ID: "key_1", Object: "api_key", Permissions: map[string]string{}, SecretLast4: "abcd", CreatedAt: "t0"},
			`{"id":"key_1","object":"api_key","name":"","environment":"","type":"","permissions":{},"public_key":"","secret_key_last4":"abcd","created_at":"t0","created_by":null,"expires_at":null,"revoked_at":null}`},
		{"key with secret", APIKey{ID: "key_1", SecretKey: "sk", ExpiresAt: s("t1"), CreatedBy: s("mem_1")},
			`{"id":"key_1","object":"","name":"","environment":"","type":"","permissions":null,"public_key":"","secret_key":"sk","secret_key_last4":"","created_at":"","created_by":"mem_1","expires_at":"t1","revoked_at":null}`},
		{"removed member", RemovedMember{Deleted: true, ID: "mem_1", Object: "member", APIKeys: List[APIKey]{Object: "list", Data: []APIKey{}}},
			`{"deleted":true,"id":"mem_1","object":"member","api_keys":{"object":"list","data":[],"has_more":false}}`},
		{"delivery", WebhookDelivery{ID: "wd_1", Object: "webhook_delivery", Attempts: []WebhookAttempt{{Attempt: 1, StartedAt: "t0"}}},
			`{"id":"wd_1","object":"webhook_delivery","endpoint":"","event_id":"","event_type":"","status":"","test":false,` +
				`"attempts":[{"attempt":1,"started_at":"t0","duration_ms":0,"status_code":null,"error":null,"response_body":null}],` +
				`"next_attempt_at":null,"created_at":"","updated_at":""}`},
	} {
		got, err := json.Marshal(tc.v)
		if err != nil || string(got) != tc.want {
			t.Errorf("%s: %s, %v\nwant %s", tc.name, got, err, tc.want)
		}
	}
}
