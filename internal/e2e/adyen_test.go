package e2e

// Adyen connectors against the real binaries: the worker calls Adyen's
// Checkout API (Prism mocking Adyen's published description, behind a
// recording proxy that stands for Adyen's books), captures, voids and
// refunds are answered "received", and the notifications the test sends,
// signed as Adyen signs them, settle them (api/openapi.yaml,
// /v1/provider_notifications/{connector_id}).

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v6"
	stripewebhook "github.com/stripe/stripe-go/v84/webhook"

	"github.com/gatehouse-pay/gatehouse/internal/providers/adyen"
	"github.com/gatehouse-pay/gatehouse/internal/testenv"
	"github.com/gatehouse-pay/gatehouse/internal/testenv/harness"
)

// adyenMerchantAccount is the merchant account of the tests' Adyen connectors.
const adyenMerchantAccount = "GatehouseECOM"

// startAdyenPrism runs Prism mocking Adyen's Checkout API v71 on a free
// loopback port and returns its base URL. Without prism or Adyen's
// description (../shared/third_party/adyen-openapi/ from the repository's
// root) the test is skipped, or fails under GATEHOUSE_REQUIRE_SERVICES=1.
func startAdyenPrism(t *testing.T) string {
	t.Helper()
	bin := requireTool(t, "prism")
	root, err := harness.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	spec := filepath.Join(filepath.Dir(root), "shared", "third_party", "adyen-openapi", "CheckoutService-v71.json")
	if _, err := os.Stat(spec); err != nil {
		testenv.Missing(t, "Adyen's Checkout API description: %v", err)
	}
	out := new(harness.Output)
	var proc *harness.Process
	port, err := harness.OnFreePort(func(port int) error {
		p, err := harness.Start("prism", harness.Command([]string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME")},
			bin, "mock", "-p", strconv.Itoa(port), "-h", "127.0.0.1", spec), out)
		if err != nil {
			return err
		}
		addr := harness.Loopback(port)
		if err := harness.WaitFor(context.Background(), p, 90*time.Second, 100*time.Millisecond, harness.Listening(addr)); err != nil {
			p.Stop(os.Interrupt, 5*time.Second)
			if p.AddrInUse() {
				return fmt.Errorf("%w: %v", harness.ErrAddrInUse, err)
			}
			return fmt.Errorf("prism on %s: %v\n%s", addr, err, p.Tail(4<<10))
		}
		proc = p
		return nil
	})
	if err != nil {
		t.Fatalf("prism: %v", err)
	}
	t.Cleanup(func() {
		proc.Stop(os.Interrupt, 5*time.Second)
		if t.Failed() {
			testenv.DumpOutput(t, proc)
		}
	})
	return "http://" + harness.Loopback(port)
}

// adyenCall is one request the recording proxy passed to Prism (or
// answered again, for a repeated idempotency key).
type adyenCall struct {
	method, path string
	key          string // Idempotency-Key
	amount       int64  // amount.value of the request (0 when none)
	currency     string
	reference    string // the request's reference
	payment      string // the payment a modification is about (from the path)
	op           string // payments, captures, cancels, refunds
	status       int
	psp          string            // the pspReference answered
	replayed     bool              // answered from the key's first request
	returnURL    string            // a payment's returnUrl
	details      map[string]string // /payments/details: the details sent
	card         string            // a payment's card number
	refused      bool              // a payment answered Refused (see refusals)
	start        time.Time         // when the call arrived
	took         time.Duration     // until Prism's answer was read (0 for a replay)
}

// adyenAnswer is an answer kept for an idempotency key.
type adyenAnswer struct {
	status int
	header http.Header
	body   []byte
	psp    string
}

type adyenCallKey struct{}

// adyenRecorder is an httputil.ReverseProxy in front of Prism that plays
// Adyen's books: it asks Prism for the named example each operation needs
// (Prefer: example=...), gives every booking a pspReference of its own
// (Prism's examples all carry the same one) and the request's reference,
// amount and payment, answers a repeated Idempotency-Key with the first
// answer, as Adyen does, and records every call. hold, when set, is called
// with each call booked before its answer is relayed, and may block: the
// answer is late.
type adyenRecorder struct {
	srv     *httptest.Server
	mu      sync.Mutex
	calls   []adyenCall
	answers map[string]adyenAnswer
	hold    func(adyenCall)
	// refusals: the cards whose payments Adyen refuses, with the
	// refusalReasonCode; set before the first payment.
	refusals map[string]string
	inflight atomic.Int64
	quiet    atomic.Int64 // UnixNano of the last answer
	stopped  atomic.Bool
}

// adyenExamples are the examples of Adyen's description the proxy asks
// Prism for, by operation: an Authorised card payment, and modifications
// answered "received".
var adyenExamples = map[string]string{
	"payments": "card-direct",
	"details":  "00.redirect",
	"captures": "capture",
	"cancels":  "cancel-with-psp-reference",
	"refunds":  "refund",
}

// adyenThreeDSAmount is the amount of a payment the proxy has Adyen answer
// with a 3-D Secure redirect (RedirectShopper).
const adyenThreeDSAmount = 3100

// adyenOp reads the operation and the payment of a Checkout API path.
func adyenOp(path string) (op, payment string) {
	if path == "/payments" {
		return "payments", ""
	}
	if path == "/payments/details" {
		return "details", ""
	}
	rest, ok := strings.CutPrefix(path, "/payments/")
	if !ok {
		return "", ""
	}
	psp, op, ok := strings.Cut(rest, "/")
	if !ok {
		return "", ""
	}
	return op, psp
}

func newAdyenRecorder(t *testing.T, upstream string) *adyenRecorder {
	t.Helper()
	target, err := url.Parse(upstream)
	if err != nil {
		t.Fatal(err)
	}
	r := &adyenRecorder{answers: map[string]adyenAnswer{}}
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(target)
			op, _ := adyenOp(pr.In.URL.Path)
			if ex, ok := adyenExamples[op]; ok {
				pr.Out.Header.Set("Prefer", "example="+ex)
			}
			if call, _ := pr.In.Context().Value(adyenCallKey{}).(*adyenCall); call != nil && op == "payments" && call.amount == adyenThreeDSAmount {
				pr.Out.Header.Set("Prefer", "example=card-3d-secure-redirect")
			}
		},
		ModifyResponse: func(res *http.Response) error {
			call := res.Request.Context().Value(adyenCallKey{}).(*adyenCall)
			body, err := io.ReadAll(res.Body)
			res.Body.Close()
			if err != nil {
				return err
			}
			call.took = time.Since(call.start)
			call.status = res.StatusCode
			if res.StatusCode/100 == 2 {
				body = r.book(call, body)
			}
			res.Body = io.NopCloser(bytes.NewReader(body))
			res.ContentLength = int64(len(body))
			res.Header.Set("Content-Length", strconv.Itoa(len(body)))
			r.mu.Lock()
			r.calls = append(r.calls, *call)
			if call.key != "" && res.StatusCode < 500 {
				if _, ok := r.answers[call.key]; !ok {
					r.answers[call.key] = adyenAnswer{res.StatusCode, res.Header.Clone(), body, call.psp}
				}
			}
			hold := r.hold
			r.mu.Unlock()
			if hold != nil && res.StatusCode/100 == 2 {
				hold(*call)
			}
			return nil
		},
	}
	r.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, _ := io.ReadAll(req.Body)
		var sent struct {
			PaymentMethod struct {
				Number string `json:"number"`
			} `json:"paymentMethod"`
			Reference string            `json:"reference"`
			ReturnURL string            `json:"returnUrl"`
			Details   map[string]string `json:"details"`
			Amount    *struct {
				Value    int64  `json:"value"`
				Currency string `json:"currency"`
			} `json:"amount"`
		}
		_ = json.Unmarshal(body, &sent)
		call := &adyenCall{method: req.Method, path: req.URL.Path, key: req.Header.Get("Idempotency-Key"), reference: sent.Reference,
			returnURL: sent.ReturnURL, details: sent.Details, card: sent.PaymentMethod.Number, start: time.Now()}
		call.op, call.payment = adyenOp(req.URL.Path)
		if sent.Amount != nil {
			call.amount, call.currency = sent.Amount.Value, sent.Amount.Currency
		}
		r.mu.Lock()
		prev, seen := r.answers[call.key]
		if seen {
			call.status, call.psp, call.replayed = prev.status, prev.psp, true
			r.calls = append(r.calls, *call)
		}
		r.mu.Unlock()
		if seen {
			for k, v := range prev.header {
				w.Header()[k] = v
			}
			w.Header().Set("Idempotency-Key", call.key)
			w.WriteHeader(prev.status)
			_, _ = w.Write(prev.body)
			return
		}
		req.Body = io.NopCloser(bytes.NewReader(body))
		r.inflight.Add(1)
		defer func() { r.quiet.Store(time.Now().UnixNano()); r.inflight.Add(-1) }()
		rp.ServeHTTP(w, req.WithContext(context.WithValue(req.Context(), adyenCallKey{}, call)))
	}))
	t.Cleanup(r.srv.Close)
	return r
}

func (r *adyenRecorder) url() string { return r.srv.URL }

// book rewrites Prism's answer to a booking as Adyen would answer it: a
// pspReference of its own, and the request's reference, amount and
// payment.
func (r *adyenRecorder) book(call *adyenCall, body []byte) []byte {
	var obj map[string]any
	if json.Unmarshal(body, &obj) != nil {
		return body
	}
	if call.op == "details" {
		// Prism's answer names its example's payment; the gateway takes
		// the reference of the answer, as Adyen's may differ from the
		// redirect's.
		call.psp, _ = obj["pspReference"].(string)
		return body
	}
	call.psp = strings.ToUpper(harness.RandomHex(8)) // 16 characters, like Adyen's
	obj["pspReference"] = call.psp
	if call.op == "payments" {
		obj["merchantReference"] = call.reference
		if code := r.refusals[call.card]; code != "" {
			call.refused = true
			obj["resultCode"], obj["refusalReasonCode"], obj["refusalReason"] = "Refused", code, adyenRefusalReasons[code]
			delete(obj, "action")
		}
	} else {
		obj["paymentPspReference"] = call.payment
		obj["reference"] = call.reference
		obj["merchantAccount"] = adyenMerchantAccount
		if call.amount > 0 {
			obj["amount"] = map[string]any{"value": call.amount, "currency": call.currency}
		}
	}
	out, err := json.Marshal(obj)
	if err != nil {
		return body
	}
	return out
}

// adyenRefusalReasons are Adyen's refusal reasons by refusalReasonCode.
var adyenRefusalReasons = map[string]string{"2": "Refused", "12": "Not enough balance"}

// stop is Adyen going away: once no call is under way and none was
// answered for half a second (or after 10 s), the listener is closed,
// its idle connections with it, and every later call is refused at the
// dial: it never reaches Adyen.
func (r *adyenRecorder) stop() {
	if r.stopped.Swap(true) {
		return
	}
	closeWhenQuiet(r.srv, &r.inflight, &r.quiet)
}

func (r *adyenRecorder) all() []adyenCall {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.calls)
}

// setHold sets the hold (nil: none).
func (r *adyenRecorder) setHold(h func(adyenCall)) {
	r.mu.Lock()
	r.hold = h
	r.mu.Unlock()
}

// booked returns the first booking (not replayed, 2xx) of op under key, or
// waits for it; the test fails after patience.
func (r *adyenRecorder) booked(t *testing.T, op, key string, within time.Duration) adyenCall {
	t.Helper()
	within = patience(within)
	deadline := time.Now().Add(within)
	for {
		for _, c := range r.all() {
			if c.op == op && c.key == key && !c.replayed && c.status/100 == 2 {
				return c
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("Adyen booked no %s under %s within %s; calls: %+v", op, key, within, r.all())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// adyenConnectorJSON is an Adyen connector as the API answers it.
type adyenConnectorJSON struct {
	connectorJSON
	NotificationURL string `json:"notification_url"`
}

// adyenNotifier sends a connector's notifications as Adyen does.
type adyenNotifier struct {
	st      *stack
	c       *http.Client
	url     string // the connector's notification_url
	hmacKey string
}

// item is a notification item of an event about a payment: psp is the
// event's own pspReference (the modification's), original the payment's.
func adyenItem(event, psp, original, merchantRef string, value int64, currency string, success bool) adyen.NotificationItem {
	return adyen.NotificationItem{
		Amount:              adyen.Amount{Value: value, Currency: currency},
		EventCode:           event,
		EventDate:           time.Now().UTC().Format(time.RFC3339),
		MerchantAccountCode: adyenMerchantAccount,
		MerchantReference:   merchantRef,
		OriginalReference:   original,
		PSPReference:        psp,
		Success:             strconv.FormatBool(success),
		PaymentMethod:       "visa",
	}
}

// body is Adyen's notification of items, each signed with key. Each item,
// as a notification of its own, must be valid against the request schema
// of its eventCode in Adyen's webhook description (Webhooks-v1.json): the
// test sends what Adyen would.
func (n adyenNotifier) body(t *testing.T, key string, items ...adyen.NotificationItem) string {
	t.Helper()
	wrapped := make([]adyen.ItemWrapper, len(items))
	for i, it := range items {
		sig, err := adyen.Sign(it, key)
		if err != nil {
			t.Fatal(err)
		}
		it.AdditionalData = map[string]any{"hmacSignature": sig}
		wrapped[i] = adyen.ItemWrapper{Item: it}
		one, err := json.Marshal(adyen.Notification{Live: "false", Items: wrapped[i : i+1]})
		if err != nil {
			t.Fatal(err)
		}
		if err := adyenWebhookSchemas.validate(it.EventCode, one); err != nil {
			t.Fatalf("a notification %s the test built is not one Adyen sends: %v\n%s", it.EventCode, err, one)
		}
	}
	b, err := json.Marshal(adyen.Notification{Live: "false", Items: wrapped})
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// adyenWebhookSchemas are the request schemas of Adyen's webhook
// description, by eventCode, compiled once.
var adyenWebhookSchemas = &webhookSchemas{byCode: map[string]*jsonschema.Schema{}}

type webhookSchemas struct {
	mu     sync.Mutex
	c      *jsonschema.Compiler
	doc    map[string]any
	err    error
	byCode map[string]*jsonschema.Schema
}

// validate checks body against the schema of the webhook /code.
func (w *webhookSchemas) validate(code string, body []byte) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	const base = "file:///adyen/Webhooks-v1.json"
	if w.c == nil && w.err == nil {
		w.err = func() error {
			root, err := harness.ModuleRoot()
			if err != nil {
				return err
			}
			f, err := os.Open(filepath.Join(filepath.Dir(root), "shared", "third_party", "adyen-openapi", "Webhooks-v1.json"))
			if err != nil {
				return err
			}
			defer f.Close()
			doc, err := jsonschema.UnmarshalJSON(f)
			if err != nil {
				return err
			}
			w.c = jsonschema.NewCompiler()
			w.c.DefaultDraft(jsonschema.Draft2020)
			if err := w.c.AddResource(base, doc); err != nil {
				return err
			}
			w.doc, _ = doc.(map[string]any)
			return nil
		}()
	}
	if w.err != nil {
		return fmt.Errorf("Adyen's webhook description: %w", w.err)
	}
	sch, ok := w.byCode[code]
	if !ok {
		// webhooks./CODE.post.requestBody.content.application/json.schema.$ref
		ref := ""
		if hooks, _ := w.doc["webhooks"].(map[string]any); hooks != nil {
			if hook, _ := hooks["/"+code].(map[string]any); hook != nil {
				post, _ := hook["post"].(map[string]any)
				rb, _ := post["requestBody"].(map[string]any)
				content, _ := rb["content"].(map[string]any)
				js, _ := content["application/json"].(map[string]any)
				schema, _ := js["schema"].(map[string]any)
				ref, _ = schema["$ref"].(string)
			}
		}
		if ref == "" {
			return fmt.Errorf("no webhook %s in Adyen's description", code)
		}
		var err error
		if sch, err = w.c.Compile(base + ref); err != nil {
			return err
		}
		w.byCode[code] = sch
	}
	inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(body))
	if err != nil {
		return err
	}
	return sch.Validate(inst)
}

// post sends a body to the notification URL.
func (n adyenNotifier) post(t *testing.T, body string) exchange {
	t.Helper()
	e, err := send(n.c, http.MethodPost, n.url, "", body)
	if err != nil {
		t.Fatalf("POST %s: %v", n.url, err)
	}
	n.st.check(t, e)
	return e
}

// send sends items signed with the connector's key, wants Adyen's
// acknowledgement, and returns the exchange.
func (n adyenNotifier) send(t *testing.T, items ...adyen.NotificationItem) exchange {
	t.Helper()
	e := n.post(t, n.body(t, n.hmacKey, items...))
	if e.status() != http.StatusOK || string(e.body) != "[accepted]" {
		t.Fatalf("notification %s: got %d %s, want 200 [accepted]", items[0].EventCode, e.status(), e.body)
	}
	return e
}

// notificationJSON is a provider notification as the API lists it.
type notificationJSON struct {
	ID              string  `json:"id"`
	ProviderEventID string  `json:"provider_event_id"`
	Type            string  `json:"type"`
	Outcome         string  `json:"outcome"`
	Charge          *string `json:"charge"`
	ReceivedAt      string  `json:"received_at"`
	ProcessedAt     *string `json:"processed_at"`
}

// notifications lists every notification of the connector, newest first.
func (m *rtMerchant) notifications(t *testing.T, connector string) []notificationJSON {
	t.Helper()
	return listAll(t, func(query string) exchange {
		return m.call(t, http.MethodGet, "/v1/connectors/"+connector+"/notifications?"+query, "")
	}, func(n notificationJSON) string { return n.ID })
}

// waitNotificationsApplied waits until the connector has n notifications
// and the worker has applied every one (none left received).
func (m *rtMerchant) waitNotificationsApplied(t *testing.T, connector string, n int, within time.Duration) []notificationJSON {
	t.Helper()
	within = patience(within)
	deadline := time.Now().Add(within)
	for {
		list := m.notifications(t, connector)
		left := 0
		for _, x := range list {
			if x.Outcome == "received" {
				left++
			}
		}
		if len(list) == n && left == 0 {
			return list
		}
		if time.Now().After(deadline) {
			t.Fatalf("connector %s: %d notifications, %d still received after %s; want %d, all applied", connector, len(list), left, within, n)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// refundOf reads a refund.
func (m *rtMerchant) refundOf(t *testing.T, id string) refundJSON {
	t.Helper()
	e := m.call(t, http.MethodGet, "/v1/refunds/"+id, "")
	mustExpect(t, e, http.StatusOK, "")
	var r refundJSON
	decode(t, e, &r)
	return r
}

// adyenSetup is a stack whose worker reaches Prism through a recorder, a
// merchant, and its Adyen connector.
type adyenSetup struct {
	st       *stack
	rec      *adyenRecorder
	m        *rtMerchant
	conn     adyenConnectorJSON
	hmacKey  string
	notifier adyenNotifier
}

// newAdyenSetup starts Prism, the recorder and a stack (extra: more
// settings of every process), and a merchant (from ip) with an Adyen
// connector.
func newAdyenSetup(t *testing.T, ip, what string, extra ...string) *adyenSetup {
	t.Helper()
	rec := newAdyenRecorder(t, startAdyenPrism(t))
	env := append(slices.Clone(routingStackEnv), extra...)
	st := newStack(t, stackOptions{env: env, workerEnv: append(slices.Clone(routingWorkerEnv), "ADYEN_API_BASE="+rec.url())}, what)
	m := newRoutingMerchant(t, st, ip, "adyen")
	conn, notifier := m.adyenConnector(t, st, ip, "Adyen EU")
	return &adyenSetup{st: st, rec: rec, m: m, conn: conn, hmacKey: notifier.hmacKey, notifier: notifier}
}

// adyenConnector creates an Adyen connector of the merchant, with an HMAC
// key of its own, and returns it with the notifier that sends its
// notifications from ip.
func (m *rtMerchant) adyenConnector(t *testing.T, st *stack, ip, name string) (adyenConnectorJSON, adyenNotifier) {
	t.Helper()
	// 64 hex characters, as the Customer Area shows an HMAC key.
	hmacKey := strings.ToUpper(harness.RandomHex(32))
	e := m.call(t, http.MethodPost, "/v1/connectors", fmt.Sprintf(`{"provider":"adyen","name":%q,"credentials":{"api_key":%q,"merchant_account":%q,"hmac_key":%q}}`,
		name, "AQE"+harness.RandomHex(24), adyenMerchantAccount, hmacKey))
	mustExpect(t, e, http.StatusCreated, "")
	var conn adyenConnectorJSON
	decode(t, e, &conn)
	if conn.Provider != "adyen" || !conn.HasCredentials || conn.NotificationURL != st.replicas[0]+"/v1/provider_notifications/"+conn.ID {
		t.Fatalf("adyen connector: got %s, want has_credentials and the notification_url %s/v1/provider_notifications/%s", e.body, st.replicas[0], conn.ID)
	}
	return conn, adyenNotifier{st: st, c: newClient(t, ip), url: conn.NotificationURL, hmacKey: hmacKey}
}

// authorizedAtAdyen creates a charge held for capture and waits until it
// is authorized at the Adyen connector, with the pspReference Adyen
// booked; it returns the charge and that booking.
func (s *adyenSetup) authorizedAtAdyen(t *testing.T, amount int64, tag string) (routedJSON, adyenCall) {
	t.Helper()
	ch := s.m.charge(t, routeBody("4242424242424242", amount, "eur", false, tag, ""))
	got := s.m.waitRouted(t, []string{ch.ID}, settled, 30*time.Second)[ch.ID]
	pay := s.rec.booked(t, "payments", "gh_"+ch.ID+"_authorize", 10*time.Second)
	if got.Status != "authorized" || chaosDeref(got.Connector) != s.conn.ID || got.Provider != "adyen" ||
		chaosDeref(got.ProviderReference) != pay.psp || pay.amount != amount || pay.currency != "EUR" {
		t.Fatalf("charge %s: %s at %s (%s), reference %s %s; want authorized at %s, reference %s (Adyen's booking of %d EUR)",
			ch.ID, got.Status, chaosDeref(got.Connector), got.Provider, chaosDeref(got.ProviderReference), got.path(), s.conn.ID, pay.psp, pay.amount)
	}
	return got, pay
}

// waitStatus waits until the charge has status.
func (s *adyenSetup) waitStatus(t *testing.T, id, status string) routedJSON {
	t.Helper()
	return s.m.waitRouted(t, []string{id}, func(c routedJSON) bool { return c.Status == status }, 30*time.Second)[id]
}

// chargeEvents counts the merchant's events of the charge by type
// (refund events included: their data.charge is the charge).
func chargeEvents(t *testing.T, all []eventJSON, id string) map[string]int {
	t.Helper()
	return countTypes(eventsOfCharge(t, all, id))
}

// waitEvent waits until the charge has an event of typ.
func (s *adyenSetup) waitEvent(t *testing.T, id, typ string) {
	t.Helper()
	within := patience(30 * time.Second)
	deadline := time.Now().Add(within)
	for chargeEvents(t, s.m.events(t), id)[typ] == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("charge %s: no %s event after %s", id, typ, within)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestAdyenSettlesByNotification carries charges through an Adyen
// connector: authorized by Adyen's Checkout API (Prism), captured in part,
// refunded in part, a capture that fails and a void, each answered
// "received" by Adyen and settled only by the notification that follows,
// signed as Adyen signs it. Resent notifications change nothing, a forged
// one is refused, and what Adyen booked is what the gateway shows.
func TestAdyenSettlesByNotification(t *testing.T) {
	parallel(t)
	began := time.Now()
	// The route is [adyen, stripe]: Stripe (stripe-mock) is the fallback
	// the charges never need.
	s := newAdyenSetup(t, "127.0.0.160", "adyen settles by notification", "STRIPE_API_BASE="+startStripeMockProcess(t))
	m, rec, nt := s.m, s.rec, s.notifier
	whsec := "whsec_" + harness.RandomHex(16)
	stripe := m.createConnector(t, fmt.Sprintf(`{"provider":"stripe","name":"Stripe","credentials":{"secret_key":"sk_test_%s","webhook_secret":%q}}`, harness.RandomHex(16), whsec))
	m.putRouting(t, `{"default":`+route(s.conn.ID, stripe.ID)+`}`)

	// Authorized at Adyen, the first of the route.
	ch, pay := s.authorizedAtAdyen(t, 2000, "adyen-capture")
	if len(ch.Attempts) != 1 || ch.Attempts[0].Status != "succeeded" || chaosDeref(ch.Attempts[0].ProviderReference) != pay.psp {
		t.Errorf("charge %s: attempts %s, want one at %s with reference %s", ch.ID, ch.path(), s.conn.ID, pay.psp)
	}

	// A capture of 1500 of 2000: Adyen received it, the charge is capturing
	// until the notification.
	mustExpect(t, m.call(t, http.MethodPost, "/v1/charges/"+ch.ID+"/capture", `{"amount":1500}`), http.StatusOK, "")
	got := s.waitStatus(t, ch.ID, "capturing")
	capt := rec.booked(t, "captures", "gh_"+ch.ID+"_capture", 10*time.Second)
	if capt.payment != pay.psp || capt.amount != 1500 || capt.currency != "EUR" {
		t.Errorf("capture at Adyen: %+v; want 1500 EUR of %s", capt, pay.psp)
	}
	if got.AmountCaptured != 0 {
		t.Errorf("capturing charge: amount_captured %d, want 0 until Adyen's notification", got.AmountCaptured)
	}
	if n := chargeEvents(t, m.events(t), ch.ID)["charge.captured"]; n != 0 {
		t.Errorf("charge.captured before Adyen's notification: %d events", n)
	}
	captureItem := adyenItem("CAPTURE", capt.psp, pay.psp, capt.reference, 1500, "EUR", true)
	nt.send(t, captureItem)
	got = s.waitStatus(t, ch.ID, "captured")
	if got.AmountCaptured != 1500 {
		t.Errorf("captured charge: amount_captured %d, want 1500", got.AmountCaptured)
	}
	s.waitEvent(t, ch.ID, "charge.captured")

	// A refund of 500: pending until Adyen's REFUND notification.
	e := m.call(t, http.MethodPost, "/v1/refunds", fmt.Sprintf(`{"charge":%q,"amount":500}`, ch.ID))
	mustExpect(t, e, http.StatusCreated, "")
	var ref refundJSON
	decode(t, e, &ref)
	refCall := rec.booked(t, "refunds", "gh_"+ref.ID+"_refund", 30*time.Second)
	if refCall.payment != pay.psp || refCall.amount != 500 || refCall.reference != ref.ID {
		t.Errorf("refund at Adyen: %+v; want 500 of %s with reference %s (the refund's id)", refCall, pay.psp, ref.ID)
	}
	waitTasksDone(t, s.st, []string{"refund:process"}, 30*time.Second)
	if r := m.refundOf(t, ref.ID); r.Status != "pending" {
		t.Errorf("refund %s once Adyen received it: %s, want pending until the notification", ref.ID, r.Status)
	}
	refundItem := adyenItem("REFUND", refCall.psp, pay.psp, ref.ID, 500, "EUR", true)
	nt.send(t, refundItem)
	if r := m.waitRefund(t, ref.ID, 30*time.Second); r.Status != "succeeded" {
		t.Errorf("refund %s after Adyen's REFUND: %s, want succeeded", ref.ID, r.Status)
	}
	s.waitEvent(t, ch.ID, "refund.succeeded")
	if got = m.routed(t, ch.ID); got.AmountRefunded != 500 || got.AmountCaptured != 1500 || got.Status != "captured" {
		t.Errorf("charge after the refund: %s, captured %d, refunded %d; want captured, 1500, 500", got.Status, got.AmountCaptured, got.AmountRefunded)
	}

	// Adyen sends them all again, and a forged one, signed with another key.
	list := m.waitNotificationsApplied(t, s.conn.ID, 2, 30*time.Second)
	checkAdyenOutcomes(t, list, map[string]string{"CAPTURE:" + capt.psp: ch.ID, "REFUND:" + refCall.psp: ch.ID})
	beforeEvents := countTypes(m.events(t))
	nt.send(t, captureItem)
	nt.send(t, refundItem, captureItem)
	forged := nt.post(t, nt.body(t, strings.ToUpper(harness.RandomHex(32)), adyenItem("CAPTURE", strings.ToUpper(harness.RandomHex(8)), pay.psp, capt.reference, 2000, "EUR", true)))
	expect(t, forged, http.StatusUnauthorized, "invalid_credentials")
	list = m.waitNotificationsApplied(t, s.conn.ID, 5, 30*time.Second)
	checkAdyenOutcomes(t, list, map[string]string{"CAPTURE:" + capt.psp: ch.ID, "REFUND:" + refCall.psp: ch.ID})
	if after := countTypes(m.events(t)); !mapsEqual(after, beforeEvents) {
		t.Errorf("events after the resends: %v, want %v as before", after, beforeEvents)
	}
	if again := m.routed(t, ch.ID); again.Status != "captured" || again.AmountCaptured != 1500 || again.AmountRefunded != 500 {
		t.Errorf("charge after the resends: %s, captured %d, refunded %d; want captured, 1500, 500", again.Status, again.AmountCaptured, again.AmountRefunded)
	}
	if r := m.refundOf(t, ref.ID); r.Status != "succeeded" || r.Amount != 500 {
		t.Errorf("refund after the resends: %s %d, want succeeded 500", r.Status, r.Amount)
	}

	// A second charge: its capture fails at Adyen, then it is voided.
	ch2, pay2 := s.authorizedAtAdyen(t, 2000, "adyen-void")
	mustExpect(t, m.call(t, http.MethodPost, "/v1/charges/"+ch2.ID+"/capture", ""), http.StatusOK, "")
	s.waitStatus(t, ch2.ID, "capturing")
	capt2 := rec.booked(t, "captures", "gh_"+ch2.ID+"_capture", 10*time.Second)
	if capt2.payment != pay2.psp || capt2.amount != 2000 {
		t.Errorf("second capture at Adyen: %+v; want 2000 of %s", capt2, pay2.psp)
	}
	failed := adyenItem("CAPTURE_FAILED", capt2.psp, pay2.psp, capt2.reference, 2000, "EUR", true)
	failed.Reason = "Insufficient balance on payment"
	nt.send(t, failed)
	got = s.waitStatus(t, ch2.ID, "authorized")
	if chaosDeref(got.FailureCode) != "capture_failed" || got.AmountCaptured != 0 {
		t.Errorf("charge after CAPTURE_FAILED: failure_code %q, amount_captured %d; want capture_failed, 0", chaosDeref(got.FailureCode), got.AmountCaptured)
	}
	s.waitEvent(t, ch2.ID, "charge.capture_failed")
	mustExpect(t, m.call(t, http.MethodPost, "/v1/charges/"+ch2.ID+"/void", ""), http.StatusOK, "")
	s.waitStatus(t, ch2.ID, "voiding")
	cancel := rec.booked(t, "cancels", "gh_"+ch2.ID+"_void", 10*time.Second)
	if cancel.payment != pay2.psp {
		t.Errorf("cancel at Adyen: %+v; want one of %s", cancel, pay2.psp)
	}
	nt.send(t, adyenItem("CANCELLATION", cancel.psp, pay2.psp, cancel.reference, 2000, "EUR", true))
	got = s.waitStatus(t, ch2.ID, "voided")
	s.waitEvent(t, ch2.ID, "charge.voided")
	list = m.waitNotificationsApplied(t, s.conn.ID, 7, 30*time.Second)
	checkAdyenOutcomes(t, list, map[string]string{"CAPTURE:" + capt.psp: ch.ID, "REFUND:" + refCall.psp: ch.ID,
		"CAPTURE_FAILED:" + capt2.psp: ch2.ID, "CANCELLATION:" + cancel.psp: ch2.ID})

	all := m.events(t)
	ev1, ev2 := chargeEvents(t, all, ch.ID), chargeEvents(t, all, ch2.ID)
	if ev1["charge.captured"] != 1 || ev1["refund.succeeded"] != 1 || ev1["charge.capture_failed"] != 0 {
		t.Errorf("charge %s: events %v; want one charge.captured and one refund.succeeded", ch.ID, ev1)
	}
	if ev2["charge.capture_failed"] != 1 || ev2["charge.voided"] != 1 || ev2["charge.captured"] != 0 {
		t.Errorf("charge %s: events %v; want one charge.capture_failed and one charge.voided, no charge.captured", ch2.ID, ev2)
	}

	// What Adyen booked is what the gateway shows.
	checkAdyenBooks(t, rec.all(), []adyenBooking{
		{"payments", "gh_" + ch.ID + "_authorize", "", 2000, chaosDeref(ch.ProviderReference)},
		{"captures", "gh_" + ch.ID + "_capture", pay.psp, 1500, capt.psp},
		{"refunds", "gh_" + ref.ID + "_refund", pay.psp, 500, refCall.psp},
		{"payments", "gh_" + ch2.ID + "_authorize", "", 2000, chaosDeref(ch2.ProviderReference)},
		{"captures", "gh_" + ch2.ID + "_capture", pay2.psp, 2000, capt2.psp},
		{"cancels", "gh_" + ch2.ID + "_void", pay2.psp, 0, cancel.psp},
	})
	if rows := ledgerKeys(t, s.st.db, ch.ID); len(rows) != 0 {
		t.Errorf("charge %s: sandbox_ledger %+v, want nothing (Adyen took it)", ch.ID, rows)
	}

	// Stripe's door, through the binaries: a charge held at the Stripe
	// connector, then Stripe's events about its PaymentIntent, signed with
	// the connector's webhook secret. The charge's work is settled, so the
	// worker lists the event a duplicate of it; an event about a payment
	// the gateway does not hold is ignored; a resent one is a duplicate
	// when it arrives; a forged one is refused and not stored.
	held := m.charge(t, routeBody("4242424242424242", 2500, "eur", false, "stripe-held", fmt.Sprintf(`"connector":%q`, stripe.ID)))
	got = m.waitRouted(t, []string{held.ID}, settled, 30*time.Second)[held.ID]
	pi := chaosDeref(got.ProviderReference)
	if got.Status != "authorized" || got.Provider != "stripe" || !strings.HasPrefix(pi, "pi_") {
		t.Fatalf("charge %s at Stripe: %s at %s, reference %s; want authorized with a PaymentIntent", held.ID, got.Status, got.Provider, pi)
	}
	stripeURL := strings.Replace(s.notifier.url, s.conn.ID, stripe.ID, 1)
	postStripe := func(body, secret string) exchange {
		t.Helper()
		at := time.Now()
		sig := stripewebhook.ComputeSignature(at, []byte(body), secret)
		e, err := sendWith(nt.c, http.MethodPost, stripeURL, "", body, "Stripe-Signature", fmt.Sprintf("t=%d,v1=%s", at.Unix(), hex.EncodeToString(sig)))
		if err != nil {
			t.Fatalf("POST %s: %v", stripeURL, err)
		}
		s.st.check(t, e)
		return e
	}
	event := func(id, pi string) string {
		return fmt.Sprintf(`{"id":%q,"object":"event","type":"payment_intent.amount_capturable_updated","data":{"object":{"id":%q,"object":"payment_intent","status":"requires_capture"}}}`, id, pi)
	}
	evHeld, evOther := "evt_"+harness.RandomHex(8), "evt_"+harness.RandomHex(8)
	for _, body := range []string{event(evHeld, pi), event(evOther, "pi_"+harness.RandomHex(8)), event(evHeld, pi)} {
		if e := postStripe(body, whsec); e.status() != http.StatusOK || !strings.Contains(string(e.body), `"received":true`) {
			t.Fatalf("Stripe's event: %s, want 200 received", e)
		}
	}
	expect(t, postStripe(event("evt_"+harness.RandomHex(8), pi), "whsec_"+harness.RandomHex(16)), http.StatusUnauthorized, "invalid_credentials")
	stripeList := m.waitNotificationsApplied(t, stripe.ID, 3, 30*time.Second)
	// The resend is a duplicate either way: caught when it arrives while
	// the first still waits for the worker, or by the worker after it
	// (then it names the charge too).
	outcomes, named := map[string]int{}, 0
	for _, n := range stripeList {
		outcomes[n.ProviderEventID+" "+n.Outcome]++
		if n.ProviderEventID == evHeld && chaosDeref(n.Charge) == held.ID {
			named++
		}
	}
	wantOutcomes := map[string]int{evHeld + " duplicate": 2, evOther + " ignored": 1}
	if !mapsEqual(outcomes, wantOutcomes) || named == 0 {
		t.Errorf("Stripe's events: %v, %d naming charge %s; want %v, the first naming it", outcomes, named, held.ID, wantOutcomes)
	}

	// Stripe pays out on its own: a payout.* event makes the worker read
	// the payout from Stripe's books (stripe-mock's: 11.00 USD, in
	// transit, whatever the event says) and book it, once for two events.
	poEvent := func(id string) string {
		return fmt.Sprintf(`{"id":%q,"object":"event","type":"payout.paid","data":{"object":{"id":"po_1StripePaid","object":"payout","status":"paid"}}}`, id)
	}
	for _, id := range []string{"evt_" + harness.RandomHex(8), "evt_" + harness.RandomHex(8)} {
		if e := postStripe(poEvent(id), whsec); e.status() != http.StatusOK {
			t.Fatalf("Stripe's payout event: %s, want 200", e)
		}
	}
	payoutOutcomes := map[string]int{}
	for _, n := range m.waitNotificationsApplied(t, stripe.ID, 5, 30*time.Second) {
		if n.Type == "payout.paid" {
			payoutOutcomes[n.Outcome]++
		}
	}
	// Two events of one payout: the first applied; the second a duplicate,
	// or, when the worker took both at once, applied too (it moved the
	// payout on to Stripe's status while the first was booking it). Either
	// way the payout and its transaction are booked once (below).
	if payoutOutcomes["applied"] < 1 || payoutOutcomes["applied"]+payoutOutcomes["duplicate"] != 2 {
		t.Errorf("Stripe's payout events: %v, want one applied and one duplicate (or both applied)", payoutOutcomes)
	}
	imported := listAll(t, func(q string) exchange {
		return m.call(t, http.MethodGet, "/v1/payouts?connector="+stripe.ID+"&"+q, "")
	},
		func(x payoutJSON) string { return x.ID })
	if len(imported) != 1 || imported[0].Amount != 1100 || imported[0].Currency != "USD" || imported[0].Status != "in_transit" || !imported[0].Automatic {
		t.Fatalf("Stripe's payouts: %+v, want its one payout of 1100 USD in transit", imported)
	}
	if got := m.transactions(t, url.Values{"source": {imported[0].ID}}); len(got) != 1 || got[0].Type != "payout" || got[0].Net != -1100 {
		t.Fatalf("the Stripe payout's transactions: %+v", got)
	}
	mustExpect(t, m.call(t, http.MethodPost, "/v1/payouts", fmt.Sprintf(`{"connector":%q,"amount":100,"currency":"usd"}`, stripe.ID)),
		http.StatusBadRequest, "parameter_invalid")
	t.Logf("adyen: %d calls to Adyen, %d notifications, in %s", len(rec.all()), len(list), time.Since(began).Round(time.Millisecond))
}

// mapsEqual reports whether two counts are the same.
func mapsEqual(a, b map[string]int) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// checkAdyenOutcomes checks the connector's notifications (newest first):
// of each event (eventCode:pspReference of want), the first received was
// applied to the charge, every later one is a duplicate; and every
// notification is one of want.
func checkAdyenOutcomes(t *testing.T, list []notificationJSON, want map[string]string) {
	t.Helper()
	seen := map[string]int{}
	for i := len(list) - 1; i >= 0; i-- { // oldest first
		n := list[i]
		k := n.Type + ":" + n.ProviderEventID
		charge, ok := want[k]
		if !ok {
			t.Errorf("notification %s (%s %s): not one the test sent", n.ID, n.Type, n.ProviderEventID)
			continue
		}
		wantOutcome := "duplicate"
		if seen[k] == 0 {
			wantOutcome = "applied"
		}
		seen[k]++
		if n.Outcome != wantOutcome || n.ProcessedAt == nil || (wantOutcome == "applied" && chaosDeref(n.Charge) != charge) {
			t.Errorf("notification %s (%s %s, #%d): outcome %s, charge %s, processed_at %v; want %s of %s",
				n.ID, n.Type, n.ProviderEventID, seen[k], n.Outcome, chaosDeref(n.Charge), n.ProcessedAt != nil, wantOutcome, charge)
		}
	}
	for k := range want {
		if seen[k] == 0 {
			t.Errorf("notification %s: not listed", k)
		}
	}
}

// adyenBooking is one operation the gateway asked of Adyen.
type adyenBooking struct {
	op, key, payment string
	amount           int64
	psp              string
}

// checkAdyenBooks checks that Adyen booked exactly the bookings: each once
// under its key, with its payment, amount and pspReference, every other
// call to it a replay of its key; and that no other call booked anything.
func checkAdyenBooks(t *testing.T, calls []adyenCall, want []adyenBooking) {
	t.Helper()
	byKey := map[string]adyenBooking{}
	for _, b := range want {
		byKey[b.key] = b
	}
	booked := map[string]int{}
	for _, c := range calls {
		b, ok := byKey[c.key]
		switch {
		case !ok:
			t.Errorf("Adyen got %s %s under %q (amount %d): not a call of the gateway's bookings", c.method, c.path, c.key, c.amount)
		case c.status/100 != 2:
			t.Errorf("Adyen answered %s %s (%s) with %d", c.method, c.path, c.key, c.status)
		case c.op != b.op || c.payment != b.payment || c.amount != b.amount || c.psp != b.psp:
			t.Errorf("Adyen's %s under %s: %s of %q, amount %d, psp %s; want %s of %q, amount %d, psp %s",
				c.op, c.key, c.op, c.payment, c.amount, c.psp, b.op, b.payment, b.amount, b.psp)
		case !c.replayed:
			booked[c.key]++
		}
	}
	for _, b := range want {
		if booked[b.key] != 1 {
			t.Errorf("Adyen booked %d %s under %s, want 1", booked[b.key], b.op, b.key)
		}
	}
}

// answerGate holds Adyen's answers to some operations until released.
type answerGate struct {
	ops  []string
	mu   sync.Mutex
	open chan struct{}
	held int // answers held so far
	let  int // answers let go so far
}

func newAnswerGate(ops ...string) *answerGate {
	return &answerGate{ops: ops, open: make(chan struct{})}
}

// hold is the recorder's hold: an answer to one of the gate's operations
// waits until the gate opens (at most 25 s, within the worker's
// PROVIDER_TIMEOUT).
func (g *answerGate) hold(c adyenCall) {
	if !slices.Contains(g.ops, c.op) {
		return
	}
	g.mu.Lock()
	open := g.open
	g.held++
	g.mu.Unlock()
	select {
	case <-open:
	case <-time.After(25 * time.Second):
	}
	g.mu.Lock()
	g.let++
	g.mu.Unlock()
}

// release lets the answers held go, waits until n more have gone than
// before, and closes the gate again for the next answers.
func (g *answerGate) release(t *testing.T, n int) {
	t.Helper()
	g.mu.Lock()
	before := g.let
	close(g.open)
	g.mu.Unlock()
	waitCount(t, "answers held and let go", func() int {
		g.mu.Lock()
		defer g.mu.Unlock()
		if g.held != g.let {
			return 0
		}
		return g.let - before
	}, n)
	g.mu.Lock()
	g.open = make(chan struct{})
	g.mu.Unlock()
}

// filterMetric keeps the samples of the named metric that carry every label.
func filterMetric(exposition, name string, labels ...string) string {
	var b strings.Builder
	for _, line := range strings.Split(exposition, "\n") {
		if !strings.HasPrefix(line, name+"{") {
			continue
		}
		ok := true
		for _, l := range labels {
			ok = ok && strings.Contains(line, l)
		}
		if ok {
			b.WriteString(line + "\n")
		}
	}
	return b.String()
}

// waitCount waits until count reaches n.
func waitCount(t *testing.T, what string, count func() int, n int) {
	t.Helper()
	within := patience(30 * time.Second)
	deadline := time.Now().Add(within)
	for {
		got := count()
		if got >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %d after %s, want %d", what, got, within, n)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestAdyenThreeDSecure: Adyen asks for 3-D Secure (RedirectShopper): the
// charge requires action with Adyen's page as next_action; the cardholder
// comes back to Gatehouse's return page with Adyen's redirectResult, which
// the worker sends to /payments/details; Adyen's Authorised answer
// captures the charge, and the authentication succeeded.
func TestAdyenThreeDSecure(t *testing.T) {
	parallel(t)
	s := newAdyenSetup(t, "127.0.0.164", "adyen 3-D Secure")
	m, rec := s.m, s.rec
	m.putRouting(t, `{"default":`+route(s.conn.ID)+`}`)

	ch := m.charge(t, routeBody("4242424242424242", adyenThreeDSAmount, "eur", true, "adyen-3ds", ""))
	s.waitStatus(t, ch.ID, "requires_action")
	pay := rec.booked(t, "payments", "gh_"+ch.ID+"_authorize", 10*time.Second)
	e := m.call(t, http.MethodGet, "/v1/charges/"+ch.ID, "")
	mustExpect(t, e, http.StatusOK, "")
	var view struct {
		NextAction *struct {
			Type string `json:"type"`
		} `json:"next_action"`
		Authentication struct {
			Status string `json:"status"`
		} `json:"authentication"`
	}
	decode(t, e, &view)
	if view.NextAction == nil || view.Authentication.Status != "pending" {
		t.Fatalf("charge %s requires action: %s; want a next_action and the authentication pending", ch.ID, e.body)
	}
	if pay.returnURL == "" || !strings.Contains(pay.returnURL, "/authenticate/v1/"+ch.ID+"/") {
		t.Fatalf("the payment's returnUrl %q: want Gatehouse's return page of %s", pay.returnURL, ch.ID)
	}

	// The cardholder comes back from Adyen's page.
	const redirectResult = "X6XtfGC3!Y3hlY2tvdXRTaG9wcGVyOjpzZXNzaW9uRGF0YQ=="
	back, err := url.Parse(pay.returnURL)
	if err != nil {
		t.Fatal(err)
	}
	q := back.Query()
	q.Set("redirectResult", redirectResult)
	back.RawQuery = q.Encode()
	resp, err := noRedirects(newClient(t, "127.0.0.165")).Get(back.String())
	if err != nil {
		t.Fatalf("the return page: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode/100 != 2 && resp.StatusCode/100 != 3 {
		t.Fatalf("the return page: %d", resp.StatusCode)
	}

	got := s.waitStatus(t, ch.ID, "captured")
	details := rec.booked(t, "details", "gh_"+ch.ID+"_authenticate", 10*time.Second)
	if details.details["redirectResult"] != redirectResult {
		t.Errorf("/payments/details sent %v, want the redirectResult the cardholder came back with", details.details)
	}
	if got.AmountCaptured != adyenThreeDSAmount || details.psp == "" || chaosDeref(got.ProviderReference) != details.psp {
		t.Errorf("charge %s: captured %d, reference %s; want %d, %s (the answer of /payments/details)", ch.ID, got.AmountCaptured,
			chaosDeref(got.ProviderReference), adyenThreeDSAmount, details.psp)
	}
}

// noRedirects is c without following redirects: the return page sends the
// cardholder on to the merchant's page, which is not there.
func noRedirects(c *http.Client) *http.Client {
	cc := *c
	cc.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	return &cc
}
