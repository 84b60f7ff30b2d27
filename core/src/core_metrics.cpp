// goblin-core's Prometheus text (--metrics-listen): the admin API's Stats (every shard's
// counters summed, histograms merged: CollectStats) under Prometheus's names. A counter
// `name` becomes goblin_core_name_total, a gauge goblin_core_name; per-tier figures
// (tierN_x) become one family with a tier label, bytes served by source (served_bytes_x)
// one with a source label (ram_head, ram_tail, disk, fill); microseconds become seconds; the
// latency histograms keep their buckets (in seconds).
#include <map>
#include <set>
#include <vector>

#include "admin_service.h"
#include "goblin/common/metrics.h"

namespace goblin::core {
namespace {

// The figures that are levels, not counts of events (everything else is a counter).
const std::set<std::string, std::less<>> kGauges = {"objects",
                                                    "heads_in_ram",
                                                    "loans_out",
                                                    "streams_open",
                                                    "tail_bytes_in_ram",
                                                    "pool_reserved_bytes",
                                                    "pool_class_block_bytes",
                                                    "io_buffers_out",
                                                    "journal_bytes",
                                                    "journal_records",
                                                    "last_checkpoint_objects",
                                                    "last_checkpoint_encode_us",
                                                    "last_checkpoint_slice_us",
                                                    "shards",
                                                    "slot_bytes",
                                                    "allocated_bytes",
                                                    "packed_extents",
                                                    "packed_slots",
                                                    "preload_files_total",
                                                    "preload_bytes_total",
                                                    "preload_files_stored",
                                                    "preload_bytes_stored",
                                                    "preload_files_skipped",
                                                    "preload_errors",
                                                    "preload_listed",
                                                    "preload_finished",
                                                    "etcd_registered"};

struct Family {
  bool gauge = false;
  double scale = 1;                                       // (microseconds to seconds)
  std::vector<std::pair<std::string, uint64_t>> samples;  // labels, value
};

}  // namespace

std::string CoreAdmin::PrometheusText(std::string* error) {
  admin::v1::Stats stats;
  if (grpc::Status st = CollectStats(&stats); !st.ok()) {
    *error = st.error_message();
    return "";
  }
  std::map<std::string, Family> families;  // (sorted: a stable order scrape to scrape)
  for (const auto& [raw, value] : stats.counters()) {
    std::string name = raw, labels;
    if (name.starts_with("tier")) {  // tierN_x: x{tier="N"}
      const size_t us = name.find('_');
      if (us != std::string::npos && us > 4 && name.find_first_not_of("0123456789", 4) == us) {
        labels = PromText::Label("tier", name.substr(4, us - 4));
        name = name.substr(us + 1);
        name.insert(0, "tier_");
      }
    }
    if (name.starts_with("served_bytes_")) {  // served_bytes_x: served_bytes{source="x"}
      labels = PromText::Label("source", name.substr(13));
      name = "served_bytes";
    }
    const std::string base = name.starts_with("tier_") ? name.substr(5) : name;
    Family f;
    f.gauge = kGauges.contains(base);
    if (name.ends_with("_us")) {
      name.replace(name.size() - 3, 3, "_seconds");
      f.scale = 1e-6;
      f.gauge = true;  // (the last checkpoint's encode time)
    }
    const std::string full = "goblin_core_" + name + (f.gauge ? "" : "_total");
    auto [it, fresh] = families.emplace(full, std::move(f));
    it->second.samples.emplace_back(labels, value);
  }
  PromText out;
  for (const auto& [name, f] : families) {
    out.Family(name, f.gauge ? "gauge" : "counter",
               f.gauge ? "goblin-core figure (goblinctl stats), summed over shards"
                       : "goblin-core count (goblinctl stats), summed over shards");
    for (const auto& [labels, v] : f.samples) {
      if (f.scale != 1) {
        out.SampleDouble(name, labels, static_cast<double>(v) * f.scale);
      } else {
        out.Sample(name, labels, v);
      }
    }
  }
  for (const auto& h : stats.histograms()) {
    const std::string name = "goblin_core_" + h.name() + "_seconds";
    out.Family(name, "histogram", "goblin-core service time (" + h.name() + "), all shards");
    std::vector<uint64_t> bounds(h.upper_bounds().begin(), h.upper_bounds().end());
    std::vector<uint64_t> counts(h.counts().begin(), h.counts().end());
    out.HistogramBuckets(name, "", bounds, counts, h.count(), h.sum());
  }
  out.Family("goblin_core_uptime_seconds", "gauge", "Seconds since goblin-core started");
  out.SampleDouble("goblin_core_uptime_seconds", "", static_cast<double>(stats.uptime_ns()) / 1e9);
  return out.Take();
}

}  // namespace goblin::core
