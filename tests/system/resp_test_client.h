// A blocking RESP client for system tests: values parsed whole (RESP2 and RESP3), commands
// encoded as multibulk, replies read until a predicate says stop (bounded: 5 s).
// Threading: the test's thread.
#pragma once

#include <gtest/gtest.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace goblin::test {

using namespace std::chrono_literals;

struct Value {
  char type = 0;  // + - : $ * % > _ (and '$'/'*' with null = true)
  bool null = false;
  std::string str;  // + - $ and : (as text)
  std::vector<Value> items;
  bool operator==(const Value&) const = default;
  bool operator<(const Value& o) const { return Dump() < o.Dump(); }
  std::string Dump() const {
    std::string s(1, type);
    if (null) return s + "null";
    if (!items.empty() || type == '*' || type == '%' || type == '>') {
      s += "[";
      for (const auto& i : items) s += i.Dump() + ",";
      return s + "]";
    }
    return s + str;
  }
};

// Parses one value at `pos`; nullopt if incomplete.
std::optional<Value> ParseValue(const std::string& b, size_t* pos) {
  if (*pos >= b.size()) return std::nullopt;
  size_t eol = b.find("\r\n", *pos);
  if (eol == std::string::npos) return std::nullopt;
  Value v;
  v.type = b[*pos];
  std::string line = b.substr(*pos + 1, eol - *pos - 1);
  size_t p = eol + 2;
  switch (v.type) {
    case '+':
    case '-':
    case ':':
      v.str = line;
      break;
    case '_':
      v.null = true;
      break;
    case '$': {
      long n = std::stol(line);
      if (n < 0) {
        v.null = true;
        break;
      }
      if (b.size() < p + static_cast<size_t>(n) + 2) return std::nullopt;
      v.str = b.substr(p, static_cast<size_t>(n));
      p += static_cast<size_t>(n) + 2;
      break;
    }
    case '*':
    case '%':
    case '>': {
      long n = std::stol(line);
      if (n < 0) {
        v.null = true;
        break;
      }
      if (v.type == '%') n *= 2;
      for (long i = 0; i < n; ++i) {
        auto item = ParseValue(b, &p);
        if (!item) return std::nullopt;
        v.items.push_back(std::move(*item));
      }
      break;
    }
    default:
      ADD_FAILURE() << "unexpected RESP type byte " << int(v.type);
      return std::nullopt;
  }
  *pos = p;
  return v;
}

std::string Encode(const std::vector<std::string>& args) {
  std::string s = "*" + std::to_string(args.size()) + "\r\n";
  for (const auto& a : args) s += "$" + std::to_string(a.size()) + "\r\n" + a + "\r\n";
  return s;
}

class Conn {
 public:
  explicit Conn(const std::string& path) {
    fd_ = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_un a{};
    a.sun_family = AF_UNIX;
    std::strncpy(a.sun_path, path.c_str(), sizeof a.sun_path - 1);
    ok_ = connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
  }
  ~Conn() { close(fd_); }
  bool ok() const { return ok_; }
  void Send(const std::string& s) {
    size_t off = 0;
    while (off < s.size()) {
      ssize_t n = send(fd_, s.data() + off, s.size() - off, MSG_NOSIGNAL);
      if (n <= 0) return;
      off += static_cast<size_t>(n);
    }
  }
  // Reads values until `done(value)` is true (that value is not returned), EOF, or `limit`
  // (5 s). Returns the values and whether the connection closed.
  std::pair<std::vector<Value>, bool> ReadUntil(const std::function<bool(const Value&)>& done,
                                                std::chrono::milliseconds limit = 5s) {
    std::vector<Value> out;
    auto deadline = std::chrono::steady_clock::now() + limit;
    for (;;) {
      while (auto v = ParseValue(buf_, &pos_)) {
        if (done(*v)) return {out, false};
        out.push_back(std::move(*v));
      }
      if (std::chrono::steady_clock::now() > deadline) {
        ADD_FAILURE() << "timed out waiting for a reply";
        return {out, false};
      }
      pollfd p{fd_, POLLIN, 0};
      if (poll(&p, 1, 100) <= 0) continue;
      char tmp[65536];
      ssize_t n = recv(fd_, tmp, sizeof tmp, 0);
      if (n <= 0) return {out, true};
      buf_.append(tmp, static_cast<size_t>(n));
    }
  }

 private:
  int fd_ = -1;
  bool ok_ = false;
  std::string buf_;
  size_t pos_ = 0;
};

}  // namespace goblin::test
