#!/usr/bin/env bash
# RESP strings, goblin-gateway + goblin-core against redis-server: Debian's redis-benchmark
# runs GET and SET with the same keys and value sizes against each server in turn (a fresh
# server per server kind, unix sockets, CLIENTS connections, PIPELINE requests in flight per
# connection), and the table gives requests/s and the latency percentiles redis-benchmark
# reports, with goblin's ratio to Redis. Redis keeps its values in RAM only (no save, no
# AOF); goblin's SETs are durable when answered (written to its disk tier and journaled), its
# GETs come from its RAM pool (heads) and disk.
#   bench/resp_objects_benchmark.sh [--no-build]
# Environment (defaults): SIZES ("100 1000 65536"), CLIENTS (50), PIPELINE ("1 16"),
# REQUESTS (100000), KEYS (10000: -r), CORES (1: goblin-core shards), BUILD_DIR
# (build/release), OUT (var/bench/resp-objects-<time>). Results: OUT/results.md.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD_DIR=${BUILD_DIR:-$ROOT/build/release}
SIZES=${SIZES:-"100 1000 65536"}
CLIENTS=${CLIENTS:-50}
PIPELINE=${PIPELINE:-"1 16"}
REQUESTS=${REQUESTS:-100000}
KEYS=${KEYS:-10000}
CORES=${CORES:-1}
OUT=${OUT:-$ROOT/var/bench/resp-objects-$(date -u +%Y%m%d-%H%M%S)}
[ "${1:-}" = "--no-build" ] ||
  cmake --build "$BUILD_DIR" --target goblin-core goblin-gateway >/dev/null
mkdir -p "$OUT"
DIR=$(mktemp -d /var/tmp/goblin-respbench.XXXXXX)
PIDS=()
stop_all() {
  for p in ${PIDS[@]+"${PIDS[@]}"}; do kill -TERM "$p" 2>/dev/null || true; done
  for p in ${PIDS[@]+"${PIDS[@]}"}; do wait "$p" 2>/dev/null || true; done
  PIDS=()
}
cleanup() { stop_all; rm -rf "$DIR"; }
trap cleanup EXIT

wait_sock() {
  for _ in $(seq 400); do
    [ -S "$1" ] && return 0
    sleep 0.05
  done
  echo "no socket $1" >&2
  return 1
}

start() {  # redis | goblin -> SOCK
  rm -rf "${DIR:?}"/*
  case $1 in
    redis)
      redis-server --port 0 --unixsocket "$DIR/redis.sock" --save "" --appendonly no \
        --dir "$DIR" > "$OUT/redis.log" 2>&1 &
      PIDS+=($!)
      SOCK=$DIR/redis.sock ;;
    goblin)
      "$BUILD_DIR/core/goblin-core" --prepare "$DIR/ssd" > /dev/null
      "$BUILD_DIR/core/goblin-core" --listen-unix "$DIR/core.sock" --memory 1G --block 1M \
        --ram-head 1M --hugepages off --ssd-dir "$DIR/ssd" --cores "$CORES" \
        > "$OUT/core.log" 2>&1 &
      PIDS+=($!)
      wait_sock "$DIR/core.sock"
      "$BUILD_DIR/gateway/goblin-gateway" --core "unix:$DIR/core.sock" --resp-port 0 \
        --resp-unix "$DIR/gw.sock" > "$OUT/gateway.log" 2>&1 &
      PIDS+=($!)
      SOCK=$DIR/gw.sock ;;
  esac
  wait_sock "$SOCK"
}

{
  echo "date: $(date -u +%FT%TZ)"
  echo "goblin: $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo '?'); redis $(redis-server --version | sed -n 's/.* v=\([^ ]*\).*/\1/p')"
  echo "cpu: $(sed -n 's/^model name\s*: //p' /proc/cpuinfo | head -1) x $(nproc)"
  echo "clients $CLIENTS, requests $REQUESTS per test, keys $KEYS, goblin-core shards $CORES"
} | tee "$OUT/machine.txt"

# server size pipeline -> "set_rps set_p50 set_p99 get_rps get_p50 get_p99"
declare -A RESULT
for server in redis goblin; do
  start "$server"
  for size in $SIZES; do
    for p in $PIPELINE; do
      csv=$(redis-benchmark -s "$SOCK" -t set,get -n "$REQUESTS" -c "$CLIENTS" -P "$p" \
        -d "$size" -r "$KEYS" --csv 2>/dev/null)
      echo "$server size $size pipeline $p" >> "$OUT/raw.csv"
      echo "$csv" >> "$OUT/raw.csv"
      # "test","rps","avg_latency_ms","min_latency_ms","p50_latency_ms","p95...","p99...","max..."
      set_line=$(grep '^"SET"' <<<"$csv" | tr -d '"')
      get_line=$(grep '^"GET"' <<<"$csv" | tr -d '"')
      RESULT[$server,$size,$p]="$(cut -d, -f2,5,7 <<<"$set_line") $(cut -d, -f2,5,7 <<<"$get_line")"
    done
  done
  stop_all
done

{
  echo "| value | pipeline | SET redis /s | SET goblin /s | goblin/redis | SET p50/p99 ms redis | goblin | GET redis /s | GET goblin /s | goblin/redis | GET p50/p99 ms redis | goblin |"
  echo "|---:|---:|---:|---:|---:|---|---|---:|---:|---:|---|---|"
  for size in $SIZES; do
    for p in $PIPELINE; do
      read -r rs rg <<<"${RESULT[redis,$size,$p]}"
      read -r gs gg <<<"${RESULT[goblin,$size,$p]}"
      IFS=, read -r rsr rs50 rs99 <<<"$rs"
      IFS=, read -r gsr gs50 gs99 <<<"$gs"
      IFS=, read -r rgr rg50 rg99 <<<"$rg"
      IFS=, read -r ggr gg50 gg99 <<<"$gg"
      sr=$(awk -v a="$gsr" -v b="$rsr" 'BEGIN { printf "%.2fx", a / b }')
      gr=$(awk -v a="$ggr" -v b="$rgr" 'BEGIN { printf "%.2fx", a / b }')
      echo "| $size | $p | $rsr | $gsr | $sr | $rs50 / $rs99 | $gs50 / $gs99 | $rgr | $ggr | $gr | $rg50 / $rg99 | $gg50 / $gg99 |"
    done
  done
} | tee "$OUT/results.md"
