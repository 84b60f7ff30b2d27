#!/usr/bin/env bash
# The tag purge benchmark: what purging one tag carried by OBJECTS cached objects costs a
# running cache that serves hits meanwhile, goblin-store --mirror against Varnish 7.1 with
# the xkey vmod (Debian's varnish-modules), in one run.
#
#   bench/tag_purge_benchmark.sh [--no-build]
#
# For each cache: its own origin (tests/support/test_origin.py) and a fresh cache; OBJECTS
# objects of SIZE bytes whose origin answer carries `xkey: catalog` (goblin takes xkey as
# it takes Surrogate-Key), and HOT untagged objects of HOT_SIZE, each fetched once (the
# origin's log must show exactly one request per object). Then http_load reads the hot
# objects over CONNS connections for RUN_SECONDS s (every request traced), and PURGE_AT s in a
# PURGE with `xkey-purge: catalog` (MODE=soft: goblin's X-Purge-Soft, Varnish's
# xkey-softpurge) is sent and timed until its answer. Afterwards SAMPLE tagged objects must
# be misses (the origin asked again; with soft, stale versions revalidated) and the hot
# ones still hits (no new origin request).
# Results: OUT/results.md: per cache, the purge's answer and time, hit throughput and p50 /
# p99 / max latency in the 100 ms windows before the purge and in those it overlaps;
# OUT/<cache>-trace.csv (http_load --trace), OUT/<cache>-purge.txt.
#
# Environment (defaults): CACHES ("goblin varnish"), OBJECTS (100000), SIZE (1024), HOT
# (1000), HOT_SIZE (8192), CONNS (16), THREADS (1), RUN_SECONDS (8), PURGE_AT (3), MODE (hard),
# SAMPLE (20), GOBLIN_ARGS, GOBLIN_MEMORY (1G), VARNISH_MEMORY (1G, malloc storage), PORT
# (8090), ORIGIN_PORT (18090), OUT (var/bench/tag-purge-<time>), BUILD_DIR (build/release).
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD_DIR=${BUILD_DIR:-$ROOT/build/release}
CACHES=${CACHES:-"goblin varnish"}
OBJECTS=${OBJECTS:-100000}
SIZE=${SIZE:-1024}
HOT=${HOT:-1000}
HOT_SIZE=${HOT_SIZE:-8192}
CONNS=${CONNS:-16}
THREADS=${THREADS:-1}
RUN_SECONDS=${RUN_SECONDS:-8}
PURGE_AT=${PURGE_AT:-3}
MODE=${MODE:-hard}
SAMPLE=${SAMPLE:-20}
GOBLIN_ARGS=${GOBLIN_ARGS:-}
GOBLIN_MEMORY=${GOBLIN_MEMORY:-1G}
VARNISH_MEMORY=${VARNISH_MEMORY:-1G}
PORT=${PORT:-8090}
ORIGIN_PORT=${ORIGIN_PORT:-18090}
OUT=${OUT:-$ROOT/var/bench/tag-purge-$(date -u +%Y%m%d-%H%M%S)}
PY=/usr/bin/python3
BUILD=1
[ "${1:-}" = "--no-build" ] && BUILD=0
[[ $MODE == hard || $MODE == soft ]] || { echo "MODE is hard or soft" >&2; exit 2; }

mkdir -p "$OUT"
say() { echo "tag-purge-bench: $*" | tee -a "$OUT/run.log"; }
die() { say "ERROR: $*"; exit 1; }
RUN=$(mktemp -d /tmp/goblin-tag-purge.XXXXXX)
chmod 755 "$RUN"  # varnishd's workers run as their own user
# shellcheck source=bench/cache_bench_lib.sh
. "$ROOT/bench/cache_bench_lib.sh"
PIDS=()
trap 'stop_pids; rm -rf "$RUN"' EXIT

if [ "$BUILD" = 1 ]; then
  cmake -S "$ROOT" -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
  cmake --build "$BUILD_DIR" --target goblin-store goblin-core goblin-gateway http_load >/dev/null
fi
CLIENT=$BUILD_DIR/bench/http_load
[ -x "$CLIENT" ] || die "$CLIENT is missing (build it or drop --no-build)"
# shellcheck disable=SC2086
require_caches $CACHES
if [[ " $CACHES " == *" varnish "* ]] && ! ls /usr/lib/x86_64-linux-gnu/varnish/vmods/libvmod_xkey.so >/dev/null 2>&1; then
  die "the xkey vmod is missing (apt-get install varnish-modules)"
fi

{
  echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "cpu: $(sed -n 's/^model name\s*: //p' /proc/cpuinfo | head -1) x $(nproc)"
  echo "goblin: $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown) $GOBLIN_ARGS"
  command -v varnishd >/dev/null && echo "varnish: $(varnishd -V 2>&1 | head -1)"
  echo "tagged: $OBJECTS x $SIZE B; hot: $HOT x $HOT_SIZE B over $CONNS connections," \
    "$RUN_SECONDS s, $MODE purge at $PURGE_AT s"
} | tee "$OUT/machine.txt"

TAGGED=$OUT/manifest-tagged.txt HOTM=$OUT/manifest-hot.txt
awk -v n="$OBJECTS" -v s="$SIZE" 'BEGIN { for (i = 0; i < n; i++) printf "/gen/%d/c%06d?xkey=catalog %d\n", s, i, s }' > "$TAGGED"
awk -v n="$HOT" -v s="$HOT_SIZE" 'BEGIN { for (i = 0; i < n; i++) printf "/gen/%d/h%05d %d\n", s, i, s }' > "$HOTM"
gets() { grep -c "^GET $2" "$1" 2>/dev/null || true; }

i=0
for cache in $CACHES; do
  port=$((PORT + i)) oport=$((ORIGIN_PORT + i))
  i=$((i + 1))
  dir=$ROOT/var/bench/tag-purge-cache-$cache
  rm -rf "$dir"
  mkdir -p "$dir" "$RUN/$cache"
  chmod 755 "$RUN/$cache"
  olog=$OUT/origin-$cache.log
  : > "$olog"
  $PY "$ROOT/tests/support/test_origin.py" --port "$oport" --log "$olog" > "$OUT/origin-$cache.out" 2>&1 &
  PIDS+=($!)
  wait_port "$oport" || die "the origin did not start"
  if [ "$cache" = goblin ]; then
    PORT=$port ORIGIN_PORT=$oport RUN=$RUN/$cache \
      start_cache goblin "$dir" 0 "$OUT/cache-$cache.log"
    purge_hdr=(-H "xkey-purge: catalog")
    [ "$MODE" = soft ] && purge_hdr+=(-H "X-Purge-Soft: 1")
  else
    sed "s/@ORIGIN_PORT@/$oport/" "$ROOT/bench/mirror/varnish-xkey.vcl.in" > "$RUN/$cache/varnish.vcl"
    varnishd -F -n "$RUN/$cache/varnish" -a "127.0.0.1:$port" -f "$RUN/$cache/varnish.vcl" \
      -s "malloc,$VARNISH_MEMORY" > "$OUT/cache-$cache.log" 2>&1 &
    PIDS+=($!)
    purge_hdr=(-H "xkey-purge: catalog")
    [ "$MODE" = soft ] && purge_hdr=(-H "xkey-softpurge: catalog")
  fi
  wait_port "$port" || { cat "$OUT/cache-$cache.log"; die "$cache did not start"; }
  t0=$(date +%s.%N)
  for m in "$TAGGED" "$HOTM"; do
    "$CLIENT" --target "http://127.0.0.1:$port" --manifest "$m" --connections 32 \
      --threads 2 --passes 1 --label "$cache-fill" >> "$OUT/fill-$cache.txt" ||
      { cat "$OUT/fill-$cache.txt"; die "$cache: filling failed"; }
  done
  sleep 2  # (the last fills commit after their responses ended)
  n_tagged=$(gets "$olog" "/gen/$SIZE/c") n_hot=$(gets "$olog" "/gen/$HOT_SIZE/h")
  if [ "$n_tagged" != "$OBJECTS" ] || [ "$n_hot" != "$HOT" ]; then
    die "$cache: the origin saw $n_tagged tagged and $n_hot hot requests while filling"
  fi
  say "$cache: $OBJECTS tagged and $HOT hot objects cached in $(echo "$(date +%s.%N) - $t0" | bc) s"
  # Hits for RUN_SECONDS s; the purge PURGE_AT s in.
  launch=$(date +%s.%N)
  "$CLIENT" --target "http://127.0.0.1:$port" --manifest "$HOTM" --connections "$CONNS" \
    --threads "$THREADS" --seconds "$RUN_SECONDS" --label "$cache" --json \
    --trace "$OUT/$cache-trace.csv" > "$OUT/$cache-load.txt" &
  load_pid=$!
  sleep "$PURGE_AT"
  p0=$(date +%s.%N)
  curl -s -X PURGE "${purge_hdr[@]}" "http://127.0.0.1:$port/" -o "$OUT/$cache-purge.txt" \
    -w '%{http_code}\n' > "$OUT/$cache-purge-status.txt"
  p1=$(date +%s.%N)
  wait "$load_pid" || die "$cache: hits failed during the purge ($(head -1 "$OUT/$cache-load.txt"))"
  say "$cache: PURGE answered $(cat "$OUT/$cache-purge-status.txt") in" \
    "$(echo "($p1 - $p0) * 1000" | bc) ms: $(tr -d '\r\n' < "$OUT/$cache-purge.txt" | head -c 200)"
  # Tagged objects are misses now, hot ones still hits.
  sleep 1  # (Varnish refreshes soft-purged objects in the background)
  before=$(gets "$olog" "/gen/$SIZE/c")
  for k in $(seq 0 $((OBJECTS / SAMPLE)) $((OBJECTS - 1)) | head -n "$SAMPLE"); do
    curl -s -o /dev/null "http://127.0.0.1:$port$(sed -n "$((k + 1))p" "$TAGGED" | cut -d' ' -f1)"
  done
  sleep 1
  asked=$(($(gets "$olog" "/gen/$SIZE/c") - before))
  [ "$asked" = "$SAMPLE" ] || die "$cache: $asked of $SAMPLE sampled tagged objects went to the origin after the purge"
  [ "$(gets "$olog" "/gen/$HOT_SIZE/h")" = "$HOT" ] || die "$cache: hot objects were fetched again"
  echo "{\"cache\":\"$cache\",\"launch\":$launch,\"purge_start\":$p0,\"purge_end\":$p1}" > "$OUT/$cache-times.json"
  stop_pids
  rm -rf "$dir"
done

# shellcheck disable=SC2086
$PY - "$OUT" $CACHES <<'PY' | tee "$OUT/results.md"
import csv, json, os, statistics, sys
out, caches = sys.argv[1], sys.argv[2:]
def pct(v, p):
    v = sorted(v)
    return v[min(len(v) - 1, int(p * len(v)))] if v else 0.0
print("| cache | purge answer | purge time | hits/s before | hits/s during | p50 / p99 / max before (ms) | p50 / p99 / max during (ms) |")
print("|---|---|---:|---:|---:|---|---|")
for c in caches:
    t = json.load(open(os.path.join(out, f"{c}-times.json")))
    # http_load's clock starts when it does (within milliseconds of `launch`).
    p0, p1 = t["purge_start"] - t["launch"], t["purge_end"] - t["launch"]
    win = 0.1
    before, during = {}, {}
    with open(os.path.join(out, f"{c}-trace.csv")) as f:
        for r in csv.DictReader(f):
            start, done = int(r["start_ns"]) / 1e9, int(r["done_ns"]) / 1e9
            lat = (done - start) * 1e3
            w = int(done / win)
            if done >= p0 - 0.05 and start <= p1 + 0.05:
                during.setdefault(w, []).append(lat)
            elif done < p0 - 0.2 and done > 0.5:
                before.setdefault(w, []).append(lat)
    lb = [x for v in before.values() for x in v]
    ld = [x for v in during.values() for x in v]
    span_d = max(p1 - p0 + 0.1, win)
    rate_b = len(lb) / max(len(before) * win, win)
    rate_d = len(ld) / span_d
    answer = open(os.path.join(out, f"{c}-purge.txt"), errors="replace").read()
    if "<title>" in answer:  # (Varnish's synth page: its title)
        answer = answer.split("<title>")[1].split("</title>")[0]
    answer = answer.strip().replace("\n", " ")[:60]
    print(f"| {c} | {answer} | {(p1 - p0) * 1e3:.0f} ms | {rate_b:,.0f} | {rate_d:,.0f} | "
          f"{pct(lb, .5):.2f} / {pct(lb, .99):.2f} / {max(lb or [0]):.2f} | "
          f"{pct(ld, .5):.2f} / {pct(ld, .99):.2f} / {max(ld or [0]):.2f} |")
PY
say "results in $OUT/results.md"
