// The programs Gatehouse's checks run, pinned: the linters of make lint
// (staticcheck, unparam, misspell) and stripe-mock, which
// deploy/local/tools.sh builds into bin/tools. A module of its own, so that
// their dependencies stay out of Gatehouse's go.mod. Run a linter from the
// module to check with
//
//	go tool -modfile=tools/go.mod staticcheck ./...
//
// and tidy this file from this directory (cd tools && go mod tidy): a tidy
// with -modfile from the root would take in Gatehouse's own imports.
module github.com/gatehouse-pay/gatehouse/tools

go 1.26.0

tool (
	github.com/golangci/misspell/cmd/misspell
	github.com/stripe/stripe-mock
	honnef.co/go/tools/cmd/staticcheck
	mvdan.cc/unparam
)

require (
	github.com/BurntSushi/toml v1.4.1-0.20240526193622-a339e1f7089c // indirect
	github.com/davecgh/go-spew v1.1.0 // indirect
	github.com/golangci/misspell v0.8.0 // indirect
	github.com/lestrrat-go/jspointer v0.0.0-20181205001929-82fadba7561c // indirect
	github.com/lestrrat-go/jsref v0.0.0-20181205001954-1b590508f37d // indirect
	github.com/lestrrat-go/jsschema v0.0.0-20181205002244-5c81c58ffcc3 // indirect
	github.com/lestrrat-go/jsval v0.0.0-20181205002323-20277e9befc0 // indirect
	github.com/lestrrat-go/pdebug v0.0.0-20180220043849-39f9a71bcabe // indirect
	github.com/lestrrat-go/structinfo v0.0.0-20190212233437-acd51874663b // indirect
	github.com/pkg/errors v0.8.1-0.20170505043639-c605e284fe17 // indirect
	github.com/stretchr/testify v1.3.0 // indirect
	github.com/stripe/stripe-mock v0.203.0 // indirect
	github.com/xeipuuv/gojsonschema v1.2.0 // indirect
	golang.org/x/exp/typeparams v0.0.0-20231108232855-2478ac86f678 // indirect
	golang.org/x/mod v0.41.0 // indirect
	golang.org/x/sync v0.23.0 // indirect
	golang.org/x/tools v0.51.0 // indirect
	honnef.co/go/tools v0.8.2 // indirect
	mvdan.cc/unparam v0.0.0-20260823230713-2fa3d841b0c8 // indirect
)
