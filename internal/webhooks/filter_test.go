package webhooks_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/gatehouse-pay/gatehouse/internal/apperr"
	"github.com/gatehouse-pay/gatehouse/internal/webhooks"
)

// TestParseFilter: a good filter is stored with every condition an object of
// operators; a bad one is refused with the param naming its path.
func TestParseFilter(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{`null`, ``},
		{`{}`, ``},
		{`{"data.charge.currency": "USD"}`, `{"data.charge.currency":{"$eq":"USD"}}`},
		{`{"data.charge.amount": {"$gte": 1000, "$lt": 1e6}, "data.charge.currency": {"$in": ["USD", "EUR"]}}`,
			`{"data.charge.amount":{"$gte":1000,"$lt":1e6},"data.charge.currency":{"$in":["USD","EUR"]}}`},
		{`{"data.charge.metadata.order_id": {"$exist": true}}`, `{"data.charge.metadata.order_id":{"$exist":true}}`},
		{`{"data.charge.description": null}`, `{"data.charge.description":{"$eq":null}}`},
	} {
		got, err := webhooks.ParseFilter(json.RawMessage(tc.in))
		if err != nil || string(got) != tc.want {
			t.Errorf("ParseFilter(%s) = %s, %v; want %s", tc.in, got, err, tc.want)
		}
	}
	many := map[string]int{}
	for i := range webhooks.MaxFilterConditions + 1 {
		many["data.n"+strings.Repeat("x", i)] = i
	}
	tooMany, _ := json.Marshal(many)
	for _, tc := range []struct{ in, param string }{
		{`[]`, "filter"},
		{`"USD"`, "filter"},
		{string(tooMany), "filter"},
		{`{"data.charge.currency": {"$like": "US%"}}`, "filter.data.charge.currency"},
		{`{"data.charge.currency": {"currency": "USD"}}`, "filter.data.charge.currency"},
		{`{"data.charge.currency": {}}`, "filter.data.charge.currency"},
		{`{"data.charge.currency": ["USD"]}`, "filter.data.charge.currency"},
		{`{"data.charge.currency": {"$in": []}}`, "filter.data.charge.currency"},
		{`{"data.charge.currency": {"$in": "USD"}}`, "filter.data.charge.currency"},
		{`{"data.charge.currency": {"$in": [{"a": 1}]}}`, "filter.data.charge.currency"},
		{`{"data.charge.amount": {"$gt": true}}`, "filter.data.charge.amount"},
		{`{"data.charge.amount": {"$gt": null}}`, "filter.data.charge.amount"},
		{`{"data.charge.amount": {"$exist": "yes"}}`, "filter.data.charge.amount"},
		{`{"data.charge.currency": {"$eq": "US\u0000D"}}`, "filter.data.charge.currency"},
		{`{"data..currency": "USD"}`, "filter.data..currency"},
		{`{"": "USD"}`, "filter."},
		{`{"data.charge.cur rency": "USD"}`, "filter.data.charge.cur rency"},
		{`{"a.b.c.d.e.f.g.h.i.j.k": 1}`, "filter.a.b.c.d.e.f.g.h.i.j.k"},
	} {
		_, err := webhooks.ParseFilter(json.RawMessage(tc.in))
		var ae *apperr.Error
		if !errors.As(err, &ae) || ae.Kind != apperr.KindInvalid || ae.Param != tc.param {
			t.Errorf("ParseFilter(%s) = %v; want parameter_invalid with param %q", tc.in, err, tc.param)
		}
	}
	if _, err := webhooks.ParseFilter(json.RawMessage(`{"a": "` + strings.Repeat("x", webhooks.MaxFilterBytes) + `"}`)); err == nil {
		t.Error("a filter over MaxFilterBytes was accepted")
	}
}
