#!/usr/bin/env bash
# bench/native_objects_benchmark.sh end to end with a few samples: ucx_perftest beside the
# native plane over UCX tcp and shared memory, and the ring plane; every table is there with
# numbers in it (three gets in flight per connection in the throughput rows). Then objects
# kept by one run are read by the next, and wrong bytes under a key fail the run (every get
# is checked).
# Usage: native_objects_benchmark_test.sh SOURCE_DIR BUILD_DIR
set -euo pipefail
SRC=$1
BUILD=$2
OUT=$(mktemp -d /tmp/goblin-native-objects-test.XXXXXX)
CORE_PID=""
cleanup() {
  [ -n "$CORE_PID" ] && kill -KILL "$CORE_PID" 2>/dev/null || true
  rm -rf "$OUT"
}
trap cleanup EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

TRANSPORTS="tcp shm ring" OBJECTS=8 OBJECT_SIZE=256K SAMPLES=60 CONNECTIONS=1,3 TURN_SECONDS=0.3 WINDOW=3 \
  PERF_ITERS=300 OUT="$OUT/run" BUILD_DIR="$BUILD" \
  timeout 300 "$SRC/bench/native_objects_benchmark.sh" --no-build > "$OUT/log" 2>&1 ||
  { cat "$OUT/log"; fail "native_objects_benchmark.sh failed"; }
R=$OUT/run/results.md
for t in tcp shm; do
  grep -Eq "^ucx_perftest on UCX_TLS=(tcp|sm): ucp_am_lat 16 B one-way p50 [0-9.]+ us .*ucp_put_bw 256K [0-9.]+ MB/s" \
    <(sed -n "/^## $t/,/^## /p" "$R") || { cat "$OUT/log"; fail "$t: no ucx_perftest line"; }
done
for label in "native, UCX tcp" "native, UCX shm" "native, ring plane"; do
  # (timed with the TSC where the CPU's is constant and nonstop, as ucx_perftest's is)
  grep -Eq "^$label: one connection, 60 gets of 262144-byte objects one after another \(us; timed with (TSC \(constant, nonstop\), [0-9.]+ MHz|CLOCK_MONOTONIC)\)" "$R" ||
    { cat "$OUT/log"; fail "$label: no serial table"; }
  for row in "response header" "payload ready" "complete"; do
    [ "$(grep -c "^| $row | [0-9]" "$R")" = 3 ] || { cat "$R"; fail "no '$row' row for every plane"; }
  done
done
# 1 and 3 connections for each plane, each with a positive MB/s.
[ "$(grep -Ec '^\| (1|3) \| [1-9][0-9]* \| ' "$R")" = 6 ] || { cat "$R"; fail "throughput rows"; }

# Paired slices (PAIRED): a row per slice with both round trips and a first byte, a ratio
# or "flipped", and a summary line per transport and state.
TRANSPORTS="shm" OBJECTS=4 OBJECT_SIZE=64K SAMPLES=20 CONNECTIONS=1 TURN_SECONDS=0.2 \
  PERF_ITERS=300 PAIRED=3 PAIRED_SAMPLES=50 OUT="$OUT/paired" BUILD_DIR="$BUILD" \
  timeout 300 "$SRC/bench/native_objects_benchmark.sh" --no-build > "$OUT/plog" 2>&1 ||
  { cat "$OUT/plog"; fail "native_objects_benchmark.sh with PAIRED=3 failed"; }
P=$OUT/paired/paired.md
[ "$(grep -Ec '^\| shm \| [1-3] \| [0-9.]+ \| [0-9.]+ \| [0-9.]+ \| ([0-9.]+x \| (fast|slow)|- \| flipped) \|$' "$P")" = 3 ] ||
  { cat "$OUT/plog"; fail "paired slices"; }
grep -Eq '^    shm (fast|slow): [1-3] slices, ratio median [0-9.]+x' "$P" ||
  grep -Fq '| flipped |' "$P" || { cat "$P"; fail "no paired summary"; }

# Objects kept by one run are read by the next (--keep, --no-store); wrong bytes under one
# of the keys fail the run instead of being measured.
"$BUILD/core/goblin-core" --prepare "$OUT/tier" > /dev/null
"$BUILD/core/goblin-core" --listen-unix "$OUT/core.sock" --ssd-dir "$OUT/tier" --memory 64M \
  > "$OUT/core.log" 2>&1 &
CORE_PID=$!
for _ in $(seq 100); do [ -S "$OUT/core.sock" ] && break; sleep 0.1; done
B=("$BUILD/bench/native_objects_benchmark" --target "unix:$OUT/core.sock" --objects 4
   --object-size 4K --samples 10 --connections 1 --seconds 0.1)
"${B[@]}" --keep > "$OUT/kept.txt" 2>&1 || { cat "$OUT/kept.txt"; fail "a run with --keep failed"; }
"${B[@]}" --no-store --keep > "$OUT/reread.txt" 2>&1 ||
  { cat "$OUT/reread.txt"; fail "a run reading kept objects failed"; }
grep -q '^| complete | ' "$OUT/reread.txt" || { cat "$OUT/reread.txt"; fail "no table"; }
head -c 4096 /dev/zero > "$OUT/zeros"
"$BUILD/tools/goblin" --target "unix:$OUT/core.sock" put bench/o/00002 "$OUT/zeros" > /dev/null
if "${B[@]}" --no-store > "$OUT/wrong.txt" 2>&1; then
  cat "$OUT/wrong.txt"; fail "wrong bytes under bench/o/00002 were measured"
fi
grep -q 'bench/o/00002: .*bytes differ' "$OUT/wrong.txt" || { cat "$OUT/wrong.txt"; fail "no clear error"; }
echo "PASS"
