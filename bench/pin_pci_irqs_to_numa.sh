#!/usr/bin/env bash
# Pins the interrupt vectors of NUMA-attached PCI devices (network, InfiniBand, NVMe) to the
# CPUs of the device's own node, the way a benchmark host is prepared so that completions
# are handled next to the memory the core uses. Devices whose numa_node is -1 (a one-node
# machine, most VMs) have no locality to honour: the script says so and changes nothing.
# Vectors already pinned are left alone, so a second run changes nothing ("0 vectors
# pinned"; the Ansible role relies on that). Installed as /usr/lib/goblin/pin_pci_irqs_to_numa.sh.
#   bench/pin_pci_irqs_to_numa.sh [--dry-run] [--class net|ib|nvme|all]   (default all)
set -euo pipefail
DRY=0
CLASS=all
while [ $# -gt 0 ]; do
  case $1 in
    --dry-run) DRY=1 ;;
    --class) CLASS=$2; shift ;;
    *) echo "usage: $0 [--dry-run] [--class net|ib|nvme|all]" >&2; exit 2 ;;
  esac
  shift
done
devices=()
want() { [ "$CLASS" = all ] || [ "$CLASS" = "$1" ]; }
want net && for d in /sys/class/net/*/device; do [ -e "$d" ] && devices+=("$(readlink -f "$d")"); done
want ib && for d in /sys/class/infiniband/*/device; do [ -e "$d" ] && devices+=("$(readlink -f "$d")"); done
want nvme && for d in /sys/class/nvme/*/device; do [ -e "$d" ] && devices+=("$(readlink -f "$d")"); done
pinned=0
for dev in $(printf '%s\n' "${devices[@]}" | sort -u); do
  # virtio: the class device's parent is the PCI function that owns the vectors.
  if [ ! -d "$dev/msi_irqs" ] && [ -d "$dev/../msi_irqs" ]; then dev=$(readlink -f "$dev/.."); fi
  if [ ! -d "$dev/msi_irqs" ] && [ ! -f "$dev/irq" ]; then
    echo "pin-irqs: $(basename "$dev"): no interrupt vectors of its own: skipped"
    continue
  fi
  node=$(cat "$dev/numa_node" 2>/dev/null || echo -1)
  name=$(basename "$dev")
  if [ "$node" -lt 0 ]; then
    echo "pin-irqs: $name: no NUMA node (numa_node = -1): nothing to pin"
    continue
  fi
  cpus=$(cat "/sys/devices/system/node/node$node/cpulist")
  irqs=$(ls "$dev/msi_irqs" 2>/dev/null || cat "$dev/irq")
  for irq in $irqs; do
    [ -e "/proc/irq/$irq/smp_affinity_list" ] || continue
    if [ "$(cat "/proc/irq/$irq/smp_affinity_list" 2>/dev/null)" = "$cpus" ]; then
      echo "pin-irqs: $name irq $irq -> CPUs $cpus (node $node) already"
    elif [ "$DRY" = 1 ]; then
      echo "pin-irqs: $name irq $irq -> CPUs $cpus (node $node) [dry run]"
    elif echo "$cpus" > "/proc/irq/$irq/smp_affinity_list" 2>/dev/null; then
      echo "pin-irqs: $name irq $irq -> CPUs $cpus (node $node)"
      pinned=$((pinned + 1))
    else
      echo "pin-irqs: $name irq $irq: the kernel refused (managed interrupt): left as is"
    fi
  done
done
if [ "${#devices[@]}" = 0 ]; then
  echo "pin-irqs: no network, InfiniBand or NVMe PCI devices here: nothing to pin"
fi
echo "pin-irqs: $pinned vectors pinned"
