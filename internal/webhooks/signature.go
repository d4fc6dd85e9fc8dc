package webhooks

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"math"
	"strconv"
	"strings"
	"time"
)

// SecretPrefix starts every webhook secret (api/openapi.yaml).
const SecretPrefix = "whsec_"

// The signature headers of a delivery.
const (
	HeaderSignature         = "X-Service-Signature"
	HeaderSignaturePrevious = "X-Service-Signature-Previous"
	HeaderWebhookID         = "webhook-id"
	HeaderWebhookTimestamp  = "webhook-timestamp"
	HeaderWebhookSignature  = "webhook-signature"
)

// secretBytes is the size of the random key behind a new secret; secrets
// decoding to fewer than minKeyBytes or more than maxKeyBytes are refused, as
// the Standard Webhooks specification recommends.
const (
	secretBytes = 32
	minKeyBytes = 24
	maxKeyBytes = 64
)

// ErrMalformedSecret is returned by SignatureHeaders when a secret is not
// "whsec_" followed by padded standard base64 of 24 to 64 bytes.
var ErrMalformedSecret = errors.New("webhooks: malformed webhook secret")

// ErrMalformedTimestamp is returned by SignatureHeaders for a time before
// 1970, which webhook-timestamp cannot carry.
var ErrMalformedTimestamp = errors.New("webhooks: webhook timestamp before 1970")

// ErrMalformedMessageID is returned by SignatureHeaders for an empty message
// id or one holding anything but printable ASCII without spaces.
var ErrMalformedMessageID = errors.New("webhooks: malformed webhook message id")

// NewSecret returns a fresh endpoint secret: "whsec_" followed by the padded
// standard base64 of 32 bytes from crypto/rand. The error is the random
// source's, which the Go runtime never returns in practice.
func NewSecret() (string, error) {
	b := make([]byte, secretBytes)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return SecretPrefix + base64.StdEncoding.EncodeToString(b), nil
}

// Secrets are the keys that sign one delivery. Current always signs; Previous
// is the secret replaced by the last rotation while it still signs (the
// caller decides when it has expired and passes "" then).
type Secrets struct {
	Current  string
	Previous string
}

// AttemptHeaders names what one attempt's X-Service headers carry.
type AttemptHeaders struct {
	EventID    string
	EventType  string
	DeliveryID string
	Attempt    int
	// Sequence is the event's number among its object's events; 0 sends
	// no X-Service-Sequence.
	Sequence int
	// Test marks a test delivery (X-Service-Test: true).
	Test bool
}

// DeliveryHeaders returns every header the gateway signs and names one
// attempt with: SignatureHeaders (webhook-id is the event's id) and the
// X-Service headers of a. The gateway's deliveries, gatehouse listen and
// gatehouse doctor all send these.
func DeliveryHeaders(body []byte, s Secrets, a AttemptHeaders, at time.Time) (map[string]string, error) {
	h, err := SignatureHeaders(body, s, a.EventID, at)
	if err != nil {
		return nil, err
	}
	h["X-Service-Event-Id"] = a.EventID
	h["X-Service-Event-Type"] = a.EventType
	h["X-Service-Delivery-Id"] = a.DeliveryID
	h["X-Service-Delivery-Attempt"] = strconv.Itoa(a.Attempt)
	if a.Sequence > 0 {
		h["X-Service-Sequence"] = strconv.Itoa(a.Sequence)
	}
	if a.Test {
		h["X-Service-Test"] = "true"
	}
	return h, nil
}

// SignatureHeaders returns the signature headers of one delivery of body:
// X-Service-Signature (always exactly one value, made with Current), X-Service-
// Signature-Previous when Previous is set, and the Standard Webhooks trio
// webhook-id (messageID), webhook-timestamp (at, in Unix seconds) and
// webhook-signature (one "v1,<base64>" per secret, newest first, separated by
// a space). It returns ErrMalformedSecret, ErrMalformedMessageID or
// ErrMalformedTimestamp for bad input, never with a secret in the error.
func SignatureHeaders(body []byte, s Secrets, messageID string, at time.Time) (map[string]string, error) {
	cur, err := standardKey(s.Current)
	if err != nil {
		return nil, err
	}
	var prev []byte
	if s.Previous != "" {
		if prev, err = standardKey(s.Previous); err != nil {
			return nil, err
		}
	}
	if !validMessageID(messageID) {
		return nil, ErrMalformedMessageID
	}
	if at.Unix() < 0 {
		return nil, ErrMalformedTimestamp
	}
	ts := strconv.FormatInt(at.Unix(), 10)
	h := map[string]string{
		HeaderSignature:        serviceSignature(body, s.Current),
		HeaderWebhookID:        messageID,
		HeaderWebhookTimestamp: ts,
		HeaderWebhookSignature: "v1," + standardSignature(cur, messageID, ts, body),
	}
	if prev != nil {
		h[HeaderSignaturePrevious] = serviceSignature(body, s.Previous)
		h[HeaderWebhookSignature] += " v1," + standardSignature(prev, messageID, ts, body)
	}
	return h, nil
}

// VerifyServiceSignature reports whether header is the X-Service-Signature of
// body under secret: exactly "sha256=" and 64 lowercase hex digits, compared
// in constant time. A malformed secret or header never verifies.
func VerifyServiceSignature(body []byte, secret, header string) bool {
	if _, err := standardKey(secret); err != nil {
		return false
	}
	const prefix = "sha256="
	if len(header) != len(prefix)+2*sha256.Size || !strings.HasPrefix(header, prefix) {
		return false
	}
	for i := len(prefix); i < len(header); i++ {
		c := header[i]
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return hmac.Equal([]byte(header), []byte(serviceSignature(body, secret)))
}

// VerifyStandard reports whether signatures (the webhook-signature header:
// space-separated "v1,<base64>" values; other versions are ignored) holds a
// valid signature of body under secret for the message id and timestamp (the
// webhook-id and webhook-timestamp headers), and the timestamp, decimal Unix
// seconds, lies within tolerance of now in either direction.
func VerifyStandard(body []byte, secret, id, timestamp, signatures string, now time.Time, tolerance time.Duration) bool {
	key, err := standardKey(secret)
	if err != nil || id == "" || tolerance < 0 {
		return false
	}
	ts, ok := parseUnixSeconds(timestamp)
	if !ok || !within(ts, now.Unix(), int64(tolerance/time.Second)) {
		return false
	}
	// Sign the number as the reference libraries do (they parse the header),
	// so "0123" is checked as "123".
	want := []byte(standardSignature(key, id, strconv.FormatInt(ts, 10), body))
	found := false
	for _, sig := range strings.Split(signatures, " ") {
		v, ok := strings.CutPrefix(sig, "v1,")
		if ok && hmac.Equal([]byte(v), want) {
			found = true // keep going: the time taken does not say which one matched
		}
	}
	return found
}

// standardKey returns the HMAC key of a Standard Webhooks signature: the
// base64-decoded part of secret after "whsec_".
func standardKey(secret string) ([]byte, error) {
	enc, ok := strings.CutPrefix(secret, SecretPrefix)
	if !ok {
		return nil, ErrMalformedSecret
	}
	key, err := base64.StdEncoding.Strict().DecodeString(enc)
	if err != nil || len(key) < minKeyBytes || len(key) > maxKeyBytes {
		return nil, ErrMalformedSecret
	}
	return key, nil
}

// serviceSignature is the X-Service-Signature value: the HMAC key is the
// whole secret string, prefix included.
func serviceSignature(body []byte, secret string) string {
	m := hmac.New(sha256.New, []byte(secret))
	m.Write(body)
	return "sha256=" + hex.EncodeToString(m.Sum(nil))
}

// standardSignature is the base64 HMAC-SHA256 of "<id>.<timestamp>.<body>".
func standardSignature(key []byte, id, timestamp string, body []byte) string {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(id))
	m.Write([]byte{'.'})
	m.Write([]byte(timestamp))
	m.Write([]byte{'.'})
	m.Write(body)
	return base64.StdEncoding.EncodeToString(m.Sum(nil))
}

// validMessageID keeps the webhook-id header a single printable token.
func validMessageID(id string) bool {
	if id == "" || len(id) > 256 {
		return false
	}
	for i := 0; i < len(id); i++ {
		if id[i] <= ' ' || id[i] > '~' {
			return false
		}
	}
	return true
}

// parseUnixSeconds accepts only plain decimal digits, the form
// SignatureHeaders writes (no sign, no spaces), that fit an int64.
func parseUnixSeconds(s string) (int64, bool) {
	if s == "" || len(s) > 19 {
		return 0, false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, false
		}
	}
	n, err := strconv.ParseInt(s, 10, 64)
	return n, err == nil
}

// within reports whether |ts - now| <= tol (tol >= 0) without overflowing.
func within(ts, now, tol int64) bool {
	lo, hi := now-tol, now+tol
	if lo > now { // wrapped around
		lo = math.MinInt64
	}
	if hi < now { // wrapped around
		hi = math.MaxInt64
	}
	return ts >= lo && ts <= hi
}
