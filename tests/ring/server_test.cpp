#include "goblin/ring/server.h"

#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <thread>

#include "goblin/common/clock.h"
#include "goblin/reactor/loop.h"
#include "goblin/ring/client.h"
#include "goblin/ring/unix_socket.h"
#include "goblin/wire/goblin_wire.h"

namespace goblin::ring {
namespace {

using namespace std::chrono_literals;

// Short paths under /tmp: sun_path holds 107 bytes, a deep scratch directory may not fit.
std::string TestSocket(const char* tag) {
  return fmt::format("/tmp/gbt-ring-{}-{}.sock", tag, getpid());
}

// Answers Ping with Pong; on a Publish, floods the sender with `flood` Pongs of 1 KiB.
using reactor::Session;

class EchoHandler : public reactor::Handler {
 public:
  void OnOpen(Session&) override { ++opened; }
  void OnClose(Session&) override { ++closed; }
  void OnMessage(Session& s, std::span<const uint8_t> msg) override {
    sbe::MessageHeader h;
    ASSERT_TRUE(sbe::MessageHeader::Read(msg, &h));
    if (h.template_id == wire::PingDecoder::kTemplateId) {
      auto ping = wire::PingDecoder::Decode(msg);
      ASSERT_TRUE(ping);
      uint8_t buf[512];
      wire::PongEncoder pong(buf, sizeof buf);
      pong.set_correlation_id(ping->correlation_id())
          .set_send_nanos(ping->send_nanos())
          .set_payload(ping->payload());
      last = s.Send({buf, pong.Finish()});
    } else if (h.template_id == wire::PublishDecoder::kTemplateId) {
      std::vector<uint8_t> buf(1200);
      std::string body(1024, 'x');
      outcomes.clear();
      for (int i = 0; i < flood; ++i) {
        wire::PongEncoder pong(buf.data(), buf.size());
        pong.set_correlation_id(static_cast<uint64_t>(i)).set_payload(body);
        outcomes.push_back(s.Send({buf.data(), pong.Finish()}));
      }
    }
  }
  std::atomic<int> opened{0}, closed{0};
  SendOutcome last = SendOutcome::kSent;
  std::vector<SendOutcome> outcomes;
  int flood = 0;
};

// The ring plane on a reactor loop of its own thread, as a core shard runs it.
struct ServerThread {
  explicit ServerThread(ServerOptions o, reactor::LoopOptions lo = {}) {
    auto s = RingServer::Listen(o, &handler);
    EXPECT_TRUE(s) << s.error().ToString();
    server = std::move(*s);
    auto l = reactor::Loop::Create(lo, &handler);
    EXPECT_TRUE(l);
    loop = std::move(*l);
    EXPECT_TRUE(loop->AddSource(server.get()));
    thread = std::thread([this] { EXPECT_TRUE(loop->Run()); });
  }
  ~ServerThread() { StopAndJoin(); }
  void StopAndJoin() {
    if (!thread.joinable()) return;
    loop->Stop();
    thread.join();
  }
  EchoHandler handler;
  std::unique_ptr<RingServer> server;
  std::unique_ptr<reactor::Loop> loop;
  std::thread thread;
};

size_t EncodePing(uint8_t* buf, size_t cap, uint64_t id, std::string_view payload = {}) {
  wire::PingEncoder e(buf, cap);
  return e.set_correlation_id(id).set_send_nanos(MonotonicNanos()).set_payload(payload).Finish();
}

// Sends a ping and waits for its pong; returns the pong's correlation id.
uint64_t PingPong(RingClient& c, uint64_t id) {
  uint8_t buf[256];
  size_t n = EncodePing(buf, sizeof buf, id, "payload");
  EXPECT_TRUE(c.Send({buf, n}, 5s));
  uint64_t got = 0;
  for (int tries = 0; tries < 100 && got == 0; ++tries) {
    auto w = c.Wait(5s);
    EXPECT_TRUE(w) << w.error().ToString();
    if (!w) return 0;
    auto r = c.Poll([&](std::span<const uint8_t> m) {
      auto pong = wire::PongDecoder::Decode(m);
      EXPECT_TRUE(pong);
      if (pong) {
        got = pong->correlation_id();
        EXPECT_EQ(pong->payload(), "payload");
      }
    });
    EXPECT_TRUE(r);
  }
  return got;
}

TEST(RingServer, ClientsPingPong) {
  ServerOptions o;
  o.socket_path = TestSocket("pingpong");
  ServerThread st(o);
  auto a = RingClient::Connect(o.socket_path, {.name = "a"});
  auto b = RingClient::Connect(o.socket_path, {.ring_bytes = 8192, .name = "b"});
  ASSERT_TRUE(a) << a.error().ToString();
  ASSERT_TRUE(b) << b.error().ToString();
  EXPECT_NE((*a)->client_id(), (*b)->client_id());
  EXPECT_EQ((*a)->ring_bytes(), 4096u);
  EXPECT_EQ((*b)->ring_bytes(), 8192u);
  EXPECT_EQ((*a)->server_pid(), static_cast<uint32_t>(getpid()));
  EXPECT_EQ((*a)->server_name(), "goblin-core");
  for (uint64_t i = 1; i <= 2000; ++i) {
    ASSERT_EQ(PingPong(**a, i), i);
    ASSERT_EQ(PingPong(**b, i + 100000), i + 100000);
  }
}

// A client that never sleeps still rings a server that does (a regression: the client's
// busy mode once suppressed its doorbells, and the sleeping server never woke).
TEST(RingServer, BusyPollingClientWakesASleepingServer) {
  ServerOptions o;
  o.socket_path = TestSocket("busyclient");
  reactor::LoopOptions lo;
  lo.busy_poll = std::chrono::microseconds(1);  // the server sleeps between requests
  ServerThread st(o, lo);
  auto c = RingClient::Connect(o.socket_path,
                               {.wake = WakeMode::kBusyPoll, .spin = std::chrono::microseconds(1)});
  ASSERT_TRUE(c) << c.error().ToString();
  for (uint64_t i = 1; i <= 200; ++i) {
    ASSERT_EQ(PingPong(**c, i), i);
    std::this_thread::sleep_for(std::chrono::microseconds(200));  // let the server fall asleep
  }
  st.StopAndJoin();  // the stats belong to the loop thread
  EXPECT_GT(st.loop->stats().sleeps, 0u);
}

TEST(RingServer, ZeroCopySendThroughReserve) {
  ServerOptions o;
  o.socket_path = TestSocket("zerocopy");
  ServerThread st(o);
  auto c = RingClient::Connect(o.socket_path, {});
  ASSERT_TRUE(c);
  uint8_t* p = (*c)->Reserve(200);
  ASSERT_NE(p, nullptr);
  size_t n = EncodePing(p, 200, 77, "payload");
  (*c)->Commit(static_cast<uint32_t>(n));
  ASSERT_TRUE((*c)->Wait(5s).value_or(false));
  uint64_t got = 0;
  ASSERT_TRUE((*c)->Poll(
      [&](std::span<const uint8_t> m) { got = wire::PongDecoder::Decode(m)->correlation_id(); }));
  EXPECT_EQ(got, 77u);
}

TEST(RingServer, DeadClientIsDroppedAndOthersContinue) {
  ServerOptions o;
  o.socket_path = TestSocket("death");
  ServerThread st(o);
  auto survivor = RingClient::Connect(o.socket_path, {.name = "survivor"});
  ASSERT_TRUE(survivor);
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    auto c = RingClient::Connect(o.socket_path, {.name = "doomed"});
    if (!c) _exit(1);
    uint8_t buf[256];
    size_t n = EncodePing(buf, sizeof buf, 1);
    (void)(*c)->TrySend({buf, n});
    raise(SIGKILL);  // dies without closing anything
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFSIGNALED(status));
  for (int i = 0; i < 500 && st.handler.closed.load() < 1; ++i) std::this_thread::sleep_for(10ms);
  EXPECT_EQ(st.handler.opened.load(), 2);
  EXPECT_EQ(st.handler.closed.load(), 1);
  EXPECT_EQ(PingPong(**survivor, 5), 5u);
}

TEST(RingServer, DeadCoreIsReportedToTheClient) {
  std::string path = TestSocket("coredeath");
  int ready[2];
  ASSERT_EQ(pipe(ready), 0);
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    EchoHandler h;
    ServerOptions o;
    o.socket_path = path;
    auto s = RingServer::Listen(o, &h);
    auto loop = reactor::Loop::Create({}, &h);
    if (!s || !loop || !(*loop)->AddSource(s->get())) _exit(1);
    (void)!write(ready[1], "r", 1);
    (void)(*loop)->Run();
    _exit(0);
  }
  char c;
  ASSERT_EQ(read(ready[0], &c, 1), 1);
  auto client = RingClient::Connect(path, {});
  ASSERT_TRUE(client) << client.error().ToString();
  ASSERT_EQ(PingPong(**client, 1), 1u);
  kill(pid, SIGKILL);
  waitpid(pid, nullptr, 0);
  auto w = (*client)->Wait(5s);
  ASSERT_FALSE(w);
  EXPECT_EQ(w.error().code(), StatusCode::kUnavailable);
  uint8_t buf[64];
  size_t n = EncodePing(buf, sizeof buf, 2);
  // Sending may still land in the (orphaned) ring, but the liveness check reports it.
  (void)(*client)->TrySend({buf, n});
  EXPECT_FALSE((*client)->CheckAlive());
  close(ready[0]);
  close(ready[1]);
  unlink(path.c_str());
}

// A connection that never sends its Hello is dropped after the handshake timeout (5 s),
// also while the loop sleeps with nothing else to do; the next client is served.
TEST(RingServer, ASilentConnectionIsDroppedAfterTheHandshakeTimeout) {
  ServerOptions o;
  o.socket_path = TestSocket("silent");
  ServerThread st(o);
  auto silent = ConnectUnix(o.socket_path, std::chrono::seconds(1));
  ASSERT_TRUE(silent) << silent.error().ToString();
  pollfd p{silent->get(), POLLIN, 0};
  ASSERT_EQ(poll(&p, 1, 9000), 1) << "still open after 9 s";
  char b;
  EXPECT_EQ(recv(silent->get(), &b, 1, 0), 0) << "closed by the server";
  auto c = RingClient::Connect(o.socket_path, {});
  ASSERT_TRUE(c) << c.error().ToString();
  EXPECT_EQ(PingPong(**c, 7), 7u);
}

TEST(RingServer, RefusesBadHandshakes) {
  ServerOptions o;
  o.socket_path = TestSocket("refuse");
  o.max_clients = 1;
  ServerThread st(o);
  // A ring size that is not a power of two is refused by the client library itself ...
  EXPECT_FALSE(RingClient::Connect(o.socket_path, {.ring_bytes = 6000}));
  // ... and by the server when a raw peer asks for it.
  {
    auto sock = ConnectUnix(o.socket_path, 1s);
    ASSERT_TRUE(sock);
    uint8_t buf[256];
    wire::HelloEncoder h(buf, sizeof buf);
    h.set_protocol_version(kProtocolVersion).set_ring_bytes(6000);
    ASSERT_TRUE(SendFrame(sock->get(), {buf, h.Finish()}));
    std::vector<uint8_t> reply;
    ASSERT_TRUE(RecvFrame(sock->get(), 4096, 2000ms, &reply, nullptr));
    auto err = wire::ErrorDecoder::Decode(reply);
    ASSERT_TRUE(err);
    EXPECT_NE(err->text().find("power of two"), std::string_view::npos);
  }
  // Garbage instead of a Hello.
  {
    auto sock = ConnectUnix(o.socket_path, 1s);
    ASSERT_TRUE(sock);
    uint8_t junk[16] = {12, 0, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
    ASSERT_EQ(write(sock->get(), junk, sizeof junk), 16);
    std::vector<uint8_t> reply;
    ASSERT_TRUE(RecvFrame(sock->get(), 4096, 2000ms, &reply, nullptr));
    EXPECT_TRUE(wire::ErrorDecoder::Decode(reply));
  }
  // Wrong protocol version.
  {
    auto sock = ConnectUnix(o.socket_path, 1s);
    ASSERT_TRUE(sock);
    uint8_t buf[256];
    wire::HelloEncoder h(buf, sizeof buf);
    h.set_protocol_version(99);
    ASSERT_TRUE(SendFrame(sock->get(), {buf, h.Finish()}));
    std::vector<uint8_t> reply;
    ASSERT_TRUE(RecvFrame(sock->get(), 4096, 2000ms, &reply, nullptr));
    auto err = wire::ErrorDecoder::Decode(reply);
    ASSERT_TRUE(err);
    EXPECT_EQ(err->code(), wire::ErrorCode::kProtocolVersion);
  }
  // The client limit.
  auto first = RingClient::Connect(o.socket_path, {});
  ASSERT_TRUE(first);
  auto second = RingClient::Connect(o.socket_path, {});
  ASSERT_FALSE(second);
  EXPECT_NE(second.error().message().find("too many clients"), std::string::npos);
  EXPECT_EQ(PingPong(**first, 3), 3u);  // the server is fine
}

TEST(RingServer, SlowClientFillsItsBoundedQueue) {
  ServerOptions o;
  o.socket_path = TestSocket("slow");
  o.output_limit = 8 * 1024;
  ServerThread st(o);
  st.handler.flood = 20;  // 20 x ~1 KiB into a 4 KiB ring + 8 KiB queue
  auto c = RingClient::Connect(o.socket_path, {});
  ASSERT_TRUE(c);
  uint8_t buf[128];
  wire::PublishEncoder pub(buf, sizeof buf);
  ASSERT_TRUE((*c)->Send({buf, pub.set_channel("x").Finish()}, 1s));
  // Read nothing for a while: the ring fills, then the queue, then Send says over limit.
  std::this_thread::sleep_for(100ms);
  // Then drain everything that was accepted, in order.
  uint64_t next = 0, received = 0;
  for (int i = 0; i < 200; ++i) {
    auto r = (*c)->Poll([&](std::span<const uint8_t> m) {
      auto pong = wire::PongDecoder::Decode(m);
      ASSERT_TRUE(pong);
      EXPECT_EQ(pong->correlation_id(), next);
      ++next;
      ++received;
    });
    ASSERT_TRUE(r);
    if (*r == 0 && !(*c)->Wait(20ms).value_or(false)) break;
  }
  st.StopAndJoin();  // the outcomes belong to the loop thread
  int sent = 0, queued = 0, over = 0;
  for (auto oc : st.handler.outcomes) {
    sent += oc == SendOutcome::kSent;
    queued += oc == SendOutcome::kQueued;
    over += oc == SendOutcome::kOverLimit;
  }
  EXPECT_EQ(sent, 3);    // 3 records of 1,056 bytes fit 4 KiB
  EXPECT_EQ(queued, 7);  // 7 x 1,046 bytes fit the 8 KiB queue
  EXPECT_EQ(over, 10);
  EXPECT_EQ(received, static_cast<uint64_t>(sent + queued));
}

TEST(RingServer, StaleSocketIsReplacedLiveOneIsNot) {
  std::string path = TestSocket("stale");
  {
    auto l = ListenUnix(path);
    ASSERT_TRUE(l);
  }  // closed, file left behind: stale
  ASSERT_TRUE(std::filesystem::exists(path));
  auto again = ListenUnix(path);
  ASSERT_TRUE(again) << again.error().ToString();
  auto twice = ListenUnix(path);  // the first one is alive
  ASSERT_FALSE(twice);
  EXPECT_NE(twice.error().message().find("already listening"), std::string::npos);
  std::string regular = path + ".file";
  {
    FILE* f = fopen(regular.c_str(), "w");
    fclose(f);
  }
  EXPECT_FALSE(ListenUnix(regular));
  EXPECT_TRUE(std::filesystem::exists(regular));  // never clobbered
  unlink(regular.c_str());
  unlink(path.c_str());
}

}  // namespace
}  // namespace goblin::ring
