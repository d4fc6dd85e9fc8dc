package httpapi

import (
	"encoding/json"
	"reflect"
	"strconv"
	"strings"
	"sync"

	"github.com/gatehouse-pay/gatehouse/internal/apperr"
)

// encoding/json matches field names regardless of case, so {"AMOUNT": 1} would
// fill Amount. checkFields holds request bodies to the exact names of the
// contract, reporting the full path of the first unknown one ("card.bogus",
// "rules[2].if.bogus" in an array of objects). A type that decodes itself (a
// json.Unmarshaler) checks its own value.
func checkFields(raw []byte, t reflect.Type, prefix string) error {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if k := t.Kind(); k == reflect.Slice || k == reflect.Array {
		elem := t.Elem()
		for elem.Kind() == reflect.Pointer {
			elem = elem.Elem()
		}
		if elem.Kind() != reflect.Struct {
			return nil
		}
		var items []json.RawMessage
		if err := json.Unmarshal(raw, &items); err != nil {
			return nil // not an array: the typed decode reports it
		}
		at := strings.TrimSuffix(prefix, ".")
		for i, item := range items {
			if err := checkFields(item, elem, at+"["+strconv.Itoa(i)+"]."); err != nil {
				return err
			}
		}
		return nil
	}
	if t.Kind() != reflect.Struct || reflect.PointerTo(t).Implements(unmarshalerType) {
		return nil
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(raw, &obj); err != nil {
		return nil // not an object: the typed decode reports it
	}
	fields := fieldsOf(t)
	for key, val := range obj {
		ft, ok := fields[key]
		if !ok {
			return apperr.Invalid(prefix+key, "Received unknown parameter: %s.", prefix+key)
		}
		if err := checkFields(val, ft, prefix+key+"."); err != nil {
			return err
		}
	}
	return nil
}

var unmarshalerType = reflect.TypeFor[json.Unmarshaler]()

var fieldCache sync.Map // reflect.Type -> map[string]reflect.Type

func fieldsOf(t reflect.Type) map[string]reflect.Type {
	if m, ok := fieldCache.Load(t); ok {
		return m.(map[string]reflect.Type)
	}
	m := map[string]reflect.Type{}
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "-" || !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		m[name] = f.Type
	}
	fieldCache.Store(t, m)
	return m
}

// checkNUL refuses strings holding NUL characters, which PostgreSQL cannot
// store, naming the field.
func checkNUL(v reflect.Value, path string) error {
	switch v.Kind() {
	case reflect.Pointer, reflect.Interface:
		if !v.IsNil() {
			return checkNUL(v.Elem(), path)
		}
	case reflect.String:
		if strings.IndexByte(v.String(), 0) >= 0 {
			return apperr.Invalid(path, "%s must not contain NUL characters.", path)
		}
	case reflect.Struct:
		fields := v.Type()
		for i := 0; i < v.NumField(); i++ {
			f := fields.Field(i)
			if !f.IsExported() {
				continue
			}
			name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
			if err := checkNUL(v.Field(i), join(path, name)); err != nil {
				return err
			}
		}
	case reflect.Map:
		iter := v.MapRange()
		for iter.Next() {
			if err := checkNUL(iter.Key(), path); err != nil {
				return err
			}
			if err := checkNUL(iter.Value(), path); err != nil {
				return err
			}
		}
	case reflect.Slice:
		for i := 0; i < v.Len(); i++ {
			if err := checkNUL(v.Index(i), path); err != nil {
				return err
			}
		}
	}
	return nil
}

func join(prefix, name string) string {
	if prefix == "" {
		return name
	}
	return prefix + "." + name
}
