#!/usr/bin/env bash
# Installs, from Debian 12 packages, everything Goblin's build, tests and benchmarks need.
# Idempotent and fast when everything is present: it asks dpkg first and only calls apt-get
# for what is missing. Run as root (or with sudo available).
set -euo pipefail

PKGS=(
  # toolchain and build
  build-essential cmake ninja-build ccache pkg-config git python3
  clang-16 libclang-rt-16-dev clang-tidy-16 clang-format  # clang-16: libFuzzer build, tidy
  # RDMA: rdma-core user space, Soft-RoCE provider, UCX
  libibverbs-dev librdmacm-dev ibverbs-utils ibverbs-providers rdmacm-utils
  libucx-dev ucx-utils
  # kernel interfaces
  liburing-dev libnuma-dev numactl
  # protocols and RPC
  libnghttp2-dev nghttp2-client goaccess libprotobuf-dev protobuf-compiler libgrpc++-dev protobuf-compiler-grpc
  # libraries we choose
  libfmt-dev libspdlog-dev libcli11-dev libssl-dev libxxhash-dev libcurl4-openssl-dev zlib1g-dev
  libabsl-dev  # (Swiss-table hash maps: the store index and resident heads)
  nlohmann-json3-dev  # (the membership records cores keep in etcd)
  # tests and benchmarks
  googletest libgtest-dev libgmock-dev libbenchmark-dev
  redis-server redis-tools varnish varnish-modules nginx curl wrk procps iproute2 python3-redis
  memcached libmemcached-tools python3-pymemcache prometheus  # (prometheus, promtool: the metrics tests)
  etcd-server etcd-client  # (membership: the cluster tests start their own etcd)
  libfuse3-dev fuse3  # (bench/hdd_model: a modelled spinning disk for the memcache benchmark)
  # the Soft-RoCE guest of the rdma tests (tests/rdma/rxe_vm.sh); the kernel comes from the
  # archive with apt-get download when the tests run
  qemu-system-x86 busybox-static cpio kmod e2fsprogs file
  # deployment (ansible/) and its tests: the playbook runs against sshd in network
  # namespaces (tests/ansible); the package it installs is built by CPack (dpkg-shlibdeps)
  ansible ansible-lint openssh-server openssh-client python3-apt dpkg-dev systemd
)

SUDO=
if [[ $(id -u) -ne 0 ]]; then
  command -v sudo >/dev/null || { echo "install-deps: run as root (apt-get needs it)" >&2; exit 1; }
  SUDO=sudo
fi

missing=()
for p in "${PKGS[@]}"; do
  st=$(dpkg-query -W -f='${db:Status-Status}' "$p" 2>/dev/null || true)
  [[ $st == installed ]] || missing+=("$p")
done

if ((${#missing[@]} == 0)); then
  echo "install-deps: all ${#PKGS[@]} packages present"
  exit 0
fi

echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
# Do not let package installation start services (redis, varnish, nginx) on this host:
# tests start their own instances on private ports and sockets.
policy_created=0
if [[ ! -e /usr/sbin/policy-rc.d ]]; then
  printf '#!/bin/sh\nexit 101\n' | $SUDO tee /usr/sbin/policy-rc.d >/dev/null
  $SUDO chmod 755 /usr/sbin/policy-rc.d
  policy_created=1
fi
trap '[[ $policy_created == 1 ]] && $SUDO rm -f /usr/sbin/policy-rc.d' EXIT
if ! compgen -G '/var/lib/apt/lists/*_Packages*' >/dev/null; then $SUDO apt-get update; fi
if ! $SUDO apt-get install -y --no-install-recommends "${missing[@]}"; then
  # The package lists may be stale: refresh once and retry.
  $SUDO apt-get update
  $SUDO apt-get install -y --no-install-recommends "${missing[@]}"
fi
echo "install-deps: done"
