#!/usr/bin/env bash
# `make test`'s environment: the pinned tools and a PostgreSQL and Redis that answer.
#
#   deploy/local/testenv.sh CMD...
#
# 1. deploy/local/tools.sh installs what the tests run (promtool, prometheus,
#    kustomize, stripe-mock, prism, redocly, the signature verifiers, pgbouncer) when it is missing,
#    and bin/tools goes first on PATH.
# 2. PostgreSQL: TEST_DATABASE_URL when set (it must answer), else the server on
#    127.0.0.1:5432 when user postgres gets in without a password, else the
#    project-local server of `make run` in .dev/postgres (port 54329), started
#    with the installed PostgreSQL binaries (as root: as user postgres, its
#    cluster outside the checkout; see services.sh). Tests create and drop
#    their own databases there.
# 3. Redis: TEST_REDIS_URL when set (it must answer), else 127.0.0.1:6379, else
#    the project-local redis-server of `make run` in .dev/redis (port 63799).
#    Tests use DB indexes 1-5 and flush them; internal/httpapi's tests each
#    start a redis-server of their own on a Unix socket (testenv.PrivateRedis).
# 4. CMD runs with TEST_DATABASE_URL, TEST_REDIS_URL, STRIPE_MOCK_BIN and PATH set.
#
# A .dev server started here keeps running for the next run; stop it with
# `deploy/local/services.sh down`.
set -euo pipefail

GATEHOUSE_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
SERVICES_TAG='test'
# shellcheck source=deploy/local/services.sh
. "$GATEHOUSE_ROOT/deploy/local/services.sh"

[ "$#" -gt 0 ] || {
	echo "usage: $0 CMD..." >&2
	exit 2
}

bash "$GATEHOUSE_ROOT/deploy/local/tools.sh" install
export PATH="$GATEHOUSE_ROOT/bin/tools:$PATH"
export STRIPE_MOCK_BIN="$GATEHOUSE_ROOT/bin/tools/stripe-mock"

test_postgres() {
	local shared="postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"
	if [ -n "${TEST_DATABASE_URL:-}" ]; then
		psql_cmd >/dev/null || fail "psql is required to check TEST_DATABASE_URL (Debian: apt-get install postgresql-client)"
		pg_answers "$TEST_DATABASE_URL" ||
			fail "TEST_DATABASE_URL ($(redact_url "$TEST_DATABASE_URL")) does not answer; start that server or unset TEST_DATABASE_URL"
		log "PostgreSQL: TEST_DATABASE_URL ($(redact_url "$TEST_DATABASE_URL"))"
		return
	fi
	if psql_cmd >/dev/null && pg_answers "$shared"; then
		TEST_DATABASE_URL=$shared
		log "PostgreSQL: the server on 127.0.0.1:5432"
		return
	fi
	start_dev_postgres # sets DATABASE_URL to its gatehouse_dev database
	TEST_DATABASE_URL="postgres://postgres@127.0.0.1:$DEV_PG_PORT/postgres?sslmode=disable"
	log "PostgreSQL: the project-local server on 127.0.0.1:$DEV_PG_PORT (stop it: deploy/local/services.sh down)"
}

test_redis() {
	local shared="redis://127.0.0.1:6379"
	if [ -n "${TEST_REDIS_URL:-}" ]; then
		redis_answers "$TEST_REDIS_URL" ||
			fail "TEST_REDIS_URL ($(redact_url "$TEST_REDIS_URL")) does not answer; start that server or unset TEST_REDIS_URL"
		log "Redis: TEST_REDIS_URL ($(redact_url "$TEST_REDIS_URL"))"
		return
	fi
	if redis_answers "$shared"; then
		TEST_REDIS_URL=$shared
		log "Redis: the server on 127.0.0.1:6379"
		return
	fi
	start_dev_redis # sets REDIS_URL to its db 0
	TEST_REDIS_URL="redis://127.0.0.1:$DEV_REDIS_PORT"
	log "Redis: the project-local server on 127.0.0.1:$DEV_REDIS_PORT (stop it: deploy/local/services.sh down)"
}

test_postgres
test_redis
export TEST_DATABASE_URL TEST_REDIS_URL
exec "$@"
