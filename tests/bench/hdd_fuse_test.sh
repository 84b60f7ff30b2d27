#!/usr/bin/env bash
# bench/hdd_model's hdd_fuse end to end: a directory served through the modelled disk keeps
# every byte (direct and buffered I/O, fallocate, rename, unlink, directories), counts a seek
# for a random read and none for a sequential one, and unmounts cleanly; then
# bench/memcache_benchmark.sh with HDD=1 on a small set, both servers on the modelled disk.
# Exits 77 (skipped) where FUSE cannot be mounted (no /dev/fuse, no fusermount3).
# Usage: hdd_fuse_test.sh SOURCE_DIR BUILD_DIR
set -euo pipefail
SRC=$1
BUILD=$2
FUSE=$BUILD/bench/hdd_model/hdd_fuse
[ -c /dev/fuse ] && [ -r /dev/fuse ] && command -v fusermount3 >/dev/null || {
  echo "SKIP: no usable /dev/fuse or fusermount3"; exit 77; }
T=$(mktemp -d /var/tmp/goblin-hdd-test.XXXXXX)
B=$(mktemp -d /dev/shm/goblin-hdd-test.XXXXXX)
M=$T/mnt
PID=""
cleanup() {
  if [ -n "$PID" ]; then
    fusermount3 -u "$M" 2>/dev/null || umount -l "$M" 2>/dev/null || true
    kill -KILL "$PID" 2>/dev/null || true
  fi
  rm -rf "$T" "$B"
}
trap cleanup EXIT
fail() { echo "FAIL: $*" >&2; [ -f "$T/fuse.log" ] && cat "$T/fuse.log" >&2; exit 1; }
stat_of() { awk -v k="$1" '{for (i = 1; i < NF; i += 2) if ($i == k) print $(i + 1)}' "$T/stats"; }
settle() { sleep 0.4; }  # (the counters are written within 100 ms of going idle)

mkdir -p "$M"
"$FUSE" --stats="$T/stats" "$B" "$M" -f > "$T/fuse.log" 2>&1 &
PID=$!
for _ in $(seq 100); do grep -q " $M fuse" /proc/mounts && break; sleep 0.05; done
grep -q " $M fuse" /proc/mounts || fail "hdd_fuse did not mount"

# Bytes: direct and buffered, in and out.
head -c $((16 << 20)) /dev/urandom > "$T/src"
dd if="$T/src" of="$M/a" bs=1M oflag=direct status=none || fail "direct write"
cmp "$T/src" "$B/a" || fail "the backing file differs after a direct write"
dd if="$M/a" of="$T/back" bs=4M iflag=direct status=none || fail "direct read"
cmp "$T/src" "$T/back" || fail "a direct read differs"
cp "$T/src" "$M/b" && cmp "$T/src" "$M/b" || fail "a buffered copy differs"
# The namespace passes through.
mkdir "$M/d" && mv "$M/b" "$M/d/c" && [ -f "$B/d/c" ] && [ ! -e "$B/b" ] || fail "mkdir/rename"
rm "$M/d/c" && rmdir "$M/d" && [ ! -e "$B/d" ] || fail "unlink/rmdir"
fallocate -l 32M "$M/f" && [ "$(stat -c %s "$B/f")" = $((32 << 20)) ] || fail "fallocate"
[ "$(ls "$M")" = "$(ls "$B")" ] || fail "readdir differs from the backing directory"

# Seeks: a sequential read takes none, random reads nearly one each.
settle
s0=$(stat_of seeks)
dd if="$M/a" of=/dev/null bs=1M iflag=direct skip=1 count=8 status=none
settle
s1=$(stat_of seeks)
[ $((s1 - s0)) -le 1 ] || fail "a sequential read took $((s1 - s0)) seeks"
for i in $(seq 0 19); do
  dd if="$M/a" of=/dev/null bs=4k count=1 skip=$(((i * 1543) % 4096)) iflag=direct status=none
  dd if="$M/f" of=/dev/null bs=4k count=1 skip=$(((i * 977) % 8192)) iflag=direct status=none
done
settle
s2=$(stat_of seeks)
[ $((s2 - s1)) -ge 30 ] || fail "40 reads alternating between two files took $((s2 - s1)) seeks"
[ "$(stat_of busy_ms)" -gt 0 ] || fail "no busy time counted"

fusermount3 -u "$M" || fail "unmount"
wait "$PID" || fail "hdd_fuse exited with an error"
PID=""
[ "$(stat_of requests)" -gt 0 ] || fail "no final counters"

# The memcache benchmark with both servers on the modelled disk (a small set).
HDD=1 ROWS=large-disk DISK_COUNT=24 SECONDS=2 EXT_MEM=256M GOBLIN_MEM_DISK=16M CONNECTIONS=2 \
  PORT=21611 DIR="$T/mc" OUT="$T/out" BUILD_DIR="$BUILD" \
  timeout 300 "$SRC/bench/memcache_benchmark.sh" --no-build > "$T/mc.log" 2>&1 ||
  { cat "$T/mc.log"; fail "memcache_benchmark.sh HDD=1 failed"; }
for kind in extstore goblin; do
  grep -Eq "^\| large-disk \| $kind \| [0-9M]+ \| [0-9.]+ \| [1-9][0-9]* \| 0 \+ 0 errors \|" \
    "$T/out/results.md" || { cat "$T/mc.log"; fail "$kind: no clean row"; }
done
# goblin's 16 MiB pool holds few of the 24 values: its gets read the modelled disk
grep -Eq "^\| large-disk \| goblin \| 16M \| [1-9][0-9]* \| [0-9]+ \| [1-9][0-9]* \|" "$T/out/hdd.md" ||
  { cat "$T/mc.log"; fail "goblin's gets did not read the modelled disk"; }
! grep -q " $T/mc-hdd " /proc/mounts || fail "the benchmark left its disk mounted"
echo "hdd_fuse_test: ok"
