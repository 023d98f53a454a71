#!/usr/bin/env bash
# Valkey's WAITAOF 1 0 under `appendfsync everysec` confirms a local fsync
# that has not happened: without ackgap, one valkey-server under strace
# (which shows each fdatasync of the AOF and each reply written), one
# redis-cli connection sending RPUSH then WAITAOF three times, 50 ms apart.
#
# Usage: docs/findings/repro/valkey_waitaof_everysec.sh [VALKEY_SERVER]
# Needs strace and redis-cli (or valkey-cli). The server binary defaults to
# what ci/find-valkey finds.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../../.."
server="${1:-$(ci/find-valkey)}"
cli="$(command -v valkey-cli || command -v redis-cli)"
dir="$(mktemp -d)"
port=$((20000 + RANDOM % 20000))
trap 'kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; rm -rf "$dir"' EXIT
"$server" --version
strace -f -tt -e trace=fdatasync,fsync,write -o "$dir/strace.txt" \
    "$server" --port "$port" --dir "$dir" --appendonly yes --appendfsync everysec \
    --save '' --logfile "$dir/server.log" &
pid=$!
# Past the first second, so the first write's own fsync is due at once.
sleep 2
{
    for x in a b c; do
        echo "RPUSH log $x"
        echo "WAITAOF 1 0 2000"
        sleep 0.05
    done
} | "$cli" -p "$port" | paste -sd' '
sleep 1.5
"$cli" -p "$port" shutdown nosave >/dev/null 2>&1 || true
wait "$pid" 2>/dev/null || true
# The AOF writes (`*3 $5 rpush`), the replies to WAITAOF (`*2 :1 :0`) and
# every fdatasync, in time order.
grep -iE 'rpush|\*2\\r\\n:1|fdatasync|fsync\(' "$dir/strace.txt" | grep -v 'resumed' |
    sed -E 's/^[0-9]+ //'
