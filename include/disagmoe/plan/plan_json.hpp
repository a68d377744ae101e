// SPDX-License-Identifier: Apache-2.0
/// @file plan_json.hpp
/// A Plan as JSON (needs target disagmoe::io). Keys: attention.{gpus,nics,group_size},
/// ffn.{gpus,nics,group_size}, groups, layer_groups, predicted.{stage_seconds,
/// step_seconds, tokens_per_second, bottleneck, bound_seconds, round_seconds, ...},
/// memory_bytes.{attention_worker, ffn_worker, capacity}, roofline.{turning_point,
/// attention.{intensity, turning_point, ceiling, bandwidth, achieved}, ffn.{…}},
/// search.{seed_step_seconds, evaluations, gain, seed, milp_nodes, budget_exhausted}.
#pragma once

#include <disagmoe/io/spec_json.hpp>
#include <disagmoe/plan/plan.hpp>

namespace disagmoe::plan {

namespace detail {
inline io::Json to_json(const RooflinePoint& r) {
  return {{"intensity", r.intensity},
          {"turning_point", r.turning_point()},
          {"ceiling_flops", r.ceiling},
          {"bandwidth", r.bandwidth},
          {"achieved_flops", r.achieved()},
          {"network_bound", r.network_bound()}};
}
inline io::Json to_json(const Allocation& a) {
  return {{"groups", a.groups},
          {"attention_gpus_per_node", a.attention_gpus_per_node},
          {"ffn_gpus_per_node", a.ffn_gpus_per_node},
          {"attention_nics_per_node", a.attention_nics_per_node},
          {"ffn_nics_per_node", a.ffn_nics_per_node},
          {"recompute", a.recompute}};
}
}  // namespace detail

/// The plan as one JSON object (see the file comment for the keys). O(layers).
inline io::Json to_json(const Plan& p) {
  const StepEstimate& e = p.predicted;
  io::Json j;
  j["model"] = p.model;
  j["cluster"] = p.cluster;
  j["seq_len"] = p.seq_len;
  j["micro_batch"] = p.micro_batch;
  j["global_batch"] = p.global_batch;
  j["attention"] = {{"gpus", p.attention_gpus},
                    {"nics", p.attention_nics},
                    {"group_size", p.attention_group_size},
                    {"bandwidth_per_gpu", p.attention_bandwidth_per_gpu}};
  j["ffn"] = {{"gpus", p.ffn_gpus},
              {"nics", p.ffn_nics},
              {"group_size", p.ffn_group_size},
              {"bandwidth_per_gpu", p.ffn_bandwidth_per_gpu}};
  j["groups"] = p.allocation.groups;
  j["recompute"] = p.allocation.recompute;
  j["allocation"] = detail::to_json(p.allocation);  // per-node split: what disagmoe-sim --plan reads
  j["layer_groups"] = p.layer_groups;
  j["predicted"] = {{"stage_seconds", e.stage_seconds},
                    {"step_seconds", e.step_seconds},
                    {"tokens_per_second", e.tokens_per_second},
                    {"bottleneck", std::string(to_string(e.bottleneck))},
                    {"bound_seconds", e.bound_seconds},
                    {"round_seconds", e.round_seconds},
                    {"waves", e.waves},
                    {"ring_bound", e.ring_bound},
                    {"attention_seconds", e.attention_seconds},
                    {"ffn_seconds", e.ffn_seconds},
                    {"attention_network_seconds", e.attention_network_seconds},
                    {"ffn_network_seconds", e.ffn_network_seconds}};
  j["memory_bytes"] = {{"attention_worker", e.memory.attention_worker.total()},
                       {"ffn_worker", e.memory.ffn_worker.total()},
                       {"capacity", e.memory.capacity}};
  j["roofline"] = {{"turning_point", p.turning_point},
                   {"attention", detail::to_json(p.attention_roofline)},
                   {"ffn", detail::to_json(p.ffn_roofline)}};
  j["search"] = {{"seed_step_seconds", p.seed_step_seconds},
                 {"evaluations", p.evaluations},
                 {"gain", p.gain()},
                 {"seed", detail::to_json(p.seed)},
                 {"seed_bound_seconds", p.seed_bound_seconds},
                 {"milp_nodes", p.milp_nodes},
                 {"budget_exhausted", p.budget_exhausted}};
  j["explanation"] = p.explanation();
  return j;
}

}  // namespace disagmoe::plan
