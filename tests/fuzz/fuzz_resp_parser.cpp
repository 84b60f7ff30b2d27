// Fuzz target: the RESP request parser and the reply parser. Any input must yield commands
// (replies), need-more or a protocol error, never read out of bounds; positions only move
// forward and stay in the input; parsing a prefix gives a prefix of the same results.
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "goblin/gateway/resp.h"

namespace {
using goblin::gateway::RespLimits;
using goblin::gateway::RespParser;

std::vector<std::vector<std::string>> ParseAll(std::string_view in, size_t* consumed, bool* error) {
  RespLimits limits;
  limits.max_bulk = 1 << 16;
  limits.max_inline = 1 << 12;
  RespParser p(limits);
  std::vector<std::string_view> argv;
  std::string err;
  std::vector<std::vector<std::string>> out;
  size_t pos = 0;
  *error = false;
  for (;;) {
    size_t before = pos;
    auto st = p.Parse(in, &pos, &argv, &err, true);
    if (pos < before || pos > in.size()) std::abort();
    if (st == RespParser::Status::kError) {
      *error = true;
      break;
    }
    if (st == RespParser::Status::kNeedMore) break;
    if (pos == before) std::abort();  // a command must consume input
    out.emplace_back(argv.begin(), argv.end());
  }
  *consumed = pos;
  return out;
}
// Replies as "type:integer:text" strings, one list per reply.
std::vector<std::vector<std::string>> ParseReplies(std::string_view in, bool* error) {
  goblin::gateway::RespReplyLimits limits;
  limits.max_items = 1 << 12;
  limits.max_bulk = 1 << 16;
  std::vector<goblin::gateway::RespItem> items;
  std::string err;
  std::vector<std::vector<std::string>> out;
  size_t pos = 0;
  *error = false;
  for (;;) {
    size_t before = pos;
    auto st = goblin::gateway::ParseReply(in, &pos, &items, &err, limits);
    if (pos < before || pos > in.size()) std::abort();
    if (st == goblin::gateway::ReplyStatus::kError) {
      if (err.empty() || pos != before) std::abort();
      *error = true;
      break;
    }
    if (st == goblin::gateway::ReplyStatus::kNeedMore) {
      if (pos != before) std::abort();
      break;
    }
    if (pos == before || items.empty()) std::abort();
    auto& r = out.emplace_back();
    for (const auto& it : items) {
      if (!it.text.empty() &&
          (it.text.data() < in.data() || it.text.data() + it.text.size() > in.data() + in.size()))
        std::abort();
      r.push_back(std::string(1, it.type) + ":" + std::to_string(it.integer) + ":" +
                  std::string(it.text));
    }
  }
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view in(reinterpret_cast<const char*>(data), size);
  size_t consumed = 0;
  bool error = false;
  auto all = ParseAll(in, &consumed, &error);
  // Feeding a prefix first and then the whole gives the same commands (streaming).
  if (!error && size > 1) {
    size_t c2 = 0;
    bool e2 = false;
    auto prefix = ParseAll(in.substr(0, size / 2), &c2, &e2);
    if (!e2) {
      if (prefix.size() > all.size()) std::abort();
      for (size_t i = 0; i < prefix.size(); ++i) {
        if (prefix[i] != all[i]) std::abort();
      }
    }
  }
  bool reply_error = false;
  auto replies = ParseReplies(in, &reply_error);
  if (size > 1) {
    bool e2 = false;
    auto prefix = ParseReplies(in.substr(0, size / 2), &e2);
    if (!e2 && !reply_error) {
      if (prefix.size() > replies.size()) std::abort();
      for (size_t i = 0; i < prefix.size(); ++i) {
        if (prefix[i] != replies[i]) std::abort();
      }
    }
  }
  return 0;
}
