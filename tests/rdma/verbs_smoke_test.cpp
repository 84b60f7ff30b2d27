// Plain libibverbs on the RDMA device (label rdma), no UCX: two RC queue pairs on one port
// connected to each other through a RoCE v2 (IPv4) GID, or the LID on InfiniBand; an RDMA
// WRITE into the peer's registered buffer, then a SEND it receives. Skips without a device.
#include <gtest/gtest.h>
#include <infiniband/verbs.h>

#include <chrono>
#include <cstring>
#include <string>
#include <vector>

namespace {

struct Verbs {
  ibv_context* ctx = nullptr;
  ibv_pd* pd = nullptr;
  ibv_cq* cq = nullptr;
  ibv_mr* mr = nullptr;
  ibv_qp* qp[2] = {nullptr, nullptr};
  std::vector<uint8_t> mem = std::vector<uint8_t>(3 * 4096);
  ~Verbs() {
    for (ibv_qp* q : qp) {
      if (q != nullptr) ibv_destroy_qp(q);
    }
    if (mr != nullptr) ibv_dereg_mr(mr);
    if (cq != nullptr) ibv_destroy_cq(cq);
    if (pd != nullptr) ibv_dealloc_pd(pd);
    if (ctx != nullptr) ibv_close_device(ctx);
  }
};

// The first GID of the port that is an IPv4-mapped address (RoCE v2 over IPv4), or -1.
int Ipv4Gid(ibv_context* ctx, const ibv_port_attr& pa, ibv_gid* out) {
  for (int i = 0; i < pa.gid_tbl_len; ++i) {
    ibv_gid g{};
    if (ibv_query_gid(ctx, 1, i, &g) != 0) continue;
    static const uint8_t prefix[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    if (std::memcmp(g.raw, prefix, 12) == 0) {
      *out = g;
      return i;
    }
  }
  return -1;
}

TEST(VerbsSmoke, RcLoopbackWriteAndSend) {
  int n = 0;
  ibv_device** list = ibv_get_device_list(&n);
  if (list == nullptr || n == 0) {
    if (list != nullptr) ibv_free_device_list(list);
    GTEST_SKIP() << "no RDMA device (ibv_devices lists none); tests/rdma/run_rdma_tests.sh runs "
                    "this test in a Soft-RoCE guest";
  }
  const char* want = std::getenv("RDMA_DEV");
  ibv_device* dev = list[0];
  for (int i = 0; i < n && want != nullptr; ++i) {
    if (std::string(ibv_get_device_name(list[i])) == want) dev = list[i];
  }
  Verbs v;
  v.ctx = ibv_open_device(dev);
  ibv_free_device_list(list);
  ASSERT_NE(v.ctx, nullptr);
  ibv_port_attr pa{};
  ASSERT_EQ(ibv_query_port(v.ctx, 1, &pa), 0);
  if (pa.state != IBV_PORT_ACTIVE) GTEST_SKIP() << "port 1 is not ACTIVE";
  v.pd = ibv_alloc_pd(v.ctx);
  ASSERT_NE(v.pd, nullptr);
  v.cq = ibv_create_cq(v.ctx, 16, nullptr, nullptr, 0);
  ASSERT_NE(v.cq, nullptr);
  uint8_t* src = v.mem.data();
  uint8_t* dst = src + 4096;
  uint8_t* rcv = src + 8192;
  for (int i = 0; i < 4096; ++i) src[i] = static_cast<uint8_t>(i * 37 + 11);
  v.mr = ibv_reg_mr(v.pd, v.mem.data(), v.mem.size(),
                    IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ);
  ASSERT_NE(v.mr, nullptr) << std::strerror(errno);
  for (ibv_qp*& q : v.qp) {
    ibv_qp_init_attr ia{};
    ia.send_cq = v.cq;
    ia.recv_cq = v.cq;
    ia.qp_type = IBV_QPT_RC;
    ia.cap.max_send_wr = ia.cap.max_recv_wr = 8;
    ia.cap.max_send_sge = ia.cap.max_recv_sge = 1;
    q = ibv_create_qp(v.pd, &ia);
    ASSERT_NE(q, nullptr) << std::strerror(errno);
  }
  ibv_gid gid{};
  int gid_index = -1;
  if (pa.link_layer == IBV_LINK_LAYER_ETHERNET) {
    gid_index = Ipv4Gid(v.ctx, pa, &gid);
    ASSERT_GE(gid_index, 0) << "no IPv4 RoCE GID: give the device's interface an address";
  }
  for (int i = 0; i < 2; ++i) {
    ibv_qp* q = v.qp[i];
    ibv_qp_attr a{};
    a.qp_state = IBV_QPS_INIT;
    a.port_num = 1;
    a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
    ASSERT_EQ(
        ibv_modify_qp(q, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS),
        0);
    a = {};
    a.qp_state = IBV_QPS_RTR;
    a.path_mtu = pa.active_mtu;
    a.dest_qp_num = v.qp[1 - i]->qp_num;
    a.max_dest_rd_atomic = 1;
    a.min_rnr_timer = 12;
    a.ah_attr.port_num = 1;
    if (gid_index >= 0) {
      a.ah_attr.is_global = 1;
      a.ah_attr.grh.dgid = gid;
      a.ah_attr.grh.sgid_index = static_cast<uint8_t>(gid_index);
      a.ah_attr.grh.hop_limit = 1;
    } else {
      a.ah_attr.dlid = pa.lid;
    }
    ASSERT_EQ(ibv_modify_qp(q, &a,
                            IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
                                IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER),
              0)
        << std::strerror(errno);
    a = {};
    a.qp_state = IBV_QPS_RTS;
    a.timeout = 14;
    a.retry_cnt = 7;
    a.rnr_retry = 7;
    a.max_rd_atomic = 1;
    ASSERT_EQ(ibv_modify_qp(q, &a,
                            IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                                IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC),
              0)
        << std::strerror(errno);
  }
  // The receiver posts a buffer; the sender writes 4 KiB into the peer's memory, then sends.
  ibv_sge rs{reinterpret_cast<uintptr_t>(rcv), 64, v.mr->lkey};
  ibv_recv_wr rw{};
  rw.wr_id = 3;
  rw.sg_list = &rs;
  rw.num_sge = 1;
  ibv_recv_wr* bad_r = nullptr;
  ASSERT_EQ(ibv_post_recv(v.qp[1], &rw, &bad_r), 0);
  const char msg[] = "goblin over verbs";
  std::memcpy(src + 4000, msg, sizeof msg);
  ibv_sge ws{reinterpret_cast<uintptr_t>(src), 4096, v.mr->lkey};
  ibv_sge ss{reinterpret_cast<uintptr_t>(src + 4000), sizeof msg, v.mr->lkey};
  ibv_send_wr send{};
  send.wr_id = 2;
  send.sg_list = &ss;
  send.num_sge = 1;
  send.opcode = IBV_WR_SEND;
  send.send_flags = IBV_SEND_SIGNALED;
  ibv_send_wr write{};
  write.wr_id = 1;
  write.sg_list = &ws;
  write.num_sge = 1;
  write.opcode = IBV_WR_RDMA_WRITE;
  write.wr.rdma.remote_addr = reinterpret_cast<uintptr_t>(dst);
  write.wr.rdma.rkey = v.mr->rkey;
  write.next = &send;  // RC: the SEND completes after the WRITE is placed
  ibv_send_wr* bad_s = nullptr;
  ASSERT_EQ(ibv_post_send(v.qp[0], &write, &bad_s), 0);
  int got_send = 0, got_recv = 0;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while ((got_send == 0 || got_recv == 0) && std::chrono::steady_clock::now() < deadline) {
    ibv_wc wc[4];
    int k = ibv_poll_cq(v.cq, 4, wc);
    ASSERT_GE(k, 0);
    for (int i = 0; i < k; ++i) {
      ASSERT_EQ(wc[i].status, IBV_WC_SUCCESS) << ibv_wc_status_str(wc[i].status);
      if (wc[i].wr_id == 2) ++got_send;
      if (wc[i].wr_id == 3) {
        ++got_recv;
        EXPECT_EQ(wc[i].byte_len, sizeof msg);
      }
    }
  }
  ASSERT_EQ(got_send, 1);
  ASSERT_EQ(got_recv, 1);
  EXPECT_EQ(std::memcmp(dst, src, 4096), 0) << "the RDMA WRITE did not land";
  EXPECT_STREQ(reinterpret_cast<const char*>(rcv), msg);
}

}  // namespace
