#!/usr/bin/env bash
# What the store takes for what it holds (issue #22): the concurrency benchmark's web-like
# small mix (4,000 objects, median 26 KiB, log-normal up to 64 MiB) filled once through
# goblin-store's mirror, then the core's own counters: disk slots taken (whole extents and
# slots shared by packed extents), the bytes extents take, and the head pool's bytes, each
# per payload byte. Prints a markdown table; raw counters in $OUT.
#   bench/store_footprint.sh [--no-build]
# Environment: OBJECTS (4000), MEMORY (1G), GOBLIN_ARGS (added to goblin-store's),
# BUILD_DIR (build/release), OUT (var/bench/footprint-<time>), PORT (8090), ORIGIN_PORT (18090).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD_DIR=${BUILD_DIR:-$ROOT/build/release}
OBJECTS=${OBJECTS:-4000}
GOBLIN_MEMORY=${MEMORY:-1G}
GOBLIN_ARGS=${GOBLIN_ARGS:-}
PORT=${PORT:-8090}
ORIGIN_PORT=${ORIGIN_PORT:-18090}
OUT=${OUT:-$ROOT/var/bench/footprint-$(date -u +%Y%m%d-%H%M%S)}
if [ "${1:-}" != "--no-build" ]; then
  cmake --build "$BUILD_DIR" --target goblin-store goblin-core goblin-gateway goblinctl http_load >/dev/null
fi
mkdir -p "$OUT"
die() { echo "store-footprint: ERROR: $*" >&2; exit 1; }
RUN=$(mktemp -d /tmp/goblin-footprint.XXXXXX)
PIDS=()
# shellcheck source=bench/cache_bench_lib.sh
. "$ROOT/bench/cache_bench_lib.sh"
trap 'stop_pids; rm -rf "$RUN"' EXIT

mix_manifest small "$OBJECTS" 0 > "$OUT/manifest.txt"
PAYLOAD=$(awk '{s += $2} END {printf "%.0f\n", s}' "$OUT/manifest.txt")
/usr/bin/python3 "$ROOT/tests/support/test_origin.py" --port "$ORIGIN_PORT" --log "$OUT/origin.log" \
  > "$OUT/origin.out" 2>&1 &
PIDS+=($!)
wait_port "$ORIGIN_PORT" || die "the origin did not start"
mkdir -p "$RUN/cache"
start_cache goblin "$RUN/cache" 0 "$OUT/goblin-store.log"
wait_port "$PORT" || { cat "$OUT/goblin-store.log"; die "goblin-store did not start"; }
# The core's heap (RssAnon: the pool and I/O buffers are memfd pages, counted as RssShmem)
# before and after the fill: what the index, the eviction order and the metadata take.
CORE_PID=$(pgrep -f "goblin-core --listen-unix $RUN/" | head -1)
rss_anon() { awk '/^RssAnon:/ {print $2 * 1024}' "/proc/$CORE_PID/status"; }
HEAP_BEFORE=$(rss_anon)
"$BUILD_DIR/bench/http_load" --target "http://127.0.0.1:$PORT" --manifest "$OUT/manifest.txt" \
  --connections 8 --threads 2 --passes 1 --label fill > "$OUT/fill.txt" || die "the fill failed"
sleep 2  # (the last objects' writes and commits)
HEAP_AFTER=$(rss_anon)
socks=("$RUN"/*.sock)
ADMIN=unix:${socks[0]}.admin
"$BUILD_DIR/tools/goblinctl" --target "$ADMIN" --json stats > "$OUT/stats.json" ||
  die "goblinctl stats ($ADMIN) failed"
"$BUILD_DIR/tools/goblinctl" --target "$ADMIN" pool > "$OUT/pool.txt" || die "goblinctl pool failed"
/usr/bin/python3 - "$OUT/stats.json" "$PAYLOAD" "$OBJECTS" "$GOBLIN_MEMORY $GOBLIN_ARGS" \
  "$HEAP_BEFORE" "$HEAP_AFTER" <<'PY'
import json, sys
stats = json.load(open(sys.argv[1]))
c = {k: int(v) for k, v in stats.get("counters", {}).items()}
payload, objects = int(sys.argv[2]), int(sys.argv[3])
heap = int(sys.argv[6]) - int(sys.argv[5])
mib = lambda b: f"{b / (1 << 20):,.0f} MiB"
ratio = lambda b: f"{b / payload:.2f}x"
print(f"web mix: {objects} objects, {mib(payload)} of payload; goblin-store --memory {sys.argv[4]}")
print(f"objects stored: {c.get('objects', 0)}, packed extents: {c.get('tier0_packed_extents', 0)} in {c.get('tier0_packed_slots', 0)} shared slots")
print()
print("| what | bytes | per payload byte |")
print("|---|---:|---:|")
for name, key in [("disk slots taken (whole extents + shared slots)", "tier0_slot_bytes"),
                  ("disk bytes extents take", "tier0_allocated_bytes"),
                  ("head pool: live slots' capacity", "pool_reserved_bytes"),
                  ("head pool: blocks held by size classes", "pool_class_block_bytes")]:
    if key in c:
        print(f"| {name} | {mib(c[key])} | {ratio(c[key])} |")
stored = max(c.get("objects", 0), 1)
print(f"| core heap grown by the fill (index, eviction order, metadata) | {mib(heap)} | {heap / stored:,.0f} B per object |")
PY
grep -E "^ *(holding|used)" "$OUT/pool.txt" || true
