# Gatehouse developer tasks. `make` (or `make help`) lists them.
#
# Everything here runs the same on a developer's machine and in CI (.ci/run).
# Variables worth overriding on the command line:
#   PKG=./internal/auth/...      packages for test/bench (default ./...)
#   TEST_FLAGS='-run TestLogin'  extra flags for `go test` in `make test`
#   BENCH=BenchmarkLogin         benchmark regexp for `make bench`
#   TEST_DATABASE_URL / TEST_REDIS_URL   services the tests use

SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help
.DELETE_ON_ERROR:

# Go lives in /usr/local/go/bin on our machines; find it there when it is not on PATH.
ifeq ($(shell command -v go 2>/dev/null),)
export PATH := /usr/local/go/bin:$(PATH)
endif

GO        ?= go
BIN_DIR   := bin
PKG       ?= ./...
TEST_FLAGS ?=
TEST_P    ?= 4
BENCH     ?= .
OPENAPI   := api/openapi.yaml
# The Kubernetes checks: a Go module of its own, so the Kubernetes API types stay
# out of the binaries' go.mod.
K8S_DIR   := deploy/k8s
# The linters (staticcheck, unparam, misspell), oasdiff (make api-compat) and
# stripe-mock are the `tool`s of tools/go.mod, a module of its own, so that their
# dependencies stay out of the binaries' go.mod. `go tool -modfile` builds one once
# into Go's build cache and runs it in the current directory, on the module found
# there.
GO_TOOL   := $(GO) tool -modfile=$(CURDIR)/tools/go.mod
# Every file the spelling check reads: Go (comments and strings), Markdown, YAML.
SPELL_FILES = $$(find . \( -path ./.git -o -path ./.dev -o -path ./bin -o -name node_modules -o -name testdata \) -prune -o \
	\( -name '*.go' -o -name '*.md' -o -name '*.yaml' -o -name '*.yml' \) -print)
REDOCLY_VERSION := 2.77.0

# `make test` and `make chaos` run inside deploy/local/testenv.sh: it installs the
# pinned tools the tests run (deploy/local/tools.sh: promtool, prometheus,
# kustomize, stripe-mock, prism, redocly, the signature verifiers, pgbouncer) into bin/tools and
# finds or starts PostgreSQL and Redis (TEST_DATABASE_URL / TEST_REDIS_URL when
# set). Tests FAIL (they do not skip) when a service or tool is missing, because
# GATEHOUSE_REQUIRE_SERVICES=1 is set there.
TESTENV := bash deploy/local/testenv.sh

# Keep the OpenAPI linter quiet and offline apart from the package download.
export REDOCLY_TELEMETRY := off
export REDOCLY_SUPPRESS_UPDATE_NOTICE := true

.PHONY: help build run test tools generate bench lint fmt fmt-check vet staticcheck unparam misspell openapi-lint api-compat clean

help: ## Show the available targets
	@echo 'Gatehouse: make <target>'
	@echo
	@awk 'BEGIN { FS = ":.*## " } /^[a-zA-Z0-9_-]+:.*## / { printf "  %-14s %s\n", $$1, $$2 }' $(MAKEFILE_LIST)

# VERSION is reported in gatehouse_build_info.
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -X github.com/gatehouse-pay/gatehouse/internal/metrics.Version=$(VERSION)

build: ## Build bin/api, bin/worker and bin/gatehouse (the CLI)
	@mkdir -p $(BIN_DIR)
	$(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN_DIR)/ ./cmd/api ./cmd/worker ./cmd/gatehouse

run: ## Build and run api + worker locally with Postgres/Redis (deploy/local/run.sh)
	@bash deploy/local/run.sh

test: ## Install the test tools if missing, start Postgres/Redis if needed; make lint, every test with -race
	@$(TESTENV) $(MAKE) --no-print-directory test-in-env

# test-in-env is `make test` once deploy/local/testenv.sh has set things up.
.PHONY: test-in-env
# make lint runs beside the tests, its output kept until they end: the
# end-to-end tests spend minutes mostly waiting, and the linters fill the
# gap. They run at the lowest priority (nice 19): on two cores the tests
# are busy enough that a linter at equal priority slows the longest of
# them, which decides when make test ends. -trimpath (through GOFLAGS, so that the binaries the end-to-end tests
# build get it too) keeps Go's build cache valid across checkouts: without
# it a package's cache key holds its directory, and every fresh clone
# compiles all of Gatehouse again with -race. TEST_P packages run at once
# (go test -p, whose default is the number of cores): internal/e2e and
# internal/httpapi run for minutes, mostly waiting, and the other packages
# fit beside them. The checks of deploy/k8s are a module of their own
# (K8S_DIR), which `go test ./...` at the root does not enter; they run too
# when PKG is the default ./... . Everything goes to the end; any part
# failing fails the target.
test-in-env:
	@status=0; \
	export GOFLAGS="-trimpath $${GOFLAGS:-}"; \
	lintlog=$$(mktemp); \
	nice -n 19 $(MAKE) --no-print-directory lint >"$$lintlog" 2>&1 & lintpid=$$!; \
	echo "make lint (beside the tests; its output follows them)"; \
	echo "GOFLAGS='$$GOFLAGS' $(GO) test -race -count=1 -p $(TEST_P) -timeout 20m $(TEST_FLAGS) $(PKG)"; \
	GATEHOUSE_REQUIRE_SERVICES=1 $(GO) test -race -count=1 -p $(TEST_P) -timeout 20m $(TEST_FLAGS) $(PKG) || status=1; \
	if [ '$(PKG)' = ./... ]; then \
		echo 'cd $(K8S_DIR) && $(GO) test -race -count=1 -timeout 10m $(TEST_FLAGS) ./...'; \
		(cd $(K8S_DIR) && GATEHOUSE_REQUIRE_SERVICES=1 $(GO) test -race -count=1 -timeout 10m $(TEST_FLAGS) ./...) || status=1; \
	fi; \
	lintstatus=0; wait $$lintpid || lintstatus=$$?; \
	echo '---- make lint ----'; cat "$$lintlog"; rm -f "$$lintlog"; \
	if [ $$lintstatus -ne 0 ]; then echo "make lint failed (exit $$lintstatus)"; status=1; fi; \
	exit $$status

# The clients of examples/ are generated, not committed: oapi-codegen is the
# `tool` of examples/go/go.mod, openapi-typescript is in examples/typescript's lock.
.PHONY: generate
generate: ## Generate the Go and TypeScript clients of examples/ from api/openapi.yaml
	cd examples/go && GOWORK=off $(GO) generate ./...
	cd examples/typescript && { [ -d node_modules ] || npm ci --no-audit --no-fund --ignore-scripts; } && npm run --silent generate

# docs/settings.md is generated from the declarations of internal/config/config.go;
# a test of internal/config fails when it is stale.
.PHONY: settings-doc
settings-doc: ## Regenerate docs/settings.md from internal/config's declarations
	$(GO) generate ./internal/config

tools: ## Install the pinned tools the tests run into bin/tools (make test does this itself)
	@bash deploy/local/tools.sh install

# BENCH_FLAGS passes flags to the load harness, e.g. BENCH_FLAGS='-perf -step 10s'
# (bin/bench -h lists them). docs/BENCHMARKS.md explains the method. The harness
# is built, not `go run`, so perf(1) can name the floor's functions.
BENCH_FLAGS ?=

# GATEHOUSE_BENCH=full: the load generator's own tests assert its timetable
# (how late it sends, how soon it is done) on this machine first, as make test,
# on a machine shared with other tests, does not.
bench: build ## Load-test POST /v1/charges next to a floor program (writes docs/BENCHMARKS.md), then bench-micro
	GATEHOUSE_BENCH=full $(GO) test -count=1 -run '^TestOpenModel' ./cmd/bench
	$(GO) build -trimpath -o $(BIN_DIR)/bench ./cmd/bench
	$(BIN_DIR)/bench -api $(BIN_DIR)/api $(BENCH_FLAGS)
	@$(MAKE) --no-print-directory bench-micro

# Fault tests F1-F13 (docs/reliability.md) at full scale against the real binaries, with
# Redis Sentinel, Redis Cluster and a PostgreSQL standby started from Debian's
# packages on loopback; `make test` runs the same tests at smoke scale.
# docs/reliability.md has the method. CHAOS_RUN adds the end-to-end tests whose
# promises about time (a drain's exit, a notice's lag, a deadline) are asserted
# at full scale only; at smoke scale they assert what happened.
CHAOS_RUN := ^(TestChaos|TestGracefulShutdown|TestRoutingCacheAcrossReplicas|TestEventStreamTenancy|TestPostgresBlackHole|TestProbePortAtConnectionLimit)
.PHONY: chaos
chaos: ## Fault tests at full scale: kill -9, Redis/PostgreSQL outages and failovers (Sentinel, Cluster, standby), provider faults, a rolling upgrade
	@$(TESTENV) env GATEHOUSE_REQUIRE_SERVICES=1 GATEHOUSE_CHAOS=full GATEHOUSE_E2E_RACE=1 $(GO) test -count=1 -run '$(CHAOS_RUN)' -timeout 45m -v ./internal/e2e

# FUZZTIME bounds each fuzz target's run, e.g. make fuzz FUZZTIME=5m.
FUZZTIME ?= 30s
.PHONY: fuzz
fuzz: ## Run every Go fuzz target for FUZZTIME each (their seed corpora run in make test)
	@for pkg in $$($(GO) list ./...); do \
		for name in $$($(GO) test -list '^Fuzz' $$pkg | grep '^Fuzz' || true); do \
			echo "==> $$pkg $$name ($(FUZZTIME))"; \
			$(GO) test -run '^$$' -fuzz "^$$name$$" -fuzztime $(FUZZTIME) $$pkg || exit 1; \
		done; \
	done

.PHONY: bench-micro
bench-micro: ## Run the Go micro-benchmarks only (go test -bench, no unit tests)
	$(GO) test -run '^$$' -bench '$(BENCH)' -benchmem -timeout 20m $(PKG)

lint: fmt-check vet staticcheck unparam misspell openapi-lint api-compat ## gofmt check, go vet, staticcheck, unparam, misspell, the OpenAPI lint (redocly) and api-compat

fmt: ## Format all Go files in place
	@gofmt -w $$(find . \( -path ./.git -o -path ./.dev -o -path ./bin -o -name node_modules -o -name testdata \) -prune -o -name '*.go' -print)

fmt-check: ## Fail if any Go file is not gofmt-formatted
	@files=$$(find . \( -path ./.git -o -path ./.dev -o -path ./bin -o -name node_modules -o -name testdata \) -prune -o -name '*.go' -print); \
	if [ -z "$$files" ]; then echo 'fmt-check: no Go files'; exit 0; fi; \
	bad=$$(gofmt -l $$files); \
	if [ -n "$$bad" ]; then echo 'These files need gofmt (run: make fmt):'; echo "$$bad"; exit 1; fi; \
	echo 'fmt-check: ok'

vet: ## go vet ./... (and in deploy/k8s)
	$(GO) vet ./...
	cd $(K8S_DIR) && $(GO) vet ./...

# staticcheck.conf says which checks run (all of them).
staticcheck: ## staticcheck ./... (and in deploy/k8s)
	$(GO_TOOL) staticcheck ./...
	cd $(K8S_DIR) && $(GO_TOOL) staticcheck ./...

unparam: ## unparam ./... (and in deploy/k8s): parameters never used, or always given the same value
	$(GO_TOOL) unparam ./...
	cd $(K8S_DIR) && $(GO_TOOL) unparam ./...

misspell: ## Fail on a common misspelling in the Go, Markdown and YAML files
	@$(GO_TOOL) misspell -error $(SPELL_FILES)
	@echo 'misspell: ok'

# The pinned Redocly CLI of bin/tools (make tools), or the same version through npx.
openapi-lint: ## Lint api/openapi.yaml with Redocly CLI (needs Node.js)
	@if [ ! -f $(OPENAPI) ]; then \
		echo "openapi-lint: $(OPENAPI) is missing" >&2; exit 1; \
	fi; \
	if [ -x $(BIN_DIR)/tools/redocly ]; then \
		redocly=($(BIN_DIR)/tools/redocly); \
	elif command -v npx >/dev/null 2>&1; then \
		redocly=(npx --yes @redocly/cli@$(REDOCLY_VERSION)); \
	else \
		echo "openapi-lint: needs Node.js >= 20 with npm (apt-get install nodejs npm / brew install node), or make tools" >&2; exit 1; \
	fi; \
	echo "$${redocly[*]} lint $(OPENAPI)"; \
	"$${redocly[@]}" lint $(OPENAPI)

# Within v1, api/openapi.yaml changes only by additions: oasdiff (a `tool` of
# tools/go.mod) compares it with the released description, api/openapi.yaml at
# the commit api/released names, and a breaking change fails unless a line of
# docs/api-changelog.md names it with the reason (deploy/local/api-compat.sh; the
# head of docs/api-changelog.md says how). A shallow clone has to fetch that commit.
api-compat: ## Fail on a breaking change to api/openapi.yaml since the release (oasdiff) that docs/api-changelog.md does not name
	@bash deploy/local/api-compat.sh

clean: ## Remove build and test outputs (bin/, coverage.out); leaves .dev/ and the tool cache alone
	rm -rf $(BIN_DIR) coverage.out
