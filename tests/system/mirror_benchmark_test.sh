#!/usr/bin/env bash
# bench/run_mirror_proxy_benchmark.sh end to end on a tiny corpus: Goblin, Varnish and nginx
# each from an empty cache, prewarm with the origin-count check, one measured pass with
# every body's XXH3-64 verified, the ceilings, the analysis tables. Then the client alone
# against the origin: a wrong hash in the manifest fails the run, naming the object.
# Needs root (memory cgroups, dropping the page cache) like the benchmark itself.
# Usage: mirror_benchmark_test.sh SOURCE_DIR BUILD_DIR
set -euo pipefail
SRC=$1
BUILD=$2
OUT=$(mktemp -d /tmp/goblin-mirror-test.XXXXXX)
ORIGIN_PID=""
cleanup() {
  [ -n "$ORIGIN_PID" ] && kill -KILL "$ORIGIN_PID" 2>/dev/null || true
  rm -rf "$OUT"
}
trap cleanup EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
[ "$(id -u)" = 0 ] || { echo "SKIP: needs root (cgroups, drop_caches)"; exit 0; }

CORPUS_GB=0.05 CORPUS_MIN_MB=8 CORPUS_MAX_MB=24 CORPUS_DIR="$OUT/corpus" PASSES=1 VERIFY=1 \
  MEM_LIMIT=1G GOBLIN_MEMORY=64M PORT=18431 ORIGIN_PORT=18432 OUT="$OUT/run" BUILD_DIR="$BUILD" \
  timeout 600 "$SRC/bench/run_mirror_proxy_benchmark.sh" --no-build > "$OUT/log" 2>&1 ||
  { cat "$OUT/log"; fail "run_mirror_proxy_benchmark.sh failed"; }
for c in goblin varnish nginx; do
  grep -q "^$c: .* 0 errors (bodies hash-verified)" "$OUT/log" ||
    { cat "$OUT/log"; fail "$c: no verified, error-free pass"; }
  grep -q "mirror-bench: $c: no origin request during the measured passes" "$OUT/log" ||
    fail "$c: the origin check is missing"
  grep -q "^| $c | " "$OUT/run/results.md" || fail "$c is missing from the tables"
done
grep -q "traces match" "$OUT/run/results.md" || fail "the traces were not validated"
grep -q "^ceiling: disk [0-9]* MB/s" "$OUT/run/ceiling-disk.txt" || fail "no disk ceiling"
grep -q "page cache dropped" "$OUT/log" || fail "the page cache was not dropped"
grep -q "^## threads" "$OUT/run/numa-audit-goblin.txt" || fail "no placement audit of goblin-core"
[ -s "$OUT/run/irqs.txt" ] || fail "no interrupt placement record"

# The client alone against the origin: right hashes pass, a wrong one fails the run.
CLIENT=$BUILD/bench/mirror_proxy_benchmark
/usr/bin/python3 "$SRC/tests/support/test_origin.py" --port 18433 --files "$OUT/corpus" \
  --log "$OUT/origin.log" > "$OUT/origin.out" 2>&1 &
ORIGIN_PID=$!
for _ in $(seq 100); do (exec 3<>/dev/tcp/127.0.0.1/18433) 2>/dev/null && break; sleep 0.1; done
M=$OUT/run/manifest.txt
"$CLIENT" --target http://127.0.0.1:18433 --manifest "$M" --passes 1 --verify > "$OUT/ok.txt" 2>&1 ||
  { cat "$OUT/ok.txt"; fail "verified direct pass failed"; }
awk 'NR == 1 {$3 = "0123456789abcdef"} {print}' "$M" > "$OUT/bad-manifest.txt"
BAD=$(head -1 "$M" | awk '{print $1}')
if "$CLIENT" --target http://127.0.0.1:18433 --manifest "$OUT/bad-manifest.txt" --passes 1 \
    --verify > "$OUT/bad.txt" 2>&1; then
  fail "a wrong hash passed"
fi
grep -q "$BAD: body XXH3" "$OUT/bad.txt" || { cat "$OUT/bad.txt"; fail "the mismatch is not named"; }
echo "PASS"
