package httpapi

import (
	"encoding/json"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gofiber/fiber/v2"

	"github.com/gatehouse-pay/gatehouse/internal/apperr"
	"github.com/gatehouse-pay/gatehouse/internal/authz"
	"github.com/gatehouse-pay/gatehouse/internal/connectors"
	"github.com/gatehouse-pay/gatehouse/internal/disputes"
	"github.com/gatehouse-pay/gatehouse/internal/ledger"
	"github.com/gatehouse-pay/gatehouse/internal/listing"
	"github.com/gatehouse-pay/gatehouse/internal/money"
)

// The dashboard's disputes (docs/disputes.md, "The dashboard"): the Disputes
// page lists the merchant's disputes by deadline, those waiting for its
// evidence first; a dispute's page has the evidence form, which stages the
// evidence (dispute_evidence: write, support included) and submits it
// (disputes: write too, owners and admins), and the form that accepts the
// dispute, through the same disputes.Service as /v1/disputes.

// disputeDueSoon is how close a deadline must be for the pages to show it
// in red while no evidence is submitted: the window of the
// gatehouse_disputes_due_soon alert.
const disputeDueSoon = 72 * time.Hour

// evidenceBodyLimit is the largest body the evidence form's route takes:
// disputes.MaxEvidenceChars characters of up to 4 bytes each, posted as
// multipart/form-data (not percent-encoded), and the form's other fields.
const evidenceBodyLimit = 1 << 20

// evidenceFormPath reports whether p is the evidence form's route,
// /dashboard/disputes/:id.
func evidenceFormPath(p string) bool {
	rest, ok := strings.CutPrefix(p, dashboardPath+"/disputes/")
	return ok && rest != "" && !strings.Contains(rest, "/")
}

// The evidence form's buttons (its "action" field).
const (
	evidenceSave   = "save"
	evidenceSubmit = "submit"
)

// evidenceField is one field of the evidence form: its name in the API,
// its label, the input that takes it and what goes in it.
type evidenceField struct {
	Name  string
	Label string
	// Input is "textarea", or the type of an input: text, email, date.
	Input string
	Hint  string
}

// evidenceInput is a field of the evidence form with its page, for the
// template that renders it.
type evidenceInput struct {
	View  disputeView
	Field evidenceField
}

// evidenceGroup is a part of the evidence form. A group that names
// reasons is folded unless the dispute is of one of them (or the group
// holds evidence); the others are always open.
type evidenceGroup struct {
	Legend  string
	Reasons []string
	Fields  []evidenceField
}

// evidenceGroups are every field of disputes.EvidenceFields, as the form
// groups them (TestDashboardDisputeEvidence finds each on the page).
var evidenceGroups = []evidenceGroup{
	{"The customer", nil, []evidenceField{
		{"customer_name", "Customer's name", "text", ""},
		{"customer_email_address", "Customer's email address", "email", ""},
		{"customer_purchase_ip", "IP address of the purchase", "text", "IPv4 or IPv6, such as 203.0.113.7"},
		{"billing_address", "Billing address", "textarea", ""},
		{"customer_communication", "Communication with the customer", "textarea", "Emails or chats that show the customer knew of the purchase"},
		{"access_activity_log", "Access or activity log", "textarea", "The customer's use of the product or service after the purchase"},
	}},
	{"The product or service", nil, []evidenceField{
		{"product_description", "Product or service description", "textarea", ""},
		{"receipt", "Receipt", "textarea", "What the customer was sent"},
		{"service_date", "Service date", "date", ""},
		{"service_documentation", "Service documentation", "textarea", "Proof that the service was provided"},
	}},
	{"Shipping", []string{disputes.ReasonFraudulent, disputes.ReasonProductNotReceived, "product_unacceptable"}, []evidenceField{
		{"shipping_address", "Shipping address", "textarea", ""},
		{"shipping_carrier", "Carrier", "text", ""},
		{"shipping_tracking_number", "Tracking number", "text", ""},
		{"shipping_date", "Shipping date", "date", ""},
		{"shipping_documentation", "Shipping documentation", "textarea", "Proof of delivery"},
	}},
	{"Refunds and cancellations", []string{"subscription_canceled", "credit_not_processed", "product_unacceptable"}, []evidenceField{
		{"refund_policy_disclosure", "How the refund policy was shown", "textarea", ""},
		{"refund_refusal_explanation", "Why no refund was given", "textarea", ""},
		{"cancellation_policy_disclosure", "How the cancellation policy was shown", "textarea", ""},
		{"cancellation_rebuttal", "Why the subscription was not cancelled", "textarea", ""},
	}},
	{"A duplicate charge", []string{"duplicate"}, []evidenceField{
		{"duplicate_charge_id", "Id of the other charge", "text", ""},
		{"duplicate_charge_explanation", "Why the two charges differ", "textarea", ""},
	}},
	{"Anything else", nil, []evidenceField{
		{"uncategorized_text", "Other evidence", "textarea", ""},
	}},
}

// disputeReasons name the reasons of the sandbox's and Stripe's disputes for
// people; another provider's reason is shown as it comes.
var disputeReasons = map[string]string{
	disputes.ReasonFraudulent:         "Fraudulent",
	disputes.ReasonProductNotReceived: "Product not received",
	disputes.ReasonGeneral:            "General",
	"duplicate":                       "Duplicate",
	"subscription_canceled":           "Subscription canceled",
	"product_unacceptable":            "Product unacceptable",
	"credit_not_processed":            "Credit not processed",
	"unrecognized":                    "Unrecognized",
}

// disputeReason names a dispute's reason for people.
func disputeReason(code string) string {
	if s, ok := disputeReasons[code]; ok {
		return s
	}
	s := strings.ReplaceAll(code, "_", " ")
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}

// deadline is what the pages say of a dispute's evidence deadline.
type deadline struct {
	// Waiting: the dispute waits for the merchant's evidence (it needs a
	// response and none is submitted); Text then says how long is left.
	Waiting bool
	// Soon: waiting, and due within disputeDueSoon (or past due).
	Soon    bool
	Overdue bool
	Text    string
}

// deadlineOf is d's deadline as seen at now.
func deadlineOf(d disputes.Dispute, now time.Time) deadline {
	var dl deadline
	switch {
	case disputes.Closed(d.Status):
		dl.Text = "closed"
		return dl
	case d.EvidenceSubmittedAt != nil || !disputes.NeedsResponse(d.Status):
		dl.Text = "evidence submitted"
		return dl
	}
	dl.Waiting = true
	left := d.EvidenceDueBy.Sub(now)
	dl.Soon = left < disputeDueSoon
	if left < 0 {
		dl.Overdue = true
		dl.Text = "past due by " + span(-left)
		return dl
	}
	dl.Text = "due in " + span(left)
	return dl
}

// span is a duration for people, rounded down: "2 days", "5 hours",
// "40 minutes", "less than a minute".
func span(d time.Duration) string {
	switch {
	case d >= 48*time.Hour:
		return plural(int(d/(24*time.Hour)), "day")
	case d >= 2*time.Hour:
		return plural(int(d/time.Hour), "hour")
	case d >= time.Minute:
		return plural(int(d/time.Minute), "minute")
	}
	return "less than a minute"
}

// thousands writes n (not negative) with thousands separators: 150,000.
func thousands(n int) string {
	s := strconv.Itoa(n)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

// disputeRow is a dispute as the list shows it.
type disputeRow struct {
	disputes.Dispute
	Due deadline
}

// Group is the part of the list the dispute is in: its evidence awaited,
// under review, or closed.
func (r disputeRow) Group() string {
	switch {
	case r.Due.Waiting:
		return "waiting"
	case disputes.Closed(r.Status):
		return "closed"
	}
	return "review"
}

type disputesView struct {
	Disputes []disputeRow
	Statuses []string
	Status   string
	// First links back to the first page from a later one; Next is the
	// next page's link.
	First string
	Next  string
}

func (s *server) disputesPage(c *fiber.Ctx) error {
	ctx, merchant := c.UserContext(), principal(c).MerchantID
	v := disputesView{Statuses: disputes.Statuses, Status: strings.Clone(c.Query("status"))}
	after := strings.Clone(c.Query("starting_after"))
	page, err := s.Disputes.ByDeadline(ctx, merchant, disputes.Filter{Status: v.Status}, after, dashboardPageSize)
	if err != nil {
		return err
	}
	now := s.Disputes.Now()
	for _, d := range page.Items {
		v.Disputes = append(v.Disputes, disputeRow{Dispute: d, Due: deadlineOf(d, now)})
	}
	q := url.Values{}
	if v.Status != "" {
		q.Set("status", v.Status)
	}
	if after != "" {
		v.First = dashboardPath + "/disputes"
		if len(q) > 0 {
			v.First += "?" + q.Encode()
		}
	}
	if page.HasMore && len(page.Items) > 0 {
		q.Set("starting_after", page.Items[len(page.Items)-1].ID)
		v.Next = dashboardPath + "/disputes?" + q.Encode()
	}
	return s.page(c, "disputes", "disputes", "Disputes", v)
}

type disputeView struct {
	Dispute disputes.Dispute
	Due     deadline
	// Connector is the dispute's, nil once deleted.
	Connector *connectors.Connector
	Groups    []evidenceGroup
	// Form is the evidence the form shows: as it was sent when it was
	// refused, else as it is staged.
	Form map[string]string
	// Invalid is the parameter a refusal named (evidence.<field>, or
	// evidence for all of it) and Problem its message.
	Invalid string
	Problem string
	// Chars is how many characters the evidence holds, of MaxChars.
	Chars, MaxChars int
	// Open: the evidence may still change (none submitted, the dispute
	// not closed). CanStage, CanSubmit and CanClose are what the member's
	// role allows besides.
	Open      bool
	CanStage  bool
	CanSubmit bool
	CanClose  bool
	// Books are the balance transactions the dispute booked, for a member
	// who reads the balance (ShowBooks).
	Books     []ledger.Transaction
	ShowBooks bool
}

// FieldError is the message to show next to field name, "" for none.
func (v disputeView) FieldError(name string) string {
	if v.Invalid == "evidence."+name {
		return v.Problem
	}
	return ""
}

// Filled counts the fields of g the form shows with something in them.
func (v disputeView) Filled(g evidenceGroup) int {
	n := 0
	for _, f := range g.Fields {
		if v.Form[f.Name] != "" {
			n++
		}
	}
	return n
}

// Unfolded reports whether the form shows g unfolded: a group for every
// dispute, one for the dispute's reason, one with evidence in it, or the
// one with the field a refusal named.
func (v disputeView) Unfolded(g evidenceGroup) bool {
	if g.Reasons == nil || slices.Contains(g.Reasons, v.Dispute.Reason) || v.Filled(g) > 0 {
		return true
	}
	for _, f := range g.Fields {
		if v.Invalid == "evidence."+f.Name {
			return true
		}
	}
	return false
}

// Submitted are the evidence's fields that hold something, in the form's
// order, for a dispute whose evidence can no longer change.
func (v disputeView) Submitted() []evidenceField {
	var out []evidenceField
	for _, g := range v.Groups {
		for _, f := range g.Fields {
			if v.Dispute.Evidence[f.Name] != "" {
				out = append(out, f)
			}
		}
	}
	return out
}

// StatusNote says what the dispute's status means for the merchant.
func (v disputeView) StatusNote() string {
	d := v.Dispute
	switch d.Status {
	case disputes.StatusWarningNeedsResponse:
		return "An inquiry: the cardholder's bank asks about the charge before it charges it back. No money has moved; answer it with evidence before the deadline, or accept it."
	case disputes.StatusNeedsResponse:
		return "The cardholder's bank charged the amount back. Answer with evidence before the deadline to win it back, or accept the dispute."
	case disputes.StatusWarningUnderReview, disputes.StatusUnderReview:
		return "The evidence is submitted: the provider decides the dispute."
	case disputes.StatusWon:
		return "Won: the disputed amount came back to your balance; the dispute fee did not."
	case disputes.StatusLost:
		if d.ClosedByMerchant {
			return "Lost: the dispute was accepted. The disputed amount and the dispute fee stay withdrawn."
		}
		return "Lost: the disputed amount and the dispute fee stay withdrawn."
	case disputes.StatusWarningClosed:
		if d.ClosedByMerchant {
			return "The inquiry was accepted and is closed; no money moved."
		}
		return "The inquiry is closed; no money moved."
	}
	return ""
}

// Funds says what the dispute moved in the balance.
func (v disputeView) Funds() string {
	d := v.Dispute
	amount, fee := money.Format(d.Amount, d.Currency), money.Format(d.Fee, d.Currency)
	switch p := d.FundsPhase; {
	case p == disputes.FundsNone:
		return "Nothing has moved."
	case disputes.Withdrawn(p) && d.Fee > 0:
		return amount + " and the dispute fee of " + fee + " are withdrawn from the balance."
	case disputes.Withdrawn(p):
		return amount + " is withdrawn from the balance."
	case d.Fee > 0:
		return amount + " came back to the balance; the dispute fee of " + fee + " did not."
	}
	return amount + " came back to the balance."
}

func (s *server) disputePage(c *fiber.Ctx) error {
	return s.renderDisputePage(c, fiber.StatusOK, id(c), nil, nil)
}

// renderDisputePage is a dispute's page. An evidence form that was refused
// comes back with the evidence as it was sent (sent) and why, next to the
// field it names.
func (s *server) renderDisputePage(c *fiber.Ctx, status int, disputeID string, sent map[string]string, fail *apperr.Error) error {
	ctx, merchant := c.UserContext(), principal(c).MerchantID
	d, err := s.Disputes.Get(ctx, merchant, disputeID)
	if err != nil {
		return err
	}
	view, err := s.signedIn(c, "disputes", "Dispute "+d.ID)
	if err != nil {
		return err
	}
	v := disputeView{Dispute: d, Due: deadlineOf(d, s.Disputes.Now()), Groups: evidenceGroups, Form: map[string]string(d.Evidence),
		Chars: d.Evidence.Chars(), MaxChars: disputes.MaxEvidenceChars,
		Open:     d.EvidenceSubmittedAt == nil && !disputes.Closed(d.Status),
		CanStage: view.Can(string(authz.DisputeEvidence), "write"), CanSubmit: view.Can(string(authz.Disputes), "write")}
	v.CanClose = v.CanSubmit
	if sent != nil {
		v.Form = sent
		v.Chars = disputes.Evidence(sent).Chars()
	}
	if fail != nil {
		view.Error, view.ErrorCode = fail.Message, fail.Code
		v.Invalid, v.Problem = fail.Param, fail.Message
	}
	if cn, err := s.Connectors.Get(ctx, merchant, d.ConnectorID); err == nil {
		v.Connector = &cn
	} else if apperr.KindOf(err) != apperr.KindNotFound {
		return err
	}
	if v.ShowBooks = view.Can(string(authz.Balance), "read"); v.ShowBooks {
		books, err := s.Ledger.Transactions(ctx, merchant, ledger.Filter{Source: d.ID}, listing.Params{Limit: 10})
		if err != nil {
			return err
		}
		v.Books = books.Items
	}
	view.Data = v
	base := dashboardPath + "/disputes/" + d.ID
	if c.Method() != fiber.MethodGet || c.Query("notice") != "" {
		// The answer to a form, or a reload after one: the page's own
		// address, without the notice.
		view.Canonical = base
	}
	// Evidence submitted: the page reloads itself until the provider's
	// answer arrives, while the dispute is under review.
	view.Busy = d.EvidenceSubmittedAt != nil && !disputes.Closed(d.Status) && s.Disputes.Now().Sub(*d.EvidenceSubmittedAt) < disputeBusyFor
	return s.render(c, status, "dispute", view)
}

// disputeBusyFor is how long after evidence is submitted a dispute's page
// reloads itself, waiting for the provider's decision (the sandbox decides
// test evidence within a minute by default; a real provider takes weeks,
// and the page stops reloading).
const disputeBusyFor = 2 * time.Minute

// evidenceOf reads the evidence form: every field, as sent (line breaks as
// \n), and the change it makes as the API's evidence object, in which an
// empty field clears the field.
func evidenceOf(c *fiber.Ctx) (map[string]string, json.RawMessage, error) {
	sent := map[string]string{}
	change := map[string]*string{}
	for _, name := range disputes.FieldNames() {
		v := strings.ReplaceAll(form(c, "evidence."+name), "\r\n", "\n")
		change[name] = nil
		if v != "" {
			sent[name] = v
			change[name] = &v
		}
	}
	raw, err := json.Marshal(change)
	if err != nil {
		return nil, nil, apperr.Internal(err)
	}
	return sent, raw, nil
}

// dashUpdateDispute stages the evidence form's evidence ("Save evidence")
// or submits it ("Submit evidence"), as POST /v1/disputes/:id, with the
// form's idempotency key. Submitting needs write access to disputes as
// well as to dispute_evidence, as the API's route. Evidence the service
// refuses (a field it cannot take, too much of it, a dispute that takes
// none any more) shows the page again with the reason and the form as it
// was sent.
func (s *server) dashUpdateDispute(c *fiber.Ctx) error {
	disputeID, action := id(c), form(c, "action")
	if action != evidenceSubmit {
		action = evidenceSave
	}
	submit := action == evidenceSubmit
	if n := write(authz.Disputes); submit && !principal(c).Allows(n) {
		return authz.Denied(n)
	}
	sent, raw, err := evidenceOf(c)
	if err != nil {
		return err
	}
	idem, err := s.formIdem(c, action, string(raw))
	if err != nil {
		return err
	}
	p := disputes.UpdateParams{Evidence: raw, Submit: &submit}
	_, replayed, err := s.Disputes.Update(c.UserContext(), principal(c).MerchantID, disputeID, p, idem, renderDispute)
	if err != nil {
		ae, ok := apperr.As(err)
		if !ok || ae.Kind != apperr.KindInvalid && ae.Code != apperr.CodeInvalidState {
			return err
		}
		return s.renderDisputePage(c, statusOf[ae.Kind], disputeID, sent, ae)
	}
	notice := "evidence_saved"
	if submit {
		notice = "evidence_sent"
	}
	return redirectNotice(c, dashboardPath+"/disputes/"+disputeID, doneOr(replayed, notice))
}

// dashCloseDispute accepts the dispute, as POST /v1/disputes/:id/close,
// with the form's idempotency key. A dispute that can no longer be
// accepted (closed, or its evidence submitted) shows the page again with
// the reason.
func (s *server) dashCloseDispute(c *fiber.Ctx) error {
	disputeID := id(c)
	idem, err := s.formIdem(c)
	if err != nil {
		return err
	}
	_, replayed, err := s.Disputes.Close(c.UserContext(), principal(c).MerchantID, disputeID, idem, renderDispute)
	if err != nil {
		ae, ok := apperr.As(err)
		if !ok || ae.Code != apperr.CodeInvalidState {
			return err
		}
		return s.renderDisputePage(c, statusOf[ae.Kind], disputeID, nil, ae)
	}
	return redirectNotice(c, dashboardPath+"/disputes/"+disputeID, doneOr(replayed, "dispute_closed"))
}
