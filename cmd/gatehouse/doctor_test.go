package main

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gatehouse-pay/gatehouse/internal/webhooks"
)

// seenRequest is what a test receiver recorded of one request.
type seenRequest struct {
	header http.Header
	body   []byte
}

// receiverFunc answers one request, given what verification found.
type receiverFunc func(w http.ResponseWriter, signed, fresh, again bool)

// testReceiver serves h behind a verifier that records every request.
func testReceiver(t *testing.T, secret string, h receiverFunc) (*httptest.Server, func() []seenRequest) {
	t.Helper()
	var mu sync.Mutex
	var seen []seenRequest
	ids := map[string]bool{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			t.Errorf("read: %v", err)
		}
		id, ts, sigs := r.Header.Get("webhook-id"), r.Header.Get("webhook-timestamp"), r.Header.Get("webhook-signature")
		signed := webhooks.VerifyStandard(body, secret, id, ts, sigs, time.Now(), 24*time.Hour) &&
			webhooks.VerifyServiceSignature(body, secret, r.Header.Get(webhooks.HeaderSignature))
		fresh := webhooks.VerifyStandard(body, secret, id, ts, sigs, time.Now(), 5*time.Minute)
		mu.Lock()
		seen = append(seen, seenRequest{header: r.Header.Clone(), body: body})
		again := signed && ids[id]
		if signed {
			ids[id] = true
		}
		mu.Unlock()
		h(w, signed, fresh, again)
	}))
	t.Cleanup(srv.Close)
	return srv, func() []seenRequest {
		mu.Lock()
		defer mu.Unlock()
		return append([]seenRequest(nil), seen...)
	}
}

// careful refuses a bad signature (401) or a stale timestamp (400).
func careful(w http.ResponseWriter, signed, fresh, _ bool) {
	switch {
	case !signed:
		w.WriteHeader(http.StatusUnauthorized)
	case !fresh:
		w.WriteHeader(http.StatusBadRequest)
	default:
		w.WriteHeader(http.StatusOK)
	}
}

// runDoctor runs gatehouse doctor with args and returns its exit status and output.
func runDoctor(t *testing.T, env map[string]string, args ...string) (int, string, string) {
	t.Helper()
	var out, errOut strings.Builder
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	code := run(ctx, append([]string{"doctor"}, args...), func(k string) string { return env[k] }, &out, &errOut)
	return code, out.String(), errOut.String()
}

// outcomes decodes a --json report into check name -> outcome, in order.
func outcomes(t *testing.T, out string) (doctorReport, map[string]string) {
	t.Helper()
	var rep doctorReport
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("the --json output is not a report: %v\n%s", err, out)
	}
	got := map[string]string{}
	var names []string
	for _, c := range rep.Checks {
		got[c.Name] = c.Outcome
		names = append(names, c.Name)
		if c.Detail == "" || (c.Outcome != outcomePass) != (c.Fix != "") {
			t.Errorf("%s: outcome %s, detail %q, fix %q: every check has a detail, a fix exactly when it did not pass", c.Name, c.Outcome, c.Detail, c.Fix)
		}
	}
	want := []string{checkSignedEvent, checkBadSignature, checkTamperedBody, checkStaleTimestamp, checkRedelivery, checkNoRedirects, checkTLS}
	if strings.Join(names, " ") != strings.Join(want, " ") {
		t.Errorf("checks %v, want %v", names, want)
	}
	return rep, got
}

func newTestSecret(t *testing.T) string {
	t.Helper()
	s, err := webhooks.NewSecret()
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestDoctorCarefulReceiver: a receiver that verifies both signatures and
// the timestamp passes every check (tls warns over http), and the doctor
// sends what the gateway sends: the delivery headers, a distinct webhook-id
// per check, the first event again as attempt 2 for redelivery.
func TestDoctorCarefulReceiver(t *testing.T) {
	secret := newTestSecret(t)
	srv, seen := testReceiver(t, secret, careful)
	code, out, errOut := runDoctor(t, nil, srv.URL+"/hooks", "--secret", secret, "--json")
	if code != 0 {
		t.Fatalf("exit %d, want 0\n%s%s", code, out, errOut)
	}
	rep, got := outcomes(t, out)
	for name, outcome := range got {
		want := outcomePass
		if name == checkTLS {
			want = outcomeWarn
		}
		if outcome != want {
			t.Errorf("%s: %s, want %s", name, outcome, want)
		}
	}
	if !rep.OK || rep.URL != srv.URL+"/hooks" {
		t.Errorf("report ok=%v url=%q", rep.OK, rep.URL)
	}
	if strings.Contains(out+errOut, secret) {
		t.Error("the output holds the secret")
	}

	reqs := seen()
	if len(reqs) != 5 {
		t.Fatalf("%d requests, want 5 (signed, bad signature, tampered, stale, redelivery)", len(reqs))
	}
	idsSeen := map[string]int{}
	for i, r := range reqs {
		h := r.header
		for k, want := range map[string]string{
			"Content-Type": "application/json", "User-Agent": "Gatehouse-Webhooks/1",
			"X-Service-Event-Type": "charge.captured", "X-Service-Test": "true", "X-Service-Sequence": "1",
		} {
			if h.Get(k) != want {
				t.Errorf("request %d: %s %q, want %q", i, k, h.Get(k), want)
			}
		}
		var ev struct {
			ID        string `json:"id"`
			EventType string `json:"event_type"`
		}
		if err := json.Unmarshal(r.body, &ev); err != nil || ev.EventType != "charge.captured" {
			t.Errorf("request %d: body %s is not a charge.captured event (%v)", i, r.body, err)
		}
		if h.Get("webhook-id") != ev.ID || h.Get("X-Service-Event-Id") != ev.ID {
			t.Errorf("request %d: webhook-id %q, X-Service-Event-Id %q, body id %q: one id", i, h.Get("webhook-id"), h.Get("X-Service-Event-Id"), ev.ID)
		}
		idsSeen[ev.ID]++
	}
	if len(idsSeen) != 4 {
		t.Errorf("%d distinct webhook-ids, want 4 (one per check, redelivery repeats the first)", len(idsSeen))
	}
	first, again := reqs[0].header, reqs[4].header
	if again.Get("webhook-id") != first.Get("webhook-id") || again.Get("X-Service-Delivery-Id") != first.Get("X-Service-Delivery-Id") ||
		again.Get("X-Service-Delivery-Attempt") != "2" || first.Get("X-Service-Delivery-Attempt") != "1" {
		t.Errorf("redelivery: id %q delivery %q attempt %q after id %q delivery %q attempt %q; want the same ids, attempt 2",
			again.Get("webhook-id"), again.Get("X-Service-Delivery-Id"), again.Get("X-Service-Delivery-Attempt"),
			first.Get("webhook-id"), first.Get("X-Service-Delivery-Id"), first.Get("X-Service-Delivery-Attempt"))
	}
	if sig := reqs[1].header.Get(webhooks.HeaderSignature); webhooks.VerifyServiceSignature(reqs[1].body, secret, sig) {
		t.Error("bad_signature: X-Service-Signature verifies; both schemes must be wrong")
	}

	// The text form: one row per check in order, then the summary.
	code, text, _ := runDoctor(t, nil, srv.URL+"/hooks", "--secret", secret)
	if code != 0 || !strings.Contains(text, "6 passed, 1 warning, 0 failed") {
		t.Errorf("text: exit %d\n%s", code, text)
	}
	col := -1
	for _, name := range []string{checkSignedEvent, checkBadSignature, checkTamperedBody, checkStaleTimestamp, checkRedelivery, checkNoRedirects, checkTLS} {
		i := strings.Index(text, "\n"+name+" ")
		if i < 0 {
			t.Fatalf("no row for %s:\n%s", name, text)
		}
		line, _, _ := strings.Cut(text[i+1:], "\n")
		at := strings.Index(line, "pass")
		if name == checkTLS {
			at = strings.Index(line, "warn")
		}
		if col == -1 {
			col = at
		}
		if at != col || at <= len(name) {
			t.Errorf("row %q: outcome at column %d, want %d", line, at, col)
		}
	}
}

// TestDoctorCarelessReceivers: each careless receiver fails with the check
// that names its fault, and exits 1.
func TestDoctorCarelessReceivers(t *testing.T) {
	secret := newTestSecret(t)
	tests := []struct {
		name    string
		h       receiverFunc
		args    []string
		fail    []string
		pass    []string
		warn    []string
		details map[string]string
	}{
		{name: "accepts anything",
			h:    func(w http.ResponseWriter, _, _, _ bool) { w.WriteHeader(http.StatusOK) },
			fail: []string{checkBadSignature, checkTamperedBody, checkStaleTimestamp},
			pass: []string{checkSignedEvent, checkRedelivery, checkNoRedirects}},
		{name: "no timestamp check",
			h: func(w http.ResponseWriter, signed, _, _ bool) {
				careful(w, signed, true, false)
			},
			fail: []string{checkStaleTimestamp},
			pass: []string{checkSignedEvent, checkBadSignature, checkTamperedBody, checkRedelivery, checkNoRedirects}},
		{name: "refuses a redelivery",
			h: func(w http.ResponseWriter, signed, fresh, again bool) {
				if again {
					w.WriteHeader(http.StatusConflict)
					return
				}
				careful(w, signed, fresh, again)
			},
			fail:    []string{checkRedelivery},
			pass:    []string{checkSignedEvent, checkBadSignature, checkTamperedBody, checkStaleTimestamp},
			details: map[string]string{checkRedelivery: "409 Conflict"}},
		{name: "redirects",
			h: func(w http.ResponseWriter, _, _, _ bool) {
				w.Header().Set("Location", "/elsewhere")
				w.WriteHeader(http.StatusPermanentRedirect)
			},
			fail:    []string{checkNoRedirects},
			warn:    []string{checkSignedEvent, checkBadSignature, checkRedelivery},
			details: map[string]string{checkSignedEvent: "no_redirects", checkNoRedirects: "308 Permanent Redirect to 5 of 5"}},
		{name: "slow",
			h: func(w http.ResponseWriter, signed, fresh, again bool) {
				time.Sleep(400 * time.Millisecond)
				careful(w, signed, fresh, again)
			},
			args:    []string{"--timeout", "150ms"},
			fail:    []string{checkSignedEvent},
			warn:    []string{checkBadSignature, checkRedelivery},
			details: map[string]string{checkSignedEvent: "past the 150ms timeout"}},
		{name: "refuses everything",
			h:       func(w http.ResponseWriter, _, _, _ bool) { w.WriteHeader(http.StatusInternalServerError) },
			fail:    []string{checkSignedEvent},
			warn:    []string{checkBadSignature, checkTamperedBody, checkStaleTimestamp, checkRedelivery},
			details: map[string]string{checkSignedEvent: "500 Internal Server Error", checkBadSignature: "not judged"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			srv, _ := testReceiver(t, secret, tc.h)
			code, out, errOut := runDoctor(t, nil, append([]string{srv.URL, "--secret", secret, "--json"}, tc.args...)...)
			if code != 1 {
				t.Errorf("exit %d, want 1\n%s", code, errOut)
			}
			rep, got := outcomes(t, out)
			if rep.OK {
				t.Error("ok is true")
			}
			for outcome, names := range map[string][]string{outcomeFail: tc.fail, outcomePass: tc.pass, outcomeWarn: tc.warn} {
				for _, n := range names {
					if got[n] != outcome {
						t.Errorf("%s: %s, want %s", n, got[n], outcome)
					}
				}
			}
			for _, c := range rep.Checks {
				if c.Outcome == outcomeFail && !contains(tc.fail, c.Name) {
					t.Errorf("%s failed too: %s", c.Name, c.Detail)
				}
				if want, ok := tc.details[c.Name]; ok && !strings.Contains(c.Detail, want) {
					t.Errorf("%s: detail %q, want it to say %q", c.Name, c.Detail, want)
				}
			}
		})
	}
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// TestDoctorUntrustedCertificate: over https, a certificate the system does
// not trust fails tls (the e2e test trusts one through SSL_CERT_FILE).
func TestDoctorUntrustedCertificate(t *testing.T) {
	secret := newTestSecret(t)
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {}))
	t.Cleanup(srv.Close)
	code, out, _ := runDoctor(t, nil, srv.URL, "--secret", secret, "--json")
	rep, got := outcomes(t, out)
	if code != 1 || got[checkTLS] != outcomeFail || got[checkSignedEvent] != outcomeFail {
		t.Errorf("exit %d, tls %s, signed_event %s; want 1, fail, fail", code, got[checkTLS], got[checkSignedEvent])
	}
	for _, c := range rep.Checks {
		if c.Name == checkTLS && !strings.Contains(c.Detail, "unknown authority") {
			t.Errorf("tls detail %q does not say why", c.Detail)
		}
	}
}

// TestDoctorUsage: mistakes in the command line exit 2 with a clear line
// that never repeats the secret; WEBHOOK_SECRET stands in for --secret.
func TestDoctorUsage(t *testing.T) {
	secret := newTestSecret(t)
	tests := []struct {
		args []string
		env  map[string]string
		says string
	}{
		{[]string{"--secret", secret}, nil, "URL is required"},
		{[]string{"ftp://example.com/hooks", "--secret", secret}, nil, "http:// or https://"},
		{[]string{"/hooks", "--secret", secret}, nil, "http:// or https://"},
		{[]string{"http://127.0.0.1:1/hooks"}, nil, "--secret is required"},
		{[]string{"http://127.0.0.1:1/hooks", "--secret", "sk_test_notasecret"}, nil, "whsec_"},
		{[]string{"http://127.0.0.1:1/hooks", "--secret", "whsec_not*base64"}, nil, "whsec_"},
		{[]string{"http://127.0.0.1:1/hooks"}, map[string]string{"WEBHOOK_SECRET": "whsec_short"}, "whsec_"},
		{[]string{"http://127.0.0.1:1/hooks", "--secret", secret, "--timeout", "0s"}, nil, "--timeout"},
		{[]string{"http://127.0.0.1:1/hooks", "--secret", secret, "--timeout", "soon"}, nil, "timeout"},
		{[]string{"http://a", "http://b", "--secret", secret}, nil, "accepts at most 1 arg"},
	}
	for _, tc := range tests {
		code, out, errOut := runDoctor(t, tc.env, tc.args...)
		if code != 2 || !strings.Contains(errOut, tc.says) {
			t.Errorf("doctor %v: exit %d, %q; want 2 saying %q", tc.args, code, errOut, tc.says)
		}
		for _, s := range []string{secret, "sk_test_notasecret", "not*base64", "whsec_short"} {
			if strings.Contains(out+errOut, s) {
				t.Errorf("doctor %v: the output repeats the secret %q", tc.args, s)
			}
		}
	}

	// The secret from WEBHOOK_SECRET: an unreachable receiver is a failed
	// check (exit 1), not a usage mistake.
	code, out, _ := runDoctor(t, map[string]string{"WEBHOOK_SECRET": secret}, "http://127.0.0.1:1/hooks", "--json")
	_, got := outcomes(t, out)
	if code != 1 || got[checkSignedEvent] != outcomeFail || got[checkNoRedirects] != outcomeWarn {
		t.Errorf("unreachable: exit %d, signed_event %s, no_redirects %s; want 1, fail, warn", code, got[checkSignedEvent], got[checkNoRedirects])
	}
}
