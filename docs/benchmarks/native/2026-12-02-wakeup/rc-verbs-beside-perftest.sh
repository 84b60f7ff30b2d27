set -e
export UCX_WARN_UNUSED_ENV_VARS=n UCX_NET_DEVICES=$RDMA_DEV:1
cd /data
echo "== ucx_perftest, UCX_TLS=rc_verbs,ud_verbs,self (ud only for the address exchange), busy-polling"
for t in "ucp_am_lat -s 16 -n 500 -w 50" "ucp_put_bw -s 262144 -n 100 -w 10"; do
  echo "-- ucx_perftest -t $t"
  UCX_TLS=rc_verbs,ud_verbs,self /work/ucx_perftest -p 13370 > /data/srv.log 2>&1 &
  S=$!
  sleep 1
  UCX_TLS=rc_verbs,ud_verbs,self timeout 100 /work/ucx_perftest $RDMA_IP -p 13370 -t $t 2>&1 | tail -1 || echo "client rc=$?"
  kill $S 2>/dev/null || true; wait $S 2>/dev/null || true
done
export UCX_TLS=rc_verbs,self
/work/goblin-core --prepare /data/tier > /dev/null
run_core() {
  /work/goblin-core --listen-unix /data/core.sock --ssd-dir /data/tier --memory 256M --block 256K --ram-head 256K \
    --rdma-listen $RDMA_IP:0 --rdma-max-message 1M --cores 1 --extent-size 1M --tier-file-size 64M --io-buffers 16 "$@" > /data/core.log 2>&1 &
  CORE=$!
  for i in $(seq 100); do grep -q 'UCX plane listening' /data/core.log && break; sleep 0.1; done
  PORT=$(sed -n 's/.*UCX plane listening on .* (port \([0-9]*\)).*/\1/p' /data/core.log)
}
run_core
echo "== goblin, shared-CPU defaults (core busy-polls 50 us then sleeps; client spins 50 us, yielding, then sleeps)"
timeout 200 /work/native_objects_benchmark --target ucx://$RDMA_IP:$PORT --objects 16 --samples 300 --connections 1,2 --seconds 2 --keep --label "goblin rc_verbs, defaults" || echo "rc=$?"
kill $CORE; wait $CORE || true
run_core --polling pause --busy-poll 10s
echo "== goblin, both sides busy-polling like ucx_perftest (core --polling pause --busy-poll 10s; client --pause-spin --spin 10s)"
timeout 200 /work/native_objects_benchmark --target ucx://$RDMA_IP:$PORT --objects 16 --samples 300 --connections 1 --seconds 2 --no-store --pause-spin --spin 10s --label "goblin rc_verbs, busy-polling" || echo "rc=$?"
kill $CORE; wait $CORE || true
