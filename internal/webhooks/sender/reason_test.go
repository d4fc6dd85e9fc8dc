package sender

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// TestReasonsNameNoInternals: every way an attempt can fail maps to one of
// the fixed reasons the merchant's attempt log shows, none of which names an
// address, a range, a resolver or a certificate; the detailed error (which
// does) is for the operator's log.
func TestReasonsNameNoInternals(t *testing.T) {
	// A port nothing listens on: bind one, then close it.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closedPort := ln.Addr().String()
	ln.Close()

	// A server that accepts and hangs up at once.
	hangup, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { hangup.Close() })
	go func() {
		for {
			c, err := hangup.Accept()
			if err != nil {
				return
			}
			buf := make([]byte, 1)
			_, _ = c.Read(buf)
			c.Close()
		}
	}()
	// A server that accepts and never answers.
	silent, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var held []net.Conn
	t.Cleanup(func() {
		silent.Close()
		for _, c := range held {
			c.Close()
		}
	})
	go func() {
		for {
			c, err := silent.Accept()
			if err != nil {
				return
			}
			held = append(held, c)
		}
	}()
	plain := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {}))
	t.Cleanup(plain.Close)
	selfSigned := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {}))
	t.Cleanup(selfSigned.Close)

	strict := newSender(Options{Timeout: roomy}, fakeDNS(t, true))
	open := newSender(Options{Timeout: roomy, AllowPrivate: true}, fakeDNS(t, false))
	quick := newSender(Options{Timeout: 300 * time.Millisecond, AllowPrivate: true}, nil)
	cases := []struct {
		name, url string
		s         *Sender
		want      string
	}{
		{"private address", "http://10.0.3.7/hook", strict, ReasonNotAllowed},
		{"metadata address", "http://169.254.169.254/latest/meta-data/", strict, ReasonNotAllowed},
		{"name resolving to loopback", "http://rebound.gatehouse.test/", strict, ReasonNotAllowed},
		{"refused", "http://" + closedPort + "/", open, ReasonRefused},
		{"unknown name", "http://nowhere.gatehouse.test/", open, ReasonDNS},
		{"hang-up", "http://" + hangup.Addr().String() + "/", open, ReasonReset},
		{"no answer", "http://" + silent.Addr().String() + "/", quick, ReasonTimeout},
		{"TLS to a plain server", "https://" + strings.TrimPrefix(plain.URL, "http://") + "/", open, ReasonTLS},
		{"untrusted certificate", selfSigned.URL + "/", open, ReasonTLS},
		{"not http", "ftp://hooks.example.com/", open, ReasonInvalidURL},
	}
	fixed := map[string]bool{ReasonNotAllowed: true, ReasonInvalidURL: true, ReasonTimeout: true, ReasonDNS: true,
		ReasonRefused: true, ReasonReset: true, ReasonTLS: true, ReasonNetwork: true, ReasonFailed: true}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			res := tc.s.Send(context.Background(), Request{URL: tc.url, Body: []byte("{}")})
			if res.Err == nil {
				t.Fatalf("Send(%s) succeeded", tc.url)
			}
			got := Reason(res.Err)
			if got != tc.want {
				t.Errorf("Reason(%v) = %q, want %q", res.Err, got, tc.want)
			}
			if !fixed[got] || strings.ContainsAny(got, "0123456789:/") {
				t.Errorf("Reason %q is not one of the fixed reasons", got)
			}
			t.Logf("operator: %v; merchant: %s", res.Err, got)
		})
	}
	if Reason(nil) != "" {
		t.Error("Reason(nil) is not empty")
	}
}
