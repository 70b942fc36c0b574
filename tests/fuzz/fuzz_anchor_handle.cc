// fuzz_anchor_handle.cc — libFuzzer target for an anchor handle's text (it
// reaches a producer from outside: an RPC, a queue, a file). Oracle: text
// that parses is exactly a handle's printed form, up to the case of its hex
// digits, and prints back to a handle that parses to the same value; a
// ticket it carries has a non-zero session and credit.
#include <cctype>
#include <string>
#include <string_view>

#include "mux/anchor_handle.h"
#include "tests/fuzz/require.h"

using ringfire::mux::AnchorHandle;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  auto h = AnchorHandle::parse(text);
  if (!h) return 0;
  const std::string printed = h->to_string();
  REQUIRE(printed.size() == text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    REQUIRE(std::tolower(static_cast<unsigned char>(text[i])) == printed[i]);
  }
  auto back = AnchorHandle::parse(printed);
  REQUIRE(back && *back == *h);
  REQUIRE(h->ticket.session == 0 || h->ticket.credit != 0);
  REQUIRE(printed.size() == (h->ticket.session == 0 ? 33u : 77u));
  return 0;
}
