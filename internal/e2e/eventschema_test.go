package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/gatehouse-pay/gatehouse/internal/events"
	"github.com/gatehouse-pay/gatehouse/internal/eventtypes"
	"github.com/gatehouse-pay/gatehouse/internal/resource"
)

// eventSchemas are the schemas GET /v1/event_types serves, by type,
// compiled once per test binary from the catalogue the binaries are built
// from (internal/eventtypes) with the 2020-12 validator. The compiler has
// no loader: a reference outside the schema fails the compilation.
var eventSchemas = sync.OnceValues(func() (map[string]*jsonschema.Schema, error) {
	list, err := eventtypes.List()
	if err != nil {
		return nil, err
	}
	out := map[string]*jsonschema.Schema{}
	for _, et := range list {
		s, err := compileEventSchema(et.Name, et.Schema)
		if err != nil {
			return nil, err
		}
		out[et.Name] = s
	}
	return out, nil
})

// compileEventSchema compiles one event type's schema.
func compileEventSchema(name string, schema []byte) (*jsonschema.Schema, error) {
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(schema))
	if err != nil {
		return nil, fmt.Errorf("the schema of %s: %w", name, err)
	}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	c.UseLoader(jsonschema.SchemeURLLoader{})
	url := "urn:gatehouse:event-type:" + name
	if err := c.AddResource(url, doc); err != nil {
		return nil, fmt.Errorf("the schema of %s: %w", name, err)
	}
	s, err := c.Compile(url)
	if err != nil {
		return nil, fmt.Errorf("the schema of %s: %w", name, err)
	}
	return s, nil
}

// checkEventBody fails the test unless body is an event of a type the
// catalogue lists that validates against that type's schema. It reports
// with t.Errorf, so a receiver's goroutine may call it.
func checkEventBody(t testing.TB, body []byte) {
	t.Helper()
	if err := eventBodyProblem(body); err != nil {
		t.Errorf("event body: %v\n%s", err, truncateBody(body))
	}
}

// eventBodyProblem says why body is not a valid event, or nil.
func eventBodyProblem(body []byte) error {
	schemas, err := eventSchemas()
	if err != nil {
		return fmt.Errorf("the event schemas: %w", err)
	}
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("not JSON: %w", err)
	}
	m, _ := v.(map[string]any)
	typ, _ := m["event_type"].(string)
	s, ok := schemas[typ]
	if !ok {
		return fmt.Errorf("event_type %q is not in GET /v1/event_types", typ)
	}
	if err := s.Validate(v); err != nil {
		return fmt.Errorf("does not validate against the schema of %s: %w", typ, err)
	}
	return nil
}

func truncateBody(b []byte) string {
	if len(b) > 2000 {
		return string(b[:2000]) + "..."
	}
	return string(b)
}

// checkEventReads validates the events an answer of GET /v1/events or
// GET /v1/events/{id} carries; other exchanges are left alone. stack.check
// calls it for every exchange.
func checkEventReads(t testing.TB, e exchange) {
	t.Helper()
	if e.req == nil || e.resp == nil || e.req.Method != http.MethodGet || e.status() != http.StatusOK {
		return
	}
	path := e.req.URL.Path
	switch {
	case path == "/v1/events":
		var list struct {
			Data []json.RawMessage `json:"data"`
		}
		if err := json.Unmarshal(e.body, &list); err != nil {
			t.Errorf("GET /v1/events: %v", err)
			return
		}
		for _, ev := range list.Data {
			checkEventBody(t, ev)
		}
	case strings.HasPrefix(path, "/v1/events/") && path != "/v1/events/stream":
		checkEventBody(t, e.body)
	}
}

// TestEventTypes: GET /v1/event_types of the real binaries lists every
// event type once, in the catalogue's order, and is exactly the Go
// catalogue (internal/eventtypes) on both replicas; each schema compiles
// as 2020-12 with local references only and its example validates against
// it; the answer may be cached. Without a key it is 401; a publishable key
// gets the API's refusal of one on a secret-key route.
func TestEventTypes(t *testing.T) {
	parallel(t)
	st := newStack(t, stackOptions{}, "event types")
	c := newClient(t, "127.0.0.201")
	_, token := st.signUp(t, c, "event-types", "Event Types")
	key := st.newKey(t, c, token, "catalogue")

	want, err := eventtypes.List()
	if err != nil {
		t.Fatal(err)
	}
	var first []byte
	for i, base := range st.replicas {
		e := st.do(t, c, http.MethodGet, base+"/v1/event_types", key.SecretKey, "")
		mustExpect(t, e, http.StatusOK, "")
		if cc := e.header("Cache-Control"); !strings.Contains(cc, "max-age=") || strings.Contains(cc, "no-store") {
			t.Errorf("api-%d: Cache-Control %q, want a max-age", i+1, cc)
		}
		if first == nil {
			first = e.body
		} else if !bytes.Equal(first, e.body) {
			t.Errorf("the replicas answer differently:\n%s\n%s", truncateBody(first), truncateBody(e.body))
		}
		var got resource.List[resource.EventType]
		decode(t, e, &got)
		if got.Object != "list" || got.HasMore || len(got.Data) != len(events.Types) {
			t.Fatalf("api-%d: object %q, has_more %v, %d types; want a whole list of %d", i+1, got.Object, got.HasMore, len(got.Data), len(events.Types))
		}
		for j, et := range got.Data {
			if et.Name != events.Types[j] {
				t.Errorf("api-%d: entry %d is %s, want %s", i+1, j, et.Name, events.Types[j])
			}
			w := want[j]
			if et.Name != w.Name || et.Description != w.Description || et.Deprecated != w.Deprecated ||
				!sameJSON(et.Schema, w.Schema) || !sameJSON(et.Example, w.Example) {
				t.Errorf("api-%d: %s is not the Go catalogue's entry:\n%+v\nwant\n%+v", i+1, et.Name, et, w)
			}
			s, err := compileEventSchema(et.Name, et.Schema)
			if err != nil {
				t.Errorf("api-%d: %v", i+1, err)
				continue
			}
			v, err := jsonschema.UnmarshalJSON(bytes.NewReader(et.Example))
			if err != nil {
				t.Errorf("api-%d: %s: the example is not JSON: %v", i+1, et.Name, err)
				continue
			}
			if err := s.Validate(v); err != nil {
				t.Errorf("api-%d: %s: the example does not validate against the schema: %v", i+1, et.Name, err)
			}
		}
	}

	expect(t, st.do(t, c, http.MethodGet, st.replicas[0]+"/v1/event_types", "", ""), http.StatusUnauthorized, "missing_authorization")
	expect(t, st.do(t, c, http.MethodGet, st.replicas[1]+"/v1/event_types", key.PublicKey, ""), http.StatusUnauthorized, "invalid_token_type")
}

// TestEventBodyCheck: the check the receivers and readers call passes the
// catalogue's examples and refuses a body of an unknown type, one that is
// not JSON, and one whose data does not match its type.
func TestEventBodyCheck(t *testing.T) {
	list, err := eventtypes.List()
	if err != nil {
		t.Fatal(err)
	}
	for _, et := range list {
		if err := eventBodyProblem(et.Example); err != nil {
			t.Errorf("%s: the example: %v", et.Name, err)
		}
	}
	example := string(list[0].Example)
	for what, body := range map[string]string{
		"an unknown type":  strings.Replace(example, `"event_type":"`+list[0].Name+`"`, `"event_type":"charge.made_up"`, 1),
		"not JSON":         example[:len(example)/2],
		"another object":   strings.Replace(example, `"object":"`+events.Catalogue[0].Object+`"`, `"object":"payout"`, 1),
		"a string amount":  strings.Replace(example, `"amount":2000`, `"amount":"2000"`, 1),
		"a missing member": `{"id":"x","object":"event","event_type":"` + list[0].Name + `","created_at":"t","data":{"object":"charge"}}`,
	} {
		if body == example {
			t.Fatalf("%s: the example did not change", what)
		}
		if eventBodyProblem([]byte(body)) == nil {
			t.Errorf("%s: accepted: %s", what, truncateBody([]byte(body)))
		}
	}
}
