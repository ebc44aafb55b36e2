#!/usr/bin/env bash
# Prepares the local PostgreSQL and Redis for `feed dev` and the tests,
# idempotently: starts them when they are not running, turns on
# wal_level=logical (restarting PostgreSQL only when needed), creates the
# `feed` database, and keeps full inboxes in Redis's compact listpack encoding
# (zset-max-listpack-entries 1024), and installs promtool and DuckDB (npm,
# under tools/duckdb) when missing.
# Safe to run any number of times.
set -euo pipefail

PGHOST=${PGHOST:-127.0.0.1}
PGPORT=${PGPORT:-5432}
PGUSER=${PGUSER:-postgres}
FEED_DB=${FEED_DB:-feed}
export PGHOST PGPORT PGUSER

say() { printf 'prepare: %s\n' "$*" >&2; }
psqlq() { psql -X -q -t -A -v ON_ERROR_STOP=1 -d postgres "$@"; }

pg_version() { ls /etc/postgresql 2>/dev/null | sort -n | tail -1; }

pg_up() { pg_isready -q -h "$PGHOST" -p "$PGPORT" 2>/dev/null; }

pg_ctl() {
  local v; v=$(pg_version)
  if [ -z "$v" ]; then
    say "no local PostgreSQL cluster found under /etc/postgresql; set DATABASE_URL to a server with wal_level=logical"
    return 1
  fi
  pg_ctlcluster --skip-systemctl-redirect "$v" main "$1"
}

wait_pg() {
  for _ in $(seq 1 100); do pg_up && return 0; sleep 0.2; done
  say "PostgreSQL did not come up on $PGHOST:$PGPORT"; return 1
}

# 1. PostgreSQL running.
if ! pg_up; then
  say "starting PostgreSQL"
  pg_ctl start || true
  wait_pg
fi

# 2. Logical replication settings. ALTER SYSTEM writes postgresql.auto.conf;
#    wal_level needs a restart, the others only when below what we need.
need_restart=0
wal=$(psqlq -c 'SHOW wal_level')
if [ "$wal" != "logical" ]; then
  say "setting wal_level=logical (was $wal)"
  psqlq -c "ALTER SYSTEM SET wal_level = 'logical'"
  need_restart=1
fi
slots=$(psqlq -c 'SHOW max_replication_slots')
if [ "$slots" -lt 64 ]; then
  psqlq -c "ALTER SYSTEM SET max_replication_slots = 64"; need_restart=1
fi
senders=$(psqlq -c 'SHOW max_wal_senders')
if [ "$senders" -lt 64 ]; then
  psqlq -c "ALTER SYSTEM SET max_wal_senders = 64"; need_restart=1
fi
conns=$(psqlq -c 'SHOW max_connections')
if [ "$conns" -lt 500 ]; then
  psqlq -c "ALTER SYSTEM SET max_connections = 500"; need_restart=1
fi
# A seed of 50k users (15.5M events, docs/bench.md) thrashes the default
# 128MB of shared buffers with random B-tree inserts; 1GB keeps the follows
# indexes of such a seed in memory.
sb=$(psqlq -c "SELECT setting::bigint * 8192 / 1048576 FROM pg_settings WHERE name = 'shared_buffers'")
if [ "$sb" -lt 1024 ]; then
  psqlq -c "ALTER SYSTEM SET shared_buffers = '1GB'"; need_restart=1
fi
if [ "$need_restart" = 1 ]; then
  say "restarting PostgreSQL to apply replication settings"
  pg_ctl restart
  wait_pg
fi
[ "$(psqlq -c 'SHOW wal_level')" = logical ] || { say "wal_level is still not logical"; exit 1; }

# 2b. A development slot left behind (a `feed dev` that is not running) keeps
#     WAL of the whole server; the tests write gigabytes of it. Cap what a
#     slot may retain on this development server (a reload, no restart);
#     production sets its own value (docs/cdc.md).
if [ "$(psqlq -c 'SHOW max_slot_wal_keep_size')" = "-1" ]; then
  say "capping max_slot_wal_keep_size at 8GB (development server)"
  psqlq -c "ALTER SYSTEM SET max_slot_wal_keep_size = '8GB'" -c "SELECT pg_reload_conf()" >/dev/null
fi

# 2c. Checkpoints: at the default max_wal_size (1GB) the tests and the seed
#     force a checkpoint every few seconds, and every page written after one
#     goes to the WAL whole again. 4GB (a reload) spaces them out.
if [ "$(psqlq -c "SELECT setting::bigint FROM pg_settings WHERE name = 'max_wal_size'")" -lt 4096 ]; then
  say "setting max_wal_size 4GB (development server)"
  psqlq -c "ALTER SYSTEM SET max_wal_size = '4GB'" -c "SELECT pg_reload_conf()" >/dev/null
fi

# 3. The application database.
if [ "$(psqlq -c "SELECT 1 FROM pg_database WHERE datname = '$FEED_DB'")" != 1 ]; then
  say "creating database $FEED_DB"
  psqlq -c "CREATE DATABASE \"$FEED_DB\""
fi

# 4. Redis running.
if ! redis-cli -h 127.0.0.1 -p 6379 ping >/dev/null 2>&1; then
  say "starting Redis"
  redis-server --daemonize yes --bind 127.0.0.1 --port 6379 --save "" --appendonly no --zset-max-listpack-entries 1024
  for _ in $(seq 1 50); do redis-cli -h 127.0.0.1 -p 6379 ping >/dev/null 2>&1 && break; sleep 0.1; done
  redis-cli -h 127.0.0.1 -p 6379 ping >/dev/null || { say "Redis did not come up"; exit 1; }
fi

# 5. Full inboxes (500 posts + trim slack + sentinels) stay listpacks: ~21
#    bytes an entry instead of ~120 (docs/projections.md, Operations).
lp=$(redis-cli -h 127.0.0.1 -p 6379 CONFIG GET zset-max-listpack-entries | tail -1)
if [ "${lp:-0}" -lt 1024 ]; then
  say "setting Redis zset-max-listpack-entries 1024 (was $lp)"
  redis-cli -h 127.0.0.1 -p 6379 CONFIG SET zset-max-listpack-entries 1024 >/dev/null
fi
say "PostgreSQL (wal_level=logical, database $FEED_DB) and Redis are ready"

# 6. Headless Chromium for the status page's browser test (cmd/feed,
#    TestStatusPageInChromium; docs/testing.md): Debian's chromium, installed
#    when missing and this runs as root with apt-get. The test skips, saying
#    why, where there is none.
if ! command -v chromium >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    say "installing chromium (the status page's browser test)"
    export DEBIAN_FRONTEND=noninteractive
    apt-get install -y -q --no-install-recommends chromium fonts-dejavu-core >/dev/null 2>&1 ||
      { apt-get update -q >/dev/null 2>&1 && apt-get install -y -q --no-install-recommends chromium fonts-dejavu-core >/dev/null 2>&1; } ||
      say "could not install chromium: the status page's browser test will be skipped"
  else
    say "chromium is not installed (apt-get install chromium as root): the status page's browser test will be skipped"
  fi
fi

# 7. The local 3-node Redis Cluster the cluster tests use (FEED_TEST_REDIS_CLUSTER_URL
#    points them elsewhere; scripts/redis-cluster.sh, idempotent).
if [ -z "${FEED_TEST_REDIS_CLUSTER_URL:-}" ]; then
  "$(dirname "$0")/redis-cluster.sh" start
fi

# 8. promtool (Debian's prometheus package), for the suite's checks of the
#    alert rules in deploy/prometheus (TestPromtoolRules). RUNLEVEL=1 keeps
#    the package's own Prometheus service from being started.
if ! command -v promtool >/dev/null 2>&1; then
  say "installing Debian's prometheus package (for promtool)"
  apt_install() {
    if [ "$(id -u)" = 0 ]; then RUNLEVEL=1 apt-get install -y --no-install-recommends prometheus >/dev/null
    else sudo RUNLEVEL=1 apt-get install -y --no-install-recommends prometheus >/dev/null; fi
  }
  apt_install || { if [ "$(id -u)" = 0 ]; then apt-get update >/dev/null; else sudo apt-get update >/dev/null; fi; apt_install; }
fi

# 9. DuckDB for the suite's run of the analysts' queries (replay,
#    TestDuckDBReadsExports; docs/replay.md): npm's @duckdb/node-api under
#    tools/duckdb (its node_modules is not committed), with Debian's nodejs
#    and npm when missing.
duck="$(cd "$(dirname "$0")/.." && pwd)/tools/duckdb"
if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
  say "installing Debian's nodejs and npm (for DuckDB)"
  if [ "$(id -u)" = 0 ]; then
    apt-get install -y -q --no-install-recommends nodejs npm >/dev/null ||
      { apt-get update -q >/dev/null && apt-get install -y -q --no-install-recommends nodejs npm >/dev/null; }
  else
    sudo apt-get install -y -q --no-install-recommends nodejs npm >/dev/null
  fi
fi
if [ ! -d "$duck/node_modules/@duckdb/node-api" ]; then
  say "installing DuckDB (npm @duckdb/node-api) into tools/duckdb"
  npm ci --prefix "$duck" --no-audit --no-fund >/dev/null
fi
