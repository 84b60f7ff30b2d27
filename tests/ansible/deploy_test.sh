#!/usr/bin/env bash
# A real deployment with ansible/site.yml on this machine: three network namespaces (core,
# gateway, client hosts with their own addresses) joined by veth pairs to a bridge in a
# fourth, sshd in each, and the playbook run from the client namespace against them (the
# services run in supervisor mode: systemd is not PID 1 in a namespace). The package is the
# one CPack builds from BUILD_DIR. Then, from the client namespace: an HTTP GET through the
# gateway and a native get over UCX tcp return the origin's bytes; RESP needs the password
# and the admin TCP listener the token (both came from variables); the rendered systemd
# units pass `systemd-analyze verify`; a second run and a --check run report changed=0; a
# changed gateway setting restarts the gateway only; a foreign directory named as a tier
# stops the play and is left untouched. Everything is torn down afterwards
# (the package is removed again if it was not installed before).
#   tests/ansible/deploy_test.sh BUILD_DIR        (root; exit 77 = skipped)
# The namespaces share this machine's file system: the gateway reaches the core's ring
# socket through it (on real hosts the gateway runs on a core host) and one dpkg database,
# so package tasks run one host at a time (goblin_package_throttle: 1); the rest in parallel.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=$(cd "${1:?usage: deploy_test.sh BUILD_DIR}" && pwd)
skip() { echo "SKIP: $*"; exit 77; }
[ "$(id -u)" = 0 ] || skip "needs root (network namespaces, sshd, dpkg)"
for c in ip ansible-playbook ssh-keygen cpack curl redis-cli systemd-analyze start-stop-daemon; do
  command -v "$c" >/dev/null || skip "$c is not installed (scripts/install-deps.sh)"
done
[ -x /usr/sbin/sshd ] || skip "sshd is not installed (openssh-server)"
probe=gbprobe$$
ip netns add "$probe" 2>/dev/null || skip "cannot create network namespaces here"
ip netns del "$probe"

ID=$(( $$ % 200 + 20 ))
NET=10.231.$ID
FAB=gbfab$ID CORE=gbcore$ID GW=gbgw$ID CLI=gbcli$ID CORE2=gbcoreb$ID CORE3=gbcorec$ID
W=$(mktemp -d /tmp/goblin-deploy.XXXXXX)
had_package=0
dpkg-query -W -f='${Status}' goblin 2>/dev/null | grep -q "install ok installed" && had_package=1
made_privsep=0
PIDS=()

cleanup() {
  local rc=$?
  set +e
  if [ -x /usr/lib/goblin/goblin-service ]; then
    for d in "$W" "$W/h2" "$W/h3"; do
      for s in goblin-gateway goblin-core etcd; do
        [ -f "$d/run/$s.pid" ] || continue
        GOBLIN_RUN_DIR=$d/run GOBLIN_LOG_DIR=$d/log /usr/lib/goblin/goblin-service stop "$s" >/dev/null
      done
    done
  fi
  for f in "$W"/ssh/sshd-*.pid; do [ -f "$f" ] && kill "$(cat "$f")" 2>/dev/null; done
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null; done
  # Everything still running in the namespaces: ssh sessions (ansible's ControlPersist
  # masters and the sshd processes serving them), anything a role started.
  for ns in $CORE $CORE2 $CORE3 $GW $CLI $FAB; do
    pids=$(ip netns pids "$ns" 2>/dev/null)
    [ -n "$pids" ] && kill $pids 2>/dev/null
  done
  sleep 0.2
  for ns in $CORE $CORE2 $CORE3 $GW $CLI $FAB; do
    pids=$(ip netns pids "$ns" 2>/dev/null)
    [ -n "$pids" ] && kill -9 $pids 2>/dev/null
    ip netns del "$ns" 2>/dev/null
  done
  [ "$had_package" = 0 ] && dpkg -P goblin >/dev/null 2>&1
  [ "$made_privsep" = 1 ] && rmdir /run/sshd 2>/dev/null
  if [ $rc -ne 0 ]; then
    phase "deploy test failed (rc $rc); logs:"
    for f in "$W"/log/*.log "$W"/h*/log/*.log "$W"/ssh/sshd-*.log; do [ -f "$f" ] && { echo "-- $f"; tail -n 30 "$f"; }; done
  fi
  [ "${KEEP:-0}" = 1 ] || rm -rf "$W"
  exit $rc
}
trap cleanup EXIT
in_ns() { local ns=$1; shift; ip netns exec "$ns" "$@"; }
fail() { echo "FAIL: $*" >&2; exit 1; }
phase() { echo "== $* [${SECONDS} s]"; }  # (how long the test has run: where the time goes)

phase "package (cpack in $BUILD)"
rm -f "$BUILD"/goblin_*.deb
(cd "$BUILD" && cpack -G DEB >"$W/cpack.log" 2>&1) || { cat "$W/cpack.log"; fail "cpack"; }
DEB=$(ls "$BUILD"/goblin_*.deb)
echo "   $DEB"

phase "network: $FAB (bridge) + $CORE $NET.11, $GW $NET.12, $CLI $NET.13"
ip netns add "$FAB"
ip -n "$FAB" link add br0 type bridge
ip -n "$FAB" link set br0 up
ports=0
add_host() {  # namespace, last byte of its address: a host on the bridge
  local ns=$1 last=$2
  ports=$((ports + 1))
  ip netns add "$ns"
  ip -n "$FAB" link add "port$ports" type veth peer name gb0 netns "$ns"
  ip -n "$FAB" link set "port$ports" master br0 up
  ip -n "$ns" addr add "$NET.$last/24" dev gb0
  ip -n "$ns" link set gb0 up
  ip -n "$ns" link set lo up
}
for pair in "$CORE:11" "$GW:12" "$CLI:13"; do add_host "${pair%%:*}" "${pair##*:}"; done

phase "sshd in each namespace"
mkdir -p "$W/ssh"
ssh-keygen -q -t ed25519 -N '' -f "$W/ssh/host_ed25519"
ssh-keygen -q -t ed25519 -N '' -f "$W/ssh/id_ed25519"
cp "$W/ssh/id_ed25519.pub" "$W/ssh/authorized_keys"
[ -d /run/sshd ] || { mkdir -p /run/sshd; made_privsep=1; }
# SHLVL=1 in every session: bash sources ~/.bashrc for a command sshd runs (Debian builds it
# so) unless it is a nested shell, and these "hosts" share this machine's /root, whose
# .bashrc may be a developer's (pyenv init took a second per command on the machine this
# was measured on; ansible runs several commands per task: 711 s alone instead of 317).
start_sshd() {  # namespace, last byte of its address
  local ns=$1 last=$2
  cat >"$W/ssh/sshd-$ns.conf" <<EOF
ListenAddress $NET.$last
Port 22
HostKey $W/ssh/host_ed25519
PidFile $W/ssh/sshd-$ns.pid
AuthorizedKeysFile $W/ssh/authorized_keys
PermitRootLogin prohibit-password
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
StrictModes no
Subsystem sftp /usr/lib/openssh/sftp-server
SetEnv SHLVL=1
EOF
  in_ns "$ns" /usr/sbin/sshd -f "$W/ssh/sshd-$ns.conf" -E "$W/ssh/sshd-$ns.log"
}
for pair in "$CORE:11" "$GW:12" "$CLI:13"; do start_sshd "${pair%%:*}" "${pair##*:}"; done

phase "origin in $CLI"
mkdir -p "$W/files"
head -c 3000000 /dev/urandom >"$W/files/verify.bin"
ip netns exec "$CLI" /usr/bin/python3 "$ROOT/tests/support/test_origin.py" --host "$NET.13" --port 18080 \
  --files "$W/files" --log "$W/origin.log" >"$W/origin.out" 2>&1 &
PIDS+=($!)
for _ in $(seq 100); do grep -q "test origin on" "$W/origin.out" 2>/dev/null && break; sleep 0.1; done

TOKEN=deploy-test-admin-token-0123456789
cat >"$W/inventory.yml" <<EOF
all:
  vars:
    ansible_user: root
    ansible_ssh_private_key_file: $W/ssh/id_ed25519
    ansible_ssh_common_args: -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null -o LogLevel=ERROR
    ansible_python_interpreter: /usr/bin/python3
    goblin_package_file: $DEB
    goblin_package_cache_dir: $W/cache
    goblin_package_throttle: 1
    goblin_service_manager: supervisor
    goblin_etc_dir: $W/etc
    goblin_run_dir: $W/run
    goblin_log_dir: $W/log
    goblin_unit_dir: $W/units
    goblin_sysctl_file: $W/etc/sysctl.conf
    goblin_sysctls: {net.core.somaxconn: 4096}
    goblin_limits_file: $W/etc/limits.conf
    goblin_common_packages: [numactl, iproute2, python3-apt]
    goblin_ucx_env: {UCX_TLS: tcp, UCX_NET_DEVICES: gb0, UCX_WARN_UNUSED_ENV_VARS: n}
    goblin_verify_dir: $W/verify
    goblin_verify_path: /files/verify.bin
    goblin_admin_token: $TOKEN
  children:
    goblin_core:
      hosts:
        core1:
          ansible_host: $NET.11
          goblin_core_ucx_listen: $NET.11:13400
          goblin_admin_listen: $NET.11:7443
          goblin_ssd_dir: $W/tier
          goblin_memory: 64M
          goblin_tier_file_size: 64M
    goblin_gateway:
      hosts:
        gw1:
          ansible_host: $NET.12
          goblin_gateway_listen_address: $NET.12
          goblin_mirror_origin: http://$NET.13:18080
          goblin_gateway_resp_port: 16379
          goblin_resp_password: resp-secret-42
    goblin_client:
      hosts:
        cli1:
          ansible_host: $NET.13
EOF
play() {  # log name, extra args...
  local log=$W/$1.log
  shift
  (cd "$ROOT/ansible" && in_ns "$CLI" env ANSIBLE_CONFIG="$ROOT/ansible/ansible.cfg" \
    ANSIBLE_FORCE_COLOR=0 ANSIBLE_NOCOLOR=1 \
    ansible-playbook -i "$W/inventory.yml" -f 5 site.yml "$@") >"$log" 2>&1
}
recap_changed() {  # the sum of changed= in a run's PLAY RECAP
  sed -n '/PLAY RECAP/,$p' "$1" | grep -o 'changed=[0-9]*' | cut -d= -f2 | awk '{s += $1} END {print s + 0}'
}

phase "first run"
play run1 || { tail -n 60 "$W/run1.log"; fail "the first playbook run failed"; }
sed -n '/PLAY RECAP/,$p' "$W/run1.log"

phase "checks from $CLI"
in_ns "$CLI" curl -sf -o "$W/http.bin" "http://$NET.12:8080/files/verify.bin" || fail "HTTP GET through the gateway"
cmp "$W/files/verify.bin" "$W/http.bin" || fail "HTTP bytes differ from the origin's"
in_ns "$CLI" env UCX_TLS=tcp UCX_NET_DEVICES=gb0 UCX_WARN_UNUSED_ENV_VARS=n \
  /usr/bin/goblin --target "ucx://$NET.11:13400" get "$NET.12:8080/files/verify.bin" -o "$W/native.bin" \
  || fail "native get over UCX tcp"
cmp "$W/files/verify.bin" "$W/native.bin" || fail "native bytes differ from the origin's"
[ "$(grep -c ' /files/verify.bin ' "$W/origin.log")" = 1 ] || fail "the origin was asked more than once"
out=$(in_ns "$CLI" redis-cli -h "$NET.12" -p 16379 ping 2>&1)
[[ $out == *NOAUTH* ]] || fail "RESP without the password: $out"
out=$(in_ns "$CLI" redis-cli -h "$NET.12" -p 16379 --no-auth-warning -a resp-secret-42 ping 2>&1)
[ "$out" = PONG ] || fail "RESP with the password: $out"
in_ns "$CLI" /usr/bin/goblinctl --target "$NET.11:7443" health >/dev/null 2>&1 && fail "admin TCP without the token"
out=$(in_ns "$CLI" env GOBLIN_ADMIN_TOKEN=$TOKEN /usr/bin/goblinctl --target "$NET.11:7443" health)
[ "$out" = SERVING ] || fail "admin TCP with the token: $out"
systemd-analyze verify "$W/units/goblin-core.service" "$W/units/goblin-gateway.service" \
  >"$W/verify-units.log" 2>&1 || { cat "$W/verify-units.log"; fail "systemd-analyze verify"; }
echo "   HTTP, native UCX, RESP AUTH, admin token and systemd units: ok"

phase "second run (idempotent)"
core_pid=$(cat "$W/run/goblin-core.pid") gw_pid=$(cat "$W/run/goblin-gateway.pid")
play run2 || { tail -n 60 "$W/run2.log"; fail "the second run failed"; }
sed -n '/PLAY RECAP/,$p' "$W/run2.log"
[ "$(recap_changed "$W/run2.log")" = 0 ] || { grep -B3 '^changed' "$W/run2.log"; fail "the second run changed something"; }
[ "$(cat "$W/run/goblin-core.pid")" = "$core_pid" ] || fail "the second run restarted goblin-core"

phase "check mode"
play check --check || { tail -n 60 "$W/check.log"; fail "the --check run failed"; }
[ "$(recap_changed "$W/check.log")" = 0 ] || { grep -B3 '^changed' "$W/check.log"; fail "--check reports changes"; }

phase "a gateway setting changes: only the gateway restarts"
play run3 -e '{"goblin_gateway_extra_args": ["--idle-timeout", "2m"]}' \
  || { tail -n 60 "$W/run3.log"; fail "the third run failed"; }
[ "$(cat "$W/run/goblin-core.pid")" = "$core_pid" ] || fail "a gateway change restarted goblin-core"
[ "$(cat "$W/run/goblin-gateway.pid")" != "$gw_pid" ] || fail "the gateway was not restarted"
grep -q -- "--idle-timeout 2m" "$W/etc/goblin-gateway.env" || fail "the gateway's arguments were not rewritten"
in_ns "$CLI" curl -sf -o "$W/http2.bin" "http://$NET.12:8080/files/verify.bin" || fail "HTTP after the restart"
cmp "$W/files/verify.bin" "$W/http2.bin" || fail "HTTP bytes after the restart"
phase "a foreign directory named as a tier: the play stops, the directory is untouched"
mkdir -p "$W/foreign"
echo "someone else's data" >"$W/foreign/precious"
if play run4 --limit core1 -e "{\"goblin_hdd_dir\": \"$W/foreign\"}"; then
  fail "the play accepted a foreign directory as a tier"
fi
grep -q "is not empty and is not a Goblin tier" "$W/run4.log" || { tail -n 30 "$W/run4.log"; fail "no clear error"; }
[ "$(cat "$W/foreign/precious")" = "someone else's data" ] && [ "$(ls "$W/foreign")" = precious ] \
  || fail "the foreign directory was changed"
[ "$(cat "$W/run/goblin-core.pid")" = "$core_pid" ] || fail "the refused run restarted goblin-core"

phase "the fabric: two more core hosts ($CORE2 $NET.14, $CORE3 $NET.15), etcd on the three"
# Each core host gets its own directories (the namespaces share one file system); the
# gateway routes every key to its owner over UCX tcp (?ring=off: on real hosts the cores'
# ring sockets are not on the gateway's host; here they would be).
for pair in "$CORE2:14" "$CORE3:15"; do
  add_host "${pair%%:*}" "${pair##*:}"
  start_sshd "${pair%%:*}" "${pair##*:}"
done
ETCD=etcd://$NET.11:2379,$NET.14:2379,$NET.15:2379/goblin
core_host() {  # inventory entry of core host N (1: the first run's core, its directories kept)
  local n=$1 addr=$NET.11 d=$W/h$1
  [ "$n" = 1 ] || addr=$NET.$((12 + n))
  echo "        core$n:"
  echo "          ansible_host: $addr"
  echo "          goblin_core_ucx_listen: $addr:13400"
  echo "          goblin_memory: 64M"
  echo "          goblin_tier_file_size: 64M"
  echo "          goblin_etcd_ttl: 3s"
  echo "          goblin_etcd_env_file: $d/etcd.env"
  echo "          goblin_etcd_data_dir: $d/etcd"
  if [ "$n" = 1 ]; then
    echo "          goblin_ssd_dir: $W/tier"
    echo "          goblin_admin_listen: $NET.11:7443"
  else
    echo "          goblin_ssd_dir: $d/tier"
    for v in etc run log units verify; do
      [ "$v" = units ] && echo "          goblin_unit_dir: $d/units" && continue
      echo "          goblin_${v}_dir: $d/$v"
    done
  fi
}
mkdir -p "$W/h1" "$W/h2" "$W/h3"
cp "$W/inventory.yml" "$W/inventory-one.yml"
{
  sed -n '1,/^    goblin_core:/p' "$W/inventory-one.yml"
  echo "      hosts:"
  for n in 1 2 3; do core_host "$n"; done
  sed -n '/^    goblin_gateway:/,$p' "$W/inventory-one.yml" |
    sed "s|^\( *\)goblin_mirror_origin:.*|&\n\1goblin_gateway_core: $ETCD?ring=off|"
} >"$W/inventory.yml"
# (the client host has nothing to change: its checks are the ones below)
play fabric --limit 'goblin_core:goblin_gateway' || { tail -n 80 "$W/fabric.log"; fail "the fabric run failed"; }
sed -n '/PLAY RECAP/,$p' "$W/fabric.log"
ucx_env=(env UCX_TLS=tcp UCX_NET_DEVICES=gb0 UCX_WARN_UNUSED_ENV_VARS=n)
members=$(in_ns "$CLI" "${ucx_env[@]}" /usr/bin/goblin --target "$ETCD?ring=off" members)
for n in 1 2 3; do
  grep -q "^core$n " <<<"$members" || fail "core$n is not registered in etcd: $members"
done
echo "   registered in etcd: $(awk '{print $1}' <<<"$members" | tr '\n' ' ')"
for f in $(seq 1 24); do head -c $((f * 40000)) /dev/urandom >"$W/files/fab-$f.bin"; done
for f in $(seq 1 24); do
  in_ns "$CLI" curl -sf -o "$W/fab.bin" "http://$NET.12:8080/files/fab-$f.bin" || fail "GET fab-$f through the gateway"
  cmp -s "$W/files/fab-$f.bin" "$W/fab.bin" || fail "fab-$f: HTTP bytes differ from the origin's"
done
sleep 1  # (the gateway commits each object just after its last byte went out)
for f in 1 7 24; do
  in_ns "$CLI" "${ucx_env[@]}" /usr/bin/goblin --target "$ETCD?ring=off" get \
    "$NET.12:8080/files/fab-$f.bin" -o "$W/fab-native.bin" || fail "native get of fab-$f over etcd://"
  cmp -s "$W/files/fab-$f.bin" "$W/fab-native.bin" || fail "fab-$f: native bytes differ"
done
for n in 1 2 3; do
  run=$W/run
  [ "$n" = 1 ] || run=$W/h$n/run
  objects=$(/usr/bin/goblinctl --target "unix:$run/core.sock.admin" stats | awk '$1 == "objects" {print $2}')
  [ "${objects:-0}" -ge 1 ] || fail "core$n holds no object: the gateway does not route by etcd"
  echo "   core$n: $objects objects"
done
for f in $(seq 1 24); do
  [ "$(grep -c " /files/fab-$f.bin " "$W/origin.log")" = 1 ] || fail "fab-$f: the origin was asked more than once"
done
echo "   24 objects through the gateway over UCX, spread over three cores, each fetched once: ok"
echo "deploy test: passed [${SECONDS} s]"
