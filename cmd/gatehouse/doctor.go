package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/gatehouse-pay/gatehouse/internal/apikeys"
	"github.com/gatehouse-pay/gatehouse/internal/events"
	"github.com/gatehouse-pay/gatehouse/internal/ids"
	"github.com/gatehouse-pay/gatehouse/internal/webhooks"
	"github.com/gatehouse-pay/gatehouse/internal/webhooks/sender"
)

// The outcomes of a check. Only a failure makes the doctor exit 1.
const (
	outcomePass = "pass"
	outcomeWarn = "warn"
	outcomeFail = "fail"
)

// The checks, in the order of the report card. Their names are stable:
// scripts read them from the --json report.
const (
	checkSignedEvent    = "signed_event"
	checkBadSignature   = "bad_signature"
	checkTamperedBody   = "tampered_body"
	checkStaleTimestamp = "stale_timestamp"
	checkRedelivery     = "redelivery"
	checkNoRedirects    = "no_redirects"
	checkTLS            = "tls"
)

// patience is how long past the timeout signed_event waits for an answer,
// to tell how slow a slow receiver is.
const patience = 10 * time.Second

// staleAge is how old the stale_timestamp check's webhook-timestamp is: past
// the 5 minutes a receiver should tolerate.
const staleAge = 10 * time.Minute

// doctorEventType is the type of the sample events the doctor sends.
const doctorEventType = events.ChargeCaptured

// checkResult is one line of the report card.
type checkResult struct {
	Name    string `json:"name"`
	Outcome string `json:"outcome"`
	Detail  string `json:"detail"`
	Fix     string `json:"fix"` // empty when the check passed
}

// doctorReport is what gatehouse doctor --json prints.
type doctorReport struct {
	URL    string        `json:"url"`
	OK     bool          `json:"ok"` // no check failed (warnings allowed)
	Checks []checkResult `json:"checks"`
}

// errChecksFailed ends a doctor run whose report card holds a failure: exit 1.
type errChecksFailed int

func (n errChecksFailed) Error() string {
	if n == 1 {
		return "1 check failed"
	}
	return fmt.Sprintf("%d checks failed", int(n))
}

func (c *cli) doctorCommand() *cobra.Command {
	var secret string
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "doctor URL --secret whsec_...",
		Short: "Check a webhook receiver the way the gateway will use it, and print a report card",
		Long: `doctor plays the gateway: it POSTs sample events to URL, signed with the endpoint's
secret exactly as a delivery is (X-Service-Signature and the Standard Webhooks headers
webhook-id, webhook-timestamp, webhook-signature), with the gateway's timeout and without
following redirects, and checks that the receiver
  signed_event     answers a correctly signed event with 2xx within the timeout
  bad_signature    refuses an event whose signatures are wrong
  tampered_body    refuses a body changed after signing
  stale_timestamp  refuses a correctly signed event whose webhook-timestamp is 10 minutes old
  redelivery       answers 2xx to the same webhook-id again (the gateway retries)
  no_redirects     never answers with a redirect (the gateway does not follow them)
  tls              for https, has a certificate that verifies (plain http is a warning)

The events are sandbox charge.captured events marked X-Service-Test: true, as the
dashboard's "send test" sends. It needs no API key and no running gateway. The secret
may be given in WEBHOOK_SECRET instead of --secret. Exit status: 0 when no check failed
(warnings allowed), 1 when one failed, 2 for a usage mistake.`,
		Example: `  gatehouse doctor http://localhost:3000/webhooks --secret whsec_...
  gatehouse doctor https://shop.example.com/webhooks --secret whsec_... --json`,
		Args: positional(cobra.MaximumNArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				return usageError{errors.New("the receiver's URL is required: gatehouse doctor URL --secret whsec_<your endpoint's secret>")}
			}
			target, err := receiverURL(args[0])
			if err != nil {
				return usageError{err}
			}
			if secret == "" {
				secret = c.getenv("WEBHOOK_SECRET")
			}
			if err := checkSecret(secret); err != nil {
				return usageError{err}
			}
			if timeout <= 0 {
				return usageError{fmt.Errorf("--timeout must be positive, not %s", timeout)}
			}
			d := newDoctor(target, secret, timeout)
			rep := d.examine(cmd.Context())
			if err := cmd.Context().Err(); err != nil {
				return err
			}
			if c.json {
				enc := json.NewEncoder(c.out)
				enc.SetIndent("", "  ")
				if err := enc.Encode(rep); err != nil {
					return err
				}
			} else if err := printReportCard(c.out, rep, timeout); err != nil {
				return err
			}
			if failed := rep.failed(); failed > 0 {
				return errChecksFailed(failed)
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&secret, "secret", "", "the endpoint's signing secret, whsec_... (or WEBHOOK_SECRET)")
	cmd.Flags().DurationVar(&timeout, "timeout", sender.DefaultTimeout, "how long the receiver may take to answer (the gateway's WEBHOOK_TIMEOUT)")
	return cmd
}

// receiverURL accepts an absolute http:// or https:// URL with a host.
func receiverURL(raw string) (*url.URL, error) {
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Hostname() == "" {
		return nil, fmt.Errorf("the URL must be an absolute http:// or https:// URL, not %q", raw)
	}
	return u, nil
}

// checkSecret accepts what the gateway signs with: whsec_ and base64. The
// error never repeats the secret.
func checkSecret(secret string) error {
	if secret == "" {
		return errors.New("--secret is required: the endpoint's signing secret (whsec_...), shown when the endpoint was created or its secret rotated")
	}
	if _, err := webhooks.SignatureHeaders(nil, webhooks.Secrets{Current: secret}, "msg_check", time.Now()); err != nil {
		return errors.New("--secret must be whsec_ followed by the base64 of the key, as the gateway shows it")
	}
	return nil
}

// doctor sends the checks' requests to one receiver.
type doctor struct {
	url     *url.URL
	secret  string
	timeout time.Duration
	sender  *sender.Sender
	// patient is sender with patience more, for signed_event only: a slow
	// answer is reported with the time it took, and judged by timeout.
	patient *sender.Sender
	sample  func(typ string, at time.Time) (events.Event, error)
	now     func() time.Time
	// results are the outcomes of every request made, for no_redirects.
	results []sender.Result
}

func newDoctor(u *url.URL, secret string, timeout time.Duration) *doctor {
	return &doctor{
		url:     u,
		secret:  secret,
		timeout: timeout,
		// The gateway's own sender: one POST, the same User-Agent, no
		// redirects, the whole exchange bounded by the timeout. Private
		// addresses are allowed: the receiver under test is often on
		// this machine.
		sender:  sender.New(sender.Options{Timeout: timeout, AllowPrivate: true}),
		patient: sender.New(sender.Options{Timeout: timeout + patience, AllowPrivate: true}),
		sample:  webhooks.SampleEvent("", apikeys.Sandbox),
		now:     time.Now,
	}
}

// delivery is one POST as the gateway makes it.
type delivery struct {
	event      events.Event
	deliveryID string
	attempt    int
	signedAt   time.Time
	secret     string // the secret that signs (another one for bad_signature)
	body       []byte // the body sent, when it differs from the signed one
}

// newDelivery is the first attempt of a fresh sample event: a webhook-id of
// its own.
func (d *doctor) newDelivery() (delivery, error) {
	ev, err := d.sample(doctorEventType, d.now().UTC())
	if err != nil {
		return delivery{}, fmt.Errorf("doctor: sample event: %w", err)
	}
	return delivery{event: ev, deliveryID: ids.NewUUID(), attempt: 1, signedAt: d.now(), secret: d.secret}, nil
}

// send POSTs one delivery with the headers the gateway sends.
func (d *doctor) send(ctx context.Context, check string, dl delivery) (sender.Result, error) {
	s := d.sender
	if check == checkSignedEvent {
		s = d.patient
	}
	h, err := webhooks.DeliveryHeaders(dl.event.Body, webhooks.Secrets{Current: dl.secret}, webhooks.AttemptHeaders{EventID: dl.event.ID,
		EventType: dl.event.Type, DeliveryID: dl.deliveryID, Attempt: dl.attempt, Sequence: 1, Test: true}, dl.signedAt)
	if err != nil {
		return sender.Result{}, fmt.Errorf("doctor: sign: %w", err)
	}
	body := dl.event.Body
	if dl.body != nil {
		body = dl.body
	}
	res := s.Send(ctx, sender.Request{URL: d.url.String(), Body: body, Headers: h})
	d.results = append(d.results, res)
	return res, nil
}

// examine runs every check and returns the report card.
func (d *doctor) examine(ctx context.Context) doctorReport {
	rep := doctorReport{URL: d.url.String()}
	add := func(r checkResult) { rep.Checks = append(rep.Checks, r) }

	first, err := d.newDelivery()
	if err != nil {
		add(checkResult{Name: checkSignedEvent, Outcome: outcomeFail, Detail: err.Error(), Fix: "Report this as a bug of gatehouse doctor."})
		return rep.done()
	}
	res, err := d.send(ctx, checkSignedEvent, first)
	if err != nil {
		add(checkResult{Name: checkSignedEvent, Outcome: outcomeFail, Detail: err.Error(), Fix: "Report this as a bug of gatehouse doctor."})
		return rep.done()
	}
	signed := d.judgeSigned(res)
	add(signed)
	// The refusals mean something only when a correct event is accepted:
	// a receiver that answers 500 to everything refuses forgeries too. A
	// redelivery is judged only when the first delivery succeeded.
	accepted := res.OK()
	delivered := signed.Outcome != outcomeFail && accepted

	refusals := []struct {
		name, what, risk, fix string
		change                func(*delivery) error
	}{
		{checkBadSignature, "an event signed with another secret (both signature schemes)", "anyone who knows the URL can forge events",
			"Verify webhook-signature (HMAC-SHA256 of id.timestamp.body, key the base64-decoded secret) before anything else; answer 401 when no v1 signature matches.",
			func(dl *delivery) error {
				other, err := webhooks.NewSecret()
				dl.secret = other
				return err
			}},
		{checkTamperedBody, "a body changed after signing (amount times 100)", "a changed amount would be believed",
			"Verify the signature over the raw body bytes as received, before parsing them; answer 400 when it does not match.",
			func(dl *delivery) error {
				b, err := tamper(dl.event.Body)
				dl.body = b
				return err
			}},
		{checkStaleTimestamp, "a correctly signed event with a 10-minute-old webhook-timestamp", "a captured delivery can be replayed at any time",
			"Refuse a webhook-timestamp more than 5 minutes from now (answer 400), so a captured delivery cannot be replayed.",
			func(dl *delivery) error {
				dl.signedAt = d.now().Add(-staleAge)
				return nil
			}},
	}
	for _, r := range refusals {
		dl, err := d.newDelivery()
		if err == nil {
			err = r.change(&dl)
		}
		var res sender.Result
		if err == nil {
			res, err = d.send(ctx, r.name, dl)
		}
		if err != nil {
			add(checkResult{Name: r.name, Outcome: outcomeFail, Detail: err.Error(), Fix: "Report this as a bug of gatehouse doctor."})
			continue
		}
		add(judgeRefusal(r.name, r.what, r.risk, r.fix, res, accepted))
	}

	again := first
	again.attempt, again.signedAt = 2, d.now()
	res, err = d.send(ctx, checkRedelivery, again)
	if err != nil {
		add(checkResult{Name: checkRedelivery, Outcome: outcomeFail, Detail: err.Error(), Fix: "Report this as a bug of gatehouse doctor."})
	} else {
		add(judgeRedelivery(res, delivered))
	}
	add(d.judgeRedirects())
	add(d.checkTLS(ctx))
	return rep.done()
}

// done sets OK from the checks.
func (r doctorReport) done() doctorReport {
	r.OK = r.failed() == 0
	return r
}

// failed counts the failed checks.
func (r doctorReport) failed() int {
	n := 0
	for _, c := range r.Checks {
		if c.Outcome == outcomeFail {
			n++
		}
	}
	return n
}

// slowFix is the fix of a slow answer.
const slowFix = "Answer 2xx as soon as the signature checks out and do the work after (a queue or a background job)."

// judgeSigned is signed_event: a 2xx within the timeout. A 3xx is the
// business of no_redirects.
func (d *doctor) judgeSigned(res sender.Result) checkResult {
	c := checkResult{Name: checkSignedEvent}
	took := res.Duration.Round(time.Millisecond)
	switch {
	case res.Err != nil && errors.Is(res.Err, sender.ErrTimeout):
		c.Outcome = outcomeFail
		c.Detail = fmt.Sprintf("no answer after %s, past the %s timeout: the gateway counts this a failed delivery and sends it again", took, d.timeout)
		c.Fix = slowFix
	case res.Err == nil && res.Duration > d.timeout:
		c.Outcome = outcomeFail
		c.Detail = fmt.Sprintf("answered %s after %s, past the %s timeout: the gateway would have given up, counted a failed delivery and sent it again", statusText(res.StatusCode), took, d.timeout)
		c.Fix = slowFix
	case res.Err != nil:
		c.Outcome = outcomeFail
		c.Detail = "no answer: " + sender.Reason(res.Err)
		c.Fix = "Make the receiver reachable at this URL (is it running, on this host and port?)."
		if sender.Reason(res.Err) == sender.ReasonTLS {
			c.Detail += " (see tls)"
			c.Fix = "Serve a certificate the gateway can verify: see tls."
		}
	case isRedirect(res.StatusCode):
		c.Outcome = outcomeWarn
		c.Detail = fmt.Sprintf("answered %s in %s: a redirect, which fails in no_redirects", statusText(res.StatusCode), took)
		c.Fix = "Give the gateway the final URL: see no_redirects."
	case !res.OK():
		c.Outcome = outcomeFail
		c.Detail = fmt.Sprintf("answered %s in %s to a correctly signed event", statusText(res.StatusCode), took)
		c.Fix = "Accept a correctly signed event with 2xx: check the receiver verifies with this endpoint's secret, over the raw body."
	case res.Duration > d.timeout/2:
		c.Outcome = outcomeWarn
		c.Detail = fmt.Sprintf("answered %s in %s, over half the %s timeout", statusText(res.StatusCode), took, d.timeout)
		c.Fix = slowFix
	default:
		c.Outcome = outcomePass
		c.Detail = fmt.Sprintf("answered %s in %s", statusText(res.StatusCode), took)
	}
	return c
}

// judgeRefusal is a check whose request a careful receiver refuses: any
// non-2xx answer, a 4xx preferably.
func judgeRefusal(name, what, risk, fix string, res sender.Result, accepted bool) checkResult {
	c := checkResult{Name: name}
	switch {
	case !accepted:
		c.Outcome = outcomeWarn
		c.Detail = "not judged: the correctly signed event was not accepted (see signed_event)"
		c.Fix = "Fix signed_event first."
	case res.Err != nil:
		c.Outcome = outcomeWarn
		c.Detail = fmt.Sprintf("no answer to %s (%s): refused or not, the receiver should say so at once", what, sender.Reason(res.Err))
		c.Fix = "Answer 400 or 401 at once when a signature or timestamp does not check out."
	case res.OK():
		c.Outcome = outcomeFail
		c.Detail = fmt.Sprintf("answered %s to %s: %s", statusText(res.StatusCode), what, risk)
		c.Fix = fix
	case isRedirect(res.StatusCode):
		c.Outcome = outcomeWarn
		c.Detail = fmt.Sprintf("answered %s to %s: a redirect hides whether it is refused (see no_redirects)", statusText(res.StatusCode), what)
		c.Fix = "Give the gateway the final URL: see no_redirects."
	case res.StatusCode >= 500:
		c.Outcome = outcomeWarn
		c.Detail = fmt.Sprintf("refused with %s, which reads as an outage: %s", statusText(res.StatusCode), what)
		c.Fix = "Refuse with 400 or 401: the sender is at fault, not the receiver."
	default:
		c.Outcome = outcomePass
		c.Detail = fmt.Sprintf("refused with %s: %s", statusText(res.StatusCode), what)
	}
	return c
}

// judgeRedelivery is redelivery: the gateway sends the same webhook-id
// again after a failure it could not see the end of, and expects a 2xx.
func judgeRedelivery(res sender.Result, delivered bool) checkResult {
	c := checkResult{Name: checkRedelivery}
	const what = "attempt 2 of the same webhook-id"
	switch {
	case !delivered:
		c.Outcome = outcomeWarn
		c.Detail = "not judged: the first delivery did not succeed (see signed_event)"
		c.Fix = "Fix signed_event first."
	case res.Err != nil:
		c.Outcome = outcomeFail
		c.Detail = fmt.Sprintf("no answer to %s: %s", what, sender.Reason(res.Err))
		c.Fix = "Answer 2xx to a webhook-id already processed, at once and without processing it again."
	case isRedirect(res.StatusCode):
		c.Outcome = outcomeWarn
		c.Detail = fmt.Sprintf("answered %s to %s (see no_redirects)", statusText(res.StatusCode), what)
		c.Fix = "Give the gateway the final URL: see no_redirects."
	case !res.OK():
		c.Outcome = outcomeFail
		c.Detail = fmt.Sprintf("answered %s to %s: the gateway would keep retrying it and count it failed", statusText(res.StatusCode), what)
		c.Fix = "Answer 2xx to a webhook-id already processed, without processing it again (keep the ids you have processed)."
	default:
		c.Outcome = outcomePass
		c.Detail = fmt.Sprintf("answered %s to %s", statusText(res.StatusCode), what)
	}
	return c
}

// judgeRedirects is no_redirects, over every answer of the run.
func (d *doctor) judgeRedirects() checkResult {
	c := checkResult{Name: checkNoRedirects}
	answered, redirected := 0, 0
	status := 0
	for _, res := range d.results {
		if res.Err != nil {
			continue
		}
		answered++
		if isRedirect(res.StatusCode) {
			redirected++
			status = res.StatusCode
		}
	}
	switch {
	case redirected > 0:
		c.Outcome = outcomeFail
		c.Detail = fmt.Sprintf("answered %s to %d of %d requests: the gateway never follows a redirect and counts it a failed delivery",
			statusText(status), redirected, answered)
		c.Fix = "Register the final URL as the endpoint (mind a trailing slash or an http-to-https redirect) and let nothing in front of the receiver redirect POSTs."
	case answered == 0:
		c.Outcome = outcomeWarn
		c.Detail = "not judged: no request was answered"
		c.Fix = "Fix signed_event first."
	default:
		c.Outcome = outcomePass
		c.Detail = fmt.Sprintf("none of the %d answers was a redirect", answered)
	}
	return c
}

// certWarning is how close to its expiry a certificate gets a warning.
const certWarning = 14 * 24 * time.Hour

// checkTLS is tls: for https, a handshake as the gateway makes it (TLS 1.2 or
// later, the system's roots; Go reads SSL_CERT_FILE and SSL_CERT_DIR).
func (d *doctor) checkTLS(ctx context.Context) checkResult {
	c := checkResult{Name: checkTLS}
	if d.url.Scheme != "https" {
		c.Outcome = outcomeWarn
		c.Detail = "plain http: fine for local development, use https in production"
		c.Fix = "Register an https URL for production endpoints."
		return c
	}
	host := d.url.Hostname()
	port := d.url.Port()
	if port == "" {
		port = "443"
	}
	ctx, cancel := context.WithTimeout(ctx, d.timeout)
	defer cancel()
	raw, err := (&net.Dialer{}).DialContext(ctx, "tcp", net.JoinHostPort(host, port))
	if err != nil {
		c.Outcome = outcomeWarn
		c.Detail = "not judged: no connection (" + sender.Reason(err) + ")"
		c.Fix = "Make the receiver reachable at this URL, then run the doctor again."
		return c
	}
	conn := tls.Client(raw, &tls.Config{ServerName: host, MinVersion: tls.VersionTLS12})
	defer conn.Close()
	if err := conn.HandshakeContext(ctx); err != nil {
		c.Outcome = outcomeFail
		c.Detail = "the certificate does not verify: " + tlsProblem(err)
		c.Fix = "Serve a certificate from a public CA that covers " + host + ", with its intermediate certificates."
		return c
	}
	st := conn.ConnectionState()
	leaf := st.PeerCertificates[0]
	left := leaf.NotAfter.Sub(d.now())
	c.Detail = fmt.Sprintf("%s, certificate for %s issued by %s, valid until %s", tls.VersionName(st.Version), host,
		issuerName(leaf), leaf.NotAfter.UTC().Format("2006-01-02"))
	if left < certWarning {
		c.Outcome = outcomeWarn
		c.Detail += fmt.Sprintf(": expires in %d days", int(left.Hours()/24))
		c.Fix = "Renew the certificate (automate it, e.g. with ACME)."
		return c
	}
	c.Outcome = outcomePass
	return c
}

// tlsProblem says in a few words why a handshake failed.
func tlsProblem(err error) string {
	var unknown x509.UnknownAuthorityError
	var host x509.HostnameError
	var invalid x509.CertificateInvalidError
	switch {
	case errors.As(err, &unknown):
		return "signed by an unknown authority (self-signed, or the chain is incomplete)"
	case errors.As(err, &host):
		return "it is not valid for this host name (" + host.Error() + ")"
	case errors.As(err, &invalid):
		return invalid.Error()
	}
	return err.Error()
}

// issuerName is the issuer's common name, or its organisation.
func issuerName(cert *x509.Certificate) string {
	switch {
	case cert.Issuer.CommonName != "":
		return cert.Issuer.CommonName
	case len(cert.Issuer.Organization) > 0:
		return cert.Issuer.Organization[0]
	}
	return "an unnamed issuer"
}

// tamper returns body with data.charge.amount multiplied by 100: still valid
// JSON, a change an attacker would want.
func tamper(body []byte) ([]byte, error) {
	var ev map[string]any
	if err := json.Unmarshal(body, &ev); err != nil {
		return nil, fmt.Errorf("doctor: tamper: %w", err)
	}
	data, _ := ev["data"].(map[string]any)
	charge, _ := data["charge"].(map[string]any)
	amount, ok := charge["amount"].(float64)
	if !ok {
		return nil, errors.New("doctor: tamper: the sample event has no data.charge.amount")
	}
	charge["amount"] = amount * 100
	return json.Marshal(ev)
}

func isRedirect(status int) bool { return status >= 300 && status < 400 }

// statusText is "401 Unauthorized".
func statusText(status int) string {
	if t := http.StatusText(status); t != "" {
		return strconv.Itoa(status) + " " + t
	}
	return strconv.Itoa(status)
}

// printReportCard writes the human report: one aligned row per check
// (check, outcome, detail) with the fix below the detail when there is one,
// then a summary line.
func printReportCard(w io.Writer, rep doctorReport, timeout time.Duration) error {
	fmt.Fprintf(w, "gatehouse doctor %s (timeout %s)\n\n", rep.URL, timeout)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "CHECK\tOUTCOME\tDETAIL AND FIX")
	counts := map[string]int{}
	for _, c := range rep.Checks {
		counts[c.Outcome]++
		outcome := c.Outcome
		if outcome == outcomeFail {
			outcome = "FAIL"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\n", c.Name, outcome, c.Detail)
		if c.Fix != "" {
			fmt.Fprintf(tw, "\t\tfix: %s\n", c.Fix)
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	summary := fmt.Sprintf("%d passed, %s, %d failed", counts[outcomePass], plural(counts[outcomeWarn], "warning"), counts[outcomeFail])
	if rep.OK {
		summary += ": no check failed"
	} else {
		summary += ": the gateway's deliveries to this receiver are at risk"
	}
	_, err := fmt.Fprintf(w, "\n%s\n", summary)
	return err
}

// plural is "1 warning", "2 warnings".
func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return strconv.Itoa(n) + " " + noun + "s"
}
