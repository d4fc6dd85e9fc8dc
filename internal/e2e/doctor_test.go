package e2e

import (
	"context"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gatehouse-pay/gatehouse/internal/testenv"
	"github.com/gatehouse-pay/gatehouse/internal/testenv/harness"
	"github.com/gatehouse-pay/gatehouse/internal/webhooks"
)

// doctorCheck is one check of gatehouse doctor --json.
type doctorCheck struct {
	Name    string `json:"name"`
	Outcome string `json:"outcome"`
	Detail  string `json:"detail"`
	Fix     string `json:"fix"`
}

// doctorChecks are the checks of the report card, in order.
var doctorChecks = []string{"signed_event", "bad_signature", "tampered_body", "stale_timestamp", "redelivery", "no_redirects", "tls"}

// TestDoctorReceivers is bin/gatehouse doctor (docs/webhooks.md) against
// the receivers of examples/receivers, no gateway needed: the careful one
// passes (tls warns over plain http) and exits 0; each careless one (no
// signature check, no timestamp check, a redirect, a slow answer) exits 1
// and fails exactly the checks that name its fault, in the --json report
// and the text report card alike. Over https, a self-signed certificate
// fails tls and the same certificate trusted through SSL_CERT_FILE passes;
// a bad --secret is a usage error (exit 2).
func TestDoctorReceivers(t *testing.T) {
	parallel(t)
	cli := buildBinaries(t).cli
	examples := testenv.Build(t, nil, "./examples/receivers/careful", "./examples/receivers/careless")
	secret, err := webhooks.NewSecret()
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	t.Cleanup(func() { t.Logf("the doctor's runs took %s", time.Since(start).Round(time.Millisecond)) })

	// receiver starts an example on a port of its choosing and returns its URL.
	receiver := func(t *testing.T, name, program string, args ...string) string {
		t.Helper()
		env := append(os.Environ(), "WEBHOOK_SECRET="+secret)
		p := testenv.StartProcess(t, name, nil, env, examples.Path(program), append([]string{"-listen", "127.0.0.1:0"}, args...)...)
		t.Cleanup(func() { testenv.Terminate(t, p, 10*time.Second) })
		url, err := harness.WaitOutput(p, 30*time.Second, func(line string) (string, bool) {
			return strings.CutPrefix(line, "listening on ")
		})
		if err != nil {
			testenv.DumpOutput(t, p)
			t.Fatal(err)
		}
		return url
	}
	doctor := func(t *testing.T, env []string, args ...string) (int, string, string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, cli, append([]string{"doctor"}, args...)...)
		cmd.Env = append(os.Environ(), env...)
		var out, errOut strings.Builder
		cmd.Stdout, cmd.Stderr = &out, &errOut
		err := cmd.Run()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatalf("gatehouse doctor %v: %v", args, err)
		}
		if strings.Contains(out.String()+errOut.String(), secret) {
			t.Errorf("gatehouse doctor %v printed the secret", args)
		}
		return code, out.String(), errOut.String()
	}
	// examine runs the doctor with --json and as text, and checks the
	// exit status and that the checks in fail (warn) are exactly those
	// that fail (warn); every other check passes.
	examine := func(t *testing.T, name, url string, env []string, wantCode int, fail, warn []string, args ...string) map[string]doctorCheck {
		t.Helper()
		args = append([]string{url, "--secret", secret}, args...)
		code, out, errOut := doctor(t, env, append(args, "--json")...)
		var rep struct {
			URL    string        `json:"url"`
			OK     bool          `json:"ok"`
			Checks []doctorCheck `json:"checks"`
		}
		if err := json.Unmarshal([]byte(out), &rep); err != nil {
			t.Fatalf("%s: --json printed no report (%v), exit %d\n%s%s", name, err, code, out, errOut)
		}
		byName := map[string]doctorCheck{}
		var names []string
		for _, c := range rep.Checks {
			byName[c.Name] = c
			names = append(names, c.Name)
			want := "pass"
			switch {
			case slices.Contains(fail, c.Name):
				want = "fail"
			case slices.Contains(warn, c.Name):
				want = "warn"
			}
			if c.Outcome != want {
				t.Errorf("%s: %s is %s (%s), want %s", name, c.Name, c.Outcome, c.Detail, want)
			}
		}
		if !slices.Equal(names, doctorChecks) {
			t.Errorf("%s: checks %v, want %v", name, names, doctorChecks)
		}
		if code != wantCode || rep.OK != (wantCode == 0) || rep.URL != url {
			t.Errorf("%s: --json exit %d, ok %v, url %q; want exit %d for %s\n%s", name, code, rep.OK, rep.URL, wantCode, url, errOut)
		}

		code, text, _ := doctor(t, env, args...)
		if code != wantCode {
			t.Errorf("%s: text exit %d, want %d", name, code, wantCode)
		}
		for _, c := range rep.Checks {
			word := c.Outcome
			if word == "fail" {
				word = "FAIL"
			}
			i := strings.Index(text, "\n"+c.Name+" ")
			if i < 0 {
				t.Errorf("%s: the report card has no row for %s:\n%s", name, c.Name, text)
				continue
			}
			row, _, _ := strings.Cut(text[i+1:], "\n")
			if f := strings.Fields(row); len(f) < 2 || f[1] != word {
				t.Errorf("%s: row %q, want outcome %s", name, row, word)
			}
			if c.Fix != "" && !strings.Contains(text, "fix: "+c.Fix) {
				t.Errorf("%s: the report card lacks the fix of %s: %q", name, c.Name, c.Fix)
			}
		}
		if !strings.Contains(text, fmt.Sprintf(", %d failed", len(fail))) {
			t.Errorf("%s: no summary line counting %d failed:\n%s", name, len(fail), text)
		}
		return byName
	}

	// https: the test's own careful receiver behind a self-signed certificate.
	tlsURL, cert := httpsReceiver(t, secret)
	certFile := filepath.Join(t.TempDir(), "receiver.pem")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: cert}), 0o600); err != nil {
		t.Fatal(err)
	}

	// The receivers side by side: most of the time is spent waiting.
	cases := []struct {
		name string
		run  func(t *testing.T)
	}{
		{"careful", func(t *testing.T) {
			examine(t, "careful", receiver(t, "careful", "careful"), nil, 0, nil, []string{"tls"})
		}},
		{"no signature check", func(t *testing.T) {
			url := receiver(t, "careless-signature", "careless", "-check-signature=false", "-check-timestamp")
			examine(t, "no signature check", url, nil, 1, []string{"bad_signature", "tampered_body"}, []string{"tls"})
		}},
		{"no timestamp check", func(t *testing.T) {
			url := receiver(t, "careless-timestamp", "careless", "-check-signature", "-check-timestamp=false")
			examine(t, "no timestamp check", url, nil, 1, []string{"stale_timestamp"}, []string{"tls"})
		}},
		// A redirect is answered to every request: the refusals and the
		// redelivery cannot be judged, signed_event points to no_redirects.
		{"redirect", func(t *testing.T) {
			url := receiver(t, "careless-redirect", "careless", "-check-signature", "-check-timestamp", "-redirect")
			got := examine(t, "redirect", url, nil, 1, []string{"no_redirects"},
				[]string{"signed_event", "bad_signature", "tampered_body", "stale_timestamp", "redelivery", "tls"})
			if !strings.Contains(got["signed_event"].Detail, "no_redirects") || !strings.Contains(got["no_redirects"].Detail, "308") {
				t.Errorf("redirect: signed_event %q, no_redirects %q: want the 308 named and signed_event pointing to no_redirects",
					got["signed_event"].Detail, got["no_redirects"].Detail)
			}
		}},
		// Slow: the refusals come before the work and are judged; the
		// stale event is refused at once too; the redelivery, whose first
		// delivery failed, is not judged.
		{"slow", func(t *testing.T) {
			url := receiver(t, "careless-slow", "careless", "-check-signature", "-check-timestamp", "-slow", "2s")
			got := examine(t, "slow", url, nil, 1, []string{"signed_event"}, []string{"redelivery", "tls"}, "--timeout", "700ms")
			if d := got["signed_event"].Detail; !strings.Contains(d, "700ms") || !strings.Contains(d, "after 2.") {
				t.Errorf("slow: signed_event detail %q, want the time it took and the timeout", d)
			}
		}},
		{"https untrusted", func(t *testing.T) {
			got := examine(t, "https, untrusted", tlsURL, nil, 1, []string{"signed_event", "tls"},
				[]string{"bad_signature", "tampered_body", "stale_timestamp", "redelivery", "no_redirects"})
			if !strings.Contains(got["tls"].Detail, "unknown authority") {
				t.Errorf("https, untrusted: tls detail %q does not say why", got["tls"].Detail)
			}
		}},
		{"https trusted", func(t *testing.T) {
			examine(t, "https, trusted", tlsURL, []string{"SSL_CERT_FILE=" + certFile}, 0, nil, nil)
		}},
		// A usage mistake: exit 2, nothing sent.
		{"usage", func(t *testing.T) {
			if code, _, errOut := doctor(t, nil, tlsURL, "--secret", "whsec_notbase64!"); code != 2 || !strings.Contains(errOut, "--secret") {
				t.Errorf("bad --secret: exit %d, %q; want 2 naming --secret", code, errOut)
			}
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.run(t)
		})
	}
}

// httpsReceiver serves, over TLS with httptest's self-signed certificate, a
// receiver that verifies as examples/receivers/careful does (through
// internal/webhooks), and returns its URL and its certificate (DER).
func httpsReceiver(t *testing.T, secret string) (string, []byte) {
	t.Helper()
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		id, ts, sigs := r.Header.Get("webhook-id"), r.Header.Get("webhook-timestamp"), r.Header.Get("webhook-signature")
		switch {
		case !webhooks.VerifyStandard(body, secret, id, ts, sigs, time.Now(), 24*time.Hour):
			w.WriteHeader(http.StatusUnauthorized)
		case !webhooks.VerifyStandard(body, secret, id, ts, sigs, time.Now(), 5*time.Minute):
			w.WriteHeader(http.StatusBadRequest)
		default:
			w.WriteHeader(http.StatusOK) // a redelivery too, idempotent here: nothing is processed
		}
	}))
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // the untrusted case's refused handshakes
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return srv.URL + "/webhooks", srv.Certificate().Raw
}
