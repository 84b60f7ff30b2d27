#!/bin/bash
# 8 MiB puts and gets over the ring plane (unix:), N each, quiet and then beside two CPU hogs
# (`yes`); B=build dir. Prints wall seconds per operation.
set -u
B=${B:-/work/main/build/release}; N=${N:-3}
RUN=$(mktemp -d /tmp/putload.XXXX)
"$B"/core/goblin-core --prepare "$RUN"/tier >/dev/null 2>&1
"$B"/core/goblin-core --listen-unix "$RUN"/c.sock --ssd-dir "$RUN"/tier --memory 64M --block 8M \
  --ram-head 8M --extent-size 1M --tier-file-size 256M --cores 1 > "$RUN"/core.log 2>&1 &
CORE=$!
for _ in $(seq 100); do [ -S "$RUN"/c.sock ] && break; sleep 0.1; done
head -c 8388608 /dev/zero | tr '\0' z > "$RUN"/z.bin
op() {  # label, then put/get
  local t0 t1
  t0=$(date +%s.%N)
  if [ "$2" = put ]; then
    "$B"/tools/goblin --target unix:"$RUN"/c.sock put "k$3" "$RUN"/z.bin > /dev/null
  else
    "$B"/tools/goblin --target unix:"$RUN"/c.sock get "k$3" > /dev/null
  fi
  t1=$(date +%s.%N)
  echo "$1 $2 $(echo "$t1 - $t0" | bc)"
}
for i in $(seq "$N"); do op quiet put "$i"; done
for i in $(seq "$N"); do op quiet get "$i"; done
yes > /dev/null & Y1=$!
yes > /dev/null & Y2=$!
sleep 1
for i in $(seq "$N"); do op hogs put "$((i + N))"; done
for i in $(seq "$N"); do op hogs get "$((i + N))"; done
kill $Y1 $Y2
kill $CORE; wait $CORE 2>/dev/null; rm -rf "$RUN"
