#!/usr/bin/env bash
# API stability: within v1, changes to api/openapi.yaml are additive, so a client
# generated from a released description still compiles and behaves the same.
#
#   deploy/local/api-compat.sh                          the released description against api/openapi.yaml
#   deploy/local/api-compat.sh BASE REVISION CHANGELOG  any two descriptions and a changelog (api/compat_test.go)
#
# Without arguments, BASE is api/openapi.yaml as of the commit api/released names
# (read with git show), REVISION is api/openapi.yaml and CHANGELOG
# docs/api-changelog.md. `make api-compat` runs it, and so `make lint` and `make test`.
#
# It runs oasdiff (a `tool` of tools/go.mod) on the two descriptions and fails on
# every change oasdiff's checks rate as breaking (level ERR) that no line of
# CHANGELOG accepts. A line accepts a change of an operation when the first word
# of the line that begins with "/" is the operation's path, and the line contains
# "METHOD /path" and oasdiff's text of the change, case aside (oasdiff's
# --err-ignore); docs/api-changelog.md says how to write one. This is
# `oasdiff breaking BASE REVISION --fail-on ERR --err-ignore CHANGELOG`, run as
# `oasdiff changelog --level ERR` (the same checks) so that only what fails is
# printed: `oasdiff breaking` also prints the warnings (new enum values of
# responses, changed patterns), which do not fail.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)

fail() {
	printf 'api-compat: %s\n' "$*" >&2
	exit 1
}

# Go lives in /usr/local/go/bin on our machines; find it there when it is not on PATH.
command -v go >/dev/null 2>&1 || PATH=/usr/local/go/bin:$PATH
command -v go >/dev/null 2>&1 || fail "go is required; it is not on PATH or in /usr/local/go/bin"

# released_commit: the full hash api/released names (comment lines start with #).
released_commit() {
	local line commit=""
	[ -f api/released ] || fail "api/released is missing"
	while IFS= read -r line || [ -n "$line" ]; do
		line=${line#"${line%%[![:space:]]*}"}
		line=${line%"${line##*[![:space:]]}"}
		case $line in
		'' | '#'*) continue ;;
		esac
		[[ $line =~ ^[0-9a-f]{40}$ ]] || fail "api/released: \"$line\" is not a full commit hash"
		commit=$line
		break
	done <api/released
	[ -n "$commit" ] || fail "api/released names no commit"
	printf '%s\n' "$commit"
}

case $# in
0)
	cd "$ROOT"
	commit=$(released_commit)
	command -v git >/dev/null 2>&1 || fail "git is required to read the released description"
	if ! out=$(git cat-file -e "$commit^{commit}" 2>&1); then
		fail "commit $commit (api/released) is not in this clone${out:+ ($out)}; fetch it with" \
			"\`git fetch --unshallow\` or \`git fetch origin $commit\`"
	fi
	tmp=$(mktemp -d "${TMPDIR:-/tmp}/gatehouse-api-compat.XXXXXX")
	trap 'rm -rf "$tmp"' EXIT
	base=$tmp/released-openapi.yaml
	git show "$commit:api/openapi.yaml" >"$base" || fail "git show $commit:api/openapi.yaml failed"
	revision=api/openapi.yaml
	changelog=docs/api-changelog.md
	echo "oasdiff: the released api/openapi.yaml (${commit:0:12}, api/released) against api/openapi.yaml"
	;;
3)
	# Paths as given, from the caller's directory; oasdiff runs in the root, so
	# that no oasdiff configuration file of another directory applies.
	abs() { case $1 in /*) printf '%s\n' "$1" ;; *) printf '%s\n' "$PWD/$1" ;; esac }
	base=$(abs "$1") revision=$(abs "$2") changelog=$(abs "$3")
	cd "$ROOT"
	;;
*)
	echo "usage: $0 [BASE REVISION CHANGELOG]" >&2
	exit 2
	;;
esac

[ -f "$changelog" ] || fail "$changelog is missing"
# The flags below are the whole configuration: no OASDIFF_CONFIG of the caller's.
unset OASDIFF_CONFIG
# go tool -n builds oasdiff into Go's build cache (once) and names the binary, so
# that a failed build is not taken for a breaking change.
oasdiff=$(go tool -modfile="$ROOT/tools/go.mod" -n oasdiff) || fail "building oasdiff (go tool, tools/go.mod) failed"
status=0
"$oasdiff" changelog "$base" "$revision" --level ERR --fail-on ERR --err-ignore "$changelog" --color never || status=$?
case $status in
0) echo "api-compat: ok" ;;
1)
	fail "the breaking changes above would break a client generated from the base description." \
		"Keep the old contract, or name each change in $changelog, one line each: METHOD /path" \
		"(the path bare, not in backticks), oasdiff's text of the change, and why (the head of" \
		"docs/api-changelog.md says how)"
	;;
*) fail "oasdiff failed (exit status $status; output above)" ;;
esac
