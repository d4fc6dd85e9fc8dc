package httpapi_test

// The dashboard's disputes: the Disputes page listing the merchant's
// disputes by deadline (those waiting for evidence first, soonest due
// first, a deadline within 72 hours in red; under review next; closed
// ones last), a dispute's page with its evidence form, and the forms that
// stage and submit evidence and accept the dispute, with each role's
// permissions: support stages but does not submit, a viewer does neither,
// an admin submits.

import (
	"context"
	"log/slog"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/gatehouse-pay/gatehouse/internal/authz"
	"github.com/gatehouse-pay/gatehouse/internal/disputes"
	"github.com/gatehouse-pay/gatehouse/internal/ids"
	"github.com/gatehouse-pay/gatehouse/internal/outbox"
	"github.com/gatehouse-pay/gatehouse/internal/store"
)

// noQueue drops the tasks a test's service enqueues: their outbox rows
// stay, and no worker runs.
type noQueue struct{}

func (noQueue) Enqueue(context.Context, outbox.Task) error { return nil }

// disputeMaker opens disputes on a merchant's charges as a provider
// reports them, through disputes.Service.Apply.
type disputeMaker struct {
	t         *testing.T
	h         *harness
	svc       *disputes.Service
	merchant  string
	connector string
}

func (h *harness) disputeMaker(t *testing.T, merchantID, connectorID string) *disputeMaker {
	return &disputeMaker{t: t, h: h, merchant: merchantID, connector: connectorID,
		svc: disputes.NewService(store.New(h.db.Pool), nil, noQueue{}, time.Now, slog.New(slog.DiscardHandler), nil)}
}

// charge writes a captured sandbox charge of amount USD of the
// connector's and returns its id and provider reference.
func (m *disputeMaker) charge(amount int64) (id, reference string) {
	m.t.Helper()
	id, reference = ids.NewUUID(), "sbx_ch_"+ids.NewUUID()
	if _, err := m.h.db.Pool.Exec(context.Background(), `INSERT INTO charges (id, merchant_id, environment, amount, amount_captured,
			currency, status, payment_method, capture, card_brand, card_last4, provider, provider_reference, connector_id, created_at, updated_at)
		VALUES ($1, $2, 'sandbox', $3, $3, 'USD', 'captured', 'card', true, 'visa', '0259', 'sandbox', $4, $5, now() - interval '3 days', now() - interval '3 days')`,
		id, m.merchant, amount, reference, m.connector); err != nil {
		m.t.Fatal(err)
	}
	return id, reference
}

// open reports a dispute of a new charge of amount at stage, its evidence
// due at due, and returns the dispute's id.
func (m *disputeMaker) open(amount int64, reason string, stage disputes.Stage, due time.Time) string {
	m.t.Helper()
	_, ref := m.charge(amount)
	funds := disputes.FundsWithdrawn
	switch {
	case disputes.Inquiry(stage.Status):
		funds = disputes.FundsNone
	case stage.Status == disputes.StatusWon:
		funds = disputes.FundsReinstated
	}
	reference := "sbx_dp_" + ids.NewUUID()
	r := disputes.Report{Reference: reference, PaymentReference: ref, Amount: amount, Currency: "USD", Reason: reason,
		Stage: stage, FundsPhase: funds, DueBy: due.UTC().Truncate(time.Second)}
	res, err := m.svc.Apply(context.Background(), m.merchant, m.connector, "sandbox", r)
	if err != nil || !res.Found || !res.Changed {
		m.t.Fatalf("apply %+v: %+v, %v", r, res, err)
	}
	var id string
	if err := m.h.db.Pool.QueryRow(context.Background(), `SELECT id FROM disputes WHERE provider_reference = $1`, reference).Scan(&id); err != nil {
		m.t.Fatal(err)
	}
	return id
}

// disputeRow is what the database holds of a dispute's answer.
type disputeState struct {
	Status    string
	Evidence  map[string]string
	Submitted bool
	ByUs      bool
}

func (h *harness) disputeState(t *testing.T, id string) disputeState {
	t.Helper()
	var s disputeState
	if err := h.db.Pool.QueryRow(context.Background(), `SELECT status, evidence, evidence_submitted_at IS NOT NULL, closed_by_merchant
		FROM disputes WHERE id = $1`, id).Scan(&s.Status, &s.Evidence, &s.Submitted, &s.ByUs); err != nil {
		t.Fatal(err)
	}
	return s
}

// groupsOf reads the list's group headings, in order.
func groupsOf(body string) []string {
	var out []string
	for _, m := range regexp.MustCompile(`<tr class="group-row" data-group="([a-z]+)">`).FindAllStringSubmatch(body, -1) {
		out = append(out, m[1])
	}
	return out
}

// evidenceForm is the evidence form's fields as the page sends them.
func evidenceForm(action string, fields map[string]string) url.Values {
	f := url.Values{"action": {action}}
	for _, name := range disputes.FieldNames() {
		f.Set("evidence."+name, fields[name])
	}
	return f
}

// TestDashboardDisputeList: the Disputes page lists the merchant's
// disputes by deadline, those waiting for its evidence first (a past due
// one first of all), then those under review, then the closed ones (the
// latest deadline first); a deadline within 72 hours without evidence is
// red. The status filter narrows it, and a long list is paged.
func TestDashboardDisputeList(t *testing.T) {
	t.Parallel()
	h := newHarness(t, paymentsEnv)
	ana := h.merchant("ana@example.com", matrixPassword)
	h.merchant("bob@example.com", matrixPassword)
	conn := h.sandboxConnector(t, ana, "Main sandbox")
	m := h.disputeMaker(t, ana, conn)
	now := time.Now()
	later := m.open(5000, disputes.ReasonFraudulent, disputes.Open, now.Add(5*24*time.Hour+time.Hour))
	soon := m.open(1200, disputes.ReasonProductNotReceived, disputes.Open, now.Add(30*time.Hour+30*time.Minute))
	inquiry := m.open(900, disputes.ReasonGeneral, disputes.InquiryOpen, now.Add(73*time.Hour+30*time.Minute))
	review := m.open(700, disputes.ReasonFraudulent, disputes.Review, now.Add(time.Hour))
	wonOld := m.open(800, disputes.ReasonFraudulent, disputes.Won, now.Add(-20*24*time.Hour))
	lostNew := m.open(600, disputes.ReasonFraudulent, disputes.Lost, now.Add(-2*24*time.Hour))
	overdue := m.open(400, disputes.ReasonFraudulent, disputes.Open, now.Add(-2*time.Hour-30*time.Minute))

	d := h.dashClientSignedIn(t, "ana@example.com")
	p := d.get("/dashboard/disputes")
	if p.status != 200 || !strings.Contains(p.body, `href="/dashboard/disputes" aria-current="page"`) {
		t.Fatalf("the disputes page: %d\n%.2000s", p.status, p.body)
	}
	checkDashboardHeaders(t, "the disputes page", p)
	want := []string{overdue, soon, inquiry, later, review, lostNew, wonOld}
	if got := rowsOf(p.body, "data-dispute"); !cmp.Equal(got, want) {
		t.Errorf("the disputes in order %v, want %v (by deadline: waiting, under review, closed)", got, want)
	}
	if got := groupsOf(p.body); !cmp.Equal(got, []string{"waiting", "review", "closed"}) {
		t.Errorf("the groups %v", got)
	}
	// Red: waiting and due within 72 hours, or past due.
	for id, soon := range map[string]bool{overdue: true, soon: true, inquiry: false, later: false, review: false, lostNew: false} {
		if !strings.Contains(p.body, `data-dispute="`+id+`" data-status="`) ||
			!regexp.MustCompile(`data-dispute="`+id+`"[^>]* data-soon="`+map[bool]string{true: "true", false: "false"}[soon]+`"`).MatchString(p.body) {
			t.Errorf("dispute %s: want data-soon=%v", id, soon)
		}
	}
	for _, s := range []string{`<span class="due-soon" data-left>past due by 2 hours</span>`, `<span class="due-soon" data-left>due in 30 hours</span>`,
		`<span class="muted" data-left>due in 3 days</span>`, `<span class="muted" data-left>due in 5 days</span>`,
		"12.00 USD", "Product not received", `href="/dashboard/charges/`, "Waiting for your evidence", "evidence submitted"} {
		if !strings.Contains(p.body, s) {
			t.Errorf("the disputes page does not show %q", s)
		}
	}
	// The navigation: Money, whose section lists Disputes.
	if !strings.Contains(p.body, `<a href="/dashboard/balance" aria-current="true"`) ||
		!strings.Contains(p.body, `<nav class="subnav" aria-label="Money">`) || !strings.Contains(p.body, `href="/dashboard/reconciliations"`) {
		t.Errorf("the navigation of the disputes page\n%.3000s", p.body)
	}
	if b := d.get("/dashboard/balance"); !strings.Contains(b.body, `<a href="/dashboard/disputes">Disputes</a>`) {
		t.Error("the Balance page's Money section does not link to the disputes")
	}

	// The status filter; an unknown status.
	if r := d.get("/dashboard/disputes?status=needs_response"); !cmp.Equal(rowsOf(r.body, "data-dispute"), []string{overdue, soon, later}) {
		t.Errorf("needs_response: %v", rowsOf(r.body, "data-dispute"))
	}
	if r := d.get("/dashboard/disputes?status=won"); !cmp.Equal(rowsOf(r.body, "data-dispute"), []string{wonOld}) || !strings.Contains(r.body, `<option value="won" selected>`) {
		t.Errorf("won: %v", rowsOf(r.body, "data-dispute"))
	}
	if r := d.get("/dashboard/disputes?status=lost&starting_after=" + lostNew); r.status != 200 || len(rowsOf(r.body, "data-dispute")) != 0 {
		t.Errorf("after the last lost one: %d %v", r.status, rowsOf(r.body, "data-dispute"))
	}
	for _, q := range []string{"?status=closed", "?starting_after=nope"} {
		if r := d.get("/dashboard/disputes" + q); r.status != 400 || !strings.Contains(r.body, `role="alert"`) {
			t.Errorf("%s: %d", q, r.status)
		}
	}

	// Another merchant sees none of them.
	if r := h.dashClientSignedIn(t, "bob@example.com").get("/dashboard/disputes"); r.status != 200 || len(rowsOf(r.body, "data-dispute")) != 0 ||
		!strings.Contains(r.body, "No disputes.") {
		t.Errorf("bob's disputes: %d %v", r.status, rowsOf(r.body, "data-dispute"))
	}

	// More than a page: 25, then the rest, in the same order.
	var more []string
	for i := range 20 {
		more = append(more, m.open(100+int64(i), disputes.ReasonGeneral, disputes.Open, now.Add(time.Duration(10+i)*24*time.Hour)))
	}
	all := append(append(append([]string{overdue, soon, inquiry, later}, more...), review), lostNew, wonOld)
	first := d.get("/dashboard/disputes")
	next := regexp.MustCompile(`<a href="(/dashboard/disputes\?starting_after=dp_[0-9a-v]+)" rel="next" id="next-page">`).FindStringSubmatch(first.body)
	if got := rowsOf(first.body, "data-dispute"); !cmp.Equal(got, all[:25]) || next == nil {
		t.Fatalf("the first page %v, want %v, and a link to the next", got, all[:25])
	}
	second := d.get(next[1])
	if got := rowsOf(second.body, "data-dispute"); !cmp.Equal(got, all[25:]) || !strings.Contains(second.body, `id="first-page"`) ||
		strings.Contains(second.body, `id="next-page"`) {
		t.Errorf("the second page %v, want %v", got, all[25:])
	}
}

// TestDashboardDisputeEvidence: a dispute's page and its forms, role by
// role. Support stages evidence but is refused 403 on submitting it and on
// accepting the dispute, and sees no submit button; a viewer reads the
// evidence and is refused 403 on staging; a field the service refuses
// comes back on the page (400) next to its field; an admin submits, after
// which the evidence is read-only; the owner accepts another dispute. Each
// action is audit-logged as the API's.
func TestDashboardDisputeEvidence(t *testing.T) {
	t.Parallel()
	h := newHarness(t, authzEnv)
	owner := h.merchant("owner@example.com", matrixPassword)
	ownerToken := h.login("owner@example.com", matrixPassword)
	h.merchant("other@example.com", matrixPassword)
	conn := h.sandboxConnector(t, owner, "Main sandbox")
	m := h.disputeMaker(t, owner, conn)
	dp := m.open(2500, disputes.ReasonFraudulent, disputes.Open, time.Now().Add(4*24*time.Hour+time.Hour))
	other := m.open(1800, disputes.ReasonProductNotReceived, disputes.Open, time.Now().Add(6*24*time.Hour))
	supportID, _ := h.teamMember(t, ownerToken, "support@example.com", authz.Support)
	adminID, _ := h.teamMember(t, ownerToken, "admin@example.com", authz.Admin)
	h.teamMember(t, ownerToken, "viewer@example.com", authz.Viewer)
	audited := func(action, actor string) int {
		return h.count(t, `SELECT count(*) FROM audit_log WHERE merchant_id = $1 AND action = $2 AND object_type = 'dispute'
			AND object_id = $3 AND actor_type = 'member' AND actor_id = $4`, owner, action, dp, actor)
	}
	page := "/dashboard/disputes/" + dp

	// The owner's page: the dispute, its deadline, the whole form.
	od := h.dashClientSignedIn(t, "owner@example.com")
	p := od.get(page)
	if p.status != 200 || !strings.Contains(p.body, `id="dispute-status" data-status="needs_response"`) || !strings.Contains(p.body, `id="evidence-form"`) {
		t.Fatalf("the dispute's page: %d\n%.3000s", p.status, p.body)
	}
	checkDashboardHeaders(t, "the dispute's page", p)
	for _, name := range disputes.FieldNames() {
		if !strings.Contains(p.body, `name="evidence.`+name+`"`) {
			t.Errorf("the evidence form has no field %s", name)
		}
	}
	if n := strings.Count(p.body, `name="evidence.`); n != len(disputes.EvidenceFields) {
		t.Errorf("the evidence form has %d fields, want %d", n, len(disputes.EvidenceFields))
	}
	for _, s := range []string{"25.00 USD", "Fraudulent", "due in 4 days", "of 150,000 characters", `id="submit-evidence"`, `id="close-form"`,
		`href="/dashboard/charges/`, "Main sandbox", "25.00 USD and the dispute fee of 15.00 USD are withdrawn", `data-type="dispute"`} {
		if !strings.Contains(p.body, s) {
			t.Errorf("the owner's dispute page does not show %q", s)
		}
	}
	if strings.Contains(p.body, `class="deadline soon"`) {
		t.Error("a deadline 4 days away is shown as due soon")
	}

	// Support: the Money link leads to the disputes (support reads no
	// balance); the form without its submit button.
	sd := h.dashClientSignedIn(t, "support@example.com")
	if c := sd.get("/dashboard/charges"); !strings.Contains(c.body, `<a href="/dashboard/disputes" title="Disputes">Money</a>`) ||
		strings.Contains(c.body, `href="/dashboard/balance"`) {
		t.Errorf("support's navigation\n%.2000s", c.body)
	}
	if l := sd.get("/dashboard/disputes"); l.status != 200 || len(rowsOf(l.body, "data-dispute")) != 2 || strings.Contains(l.body, `href="/dashboard/payouts"`) {
		t.Errorf("support's disputes: %d %v", l.status, rowsOf(l.body, "data-dispute"))
	}
	sp := sd.get(page)
	if sp.status != 200 || !strings.Contains(sp.body, `id="evidence-form"`) || !strings.Contains(sp.body, `id="save-evidence"`) ||
		strings.Contains(sp.body, `id="submit-evidence"`) || !strings.Contains(sp.body, `id="submit-note"`) || strings.Contains(sp.body, `id="close-form"`) ||
		strings.Contains(sp.body, `id="dispute-books"`) {
		t.Errorf("support's dispute page: %d\n%.4000s", sp.status, sp.body)
	}
	staged := map[string]string{"customer_name": "Jenny Rosen", "customer_email_address": "jenny@example.com",
		"product_description": "A blue mug\r\nshipped in a box", "uncategorized_text": "The customer used the product."}
	r := sd.post(page, evidenceForm("save", staged))
	if r.status != 303 || r.location != page+"?notice=evidence_saved" {
		t.Fatalf("support saves evidence: %d to %q\n%.2000s", r.status, r.location, r.body)
	}
	want := map[string]string{"customer_name": "Jenny Rosen", "customer_email_address": "jenny@example.com",
		"product_description": "A blue mug\nshipped in a box", "uncategorized_text": "The customer used the product."}
	if s := h.disputeState(t, dp); s.Status != "needs_response" || s.Submitted || !cmp.Equal(s.Evidence, want) {
		t.Errorf("after support saved: %+v", s)
	}
	if n := audited("dispute.evidence", supportID); n != 1 {
		t.Errorf("%d audit log entries of support's evidence, want 1", n)
	}
	if sp := sd.get(r.location); !strings.Contains(sp.body, `id="notice"`) || !strings.Contains(sp.body, ">Jenny Rosen<") && !strings.Contains(sp.body, `value="Jenny Rosen"`) ||
		!strings.Contains(sp.body, "A blue mug\nshipped in a box</textarea>") || !strings.Contains(sp.body, ">"+strconv.Itoa(disputes.Evidence(want).Chars())+"</span> of 150,000 characters") {
		t.Errorf("the page after saving\n%.6000s", sp.body)
	}
	// Submitting and accepting need write access to disputes: refused.
	for _, tc := range []struct {
		path string
		form url.Values
	}{{page, evidenceForm("submit", staged)}, {page + "/close", nil}} {
		r := sd.post(tc.path, tc.form)
		if r.status != 403 || !strings.Contains(r.body, "permission_denied") || !strings.Contains(r.body, "write access to disputes") {
			t.Errorf("support posts %s %v: %d, want 403 permission_denied\n%.600s", tc.path, tc.form.Get("action"), r.status, r.body)
		}
	}
	if s := h.disputeState(t, dp); s.Status != "needs_response" || s.Submitted || s.ByUs {
		t.Errorf("after support's refused submit and close: %+v", s)
	}

	// A viewer reads the evidence, without a form, and may not stage.
	vd := h.dashClientSignedIn(t, "viewer@example.com")
	vp := vd.get(page)
	if vp.status != 200 || strings.Contains(vp.body, `id="evidence-form"`) || strings.Contains(vp.body, `id="close-form"`) ||
		!strings.Contains(vp.body, `<dd data-field="customer_name">Jenny Rosen</dd>`) {
		t.Errorf("the viewer's dispute page: %d\n%.4000s", vp.status, vp.body)
	}
	if r := vd.post(page, evidenceForm("save", map[string]string{"customer_name": "Mallory"})); r.status != 403 || !strings.Contains(r.body, "permission_denied") {
		t.Errorf("a viewer stages evidence: %d", r.status)
	}

	// Fields the service refuses: 400 on the page, next to the field,
	// with the form as it was sent; nothing saved.
	bad := map[string]string{"customer_name": "Jenny Rosen", "customer_purchase_ip": "300.1.2.3", "uncategorized_text": "typed again"}
	r = sd.post(page, evidenceForm("save", bad))
	if r.status != 400 || !strings.Contains(r.body, `role="alert"`) || !strings.Contains(r.body, "parameter_invalid") ||
		!strings.Contains(r.body, `<p class="field-error" id="evidence-customer_purchase_ip-error">evidence.customer_purchase_ip must be an IPv4 or IPv6 address.</p>`) ||
		!strings.Contains(r.body, `value="300.1.2.3" data-evidence placeholder="IPv4 or IPv6, such as 203.0.113.7" aria-invalid="true"`) ||
		!strings.Contains(r.body, "typed again</textarea>") || !strings.Contains(r.body, `data-canonical="`+page+`"`) {
		t.Errorf("a bad IP address: %d\n%.8000s", r.status, r.body)
	}
	huge := map[string]string{"uncategorized_text": strings.Repeat("é", disputes.MaxEvidenceChars-1), "customer_name": "Jo"}
	r = sd.post(page, evidenceForm("save", huge))
	if r.status != 400 || !strings.Contains(r.body, "The evidence holds 150,001 characters") && !strings.Contains(r.body, "The evidence holds 150001 characters") {
		t.Errorf("too much evidence: %d\n%.1500s", r.status, r.body)
	}
	if s := h.disputeState(t, dp); !cmp.Equal(s.Evidence, want) {
		t.Errorf("refused forms changed the evidence: %+v", s.Evidence)
	}
	// Without the session's CSRF token: refused.
	csrf := sd.csrf
	sd.csrf = "forged"
	if r := sd.post(page, evidenceForm("save", staged)); r.status != 403 || !strings.Contains(r.body, "csrf_token_invalid") {
		t.Errorf("evidence without the CSRF token: %d", r.status)
	}
	sd.csrf = csrf

	// The admin submits, with one more field; the same form again does
	// nothing more. The evidence is then read-only.
	ad := h.dashClientSignedIn(t, "admin@example.com")
	if ap := ad.get(page); !strings.Contains(ap.body, `id="submit-evidence"`) {
		t.Fatalf("the admin's page has no submit button")
	}
	final := map[string]string{"customer_name": "Jenny Rosen", "customer_email_address": "jenny@example.com",
		"product_description": "A blue mug\nshipped in a box", "uncategorized_text": "The customer used the product.", "shipping_date": "2026-11-20"}
	key := ids.NewUUID()
	sub := evidenceForm("submit", final)
	sub.Set("idempotency_key", key)
	r = ad.post(page, sub)
	if r.status != 303 || r.location != page+"?notice=evidence_sent" {
		t.Fatalf("the admin submits: %d to %q\n%.3000s", r.status, r.location, r.body)
	}
	if again := ad.post(page, sub); again.status != 303 || again.location != page+"?notice=already_done" {
		t.Errorf("the same submit again: %d to %q", again.status, again.location)
	}
	if s := h.disputeState(t, dp); s.Status != "under_review" || !s.Submitted || !cmp.Equal(s.Evidence, final) {
		t.Errorf("after the admin submitted: %+v", s)
	}
	if n := audited("dispute.evidence", adminID); n != 1 {
		t.Errorf("%d audit log entries of the admin's submission, want 1", n)
	}
	if n := h.count(t, `SELECT count(*) FROM outbox WHERE task_type = 'dispute:submit'`); n != 1 {
		t.Errorf("%d dispute:submit tasks, want 1", n)
	}
	ap := ad.get(r.location)
	if ap.status != 200 || strings.Contains(ap.body, `id="evidence-form"`) || strings.Contains(ap.body, `id="close-form"`) ||
		!strings.Contains(ap.body, `id="evidence-state" data-submitted="true"`) || !strings.Contains(ap.body, `<dd data-field="shipping_date">2026-11-20</dd>`) ||
		!strings.Contains(ap.body, "A blue mug\nshipped in a box</dd>") || !strings.Contains(ap.body, `data-busy="true"`) ||
		!strings.Contains(ap.body, "Evidence submitted. The worker sends it") {
		t.Errorf("the page after submitting\n%.6000s", ap.body)
	}
	if l := ad.get("/dashboard/disputes"); !cmp.Equal(groupsOf(l.body), []string{"waiting", "review"}) ||
		!cmp.Equal(rowsOf(l.body, "data-dispute"), []string{other, dp}) {
		t.Errorf("the list after submitting: %v %v", groupsOf(l.body), rowsOf(l.body, "data-dispute"))
	}
	// Submitted evidence no longer changes, and the dispute is not
	// accepted any more: 409 on the page.
	for _, tc := range []struct {
		path string
		form url.Values
	}{{page, evidenceForm("save", staged)}, {page + "/close", nil}} {
		r := ad.post(tc.path, tc.form)
		if r.status != 409 || !strings.Contains(r.body, "invalid_state") || !strings.Contains(r.body, `id="dispute-status" data-status="under_review"`) {
			t.Errorf("the admin posts %s after submitting: %d\n%.1000s", tc.path, r.status, r.body)
		}
	}
	if s := h.disputeState(t, dp); !cmp.Equal(s.Evidence, final) || s.ByUs {
		t.Errorf("after the refused forms: %+v", s)
	}

	// The owner accepts the other dispute: lost, by the merchant.
	if op := od.get("/dashboard/disputes/" + other); !strings.Contains(op.body, `id="close-form"`) {
		t.Fatal("the owner's page of the other dispute has no form to accept it")
	}
	r = od.post("/dashboard/disputes/"+other+"/close", nil)
	if r.status != 303 || r.location != "/dashboard/disputes/"+other+"?notice=dispute_closed" {
		t.Fatalf("the owner accepts: %d to %q\n%.2000s", r.status, r.location, r.body)
	}
	if s := h.disputeState(t, other); s.Status != "lost" || !s.ByUs {
		t.Errorf("the accepted dispute: %+v", s)
	}
	if n := h.count(t, `SELECT count(*) FROM audit_log WHERE merchant_id = $1 AND action = 'dispute.close' AND object_id = $2`, owner, other); n != 1 {
		t.Errorf("%d audit log entries of the acceptance, want 1", n)
	}
	if op := od.get(r.location); !strings.Contains(op.body, `id="dispute-status" data-status="lost"`) || !strings.Contains(op.body, "the dispute was accepted") ||
		strings.Contains(op.body, `id="close-form"`) || strings.Contains(op.body, `id="evidence-form"`) {
		t.Errorf("the accepted dispute's page\n%.3000s", op.body)
	}

	// Another merchant's dispute is none of its business: 404.
	xd := h.dashClientSignedIn(t, "other@example.com")
	for _, r := range []dashPage{xd.get(page), xd.post(page, evidenceForm("save", staged)), xd.post(page+"/close", nil)} {
		if r.status != 404 {
			t.Errorf("another merchant on the dispute: %d", r.status)
		}
	}
}
