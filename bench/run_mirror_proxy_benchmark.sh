#!/usr/bin/env bash
# Seed 000's mirror benchmark, scaled to this machine: Goblin (goblin-store --mirror),
# Varnish 7.1 and nginx proxy_cache in front of the same local origin, the same corpus, the
# same request sequence and the same client (bench/mirror_proxy_benchmark), in one run.
#
#   bench/run_mirror_proxy_benchmark.sh [--no-build]
#
# For each cache in turn: a fresh, empty cache directory; the cache started inside a memory
# cgroup (MEM_LIMIT, page cache included, so no cache holds the corpus in RAM); every object
# prewarmed exactly once (PREWARM_CONCURRENCY parallel requests) and the origin's access log
# checked for exactly one request per object; a warmed key checked with a bodyless HEAD; the
# page cache dropped; PASSES shuffled passes measured (resources sampled meanwhile); the
# origin's log checked again: any request during the passes was a miss and invalidates the
# case (the script says so and exits 1). Then bench/analyze_mirror_proxy.py validates that
# the traces match and prints the seed's tables, with the ceilings measured in the same run
# (loopback TCP stream, and O_DIRECT 4 MiB reads of the largest corpus files at queue depths
# 1, 4 and 16 through the store's io_uring engine, the best depth counting). The manifest
# carries each object's XXH3-64; VERIFY=1 makes the client check every body against it.
#
# Environment (defaults): CACHES ("goblin varnish nginx"), CORPUS_GB (12), CORPUS_MIN_MB (64),
# CORPUS_MAX_MB (1024), CORPUS_DIR (var/bench/mirror-corpus, kept between runs), PASSES (3),
# PREWARM_CONCURRENCY (2), MEM_LIMIT (4G), GOBLIN_MEMORY (head pool, 256M), PORT (8080),
# ORIGIN_PORT (18080), OUT (var/bench/mirror-<time>), BUILD_DIR (build/release), VERIFY (0),
# GOBLIN_ARGS (extra goblin-store flags, e.g. "--read-ahead 8"; printed with the config).
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD_DIR=${BUILD_DIR:-$ROOT/build/release}
CACHES=${CACHES:-"goblin varnish nginx"}
CORPUS_GB=${CORPUS_GB:-12}
CORPUS_MIN_MB=${CORPUS_MIN_MB:-64}
CORPUS_MAX_MB=${CORPUS_MAX_MB:-1024}
CORPUS_DIR=${CORPUS_DIR:-$ROOT/var/bench/mirror-corpus}
PASSES=${PASSES:-3}
PREWARM_CONCURRENCY=${PREWARM_CONCURRENCY:-2}
MEM_LIMIT=${MEM_LIMIT:-4G}
GOBLIN_MEMORY=${GOBLIN_MEMORY:-256M}
GOBLIN_ARGS=${GOBLIN_ARGS:-}
VERIFY=${VERIFY:-0}
PORT=${PORT:-8080}
ORIGIN_PORT=${ORIGIN_PORT:-18080}
OUT=${OUT:-$ROOT/var/bench/mirror-$(date -u +%Y%m%d-%H%M%S)}
PY=/usr/bin/python3
BUILD=1
[ "${1:-}" = "--no-build" ] && BUILD=0

say() { echo "mirror-bench: $*" | tee -a "$OUT/run.log"; }
die() { say "ERROR: $*"; exit 1; }
mkdir -p "$OUT"
RUN=$(mktemp -d /tmp/goblin-mirror-bench.XXXXXX)
chmod 755 "$RUN"  # varnishd's and nginx's workers run as their own users
# shellcheck source=bench/cache_bench_lib.sh
. "$ROOT/bench/cache_bench_lib.sh"
PIDS=()
MONITOR=""
stop_all() {
  [ -n "$MONITOR" ] && kill -TERM "$MONITOR" 2>/dev/null && wait "$MONITOR" 2>/dev/null || true
  MONITOR=""
  stop_pids
}
trap 'stop_all; rm -rf "$RUN"' EXIT

if [ "$BUILD" = 1 ]; then
  cmake -S "$ROOT" -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
  cmake --build "$BUILD_DIR" --target goblin-store goblin-core goblin-gateway \
    mirror_proxy_benchmark >/dev/null
fi
CLIENT=$BUILD_DIR/bench/mirror_proxy_benchmark
[ -x "$CLIENT" ] || die "$CLIENT is missing (build it or drop --no-build)"
# shellcheck disable=SC2086
require_caches $CACHES

# ---- the corpus: files of seeded random sizes, served by the origin under /files/ ----
mkdir -p "$CORPUS_DIR"
MANIFEST=$OUT/manifest.txt
$PY - "$CORPUS_GB" "$CORPUS_MIN_MB" "$CORPUS_MAX_MB" > "$MANIFEST" <<'PY'
import random, sys
total, lo, hi = float(sys.argv[1]) * (1 << 30), int(sys.argv[2]), int(sys.argv[3])
rng = random.Random(0x243f6a8885a308d3)
acc, i = 0, 0
while acc < total:
    size = rng.randint(lo, hi) << 20
    size = min(size, max(lo << 20, int(total - acc)))
    print(f"/files/obj-{i:04d}.bin {size}")
    acc += size
    i += 1
PY
NOBJ=$(wc -l < "$MANIFEST")
CORPUS_BYTES=$(awk '{s += $2} END {printf "%.0f\n", s}' "$MANIFEST")
say "corpus: $NOBJ objects, $((CORPUS_BYTES >> 20)) MiB in $CORPUS_DIR"
while read -r path size; do
  f=$CORPUS_DIR/$(basename "$path")
  if [ ! -f "$f" ] || [ "$(stat -c %s "$f")" != "$size" ]; then
    # AES-CTR of zeros: incompressible, fast, reproducible from the name.
    # (head closes the pipe: openssl's SIGPIPE is expected, the size is checked instead)
    (set +o pipefail
     openssl enc -aes-128-ctr -nosalt -pass "pass:$(basename "$path")" -pbkdf2 < /dev/zero 2>/dev/null |
       head -c "$size" > "$f.tmp")
    [ "$(stat -c %s "$f.tmp")" = "$size" ] || die "could not generate $f"
    mv "$f.tmp" "$f"
    rm -f "$f.xxh3"
  fi
  # The body's XXH3-64 (kept next to the file), the manifest's third column.
  if [ ! -s "$f.xxh3" ]; then
    "$CLIENT" --hash "$f" | awk '{print $1}' > "$f.xxh3.tmp" && mv "$f.xxh3.tmp" "$f.xxh3"
  fi
  echo "$path $size $(cat "$f.xxh3")"
done < "$MANIFEST" > "$MANIFEST.new"
mv "$MANIFEST.new" "$MANIFEST"
NEED=$((CORPUS_BYTES / 1024 * 12 / 10))
mkdir -p "$ROOT/var/bench"  # the caches' directories go here (a fresh clone has no var/)
AVAIL=$(df -k --output=avail "$ROOT/var/bench" | tail -1)
[ "$AVAIL" -gt "$NEED" ] || die "the cache needs ~$((NEED >> 20)) GiB on $ROOT/var, $((AVAIL >> 20)) GiB free"

drop_caches() {
  sync
  if echo 3 > /proc/sys/vm/drop_caches 2>/dev/null; then
    say "page cache dropped (file pages now: $(awk '/^Cached:/{c=$2} /^Shmem:/{s=$2} END{print int((c-s)/1024)}' /proc/meminfo) MiB, besides shared memory)"
  else
    say "WARNING: cannot drop the page cache (not root?): tails may come from RAM"
  fi
}

# ---- the machine, versions and configurations ----
{
  echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "cpu: $(sed -n 's/^model name\s*: //p' /proc/cpuinfo | head -1) x $(nproc)"
  echo "memory: $(free -g | awk '/^Mem:/{print $2}') GiB; kernel $(uname -r)"
  echo "disk: $(df -h --output=source,size,avail "$ROOT/var/bench" | tail -1)"
  echo "goblin: $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)"
  command -v varnishd >/dev/null && echo "varnish: $(varnishd -V 2>&1 | head -1)"
  command -v nginx >/dev/null && echo "nginx: $(nginx -v 2>&1)"
  echo "corpus: $NOBJ objects, $((CORPUS_BYTES >> 20)) MiB, $CORPUS_MIN_MB-$CORPUS_MAX_MB MiB each"
  echo "limits: memory cgroup $MEM_LIMIT per cache; goblin head pool $GOBLIN_MEMORY"
  echo "passes: $PASSES; prewarm concurrency $PREWARM_CONCURRENCY; verify bodies: $VERIFY"
} | tee "$OUT/machine.txt"

# ---- interrupt placement (what pinning would do; the run does not change it) ----
"$ROOT/bench/pin_pci_irqs_to_numa.sh" --dry-run > "$OUT/irqs.txt" 2>&1 || true

# ---- ceilings, measured now ----
drop_caches
# The largest files, about 3 GiB of them, read at each depth.
BIG=$(sort -k2 -nr "$MANIFEST" | awk -v d="$CORPUS_DIR" '
  acc < 3 * 2^30 {n = split($1, p, "/"); print d "/" p[n]; acc += $2}')
# shellcheck disable=SC2086
"$CLIENT" --disk-ceiling $BIG --depths 1,4,16 | tee "$OUT/ceiling-disk.txt"
DISK_MBS=$(awk '/^ceiling: disk/ {print int($3)}' "$OUT/ceiling-disk.txt")
LOOP_MBS=$("$CLIENT" --loopback-ceiling 8G | awk '/loopback/ {print int($3)}')
[ -n "$DISK_MBS" ] && [ -n "$LOOP_MBS" ] || die "could not measure the ceilings"
say "ceilings: O_DIRECT disk read $DISK_MBS MB/s (best of depths 1/4/16), loopback TCP stream $LOOP_MBS MB/s"
echo "ceiling_disk_mbs=$DISK_MBS ceiling_loopback_mbs=$LOOP_MBS" > "$OUT/ceilings.txt"

# ---- memory cgroups (v1 or v2) ----
CG_KIND=none
if [ -d /sys/fs/cgroup/memory ] && [ -w /sys/fs/cgroup/memory ]; then
  CG_KIND=v1
elif [ -f /sys/fs/cgroup/cgroup.controllers ] && grep -qw memory /sys/fs/cgroup/cgroup.controllers; then
  CG_KIND=v2
fi
limit_bytes() { numfmt --from=iec "$MEM_LIMIT"; }
make_cgroup() {  # prints the cgroup.procs path, or nothing
  local dir
  case $CG_KIND in
    v1)
      dir=/sys/fs/cgroup/memory/goblin-bench-$1
      mkdir -p "$dir"
      echo "$(limit_bytes)" > "$dir/memory.limit_in_bytes"
      echo "$dir/cgroup.procs" ;;
    v2)
      echo +memory > /sys/fs/cgroup/cgroup.subtree_control 2>/dev/null || true
      dir=/sys/fs/cgroup/goblin-bench-$1
      mkdir -p "$dir"
      echo "$(limit_bytes)" > "$dir/memory.max"
      echo "$dir/cgroup.procs" ;;
  esac
}
in_cgroup() {  # in_cgroup PROCS_FILE cmd...: runs cmd (and its children) in the cgroup
  local procs=$1
  shift
  if [ -n "$procs" ]; then
    exec bash -c 'echo $$ > "$0" && exec "$@"' "$procs" "$@"
  else
    exec "$@"
  fi
}
[ "$CG_KIND" = none ] && say "WARNING: no writable memory cgroup: caches are not memory-limited"

origin_gets() { grep -c '^GET /files/' "$1" 2>/dev/null || true; }

INVALID=0
for cache in $CACHES; do
  say "==== $cache"
  CACHE_DIR=$ROOT/var/bench/mirror-cache-$cache
  rm -rf "$CACHE_DIR"
  mkdir -p "$CACHE_DIR"
  LOG=$OUT/origin-$cache.log
  : > "$LOG"
  $PY "$ROOT/tests/support/test_origin.py" --port "$ORIGIN_PORT" --files "$CORPUS_DIR" \
    --log "$LOG" > "$OUT/origin-$cache.out" 2>&1 &
  PIDS+=($!)
  wait_port "$ORIGIN_PORT" || die "the origin did not start"
  PROCS=$(make_cgroup "$cache")
  case $cache in
    goblin)
      (in_cgroup "$PROCS" "$BUILD_DIR/tools/goblin-store" --mirror "http://127.0.0.1:$ORIGIN_PORT" \
        --listen-address 127.0.0.1 --http-port "$PORT" --memory "$GOBLIN_MEMORY" --block 1M \
        --ram-head 1M --ssd-dir "$CACHE_DIR/tier" --socket-dir "$RUN" --no-memcache $GOBLIN_ARGS \
        > "$OUT/cache-$cache.log" 2>&1) &
      PIDS+=($!)
      echo "goblin-store --mirror http://127.0.0.1:$ORIGIN_PORT --http-port $PORT --memory $GOBLIN_MEMORY --block 1M --ram-head 1M --ssd-dir $CACHE_DIR/tier $GOBLIN_ARGS" > "$OUT/config-$cache.txt"
      ;;
    varnish)
      sed "s/@ORIGIN_PORT@/$ORIGIN_PORT/" "$ROOT/bench/mirror/varnish.vcl.in" > "$RUN/varnish.vcl"
      STORE_BYTES=$((CORPUS_BYTES / 10 * 12))
      (in_cgroup "$PROCS" varnishd -F -n "$RUN/varnish" -a "127.0.0.1:$PORT" -f "$RUN/varnish.vcl" \
        -s "file,$CACHE_DIR/varnish.bin,$STORE_BYTES,,sequential" \
        > "$OUT/cache-$cache.log" 2>&1) &
      PIDS+=($!)
      { echo "varnishd -F -a 127.0.0.1:$PORT -f varnish.vcl -s file,$CACHE_DIR/varnish.bin,$STORE_BYTES,,sequential"; cat "$RUN/varnish.vcl"; } > "$OUT/config-$cache.txt"
      ;;
    nginx)
      mkdir -p "$RUN/client_body" "$CACHE_DIR/tmp"
      sed -e "s|@PORT@|$PORT|; s|@ORIGIN_PORT@|$ORIGIN_PORT|; s|@CACHE_DIR@|$CACHE_DIR|g" \
          -e "s|@MAX_SIZE@|$((CORPUS_BYTES / 10 * 12))|; s|@RUN@|$RUN|g" \
          "$ROOT/bench/mirror/nginx.conf.in" > "$RUN/nginx.conf"
      (in_cgroup "$PROCS" nginx -c "$RUN/nginx.conf" -e "$RUN/nginx-error.log" \
        > "$OUT/cache-$cache.log" 2>&1) &
      PIDS+=($!)
      cp "$RUN/nginx.conf" "$OUT/config-$cache.txt"
      ;;
  esac
  wait_port "$PORT" || { cat "$OUT/cache-$cache.log"; die "$cache did not start"; }
  sed 's/^/    /' "$OUT/config-$cache.txt" >> "$OUT/run.log"

  # Prewarm: every object once.
  t0=$(date +%s.%N)
  awk -v p="$PORT" '{print "http://127.0.0.1:" p $1}' "$MANIFEST" |
    xargs -P "$PREWARM_CONCURRENCY" -n 1 curl -sf -o /dev/null --max-time 600 ||
    die "$cache: prewarm failed"
  # A cache may still be writing the last objects after their responses ended.
  sleep 2
  WARM=$(origin_gets "$LOG")
  say "$cache: prewarmed $NOBJ objects in $(echo "$(date +%s.%N) - $t0" | bc) s; origin saw $WARM GETs"
  [ "$WARM" = "$NOBJ" ] || die "$cache: the origin saw $WARM requests for $NOBJ objects while prewarming"

  if [ "$cache" = goblin ]; then  # where the core's threads, pool and rings live
    CORE_PID=$(pgrep -f "goblin-core --listen-unix $RUN/" | head -1 || true)
    [ -n "$CORE_PID" ] && "$ROOT/bench/audit_process_numa.sh" "$CORE_PID" > "$OUT/numa-audit-goblin.txt" 2>&1 || true
  fi
  drop_caches
  # The cache's processes: its cgroup's, else the children of the launched process.
  if [ -n "$PROCS" ]; then
    CACHE_PIDS=$(paste -sd, "$PROCS")
  else
    CACHE_PIDS=$(pgrep -d, -P "${PIDS[-1]}" || true)
    CACHE_PIDS=${PIDS[-1]}${CACHE_PIDS:+,$CACHE_PIDS}
  fi
  $PY "$ROOT/bench/monitor_benchmark_resources.py" --pids "$CACHE_PIDS" --interval 1 \
    --out "$OUT/resources-$cache.csv" > /dev/null 2>&1 &
  MONITOR=$!
  VERIFY_FLAG=()
  [ "$VERIFY" = 1 ] && VERIFY_FLAG=(--verify)
  if ! "$CLIENT" --target "http://127.0.0.1:$PORT" --manifest "$MANIFEST" --passes "$PASSES" "${VERIFY_FLAG[@]}" \
      --label "$cache" --trace "$OUT/trace-$cache.csv" --head "$(head -1 "$MANIFEST" | awk '{print $1}')" \
      | tee "$OUT/client-$cache.txt"; then
    say "$cache: the client reported errors"
    INVALID=1
  fi
  kill -TERM "$MONITOR" 2>/dev/null || true
  wait "$MONITOR" 2>/dev/null || true
  MONITOR=""
  AFTER=$(origin_gets "$LOG")
  if [ "$AFTER" != "$WARM" ]; then
    say "INVALID: $cache: the origin saw $((AFTER - WARM)) requests during the measured passes (misses)"
    INVALID=1
  else
    say "$cache: no origin request during the measured passes"
  fi
  stop_all
  rm -rf "$CACHE_DIR"
  [ "$CG_KIND" = v1 ] && rmdir "/sys/fs/cgroup/memory/goblin-bench-$cache" 2>/dev/null || true
  [ "$CG_KIND" = v2 ] && rmdir "/sys/fs/cgroup/goblin-bench-$cache" 2>/dev/null || true
done

traces=()
for c in $CACHES; do [ -f "$OUT/trace-$c.csv" ] && traces+=("$OUT/trace-$c.csv"); done
$PY "$ROOT/bench/analyze_mirror_proxy.py" --baseline varnish --ceiling-file "$OUT/ceilings.txt" \
  "${traces[@]}" | tee "$OUT/results.md"
say "results: $OUT/results.md"
[ "$INVALID" = 0 ] || { say "the run is INVALID (see above)"; exit 1; }
