// SPDX-License-Identifier: Apache-2.0
// Fuzz target for the model and cluster JSON readers: any input either reads or
// throws IoError/ConfigError (never crashes, overflows the stack or trips a
// sanitizer); what reads has positive parameter counts (or a ConfigError for a
// count past 64 bits) and survives a write -> read round trip unchanged.
#include <disagmoe/io/spec_json.hpp>
#include <disagmoe/spec/model_size.hpp>

#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  namespace io = disagmoe::io;
  io::Json j;
  try {
    j = io::parse_json_text(std::string_view(reinterpret_cast<const char*>(data), size), "fuzz");
  } catch (const disagmoe::IoError&) {
    return 0;
  }
  try {
    const disagmoe::ModelSpec m = io::model_from_json(j);
    try {
      if (disagmoe::total_params(m) <= 0 || disagmoe::active_params(m) <= 0) std::abort();
    } catch (const disagmoe::ConfigError&) {
    }
    if (io::to_json(io::model_from_json(io::to_json(m))) != io::to_json(m)) std::abort();
  } catch (const disagmoe::IoError&) {
  } catch (const disagmoe::ConfigError&) {
  }
  try {
    const disagmoe::ClusterSpec c = io::cluster_from_json(j);
    if (c.gpus() <= 0 || c.nics() < 0) std::abort();
    if (io::to_json(io::cluster_from_json(io::to_json(c))) != io::to_json(c)) std::abort();
  } catch (const disagmoe::IoError&) {
  } catch (const disagmoe::ConfigError&) {
  }
  return 0;
}
