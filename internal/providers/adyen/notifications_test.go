package adyen_test

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/gatehouse-pay/gatehouse/internal/providers/adyen"
	"github.com/gatehouse-pay/gatehouse/internal/testenv/harness"
)

// hmacKey is a hex HMAC key as Adyen's Customer Area shows one.
const hmacKey = "44782DEF547AAA06C910C43932B1EB0C71FC68D9D0C057550C48EC2ACF6BA056"

func captureItem() adyen.NotificationItem {
	return adyen.NotificationItem{
		Amount:              adyen.Amount{Currency: "EUR", Value: 1000},
		EventCode:           "CAPTURE",
		EventDate:           "2021-01-01T01:00:00+01:00",
		MerchantAccountCode: "YOUR_MERCHANT_ACCOUNT",
		MerchantReference:   "gh_ch_123_authorize",
		OriginalReference:   "9913140798220028",
		PaymentMethod:       "visa",
		PSPReference:        "QFQTPCQ8HXSKGK82",
		Success:             "true",
	}
}

// TestHMACKnownVector checks Sign against the documented algorithm computed
// here independently: HMAC-SHA256, under the hex-decoded key, of the eight
// fields joined by ":", in base64.
func TestHMACKnownVector(t *testing.T) {
	key, err := hex.DecodeString(hmacKey)
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		item    adyen.NotificationItem
		signing string
	}{
		{captureItem(), "QFQTPCQ8HXSKGK82:9913140798220028:YOUR_MERCHANT_ACCOUNT:gh_ch_123_authorize:1000:EUR:CAPTURE:true"},
		// An AUTHORISATION has no originalReference: an empty field.
		{adyen.NotificationItem{PSPReference: "7914073381342284", MerchantAccountCode: "TestMerchant", MerchantReference: "TestPayment-1407325143704",
			Amount: adyen.Amount{Currency: "EUR", Value: 1130}, EventCode: "AUTHORISATION", Success: "true"},
			"7914073381342284::TestMerchant:TestPayment-1407325143704:1130:EUR:AUTHORISATION:true"},
	} {
		mac := hmac.New(sha256.New, key)
		mac.Write([]byte(tt.signing))
		want := base64.StdEncoding.EncodeToString(mac.Sum(nil))
		got, err := adyen.Sign(tt.item, hmacKey)
		if err != nil || got != want {
			t.Errorf("Sign = %q, %v; want %q (the HMAC of %q)", got, err, want, tt.signing)
		}
		// The key is hex in either case.
		if lower, _ := adyen.Sign(tt.item, strings.ToLower(hmacKey)); lower != want {
			t.Errorf("Sign with the lower-case key = %q, want %q", lower, want)
		}
		tt.item.AdditionalData = map[string]any{"hmacSignature": want}
		if !adyen.VerifyHMAC(tt.item, hmacKey) {
			t.Errorf("VerifyHMAC refuses the signature of %q", tt.signing)
		}
	}
}

// TestHMACPublishedVector is the example of Adyen's documentation on
// notification signatures: its item, key and signature.
func TestHMACPublishedVector(t *testing.T) {
	item := adyen.NotificationItem{PSPReference: "7914073381342284", MerchantAccountCode: "TestMerchant", MerchantReference: "TestPayment-1407325143704",
		Amount: adyen.Amount{Currency: "EUR", Value: 1130}, EventCode: "AUTHORISATION", Success: "true"}
	const published = "coqCmt/IZ4E3CzPvMY8zTjQVL5hYJUiBRg8UU+iCWo0="
	if got, err := adyen.Sign(item, hmacKey); err != nil || got != published {
		t.Errorf("Sign = %q, %v; want %q", got, err, published)
	}
	item.AdditionalData = map[string]any{"hmacSignature": published}
	if !adyen.VerifyHMAC(item, hmacKey) {
		t.Error("VerifyHMAC refuses the published signature")
	}
}

func TestHMACTamperedFieldsFail(t *testing.T) {
	item := captureItem()
	sig, err := adyen.Sign(item, hmacKey)
	if err != nil {
		t.Fatal(err)
	}
	item.AdditionalData = map[string]any{"hmacSignature": sig, "authCode": "044925"}
	if !adyen.VerifyHMAC(item, hmacKey) {
		t.Fatal("VerifyHMAC refuses a signed item")
	}
	tamper := map[string]func(*adyen.NotificationItem){
		"pspReference":        func(n *adyen.NotificationItem) { n.PSPReference += "X" },
		"originalReference":   func(n *adyen.NotificationItem) { n.OriginalReference = "" },
		"merchantAccountCode": func(n *adyen.NotificationItem) { n.MerchantAccountCode = "OtherAccount" },
		"merchantReference":   func(n *adyen.NotificationItem) { n.MerchantReference = "gh_ch_124_authorize" },
		"amount value":        func(n *adyen.NotificationItem) { n.Amount.Value = 100000 },
		"amount currency":     func(n *adyen.NotificationItem) { n.Amount.Currency = "USD" },
		"eventCode":           func(n *adyen.NotificationItem) { n.EventCode = "REFUND" },
		"success":             func(n *adyen.NotificationItem) { n.Success = "false" },
		"a field moved across the separator": func(n *adyen.NotificationItem) {
			n.PSPReference, n.OriginalReference = n.PSPReference+":"+n.OriginalReference, ""
		},
		"signature": func(n *adyen.NotificationItem) {
			b, _ := base64.StdEncoding.DecodeString(sig)
			b[0] ^= 1
			n.AdditionalData = map[string]any{"hmacSignature": base64.StdEncoding.EncodeToString(b)}
		},
		"no signature":           func(n *adyen.NotificationItem) { n.AdditionalData = nil },
		"signature not a string": func(n *adyen.NotificationItem) { n.AdditionalData = map[string]any{"hmacSignature": 1} },
		"signature not base64":   func(n *adyen.NotificationItem) { n.AdditionalData = map[string]any{"hmacSignature": "!!" + sig} },
		"empty signature":        func(n *adyen.NotificationItem) { n.AdditionalData = map[string]any{"hmacSignature": ""} },
	}
	for name, edit := range tamper {
		n := item
		edit(&n)
		if adyen.VerifyHMAC(n, hmacKey) {
			t.Errorf("%s tampered: VerifyHMAC accepts it", name)
		}
	}
	// Fields outside the signing string may change.
	n := item
	n.EventDate, n.PaymentMethod, n.Reason = "2022-02-02T02:00:00Z", "mc", "whatever"
	if !adyen.VerifyHMAC(n, hmacKey) {
		t.Error("VerifyHMAC refuses an item whose unsigned fields changed")
	}
	for _, key := range []string{"", "not hex", hmacKey[:len(hmacKey)-1], strings.Replace(hmacKey, "4", "5", 1)} {
		if adyen.VerifyHMAC(item, key) {
			t.Errorf("VerifyHMAC accepts the key %q", key)
		}
	}
	if _, err := adyen.Sign(item, "zz"); err == nil {
		t.Error("Sign accepts a key that is not hex")
	}
}

func TestDedupKey(t *testing.T) {
	a := captureItem()
	b := a
	b.EventDate, b.AdditionalData = "2022-01-01T00:00:00Z", map[string]any{"x": "y"}
	if adyen.DedupKey(a) != adyen.DedupKey(b) {
		t.Error("a resent item has another key")
	}
	distinct := []adyen.NotificationItem{a}
	for _, edit := range []func(*adyen.NotificationItem){
		func(n *adyen.NotificationItem) { n.PSPReference = "OTHER" },
		func(n *adyen.NotificationItem) { n.EventCode = "CAPTURE_FAILED" },
		func(n *adyen.NotificationItem) { n.Success = "false" },
		func(n *adyen.NotificationItem) { n.OriginalReference = "" },
		// The separator inside a field.
		func(n *adyen.NotificationItem) { n.PSPReference, n.EventCode = n.PSPReference+`":"`+n.EventCode, "" },
		func(n *adyen.NotificationItem) { n.PSPReference, n.EventCode = n.PSPReference+":"+n.EventCode, "" },
	} {
		n := a
		edit(&n)
		distinct = append(distinct, n)
	}
	seen := map[string]int{}
	for i, n := range distinct {
		k := adyen.DedupKey(n)
		if j, ok := seen[k]; ok {
			t.Errorf("items %d and %d share the key %s", j, i, k)
		}
		seen[k] = i
	}
}

func TestParse(t *testing.T) {
	body := `{"live":"false","notificationItems":[{"NotificationRequestItem":{"additionalData":{"hmacSignature":"abc=","metadata":{"k":"v"}},
		"amount":{"currency":"EUR","value":1000},"eventCode":"REFUND","eventDate":"2021-01-01T01:00:00+01:00","merchantAccountCode":"YOUR_MERCHANT_ACCOUNT",
		"merchantReference":"re_1","originalReference":"9913140798220028","paymentMethod":"visa","pspReference":"QFQTPCQ8HXSKGK82",
		"reason":"","success":"true","somethingNew":1}}]}`
	n, err := adyen.Parse([]byte(body))
	if err != nil {
		t.Fatal(err)
	}
	if len(n.Items) != 1 {
		t.Fatalf("%d items, want 1", len(n.Items))
	}
	it := n.Items[0].Item
	if n.Live != "false" || it.EventCode != "REFUND" || it.PSPReference != "QFQTPCQ8HXSKGK82" || it.OriginalReference != "9913140798220028" ||
		it.Amount != (adyen.Amount{Currency: "EUR", Value: 1000}) || !it.Succeeded() || it.HMACSignature() != "abc=" || it.MerchantReference != "re_1" {
		t.Errorf("parsed %+v", n)
	}

	malformed := map[string]string{
		"empty":                 ``,
		"not JSON":              `live=false`,
		"an array":              `[]`,
		"null":                  `null`,
		"no items":              `{"live":"false","notificationItems":[]}`,
		"items missing":         `{"live":"false"}`,
		"live not a string":     `{"live":false,"notificationItems":[{"NotificationRequestItem":{"amount":{"currency":"EUR","value":1},"eventCode":"CAPTURE","merchantAccountCode":"M","pspReference":"P","success":"true"}}]}`,
		"live other":            `{"live":"maybe","notificationItems":[{"NotificationRequestItem":{"amount":{"currency":"EUR","value":1},"eventCode":"CAPTURE","merchantAccountCode":"M","pspReference":"P","success":"true"}}]}`,
		"no wrapper":            `{"live":"false","notificationItems":[{"amount":{"currency":"EUR","value":1},"eventCode":"CAPTURE","merchantAccountCode":"M","pspReference":"P","success":"true"}]}`,
		"no pspReference":       `{"live":"false","notificationItems":[{"NotificationRequestItem":{"amount":{"currency":"EUR","value":1},"eventCode":"CAPTURE","merchantAccountCode":"M","success":"true"}}]}`,
		"no eventCode":          `{"live":"false","notificationItems":[{"NotificationRequestItem":{"amount":{"currency":"EUR","value":1},"merchantAccountCode":"M","pspReference":"P","success":"true"}}]}`,
		"no merchant account":   `{"live":"false","notificationItems":[{"NotificationRequestItem":{"amount":{"currency":"EUR","value":1},"eventCode":"CAPTURE","pspReference":"P","success":"true"}}]}`,
		"success a boolean":     `{"live":"false","notificationItems":[{"NotificationRequestItem":{"amount":{"currency":"EUR","value":1},"eventCode":"CAPTURE","merchantAccountCode":"M","pspReference":"P","success":true}}]}`,
		"success other":         `{"live":"false","notificationItems":[{"NotificationRequestItem":{"amount":{"currency":"EUR","value":1},"eventCode":"CAPTURE","merchantAccountCode":"M","pspReference":"P","success":"yes"}}]}`,
		"value a fraction":      `{"live":"false","notificationItems":[{"NotificationRequestItem":{"amount":{"currency":"EUR","value":1.5},"eventCode":"CAPTURE","merchantAccountCode":"M","pspReference":"P","success":"true"}}]}`,
		"value a string":        `{"live":"false","notificationItems":[{"NotificationRequestItem":{"amount":{"currency":"EUR","value":"1"},"eventCode":"CAPTURE","merchantAccountCode":"M","pspReference":"P","success":"true"}}]}`,
		"no currency":           `{"live":"false","notificationItems":[{"NotificationRequestItem":{"amount":{"value":1},"eventCode":"CAPTURE","merchantAccountCode":"M","pspReference":"P","success":"true"}}]}`,
		"trailing data":         `{"live":"false","notificationItems":[{"NotificationRequestItem":{"amount":{"currency":"EUR","value":1},"eventCode":"CAPTURE","merchantAccountCode":"M","pspReference":"P","success":"true"}}]} {}`,
		"truncated":             `{"live":"false","notificationItems":[{"NotificationRequestItem":{"amount":{"currency":"EUR","value":1},`,
		"additionalData a list": `{"live":"false","notificationItems":[{"NotificationRequestItem":{"additionalData":[],"amount":{"currency":"EUR","value":1},"eventCode":"CAPTURE","merchantAccountCode":"M","pspReference":"P","success":"true"}}]}`,
	}
	for name, body := range malformed {
		if _, err := adyen.Parse([]byte(body)); !errors.Is(err, adyen.ErrMalformed) {
			t.Errorf("%s: Parse: %v, want ErrMalformed", name, err)
		}
	}
}

// TestParseAdyensExamples parses every example notification of Adyen's
// published webhook description whose items are payment notifications.
func TestParseAdyensExamples(t *testing.T) {
	doc := thirdParty(t, "Webhooks-v1.json")
	var spec struct {
		Components struct {
			Examples map[string]struct {
				Value json.RawMessage `json:"value"`
			} `json:"examples"`
		} `json:"components"`
	}
	if err := json.Unmarshal(doc, &spec); err != nil {
		t.Fatal(err)
	}
	names := make([]string, 0, len(spec.Components.Examples))
	for name := range spec.Components.Examples {
		names = append(names, name)
	}
	sort.Strings(names)
	events := map[string]bool{}
	for _, name := range names {
		v := spec.Components.Examples[name].Value
		if !strings.Contains(string(v), "NotificationRequestItem") {
			continue
		}
		n, err := adyen.Parse(v)
		if err != nil {
			t.Errorf("example %s: %v", name, err)
			continue
		}
		for _, w := range n.Items {
			events[w.Item.EventCode] = true
			// Signed with our key, each verifies; re-signed content does not.
			sig, err := adyen.Sign(w.Item, hmacKey)
			if err != nil {
				t.Fatal(err)
			}
			it := w.Item
			it.AdditionalData = map[string]any{"hmacSignature": sig}
			if !adyen.VerifyHMAC(it, hmacKey) {
				t.Errorf("example %s: its signature does not verify", name)
			}
		}
	}
	for _, e := range []string{"AUTHORISATION", "CAPTURE", "CAPTURE_FAILED", "CANCELLATION", "REFUND", "REFUND_FAILED"} {
		if !events[e] {
			t.Errorf("no example of %s parsed", e)
		}
	}
}

func FuzzParse(f *testing.F) {
	f.Add([]byte(`{"live":"false","notificationItems":[{"NotificationRequestItem":{"amount":{"currency":"EUR","value":1000},"eventCode":"CAPTURE","merchantAccountCode":"M","pspReference":"P","originalReference":"O","success":"true","additionalData":{"hmacSignature":"abc="}}}]}`))
	f.Add([]byte(`{"live":"true","notificationItems":[{"NotificationRequestItem":{}}]}`))
	f.Add([]byte(`{"notificationItems":[{"NotificationRequestItem":null}]}`))
	f.Add([]byte(`{"live":"false","notificationItems":[{"NotificationRequestItem":{"amount":{"currency":"EUR","value":9223372036854775807},"additionalData":{"hmacSignature":7}}}]}`))
	f.Add([]byte(`[`))
	f.Fuzz(func(t *testing.T, body []byte) {
		n, err := adyen.Parse(body)
		if err != nil {
			if !errors.Is(err, adyen.ErrMalformed) {
				t.Fatalf("Parse: %v does not wrap ErrMalformed", err)
			}
			return
		}
		if len(n.Items) == 0 {
			t.Fatal("Parse accepted a body without items")
		}
		for _, w := range n.Items {
			it := w.Item
			if it.PSPReference == "" || it.EventCode == "" || (it.Success != "true" && it.Success != "false") {
				t.Fatalf("Parse accepted an item without its required fields: %+v", it)
			}
			_ = adyen.VerifyHMAC(it, hmacKey)
			_ = adyen.DedupKey(it)
			_, _, _ = adyen.FromAdyen(it.Amount)
		}
	})
}

// thirdParty reads a file of Adyen's published descriptions, kept beside
// the repository (../shared/third_party/adyen-openapi/ from its root). When
// it is missing the test is skipped, or fails under
// GATEHOUSE_REQUIRE_SERVICES=1 and in CI.
func thirdParty(t *testing.T, name string) []byte {
	t.Helper()
	path, err := thirdPartyPath(name)
	if err == nil {
		var b []byte
		if b, err = os.ReadFile(path); err == nil {
			return b
		}
	}
	missing(t, "Adyen's API descriptions: %v", err)
	return nil
}

func thirdPartyPath(name string) (string, error) {
	root, err := harness.ModuleRoot()
	if err != nil {
		return "", err
	}
	path := filepath.Join(filepath.Dir(root), "shared", "third_party", "adyen-openapi", name)
	if _, err := os.Stat(path); err != nil {
		return "", err
	}
	return path, nil
}
