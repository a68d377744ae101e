// SPDX-License-Identifier: Apache-2.0
// Fuzz target: arbitrary bytes through the .npy trace reader. Any input must either
// parse into a valid trace or raise disagmoe::Error; nothing else is acceptable.
#include <disagmoe/placement/routing_trace.hpp>

#include <cstddef>
#include <cstdint>
#include <sstream>
#include <string>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::istringstream in(std::string(reinterpret_cast<const char*>(data), size));
  try {
    disagmoe::placement::TraceReader reader(in, "fuzz.npy", 64);
    const auto trace = reader.read(0, 1 << 16);
    if (trace.tokens() > 0) (void)trace.experts(trace.tokens() - 1, trace.layers() - 1);
  } catch (const disagmoe::Error&) {
  }
  return 0;
}
