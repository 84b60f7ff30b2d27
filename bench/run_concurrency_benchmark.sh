#!/usr/bin/env bash
# The concurrency benchmark: goblin-store --mirror, nginx proxy_cache and Varnish in front of
# the same local origin, the same corpus and the same request order, measured by the same
# client (bench/http_load) at each connection count, in one run.
#
#   bench/run_concurrency_benchmark.sh [--no-build]
#
# For each mix (MIXES: "small" is web-like: SMALL_OBJECTS objects, log-normal sizes with a
# median of 26 KiB, capped at 64 MiB; "large" is LARGE_OBJECTS objects of 16-256 MiB) every
# cache starts at once, each on its own port (PORT, PORT+1, ...) in front of its own origin
# (ORIGIN_PORT, ...), with a fresh cache directory; every object is prewarmed exactly once
# and each origin's access log checked for exactly one request per object. Then, for each
# connection count in CONNS, ROUNDS rounds in which the caches take turns (each round in
# another order), each turn http_load running the shuffled order for TURN_SECONDS (or
# PASSES times; every response's status and length checked) while the cache's CPU time is read from /proc before
# and after: what the machine does meanwhile (this VM's neighbours) falls on every cache
# alike, and an idle cache costs the others nothing. The origins' logs are checked again at
# the end (a request during the measured runs is a miss: the run is invalid).
# Results: OUT/results.md: per connection count, Gbit/s and requests/s over all rounds (the
# rounds' bytes over their time) with the slowest and fastest round, goblin's ratio to the
# better peer; p50/p99 completion by size class (median over the rounds); server CPU seconds
# per GB delivered. Raw: OUT/<mix>-<cache>-<conns>-r<round>.json (http_load --json).
#
# Environment (defaults): CACHES ("goblin nginx varnish"; goblin-TAG is goblin with
# $GOBLIN_ARGS_TAG added, for A/B runs of configurations), MIXES ("small large"),
# CONNS ("1 16 64 256 1024"), ROUNDS (3), TURN_SECONDS (2) or PASSES per turn (unset),
# SMALL_OBJECTS (4000), LARGE_OBJECTS (12), THREADS (client loops, 2), GOBLIN_ARGS,
# GOBLIN_MEMORY (the RAM pool: small 1G, large 4G; nginx and Varnish use the page cache,
# which holds either corpus), HUGEPAGES (auto: reserve 2 MiB HugeTLB pages for each goblin
# pool of the mix, as a deployment does with the Ansible role's goblin_hugepages_2m, and give
# them back after; off: none, the pool then uses 4 KiB pages), PORT (8080), ORIGIN_PORT (18080),
# OUT (var/bench/concurrency-<time>), BUILD_DIR (build/release).
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
GOBLIN_MEMORY=${GOBLIN_MEMORY:-}
ROUNDS=${ROUNDS:-3}
HUGEPAGES=${HUGEPAGES:-auto}
TURN_SECONDS=${TURN_SECONDS:-2}
PORT=${PORT:-8080}
ORIGIN_PORT=${ORIGIN_PORT:-18080}
OUT=${OUT:-$ROOT/var/bench/concurrency-$(date -u +%Y%m%d-%H%M%S)}
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
say() { echo "concurrency-bench: $*" | tee -a "$OUT/run.log"; }
die() { say "ERROR: $*"; exit 1; }
RUN=$(mktemp -d /tmp/goblin-conc-bench.XXXXXX)
chmod 755 "$RUN"  # varnishd's and nginx's workers run as their own users
# shellcheck source=bench/cache_bench_lib.sh
. "$ROOT/bench/cache_bench_lib.sh"
PIDS=()
HP_FILE=/proc/sys/vm/nr_hugepages
HP_BEFORE=$(cat "$HP_FILE")
stop_all() { stop_pids; [ -w "$HP_FILE" ] && echo "$HP_BEFORE" > "$HP_FILE" 2>/dev/null || true; }
trap 'stop_all; rm -rf "$RUN"' EXIT

if [ "$BUILD" = 1 ]; then
  cmake -S "$ROOT" -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
  cmake --build "$BUILD_DIR" --target goblin-store goblin-core goblin-gateway http_load >/dev/null
fi
CLIENT=$BUILD_DIR/bench/http_load
[ -x "$CLIENT" ] || die "$CLIENT is missing (build it or drop --no-build)"
# shellcheck disable=SC2086
# shellcheck disable=SC2046
require_caches $(for c in $CACHES; do echo "${c%%-*}"; done)

{
  echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "cpu: $(sed -n 's/^model name\s*: //p' /proc/cpuinfo | head -1) x $(nproc)"
  echo "memory: $(free -g | awk '/^Mem:/{print $2}') GiB; kernel $(uname -r)"
  echo "goblin: $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown) $GOBLIN_ARGS"
  command -v varnishd >/dev/null && echo "varnish: $(varnishd -V 2>&1 | head -1)"
  command -v nginx >/dev/null && echo "nginx: $(nginx -v 2>&1)"
  echo "mixes: $MIXES; connections: $CONNS; client: http_load, $THREADS loops"
} | tee "$OUT/machine.txt"


origin_gets() { grep -c '^GET /gen/' "$1" 2>/dev/null || true; }
INVALID=0
for mix in $MIXES; do
  MANIFEST=$OUT/manifest-$mix.txt
  mix_manifest "$mix" "$SMALL_OBJECTS" "$LARGE_OBJECTS" > "$MANIFEST"
  NOBJ=$(wc -l < "$MANIFEST")
  BYTES=$(awk '{s += $2} END {printf "%.0f\n", s}' "$MANIFEST")
  # A turn runs TURN_SECONDS (the order, round and round; connection set-up and the last
  # requests in flight weigh little), or PASSES passes when that is set.
  if [ -n "${PASSES:-}" ]; then load=(--passes "$PASSES") turn="$PASSES passes"
  else load=(--seconds "$TURN_SECONDS") turn="${TURN_SECONDS} s"; fi
  memory=${GOBLIN_MEMORY:-$([ "$mix" = small ] && echo 1G || echo 4G)}
  say "== mix $mix: $NOBJ objects, $((BYTES >> 20)) MiB; $ROUNDS rounds of $turn per connection count; goblin --memory $memory"
  if [ "$HUGEPAGES" = auto ] && [ -w "$HP_FILE" ]; then
    # Each goblin pool: --memory in 2 MiB pages and a little for its I/O buffers.
    ngoblin=0
    for c in $CACHES; do [ "${c%%-*}" != goblin ] || ngoblin=$((ngoblin + 1)); done
    mib=$($PY -c 'import sys; s=sys.argv[1].upper(); u={"K":1/1024,"M":1,"G":1024,"T":1<<20}; print(int(float(s[:-1])*u[s[-1]]) if s[-1] in u else int(s)>>20)' "$memory")
    want=$((HP_BEFORE + ngoblin * (mib / 2 + 64)))
    echo "$want" > "$HP_FILE" 2>/dev/null || true
    say "HugeTLB: asked for $want 2 MiB pages, got $(cat "$HP_FILE") ($ngoblin goblin pool(s) of $memory)"
  fi
  declare -A CACHE_PORT=() ORIGIN_LOG=() CPID=() WARM=()
  i=0
  for cache in $CACHES; do
    port=$((PORT + i)) oport=$((ORIGIN_PORT + i))
    i=$((i + 1))
    CACHE_PORT[$cache]=$port
    CACHE_DIR=$ROOT/var/bench/conc-cache-$cache
    rm -rf "$CACHE_DIR"
    mkdir -p "$CACHE_DIR" "$RUN/$cache"
    chmod 755 "$RUN/$cache"
    LOG=$OUT/origin-$mix-$cache.log
    ORIGIN_LOG[$cache]=$LOG
    : > "$LOG"
    $PY "$ROOT/tests/support/test_origin.py" --port "$oport" --log "$LOG" \
      > "$OUT/origin-$mix-$cache.out" 2>&1 &
    PIDS+=($!)
    wait_port "$oport" || die "the origin did not start"
    STORE_BYTES=$((BYTES / 10 * 15 + (256 << 20)))
    # goblin-TAG: goblin with $GOBLIN_ARGS_TAG added (A/B runs of two configurations).
    extra=$GOBLIN_ARGS
    if [[ $cache == goblin-* ]]; then
      var=GOBLIN_ARGS_${cache#goblin-}
      extra="$extra ${!var:-}"
    fi
    PORT=$port ORIGIN_PORT=$oport RUN=$RUN/$cache GOBLIN_MEMORY=$memory GOBLIN_ARGS=$extra \
      start_cache "${cache%%-*}" "$CACHE_DIR" "$STORE_BYTES" "$OUT/cache-$mix-$cache.log"
    CPID[$cache]=$CACHE_PID
    wait_port "$port" || { cat "$OUT/cache-$mix-$cache.log"; die "$cache did not start"; }
    t0=$(date +%s.%N)
    "$CLIENT" --target "http://127.0.0.1:$port" --manifest "$MANIFEST" --connections 8 \
      --threads "$THREADS" --passes 1 --label "$cache-prewarm" > "$OUT/prewarm-$mix-$cache.txt" ||
      { cat "$OUT/prewarm-$mix-$cache.txt"; die "$cache: prewarm failed"; }
    say "$cache: prewarmed in $(echo "$(date +%s.%N) - $t0" | bc) s"
  done
  sleep 2  # (a cache may still be writing the last objects after their responses ended)
  for cache in $CACHES; do
    WARM[$cache]=$(origin_gets "${ORIGIN_LOG[$cache]}")
    [ "${WARM[$cache]}" = "$NOBJ" ] ||
      die "$cache: the origin saw ${WARM[$cache]} requests for $NOBJ objects while prewarming"
  done
  read -r -a order <<< "$CACHES"
  n=${#order[@]}
  for c in $CONNS; do
    for round in $(seq "$ROUNDS"); do
      for k in $(seq 0 $((n - 1))); do
        cache=${order[$(((k + round) % n))]}
        cpu0=$(tree_cpu "${CPID[$cache]}")
        out=$OUT/$mix-$cache-$c-r$round
        if ! "$CLIENT" --target "http://127.0.0.1:${CACHE_PORT[$cache]}" --manifest "$MANIFEST" \
            --connections "$c" --threads "$THREADS" "${load[@]}" --label "$cache" --json \
            > "$out.txt"; then
          say "$cache: errors at $c connections"
          INVALID=1
        fi
        cpu1=$(tree_cpu "${CPID[$cache]}")
        tail -1 "$out.txt" |
          $PY -c 'import json,sys; d=json.load(sys.stdin); d["server_cpu_s"]=float(sys.argv[1]); d["mix"]=sys.argv[2]; d["round"]=int(sys.argv[3]); print(json.dumps(d))' \
            "$(echo "($cpu1 - $cpu0) / $(getconf CLK_TCK)" | bc -l)" "$mix" "$round" > "$out.json"
        say "round $round: $(head -1 "$out.txt")"
      done
    done
  done
  for cache in $CACHES; do
    AFTER=$(origin_gets "${ORIGIN_LOG[$cache]}")
    if [ "$AFTER" != "${WARM[$cache]}" ]; then
      say "INVALID: $cache: the origin saw $((AFTER - WARM[$cache])) requests during the measured runs"
      INVALID=1
    fi
  done
  stop_all
  for cache in $CACHES; do rm -rf "$ROOT/var/bench/conc-cache-$cache"; done
  unset CACHE_PORT ORIGIN_LOG CPID WARM
done

$PY - "$OUT" <<'PY' | tee "$OUT/results.md"
import glob, json, os, statistics, sys
rows = [json.load(open(f)) for f in glob.glob(os.path.join(sys.argv[1], "*-*-*-r*.json"))]
by = {}
for r in rows:
    by.setdefault((r["mix"], r["connections"], r["label"]), []).append(r)
def agg(rs):
    secs = sum(r["seconds"] for r in rs)
    b = sum(r["bytes"] for r in rs)
    gb = [r["gbit_s"] for r in rs]
    classes = {}
    for name in rs[0]["classes"]:
        cl = [r["classes"][name] for r in rs if name in r["classes"]]
        classes[name] = (statistics.median(c["done_p50_ms"] for c in cl),
                         statistics.median(c["done_p99_ms"] for c in cl))
    return {"gbit_s": b * 8 / secs / 1e9 if secs else 0,
            "requests_s": sum(r["requests"] for r in rs) / secs if secs else 0,
            "min": min(gb), "max": max(gb), "bytes": b,
            "cpu": sum(r["server_cpu_s"] for r in rs), "classes": classes, "rounds": len(rs)}
for mix in sorted({r["mix"] for r in rows}, reverse=True):
    print(f"\n### {mix} mix\n")
    caches = sorted({r["label"] for r in rows if r["mix"] == mix})
    conns_all = sorted({r["connections"] for r in rows if r["mix"] == mix})
    cell = {(n, c): agg(by[(mix, n, c)]) for n in conns_all for c in caches if (mix, n, c) in by}
    print("| connections | " + " | ".join(f"{c} Gbit/s (req/s) [rounds]" for c in caches) +
          " | goblin / best peer |")
    print("|---:|" + "---:|" * len(caches) + "---:|")
    for n in conns_all:
        line = f"| {n} | " + " | ".join(
            f"{cell[(n, c)]['gbit_s']:.2f} ({cell[(n, c)]['requests_s']:.0f}) "
            f"[{cell[(n, c)]['min']:.1f}-{cell[(n, c)]['max']:.1f}]" if (n, c) in cell else "-"
            for c in caches)
        peers = [cell[(n, c)]["gbit_s"] for c in caches
                 if not c.startswith("goblin") and (n, c) in cell]
        ratio = ", ".join(f"{cell[(n, g)]['gbit_s'] / max(peers):.2f}x" for g in caches
                          if g.startswith("goblin") and (n, g) in cell and peers and max(peers) > 0)
        print(line + f" | {ratio or '-'} |")
    print("\n| connections | cache | class | p50 ms | p99 ms | server CPU s/GB |")
    print("|---:|---|---|---:|---:|---:|")
    for n in conns_all:
        for c in caches:
            a = cell.get((n, c))
            if not a:
                continue
            gb = a["bytes"] / 1e9
            cpu = f"{a['cpu'] / gb:.2f}" if gb > 0 else "-"
            for name, (p50, p99) in a["classes"].items():
                print(f"| {n} | {c} | {name} | {p50:.2f} | {p99:.2f} | {cpu} |")
PY
say "results: $OUT/results.md"
[ "$INVALID" = 0 ] || { say "the run is INVALID (see above)"; exit 1; }
