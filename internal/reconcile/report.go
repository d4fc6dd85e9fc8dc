package reconcile

import (
	"bytes"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/gatehouse-pay/gatehouse/internal/apperr"
	"github.com/gatehouse-pay/gatehouse/internal/money"
	"github.com/gatehouse-pay/gatehouse/internal/providers"
)

// Header is the first line of every settlement report.
const Header = "provider_reference,type,currency,gross,fee,net,available_on"

var columns = strings.Split(Header, ",")

// Bounds of an uploaded report.
const (
	// MaxReportBytes bounds the CSV text (about 7,000 lines).
	MaxReportBytes = 512 << 10
	// MaxLines bounds its lines, the header aside.
	MaxLines = 10_000
	// MaxDays bounds the span of the days it covers.
	MaxDays = 31
	// MaxReferenceLen bounds a provider reference.
	MaxReferenceLen = 255
	// maxAmount bounds an amount's magnitude: no payment is larger.
	maxAmount = 1_000_000_000_000
)

// DateLayout is how reports and the API write a day.
const DateLayout = "2006-01-02"

// Line is one line of a settlement report: a providers.SettlementLine whose
// AvailableOn is its day (midnight UTC), and the line's number in the
// uploaded text (the header is line 1), 0 for a report the provider was
// asked for.
type Line struct {
	providers.SettlementLine
	Row int
}

// Report is a settlement report: its lines, and the days it covers (UTC,
// ascending). Reconciliation compares the gateway's books over exactly
// those days.
type Report struct {
	Dates []time.Time
	Lines []Line
}

// Day is t's day, midnight UTC.
func Day(t time.Time) time.Time {
	y, m, d := t.UTC().Date()
	return time.Date(y, m, d, 0, 0, 0, 0, time.UTC)
}

// ParseDate reads a day written YYYY-MM-DD; param names the parameter in
// the error (parameter_invalid).
func ParseDate(param, s string) (time.Time, error) {
	d, err := time.Parse(DateLayout, s)
	if err != nil {
		return time.Time{}, apperr.Invalid(param, "%s must be a date written YYYY-MM-DD, such as 2026-11-28.", param)
	}
	return d, nil
}

// lineError is the error of a bad line: parameter_invalid on report,
// naming the line.
func lineError(row int, format string, args ...any) error {
	return apperr.Invalid("report", "report line %d: %s", row, fmt.Sprintf(format, args...))
}

// ParseCSV reads an uploaded settlement report: the header, then one line
// per transaction with a provider reference (1 to 255 characters of
// text), a type (charge, refund, dispute, dispute_reversal, payout), an ISO
// 4217 currency, gross, fee and net in signed minor units with net = gross
// - fee, and the day it became available (YYYY-MM-DD). The report covers
// the days its lines name, or, when date is given, that day alone (every
// line must be of it; a report of a day without lines is the header
// alone). Anything else is parameter_invalid on report, naming the line;
// a report over MaxReportBytes, MaxLines or MaxDays too.
func ParseCSV(text string, date *time.Time) (Report, error) {
	if len(text) > MaxReportBytes {
		return Report{}, apperr.Invalid("report", "report is %d bytes; at most %d are taken: split it by day.", len(text), MaxReportBytes)
	}
	if !utf8.ValidString(text) || strings.ContainsRune(text, 0) {
		return Report{}, apperr.Invalid("report", "report must be UTF-8 text.")
	}
	r := csv.NewReader(strings.NewReader(strings.TrimPrefix(text, "\ufeff")))
	r.FieldsPerRecord = -1
	r.ReuseRecord = true
	head, err := r.Read()
	if err != nil || !slices.Equal(trimAll(head), columns) {
		return Report{}, apperr.Invalid("report", "report line 1 must be the header %s.", Header)
	}
	var rep Report
	days := map[time.Time]bool{}
	if date != nil {
		days[*date] = true
	}
	for {
		rec, err := r.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			row := len(rep.Lines) + 2
			var pe *csv.ParseError
			if errors.As(err, &pe) {
				row = pe.StartLine
			}
			return Report{}, lineError(row, "it is not valid CSV.")
		}
		row, _ := r.FieldPos(0)
		if len(rep.Lines) == MaxLines {
			return Report{}, apperr.Invalid("report", "report has more than %d lines: split it by day.", MaxLines)
		}
		l, err := parseLine(row, rec)
		if err != nil {
			return Report{}, err
		}
		if date != nil && !l.AvailableOn.Equal(*date) {
			return Report{}, lineError(row, "available_on %s is not the report's date %s.", l.AvailableOn.Format(DateLayout), date.Format(DateLayout))
		}
		days[l.AvailableOn] = true
		rep.Lines = append(rep.Lines, l)
	}
	if len(days) == 0 {
		return Report{}, apperr.Invalid("report", "report has no lines: give the date it covers.")
	}
	for d := range days {
		rep.Dates = append(rep.Dates, d)
	}
	slices.SortFunc(rep.Dates, func(a, b time.Time) int { return a.Compare(b) })
	if span := rep.Dates[len(rep.Dates)-1].Sub(rep.Dates[0]); span >= MaxDays*24*time.Hour {
		return Report{}, apperr.Invalid("report", "report covers %d days; at most %d are reconciled at once.", int(span.Hours()/24)+1, MaxDays)
	}
	return rep, nil
}

func trimAll(fields []string) []string {
	out := make([]string, len(fields))
	for i, f := range fields {
		out[i] = strings.TrimSpace(f)
	}
	return out
}

// parseLine checks one line of the report.
func parseLine(row int, rec []string) (Line, error) {
	if len(rec) != len(columns) {
		return Line{}, lineError(row, "it has %d fields; want %d (%s).", len(rec), len(columns), Header)
	}
	f := trimAll(rec)
	l := Line{Row: row}
	l.Reference = f[0]
	if l.Reference == "" || len(l.Reference) > MaxReferenceLen || strings.IndexFunc(l.Reference, isControl) >= 0 {
		return Line{}, lineError(row, "provider_reference must be 1 to %d characters of text.", MaxReferenceLen)
	}
	l.Type = f[1]
	if !slices.Contains(providers.SettlementTypes, l.Type) {
		return Line{}, lineError(row, "type must be one of %s.", strings.Join(providers.SettlementTypes, ", "))
	}
	cur, err := money.ParseCurrency(f[2])
	if err != nil {
		return Line{}, lineError(row, "currency must be an ISO 4217 code, such as USD.")
	}
	l.Currency = cur
	amounts := [3]int64{}
	for i, name := range columns[3:6] {
		v, err := strconv.ParseInt(f[3+i], 10, 64)
		if err != nil || v > maxAmount || v < -maxAmount {
			return Line{}, lineError(row, "%s must be an integer amount in minor units, such as -1250.", name)
		}
		amounts[i] = v
	}
	l.Gross, l.Fee, l.Net = amounts[0], amounts[1], amounts[2]
	if l.Net != l.Gross-l.Fee {
		return Line{}, lineError(row, "net %d is not gross %d - fee %d.", l.Net, l.Gross, l.Fee)
	}
	day, err := time.Parse(DateLayout, f[6])
	if err != nil {
		return Line{}, lineError(row, "available_on must be a date written YYYY-MM-DD.")
	}
	l.AvailableOn = day
	return l, nil
}

func isControl(r rune) bool { return r < 0x20 || r == 0x7f }

// CSV writes lines as a settlement report: the header and one line each,
// the day of its AvailableOn (UTC).
func CSV(lines []providers.SettlementLine) []byte {
	var b bytes.Buffer
	w := csv.NewWriter(&b)
	_ = w.Write(columns) // a bytes.Buffer does not fail
	for _, l := range lines {
		_ = w.Write([]string{l.Reference, l.Type, l.Currency, strconv.FormatInt(l.Gross, 10), strconv.FormatInt(l.Fee, 10),
			strconv.FormatInt(l.Net, 10), l.AvailableOn.UTC().Format(DateLayout)})
	}
	w.Flush()
	return b.Bytes()
}
