set -e
export UCX_WARN_UNUSED_ENV_VARS=n
cd /work
echo "== rdma_plane_test"
GOBLIN_CORE_BIN=/work/goblin-core ./rdma_plane_test --gtest_brief=1 2>&1 | tail -15 || true
export UCX_TLS=rc_verbs,self UCX_NET_DEVICES=$RDMA_DEV:1
cd /data
/work/goblin-core --prepare /data/tier > /dev/null
/work/goblin-core --listen-unix /data/core.sock --ssd-dir /data/tier --memory 256M --block 256K --ram-head 256K \
  --rdma-listen $RDMA_IP:0 --rdma-max-message 1M --cores 1 --extent-size 1M --tier-file-size 64M --io-buffers 16 > /data/core.log 2>&1 &
for i in $(seq 100); do grep -q 'UCX plane listening' /data/core.log && break; sleep 0.1; done
PORT=$(sed -n 's/.*UCX plane listening on .* (port \([0-9]*\)).*/\1/p' /data/core.log)
echo "== native_objects_benchmark (rc_verbs)"
timeout 200 /work/native_objects_benchmark --target ucx://$RDMA_IP:$PORT --objects 16 --samples 300 --connections 1,2 --seconds 2 --label "native, UCX rc_verbs (Soft-RoCE, emulated)" || echo "benchmark rc=$?"
timeout 100 /work/native_objects_benchmark --target ucx://$RDMA_IP:$PORT --objects 16 --samples 50 --connections 1 --seconds 2 --window 4 --label "native, UCX rc_verbs, 4 in flight" | tail -3 || echo "benchmark rc=$?"
