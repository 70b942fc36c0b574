// require.h — the fuzz targets' oracle check: a violated property stops the
// fuzzer at once (a trap, so libFuzzer records the input as a crash).
#pragma once

#define REQUIRE(x) \
  if (!(x)) __builtin_trap()
