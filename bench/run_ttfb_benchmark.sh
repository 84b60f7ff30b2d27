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
# Every cache starts at once, on its own port and in front of its own origin, with a fresh
# cache directory; every object is fetched once (prewarm) and each origin's log checked for
# exactly one request per object. Then each case (object x mode) runs in ROUNDS rounds, the
# caches taking turns within a round, so that the machine's noise falls on all of them
# alike; then the origins' logs are checked again (a request during the probes was a miss:
# the run is invalid). Results: $OUT/results.md (p50 / p90 / p99 in microseconds over all
# rounds, goblin / nginx at each), the raw first-byte times in $OUT/raw-*.txt.
#
# Environment (defaults): CACHES ("goblin goblin-core nginx varnish"; goblin-TAG is goblin
# with $GOBLIN_ARGS_TAG added, for A/B runs), OBJECTS (PATH:SIZE ..., the three above),
# MODES ("close keepalive"), REQUESTS (2000;
# the 256 MiB object: REQUESTS/10 with a connection per request, REQUESTS/20 keep-alive,
# so that p99 is not the slowest single request), ROUNDS (20),
# GOBLIN_MEMORY (1G), GOBLIN_ARGS, PORT (8080; the caches take PORT, PORT+1, ...),
# ORIGIN_PORT (18080, likewise), OUT (var/bench/ttfb-<time>), BUILD_DIR (build/release).
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD_DIR=${BUILD_DIR:-$ROOT/build/release}
CACHES=${CACHES:-"goblin goblin-core nginx varnish"}
REQUESTS=${REQUESTS:-2000}
ROUNDS=${ROUNDS:-20}
GOBLIN_MEMORY=${GOBLIN_MEMORY:-1G}
GOBLIN_ARGS=${GOBLIN_ARGS:-}
PORT=${PORT:-8080}
ORIGIN_PORT=${ORIGIN_PORT:-18080}
OUT=${OUT:-$ROOT/var/bench/ttfb-$(date -u +%Y%m%d-%H%M%S)}
PY=/usr/bin/python3
BUILD=1
[ "${1:-}" = "--no-build" ] && BUILD=0

mkdir -p "$OUT"
# The caches take PORT, PORT+1, ... and their origins ORIGIN_PORT, ...: the two ranges must not meet.
ncaches=$(wc -w <<< "$CACHES")
if (( PORT < ORIGIN_PORT + ncaches && ORIGIN_PORT < PORT + ncaches )); then
  echo "ports overlap: caches on $PORT.. and origins on $ORIGIN_PORT.. ($ncaches each)" >&2
  exit 2
fi
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
for c in $CACHES; do [[ $c == goblin-* ]] || peers="$peers $c"; done
# shellcheck disable=SC2086
require_caches $peers

{
  echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "cpu: $(sed -n 's/^model name\s*: //p' /proc/cpuinfo | head -1) x $(nproc)"
  echo "memory: $(free -g | awk '/^Mem:/{print $2}') GiB; kernel $(uname -r)"
  echo "goblin: $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown) --ram-head 4M --block 4M --memory $GOBLIN_MEMORY $GOBLIN_ARGS"
  command -v varnishd >/dev/null && echo "varnish: $(varnishd -V 2>&1 | head -1)"
  command -v nginx >/dev/null && echo "nginx: $(nginx -v 2>&1)"
  echo "requests per case: $REQUESTS (256 MiB: $((REQUESTS / 10)) close, $((REQUESTS / 20)) keep-alive)"
} | tee "$OUT/machine.txt"

# The origin's /gen/SIZE/NAME objects (a seeded pattern, max-age=3600).
OBJECTS=${OBJECTS:-"/gen/4096/hot4k:4096 /gen/262144/hot256k:262144 /gen/268435456/hot256m:268435456"}
NOBJ=$(wc -w <<< "$OBJECTS")
MODES=${MODES:-"close keepalive"}
origin_gets() { grep -c '^GET /gen/' "$1" 2>/dev/null || true; }

INVALID=0
# Every cache runs at once, each on its own port (PORT, PORT+1, ...) in front of its own
# origin (ORIGIN_PORT, ORIGIN_PORT+1, ...): the probes of one case take turns, ROUNDS
# rounds of one cache after another, so that what the machine does meanwhile (this VM's
# neighbours, its page cache) falls on every cache alike. An idle cache costs the others
# nothing (no cache polls without traffic).
declare -A CACHE_PORT ORIGIN_LOG
i=0
for cache in $CACHES; do
  port=$((PORT + i)) oport=$((ORIGIN_PORT + i))
  i=$((i + 1))
  CACHE_PORT[$cache]=$port
  CACHE_DIR=$ROOT/var/bench/ttfb-cache-$cache
  rm -rf "$CACHE_DIR"
  mkdir -p "$CACHE_DIR" "$RUN/$cache"
  chmod 755 "$RUN/$cache"
  LOG=$OUT/origin-$cache.log
  ORIGIN_LOG[$cache]=$LOG
  : > "$LOG"
  $PY "$ROOT/tests/support/test_origin.py" --port "$oport" --log "$LOG" \
    > "$OUT/origin-$cache.out" 2>&1 &
  PIDS+=($!)
  wait_port "$oport" || die "the origin did not start"
  extra="--ram-head 4M --block 4M $GOBLIN_ARGS"
  # goblin-core: every hit through the core; goblin-TAG: with $GOBLIN_ARGS_TAG added.
  if [ "$cache" = goblin-core ]; then
    extra="$extra --gateway-arg=--local-hits=false"
  elif [[ $cache == goblin-* ]]; then
    var=GOBLIN_ARGS_${cache#goblin-}
    extra="$extra ${!var:-}"
  fi
  PORT=$port ORIGIN_PORT=$oport RUN=$RUN/$cache GOBLIN_ARGS=$extra \
    start_cache "${cache%%-*}" "$CACHE_DIR" $((1 << 30)) "$OUT/cache-$cache.log"
  wait_port "$port" || { cat "$OUT/cache-$cache.log"; die "$cache did not start"; }
  for o in $OBJECTS; do
    path=${o%%:*}
    curl -sf -o /dev/null --max-time 120 "http://127.0.0.1:$port$path" || die "$cache: prewarm of $path failed"
  done
done
sleep 2  # (a cache may still be writing the last object after its response ended)
declare -A WARM
for cache in $CACHES; do
  WARM[$cache]=$(origin_gets "${ORIGIN_LOG[$cache]}")
  [ "${WARM[$cache]}" = "$NOBJ" ] || die "$cache: the origin saw ${WARM[$cache]} requests for $NOBJ objects while prewarming"
done

for o in $OBJECTS; do
  path=${o%%:*}
  size=${o##*:}
  for mode in $MODES; do
    n=$REQUESTS
    if [ "$size" -gt $((16 << 20)) ]; then
      n=$([ "$mode" = close ] && echo $((REQUESTS / 10)) || echo $((REQUESTS / 20)))
    fi
    per=$(((n + ROUNDS - 1) / ROUNDS))
    for cache in $CACHES; do : > "$OUT/raw-$cache-$mode-${path##*/}.txt"; done
    for round in $(seq "$ROUNDS"); do
      for cache in $CACHES; do
        if ! "$PROBE" --target "http://127.0.0.1:${CACHE_PORT[$cache]}" --path "$path" \
            --size "$size" --mode "$mode" --requests "$per" --warmup $((per / 10 + 1)) \
            --label "$cache" --raw "$OUT/raw-$cache-$mode-${path##*/}.txt" \
            >> "$OUT/$cache-$mode-${path##*/}.log"; then
          say "$cache: $mode $path failed (round $round)"
          INVALID=1
        fi
      done
    done
    say "$mode $path: $ROUNDS rounds of $per requests per cache"
  done
done
for cache in $CACHES; do
  AFTER=$(origin_gets "${ORIGIN_LOG[$cache]}")
  if [ "$AFTER" != "${WARM[$cache]}" ]; then
    say "INVALID: $cache: the origin saw $((AFTER - WARM[$cache])) requests during the probes"
    INVALID=1
  fi
done
stop_pids
for cache in $CACHES; do rm -rf "$ROOT/var/bench/ttfb-cache-$cache"; done

$PY - "$OUT" <<'PY' | tee "$OUT/results.md"
import os, sys
out = sys.argv[1]
def pct(v, q):
    v = sorted(v)
    return v[min(len(v) - 1, int(q * len(v)))] if v else float("nan")
order = ["goblin", "goblin-core", "nginx", "varnish"]
found = {f.split("-close-")[0].split("-keepalive-")[0][4:] for f in os.listdir(out)
         if f.startswith("raw-")}
caches = [c for c in order if c in found] + sorted(found - set(order))
print("| object | connection | " + " | ".join(f"{c} p50 / p90 / p99 us" for c in caches) +
      " | goblin / nginx p50, p90, p99 |")
print("|---|---|" + "---:|" * len(caches) + "---:|")
for size, name, obj in [(4096, "4 KiB", "hot4k"), (262144, "256 KiB", "hot256k"),
                        (268435456, "256 MiB (4 MiB head)", "hot256m")]:
    for mode in ["close", "keepalive"]:
        cell = {}
        for c in caches:
            f = os.path.join(out, f"raw-{c}-{mode}-{obj}.txt")
            if os.path.exists(f):
                v = [float(x) for x in open(f).read().split()]
                if v:
                    cell[c] = (pct(v, 0.5), pct(v, 0.9), pct(v, 0.99), len(v))
        if not cell:
            continue  # (a case not run: OBJECTS, MODES)
        line = f"| {name} | {'per request' if mode == 'close' else 'keep-alive'} | " + " | ".join(
            f"{cell[c][0]:.0f} / {cell[c][1]:.0f} / {cell[c][2]:.0f}" if c in cell else "-"
            for c in caches)
        if "goblin" in cell and "nginx" in cell:
            g, n = cell["goblin"], cell["nginx"]
            ratio = ", ".join(f"{g[k] / n[k]:.2f}x" for k in range(3))
        else:
            ratio = "-"
        print(line + f" | {ratio} |")
PY
[ "$INVALID" = 0 ] || die "some cases were invalid (see above)"
