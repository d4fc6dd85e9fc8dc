package testenv

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/gorillamux"

	"github.com/gatehouse-pay/gatehouse/api"
)

// Spec validates HTTP exchanges against api/openapi.yaml.
type Spec struct {
	doc    *openapi3.T
	router routers.Router
}

var (
	specOnce sync.Once
	spec     *Spec
	specErr  error
	// decodersOnce guards openapi3filter's registry, which is global.
	decodersOnce sync.Once
)

// LoadSpec parses and validates api/openapi.yaml once per test binary.
func LoadSpec(t testing.TB) *Spec {
	t.Helper()
	specOnce.Do(func() { spec, specErr = ParseSpec(api.Spec) })
	if specErr != nil {
		t.Fatalf("testenv: api/openapi.yaml: %v", specErr)
	}
	return spec
}

// ParseSpec parses and validates an OpenAPI description: this release's, or
// an earlier release's that its binaries answer by.
func ParseSpec(data []byte) (*Spec, error) {
	decodersOnce.Do(func() {
		// The card field's script, page and style are text, checked as such.
		for _, ct := range []string{"text/javascript", "text/html", "text/css"} {
			openapi3filter.RegisterBodyDecoder(ct, openapi3filter.PlainBodyDecoder)
		}
	})
	loader := openapi3.NewLoader()
	doc, err := loader.LoadFromData(data)
	if err != nil {
		return nil, err
	}
	if err = doc.Validate(loader.Context); err != nil {
		return nil, err
	}
	doc.Servers = nil // match any host the tests listen on
	r, err := gorillamux.NewRouter(doc)
	if err != nil {
		return nil, err
	}
	return &Spec{doc: doc, router: r}, nil
}

// Doc is the parsed and validated description, without its servers.
func (s *Spec) Doc() *openapi3.T { return s.doc }

// Check fails the test unless the response (status, headers and body) is one
// the spec documents for the request's operation. A request the spec has no
// route for must be answered 404 or 405 with the Error schema.
func (s *Spec) Check(t testing.TB, req *http.Request, resp *http.Response, body []byte) {
	t.Helper()
	route, params, err := s.router.FindRoute(req)
	if err != nil {
		if resp.StatusCode != http.StatusNotFound && resp.StatusCode != http.StatusMethodNotAllowed {
			t.Errorf("openapi: %s %s is not in the spec but answered %d", req.Method, req.URL.Path, resp.StatusCode)
			return
		}
		s.checkSchema(t, "Error", body)
		return
	}
	input := &openapi3filter.ResponseValidationInput{
		RequestValidationInput: &openapi3filter.RequestValidationInput{
			Request: req, PathParams: params, Route: route,
			Options: &openapi3filter.Options{AuthenticationFunc: openapi3filter.NoopAuthenticationFunc},
		},
		Status:  resp.StatusCode,
		Header:  resp.Header,
		Body:    io.NopCloser(bytes.NewReader(body)),
		Options: &openapi3filter.Options{IncludeResponseStatus: true, MultiError: true},
	}
	if err := openapi3filter.ValidateResponse(context.Background(), input); err != nil {
		t.Errorf("openapi: %s %s -> %d does not match the spec: %v\nbody: %s", req.Method, req.URL.Path, resp.StatusCode, err, truncate(body))
	}
	if ct := resp.Header.Get("Content-Type"); len(body) > 0 && strings.HasPrefix(ct, "application/json") && ct != "application/json; charset=utf-8" {
		t.Errorf("openapi: %s %s: Content-Type %q, want application/json; charset=utf-8", req.Method, req.URL.Path, ct)
	}
	if resp.Header.Get("X-Request-Id") == "" {
		t.Errorf("openapi: %s %s: no X-Request-Id", req.Method, req.URL.Path)
	}
}

func (s *Spec) checkSchema(t testing.TB, name string, body []byte) {
	t.Helper()
	ref := s.doc.Components.Schemas[name]
	if ref == nil || ref.Value == nil {
		t.Fatalf("openapi: no schema %s", name)
	}
	var v any
	if err := json.Unmarshal(body, &v); err != nil {
		t.Errorf("openapi: body is not JSON: %v: %s", err, truncate(body))
		return
	}
	if err := ref.Value.VisitJSON(v); err != nil {
		t.Errorf("openapi: body does not match %s: %v: %s", name, err, truncate(body))
	}
}

func truncate(b []byte) string {
	if len(b) > 500 {
		return string(b[:500]) + "..."
	}
	return string(b)
}
