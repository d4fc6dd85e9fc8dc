// Package gatehouse is the Go client of the Gatehouse API, generated from
// api/openapi.yaml by oapi-codegen, the version pinned as a tool in this
// module's go.mod. After a change to api/openapi.yaml, run `go generate ./...`
// in examples/go (or `make generate` at the root).
package gatehouse

//go:generate go tool oapi-codegen -generate types,client -package gatehouse -o gatehouse.gen.go ../../../api/openapi.yaml
