package eventtypes

import (
	"strconv"
	"strings"
	"sync"

	"github.com/gatehouse-pay/gatehouse/internal/events"
)

// schemas are every event type's schema, made once.
var schemas = sync.OnceValues(func() (map[string]*Schema, error) {
	out := make(map[string]*Schema, len(events.Catalogue))
	for _, d := range events.Catalogue {
		s, err := SchemaOf(d)
		if err != nil {
			return nil, err
		}
		out[d.Name] = s
	}
	return out, nil
})

// HasPath reports whether the dotted path names a place in the body of
// events of type name, by its schema: a member of an object, an item of a
// list (a number), anything under a free-form object such as metadata. It
// is how an endpoint's filter is checked for a path no event it receives
// can have (a misspelt field would turn every event away).
func HasPath(name, path string) bool {
	all, err := schemas()
	if err != nil {
		return true // the catalogue's own tests fail; never refuse a filter for it
	}
	s, ok := all[name]
	if !ok {
		return false
	}
	return reaches(s, s.Defs, strings.Split(path, "."))
}

// reaches walks segs down schema s, following local $refs into defs.
func reaches(s *Schema, defs map[string]*Schema, segs []string) bool {
	for s != nil && s.Ref != "" {
		s = defs[strings.TrimPrefix(s.Ref, "#/$defs/")]
	}
	if s == nil {
		return false
	}
	if len(segs) == 0 {
		return true
	}
	for _, alt := range s.AnyOf {
		if reaches(alt, defs, segs) {
			return true
		}
	}
	if p := s.Properties.Get(segs[0]); p != nil {
		return reaches(p, defs, segs[1:])
	}
	if s.Items != nil {
		if _, err := strconv.ParseUint(segs[0], 10, 32); err == nil {
			return reaches(s.Items, defs, segs[1:])
		}
	}
	switch ap := s.AdditionalProperties.(type) {
	case bool:
		return ap
	case *Schema:
		return reaches(ap, defs, segs[1:])
	}
	// No keyword constrains it (json.RawMessage, any): anything may be there.
	return s.Type == nil && s.Const == nil && len(s.Properties) == 0 && s.Items == nil && len(s.AnyOf) == 0
}
