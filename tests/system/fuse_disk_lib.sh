# Sourced by the system tests that run goblin-store on a modelled disk (bench/hdd_model's
# hdd_fuse) in front of the test origin: disk_fault_test.sh, slow_commit_test.sh.
# The caller sets SRC, BUILD and NAME, and calls fuse_disk_start with hdd_fuse's model flags;
# it gets T (its scratch directory), M (the mount), ORIGIN (the origin's URL) and
# STORE_PID / stop_store / fail / cleanup (on EXIT). Exits 77 (skipped) where FUSE cannot be
# mounted.
# shellcheck shell=bash
[ -c /dev/fuse ] && [ -r /dev/fuse ] && command -v fusermount3 >/dev/null || {
  echo "SKIP: no usable /dev/fuse or fusermount3"; exit 77; }
T=$(mktemp -d "/var/tmp/goblin-$NAME.XXXXXX")
B=$(mktemp -d "/dev/shm/goblin-$NAME.XXXXXX")
M=$T/mnt
FUSE_PID="" ORIGIN_PID="" STORE_PID=""
stop_store() {
  [ -n "$STORE_PID" ] || return 0
  kill -TERM "$STORE_PID" 2>/dev/null || true
  for _ in $(seq 100); do kill -0 "$STORE_PID" 2>/dev/null || break; sleep 0.1; done
  kill -KILL "$STORE_PID" 2>/dev/null || true
  wait "$STORE_PID" 2>/dev/null || true
  STORE_PID=""
}
cleanup() {
  stop_store
  [ -z "$ORIGIN_PID" ] || kill -KILL "$ORIGIN_PID" 2>/dev/null || true
  if [ -n "$FUSE_PID" ]; then
    fusermount3 -u "$M" 2>/dev/null || umount -l "$M" 2>/dev/null || true
    kill -KILL "$FUSE_PID" 2>/dev/null || true
  fi
  rm -rf "$T" "$B"
}
trap cleanup EXIT
fail() {
  echo "FAIL: $*" >&2
  for f in "$T"/store-*.log; do [ -f "$f" ] && { echo "== $f" >&2; tail -30 "$f" >&2; }; done
  exit 1
}
fuse_disk_start() {  # HDD_FUSE_FLAGS...: the disk at $M, then the origin
  mkdir -p "$M"
  "$BUILD/bench/hdd_model/hdd_fuse" "$@" "$B" "$M" -f > "$T/fuse.log" 2>&1 &
  FUSE_PID=$!
  for _ in $(seq 100); do grep -q " $M fuse" /proc/mounts && break; sleep 0.05; done
  grep -q " $M fuse" /proc/mounts || fail "hdd_fuse did not mount"
  python3 "$SRC/tests/support/test_origin.py" --port 0 --port-file "$T/origin.port" \
    --log "$T/origin.log" > "$T/origin.out" 2>&1 &
  ORIGIN_PID=$!
  for _ in $(seq 100); do [ -s "$T/origin.port" ] && break; sleep 0.1; done
  # shellcheck disable=SC2034  # (the caller's)
  ORIGIN="http://127.0.0.1:$(cat "$T/origin.port")"
}
