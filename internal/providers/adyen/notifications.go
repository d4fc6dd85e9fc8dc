package adyen

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// Notification is the body of Adyen's standard webhook: one or more
// notification items, each the outcome of an event (AUTHORISATION, CAPTURE,
// CAPTURE_FAILED, CANCELLATION, REFUND, REFUND_FAILED, CHARGEBACK, ...).
// Adyen expects the answer "[accepted]" once the items are stored, and
// sends the body again until it gets it: items come more than once (see
// DedupKey).
type Notification struct {
	// Live is "true" for the live environment, "false" for the test one.
	Live  string        `json:"live"`
	Items []ItemWrapper `json:"notificationItems"`
}

// ItemWrapper is the wrapper Adyen puts around each item.
type ItemWrapper struct {
	Item NotificationItem `json:"NotificationRequestItem"`
}

// NotificationItem is Adyen's NotificationRequestItem.
type NotificationItem struct {
	// AdditionalData holds, among others, hmacSignature (see VerifyHMAC).
	AdditionalData map[string]any `json:"additionalData,omitempty"`
	// Amount is in Adyen's minor unit of the currency (see FromAdyen).
	Amount    Amount `json:"amount"`
	EventCode string `json:"eventCode"`
	EventDate string `json:"eventDate"`
	// MerchantAccountCode is the merchant account of the payment.
	MerchantAccountCode string `json:"merchantAccountCode"`
	// MerchantReference is the payment's reference (Authorize sends the
	// idempotency key).
	MerchantReference string `json:"merchantReference"`
	// OriginalReference is the pspReference of the payment a modification's
	// item (CAPTURE, REFUND, ...) is about; PSPReference is then the
	// modification's own.
	OriginalReference string   `json:"originalReference,omitempty"`
	PaymentMethod     string   `json:"paymentMethod,omitempty"`
	PSPReference      string   `json:"pspReference"`
	Reason            string   `json:"reason,omitempty"`
	Success           string   `json:"success"` // "true" or "false"
	Operations        []string `json:"operations,omitempty"`
}

// Succeeded reports whether the event succeeded (success "true").
func (n NotificationItem) Succeeded() bool { return n.Success == "true" }

// ErrMalformed is in the chain of Parse's error for a body that is not a
// notification.
var ErrMalformed = errors.New("adyen: malformed notification")

// Parse reads a notification body. A body that is not one JSON object of
// that shape, has trailing data, holds no item, or an item without
// pspReference, eventCode, merchantAccountCode, a success of "true" or
// "false" or a three-letter currency, is an error wrapping ErrMalformed
// (the caller answers 400). Unknown fields are allowed: Adyen adds some.
func Parse(body []byte) (Notification, error) {
	var n Notification
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	if err := dec.Decode(&n); err != nil {
		return Notification{}, fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return Notification{}, fmt.Errorf("%w: data after the JSON object", ErrMalformed)
	}
	if n.Live != "true" && n.Live != "false" {
		return Notification{}, fmt.Errorf("%w: live is %q, want \"true\" or \"false\"", ErrMalformed, n.Live)
	}
	if len(n.Items) == 0 {
		return Notification{}, fmt.Errorf("%w: no notification items", ErrMalformed)
	}
	for i, w := range n.Items {
		it := w.Item
		switch {
		case it.PSPReference == "":
			return Notification{}, fmt.Errorf("%w: item %d has no pspReference", ErrMalformed, i)
		case it.EventCode == "":
			return Notification{}, fmt.Errorf("%w: item %d has no eventCode", ErrMalformed, i)
		case it.MerchantAccountCode == "":
			return Notification{}, fmt.Errorf("%w: item %d has no merchantAccountCode", ErrMalformed, i)
		case it.Success != "true" && it.Success != "false":
			return Notification{}, fmt.Errorf("%w: item %d has success %q, want \"true\" or \"false\"", ErrMalformed, i, it.Success)
		case len(it.Amount.Currency) != 3:
			return Notification{}, fmt.Errorf("%w: item %d has currency %q", ErrMalformed, i, it.Amount.Currency)
		}
	}
	return n, nil
}

// HMACSignature is the item's additionalData.hmacSignature, "" when it has none.
func (n NotificationItem) HMACSignature() string {
	s, _ := n.AdditionalData["hmacSignature"].(string)
	return s
}

// signingString is Adyen's signing string of an item: pspReference,
// originalReference, merchantAccountCode, merchantReference, the amount's
// value and currency, eventCode and success, joined by ":" (a missing field
// is the empty string).
func signingString(n NotificationItem) string {
	return strings.Join([]string{n.PSPReference, n.OriginalReference, n.MerchantAccountCode, n.MerchantReference,
		strconv.FormatInt(n.Amount.Value, 10), n.Amount.Currency, n.EventCode, n.Success}, ":")
}

// signature is base64 of the HMAC-SHA256 of the item's signing string
// under the hex-encoded key.
func signature(n NotificationItem, hexKey string) ([]byte, error) {
	key, err := hex.DecodeString(hexKey)
	if err != nil || len(key) == 0 {
		return nil, errors.New("adyen: the HMAC key is not a hex string")
	}
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(signingString(n)))
	return mac.Sum(nil), nil
}

// Sign returns the item's HMAC signature under hexKey (the HMAC key the
// Customer Area shows, hex-encoded), as Adyen puts it in
// additionalData.hmacSignature: for tests and tooling.
func Sign(n NotificationItem, hexKey string) (string, error) {
	sum, err := signature(n, hexKey)
	if err != nil {
		return "", err
	}
	return base64.StdEncoding.EncodeToString(sum), nil
}

// VerifyHMAC reports whether the item's additionalData.hmacSignature is
// Adyen's signature of it under hexKey, compared in constant time. A key
// that is not hex, and an item without a signature, never verify.
func VerifyHMAC(n NotificationItem, hexKey string) bool {
	got, err := base64.StdEncoding.DecodeString(n.HMACSignature())
	if err != nil || len(got) == 0 {
		return false
	}
	want, err := signature(n, hexKey)
	if err != nil {
		return false
	}
	return hmac.Equal(got, want)
}

// DedupKey identifies an item's event across Adyen's resends: its
// pspReference, eventCode, success and originalReference, each quoted, so
// that no two different items share a key whatever their fields hold.
func DedupKey(n NotificationItem) string {
	return strconv.Quote(n.PSPReference) + ":" + strconv.Quote(n.EventCode) + ":" +
		strconv.Quote(n.Success) + ":" + strconv.Quote(n.OriginalReference)
}
