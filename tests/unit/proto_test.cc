// The public API's generated code: the service has the RPCs docs/design.md §3.2 names, and a request
// round-trips through the wire format with its oneof and optional fields intact.
#include <gtest/gtest.h>

#include "yoco/v1/yoco.grpc.pb.h"
#include "yoco/v1/yoco.pb.h"

namespace yoco {
namespace {

TEST(Proto, ServiceHasTheSpecRpcs) {
  const auto* svc = yoco::v1::GenerateRequest::descriptor()->file()->FindServiceByName("Yoco");
  ASSERT_NE(svc, nullptr);
  for (const char* rpc : {"Generate", "Score", "Tokenize", "Detokenize", "GetModelInfo"})
    EXPECT_NE(svc->FindMethodByName(rpc), nullptr) << rpc;
  EXPECT_TRUE(svc->FindMethodByName("Generate")->server_streaming());
}

TEST(Proto, GenerateRequestRoundTrips) {
  yoco::v1::GenerateRequest req;
  req.set_request_id("r1");
  req.mutable_tokens()->add_ids(5);
  req.mutable_tokens()->add_ids(7);
  req.set_max_tokens(32);
  req.mutable_sampling()->set_temperature(0.0f);  // explicitly greedy: presence must survive
  req.add_stop("\n\n");
  std::string wire;
  ASSERT_TRUE(req.SerializeToString(&wire));
  yoco::v1::GenerateRequest back;
  ASSERT_TRUE(back.ParseFromString(wire));
  EXPECT_EQ(back.prompt_case(), yoco::v1::GenerateRequest::kTokens);
  EXPECT_EQ(back.tokens().ids_size(), 2);
  EXPECT_TRUE(back.sampling().has_temperature());
  EXPECT_FALSE(back.sampling().has_top_p());
  EXPECT_EQ(back.stop(0), "\n\n");
}

}  // namespace
}  // namespace yoco
