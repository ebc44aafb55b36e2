#!/usr/bin/env bash
# A local 3-node Redis Cluster for development and the tests, from the
# machine's redis-server (Debian's package), idempotently:
#
#   scripts/redis-cluster.sh start    # start what is not running, create the cluster once, wait for cluster_state:ok
#   scripts/redis-cluster.sh stop     # shut the nodes down (their cluster config stays, a start brings it back)
#   scripts/redis-cluster.sh status   # per node: up, cluster_state, slots, keys
#   scripts/redis-cluster.sh reset    # stop, forget the cluster's config, start a new one
#   scripts/redis-cluster.sh url      # the REDIS_URL of the cluster (go-redis's cluster form)
#
# Each node has its own directory under REDIS_CLUSTER_DIR (default
# $FEED_STATE_DIR/redis-cluster, FEED_STATE_DIR defaulting to ./.feed) with
# its nodes.conf, log and pid file; nothing is persisted (--save "",
# --appendonly no), so a node that restarts comes back with its slots and
# no keys. Ports: REDIS_CLUSTER_PORTS (default "17001 17002 17003"); each
# node's cluster bus is its port + 10000.
set -euo pipefail

PORTS=${REDIS_CLUSTER_PORTS:-17001 17002 17003}
DIR=${REDIS_CLUSTER_DIR:-${FEED_STATE_DIR:-./.feed}/redis-cluster}
HOST=127.0.0.1

say() { printf 'redis-cluster: %s\n' "$*" >&2; }
cli() { local p=$1; shift; redis-cli -h "$HOST" -p "$p" "$@"; }
up() { cli "$1" ping >/dev/null 2>&1; }
info_field() { cli "$1" cluster info 2>/dev/null | tr -d '\r' | sed -n "s/^$2://p"; }

need_server() {
  if command -v redis-server >/dev/null 2>&1 && command -v redis-cli >/dev/null 2>&1; then return 0; fi
  say "redis-server is not installed; installing Debian's redis-server"
  if [ "$(id -u)" = 0 ]; then apt-get install -y redis-server >/dev/null; else sudo apt-get install -y redis-server >/dev/null; fi
}

start_node() {
  local p=$1 d="$DIR/$1"
  if up "$p"; then return 0; fi
  mkdir -p "$d"
  d=$(cd "$d" && pwd)
  say "starting node $HOST:$p ($d)"
  redis-server --daemonize yes --bind "$HOST" --port "$p" \
    --cluster-enabled yes --cluster-config-file "$d/nodes.conf" --cluster-node-timeout 5000 \
    --dir "$d" --pidfile "$d/redis.pid" --logfile "$d/redis.log" \
    --save "" --appendonly no --zset-max-listpack-entries 1024
  for _ in $(seq 1 50); do up "$p" && return 0; sleep 0.1; done
  say "node $p did not come up; see $d/redis.log"; return 1
}

all_ok() {
  local p
  for p in $PORTS; do [ "$(info_field "$p" cluster_state)" = ok ] || return 1; done
}

# fresh: no node knows another or holds a slot (a cluster never created).
fresh() {
  local p
  for p in $PORTS; do
    [ "$(info_field "$p" cluster_known_nodes)" = 1 ] && [ "$(info_field "$p" cluster_slots_assigned)" = 0 ] || return 1
  done
}

wait_ok() {
  for _ in $(seq 1 150); do all_ok && return 0; sleep 0.2; done
  say "the cluster is not ok (cluster_state on each node below); 'scripts/redis-cluster.sh reset' starts a new one"
  status >&2
  return 1
}

start() {
  need_server
  local p addrs=()
  for p in $PORTS; do start_node "$p"; addrs+=("$HOST:$p"); done
  if all_ok; then say "cluster ok on ${addrs[*]}"; return 0; fi
  if fresh; then
    say "creating the cluster on ${addrs[*]}"
    redis-cli --cluster create "${addrs[@]}" --cluster-replicas 0 --cluster-yes >/dev/null
  fi
  wait_ok
  say "cluster ok on ${addrs[*]}"
}

stop() {
  local p
  for p in $PORTS; do
    if up "$p"; then
      say "stopping node $HOST:$p"
      cli "$p" shutdown nosave >/dev/null 2>&1 || true
    fi
  done
  for p in $PORTS; do
    for _ in $(seq 1 50); do up "$p" || break; sleep 0.1; done
  done
}

status() {
  local p rc=0
  for p in $PORTS; do
    if up "$p"; then
      printf '%s:%s up state=%s slots=%s keys=%s\n' "$HOST" "$p" "$(info_field "$p" cluster_state)" \
        "$(info_field "$p" cluster_slots_assigned)" "$(cli "$p" dbsize)"
    else
      printf '%s:%s down\n' "$HOST" "$p"; rc=1
    fi
  done
  all_ok || rc=1
  return $rc
}

url() {
  local first="" q="" p
  for p in $PORTS; do
    if [ -z "$first" ]; then first="$HOST:$p"; else q="$q${q:+&}addr=$HOST:$p"; fi
  done
  printf 'redis://%s?%s\n' "$first" "$q"
}

case "${1:-}" in
  start) start ;;
  stop) stop ;;
  status) status ;;
  reset) stop; for p in $PORTS; do rm -rf "${DIR:?}/$p"; done; start ;;
  url) url ;;
  *) echo "usage: $0 start|stop|status|reset|url" >&2; exit 2 ;;
esac
