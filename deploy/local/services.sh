#!/usr/bin/env bash
# PostgreSQL and Redis for Gatehouse: the one place that finds and starts them.
#
# Sourced by deploy/local/run.sh (`make run`) and deploy/local/testenv.sh
# (`make test`), run by .ci/run, or run on its own:
#
#   deploy/local/services.sh up       find or start Postgres and Redis, print their URLs
#   deploy/local/services.sh down     stop the project-local instances under .dev/
#   deploy/local/services.sh status   say what is running
#   deploy/local/services.sh ci-up    start the machine's own servers, as .ci/run does
#
# How `up` chooses a service (the first that answers wins):
#   Postgres  1. $DATABASE_URL
#             2. a server on 127.0.0.1:5432 that lets user postgres in without a
#                password; database gatehouse_dev is created there if missing
#             3. a project-local server on port 54329, started with the
#                installed PostgreSQL binaries (initdb, pg_ctl): its cluster
#                and log in .dev/postgres; as root, where it runs as user
#                postgres, who may not enter the checkout (a clone under
#                /root or another private directory), in a directory of that
#                user's own made once under /var/tmp, whose path
#                .dev/postgres/home holds
#   Redis     1. $REDIS_URL
#             2. 127.0.0.1:6379, db 0
#             3. a project-local redis-server in .dev/redis on port 63799
#                (no persistence)
#
# ci-up, for a Debian machine (as root, or with sudo -n):
#   Postgres  the Debian cluster $CI_PG_CLUSTER (default main) on
#             127.0.0.1:$CI_PG_PORT (default 5432), unless a server accepts
#             connections there: started with pg_ctlcluster, created first with
#             pg_createcluster when there is none. When user postgres needs a
#             password, trust rules for 127.0.0.1 and ::1 go at the top of the
#             cluster's pg_hba.conf.
#   Redis     127.0.0.1:$CI_REDIS_PORT (default 6379), else a redis-server started
#             there (no persistence; log /var/log/redis/ci.log).
#
# Settings:
#   GATEHOUSE_DEV_LOCAL=1     skip 1 and 2: always use the .dev/ instances
#   GATEHOUSE_DEV_PG_PORT     port of the .dev Postgres (default 54329)
#   GATEHOUSE_DEV_REDIS_PORT  port of the .dev Redis (default 63799)

# This file is meant to be sourced; these are the defaults.
: "${GATEHOUSE_ROOT:=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}"
DEV_DIR="$GATEHOUSE_ROOT/.dev"
DEV_PG_DIR="$DEV_DIR/postgres"
DEV_PG_PORT="${GATEHOUSE_DEV_PG_PORT:-54329}"
DEV_REDIS_DIR="$DEV_DIR/redis"
DEV_REDIS_PORT="${GATEHOUSE_DEV_REDIS_PORT:-63799}"
DEV_DB_NAME=gatehouse_dev

# Set to 1 by ensure_postgres / ensure_redis when they start a .dev instance.
# shellcheck disable=SC2034 # read by run.sh
STARTED_PG=0
STARTED_REDIS=0

# The tag of log lines: run (make run), test (make test), ci (ci-up).
: "${SERVICES_TAG:=run}"
log() { printf '[%s] %s\n' "$SERVICES_TAG" "$*" >&2; }
fail() {
	printf '[%s] ERROR: %s\n' "$SERVICES_TAG" "$*" >&2
	exit 1
}

# port_open HOST PORT: something accepts TCP connections there.
port_open() {
	(exec 3<>"/dev/tcp/$1/$2") 2>/dev/null
}

# wait_until SECONDS CMD...: run CMD every 0.2 s until it succeeds, for at most
# SECONDS.
wait_until() {
	local secs=$1 i
	shift
	for ((i = 0; i < secs * 5; i++)); do
		"$@" >/dev/null 2>&1 && return 0
		sleep 0.2
	done
	"$@" >/dev/null 2>&1
}

# as_root CMD...: run CMD as root: directly when we are root, else through
# sudo -n when there is one (else as we are, to fail with CMD's own message).
as_root() {
	if [ "$(id -u)" -ne 0 ] && command -v sudo >/dev/null 2>&1; then
		sudo -n "$@"
	else
		"$@"
	fi
}

# --- PostgreSQL -------------------------------------------------------------

# dev_pg_locate: set DEV_PG_HOME, the directory of the .dev cluster (data/,
# postgres.log, initdb.log), and DEV_PG_DATA, its data directory. Not as
# root: .dev/postgres. As root the server runs as another user (pg_user),
# who may not enter the checkout, so the cluster lives in a directory of
# that user's own outside it, which start_dev_postgres makes once under
# /var/tmp and names in .dev/postgres/home; both are empty until then. A
# cluster made in .dev/postgres/data before stays there.
dev_pg_locate() {
	DEV_PG_HOME=$DEV_PG_DIR
	if [ "$(id -u)" -eq 0 ] && [ ! -f "$DEV_PG_DIR/data/PG_VERSION" ]; then
		DEV_PG_HOME=""
		if [ -f "$DEV_PG_DIR/home" ]; then
			DEV_PG_HOME=$(cat "$DEV_PG_DIR/home")
			[ -d "$DEV_PG_HOME" ] || DEV_PG_HOME=""
		fi
	fi
	DEV_PG_DATA=${DEV_PG_HOME:+$DEV_PG_HOME/data}
}
dev_pg_locate

# dev_pg_show PATH: PATH, relative to the checkout when inside it.
dev_pg_show() { printf '%s\n' "${1#"$GATEHOUSE_ROOT"/}"; }

# pg_bindir: the directory with initdb/pg_ctl/postgres/psql, or nothing.
# Prefers the binaries matching an existing .dev data directory's version.
pg_bindir() {
	local want="" d
	[ -n "$DEV_PG_DATA" ] && [ -f "$DEV_PG_DATA/PG_VERSION" ] && want=$(cat "$DEV_PG_DATA/PG_VERSION")
	if [ -n "$want" ] && [ -x "/usr/lib/postgresql/$want/bin/initdb" ]; then
		echo "/usr/lib/postgresql/$want/bin"
		return 0
	fi
	if command -v initdb >/dev/null 2>&1 && command -v pg_ctl >/dev/null 2>&1; then
		dirname "$(command -v initdb)"
		return 0
	fi
	# Debian/Ubuntu, RHEL/Fedora (PGDG), Homebrew, Postgres.app; newest version first.
	for d in $(pg_versions /usr/lib/postgresql | sed 's#.*#/usr/lib/postgresql/&/bin#') \
		$(ls -d /usr/pgsql-*/bin 2>/dev/null | sort -r) \
		$(ls -d /opt/homebrew/opt/postgresql*/bin /usr/local/opt/postgresql*/bin 2>/dev/null | sort -r) \
		$(ls -d /Applications/Postgres.app/Contents/Versions/latest/bin 2>/dev/null); do
		if [ -x "$d/initdb" ] && [ -x "$d/pg_ctl" ]; then
			echo "$d"
			return 0
		fi
	done
	return 1
}

# psql_cmd: a psql client, from PATH or beside the server binaries.
psql_cmd() {
	local d
	if command -v psql >/dev/null 2>&1; then
		command -v psql
	elif d=$(pg_bindir) && [ -x "$d/psql" ]; then
		echo "$d/psql"
	else
		return 1
	fi
}

# pg_query URL SQL: run SQL without ever prompting for a password.
pg_query() {
	local psql
	psql=$(psql_cmd) || return 1
	PGCONNECT_TIMEOUT=3 "$psql" -w -X -q -At -d "$1" -c "$2" </dev/null
}

pg_answers() { pg_query "$1" 'SELECT 1' >/dev/null 2>&1; }

# pg_ensure_db ADMIN_URL: create $DEV_DB_NAME on that server if it is missing.
pg_ensure_db() {
	local exists
	exists=$(pg_query "$1" "SELECT 1 FROM pg_database WHERE datname = '$DEV_DB_NAME'") ||
		fail "cannot query the databases of $(redact_url "$1")"
	if [ "$exists" != 1 ]; then
		log "creating database $DEV_DB_NAME"
		pg_query "$1" "CREATE DATABASE $DEV_DB_NAME" >/dev/null ||
			fail "could not create database $DEV_DB_NAME"
	fi
}

# The .dev server runs as an unprivileged user when we are root: initdb and
# pg_ctl refuse to run as root.
pg_user() {
	if [ "$(id -u)" -ne 0 ]; then
		id -un
	elif [ -n "$DEV_PG_DATA" ] && [ -d "$DEV_PG_DATA" ]; then
		stat -c %U "$DEV_PG_DATA" 2>/dev/null || stat -f %Su "$DEV_PG_DATA"
	elif id postgres >/dev/null 2>&1; then
		echo postgres
	else
		echo nobody
	fi
}

# as_pg_user CMD...: run CMD as the owner of the .dev cluster, in the
# cluster's directory (PostgreSQL's programs complain when they cannot
# enter the one they start in).
as_pg_user() {
	if [ "$(id -u)" -ne 0 ]; then
		"$@"
	else
		local user
		user=$(pg_user)
		(
			cd "${DEV_PG_HOME:-/}"
			if command -v runuser >/dev/null 2>&1; then
				runuser -u "$user" -- "$@"
			else
				su "$user" -s /bin/sh -c '"$@"' sh "$@"
			fi
		)
	fi
}

dev_pg_running() {
	local bin
	[ -n "$DEV_PG_DATA" ] && [ -f "$DEV_PG_DATA/postmaster.pid" ] || return 1
	bin=$(pg_bindir) || return 1
	as_pg_user "$bin/pg_ctl" -D "$DEV_PG_DATA" status >/dev/null 2>&1
}

pg_install_help() {
	cat >&2 <<'EOF'
[run] No PostgreSQL server answers and no PostgreSQL server binaries (initdb, pg_ctl)
[run] were found to start a project-local one. Install PostgreSQL, then run again:
[run]     Debian/Ubuntu:  sudo apt-get install postgresql
[run]     macOS:          brew install postgresql
[run] Or point DATABASE_URL at a server you have: DATABASE_URL=postgres://... make run
EOF
	exit 1
}

start_dev_postgres() {
	local bin user url
	bin=$(pg_bindir) || pg_install_help
	url="postgres://postgres@127.0.0.1:$DEV_PG_PORT/postgres?sslmode=disable"

	if dev_pg_running; then
		log "reusing the .dev Postgres already running on port $DEV_PG_PORT (stop it: deploy/local/services.sh down)"
	else
		if port_open 127.0.0.1 "$DEV_PG_PORT"; then
			fail "port $DEV_PG_PORT is taken by another program; set GATEHOUSE_DEV_PG_PORT to a free port"
		fi
		user=$(pg_user)
		mkdir -p "$DEV_PG_DIR"
		if [ -z "$DEV_PG_HOME" ]; then
			# As root, the first time: a directory of the server's user, outside the checkout.
			DEV_PG_HOME=$(mktemp -d /var/tmp/gatehouse-dev-postgres.XXXXXX) ||
				fail "could not make a directory for the .dev Postgres under /var/tmp"
			chown "$user" "$DEV_PG_HOME"
			printf '%s\n' "$DEV_PG_HOME" >"$DEV_PG_DIR/home"
			DEV_PG_DATA=$DEV_PG_HOME/data
		fi
		if [ ! -f "$DEV_PG_DATA/PG_VERSION" ]; then
			log "initialising a project-local Postgres in $(dev_pg_show "$DEV_PG_HOME") (as $user, $bin)"
			rm -rf "$DEV_PG_DATA"
			as_pg_user test -w "$DEV_PG_HOME" ||
				fail "user $user cannot write to $DEV_PG_HOME (is a parent directory private?); use DATABASE_URL instead"
			as_pg_user "$bin/initdb" -D "$DEV_PG_DATA" -U postgres -A trust -E UTF8 --locale=C \
				>"$DEV_PG_HOME/initdb.log" 2>&1 ||
				fail "initdb failed; see $(dev_pg_show "$DEV_PG_HOME/initdb.log")"
			cat >>"$DEV_PG_DATA/postgresql.conf" <<'EOF'

# gatehouse dev (deploy/local/services.sh): loopback TCP only, no socket files
listen_addresses = '127.0.0.1'
unix_socket_directories = ''
EOF
		fi
		log "starting the .dev Postgres on 127.0.0.1:$DEV_PG_PORT (log: $(dev_pg_show "$DEV_PG_HOME/postgres.log"))"
		as_pg_user "$bin/pg_ctl" -D "$DEV_PG_DATA" -l "$DEV_PG_HOME/postgres.log" -w -t 60 \
			-o "-p $DEV_PG_PORT" start >/dev/null ||
			fail "the .dev Postgres did not start; see $(dev_pg_show "$DEV_PG_HOME/postgres.log")"
		# shellcheck disable=SC2034 # read by run.sh
		STARTED_PG=1
	fi
	pg_answers "$url" || fail "the .dev Postgres does not answer on 127.0.0.1:$DEV_PG_PORT"
	pg_ensure_db "$url"
	DATABASE_URL="postgres://postgres@127.0.0.1:$DEV_PG_PORT/$DEV_DB_NAME?sslmode=disable"
}

stop_dev_postgres() {
	local bin
	dev_pg_running || return 0
	bin=$(pg_bindir) || return 0
	log "stopping the .dev Postgres"
	as_pg_user "$bin/pg_ctl" -D "$DEV_PG_DATA" -m fast -w -t 30 stop >/dev/null 2>&1 ||
		log "WARNING: pg_ctl stop failed; see $(dev_pg_show "$DEV_PG_HOME/postgres.log")"
}

# ensure_postgres: set DATABASE_URL to a Postgres that answers.
ensure_postgres() {
	local shared="postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"
	if [ "${GATEHOUSE_DEV_LOCAL:-0}" = 1 ]; then
		log "GATEHOUSE_DEV_LOCAL=1: using the project-local Postgres"
		start_dev_postgres
		return
	fi
	if [ -n "${DATABASE_URL:-}" ]; then
		if ! psql_cmd >/dev/null; then
			log "no psql client to check DATABASE_URL; using it as given"
			return
		fi
		if pg_answers "$DATABASE_URL"; then
			log "Postgres: using DATABASE_URL ($(redact_url "$DATABASE_URL"))"
			return
		fi
		log "WARNING: DATABASE_URL is set but does not answer ($(redact_url "$DATABASE_URL")); looking elsewhere"
	fi
	if psql_cmd >/dev/null && pg_answers "$shared"; then
		log "Postgres: using the server on 127.0.0.1:5432, database $DEV_DB_NAME"
		pg_ensure_db "$shared"
		DATABASE_URL="postgres://postgres@127.0.0.1:5432/$DEV_DB_NAME?sslmode=disable"
		return
	fi
	start_dev_postgres
}

# --- Redis ------------------------------------------------------------------

# with_timeout SECONDS CMD...: run CMD, bounded when timeout(1) exists.
with_timeout() {
	local secs=$1
	shift
	if command -v timeout >/dev/null 2>&1; then
		timeout "$secs" "$@"
	else
		"$@"
	fi
}

# redis_answers URL: the server answers PING with PONG (with the URL's credentials).
redis_answers() {
	local url=$1 reply
	if command -v redis-cli >/dev/null 2>&1; then
		reply=$(with_timeout 3 redis-cli -u "$url" ping 2>/dev/null </dev/null) || return 1
		[ "$reply" = PONG ]
	else
		# No redis-cli: speak the protocol by hand (host and port only).
		local hostport host port
		hostport=${url#*://}
		hostport=${hostport#*@}
		hostport=${hostport%%/*}
		host=${hostport%:*}
		port=${hostport##*:}
		[ "$host" = "$hostport" ] && port=6379
		reply=$(
			exec 3<>"/dev/tcp/$host/$port" || exit 1
			printf 'PING\r\n' >&3
			IFS= read -r -t 3 line <&3 && printf '%s' "${line%$'\r'}"
		) 2>/dev/null || return 1
		[ "$reply" = "+PONG" ]
	fi
}

dev_redis_pid() {
	local pid
	[ -f "$DEV_REDIS_DIR/redis.pid" ] || return 1
	pid=$(cat "$DEV_REDIS_DIR/redis.pid" 2>/dev/null) || return 1
	[ -n "$pid" ] && kill -0 "$pid" 2>/dev/null || return 1
	echo "$pid"
}

redis_install_help() {
	cat >&2 <<'EOF'
[run] No Redis server answers and redis-server was not found to start a project-local one.
[run] Install Redis, then run again:
[run]     Debian/Ubuntu:  sudo apt-get install redis-server
[run]     macOS:          brew install redis
[run] Or point REDIS_URL at a server you have: REDIS_URL=redis://host:6379/0 make run
EOF
	exit 1
}

# redis_args PORT DIR LOGFILE [PIDFILE]: set REDIS_ARGS to the arguments of a
# redis-server that runs in the background on 127.0.0.1 (and ::1 when it can)
# port PORT, in DIR, without persistence.
redis_args() {
	REDIS_ARGS=(--daemonize yes --bind 127.0.0.1 -::1 --port "$1" --dir "$2" --logfile "$3"
		--save "" --appendonly no)
	if [ -n "${4:-}" ]; then REDIS_ARGS+=(--pidfile "$4"); fi
}

start_dev_redis() {
	local url="redis://127.0.0.1:$DEV_REDIS_PORT/0"
	if dev_redis_pid >/dev/null && redis_answers "$url"; then
		log "reusing the .dev Redis already running on port $DEV_REDIS_PORT (stop it: deploy/local/services.sh down)"
	else
		command -v redis-server >/dev/null 2>&1 || redis_install_help
		if port_open 127.0.0.1 "$DEV_REDIS_PORT"; then
			fail "port $DEV_REDIS_PORT is taken by another program; set GATEHOUSE_DEV_REDIS_PORT to a free port"
		fi
		mkdir -p "$DEV_REDIS_DIR"
		rm -f "$DEV_REDIS_DIR/redis.pid"
		log "starting the .dev Redis on 127.0.0.1:$DEV_REDIS_PORT (log: .dev/redis/redis.log)"
		redis_args "$DEV_REDIS_PORT" "$DEV_REDIS_DIR" "$DEV_REDIS_DIR/redis.log" "$DEV_REDIS_DIR/redis.pid"
		redis-server "${REDIS_ARGS[@]}" </dev/null >/dev/null ||
			fail "redis-server did not start; see .dev/redis/redis.log"
		# shellcheck disable=SC2034 # read by run.sh
		STARTED_REDIS=1
		wait_until 10 redis_answers "$url" || true
	fi
	redis_answers "$url" || fail "the .dev Redis does not answer on 127.0.0.1:$DEV_REDIS_PORT; see .dev/redis/redis.log"
	REDIS_URL=$url
}

stop_dev_redis() {
	local pid i
	pid=$(dev_redis_pid) || return 0
	log "stopping the .dev Redis"
	kill -TERM "$pid" 2>/dev/null || true
	for ((i = 0; i < 50; i++)); do
		kill -0 "$pid" 2>/dev/null || break
		sleep 0.2
	done
	if kill -0 "$pid" 2>/dev/null; then
		kill -KILL "$pid" 2>/dev/null || true
	fi
	rm -f "$DEV_REDIS_DIR/redis.pid"
}

# ensure_redis: set REDIS_URL to a Redis that answers.
ensure_redis() {
	local shared="redis://127.0.0.1:6379/0"
	if [ "${GATEHOUSE_DEV_LOCAL:-0}" = 1 ]; then
		log "GATEHOUSE_DEV_LOCAL=1: using the project-local Redis"
		start_dev_redis
		return
	fi
	if [ -n "${REDIS_URL:-}" ]; then
		if redis_answers "$REDIS_URL"; then
			log "Redis: using REDIS_URL ($(redact_url "$REDIS_URL"))"
			return
		fi
		log "WARNING: REDIS_URL is set but does not answer ($(redact_url "$REDIS_URL")); looking elsewhere"
	fi
	if redis_answers "$shared"; then
		log "Redis: using the server on 127.0.0.1:6379, db 0"
		REDIS_URL=$shared
		return
	fi
	start_dev_redis
}

# redact_url URL: hide a password in scheme://user:password@host.
redact_url() {
	printf '%s' "$1" | sed -E 's#(://[^:/@]*):[^@/]*@#\1:***@#'
}

# --- the machine's own servers (ci-up) ----------------------------------------

# pg_versions DIR: the names of DIR's subdirectories (PostgreSQL versions),
# newest first.
pg_versions() {
	local d
	for d in "$1"/*/; do
		if [ -d "$d" ]; then basename "$d"; fi
	done | sort -rn
}

# pg_cluster_version CLUSTER: the newest PostgreSQL version with a Debian
# cluster named CLUSTER.
pg_cluster_version() {
	local v
	for v in $(pg_versions /etc/postgresql); do
		if [ -d "/etc/postgresql/$v/$1" ]; then
			echo "$v"
			return 0
		fi
	done
	return 1
}

# pg_accepting PORT: a PostgreSQL server on 127.0.0.1:PORT accepts connections.
pg_accepting() {
	if command -v pg_isready >/dev/null 2>&1; then
		pg_isready -q -h 127.0.0.1 -p "$1"
	else
		port_open 127.0.0.1 "$1"
	fi
}

# pg_trust_loopback CLUSTER VERSION: let every user of the Debian cluster in
# from 127.0.0.1 and ::1 without a password (rules added once, at the top of
# its pg_hba.conf), and reload it.
pg_trust_loopback() {
	local hba="/etc/postgresql/$2/$1/pg_hba.conf" marker='# gatehouse-ci: trust local TCP connections' tmp
	[ -f "$hba" ] || fail "user postgres needs a password and $hba does not exist"
	if ! grep -qF "$marker" "$hba"; then
		log "adding trust rules for 127.0.0.1/32 and ::1/128 at the top of $hba"
		tmp=$(mktemp)
		{
			echo "$marker"
			echo 'host    all    all    127.0.0.1/32    trust'
			echo 'host    all    all    ::1/128         trust'
			cat "$hba"
		} >"$tmp"
		as_root cp "$tmp" "$hba"
		rm -f "$tmp"
	fi
	as_root pg_ctlcluster --skip-systemctl-redirect "$2" "$1" reload
}

# ensure_cluster_postgres CLUSTER PORT: a PostgreSQL on 127.0.0.1:PORT that
# lets user postgres in without a password, starting (and creating) the
# Debian cluster CLUSTER when nothing accepts connections there.
ensure_cluster_postgres() {
	local cluster=$1 port=$2 version url
	url="postgres://postgres@127.0.0.1:$port/postgres?sslmode=disable"
	if pg_accepting "$port"; then
		log "PostgreSQL on 127.0.0.1:$port already accepts connections"
	else
		command -v pg_ctlcluster >/dev/null 2>&1 ||
			fail "nothing accepts connections on 127.0.0.1:$port and pg_ctlcluster was not found (Debian: apt-get install postgresql)"
		if ! version=$(pg_cluster_version "$cluster"); then
			# Server installed but no cluster (e.g. create_main_cluster = false).
			read -r version < <(pg_versions /usr/lib/postgresql) || fail "no PostgreSQL server in /usr/lib/postgresql"
			log "no cluster $cluster: pg_createcluster -p $port $version $cluster"
			as_root pg_createcluster -p "$port" "$version" "$cluster" >&2
		fi
		log "pg_ctlcluster --skip-systemctl-redirect $version $cluster start"
		as_root pg_ctlcluster --skip-systemctl-redirect "$version" "$cluster" start >&2 ||
			log "pg_ctlcluster start returned non-zero (it may be running already); waiting"
		wait_until 60 pg_accepting "$port" ||
			fail "PostgreSQL does not accept connections on 127.0.0.1:$port after 60s (see /var/log/postgresql/)"
		log "PostgreSQL on 127.0.0.1:$port: up"
	fi
	psql_cmd >/dev/null || fail "psql is required (Debian: apt-get install postgresql-client)"
	if pg_answers "$url"; then
		log "PostgreSQL: user postgres gets in without a password"
		return
	fi
	version=$(pg_cluster_version "$cluster") ||
		fail "user postgres needs a password on 127.0.0.1:$port, and there is no Debian cluster $cluster to configure"
	pg_trust_loopback "$cluster" "$version"
	wait_until 60 pg_answers "$url" ||
		fail "user postgres still needs a password on 127.0.0.1:$port after editing the cluster's pg_hba.conf"
	log "PostgreSQL: user postgres gets in without a password"
}

# ensure_system_redis PORT: a Redis on 127.0.0.1:PORT, started when none
# answers there.
ensure_system_redis() {
	local port=$1 url="redis://127.0.0.1:$1"
	if redis_answers "$url"; then
		log "Redis on 127.0.0.1:$port already answers"
		return
	fi
	command -v redis-server >/dev/null 2>&1 || redis_install_help
	as_root mkdir -p /var/lib/redis /var/log/redis
	log "starting redis-server on 127.0.0.1:$port (log: /var/log/redis/ci.log)"
	redis_args "$port" /var/lib/redis /var/log/redis/ci.log
	as_root redis-server "${REDIS_ARGS[@]}" </dev/null >/dev/null ||
		fail "redis-server did not start; see /var/log/redis/ci.log"
	wait_until 60 redis_answers "$url" ||
		fail "Redis does not answer PING on 127.0.0.1:$port after 60s (see /var/log/redis/ci.log)"
	log "Redis on 127.0.0.1:$port: up"
}

# --- CLI --------------------------------------------------------------------

services_main() {
	set -euo pipefail
	case "${1:-}" in
	up)
		ensure_postgres
		ensure_redis
		echo "DATABASE_URL=$DATABASE_URL"
		echo "REDIS_URL=$REDIS_URL"
		;;
	down)
		stop_dev_postgres
		stop_dev_redis
		;;
	ci-up)
		SERVICES_TAG=ci
		ensure_cluster_postgres "${CI_PG_CLUSTER:-main}" "${CI_PG_PORT:-5432}"
		ensure_system_redis "${CI_REDIS_PORT:-6379}"
		;;
	status)
		if dev_pg_running; then echo "postgres: .dev instance running on 127.0.0.1:$DEV_PG_PORT"; else echo "postgres: no .dev instance running"; fi
		if dev_redis_pid >/dev/null; then echo "redis:    .dev instance running on 127.0.0.1:$DEV_REDIS_PORT"; else echo "redis:    no .dev instance running"; fi
		;;
	*)
		echo "usage: $0 up|down|status|ci-up" >&2
		exit 2
		;;
	esac
}

if [ "${BASH_SOURCE[0]}" = "$0" ]; then
	services_main "$@"
fi
