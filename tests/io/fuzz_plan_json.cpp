// SPDX-License-Identifier: Apache-2.0
// Fuzz target for the strict plan reader (disagmoe-sim --plan): any input either
// reads or throws IoError/ConfigError; what reads lies inside the cluster.
#include <disagmoe/plan/plan_json.hpp>
#include <disagmoe/spec/presets.hpp>

#include <cstdint>
#include <cstdlib>
#include <string_view>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  namespace io = disagmoe::io;
  static const disagmoe::ModelSpec m = disagmoe::model_preset("olmoe-1b-7b");
  static const disagmoe::ClusterSpec c = disagmoe::parse_cluster_name("h100:2");
  try {
    const io::Json j = io::parse_json_text(std::string_view(reinterpret_cast<const char*>(data), size), "fuzz");
    const disagmoe::plan::Allocation a = disagmoe::plan::allocation_from_json(j, m, c);
    if (a.groups < 1 || a.groups > c.gpus() || a.attention_gpus_per_node < 1 ||
        a.attention_gpus_per_node > c.gpus_per_node || a.ffn_gpus_per_node < 1 ||
        a.ffn_gpus_per_node > c.gpus_per_node || a.attention_nics_per_node < 0 ||
        a.attention_nics_per_node > c.nics_per_node || a.ffn_nics_per_node < 0 ||
        a.ffn_nics_per_node > c.nics_per_node)
      std::abort();
  } catch (const disagmoe::IoError&) {
  } catch (const disagmoe::ConfigError&) {
  }
  return 0;
}
