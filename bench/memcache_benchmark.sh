#!/usr/bin/env bash
# The memcache benchmark (issue #23), in the seed system's form: memcached 1.6 (Debian's),
# memcached + extstore and goblin-store's memcache front on this machine, the same value
# sets and the same request sequence (bench/memcache_load: CONNECTIONS connections, closed
# loop, every reply's length checked), in turns:
#   large-mem:  a 256 KiB - 8 MiB mix (generalized Pareto, mean ~1 MiB), LARGE_COUNT
#               values, a set that fits memory: memcached -m big enough for it; goblin with
#               --memory GOBLIN_MEM_LARGE (heads in RAM, the rest on its disk tier).
#   large-disk: the same mix, DISK_COUNT values, larger than the memory given: memcached
#               + extstore (-m EXT_MEM, ext_path on the disk under test) vs goblin with
#               --memory GOBLIN_MEM_DISK (EXT_MEM unless given; each may list several
#               sizes, a row each; a blank one: no such rows) and GOBLIN_DISK_IO_BUFFERS
#               I/O buffers (unset: the core's default).
#   small:      SMALL_COUNT values of 100 B - 2 KB: memcached vs goblin.
#   large-rate: the large-mem set at a fixed offered load (an open loop of RATE gets/s:
#               latency at the same load, not at saturation): memcached with all of it in
#               RAM vs goblin with --memory GOBLIN_MEM_RATE and GOBLIN_RATE_IO_BUFFERS I/O
#               buffers (the least RAM that serves it).
#   large-link: the same two servers with clients behind links: each of the CONNECTIONS
#               takes its replies no faster than CLIENT_GBPS Gbit/s (closed loop), as the
#               seed system's clients on a network, where a value's time is mostly its
#               transfer and a head in RAM covers the tail's disk read.
# For each: fill time, then gets for SECONDS: gets/s, Gbit/s of values, p50/p99/p99.9 of
# the complete reply and of its first line; server memory after the run (proportional set
# size: memcached; goblin's launcher, core and gateway, their shared pools counted once); disk bytes (extstore file, goblin's tier).
#   bench/memcache_benchmark.sh [--no-build]
# Environment (defaults): ROWS ("large-mem large-disk small"), CONNECTIONS (16), SECONDS
# (10), LARGE_COUNT (1000: ~1 GiB), DISK_COUNT (3000: ~3 GiB), SMALL_COUNT (100000),
# GOBLIN_MEM_LARGE (256M), EXT_MEM (512M), RATE (400), GOBLIN_MEM_RATE (128M),
# GOBLIN_RATE_IO_BUFFERS (8), CLIENT_GBPS (0.5), SERVER_MEM_LIMIT (a memory cgroup limit
# for each server and its page cache, e.g. 1G: without it extstore's file is read from this
# machine's page cache, not its disk; unset: none), EXT_OPTS (memcached -o for extstore, ext_path added;
# "ext_wbuf_size=16,ext_threads=2"), EXT_FILL_RATE (MiB/s the extstore row's fill is held
# to, 0: unthrottled; 0), DIR (/var/tmp/goblin-mcbench: emptied), HDD (0; 1: the extstore
# file and goblin's disk tier on a modelled 7200 rpm disk, bench/hdd_model's hdd_fuse over
# /dev/shm, for the seed system's "same HDD" on a machine without one; HDD_ARGS: its
# options, e.g. "--mb-s=150"; HDD_READ_AHEAD_KB (1024): the mount's read-ahead; each row's
# disk requests, seeks and busy share are recorded),
# BUILD_DIR (build/release), OUT (var/bench/memcache-<time>). Results: OUT/results.md.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD_DIR=${BUILD_DIR:-$ROOT/build/release}
ROWS=${ROWS:-"large-mem large-disk small"}
CONNECTIONS=${CONNECTIONS:-16}
SECONDS_RUN=${SECONDS:-10}
LARGE_COUNT=${LARGE_COUNT:-1000}
DISK_COUNT=${DISK_COUNT:-3000}
SMALL_COUNT=${SMALL_COUNT:-100000}
GOBLIN_MEM_LARGE=${GOBLIN_MEM_LARGE:-256M}
EXT_MEM=${EXT_MEM:-512M}
RATE=${RATE:-400}
GOBLIN_MEM_RATE=${GOBLIN_MEM_RATE:-128M}
GOBLIN_RATE_IO_BUFFERS=${GOBLIN_RATE_IO_BUFFERS:-8}
EXT_OPTS=${EXT_OPTS:-ext_wbuf_size=16,ext_threads=2}
GOBLIN_MEM_DISK=${GOBLIN_MEM_DISK:-$EXT_MEM}
GOBLIN_DISK_IO_BUFFERS=${GOBLIN_DISK_IO_BUFFERS:-}
EXT_FILL_RATE=${EXT_FILL_RATE:-0}
CLIENT_GBPS=${CLIENT_GBPS:-0.5}
SERVER_MEM_LIMIT=${SERVER_MEM_LIMIT:-}
GOBLIN_EXTRA=()  # goblin-store arguments for the row being run
GET_EXTRA=()     # memcache_load get arguments for the row being run
DIR=${DIR:-/var/tmp/goblin-mcbench}
HDD=${HDD:-0}
HDD_ARGS=${HDD_ARGS:-}
HDD_READ_AHEAD_KB=${HDD_READ_AHEAD_KB:-1024}
DISK_DIR=$DIR  # (the extstore file and goblin's tier: on the modelled disk with HDD=1)
HDD_MOUNT=$DIR-hdd
HDD_BACKING=/dev/shm/$(basename "$DIR")-hdd
HDD_PID=""
OUT=${OUT:-$ROOT/var/bench/memcache-$(date -u +%Y%m%d-%H%M%S)}
PORT=${PORT:-21411}
LOAD=$BUILD_DIR/bench/memcache_load
[ "${1:-}" = "--no-build" ] ||
  cmake --build "$BUILD_DIR" --target goblin-store goblin-core goblin-gateway memcache_load >/dev/null
mkdir -p "$OUT"
SERVER_PID=""
stop_server() {
  if [ -n "$SERVER_PID" ]; then
    kill -TERM "$SERVER_PID" 2>/dev/null || true
    wait "$SERVER_PID" 2>/dev/null || true
  fi
  SERVER_PID=""
  if [ -n "${CGROUP:-}" ] && [ -s "$CGROUP/cgroup.procs" ]; then  # (nothing left behind)
    xargs -r kill -KILL < "$CGROUP/cgroup.procs" 2>/dev/null || true
    sleep 0.5
  fi
}
cleanup() {
  stop_server
  rm -rf "$DIR"
  if [ -n "$HDD_PID" ]; then
    fusermount3 -u "$HDD_MOUNT" 2>/dev/null || umount -l "$HDD_MOUNT" 2>/dev/null || true
    wait "$HDD_PID" 2>/dev/null || true
    rm -rf "$HDD_BACKING"
    rmdir "$HDD_MOUNT" 2>/dev/null || true
  fi
  if [ -n "$CGROUP" ]; then rmdir "$CGROUP" 2>/dev/null || true; fi
}
trap cleanup EXIT

if [ "$HDD" = 1 ]; then
  mkdir -p "$HDD_MOUNT" "$HDD_BACKING"
  # shellcheck disable=SC2086  # (HDD_ARGS: options, split)
  "$BUILD_DIR/bench/hdd_model/hdd_fuse" $HDD_ARGS --stats="$OUT/hdd.stats" "$HDD_BACKING" \
    "$HDD_MOUNT" -f > "$OUT/hdd_fuse.log" 2>&1 &
  HDD_PID=$!
  for _ in $(seq 100); do
    if grep -q " $HDD_MOUNT fuse" /proc/mounts; then break; fi
    sleep 0.05
  done
  grep -q " $HDD_MOUNT fuse" /proc/mounts || { echo "hdd_fuse did not mount" >&2; exit 1; }
  # A large buffered read goes to a real disk as one request (up to its max_sectors_kb, 1280
  # on a SATA disk); a FUSE mount's reads stop at its 128 KiB read-ahead: raised to 1 MiB.
  echo "$HDD_READ_AHEAD_KB" > "/sys/class/bdi/$(mountpoint -d "$HDD_MOUNT")/read_ahead_kb"
  DISK_DIR=$HDD_MOUNT/disk
fi

{
  echo "date: $(date -u +%FT%TZ)"
  echo "goblin: $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo '?'); memcached $(memcached -V | awk '{print $2}')"
  echo "cpu: $(sed -n 's/^model name\s*: //p' /proc/cpuinfo | head -1) x $(nproc)"
  echo "disk: $(df -h "$(dirname "$DIR")" | awk 'NR==2 {print $1, $2}')"
  [ "$HDD" != 1 ] || echo "modelled disk: hdd_fuse $HDD_ARGS (defaults: 7200 rpm, 200 MB/s, seeks 0.6-14 ms), read-ahead $HDD_READ_AHEAD_KB KiB"
  echo "connections $CONNECTIONS, $SECONDS_RUN s per run"
} | tee "$OUT/machine.txt"

rss_kib() {  # PID... -> the sum of their proportional set sizes (shared memory, such as
  # goblin's pools mapped by both the core and the gateway, counted once)
  local sum=0 p v
  for p in "$@"; do
    v=$(awk '/^Pss:/ {print $2}' "/proc/$p/smaps_rollup" 2>/dev/null || echo 0)
    sum=$((sum + ${v:-0}))
  done
  echo "$sum"
}

wait_port() {
  for _ in $(seq 200); do
    if (exec 3<>"/dev/tcp/127.0.0.1/$PORT") 2>/dev/null; then return 0; fi
    sleep 0.05
  done
  echo "nothing listens on $PORT" >&2
  return 1
}

# A memory cgroup holding the server and what it starts, limited to SERVER_MEM_LIMIT (its
# page cache counts: memcached's extstore reads its file through it, goblin reads O_DIRECT).
CGROUP=""
make_cgroup() {
  CGROUP=""
  [ -n "$SERVER_MEM_LIMIT" ] || return 0
  local base
  if [ -w /sys/fs/cgroup/memory ]; then
    base=/sys/fs/cgroup/memory/goblin-mcbench
    mkdir -p "$base"
    echo "$SERVER_MEM_LIMIT" > "$base/memory.limit_in_bytes"
  elif grep -qw memory /sys/fs/cgroup/cgroup.controllers 2>/dev/null; then
    base=/sys/fs/cgroup/goblin-mcbench
    mkdir -p "$base"
    echo "$SERVER_MEM_LIMIT" > "$base/memory.max"
  else
    echo "no memory cgroup to limit the servers with" >&2
    return 1
  fi
  CGROUP=$base
}
# The prefix that runs a command inside CGROUP (when there is one), as the same process (so
# $! is the server's pid).
in_cgroup() {
  IN_CGROUP=()
  # shellcheck disable=SC2016  # ($$ and $@ are the inner shell's)
  [ -z "$CGROUP" ] || IN_CGROUP=(sh -c 'echo $$ > "$0/cgroup.procs" && exec "$@"' "$CGROUP")
}

start_server() {  # kind mem
  local kind=$1 mem=$2
  rm -rf "$DIR" "$DISK_DIR"
  mkdir -p "$DIR" "$DISK_DIR"
  make_cgroup
  in_cgroup
  sync
  echo 3 > /proc/sys/vm/drop_caches 2>/dev/null || true  # (nobody starts with a warm cache)
  local user=()
  [ "$(id -u)" = 0 ] && user=(-u root)
  case $kind in
    memcached)
      ${IN_CGROUP[@]+"${IN_CGROUP[@]}"} memcached "${user[@]}" -l 127.0.0.1 -p "$PORT" -U 0 -t 2 -c 4096 -m "$mem" -I 16m \
        > "$OUT/server-$kind.log" 2>&1 &
      SERVER_PID=$! ;;
    extstore)
      ${IN_CGROUP[@]+"${IN_CGROUP[@]}"} memcached "${user[@]}" -l 127.0.0.1 -p "$PORT" -U 0 -t 2 -c 4096 -m "$mem" -I 16m \
        -o "ext_path=$DISK_DIR/extstore:$((DISK_COUNT * 2))m,$EXT_OPTS" \
        > "$OUT/server-$kind.log" 2>&1 &
      SERVER_PID=$! ;;
    goblin)
      ${IN_CGROUP[@]+"${IN_CGROUP[@]}"} "$BUILD_DIR/tools/goblin-store" --mirror http://127.0.0.1:1 --http-port $((PORT + 1)) \
        --memcache-port "$PORT" --memory "$mem" --block 1M --ram-head 1M --hugepages off \
        --ssd-dir "$DISK_DIR/tier" --socket-dir "$DIR" ${GOBLIN_EXTRA[@]+"${GOBLIN_EXTRA[@]}"} \
        > "$OUT/server-$kind.log" 2>&1 &
      SERVER_PID=$! ;;
  esac
  wait_port
}

server_pids() {  # the processes whose memory counts
  if [ -z "$SERVER_PID" ]; then return; fi
  echo "$SERVER_PID"
  pgrep -P "$SERVER_PID" || true
}

disk_bytes() {
  if [ "$DISK_DIR" = "$DIR" ]; then du -sb "$DIR"; else du -sbc "$DIR" "$DISK_DIR"; fi 2>/dev/null |
    awk 'END {print $1}'
}
hdd_counters() {  # the modelled disk's counters so far (zeros without one)
  local f=$OUT/hdd.stats
  if [ "$HDD" = 1 ] && [ -s "$f" ]; then cat "$f"; else echo "requests 0 seeks 0 read_bytes 0 written_bytes 0 busy_ms 0 elapsed_ms 0"; fi
}

echo "| row | server | memory given | fill s | gets/s | misses | Gbit/s | p50 us | p99 us | p99.9 us | first line p50/p99 us | memory (PSS) MiB | disk MiB |" > "$OUT/results.md"
echo "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|" >> "$OUT/results.md"

run_row() {  # row kind mem -- load args...
  local row=$1 kind=$2 mem=$3
  shift 4
  start_server "$kind" "$mem"
  local fill get
  # (extstore writes values to disk behind the fill: a fill faster than that loses them, so
  # its rows are filled by one connection, at EXT_FILL_RATE MiB/s when given)
  local fill_conns=$CONNECTIONS fill_rate=0
  if [ "$kind" = extstore ]; then
    fill_conns=1
    fill_rate=$EXT_FILL_RATE
  fi
  fill=$("$LOAD" fill --port "$PORT" --connections "$fill_conns" --fill-rate "$fill_rate" \
    --label "$kind" "$@")
  echo "$row $fill" | tee -a "$OUT/run.log"
  local h0=""
  [ "$HDD" != 1 ] || { sleep 0.3; h0=$(hdd_counters); }
  get=$("$LOAD" get --port "$PORT" --connections "$CONNECTIONS" --seconds "$SECONDS_RUN" \
    --label "$kind" ${GET_EXTRA[@]+"${GET_EXTRA[@]}"} "$@")
  echo "$row $get" | tee -a "$OUT/run.log"
  if [ "$HDD" = 1 ]; then  # the modelled disk during the gets
    sleep 0.3
    { echo "$h0"; hdd_counters; } | awk -v row="$row" -v kind="$kind" -v mem="$mem" '
      { for (i = 1; i < NF; i += 2) v[NR, $i] = $(i + 1) }
      END {
        d = v[2, "elapsed_ms"] - v[1, "elapsed_ms"]
        busy = d > 0 ? 100 * (v[2, "busy_ms"] - v[1, "busy_ms"]) / d : 0
        printf "| %s | %s | %s | %d | %d | %.0f | %.0f | %.0f%% |\n", row, kind, mem,
          v[2, "requests"] - v[1, "requests"], v[2, "seeks"] - v[1, "seeks"],
          (v[2, "read_bytes"] - v[1, "read_bytes"]) / 1048576,
          (v[2, "written_bytes"] - v[1, "written_bytes"]) / 1048576, busy
      }' >> "$OUT/hdd.md"
  fi
  local pids rss
  mapfile -t pids < <(server_pids)
  rss=$(rss_kib "${pids[@]}")
  local disk; disk=$(disk_bytes)
  local fill_s gets misses gbit p50 p99 p999 f50 f99
  fill_s=$(sed -n 's/.* in \([0-9.]*\) s .*/\1/p' <<<"$fill")
  gets=$(sed -n 's/.* gets (\([0-9]*\)\/s).*/\1/p' <<<"$get")
  misses=$(sed -n 's/.*\/s), \([0-9]*\) misses, \([0-9]*\) errors.*/\1 + \2 errors/p' <<<"$get")
  gbit=$(sed -n 's/.*, \([0-9.]*\) Gbit\/s.*/\1/p' <<<"$get")
  p50=$(sed -n 's/.*complete p50 \([0-9]*\) us.*/\1/p' <<<"$get")
  p99=$(sed -n 's/.*complete p50 [0-9]* us p99 \([0-9]*\) us.*/\1/p' <<<"$get")
  p999=$(sed -n 's/.*p99.9 \([0-9]*\) us.*/\1/p' <<<"$get")
  f50=$(sed -n 's/.*first line p50 \([0-9]*\) us.*/\1/p' <<<"$get")
  f99=$(sed -n 's/.*first line p50 [0-9]* us p99 \([0-9]*\) us.*/\1/p' <<<"$get")
  echo "| $row | $kind | $mem | $fill_s | $gets | $misses | $gbit | $p50 | $p99 | $p999 | $f50/$f99 | $((rss / 1024)) | $((disk / 1048576)) |" >> "$OUT/results.md"
  stop_server
}

if [ "$HDD" = 1 ]; then
  echo "| row | server | memory given | disk requests | seeks | read MiB | written MiB | busy |" > "$OUT/hdd.md"
  echo "|---|---|---|---:|---:|---:|---:|---:|" >> "$OUT/hdd.md"
fi
LARGE=(--dist pareto --min 262144 --max 8388608 --mean 1048576)
for row in $ROWS; do
  case $row in
    large-mem)
      run_row "$row" memcached "$((LARGE_COUNT * 2))" -- --count "$LARGE_COUNT" --seed 11 "${LARGE[@]}"
      for mem in $GOBLIN_MEM_LARGE; do
        run_row "$row" goblin "$mem" -- --count "$LARGE_COUNT" --seed 11 "${LARGE[@]}"
      done ;;
    large-disk)
      for mem in $EXT_MEM; do
        run_row "$row" extstore "${mem%M}" -- --count "$DISK_COUNT" --seed 12 "${LARGE[@]}"
      done
      [ -z "$GOBLIN_DISK_IO_BUFFERS" ] || GOBLIN_EXTRA=("--core-arg=--io-buffers=$GOBLIN_DISK_IO_BUFFERS")
      for mem in $GOBLIN_MEM_DISK; do
        run_row "$row" goblin "$mem" -- --count "$DISK_COUNT" --seed 12 "${LARGE[@]}"
      done
      GOBLIN_EXTRA=() ;;
    large-rate)
      GET_EXTRA=(--rate "$RATE")
      run_row "$row" memcached "$((LARGE_COUNT * 2))" -- --count "$LARGE_COUNT" --seed 11 "${LARGE[@]}"
      GOBLIN_EXTRA=("--core-arg=--io-buffers=$GOBLIN_RATE_IO_BUFFERS")
      run_row "$row" goblin "$GOBLIN_MEM_RATE" -- --count "$LARGE_COUNT" --seed 11 "${LARGE[@]}"
      GOBLIN_EXTRA=()
      GET_EXTRA=() ;;
    large-link)
      GET_EXTRA=(--client-gbps "$CLIENT_GBPS")
      run_row "$row" memcached "$((LARGE_COUNT * 2))" -- --count "$LARGE_COUNT" --seed 11 "${LARGE[@]}"
      GOBLIN_EXTRA=("--core-arg=--io-buffers=$GOBLIN_RATE_IO_BUFFERS")
      run_row "$row" goblin "$GOBLIN_MEM_RATE" -- --count "$LARGE_COUNT" --seed 11 "${LARGE[@]}"
      GOBLIN_EXTRA=()
      GET_EXTRA=() ;;
    small)
      run_row "$row" memcached 1024 -- --count "$SMALL_COUNT" --seed 13 --dist uniform --min 100 --max 2000
      run_row "$row" goblin 256M -- --count "$SMALL_COUNT" --seed 13 --dist uniform --min 100 --max 2000 ;;
  esac
done
cat "$OUT/results.md"
[ "$HDD" != 1 ] || { echo; echo "The modelled disk during each row's gets:"; cat "$OUT/hdd.md"; }
