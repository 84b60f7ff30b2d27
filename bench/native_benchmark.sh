#!/usr/bin/env bash
# The native plane against HTTP on this machine (issue #9): one goblin-core (ring socket,
# UCX listener serving tcp and shared memory) and one goblin-gateway mirroring a local
# origin; bench/native_benchmark measures, one plane at a time, the time to the first
# byte of a RAM-resident head and the throughput of a large object:
#   HTTP through goblin-gateway | UCX tcp | UCX shared memory | ring plane
#   bench/native_benchmark.sh [--no-build]
# Environment: SIZE (256M), HEAD (1M), SAMPLES (300), REPEATS (5), BUILD_DIR (build/release),
# OUT (var/bench/native-<time>), PUT_REPEATS (0; N: the libgoblin rows also time N puts of
# SIZE from memory, by reference over UCX, and N streamed from a source, copied).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD_DIR=${BUILD_DIR:-$ROOT/build/release}
SIZE=${SIZE:-256M}
HEAD=${HEAD:-1M}
SAMPLES=${SAMPLES:-300}
REPEATS=${REPEATS:-5}
PUT_REPEATS=${PUT_REPEATS:-0}
OUT=${OUT:-$ROOT/var/bench/native-$(date -u +%Y%m%d-%H%M%S)}
[ "${1:-}" = "--no-build" ] || cmake --build "$BUILD_DIR" --target goblin-core goblin-gateway native_benchmark >/dev/null
mkdir -p "$OUT"
RUN=$(mktemp -d /tmp/goblin-native-bench.XXXXXX)
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  sleep 0.5
  for p in "${PIDS[@]}"; do kill -KILL "$p" 2>/dev/null || true; done
  cp "$RUN/core.log" "$OUT/core.log" 2>/dev/null || true  # (its exit lines count the puts' pieces)
  rm -rf "$RUN"
}
trap cleanup EXIT
wait_for() { for _ in $(seq 300); do eval "$1" && return 0; sleep 0.1; done; return 1; }

mkdir -p "$RUN/files"
head -c "$(numfmt --from=iec "$HEAD")" /dev/urandom > "$RUN/files/head.bin"
head -c "$(numfmt --from=iec "$SIZE")" /dev/urandom > "$RUN/files/big.bin"
/usr/bin/python3 "$ROOT/tests/support/test_origin.py" --port-file "$RUN/origin.port" \
  --files "$RUN/files" --log "$RUN/origin.log" > "$RUN/origin.out" 2>&1 &
PIDS+=($!)
wait_for "[ -s $RUN/origin.port ]" || { echo "the origin did not start" >&2; exit 1; }
"$BUILD_DIR/core/goblin-core" --prepare "$RUN/tier" > /dev/null
# The core serves shared memory and tcp clients alike (each client picks with UCX_TLS).
export UCX_NET_DEVICES=lo UCX_POSIX_ERROR_HANDLING=y UCX_SYSV_ERROR_HANDLING=y UCX_WARN_UNUSED_ENV_VARS=n
UCX_TLS=sm,tcp "$BUILD_DIR/core/goblin-core" --listen-unix "$RUN/core.sock" --ssd-dir "$RUN/tier" \
  --memory 512M --block 1M --ram-head 1M --rdma-listen 127.0.0.1:0 --rdma-max-message 1M --cores 1 \
  > "$RUN/core.log" 2>&1 &
PIDS+=($!)
wait_for "grep -q 'UCX plane listening' $RUN/core.log" || { cat "$RUN/core.log"; exit 1; }
UCX_PORT=$(sed -n 's/.*UCX plane listening on .* (port \([0-9]*\)).*/\1/p' "$RUN/core.log")
"$BUILD_DIR/gateway/goblin-gateway" --core "unix:$RUN/core.sock" \
  --mirror "http://127.0.0.1:$(cat "$RUN/origin.port")" --http-port 18490 --threads 1 > "$RUN/gateway.log" 2>&1 &
PIDS+=($!)
wait_for "(exec 3<>/dev/tcp/127.0.0.1/18490) 2>/dev/null" || { cat "$RUN/gateway.log"; exit 1; }

B=$BUILD_DIR/bench/native_benchmark
ARGS=(--head-size "$HEAD" --size "$SIZE" --samples "$SAMPLES" --repeats "$REPEATS")
LIB=(--put-repeats "$PUT_REPEATS")
{
  echo "| plane | first byte p50 (us) | p90 | p99 | one-sided whole head p50 / p90 / p99 (us) | MB/s (median of $REPEATS x $SIZE) |"
  echo "|---|---:|---:|---:|---:|---:|"
  "$B" --http http://127.0.0.1:18490 --small-path /files/head.bin --big-path /files/big.bin \
    "${ARGS[@]}" --label "HTTP via goblin-gateway"
  UCX_TLS=tcp "$B" --target "ucx://127.0.0.1:$UCX_PORT" "${ARGS[@]}" "${LIB[@]}" --label "native, UCX tcp"
  UCX_TLS=sm,tcp "$B" --target "ucx://127.0.0.1:$UCX_PORT" "${ARGS[@]}" "${LIB[@]}" --label "native, UCX shared memory"
  "$B" --target "unix:$RUN/core.sock" "${ARGS[@]}" "${LIB[@]}" --label "native, ring plane (zero-copy loans)"
} | tee "$OUT/results.md"
{ echo "date: $(date -u +%FT%TZ)"; echo "goblin: $(git -C "$ROOT" rev-parse --short HEAD)";
  echo "cpu: $(sed -n 's/^model name\s*: //p' /proc/cpuinfo | head -1) x $(nproc)";
  echo "ucx: $(ucx_info -v | sed -n 's/# Version //p')"; } > "$OUT/machine.txt"
