package eventtypes

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"time"
)

// Draft is the JSON Schema dialect of every schema: 2020-12.
const Draft = "https://json-schema.org/draft/2020-12/schema"

// Schema is a JSON Schema (2020-12) as the generator writes it: the few
// keywords it needs, in a stable order.
type Schema struct {
	Draft       string `json:"$schema,omitempty"`
	Title       string `json:"title,omitempty"`
	Description string `json:"description,omitempty"`
	Ref         string `json:"$ref,omitempty"`
	// Type is a type name, or a list of them ([]string).
	Type                 any                `json:"type,omitempty"`
	Const                any                `json:"const,omitempty"`
	Enum                 []any              `json:"enum,omitempty"`
	Format               string             `json:"format,omitempty"`
	AnyOf                []*Schema          `json:"anyOf,omitempty"`
	Items                *Schema            `json:"items,omitempty"`
	Properties           Properties         `json:"properties,omitempty"`
	Required             []string           `json:"required,omitempty"`
	AdditionalProperties any                `json:"additionalProperties,omitempty"` // bool or *Schema
	Defs                 map[string]*Schema `json:"$defs,omitempty"`
}

// Property is one member of an object schema.
type Property struct {
	Name   string
	Schema *Schema
}

// Properties are an object's members in the order of its Go fields; they
// are written as a JSON object in that order.
type Properties []Property

// MarshalJSON writes the members as one object, in order.
func (ps Properties) MarshalJSON() ([]byte, error) {
	var b strings.Builder
	b.WriteByte('{')
	for i, p := range ps {
		if i > 0 {
			b.WriteByte(',')
		}
		name, err := json.Marshal(p.Name)
		if err != nil {
			return nil, err
		}
		s, err := json.Marshal(p.Schema)
		if err != nil {
			return nil, err
		}
		b.Write(name)
		b.WriteByte(':')
		b.Write(s)
	}
	b.WriteByte('}')
	return []byte(b.String()), nil
}

// Get returns the member name's schema, nil when there is none.
func (ps Properties) Get(name string) *Schema {
	for _, p := range ps {
		if p.Name == name {
			return p.Schema
		}
	}
	return nil
}

// set replaces the member name's schema.
func (ps Properties) set(name string, s *Schema) {
	for i := range ps {
		if ps[i].Name == name {
			ps[i].Schema = s
		}
	}
}

var (
	rawMessage = reflect.TypeFor[json.RawMessage]()
	timeType   = reflect.TypeFor[time.Time]()
	marshaler  = reflect.TypeFor[json.Marshaler]()
)

// generator reflects Go types into schemas, the way encoding/json renders
// them:
//   - a field's json tag names its property; "-" and unexported fields are
//     left out, embedded structs' fields are promoted;
//   - a field without omitempty is required; one with it is optional and,
//     being left out when empty, never null;
//   - a pointer without omitempty may be null; a slice or a map is never
//     null (the views fill them, and api/openapi.yaml says so);
//   - a named struct is a "$defs" entry of its Go name, referred to with a
//     local "$ref"; it allows no other members (additionalProperties
//     false);
//   - map[string]T is an object of T; json.RawMessage, interfaces and
//     map[string]any take any value; time.Time is a date-time string.
//
// Any other kind (a type with its own MarshalJSON, a channel, a func) is an
// error, so a new field the generator cannot follow fails its tests rather
// than being described wrongly.
type generator struct {
	defs map[string]*Schema
	// names maps each struct type met to its $defs name.
	names map[reflect.Type]string
	// enums adds an enumeration to a field: "Type.json_name" -> values.
	enums map[string][]string
}

func newGenerator(enums map[string][]string) *generator {
	return &generator{defs: map[string]*Schema{}, names: map[reflect.Type]string{}, enums: enums}
}

// object is the schema of a struct type, inline.
func (g *generator) object(t reflect.Type) (*Schema, error) {
	s := &Schema{Type: "object", Properties: Properties{}, AdditionalProperties: false}
	if err := g.fields(t, s, t.Name()); err != nil {
		return nil, err
	}
	return s, nil
}

// fields adds t's fields to s, promoting those of embedded structs.
func (g *generator) fields(t reflect.Type, s *Schema, owner string) error {
	for i := range t.NumField() {
		f := t.Field(i)
		tag := f.Tag.Get("json")
		if tag == "-" {
			continue
		}
		name, opts, _ := strings.Cut(tag, ",")
		if f.Anonymous && name == "" {
			et := f.Type
			if et.Kind() == reflect.Pointer {
				et = et.Elem()
			}
			if et.Kind() == reflect.Struct {
				if err := g.fields(et, s, owner); err != nil {
					return err
				}
				continue
			}
		}
		if !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		omitempty := strings.Contains(","+opts+",", ",omitempty,") || strings.Contains(","+opts+",", ",omitzero,")
		fs, err := g.field(f.Type, !omitempty)
		if err != nil {
			return fmt.Errorf("%s.%s: %w", owner, f.Name, err)
		}
		if values, ok := g.enums[owner+"."+name]; ok {
			fs = withEnum(fs, values)
		}
		s.Properties = append(s.Properties, Property{Name: name, Schema: fs})
		if !omitempty {
			s.Required = append(s.Required, name)
		}
	}
	return nil
}

// withEnum narrows a string (or array of strings) schema to values, and
// null when it may be null.
func withEnum(s *Schema, values []string) *Schema {
	enum := make([]any, 0, len(values)+1)
	for _, v := range values {
		enum = append(enum, v)
	}
	switch {
	case s.Items != nil:
		s.Items = withEnum(s.Items, values)
	case s.Type == "string":
		s.Enum = enum
	case isNullable(s):
		s.Enum = append(enum, nil)
	}
	return s
}

func isNullable(s *Schema) bool {
	ts, ok := s.Type.([]string)
	return ok && len(ts) == 2 && ts[1] == "null"
}

// field is the schema of a field of type t; nullable when a nil pointer
// is rendered as null (no omitempty).
func (g *generator) field(t reflect.Type, nullable bool) (*Schema, error) {
	if t.Kind() != reflect.Pointer {
		return g.typ(t)
	}
	s, err := g.typ(t.Elem())
	if err != nil || !nullable {
		return s, err
	}
	switch {
	case s.Ref != "":
		return &Schema{AnyOf: []*Schema{s, {Type: "null"}}}, nil
	case s.Type == nil:
		return s, nil // any value, null included
	default:
		if name, ok := s.Type.(string); ok {
			s.Type = []string{name, "null"}
			return s, nil
		}
		return &Schema{AnyOf: []*Schema{s, {Type: "null"}}}, nil
	}
}

// typ is the schema of a value of type t.
func (g *generator) typ(t reflect.Type) (*Schema, error) {
	switch {
	case t == rawMessage:
		return &Schema{}, nil
	case t == timeType:
		return &Schema{Type: "string", Format: "date-time"}, nil
	case t.Implements(marshaler) || reflect.PointerTo(t).Implements(marshaler):
		return nil, fmt.Errorf("%s has its own MarshalJSON, which the generator cannot follow", t)
	}
	switch t.Kind() {
	case reflect.String:
		return &Schema{Type: "string"}, nil
	case reflect.Bool:
		return &Schema{Type: "boolean"}, nil
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return &Schema{Type: "integer"}, nil
	case reflect.Float32, reflect.Float64:
		return &Schema{Type: "number"}, nil
	case reflect.Interface:
		return &Schema{}, nil
	case reflect.Pointer:
		return g.field(t, true)
	case reflect.Slice, reflect.Array:
		if t.Elem().Kind() == reflect.Uint8 {
			return &Schema{Type: "string"}, nil // base64
		}
		items, err := g.field(t.Elem(), true)
		if err != nil {
			return nil, err
		}
		return &Schema{Type: "array", Items: items}, nil
	case reflect.Map:
		if t.Key().Kind() != reflect.String {
			return nil, fmt.Errorf("%s: only maps with string keys are objects", t)
		}
		if t.Elem().Kind() == reflect.Interface {
			return &Schema{Type: "object"}, nil
		}
		values, err := g.field(t.Elem(), true)
		if err != nil {
			return nil, err
		}
		return &Schema{Type: "object", AdditionalProperties: values}, nil
	case reflect.Struct:
		return g.ref(t)
	}
	return nil, fmt.Errorf("%s: a %s has no JSON form the generator knows", t, t.Kind())
}

// ref is a local reference to the $defs entry of a struct type, made on
// first use. An anonymous struct is written inline.
func (g *generator) ref(t reflect.Type) (*Schema, error) {
	if t.Name() == "" {
		return g.object(t)
	}
	if name, ok := g.names[t]; ok {
		return &Schema{Ref: "#/$defs/" + name}, nil
	}
	name := defName(t)
	for _, other := range g.names {
		if other == name {
			return nil, fmt.Errorf("two types named %s (%s)", name, t)
		}
	}
	g.names[t] = name
	s, err := g.object(t)
	if err != nil {
		return nil, err
	}
	g.defs[name] = s
	return &Schema{Ref: "#/$defs/" + name}, nil
}

// defName is t's name as a $defs key: its Go name, a generic type's
// arguments joined to it.
func defName(t reflect.Type) string {
	name := t.Name()
	base, args, generic := strings.Cut(name, "[")
	if !generic {
		return name
	}
	var b strings.Builder
	b.WriteString(base)
	for _, a := range strings.Split(strings.TrimSuffix(args, "]"), ",") {
		a = a[strings.LastIndexAny(a, "./")+1:]
		b.WriteString(strings.ToUpper(a[:1]) + a[1:])
	}
	return b.String()
}
