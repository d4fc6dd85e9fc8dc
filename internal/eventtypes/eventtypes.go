// Package eventtypes is the catalogue of event types that GET
// /v1/event_types answers: for each type of events.Catalogue its
// description, the JSON Schema (2020-12) of its webhook body and an example
// body. The schemas are generated from internal/resource's Go types by
// reflection, never written by hand; the examples are rendered by the code
// that renders real events (webhooks.Sample), so a schema that does not
// follow the code fails this package's tests.
package eventtypes

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"time"

	"github.com/gatehouse-pay/gatehouse/internal/charges"
	"github.com/gatehouse-pay/gatehouse/internal/disputes"
	"github.com/gatehouse-pay/gatehouse/internal/events"
	"github.com/gatehouse-pay/gatehouse/internal/ids"
	"github.com/gatehouse-pay/gatehouse/internal/ledger"
	"github.com/gatehouse-pay/gatehouse/internal/refunds"
	"github.com/gatehouse-pay/gatehouse/internal/resource"
	"github.com/gatehouse-pay/gatehouse/internal/webhooks"
)

// enums are the enumerations the code has at hand, by "Type.property".
var enums = map[string][]string{
	"Charge.status":                   charges.Statuses,
	"Refund.status":                   {refunds.StatusPending, refunds.StatusSucceeded, refunds.StatusFailed},
	"Payout.status":                   ledger.PayoutStatuses,
	"Dispute.status":                  disputes.Statuses,
	"WebhookEndpoint.events":          events.Types,
	"WebhookEndpoint.status":          {webhooks.EndpointEnabled, webhooks.EndpointDisabled},
	"WebhookEndpoint.disabled_reason": {webhooks.DisabledManual, webhooks.DisabledGone, webhooks.DisabledFailing},
}

// SchemaOf returns the self-contained schema of the webhook body of events
// of type d: resource.Event with event_type and data.object fixed to d's,
// and data holding exactly the members d's events carry (d.Data()), each
// required; the resource types it refers to are its "$defs".
func SchemaOf(d events.Definition) (*Schema, error) {
	g := newGenerator(enums)
	s, err := g.object(reflect.TypeFor[resource.Event]())
	if err != nil {
		return nil, fmt.Errorf("event type %s: %w", d.Name, err)
	}
	data, err := dataSchema(g, d)
	if err != nil {
		return nil, fmt.Errorf("event type %s: %w", d.Name, err)
	}
	for name, want := range map[string]*Schema{
		"object":     {Type: "string", Const: "event"},
		"event_type": {Type: "string", Const: d.Name},
		"data":       data,
	} {
		if s.Properties.Get(name) == nil {
			return nil, fmt.Errorf("event type %s: resource.Event has no property %q", d.Name, name)
		}
		s.Properties.set(name, want)
	}
	s.Draft, s.Title, s.Description, s.Defs = Draft, d.Name, d.Description, used(s, g.defs)
	return s, nil
}

// used returns the definitions root refers to, directly or through others.
func used(root *Schema, defs map[string]*Schema) map[string]*Schema {
	out := map[string]*Schema{}
	var walk func(s *Schema)
	walk = func(s *Schema) {
		if s == nil {
			return
		}
		if name, ok := strings.CutPrefix(s.Ref, "#/$defs/"); ok && out[name] == nil && defs[name] != nil {
			out[name] = defs[name]
			walk(defs[name])
		}
		for _, x := range s.AnyOf {
			walk(x)
		}
		walk(s.Items)
		for _, p := range s.Properties {
			walk(p.Schema)
		}
		if x, ok := s.AdditionalProperties.(*Schema); ok {
			walk(x)
		}
	}
	walk(root)
	return out
}

// dataSchema is the schema of data for events of type d: resource.EventData
// with only object and the members d carries.
func dataSchema(g *generator, d events.Definition) (*Schema, error) {
	all, err := g.object(reflect.TypeFor[resource.EventData]())
	if err != nil {
		return nil, err
	}
	object := all.Properties.Get("object")
	if object == nil {
		return nil, fmt.Errorf("resource.EventData has no property \"object\"")
	}
	object.Const = d.Object
	s := &Schema{Type: "object", Properties: Properties{{Name: "object", Schema: object}},
		Required: []string{"object"}, AdditionalProperties: false}
	for _, member := range d.Data() {
		ms := all.Properties.Get(member)
		if ms == nil {
			return nil, fmt.Errorf("resource.EventData has no property %q", member)
		}
		s.Properties = append(s.Properties, Property{Name: member, Schema: ms})
		s.Required = append(s.Required, member)
	}
	return s, nil
}

// exampleAt is when every example happened.
var exampleAt = time.Date(2026, 11, 22, 1, 17, 13, 912_000_000, time.UTC)

// exampleIDs returns an id maker whose ids are UUIDv7 (or prefixed ids on
// UUIDv7) of exampleAt, numbered in the order they are made: the same on
// every call, so every replica shows the same examples.
func exampleIDs() func(prefix string) string {
	n := 0
	return func(prefix string) string {
		n++
		u := []byte(ids.UUIDFloor(exampleAt))
		// The last hex digits count: ...-800000000001, ...-800000000002.
		tail := fmt.Sprintf("%012x", 0xa1b2c3d40000+n)
		u = append(u[:len(u)-12], tail...)
		if prefix == "" {
			return string(u)
		}
		id, _ := ids.FromUUID(prefix, string(u))
		return id
	}
}

// Example returns an example body of an event of type name.
func Example(name string) ([]byte, error) {
	newID := exampleIDs()
	ev, err := webhooks.Sample(name, newID("mer"), "sandbox", exampleAt, newID)
	if err != nil {
		return nil, fmt.Errorf("event type %s: example: %w", name, err)
	}
	return ev.Body, nil
}

// List returns the catalogue, one entry per type of events.Catalogue in
// its order. It is the same on every call.
func List() ([]resource.EventType, error) {
	out := make([]resource.EventType, 0, len(events.Catalogue))
	for _, d := range events.Catalogue {
		s, err := SchemaOf(d)
		if err != nil {
			return nil, err
		}
		schema, err := json.Marshal(s)
		if err != nil {
			return nil, fmt.Errorf("event type %s: %w", d.Name, err)
		}
		example, err := Example(d.Name)
		if err != nil {
			return nil, err
		}
		out = append(out, resource.EventType{Name: d.Name, Description: d.Description, Schema: schema,
			Example: example, Deprecated: d.Deprecated})
	}
	return out, nil
}
