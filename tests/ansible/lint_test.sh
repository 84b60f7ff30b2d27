#!/usr/bin/env bash
# The playbook's static checks: ansible-playbook --syntax-check on every inventory and
# ansible-lint (Debian's package, production profile, offline). The rendered systemd units
# are checked with systemd-analyze verify by deploy_test.sh, once the binaries they name
# are installed.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
for c in ansible-playbook ansible-lint; do
  command -v "$c" >/dev/null || { echo "SKIP: $c is not installed (scripts/install-deps.sh)"; exit 77; }
done
cd "$ROOT/ansible"
export ANSIBLE_CONFIG=$ROOT/ansible/ansible.cfg ANSIBLE_NOCOLOR=1
for inv in inventories/*/hosts.yml; do
  ansible-playbook --syntax-check -i "$inv" site.yml
done
ansible-lint --offline --profile production --nocolor site.yml roles
echo "lint test: passed"
