package main

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"net/http"
	"strconv"
	"testing"
	"time"
)

// TestVerify: a delivery signed with the secret verifies, also beside a
// rotated secret's signature; a changed body, another secret, an old
// timestamp or no signature do not.
func TestVerify(t *testing.T) {
	const secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	other := "whsec_" + base64.StdEncoding.EncodeToString([]byte("another secret of 32 bytes......"))
	now := time.Unix(1_764_000_000, 0)
	body := []byte(`{"id":"0193a5c2-7f25-7c10-b1d2-e3f4a5b6c7d8","event_type":"charge.captured"}`)
	sign := func(secret string, at time.Time, body []byte) string {
		key, _ := base64.StdEncoding.DecodeString(secret[len("whsec_"):])
		mac := hmac.New(sha256.New, key)
		mac.Write([]byte("msg_1." + strconv.FormatInt(at.Unix(), 10) + "."))
		mac.Write(body)
		return "v1," + base64.StdEncoding.EncodeToString(mac.Sum(nil))
	}
	headers := func(at time.Time, signature string) http.Header {
		h := http.Header{}
		h.Set("webhook-id", "msg_1")
		h.Set("webhook-timestamp", strconv.FormatInt(at.Unix(), 10))
		h.Set("webhook-signature", signature)
		return h
	}
	for _, c := range []struct {
		name string
		h    http.Header
		body []byte
		ok   bool
	}{
		{"signed", headers(now, sign(secret, now, body)), body, true},
		{"beside a rotated secret's", headers(now, sign(other, now, body)+" "+sign(secret, now, body)), body, true},
		{"body changed", headers(now, sign(secret, now, body)), append([]byte(" "), body...), false},
		{"another secret", headers(now, sign(other, now, body)), body, false},
		{"six minutes old", headers(now.Add(-6*time.Minute), sign(secret, now.Add(-6*time.Minute), body)), body, false},
		{"no signature", headers(now, ""), body, false},
	} {
		if err := verify(secret, c.h, c.body, now); (err == nil) != c.ok {
			t.Errorf("%s: verify = %v, want ok %t", c.name, err, c.ok)
		}
	}
}
