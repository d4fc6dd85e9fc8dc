package eventtypes

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gatehouse-pay/gatehouse/internal/events"
	"github.com/gatehouse-pay/gatehouse/internal/testenv"
)

var update = flag.Bool("update", false, "rewrite the event types' descriptions in api/openapi.yaml and docs/webhooks.md from events.Catalogue")

const regenerate = "go test ./internal/eventtypes -run 'TestOpenAPIEventTypes|TestDocsEventTypes' -update"

var (
	openapiFile = filepath.Join("..", "..", "api", "openapi.yaml")
	docsFile    = filepath.Join("..", "..", "docs", "webhooks.md")
)

// described is a type's description as the documents show it.
func described(d events.Definition) string {
	if d.Deprecated {
		return d.Description + " (deprecated)"
	}
	return d.Description
}

// openapiEventType is the EventType schema of api/openapi.yaml, made from
// the catalogue.
func openapiEventType() string {
	var b strings.Builder
	b.WriteString("    EventType:\n      type: string\n      description: |\n")
	for _, d := range events.Catalogue {
		fmt.Fprintf(&b, "        - `%s`: %s.\n", d.Name, described(d))
	}
	b.WriteString("      enum:\n")
	for _, d := range events.Catalogue {
		fmt.Fprintf(&b, "        - %s\n", d.Name)
	}
	return b.String()
}

// docsEventTable is the table of docs/webhooks.md's "Event types", made
// from the catalogue.
func docsEventTable() string {
	var b strings.Builder
	b.WriteString("| Event | What happened | `data.object` |\n|---|---|---|\n")
	for _, d := range events.Catalogue {
		fmt.Fprintf(&b, "| `%s` | %s | `%s` |\n", d.Name, strings.ReplaceAll(described(d), "|", `\|`), d.Object)
	}
	return b.String()
}

// block finds the line of text that begins with start and the lines after
// it, up to the first one that ends reports true for.
func block(text, start string, ends func(line string) bool) (from, to int, ok bool) {
	from, pos := -1, 0
	for _, line := range strings.SplitAfter(text, "\n") {
		switch {
		case from < 0 && strings.HasPrefix(line, start):
			from = pos
		case from >= 0 && ends(strings.TrimSuffix(line, "\n")):
			return from, pos, true
		}
		pos += len(line)
	}
	return from, pos, from >= 0
}

// checkGenerated compares the block of file with want, or rewrites it
// under -update.
func checkGenerated(t *testing.T, file, start string, ends func(string) bool, want string) {
	t.Helper()
	raw, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	text := string(raw)
	from, to, ok := block(text, start, ends)
	if !ok {
		t.Fatalf("%s: no line %q", file, strings.TrimSpace(start))
	}
	if text[from:to] == want {
		return
	}
	if *update {
		if err := os.WriteFile(file, []byte(text[:from]+want+text[to:]), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	t.Errorf("%s: the event types differ from events.Catalogue; regenerate with %s\ngot:\n%s\nwant:\n%s", file, regenerate, text[from:to], want)
}

// TestOpenAPIEventTypes: api/openapi.yaml's EventType lists the catalogue's
// types with its descriptions, in its order.
func TestOpenAPIEventTypes(t *testing.T) {
	checkGenerated(t, openapiFile, "    EventType:\n", func(line string) bool {
		return len(line) > 4 && strings.HasPrefix(line, "    ") && line[4] != ' '
	}, openapiEventType())
}

// TestDocsEventTypes: docs/webhooks.md's table of event types is the
// catalogue.
func TestDocsEventTypes(t *testing.T) {
	checkGenerated(t, docsFile, "| Event | ", func(line string) bool { return !strings.HasPrefix(line, "|") }, docsEventTable())
}

// TestOpenAPIEventSchemas: in api/openapi.yaml, every type of the catalogue
// maps to an Event schema whose data.object is the type's object and whose
// data requires the members the type carries; an endpoint subscribes to at
// most every type.
func TestOpenAPIEventSchemas(t *testing.T) {
	doc := testenv.LoadSpec(t).Doc()
	mapping := doc.Components.Schemas["Event"].Value.Discriminator.Mapping
	for _, d := range events.Catalogue {
		ref, ok := mapping[d.Name]
		if !ok {
			t.Errorf("%s: not in Event's discriminator", d.Name)
			continue
		}
		name := strings.TrimPrefix(ref.Ref, "#/components/schemas/")
		s := doc.Components.Schemas[name]
		if s == nil || s.Value.Properties["data"] == nil {
			t.Errorf("%s: maps to %s, which has no data", d.Name, ref.Ref)
			continue
		}
		data := s.Value.Properties["data"].Value
		if obj := data.Properties["object"]; obj == nil || len(obj.Value.Enum) != 1 || obj.Value.Enum[0] != d.Object {
			t.Errorf("%s: %s's data.object is not [%s]", d.Name, name, d.Object)
		}
		for _, member := range d.Data() {
			if data.Properties[member] == nil || !contains(data.Required, member) {
				t.Errorf("%s: %s's data does not require %s", d.Name, name, member)
			}
		}
	}
	if max := doc.Components.Schemas["WebhookEventTypes"].Value.MaxItems; max == nil || *max != uint64(len(events.Catalogue)) {
		t.Errorf("WebhookEventTypes' maxItems is %v, want %d", deref(max), len(events.Catalogue))
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func deref(p *uint64) any {
	if p == nil {
		return nil
	}
	return *p
}
