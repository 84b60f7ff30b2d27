#!/usr/bin/env bash
# The README's run command. Installs what is needed, builds Release, starts goblin-core on a
# local unix socket with a disk tier under var/ (everything on this host), shows it answering
# over the shared-memory ring plane, stores and fetches a generated file through it, and
# leaves it running.   scripts/run.sh stop   stops it.
# State lives under var/ in the checkout: var/run/core.sock, var/run/goblin-core.pid,
# var/log/goblin-core.log, var/tier (the disk tier; kept across runs).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
sock=$root/var/run/core.sock
pidfile=$root/var/run/goblin-core.pid
log=$root/var/log/goblin-core.log
mkdir -p var/run var/log

running_pid() {
  [[ -f $pidfile ]] || return 1
  local pid; pid=$(cat "$pidfile")
  kill -0 "$pid" 2>/dev/null && [[ $(cat /proc/"$pid"/comm 2>/dev/null) == goblin-core ]] && echo "$pid"
}

if [[ ${1:-} == stop ]]; then
  if pid=$(running_pid); then
    kill -TERM "$pid"
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    echo "run: stopped goblin-core (pid $pid)"
  else
    echo "run: goblin-core is not running"
  fi
  rm -f "$pidfile"
  exit 0
fi

./scripts/install-deps.sh
echo "run: building (Release) in build/release ..."
cmake -S . -B build/release -G Ninja -DCMAKE_BUILD_TYPE=Release >build/release.configure.log 2>&1 \
  || { cat build/release.configure.log; exit 1; }
cmake --build build/release -j"$(nproc)"

if pid=$(running_pid); then
  echo "run: goblin-core already runs (pid $pid); restarting it with the fresh build"
  "$0" stop >/dev/null
fi
tier=$root/var/tier
build/release/core/goblin-core --prepare "$tier" >/dev/null  # a no-op once prepared
nohup build/release/core/goblin-core --listen-unix "$sock" --ssd-dir "$tier" --memory 256M \
  --ram-head 256K --tier-file-size 256M >"$log" 2>&1 &
echo $! >"$pidfile"
for _ in $(seq 100); do [[ -S $sock ]] && break; sleep 0.1; done
if [[ ! -S $sock ]]; then
  echo "run: goblin-core did not come up; its log:" >&2; cat "$log" >&2; exit 1
fi

echo
echo "run: asking it for three round trips over the ring plane:"
build/release/tools/goblin --target "unix:$sock" ping -c 3 -i 100ms
echo
echo "run: storing a generated 64 MiB file and reading it back:"
demo=$root/var/demo.bin
head -c $((64 << 20)) /dev/urandom >"$demo"
t0=$(date +%s%N)
build/release/tools/goblin --target "unix:$sock" put /demo/file.bin "$demo"
t1=$(date +%s%N)
build/release/tools/goblin --target "unix:$sock" get /demo/file.bin -o "$demo.back"
t2=$(date +%s%N)
cmp -s "$demo" "$demo.back" && same="byte-exact" || same="DIFFERENT (a bug: please report)"
echo "put $(( (t1 - t0) / 1000000 )) ms, get $(( (t2 - t1) / 1000000 )) ms, copy is $same"
build/release/tools/goblin --target "unix:$sock" head /demo/file.bin | sed 's/^/  /'
rm -f "$demo" "$demo.back"
cat <<MSG

goblin-core is running:
  pid          $(cat "$pidfile")
  ring plane   unix:$sock   (SBE messages on 4 KiB shared-memory rings)
  disk tier    $tier
  log          $log
Try it:        build/release/tools/goblin --target unix:$sock ping -c 10
               build/release/tools/goblin --target unix:$sock put /my/key SOME_FILE
               build/release/tools/goblin --target unix:$sock get /my/key -o COPY
Latency:       build/release/bench/ring_latency --via-core unix:$sock --cpus 0
Stop it:       scripts/run.sh stop

Not served yet (see the issues): eviction and the second disk tier, pub/sub, the HTTP
mirror gateway (goblin-store --mirror ...), the UCX plane and the gRPC admin API.
MSG
