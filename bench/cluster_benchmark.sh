#!/usr/bin/env bash
# The fabric benchmark (issue #26): one goblin-gateway routing by etcd (--core etcd://) in
# front of 1, 2 and 3 goblin-cores (each --cores 1 with its own tier, registered with --etcd,
# reached over UCX tcp on loopback: ?ring=off, as from another host), and as the one-host
# references the same gateway on one core through its ring socket, named (--core unix:) and
# found in etcd (a core on the gateway's host is reached by its ring socket). The concurrency benchmark's small mix
# (bench/cache_bench_lib.sh mix_manifest, /gen objects of the test origin), prewarmed once
# per configuration (the origin's log must show one request per object, and none after),
# then bench/http_load at each connection count for ROUNDS turns of TURN_SECONDS.
#
#   bench/cluster_benchmark.sh [--no-build]
#
# Results: OUT/results.md (Gbit/s, requests/s, p50/p99 completion, server CPU s per GB: the
# cores and the gateway together). On one host the cores, the gateway, etcd and the client
# share the CPUs: more cores add work here, not capacity; the table shows what the fabric's
# routing and the UCX link cost, and that every core serves its share.
# NETNS=1 puts each core of the N-core rows in a network namespace of its own, on a veth
# pair to a bridge in the gateway's namespace (10.77.0.1/24; core i at 10.77.0.(10+i), MTU
# 1500): the fabric as separate hosts would see it, but for the CPUs (root; the namespaces
# and the bridge are removed at exit).
# Environment (defaults): CORES_LIST ("1 2 3"), CONNS ("16 64"), ROUNDS (3), TURN_SECONDS (3),
# SMALL_OBJECTS (2000), MEMORY (512M per core), THREADS (client loops, 2), PORT (8090),
# ORIGIN_PORT (18190), UCX_PORT (17100), NETNS (0), REFERENCES ("ring local"),
# OUT (var/bench/cluster-<time>), BUILD_DIR.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD_DIR=${BUILD_DIR:-$ROOT/build/release}
CORES_LIST=${CORES_LIST:-"1 2 3"}
CONNS=${CONNS:-"16 64"}
ROUNDS=${ROUNDS:-3}
TURN_SECONDS=${TURN_SECONDS:-3}
SMALL_OBJECTS=${SMALL_OBJECTS:-2000}
MEMORY=${MEMORY:-512M}
THREADS=${THREADS:-2}
PORT=${PORT:-8090}
ORIGIN_PORT=${ORIGIN_PORT:-18190}
UCX_PORT=${UCX_PORT:-17100}
NETNS=${NETNS:-0}
REFERENCES=${REFERENCES-"ring local"}  # the one-host rows ("" leaves them out)
OUT=${OUT:-$ROOT/var/bench/cluster-$(date +%Y%m%d-%H%M%S)}
PY=/usr/bin/python3
RUN=$OUT/run
PIDS=()
mkdir -p "$OUT" "$RUN"
say() { echo "[$(date +%H:%M:%S)] $*" | tee -a "$OUT/run.log"; }
die() { say "error: $*"; exit 1; }
# shellcheck source=bench/cache_bench_lib.sh
source "$ROOT/bench/cache_bench_lib.sh"
# Namespaces (NETNS=1): a bridge here, one namespace per core on a veth pair to it.
BRIDGE=gbcbr0
NS_PREFIX=gbcb
netns_down() {
  local i
  for i in 0 1 2 3 4 5 6 7; do ip netns del "$NS_PREFIX$i" 2>/dev/null || true; done
  ip link del "$BRIDGE" 2>/dev/null || true
}
netns_up() {  # count
  netns_down
  ip link add "$BRIDGE" type bridge
  ip addr add 10.77.0.1/24 dev "$BRIDGE"
  ip link set "$BRIDGE" up
  local i
  for i in $(seq 0 $(($1 - 1))); do
    ip netns add "$NS_PREFIX$i"
    ip link add "gbcv$i" type veth peer name eth0 netns "$NS_PREFIX$i"
    ip link set "gbcv$i" master "$BRIDGE" up
    ip -n "$NS_PREFIX$i" addr add "10.77.0.$((10 + i))/24" dev eth0
    ip -n "$NS_PREFIX$i" link set eth0 up
    ip -n "$NS_PREFIX$i" link set lo up
  done
}
cleanup() {
  stop_pids
  if [ "$NETNS" = 1 ]; then netns_down; fi
}
trap cleanup EXIT
command -v etcd >/dev/null || die "etcd not found (apt-get install etcd-server)"
if [ "${1:-}" != "--no-build" ]; then
  cmake --build "$BUILD_DIR" --target goblin-core goblin-gateway http_load rendezvous_movement >/dev/null
fi
CLIENT=$BUILD_DIR/bench/http_load
export UCX_TLS=tcp UCX_NET_DEVICES=lo UCX_WARN_UNUSED_ENV_VARS=n

{
  echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "cpu: $(sed -n 's/^model name\s*: //p' /proc/cpuinfo | head -1) x $(nproc)"
  echo "goblin: $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown); etcd $(etcd --version | head -1)"
  echo "cores: $CORES_LIST; connections: $CONNS; $ROUNDS rounds of ${TURN_SECONDS} s; client: http_load, $THREADS loops"
  if [ "$NETNS" = 1 ]; then echo "N-core rows: each core in a network namespace (veth + bridge, MTU 1500)"; fi
} | tee "$OUT/machine.txt"

EPORT=$((ORIGIN_PORT + 50))
ETCD_URLS="http://127.0.0.1:$EPORT"
if [ "$NETNS" = 1 ]; then
  max=0
  for n in $CORES_LIST; do [ "$n" -gt "$max" ] && max=$n; done
  netns_up "$max"
  ETCD_URLS="$ETCD_URLS,http://10.77.0.1:$EPORT"  # (the cores reach it over the bridge)
fi
etcd --name b --data-dir "$RUN/etcd" --listen-client-urls "$ETCD_URLS" \
  --advertise-client-urls "http://127.0.0.1:$EPORT" --listen-peer-urls "http://127.0.0.1:$((EPORT + 1))" \
  --initial-advertise-peer-urls "http://127.0.0.1:$((EPORT + 1))" \
  --initial-cluster "b=http://127.0.0.1:$((EPORT + 1))" --log-level warn > "$OUT/etcd.log" 2>&1 &
PIDS+=($!)
wait_port "$EPORT" || die "etcd did not start"

MANIFEST=$OUT/manifest.txt
mix_manifest small "$SMALL_OBJECTS" 0 > "$MANIFEST"
NOBJ=$(wc -l < "$MANIFEST")
say "small mix: $NOBJ objects, $(($(awk '{s += $2} END {printf "%.0f\n", s}' "$MANIFEST") >> 20)) MiB"
origin_gets() { grep -c '^GET /gen/' "$1" 2>/dev/null || true; }

echo "| configuration | connections | Gbit/s | requests/s | <=64K done p50 ms | p99 ms | server CPU s/GB |" > "$OUT/results.md"
echo "|---|---:|---:|---:|---:|---:|---:|" >> "$OUT/results.md"

for config in $REFERENCES $CORES_LIST; do
  stop_pids_keep_etcd() {
    local keep=${PIDS[0]}
    PIDS=("${PIDS[@]:1}")
    stop_pids
    PIDS=("$keep")
  }
  LOG=$OUT/origin-$config.log
  : > "$LOG"
  $PY "$ROOT/tests/support/test_origin.py" --port "$ORIGIN_PORT" --log "$LOG" > "$OUT/origin-$config.out" 2>&1 &
  PIDS+=($!)
  wait_port "$ORIGIN_PORT" || die "the origin did not start"
  case $config in ring | local) n=1 ;; *) n=$config ;; esac
  server_pids=()
  for i in $(seq 0 $((n - 1))); do
    tier=$RUN/tier-$config-$i
    rm -rf "$tier"
    "$BUILD_DIR/core/goblin-core" --prepare "$tier" > /dev/null
    args=(--listen-unix "$RUN/core-$config-$i.sock" --memory "$MEMORY" --cores 1 --ssd-dir "$tier")
    in_ns=()
    if [ "$NETNS" = 1 ] && [ "$config" != ring ] && [ "$config" != local ]; then
      # (its own host: UCX over the veth; etcd over the bridge)
      in_ns=(ip netns exec "$NS_PREFIX$i" env UCX_NET_DEVICES=eth0)
      args+=(--rdma-listen "10.77.0.$((10 + i)):$((UCX_PORT + 10 * i))"
             --etcd "http://10.77.0.1:$EPORT" --etcd-prefix "/bench-$config" --member-name "core-$i")
    elif [ "$config" != ring ]; then
      args+=(--rdma-listen "127.0.0.1:$((UCX_PORT + 10 * i))" --etcd "http://127.0.0.1:$EPORT"
             --etcd-prefix "/bench-$config" --member-name "core-$i")
    fi
    "${in_ns[@]}" "$BUILD_DIR/core/goblin-core" "${args[@]}" > "$OUT/core-$config-$i.log" 2>&1 &
    PIDS+=($!)
    server_pids+=($!)
  done
  for i in $(seq 0 $((n - 1))); do
    for _ in $(seq 100); do [ -S "$RUN/core-$config-$i.sock" ] && break; sleep 0.1; done
  done
  sleep 1  # (registration follows the socket)
  # ring: the socket named; local: found in etcd, reached through its ring socket (same host);
  # N cores: found in etcd, over UCX (?ring=off: as from a gateway on another host).
  case $config in
    ring) core="unix:$RUN/core-ring-0.sock" ;;
    local) core="etcd://127.0.0.1:$EPORT/bench-$config" ;;
    *) core="etcd://127.0.0.1:$EPORT/bench-$config?ring=off" ;;
  esac
  gw_env=()
  if [ "$NETNS" = 1 ]; then gw_env=(env "UCX_NET_DEVICES=lo,$BRIDGE"); fi
  "${gw_env[@]}" "$BUILD_DIR/gateway/goblin-gateway" --core "$core" --mirror "http://127.0.0.1:$ORIGIN_PORT" \
    --listen-address 127.0.0.1 --http-port "$PORT" --threads 1 > "$OUT/gateway-$config.log" 2>&1 &
  PIDS+=($!)
  server_pids+=($!)
  wait_port "$PORT" || { cat "$OUT/gateway-$config.log"; die "the gateway did not start"; }
  "$CLIENT" --target "http://127.0.0.1:$PORT" --manifest "$MANIFEST" --connections 8 \
    --threads "$THREADS" --passes 1 --label "$config-prewarm" > "$OUT/prewarm-$config.txt" ||
    { cat "$OUT/prewarm-$config.txt"; die "$config: prewarm failed"; }
  sleep 2
  warm=$(origin_gets "$LOG")
  [ "$warm" = "$NOBJ" ] || die "$config: the origin saw $warm requests for $NOBJ objects"
  for i in $(seq 0 $((n - 1))); do
    objs=$("$BUILD_DIR/tools/goblinctl" --target "unix:$RUN/core-$config-$i.sock.admin" stats |
      awk '$1 == "objects" {print $2}')
    say "$config: core $i holds $objs objects"
  done
  for c in $CONNS; do
    for round in $(seq "$ROUNDS"); do
      cpu0=$(tree_cpu "${server_pids[@]}")
      out=$OUT/$config-$c-r$round
      "$CLIENT" --target "http://127.0.0.1:$PORT" --manifest "$MANIFEST" --connections "$c" \
        --threads "$THREADS" --seconds "$TURN_SECONDS" --label "$config" --json > "$out.txt" ||
        die "$config: errors at $c connections"
      grep -q '"failed":0,' "$out.txt" || die "$config: failed requests at $c connections"
      cpu1=$(tree_cpu "${server_pids[@]}")
      tail -1 "$out.txt" |
        $PY -c 'import json,sys; d=json.load(sys.stdin); d["server_cpu_s"]=float(sys.argv[1]); print(json.dumps(d))' \
          "$(echo "($cpu1 - $cpu0) / $(getconf CLK_TCK)" | bc -l)" > "$out.json"
      say "$config, $c connections, round $round: $(head -1 "$out.txt")"
    done
    NETNS=$NETNS $PY - "$config" "$c" "$OUT" "$ROUNDS" >> "$OUT/results.md" <<'PY'
import json, statistics, sys
config, conns, out, rounds = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
runs = [json.load(open(f"{out}/{config}-{conns}-r{r}.json")) for r in range(1, rounds + 1)]
secs = sum(r["seconds"] for r in runs)
byts = sum(r["bytes"] for r in runs)
reqs = sum(r["requests"] for r in runs)
cpu = sum(r["server_cpu_s"] for r in runs)
p50 = statistics.median(r["classes"]["<=64K"]["done_p50_ms"] for r in runs)
p99 = statistics.median(r["classes"]["<=64K"]["done_p99_ms"] for r in runs)
import os
fabric = "UCX tcp, namespaces (veth)" if os.environ.get("NETNS") == "1" else "UCX tcp"
name = {"ring": "1 core, ring socket named (local hits)", "local": "1 core via etcd, its ring socket (same host)"}.get(config, f"{config} core{'s' if config != '1' else ''} via etcd, {fabric}")
print(f"| {name} | {conns} | {byts * 8 / secs / 1e9:.2f} | {reqs / secs:,.0f} | {p50:.2f} | {p99:.2f} | {cpu / (byts / 1e9):.2f} |")
PY
  done
  after=$(origin_gets "$LOG")
  [ "$after" = "$NOBJ" ] || die "$config: the origin saw $((after - NOBJ)) requests during the runs"
  stop_pids_keep_etcd
done
{
  echo
  echo "Key movement (bench/rendezvous_movement, 200,000 keys):"
  echo
  "$BUILD_DIR/bench/rendezvous_movement"
} >> "$OUT/results.md"
cat "$OUT/results.md"
