#!/usr/bin/env bash
# Runs the rdma-labelled tests for real: boots a Soft-RoCE guest (tests/rdma/rxe_vm.sh) with
# goblin-core and the test binaries of BUILD_DIR, and runs them against rxe0 there (UCX
# rc_verbs through an rdmacm listener; the verbs device inventory; ibv_devinfo as the plain
# libibverbs view), and the kTLS test (the guest's kernel has the tls module) with
# goblin-gateway. Exits with the tests' status (125: the guest could not be set up).
#   tests/rdma/run_rdma_tests.sh BUILD_DIR
set -euo pipefail
SRC=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=$(cd "${1:?usage: run_rdma_tests.sh BUILD_DIR}" && pwd)
STAGE=$(mktemp -d /tmp/goblin-rdma-stage.XXXXXX)
trap 'rm -rf "$STAGE"' EXIT
cp "$BUILD/core/goblin-core" "$BUILD/gateway/goblin-gateway" "$BUILD/tests/system/rdma_plane_test" \
  "$BUILD/tests/system/ktls_test" "$STAGE/"
[ -x "$BUILD/tests/rdma/verbs_smoke_test" ] && cp "$BUILD/tests/rdma/verbs_smoke_test" "$STAGE/"
cat > "$STAGE/guest.sh" <<'GUEST'
set -e
echo "== devices"; ibv_devinfo -d "$RDMA_DEV" 2>&1 | grep -E "hca_id|state|link_layer|active_mtu" || true
rc=0
if [ -x ./verbs_smoke_test ]; then
  echo "== verbs_smoke_test"; ./verbs_smoke_test || rc=1
fi
echo "== rdma_plane_test"
GOBLIN_CORE_BIN=/work/goblin-core ./rdma_plane_test --gtest_brief=1 || rc=1
echo "== ktls_test"
GOBLIN_CORE_BIN=/work/goblin-core GOBLIN_GATEWAY_BIN=/work/goblin-gateway ./ktls_test || rc=1
exit $rc
GUEST
exec "$SRC/tests/rdma/rxe_vm.sh" -t "${RDMA_VM_TIMEOUT:-900}" "$STAGE" sh /work/guest.sh
