package disputes

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/gatehouse-pay/gatehouse/internal/apperr"
)

// wantInvalid checks that err is a 400 parameter_invalid naming param.
func wantInvalid(t *testing.T, err error, param string) {
	t.Helper()
	e, ok := apperr.As(err)
	if !ok || e.Kind != apperr.KindInvalid || e.Code != apperr.CodeParameterInvalid || e.Param != param {
		t.Errorf("err = %v, want parameter_invalid naming %s", err, param)
	}
}

func ptr(s string) *string { return &s }

func TestParseEvidence(t *testing.T) {
	valid := map[string]string{
		"customer_email_address": `"jane@example.com"`,
		"customer_purchase_ip":   `"2001:db8::1"`,
		"service_date":           `"2026-02-28"`,
		"shipping_date":          `"2026-03-01"`,
		"customer_name":          `"Jane Doe"`,
		"uncategorized_text":     `"line one\nline two"`,
	}
	for field, raw := range valid {
		t.Run("valid "+field, func(t *testing.T) {
			got, err := ParseEvidence(json.RawMessage(`{"` + field + `": ` + raw + `}`))
			var want string
			_ = json.Unmarshal([]byte(raw), &want)
			if err != nil || got[field] == nil || *got[field] != want {
				t.Errorf("ParseEvidence = %v, %v; want %s = %q", got, err, field, want)
			}
		})
	}

	tests := []struct {
		name  string
		body  string
		param string
	}{
		{"unknown field", `{"customer_name": "Jane", "customer_signature": "file_1"}`, "evidence.customer_signature"},
		{"unknown field, differently cased", `{"Customer_Name": "Jane"}`, "evidence.Customer_Name"},
		{"a number", `{"product_description": 12}`, "evidence.product_description"},
		{"a boolean", `{"receipt": true}`, "evidence.receipt"},
		{"an object", `{"uncategorized_text": {"text": "x"}}`, "evidence.uncategorized_text"},
		{"an array", `{"shipping_address": ["1 Main St"]}`, "evidence.shipping_address"},
		{"bad email", `{"customer_email_address": "jane at example.com"}`, "evidence.customer_email_address"},
		{"email with a display name", `{"customer_email_address": "Jane <jane@example.com>"}`, "evidence.customer_email_address"},
		{"bad IP", `{"customer_purchase_ip": "203.0.113.300"}`, "evidence.customer_purchase_ip"},
		{"a host name for an IP", `{"customer_purchase_ip": "example.com"}`, "evidence.customer_purchase_ip"},
		{"bad date", `{"service_date": "2026-02-30"}`, "evidence.service_date"},
		{"a date in another format", `{"shipping_date": "01/03/2026"}`, "evidence.shipping_date"},
		{"a date with a time", `{"shipping_date": "2026-03-01T10:00:00Z"}`, "evidence.shipping_date"},
		{"a short field over two lines", `{"shipping_tracking_number": "1Z999\n1Z998"}`, "evidence.shipping_tracking_number"},
		{"a short field over 500 characters", `{"customer_name": "` + strings.Repeat("é", 501) + `"}`, "evidence.customer_name"},
		{"a NUL character", `{"product_description": "a\u0000b"}`, "evidence.product_description"},
		{"not an object", `["customer_name"]`, "evidence"},
		{"a string", `"evidence"`, "evidence"},
		{"null", `null`, "evidence"},
		{"empty", ``, "evidence"},
		{"broken JSON", `{"customer_name": "Jane"`, "evidence"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseEvidence(json.RawMessage(tt.body))
			if got != nil {
				t.Errorf("ParseEvidence = %v, want nothing", got)
			}
			wantInvalid(t, err, tt.param)
		})
	}

	t.Run("the 400 of an unknown field lists the fields", func(t *testing.T) {
		_, err := ParseEvidence(json.RawMessage(`{"bogus": "x"}`))
		e, _ := apperr.As(err)
		if e == nil || !strings.Contains(e.Message, "bogus") || !strings.Contains(e.Message, strings.Join(FieldNames(), ", ")) {
			t.Errorf("message %v, want it to name bogus and list the fields", err)
		}
	})

	t.Run("a short field of exactly 500 characters", func(t *testing.T) {
		if _, err := ParseEvidence(json.RawMessage(`{"customer_name": "` + strings.Repeat("é", 500) + `"}`)); err != nil {
			t.Errorf("ParseEvidence: %v", err)
		}
	})

	t.Run("null and empty clear", func(t *testing.T) {
		got, err := ParseEvidence(json.RawMessage(`{"customer_name": null, "receipt": "", "service_date": ""}`))
		if err != nil {
			t.Fatal(err)
		}
		want := map[string]*string{"customer_name": nil, "receipt": ptr(""), "service_date": ptr("")}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("ParseEvidence (-want +got):\n%s", diff)
		}
		ev, err := Evidence{"customer_name": "Jane", "receipt": "Order 1042", "service_date": "2026-02-28", "billing_address": "1 Main St"}.Apply(got)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(Evidence{"billing_address": "1 Main St"}, ev); diff != "" {
			t.Errorf("Apply (-want +got):\n%s", diff)
		}
	})

	t.Run("an empty object changes nothing", func(t *testing.T) {
		got, err := ParseEvidence(json.RawMessage(` {} `))
		if err != nil || len(got) != 0 {
			t.Errorf("ParseEvidence = %v, %v; want no change", got, err)
		}
	})
}

func TestEvidenceApply(t *testing.T) {
	cur := Evidence{"customer_name": "Jane", "product_description": "A teapot"}

	t.Run("sets and replaces, leaving the original alone", func(t *testing.T) {
		got, err := cur.Apply(map[string]*string{"product_description": ptr("A blue teapot"), "receipt": ptr("Order 1042")})
		if err != nil {
			t.Fatal(err)
		}
		want := Evidence{"customer_name": "Jane", "product_description": "A blue teapot", "receipt": "Order 1042"}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("Apply (-want +got):\n%s", diff)
		}
		if diff := cmp.Diff(Evidence{"customer_name": "Jane", "product_description": "A teapot"}, cur); diff != "" {
			t.Errorf("the original changed (-want +got):\n%s", diff)
		}
	})

	t.Run("exactly 150,000 characters are taken", func(t *testing.T) {
		// Characters, not bytes: "é" is two bytes.
		rest := MaxEvidenceChars - cur.Chars()
		got, err := cur.Apply(map[string]*string{"uncategorized_text": ptr(strings.Repeat("é", rest))})
		if err != nil {
			t.Fatalf("Apply: %v", err)
		}
		if n := got.Chars(); n != MaxEvidenceChars {
			t.Errorf("Chars = %d, want %d", n, MaxEvidenceChars)
		}
		// A field replaced counts once, at its new length.
		if _, err := got.Apply(map[string]*string{"customer_name": ptr("Joan")}); err != nil {
			t.Errorf("replacing a field of the same length: %v", err)
		}
	})

	t.Run("one character more is refused, naming evidence", func(t *testing.T) {
		rest := MaxEvidenceChars - cur.Chars()
		got, err := cur.Apply(map[string]*string{"uncategorized_text": ptr(strings.Repeat("é", rest+1))})
		if got != nil {
			t.Errorf("Apply = %d characters, want nothing", got.Chars())
		}
		wantInvalid(t, err, "evidence")
	})

	t.Run("over the limit across fields", func(t *testing.T) {
		half := strings.Repeat("x", MaxEvidenceChars/2)
		full, err := Evidence{}.Apply(map[string]*string{"uncategorized_text": &half, "access_activity_log": &half})
		if err != nil {
			t.Fatalf("two halves: %v", err)
		}
		_, err = full.Apply(map[string]*string{"customer_name": ptr("J")})
		wantInvalid(t, err, "evidence")
		// Clearing makes room again.
		if _, err := full.Apply(map[string]*string{"access_activity_log": nil, "customer_name": ptr("J")}); err != nil {
			t.Errorf("clearing a field and setting another: %v", err)
		}
	})
}
