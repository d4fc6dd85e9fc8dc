package disputes

import (
	"bytes"
	"encoding/json"
	"net/mail"
	"net/netip"
	"sort"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/gatehouse-pay/gatehouse/internal/apperr"
)

// Evidence is the merchant's answer to a dispute: text fields by name
// (EvidenceFields).
type Evidence map[string]string

// MaxEvidenceChars is the most characters the evidence may hold, all
// fields together.
const MaxEvidenceChars = 150_000

// Field kinds.
const (
	kindText  = iota
	kindEmail // an email address
	kindIP    // an IPv4 or IPv6 address
	kindDate  // YYYY-MM-DD
	kindShort // one line, at most 500 characters
)

// EvidenceFields are the evidence's fields (Stripe's text evidence) and
// what each must be.
var EvidenceFields = map[string]int{
	"access_activity_log":            kindText,
	"billing_address":                kindText,
	"cancellation_policy_disclosure": kindText,
	"cancellation_rebuttal":          kindText,
	"customer_communication":         kindText,
	"customer_email_address":         kindEmail,
	"customer_name":                  kindShort,
	"customer_purchase_ip":           kindIP,
	"duplicate_charge_explanation":   kindText,
	"duplicate_charge_id":            kindShort,
	"product_description":            kindText,
	"receipt":                        kindText,
	"refund_policy_disclosure":       kindText,
	"refund_refusal_explanation":     kindText,
	"service_date":                   kindDate,
	"service_documentation":          kindText,
	"shipping_address":               kindText,
	"shipping_carrier":               kindShort,
	"shipping_date":                  kindDate,
	"shipping_documentation":         kindText,
	"shipping_tracking_number":       kindShort,
	"uncategorized_text":             kindText,
}

// FieldNames lists the evidence's fields in order.
func FieldNames() []string {
	names := make([]string, 0, len(EvidenceFields))
	for n := range EvidenceFields {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Test evidence: the sandbox decides a dispute whose uncategorized_text is
// exactly one of these (Stripe's test convention); any other evidence
// leaves it under review.
const (
	WinningEvidence = "winning_evidence"
	LosingEvidence  = "losing_evidence"
)

// ParseEvidence reads the evidence object of a request: an object of
// known fields, each a string (or null, which clears it). Each bad field is
// named in its 400 (param evidence.<field>).
func ParseEvidence(raw json.RawMessage) (map[string]*string, error) {
	if t := bytes.TrimSpace(raw); len(t) == 0 || t[0] != '{' {
		return nil, apperr.Invalid("evidence", "evidence must be an object of text fields.")
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(raw, &fields); err != nil {
		return nil, apperr.Invalid("evidence", "evidence must be an object of text fields.")
	}
	out := make(map[string]*string, len(fields))
	for _, name := range sortedKeys(fields) {
		kind, known := EvidenceFields[name]
		param := "evidence." + name
		if !known {
			return nil, apperr.Invalid(param, "%s is not an evidence field; the fields are %s.", name, strings.Join(FieldNames(), ", "))
		}
		v := bytes.TrimSpace(fields[name])
		if bytes.Equal(v, []byte("null")) {
			out[name] = nil
			continue
		}
		var text string
		if err := json.Unmarshal(v, &text); err != nil {
			return nil, apperr.Invalid(param, "%s must be a string.", param)
		}
		if err := checkField(param, kind, text); err != nil {
			return nil, err
		}
		out[name] = &text
	}
	return out, nil
}

func checkField(param string, kind int, v string) error {
	if v == "" {
		return nil // clears the field
	}
	if !utf8.ValidString(v) || strings.ContainsRune(v, 0) {
		return apperr.Invalid(param, "%s must be valid UTF-8 text.", param)
	}
	switch kind {
	case kindEmail:
		a, err := mail.ParseAddress(v)
		if err != nil || a.Address != v {
			return apperr.Invalid(param, "%s must be an email address.", param)
		}
	case kindIP:
		if _, err := netip.ParseAddr(v); err != nil {
			return apperr.Invalid(param, "%s must be an IPv4 or IPv6 address.", param)
		}
	case kindDate:
		if _, err := time.Parse(time.DateOnly, v); err != nil {
			return apperr.Invalid(param, "%s must be a date, YYYY-MM-DD.", param)
		}
	case kindShort:
		if utf8.RuneCountInString(v) > 500 || strings.ContainsAny(v, "\r\n") {
			return apperr.Invalid(param, "%s must be one line of at most 500 characters.", param)
		}
	}
	return nil
}

// Apply returns e with the fields of change set (nil or "" clears a
// field), or a 400 naming evidence when the result would hold more than
// MaxEvidenceChars characters.
func (e Evidence) Apply(change map[string]*string) (Evidence, error) {
	out := make(Evidence, len(e)+len(change))
	for k, v := range e {
		out[k] = v
	}
	for k, v := range change {
		if v == nil || *v == "" {
			delete(out, k)
		} else {
			out[k] = *v
		}
	}
	if n := out.Chars(); n > MaxEvidenceChars {
		return nil, apperr.Invalid("evidence", "The evidence holds %d characters; at most %d are taken, all fields together.", n, MaxEvidenceChars)
	}
	return out, nil
}

// Chars counts the characters of every field.
func (e Evidence) Chars() int {
	n := 0
	for _, v := range e {
		n += utf8.RuneCountInString(v)
	}
	return n
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
