// SPDX-License-Identifier: Apache-2.0
// disagmoe-presets: the built-in models and clusters and what follows from them.
//   disagmoe-presets                      table of every preset
//   disagmoe-presets --model FILE.json    one model (preset name or JSON file)
//   disagmoe-presets --cluster h100:4     one cluster, scaled to 4 nodes
//   disagmoe-presets --json               the same as one JSON object
#include <disagmoe/io/spec_json.hpp>
#include <disagmoe/spec/model_size.hpp>
#include <disagmoe/spec/presets.hpp>

#include "../common/cli_main.hpp"

#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

namespace {
using namespace disagmoe;

io::Json derived(const ModelSpec& m) {
  return {{"total_params", total_params(m)},
          {"active_params", active_params(m)},
          {"attention_params_per_layer", attention_params(m)},
          {"expert_params", expert_params(m)},
          {"moe_layers", m.moe_layers()},
          {"tokens_per_micro_batch", m.tokens_per_micro_batch()}};
}

void print_models(const std::vector<ModelSpec>& models) {
  std::printf("%-18s %6s %6s %5s %4s %7s %5s %9s %10s %10s\n", "model", "layers", "hidden", "heads", "kv",
              "experts", "top-k", "expert_ffn", "total (B)", "active (B)");
  for (const auto& m : models)
    std::printf("%-18s %6d %6d %5d %4d %7d %5d %9d %10.2f %10.2f\n", m.name.c_str(), m.layers, m.hidden, m.heads,
                m.kv_heads, m.experts, m.top_k, m.expert_ffn, total_params(m) / 1e9, active_params(m) / 1e9);
}

void print_clusters(const std::vector<ClusterSpec>& clusters) {
  std::printf("\n%-12s %5s %5s %-10s %12s %8s %12s %9s %10s\n", "cluster", "nodes", "GPUs", "GPU",
              "bf16 PFLOP/s", "HBM (GB)", "intra (GB/s)", "NICs/node", "NIC (GB/s)");
  for (const auto& c : clusters)
    std::printf("%-12s %5d %5d %-10s %12.1f %8.0f %12.0f %9d %10.0f\n", c.name.c_str(), c.nodes, c.gpus(),
                c.gpu.name.c_str(), c.gpu.peak_flops_bf16 * c.gpus() / 1e15, c.gpu.hbm_bytes / 1e9,
                c.intra_node_bandwidth / 1e9, c.nics_per_node, c.nic_bandwidth / 1e9);
}
}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"List disagmoe's model and cluster presets with their derived sizes.", "disagmoe-presets"};
  std::string model_arg, cluster_arg;
  bool json = false;
  app.add_option("--model", model_arg, "a model preset name or a JSON file (default: all presets)");
  app.add_option("--cluster", cluster_arg, "a cluster preset, NAME:NODES, or a JSON file (default: all presets)");
  app.add_flag("--json", json, "print one JSON object instead of tables");
  return cli::run_main(app, argc, argv, [&] {
    std::vector<ModelSpec> models;
    std::vector<ClusterSpec> clusters;
    if (!model_arg.empty()) models.push_back(io::load_model(model_arg));
    if (!cluster_arg.empty()) clusters.push_back(io::load_cluster(cluster_arg));
    if (model_arg.empty() && cluster_arg.empty()) {
      for (const auto& n : model_preset_names()) models.push_back(model_preset(n));
      for (const auto& n : cluster_preset_names()) clusters.push_back(cluster_preset(n));
    }
    if (json) {
      io::Json out = {{"models", io::Json::array()}, {"clusters", io::Json::array()}};
      for (const auto& m : models) out["models"].push_back({{"spec", io::to_json(m)}, {"derived", derived(m)}});
      for (const auto& c : clusters)
        out["clusters"].push_back({{"spec", io::to_json(c)}, {"gpus", c.gpus()}, {"nics", c.nics()}});
      std::cout << out.dump(2) << '\n';
      return cli::kExitOk;
    }
    if (!models.empty()) print_models(models);
    if (!clusters.empty()) print_clusters(clusters);
    return cli::kExitOk;
  });
}
