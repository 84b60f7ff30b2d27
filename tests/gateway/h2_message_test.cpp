// HTTP/2 <-> HTTP/1.1 translation of the HTTP front (goblin/gateway/h2_message.h), in
// process. (fuzz_h2 checks the same through nghttp2's sessions with random input.)
#include "goblin/gateway/h2_message.h"

#include <gtest/gtest.h>

#include <string>
#include <string_view>
#include <vector>

namespace goblin::gateway::h2 {
namespace {

std::string Http1(const std::vector<std::pair<std::string_view, std::string_view>>& fields,
                  std::string_view body = {}, bool with_body = true) {
  RequestBuilder b;
  for (auto [n, v] : fields) EXPECT_TRUE(b.Add(n, v, 64 << 10));
  std::string out = "left over";
  b.ToHttp1(body, with_body, &out);
  return out;
}

TEST(H2Request, PseudoFieldsMakeTheRequestLineAndHost) {
  EXPECT_EQ(Http1({{":method", "GET"},
                   {":scheme", "https"},
                   {":authority", "example.com"},
                   {":path", "/a?b=c"},
                   {"accept", "*/*"}}),
            "GET /a?b=c HTTP/1.1\r\nHost: example.com\r\naccept: */*\r\n\r\n");
}

TEST(H2Request, HostStandsInForAMissingAuthorityButNeverBesideIt) {
  EXPECT_EQ(Http1({{":method", "GET"}, {":path", "/"}, {"host", "h1"}}),
            "GET / HTTP/1.1\r\nHost: h1\r\n\r\n");
  EXPECT_EQ(Http1({{":method", "GET"}, {":path", "/"}, {":authority", "a"}, {"host", "b"}}),
            "GET / HTTP/1.1\r\nHost: a\r\n\r\n");
}

TEST(H2Request, CookiesAreJoinedAgainAndTheClientsLengthIsReplacedByTheBodys) {
  EXPECT_EQ(Http1({{":method", "POST"},
                   {":path", "/p"},
                   {":authority", "h"},
                   {"cookie", "a=1"},
                   {"content-length", "999"},
                   {"cookie", "b=2"}},
                  "hello"),
            "POST /p HTTP/1.1\r\nHost: h\r\ncookie: a=1; b=2\r\ncontent-length: 5\r\n\r\nhello");
}

TEST(H2Request, ABodylessPostSaysZeroAndAnOversizedBodyIsLeftOut) {
  EXPECT_EQ(Http1({{":method", "PUT"}, {":path", "/"}, {":authority", "h"}}),
            "PUT / HTTP/1.1\r\nHost: h\r\ncontent-length: 0\r\n\r\n");
  EXPECT_EQ(Http1({{":method", "POST"}, {":path", "/"}, {":authority", "h"}}, "xyz", false),
            "POST / HTTP/1.1\r\nHost: h\r\ncontent-length: 3\r\n\r\n");
}

TEST(H2Request, ConnectTargetsTheAuthority) {
  EXPECT_EQ(Http1({{":method", "CONNECT"}, {":authority", "h:443"}}),
            "CONNECT h:443 HTTP/1.1\r\nHost: h:443\r\ncontent-length: 0\r\n\r\n");
}

TEST(H2Request, FieldsPastTheLimitRefuseTheStreamAndClearStartsAfresh) {
  RequestBuilder b;
  EXPECT_TRUE(b.Add(":method", "GET", 100));
  EXPECT_EQ(b.header_bytes(), 7u + 3u + 32u);
  EXPECT_TRUE(b.Add(":path", "/", 100));
  EXPECT_FALSE(b.Add("x-big", std::string(40, 'v'), 100));
  b.Clear();
  EXPECT_EQ(b.header_bytes(), 0u);
  EXPECT_TRUE(b.method().empty());
  EXPECT_TRUE(b.Add(":method", "HEAD", 100));
  EXPECT_EQ(b.method(), "HEAD");
}

std::vector<std::pair<std::string, std::string>> Fields(ResponseHead& head, std::string_view h1) {
  http::Response resp;
  EXPECT_EQ(http::ParseResponse(h1, http::Limits{}, false, &resp), http::Parse::kComplete);
  std::vector<std::pair<std::string, std::string>> out;
  for (const nghttp2_nv& nv : head.From(resp)) {
    out.emplace_back(std::string(reinterpret_cast<const char*>(nv.name), nv.namelen),
                     std::string(reinterpret_cast<const char*>(nv.value), nv.valuelen));
  }
  return out;
}

TEST(H2Response, StatusFirstNamesLowerCasedConnectionFieldsDropped) {
  ResponseHead head;
  using F = std::vector<std::pair<std::string, std::string>>;
  EXPECT_EQ(Fields(head,
                   "HTTP/1.1 206 Partial Content\r\nContent-Range: bytes 0-1/9\r\n"
                   "Connection: keep-alive\r\nKeep-Alive: timeout=5\r\nContent-Length: 2\r\n"
                   "Upgrade: h2c\r\nProxy-Connection: x\r\nTE: trailers\r\n"
                   "X-Cache: HIT\r\n\r\n"),
            (F{{":status", "206"},
               {"content-range", "bytes 0-1/9"},
               {"content-length", "2"},
               {"x-cache", "HIT"}}));
  // (the same object again, a smaller head: nothing of the last one is left)
  EXPECT_EQ(Fields(head, "HTTP/1.1 404 Not Found\r\nVary: Accept\r\n\r\n"),
            (F{{":status", "404"}, {"vary", "Accept"}}));
  EXPECT_EQ(Fields(head, "HTTP/1.1 204 No Content\r\nContent-Length: 0\r\nETag: \"e\"\r\n\r\n"),
            (F{{":status", "204"}, {"etag", "\"e\""}}));
  EXPECT_EQ(Fields(head, "HTTP/1.1 304 Not Modified\r\nContent-Length: 7\r\n\r\n"),
            (F{{":status", "304"}, {"content-length", "7"}}));
}

TEST(H2Settings, AnUpgradesSettingsMustBeOnesASettingsFrameCouldCarry) {
  EXPECT_TRUE(ValidSettingsPayload(""));
  EXPECT_TRUE(ValidSettingsPayload(std::string("\x00\x03\x00\x00\x00\x64", 6)));
  EXPECT_FALSE(ValidSettingsPayload(std::string("\x00\x03\x00\x00\x00", 5)));
  EXPECT_FALSE(ValidSettingsPayload(std::string("\x00\x02\x00\x00\x00\x02", 6)));  // push 2
  EXPECT_FALSE(ValidSettingsPayload(std::string("\x00\x05\x00\x00\x10\x00", 6)));  // frame 4K
  EXPECT_FALSE(ValidSettingsPayload(std::string("\x00\x04\x80\x00\x00\x00", 6)));  // 2^31
}

}  // namespace
}  // namespace goblin::gateway::h2
