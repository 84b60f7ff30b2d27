#!/usr/bin/env bash
# bench/pubsub_benchmark.sh end to end with a few samples: every engine (Redis, goblin-resp-uds,
# goblin-sbe-ring-4kb) on scenarios of every group, the 26-column CSV (statuses, n/a cells,
# ordered percentiles), the Markdown report; then the harness's validation: a stray
# subscriber makes the PUBLISH count wrong and the run fails with that reason.
# Usage: pubsub_benchmark_test.sh SOURCE_DIR BUILD_DIR
set -euo pipefail
SRC=$1
BUILD=$2
OUT=$(mktemp -d /tmp/goblin-psb-test.XXXXXX)
REDIS_PID=""
cleanup() {
  [ -n "$REDIS_PID" ] && kill -KILL "$REDIS_PID" 2>/dev/null || true
  jobs -p | xargs -r kill -KILL 2>/dev/null || true
  rm -rf "$OUT"
}
trap cleanup EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

SCENARIOS="1to1-16B 1to1-4096B fanout-8 literal-1024 pattern-hit-64 pattern-miss-0 many-pattern" \
  HARNESS_ARGS="--samples 60 --warmup 10" BUILD_DIR="$BUILD" \
  timeout 300 "$SRC/bench/pubsub_benchmark.sh" --no-build --out "$OUT/run" > "$OUT/log" 2>&1 ||
  { cat "$OUT/log"; fail "pubsub_benchmark.sh failed"; }
CSV=$OUT/run/results.csv
[ -f "$CSV" ] || fail "no CSV"
python3=/usr/bin/python3
$python3 - "$CSV" <<'PY' || { cat "$OUT/log"; fail "CSV checks"; }
import csv, sys
rows = list(csv.reader(open(sys.argv[1])))
head, rows = rows[0], rows[1:]
assert len(head) == 26, head
assert all(len(r) == 26 for r in rows), [r for r in rows if len(r) != 26]
R = [dict(zip(head, r)) for r in rows]
engines = sorted({r["engine"] for r in R})
assert len(engines) == 3 and engines[0] == "goblin-resp-uds" and engines[1] == "goblin-sbe-ring-4kb" \
    and engines[2].startswith("redis-"), engines
assert len(R) == 3 * 7 * 2, len(R)
for r in R:
    key = (r["engine"], r["scenario"], r["metric"])
    na = (r["scenario"] == "1to1-4096B" and r["engine"] == "goblin-sbe-ring-4kb") or \
         (r["scenario"] == "pattern-miss-0" and r["metric"] == "delivery")
    assert r["status"] == ("n/a" if na else "ok"), (key, r["status"], r["note"])
    if na:
        assert r["note"], key
        continue
    v = [float(r[c]) for c in ("min_us", "p50_us", "p90_us", "p99_us", "p999_us", "max_us")]
    assert 0 < v[0] and v == sorted(v), (key, v)
    assert int(r["samples"]) == 60 and int(r["warmup"]) == 10, key
    assert float(r["publications_per_s"]) > 0, key
    assert int(r["subscribed_rss_kib"]) > 1024 and int(r["baseline_rss_kib"]) > 1024, key
    assert int(r["rss_delta_kib"]) == int(r["subscribed_rss_kib"]) - int(r["baseline_rss_kib"])
    want = {"1to1-16B": (1, 1, 1), "fanout-8": (8, 8, 8), "literal-1024": (1, 1024, 1),
            "pattern-hit-64": (1, 64, 1), "many-pattern": (32, 32 * 33, 32),
            "pattern-miss-0": (0, 0, 0), "1to1-4096B": (1, 1, 1)}[r["scenario"]]
    got = (int(r["listeners"]), int(r["subscriptions"]), int(r["deliveries_per_publish"]))
    assert got == want, (key, got, want)
print("csv ok:", len(R), "rows")
PY
grep -q '^### Pattern routing, matching publication' "$OUT/run/results.md" || fail "report tables"
grep -q 'goblin-sbe-ring-4kb | .*x faster' "$OUT/run/results.md" ||
  grep -q 'goblin-sbe-ring-4kb | .*x slower' "$OUT/run/results.md" || fail "report ratios"

# Validation: a stray subscriber on the benchmark's channel makes PUBLISH reply 2, not 1.
SOCK=$OUT/redis.sock
redis-server "$SRC/bench/redis-parity.conf" --unixsocket "$SOCK" --dir "$OUT" &
REDIS_PID=$!
for _ in $(seq 100); do [ -S "$SOCK" ] && break; sleep 0.05; done
redis-cli -s "$SOCK" subscribe bench:1to1 > /dev/null &
for _ in $(seq 100); do
  [ "$(redis-cli -s "$SOCK" pubsub numsub bench:1to1 | tail -1)" = 1 ] && break
  sleep 0.05
done
if "$BUILD/bench/pubsub_benchmark" --socket "$SOCK" --scenario 1to1-16B --samples 5 --warmup 1 \
    --csv "$OUT/bad.csv" > "$OUT/bad.log" 2>&1; then
  fail "the harness accepted a wrong receiver count"
fi
grep -q 'PUBLISH replied 2 (expected 1)' "$OUT/bad.csv" || { cat "$OUT/bad.log"; fail "reason"; }
echo "pubsub_benchmark_test: ok"
