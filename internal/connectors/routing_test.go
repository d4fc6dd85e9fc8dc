package connectors

import (
	"encoding/json"
	"math"
	"math/rand/v2"
	"reflect"
	"testing"

	"github.com/gatehouse-pay/gatehouse/internal/apperr"
)

func snapOf(cs ...Connector) Snapshot { return Snapshot{Connectors: cs} }

func conn(id, provider string, enabled bool) Connector {
	return Connector{ID: id, Provider: provider, Name: id, Enabled: enabled}
}

func refIDs(refs []Ref) []string {
	out := make([]string, len(refs))
	for i, r := range refs {
		out[i] = r.ID
	}
	return out
}

func ptr[T any](v T) *T { return &v }

func first(int) int { return 0 }

func TestPlanWithoutRouting(t *testing.T) {
	snap := snapOf(conn("conn_off", "sandbox", false), conn("conn_sb", "sandbox", true), conn("conn_st", "stripe", true))
	cases := []struct {
		name string
		in   PlanInput
		want []string
		code string
	}{
		{"default provider's first enabled connector", PlanInput{}, []string{"conn_sb"}, ""},
		{"provider names its first enabled connector", PlanInput{Provider: ptr("stripe")}, []string{"conn_st"}, ""},
		{"connector alone", PlanInput{Connector: ptr("conn_st")}, []string{"conn_st"}, ""},
		{"disabled connector", PlanInput{Connector: ptr("conn_off")}, nil, apperr.CodeParameterInvalid},
		{"unknown connector", PlanInput{Connector: ptr("conn_nope")}, nil, apperr.CodeParameterInvalid},
		{"both", PlanInput{Connector: ptr("conn_st"), Provider: ptr("stripe")}, nil, apperr.CodeParameterInvalid},
	}
	for _, c := range cases {
		got, err := Plan(snap, c.in, "sandbox", 3, first)
		if c.code != "" {
			if apperr.CodeOf(err) != c.code || apperr.KindOf(err) != apperr.KindInvalid {
				t.Errorf("%s: err %v, want %s", c.name, err, c.code)
			}
			continue
		}
		if err != nil || !reflect.DeepEqual(refIDs(got), c.want) {
			t.Errorf("%s: %v %v, want %v", c.name, refIDs(got), err, c.want)
		}
	}
	if _, err := Plan(snapOf(conn("conn_st", "stripe", true)), PlanInput{}, "sandbox", 3, first); apperr.KindOf(err) != apperr.KindConflict {
		t.Errorf("no connector of the default provider: %v, want a conflict", err)
	}
}

func TestPlanRules(t *testing.T) {
	snap := snapOf(conn("conn_a", "sandbox", true), conn("conn_b", "sandbox", true), conn("conn_c", "stripe", true),
		conn("conn_off", "sandbox", false))
	snap.Routing = &Routing{
		Rules: []Rule{
			{If: Condition{Currency: []string{"EUR"}}, Then: Route{Connectors: []string{"conn_b", "conn_a"}}},
			{If: Condition{AmountGTE: ptr(int64(10000)), CardBrand: []string{"amex"}}, Then: Route{Connectors: []string{"conn_c"}}},
			{If: Condition{AmountLTE: ptr(int64(99))}, Then: Route{Connectors: []string{"conn_off", "conn_c"}}},
		},
		Default: Route{Connectors: []string{"conn_a", "conn_b", "conn_c"}},
	}
	cases := []struct {
		in   PlanInput
		max  int
		want []string
	}{
		{PlanInput{Currency: "EUR", Amount: 500, CardBrand: "visa"}, 3, []string{"conn_b", "conn_a"}},
		{PlanInput{Currency: "USD", Amount: 10000, CardBrand: "amex"}, 3, []string{"conn_c"}},
		{PlanInput{Currency: "USD", Amount: 9999, CardBrand: "amex"}, 3, []string{"conn_a", "conn_b", "conn_c"}},
		{PlanInput{Currency: "USD", Amount: 50, CardBrand: "visa"}, 3, []string{"conn_c"}}, // the disabled one is skipped
		{PlanInput{Currency: "USD", Amount: 500, CardBrand: "visa"}, 2, []string{"conn_a", "conn_b"}},
		{PlanInput{Currency: "EUR", Amount: 20000, CardBrand: "amex"}, 3, []string{"conn_b", "conn_a"}}, // first match wins
	}
	for _, c := range cases {
		got, err := Plan(snap, c.in, "sandbox", c.max, first)
		if err != nil || !reflect.DeepEqual(refIDs(got), c.want) {
			t.Errorf("%+v max %d: %v %v, want %v", c.in, c.max, refIDs(got), err, c.want)
		}
	}
	snap.Routing.Default = Route{Connectors: []string{"conn_off"}}
	if _, err := Plan(snap, PlanInput{Currency: "USD", Amount: 500}, "sandbox", 3, first); apperr.KindOf(err) != apperr.KindConflict {
		t.Errorf("route of disabled connectors only: %v, want a conflict", err)
	}
}

// TestSplitHonoursWeights draws 100,000 routes of a 70/20/10 split: each
// connector comes first in its share within half a percentage point, and
// the others follow heaviest first.
func TestSplitHonoursWeights(t *testing.T) {
	r := Route{Split: []Weighted{{"conn_a", 70}, {"conn_b", 20}, {"conn_c", 10}}}
	rng := rand.New(rand.NewPCG(1, 2))
	counts := map[string]int{}
	const n = 100_000
	for range n {
		order := r.order(rng.IntN)
		counts[order[0]]++
		if len(order) != 3 {
			t.Fatalf("order %v: want all three connectors", order)
		}
		switch order[0] {
		case "conn_a":
			if order[1] != "conn_b" {
				t.Fatalf("order %v: fallbacks must be heaviest first", order)
			}
		case "conn_b", "conn_c":
			if order[1] != "conn_a" {
				t.Fatalf("order %v: fallbacks must be heaviest first", order)
			}
		}
	}
	for id, w := range map[string]float64{"conn_a": 0.7, "conn_b": 0.2, "conn_c": 0.1} {
		if got := float64(counts[id]) / n; math.Abs(got-w) > 0.005 {
			t.Errorf("%s first in %.3f of routes, want %.2f", id, got, w)
		}
	}
	// Every draw maps to exactly one connector: the edges of the weights.
	for draw, want := range map[int]string{0: "conn_a", 69: "conn_a", 70: "conn_b", 89: "conn_b", 90: "conn_c", 99: "conn_c"} {
		if got := r.order(func(int) int { return draw })[0]; got != want {
			t.Errorf("draw %d: %s, want %s", draw, got, want)
		}
	}
}

func TestCheckRouting(t *testing.T) {
	snap := snapOf(conn("conn_a", "sandbox", true), conn("conn_b", "stripe", true), conn("conn_off", "sandbox", false))
	bad := []struct {
		name, body, param string
	}{
		{"unknown connector", `{"default":{"connectors":["conn_x"]}}`, "default"},
		{"disabled connector", `{"default":{"connectors":["conn_off"]}}`, "default"},
		{"duplicate", `{"default":{"connectors":["conn_a","conn_a"]}}`, "default"},
		{"empty route", `{"default":{}}`, "default"},
		{"both kinds", `{"default":{"connectors":["conn_a"],"split":[{"connector":"conn_b","weight":1}]}}`, "default"},
		{"zero weight", `{"default":{"split":[{"connector":"conn_a","weight":0}]}}`, "default.split"},
		{"bad currency", `{"rules":[{"if":{"currency":["usdx"]},"then":{"connectors":["conn_a"]}}],"default":{"connectors":["conn_a"]}}`, "rules[0].if.currency"},
		{"bad brand", `{"rules":[{"if":{"card_brand":["visa","diners club"]},"then":{"connectors":["conn_a"]}}],"default":{"connectors":["conn_a"]}}`, "rules[0].if.card_brand"},
		{"amounts crossed", `{"rules":[{"if":{"amount_gte":10,"amount_lte":5},"then":{"connectors":["conn_a"]}}],"default":{"connectors":["conn_a"]}}`, "rules[0].if.amount_gte"},
		{"negative amount", `{"rules":[{"if":{"amount_lte":-1},"then":{"connectors":["conn_a"]}}],"default":{"connectors":["conn_a"]}}`, "rules[0].if"},
		{"bad rule route", `{"rules":[{"if":{},"then":{"connectors":["conn_x"]}}],"default":{"connectors":["conn_a"]}}`, "rules[0].then"},
	}
	for _, c := range bad {
		var r Routing
		if err := json.Unmarshal([]byte(c.body), &r); err != nil {
			t.Fatal(err)
		}
		err := Check(&r, snap)
		e, ok := apperr.As(err)
		if !ok || e.Code != apperr.CodeParameterInvalid || e.Param != c.param {
			t.Errorf("%s: %v, want parameter_invalid on %s", c.name, err, c.param)
		}
	}
	r := Routing{Rules: []Rule{{If: Condition{Currency: []string{"eur"}, CardBrand: []string{"VISA"}}, Then: Route{Split: []Weighted{{"conn_a", 3}, {"conn_b", 1}}}}},
		Default: Route{Connectors: []string{"conn_b", "conn_a"}}}
	if err := Check(&r, snap); err != nil {
		t.Fatalf("a good routing: %v", err)
	}
	if r.Rules[0].If.Currency[0] != "EUR" || r.Rules[0].If.CardBrand[0] != "visa" {
		t.Errorf("not normalized: %+v", r.Rules[0].If)
	}
}

func TestSandboxParams(t *testing.T) {
	cur := &Sandbox{Unavailable: true, DeclineCode: ptr("processing_error"), LatencyMS: 10}
	var p SandboxParams
	if err := json.Unmarshal([]byte(`{"latency_ms": 20}`), &p); err != nil {
		t.Fatal(err)
	}
	got, err := sandboxOf(ProviderSandbox, cur, &p)
	if err != nil || !got.Unavailable || got.DeclineCode == nil || got.LatencyMS != 20 {
		t.Errorf("absent fields must keep their values: %+v %v", got, err)
	}
	p = SandboxParams{}
	if err := json.Unmarshal([]byte(`{"decline_code": null}`), &p); err != nil {
		t.Fatal(err)
	}
	if got, err = sandboxOf(ProviderSandbox, cur, &p); err != nil || got.DeclineCode != nil {
		t.Errorf("null must clear decline_code: %+v %v", got, err)
	}
	for _, body := range []string{`{"latency_ms": 5001}`, `{"latency_ms": -1}`, `{"decline_code": "nope"}`} {
		p = SandboxParams{}
		if err := json.Unmarshal([]byte(body), &p); err != nil {
			t.Fatal(err)
		}
		if _, err := sandboxOf(ProviderSandbox, cur, &p); apperr.KindOf(err) != apperr.KindInvalid {
			t.Errorf("%s: %v, want invalid", body, err)
		}
	}
	if _, err := sandboxOf(ProviderStripe, nil, &SandboxParams{}); apperr.KindOf(err) != apperr.KindInvalid {
		t.Errorf("rehearsal on a stripe connector: %v, want invalid", err)
	}
}
