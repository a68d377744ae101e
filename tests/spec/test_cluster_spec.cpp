// SPDX-License-Identifier: Apache-2.0
#include <disagmoe/spec/cluster_spec.hpp>
#include <disagmoe/spec/presets.hpp>

#include <doctest/doctest.h>

#include <functional>
#include <string>

using namespace disagmoe;

namespace {
std::string error_of(const ClusterSpec& c) {
  try {
    validate(c);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}
}  // namespace

TEST_CASE("cluster validation names the field") {
  const ClusterSpec base = cluster_preset("h800x128");
  CHECK(error_of(base).empty());
  struct Case {
    const char* prefix;
    std::function<void(ClusterSpec&)> edit;
  };
  const Case cases[] = {
      {"ClusterSpec.nodes = 0", [](ClusterSpec& c) { c.nodes = 0; }},
      {"ClusterSpec.gpus_per_node = -1", [](ClusterSpec& c) { c.gpus_per_node = -1; }},
      {"ClusterSpec.gpu.peak_flops_bf16 = 0", [](ClusterSpec& c) { c.gpu.peak_flops_bf16 = 0; }},
      {"ClusterSpec.gpu.hbm_bytes = -1", [](ClusterSpec& c) { c.gpu.hbm_bytes = -1; }},
      {"ClusterSpec.gpu.hbm_bandwidth = inf", [](ClusterSpec& c) { c.gpu.hbm_bandwidth = 1.0 / 0.0; }},
      {"ClusterSpec.intra_node_bandwidth = 0", [](ClusterSpec& c) { c.intra_node_bandwidth = 0; }},
      {"ClusterSpec.nics_per_node = 0: expected at least 1 NIC per node when nodes > 1 (16)",
       [](ClusterSpec& c) { c.nics_per_node = 0; }},
      {"ClusterSpec.nic_bandwidth = 0", [](ClusterSpec& c) { c.nic_bandwidth = 0; }},
      {"ClusterSpec.nic_latency = -1", [](ClusterSpec& c) { c.nic_latency = -1; }},
  };
  for (const auto& c : cases) {
    ClusterSpec s = base;
    c.edit(s);
    CAPTURE(c.prefix);
    CHECK(error_of(s).starts_with(c.prefix));
  }
  // one node of one GPU needs neither NICs nor an intra-node fabric
  ClusterSpec lone = base;
  lone.nodes = 1;
  lone.gpus_per_node = 1;
  lone.nics_per_node = 0;
  lone.nic_bandwidth = 0;
  lone.intra_node_bandwidth = 0;
  CHECK(error_of(lone).empty());
}

TEST_CASE("peak FLOP/s by dtype, fp8 falls back to bf16") {
  GpuSpec g{"x", 1, 2, 0, 1, 1};
  CHECK(g.peak_flops(DType::kFp32) == 1);
  CHECK(g.peak_flops(DType::kBf16) == 2);
  CHECK(g.peak_flops(DType::kFp16) == 2);
  CHECK(g.peak_flops(DType::kFp8) == 2);
  g.peak_flops_fp8 = 4;
  CHECK(g.peak_flops(DType::kFp8) == 4);
}

TEST_CASE("clusters scale to N nodes by name") {
  const ClusterSpec c = parse_cluster_name("h100:4");
  CHECK(c.nodes == 4);
  CHECK(c.gpus() == 32);
  CHECK(c.nics() == 32);
  CHECK(c.name == "h100:4");
  CHECK(parse_cluster_name("h800x128").gpus() == 128);
  for (const char* bad : {"h100:", "h100:0", "h100:-2", "h100:2x", "nope", "nope:2"}) {
    CAPTURE(bad);
    CHECK_THROWS_AS(parse_cluster_name(bad), ConfigError);
  }
  try {
    parse_cluster_name("h100:x");
  } catch (const ConfigError& e) {
    CHECK(std::string(e.what()) == "cluster = \"h100:x\": expected NAME or NAME:NODES with NODES a positive integer");
  }
}
