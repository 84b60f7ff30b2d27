# Shared by the benchmark scripts that start caches and servers (sourced, not run):
# stop_pids, wait_port, require_caches, start_cache, mix_manifest, tree_cpu. The caller defines PIDS=() (processes
# it started), RUN (its scratch directory) and die().

# Stops every process in PIDS (TERM, up to 10 s, then KILL), and any varnishd child left
# behind under $RUN.
stop_pids() {
  local p
  for p in "${PIDS[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  for p in "${PIDS[@]}"; do
    for _ in $(seq 100); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$p" 2>/dev/null || true
    wait "$p" 2>/dev/null || true
  done
  PIDS=()
  pkill -KILL -f "varnishd.*$RUN" 2>/dev/null || true
}

# Waits up to 30 s for a TCP listener on 127.0.0.1:PORT.
wait_port() {
  for _ in $(seq 300); do
    (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0
    sleep 0.1
  done
  return 1
}

# Dies unless every cache named is known and installed.
require_caches() {
  local c
  for c in "$@"; do
    case $c in
      goblin) ;;
      varnish) command -v varnishd >/dev/null || die "varnishd not found (apt-get install varnish)" ;;
      nginx) command -v nginx >/dev/null || die "nginx not found (apt-get install nginx-light)" ;;
      *) die "unknown cache $c" ;;
    esac
  done
}

# Starts CACHE (goblin, varnish or nginx) on 127.0.0.1:$PORT in front of the origin on
# $ORIGIN_PORT, its storage under CACHE_DIR (STORE_BYTES for Varnish's file storage and
# nginx's max_size), its output in LOG; goblin-store gets --memory $GOBLIN_MEMORY and
# $GOBLIN_ARGS. Sets CACHE_PID (also added to PIDS). Uses ROOT, BUILD_DIR and RUN.
start_cache() {  # cache cache_dir store_bytes log
  local cache=$1 dir=$2 bytes=$3 log=$4
  case $cache in
    goblin)
      # shellcheck disable=SC2086
      "$BUILD_DIR/tools/goblin-store" --mirror "http://127.0.0.1:$ORIGIN_PORT" \
        --listen-address 127.0.0.1 --http-port "$PORT" --memory "$GOBLIN_MEMORY" \
        --ssd-dir "$dir/tier" --socket-dir "$RUN" --no-memcache $GOBLIN_ARGS > "$log" 2>&1 &
      ;;
    varnish)
      sed "s/@ORIGIN_PORT@/$ORIGIN_PORT/" "$ROOT/bench/mirror/varnish.vcl.in" > "$RUN/varnish.vcl"
      varnishd -F -n "$RUN/varnish" -a "127.0.0.1:$PORT" -f "$RUN/varnish.vcl" \
        -s "file,$dir/varnish.bin,$bytes,4k" > "$log" 2>&1 &
      ;;
    nginx)
      mkdir -p "$RUN/client_body" "$dir/tmp"
      sed -e "s|@PORT@|$PORT|; s|@ORIGIN_PORT@|$ORIGIN_PORT|; s|@CACHE_DIR@|$dir|g" \
          -e "s|@MAX_SIZE@|$bytes|; s|@RUN@|$RUN|g" \
          "$ROOT/bench/mirror/nginx.conf.in" > "$RUN/nginx.conf"
      nginx -c "$RUN/nginx.conf" -e "$RUN/nginx-error.log" > "$log" 2>&1 &
      ;;
    *) die "unknown cache $cache" ;;
  esac
  CACHE_PID=$!
  PIDS+=("$CACHE_PID")
}

# The request mixes of the concurrency benchmark, as the origin's /gen/SIZE/NAME objects
# (seeded pattern, max-age=3600: no corpus on disk), one "PATH SIZE" per line, the same
# every run: "small" (SMALL objects, web-like: log-normal around 26 KiB, 64 B to 64 MiB) or
# "large" (LARGE objects of 16-256 MiB).
mix_manifest() {  # mix small large
  /usr/bin/python3 - "$1" "$2" "$3" <<'PY'
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

# CPU ticks (user + system) of the processes and their threads, and of their children's trees
# (divide by `getconf CLK_TCK` for seconds).
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
