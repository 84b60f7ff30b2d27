#!/usr/bin/env bash
# Where a running process lives: for every thread its name, allowed CPUs and the CPU it last
# ran on; the process's memory policy and, per mapping, the pages on each NUMA node
# (/proc/PID/numa_maps: the head pool, rings and I/O buffers are named memfds); its io_uring
# instances (fdinfo: SqThread / SqThreadCpu when SQPOLL is used); and the NUMA node of the
# machine's network and storage devices, to compare with.
#   bench/audit_process_numa.sh PID        (e.g. $(pgrep -x goblin-core))
set -euo pipefail
PID=${1:?usage: audit_process_numa.sh PID}
[ -d "/proc/$PID" ] || { echo "audit: no process $PID" >&2; exit 1; }
echo "# process $PID: $(tr '\0' ' ' < "/proc/$PID/cmdline")"
echo "# nodes: $(ls -d /sys/devices/system/node/node[0-9]* 2>/dev/null | xargs -n1 basename | tr '\n' ' ')"
for n in /sys/devices/system/node/node[0-9]*; do
  echo "#   $(basename "$n"): cpus $(cat "$n/cpulist")"
done
echo
echo "## threads (tid name allowed-cpus last-cpu)"
for t in /proc/"$PID"/task/*; do
  tid=$(basename "$t")
  name=$(cat "$t/comm")
  allowed=$(awk '/^Cpus_allowed_list/ {print $2}' "$t/status")
  last=$(awk '{print $39}' "$t/stat")
  printf '%-8s %-16s %-12s %s\n' "$tid" "$name" "$allowed" "$last"
done
echo
echo "## memory policy"
awk '/^Mems_allowed_list/ {print "mems allowed: " $2}' "/proc/$PID/status"
echo
echo "## mappings by node (numa_maps; pages N<node>=<count>, largest first)"
if [ -r "/proc/$PID/numa_maps" ]; then
  awk '{
    pages = 0; nodes = ""; file = "[anon]"; policy = $2
    for (i = 3; i <= NF; i++) {
      if ($i ~ /^N[0-9]+=/) { split($i, kv, "="); pages += kv[2]; nodes = nodes " " $i }
      else if ($i ~ /^file=/) file = substr($i, 6)
      else if ($i ~ /^(heap|stack|huge)$/) file = "[" $i "]"
    }
    if (pages > 0) printf "%10d pages  %-10s %-24s %s\n", pages, policy, nodes, file
  }' "/proc/$PID/numa_maps" | sort -rn | head -25
else
  echo "(numa_maps unavailable: kernel without NUMA support)"
fi
echo
echo "## io_uring instances"
found=0
for fd in /proc/"$PID"/fd/*; do
  if [ "$(readlink "$fd" 2>/dev/null)" = "anon_inode:[io_uring]" ]; then
    found=1
    info=/proc/$PID/fdinfo/$(basename "$fd")
    echo "fd $(basename "$fd"): $(grep -E '^(SqThread|SqThreadCpu|SqEntries|CqEntries|SqMask)' "$info" 2>/dev/null | tr '\n' ' ')"
  fi
done
[ "$found" = 1 ] || echo "(none)"
echo
echo "## devices and their NUMA node"
for d in /sys/class/net/* /sys/class/infiniband/* /sys/block/*; do
  [ -e "$d/device" ] || continue
  node=$(cat "$d/device/numa_node" 2>/dev/null || echo "?")
  echo "$(basename "$d"): node $node"
done
