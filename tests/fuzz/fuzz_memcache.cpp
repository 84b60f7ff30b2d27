// Fuzz target: the memcache text protocol's line finder and command parser, and the number
// and metadata helpers. Any input must give lines, need-more or close, never read out of
// bounds; a parsed request's views lie inside its line; a reply ends with "\r\n"; a storage
// request's data length fits memcached's int32; finding lines in a prefix gives a prefix of
// the same lines.
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "goblin/gateway/memcache.h"

namespace mc = goblin::gateway::memcache;

namespace {
bool Inside(std::string_view part, std::string_view whole) {
  return part.empty() ||
         (part.data() >= whole.data() && part.data() + part.size() <= whole.data() + whole.size());
}

std::vector<std::string_view> Lines(std::string_view in, bool* closed) {
  std::vector<std::string_view> out;
  size_t pos = 0;
  *closed = false;
  for (;;) {
    std::string_view line;
    size_t next = 0;
    auto st = mc::NextLine(in, pos, &line, &next);
    if (st == mc::LineStatus::kNeedMore) break;
    if (st == mc::LineStatus::kClose) {
      *closed = true;
      break;
    }
    if (next <= pos || next > in.size() || !Inside(line, in)) std::abort();
    out.push_back(line);
    pos = next;
  }
  return out;
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view in(reinterpret_cast<const char*>(data), size);
  bool closed = false;
  auto lines = Lines(in, &closed);
  mc::Request req;
  for (std::string_view line : lines) {
    auto p = mc::ParseLine(line, &req);
    if (p.kind == mc::Parsed::Kind::kReply) {
      if (!p.reply.empty() && !p.reply.ends_with("\r\n")) std::abort();
      if (p.swallow && (req.cmd != mc::Cmd::kMetaSet || req.bytes > INT32_MAX - 2)) std::abort();
      if (!p.reply.empty() && req.noreply && req.cmd != mc::Cmd::kShutdown &&
          p.reply != "ERROR\r\n") {
        std::abort();  // noreply silences what memcached's out_string silences
      }
      continue;
    }
    // (a meta command's base64 key is decoded into the request's own storage)
    const bool decoded = req.meta.binary_key && Inside(req.key, req.key_storage);
    if ((!decoded && !Inside(req.key, line)) || !Inside(req.stats_arg, line)) std::abort();
    if (decoded) {  // it encodes back to what decodes to it
      std::string again;
      if (!mc::Base64Decode(mc::Base64Encode(req.key), &again) && !req.key.empty()) std::abort();
      if (!req.key.empty() && again != req.key) std::abort();
    }
    if (req.meta.count > 24) std::abort();
    for (size_t i = 0; i < req.meta.count; ++i) {
      if (req.meta.tokens[i].empty() || !Inside(req.meta.tokens[i], line)) std::abort();
    }
    for (auto k : req.keys) {
      if (!Inside(k, line) || k.empty() || k.size() > mc::kKeyMaxLength) std::abort();
    }
    if (mc::IsStorage(req.cmd) && req.bytes > INT32_MAX - 2) std::abort();
    if (req.key.size() > mc::kKeyMaxLength) std::abort();
  }
  // A prefix's lines are a prefix of the lines.
  bool pclosed = false;
  auto prefix = Lines(in.substr(0, size / 2), &pclosed);
  if (!closed && !pclosed) {
    if (prefix.size() > lines.size()) std::abort();
    for (size_t i = 0; i < prefix.size(); ++i) {
      if (prefix[i] != lines[i]) std::abort();
    }
  }
  // Helpers: no crash, and what they promise.
  uint64_t u = 0;
  uint32_t u32 = 0;
  int32_t i32 = 0;
  std::string_view head = in.substr(0, 80);
  mc::ParseU64(head, &u);
  mc::ParseU32(head, &u32);
  mc::ParseI32(head, &i32);
  mc::ParseStoredNumber(in, &u);
  (void)mc::FlagsFromMetadata(in);
  if (mc::FlagsFromMetadata(mc::MetadataForFlags(static_cast<uint32_t>(size))) != size)
    std::abort();
  std::string r = mc::DeltaResult(u, size % 64);
  if (r.size() < (size % 64)) std::abort();
  return 0;
}
