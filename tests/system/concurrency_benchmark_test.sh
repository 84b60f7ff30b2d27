#!/usr/bin/env bash
# bench/run_concurrency_benchmark.sh end to end on a tiny small-object mix: Goblin, nginx and
# Varnish side by side, each from an empty cache in front of its own origin, prewarm with the
# origin-count check, two connection counts measured by bench/http_load in two interleaved
# rounds, the tables with goblin's ratio. Then http_load alone against an origin: a wrong
# size in the manifest fails the run.
# Usage: concurrency_benchmark_test.sh SOURCE_DIR BUILD_DIR
set -euo pipefail
SRC=$1
BUILD=$2
OUT=$(mktemp -d /tmp/goblin-conc-test.XXXXXX)
ORIGIN_PID=""
cleanup() {
  [ -n "$ORIGIN_PID" ] && kill -KILL "$ORIGIN_PID" 2>/dev/null || true
  rm -rf "$OUT"
}
trap cleanup EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

MIXES=small SMALL_OBJECTS=150 CONNS="1 8" PASSES=1 ROUNDS=2 GOBLIN_MEMORY=64M PORT=18441 \
  ORIGIN_PORT=18451 OUT="$OUT/run" BUILD_DIR="$BUILD" \
  timeout 400 "$SRC/bench/run_concurrency_benchmark.sh" --no-build > "$OUT/log" 2>&1 ||
  { cat "$OUT/log"; fail "run_concurrency_benchmark.sh failed"; }
for c in goblin nginx varnish; do
  grep -q "concurrency-bench: $c: prewarmed in" "$OUT/log" || { cat "$OUT/log"; fail "$c: no prewarm"; }
  [ "$(grep -c '^GET /gen/' "$OUT/run/origin-small-$c.log")" = 150 ] ||
    { cat "$OUT/log"; fail "$c: its origin did not see exactly one GET per object"; }
  for n in 1 8; do
    for r in 1 2; do
      grep -q "^$c: $n connections on .* 150 requests (0 failed" "$OUT/run/small-$c-$n-r$r.txt" ||
        { cat "$OUT/log"; fail "$c: no error-free round $r at $n connections"; }
    done
  done
  grep -q "| 8 | $c | <=64K |" "$OUT/run/results.md" || fail "$c is missing from the tables"
done
grep -qE "^\| 8 \| [0-9.]+ \([0-9]+\) \[[0-9.]+-[0-9.]+\] .*\| [0-9.]+x \|$" \
  "$OUT/run/results.md" || { cat "$OUT/run/results.md"; fail "no ratio row"; }
# Overlapping port ranges are refused before anything starts.
if CACHES="goblin nginx" PORT=18441 ORIGIN_PORT=18442 OUT="$OUT/bad" BUILD_DIR="$BUILD" \
    "$SRC/bench/run_concurrency_benchmark.sh" --no-build > "$OUT/bad.log" 2>&1; then
  fail "overlapping ports were not refused"
fi
grep -q "overlap" "$OUT/bad.log" || { cat "$OUT/bad.log"; fail "no word about the overlap"; }

# http_load alone against the origin: right sizes pass, a wrong one fails the run.
/usr/bin/python3 "$SRC/tests/support/test_origin.py" --port 18443 --log "$OUT/origin.log" \
  > "$OUT/origin.out" 2>&1 &
ORIGIN_PID=$!
for _ in $(seq 100); do (exec 3<>/dev/tcp/127.0.0.1/18443) 2>/dev/null && break; sleep 0.1; done
M=$OUT/run/manifest-small.txt
"$BUILD/bench/http_load" --target http://127.0.0.1:18443 --manifest "$M" --connections 4 \
  > "$OUT/ok.txt" 2>&1 || { cat "$OUT/ok.txt"; fail "direct run failed"; }
awk 'NR == 1 {$2 = $2 + 1} {print}' "$M" > "$OUT/bad-manifest.txt"
if "$BUILD/bench/http_load" --target http://127.0.0.1:18443 --manifest "$OUT/bad-manifest.txt" \
    --connections 4 > "$OUT/bad.txt" 2>&1; then
  fail "a wrong length passed"
fi
grep -q "(1 failed" "$OUT/bad.txt" || { cat "$OUT/bad.txt"; fail "the mismatch is not counted"; }
# A head that comes in pieces (and its body after it) is gathered: no failed request.
printf '/gen/100K/split?fault=splithead 102400\n/gen/1/split1?fault=splithead 1\n' > "$OUT/split.txt"
"$BUILD/bench/http_load" --target http://127.0.0.1:18443 --manifest "$OUT/split.txt" \
  --connections 1 --passes 3 > "$OUT/split.out" 2>&1 || { cat "$OUT/split.out"; fail "split heads"; }
grep -q "6 requests (0 failed" "$OUT/split.out" || { cat "$OUT/split.out"; fail "split heads failed"; }
echo "PASS"
