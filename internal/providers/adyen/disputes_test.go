package adyen_test

import (
	"bytes"
	"compress/zlib"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/gatehouse-pay/gatehouse/internal/providers"
	"github.com/gatehouse-pay/gatehouse/internal/providers/adyen"
)

// sent is a request as a transport saw it.
type sent struct {
	path   string
	header http.Header
	body   map[string]any
}

// disputeTransport adds the Prefer header a request's context names (see
// prefer) and records every request.
type disputeTransport struct {
	mu   sync.Mutex
	sent []sent
}

func (d *disputeTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	data, err := io.ReadAll(req.Body)
	if err != nil {
		return nil, err
	}
	req.Body.Close()
	req = req.Clone(req.Context())
	req.Body = io.NopCloser(bytes.NewReader(data))
	if v, ok := req.Context().Value(exampleKey{}).(string); ok {
		req.Header.Set("Prefer", v)
	}
	var body map[string]any
	_ = json.Unmarshal(data, &body)
	d.mu.Lock()
	d.sent = append(d.sent, sent{path: req.URL.Path, header: req.Header.Clone(), body: body})
	d.mu.Unlock()
	return http.DefaultTransport.RoundTrip(req)
}

func (d *disputeTransport) take() []sent {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := d.sent
	d.sent = nil
	return out
}

// disputeAdyen is an adapter whose Disputes API is at disputeBase and
// whose Checkout API is nowhere: no dispute call may go there.
func disputeAdyen(t *testing.T, disputeBase string) (*adyen.Adyen, *disputeTransport) {
	t.Helper()
	tr := &disputeTransport{}
	a, err := adyen.New(adyen.Config{APIKey: apiKey, MerchantAccount: merchant, BaseURL: "http://127.0.0.1:1/v71",
		DisputeBaseURL: disputeBase, HTTPClient: &http.Client{Transport: tr}, Timeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	return a, tr
}

var evidence = map[string]string{
	"customer_name":          "Jane Doe",
	"customer_email_address": "jane@example.com",
	"product_description":    "A blue teapot (1 l), shipped on 2 January.",
	"uncategorized_text":     "The customer wrote on 5 January that the teapot arrived intact.",
}

// wantSubmitted checks the two requests of SubmitDisputeEvidence: the
// evidence as one PDF defense document, then the defense.
func wantSubmitted(t *testing.T, got []sent, base, reference string) {
	t.Helper()
	if len(got) != 2 {
		t.Fatalf("%d requests, want supplyDefenseDocument and defendDispute", len(got))
	}
	if got[0].path != base+"/supplyDefenseDocument" || got[1].path != base+"/defendDispute" {
		t.Errorf("paths %s, %s; want %s/supplyDefenseDocument, %s/defendDispute", got[0].path, got[1].path, base, base)
	}
	docs, _ := got[0].body["defenseDocuments"].([]any)
	if len(docs) != 1 {
		t.Fatalf("defenseDocuments %v, want one", got[0].body["defenseDocuments"])
	}
	doc, _ := docs[0].(map[string]any)
	content, err := base64.StdEncoding.DecodeString(fmt.Sprint(doc["content"]))
	if err != nil {
		t.Errorf("content is not base64: %v", err)
	}
	if diff := cmp.Diff(adyen.EvidencePDF(reference, evidence), content); diff != "" {
		t.Errorf("content is not the evidence's PDF")
	}
	delete(doc, "content")
	wantSupply := map[string]any{"merchantAccountCode": merchant, "disputePspReference": reference,
		"defenseDocuments": []any{map[string]any{"contentType": "application/pdf", "defenseDocumentTypeCode": "DefenseMaterial"}}}
	if diff := cmp.Diff(wantSupply, got[0].body); diff != "" {
		t.Errorf("supplyDefenseDocument body (-want +got):\n%s", diff)
	}
	wantDefend := map[string]any{"merchantAccountCode": merchant, "disputePspReference": reference, "defenseReasonCode": "SupplyDefenseMaterial"}
	if diff := cmp.Diff(wantDefend, got[1].body); diff != "" {
		t.Errorf("defendDispute body (-want +got):\n%s", diff)
	}
	for _, s := range got {
		if s.header.Get("X-API-Key") != apiKey {
			t.Errorf("%s: X-API-Key missing", s.path)
		}
	}
}

// TestPrismDisputes drives the dispute answers through Prism serving
// Adyen's Disputes API v30: each request must pass Prism's validation
// against the description (a 422 would come back as a decline), and
// Adyen's statuses are sorted like the Checkout API's.
func TestPrismDisputes(t *testing.T) {
	base := disputesPrism.URL(t)
	a, tr := disputeAdyen(t, base)
	ctx := context.Background()
	const ref = "DZ4DPSHB4WD2WN82"

	t.Run("submit", func(t *testing.T) {
		if err := a.SubmitDisputeEvidence(ctx, ref, evidence); err != nil {
			t.Fatalf("SubmitDisputeEvidence: %v", err)
		}
		wantSubmitted(t, tr.take(), "", ref)
	})
	t.Run("accept", func(t *testing.T) {
		if err := a.AcceptDispute(prefer(ctx, "example=accept-dispute"), ref); err != nil {
			t.Fatalf("AcceptDispute: %v", err)
		}
		got := tr.take()
		if len(got) != 1 || got[0].path != "/acceptDispute" {
			t.Fatalf("requests %+v, want one to /acceptDispute", got)
		}
		if diff := cmp.Diff(map[string]any{"merchantAccountCode": merchant, "disputePspReference": ref}, got[0].body); diff != "" {
			t.Errorf("acceptDispute body (-want +got):\n%s", diff)
		}
	})
	for _, c := range []struct{ prefer, want string }{
		{"code=422", "decline:invalid_request"},
		{"code=400", "decline:invalid_request"},
		{"code=401", "credentials"},
		{"code=403", "credentials"},
		{"code=500", "unavailable"},
	} {
		t.Run("submit "+c.prefer, func(t *testing.T) {
			err := a.SubmitDisputeEvidence(prefer(ctx, c.prefer), ref, evidence)
			if got := outcome(providers.Result{}, err); got != c.want {
				t.Errorf("got %s, want %s (err %v)", got, c.want, err)
			}
			// The document was refused: no defense is sent.
			if got := tr.take(); len(got) != 1 {
				t.Errorf("%d requests, want the document's alone", len(got))
			}
		})
		t.Run("accept "+c.prefer, func(t *testing.T) {
			err := a.AcceptDispute(prefer(ctx, c.prefer), ref)
			if got := outcome(providers.Result{}, err); got != c.want {
				t.Errorf("got %s, want %s (err %v)", got, c.want, err)
			}
			tr.take()
		})
	}
}

// fakeDisputes answers each Disputes API operation with its body (200),
// an operation it does not name with success.
func fakeDisputes(t *testing.T, answers map[string]string) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		op := r.URL.Path[strings.LastIndex(r.URL.Path, "/")+1:]
		body, ok := answers[op]
		if !ok {
			body = `{"disputeServiceResult":{"success":true}}`
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, body)
	}))
	t.Cleanup(srv.Close)
	return srv.URL + "/ca/services/DisputeService/v30"
}

// Adyen's disputeServiceResult: success false is its refusal, a decline
// with its errorMessage; a refused document stops the defense; an answer
// without a result leaves the outcome unknown.
func TestDisputeServiceResult(t *testing.T) {
	ctx := context.Background()
	const base = "/ca/services/DisputeService/v30"
	refused := `{"disputeServiceResult":{"success":false,"errorMessage":"Dispute is not defendable"}}`

	a, tr := disputeAdyen(t, fakeDisputes(t, nil))
	if err := a.SubmitDisputeEvidence(ctx, "DZ1", evidence); err != nil {
		t.Fatalf("SubmitDisputeEvidence: %v", err)
	}
	wantSubmitted(t, tr.take(), base, "DZ1")
	if err := a.AcceptDispute(ctx, "DZ1"); err != nil {
		t.Fatalf("AcceptDispute: %v", err)
	}
	if got := tr.take(); len(got) != 1 || got[0].path != base+"/acceptDispute" {
		t.Errorf("requests %+v, want one to %s/acceptDispute", got, base)
	}

	for _, c := range []struct {
		name     string
		answers  map[string]string
		call     func(*adyen.Adyen) error
		want     string
		message  string
		requests int
	}{
		{"document refused", map[string]string{"supplyDefenseDocument": refused},
			func(a *adyen.Adyen) error { return a.SubmitDisputeEvidence(ctx, "DZ1", evidence) },
			"decline:invalid_request", "Dispute is not defendable", 1},
		{"defense refused", map[string]string{"defendDispute": refused},
			func(a *adyen.Adyen) error { return a.SubmitDisputeEvidence(ctx, "DZ1", evidence) },
			"decline:invalid_request", "Dispute is not defendable", 2},
		{"acceptance refused", map[string]string{"acceptDispute": refused},
			func(a *adyen.Adyen) error { return a.AcceptDispute(ctx, "DZ1") },
			"decline:invalid_request", "Dispute is not defendable", 1},
		{"refused without a message", map[string]string{"acceptDispute": `{"disputeServiceResult":{"success":false}}`},
			func(a *adyen.Adyen) error { return a.AcceptDispute(ctx, "DZ1") },
			"decline:invalid_request", "Adyen refused", 1},
		{"no result", map[string]string{"defendDispute": `{}`},
			func(a *adyen.Adyen) error { return a.SubmitDisputeEvidence(ctx, "DZ1", evidence) },
			"unavailable", "", 2},
		{"no reference", nil, func(a *adyen.Adyen) error { return a.AcceptDispute(ctx, " ") }, "decline:invalid_request", "reference", 0},
		{"no reference to defend", nil, func(a *adyen.Adyen) error { return a.SubmitDisputeEvidence(ctx, "", evidence) },
			"decline:invalid_request", "reference", 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			a, tr := disputeAdyen(t, fakeDisputes(t, c.answers))
			err := c.call(a)
			if got := outcome(providers.Result{}, err); got != c.want {
				t.Errorf("got %s, want %s (err %v)", got, c.want, err)
			}
			if d, ok := providers.AsDecline(err); ok && !strings.Contains(d.Message, c.message) {
				t.Errorf("message %q, want it to say %q", d.Message, c.message)
			}
			if n := len(tr.take()); n != c.requests {
				t.Errorf("%d requests, want %d", n, c.requests)
			}
		})
	}

	t.Run("connection refused", func(t *testing.T) {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		closed := "http://" + l.Addr().String()
		l.Close()
		a, _ := disputeAdyen(t, closed)
		if got := outcome(providers.Result{}, a.AcceptDispute(ctx, "DZ1")); got != "unavailable,notsent" {
			t.Errorf("got %s, want unavailable,notsent", got)
		}
	})
}

func TestDisputeBaseURL(t *testing.T) {
	for _, base := range []string{"ca-test.adyen.com/ca/services/DisputeService/v30", "ftp://ca-test.adyen.com/v30",
		"https://user:pw@ca-test.adyen.com/v30", "https://ca-test.adyen.com/v30?x=1"} {
		if _, err := adyen.New(adyen.Config{APIKey: apiKey, MerchantAccount: merchant, DisputeBaseURL: base}); err == nil {
			t.Errorf("New with DisputeBaseURL %q succeeded, want an error", base)
		}
	}
	a, err := adyen.New(adyen.Config{APIKey: apiKey, MerchantAccount: merchant})
	if err != nil {
		t.Fatal(err)
	}
	if s := a.String(); !strings.Contains(s, adyen.DefaultDisputeBaseURL) {
		t.Errorf("%s does not name the default Disputes API URL", s)
	}
}

// pdfText reads back a PDF that EvidencePDF wrote: it checks the
// cross-reference table against the objects, and returns the pages'
// lines (each Tj's text, an empty line for a T* without one).
func pdfText(t *testing.T, pdf []byte) (pages [][]string) {
	t.Helper()
	if !bytes.HasPrefix(pdf, []byte("%PDF-1.4\n")) || !bytes.HasSuffix(pdf, []byte("%%EOF\n")) {
		t.Fatalf("not a PDF: %.20q ... %.20q", pdf, pdf[max(0, len(pdf)-20):])
	}
	m := regexp.MustCompile(`startxref\n(\d+)\n%%EOF\n$`).FindSubmatch(pdf)
	if m == nil {
		t.Fatal("no startxref")
	}
	xref, _ := strconv.Atoi(string(m[1]))
	if !bytes.HasPrefix(pdf[xref:], []byte("xref\n0 ")) {
		t.Fatalf("startxref %d does not point at the xref table", xref)
	}
	entries := regexp.MustCompile(`(\d{10}) 00000 n \n`).FindAllSubmatch(pdf[xref:], -1)
	for i, e := range entries {
		off, _ := strconv.Atoi(string(e[1]))
		if want := fmt.Sprintf("%d 0 obj\n", i+1); !bytes.HasPrefix(pdf[off:], []byte(want)) {
			t.Errorf("xref entry %d points at %.12q", i+1, pdf[off:])
		}
	}
	if !bytes.Contains(pdf, fmt.Appendf(nil, "trailer\n<< /Size %d /Root 1 0 R >>", len(entries)+1)) {
		t.Error("the trailer's /Size does not count the objects")
	}
	count := regexp.MustCompile(`/Type /Pages /Kids \[[^\]]*\] /Count (\d+)`).FindSubmatch(pdf)
	streams := regexp.MustCompile(`(?s)<< /Length (\d+) /Filter /FlateDecode >>\nstream\n`).FindAllSubmatchIndex(pdf, -1)
	if count == nil || string(count[1]) != strconv.Itoa(len(streams)) {
		t.Fatalf("/Count %s, %d page contents", count[1], len(streams))
	}
	show := regexp.MustCompile(`(?m)^(?:\((.*)\) Tj|(T\*))$`)
	for _, s := range streams {
		n, _ := strconv.Atoi(string(pdf[s[2]:s[3]]))
		data := pdf[s[1] : s[1]+n]
		if !bytes.HasPrefix(pdf[s[1]+n:], []byte("\nendstream")) {
			t.Fatalf("a stream's /Length %d does not end at endstream", n)
		}
		zr, err := zlib.NewReader(bytes.NewReader(data))
		if err != nil {
			t.Fatal(err)
		}
		content, err := io.ReadAll(zr)
		if err != nil {
			t.Fatal(err)
		}
		var lines []string
		pending := ""
		for _, m := range show.FindAllSubmatch(content, -1) {
			if m[2] != nil {
				lines = append(lines, pending)
				pending = ""
				continue
			}
			pending = unescapePDF(t, m[1])
		}
		pages = append(pages, lines)
	}
	return pages
}

// unescapePDF reads a PDF literal string's bytes as Windows-1252 text
// (as far as EvidencePDF writes it).
func unescapePDF(t *testing.T, b []byte) string {
	t.Helper()
	var out strings.Builder
	for i := 0; i < len(b); i++ {
		c := b[i]
		if c != '\\' {
			out.WriteRune(rune(c))
			continue
		}
		i++
		if b[i] >= '0' && b[i] <= '7' {
			v, err := strconv.ParseUint(string(b[i:i+3]), 8, 8)
			if err != nil {
				t.Fatal(err)
			}
			out.WriteRune(cp1252(byte(v)))
			i += 2
			continue
		}
		out.WriteByte(b[i])
	}
	return out.String()
}

func cp1252(b byte) rune {
	special := map[byte]rune{0x80: '€', 0x85: '…', 0x91: '‘', 0x92: '’', 0x93: '“', 0x94: '”', 0x96: '–', 0x97: '—'}
	if r, ok := special[b]; ok {
		return r
	}
	return rune(b)
}

// The evidence document is a well-formed PDF whose pages show the
// evidence's lines, wrapped, in order.
func TestEvidencePDF(t *testing.T) {
	ev := map[string]string{
		"uncategorized_text":  "Paid with (test) card \\ ok — “quoted” €5, café, 東京\r\nsecond line\tafter a tab",
		"product_description": strings.Repeat("teapot ", 40),
		"shipping_carrier":    "   ",
		"customer_name":       strings.Repeat("x", adyen.PDFLineChars+5),
	}
	want := []string{
		"Evidence for dispute DZ1", "",
		"Customer name", strings.Repeat("x", adyen.PDFLineChars), "xxxxx", "",
		"Product description",
	}
	line := strings.TrimSpace(strings.Repeat("teapot ", adyen.PDFLineChars/7))
	want = append(want, line, line, strings.TrimSpace(strings.Repeat("teapot ", 40-2*(adyen.PDFLineChars/7))), "",
		"Uncategorized text", "Paid with (test) card \\ ok — “quoted” €5, café, ??", "second line    after a tab")
	if diff := cmp.Diff(want, adyen.EvidenceLines("DZ1", ev)); diff != "" {
		t.Errorf("lines (-want +got):\n%s", diff)
	}
	pages := pdfText(t, adyen.EvidencePDF("DZ1", ev))
	if len(pages) != 1 {
		t.Fatalf("%d pages, want 1", len(pages))
	}
	if diff := cmp.Diff(want, pages[0]); diff != "" {
		t.Errorf("the PDF's text (-want +got):\n%s", diff)
	}

	// The most evidence the gateway takes: 150,000 characters in all.
	big := map[string]string{"uncategorized_text": strings.Repeat("abcdefghi ", 10_000), "access_activity_log": strings.Repeat("203.0.113.7 GET /download\n", 1923)}
	pdf := adyen.EvidencePDF("DZ2", big)
	if len(pdf) > 2<<20 {
		t.Errorf("%d bytes, over Adyen's 2 MB for a PDF", len(pdf))
	}
	pages = pdfText(t, pdf)
	var got []string
	for i, p := range pages {
		if len(p) > adyen.PDFPageLines {
			t.Errorf("page %d has %d lines, at most %d fit", i+1, len(p), adyen.PDFPageLines)
		}
		got = append(got, p...)
	}
	if diff := cmp.Diff(adyen.EvidenceLines("DZ2", big), got); diff != "" {
		t.Errorf("the PDF's text (-want +got):\n%s", diff)
	}
	t.Logf("150,000 characters: %d bytes, %d pages", len(pdf), len(pages))
}
