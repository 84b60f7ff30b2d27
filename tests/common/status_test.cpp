#include "goblin/common/status.h"

#include <gtest/gtest.h>

namespace goblin {
namespace {

Result<int> Half(int v) {
  if (v % 2 != 0) return Err(StatusCode::kInvalidArgument, "{} is odd", v);
  return v / 2;
}

Result<int> Quarter(int v) {
  GOBLIN_ASSIGN_OR_RETURN(int h, Half(v));
  GOBLIN_ASSIGN_OR_RETURN(int q, Half(h));
  return q;
}

VoidResult CheckEven(int v) {
  GOBLIN_RETURN_IF_ERROR(Half(v));
  return {};
}

TEST(Status, DefaultIsOk) {
  Status s;
  EXPECT_TRUE(s.ok());
  EXPECT_EQ(s.code(), StatusCode::kOk);
  EXPECT_EQ(s.ToString(), "ok");
}

TEST(Status, CarriesCodeAndMessage) {
  Status s(StatusCode::kNotFound, "no such key");
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(s.ToString(), "not found: no such key");
  EXPECT_EQ(s.WithContext("get").ToString(), "not found: get: no such key");
  EXPECT_EQ(Status::Ok().WithContext("x").ToString(), "ok");
}

TEST(Result, PropagatesErrors) {
  EXPECT_EQ(Quarter(8).value(), 2);
  auto r = Quarter(6);  // 6 -> 3 -> odd
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(r.error().message(), "3 is odd");
  EXPECT_TRUE(CheckEven(4).has_value());
  EXPECT_EQ(CheckEven(5).error().message(), "5 is odd");
}

TEST(Status, ErrnoMapsToCodes) {
  EXPECT_EQ(ErrnoStatus("open(/x)", ENOENT).code(), StatusCode::kNotFound);
  EXPECT_EQ(ErrnoStatus("write", ENOSPC).code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(ErrnoStatus("connect", ECONNREFUSED).code(), StatusCode::kUnavailable);
  EXPECT_EQ(ErrnoStatus("open(/x)", ENOENT).message(), "open(/x): No such file or directory");
}

TEST(Status, FormatsWithFmt) {
  EXPECT_EQ(fmt::format("{}", Status(StatusCode::kTimeout, "origin")), "timeout: origin");
}

}  // namespace
}  // namespace goblin
