#!/usr/bin/env bash
# `make run`: Gatehouse on this machine with one command.
#
#   1. builds bin/api and bin/worker            (make build)
#   2. finds or starts PostgreSQL and Redis      (deploy/local/services.sh explains the order)
#   3. creates .dev/env once with random JWT_SECRET and ENCRYPTION_KEY, and reuses it
#   4. applies the migrations                    (bin/api migrate)
#   5. creates the demo merchant demo@gatehouse.local / gatehouse-demo
#   6. runs the api and the worker in the background, logs prefixed [api] / [worker]
#   7. waits until both are ready, prints how to try the API, stays in the foreground
#
# Ctrl-C stops the api, the worker and any .dev/ Postgres or Redis this run started.
#
# Settings (environment):
#   API_PORT=8080              port of the api (HTTP_ADDR=127.0.0.1:$API_PORT)
#   HTTP_ADDR, METRICS_ADDR    full listen addresses (defaults 127.0.0.1:8080 and
#                              127.0.0.1:9091: the demo password is public, so the
#                              dev server listens on loopback only; HTTP_ADDR=:8080
#                              exposes it to the network)
#   DATABASE_URL, REDIS_URL    use these servers if they answer
#   GATEHOUSE_DEV_LOCAL=1      always use project-local Postgres/Redis under .dev/
#   LOG_LEVEL=info             any other setting of the binaries passes through
#   GATEHOUSE_SKIP_BUILD=1     use the binaries already in bin/
#
# .dev/ is git-ignored. .dev/current.env holds the settings of the last run, so
# `set -a; . .dev/current.env; set +a; bin/api ...` talks to the same services.
set -euo pipefail

GATEHOUSE_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$GATEHOUSE_ROOT"
# shellcheck source=deploy/local/services.sh
. deploy/local/services.sh

DEMO_EMAIL=demo@gatehouse.local
DEMO_PASSWORD=gatehouse-demo
DEMO_NAME='Demo Store'
SECRETS_FILE="$DEV_DIR/env"
READY_TIMEOUT=90

API_PID=
WORKER_PID=

# --- shutdown -----------------------------------------------------------------

# stop_processes NAME:PID...: SIGTERM to all, wait for graceful exits, SIGKILL after 30 s.
stop_processes() {
	local entry name pid alive i
	for entry in "$@"; do
		name=${entry%%:*}
		pid=${entry#*:}
		if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
			log "stopping $name (pid $pid)"
			kill -TERM "$pid" 2>/dev/null || true
		fi
	done
	for ((i = 0; i < 300; i++)); do
		alive=0
		for entry in "$@"; do
			pid=${entry#*:}
			if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then alive=1; fi
		done
		[ "$alive" = 1 ] || return 0
		sleep 0.1
	done
	for entry in "$@"; do
		name=${entry%%:*}
		pid=${entry#*:}
		if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
			log "WARNING: $name did not stop within 30s; killing it"
			kill -KILL "$pid" 2>/dev/null || true
		fi
	done
}

cleanup() {
	local status=$?
	trap - EXIT INT TERM
	# Stopping must finish even if whoever reads our output is gone (e.g. `make run | tee`).
	trap '' PIPE
	set +e
	stop_processes "api:$API_PID" "worker:$WORKER_PID"
	wait 2>/dev/null
	if [ "$STARTED_REDIS" = 1 ]; then stop_dev_redis; fi
	if [ "$STARTED_PG" = 1 ]; then stop_dev_postgres; fi
	if [ -n "$API_PID$WORKER_PID" ] || [ "$STARTED_REDIS$STARTED_PG" != 00 ]; then log "stopped"; fi
	exit "$status"
}
trap cleanup EXIT
trap 'trap "" PIPE; echo >&2; exit 0' INT # Ctrl-C is the normal way to stop: exit 0
trap 'exit 0' TERM

# --- helpers --------------------------------------------------------------------

need() {
	command -v "$1" >/dev/null 2>&1 || fail "$1 is required: $2"
}

# random_hex BYTES: BYTES random bytes as lower-case hex.
random_hex() {
	if command -v openssl >/dev/null 2>&1; then
		openssl rand -hex "$1"
	else
		head -c "$1" /dev/urandom | od -An -v -tx1 | tr -d ' \n'
	fi
}

# addr_port ADDR: the port of host:port or :port.
addr_port() { printf '%s' "${1##*:}"; }

# addr_url ADDR: an http:// base URL that reaches ADDR from this machine.
addr_url() {
	local host=${1%:*}
	case "$host" in
	"" | 0.0.0.0 | "[::]" | "::") host=127.0.0.1 ;;
	esac
	printf 'http://%s:%s' "$host" "$(addr_port "$1")"
}

# start_service NAME CMD...: run CMD in the background with its output prefixed
# by [NAME]. It gets its own session (setsid) where available, so Ctrl-C reaches
# only this script, which then stops it with SIGTERM for a graceful shutdown.
START_PID=
start_service() {
	local name=$1
	shift
	local detach=()
	command -v setsid >/dev/null 2>&1 && detach=(setsid)
	${detach[@]+"${detach[@]}"} "$@" </dev/null > >(
		# Keep reading until the program closes its output, even after Ctrl-C or
		# when our reader is gone, so the program never dies of a broken pipe.
		trap '' INT TERM PIPE
		set +e
		while IFS= read -r line || [ -n "$line" ]; do
			printf '[%s] %s\n' "$name" "$line" 2>/dev/null
		done
	) 2>&1 &
	START_PID=$!
}

# wait_ready NAME PID URL: until URL answers 200, the process dies, or READY_TIMEOUT.
wait_ready() {
	local name=$1 pid=$2 url=$3 i
	for ((i = 0; i < READY_TIMEOUT * 2; i++)); do
		if ! kill -0 "$pid" 2>/dev/null; then
			wait "$pid" 2>/dev/null && status=0 || status=$?
			fail "$name exited (status $status) before it was ready; its log is above"
		fi
		if curl -fsS -o /dev/null --max-time 2 "$url" 2>/dev/null; then
			log "$name is ready ($url)"
			return 0
		fi
		sleep 0.5
	done
	fail "$name was not ready at $url after ${READY_TIMEOUT}s"
}

# --- 0. tools and ports -------------------------------------------------------------------

need curl "install it (apt-get install curl / brew install curl)"
need sed "install it"

if [ -n "${API_PORT:-}" ]; then
	HTTP_ADDR="127.0.0.1:$API_PORT"
fi
export HTTP_ADDR="${HTTP_ADDR:-127.0.0.1:8080}"
export METRICS_ADDR="${METRICS_ADDR:-127.0.0.1:9091}"
export LOG_LEVEL="${LOG_LEVEL:-info}"
# A local stack delivers webhooks to receivers on this machine; production never does.
export WEBHOOK_ALLOW_PRIVATE_NETWORKS="${WEBHOOK_ALLOW_PRIVATE_NETWORKS:-true}"
API_URL=$(addr_url "$HTTP_ADDR")
WORKER_URL=$(addr_url "$METRICS_ADDR")

for addr in "$HTTP_ADDR" "$METRICS_ADDR"; do
	if port_open 127.0.0.1 "$(addr_port "$addr")"; then
		fail "port $(addr_port "$addr") is already in use (another make run?); set API_PORT / METRICS_ADDR"
	fi
done

# --- 1. build ---------------------------------------------------------------------

if [ "${GATEHOUSE_SKIP_BUILD:-0}" = 1 ]; then
	log "GATEHOUSE_SKIP_BUILD=1: using bin/api and bin/worker as they are"
else
	log "building (make build)"
	make --no-print-directory build
fi
if [ ! -x bin/api ] || [ ! -x bin/worker ]; then
	fail "bin/api and bin/worker are missing; run make build"
fi

# --- 2. services --------------------------------------------------------------------

mkdir -p "$DEV_DIR"
ensure_postgres
ensure_redis
export DATABASE_URL REDIS_URL

# --- 3. secrets -------------------------------------------------------------------------

if [ ! -s "$SECRETS_FILE" ]; then
	log "generating $SECRETS_FILE (random JWT_SECRET and ENCRYPTION_KEY for development)"
	(
		umask 077
		{
			echo "# Development secrets for make run, generated $(date -u +%Y-%m-%dT%H:%M:%SZ). Never use them elsewhere."
			echo "JWT_SECRET=$(random_hex 32)"
			echo "ENCRYPTION_KEY=$(random_hex 32)"
		} >"$SECRETS_FILE.tmp"
		mv "$SECRETS_FILE.tmp" "$SECRETS_FILE"
	)
fi
# Values already in the environment win over the file.
while IFS='=' read -r key value; do
	case "$key" in
	JWT_SECRET | ENCRYPTION_KEY)
		if [ -z "${!key:-}" ]; then export "$key=$value"; fi
		;;
	esac
done <"$SECRETS_FILE"
[ "${#JWT_SECRET}" -ge 32 ] || fail "JWT_SECRET in $SECRETS_FILE is too short; delete the file to regenerate it"
[[ "$ENCRYPTION_KEY" =~ ^[0-9a-fA-F]{64}$ ]] || fail "ENCRYPTION_KEY in $SECRETS_FILE is not 64 hex characters; delete the file to regenerate it"

(
	umask 077
	{
		echo "# Settings of the last make run ($(date -u +%Y-%m-%dT%H:%M:%SZ)); regenerated every run."
		for v in DATABASE_URL REDIS_URL JWT_SECRET ENCRYPTION_KEY HTTP_ADDR METRICS_ADDR LOG_LEVEL WEBHOOK_ALLOW_PRIVATE_NETWORKS; do
			printf '%s=%q\n' "$v" "${!v}"
		done
	} >"$DEV_DIR/current.env"
)

# --- 4. migrations --------------------------------------------------------------------------

log "applying migrations (bin/api migrate)"
bin/api migrate || fail "bin/api migrate failed (its message is above)"

# --- 5. demo merchant ----------------------------------------------------------------------

log "the demo merchant $DEMO_EMAIL (created unless a run before made it)"
# --if-absent: an email may own several merchants, and a second make run must
# not make a second one (the login below would then have to name which).
if out=$(bin/api merchant create --email "$DEMO_EMAIL" --password "$DEMO_PASSWORD" --name "$DEMO_NAME" --if-absent 2>&1); then
	log "demo merchant: $out"
else
	printf '%s\n' "$out" >&2
	fail "could not create the demo merchant"
fi

# --- 6. api and worker ------------------------------------------------------------------------

log "starting the api on $HTTP_ADDR and the worker on $METRICS_ADDR"
start_service api bin/api
API_PID=$START_PID
start_service worker bin/worker
WORKER_PID=$START_PID

wait_ready api "$API_PID" "$API_URL/readyz"
wait_ready worker "$WORKER_PID" "$WORKER_URL/readyz"

# --- 7. how to use it ------------------------------------------------------------------------

cat <<EOF

=================================================================================
  Gatehouse is running.   Ctrl-C stops it.

  API      $API_URL        (/healthz /readyz /metrics)
  Worker   $WORKER_URL        (/healthz /readyz /metrics)
  Login    email $DEMO_EMAIL   password $DEMO_PASSWORD
  Dashboard $API_URL/dashboard  (sign in with the login above)
  Settings .dev/current.env

  Try it (copy and paste into another terminal):

  API=$API_URL
  TOKEN=\$(curl -s -X POST "\$API/v1/auth/login" \\
    -H 'Content-Type: application/json' \\
    -d '{"email":"$DEMO_EMAIL","password":"$DEMO_PASSWORD"}' |
    sed -n 's/.*"token"[[:space:]]*:[[:space:]]*"\([^"]*\)".*/\1/p')
  SK=\$(curl -s -X POST "\$API/v1/me/api_keys" \\
    -H "Authorization: Bearer \$TOKEN" -H 'Content-Type: application/json' \\
    -d '{"name":"local dev"}' |
    sed -n 's/.*"secret_key"[[:space:]]*:[[:space:]]*"\([^"]*\)".*/\1/p')
  echo "secret key: \$SK"
  curl -s "\$API/v1/me" -H "Authorization: Bearer \$SK"; echo

  # A first charge: created at once, captured by the worker a moment later.
  CH=\$(curl -s -X POST "\$API/v1/charges" \\
    -H "Authorization: Bearer \$SK" -H 'Content-Type: application/json' \\
    -H "Idempotency-Key: order-1042-\$(date +%s)" \\
    -d '{"amount":2000,"currency":"usd","payment_method":"card",
         "card":{"number":"4242424242424242","exp_month":12,"exp_year":2030,"cvc":"123"},
         "capture":true,"provider":"sandbox","description":"Order 1042","metadata":{"order_id":"1042"}}' |
    sed -n 's/^{"id":"\([^"]*\)".*/\1/p')
  echo "charge: \$CH"; sleep 1
  curl -s "\$API/v1/charges/\$CH" -H "Authorization: Bearer \$SK"; echo
  curl -s "\$API/v1/events?limit=2" -H "Authorization: Bearer \$SK"; echo

  # Receive webhooks on this machine: listen prints the whsec_ secret to verify
  # with, then forwards every event to your URL, signed like a real delivery.
  export GATEHOUSE_API=\$API GATEHOUSE_SECRET_KEY=\$SK
  bin/gatehouse listen --forward-to http://127.0.0.1:3000/webhooks &
  bin/gatehouse trigger charge.captured
=================================================================================

EOF

# --- stay in the foreground ----------------------------------------------------------------------

while :; do
	for pair in "api:$API_PID" "worker:$WORKER_PID"; do
		name=${pair%%:*}
		pid=${pair#*:}
		if ! kill -0 "$pid" 2>/dev/null; then
			wait "$pid" 2>/dev/null && status=0 || status=$?
			fail "$name exited unexpectedly (status $status); stopping"
		fi
	done
	# A background sleep lets the INT/TERM traps run at once.
	sleep 1 &
	wait $! || true
done
