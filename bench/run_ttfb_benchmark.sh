#!/usr/bin/env bash
# Hot-hit time to first byte (issue #20): goblin-store --mirror (local hits, the default),
# the same with every hit through goblin-core (--local-hits false), nginx proxy_cache and
# Varnish in front of the same local origin, in one run. Three hot objects: 4 KiB, 256 KiB
# and 256 MiB (goblin keeps its first 4 MiB in RAM: --ram-head 4M), each requested by
# bench/ttfb_probe one request at a time with a connection per request (Connection: close;
# the clock starts before connect) and on one keep-alive connection (the clock starts
# before send), page cache warm.
#
#   bench/run_ttfb_benchmark.sh [--no-build]
#
# For each cache in turn: a fresh cache directory; every object fetched once (prewarm) and
# the origin's log checked for exactly one request per object; then the probes; then the
# origin's log checked again (a request during the probes was a miss: the run is invalid).
# Results: $OUT/results.md (p50 / p90 / p99 in microseconds, goblin / nginx at each).
#
# Environment (defaults): CACHES ("goblin goblin-core nginx varnish"), REQUESTS (2000;
# the 256 MiB object: REQUESTS/10 with a connection per request, 20 keep-alive),
# GOBLIN_MEMORY (1G), GOBLIN_ARGS, PORT (8080), ORIGIN_PORT (18080),
# OUT (var/bench/ttfb-<time>), BUILD_DIR (build/release).
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD_DIR=${BUILD_DIR:-$ROOT/build/release}
CACHES=${CACHES:-"goblin goblin-core nginx varnish"}
REQUESTS=${REQUESTS:-2000}
GOBLIN_MEMORY=${GOBLIN_MEMORY:-1G}
GOBLIN_ARGS=${GOBLIN_ARGS:-}
PORT=${PORT:-8080}
ORIGIN_PORT=${ORIGIN_PORT:-18080}
OUT=${OUT:-$ROOT/var/bench/ttfb-$(date -u +%Y%m%d-%H%M%S)}
PY=/usr/bin/python3
BUILD=1
[ "${1:-}" = "--no-build" ] && BUILD=0

mkdir -p "$OUT"
say() { echo "ttfb-bench: $*" | tee -a "$OUT/run.log"; }
die() { say "ERROR: $*"; exit 1; }
RUN=$(mktemp -d /tmp/goblin-ttfb-bench.XXXXXX)
chmod 755 "$RUN"  # varnishd's and nginx's workers run as their own users
# shellcheck source=bench/cache_bench_lib.sh
. "$ROOT/bench/cache_bench_lib.sh"
PIDS=()
trap 'stop_pids; rm -rf "$RUN"' EXIT

if [ "$BUILD" = 1 ]; then
  cmake --build "$BUILD_DIR" --target goblin-store goblin-core goblin-gateway ttfb_probe >/dev/null
fi
PROBE=$BUILD_DIR/bench/ttfb_probe
[ -x "$PROBE" ] || die "$PROBE not built"
peers=""
for c in $CACHES; do [ "$c" = goblin-core ] || peers="$peers $c"; done
# shellcheck disable=SC2086
require_caches $peers

{
  echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "cpu: $(sed -n 's/^model name\s*: //p' /proc/cpuinfo | head -1) x $(nproc)"
  echo "memory: $(free -g | awk '/^Mem:/{print $2}') GiB; kernel $(uname -r)"
  echo "goblin: $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown) --ram-head 4M --block 4M --memory $GOBLIN_MEMORY $GOBLIN_ARGS"
  command -v varnishd >/dev/null && echo "varnish: $(varnishd -V 2>&1 | head -1)"
  command -v nginx >/dev/null && echo "nginx: $(nginx -v 2>&1)"
  echo "requests per case: $REQUESTS (256 MiB: $((REQUESTS / 10)) close, 20 keep-alive)"
} | tee "$OUT/machine.txt"

# The origin's /gen/SIZE/NAME objects (a seeded pattern, max-age=3600).
OBJECTS="/gen/4096/hot4k:4096 /gen/262144/hot256k:262144 /gen/268435456/hot256m:268435456"
origin_gets() { grep -c '^GET /gen/' "$1" 2>/dev/null || true; }

INVALID=0
for cache in $CACHES; do
  CACHE_DIR=$ROOT/var/bench/ttfb-cache-$cache
  rm -rf "$CACHE_DIR"
  mkdir -p "$CACHE_DIR"
  LOG=$OUT/origin-$cache.log
  : > "$LOG"
  $PY "$ROOT/tests/support/test_origin.py" --port "$ORIGIN_PORT" --log "$LOG" \
    > "$OUT/origin-$cache.out" 2>&1 &
  PIDS+=($!)
  wait_port "$ORIGIN_PORT" || die "the origin did not start"
  saved_args=$GOBLIN_ARGS
  GOBLIN_ARGS="--ram-head 4M --block 4M $saved_args"
  [ "$cache" = goblin-core ] && GOBLIN_ARGS="$GOBLIN_ARGS --gateway-arg=--local-hits=false"
  start_cache "${cache%-core}" "$CACHE_DIR" $((1 << 30)) "$OUT/cache-$cache.log"
  GOBLIN_ARGS=$saved_args
  wait_port "$PORT" || { cat "$OUT/cache-$cache.log"; die "$cache did not start"; }
  for o in $OBJECTS; do
    path=${o%%:*}
    curl -sf -o /dev/null --max-time 120 "http://127.0.0.1:$PORT$path" || die "$cache: prewarm of $path failed"
  done
  sleep 2  # (a cache may still be writing the last object after its response ended)
  WARM=$(origin_gets "$LOG")
  [ "$WARM" = 3 ] || die "$cache: the origin saw $WARM requests for 3 objects while prewarming"
  for o in $OBJECTS; do
    path=${o%%:*}
    size=${o##*:}
    for mode in close keepalive; do
      n=$REQUESTS
      if [ "$size" -gt $((16 << 20)) ]; then
        n=$([ "$mode" = close ] && echo $((REQUESTS / 10)) || echo 20)
      fi
      if ! "$PROBE" --target "http://127.0.0.1:$PORT" --path "$path" --size "$size" \
          --mode "$mode" --requests "$n" --warmup $((n / 10 + 1)) --label "$cache" --json \
          > "$OUT/$cache-$mode-${path##*/}.txt"; then
        say "$cache: $mode $path failed"
        INVALID=1
      fi
      say "$(head -1 "$OUT/$cache-$mode-${path##*/}.txt")"
    done
  done
  AFTER=$(origin_gets "$LOG")
  if [ "$AFTER" != "$WARM" ]; then
    say "INVALID: $cache: the origin saw $((AFTER - WARM)) requests during the probes"
    INVALID=1
  fi
  stop_pids
  rm -rf "$CACHE_DIR"
done

$PY - "$OUT" <<'PY' | tee "$OUT/results.md"
import glob, json, os, sys
rows = []
for f in glob.glob(os.path.join(sys.argv[1], "*-*-*.txt")):
    lines = open(f).read().splitlines()
    if len(lines) >= 2 and lines[-1].startswith("{"):
        rows.append(json.loads(lines[-1]))
caches = [c for c in ["goblin", "goblin-core", "nginx", "varnish"] if any(r["label"] == c for r in rows)]
print("| object | connection | " + " | ".join(f"{c} p50 / p90 / p99 us" for c in caches) +
      " | goblin / nginx p50, p90, p99 |")
print("|---|---|" + "---:|" * len(caches) + "---:|")
for size, name in [(4096, "4 KiB"), (262144, "256 KiB"), (268435456, "256 MiB (4 MiB head)")]:
    for mode in ["close", "keepalive"]:
        cell = {r["label"]: r for r in rows if r["size"] == size and r["mode"] == mode}
        line = f"| {name} | {'per request' if mode == 'close' else 'keep-alive'} | " + " | ".join(
            f"{cell[c]['ttfb_p50_us']:.0f} / {cell[c]['ttfb_p90_us']:.0f} / {cell[c]['ttfb_p99_us']:.0f}"
            if c in cell else "-" for c in caches)
        if "goblin" in cell and "nginx" in cell:
            g, n = cell["goblin"], cell["nginx"]
            ratio = ", ".join(f"{g[k] / n[k]:.2f}x" for k in ["ttfb_p50_us", "ttfb_p90_us", "ttfb_p99_us"])
        else:
            ratio = "-"
        print(line + f" | {ratio} |")
PY
[ "$INVALID" = 0 ] || die "some cases were invalid (see above)"
