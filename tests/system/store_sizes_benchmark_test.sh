#!/usr/bin/env bash
# bench/store_sizes.sh end to end at two sizes with a few objects and short turns: the fill
# rate line and the lent and copied hit tables are there, with numbers, for each size.
# Usage: store_sizes_benchmark_test.sh SOURCE_DIR BUILD_DIR
set -euo pipefail
SRC=$1
BUILD=$2
OUT=$(mktemp -d /tmp/goblin-store-sizes-test.XXXXXX)
SCRATCH=$OUT/dir
trap 'rm -rf "$OUT"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

SIZES="1K 300K" COUNT=16 CLIENTS=2 FILL_SECONDS=0.5 MEMORY=64M SAMPLES=20 CONNECTIONS=1,2 \
  TURN_SECONDS=0.2 DIR=$SCRATCH OUT=$OUT/run BUILD_DIR=$BUILD \
  timeout 240 "$SRC/bench/store_sizes.sh" --no-build > "$OUT/log" 2>&1 ||
  { cat "$OUT/log"; fail "store_sizes.sh failed"; }
R=$OUT/run/results.md
for size in 1K 300K; do
  sed -n "/^## $size/,/^## /p" "$R" > "$OUT/$size.md"
  grep -Eq '^2 clients, [0-9.]+ s +[1-9][0-9]* ' "$OUT/$size.md" || { cat "$R"; fail "$size: no fill rate"; }
  for kind in lent copied; do
    grep -q "^hits $kind, 16 x $size: one connection" "$OUT/$size.md" ||
      { cat "$R"; fail "$size: no serial $kind table"; }
  done
  # 1 and 2 connections, lent and copied, each with gets done (1 KiB objects on a loaded
  # machine may round to 0 MB/s).
  [ "$(grep -Ec '^\| (1|2) \| [0-9]+ \| [0-9.]+ \| [1-9][0-9]* \| ' "$OUT/$size.md")" = 4 ] ||
    { cat "$R"; fail "$size: throughput rows"; }
done
[ ! -e "$SCRATCH" ] || fail "the scratch directory was left behind"
echo "PASS"
