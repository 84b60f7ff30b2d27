// Prometheus text and its HTTP endpoint. See metrics.h.
#include "goblin/common/metrics.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <fmt/format.h>

#include "goblin/common/log.h"

namespace goblin {
namespace {
constexpr std::string_view kLog = "metrics";

// Writes all of `s` (the socket has a send timeout); false if the peer went away.
bool SendAll(int fd, std::string_view s) {
  while (!s.empty()) {
    ssize_t n = send(fd, s.data(), s.size(), MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    s.remove_prefix(static_cast<size_t>(n));
  }
  return true;
}

void Reply(int fd, std::string_view status, std::string_view extra, std::string_view body) {
  (void)SendAll(fd, fmt::format("HTTP/1.1 {}\r\nContent-Type: text/plain\r\n{}Content-Length: "
                                "{}\r\nConnection: close\r\n\r\n{}",
                                status, extra, body.size(), body));
}
}  // namespace

void PromText::Family(std::string_view name, std::string_view type, std::string_view help) {
  fmt::format_to(std::back_inserter(text_), "# HELP {} {}\n# TYPE {} {}\n", name, help, name, type);
}

void PromText::Sample(std::string_view name, std::string_view labels, uint64_t value) {
  if (labels.empty()) {
    fmt::format_to(std::back_inserter(text_), "{} {}\n", name, value);
  } else {
    fmt::format_to(std::back_inserter(text_), "{}{{{}}} {}\n", name, labels, value);
  }
}

void PromText::SampleDouble(std::string_view name, std::string_view labels, double value) {
  if (labels.empty()) {
    fmt::format_to(std::back_inserter(text_), "{} {}\n", name, value);
  } else {
    fmt::format_to(std::back_inserter(text_), "{}{{{}}} {}\n", name, labels, value);
  }
}

void PromText::Histogram(std::string_view name, std::string_view labels,
                         const LatencyHistogram& h) {
  HistogramBuckets(name, labels, LatencyHistogram::kUpperBoundsUs, h.counts(), h.count(),
                   h.sum_us());
}

void PromText::HistogramBuckets(std::string_view name, std::string_view labels,
                                std::span<const uint64_t> upper_bounds_us,
                                std::span<const uint64_t> counts, uint64_t count, uint64_t sum_us) {
  const std::string_view sep = labels.empty() ? "" : ",";
  uint64_t cumulative = 0;
  for (size_t i = 0; i < upper_bounds_us.size(); ++i) {
    cumulative += i < counts.size() ? counts[i] : 0;
    fmt::format_to(std::back_inserter(text_), "{}_bucket{{{}{}le=\"{}\"}} {}\n", name, labels, sep,
                   static_cast<double>(upper_bounds_us[i]) / 1e6, cumulative);
  }
  fmt::format_to(std::back_inserter(text_), "{}_bucket{{{}{}le=\"+Inf\"}} {}\n", name, labels, sep,
                 count);
  const std::string braces = labels.empty() ? "" : fmt::format("{{{}}}", labels);
  fmt::format_to(std::back_inserter(text_), "{}_sum{} {}\n{}_count{} {}\n", name, braces,
                 static_cast<double>(sum_us) / 1e6, name, braces, count);
}

std::string PromText::Label(std::string_view key, std::string_view value) {
  std::string out(key);
  out += "=\"";
  for (char c : value) {
    if (c == '\\' || c == '"') {
      out += '\\';
      out += c;
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  out += '"';
  return out;
}

Result<std::unique_ptr<MetricsServer>> MetricsServer::Start(const std::string& listen,
                                                            Render render) {
  const size_t colon = listen.rfind(':');
  if (colon == std::string::npos) {
    return Err(Status(StatusCode::kInvalidArgument,
                      fmt::format("--metrics-listen '{}': give HOST:PORT", listen)));
  }
  std::string host = listen.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']')
    host = host.substr(1, host.size() - 2);
  int port = 0;
  try {
    port = std::stoi(listen.substr(colon + 1));
  } catch (...) {
    port = -1;
  }
  if (port < 0 || port > 65535) {
    return Err(Status(StatusCode::kInvalidArgument,
                      fmt::format("--metrics-listen '{}': bad port", listen)));
  }
  sockaddr_storage ss{};
  socklen_t len = 0;
  auto* v4 = reinterpret_cast<sockaddr_in*>(&ss);
  auto* v6 = reinterpret_cast<sockaddr_in6*>(&ss);
  if (inet_pton(AF_INET, host.c_str(), &v4->sin_addr) == 1) {
    v4->sin_family = AF_INET;
    v4->sin_port = htons(static_cast<uint16_t>(port));
    len = sizeof *v4;
  } else if (inet_pton(AF_INET6, host.c_str(), &v6->sin6_addr) == 1) {
    v6->sin6_family = AF_INET6;
    v6->sin6_port = htons(static_cast<uint16_t>(port));
    len = sizeof *v6;
  } else {
    return Err(Status(StatusCode::kInvalidArgument,
                      fmt::format("--metrics-listen '{}': not an IP address", listen)));
  }
  UniqueFd fd(socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd) return ErrnoErr("metrics: socket", errno);
  int one = 1;
  setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (bind(fd.get(), reinterpret_cast<sockaddr*>(&ss), len) != 0)
    return ErrnoErr(fmt::format("metrics: bind {}", listen), errno);
  if (::listen(fd.get(), 16) != 0) return ErrnoErr("metrics: listen", errno);
  sockaddr_storage bound{};
  socklen_t blen = sizeof bound;
  getsockname(fd.get(), reinterpret_cast<sockaddr*>(&bound), &blen);
  std::unique_ptr<MetricsServer> s(new MetricsServer());
  s->port_ = ntohs(bound.ss_family == AF_INET ? reinterpret_cast<sockaddr_in*>(&bound)->sin_port
                                              : reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port);
  s->address_ = ss.ss_family == AF_INET6 ? fmt::format("[{}]:{}", host, s->port_)
                                         : fmt::format("{}:{}", host, s->port_);
  s->listen_ = std::move(fd);
  s->stop_ = UniqueFd(eventfd(0, EFD_CLOEXEC));
  if (!s->stop_) return ErrnoErr("metrics: eventfd", errno);
  s->render_ = std::move(render);
  s->thread_ = std::thread([p = s.get()] { p->Run(); });
  return s;
}

MetricsServer::~MetricsServer() {
  if (thread_.joinable()) {
    uint64_t one = 1;
    (void)!write(stop_.get(), &one, sizeof one);
    thread_.join();
  }
}

void MetricsServer::Run() {
  for (;;) {
    pollfd p[2] = {{listen_.get(), POLLIN, 0}, {stop_.get(), POLLIN, 0}};
    if (poll(p, 2, -1) < 0) {
      if (errno == EINTR) continue;
      GOBLIN_LOG_WARN(kLog, "poll: {}", std::strerror(errno));
      return;
    }
    if (p[1].revents != 0) return;
    if (p[0].revents == 0) continue;
    UniqueFd c(accept4(listen_.get(), nullptr, nullptr, SOCK_CLOEXEC));
    if (!c) continue;
    Serve(c.get());
  }
}

void MetricsServer::Serve(int fd) {
  // One request per connection (Connection: close), read within 2 s, up to 8 KiB of head.
  timeval tv{2, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  timeval stv{10, 0};
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &stv, sizeof stv);
  std::string in;
  char buf[2048];
  while (in.find("\r\n\r\n") == std::string::npos && in.size() < 8192) {
    ssize_t n = recv(fd, buf, sizeof buf, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    in.append(buf, static_cast<size_t>(n));
  }
  const size_t sp1 = in.find(' ');
  const size_t sp2 = sp1 == std::string::npos ? sp1 : in.find(' ', sp1 + 1);
  const size_t eol = in.find("\r\n");
  if (sp2 == std::string::npos || eol == std::string::npos || sp2 > eol) {
    Reply(fd, "400 Bad Request", "", "bad request\n");
    return;
  }
  const std::string_view method = std::string_view(in).substr(0, sp1);
  std::string_view path = std::string_view(in).substr(sp1 + 1, sp2 - sp1 - 1);
  path = path.substr(0, path.find('?'));
  if (method != "GET" && method != "HEAD") {
    Reply(fd, "405 Method Not Allowed", "Allow: GET, HEAD\r\n", "method not allowed\n");
    return;
  }
  if (path != "/metrics") {
    Reply(fd, "404 Not Found", "", "not found: the metrics are at /metrics\n");
    return;
  }
  const std::string body = render_();
  const std::string head = fmt::format(
      "HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4; charset=utf-8\r\n"
      "Content-Length: {}\r\nConnection: close\r\n\r\n",
      body.size());
  if (SendAll(fd, head) && method == "GET") (void)SendAll(fd, body);
}

}  // namespace goblin
