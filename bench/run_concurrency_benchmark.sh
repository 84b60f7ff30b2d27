#!/usr/bin/env bash
# The concurrency benchmark: goblin-store --mirror, nginx proxy_cache and Varnish in front of
# the same local origin, the same corpus and the same request order, measured by the same
# client (bench/http_load) at each connection count, in one run.
#
#   bench/run_concurrency_benchmark.sh [--no-build]
#
# For each mix (MIXES: "small" is web-like: SMALL_OBJECTS objects, log-normal sizes with a
# median of 26 KiB, capped at 64 MiB; "large" is LARGE_OBJECTS objects of 16-256 MiB) and
# each cache in turn: a fresh cache directory; every object prewarmed exactly once and the
# origin's access log checked for exactly one request per object; then for each connection
# count in CONNS, http_load runs the shuffled order (PASSES passes; every response's status
# and length checked) while the cache's CPU time is read from /proc before and after; the
# origin's log is checked again (a request during the measured runs is a miss: the run is
# invalid). Results: OUT/results.md (Gbit/s, requests/s, p50/p99 completion by size class,
# server CPU seconds per GB delivered, and goblin's ratio to the better peer per row) and
# OUT/<mix>-<cache>-<conns>.json (http_load --json).
#
# Environment (defaults): CACHES ("goblin nginx varnish"), MIXES ("small large"),
# CONNS ("1 16 64 256 1024"), PASSES (small 3, large 1), SMALL_OBJECTS (4000),
# LARGE_OBJECTS (12), THREADS (client loops, 2), GOBLIN_ARGS, GOBLIN_MEMORY (1G), PORT (8080),
# ORIGIN_PORT (18080), OUT (var/bench/concurrency-<time>), BUILD_DIR (build/release).
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD_DIR=${BUILD_DIR:-$ROOT/build/release}
CACHES=${CACHES:-"goblin nginx varnish"}
MIXES=${MIXES:-"small large"}
CONNS=${CONNS:-"1 16 64 256 1024"}
SMALL_OBJECTS=${SMALL_OBJECTS:-4000}
LARGE_OBJECTS=${LARGE_OBJECTS:-12}
THREADS=${THREADS:-2}
GOBLIN_ARGS=${GOBLIN_ARGS:-}
GOBLIN_MEMORY=${GOBLIN_MEMORY:-1G}
PORT=${PORT:-8080}
ORIGIN_PORT=${ORIGIN_PORT:-18080}
OUT=${OUT:-$ROOT/var/bench/concurrency-$(date -u +%Y%m%d-%H%M%S)}
PY=/usr/bin/python3
BUILD=1
[ "${1:-}" = "--no-build" ] && BUILD=0

mkdir -p "$OUT"
say() { echo "concurrency-bench: $*" | tee -a "$OUT/run.log"; }
die() { say "ERROR: $*"; exit 1; }
RUN=$(mktemp -d /tmp/goblin-conc-bench.XXXXXX)
chmod 755 "$RUN"  # varnishd's and nginx's workers run as their own users
# shellcheck source=bench/cache_bench_lib.sh
. "$ROOT/bench/cache_bench_lib.sh"
PIDS=()
stop_all() { stop_pids; }
trap 'stop_all; rm -rf "$RUN"' EXIT

if [ "$BUILD" = 1 ]; then
  cmake -S "$ROOT" -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
  cmake --build "$BUILD_DIR" --target goblin-store goblin-core goblin-gateway http_load >/dev/null
fi
CLIENT=$BUILD_DIR/bench/http_load
[ -x "$CLIENT" ] || die "$CLIENT is missing (build it or drop --no-build)"
# shellcheck disable=SC2086
require_caches $CACHES

{
  echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "cpu: $(sed -n 's/^model name\s*: //p' /proc/cpuinfo | head -1) x $(nproc)"
  echo "memory: $(free -g | awk '/^Mem:/{print $2}') GiB; kernel $(uname -r)"
  echo "goblin: $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown) $GOBLIN_ARGS"
  command -v varnishd >/dev/null && echo "varnish: $(varnishd -V 2>&1 | head -1)"
  command -v nginx >/dev/null && echo "nginx: $(nginx -v 2>&1)"
  echo "mixes: $MIXES; connections: $CONNS; client: http_load, $THREADS loops"
} | tee "$OUT/machine.txt"

# The origin's /gen/SIZE/NAME objects (seeded pattern, max-age=3600): no corpus on disk.
manifest() {  # mix -> manifest on stdout
  $PY - "$1" "$SMALL_OBJECTS" "$LARGE_OBJECTS" <<'PY'
import math, random, sys
mix, small, large = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
rng = random.Random(0x243f6a8885a308d3)
if mix == "small":
    for i in range(small):
        size = int(min(64 << 20, max(64, rng.lognormvariate(math.log(26 << 10), 1.6))))
        print(f"/gen/{size}/s{i:05d} {size}")
else:
    for i in range(large):
        size = rng.randint(16, 256) << 20
        print(f"/gen/{size}/l{i:03d} {size}")
PY
}

origin_gets() { grep -c '^GET /gen/' "$1" 2>/dev/null || true; }
# CPU seconds (user + system) of a process and its threads, and of its children's tree.
tree_cpu() {  # pid...
  local ticks=0 p kids
  for p in "$@"; do
    [ -r "/proc/$p/stat" ] || continue
    ticks=$((ticks + $(awk '{print $14 + $15}' "/proc/$p/stat")))
    kids=$(pgrep -P "$p" || true)
    # shellcheck disable=SC2086
    [ -n "$kids" ] && ticks=$((ticks + $(tree_cpu $kids)))
  done
  echo "$ticks"
}

INVALID=0
for mix in $MIXES; do
  MANIFEST=$OUT/manifest-$mix.txt
  manifest "$mix" > "$MANIFEST"
  NOBJ=$(wc -l < "$MANIFEST")
  BYTES=$(awk '{s += $2} END {printf "%.0f\n", s}' "$MANIFEST")
  passes=${PASSES:-$([ "$mix" = small ] && echo 3 || echo 1)}
  say "== mix $mix: $NOBJ objects, $((BYTES >> 20)) MiB; $passes passes per connection count"
  for cache in $CACHES; do
    CACHE_DIR=$ROOT/var/bench/conc-cache-$cache
    rm -rf "$CACHE_DIR"
    mkdir -p "$CACHE_DIR"
    LOG=$OUT/origin-$mix-$cache.log
    : > "$LOG"
    $PY "$ROOT/tests/support/test_origin.py" --port "$ORIGIN_PORT" --log "$LOG" \
      > "$OUT/origin-$mix-$cache.out" 2>&1 &
    PIDS+=($!)
    wait_port "$ORIGIN_PORT" || die "the origin did not start"
    STORE_BYTES=$((BYTES / 10 * 15 + (256 << 20)))
    start_cache "$cache" "$CACHE_DIR" "$STORE_BYTES" "$OUT/cache-$mix-$cache.log"
    wait_port "$PORT" || { cat "$OUT/cache-$mix-$cache.log"; die "$cache did not start"; }
    t0=$(date +%s.%N)
    "$CLIENT" --target "http://127.0.0.1:$PORT" --manifest "$MANIFEST" --connections 8 \
      --threads "$THREADS" --passes 1 --label "$cache-prewarm" > "$OUT/prewarm-$mix-$cache.txt" ||
      { cat "$OUT/prewarm-$mix-$cache.txt"; die "$cache: prewarm failed"; }
    sleep 2  # (a cache may still be writing the last objects after their responses ended)
    WARM=$(origin_gets "$LOG")
    say "$cache: prewarmed in $(echo "$(date +%s.%N) - $t0" | bc) s; origin saw $WARM GETs for $NOBJ objects"
    [ "$WARM" = "$NOBJ" ] || die "$cache: the origin saw $WARM requests for $NOBJ objects while prewarming"
    for c in $CONNS; do
      cpu0=$(tree_cpu "$CACHE_PID")
      if ! "$CLIENT" --target "http://127.0.0.1:$PORT" --manifest "$MANIFEST" --connections "$c" \
          --threads "$THREADS" --passes "$passes" --label "$cache" --json \
          > "$OUT/$mix-$cache-$c.txt"; then
        say "$cache: errors at $c connections"
        INVALID=1
      fi
      cpu1=$(tree_cpu "$CACHE_PID")
      tail -1 "$OUT/$mix-$cache-$c.txt" |
        $PY -c 'import json,sys; d=json.load(sys.stdin); d["server_cpu_s"]=float(sys.argv[1]); d["mix"]=sys.argv[2]; print(json.dumps(d))' \
          "$(echo "($cpu1 - $cpu0) / $(getconf CLK_TCK)" | bc -l)" "$mix" > "$OUT/$mix-$cache-$c.json"
      say "$(head -1 "$OUT/$mix-$cache-$c.txt")"
    done
    AFTER=$(origin_gets "$LOG")
    if [ "$AFTER" != "$WARM" ]; then
      say "INVALID: $cache: the origin saw $((AFTER - WARM)) requests during the measured runs"
      INVALID=1
    fi
    stop_all
    rm -rf "$CACHE_DIR"
  done
done

$PY - "$OUT" <<'PY' | tee "$OUT/results.md"
import glob, json, os, sys
rows = [json.load(open(f)) for f in glob.glob(os.path.join(sys.argv[1], "*-*-*.json"))]
by = {}
for r in rows:
    by.setdefault((r["mix"], r["connections"]), {})[r["label"]] = r
for mix in sorted({r["mix"] for r in rows}, reverse=True):
    print(f"\n### {mix} mix\n")
    caches = sorted({r["label"] for r in rows if r["mix"] == mix})
    print("| connections | " + " | ".join(f"{c} Gbit/s (req/s)" for c in caches) +
          " | goblin / best peer |")
    print("|---:|" + "---:|" * len(caches) + "---:|")
    for conns in sorted({k[1] for k in by if k[0] == mix}):
        cell = by[(mix, conns)]
        line = f"| {conns} | " + " | ".join(
            f"{cell[c]['gbit_s']:.2f} ({cell[c]['requests_s']:.0f})" if c in cell else "-"
            for c in caches)
        peers = [cell[c]["gbit_s"] for c in cell if c != "goblin"]
        ratio = f"{cell['goblin']['gbit_s'] / max(peers):.2f}x" if "goblin" in cell and peers and max(peers) > 0 else "-"
        print(line + f" | {ratio} |")
    print("\n| connections | cache | class | p50 ms | p99 ms | server CPU s/GB |")
    print("|---:|---|---|---:|---:|---:|")
    for conns in sorted({k[1] for k in by if k[0] == mix}):
        for c in caches:
            r = by[(mix, conns)].get(c)
            if not r:
                continue
            gb = r["bytes"] / 1e9
            cpu = f"{r['server_cpu_s'] / gb:.2f}" if gb > 0 else "-"
            for name, cl in r["classes"].items():
                print(f"| {conns} | {c} | {name} | {cl['done_p50_ms']:.2f} | {cl['done_p99_ms']:.2f} | {cpu} |")
PY
say "results: $OUT/results.md"
[ "$INVALID" = 0 ] || { say "the run is INVALID (see above)"; exit 1; }
