#!/usr/bin/env bash
# The native plane in the seed system's form (issue #21), each transport beside its own
# ceiling in the same run: for every transport in TRANSPORTS
#   ucx_perftest ucp_am_lat (16 B; one-way latency, the round trip is twice it) and
#   ucp_put_bw (OBJECT_SIZE) on that transport, then bench/native_objects_benchmark against
#   one goblin-core: exact OBJECT_SIZE objects in RAM heads, a fixed-seed key order, one
#   connection serial (response header, payload ready, complete: all percentiles), then
#   CONNECTIONS connections closed-loop throughput.
#   bench/native_objects_benchmark.sh [--no-build]
# Transports: tcp (UCX_TLS=tcp), shm (UCX_TLS=sm: posix/sysv/cma; tcp only for the core's
# listener), rc (UCX_TLS=rc_verbs: needs an RDMA device, e.g. the Soft-RoCE guest of
# tests/rdma/rxe_vm.sh), ring (goblin's own shared-memory rings; no ucx_perftest peer).
# Environment (defaults): TRANSPORTS ("tcp shm ring"), OBJECTS (256), OBJECT_SIZE (256K),
# SAMPLES (5000), CONNECTIONS (1,2,4,8), TURN_SECONDS (3: per connection count), PERF_ITERS (20000), CORE_ARGS (extra
# goblin-core options, e.g. "--cpus 0 --polling pause" for a core with a CPU of its own),
# CLIENT_ARGS (e.g. --pause-spin: clients spin without yielding), WINDOW (1: gets in flight
# per connection in the throughput rows), NET_DEVICES (lo), PIN (0; 1: the latency mode,
# each side on a CPU of its own: goblin-core and ucx_perftest's server on CPU 0, the core
# with `--cpus 0 --polling pause`; the clients and ucx_perftest's client on CPU 1, spinning
# with --pause-spin; use it with CONNECTIONS=1), BUILD_DIR (build/release),
# OUT (var/bench/native-objects-<time>), PAIRED (0; K: then, for each UCX transport, K
# slices alternating ucx_perftest ucp_am_lat and PAIRED_SAMPLES (20000) serial gets, each
# slice's first byte against the round trips measured right before and after it: this VM
# moves between a fast and a slow state within a minute, and a comparison across a flip
# means nothing; use it with PIN=1). Results: OUT/results.md (and OUT/paired.md).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD_DIR=${BUILD_DIR:-$ROOT/build/release}
TRANSPORTS=${TRANSPORTS:-"tcp shm ring"}
OBJECTS=${OBJECTS:-256}
OBJECT_SIZE=${OBJECT_SIZE:-256K}
SAMPLES=${SAMPLES:-5000}
CONNECTIONS=${CONNECTIONS:-1,2,4,8}
TURN_SECONDS=${TURN_SECONDS:-3}
PERF_ITERS=${PERF_ITERS:-20000}
CORE_ARGS=${CORE_ARGS:-}
CLIENT_ARGS=${CLIENT_ARGS:-}
WINDOW=${WINDOW:-1}
NET_DEVICES=${NET_DEVICES:-lo}
PIN=${PIN:-0}
SERVER_CPU=() CLIENT_CPU=()
if [ "$PIN" = 1 ]; then
  SERVER_CPU=(taskset -c 0) CLIENT_CPU=(taskset -c 1)
  CORE_ARGS="--cpus 0 --polling pause $CORE_ARGS"
  CLIENT_ARGS="--pause-spin $CLIENT_ARGS"
fi
OUT=${OUT:-$ROOT/var/bench/native-objects-$(date -u +%Y%m%d-%H%M%S)}
[ "${1:-}" = "--no-build" ] ||
  cmake --build "$BUILD_DIR" --target goblin-core native_objects_benchmark >/dev/null
command -v ucx_perftest >/dev/null || { echo "ucx_perftest not found (apt-get install ucx-utils)" >&2; exit 1; }
mkdir -p "$OUT"
RUN=$(mktemp -d /tmp/goblin-native-objects.XXXXXX)
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  sleep 0.3
  for p in "${PIDS[@]}"; do kill -KILL "$p" 2>/dev/null || true; done
  rm -rf "$RUN"
}
trap cleanup EXIT
wait_for() { for _ in $(seq 300); do eval "$1" && return 0; sleep 0.1; done; return 1; }
size_bytes=$(numfmt --from=iec "$OBJECT_SIZE")
export UCX_NET_DEVICES=$NET_DEVICES UCX_WARN_UNUSED_ENV_VARS=n
export UCX_POSIX_ERROR_HANDLING=y UCX_SYSV_ERROR_HANDLING=y

ucx_tls() {  # transport -> UCX_TLS
  case $1 in
    tcp) echo tcp ;;
    shm) echo sm,tcp ;;
    rc) echo rc_verbs,tcp ;;
    *) echo "" ;;
  esac
}

# ucx_perftest TEST SIZE on transport TLS: prints the "Final:" line's fields.
perftest() {  # tls test size
  local tls=$1 test=$2 size=$3 port=$((13337 + RANDOM % 1000)) out
  UCX_TLS=$tls "${SERVER_CPU[@]}" ucx_perftest -p "$port" > "$RUN/perf-server.out" 2>&1 &
  local server=$!
  # (the client fails at once if the server does not listen yet: on a loaded machine 0.5 s
  # was not always enough, and the server then waited for it forever)
  for _ in $(seq 100); do
    [ -n "$(ss -Hltn "sport = :$port" 2>/dev/null)" ] && break
    sleep 0.1
  done
  out=$(UCX_TLS=$tls timeout 120 "${CLIENT_CPU[@]}" ucx_perftest 127.0.0.1 -p "$port" \
        -t "$test" -s "$size" \
        -n "$PERF_ITERS" 2>&1 | tee -a "$OUT/perftest.log" | sed -n 's/^Final:\s*//p')
  # (a server whose client never came or failed is not waited for)
  for _ in $(seq 50); do kill -0 "$server" 2>/dev/null || break; sleep 0.1; done
  kill "$server" 2>/dev/null || true
  wait "$server" 2>/dev/null || true
  echo "$out"
}

"$BUILD_DIR/core/goblin-core" --prepare "$RUN/tier" > /dev/null
# Every object whole in a RAM head: heads and blocks of the object size at least.
head=$(( size_bytes > 262144 ? size_bytes : 262144 ))
UCX_TLS=all "${SERVER_CPU[@]}" "$BUILD_DIR/core/goblin-core" --listen-unix "$RUN/core.sock" --ssd-dir "$RUN/tier" \
  --memory 1G --block "$head" --ram-head "$head" --rdma-listen 127.0.0.1:0 \
  --rdma-max-message 1M --cores 1 $CORE_ARGS > "$RUN/core.log" 2>&1 &
PIDS+=($!)
wait_for "grep -q 'UCX plane listening' $RUN/core.log" || { cat "$RUN/core.log"; exit 1; }
UCX_PORT=$(sed -n 's/.*UCX plane listening on .* (port \([0-9]*\)).*/\1/p' "$RUN/core.log")

{
  echo "date: $(date -u +%FT%TZ)"
  echo "goblin: $(git -C "$ROOT" rev-parse --short HEAD) $CORE_ARGS; clients: $CLIENT_ARGS; pinned: $PIN"
  echo "cpu: $(sed -n 's/^model name\s*: //p' /proc/cpuinfo | head -1) x $(nproc)"
  echo "ucx: $(ucx_info -v | sed -n 's/# Version //p')"
  echo "objects: $OBJECTS x $OBJECT_SIZE; samples $SAMPLES; connections $CONNECTIONS x ${TURN_SECONDS} s; window $WINDOW"
} | tee "$OUT/machine.txt"

B=$BUILD_DIR/bench/native_objects_benchmark
for t in $TRANSPORTS; do
  tls=$(ucx_tls "$t")
  {
    echo
    echo "## $t"
    if [ -n "$tls" ]; then
      # Final: iterations, then for latency tests one-way us (p50 average overall), MB/s
      # (average overall), msg/s (average overall).
      lat=$(perftest "${tls%%,tcp}" ucp_am_lat 16)
      bw=$(perftest "${tls%%,tcp}" ucp_put_bw "$size_bytes")
      one_way=$(awk '{print $2}' <<< "$lat")
      echo
      echo "ucx_perftest on UCX_TLS=${tls%%,tcp}: ucp_am_lat 16 B one-way p50 $one_way us" \
           "(round trip ~$(awk -v x="$one_way" 'BEGIN{printf "%.2f", 2 * x}') us);" \
           "ucp_put_bw $OBJECT_SIZE $(awk '{print $6}' <<< "$bw") MB/s"
      UCX_TLS=$tls "${CLIENT_CPU[@]}" "$B" --target "ucx://127.0.0.1:$UCX_PORT" --objects "$OBJECTS" \
        --object-size "$OBJECT_SIZE" --samples "$SAMPLES" --connections "$CONNECTIONS" \
        --seconds "$TURN_SECONDS" --label "native, UCX $t" --window "$WINDOW" $CLIENT_ARGS
    else
      "${CLIENT_CPU[@]}" "$B" --target "unix:$RUN/core.sock" --objects "$OBJECTS" --object-size "$OBJECT_SIZE" \
        --samples "$SAMPLES" --connections "$CONNECTIONS" --seconds "$TURN_SECONDS" \
        --label "native, ring plane" --window "$WINDOW" $CLIENT_ARGS
    fi
  } | tee -a "$OUT/results.md"
done
PAIRED=${PAIRED:-0}
PAIRED_SAMPLES=${PAIRED_SAMPLES:-20000}
if [ "$PAIRED" -gt 0 ]; then
  # A round trip (us) of ucx_perftest ucp_am_lat 16 B, and a slice's payload-ready p50 (us).
  round_trip() { perftest "$1" ucp_am_lat 16 | awk '{printf "%.3f", 2 * $2}'; }
  first_byte() {  # tls, samples
    UCX_TLS=$1 "${CLIENT_CPU[@]}" "$B" --target "ucx://127.0.0.1:$UCX_PORT" --objects "$OBJECTS" \
      --object-size "$OBJECT_SIZE" --samples "$2" --connections "" --no-store --keep \
      $CLIENT_ARGS | awk -F'|' '/^\| payload ready/ {gsub(/ /, "", $4); print $4}'
  }
  {
    echo
    echo "## Paired slices: round trip, $PAIRED_SAMPLES serial gets, round trip"
    echo
    echo "| transport | slice | round trip before (us) | first byte p50 (us) | after (us) | ratio to their mean | state |"
    echo "|---|---:|---:|---:|---:|---:|---|"
  } | tee "$OUT/paired.md"
  for t in $TRANSPORTS; do
    tls=$(ucx_tls "$t")
    [ -n "$tls" ] || continue
    # (the objects stored once and kept for the slices: the core and its tier go at the end)
    UCX_TLS=$tls "${CLIENT_CPU[@]}" "$B" --target "ucx://127.0.0.1:$UCX_PORT" --objects "$OBJECTS" \
      --object-size "$OBJECT_SIZE" --samples 1 --connections "" --keep $CLIENT_ARGS > /dev/null
    before=$(round_trip "${tls%%,tcp}")
    for k in $(seq "$PAIRED"); do
      fb=$(first_byte "$tls" "$PAIRED_SAMPLES")
      after=$(round_trip "${tls%%,tcp}")
      # A slice between two round trips more than 25% apart met a change of state: no ratio.
      awk -v t="$t" -v k="$k" -v b="$before" -v f="$fb" -v a="$after" 'BEGIN {
        lo = b < a ? b : a; hi = b < a ? a : b; m = (a + b) / 2
        if (hi > 1.25 * lo) { printf "| %s | %d | %s | %s | %s | - | flipped |\n", t, k, b, f, a }
        else { printf "| %s | %d | %s | %s | %s | %.2fx | %s |\n", t, k, b, f, a, f / m,
                      m < 0.5 ? "fast" : "slow" } }'
      before=$after
    done | tee -a "$OUT/paired.md"
  done
  # Per transport and state, the median ratio of the slices in one state from end to end.
  awk -F'|' '$8 ~ /fast|slow/ { gsub(/[ x]/, "", $7); gsub(/ /, "", $2); gsub(/ /, "", $8)
      r[$2 " " $8] = r[$2 " " $8] " " $7 }
    END { for (k in r) { n = split(r[k], v, " ")
            for (i = 2; i <= n; ++i) for (j = i; j > 1 && v[j] + 0 < v[j - 1] + 0; --j) {
              x = v[j]; v[j] = v[j - 1]; v[j - 1] = x }  # (mawk: no asort)
            printf "%s: %d slices, ratio median %.2fx (%.2f-%.2f)\n", k, n, \
                   (n % 2 ? v[(n + 1) / 2] : (v[n / 2] + v[n / 2 + 1]) / 2), v[1], v[n] } }' \
    "$OUT/paired.md" | sort | sed 's/^/    /' | tee -a "$OUT/paired.md"
fi
echo "results: $OUT/results.md"
