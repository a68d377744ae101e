// SPDX-License-Identifier: Apache-2.0
/// @file presets.hpp
/// Named models and clusters, each with its source. `model_preset("qwen3-30b-a3b")`,
/// `cluster_preset("h800x128")`; `parse_cluster_name("h100:4")` scales a preset to 4 nodes.
#pragma once

#include <disagmoe/error.hpp>
#include <disagmoe/spec/cluster_spec.hpp>
#include <disagmoe/spec/model_spec.hpp>

#include <array>
#include <charconv>
#include <string>
#include <string_view>
#include <vector>

namespace disagmoe {

namespace detail {
inline ModelSpec make_model(std::string name, int layers, int hidden, int heads, int kv_heads, int head_dim,
                            int experts, int top_k, int expert_ffn, int vocab) {
  ModelSpec m;
  m.name = std::move(name);
  m.layers = layers;
  m.hidden = hidden;
  m.heads = heads;
  m.kv_heads = kv_heads;
  m.head_dim = head_dim;
  m.experts = experts;
  m.top_k = top_k;
  m.expert_ffn = expert_ffn;
  m.vocab = vocab;
  return m;
}

inline std::vector<ModelSpec> model_presets() {
  std::vector<ModelSpec> v;
  {  // deepseek-ai/deepseek-moe-16b-base config.json; DeepSeekMoE (Dai et al. 2024):
     // 16.4B total, 2.8B active. Layer 0 is dense (first_k_dense_replace = 1).
    ModelSpec m = make_model("deepseek-moe-16b", 28, 2048, 16, 16, 128, 64, 6, 1408, 102400);
    m.first_dense_layers = 1;
    m.dense_ffn = 10944;
    m.shared_experts = 2;
    m.shared_expert_ffn = 1408;
    v.push_back(m);
  }
  {  // openai/gpt-oss-120b config.json and model card (2025): 116.8B total, 5.1B active
     // (model card counts active without the embedding); 128-token sliding window on
     // every other layer, biases on attention projections.
    ModelSpec m = make_model("gpt-oss-120b", 36, 2880, 64, 8, 64, 128, 4, 2880, 201088);
    m.attention_bias = true;
    m.sliding_window = 128;
    m.sliding_window_interval = 2;
    v.push_back(m);
  }
  {  // Qwen/Qwen3-30B-A3B config.json; Qwen3 technical report (2025): 30.5B total, 3.3B active.
    ModelSpec m = make_model("qwen3-30b-a3b", 48, 2048, 32, 4, 128, 128, 8, 768, 151936);
    m.qk_norm = true;
    v.push_back(m);
  }
  {  // Qwen/Qwen3-235B-A22B config.json; Qwen3 technical report (2025): 235B total, 22B active.
    ModelSpec m = make_model("qwen3-235b-a22b", 94, 4096, 64, 4, 128, 128, 8, 1536, 151936);
    m.qk_norm = true;
    v.push_back(m);
  }
  // mistralai/Mixtral-8x7B-v0.1 config.json; Jiang et al. 2024: 46.7B total, 12.9B active.
  v.push_back(make_model("mixtral-8x7b", 32, 4096, 32, 8, 128, 8, 2, 14336, 32000));
  {  // allenai/OLMoE-1B-7B-0924 config.json; Muennighoff et al. 2024: 6.9B total, 1.3B active.
    ModelSpec m = make_model("olmoe-1b-7b", 16, 2048, 16, 16, 128, 64, 8, 1024, 50304);
    m.qk_norm = true;
    v.push_back(m);
  }
  return v;
}

constexpr double kGB = 1e9;
constexpr double kTFlops = 1e12;

// Hopper SXM5 dense peaks (NVIDIA H100 datasheet; H800 has the same compute and HBM
// and a reduced NVLink): bf16 989.4 TFLOP/s, fp8 1978.9, fp32 66.9; 80 GB at 3.35 TB/s.
inline GpuSpec hopper(std::string name, double hbm_gb, double hbm_tb_s) {
  return GpuSpec{std::move(name), 66.9 * kTFlops, 989.4 * kTFlops, 1978.9 * kTFlops, hbm_gb * kGB, hbm_tb_s * 1e12};
}

// `sms`: streaming multiprocessors (compute units) of the GPU: 132 on H100/H800/H200 SXM5
// (NVIDIA Hopper tuning guide), 304 CUs on MI300X (AMD CDNA 3 white paper).
inline ClusterSpec make_cluster(std::string name, int nodes, GpuSpec gpu, double intra_gb_s, int nics,
                                double nic_gb_s, int sms = 132) {
  ClusterSpec c;
  c.name = std::move(name);
  c.nodes = nodes;
  c.gpus_per_node = 8;
  c.gpu = std::move(gpu);
  c.intra_node_bandwidth = intra_gb_s * kGB;
  c.intra_node_latency = 2e-6;  // NVLink/IF message latency, order of microseconds
  c.nics_per_node = nics;
  c.nic_bandwidth = nic_gb_s * kGB;
  c.nic_latency = 5e-6;  // InfiniBand/RoCE end-to-end message latency, order of microseconds
  // Comm kernels hold 24 SMs (DeepEP's normal kernels as its README configures them), of
  // `sms` on this GPU; an RDMA engine holds none (ClusterSpec::rdma_comm_sm_fraction).
  c.kernel_comm_sm_fraction = 24.0 / sms;
  c.rdma_comm_sm_fraction = 0;
  return c;
}

inline std::vector<ClusterSpec> cluster_presets() {
  return {
      // DisagMoE paper: 16 nodes x 8 H800. Node fabric as in the DeepSeek-V3 report §3.2:
      // NVLink ~160 GB/s achievable per GPU, 8 x 400 Gb/s InfiniBand NICs (50 GB/s each).
      make_cluster("h800x128", 16, hopper("H800-SXM5", 80, 3.35), 160, 8, 50),
      // DGX H100: NVLink 4 at 900 GB/s bidirectional (450 per direction), 8 x ConnectX-7 400 Gb/s.
      make_cluster("h100", 1, hopper("H100-SXM5", 80, 3.35), 450, 8, 50),
      // HGX H200: H100 compute with 141 GB HBM3e at 4.8 TB/s (NVIDIA H200 datasheet).
      make_cluster("h200", 1, hopper("H200-SXM5", 141, 4.8), 450, 8, 50),
      // Expert Coupling paper's hardware: 8 x MI300X per node. AMD datasheet: bf16 1307.4
      // TFLOP/s dense, fp8 2614.9, fp32 163.4; 192 GB HBM3 at 5.3 TB/s; 7 Infinity Fabric
      // links x 64 GB/s per direction; 8 x 400 Gb/s NICs.
      make_cluster("mi300x", 1,
                   GpuSpec{"MI300X", 163.4 * kTFlops, 1307.4 * kTFlops, 2614.9 * kTFlops, 192 * kGB, 5.3e12}, 448,
                   8, 50, 304),
  };
}

template <class T>
std::string names_of(const std::vector<T>& v) {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : ", ") + x.name;
  return s;
}
}  // namespace detail

/// Names of the built-in model presets.
inline std::vector<std::string> model_preset_names() {
  std::vector<std::string> n;
  for (const auto& m : detail::model_presets()) n.push_back(m.name);
  return n;
}

/// Names of the built-in cluster presets.
inline std::vector<std::string> cluster_preset_names() {
  std::vector<std::string> n;
  for (const auto& c : detail::cluster_presets()) n.push_back(c.name);
  return n;
}

/// The model preset called `name`; ConfigError listing the presets otherwise.
inline ModelSpec model_preset(std::string_view name) {
  const auto all = detail::model_presets();
  for (const auto& m : all)
    if (m.name == name) return m;
  fail("model", name, "a preset name (" + detail::names_of(all) + ") or a JSON file");
}

/// The cluster preset called `name`; ConfigError listing the presets otherwise.
inline ClusterSpec cluster_preset(std::string_view name) {
  const auto all = detail::cluster_presets();
  for (const auto& c : all)
    if (c.name == name) return c;
  fail("cluster", name, "a preset name (" + detail::names_of(all) + ") or a JSON file");
}

/// "NAME" or "NAME:NODES": a cluster preset, optionally scaled to NODES nodes.
inline ClusterSpec parse_cluster_name(std::string_view arg) {
  const auto colon = arg.find(':');
  if (colon == std::string_view::npos) return cluster_preset(arg);
  const std::string_view count = arg.substr(colon + 1);
  int nodes = 0;
  const auto [end, ec] = std::from_chars(count.data(), count.data() + count.size(), nodes);
  if (ec != std::errc{} || end != count.data() + count.size() || nodes <= 0)
    fail("cluster", arg, "NAME or NAME:NODES with NODES a positive integer");
  return scaled_to_nodes(cluster_preset(arg.substr(0, colon)), nodes, "cluster");
}

}  // namespace disagmoe
