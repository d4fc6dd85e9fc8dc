#!/usr/bin/env bash
# The programs Gatehouse's tests run, pinned, installed when missing.
#
#   deploy/local/tools.sh          install what is missing, link it into bin/tools, list it
#   deploy/local/tools.sh check    exit 1 (and say what) when something is missing
#
# `make test` and .ci/run call this; nobody has to install these by hand. What a
# machine needs before it: Go, Node.js with npm, gcc (for -race), PostgreSQL and
# Redis (running, or installed so that deploy/local/services.sh can start them).
#
# | tool                  | version          | how                                                        |
# |-----------------------|------------------|------------------------------------------------------------|
# | promtool, prometheus  | 2.53.3 (LTS)     | Go module github.com/prometheus/prometheus v0.53.3, go build |
# | kustomize             | v5.5.0           | the `tool` of deploy/k8s/go.mod, go build                   |
# | stripe-mock           | v0.203.0         | a `tool` of tools/go.mod, go build                          |
# | staticcheck, unparam, misspell (make lint) | tools/go.mod | go tool (built once into Go's cache) |
# | oasdiff (make api-compat) | v1.37.0, tools/go.mod | go tool (built once into Go's cache) |
# | redocly (OpenAPI lint)| @redocly/cli 2.77.0 | npm install                                              |
# | prism (Adyen mock)    | internal/providers/adyen/testdata/prism/package-lock.json (@stoplight/prism-cli) | npm ci |
# | signature verifiers   | internal/webhooks/testdata/verify/package-lock.json | npm ci          |
# | browser journeys      | internal/e2e/browser/package-lock.json (playwright-core) | npm ci     |
# | oapi-codegen (Go client) | v2.8.2, the `tool` of examples/go/go.mod | go tool (built once into Go's cache) |
# | openapi-typescript, openapi-fetch, tsc | examples/typescript/package-lock.json | npm ci      |
# | chromium              | Debian's package (/usr/bin/chromium; never a downloaded browser) | apt-get |
# | pgbouncer             | Debian's package (1.18 in bookworm), in front of PostgreSQL in the end-to-end tests | apt-get |
#
# Each tool is built once per machine into $GATEHOUSE_TOOLS_DIR (default
# ~/.cache/gatehouse/tools) under NAME@VERSION, so clones share it, and linked
# into bin/tools of this checkout, which `make test` puts first on PATH.
# kustomize and stripe-mock are `tool` lines of deploy/k8s/go.mod and
# tools/go.mod, the only place their versions are written: they are built with
# go build in that module, under NAME@VERSION+DIGEST, the digest being that of
# the module's go.sum (its dependencies). Prometheus cannot be a `tool` line
# (its go.mod has replace directives, which only apply in its own module), so
# it is built inside its own module, with GOWORK=off. An install goes to a
# temporary directory first and is renamed into place, so two runs at once
# never see half a tool.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
TOOLS_DIR=${GATEHOUSE_TOOLS_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/gatehouse/tools}
LINK_DIR=$ROOT/bin/tools

PROMETHEUS_MODULE=github.com/prometheus/prometheus
PROMETHEUS_VERSION=v0.53.3 # the Go module version of Prometheus 2.53.3
PROMETHEUS_RELEASE=2.53.3
K8S_MODULE_DIR=$ROOT/deploy/k8s
TOOLS_MODULE_DIR=$ROOT/tools
KUSTOMIZE_PKG=sigs.k8s.io/kustomize/kustomize/v5
STRIPE_MOCK_PKG=github.com/stripe/stripe-mock
REDOCLY_VERSION=2.77.0
VERIFY_DIR=$ROOT/internal/webhooks/testdata/verify
BROWSER_DIR=$ROOT/internal/e2e/browser
SDK_GO_DIR=$ROOT/examples/go
SDK_TS_DIR=$ROOT/examples/typescript
PRISM_DIR=$ROOT/internal/providers/adyen/testdata/prism
CHROMIUM=${CHROMIUM:-/usr/bin/chromium}
PGBOUNCER=${PGBOUNCER:-/usr/sbin/pgbouncer}

log() { printf '[tools] %s\n' "$*" >&2; }
fail() {
	printf '[tools] ERROR: %s\n' "$*" >&2
	exit 1
}

# Go lives in /usr/local/go/bin on our machines; find it there when it is not on PATH.
command -v go >/dev/null 2>&1 || PATH=/usr/local/go/bin:$PATH
command -v go >/dev/null 2>&1 || fail "go is required (Go 1.26: https://go.dev/doc/install); it is not on PATH or in /usr/local/go/bin"

# Go builds of the tools ignore the caller's module settings.
go_env() { env GOFLAGS= GOWORK=off GO111MODULE=on "$@"; }

# fresh_dir NAME@VERSION: a new temporary directory beside the final one.
fresh_dir() {
	mkdir -p "$TOOLS_DIR"
	mktemp -d "$TOOLS_DIR/.$1.XXXXXX"
}

# settle TMP FINAL: rename TMP into place, unless another run got there first.
settle() {
	if ! mv -T "$1" "$2" 2>/dev/null; then
		rm -rf "$1"
		[ -d "$2" ] || fail "could not move $1 to $2"
	fi
}

# tool_version DIR PKG: the version of the module of PKG, a `tool` of DIR's go.mod.
tool_version() {
	local version
	version=$(cd "$1" && go_env GOFLAGS=-mod=readonly go list -m -f '{{.Version}}' "$2") && [ -n "$version" ] ||
		fail "$1/go.mod does not pin $2"
	printf '%s\n' "$version"
}

# tool_dir NAME DIR PKG: TOOLS_DIR/NAME@VERSION+DIGEST for PKG, a `tool` of DIR's
# go.mod; DIGEST is that of DIR's go.sum, so a change of a dependency builds anew.
tool_dir() {
	local digest
	digest=$(sha256sum "$2/go.sum" | cut -c1-12)
	printf '%s\n' "$TOOLS_DIR/$1@$(tool_version "$2" "$3")+$digest"
}

# go_tool_build NAME DIR PKG: go build PKG, a `tool` of the module in DIR, with
# that module's versions, into tool_dir, and print that directory.
go_tool_build() {
	local name=$1 dir=$2 pkg=$3 final tmp
	final=$(tool_dir "$name" "$dir" "$pkg")
	if [ -x "$final/$name" ]; then
		printf '%s\n' "$final"
		return 0
	fi
	log "building $name ${final##*@} (go build $pkg in ${dir#"$ROOT"/})"
	tmp=$(fresh_dir "${final##*/}")
	if ! (cd "$dir" && go_env GOFLAGS=-mod=readonly go build -trimpath -o "$tmp/$name" "$pkg") >"$tmp.log" 2>&1; then
		cat "$tmp.log" >&2
		rm -rf "$tmp" "$tmp.log"
		fail "go build $pkg in $dir failed (output above)"
	fi
	rm -f "$tmp.log"
	settle "$tmp" "$final"
	printf '%s\n' "$final"
}

# lint_tools_install: the linters of tools/go.mod and oasdiff, built into Go's
# build cache so that make lint's `go tool -modfile=tools/go.mod ...` starts at once.
lint_tools_install() {
	local t out
	for t in staticcheck unparam misspell oasdiff; do
		if ! out=$(cd "$ROOT" && go_env GOFLAGS=-mod=readonly go tool -modfile="$TOOLS_MODULE_DIR/go.mod" -n "$t" 2>&1); then
			printf '%s\n' "$out" >&2
			fail "building $t (go tool, tools/go.mod) failed (output above)"
		fi
	done
}

# prometheus_install: promtool and prometheus from the Prometheus module, built in
# its own module directory so that its replace directives apply.
prometheus_install() {
	local final=$TOOLS_DIR/prometheus@$PROMETHEUS_VERSION tmp src
	[ -x "$final/promtool" ] && [ -x "$final/prometheus" ] && return 0
	log "building promtool and prometheus from $PROMETHEUS_MODULE@$PROMETHEUS_VERSION (once per machine; a few minutes)"
	tmp=$(fresh_dir "prometheus@$PROMETHEUS_VERSION")
	src=$(go_env go mod download -json "$PROMETHEUS_MODULE@$PROMETHEUS_VERSION" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
	[ -n "$src" ] && [ -f "$src/go.mod" ] || fail "go mod download $PROMETHEUS_MODULE@$PROMETHEUS_VERSION did not give a module directory"
	if ! (cd "$src" && go_env go build -trimpath -ldflags "-s -w -X github.com/prometheus/common/version.Version=$PROMETHEUS_RELEASE" -o "$tmp/" ./cmd/promtool ./cmd/prometheus) >"$tmp.log" 2>&1; then
		cat "$tmp.log" >&2
		rm -rf "$tmp" "$tmp.log"
		fail "building Prometheus $PROMETHEUS_VERSION failed (output above)"
	fi
	rm -f "$tmp.log"
	settle "$tmp" "$final"
}

need_npm() {
	command -v node >/dev/null 2>&1 && command -v npm >/dev/null 2>&1 ||
		fail "Node.js 20 or newer with npm is required (Debian: apt-get install nodejs npm; macOS: brew install node)"
}

# redocly_install: @redocly/cli, pinned, in its own folder.
redocly_install() {
	local final=$TOOLS_DIR/redocly@$REDOCLY_VERSION tmp
	[ -x "$final/node_modules/.bin/redocly" ] && return 0
	need_npm
	log "installing @redocly/cli $REDOCLY_VERSION (npm)"
	tmp=$(fresh_dir "redocly@$REDOCLY_VERSION")
	printf '{"private":true}\n' >"$tmp/package.json"
	if ! (cd "$tmp" && npm install --no-audit --no-fund --ignore-scripts --save-exact "@redocly/cli@$REDOCLY_VERSION") >"$tmp.log" 2>&1; then
		cat "$tmp.log" >&2
		rm -rf "$tmp" "$tmp.log"
		fail "npm install @redocly/cli@$REDOCLY_VERSION failed (output above)"
	fi
	rm -f "$tmp.log"
	settle "$tmp" "$final"
}

# pinned_installed DIR: node_modules of DIR matches the versions of its package.json
# (dependencies and devDependencies).
pinned_installed() {
	(cd "$1" && node -e '
		const fs = require("fs");
		const pkg = JSON.parse(fs.readFileSync("package.json"));
		const want = { ...pkg.dependencies, ...pkg.devDependencies };
		for (const [name, version] of Object.entries(want)) {
			const got = JSON.parse(fs.readFileSync("node_modules/" + name + "/package.json")).version;
			if (got !== version) process.exit(1);
		}') >/dev/null 2>&1
}

# verifiers_installed: node_modules of the signature verifiers matches package.json.
verifiers_installed() { pinned_installed "$VERIFY_DIR"; }

# npm_ci DIR: npm ci of DIR's lock file, in a private folder beside
# node_modules that is then renamed into place, so that two runs at once in
# the same checkout (make test beside a targeted testenv.sh run) neither
# fail on each other's files nor see a half-installed node_modules. The
# first run needs the npm registry; --prefer-offline takes the packages
# from npm's cache when they are there (the lock file pins their digests).
npm_ci() {
	local dir=$1 tmp
	tmp=$(mktemp -d "$dir/.install-XXXXXX")
	cp "$dir/package.json" "$dir/package-lock.json" "$tmp/"
	if ! (cd "$tmp" && npm ci --no-audit --no-fund --ignore-scripts --prefer-offline) >"$tmp.log" 2>&1; then
		cat "$tmp.log" >&2
		rm -rf "$tmp" "$tmp.log"
		fail "npm ci in ${dir#"$ROOT"/} failed (output above)"
	fi
	rm -f "$tmp.log"
	# Another run may have put its copy in place meanwhile: keep that one.
	if ! pinned_installed "$dir"; then
		rm -rf "$dir/node_modules"
		mv -T "$tmp/node_modules" "$dir/node_modules" 2>/dev/null || pinned_installed "$dir" ||
			fail "could not move node_modules into ${dir#"$ROOT"/}"
	fi
	rm -rf "$tmp"
}

# verifiers_install: npm ci of the webhook signature verifiers, from their lock file.
verifiers_install() {
	need_npm
	verifiers_installed && return 0
	log "installing the webhook signature verifiers (npm ci in internal/webhooks/testdata/verify)"
	npm_ci "$VERIFY_DIR"
}

# prism_install: npm ci of Prism, the mock of Adyen's Checkout API that
# internal/providers/adyen's tests start, from its lock file.
prism_install() {
	need_npm
	pinned_installed "$PRISM_DIR" && return 0
	log "installing prism (npm ci in internal/providers/adyen/testdata/prism)"
	npm_ci "$PRISM_DIR"
}

# apt_install PACKAGE FILE: apt-get install PACKAGE, which installs FILE,
# as root or through sudo -n. Runs of this script on one machine (several
# checkouts at once) take turns, and one that waited installs nothing when
# FILE is there by then; apt-get itself waits for dpkg's lock when another
# program holds it.
apt_install() {
	local pkg=$1 check=$2 sudo=()
	[ "$(id -u)" -eq 0 ] || sudo=(sudo -n)
	mkdir -p "$TOOLS_DIR"
	(
		if command -v flock >/dev/null 2>&1; then
			flock 9
		fi
		[ -x "$check" ] && exit 0
		"${sudo[@]}" apt-get update -qq &&
			DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq --no-install-recommends \
				-o DPkg::Lock::Timeout=300 "$pkg" </dev/null
	) 9>"$TOOLS_DIR/.apt.lock" >/dev/null
}

# browser_install: Debian's chromium (when missing, with apt-get, as root or
# through sudo -n) and playwright-core for the browser journeys (npm ci).
browser_install() {
	need_npm
	if [ ! -x "$CHROMIUM" ]; then
		command -v apt-get >/dev/null 2>&1 ||
			fail "the browser journeys need Debian's chromium at $CHROMIUM (or set CHROMIUM to a Chromium binary)"
		log "installing chromium (apt-get; the browser journeys drive it, no browser is downloaded)"
		apt_install chromium "$CHROMIUM" ||
			fail "apt-get install chromium failed: install it, or set CHROMIUM to a Chromium binary"
	fi
	pinned_installed "$BROWSER_DIR" && return 0
	log "installing playwright-core (npm ci in internal/e2e/browser)"
	npm_ci "$BROWSER_DIR"
}

# pgbouncer_install: Debian's pgbouncer (when missing, with apt-get, as root
# or through sudo -n); the end-to-end tests start their own, in transaction
# mode, in front of PostgreSQL (GATEHOUSE_E2E_PGBOUNCER=0 skips it).
pgbouncer_install() {
	[ -x "$PGBOUNCER" ] && return 0
	command -v apt-get >/dev/null 2>&1 ||
		fail "the end-to-end tests need pgbouncer at $PGBOUNCER (or set PGBOUNCER to its path, or GATEHOUSE_E2E_PGBOUNCER=0)"
	log "installing pgbouncer (apt-get; the end-to-end tests run PostgreSQL behind it)"
	apt_install pgbouncer "$PGBOUNCER" ||
		fail "apt-get install pgbouncer failed: install it, or set PGBOUNCER to its path"
}

# sdk_go_install: the Go generator pinned as a tool in examples/go/go.mod,
# built into Go's build cache so that `go tool oapi-codegen` starts at once.
sdk_go_install() {
	local out
	if ! out=$(cd "$SDK_GO_DIR" && go_env GOFLAGS=-mod=readonly go tool oapi-codegen -version 2>&1); then
		printf '%s\n' "$out" >&2
		fail "building oapi-codegen (go tool, examples/go/go.mod) failed (output above)"
	fi
}

# sdk_ts_install: openapi-typescript, openapi-fetch and TypeScript (npm ci).
sdk_ts_install() {
	need_npm
	pinned_installed "$SDK_TS_DIR" && return 0
	log "installing openapi-typescript, openapi-fetch and typescript (npm ci in examples/typescript)"
	npm_ci "$SDK_TS_DIR"
}

link() {
	mkdir -p "$LINK_DIR"
	ln -sfn "$1" "$LINK_DIR/$2"
}

install_all() {
	local kustomize_dir stripe_mock_dir
	prometheus_install
	kustomize_dir=$(go_tool_build kustomize "$K8S_MODULE_DIR" "$KUSTOMIZE_PKG")
	stripe_mock_dir=$(go_tool_build stripe-mock "$TOOLS_MODULE_DIR" "$STRIPE_MOCK_PKG")
	lint_tools_install
	redocly_install
	verifiers_install
	prism_install
	browser_install
	pgbouncer_install
	sdk_go_install
	sdk_ts_install

	link "$TOOLS_DIR/prometheus@$PROMETHEUS_VERSION/promtool" promtool
	link "$TOOLS_DIR/prometheus@$PROMETHEUS_VERSION/prometheus" prometheus
	link "$kustomize_dir/kustomize" kustomize
	link "$stripe_mock_dir/stripe-mock" stripe-mock
	link "$TOOLS_DIR/redocly@$REDOCLY_VERSION/node_modules/.bin/redocly" redocly
	link "$PGBOUNCER" pgbouncer
	link "$PRISM_DIR/node_modules/.bin/prism" prism
	log "ready in bin/tools: promtool and prometheus $PROMETHEUS_RELEASE, kustomize ${kustomize_dir##*@}, stripe-mock ${stripe_mock_dir##*@}, redocly $REDOCLY_VERSION; prism; signature verifiers; chromium and playwright-core; pgbouncer; oapi-codegen, openapi-typescript and openapi-fetch; staticcheck, unparam, misspell and oasdiff"
}

check_all() {
	local missing=() t
	for t in promtool prometheus kustomize stripe-mock redocly; do
		[ -x "$LINK_DIR/$t" ] || missing+=("$t")
	done
	verifiers_installed || missing+=("signature verifiers")
	pinned_installed "$PRISM_DIR" && [ -x "$LINK_DIR/prism" ] || missing+=("prism")
	[ -x "$CHROMIUM" ] || missing+=("chromium")
	[ -x "$PGBOUNCER" ] || missing+=("pgbouncer")
	pinned_installed "$BROWSER_DIR" || missing+=("playwright-core")
	pinned_installed "$SDK_TS_DIR" || missing+=("openapi-typescript and openapi-fetch")
	if [ "${#missing[@]}" -gt 0 ]; then
		log "missing: ${missing[*]} (run deploy/local/tools.sh)"
		return 1
	fi
	log "all present in bin/tools"
}

case "${1:-install}" in
install) install_all ;;
check) check_all ;;
*)
	echo "usage: $0 [install|check]" >&2
	exit 2
	;;
esac
