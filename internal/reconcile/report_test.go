package reconcile

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/gatehouse-pay/gatehouse/internal/apperr"
	"github.com/gatehouse-pay/gatehouse/internal/providers"
)

func day(s string) time.Time {
	d, err := time.Parse(DateLayout, s)
	if err != nil {
		panic(err)
	}
	return d
}

// A report written by CSV reads back the same.
func TestReportRoundTrip(t *testing.T) {
	lines := []providers.SettlementLine{
		{Reference: "sbx_ch_1", Type: "charge", Currency: "USD", Gross: 2000, Fee: 88, Net: 1912, AvailableOn: day("2026-11-28").Add(5 * time.Hour)},
		{Reference: `odd "ref", with a comma`, Type: "refund", Currency: "EUR", Gross: -500, Net: -500, AvailableOn: day("2026-11-29")},
		{Reference: "po_1", Type: "payout", Currency: "USD", Gross: -1912, Net: -1912, AvailableOn: day("2026-11-29")},
	}
	text := string(CSV(lines))
	if !strings.HasPrefix(text, Header+"\n") {
		t.Fatalf("no header: %q", text)
	}
	rep, err := ParseCSV(text, nil)
	if err != nil {
		t.Fatal(err)
	}
	var got []providers.SettlementLine
	for i, l := range rep.Lines {
		if l.Row != i+2 {
			t.Errorf("line %d has row %d", i, l.Row)
		}
		got = append(got, l.SettlementLine)
	}
	lines[0].AvailableOn = day("2026-11-28")
	if d := cmp.Diff(lines, got); d != "" {
		t.Errorf("lines (-want +got):\n%s", d)
	}
	if d := cmp.Diff([]time.Time{day("2026-11-28"), day("2026-11-29")}, rep.Dates); d != "" {
		t.Errorf("dates (-want +got):\n%s", d)
	}
	// 31 days at once are taken.
	if rep, err := ParseCSV(Header+"\nx,charge,USD,1,0,1,2026-11-01\ny,charge,USD,1,0,1,2026-12-01\n", nil); err != nil || len(rep.Dates) != 2 {
		t.Errorf("31 days: %+v, %v", rep, err)
	}
	// A report of a day without lines is its header and its date.
	rep, err = ParseCSV(Header+"\r\n", ptr(day("2026-11-30")))
	if err != nil || len(rep.Lines) != 0 || len(rep.Dates) != 1 {
		t.Errorf("an empty day: %+v, %v", rep, err)
	}
}

func ptr[T any](v T) *T { return &v }

// Every bad report is parameter_invalid on report, naming the line at
// fault.
func TestBadReports(t *testing.T) {
	good := "sbx_ch_1,charge,USD,2000,88,1912,2026-11-28"
	big := Header + "\n" + strings.Repeat(good+"\n", MaxLines+1)
	for _, tc := range []struct {
		name, text string
		date       *time.Time
		want       string // in the message
	}{
		{"empty", "", nil, "line 1 must be the header"},
		{"no header", good + "\n", nil, "line 1 must be the header"},
		{"another header", "reference,type,currency,gross,fee,net,date\n" + good, nil, "line 1 must be the header"},
		{"header only, no date", Header + "\n", nil, "no lines"},
		{"too few fields", Header + "\n" + good + "\nsbx_ch_2,charge,USD,1,0\n", nil, "line 3: it has 5 fields"},
		{"too many fields", Header + "\n" + good + ",x\n", nil, "line 2: it has 8 fields"},
		{"empty reference", Header + "\n,charge,USD,1,0,1,2026-11-28\n", nil, "line 2: provider_reference"},
		{"long reference", Header + "\n" + strings.Repeat("r", 256) + ",charge,USD,1,0,1,2026-11-28\n", nil, "line 2: provider_reference"},
		{"control character", Header + "\n\"a\tb\",charge,USD,1,0,1,2026-11-28\n", nil, "line 2: provider_reference"},
		{"unknown type", Header + "\nx,payout_failure,USD,1,0,1,2026-11-28\n", nil, "line 2: type must be"},
		{"bad currency", Header + "\nx,charge,ZZZ,1,0,1,2026-11-28\n", nil, "line 2: currency"},
		{"decimal amount", Header + "\nx,charge,USD,10.50,0,10.50,2026-11-28\n", nil, "line 2: gross must be an integer"},
		{"amount with a sign and spaces inside", Header + "\nx,charge,USD,1,- 2,3,2026-11-28\n", nil, "line 2: fee must be an integer"},
		{"amount beyond int64", Header + "\nx,charge,USD,1,0,99999999999999999999,2026-11-28\n", nil, "line 2: net must be an integer"},
		{"huge amount", Header + "\nx,charge,USD,1000000000001,0,1000000000001,2026-11-28\n", nil, "line 2: gross must be"},
		{"net not gross - fee", Header + "\nx,charge,USD,2000,88,1900,2026-11-28\n", nil, "line 2: net 1900 is not gross 2000 - fee 88"},
		{"bad date", Header + "\nx,charge,USD,1,0,1,28/11/2026\n", nil, "line 2: available_on"},
		{"impossible date", Header + "\nx,charge,USD,1,0,1,2026-02-30\n", nil, "line 2: available_on"},
		{"another day than the date", Header + "\n" + good + "\nx,charge,USD,1,0,1,2026-11-29\n", ptr(day("2026-11-28")), "line 3: available_on 2026-11-29 is not the report's date"},
		{"unterminated quote", Header + "\n" + good + "\n\"x,charge,USD,1,0,1,2026-11-28\n", nil, "line 3: it is not valid CSV"},
		{"stray quote", Header + "\nx\"y,charge,USD,1,0,1,2026-11-28\n", nil, "line 2: it is not valid CSV"},
		{"NUL", Header + "\nx\x00,charge,USD,1,0,1,2026-11-28\n", nil, "UTF-8 text"},
		{"invalid UTF-8", Header + "\nx\xff,charge,USD,1,0,1,2026-11-28\n", nil, "UTF-8 text"},
		{"too many days", Header + "\nx,charge,USD,1,0,1,2026-11-01\ny,charge,USD,1,0,1,2026-12-02\n", nil, "covers 32 days"},
		{"too many lines", big[:min(len(big), MaxReportBytes)], nil, "more than 10000 lines"},
		{"too many bytes", Header + "\n" + strings.Repeat(good+"\n", MaxReportBytes/len(good)+1), nil, "bytes; at most"},
	} {
		_, err := ParseCSV(tc.text, tc.date)
		e, ok := apperr.As(err)
		if !ok || e.Kind != apperr.KindInvalid || e.Code != apperr.CodeParameterInvalid || e.Param != "report" {
			t.Errorf("%s: %v, want parameter_invalid on report", tc.name, err)
			continue
		}
		if !strings.Contains(e.Message, tc.want) {
			t.Errorf("%s: message %q does not say %q", tc.name, e.Message, tc.want)
		}
	}
}
