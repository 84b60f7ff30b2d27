// ListenTcp: what accepted connections inherit from the listener (gateway/src/tcp_listen.h).
#include "tcp_listen.h"

#include <gtest/gtest.h>
#include <ifaddrs.h>
#include <sys/socket.h>
#include <unistd.h>

#include <string>
#include <string_view>
#include <vector>

namespace goblin::gateway {
namespace {

// Connects to the listener on loopback and accepts: the accepted socket.
UniqueFd AcceptOne(int listen_fd, int port, UniqueFd* client) {
  client->Reset(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(connect(client->get(), reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  int fd = -1;
  for (int i = 0; i < 1000 && fd < 0; ++i) {  // (non-blocking listener: bounded retries)
    fd = accept4(listen_fd, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) usleep(1000);
  }
  EXPECT_GE(fd, 0);
  return UniqueFd(fd);
}

int SendBuffer(int fd) {
  int v = 0;
  socklen_t len = sizeof v;
  EXPECT_EQ(getsockopt(fd, SOL_SOCKET, SO_SNDBUF, &v, &len), 0);
  return v;
}

TEST(TcpListen, AcceptedConnectionsInheritTheSendBuffer) {
  TcpListenOptions o;
  o.send_buffer = 192 << 10;
  auto l = ListenTcp("127.0.0.1", -1, o);
  ASSERT_TRUE(l) << l.error().ToString();
  UniqueFd client;
  UniqueFd conn = AcceptOne(l->first.get(), l->second, &client);
  EXPECT_EQ(SendBuffer(conn.get()), 2 * (192 << 10));  // (Linux doubles it for its overhead)

  // Without it: the kernel's default (net.ipv4.tcp_wmem), autotuned from there.
  auto plain = ListenTcp("127.0.0.1", -1, TcpListenOptions{});
  ASSERT_TRUE(plain);
  UniqueFd client2;
  UniqueFd conn2 = AcceptOne(plain->first.get(), plain->second, &client2);
  EXPECT_NE(SendBuffer(conn2.get()), 2 * (192 << 10));
}

// Which peers are on this host: loopback (all of 127/8), or the connection's own address.
TEST(TcpListen, PeersOnThisHostAreLoopbackOrTheLocalAddress) {
  auto a = [](const char* s) {
    in_addr v{};
    EXPECT_EQ(inet_pton(AF_INET, s, &v), 1) << s;
    return v.s_addr;
  };
  EXPECT_TRUE(PeerOnThisHost(a("127.0.0.1"), a("127.0.0.1")));
  EXPECT_TRUE(PeerOnThisHost(a("10.1.2.3"), a("127.9.8.7")));
  EXPECT_TRUE(PeerOnThisHost(a("10.1.2.3"), a("10.1.2.3")));
  EXPECT_FALSE(PeerOnThisHost(a("10.1.2.3"), a("10.1.2.4")));
  EXPECT_FALSE(PeerOnThisHost(a("10.1.2.3"), a("126.0.0.1")));
  EXPECT_FALSE(PeerOnThisHost(a("10.1.2.3"), a("128.0.0.1")));
  // A real connection over loopback, and (where this host has one) over another of its
  // addresses: both on this host.
  auto l = ListenTcp("0.0.0.0", -1, TcpListenOptions{});
  ASSERT_TRUE(l) << l.error().ToString();
  std::vector<std::string> targets{"127.0.0.1"};
  ifaddrs* ifs = nullptr;
  ASSERT_EQ(getifaddrs(&ifs), 0);
  for (ifaddrs* i = ifs; i != nullptr; i = i->ifa_next) {
    if (i->ifa_addr == nullptr || i->ifa_addr->sa_family != AF_INET) continue;
    char ip[INET_ADDRSTRLEN] = {};
    inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(i->ifa_addr)->sin_addr, ip, sizeof ip);
    if (std::string_view(ip).starts_with("127.")) continue;
    targets.push_back(ip);
    break;
  }
  freeifaddrs(ifs);
  for (const std::string& target : targets) {
    SCOPED_TRACE(target);
    UniqueFd client(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
    sockaddr_in to{};
    to.sin_family = AF_INET;
    to.sin_port = htons(static_cast<uint16_t>(l->second));
    inet_pton(AF_INET, target.c_str(), &to.sin_addr);
    ASSERT_EQ(connect(client.get(), reinterpret_cast<sockaddr*>(&to), sizeof to), 0);
    sockaddr_in peer{};
    socklen_t len = sizeof peer;
    int fd = -1;
    for (int i = 0; i < 1000 && fd < 0; ++i) {
      fd = accept4(l->first.get(), reinterpret_cast<sockaddr*>(&peer), &len, SOCK_CLOEXEC);
      if (fd < 0) usleep(1000);
    }
    ASSERT_GE(fd, 0);
    UniqueFd conn(fd);
    EXPECT_TRUE(PeerOnThisHost(conn.get(), peer));
  }
}

TEST(TcpListen, ABadAddressIsRefusedClearly) {
  auto l = ListenTcp("not-an-address", -1, TcpListenOptions{});
  ASSERT_FALSE(l);
  EXPECT_NE(l.error().ToString().find("not an IPv4 address"), std::string::npos);
}

}  // namespace
}  // namespace goblin::gateway
