// mux_config_test.cc — a node's mux configuration is checked when it is
// built, and each refusal names the field and what to change.
#include "mux/mux_config.h"

#include "gtest/gtest.h"

namespace ringfire::mux {
namespace {

TEST(MuxConfig, TheDefaultsPassAndEachBadFieldIsNamed) {
  MuxConfig ok;
  EXPECT_TRUE(validate(ok).ok()) << validate(ok);
  auto refused = [](MuxConfig c, const char* needle) {
    const absl::Status st = validate(c);
    EXPECT_FALSE(st.ok()) << needle;
    EXPECT_NE(std::string(st.message()).find(needle), std::string::npos) << st;
  };
  MuxConfig c;
  c.initial_credit = 0;
  refused(c, "initial_credit 0");
  c = {};
  c.max_batch_bytes = 100 * 1024;
  refused(c, "max_batch_bytes");
  c = {};
  c.slot_byte_budget = 1024;
  refused(c, "slot_byte_budget");
  c = {};
  c.peer_byte_budget = 1024 * 1024 - 1;
  refused(c, "peer_byte_budget");
  c = {};
  c.max_streams_per_peer = 0;
  refused(c, "max_streams_per_peer");
  c = {};
  c.flush = FlushPolicy::manual();
  EXPECT_TRUE(validate(c).ok());
  c.flush.max_linger_ns = 5;
  refused(c, "Manual takes no Auto condition");
}

}  // namespace
}  // namespace ringfire::mux
