// The HTTP front's HTTP/2 (nghttp2): h2 by ALPN on the HTTPS port, h2c by prior knowledge on
// the plain one. Each stream is a connection of its own without a socket (a stream conn:
// Conn::h2_parent set) that goes through exactly the HTTP/1.1 machinery (parser, exchange,
// hits, fills, ranges, conditionals, PURGE, limits): its request is synthesized from the
// stream's headers (and body), and its HTTP/1.1 response is parsed back into HEADERS and
// turned into DATA frames whose payload is lent from the stream conn's pieces
// (NGHTTP2_DATA_FLAG_NO_COPY: the frame header is written into the connection's queue
// followed by a borrowed view of the lent bytes; they go back to the stream conn when
// written, in order, like a socket write). A chunked HTTP/1.1 body (a fill without a
// length) is decoded and copied. Floods are nghttp2's to refuse (stream resets by rate,
// SETTINGS/PING acks, CONTINUATION frames); connections it gives up on are counted.
// See http_server_impl.h.
#include <algorithm>
#include <cstring>

#include "goblin/common/clock.h"
#include "goblin/common/log.h"
#include "http_server_impl.h"

namespace goblin::gateway {
namespace {
constexpr std::string_view kLog = "http";
// The session stops writing frames into a connection's queue above this (resumed as it
// drains): a stream's lent bytes wait in its own conn meanwhile.
constexpr size_t kH2QueueHigh = 1 << 20;

}  // namespace

HttpServer::Impl::Conn* HttpServer::Impl::H2StreamConn(H2Session& h, int32_t id) {
  auto it = h.streams.find(id);
  if (it == h.streams.end()) return nullptr;
  return Find(it->second);
}

void HttpServer::Impl::StartH2(Conn& c) {
  c.h2_checked = true;
  auto h = std::make_unique<H2Session>();
  h->impl = this;
  h->conn = c.id;
  nghttp2_session_callbacks* cb = nullptr;
  nghttp2_session_callbacks_new(&cb);
  nghttp2_session_callbacks_set_send_callback(cb, &Impl::H2OnSend);
  nghttp2_session_callbacks_set_send_data_callback(cb, &Impl::H2OnSendData);
  nghttp2_session_callbacks_set_on_begin_headers_callback(cb, &Impl::H2OnBeginHeaders);
  nghttp2_session_callbacks_set_on_header_callback(cb, &Impl::H2OnHeader);
  nghttp2_session_callbacks_set_on_frame_recv_callback(cb, &Impl::H2OnFrameRecv);
  nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cb, &Impl::H2OnDataChunk);
  nghttp2_session_callbacks_set_on_stream_close_callback(cb, &Impl::H2OnStreamClose);
  nghttp2_session_callbacks_set_on_frame_send_callback(cb, &Impl::H2OnFrameSend);
  nghttp2_option* opt = nullptr;
  nghttp2_option_new(&opt);
  h2::SetServerLimits(opt);  // (the flood limits)
  int r = nghttp2_session_server_new2(&h->session, cb, h.get(), opt);
  nghttp2_option_del(opt);
  nghttp2_session_callbacks_del(cb);
  if (r != 0) {
    GOBLIN_LOG_WARN(kLog, "HTTP/2 session: {}", nghttp2_strerror(r));
    Close(c);
    return;
  }
  const nghttp2_settings_entry settings[] = {
      {NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS, options_.h2_max_streams},
      {NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, options_.h2_window},
      {NGHTTP2_SETTINGS_MAX_HEADER_LIST_SIZE,
       static_cast<uint32_t>(options_.limits.max_header_bytes)}};
  nghttp2_submit_settings(h->session, NGHTTP2_FLAG_NONE, settings, std::size(settings));
  nghttp2_session_set_local_window_size(h->session, NGHTTP2_FLAG_NONE, 0,
                                        static_cast<int32_t>(options_.h2_window));
  c.h2 = std::move(h);
  ++stats_.h2_connections;
  dirty_.push_back(&c);
}

// RFC 7540 3.2 (RFC 9113 deprecates it; curl --http2 and nghttp -u still ask): a bodiless
// HTTP/1.1 request with "Upgrade: h2c", "upgrade" among its Connection options and exactly
// one HTTP2-Settings, with nothing pipelined after it but (the start of) the preface, is
// answered 101 and then on stream 1 of an HTTP/2 session. Anything else (a body, HTTP/1.0,
// TLS, a malformed HTTP2-Settings) is served over HTTP/1.1: upgrading is the server's option.
bool HttpServer::Impl::UpgradeToH2(Conn& c, const http::Request& r) {
  if (!options_.http2 || c.tls || c.h2_parent != 0 || r.minor != 1 ||
      !http::HasToken(r.Get("upgrade"), "h2c") || !http::HasToken(r.Get("connection"), "upgrade"))
    return false;
  const http::Header* settings = nullptr;
  for (const http::Header& hd : r.headers) {
    if (!http::IEquals(hd.name, "http2-settings")) continue;
    if (settings != nullptr) return false;
    settings = &hd;
  }
  if (settings == nullptr) return false;
  const std::string_view rest = std::string_view(c.in).substr(r.head_bytes);
  if (rest.substr(0, kH2Preface.size()) != kH2Preface.substr(0, rest.size())) return false;
  std::string payload;
  if (!http::DecodeBase64Url(settings->value, &payload) || !h2::ValidSettingsPayload(payload))
    return false;
  const bool head = r.method == "HEAD";
  StartH2(c);
  if (!c.h2) return true;  // (closed: the session could not be made)
  if (nghttp2_session_upgrade2(c.h2->session, reinterpret_cast<const uint8_t*>(payload.data()),
                               payload.size(), head ? 1 : 0, nullptr) != 0) {
    c.h2.reset();  // (settings nghttp2 refuses: HTTP/1.1 it stays)
    --stats_.h2_connections;
    return false;
  }
  ++stats_.h2_upgrades;
  // The 101 goes out before the session's first frame (its SETTINGS): frames are queued
  // only when the connection flushes.
  Write(c,
        std::string(
            "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: h2c\r\n\r\n"),
        false, /*mark_dirty=*/false);
  c.h2->await_settings = true;
  Conn& s = NewH2Stream(*c.h2, c, 1);
  s.h2s->dispatched = true;
  s.h2s->head = head;
  s.in.assign(c.in, 0, r.head_bytes);  // (the request as it came; `r` views c.in)
  c.in.erase(0, r.head_bytes);
  const uint64_t id = c.id;
  ProcessRequests(s);
  if (Conn* again = Find(id); again != nullptr && !again->closed && again->h2) H2Receive(*again);
  return true;
}

void HttpServer::Impl::H2Receive(Conn& c) {
  if (c.in.empty()) return;
  ssize_t r = nghttp2_session_mem_recv(c.h2->session, reinterpret_cast<const uint8_t*>(c.in.data()),
                                       c.in.size());
  c.in.clear();
  if (r < 0) {
    // A flood or a protocol error: nghttp2 has queued its GOAWAY; it goes out, then the
    // connection closes.
    ++stats_.h2_goaways;
    GOBLIN_LOG_DEBUG(kLog, "HTTP/2 from {}: {}", c.peer, nghttp2_strerror(static_cast<int>(r)));
    c.close_after = true;
  }
  if (!c.closed) dirty_.push_back(&c);
}

bool HttpServer::Impl::H2Send(Conn& c) {
  int r = nghttp2_session_send(c.h2->session);
  if (r != 0) {
    GOBLIN_LOG_DEBUG(kLog, "HTTP/2 to {}: {}", c.peer, nghttp2_strerror(r));
    Close(c);
    return false;
  }
  // The session is over (GOAWAY both ways, or a fatal error): close once the queue is out.
  if (!nghttp2_session_want_read(c.h2->session) && !nghttp2_session_want_write(c.h2->session))
    c.close_after = true;
  return true;
}

ssize_t HttpServer::Impl::H2OnSend(nghttp2_session*, const uint8_t* data, size_t length, int,
                                   void* user) {
  auto& h = *static_cast<H2Session*>(user);
  auto& self = *static_cast<Impl*>(h.impl);
  Conn* c = self.Find(h.conn);
  if (c == nullptr) return NGHTTP2_ERR_CALLBACK_FAILURE;
  if (c->out_bytes > kH2QueueHigh) return NGHTTP2_ERR_WOULDBLOCK;
  // Control frames and headers: appended to the last piece of our own while no write is in
  // flight on it (an io_uring write points into it), else a piece of their own.
  if (!c->out.empty() && !c->write_inflight) {
    Piece& last = c->out.back();
    if (!last.owned.empty() && last.h2_child == 0 && last.stamp == 0 && !last.response_head &&
        last.owned.size() + length <= kSpareStringMax) {
      last.owned.append(reinterpret_cast<const char*>(data), length);
      c->out_bytes += length;
      return static_cast<ssize_t>(length);
    }
  }
  std::string s = self.TakeString();
  s.assign(reinterpret_cast<const char*>(data), length);
  self.Write(*c, std::move(s), false, /*mark_dirty=*/false);
  return static_cast<ssize_t>(length);
}

ssize_t HttpServer::Impl::H2OnRead(nghttp2_session*, int32_t stream_id, uint8_t*, size_t length,
                                   uint32_t* data_flags, nghttp2_data_source*, void* user) {
  auto& h = *static_cast<H2Session*>(user);
  auto& self = *static_cast<Impl*>(h.impl);
  Conn* s = self.H2StreamConn(h, stream_id);
  if (s == nullptr) return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;  // (reset it)
  H2Stream& st = *s->h2s;
  uint64_t avail;
  if (st.framing == H2Stream::Body::kChunked) {
    avail = st.decoded.size() - st.reserved;
  } else {
    avail = s->out_bytes - s->h2_lent - st.reserved;
    if (st.framing == H2Stream::Body::kLength) avail = std::min(avail, st.left);
  }
  const size_t n = std::min<uint64_t>(length, avail);
  *data_flags |= NGHTTP2_DATA_FLAG_NO_COPY;
  if (st.framing == H2Stream::Body::kLength) st.left -= n;
  st.reserved += n;
  const bool last = st.framing == H2Stream::Body::kLength ? st.left == 0 : st.ended && n == avail;
  if (last) {
    *data_flags |= NGHTTP2_DATA_FLAG_EOF;
    return static_cast<ssize_t>(n);
  }
  if (n == 0) {
    // Nothing more will come: the exchange ended before its body (it failed after its
    // head went out): the stream is reset (nghttp2 resets it with INTERNAL_ERROR).
    if (!s->ex && s->close_after) {
      st.reset = true;
      return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
    }
    st.deferred = true;
    return NGHTTP2_ERR_DEFERRED;
  }
  return static_cast<ssize_t>(n);
}

int HttpServer::Impl::H2OnSendData(nghttp2_session*, nghttp2_frame* frame, const uint8_t* framehd,
                                   size_t length, nghttp2_data_source*, void* user) {
  auto& h = *static_cast<H2Session*>(user);
  auto& self = *static_cast<Impl*>(h.impl);
  Conn* c = self.Find(h.conn);
  Conn* s = self.H2StreamConn(h, frame->hd.stream_id);
  if (c == nullptr || s == nullptr) return NGHTTP2_ERR_CALLBACK_FAILURE;
  if (c->out_bytes > kH2QueueHigh) return NGHTTP2_ERR_WOULDBLOCK;
  H2Stream& st = *s->h2s;
  std::string hd = self.TakeString();
  hd.assign(reinterpret_cast<const char*>(framehd), 9);
  const size_t pad = frame->data.padlen;
  if (pad > 0) hd.push_back(static_cast<char>(pad - 1));
  self.Write(*c, std::move(hd), false, /*mark_dirty=*/false);
  st.reserved -= length;
  if (st.framing == H2Stream::Body::kChunked) {  // decoded bytes: copied
    std::string d = self.TakeString();
    d.assign(st.decoded, 0, length);
    st.decoded.erase(0, length);
    self.Write(*c, std::move(d), false, /*mark_dirty=*/false);
  } else {
    // Lent: views of the stream conn's pieces after what is lent already, in order.
    size_t skip = s->first_off + s->h2_lent, left = length;
    for (size_t i = 0; i < s->out.size() && left > 0; ++i) {
      const Piece& p = s->out[i];
      const size_t len = p.owned.empty() ? p.len : p.owned.size();
      if (skip >= len) {
        skip -= len;
        continue;
      }
      const uint8_t* base =
          p.owned.empty() ? p.ptr : reinterpret_cast<const uint8_t*>(p.owned.data());
      const size_t n = std::min(len - skip, left);
      Piece v;
      v.ptr = base + skip;
      v.len = n;
      v.h2_child = s->id;
      if (c->out.empty()) c->last_progress = MonotonicNanos();
      c->out_bytes += n;
      c->out.push_back(std::move(v));
      s->h2_lent += n;
      left -= n;
      skip = 0;
    }
    if (left > 0) return NGHTTP2_ERR_CALLBACK_FAILURE;  // (cannot happen: read reserved it)
  }
  if (pad > 1) self.Write(*c, std::string(pad - 1, '\0'), false, /*mark_dirty=*/false);
  return 0;
}

HttpServer::Impl::Conn& HttpServer::Impl::NewH2Stream(H2Session& h, Conn& parent, int32_t id) {
  std::unique_ptr<Conn> s;
  if (!spare_conns_.empty()) {
    s = std::move(spare_conns_.back());
    spare_conns_.pop_back();
  } else {
    s = std::make_unique<Conn>();
  }
  s->id = next_tag_++;
  s->h2_parent = parent.id;
  s->h2_checked = true;
  s->peer = parent.peer;
  s->last_active = MonotonicNanos();
  s->h2s = std::make_unique<H2Stream>();
  s->h2s->id = id;
  h.streams[id] = s->id;
  Conn& ref = *s;
  conns_.emplace(s->id, std::move(s));
  ++stats_.h2_streams;
  return ref;
}

int HttpServer::Impl::H2OnBeginHeaders(nghttp2_session*, const nghttp2_frame* frame, void* user) {
  if (frame->hd.type != NGHTTP2_HEADERS || frame->headers.cat != NGHTTP2_HCAT_REQUEST) return 0;
  auto& h = *static_cast<H2Session*>(user);
  auto& self = *static_cast<Impl*>(h.impl);
  Conn* parent = self.Find(h.conn);
  if (parent == nullptr) return NGHTTP2_ERR_CALLBACK_FAILURE;
  (void)self.NewH2Stream(h, *parent, frame->hd.stream_id);
  return 0;
}

int HttpServer::Impl::H2OnHeader(nghttp2_session*, const nghttp2_frame* frame, const uint8_t* name,
                                 size_t namelen, const uint8_t* value, size_t valuelen, uint8_t,
                                 void* user) {
  if (frame->hd.type != NGHTTP2_HEADERS || frame->headers.cat != NGHTTP2_HCAT_REQUEST) return 0;
  auto& h = *static_cast<H2Session*>(user);
  auto& self = *static_cast<Impl*>(h.impl);
  Conn* s = self.H2StreamConn(h, frame->hd.stream_id);
  if (s == nullptr) return 0;
  std::string_view n(reinterpret_cast<const char*>(name), namelen);
  std::string_view v(reinterpret_cast<const char*>(value), valuelen);
  if (!s->h2s->request.Add(n, v, self.options_.limits.max_header_bytes))
    return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;  // (the stream is reset)
  return 0;
}

int HttpServer::Impl::H2OnDataChunk(nghttp2_session*, uint8_t, int32_t stream_id,
                                    const uint8_t* data, size_t len, void* user) {
  auto& h = *static_cast<H2Session*>(user);
  auto& self = *static_cast<Impl*>(h.impl);
  Conn* s = self.H2StreamConn(h, stream_id);
  if (s == nullptr || s->h2s->dispatched) return 0;
  s->h2s->body.append(reinterpret_cast<const char*>(data), len);
  // Past --max-body: answered now (413, as the HTTP/1.1 front does), the rest ignored.
  if (s->h2s->body.size() > self.options_.max_body) self.DispatchH2Stream(*s);
  return 0;
}

int HttpServer::Impl::H2OnFrameRecv(nghttp2_session*, const nghttp2_frame* frame, void* user) {
  auto& h = *static_cast<H2Session*>(user);
  auto& self = *static_cast<Impl*>(h.impl);
  if (frame->hd.type == NGHTTP2_RST_STREAM) ++self.stats_.h2_resets;
  if (frame->hd.type == NGHTTP2_SETTINGS && h.await_settings) {
    h.await_settings = false;  // (an upgraded connection's stream 1 may answer now)
    if (Conn* s = self.H2StreamConn(h, 1)) self.dirty_.push_back(s);
  }
  if ((frame->hd.type == NGHTTP2_HEADERS || frame->hd.type == NGHTTP2_DATA) &&
      (frame->hd.flags & NGHTTP2_FLAG_END_STREAM) != 0) {
    if (Conn* s = self.H2StreamConn(h, frame->hd.stream_id); s != nullptr && !s->h2s->dispatched)
      self.DispatchH2Stream(*s);
  }
  return 0;
}

int HttpServer::Impl::H2OnStreamClose(nghttp2_session*, int32_t stream_id, uint32_t, void* user) {
  auto& h = *static_cast<H2Session*>(user);
  auto& self = *static_cast<Impl*>(h.impl);
  auto it = h.streams.find(stream_id);
  if (it == h.streams.end()) return 0;
  const uint64_t id = it->second;
  h.streams.erase(it);
  if (Conn* s = self.Find(id)) self.Close(*s);
  return 0;
}

int HttpServer::Impl::H2OnFrameSend(nghttp2_session*, const nghttp2_frame* frame, void* user) {
  auto& h = *static_cast<H2Session*>(user);
  auto& self = *static_cast<Impl*>(h.impl);
  if (frame->hd.type == NGHTTP2_GOAWAY && frame->goaway.error_code != NGHTTP2_NO_ERROR) {
    ++self.stats_.h2_goaways;
    if (Conn* c = self.Find(h.conn)) {
      GOBLIN_LOG_DEBUG(kLog, "HTTP/2: GOAWAY to {} ({})", c->peer,
                       nghttp2_http2_strerror(frame->goaway.error_code));
    }
  }
  return 0;
}

void HttpServer::Impl::DispatchH2Stream(Conn& s) {
  H2Stream& st = *s.h2s;
  st.dispatched = true;
  st.head = st.request.method() == "HEAD";
  st.request.ToHttp1(st.body, st.body.size() <= options_.max_body, &s.in);  // (else 413)
  st.body.clear();
  st.body.shrink_to_fit();
  st.request.Clear();
  ProcessRequests(s);
}

void HttpServer::Impl::FlushH2Stream(Conn& s) {
  H2Stream& st = *s.h2s;
  Conn* c = Find(s.h2_parent);
  if (c == nullptr || !c->h2 || st.reset || c->h2->await_settings) return;
  nghttp2_session* session = c->h2->session;
  bool changed = false;  // (the session has something new to write: the connection flushes)
  while (!st.submitted && s.out_bytes > 0) {
    // The response head, from the front of the stream conn's output (what Respond,
    // HitHead and the fills write: an HTTP/1.1 status line and headers).
    std::string& probe = h2_probe_;  // (its capacity kept from one response to the next)
    probe.clear();
    for (size_t i = 0; i < s.out.size() && probe.find("\r\n\r\n") == std::string::npos; ++i) {
      const Piece& p = s.out[i];
      const size_t off = i == 0 ? s.first_off : 0;
      const char* b = p.owned.empty() ? reinterpret_cast<const char*>(p.ptr) : p.owned.data();
      probe.append(b + off, (p.owned.empty() ? p.len : p.owned.size()) - off);
      if (probe.size() > 2 * options_.limits.max_header_bytes) break;
    }
    http::Response& resp = h2_response_;
    http::Parse pr = http::ParseResponse(probe, options_.limits, st.head, &resp);
    if (pr == http::Parse::kNeedMore && probe.size() <= 2 * options_.limits.max_header_bytes)
      return;
    if (pr != http::Parse::kComplete) {
      GOBLIN_LOG_WARN(kLog, "HTTP/2 stream {}: the response head does not parse", st.id);
      st.reset = true;
      nghttp2_submit_rst_stream(session, NGHTTP2_FLAG_NONE, st.id, NGHTTP2_INTERNAL_ERROR);
      dirty_.push_back(c);
      return;
    }
    if (resp.status < 200) {  // (informational: not passed on)
      (void)Advance(s, resp.head_bytes);
      continue;
    }
    const std::span<const nghttp2_nv> nv = h2_head_.From(resp);
    if (st.head || resp.status == 204 || resp.status == 304) {
      st.framing = H2Stream::Body::kNone;
    } else if (resp.framing.chunked) {
      st.framing = H2Stream::Body::kChunked;
    } else if (resp.framing.content_length) {
      st.framing = H2Stream::Body::kLength;
      st.left = *resp.framing.content_length;
    } else {
      st.framing = H2Stream::Body::kUntilClose;
    }
    nghttp2_data_provider dp{};
    dp.read_callback = &Impl::H2OnRead;
    const bool body = st.framing != H2Stream::Body::kNone &&
                      !(st.framing == H2Stream::Body::kLength && st.left == 0);
    int r = nghttp2_submit_response(session, st.id, nv.data(), nv.size(), body ? &dp : nullptr);
    changed = true;
    // (the head's bytes are consumed: nghttp2 copied the fields)
    st.submitted = true;
    (void)Advance(s, resp.head_bytes);
    if (r != 0) {
      GOBLIN_LOG_WARN(kLog, "HTTP/2 stream {}: {}", st.id, nghttp2_strerror(r));
      st.reset = true;
      nghttp2_submit_rst_stream(session, NGHTTP2_FLAG_NONE, st.id, NGHTTP2_INTERNAL_ERROR);
    }
    if (!body) st.ended = true;
  }
  if (!st.submitted) return;
  if (st.framing == H2Stream::Body::kChunked) {
    // Decoded and copied; the raw bytes go back at once.
    while (!s.out.empty() && !st.ended) {
      const Piece& p = s.out.front();
      const char* b = p.owned.empty() ? reinterpret_cast<const char*>(p.ptr) : p.owned.data();
      std::string_view in(b, p.owned.empty() ? p.len : p.owned.size());
      size_t pos = s.first_off;
      std::vector<std::string_view> parts;
      http::Parse pr = st.chunked.Feed(in, &pos, &parts);
      for (std::string_view part : parts) st.decoded.append(part);
      (void)Advance(s, pos - s.first_off);
      if (pr == http::Parse::kComplete) st.ended = true;
      if (pr == http::Parse::kError) {
        st.reset = true;
        nghttp2_submit_rst_stream(session, NGHTTP2_FLAG_NONE, st.id, NGHTTP2_INTERNAL_ERROR);
        dirty_.push_back(c);
        return;
      }
      if (pr == http::Parse::kNeedMore && pos == s.first_off) break;
    }
  } else if (st.framing == H2Stream::Body::kNone && s.out_bytes > s.h2_lent) {
    (void)Advance(s, s.out_bytes - s.h2_lent);  // (nothing more belongs to this response)
  }
  if (st.framing == H2Stream::Body::kUntilClose && !s.ex) st.ended = true;
  // The exchange ended before its body did (the origin or the core failed mid-body; the
  // HTTP/1.1 front would close the connection): the stream is reset.
  const uint64_t unframed = st.framing == H2Stream::Body::kChunked
                                ? st.decoded.size() - st.reserved
                                : s.out_bytes - s.h2_lent - st.reserved;
  if (!s.ex && s.close_after && unframed == 0 &&
      ((st.framing == H2Stream::Body::kLength && st.left > 0) ||
       (st.framing == H2Stream::Body::kChunked && !st.ended))) {
    st.reset = true;
    nghttp2_submit_rst_stream(session, NGHTTP2_FLAG_NONE, st.id, NGHTTP2_INTERNAL_ERROR);
    changed = true;
  } else if (st.deferred && (unframed > 0 || st.ended)) {
    st.deferred = false;
    nghttp2_session_resume_data(session, st.id);
    changed = true;
  }
  // (bytes the session has not framed yet: it frames them when the connection flushes)
  if (changed || unframed > 0) dirty_.push_back(c);
}

void HttpServer::Impl::H2Returned(uint64_t child, size_t n, bool written) {
  auto it = conns_.find(child);
  if (it == conns_.end()) return;
  Conn& s = *it->second;
  s.h2_lent -= n;
  if (written && !s.closed) {
    // (what it may frame next does not change: its queue and what it lent shrink alike)
    (void)Advance(s, n);
  } else if (s.closed) {
    if (written) s.written_total += n;  // (the access log's count)
    if (s.h2_lent == 0) {
      if (s.logs_n != 0) EmitLogs(s, true);
      ReleasePieces(s);
    }
  }
}

void HttpServer::Impl::ResetH2Stream(Conn& s) {
  Conn* c = Find(s.h2_parent);
  if (c != nullptr && c->h2 && !s.h2s->reset) {
    s.h2s->reset = true;
    nghttp2_submit_rst_stream(c->h2->session, NGHTTP2_FLAG_NONE, s.h2s->id, NGHTTP2_CANCEL);
    dirty_.push_back(c);
  }
  Close(s);
}

void HttpServer::Impl::CloseH2Streams(Conn& c) {
  if (!c.h2) return;
  std::vector<uint64_t> ids;
  for (auto& [stream, id] : c.h2->streams) ids.push_back(id);
  c.h2->streams.clear();
  for (uint64_t id : ids) {
    if (Conn* s = Find(id)) Close(*s);
  }
}

}  // namespace goblin::gateway
