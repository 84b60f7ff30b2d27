#include "goblin/gateway/resp.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace goblin::gateway {
namespace {

using Args = std::vector<std::string>;

struct Parsed {
  RespParser::Status status;
  Args args;
  size_t pos;
  std::string error;
};

Parsed ParseOne(std::string_view in, bool authed = true, RespLimits limits = {}) {
  RespParser p(limits);
  std::vector<std::string_view> argv;
  Parsed out;
  out.pos = 0;
  out.status = p.Parse(in, &out.pos, &argv, &out.error, authed);
  for (auto a : argv) out.args.emplace_back(a);
  return out;
}

TEST(RespParser, MultibulkAndPartialInput) {
  std::string cmd = "*3\r\n$7\r\nPUBLISH\r\n$4\r\nnews\r\n$5\r\nhe\r\no\r\n";
  auto whole = ParseOne(cmd);
  ASSERT_EQ(whole.status, RespParser::Status::kCommand);
  EXPECT_EQ(whole.args, (Args{"PUBLISH", "news", "he\r\no"}));  // binary-safe bulk
  EXPECT_EQ(whole.pos, cmd.size());
  for (size_t cut = 0; cut < cmd.size(); ++cut) {
    auto part = ParseOne(std::string_view(cmd).substr(0, cut));
    EXPECT_EQ(part.status, RespParser::Status::kNeedMore) << cut;
    EXPECT_EQ(part.pos, 0u);
  }
}

TEST(RespParser, PipelinedCommandsOneByOne) {
  std::string in = "*1\r\n$4\r\nPING\r\nPING\r\n*2\r\n$4\r\nECHO\r\n$0\r\n\r\n";
  RespParser p;
  std::vector<std::string_view> argv;
  std::string err;
  size_t pos = 0;
  std::vector<Args> got;
  while (p.Parse(in, &pos, &argv, &err) == RespParser::Status::kCommand) {
    got.emplace_back(argv.begin(), argv.end());
  }
  EXPECT_EQ(got, (std::vector<Args>{{"PING"}, {"PING"}, {"ECHO", ""}}));
  EXPECT_EQ(pos, in.size());
}

TEST(RespParser, InlineCommandsWithRedisQuoting) {
  EXPECT_EQ(ParseOne("PING\r\n").args, (Args{"PING"}));
  EXPECT_EQ(ParseOne("  SUBSCRIBE  a   b \n").args, (Args{"SUBSCRIBE", "a", "b"}));
  EXPECT_EQ(ParseOne("ECHO \"a b\\n\\x41\" 'it\\'s'\r\n").args, (Args{"ECHO", "a b\nA", "it's"}));
  EXPECT_EQ(ParseOne("\r\n").args, (Args{}));  // an empty line is no command
  EXPECT_EQ(ParseOne("PING").status, RespParser::Status::kNeedMore);
  auto bad = ParseOne("ECHO \"abc\r\n");
  EXPECT_EQ(bad.status, RespParser::Status::kError);
  EXPECT_EQ(bad.error, "Protocol error: unbalanced quotes in request");
  EXPECT_EQ(ParseOne("ECHO \"a\"b\r\n").status, RespParser::Status::kError);  // quote then text
}

TEST(RespParser, ProtocolErrorsUseRedisTexts) {
  EXPECT_EQ(ParseOne("*x\r\n").error, "Protocol error: invalid multibulk length");
  EXPECT_EQ(ParseOne("*1\r\n$-2\r\n").error, "Protocol error: invalid bulk length");
  EXPECT_EQ(ParseOne("*1\r\n:1\r\n").error, "Protocol error: expected '$', got ':'");
  EXPECT_EQ(ParseOne("*01\r\n").error, "Protocol error: invalid multibulk length");
  EXPECT_EQ(ParseOne("*20\r\n", /*authed=*/false).error,
            "Protocol error: unauthenticated multibulk length");
  EXPECT_EQ(ParseOne("*1\r\n$20000\r\n", false).error,
            "Protocol error: unauthenticated bulk length");
  RespLimits small;
  small.max_inline = 16;
  EXPECT_EQ(ParseOne(std::string(100, 'a'), true, small).error,
            "Protocol error: too big inline request");
  EXPECT_EQ(ParseOne("*" + std::string(100, '1'), true, small).error,
            "Protocol error: too big mbulk count string");
  small.max_bulk = 10;
  EXPECT_EQ(ParseOne("*1\r\n$11\r\n", true, small).error, "Protocol error: invalid bulk length");
  // *0 and *-1 are consumed as no command.
  auto empty = ParseOne("*0\r\n");
  EXPECT_EQ(empty.status, RespParser::Status::kCommand);
  EXPECT_TRUE(empty.args.empty());
  EXPECT_EQ(empty.pos, 4u);
}

// Replies flattened to "type integer text" strings.
std::vector<std::string> Reply(std::string_view in, size_t* pos, ReplyStatus want) {
  std::vector<RespItem> items;
  std::string err;
  EXPECT_EQ(ParseReply(in, pos, &items, &err), want) << err;
  std::vector<std::string> out;
  for (const auto& i : items) {
    out.push_back(std::string(1, i.type) + " " + std::to_string(i.integer) + " " +
                  std::string(i.text));
  }
  return out;
}

TEST(RespReply, ScalarsAggregatesAndPushes) {
  std::string in =
      ":42\r\n+OK\r\n-ERR no\r\n$5\r\nhe\r\no\r\n$-1\r\n*-1\r\n"
      "*3\r\n$7\r\nmessage\r\n$2\r\nch\r\n$0\r\n\r\n"
      "*2\r\n*1\r\n:1\r\n*0\r\n"
      ">4\r\n$8\r\npmessage\r\n$1\r\n*\r\n$1\r\nc\r\n$1\r\np\r\n"
      "%1\r\n+k\r\n_\r\n";
  size_t pos = 0;
  EXPECT_EQ(Reply(in, &pos, ReplyStatus::kReply), (Args{": 42 "}));
  EXPECT_EQ(Reply(in, &pos, ReplyStatus::kReply), (Args{"+ 0 OK"}));
  EXPECT_EQ(Reply(in, &pos, ReplyStatus::kReply), (Args{"- 0 ERR no"}));
  EXPECT_EQ(Reply(in, &pos, ReplyStatus::kReply), (Args{"$ 5 he\r\no"}));  // binary-safe
  EXPECT_EQ(Reply(in, &pos, ReplyStatus::kReply), (Args{"$ -1 "}));
  EXPECT_EQ(Reply(in, &pos, ReplyStatus::kReply), (Args{"* -1 "}));
  EXPECT_EQ(Reply(in, &pos, ReplyStatus::kReply), (Args{"* 3 ", "$ 7 message", "$ 2 ch", "$ 0 "}));
  EXPECT_EQ(Reply(in, &pos, ReplyStatus::kReply), (Args{"* 2 ", "* 1 ", ": 1 ", "* 0 "}));
  EXPECT_EQ(Reply(in, &pos, ReplyStatus::kReply),
            (Args{"> 4 ", "$ 8 pmessage", "$ 1 *", "$ 1 c", "$ 1 p"}));
  EXPECT_EQ(Reply(in, &pos, ReplyStatus::kReply), (Args{"% 1 ", "+ 0 k", "_ 0 "}));
  EXPECT_EQ(pos, in.size());
  EXPECT_TRUE(Reply(in, &pos, ReplyStatus::kNeedMore).empty());
}

TEST(RespReply, IncompleteRepliesWaitAtEverySplit) {
  std::string whole = "*3\r\n$7\r\nmessage\r\n$2\r\nch\r\n$3\r\nabc\r\n";
  for (size_t cut = 0; cut < whole.size(); ++cut) {
    size_t pos = 0;
    EXPECT_TRUE(Reply(whole.substr(0, cut), &pos, ReplyStatus::kNeedMore).empty()) << cut;
    EXPECT_EQ(pos, 0u);
  }
}

TEST(RespReply, MalformedRepliesAreErrors) {
  for (std::string bad : {"?x\r\n", ":12a\r\n", ":\r\n", "$-2\r\n", "$3\r\nabcd\r\n", "*-2\r\n",
                          "#x\r\n", "_x\r\n", ":99999999999999999999\r\n"}) {
    size_t pos = 0;
    Reply(bad, &pos, ReplyStatus::kError);
    EXPECT_EQ(pos, 0u) << bad;
  }
  std::string deep;
  for (int i = 0; i < 40; ++i) deep += "*1\r\n";
  deep += ":1\r\n";
  size_t pos = 0;
  Reply(deep, &pos, ReplyStatus::kError);
}

TEST(RespWriter, Resp2AndResp3Shapes) {
  std::string out;
  RespWriter w(&out);
  w.Push(Proto::kResp2, 3);
  w.Bulk("message");
  w.Null(Proto::kResp2);
  w.Integer(-7);
  w.Push(Proto::kResp3, 1);
  w.Null(Proto::kResp3);
  w.Map(Proto::kResp2, 2);
  w.Map(Proto::kResp3, 2);
  w.Simple("OK");
  w.Error("ERR x");
  EXPECT_EQ(out, "*3\r\n$7\r\nmessage\r\n$-1\r\n:-7\r\n>1\r\n_\r\n*4\r\n%2\r\n+OK\r\n-ERR x\r\n");
}

}  // namespace
}  // namespace goblin::gateway
