package webhooks_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/gatehouse-pay/gatehouse/internal/webhooks"
)

// The -update flag rewrites golden files under testdata. It is registered
// here unless another test file of the package already did.
func init() {
	if flag.Lookup("update") == nil {
		flag.Bool("update", false, "rewrite the golden files under testdata")
	}
}

func updateGolden() bool {
	f := flag.Lookup("update")
	return f != nil && f.Value.String() == "true"
}

const sigGoldenFile = "testdata/signatures.json"

// Fixed secrets of the golden vectors (test keys only; never used anywhere else).
const (
	sigSecretA   = "whsec_z4IhkrzNxcEWVvsOSh5nLJRKjDBsxOSErMG8Hj3B000="
	sigSecretB   = "whsec_5rQvGd+rSQqlNbiHZW9Th6oHaBxlzcI63EgBzkX1obI="
	sigSecretC   = "whsec_dQUeREP/Za8tcRIDszc/9j3kpTBiinu+1oV6/V/2mms="
	sigSecret64  = "whsec_KFP9QWQDP1rJG+nd0OS8PZ1ScgYCvkFzFsVBmQhLL9nSmBAi+q5Ghlw5Y6Fza/5E99azVOjMyLEuycvC1xMOlg=="
	sigSecretStd = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw" // the Standard Webhooks reference vector's
)

// sigVector is one golden case: the inputs and the headers they must give.
type sigVector struct {
	Name           string            `json:"name"`
	Body           string            `json:"body"`
	Secret         string            `json:"secret"`
	PreviousSecret string            `json:"previous_secret,omitempty"`
	ID             string            `json:"id"`
	Timestamp      int64             `json:"timestamp"`
	Headers        map[string]string `json:"headers"`
}

type sigGolden struct {
	Comment string      `json:"comment"`
	Vectors []sigVector `json:"vectors"`
}

const sigChargeBody = `{"id":"0195f3c2-7a4e-7b8c-9d0e-1f2a3b4c5d6e","event_type":"charge.captured","created_at":"2026-01-01T00:00:00.000Z","data":{"object":"charge","charge":{"id":"ch_0195f3c27a4e7b8c","object":"charge","amount":2500,"currency":"usd","status":"captured","amount_refunded":0,"livemode":false}}}`

// sigInputs are the golden cases without their expected headers.
func sigInputs() []sigVector {
	return []sigVector{
		{Name: "charge event", Body: sigChargeBody, Secret: sigSecretA, ID: "0195f3c2-7a4e-7b8c-9d0e-1f2a3b4c5d6e", Timestamp: 1767225600},
		{Name: "rotation overlap signs with both secrets", Body: sigChargeBody, Secret: sigSecretB, PreviousSecret: sigSecretA, ID: "0195f3c2-7a4e-7b8c-9d0e-1f2a3b4c5d6e", Timestamp: 1767225660},
		{Name: "standard webhooks reference vector", Body: `{"test": 2432232314}`, Secret: sigSecretStd, ID: "msg_p5jXN8AQM9LWM0D4loKWxJek", Timestamp: 1614265330},
		{Name: "non-ASCII UTF-8 body", Body: `{"id":"0195f3c2-8000-7000-8000-000000000001","event_type":"refund.created","created_at":"2026-02-03T04:05:06.789Z","data":{"object":"refund","refund":{"id":"re_1","reason":"café – 💳 ✓"},"charge":{"id":"ch_1","description":"Grüße aus Zürich"}}}`, Secret: sigSecretC, ID: "0195f3c2-8000-7000-8000-000000000001", Timestamp: 1770091506},
		{Name: "pretty-printed body with trailing newline", Body: "{\n  \"id\": \"evt\",\n  \"event_type\": \"charge.voided\"\n}\n", Secret: sigSecretC, PreviousSecret: sigSecret64, ID: "0195f3c2-8000-7000-8000-000000000002", Timestamp: 1800000000},
		{Name: "64-byte key and minimal body", Body: `{}`, Secret: sigSecret64, ID: "msg_minimal", Timestamp: 1700000000},
	}
}

func sigSign(t *testing.T, v sigVector) map[string]string {
	t.Helper()
	h, err := webhooks.SignatureHeaders([]byte(v.Body), webhooks.Secrets{Current: v.Secret, Previous: v.PreviousSecret}, v.ID, time.Unix(v.Timestamp, 0))
	if err != nil {
		t.Fatalf("%s: SignatureHeaders: %v", v.Name, err)
	}
	return h
}

func TestSignatureGoldenVectors(t *testing.T) {
	got := sigGolden{Comment: "Webhook signature test vectors (internal/webhooks/signature.go). Secrets are test keys. Regenerate with go test ./internal/webhooks -run TestSignatureGoldenVectors -update."}
	for _, v := range sigInputs() {
		v.Headers = sigSign(t, v)
		got.Vectors = append(got.Vectors, v)
	}
	if updateGolden() {
		b, err := json.MarshalIndent(got, "", "  ")
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(sigGoldenFile, append(b, '\n'), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	var want sigGolden
	b, err := os.ReadFile(sigGoldenFile)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	if err := json.Unmarshal(b, &want); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("signatures differ from %s (-want +got):\n%s", sigGoldenFile, diff)
	}
}

// The Standard Webhooks specification publishes this vector; matching it says
// the delimiter, key decoding and base64 alphabet are right, independently of
// our own golden file.
func TestSignatureMatchesStandardWebhooksReferenceVector(t *testing.T) {
	h, err := webhooks.SignatureHeaders([]byte(`{"test": 2432232314}`), webhooks.Secrets{Current: sigSecretStd}, "msg_p5jXN8AQM9LWM0D4loKWxJek", time.Unix(1614265330, 0))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := h["webhook-signature"], "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="; got != want {
		t.Errorf("webhook-signature = %q, want %q", got, want)
	}
}

func TestSignatureHeadersShape(t *testing.T) {
	body := []byte(sigChargeBody)
	at := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

	one, err := webhooks.SignatureHeaders(body, webhooks.Secrets{Current: sigSecretA}, "evt_1", at)
	if err != nil {
		t.Fatal(err)
	}
	wantKeys := []string{"X-Service-Signature", "webhook-id", "webhook-signature", "webhook-timestamp"}
	if diff := cmp.Diff(wantKeys, sigKeys(one)); diff != "" {
		t.Errorf("headers without a previous secret (-want +got):\n%s", diff)
	}
	if one["webhook-id"] != "evt_1" || one["webhook-timestamp"] != "1767225600" {
		t.Errorf("webhook-id, webhook-timestamp = %q, %q", one["webhook-id"], one["webhook-timestamp"])
	}
	if n := len(strings.Fields(one["webhook-signature"])); n != 1 {
		t.Errorf("webhook-signature has %d values, want 1", n)
	}

	two, err := webhooks.SignatureHeaders(body, webhooks.Secrets{Current: sigSecretB, Previous: sigSecretA}, "evt_1", at)
	if err != nil {
		t.Fatal(err)
	}
	wantKeys = []string{"X-Service-Signature", "X-Service-Signature-Previous", "webhook-id", "webhook-signature", "webhook-timestamp"}
	if diff := cmp.Diff(wantKeys, sigKeys(two)); diff != "" {
		t.Errorf("headers with a previous secret (-want +got):\n%s", diff)
	}
	// X-Service-Signature always carries exactly one value, made with the newest secret.
	if strings.ContainsAny(two["X-Service-Signature"], " ,") || !webhooks.VerifyServiceSignature(body, sigSecretB, two["X-Service-Signature"]) {
		t.Errorf("X-Service-Signature = %q, want one value made with the current secret", two["X-Service-Signature"])
	}
	if two["X-Service-Signature-Previous"] != one["X-Service-Signature"] {
		t.Errorf("X-Service-Signature-Previous = %q, want the old secret's value %q", two["X-Service-Signature-Previous"], one["X-Service-Signature"])
	}
	// webhook-signature: newest first, then the previous secret's.
	sigs := strings.Split(two["webhook-signature"], " ")
	if len(sigs) != 2 || sigs[1] != one["webhook-signature"] {
		t.Errorf("webhook-signature = %q, want the current secret's value then %q", two["webhook-signature"], one["webhook-signature"])
	}
	other, _ := webhooks.SignatureHeaders(body, webhooks.Secrets{Current: sigSecretB}, "evt_1", at)
	if sigs[0] != other["webhook-signature"] {
		t.Errorf("first webhook-signature = %q, want the current secret's %q", sigs[0], other["webhook-signature"])
	}
}

func sigKeys(m map[string]string) []string { return slices.Sorted(maps.Keys(m)) }

func TestSignatureHeadersRefusesBadInput(t *testing.T) {
	at := time.Unix(1767225600, 0)
	tests := []struct {
		name    string
		secrets webhooks.Secrets
		id      string
		at      time.Time
		want    error
	}{
		{"empty current", webhooks.Secrets{}, "evt", at, webhooks.ErrMalformedSecret},
		{"no prefix", webhooks.Secrets{Current: strings.TrimPrefix(sigSecretA, "whsec_")}, "evt", at, webhooks.ErrMalformedSecret},
		{"wrong prefix", webhooks.Secrets{Current: "whsk_" + strings.TrimPrefix(sigSecretA, "whsec_")}, "evt", at, webhooks.ErrMalformedSecret},
		{"not base64", webhooks.Secrets{Current: "whsec_not*base64!"}, "evt", at, webhooks.ErrMalformedSecret},
		{"url-safe base64", webhooks.Secrets{Current: strings.NewReplacer("+", "-", "/", "_").Replace(sigSecretC)}, "evt", at, webhooks.ErrMalformedSecret},
		{"missing padding", webhooks.Secrets{Current: strings.TrimRight(sigSecretA, "=")}, "evt", at, webhooks.ErrMalformedSecret},
		{"key too short", webhooks.Secrets{Current: "whsec_" + base64.StdEncoding.EncodeToString(make([]byte, 16))}, "evt", at, webhooks.ErrMalformedSecret},
		{"key too long", webhooks.Secrets{Current: "whsec_" + base64.StdEncoding.EncodeToString(make([]byte, 65))}, "evt", at, webhooks.ErrMalformedSecret},
		{"bad previous", webhooks.Secrets{Current: sigSecretA, Previous: "whsec_"}, "evt", at, webhooks.ErrMalformedSecret},
		{"empty id", webhooks.Secrets{Current: sigSecretA}, "", at, webhooks.ErrMalformedMessageID},
		{"id with a space", webhooks.Secrets{Current: sigSecretA}, "evt 1", at, webhooks.ErrMalformedMessageID},
		{"id with a newline", webhooks.Secrets{Current: sigSecretA}, "evt\r\nX-Injected: 1", at, webhooks.ErrMalformedMessageID},
		{"time before 1970", webhooks.Secrets{Current: sigSecretA}, "evt", time.Unix(-1, 0), webhooks.ErrMalformedTimestamp},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h, err := webhooks.SignatureHeaders([]byte("{}"), tt.secrets, tt.id, tt.at)
			if !errors.Is(err, tt.want) || h != nil {
				t.Fatalf("SignatureHeaders = %v, %v; want nil, %v", h, err, tt.want)
			}
			if strings.Contains(err.Error(), "whsec_") || (tt.secrets.Current != "" && strings.Contains(err.Error(), tt.secrets.Current)) {
				t.Errorf("error %q shows a secret", err)
			}
		})
	}
}

func TestNewSecret(t *testing.T) {
	seen := map[string]bool{}
	for range 50 {
		s, err := webhooks.NewSecret()
		if err != nil {
			t.Fatal(err)
		}
		enc, ok := strings.CutPrefix(s, "whsec_")
		if !ok {
			t.Fatalf("secret %q lacks the whsec_ prefix", s)
		}
		key, err := base64.StdEncoding.Strict().DecodeString(enc)
		if err != nil || len(key) != 32 || len(enc) != 44 {
			t.Fatalf("secret %q: %d bytes, %v; want padded base64 of 32 bytes", s, len(key), err)
		}
		if seen[s] {
			t.Fatalf("secret %q repeated", s)
		}
		seen[s] = true
		if _, err := webhooks.SignatureHeaders([]byte("{}"), webhooks.Secrets{Current: s}, "evt", time.Now()); err != nil {
			t.Fatalf("a new secret does not sign: %v", err)
		}
	}
}

func TestVerifyServiceSignature(t *testing.T) {
	body := []byte(sigChargeBody)
	good := sigSign(t, sigInputs()[0])["X-Service-Signature"]
	hexPart := strings.TrimPrefix(good, "sha256=")
	tests := []struct {
		name   string
		body   []byte
		secret string
		header string
		want   bool
	}{
		{"valid", body, sigSecretA, good, true},
		{"other secret", body, sigSecretB, good, false},
		{"body changed", append([]byte(sigChargeBody), ' '), sigSecretA, good, false},
		{"uppercase hex", body, sigSecretA, "sha256=" + strings.ToUpper(hexPart), false},
		{"upper-case prefix", body, sigSecretA, "SHA256=" + hexPart, false},
		{"no prefix", body, sigSecretA, hexPart, false},
		{"other algorithm", body, sigSecretA, "sha1=" + hexPart, false},
		{"leading space", body, sigSecretA, " " + good, false},
		{"trailing space", body, sigSecretA, good + " ", false},
		{"two values", body, sigSecretA, good + "," + good, false},
		{"truncated", body, sigSecretA, good[:len(good)-1], false},
		{"empty header", body, sigSecretA, "", false},
		{"prefix only", body, sigSecretA, "sha256=", false},
		{"malformed secret", body, "secret", good, false},
		{"empty secret", body, "", good, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := webhooks.VerifyServiceSignature(tt.body, tt.secret, tt.header); got != tt.want {
				t.Errorf("VerifyServiceSignature = %v, want %v", got, tt.want)
			}
		})
	}
	// An empty body is signed and verified like any other.
	h, err := webhooks.SignatureHeaders(nil, webhooks.Secrets{Current: sigSecretA}, "evt", time.Unix(0, 0))
	if err != nil || !webhooks.VerifyServiceSignature(nil, sigSecretA, h["X-Service-Signature"]) {
		t.Errorf("empty body: %v, %v", h, err)
	}
}

func TestVerifyStandard(t *testing.T) {
	v := sigInputs()[1] // signed with two secrets
	h := sigSign(t, v)
	body := []byte(v.Body)
	at := time.Unix(v.Timestamp, 0)
	sigs := strings.Split(h["webhook-signature"], " ")
	const tol = 5 * time.Minute
	tests := []struct {
		name       string
		body       []byte
		secret     string
		id, ts     string
		signatures string
		now        time.Time
		tolerance  time.Duration
		want       bool
	}{
		{"current secret", body, v.Secret, v.ID, h["webhook-timestamp"], h["webhook-signature"], at, tol, true},
		{"previous secret", body, v.PreviousSecret, v.ID, h["webhook-timestamp"], h["webhook-signature"], at, tol, true},
		{"only the previous signature", body, v.PreviousSecret, v.ID, h["webhook-timestamp"], sigs[1], at, tol, true},
		{"unknown versions are skipped", body, v.Secret, v.ID, h["webhook-timestamp"], "v2,abc v1a,x " + sigs[0], at, tol, true},
		{"other secret", body, sigSecretC, v.ID, h["webhook-timestamp"], h["webhook-signature"], at, tol, false},
		{"current signature, previous secret", body, v.PreviousSecret, v.ID, h["webhook-timestamp"], sigs[0], at, tol, false},
		{"body changed", append([]byte(v.Body), ' '), v.Secret, v.ID, h["webhook-timestamp"], h["webhook-signature"], at, tol, false},
		{"id changed", body, v.Secret, v.ID + "x", h["webhook-timestamp"], h["webhook-signature"], at, tol, false},
		{"timestamp changed", body, v.Secret, v.ID, strconv.FormatInt(v.Timestamp+1, 10), h["webhook-signature"], at, tol, false},
		{"at the edge of tolerance, late", body, v.Secret, v.ID, h["webhook-timestamp"], h["webhook-signature"], at.Add(tol), tol, true},
		{"at the edge of tolerance, early", body, v.Secret, v.ID, h["webhook-timestamp"], h["webhook-signature"], at.Add(-tol), tol, true},
		{"too old", body, v.Secret, v.ID, h["webhook-timestamp"], h["webhook-signature"], at.Add(tol + time.Second), tol, false},
		{"too new", body, v.Secret, v.ID, h["webhook-timestamp"], h["webhook-signature"], at.Add(-tol - time.Second), tol, false},
		{"negative tolerance", body, v.Secret, v.ID, h["webhook-timestamp"], h["webhook-signature"], at, -time.Second, false},
		{"signed timestamp", body, v.Secret, v.ID, "+" + h["webhook-timestamp"], h["webhook-signature"], at, tol, false},
		{"timestamp with spaces", body, v.Secret, v.ID, " " + h["webhook-timestamp"], h["webhook-signature"], at, tol, false},
		{"timestamp in milliseconds", body, v.Secret, v.ID, h["webhook-timestamp"] + "000", h["webhook-signature"], at, tol, false},
		{"timestamp overflowing int64", body, v.Secret, v.ID, "99999999999999999999", h["webhook-signature"], at, tol, false},
		{"huge tolerance, huge timestamp", body, v.Secret, v.ID, "9223372036854775807", h["webhook-signature"], at, time.Duration(1<<63 - 1), false},
		{"empty timestamp", body, v.Secret, v.ID, "", h["webhook-signature"], at, tol, false},
		{"empty id", body, v.Secret, "", h["webhook-timestamp"], h["webhook-signature"], at, tol, false},
		{"empty signatures", body, v.Secret, v.ID, h["webhook-timestamp"], "", at, tol, false},
		{"signature without version", body, v.Secret, v.ID, h["webhook-timestamp"], strings.TrimPrefix(sigs[0], "v1,"), at, tol, false},
		{"padding stripped", body, v.Secret, v.ID, h["webhook-timestamp"], strings.TrimRight(sigs[0], "="), at, tol, false},
		{"malformed secret", body, "whsec_???", v.ID, h["webhook-timestamp"], h["webhook-signature"], at, tol, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := webhooks.VerifyStandard(tt.body, tt.secret, tt.id, tt.ts, tt.signatures, tt.now, tt.tolerance)
			if got != tt.want {
				t.Errorf("VerifyStandard = %v, want %v", got, tt.want)
			}
		})
	}
	// Leading zeros are read as the reference libraries read them: as the number.
	zeroed, _ := webhooks.SignatureHeaders(body, webhooks.Secrets{Current: v.Secret}, v.ID, at)
	if !webhooks.VerifyStandard(body, v.Secret, v.ID, "0"+zeroed["webhook-timestamp"], zeroed["webhook-signature"], at, tol) {
		t.Error("a timestamp with a leading zero is not read as its number")
	}
}

// fuzzSecret makes a well-formed secret from any fuzz input.
func fuzzSecret(seed []byte) string {
	key := make([]byte, 32)
	copy(key, seed)
	return "whsec_" + base64.StdEncoding.EncodeToString(key)
}

func FuzzVerifyServiceSignature(f *testing.F) {
	for _, v := range sigInputs() {
		h, err := webhooks.SignatureHeaders([]byte(v.Body), webhooks.Secrets{Current: v.Secret}, v.ID, time.Unix(v.Timestamp, 0))
		if err != nil {
			f.Fatal(err)
		}
		f.Add([]byte(v.Body), []byte(v.Secret), h["X-Service-Signature"])
	}
	f.Add([]byte{}, []byte{}, "")
	f.Add([]byte{0xff, 0x00, 0xfe}, []byte("whsec_"), "sha256=")
	f.Add([]byte("x"), []byte{1, 2, 3}, "sha256="+strings.Repeat("0", 64))
	f.Add([]byte("x"), []byte{1, 2, 3}, "sha256="+strings.Repeat("G", 64))
	f.Fuzz(func(t *testing.T, body, seed []byte, header string) {
		secret := fuzzSecret(seed)
		h, err := webhooks.SignatureHeaders(body, webhooks.Secrets{Current: secret}, "evt_fuzz", time.Unix(1767225600, 0))
		if err != nil {
			t.Fatalf("SignatureHeaders: %v", err)
		}
		sig := h["X-Service-Signature"]
		if webhooks.VerifyServiceSignature(body, secret, header) && header != sig {
			t.Fatalf("header %q verified but the signature is %q", header, sig)
		}
		_ = webhooks.VerifyServiceSignature(body, string(seed), header) // any secret: no panic
		if !webhooks.VerifyServiceSignature(body, secret, sig) {
			t.Fatalf("our own signature %q does not verify", sig)
		}
		if len(body) > 0 {
			flipped := bytes.Clone(body)
			flipped[len(flipped)/2] ^= 0x01
			if webhooks.VerifyServiceSignature(flipped, secret, sig) {
				t.Fatal("a body with a flipped bit verifies")
			}
		}
		if webhooks.VerifyServiceSignature(body, secret, strings.ToUpper(sig)) {
			t.Fatal("an upper-case signature verifies")
		}
	})
}

func FuzzVerifyStandard(f *testing.F) {
	for _, v := range sigInputs() {
		h, err := webhooks.SignatureHeaders([]byte(v.Body), webhooks.Secrets{Current: v.Secret, Previous: v.PreviousSecret}, v.ID, time.Unix(v.Timestamp, 0))
		if err != nil {
			f.Fatal(err)
		}
		f.Add([]byte(v.Body), []byte(v.Secret), v.ID, v.Timestamp, h["webhook-signature"])
	}
	f.Add([]byte{}, []byte{}, "", int64(0), "")
	f.Add([]byte("{}"), []byte{0xff}, "a b", int64(-1), "v1, v1,,, v1")
	f.Add([]byte("{}"), []byte("k"), "evt", int64(1<<62), "v1,AAAA v2,BBBB")
	f.Fuzz(func(t *testing.T, body, seed []byte, id string, ts int64, signatures string) {
		secret, previous := fuzzSecret(seed), fuzzSecret(append([]byte("previous"), seed...))
		if ts < 0 {
			ts = -(ts + 1)
		}
		ts %= 1 << 40 // Unix seconds up to year ~36800
		at := time.Unix(ts, 0)
		timestamp := strconv.FormatInt(ts, 10)

		// Arbitrary input: never panics.
		_ = webhooks.VerifyStandard(body, secret, id, timestamp, signatures, at, 5*time.Minute)
		_ = webhooks.VerifyStandard(body, string(seed), id, signatures, signatures, at, time.Duration(ts))

		if _, err := webhooks.SignatureHeaders(body, webhooks.Secrets{Current: secret}, id, at); err != nil {
			id = "evt_fuzz"
		}
		h, err := webhooks.SignatureHeaders(body, webhooks.Secrets{Current: secret, Previous: previous}, id, at)
		if err != nil {
			t.Fatalf("SignatureHeaders: %v", err)
		}
		ok := func(body []byte, secret, id string, now time.Time) bool {
			return webhooks.VerifyStandard(body, secret, id, h["webhook-timestamp"], h["webhook-signature"], now, 5*time.Minute)
		}
		if !ok(body, secret, h["webhook-id"], at) || !ok(body, previous, h["webhook-id"], at) {
			t.Fatalf("our own signatures %q do not verify", h["webhook-signature"])
		}
		if len(body) > 0 {
			flipped := bytes.Clone(body)
			flipped[len(flipped)/2] ^= 0x01
			if ok(flipped, secret, h["webhook-id"], at) {
				t.Fatal("a body with a flipped bit verifies")
			}
		}
		if ok(body, secret, h["webhook-id"]+"x", at) {
			t.Fatal("another message id verifies")
		}
		if ok(body, secret, h["webhook-id"], at.Add(5*time.Minute+time.Second)) {
			t.Fatal("a stale timestamp verifies")
		}
	})
}

// TestSignatureVectorsVerifyWithNodeLibraries checks the golden vectors, and
// vectors made now, with verifiers nobody here wrote: @octokit/webhooks-methods
// for X-Service-Signature and standardwebhooks for the webhook-* headers
// (testdata/verify). Without node and npm it is skipped, or fails when
// GATEHOUSE_REQUIRE_SERVICES=1.
func TestSignatureVectorsVerifyWithNodeLibraries(t *testing.T) {
	dir := sigNodeVerifier(t)

	// Vectors signed now, checked on the real clock as a receiver would.
	fresh := sigGolden{Comment: "made by the test run"}
	for _, v := range sigInputs() {
		v.Timestamp = time.Now().Unix()
		v.Headers = sigSign(t, v)
		fresh.Vectors = append(fresh.Vectors, v)
	}
	freshFile := filepath.Join(t.TempDir(), "fresh.json")
	b, err := json.Marshal(fresh)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(freshFile, b, 0o644); err != nil {
		t.Fatal(err)
	}
	golden, err := filepath.Abs(sigGoldenFile)
	if err != nil {
		t.Fatal(err)
	}

	for _, run := range []struct{ file, clock string }{{golden, "vector"}, {freshFile, "real"}} {
		t.Run(run.clock+" clock", func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, "node", "verify.mjs", run.file, run.clock)
			cmd.Dir = dir
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			out, err := cmd.Output()
			if err != nil {
				t.Fatalf("node verify.mjs: %v\n%s", err, stderr.String())
			}
			checks := map[string]int{}
			sc := bufio.NewScanner(bytes.NewReader(out))
			for sc.Scan() {
				var r struct {
					Vector, Check, Detail string
					OK                    bool
				}
				if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
					t.Fatalf("verifier printed %q: %v", sc.Text(), err)
				}
				if !r.OK {
					t.Errorf("%s: %s failed (%s)", r.Vector, r.Check, r.Detail)
				}
				checks[r.Vector]++
			}
			// Every vector gets 6 checks, 9 when it has a previous secret.
			for _, v := range sigInputs() {
				want := 6
				if v.PreviousSecret != "" {
					want = 9
				}
				if checks[v.Name] != want {
					t.Errorf("%s: %d checks ran, want %d", v.Name, checks[v.Name], want)
				}
			}
		})
	}
}

// sigNodeVerifier returns testdata/verify with its pinned packages installed
// (npm ci into a private folder, then renamed into place, so concurrent test
// runs never share a half-installed node_modules).
func sigNodeVerifier(t *testing.T) string {
	t.Helper()
	unavailable := func(format string, args ...any) {
		t.Helper()
		if os.Getenv("GATEHOUSE_REQUIRE_SERVICES") == "1" {
			t.Fatalf(format, args...)
		}
		t.Skipf(format+" (set GATEHOUSE_REQUIRE_SERVICES=1 to fail instead)", args...)
	}
	for _, tool := range []string{"node", "npm"} {
		if _, err := exec.LookPath(tool); err != nil {
			unavailable("%s is not on PATH: %v", tool, err)
		}
	}
	dir, err := filepath.Abs("testdata/verify")
	if err != nil {
		t.Fatal(err)
	}
	pinned := map[string]string{"@octokit/webhooks-methods": "6.0.0", "standardwebhooks": "1.1.1"}
	installed := func(root string) bool {
		for name, version := range pinned {
			b, err := os.ReadFile(filepath.Join(root, "node_modules", name, "package.json"))
			var p struct{ Version string }
			if err != nil || json.Unmarshal(b, &p) != nil || p.Version != version {
				return false
			}
		}
		return true
	}
	if installed(dir) {
		return dir
	}
	tmp, err := os.MkdirTemp(dir, ".install-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(tmp)
	for _, f := range []string{"package.json", "package-lock.json"} {
		b, err := os.ReadFile(filepath.Join(dir, f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(tmp, f), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "npm", "ci", "--no-audit", "--no-fund", "--ignore-scripts", "--prefer-offline")
	cmd.Dir = tmp
	if out, err := cmd.CombinedOutput(); err != nil {
		unavailable("npm ci in %s: %v\n%s", tmp, err, out)
	}
	if !installed(tmp) {
		t.Fatalf("npm ci did not install %v", pinned)
	}
	if installed(dir) {
		return dir // another run put its copy in place meanwhile, maybe in use
	}
	if err := os.RemoveAll(filepath.Join(dir, "node_modules")); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(tmp, "node_modules"), filepath.Join(dir, "node_modules")); err != nil && !installed(dir) {
		t.Fatal(fmt.Errorf("moving node_modules into place: %w", err))
	}
	return dir
}
