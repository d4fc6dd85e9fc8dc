// The programs Gatehouse's checks run, pinned: the linters of make lint
// (staticcheck, unparam, misspell). A module of its own, so that their
// dependencies stay out of Gatehouse's go.mod. Run one from the module to
// check with
//
//	go tool -modfile=tools/go.mod staticcheck ./...
//
// and tidy this file from this directory (cd tools && go mod tidy): a tidy
// with -modfile from the root would take in Gatehouse's own imports.
module github.com/gatehouse-pay/gatehouse/tools

go 1.26.0

tool (
	github.com/golangci/misspell/cmd/misspell
	honnef.co/go/tools/cmd/staticcheck
	mvdan.cc/unparam
)

require (
	github.com/BurntSushi/toml v1.4.1-0.20240526193622-a339e1f7089c // indirect
	github.com/golangci/misspell v0.8.0 // indirect
	golang.org/x/exp/typeparams v0.0.0-20231108232855-2478ac86f678 // indirect
	golang.org/x/mod v0.41.0 // indirect
	golang.org/x/sync v0.23.0 // indirect
	golang.org/x/tools v0.51.0 // indirect
	honnef.co/go/tools v0.8.2 // indirect
	mvdan.cc/unparam v0.0.0-20260823230713-2fa3d841b0c8 // indirect
)
