#!/usr/bin/env bash
# The store at each object size (issue #22): for every size in SIZES, through goblin-core's
# ring plane (libgoblin, 4 KiB rings), on a fresh tier on the disk under test:
#   fill rate: bench/fill_rate_bench, CLIENTS connections putting objects of exactly that
#     size for FILL_SECONDS, each put waiting for its durable commit: objects/s, MB/s, put
#     latency;
#   hit throughput: bench/native_objects_benchmark against one goblin-core (--memory MEMORY,
#     default extents and heads; GOBLIN_ARGS added, e.g. "--ram-tails false" to serve tails
#     from disk): COUNT objects of that size stored, then one connection serial (first byte,
#     complete) and 1, 2 and 4 connections closed loop (aggregate MB/s, gets/s), lent (the
#     client maps the pools: nothing is copied) and copied through the ring (--copy).
#   bench/store_sizes.sh [--no-build]
# Environment (defaults): SIZES ("1K 16K 256K 64M"), COUNT (objects per size for the hits:
# about 1 GiB of them, 16 to 20,000), CLIENTS (16), FILL_SECONDS (5),
# MEMORY (2G), GOBLIN_ARGS (""), SAMPLES (2000), CONNECTIONS (1,2,4), TURN_SECONDS (3),
# DIR (/var/tmp/goblin-store-sizes: emptied), BUILD_DIR (build/release), CORE (the
# goblin-core measured: BUILD_DIR/core/goblin-core; another build's to compare),
# OUT (var/bench/store-sizes-<time>). Results: OUT/results.md.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD_DIR=${BUILD_DIR:-$ROOT/build/release}
CORE=${CORE:-$BUILD_DIR/core/goblin-core}
SIZES=${SIZES:-"1K 16K 256K 64M"}
CLIENTS=${CLIENTS:-16}
FILL_SECONDS=${FILL_SECONDS:-5}
MEMORY=${MEMORY:-2G}
GOBLIN_ARGS=${GOBLIN_ARGS:-}
SAMPLES=${SAMPLES:-2000}
CONNECTIONS=${CONNECTIONS:-1,2,4}
TURN_SECONDS=${TURN_SECONDS:-3}
DIR=${DIR:-/var/tmp/goblin-store-sizes}
OUT=${OUT:-$ROOT/var/bench/store-sizes-$(date -u +%Y%m%d-%H%M%S)}
[ "${1:-}" = "--no-build" ] ||
  cmake --build "$BUILD_DIR" --target goblin-core fill_rate_bench native_objects_benchmark >/dev/null
mkdir -p "$OUT"
CORE_PID=""
cleanup() {
  if [ -n "$CORE_PID" ]; then kill -TERM "$CORE_PID" 2>/dev/null || true; wait "$CORE_PID" 2>/dev/null || true; fi
  rm -rf "$DIR"
}
trap cleanup EXIT

# Objects per size: COUNT, else about 1 GiB of payload, 16 to 20,000 objects.
count_for() {  # bytes
  if [ -n "${COUNT:-}" ]; then echo "$COUNT"; return; fi
  local n=$(( (1 << 30) / $1 ))
  (( n > 20000 )) && n=20000
  (( n < 16 )) && n=16
  echo "$n"
}

{
  echo "date: $(date -u +%FT%TZ)"
  echo "goblin: $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo '?'); core $CORE"
  echo "cpu: $(sed -n 's/^model name\s*: //p' /proc/cpuinfo | head -1) x $(nproc)"
  echo "disk: $(df -h "$(dirname "$DIR")" | awk 'NR==2 {print $1, $2}')"
  echo "fill: $CLIENTS clients x $FILL_SECONDS s; hits: --memory $MEMORY $GOBLIN_ARGS, $SAMPLES serial gets, connections $CONNECTIONS x ${TURN_SECONDS} s"
} | tee "$OUT/machine.txt"

for size in $SIZES; do
  bytes=$(numfmt --from=iec "$size")
  n=$(count_for "$bytes")
  samples=$(( (4 << 30) / bytes ))  # (serial gets: at most ~4 GiB of them)
  (( samples > SAMPLES )) && samples=$SAMPLES
  (( samples < 50 )) && samples=50
  {
    echo
    echo "## $size"
    echo
    echo '```'
    # shellcheck disable=SC2086
    "$BUILD_DIR/bench/fill_rate_bench" --core "$CORE" --dir "$DIR" \
      --clients "$CLIENTS" --seconds "$FILL_SECONDS" --min-size "$size" --max-size "$size" \
      --extent-size 4M --tier-file-size 1G --memory "$MEMORY" --ring-bytes 4K
    echo '```'
  } | tee -a "$OUT/results.md"
  rm -rf "$DIR"
  mkdir -p "$DIR"
  "$CORE" --prepare "$DIR/tier" > /dev/null
  # shellcheck disable=SC2086
  "$CORE" --listen-unix "$DIR/core.sock" --ssd-dir "$DIR/tier" \
    --memory "$MEMORY" --cores 1 $GOBLIN_ARGS > "$OUT/core-$size.log" 2>&1 &
  CORE_PID=$!
  for _ in $(seq 300); do [ -S "$DIR/core.sock" ] && break; sleep 0.1; done
  [ -S "$DIR/core.sock" ] || { cat "$OUT/core-$size.log"; exit 1; }
  # Lent (libgoblin's default: the client maps the core's pools and is lent the bytes in
  # place; the benchmark spot-checks them, so nothing crosses but descriptors), then copied
  # through the ring (every byte moved into the client's buffer).
  "$BUILD_DIR/bench/native_objects_benchmark" --target "unix:$DIR/core.sock" --objects "$n" \
    --object-size "$size" --samples "$samples" --connections "$CONNECTIONS" \
    --seconds "$TURN_SECONDS" --label "hits lent, $n x $size" --keep | tee -a "$OUT/results.md"
  "$BUILD_DIR/bench/native_objects_benchmark" --target "unix:$DIR/core.sock" --objects "$n" \
    --object-size "$size" --samples "$samples" --connections "$CONNECTIONS" \
    --seconds "$TURN_SECONDS" --label "hits copied, $n x $size" --no-store --copy |
    tee -a "$OUT/results.md"
  kill -TERM "$CORE_PID"
  wait "$CORE_PID" || true
  CORE_PID=""
  grep -E "store: |tails" "$OUT/core-$size.log" | tail -3 >> "$OUT/results.md" || true
done
echo "results: $OUT/results.md"
