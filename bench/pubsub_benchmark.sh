#!/usr/bin/env bash
# Seed 002's pub/sub benchmark, side by side with Redis: for every scenario and engine a
# fresh server is started, bench/pubsub_benchmark runs the closed loop against it, and the
# server is stopped; engines run one at a time. Results: a 26-column CSV and Markdown tables
# with ratios against Redis from the same run (results.csv / results.md in the output dir).
#
#   bench/pubsub_benchmark.sh [--quick] [--out DIR] [--no-build]
#
# Engines (ENGINES, default all three):
#   redis                Debian's redis-server with bench/redis-parity.conf, RESP2 on a unix socket
#   goblin-resp-uds      goblin-gateway's RESP2 on a unix socket, pub/sub in goblin-core
#   goblin-sbe-ring-4kb  goblin-core's typed SBE over 4 KiB shared-memory rings
# Environment: ENGINES, SCENARIOS (default: every scenario, see pubsub_benchmark --list),
# BUILD_DIR (build/release), REDIS_SERVER (redis-server), SPIN_US (harness polling after a
# send, default 100), HARNESS_ARGS (extra harness arguments, e.g. "--samples 100"),
# GOBLIN_WAIT (2-3 CPUs: goblin-core/gateway waiting flags, default --yield-when-polling).
# CPU placement is chosen from the CPU count and printed: with 4 or more CPUs the server
# gets CPU 2, goblin-gateway CPU 3 and the harness CPU 1; with 2 or 3 CPUs the server (and
# goblin-gateway, yielding between polls) CPU 1 and the harness CPU 0.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD_DIR=${BUILD_DIR:-$ROOT/build/release}
REDIS_SERVER=${REDIS_SERVER:-redis-server}
ENGINES=${ENGINES:-"redis goblin-resp-uds goblin-sbe-ring-4kb"}
SPIN_US=${SPIN_US:-100}
QUICK=""
OUT=""
BUILD=1
while [ $# -gt 0 ]; do
  case "$1" in
    --quick) QUICK=--quick ;;
    --out) OUT=$2; shift ;;
    --no-build) BUILD=0 ;;
    -h|--help) sed -n '2,20p' "$0"; exit 0 ;;
    *) echo "pubsub_benchmark.sh: unknown argument $1" >&2; exit 2 ;;
  esac
  shift
done

if [ "$BUILD" = 1 ]; then
  cmake -S "$ROOT" -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
  cmake --build "$BUILD_DIR" --target goblin-core goblin-gateway pubsub_benchmark >/dev/null
fi
CORE=$BUILD_DIR/core/goblin-core
GATEWAY=$BUILD_DIR/gateway/goblin-gateway
HARNESS=$BUILD_DIR/bench/pubsub_benchmark
for b in "$CORE" "$GATEWAY" "$HARNESS"; do
  [ -x "$b" ] || { echo "pubsub_benchmark.sh: $b is missing (build it or drop --no-build)" >&2; exit 1; }
done
if [[ " $ENGINES " == *" redis "* ]] && ! command -v "$REDIS_SERVER" >/dev/null; then
  echo "pubsub_benchmark.sh: $REDIS_SERVER not found (apt-get install redis-server)" >&2
  exit 1
fi

OUT=${OUT:-$ROOT/var/bench/pubsub-$(date -u +%Y%m%d-%H%M%S)}
mkdir -p "$OUT"
CSV=$OUT/results.csv
rm -f "$CSV"
RUN=$(mktemp -d /tmp/goblin-psb.XXXXXX)
PIDS=()
stop_servers() {
  local p
  for p in "${PIDS[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  for p in "${PIDS[@]}"; do
    for _ in $(seq 50); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$p" 2>/dev/null || true
    wait "$p" 2>/dev/null || true
  done
  PIDS=()
  rm -f "$RUN"/*.sock
}
trap 'stop_servers; rm -rf "$RUN"' EXIT

wait_socket() {
  for _ in $(seq 100); do
    [ -S "$1" ] && return 0
    for p in "${PIDS[@]}"; do kill -0 "$p" 2>/dev/null || return 1; done
    sleep 0.05
  done
  return 1
}

NCPU=$(nproc)
if [ "$NCPU" -ge 4 ]; then
  SERVER_CPU=2; GATEWAY_CPU=3; HARNESS_CPU=1; SHARED=""
elif [ "$NCPU" -ge 2 ]; then
  SERVER_CPU=1; GATEWAY_CPU=1; HARNESS_CPU=0; SHARED=${GOBLIN_WAIT---yield-when-polling}
else
  echo "pubsub_benchmark.sh: one CPU: nothing is pinned and the numbers mean little" >&2
  SERVER_CPU=0; GATEWAY_CPU=0; HARNESS_CPU=0; SHARED="--busy-poll 0"
fi
REDIS_VERSION=$("$REDIS_SERVER" --version 2>/dev/null | sed -n 's/.*v=\([0-9.]*\).*/\1/p' || true)
{
  echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "cpu: $(sed -n 's/^model name\s*: //p' /proc/cpuinfo | head -1) x $NCPU"
  echo "memory: $(free -g | awk '/^Mem:/{print $2}') GiB; kernel $(uname -r)"
  echo "placement: server CPU $SERVER_CPU, goblin-gateway CPU $GATEWAY_CPU ${SHARED:+($SHARED)}, harness CPU $HARNESS_CPU"
  echo "redis: ${REDIS_VERSION:-not used}; goblin: $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)"
  echo "harness: spin ${SPIN_US} us after each send, then epoll ${QUICK:+(--quick sample counts)}"
} | tee "$OUT/machine.txt"

start_engine() {  # sets SOCK, LABEL, ENGINE_ARGS, PIDS
  case "$1" in
    redis)
      SOCK=$RUN/redis.sock
      LABEL=redis-${REDIS_VERSION:-unknown}
      taskset -c "$SERVER_CPU" "$REDIS_SERVER" "$ROOT/bench/redis-parity.conf" \
        --unixsocket "$SOCK" --dir "$RUN" --logfile "$RUN/redis.log" &
      PIDS+=($!)
      ENGINE_ARGS=(--engine resp)
      ;;
    goblin-resp-uds)
      SOCK=$RUN/gateway.sock
      LABEL=goblin-resp-uds
      "$CORE" --listen-unix "$RUN/core.sock" --cpus "$SERVER_CPU" --memory 256K --block 64K \
        --ram-head 64K --log-level warn $SHARED 2>>"$RUN/core.log" &
      PIDS+=($!)
      wait_socket "$RUN/core.sock" || { echo "goblin-core did not start: $(cat "$RUN/core.log")" >&2; return 1; }
      "$GATEWAY" --core "unix:$RUN/core.sock" --resp-unix "$SOCK" --cpus "$GATEWAY_CPU" \
        --log-level warn $SHARED 2>>"$RUN/gateway.log" &
      PIDS+=($!)
      ENGINE_ARGS=(--engine resp)
      ;;
    goblin-sbe-ring-4kb)
      SOCK=$RUN/core.sock
      LABEL=goblin-sbe-ring-4kb
      "$CORE" --listen-unix "$SOCK" --cpus "$SERVER_CPU" --memory 256K --block 64K \
        --ram-head 64K --ring-bytes 4K --log-level warn 2>>"$RUN/core.log" &
      PIDS+=($!)
      ENGINE_ARGS=(--engine ring --ring-bytes 4096)
      ;;
    *) echo "pubsub_benchmark.sh: unknown engine $1" >&2; return 1 ;;
  esac
  wait_socket "$SOCK" || { echo "$1 did not start" >&2; return 1; }
}

SCENARIOS=${SCENARIOS:-$("$HARNESS" --list $QUICK)}
FAILED=0
for scenario in $SCENARIOS; do
  for engine in $ENGINES; do
    if ! start_engine "$engine"; then FAILED=1; stop_servers; continue; fi
    pid_args=()
    for p in "${PIDS[@]}"; do pid_args+=(--server-pid "$p"); done
    # shellcheck disable=SC2086
    if ! "$HARNESS" "${ENGINE_ARGS[@]}" --socket "$SOCK" --label "$LABEL" --scenario "$scenario" \
        $QUICK --cpu "$HARNESS_CPU" --server-cpus "$SERVER_CPU${SHARED:+ shared}" \
        --spin-us "$SPIN_US" "${pid_args[@]}" --csv "$CSV" ${HARNESS_ARGS:-}; then
      FAILED=1
    fi
    stop_servers
  done
done

{
  echo "## Results"
  echo
  sed 's/^/    /' "$OUT/machine.txt"
  echo
  "$HARNESS" --report "$CSV" --baseline-engine redis
} > "$OUT/results.md"
echo "pubsub_benchmark.sh: $CSV and $OUT/results.md"
exit $FAILED
