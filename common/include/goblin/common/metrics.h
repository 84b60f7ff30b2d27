// Metrics for Prometheus: the text exposition format (0.0.4) and a small HTTP endpoint that
// serves it (`--metrics-listen HOST:PORT` of goblin-core and goblin-gateway: GET /metrics).
// Names follow Prometheus's conventions (snake_case, a unit suffix in base units: _bytes,
// _seconds; counters end in _total); each family gets its HELP and TYPE once.
// Threading: a PromText belongs to the thread filling it. MetricsServer runs one thread of
// its own that accepts, answers one scrape at a time and calls `render` for each: whatever
// render reads must be safe to read from that thread.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <thread>

#include "goblin/common/fd.h"
#include "goblin/common/histogram.h"
#include "goblin/common/status.h"

namespace goblin {

class PromText {
 public:
  // Starts a family: "# HELP name help" and "# TYPE name type" (counter, gauge, histogram).
  void Family(std::string_view name, std::string_view type, std::string_view help);
  // One sample; `labels` is "" or `key="value",...` (values escaped by the caller: Label()).
  void Sample(std::string_view name, std::string_view labels, uint64_t value);
  void SampleDouble(std::string_view name, std::string_view labels, double value);
  // A histogram family's samples from a LatencyHistogram (buckets in seconds, cumulative,
  // +Inf, _sum in seconds, _count).
  void Histogram(std::string_view name, std::string_view labels, const LatencyHistogram& h);
  // The same from bucket bounds (microseconds, inclusive) and per-bucket counts (one more
  // than the bounds: the last is everything above).
  void HistogramBuckets(std::string_view name, std::string_view labels,
                        std::span<const uint64_t> upper_bounds_us, std::span<const uint64_t> counts,
                        uint64_t count, uint64_t sum_us);
  // `key="value"` with the value escaped (\\, \", \n).
  static std::string Label(std::string_view key, std::string_view value);
  const std::string& text() const { return text_; }
  std::string Take() { return std::move(text_); }

 private:
  std::string text_;
};

class MetricsServer {
 public:
  using Render = std::function<std::string()>;
  // Listens on HOST:PORT ("127.0.0.1:9464", "[::1]:9464"; port 0: any free one).
  static Result<std::unique_ptr<MetricsServer>> Start(const std::string& listen, Render render);
  ~MetricsServer();  // stops its thread
  MetricsServer(const MetricsServer&) = delete;
  MetricsServer& operator=(const MetricsServer&) = delete;
  int port() const { return port_; }
  const std::string& address() const { return address_; }  // HOST:PORT as bound

 private:
  MetricsServer() = default;
  void Run();
  void Serve(int fd);
  UniqueFd listen_, stop_;
  Render render_;
  int port_ = 0;
  std::string address_;
  std::thread thread_;
};

}  // namespace goblin
