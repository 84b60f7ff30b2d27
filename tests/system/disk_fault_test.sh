#!/usr/bin/env bash
# A disk whose reads fail (EIO on every read of the tier's extent files, as a drive with bad
# sectors answers; bench/hdd_model's hdd_fuse with --faults) under goblin-store, end to end
# in --net sync and async, over HTTP/1.1 and h2c, and the memcache front. After a restart
# (nothing in RAM) with the fault on:
#  - an HTTP GET of a stored object is cut off or served whole, never with wrong bytes; the
#    object is dropped, and the next request gets every byte (fetched from the origin again);
#  - a memcache get of stored values is a miss (END, mg's EN), the connection stays usable;
# and once the disk reads again, the dropped values stay gone and the refetched object is a
# hit (no origin request). Then the native planes, goblin-core alone (ring, UCX over tcp and
# over shared memory): a get from the failing disk fails (no bytes left behind); the next
# get of it is a miss, the core answers the next get of another key, and once the disk
# reads again the dropped object stays gone and the other is whole.
# Exits 77 (skipped) where FUSE cannot be mounted.
# Usage: disk_fault_test.sh SOURCE_DIR BUILD_DIR
set -euo pipefail
SRC=$1
BUILD=$2
NAME=disk-fault
# shellcheck source=tests/system/fuse_disk_lib.sh
source "$SRC/tests/system/fuse_disk_lib.sh"
FAULTS=$T/faults
BASE=$((20000 + $$ % 20000))
HTTP_PORT=$BASE
MC_PORT=$((BASE + 1))

# The disk: no modelled delays (the faults are the point), faults read from $FAULTS.
: > "$FAULTS"
fuse_disk_start --mb-s=1000000 --seek-min-ms=0 --seek-max-ms=0 --rpm=1e9 --faults="$FAULTS"
OBJ=/gen/3M/disk-fault
curl -sf -o "$T/expected" "$ORIGIN$OBJ" || fail "the origin does not answer"
origin_gets() { grep -c "GET $OBJ" "$T/origin.log" || true; }

N=0
start_store() {  # NET
  N=$((N + 1))
  "$BUILD/tools/goblin-store" --mirror "$ORIGIN" --listen-address 127.0.0.1 \
    --http-port "$HTTP_PORT" --memcache-port "$MC_PORT" --net "$1" --memory 64M --block 1M \
    --ram-head 1M --hugepages off --ssd-dir "$M/tier" --socket-dir "$T" \
    > "$T/store-$N.log" 2>&1 &
  STORE_PID=$!
  for _ in $(seq 150); do grep -q "memcache on" "$T/store-$N.log" && break; sleep 0.1; done
  grep -q "memcache on" "$T/store-$N.log" || fail "goblin-store did not start"
}
objects() { "$BUILD/tools/goblinctl" --target "unix:$T/core.sock.admin" objects ls 2>/dev/null || true; }
wait_stored() {  # KEY...: until every one is committed (listed by the core)
  local k ok
  for _ in $(seq 100); do
    ok=1
    for k in "$@"; do objects | grep -q "^$k " || ok=0; done
    [ "$ok" = 1 ] && return 0
    sleep 0.1
  done
  fail "not stored: $*"
}
http_get() {  # PROTO OUT -> "complete|incomplete same|differs"
  local flags=() rc=0
  [ "$1" = h2 ] && flags=(--http2-prior-knowledge)
  curl -s "${flags[@]}" --max-time 10 -o "$2" "http://127.0.0.1:$HTTP_PORT$OBJ" || rc=$?
  local size; size=$(stat -c %s "$2" 2>/dev/null || echo 0)
  if [ "$rc" = 0 ] && [ "$size" = "$(stat -c %s "$T/expected")" ]; then echo -n "complete "; else echo -n "incomplete "; fi
  if cmp -s "$2" "$T/expected"; then echo same; else echo differs; fi
}
# memcache: sends the commands, prints what came back (up to a line holding `until`, or
# until the peer closes), each CRLF as "|".
mc() {  # UNTIL COMMANDS (with \r\n escapes) [VALUE_FILE for {V}]
  python3 - "$MC_PORT" "$@" <<'PY'
import socket, sys
port, until, cmds = int(sys.argv[1]), sys.argv[2].encode(), sys.argv[3].encode().decode("unicode_escape").encode("latin-1")
if len(sys.argv) > 4:
    cmds = cmds.replace(b"{V}", open(sys.argv[4], "rb").read())
s = socket.create_connection(("127.0.0.1", port)); s.settimeout(10)
s.sendall(cmds); out = b""
try:
    while until not in out or not out.endswith(b"\r\n"):
        b = s.recv(1 << 20)
        if not b:
            out += b"<closed>"; break
        out += b
except socket.timeout:
    out += b"<timeout>"
sys.stdout.write(out.decode("latin-1").replace("\r\n", "|"))
PY
}
head -c $((3 << 20)) /dev/urandom > "$T/value"
HTTP_KEY="127.0.0.1:$HTTP_PORT$OBJ"

for NET in sync async; do
  for PROTO in h1 h2; do
    mode="$NET/$PROTO"
    # Stored: the HTTP object (filled or a hit) and two memcache values, one past its head.
    : > "$FAULTS"
    start_store "$NET"
    [ "$(http_get h1 "$T/body")" = "complete same" ] || fail "$mode: the first GET"
    r=$(mc STORED 'set big 0 0 3145728\r\n{V}\r\n' "$T/value")
    [ "$r" = "STORED|" ] || fail "$mode: set big: $r"
    r=$(mc STORED 'set small 0 0 5\r\nhello\r\n')
    [ "$r" = "STORED|" ] || fail "$mode: set small: $r"
    wait_stored "$HTTP_KEY" big small
    stop_store
    start_store "$NET"  # (nothing in RAM)

    echo "read EIO extent-" > "$FAULTS"
    before=$(origin_gets)
    got=$(http_get "$PROTO" "$T/body")
    [ "$got" != "complete differs" ] || fail "$mode: wrong bytes served from a failing disk"
    got=$(http_get "$PROTO" "$T/body")
    [ "$got" = "complete same" ] || fail "$mode: the request after the fault: $got"
    [ "$(origin_gets)" -gt "$before" ] || fail "$mode: the object was not fetched again"
    r=$(mc VERSION 'get big small\r\nversion\r\n')
    [[ "$r" == "END|VERSION "* ]] || fail "$mode: memcache get from a failing disk: ${r:0:80}"
    r=$(mc MN 'mg big v\r\nmg small v\r\nmn\r\n')
    [ "$r" = "EN|EN|MN|" ] || fail "$mode: mg from a failing disk: ${r:0:80}"

    : > "$FAULTS"  # the disk reads again
    r=$(mc END 'get big small\r\n')
    [ "$r" = "END|" ] || fail "$mode: dropped values came back: ${r:0:80}"
    before=$(origin_gets)
    [ "$(http_get "$PROTO" "$T/body")" = "complete same" ] || fail "$mode: GET after the disk recovered"
    [ "$(origin_gets)" = "$before" ] || fail "$mode: the refetched object was not kept"
    dropped=$("$BUILD/tools/goblinctl" --target "unix:$T/core.sock.admin" stats |
      awk '$1 == "corrupt_dropped" {print $2}')
    [ "${dropped:-0}" -ge 2 ] || fail "$mode: corrupt_dropped ${dropped:-none}"
    stop_store
    echo "$mode: ok"
  done
done
# The native planes: goblin-core alone on the same disk.
CORE_PID=""
start_core() {
  N=$((N + 1))
  "$BUILD/core/goblin-core" --listen-unix "$T/native.sock" --ssd-dir "$M/ntier" --memory 64M \
    --block 1M --ram-head 1M --hugepages off --rdma-listen "127.0.0.1:$((BASE + 2))" \
    > "$T/store-$N.log" 2>&1 &
  CORE_PID=$!
  for _ in $(seq 150); do
    grep -q "UCX plane listening" "$T/store-$N.log" && [ -S "$T/native.sock" ] && break
    sleep 0.1
  done
  [ -S "$T/native.sock" ] || fail "goblin-core did not start"
}
stop_core() {
  kill -TERM "$CORE_PID" 2>/dev/null || true
  wait "$CORE_PID" 2>/dev/null || true
  CORE_PID=""
}
trap 'stop_core; cleanup' EXIT
"$BUILD/core/goblin-core" --prepare "$M/ntier" > /dev/null || fail "goblin-core --prepare"
native() {  # PLANE ARGS...: the goblin CLI over that plane
  local plane=$1
  shift
  case $plane in
    ring) "$BUILD/tools/goblin" --target "unix:$T/native.sock" "$@" ;;
    ucx-tcp) UCX_TLS=tcp UCX_NET_DEVICES=lo "$BUILD/tools/goblin" --target "ucx://127.0.0.1:$((BASE + 2))" "$@" ;;
    ucx-shm) UCX_TLS=sm,tcp UCX_NET_DEVICES=lo "$BUILD/tools/goblin" --target "ucx://127.0.0.1:$((BASE + 2))" "$@" ;;
  esac
}
PLANES="ring ucx-tcp ucx-shm"
start_core
for P in $PLANES; do
  native "$P" put "$P/big" "$T/value" > /dev/null || fail "$P: put"
  native "$P" put "$P/other" "$T/expected" > /dev/null || fail "$P: put of the other"
done
stop_core
start_core  # (nothing in RAM)
echo "read EIO extent-" > "$FAULTS"
for P in $PLANES; do
  # (nothing of it in RAM past its head: the read of the rest fails, and the get with it)
  rc=0
  native "$P" get "$P/big" -o "$T/got" 2> "$T/get.err" || rc=$?
  [ "$rc" = 1 ] || fail "$P: get from a failing disk: exit $rc ($(cat "$T/get.err"))"
  [ ! -e "$T/got" ] || fail "$P: a failed get left its output behind"
  rc=0
  native "$P" get "$P/big" -o "$T/got" 2> "$T/get.err" || rc=$?
  [ "$rc" = 2 ] || fail "$P: the get after the fault: exit $rc, not a miss ($(cat "$T/get.err"))"
done
: > "$FAULTS"  # the disk reads again
for P in $PLANES; do
  rc=0
  native "$P" get "$P/big" -o "$T/got" 2>/dev/null || rc=$?
  [ "$rc" = 2 ] || fail "$P: the dropped object came back (exit $rc)"
  native "$P" get "$P/other" -o "$T/got" || fail "$P: the other object after the disk recovered"
  cmp -s "$T/got" "$T/expected" || fail "$P: the other object differs"
done
dropped=$("$BUILD/tools/goblinctl" --target "unix:$T/native.sock.admin" stats |
  awk '$1 == "corrupt_dropped" {print $2}')
[ "${dropped:-0}" -ge 3 ] || fail "native: corrupt_dropped ${dropped:-none}"
stop_core
echo "native planes: ok"
echo "disk_fault_test: ok"
