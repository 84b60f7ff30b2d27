// Fuzz target: the HTTP front's HTTP/2 translation (goblin/gateway/h2_message.h) behind
// nghttp2's own sessions, configured as the front configures them. The first byte picks:
//   0: raw client bytes after the connection preface, into a server session;
//   1: a request made of the input's lines ("name:value", ":path:/x", a blank line, then the
//      body), encoded by an nghttp2 client session (so HPACK is right and the fuzzer spends
//      its time on the fields), into the same server session;
//   2: an HTTP/1.1 response head, made into HEADERS by ResponseHead, sent by a server
//      session to a client session that asked for it.
// For 0 and 1, every request the server session accepts is turned into HTTP/1.1 and parsed
// by the front's parser: it must parse whole or be refused with an error status, never need
// more bytes, and a whole parse must be the same request (method, target, Host, every other
// field in order, cookies joined, Content-Length = the body received, nothing after the
// body): an HTTP/2 request can never become a different or a second HTTP/1.1 request.
// For 2, the client session (which checks every response field as RFC 9113 requires)
// must receive exactly the head's fields, lower-cased, connection-specific ones left out,
// and must not reset the stream.
#include <nghttp2/nghttp2.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "goblin/gateway/h2_message.h"
#include "goblin/gateway/http.h"

namespace h2 = goblin::gateway::h2;
namespace http = goblin::gateway::http;

namespace {
constexpr std::string_view kPreface = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
constexpr size_t kMaxHeaderBytes = 16 * 1024;

void Check(bool ok) {
  if (!ok) std::abort();
}

std::string_view Trim(std::string_view v) {
  while (!v.empty() && (v.front() == ' ' || v.front() == '\t')) v.remove_prefix(1);
  while (!v.empty() && (v.back() == ' ' || v.back() == '\t')) v.remove_suffix(1);
  return v;
}

// ---- requests: a server session as the front runs it ----

struct StreamModel {
  h2::RequestBuilder builder;
  bool refused = false;  // past the header limit (the front resets it)
  // What the HTTP/1.1 request must say, kept here independently of the builder.
  std::vector<std::pair<std::string, std::string>> fields;
  std::string cookies, body;
};

struct Server {
  nghttp2_session* session = nullptr;
  std::map<int32_t, StreamModel> streams;
  std::string request;  // (the builder's output, reused)
  http::Request parsed;

  void Dispatch(StreamModel& m) {
    if (m.refused) return;
    m.builder.ToHttp1(m.body, true, &request);
    int status = 0;
    http::Limits limits;
    const http::Parse p = http::ParseRequest(request, limits, &parsed, &status);
    Check(p != http::Parse::kNeedMore);  // (a whole request, always)
    if (p == http::Parse::kError) {
      Check(status >= 400 && status < 600);
      return;
    }
    const std::string& method = m.builder.method();
    const std::string& target = m.builder.path().empty() ? m.builder.authority() : m.builder.path();
    Check(parsed.method == method && parsed.target == target && parsed.minor == 1);
    Check(!parsed.framing.chunked);
    // Host, the fields in order, the cookies, the length; nothing else.
    size_t i = 0;
    const auto next = [&](std::string_view name, std::string_view value) {
      Check(i < parsed.headers.size() && http::IEquals(parsed.headers[i].name, name) &&
            parsed.headers[i].value == Trim(value));
      ++i;
    };
    next("host", m.builder.authority());
    for (const auto& [n, v] : m.fields) next(n, v);
    if (!m.cookies.empty()) next("cookie", m.cookies);
    const bool length = !m.body.empty() || (method != "GET" && method != "HEAD");
    if (length) next("content-length", std::to_string(m.body.size()));
    Check(i == parsed.headers.size());
    Check(parsed.framing.content_length.value_or(0) == m.body.size());
    Check(parsed.head_bytes + m.body.size() == request.size());
    Check(std::string_view(request).substr(parsed.head_bytes) == m.body);
  }

  static int OnBeginHeaders(nghttp2_session*, const nghttp2_frame* f, void* user) {
    if (f->hd.type == NGHTTP2_HEADERS && f->headers.cat == NGHTTP2_HCAT_REQUEST)
      static_cast<Server*>(user)->streams[f->hd.stream_id] = StreamModel{};
    return 0;
  }
  static int OnHeader(nghttp2_session*, const nghttp2_frame* f, const uint8_t* name, size_t nlen,
                      const uint8_t* value, size_t vlen, uint8_t, void* user) {
    if (f->hd.type != NGHTTP2_HEADERS || f->headers.cat != NGHTTP2_HCAT_REQUEST) return 0;
    auto& self = *static_cast<Server*>(user);
    auto it = self.streams.find(f->hd.stream_id);
    Check(it != self.streams.end());
    StreamModel& m = it->second;
    std::string_view n(reinterpret_cast<const char*>(name), nlen);
    std::string_view v(reinterpret_cast<const char*>(value), vlen);
    if (!m.builder.Add(n, v, kMaxHeaderBytes)) {
      m.refused = true;
      return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
    }
    if (n == "cookie") {
      if (!m.cookies.empty()) m.cookies += "; ";
      m.cookies.append(v);
    } else if (!n.starts_with(':') && n != "host" && n != "content-length") {
      m.fields.emplace_back(n, v);
    }
    return 0;
  }
  static int OnData(nghttp2_session*, uint8_t, int32_t id, const uint8_t* data, size_t len,
                    void* user) {
    auto& self = *static_cast<Server*>(user);
    if (auto it = self.streams.find(id); it != self.streams.end())
      it->second.body.append(reinterpret_cast<const char*>(data), len);
    return 0;
  }
  static int OnFrame(nghttp2_session*, const nghttp2_frame* f, void* user) {
    auto& self = *static_cast<Server*>(user);
    if ((f->hd.type == NGHTTP2_HEADERS || f->hd.type == NGHTTP2_DATA) &&
        (f->hd.flags & NGHTTP2_FLAG_END_STREAM) != 0) {
      if (auto it = self.streams.find(f->hd.stream_id); it != self.streams.end()) {
        self.Dispatch(it->second);
        self.streams.erase(it);
      }
    }
    return 0;
  }
  static ssize_t OnSend(nghttp2_session*, const uint8_t*, size_t len, int, void*) {
    return static_cast<ssize_t>(len);  // (the server's frames go nowhere)
  }

  Server() {
    nghttp2_session_callbacks* cb = nullptr;
    nghttp2_session_callbacks_new(&cb);
    nghttp2_session_callbacks_set_send_callback(cb, &OnSend);
    nghttp2_session_callbacks_set_on_begin_headers_callback(cb, &OnBeginHeaders);
    nghttp2_session_callbacks_set_on_header_callback(cb, &OnHeader);
    nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cb, &OnData);
    nghttp2_session_callbacks_set_on_frame_recv_callback(cb, &OnFrame);
    nghttp2_option* opt = nullptr;
    nghttp2_option_new(&opt);
    h2::SetServerLimits(opt);
    Check(nghttp2_session_server_new2(&session, cb, this, opt) == 0);
    nghttp2_option_del(opt);
    nghttp2_session_callbacks_del(cb);
    const nghttp2_settings_entry settings[] = {
        {NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS, 100},
        {NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, 1 << 20},
        {NGHTTP2_SETTINGS_MAX_HEADER_LIST_SIZE, kMaxHeaderBytes}};
    nghttp2_submit_settings(session, NGHTTP2_FLAG_NONE, settings, std::size(settings));
  }
  ~Server() { nghttp2_session_del(session); }
  void Receive(std::string_view bytes) {
    (void)nghttp2_session_mem_recv(session, reinterpret_cast<const uint8_t*>(bytes.data()),
                                   bytes.size());
    (void)nghttp2_session_send(session);
  }
};

// ---- a client session, to encode requests and to receive responses ----

struct Client {
  nghttp2_session* session = nullptr;
  std::string out;  // what it sent
  std::vector<std::pair<std::string, std::string>> got;
  bool closed = false;
  uint32_t close_code = 0;
  std::string_view body;  // (the request's, read once)

  static ssize_t OnSend(nghttp2_session*, const uint8_t* d, size_t len, int, void* user) {
    static_cast<Client*>(user)->out.append(reinterpret_cast<const char*>(d), len);
    return static_cast<ssize_t>(len);
  }
  static int OnHeader(nghttp2_session*, const nghttp2_frame*, const uint8_t* name, size_t nlen,
                      const uint8_t* value, size_t vlen, uint8_t, void* user) {
    static_cast<Client*>(user)->got.emplace_back(
        std::string(reinterpret_cast<const char*>(name), nlen),
        std::string(reinterpret_cast<const char*>(value), vlen));
    return 0;
  }
  static int OnClose(nghttp2_session*, int32_t, uint32_t code, void* user) {
    auto& self = *static_cast<Client*>(user);
    self.closed = true;
    self.close_code = code;
    return 0;
  }
  static ssize_t Read(nghttp2_session*, int32_t, uint8_t* buf, size_t len, uint32_t* flags,
                      nghttp2_data_source*, void* user) {
    auto& self = *static_cast<Client*>(user);
    const size_t n = std::min(len, self.body.size());
    std::copy_n(self.body.data(), n, buf);
    self.body.remove_prefix(n);
    if (self.body.empty()) *flags |= NGHTTP2_DATA_FLAG_EOF;
    return static_cast<ssize_t>(n);
  }

  Client() {
    nghttp2_session_callbacks* cb = nullptr;
    nghttp2_session_callbacks_new(&cb);
    nghttp2_session_callbacks_set_send_callback(cb, &OnSend);
    nghttp2_session_callbacks_set_on_header_callback(cb, &OnHeader);
    nghttp2_session_callbacks_set_on_stream_close_callback(cb, &OnClose);
    Check(nghttp2_session_client_new(&session, cb, this) == 0);
    nghttp2_session_callbacks_del(cb);
    nghttp2_submit_settings(session, NGHTTP2_FLAG_NONE, nullptr, 0);
  }
  ~Client() { nghttp2_session_del(session); }
  int32_t Request(const std::vector<nghttp2_nv>& nv, std::string_view with_body) {
    body = with_body;
    nghttp2_data_provider dp{};
    dp.read_callback = &Read;
    int32_t id = nghttp2_submit_request(session, nullptr, nv.data(), nv.size(),
                                        with_body.empty() ? nullptr : &dp, nullptr);
    (void)nghttp2_session_send(session);
    return id;
  }
};

nghttp2_nv Nv(std::string_view n, std::string_view v) {
  return {reinterpret_cast<uint8_t*>(const_cast<char*>(n.data())),
          reinterpret_cast<uint8_t*>(const_cast<char*>(v.data())), n.size(), v.size(),
          NGHTTP2_NV_FLAG_NONE};
}

void StructuredRequest(std::string_view in) {
  std::vector<nghttp2_nv> nv;
  std::string_view body;
  while (!in.empty()) {
    const size_t nl = in.find('\n');
    std::string_view line = in.substr(0, nl);
    in = nl == std::string_view::npos ? std::string_view() : in.substr(nl + 1);
    if (line.empty()) {
      body = in;
      break;
    }
    const size_t colon = line.find(':', line.starts_with(':') ? 1 : 0);
    if (colon == std::string_view::npos) continue;
    nv.push_back(Nv(line.substr(0, colon), line.substr(colon + 1)));
  }
  Client client;
  (void)client.Request(nv, body);
  Server server;
  server.Receive(client.out);
}

void ResponseHead(std::string_view in) {
  http::Response resp;
  http::Limits limits;
  limits.max_header_bytes = kMaxHeaderBytes;
  if (http::ParseResponse(in, limits, false, &resp) != http::Parse::kComplete ||
      resp.status < 200 || resp.status > 999)
    return;
  h2::ResponseHead head;
  const std::span<const nghttp2_nv> nv = head.From(resp);
  std::vector<std::pair<std::string, std::string>> want;
  want.emplace_back(":status", std::to_string(resp.status));
  bool length = false;
  for (const http::Header& hd : resp.headers) {
    std::string n(hd.name);
    for (char& c : n) c = c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c;
    if (h2::ConnectionSpecific(n)) continue;
    if (n == "content-length") {
      if (length || resp.status == 204) continue;
      length = true;
    }
    want.emplace_back(n, std::string(hd.value));
  }
  Check(nv.size() == want.size());
  // (the body its Content-Length promises, so the client's length check passes)
  uint64_t body = resp.framing.content_length.value_or(0);
  if (resp.status == 204 || resp.status == 304) body = 0;
  if (body > 65535) return;  // (what the default windows let through without an update)
  // Through a real pair of sessions: the client checks each field as an HTTP/2 peer does.
  Client client;
  const nghttp2_nv get[] = {Nv(":method", "GET"), Nv(":scheme", "http"), Nv(":path", "/"),
                            Nv(":authority", "h")};
  const int32_t id = client.Request(std::vector<nghttp2_nv>(std::begin(get), std::end(get)), {});
  Check(id == 1);
  nghttp2_session_callbacks* cb = nullptr;
  nghttp2_session_callbacks_new(&cb);
  std::string server_out;
  nghttp2_session_callbacks_set_send_callback(
      cb, [](nghttp2_session*, const uint8_t* d, size_t len, int, void* user) -> ssize_t {
        static_cast<std::string*>(user)->append(reinterpret_cast<const char*>(d), len);
        return static_cast<ssize_t>(len);
      });
  nghttp2_session* server = nullptr;
  Check(nghttp2_session_server_new(&server, cb, &server_out) == 0);
  nghttp2_session_callbacks_del(cb);
  nghttp2_submit_settings(server, NGHTTP2_FLAG_NONE, nullptr, 0);
  Check(nghttp2_session_mem_recv(server, reinterpret_cast<const uint8_t*>(client.out.data()),
                                 client.out.size()) == static_cast<ssize_t>(client.out.size()));
  nghttp2_data_provider dp{};
  dp.source.ptr = &body;
  dp.read_callback = [](nghttp2_session*, int32_t, uint8_t* buf, size_t len, uint32_t* flags,
                        nghttp2_data_source* src, void*) -> ssize_t {
    auto& left = *static_cast<uint64_t*>(src->ptr);
    const size_t n = std::min<uint64_t>(len, left);
    std::fill_n(buf, n, 'b');
    left -= n;
    if (left == 0) *flags |= NGHTTP2_DATA_FLAG_EOF;
    return static_cast<ssize_t>(n);
  };
  Check(nghttp2_submit_response(server, id, nv.data(), nv.size(), body > 0 ? &dp : nullptr) == 0);
  Check(nghttp2_session_send(server) == 0);
  nghttp2_session_del(server);
  Check(nghttp2_session_mem_recv(client.session,
                                 reinterpret_cast<const uint8_t*>(server_out.data()),
                                 server_out.size()) == static_cast<ssize_t>(server_out.size()));
  Check(client.closed && client.close_code == NGHTTP2_NO_ERROR);
  Check(client.got == want);
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  std::string_view in(reinterpret_cast<const char*>(data) + 1, size - 1);
  switch (data[0] % 3) {
    case 0: {
      Server server;
      std::string bytes(kPreface);
      bytes.append(in);
      server.Receive(bytes);
      break;
    }
    case 1:
      StructuredRequest(in);
      break;
    default:
      ResponseHead(in);
      break;
  }
  return 0;
}
