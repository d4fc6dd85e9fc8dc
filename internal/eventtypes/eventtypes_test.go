package eventtypes

import (
	"bytes"
	"encoding/json"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/gatehouse-pay/gatehouse/internal/charges"
	"github.com/gatehouse-pay/gatehouse/internal/events"
	"github.com/gatehouse-pay/gatehouse/internal/webhooks"
)

// compile compiles a schema with the 2020-12 validator, refusing any
// reference that is not local: the compiler has no loader at all.
func compile(t *testing.T, name string, schema []byte) *jsonschema.Schema {
	t.Helper()
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(schema))
	if err != nil {
		t.Fatalf("%s: the schema is not JSON: %v", name, err)
	}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	c.UseLoader(jsonschema.SchemeURLLoader{})
	url := "urn:gatehouse:event-type:" + name
	if err := c.AddResource(url, doc); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	s, err := c.Compile(url)
	if err != nil {
		t.Fatalf("%s: the schema does not compile as 2020-12: %v", name, err)
	}
	return s
}

func validate(s *jsonschema.Schema, body []byte) error {
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(body))
	if err != nil {
		return err
	}
	return s.Validate(v)
}

// TestCatalogue: Types and Known follow Catalogue; every type has a
// description of one line, a known object and a schema of its own.
func TestCatalogue(t *testing.T) {
	var names []string
	for _, d := range events.Catalogue {
		names = append(names, d.Name)
		if d.Description == "" || strings.ContainsAny(d.Description, "\n") || strings.HasSuffix(d.Description, ".") {
			t.Errorf("%s: description %q: want one line without a final period", d.Name, d.Description)
		}
		switch d.Object {
		case events.ObjectCharge, events.ObjectRefund, events.ObjectPayout, events.ObjectDispute, events.ObjectWebhookEndpoint:
		default:
			t.Errorf("%s: object %q", d.Name, d.Object)
		}
		if !events.Known(d.Name) {
			t.Errorf("Known(%q) is false", d.Name)
		}
	}
	if !slices.Equal(events.Types, names) {
		t.Errorf("events.Types %v\nis not the catalogue's %v", events.Types, names)
	}
	if len(slices.Compact(slices.Sorted(slices.Values(names)))) != len(names) {
		t.Errorf("a type is listed twice: %v", names)
	}
	if events.Known("charge.made_up") {
		t.Error("Known accepts a made-up type")
	}
}

// TestSchemasCompile: every schema is valid 2020-12 with local references
// only, names its type and fixes event_type and data.object.
func TestSchemasCompile(t *testing.T) {
	list, err := List()
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != len(events.Catalogue) {
		t.Fatalf("%d entries, want %d", len(list), len(events.Catalogue))
	}
	for i, et := range list {
		d := events.Catalogue[i]
		compile(t, et.Name, et.Schema)
		var s map[string]any
		if err := json.Unmarshal(et.Schema, &s); err != nil {
			t.Fatal(err)
		}
		if s["$schema"] != Draft || s["title"] != d.Name || s["description"] != d.Description {
			t.Errorf("%s: $schema %v, title %v, description %v", d.Name, s["$schema"], s["title"], s["description"])
		}
		props := s["properties"].(map[string]any)
		if got := props["event_type"].(map[string]any)["const"]; got != d.Name {
			t.Errorf("%s: event_type const %v", d.Name, got)
		}
		data := props["data"].(map[string]any)
		if got := data["properties"].(map[string]any)["object"].(map[string]any)["const"]; got != d.Object {
			t.Errorf("%s: data.object const %v, want %s", d.Name, got, d.Object)
		}
		if want := append([]any{"object"}, anys(d.Data())...); !reflect.DeepEqual(data["required"], want) {
			t.Errorf("%s: data requires %v, want %v", d.Name, data["required"], want)
		}
		for _, ref := range refs(s) {
			name, ok := strings.CutPrefix(ref, "#/$defs/")
			if !ok || s["$defs"].(map[string]any)[name] == nil {
				t.Errorf("%s: $ref %q is not one of its own $defs", d.Name, ref)
			}
		}
	}
}

func anys(ss []string) []any {
	out := make([]any, len(ss))
	for i, s := range ss {
		out[i] = s
	}
	return out
}

// refs lists every "$ref" in a decoded schema.
func refs(v any) []string {
	var out []string
	switch v := v.(type) {
	case map[string]any:
		for k, x := range v {
			if s, ok := x.(string); ok && k == "$ref" {
				out = append(out, s)
			}
			out = append(out, refs(x)...)
		}
	case []any:
		for _, x := range v {
			out = append(out, refs(x)...)
		}
	}
	return out
}

// TestExamplesValidate: every example, and the sample a test delivery
// sends (fresh ids, now), validates against its type's schema; the
// examples are the same on every call.
func TestExamplesValidate(t *testing.T) {
	list, err := List()
	if err != nil {
		t.Fatal(err)
	}
	again, err := List()
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(list, again) {
		t.Error("two calls of List differ: the examples are not fixed")
	}
	sample := webhooks.SampleEvent("mer_06h21dscqtupdc4b6fl6b6lb3o", "sandbox")
	for _, et := range list {
		s := compile(t, et.Name, et.Schema)
		if err := validate(s, et.Example); err != nil {
			t.Errorf("%s: the example does not validate: %v\n%s", et.Name, err, et.Example)
		}
		var ex struct {
			EventType string `json:"event_type"`
		}
		if err := json.Unmarshal(et.Example, &ex); err != nil || ex.EventType != et.Name {
			t.Errorf("%s: the example is of type %q (%v)", et.Name, ex.EventType, err)
		}
		ev, err := sample(et.Name, time.Now())
		if err != nil {
			t.Fatalf("%s: sample: %v", et.Name, err)
		}
		if err := validate(s, ev.Body); err != nil {
			t.Errorf("%s: the test delivery's sample does not validate: %v\n%s", et.Name, err, ev.Body)
		}
	}
}

// TestSchemasRefuse: each schema refuses a body of another type, another
// object, a member data does not carry, a missing member, a null where the
// Go type has none, and an unknown property of a resource.
func TestSchemasRefuse(t *testing.T) {
	list, err := List()
	if err != nil {
		t.Fatal(err)
	}
	for _, et := range list {
		s := compile(t, et.Name, et.Schema)
		d, _ := events.Lookup(et.Name)
		member := d.Data()[len(d.Data())-1]
		spoil := map[string]func(b map[string]any){
			"another type":      func(b map[string]any) { b["event_type"] = otherType(et.Name) },
			"another object":    func(b map[string]any) { data(b)["object"] = "customer" },
			"a member too many": func(b map[string]any) { data(b)["customer"] = map[string]any{} },
			"a member missing":  func(b map[string]any) { delete(data(b), member) },
			"a null id":         func(b map[string]any) { data(b)[member].(map[string]any)["id"] = nil },
			"an unknown field":  func(b map[string]any) { data(b)[member].(map[string]any)["surprise"] = 1 },
			"a string amount": func(b map[string]any) {
				if d.Object == events.ObjectWebhookEndpoint {
					data(b)[member].(map[string]any)["active"] = "true"
				} else {
					data(b)[member].(map[string]any)["amount"] = "2000"
				}
			},
			"no created_at": func(b map[string]any) { delete(b, "created_at") },
		}
		if d.Object == events.ObjectRefund {
			spoil["no charge"] = func(b map[string]any) { delete(data(b), "charge") }
		}
		for what, change := range spoil {
			var b map[string]any
			if err := json.Unmarshal(et.Example, &b); err != nil {
				t.Fatal(err)
			}
			change(b)
			body, err := json.Marshal(b)
			if err != nil {
				t.Fatal(err)
			}
			if validate(s, body) == nil {
				t.Errorf("%s: the schema accepts the example with %s: %s", et.Name, what, body)
			}
		}
	}
}

func data(b map[string]any) map[string]any { return b["data"].(map[string]any) }

func otherType(name string) string {
	if name == events.ChargeCreated {
		return events.ChargeCaptured
	}
	return events.ChargeCreated
}

// TestGeneratorRules: the generator follows encoding/json: tags, omitempty,
// null for pointers, maps, raw JSON, embedded structs; and refuses a type
// it cannot follow.
func TestGeneratorRules(t *testing.T) {
	type Inner struct {
		N int `json:"n"`
	}
	type Base struct {
		Kind string `json:"kind"`
	}
	type Outer struct {
		Base
		Name     string            `json:"name"`
		Note     *string           `json:"note"`
		Opt      *Inner            `json:"opt,omitempty"`
		Ptr      *Inner            `json:"ptr"`
		List     []Inner           `json:"list"`
		Tags     map[string]string `json:"tags"`
		Free     map[string]any    `json:"free"`
		Raw      json.RawMessage   `json:"raw"`
		Count    int64             `json:"count,omitempty"`
		Skipped  string            `json:"-"`
		internal string
		Status   *string `json:"status"`
	}
	g := newGenerator(map[string][]string{"Outer.status": {"on", "off"}})
	s, err := g.object(reflect.TypeFor[Outer]())
	if err != nil {
		t.Fatal(err)
	}
	s.Defs = g.defs
	got, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	const want = `{"type":"object","properties":{"kind":{"type":"string"},"name":{"type":"string"},` +
		`"note":{"type":["string","null"]},"opt":{"$ref":"#/$defs/Inner"},` +
		`"ptr":{"anyOf":[{"$ref":"#/$defs/Inner"},{"type":"null"}]},"list":{"type":"array","items":{"$ref":"#/$defs/Inner"}},` +
		`"tags":{"type":"object","additionalProperties":{"type":"string"}},"free":{"type":"object"},"raw":{},` +
		`"count":{"type":"integer"},"status":{"type":["string","null"],"enum":["on","off",null]}},` +
		`"required":["kind","name","note","ptr","list","tags","free","raw","status"],"additionalProperties":false,` +
		`"$defs":{"Inner":{"type":"object","properties":{"n":{"type":"integer"}},"required":["n"],"additionalProperties":false}}}`
	if string(got) != want {
		t.Errorf("got  %s\nwant %s", got, want)
	}
	_ = Outer{}.internal

	type WithChannel struct {
		C chan int `json:"c"`
	}
	if _, err := newGenerator(nil).object(reflect.TypeFor[WithChannel]()); err == nil || !strings.Contains(err.Error(), "WithChannel.C") {
		t.Errorf("a channel field: %v, want an error naming WithChannel.C", err)
	}
	type WithMarshaler struct {
		Charge charges.Charge `json:"charge"`
	}
	if _, err := newGenerator(nil).object(reflect.TypeFor[WithMarshaler]()); err == nil || !strings.Contains(err.Error(), "MarshalJSON") {
		t.Errorf("a field with its own MarshalJSON: %v, want an error saying so", err)
	}
}
