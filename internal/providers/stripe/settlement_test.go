package stripe_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/gatehouse-pay/gatehouse/internal/providers"
	"github.com/gatehouse-pay/gatehouse/internal/providers/stripe"
)

// Against stripe-mock: the list is a request Stripe accepts, and its
// fixture (a charge available on 2009-02-13) is read into a line.
func TestSettledAgainstStripeMock(t *testing.T) {
	p := stripe.New(secretKey, stripeMock(t), &http.Client{Timeout: 10 * time.Second})
	day := time.Date(2009, 2, 13, 0, 0, 0, 0, time.UTC)
	lines, err := p.Settled(context.Background(), day, day.Add(24*time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if len(lines) != 1 || lines[0].Type != providers.SettlementCharge || lines[0].Reference == "" || lines[0].Currency != "USD" ||
		lines[0].Net != lines[0].Gross-lines[0].Fee || !lines[0].AvailableOn.Equal(time.Unix(1234567890, 0)) {
		t.Errorf("lines: %+v", lines)
	}
	// Another day has nothing of the fixture.
	if lines, err := p.Settled(context.Background(), day.Add(24*time.Hour), day.Add(48*time.Hour)); err != nil || len(lines) != 0 {
		t.Errorf("the next day: %+v, %v", lines, err)
	}
}

// What Settled asks Stripe for and how it reads the answer: every page,
// the lines of the window only, each type under the reference the gateway
// keeps; and its errors.
func TestSettledReadsEveryPage(t *testing.T) {
	day := time.Date(2026, 11, 27, 0, 0, 0, 0, time.UTC)
	in, before := day.Add(5*time.Hour).Unix(), day.Add(-time.Hour).Unix()
	bt := func(id, typ, category string, amount, fee, available int64, source string) string {
		return fmt.Sprintf(`{"id":%q,"object":"balance_transaction","type":%q,"reporting_category":%q,"amount":%d,"fee":%d,"net":%d,`+
			`"currency":"eur","available_on":%d,"created":%d,"source":%s}`, id, typ, category, amount, fee, amount-fee, available, available, source)
	}
	pages := map[string]string{
		"": `{"object":"list","has_more":true,"data":[` + strings.Join([]string{
			bt("txn_1", "charge", "charge", 2000, 88, in, `{"id":"ch_1","object":"charge","payment_intent":"pi_1"}`),
			bt("txn_2", "payment", "charge", 1000, 59, in, `{"id":"py_2","object":"charge"}`),
			bt("txn_3", "refund", "refund", -500, 0, in, `{"id":"re_3","object":"refund"}`),
			bt("txn_4", "charge", "charge", 700, 50, before, `{"id":"ch_4","object":"charge","payment_intent":"pi_4"}`),
		}, ",") + `]}`,
		"txn_4": `{"object":"list","has_more":false,"data":[` + strings.Join([]string{
			bt("txn_5", "adjustment", "dispute", -2000, 1500, in, `{"id":"dp_5","object":"dispute"}`),
			bt("txn_6", "adjustment", "dispute_reversal", 2000, -1500, in, `{"id":"dp_5","object":"dispute"}`),
			bt("txn_7", "payout", "payout", -1200, 0, in, `{"id":"po_7","object":"payout"}`),
			bt("txn_8", "payout_failure", "payout_reversal", 1200, 0, in, `{"id":"po_7","object":"payout"}`),
			bt("txn_9", "stripe_fee", "fee", -10, 0, in, `null`),
			bt("txn_10", "adjustment", "other_adjustment", -3, 0, in, `{"id":"ia_1","object":"issuing.authorization"}`),
		}, ",") + `]}`,
	}
	var queries []string
	f := newFakeStripe(t, func(w http.ResponseWriter, r *http.Request) {
		queries = append(queries, r.URL.Query().Encode())
		answer(200, pages[r.URL.Query().Get("starting_after")])(w, r)
	})
	p := stripe.New(secretKey, f.URL, nil)
	lines, err := p.Settled(context.Background(), day, day.Add(24*time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	at := time.Unix(in, 0).UTC()
	line := func(ref, typ string, gross, fee int64) providers.SettlementLine {
		return providers.SettlementLine{Reference: ref, Type: typ, Currency: "EUR", Gross: gross, Fee: fee, Net: gross - fee, AvailableOn: at}
	}
	want := []providers.SettlementLine{
		line("pi_1", "charge", 2000, 88), line("py_2", "charge", 1000, 59), line("re_3", "refund", -500, 0),
		line("dp_5", "dispute", -2000, 1500), line("dp_5", "dispute_reversal", 2000, -1500),
		line("po_7", "payout", -1200, 0), line("po_7", "payout", 1200, 0),
	}
	if d := cmp.Diff(want, lines); d != "" {
		t.Errorf("lines (-want +got):\n%s", d)
	}
	seen := f.seen()
	if len(seen) != 2 || seen[0].Method != "GET" || seen[0].Path != "/v1/balance_transactions" {
		t.Fatalf("requests: %+v", seen)
	}
	lookback := day.Add(-stripe.SettlementLookback).Unix()
	for _, part := range []string{fmt.Sprintf("created%%5Bgte%%5D=%d", lookback), fmt.Sprintf("created%%5Blt%%5D=%d", day.Add(24*time.Hour).Unix()),
		"expand%5B0%5D=data.source", "limit=100"} {
		if !strings.Contains(queries[0], part) {
			t.Errorf("the first request %s lacks %s", queries[0], part)
		}
	}

	for _, tc := range []struct {
		status      int
		unavailable bool
	}{{401, false}, {403, false}, {400, false}, {429, true}, {500, true}} {
		f := newFakeStripe(t, answer(tc.status, `{"error":{"type":"invalid_request_error","message":"Invalid API Key provided: `+secretKey+`"}}`))
		_, err := stripe.New(secretKey, f.URL, nil).Settled(context.Background(), day, day.Add(24*time.Hour))
		if err == nil || errors.Is(err, providers.ErrUnavailable) != tc.unavailable || strings.Contains(err.Error(), secretKey) {
			t.Errorf("status %d: %v, want unavailable %v and no key", tc.status, err, tc.unavailable)
		}
	}
}
