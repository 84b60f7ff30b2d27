#!/usr/bin/env bash
# Revalidation meets a fill still committing: goblin-store (--keep 60s) on a disk whose every
# write takes 150 ms (bench/hdd_model's hdd_fuse), so a response the client has whole is
# still being written, then committed, while the next request for it comes. A no-cache
# object must be revalidated at every use (RFC 9111 5.2.2.4): the request right after the
# MISS meets the core's fill committing (a hit of no generation yet) and the gateway's fill
# waiting for its commit's answer; it waits for the version to be in and asks the origin
# conditionally (one more conditional request each time), never serving that version
# unvalidated. And a soft purge (PURGE with X-Purge-Soft) that comes while a cacheable
# response's version is still being written must reach that version: the next request
# revalidates it (one conditional request), the one after is a plain HIT. In --net sync and
# async, HTTP/1.1 and h2c. Exits 77 (skipped) where FUSE cannot be mounted.
# Usage: slow_commit_test.sh SOURCE_DIR BUILD_DIR
set -euo pipefail
SRC=$1
BUILD=$2
NAME=slow-commit
# shellcheck source=tests/system/fuse_disk_lib.sh
source "$SRC/tests/system/fuse_disk_lib.sh"
HTTP_PORT=$((20000 + $$ % 20000))
# The disk: every request waits 150 ms (a seek), at any bandwidth.
fuse_disk_start --mb-s=1000000 --seek-min-ms=150 --seek-max-ms=150 --rpm=1e9
curl -sf -o /dev/null "$ORIGIN/gen/1K/probe" || fail "the origin does not answer"

N=0
start_store() {  # NET
  N=$((N + 1))
  "$BUILD/tools/goblin-store" --mirror "$ORIGIN" --listen-address 127.0.0.1 \
    --http-port "$HTTP_PORT" --no-memcache --net "$1" --memory 64M --block 256K \
    --ram-head 256K --hugepages off --ssd-dir "$M/tier" --socket-dir "$T" \
    --gateway-arg=--keep=60s > "$T/store-$N.log" 2>&1 &
  STORE_PID=$!
  for _ in $(seq 300); do
    curl -s -o /dev/null --max-time 2 "http://127.0.0.1:$HTTP_PORT/gen/1K/up-$N" && break
    sleep 0.1
  done
  curl -s -o /dev/null --max-time 5 "http://127.0.0.1:$HTTP_PORT/gen/1K/up-$N" ||
    fail "goblin-store did not start"
}
conditionals() { grep -F " $1 " "$T/origin.log" | grep -c " cond$" || true; }
get() {  # PROTO PATH -> "x-cache validated-count", the body checked against the origin's
  local flags=() headers
  [ "$1" = h2 ] && flags=(--http2-prior-knowledge)
  headers=$(curl -s "${flags[@]}" --max-time 10 -D - -o "$T/body" "http://127.0.0.1:$HTTP_PORT$2") ||
    fail "GET $2 failed"
  cmp -s "$T/body" "$T/expected" || fail "GET $2: wrong bytes"
  awk 'tolower($1) == "x-cache:" {c = $2} END {gsub("\r", "", c); printf "%s", c}' <<< "$headers"
}

for NET in sync async; do
  start_store "$NET"
  for PROTO in h1 h2; do
    mode="$NET/$PROTO"
    path="/gen/70K/nc-$NET-$PROTO?cc=no-cache"
    curl -sf -o "$T/expected" "$ORIGIN$path" || fail "$mode: the origin"
    before=$(conditionals "$path")
    [ "$(get "$PROTO" "$path")" = MISS ] || fail "$mode: the first GET is not a MISS"
    for i in 1 2 3; do
      # (the first of these comes while the MISS's version is still being written)
      got=$(get "$PROTO" "$path")
      [ "$(conditionals "$path")" = $((before + i)) ] ||
        fail "$mode: use $i ($got) was not revalidated: $(conditionals "$path") conditional requests"
      [ "$got" = HIT ] || [ "$got" = REVALIDATED ] || fail "$mode: use $i: x-cache $got"
    done
    # A soft purge right after the MISS, while its version commits.
    path="/gen/70K/sp-$NET-$PROTO?cc=max-age=600"
    curl -sf -o "$T/expected" "$ORIGIN$path" || fail "$mode: the origin"
    before=$(conditionals "$path")
    [ "$(get "$PROTO" "$path")" = MISS ] || fail "$mode: soft purge: the first GET is not a MISS"
    purged=$(curl -s --max-time 10 -X PURGE -H "X-Purge-Soft: 1" "http://127.0.0.1:$HTTP_PORT$path")
    [ "$purged" = "200 Soft-purged" ] || fail "$mode: soft purge while committing: '$purged'"
    got=$(get "$PROTO" "$path")
    [ "$(conditionals "$path")" = $((before + 1)) ] ||
      fail "$mode: the GET after a soft purge ($got) was not revalidated"
    [ "$(get "$PROTO" "$path")" = HIT ] || fail "$mode: the GET after the revalidation is no HIT"
    [ "$(conditionals "$path")" = $((before + 1)) ] || fail "$mode: revalidated twice"
    echo "$mode: ok"
  done
  stop_store
done
