#!/usr/bin/env bash
# libgoblin installed and used from outside the tree: `cmake --install` into a scratch
# prefix, a consumer built with find_package(goblin) and another with pkg-config, both run
# against the installed goblin-core over the ring plane and over UCX tcp.
# Usage: install_test.sh SOURCE_DIR BUILD_DIR
set -euo pipefail
SRC=$1
BUILD=$2
T=$(mktemp -d /tmp/goblin-install-test.XXXXXX)
CORE_PID=""
cleanup() { [ -n "$CORE_PID" ] && kill -KILL "$CORE_PID" 2>/dev/null || true; rm -rf "$T"; }
trap cleanup EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
cmake --install "$BUILD" --prefix "$T/prefix" > "$T/install.log" 2>&1 || { cat "$T/install.log"; fail "install"; }
for f in bin/goblin-core bin/goblin include/goblin/client/connection.h; do
  [ -e "$T/prefix/$f" ] || fail "$f was not installed"
done
LIB=$(dirname "$(find "$T/prefix" -name 'libgoblin.so' | head -1)")
[ -n "$LIB" ] || fail "libgoblin.so was not installed"
cmake -S "$SRC/tests/install/consumer" -B "$T/cm" -G Ninja -DCMAKE_PREFIX_PATH="$T/prefix" \
  -DCMAKE_BUILD_RPATH="$LIB" > "$T/cm.log" 2>&1 && cmake --build "$T/cm" > "$T/cmb.log" 2>&1 ||
  { cat "$T/cm.log" "$T/cmb.log" 2>/dev/null; fail "find_package(goblin) consumer"; }
# shellcheck disable=SC2046
g++ -o "$T/pc-consumer" "$SRC/tests/install/consumer.cpp" \
  $(PKG_CONFIG_PATH="$LIB/pkgconfig" pkg-config --cflags --libs goblin) -Wl,-rpath,"$LIB" \
  > "$T/pc.log" 2>&1 || { cat "$T/pc.log"; fail "pkg-config consumer"; }
"$T/prefix/bin/goblin-core" --prepare "$T/tier" > /dev/null
export UCX_TLS=tcp UCX_NET_DEVICES=lo UCX_WARN_UNUSED_ENV_VARS=n
"$T/prefix/bin/goblin-core" --listen-unix "$T/core.sock" --ssd-dir "$T/tier" --memory 16M \
  --block 64K --ram-head 64K --rdma-listen 127.0.0.1:0 --cores 1 > "$T/core.log" 2>&1 &
CORE_PID=$!
# (the ring socket is bound last, once every shard is open)
for _ in $(seq 300); do
  grep -q "UCX plane listening" "$T/core.log" && [ -S "$T/core.sock" ] && break
  sleep 0.05
done
PORT=$(sed -n 's/.*UCX plane listening on .* (port \([0-9]*\)).*/\1/p' "$T/core.log")
[ -n "$PORT" ] || { cat "$T/core.log"; fail "the installed core did not start"; }
for c in "$T/cm/consumer" "$T/pc-consumer"; do
  for target in "unix:$T/core.sock" "ucx://127.0.0.1:$PORT"; do
    out=$(timeout 60 "$c" "$target" 2>&1) || fail "$(basename "$c") $target: $out"
    [ "$out" = ok ] || fail "$(basename "$c") $target: $out"
  done
done
echo PASS
