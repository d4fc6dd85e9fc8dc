package api_test

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"testing"
	"unicode"

	"github.com/getkin/kin-openapi/openapi3"

	"github.com/gatehouse-pay/gatehouse/internal/testenv"
)

// These tests hold api/openapi.yaml to what client generators need, beyond
// being valid: internal/e2e/sdk_test.go generates the Go and TypeScript clients
// and drives the API with them; these name the rule a change broke at once.

func load(t *testing.T) *openapi3.T {
	t.Helper()
	return testenv.LoadSpec(t).Doc()
}

// operations calls fn for every operation, the callbacks' included.
func operations(doc *openapi3.T, fn func(where string, op *openapi3.Operation)) {
	var walk func(prefix string, paths *openapi3.Paths)
	walk = func(prefix string, paths *openapi3.Paths) {
		for _, path := range paths.InMatchingOrder() {
			for method, op := range paths.Value(path).Operations() {
				where := prefix + method + " " + path
				fn(where, op)
				for name, cb := range op.Callbacks {
					if cb.Value != nil {
						walk(where+" callback "+name+": ", (*openapi3.Paths)(cb.Value))
					}
				}
			}
		}
	}
	walk("", doc.Paths)
}

// TestResponsesNamedWithExample: every response body has a schema of its own
// name in components, so generated clients get a type with a stable name, and
// an example.
func TestResponsesNamedWithExample(t *testing.T) {
	doc := load(t)
	operations(doc, func(where string, op *openapi3.Operation) {
		for status, ref := range op.Responses.Map() {
			resp := ref.Value
			for ct, mt := range resp.Content {
				at := fmt.Sprintf("%s -> %s %s", where, status, ct)
				if mt.Schema == nil || !strings.HasPrefix(mt.Schema.Ref, "#/components/schemas/") {
					t.Errorf("%s: the schema is not a named one ($ref to #/components/schemas)", at)
				}
				if mt.Example == nil && len(mt.Examples) == 0 {
					t.Errorf("%s: no example", at)
				}
			}
		}
	})
}

// TestNoNullInEnums: OpenAPI 3.0 says null with nullable: true; a null inside
// an enum becomes a constant "<nil>" or a generation error.
func TestNoNullInEnums(t *testing.T) {
	doc := load(t)
	seen := map[*openapi3.Schema]bool{}
	var visit func(at string, s *openapi3.SchemaRef)
	visit = func(at string, s *openapi3.SchemaRef) {
		if s == nil || s.Value == nil || seen[s.Value] {
			return
		}
		seen[s.Value] = true
		for _, v := range s.Value.Enum {
			if v == nil {
				t.Errorf("%s: null in enum %v (use nullable: true)", at, s.Value.Enum)
			}
		}
		for name, p := range s.Value.Properties {
			visit(at+"."+name, p)
		}
		visit(at+"[]", s.Value.Items)
		if s.Value.AdditionalProperties.Schema != nil {
			visit(at+"{}", s.Value.AdditionalProperties.Schema)
		}
		for i, group := range []openapi3.SchemaRefs{s.Value.AllOf, s.Value.OneOf, s.Value.AnyOf} {
			for j, b := range group {
				visit(fmt.Sprintf("%s/%s[%d]", at, [...]string{"allOf", "oneOf", "anyOf"}[i], j), b)
			}
		}
	}
	names := make([]string, 0, len(doc.Components.Schemas))
	for name := range doc.Components.Schemas {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		visit(name, doc.Components.Schemas[name])
	}
}

// goName is oapi-codegen's name for an operation id: its first letter upper case.
func goName(id string) string {
	r := []rune(id)
	r[0] = unicode.ToUpper(r[0])
	return string(r)
}

// TestSchemaNamesFreeForGenerators: no schema takes a name oapi-codegen derives
// for an operation (LoginResponse for the client's response of login, and so
// on), which would not compile.
func TestSchemaNamesFreeForGenerators(t *testing.T) {
	doc := load(t)
	derived := map[string]string{}
	operations(doc, func(where string, op *openapi3.Operation) {
		n := goName(op.OperationID)
		for _, suffix := range []string{"Response", "Params", "JSONBody", "JSONRequestBody", "RequestBody", "HTTPResponse"} {
			derived[n+suffix] = where
		}
		for status := range op.Responses.Map() {
			derived[n+status+"JSONResponse"] = where
			derived[n+status+"Response"] = where
		}
	})
	for name := range doc.Components.Schemas {
		if where, ok := derived[goName(name)]; ok {
			t.Errorf("schema %s has the name generators derive for %s", name, where)
		}
	}
}

// TestLoginAnswersSession: login's 200 is the Session schema alone, so a
// client generated before two-factor sign-in still reads its token (a oneOf
// there makes the generated answer a union without one); the second step
// of a two-factor sign-in is the 401 mfa_required, whose error carries the
// challenge.
func TestLoginAnswersSession(t *testing.T) {
	doc := load(t)
	responses := doc.Paths.Value("/v1/auth/login").Post.Responses
	if ref := responses.Value("200").Value.Content.Get("application/json").Schema.Ref; ref != "#/components/schemas/Session" {
		t.Errorf("login's 200 is %q, want #/components/schemas/Session", ref)
	}
	detail := responses.Value("401").Value.Content.Get("application/json").Schema.Value.Properties["error"]
	if detail == nil || detail.Value.Properties["challenge"] == nil || detail.Value.Properties["code"] == nil ||
		!slices.Contains(detail.Value.Properties["code"].Value.Enum, any("mfa_required")) {
		t.Errorf("login's 401 does not document mfa_required with its challenge")
	}
}

// TestEventDiscriminator: Event is told apart by event_type, and every event
// type maps to the schema whose event_type enum holds it.
func TestEventDiscriminator(t *testing.T) {
	doc := load(t)
	event := doc.Components.Schemas["Event"].Value
	d := event.Discriminator
	if d == nil || d.PropertyName != "event_type" {
		t.Fatalf("Event has no discriminator on event_type: %+v", d)
	}
	types := doc.Components.Schemas["EventType"].Value.Enum
	if len(d.Mapping) != len(types) {
		t.Errorf("the discriminator maps %d event types, EventType has %d", len(d.Mapping), len(types))
	}
	for _, v := range types {
		ref, ok := d.Mapping[v.(string)]
		if !ok {
			t.Errorf("event type %s is not in the discriminator's mapping", v)
			continue
		}
		name := strings.TrimPrefix(ref.Ref, "#/components/schemas/")
		branch := doc.Components.Schemas[name]
		if branch == nil {
			t.Errorf("event type %s maps to %s, which is not a schema", v, ref.Ref)
			continue
		}
		et := branch.Value.Properties["event_type"]
		if et == nil || !containsValue(et.Value.Enum, v) {
			t.Errorf("event type %s maps to %s, whose event_type does not take it", v, name)
		}
		if !slicesHasRef(event.OneOf, ref.Ref) {
			t.Errorf("event type %s maps to %s, which is not one of Event's oneOf", v, name)
		}
	}
}

func containsValue(vs []any, v any) bool {
	for _, x := range vs {
		if x == v {
			return true
		}
	}
	return false
}

func slicesHasRef(refs openapi3.SchemaRefs, ref string) bool {
	for _, r := range refs {
		if r.Ref == ref {
			return true
		}
	}
	return false
}
