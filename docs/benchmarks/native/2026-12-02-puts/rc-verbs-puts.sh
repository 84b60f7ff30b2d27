# Guest script (tests/rdma/rxe_vm.sh, x86-64-v2 build): puts of 32 MiB over rc_verbs, from
# memory (by reference: the core pulls each 1 MiB piece with an RDMA READ) and streamed from
# a source (copied into eager messages), in turns; then the core's own count of the pieces
# it pulled. HOSTDIR holds goblin-core and native_benchmark.
set -e
export UCX_WARN_UNUSED_ENV_VARS=n UCX_NET_DEVICES=$RDMA_DEV:1 UCX_TLS=rc_verbs,self
cd /data
/work/goblin-core --prepare /data/tier > /dev/null
/work/goblin-core --listen-unix /data/core.sock --ssd-dir /data/tier --memory 256M --block 256K --ram-head 256K \
  --rdma-listen $RDMA_IP:0 --rdma-max-message 1M --cores 1 --extent-size 1M --tier-file-size 64M --io-buffers 16 > /data/core.log 2>&1 &
CORE=$!
for i in $(seq 100); do grep -q 'UCX plane listening' /data/core.log && break; sleep 0.1; done
PORT=$(sed -n 's/.*UCX plane listening on .* (port \([0-9]*\)).*/\1/p' /data/core.log)
timeout 300 /work/native_benchmark --target ucx://$RDMA_IP:$PORT --head-size 256K --size 32M --samples 20 --repeats 1 --put-repeats 4 --label "rc_verbs" || echo "rc=$?"
kill $CORE; wait $CORE || true
grep "UCX plane:" /data/core.log
