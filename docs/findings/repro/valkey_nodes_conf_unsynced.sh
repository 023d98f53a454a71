#!/usr/bin/env bash
# Valkey rewrites a cluster node's nodes.conf without an fsync: without
# ackgap, two cluster nodes, one of them under strace (which shows each
# open of nodes.conf's temporary file, each fsync/fdatasync and each
# rename over nodes.conf), met with CLUSTER MEET after CLUSTER
# ADDSLOTSRANGE. A temporary file renamed over nodes.conf with no
# fdatasync of it before the rename is a rewrite a power loss can empty.
#
# Usage: docs/findings/repro/valkey_nodes_conf_unsynced.sh [VALKEY_SERVER]
# Needs strace and redis-cli (or valkey-cli). The server binary defaults to
# what ci/find-valkey finds.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../../.."
server="${1:-$(ci/find-valkey)}"
cli="$(command -v valkey-cli || command -v redis-cli)"
dir="$(mktemp -d)"
mkdir "$dir/a" "$dir/b"
base=$((20000 + RANDOM % 20000))
pa=$base pb=$((base + 1)) busa=$((base + 2)) busb=$((base + 3))
pids=()
trap 'kill "${pids[@]}" 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$dir"' EXIT
"$server" --version
args() { # DIR PORT BUS
    echo --port "$2" --dir "$1" --cluster-enabled yes --cluster-config-file nodes.conf \
        --cluster-port "$3" --cluster-announce-ip 127.0.0.1 --logfile "$1/server.log"
}
# shellcheck disable=SC2046 # the words of args, split on purpose
strace -f -tt -e trace=openat,rename,fsync,fdatasync -o "$dir/strace.txt" \
    "$server" $(args "$dir/a" "$pa" "$busa") &
pids+=($!)
# shellcheck disable=SC2046
"$server" $(args "$dir/b" "$pb" "$busb") &
pids+=($!)
sleep 1
"$cli" -p "$pa" cluster addslotsrange 0 16383
"$cli" -p "$pa" cluster meet 127.0.0.1 "$pb" "$busb"
sleep 2
"$cli" -p "$pa" cluster info | grep cluster_state
for p in "$pa" "$pb"; do "$cli" -p "$p" shutdown nosave >/dev/null 2>&1 || true; done
wait 2>/dev/null || true
# Node a's rewrites of nodes.conf, in time order: each temporary file
# opened, fdatasync'ed or not, renamed over nodes.conf.
grep -E 'nodes\.conf|fsync\(|fdatasync\(' "$dir/strace.txt" | grep -v resumed |
    sed -E 's/^[0-9]+ //'
