#!/usr/bin/env bash
# HTTP over TLS (and, as the gateway gains them, HTTP/2): goblin-store and nginx proxy_cache
# in front of the same local origin, with the same certificate, measured in one run by the
# same clients, per protocol row:
#   - a 64 MiB hit: h2load fetching it REPEATS times on one connection (Gbit/s; curl would
#     be the bottleneck: it copies every byte once more);
#   - small objects (OBJECTS objects of 1-64 KiB, log-uniform, fixed seed): h2load with
#     CONNS connections and REQUESTS requests over the URL list (requests/s, Gbit/s);
#   - the server's CPU seconds (its process tree, from /proc) per GB delivered.
# Rows (PROTOS): h1 (plain HTTP/1.1), h1-tls (HTTP/1.1 over TLS 1.3), h2c (HTTP/2 by prior
# knowledge), h2-tls (HTTP/2 over TLS 1.3 by ALPN); the HTTP/2 rows' small objects run
# STREAMS streams per connection at once. Every URL is fetched
# once before the measured runs (prewarm), and the origin's log must not grow during them
# (a miss would make the run invalid). TLS costs each server its TLS row's throughput over
# its plain row's.
#
#   bench/http2_tls_benchmark.sh [--no-build]
#
# Environment (defaults): PROTOS ("h1 h1-tls h2c h2-tls"), CACHES ("goblin nginx"), REPEATS
# (10), OBJECTS (400), REQUESTS (40000), CONNS (16), STREAMS (10), GOBLIN_ARGS,
# GOBLIN_MEMORY (1G), PORT (8480: goblin plain (h1 and h2c), +1 goblin TLS, +2 nginx plain,
# +3 nginx TLS, +4 nginx h2c), ORIGIN_PORT (18480), OUT
# (var/bench/http2-tls-<time>), BUILD_DIR (build/release).
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD_DIR=${BUILD_DIR:-$ROOT/build/release}
PROTOS=${PROTOS:-"h1 h1-tls h2c h2-tls"}
STREAMS=${STREAMS:-10}
CACHES=${CACHES:-"goblin nginx"}
REPEATS=${REPEATS:-10}
OBJECTS=${OBJECTS:-400}
REQUESTS=${REQUESTS:-40000}
CONNS=${CONNS:-16}
GOBLIN_ARGS=${GOBLIN_ARGS:-}
GOBLIN_MEMORY=${GOBLIN_MEMORY:-1G}
PORT=${PORT:-8480}
ORIGIN_PORT=${ORIGIN_PORT:-18480}
OUT=${OUT:-$ROOT/var/bench/http2-tls-$(date -u +%Y%m%d-%H%M%S)}
BUILD=1
[ "${1:-}" = "--no-build" ] && BUILD=0

die() { echo "http2_tls_benchmark: $*" >&2; exit 1; }
for t in curl h2load nginx openssl python3 bc; do
  command -v "$t" >/dev/null || die "$t is missing (scripts/install-deps.sh installs it)"
done
mkdir -p "$OUT"
RUN=$(mktemp -d /tmp/goblin-h2tls.XXXXXX)
chmod 755 "$RUN"  # nginx's workers run as their own user
PIDS=()
# shellcheck source=bench/cache_bench_lib.sh
source "$ROOT/bench/cache_bench_lib.sh"
cleanup() { stop_pids; rm -rf "$RUN"; }
trap cleanup EXIT

if ((BUILD)); then
  cmake -S "$ROOT" -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
  cmake --build "$BUILD_DIR" --target goblin-store goblin-core goblin-gateway >/dev/null
fi

{
  echo "# http2_tls_benchmark $(date -u +%FT%TZ)"
  echo "cpu: $(sed -n 's/^model name\s*: //p' /proc/cpuinfo | head -1) x $(nproc); kernel $(uname -r)"
  echo "goblin: $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo '?'); $(nginx -v 2>&1); $(openssl version)"
  echo "PROTOS=\"$PROTOS\" CACHES=\"$CACHES\" REPEATS=$REPEATS OBJECTS=$OBJECTS REQUESTS=$REQUESTS CONNS=$CONNS STREAMS=$STREAMS GOBLIN_ARGS=\"$GOBLIN_ARGS\""
} > "$OUT/env.txt"

# The certificate both servers present.
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 2 \
  -subj /CN=bench.test -addext subjectAltName=DNS:bench.test \
  -keyout "$RUN/key.pem" -out "$RUN/cert.pem" 2>/dev/null
chmod 644 "$RUN/key.pem"  # (a throw-away key)

python3 "$ROOT/tests/support/test_origin.py" --port "$ORIGIN_PORT" --port-file "$RUN/origin.port" \
  --log "$RUN/access.log" > "$RUN/origin.log" 2>&1 &
PIDS+=($!)
wait_port "$ORIGIN_PORT" || die "the origin did not start"

# The small objects (paths), and the big one.
python3 - "$OBJECTS" > "$RUN/paths.txt" <<'PY'
import math, random, sys
rng = random.Random(0x5eed)
for i in range(int(sys.argv[1])):
    size = int(math.exp(rng.uniform(math.log(1024), math.log(64 << 10))))
    print(f"/gen/{size}/h{i:04d}")
PY
BIG=/gen/64M/big

declare -A CPID PLAIN TLS H2C
for cache in $CACHES; do
  dir=$RUN/$cache
  mkdir -p "$dir"
  chmod 755 "$dir"
  case $cache in
    goblin)
      PLAIN[$cache]=$PORT
      TLS[$cache]=$((PORT + 1))
      H2C[$cache]=$PORT
      # shellcheck disable=SC2086
      "$BUILD_DIR/tools/goblin-store" --mirror "http://127.0.0.1:$ORIGIN_PORT" \
        --listen-address 127.0.0.1 --http-port "$PORT" --https-port "$((PORT + 1))" \
        --tls-cert "$RUN/cert.pem" --tls-key "$RUN/key.pem" --memory "$GOBLIN_MEMORY" \
        --ssd-dir "$dir/tier" --socket-dir "$RUN" --no-memcache $GOBLIN_ARGS \
        > "$OUT/goblin.log" 2>&1 &
      ;;
    nginx)
      PLAIN[$cache]=$((PORT + 2))
      TLS[$cache]=$((PORT + 3))
      H2C[$cache]=$((PORT + 4))
      mkdir -p "$RUN/client_body" "$dir/tmp"
      sed -e "s|@PORT@|$((PORT + 2))|; s|@TLS_PORT@|$((PORT + 3))|; s|@H2C_PORT@|$((PORT + 4))|" \
          -e "s|@ORIGIN_PORT@|$ORIGIN_PORT|" \
          -e "s|@CACHE_DIR@|$dir|g; s|@RUN@|$RUN|g; s|@CERT@|$RUN/cert.pem|; s|@KEY@|$RUN/key.pem|" \
          "$ROOT/bench/http2/nginx.conf.in" > "$RUN/nginx.conf"
      nginx -c "$RUN/nginx.conf" -e "$RUN/nginx-error.log" > "$OUT/nginx.log" 2>&1 &
      ;;
    *) die "unknown cache $cache" ;;
  esac
  CPID[$cache]=$!
  PIDS+=("${CPID[$cache]}")
  wait_port "${PLAIN[$cache]}" || die "$cache did not start (see $OUT/$cache.log)"
  wait_port "${TLS[$cache]}" || die "$cache's TLS port did not open (see $OUT/$cache.log)"
done

base_url() {  # cache proto
  case $2 in
    h1) echo "http://127.0.0.1:${PLAIN[$1]}" ;;
    h1-tls | h2-tls) echo "https://127.0.0.1:${TLS[$1]}" ;;
    h2c) echo "http://127.0.0.1:${H2C[$1]}" ;;
    *) die "unknown protocol row $2" ;;
  esac
}
curl_args() {  # proto
  case $1 in
    h1) echo "--http1.1" ;;
    h1-tls) echo "--http1.1 -k --tlsv1.3" ;;
    h2c) echo "--http2-prior-knowledge" ;;
    h2-tls) echo "--http2 -k --tlsv1.3" ;;
  esac
}
h2load_args() {  # proto
  case $1 in
    h1 | h1-tls) echo "--h1" ;;
    h2c | h2-tls) echo "-m $STREAMS" ;;
  esac
}

h2load_totals() {  # h2load output: its run time in seconds and the body bytes it received
  local secs body
  secs=$(sed -nE 's/^finished in ([0-9.]+)(m?s),.*/\1 \2/p' "$1" | awk '{print ($2 == "ms") ? $1 / 1000 : $1}')
  body=$(sed -nE 's/^traffic: .*, [0-9.]+[KMG]?B \(([0-9]+)\) data.*/\1/p' "$1")
  echo "$secs $body"
}

# Prewarm: every URL of every row once (h2load, one connection, the list once).
for cache in $CACHES; do
  for proto in $PROTOS; do
    url=$(base_url "$cache" "$proto")
    sed "s|^|$url|" "$RUN/paths.txt" > "$RUN/urls-$cache-$proto.txt"
    # shellcheck disable=SC2046
    h2load $(h2load_args "$proto") -n "$OBJECTS" -c 1 -i "$RUN/urls-$cache-$proto.txt" \
      > "$OUT/prewarm-$cache-$proto.txt" 2>&1 || die "prewarm of $cache $proto failed"
    grep -q "$OBJECTS succeeded, 0 failed" "$OUT/prewarm-$cache-$proto.txt" ||
      die "prewarm of $cache $proto: not every request succeeded ($OUT/prewarm-$cache-$proto.txt)"
    # shellcheck disable=SC2046
    curl -s -o /dev/null $(curl_args "$proto") "$url$BIG" || die "prewarm of $cache $proto $BIG failed"
  done
done
sleep 1
origin_before=$(wc -l < "$RUN/access.log")

results=$OUT/results.tsv
printf "proto\tcache\tbig_gbps\tsmall_rps\tsmall_gbps\tcpu_s_per_gb\n" > "$results"
for proto in $PROTOS; do
  for cache in $CACHES; do
    url=$(base_url "$cache" "$proto")
    cpu0=$(tree_cpu "${CPID[$cache]}")
    # shellcheck disable=SC2046
    h2load $(h2load_args "$proto") -n "$REPEATS" -c 1 -m 1 "$url$BIG" > "$OUT/big-$cache-$proto.txt" 2>&1 ||
      die "h2load $cache $proto $BIG failed"
    grep -q "$REPEATS succeeded, 0 failed" "$OUT/big-$cache-$proto.txt" ||
      die "h2load $cache $proto $BIG: not every request succeeded ($OUT/big-$cache-$proto.txt)"
    read -r big_secs big_body < <(h2load_totals "$OUT/big-$cache-$proto.txt")
    ((big_body == REPEATS * 67108864)) || die "$cache $proto $BIG: $big_body body bytes"
    big_gbps=$(echo "$big_body * 8 / $big_secs / 1000000000" | bc -l)
    # shellcheck disable=SC2046
    h2load $(h2load_args "$proto") -n "$REQUESTS" -c "$CONNS" -t 1 -i "$RUN/urls-$cache-$proto.txt" \
      > "$OUT/h2load-$cache-$proto.txt" 2>&1 || die "h2load $cache $proto failed"
    grep -q "$REQUESTS succeeded, 0 failed" "$OUT/h2load-$cache-$proto.txt" ||
      die "h2load $cache $proto: not every request succeeded ($OUT/h2load-$cache-$proto.txt)"
    cpu1=$(tree_cpu "${CPID[$cache]}")
    read -r secs body < <(h2load_totals "$OUT/h2load-$cache-$proto.txt")
    rps=$(echo "$REQUESTS / $secs" | bc -l)
    small_gbps=$(echo "$body * 8 / $secs / 1000000000" | bc -l)
    gb=$(echo "($big_body + $body) / 1000000000" | bc -l)
    cpu=$(echo "($cpu1 - $cpu0) / $(getconf CLK_TCK) / $gb" | bc -l)
    printf "%s\t%s\t%.2f\t%.0f\t%.2f\t%.3f\n" "$proto" "$cache" "$big_gbps" "$rps" "$small_gbps" "$cpu" >> "$results"
  done
done
origin_after=$(wc -l < "$RUN/access.log")
((origin_after == origin_before)) ||
  die "the origin was asked $((origin_after - origin_before)) times during the measured runs (misses)"

python3 - "$results" "$CACHES" > "$OUT/results.md" <<'PY'
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1]), delimiter="\t"))
caches = sys.argv[2].split()
by = {(r["proto"], r["cache"]): r for r in rows}
protos = list(dict.fromkeys(r["proto"] for r in rows))
print("| row | " + " | ".join(f"64 MiB hit {c} Gbit/s" for c in caches) + " | ratio | "
      + " | ".join(f"small {c} req/s" for c in caches) + " | ratio | "
      + " | ".join(f"{c} CPU s/GB" for c in caches) + " |")
print("|---" * (3 + 3 * len(caches)) + "|")
for p in protos:
    rs = [by[(p, c)] for c in caches]
    ratio = lambda k: f"{float(rs[0][k]) / float(rs[1][k]):.2f}x" if len(rs) > 1 and float(rs[1][k]) > 0 else "-"
    print(f"| {p} | " + " | ".join(r["big_gbps"] for r in rs) + f" | {ratio('big_gbps')} | "
          + " | ".join(r["small_rps"] for r in rs) + f" | {ratio('small_rps')} | "
          + " | ".join(r["cpu_s_per_gb"] for r in rs) + " |")
print()
for plain, tls in (("h1", "h1-tls"), ("h2c", "h2-tls")):
    if plain not in protos or tls not in protos:
        continue
    for c in caches:
        a, b = by[(plain, c)], by[(tls, c)]
        print(f"- {tls}: TLS keeps {c} at {float(b['big_gbps']) / float(a['big_gbps']):.2f}x of its "
              f"{plain} 64 MiB hit and {float(b['small_rps']) / float(a['small_rps']):.2f}x of its "
              f"{plain} small-object requests/s")
PY
cat "$OUT/env.txt" "$OUT/results.md"
