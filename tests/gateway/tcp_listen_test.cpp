// ListenTcp: what accepted connections inherit from the listener (gateway/src/tcp_listen.h).
#include "tcp_listen.h"

#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

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

TEST(TcpListen, ABadAddressIsRefusedClearly) {
  auto l = ListenTcp("not-an-address", -1, TcpListenOptions{});
  ASSERT_FALSE(l);
  EXPECT_NE(l.error().ToString().find("not an IPv4 address"), std::string::npos);
}

}  // namespace
}  // namespace goblin::gateway
