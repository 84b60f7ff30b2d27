// The HTTP front's access log lines (--access-log): each exchange's line is made when the
// exchange ends (its response queued) and written to the worker's ring once the response's
// last byte has left (Advance) or the connection ends (Close). The format is in
// access_log.h. Nothing here runs without --access-log (log_ is null).
#include <ctime>

#include "goblin/common/clock.h"
#include "http_server_impl.h"

namespace goblin::gateway {

std::string_view HttpServer::Impl::LogTime(int64_t unix_seconds) {
  if (unix_seconds != log_time_second_) {
    const time_t t = static_cast<time_t>(unix_seconds);
    tm tm{};
    gmtime_r(&t, &tm);
    char buf[40];
    const size_t n = strftime(buf, sizeof buf, "%d/%b/%Y:%H:%M:%S +0000", &tm);
    log_time_.assign(buf, n);
    log_time_second_ = unix_seconds;
  }
  return log_time_;
}

void HttpServer::Impl::NoteResponseHead(Exchange& e, std::string_view head) {
  // (every head the front writes starts "HTTP/1.1 NNN ")
  if (head.size() >= 12) {
    e.status = (head[9] - '0') * 100 + (head[10] - '0') * 10 + (head[11] - '0');
  }
  const size_t end = head.find("\r\n\r\n");
  e.head_len = end == std::string_view::npos ? head.size() : end + 4;
  e.ttfb_ns = MonotonicNanos() - e.start_ns;
  if (options_.timing) ttfb_.Record(e.ttfb_ns);
}

HttpServer::Impl::LogEntry& HttpServer::Impl::NewLogEntry(Conn& c, uint64_t begin, size_t head_len,
                                                          uint64_t start_ns, int64_t start_unix) {
  if (c.logs_n == c.logs.size()) c.logs.emplace_back();
  LogEntry& l = c.logs[c.logs_n++];
  l.begin = begin;
  l.end = c.written_total + c.out_bytes;
  l.head_len = head_len;
  l.start_ns = start_ns;
  l.line.assign(c.peer).append(" - - [").append(LogTime(start_unix)).append("] \"");
  return l;
}

void HttpServer::Impl::LogExchange(Conn& c) {
  if (log_ == nullptr || !c.ex || c.ex->logged) return;
  Exchange& e = *c.ex;
  e.logged = true;
  LogEntry& l = NewLogEntry(c, e.log_begin, e.head_sent ? e.head_len : 0, e.start_ns, e.start_unix);
  AppendLogField(&l.line, e.method);
  l.line.push_back(' ');
  AppendLogField(&l.line, e.target);
  l.line.append(c.h2_parent != 0 ? " HTTP/2.0\" " : e.minor0 ? " HTTP/1.0\" " : " HTTP/1.1\" ");
  // (a client that went away before any head: nginx's 499)
  fmt::format_to(std::back_inserter(l.line), "{} ", e.head_sent ? e.status : 499);
  l.tail.assign("\"");
  AppendLogField(&l.tail, e.referer);
  l.tail.append("\" \"");
  AppendLogField(&l.tail, e.user_agent);
  fmt::format_to(std::back_inserter(l.tail), "\" {} {:.6f}", e.cache,
                 static_cast<double>(e.head_sent ? e.ttfb_ns : 0) / 1e9);
  // (a response ending after its last byte went out, e.g. a fill committed after it)
  if (c.written_total >= l.end && !c.closed) EmitLogs(c, false);
}

void HttpServer::Impl::LogBadRequest(Conn& c, int status, uint64_t begin, size_t head_len) {
  if (log_ == nullptr) return;
  LogEntry& l =
      NewLogEntry(c, begin, head_len, MonotonicNanos(), static_cast<int64_t>(detail::NowSeconds()));
  fmt::format_to(std::back_inserter(l.line), "-\" {} ", status);
  l.tail.assign("\"-\" \"-\" SYNTH 0.000000");
  if (c.written_total >= l.end && !c.closed) EmitLogs(c, false);
}

void HttpServer::Impl::EmitLogs(Conn& c, bool all) {
  while (c.logs_first < c.logs_n) {
    const LogEntry& l = c.logs[c.logs_first];
    if (!all && c.written_total < l.end) break;
    const uint64_t upto = std::min(c.written_total, l.end);
    const uint64_t sent = upto > l.begin ? upto - l.begin : 0;
    log_line_.assign(l.line);
    fmt::format_to(std::back_inserter(log_line_), "{} ", sent > l.head_len ? sent - l.head_len : 0);
    log_line_.append(l.tail);
    fmt::format_to(std::back_inserter(log_line_), " {:.6f} {}",
                   static_cast<double>(MonotonicNanos() - l.start_ns) / 1e9, sent);
    (void)log_->Append(log_line_);
    ++c.logs_first;
  }
  if (c.logs_first == c.logs_n) c.logs_first = c.logs_n = 0;
}

}  // namespace goblin::gateway
