// ttfb_probe: time to first byte of one URL, one request at a time, for the hot-hit
// benchmark (bench/run_ttfb_benchmark.sh). Two modes:
//   --mode close      a fresh TCP connection per request ("Connection: close"); the clock
//                     starts before connect(), as a browser's or curl's does; the client
//                     closes once the response head and --read bytes of body are in (the
//                     rest of a big body is not waited for: it is the first byte we time);
//   --mode keepalive  one connection, requests in sequence; the clock starts before send();
//                     every body is read whole (Content-Length) before the next request.
// Each response must be 200 with the expected Content-Length (--size). Prints the
// first-byte and whole-response percentiles in microseconds, and with --json one line;
// --raw FILE appends every measured first-byte time (us, one per line) to FILE, so that
// runs interleaved with other servers' can be summarized together.
//   ttfb_probe --target http://127.0.0.1:8080 --path /gen/4096/a --size 4096
//       [--mode close|keepalive] [--requests 2000] [--warmup 100] [--label goblin] [--json]
//       [--raw FILE]
// Exit status 1 when a request failed.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "bench/stats.h"
#include "goblin/common/cli.h"
#include "goblin/common/clock.h"
#include "goblin/common/fd.h"

namespace {

using namespace goblin;

struct Target {
  sockaddr_in addr{};
  std::string host;
};

bool ParseTarget(const std::string& url, Target* t) {
  if (!url.starts_with("http://")) return false;
  std::string rest = url.substr(7);
  size_t colon = rest.find(':');
  std::string host = rest.substr(0, colon);
  int port = colon == std::string::npos ? 80 : std::atoi(rest.c_str() + colon + 1);
  t->addr.sin_family = AF_INET;
  t->addr.sin_port = htons(static_cast<uint16_t>(port));
  if (inet_pton(AF_INET, host.c_str(), &t->addr.sin_addr) != 1) return false;
  t->host = rest.substr(0, rest.find('/'));
  return true;
}

UniqueFd Connect(const Target& t) {
  UniqueFd fd(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd) return fd;
  int one = 1;
  setsockopt(fd.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  timeval tv{10, 0};
  setsockopt(fd.get(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  if (connect(fd.get(), reinterpret_cast<const sockaddr*>(&t.addr), sizeof t.addr) != 0) fd.Reset();
  return fd;
}

struct Timing {
  uint64_t first_ns = 0, done_ns = 0;
};

// Sends `req` on `fd`, reads the head and `body_wanted` body bytes (UINT64_MAX: all of
// Content-Length). False on any failure or an unexpected status or length.
bool Exchange(int fd, const std::string& req, uint64_t size, uint64_t body_wanted, uint64_t t0,
              std::vector<char>& buf, Timing* out, std::string* why) {
  if (send(fd, req.data(), req.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(req.size())) {
    *why = "send failed";
    return false;
  }
  std::string head;
  uint64_t body = 0;
  bool have_head = false;
  uint64_t want = 0;
  for (;;) {
    ssize_t n = recv(fd, buf.data(), buf.size(), 0);
    if (n <= 0) {
      *why = n == 0 ? "the connection closed" : "recv: " + std::string(strerror(errno));
      *why += " after " + std::to_string(body) + " body bytes; head: " + head.substr(0, 200);
      return false;
    }
    if (out->first_ns == 0) out->first_ns = MonotonicNanos() - t0;
    if (!have_head) {
      head.append(buf.data(), static_cast<size_t>(n));
      size_t end = head.find("\r\n\r\n");
      if (end == std::string::npos) continue;
      size_t cl = head.find("ontent-Length: ");
      if (head.compare(0, 12, "HTTP/1.1 200") != 0 || cl == std::string::npos ||
          std::strtoull(head.c_str() + cl + 15, nullptr, 10) != size) {
        *why = "unexpected head: " + head.substr(0, end);
        return false;
      }
      have_head = true;
      body = head.size() - (end + 4);
      want = std::min(size, body_wanted);
    } else {
      body += static_cast<uint64_t>(n);
    }
    if (body >= want) break;
  }
  out->done_ns = MonotonicNanos() - t0;
  return body <= size;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app("ttfb_probe: time to first byte of one URL, one request at a time");
  std::string target_url, path, mode = "close", label = "server", raw_path;
  uint64_t size = 0, read_bytes = 64 << 10;
  int requests = 2000, warmup = 100;
  bool json = false;
  app.add_option("--target", target_url, "http://HOST:PORT (IPv4)")->required();
  app.add_option("--path", path, "The object's path")->required();
  app.add_option("--size", size, "Its size (the expected Content-Length)")->required();
  app.add_option("--mode", mode, "close (a connection per request) or keepalive")
      ->check(CLI::IsMember({"close", "keepalive"}))
      ->capture_default_str();
  app.add_option("--read", read_bytes, "close mode: body bytes read before closing")
      ->capture_default_str();
  app.add_option("--requests", requests, "Measured requests")->capture_default_str();
  app.add_option("--warmup", warmup, "Requests before the measured ones")->capture_default_str();
  app.add_option("--label", label, "Name of the server in the output")->capture_default_str();
  app.add_flag("--json", json, "Also print one JSON line");
  app.add_option("--raw", raw_path, "Append each first-byte time (us) to this file");
  if (int rc = ParseCommandLine(app, argc, argv); rc >= 0) return rc;
  Target t;
  if (!ParseTarget(target_url, &t)) {
    std::fprintf(stderr, "ttfb_probe: bad --target %s\n", target_url.c_str());
    return 2;
  }
  const bool close_mode = mode == "close";
  const std::string req = "GET " + path + " HTTP/1.1\r\nHost: " + t.host +
                          (close_mode ? "\r\nConnection: close\r\n\r\n" : "\r\n\r\n");
  std::vector<char> buf(1 << 20);
  std::vector<double> first_us, done_us;
  first_us.reserve(static_cast<size_t>(requests));
  done_us.reserve(static_cast<size_t>(requests));
  UniqueFd keep;
  for (int i = 0; i < warmup + requests; ++i) {
    Timing tm;
    uint64_t t0 = MonotonicNanos();
    bool ok;
    std::string why = "connect failed";
    if (close_mode) {
      UniqueFd fd = Connect(t);
      ok = fd && Exchange(fd.get(), req, size, read_bytes, t0, buf, &tm, &why);
    } else {
      if (!keep) keep = Connect(t);
      t0 = MonotonicNanos();
      ok = keep && Exchange(keep.get(), req, size, UINT64_MAX, t0, buf, &tm, &why);
    }
    if (!ok) {
      std::fprintf(stderr, "ttfb_probe: %s: request %d failed: %s\n", label.c_str(), i,
                   why.c_str());
      return 1;
    }
    if (i >= warmup) {
      first_us.push_back(static_cast<double>(tm.first_ns) / 1e3);
      done_us.push_back(static_cast<double>(tm.done_ns) / 1e3);
    }
  }
  if (!raw_path.empty()) {
    FILE* raw = std::fopen(raw_path.c_str(), "a");
    if (raw == nullptr) {
      std::fprintf(stderr, "ttfb_probe: cannot open %s\n", raw_path.c_str());
      return 1;
    }
    for (double us : first_us) std::fprintf(raw, "%.2f\n", us);
    std::fclose(raw);
  }
  auto f = bench::Summarize(first_us), d = bench::Summarize(done_us);
  std::printf(
      "%s %s %s: TTFB us p50 %.1f p90 %.1f p99 %.1f; %s us p50 %.1f p99 %.1f (%d requests)\n",
      label.c_str(), mode.c_str(), path.c_str(), f.p50, f.p90, f.p99,
      close_mode ? "head + first body bytes" : "whole response", d.p50, d.p99, requests);
  if (json) {
    std::printf(
        "{\"label\":\"%s\",\"mode\":\"%s\",\"path\":\"%s\",\"size\":%llu,\"requests\":%d,"
        "\"ttfb_p50_us\":%.2f,\"ttfb_p90_us\":%.2f,\"ttfb_p99_us\":%.2f,\"done_p50_us\":%.2f,"
        "\"done_p99_us\":%.2f}\n",
        label.c_str(), mode.c_str(), path.c_str(), static_cast<unsigned long long>(size), requests,
        f.p50, f.p90, f.p99, d.p50, d.p99);
  }
  return 0;
}
