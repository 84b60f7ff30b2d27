// HTTP/2 on the gateway, end to end: goblin-core + goblin-gateway --mirror in front of the
// test origin, h2c by prior knowledge on the plain port and h2 by ALPN on the HTTPS port,
// with --net sync and async. curl (--http2-prior-knowledge, --http2), a multiplexing
// nghttp2 client of the test's own, h2load and nghttp as clients, and raw frames for the
// floods. Every cache behaviour of the HTTP/1.1 front,
// stream by stream: byte-exact misses and hits (64 MiB), ranges, multipart, conditionals,
// HEAD, a chunked origin body, PURGE, one origin request for parallel misses, an origin
// fault mid-body (the stream is reset, the next one served), request limits; a rapid-reset
// flood, a SETTINGS flood and garbage end their connection while other clients are served.
#include <gtest/gtest.h>
#include <nghttp2/nghttp2.h>
#include <openssl/ssl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <thread>

#include <fmt/format.h>

#include "tests/system/mirror_harness.h"

namespace goblin {
namespace {

using namespace std::chrono_literals;
namespace fs = std::filesystem;

// An HTTP/2 client on nghttp2 (h2c by prior knowledge, or h2 over TLS by ALPN): every
// request submitted at once on one connection, each stream's status and body collected.
// (curl 7.88 cannot multiplex h2c by prior knowledge: its second transfer on the connection
// fails with "Error in the HTTP2 framing layer", against nginx too; and its --parallel
// transfers over TLS once left files that did not match, with exit status 0, in a loaded
// CI run: a client of our own says per stream what it got.)
class H2Client {
 public:
  struct Stream {
    std::string path, range, body;
    int status = 0;
    bool closed = false;
    uint32_t error = 0;
  };
  // The streams' receive window (0: the server may send no DATA at all).
  uint32_t stream_window = 1u << 30;
  // Runs every request to its end (or 60 s); false if the connection failed.
  bool Run(const std::string& port, bool tls, std::vector<Stream>* streams) {
    streams_ = streams;
    int fd = test::ConnectLoopback(port);
    if (fd < 0) return false;
    SSL_CTX* ctx = nullptr;
    SSL* ssl = nullptr;
    if (tls) {
      ctx = SSL_CTX_new(TLS_client_method());
      ssl = SSL_new(ctx);
      SSL_set_fd(ssl, fd);
      static constexpr unsigned char kAlpn[] = "\x02h2";
      SSL_set_alpn_protos(ssl, kAlpn, sizeof kAlpn - 1);
      const unsigned char* got = nullptr;
      unsigned int got_len = 0;
      if (SSL_connect(ssl) != 1 || (SSL_get0_alpn_selected(ssl, &got, &got_len), got_len != 2)) {
        SSL_free(ssl);
        SSL_CTX_free(ctx);
        close(fd);
        return false;
      }
    }
    nghttp2_session_callbacks* cb;
    nghttp2_session_callbacks_new(&cb);
    nghttp2_session_callbacks_set_send_callback(
        cb, [](nghttp2_session*, const uint8_t* d, size_t n, int, void* u) -> ssize_t {
          auto* self = static_cast<H2Client*>(u);
          self->out_.append(reinterpret_cast<const char*>(d), n);
          return static_cast<ssize_t>(n);
        });
    nghttp2_session_callbacks_set_on_header_callback(
        cb,
        [](nghttp2_session*, const nghttp2_frame* f, const uint8_t* n, size_t nl, const uint8_t* v,
           size_t vl, uint8_t, void* u) -> int {
          auto* self = static_cast<H2Client*>(u);
          if (std::string_view(reinterpret_cast<const char*>(n), nl) == ":status")
            self->ById(f->hd.stream_id).status =
                std::atoi(std::string(reinterpret_cast<const char*>(v), vl).c_str());
          return 0;
        });
    nghttp2_session_callbacks_set_on_data_chunk_recv_callback(
        cb, [](nghttp2_session*, uint8_t, int32_t id, const uint8_t* d, size_t n, void* u) -> int {
          static_cast<H2Client*>(u)->ById(id).body.append(reinterpret_cast<const char*>(d), n);
          return 0;
        });
    nghttp2_session_callbacks_set_on_stream_close_callback(
        cb, [](nghttp2_session*, int32_t id, uint32_t error, void* u) -> int {
          auto* self = static_cast<H2Client*>(u);
          self->ById(id).closed = true;
          self->ById(id).error = error;
          ++self->closed_;
          return 0;
        });
    nghttp2_session* s;
    nghttp2_session_client_new(&s, cb, this);
    nghttp2_session_callbacks_del(cb);
    const nghttp2_settings_entry window{NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, stream_window};
    nghttp2_submit_settings(s, NGHTTP2_FLAG_NONE, &window, 1);
    nghttp2_session_set_local_window_size(s, NGHTTP2_FLAG_NONE, 0, 1 << 30);
    const std::string authority = "127.0.0.1:" + port;
    for (size_t i = 0; i < streams->size(); ++i) {
      Stream& st = (*streams)[i];
      auto nv = [](std::string_view n, std::string_view v) {
        return nghttp2_nv{reinterpret_cast<uint8_t*>(const_cast<char*>(n.data())),
                          reinterpret_cast<uint8_t*>(const_cast<char*>(v.data())), n.size(),
                          v.size(), NGHTTP2_NV_FLAG_NONE};
      };
      std::string range = "bytes=" + st.range;
      std::vector<nghttp2_nv> h{nv(":method", "GET"), nv(":scheme", "http"), nv(":path", st.path),
                                nv(":authority", authority)};
      if (!st.range.empty()) h.push_back(nv("range", range));
      int32_t id = nghttp2_submit_request(s, nullptr, h.data(), h.size(), nullptr, nullptr);
      ids_[id] = i;
    }
    bool ok = true;
    auto deadline = std::chrono::steady_clock::now() + 60s;
    char buf[65536];
    while (closed_ < streams->size() && std::chrono::steady_clock::now() < deadline) {
      nghttp2_session_send(s);
      if (!out_.empty()) {
        const ssize_t sent = ssl != nullptr
                                 ? SSL_write(ssl, out_.data(), static_cast<int>(out_.size()))
                                 : send(fd, out_.data(), out_.size(), MSG_NOSIGNAL);
        if (sent != static_cast<ssize_t>(out_.size())) {
          ok = false;
          break;
        }
        out_.clear();
      }
      ssize_t n = ssl != nullptr ? SSL_read(ssl, buf, sizeof buf) : recv(fd, buf, sizeof buf, 0);
      if (n <= 0 || nghttp2_session_mem_recv(s, reinterpret_cast<uint8_t*>(buf), n) < 0) {
        ok = false;
        break;
      }
    }
    nghttp2_session_del(s);
    if (ssl != nullptr) SSL_free(ssl);
    if (ctx != nullptr) SSL_CTX_free(ctx);
    close(fd);
    return ok && closed_ == streams->size();
  }

 private:
  Stream& ById(int32_t id) { return (*streams_)[ids_.at(id)]; }
  std::vector<Stream>* streams_ = nullptr;
  std::map<int32_t, size_t> ids_;
  std::string out_;
  size_t closed_ = 0;
};

struct Mode {
  std::string net;
  bool tls;
};

class Http2 : public testing::TestWithParam<Mode>, public test::MirrorHarness {
 protected:
  void SetUp() override {
    if (!fs::exists("/usr/bin/curl") || !fs::exists("/usr/bin/python3") ||
        !fs::exists("/usr/bin/openssl")) {
      GTEST_SKIP() << "curl, python3 and openssl are needed";
    }
    std::string name = testing::UnitTest::GetInstance()->current_test_info()->name();
    std::replace(name.begin(), name.end(), '/', '-');
    ASSERT_TRUE(StartCoreAndOrigin("h2-" + name)) << (core_ ? core_->Output() : std::string());
    auto [rc, out] = test::MakeCertificate("h2.test", dir_ + "/c.pem", dir_ + "/k.pem");
    ASSERT_EQ(rc, 0) << out;
  }
  void TearDown() override { StopAll(); }
  void Start(std::vector<std::string> extra = {}) {
    std::vector<std::string> args{"--https-port=-1", "--tls-cert", dir_ + "/c.pem", "--tls-key",
                                  dir_ + "/k.pem"};
    args.insert(args.end(), extra.begin(), extra.end());
    StartGateway(GetParam().net, args);
    tls_port_ = PortFromLog("HTTPS on 127.0.0.1:");
    ASSERT_FALSE(tls_port_.empty()) << gateway_->Output();
    ASSERT_FALSE(port_.empty()) << gateway_->Output();
  }
  // The URL of `path` for this mode (h2c: the plain port; h2: the HTTPS one).
  std::string Url(const std::string& path) const {
    return GetParam().tls ? fmt::format("https://h2.test:{}{}", tls_port_, path)
                          : fmt::format("http://127.0.0.1:{}{}", port_, path);
  }
  // The same by address (for h2load, which cannot be told where h2.test is).
  std::string UrlByAddress(const std::string& path) const {
    return fmt::format("{}://127.0.0.1:{}{}", GetParam().tls ? "https" : "http",
                       GetParam().tls ? tls_port_ : port_, path);
  }
  // curl's options for HTTP/2 in this mode.
  std::vector<std::string> H2() const {
    if (!GetParam().tls) return {"--http2-prior-knowledge"};
    return {"--http2", "--cacert", dir_ + "/c.pem", "--resolve",
            fmt::format("h2.test:{}:127.0.0.1", tls_port_)};
  }
  Reply Get(const std::string& path, std::vector<std::string> args = {},
            const std::string& tag = "h") {
    std::vector<std::string> a = H2();
    a.insert(a.end(), args.begin(), args.end());
    return CurlUrl(Url(path), a, tag);
  }
  // The gateway's exit line, after a clean stop.
  std::string StopGateway() {
    gateway_->Signal(SIGTERM);
    EXPECT_EQ(gateway_->Wait(20s), 0);
    return gateway_->Output();
  }
  static uint64_t Counter(const std::string& log, const std::string& re) {
    std::smatch m;
    return std::regex_search(log, m, std::regex(re)) ? std::stoull(m[1]) : UINT64_MAX;
  }
  std::string tls_port_;
};

TEST_P(Http2, EveryCacheBehaviourHoldsStreamByStream) {
  ASSERT_NO_FATAL_FAILURE(Start());
  const std::string want = Origin("/gen/3M/a");
  auto miss = Get("/gen/3M/a");
  EXPECT_EQ(miss.curl_exit, 0);
  EXPECT_EQ(miss.code, 200);
  EXPECT_TRUE(miss.headers.starts_with("HTTP/2 200")) << miss.headers;
  EXPECT_NE(miss.headers.find("x-cache: MISS"), std::string::npos) << miss.headers;
  EXPECT_EQ(miss.headers.find("connection:"), std::string::npos) << miss.headers;
  EXPECT_EQ(miss.body, want);
  auto hit = Get("/gen/3M/a");
  EXPECT_NE(hit.headers.find("x-cache: HIT"), std::string::npos) << hit.headers;
  EXPECT_NE(hit.headers.find("content-length: 3145728"), std::string::npos) << hit.headers;
  EXPECT_EQ(hit.body, want);
  EXPECT_EQ(OriginHits("/gen/3M/a"), 2);  // ours and the one fill
  // Ranges, multipart, conditionals, HEAD.
  auto range = Get("/gen/3M/a", {"-H", "Range: bytes=65000-66000"});
  EXPECT_EQ(range.code, 206);
  EXPECT_EQ(range.body, want.substr(65000, 1001));
  auto multi = Get("/gen/3M/a", {"-H", "Range: bytes=0-9,3000000-3000009"});
  EXPECT_EQ(multi.code, 206);
  EXPECT_NE(multi.body.find(want.substr(3000000, 10)), std::string::npos);
  auto unsatisfiable = Get("/gen/3M/a", {"-H", "Range: bytes=9000000-"});
  EXPECT_EQ(unsatisfiable.code, 416);
  std::smatch m;
  ASSERT_TRUE(std::regex_search(hit.headers, m, std::regex("etag: (\"[^\"]+\")")));
  auto not_modified = Get("/gen/3M/a", {"-H", "If-None-Match: " + m[1].str()});
  EXPECT_EQ(not_modified.code, 304);
  EXPECT_TRUE(not_modified.body.empty());
  auto head = Get("/gen/3M/a", {"-I"});
  EXPECT_EQ(head.code, 200);
  EXPECT_NE(head.headers.find("content-length: 3145728"), std::string::npos) << head.headers;
  // A body the origin sends chunked (the miss streams it without a length), then a hit.
  const std::string chunked = Origin("/gen/300K/ch?chunked=1");
  for (int i = 0; i < 2; ++i) EXPECT_EQ(Get("/gen/300K/ch?chunked=1").body, chunked) << i;
  // The origin's errors pass through; PURGE works per stream.
  EXPECT_EQ(Get("/gen/10K/e?fault=500").code, 500);
  EXPECT_EQ(Get("/gen/3M/a", {"-X", "PURGE"}).code, 200);
  auto again = Get("/gen/3M/a");
  EXPECT_NE(again.headers.find("x-cache: MISS"), std::string::npos) << again.headers;
  EXPECT_EQ(again.body, want);
  // 64 MiB, miss then hit, byte-exact.
  const std::string big = Origin("/gen/64M/big");
  ASSERT_EQ(big.size(), 64u << 20);
  for (int i = 0; i < 2; ++i) {
    auto r = Get("/gen/64M/big");
    EXPECT_EQ(r.curl_exit, 0);
    EXPECT_TRUE(r.body == big) << "64 MiB over HTTP/2 differs (" << r.body.size() << " bytes)";
  }
  // Other methods go to the origin with their body; an HTTP/1.1 client still works.
  EXPECT_EQ(Get("/gen/1K/post", {"-X", "POST", "-d", "hello"}).code, 200);
  EXPECT_EQ(Curl("/gen/3M/a").body, want);
  std::string log = StopGateway();
  EXPECT_GE(Counter(log, "HTTP/2: ([0-9]+) connections"), 14u) << log;
  EXPECT_EQ(Counter(log, "([0-9]+) connections ended for errors or floods"), 0u) << log;
}

// Many streams on one connection at once: hits, misses (of new keys, some shared by two
// streams) and ranges, every body byte-exact, each object fetched from the origin once;
// then h2load and nghttp.
TEST_P(Http2, ManyStreamsOnOneConnectionMixHitsMissesAndRanges) {
  ASSERT_NO_FATAL_FAILURE(Start());
  for (int i = 0; i < 8; ++i) Get(fmt::format("/gen/{}K/hot{}", 20 + 90 * i, i));  // (hits later)
  struct Want {
    std::string path, file, range;
  };
  std::vector<Want> wants;
  for (int i = 0; i < 60; ++i) {
    Want w;
    switch (i % 4) {
      case 0:
        w.path = fmt::format("/gen/{}K/hot{}", 20 + 90 * (i % 8), i % 8);
        break;
      case 1:
        w.path = fmt::format("/gen/{}K/new{}?pace=1", 100 + i / 8, i / 8);  // (2 streams a key)
        break;
      case 2:
        w.path = fmt::format("/gen/{}K/hot{}", 20 + 90 * (i % 8), i % 8);
        w.range = fmt::format("{}-{}", i * 7, i * 7 + 999);
        break;
      default:
        w.path = fmt::format("/gen/{}/tiny{}", 1 + i, i);
        break;
    }
    w.file = fmt::format("{}/p{}", dir_, i);
    wants.push_back(w);
  }
  std::vector<H2Client::Stream> streams;
  for (const Want& w : wants) streams.push_back({w.path, w.range});
  ASSERT_TRUE(H2Client().Run(GetParam().tls ? tls_port_ : port_, GetParam().tls, &streams));
  for (size_t i = 0; i < wants.size(); ++i) {
    EXPECT_EQ(streams[i].status, wants[i].range.empty() ? 200 : 206) << wants[i].path;
    EXPECT_EQ(streams[i].error, 0u) << wants[i].path;
    std::ofstream(wants[i].file, std::ios::binary) << streams[i].body;
  }
  std::map<std::string, std::string> objects;  // (each fetched from the origin once)
  for (const Want& w : wants) {
    if (!objects.contains(w.path)) objects[w.path] = Origin(w.path);
    std::string want = objects[w.path];
    if (!w.range.empty()) {
      size_t dash = w.range.find('-');
      size_t first = std::stoul(w.range.substr(0, dash)),
             last = std::stoul(w.range.substr(dash + 1));
      want = want.substr(first, last - first + 1);
    }
    EXPECT_TRUE(test::ReadFileBytes(w.file) == want) << w.path << " " << w.range;
  }
  for (int k = 0; k < 8; ++k) {
    const std::string path = fmt::format("/gen/{}K/new{}?pace=1", 100 + k, k);
    EXPECT_EQ(OriginHits(path), 2) << path;  // one fill (and ours above)
  }
  // h2load: many streams per connection, every status 2xx.
  auto [lrc, load] = test::RunCommand({"/usr/bin/h2load", "-n", "3000", "-c", "4", "-m", "32",
                                       UrlByAddress("/gen/1K/hot0"), UrlByAddress("/gen/20K/hot0")},
                                      dir_ + "/h2load.log", 60s);
  EXPECT_EQ(lrc, 0) << load;
  EXPECT_NE(load.find("3000 succeeded, 0 failed"), std::string::npos) << load;
  // nghttp: several streams on one connection, with its statistics per stream.
  auto [nrc, ng] = test::RunCommand({"/usr/bin/nghttp", "-n", "-s", UrlByAddress("/gen/1K/hot0"),
                                     UrlByAddress("/gen/110K/hot1"), UrlByAddress("/gen/5K/ng")},
                                    dir_ + "/nghttp.log", 60s);
  EXPECT_EQ(nrc, 0) << ng;
  size_t ok = 0;
  for (size_t at = ng.find(" 200 "); at != std::string::npos; at = ng.find(" 200 ", at + 1)) ++ok;
  EXPECT_EQ(ok, 3u) << ng;
  std::string log = StopGateway();
  // (the 60 streams, h2load's 4 and nghttp's 1, and the 8 curls before)
  EXPECT_LE(Counter(log, "HTTP/2: ([0-9]+) connections"), 14u) << log;
}

// Faults, and what the next streams see.
TEST_P(Http2, FaultsResetTheirStreamAndTheNextOnesAreServed) {
  ASSERT_NO_FATAL_FAILURE(Start({"--max-body", "1K", "--send-timeout", "2s"}));
  const std::string path = "/gen/200K/f";
  const std::string want = Origin(path);
  EXPECT_EQ(Get(path).body, want);
  // The origin cuts the body: headers are out, so the stream is reset at once (curl: 92, an
  // HTTP/2 stream error; 28 would be a stream left hanging), nothing is stored, the next
  // request refetches it.
  for (int i = 0; i < 4; ++i) {
    auto cut = Get(fmt::format("/gen/1M/cut{}?fault=reset", i), {"--max-time", "10"});
    EXPECT_EQ(cut.curl_exit, 92) << i;
  }
  EXPECT_EQ(Get(path).body, want);
  const std::string whole = Origin("/gen/1M/cut2");
  auto cut2 = Get("/gen/1M/cut2?fault=reset&once=1", {"--max-time", "10"});
  EXPECT_EQ(cut2.curl_exit, 92);
  auto refetched = Get("/gen/1M/cut2?fault=reset&once=1");
  EXPECT_EQ(refetched.curl_exit, 0);
  EXPECT_EQ(refetched.body.size(), whole.size());
  // A body over --max-body: 413 on that stream.
  EXPECT_EQ(Get("/gen/1K/post", {"-X", "POST", "-d", std::string(5000, 'x')}).code, 413);
  // Headers past the limit: the stream is refused, the connection and the next one serve.
  auto big_header = Get(path, {"-H", "X-Big: " + std::string(70000, 'b')});
  EXPECT_NE(big_header.code, 200);
  EXPECT_EQ(Get(path).body, want);
  // A client leaving mid-body, on a miss and on a hit.
  const std::string big = Origin("/gen/32M/leave");
  for (int i = 0; i < 2; ++i) {
    auto gone = Get("/gen/32M/leave", {"--limit-rate", "2M", "--max-time", "1"});
    EXPECT_EQ(gone.curl_exit, 28);
    auto r = Get("/gen/32M/leave");
    EXPECT_TRUE(r.body == big) << r.body.size();
  }
  EXPECT_EQ(OriginHits("/gen/32M/leave"), 2);
  EXPECT_EQ(Get(path).body, want);
  // A client that never opens its streams' windows: after --send-timeout the stream is
  // reset (CANCEL) and what it held goes back; the next request is served.
  H2Client stuck;
  stuck.stream_window = 0;
  std::vector<H2Client::Stream> streams{{path, ""}, {"/gen/3M/big", ""}};
  ASSERT_TRUE(stuck.Run(GetParam().tls ? tls_port_ : port_, GetParam().tls, &streams));
  for (const auto& st : streams) {
    EXPECT_EQ(st.status, 200) << st.path;
    EXPECT_EQ(st.error, static_cast<uint32_t>(NGHTTP2_CANCEL)) << st.path;
    EXPECT_TRUE(st.body.empty()) << st.path;
  }
  EXPECT_EQ(Get(path).body, want);
  std::string log = StopGateway();
  EXPECT_NE(log.find("took nothing for 2 s; resetting it"), std::string::npos) << log;
}

// Raw HTTP/2 frames (h2c) for the floods.
std::string Frame(uint8_t type, uint8_t flags, uint32_t stream, std::string_view payload) {
  std::string f;
  f.push_back(static_cast<char>(payload.size() >> 16));
  f.push_back(static_cast<char>(payload.size() >> 8));
  f.push_back(static_cast<char>(payload.size()));
  f.push_back(static_cast<char>(type));
  f.push_back(static_cast<char>(flags));
  for (int s = 24; s >= 0; s -= 8) f.push_back(static_cast<char>(stream >> s));
  f += payload;
  return f;
}

// Sends `bytes` on a fresh h2c connection (the preface first) and reads what comes back,
// while sending (`read_while_sending`) or only after (a client that leaves the server's
// acks unread, with a small receive buffer), until the server closes or 15 s pass. True if
// the server closed the connection; *goaway: the error code of its GOAWAY (-1: none).
bool ServerEndsIt(const std::string& port, const std::string& bytes, bool read_while_sending,
                  int* goaway) {
  *goaway = -1;
  int fd = test::ConnectLoopback(port, read_while_sending ? 0 : 4096);
  if (fd < 0) return false;
  timeval tv{15, 0};
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  std::string out = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + Frame(4, 0, 0, "");
  out += bytes;
  auto send_all = [&] {
    for (size_t off = 0; off < out.size();) {
      ssize_t n = send(fd, out.data() + off, out.size() - off, MSG_NOSIGNAL);
      if (n <= 0) break;
      off += static_cast<size_t>(n);
    }
  };
  std::thread writer;
  if (read_while_sending) {
    writer = std::thread(send_all);
  } else {
    send_all();
  }
  std::string in;
  char buf[65536];
  bool closed = false;
  auto deadline = std::chrono::steady_clock::now() + 15s;
  while (std::chrono::steady_clock::now() < deadline) {
    ssize_t n = recv(fd, buf, sizeof buf, 0);
    if (n > 0) {
      in.append(buf, static_cast<size_t>(n));
      continue;
    }
    closed = n == 0 || errno == ECONNRESET;
    if (closed || (errno != EAGAIN && errno != EINTR)) break;
  }
  shutdown(fd, SHUT_RDWR);
  if (writer.joinable()) writer.join();
  close(fd);
  for (size_t at = 0; at + 9 <= in.size();) {
    const size_t len = (static_cast<size_t>(static_cast<uint8_t>(in[at])) << 16) |
                       (static_cast<size_t>(static_cast<uint8_t>(in[at + 1])) << 8) |
                       static_cast<uint8_t>(in[at + 2]);
    if (in[at + 3] == 7 && at + 9 + 8 <= in.size()) {
      *goaway = static_cast<uint8_t>(in[at + 9 + 7]);
      break;
    }
    at += 9 + len;
  }
  return closed;
}

TEST_P(Http2, FloodsEndTheirConnectionOthersAreServed) {
  if (GetParam().tls) GTEST_SKIP() << "the floods are sent as h2c (the same session code)";
  ASSERT_NO_FATAL_FAILURE(Start());
  const std::string path = "/gen/10K/fl";
  const std::string want = Origin(path);
  EXPECT_EQ(Get(path).body, want);
  // Rapid reset (CVE-2023-44487): HEADERS then RST_STREAM, 5,000 times.
  std::string resets;
  const std::string block = std::string("\x82\x86\x84\x41\x01x", 6);  // GET http / authority x
  for (uint32_t id = 1; id < 10000; id += 2) {
    resets += Frame(1, 0x5, id, block);
    resets += Frame(3, 0, id, std::string("\0\0\0\x08", 4));  // CANCEL
  }
  int goaway = -1;
  EXPECT_TRUE(ServerEndsIt(port_, resets, true, &goaway));
  EXPECT_GT(goaway, 0) << "a GOAWAY with an error";
  EXPECT_EQ(Get(path).body, want);
  // SETTINGS flood: 300,000 SETTINGS frames, their acks left unread.
  std::string settings;
  for (int i = 0; i < 300000; ++i) settings += Frame(4, 0, 0, "");
  EXPECT_TRUE(ServerEndsIt(port_, settings, false, &goaway));
  EXPECT_EQ(Get(path).body, want);
  // Garbage after the preface: a protocol error, the connection ends.
  int fd = test::ConnectLoopback(port_);
  std::string junk = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + std::string(100, '\xff');
  (void)!send(fd, junk.data(), junk.size(), MSG_NOSIGNAL);
  char buf[4096];
  ssize_t n = 0, total = 0;
  while ((n = recv(fd, buf, sizeof buf, 0)) > 0) total += n;
  EXPECT_EQ(n, 0) << "the server should close";
  close(fd);
  EXPECT_EQ(Get(path).body, want);
  std::string log = StopGateway();
  EXPECT_GE(Counter(log, "([0-9]+) connections ended for errors or floods"), 3u) << log;
  EXPECT_GE(Counter(log, "([0-9]+) reset by clients"), 100u) << log;
}

// HTTP/1.1's Upgrade to h2c on the plain port (curl --http2, nghttp -u): the upgraded
// request is stream 1 (miss, hit, HEAD), more streams follow on the connection. Requests
// that are not upgraded (a body, a malformed or refused HTTP2-Settings, HTTP/1.0, HTTP/1.1
// pipelined after it, TLS) are served over HTTP/1.1, and so is the next request.
TEST_P(Http2, UpgradeFromHttp11) {
  ASSERT_NO_FATAL_FAILURE(Start());
  const std::string path = "/gen/3M/up";
  const std::string want = Origin(path);
  const std::vector<std::string> upgrade{"-H", "Upgrade: h2c", "-H",
                                         "Connection: Upgrade, HTTP2-Settings"};
  auto with = [&](std::vector<std::string> a, const std::string& settings) {
    a.insert(a.end(), upgrade.begin(), upgrade.end());
    a.insert(a.end(), {"-H", "HTTP2-Settings: " + settings});
    return a;
  };
  if (GetParam().tls) {  // (an h2 client would use ALPN: TLS never upgrades)
    std::vector<std::string> a = H2();
    a[0] = "--http1.1";
    auto r = CurlUrl(Url(path), with(a, "AAMAAABkAAQCAAAAAAIAAAAA"), "t");
    EXPECT_TRUE(r.headers.starts_with("HTTP/1.1 200")) << r.headers;
    EXPECT_EQ(r.body, want);
    EXPECT_EQ(Counter(StopGateway(), "\\(([0-9]+) upgraded from HTTP/1.1\\)"), 0u);
    return;
  }
  for (const char* cache : {"x-cache: MISS", "x-cache: HIT"}) {
    auto r = CurlUrl(Url(path), {"--http2"}, "u");
    EXPECT_EQ(r.curl_exit, 0);
    EXPECT_TRUE(r.headers.starts_with("HTTP/1.1 101 Switching Protocols")) << r.headers;
    EXPECT_NE(r.headers.find("\nHTTP/2 200"), std::string::npos) << r.headers;
    EXPECT_NE(r.headers.find(cache), std::string::npos) << r.headers;
    EXPECT_TRUE(r.body == want) << r.body.size();
  }
  auto head = CurlUrl(Url(path), {"--http2", "-I"}, "h");
  EXPECT_NE(head.headers.find("\nHTTP/2 200"), std::string::npos) << head.headers;
  EXPECT_NE(head.headers.find("content-length: 3145728"), std::string::npos) << head.headers;
  // nghttp -u: the upgraded request and two more streams on the connection.
  auto [nrc, ng] = test::RunCommand(
      {"/usr/bin/nghttp", "-u", "-n", "-s", Url(path), Url("/gen/110K/ng1"), Url("/gen/5K/ng2")},
      dir_ + "/nghttp.log", 60s);
  EXPECT_EQ(nrc, 0) << ng;
  size_t ok = 0;
  for (size_t at = ng.find(" 200 "); at != std::string::npos; at = ng.find(" 200 ", at + 1)) ++ok;
  EXPECT_EQ(ok, 3u) << ng;
  // Not upgraded.
  auto post = CurlUrl(Url("/gen/1K/post"), {"--http2", "-d", "hello"}, "p");
  EXPECT_TRUE(post.headers.starts_with("HTTP/1.1 200")) << post.headers;
  for (std::string settings : {"A!A", "AAIAAAAC" /* ENABLE_PUSH 2: refused */}) {
    auto r = CurlUrl(Url(path), with({}, settings), "b");
    EXPECT_TRUE(r.headers.starts_with("HTTP/1.1 200")) << settings << "\n" << r.headers;
    EXPECT_TRUE(r.body == want) << settings;
  }
  auto old = CurlUrl(Url(path), with({"--http1.0"}, "AAMAAABk"), "o");
  EXPECT_EQ(old.code, 200);
  EXPECT_EQ(old.headers.find(" 101 "), std::string::npos) << old.headers;
  EXPECT_TRUE(old.body == want);
  int fd = test::ConnectLoopback(port_);
  ASSERT_GE(fd, 0);
  const std::string two =
      "GET /gen/1K/pl HTTP/1.1\r\nHost: x\r\nUpgrade: h2c\r\nConnection: Upgrade, "
      "HTTP2-Settings\r\nHTTP2-Settings: AAMAAABk\r\n\r\n"
      "GET /gen/1K/pl HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
  ASSERT_EQ(send(fd, two.data(), two.size(), MSG_NOSIGNAL), static_cast<ssize_t>(two.size()));
  std::string in;
  char buf[8192];
  for (ssize_t n; (n = recv(fd, buf, sizeof buf, 0)) > 0;) in.append(buf, static_cast<size_t>(n));
  close(fd);
  EXPECT_EQ(in.find(" 101 "), std::string::npos) << in;
  const size_t first = in.find("HTTP/1.1 200");
  EXPECT_NE(first, std::string::npos) << in;
  EXPECT_NE(in.find("HTTP/1.1 200", first + 1), std::string::npos) << in;
  EXPECT_EQ(Curl(path).body, want);  // (and an HTTP/1.1 client after all of it)
  std::string log = StopGateway();
  EXPECT_EQ(Counter(log, "\\(([0-9]+) upgraded from HTTP/1.1\\)"), 4u) << log;
  EXPECT_EQ(Counter(log, "([0-9]+) connections ended for errors or floods"), 0u) << log;
}

// Several workers: parallel misses over HTTP/2 of one key are one origin request.
TEST_P(Http2, WorkersCoalesceMisses) {
  ASSERT_NO_FATAL_FAILURE(Start({"--threads", "2"}));
  const std::string path = "/gen/8M/co?pace=2";
  const std::string want = Origin(path);
  std::vector<Background> clients;
  for (int i = 0; i < 6; ++i)
    clients.push_back(CurlUrlInBackground(Url(path), fmt::format("w{}", i), H2()));
  for (auto& b : clients) {
    Reply r = Finish(b);
    EXPECT_EQ(r.code, 200);
    EXPECT_TRUE(r.body == want) << r.body.size();
  }
  EXPECT_EQ(OriginHits(path), 2);
}

INSTANTIATE_TEST_SUITE_P(Modes, Http2,
                         testing::Values(Mode{"sync", false}, Mode{"async", false},
                                         Mode{"sync", true}, Mode{"async", true}),
                         [](const testing::TestParamInfo<Mode>& i) {
                           return i.param.net + (i.param.tls ? "_h2" : "_h2c");
                         });

}  // namespace
}  // namespace goblin
