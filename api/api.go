// Package api embeds openapi.yaml, the OpenAPI 3.0 description of Gatehouse's
// HTTP API as merchants see it. The server can serve it and tests validate every
// response against it, so it stays the single, checked statement of the contract.
package api

import _ "embed"

// Spec is the raw YAML of openapi.yaml.
//
//go:embed openapi.yaml
var Spec []byte
