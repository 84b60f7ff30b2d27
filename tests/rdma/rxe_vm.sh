#!/usr/bin/env bash
# Runs a command inside a throw-away qemu guest that has a Soft-RoCE device (rdma_rxe), so
# the rdma-labelled tests exercise real verbs traffic on machines without an HCA and without
# RDMA in the host kernel. Debian's own kernel package has rdma_rxe: the script downloads it
# (apt-get download; cached), builds a busybox initramfs with the kernel modules, the RDMA
# user space (libibverbs providers, UCX transports) and the shared libraries of everything
# in HOSTDIR, and boots it under emulation (TCG). Inside: rxe0 on dummy0 (192.0.2.1/24, a
# documentation network on a device with no wire: nothing leaves the guest), an ext4 scratch
# disk on /data (O_DIRECT works there, not on the initramfs), HOSTDIR copied to /work.
#
#   tests/rdma/rxe_vm.sh [-t SECONDS] HOSTDIR COMMAND...
#
# Environment in the guest: RDMA_DEV=rxe0 RDMA_IP=192.0.2.1 TMPDIR=/data
# GOBLIN_TEST_TMPDIR=/data. Prints the guest's output; exits with the command's status,
# 124 on timeout, 125 when the harness itself failed (it says why).
# Needs: qemu-system-x86, busybox-static, cpio, kmod, e2fsprogs, ibverbs-providers,
# rdma-core's iproute2 `rdma` tool, apt access to Debian's archive (scripts/install-deps.sh).
set -euo pipefail

TIMEOUT=600
while getopts "t:" o; do
  case $o in
    t) TIMEOUT=$OPTARG ;;
    *) echo "usage: $0 [-t SECONDS] HOSTDIR COMMAND..." >&2; exit 125 ;;
  esac
done
shift $((OPTIND - 1))
[ $# -ge 2 ] || { echo "usage: $0 [-t SECONDS] HOSTDIR COMMAND..." >&2; exit 125; }
HOSTDIR=$(cd "$1" && pwd)
shift
CMD=$*

die() { echo "rxe_vm: $*" >&2; exit 125; }
CACHE=${GOBLIN_RXE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/goblin-rxe}
mkdir -p "$CACHE"
for tool in qemu-system-x86_64 cpio depmod mkfs.ext4 rdma ldconfig dpkg-deb apt-get; do
  command -v "$tool" >/dev/null || die "$tool is missing (scripts/install-deps.sh installs it)"
done
BUSYBOX=/bin/busybox
file -L "$BUSYBOX" 2>/dev/null | grep -q "statically linked" ||
  die "a static busybox is needed (apt-get install busybox-static)"
LIBDIR=/usr/lib/x86_64-linux-gnu

# ---- the kernel: the package linux-image-amd64 points at, unpacked once ----
KPKG=$(apt-cache depends linux-image-amd64 2>/dev/null | awk '/Depends: linux-image-[0-9]/ {print $2; exit}')
[ -n "$KPKG" ] || die "cannot find the kernel package linux-image-amd64 depends on"
KDIR=$CACHE/$KPKG
if [ ! -d "$KDIR/boot" ]; then
  rm -rf "$KDIR.tmp" && mkdir -p "$KDIR.tmp"
  (cd "$KDIR.tmp" && apt-get download "$KPKG" >/dev/null 2>&1) ||
    die "apt-get download $KPKG failed (no access to the Debian archive?)"
  dpkg-deb -x "$KDIR.tmp"/*.deb "$KDIR.tmp/root" || die "cannot unpack $KPKG"
  rm -rf "$KDIR" && mv "$KDIR.tmp/root" "$KDIR" && rm -rf "$KDIR.tmp"
fi
VMLINUZ=$(ls "$KDIR"/boot/vmlinuz-* | head -1)
KVER=$(basename "$VMLINUZ" | sed 's/^vmlinuz-//')
[ -f "$VMLINUZ" ] || die "no kernel image in $KDIR"

# ---- the base initramfs (busybox, modules, RDMA user space), built once per kernel ----
# (named after this script's and busybox's contents: a change rebuilds it)
STAMP=$(cat "$0" "$BUSYBOX" | sha256sum | cut -c1-12)
BASE=$CACHE/base-$KVER-$STAMP.cpio.gz
STAGE=$(mktemp -d /tmp/goblin-rxe.XXXXXX)
RUN=$(mktemp -d /tmp/goblin-rxe-run.XXXXXX)
QEMU_PID=""
cleanup() {
  [ -n "$QEMU_PID" ] && kill -KILL "$QEMU_PID" 2>/dev/null || true
  rm -rf "$STAGE" "$RUN"
}
trap cleanup EXIT

copy_with_libs() {  # copy_with_libs ROOT FILE...: files at the same path, plus their libraries
  local root=$1 f lib
  shift
  for f in "$@"; do
    [ -e "$f" ] || continue
    mkdir -p "$root$(dirname "$f")"
    rm -f "$root$f"  # never write through a busybox applet's symlink
    cp -L "$f" "$root$f"
    ldd "$f" 2>/dev/null | awk '/=> \// {print $3} /^[ \t]*\/lib/ {print $1}' | while read -r lib; do
      [ -e "$root$lib" ] && continue
      mkdir -p "$root$(dirname "$lib")"
      cp -L "$lib" "$root$lib"
    done
  done
}

if [ ! -f "$BASE" ]; then
  B=$STAGE/base
  mkdir -p "$B"/{bin,sbin,etc,proc,sys,dev,tmp,data,work,root,run,lib64}
  cp "$BUSYBOX" "$B/bin/busybox"
  for a in $("$BUSYBOX" --list); do [ -e "$B/bin/$a" ] || ln -s busybox "$B/bin/$a"; done
  # Modules: RDMA core and rxe, their crypto and tunnel helpers, dummy, ext4 on virtio, and
  # kernel TLS (kTLS for the gateway's HTTPS: tests/system/ktls_test).
  M=$KDIR/lib/modules/$KVER
  mkdir -p "$B/lib/modules/$KVER"
  (cd "$M" && find kernel/drivers/infiniband kernel/crypto kernel/lib kernel/arch \
      kernel/net/ipv4 kernel/net/ipv6 kernel/net/tls kernel/drivers/net/dummy.ko \
      kernel/fs/ext4 kernel/fs/jbd2 kernel/fs/mbcache.ko kernel/fs/configfs \
      kernel/drivers/block/virtio_blk.ko \
      kernel/drivers/virtio -name '*.ko*' 2>/dev/null | cpio -pdm --quiet "$B/lib/modules/$KVER")
  cp "$M"/modules.order "$M"/modules.builtin* "$B/lib/modules/$KVER/" 2>/dev/null || true
  depmod -b "$B" "$KVER" || die "depmod failed"
  # RDMA and UCX user space: run-time plugins are invisible to ldd, so copy them by name.
  copy_with_libs "$B" "$(readlink -f "$(command -v rdma)")" "$LIBDIR"/libibverbs/*.so \
    "$LIBDIR"/ucx/*.so.[0-9] "$LIBDIR"/libgcc_s.so.1 "$(command -v ibv_devices || true)" \
    "$(command -v ibv_devinfo || true)"
  cp -r /etc/libibverbs.d "$B/etc/" 2>/dev/null || true
  mkdir -p "$B/etc/ucx"
  # ud_verbs on rxe drops packets with this check on (UCX's own advice for Soft-RoCE).
  echo "UCX_UD_VERBS_ETH_DGID_CHECK=n" > "$B/etc/ucx/ucx.conf"
  cat > "$B/init" <<'INIT'
#!/bin/sh
export PATH=/bin:/sbin:/usr/bin:/usr/sbin
mount -t proc proc /proc; mount -t sysfs sys /sys; mount -t devtmpfs dev /dev
mkdir -p /dev/pts /dev/shm && mount -t devpts devpts /dev/pts && mount -t tmpfs shm /dev/shm
mount -t tmpfs tmp /tmp
for m in crc32_generic crc32_pclmul crc32c_generic virtio_pci virtio_blk ext4 dummy \
         ib_uverbs rdma_ucm rdma_rxe tls gcm ccm chacha20poly1305; do modprobe "$m" 2>/dev/null; done
# (modules the kernel asks for itself, e.g. a cipher for kTLS, come from busybox's modprobe)
echo /bin/modprobe > /proc/sys/kernel/modprobe
[ -e /dev/infiniband/rdma_cm ] || echo "rxe_vm: no /dev/infiniband/rdma_cm (rdma_ucm)" > /dev/console
mount -t ext4 /dev/vda /data || echo "rxe_vm: no scratch disk" > /dev/console
ip link set lo up
ip link show dummy0 >/dev/null 2>&1 || ip link add dummy0 type dummy
ip addr add 192.0.2.1/24 dev dummy0 && ip link set dummy0 up
rdma link add rxe0 type rxe netdev dummy0 || echo "rxe_vm: rdma link add failed" > /dev/console
export RDMA_DEV=rxe0 RDMA_IP=192.0.2.1 TMPDIR=/data GOBLIN_TEST_TMPDIR=/data HOME=/root
cd /work
sh /work/.rxe-cmd.sh > /dev/console 2>&1
echo "GOBLIN-RXE-EXIT=$?" > /dev/console
sync
poweroff -f
INIT
  chmod +x "$B/init"
  (cd "$B" && find . | cpio -o -H newc --quiet | gzip -1) > "$BASE.tmp" && mv "$BASE.tmp" "$BASE"
fi

# ---- this run: HOSTDIR (and its ELF files' libraries) as a second archive ----
W=$STAGE/work
mkdir -p "$W/work"
cp -a "$HOSTDIR"/. "$W/work/"
printf '%s\n' "$CMD" > "$W/work/.rxe-cmd.sh"
while IFS= read -r f; do
  if file -L "$f" | grep -q ELF; then copy_with_libs "$W" "$(readlink -f "$f")" >/dev/null 2>&1 || true; fi
done < <(find "$HOSTDIR" -type f -perm -u+x)
# Remove what was copied into the work tree itself by copy_with_libs (only libraries stay).
rm -rf "$W$HOSTDIR" 2>/dev/null || true
mkdir -p "$W/etc" && ldconfig -r "$W" 2>/dev/null || true
(cd "$W" && find . | cpio -o -H newc --quiet | gzip -1) > "$RUN/work.cpio.gz"
cat "$BASE" "$RUN/work.cpio.gz" > "$RUN/initrd.gz"

# ---- a scratch disk with ext4 (O_DIRECT for the store's tiers) ----
truncate -s 1G "$RUN/data.img"
mkfs.ext4 -q -F "$RUN/data.img" || die "mkfs.ext4 failed"

# ---- boot under emulation; the serial console is the output ----
timeout --kill-after=10 "$TIMEOUT" qemu-system-x86_64 -machine q35 -accel tcg,thread=multi \
  -cpu max -smp 2 -m 2048 -nographic -no-reboot -monitor none -serial file:"$RUN/console.log" \
  -kernel "$VMLINUZ" -initrd "$RUN/initrd.gz" \
  -append "console=ttyS0 quiet loglevel=3 panic=-1 rdinit=/init" \
  -drive file="$RUN/data.img",format=raw,if=virtio,cache=unsafe \
  -nic none > "$RUN/qemu.out" 2>&1 &
QEMU_PID=$!
rc=0
wait "$QEMU_PID" || rc=$?
QEMU_PID=""
sed -e 's/\r$//' "$RUN/console.log" | grep -v "^GOBLIN-RXE-EXIT=" || true
status=$(sed -n 's/\r$//; s/^GOBLIN-RXE-EXIT=\([0-9]*\)$/\1/p' "$RUN/console.log" | tail -1)
if [ -z "$status" ]; then
  [ "$rc" = 124 ] && { echo "rxe_vm: timed out after $TIMEOUT s" >&2; exit 124; }
  cat "$RUN/qemu.out" >&2
  die "the guest did not finish its command (qemu exit $rc)"
fi
exit "$status"
