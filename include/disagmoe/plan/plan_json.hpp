// SPDX-License-Identifier: Apache-2.0
/// @file plan_json.hpp
/// A Plan as JSON (needs target disagmoe::io). Keys: model, cluster (names),
/// model_spec, cluster_spec (io::to_json of each), seq_len, micro_batch, global_batch, optimizer_bytes,
/// attention.{gpus,nics,group_size}, ffn.{gpus,nics,group_size}, groups, layer_groups,
/// predicted.{stage_seconds, step_seconds, tokens_per_second, bottleneck, bound_seconds, round_seconds, ...},
/// fuse (AF-Pipe's stage-aligned combine + dispatch, chosen per allocation),
/// recompute.{attention, ffn} (which sides recompute their activations),
/// allocation.{groups, …, fuse, context_parallel, group_factor, mixed_nodes} (what disagmoe-sim --plan
/// reads), memory_bytes.{attention_worker, ffn_worker, capacity}, roofline.{turning_point,
/// attention.{intensity, turning_point, ceiling, bandwidth, achieved}, ffn.{…}},
/// search.{seed_step_seconds, evaluations, gain, seed, milp_nodes, budget_exhausted},
/// refinement.{from, from_step_seconds, step_seconds, evaluations, gain, budget_exhausted}
/// (only when refined; step times are null where the second oracle cannot run; only
/// refinement.skipped where a refinement was asked for and could not run),
/// idle_gpus, binding.{kind, text}; disagmoe-plan adds recommendation (schedule/recommend.hpp).
/// `allocation_from_json` reads such a plan back, strictly.
#pragma once

#include <disagmoe/io/spec_json.hpp>
#include <disagmoe/plan/plan.hpp>

#include <algorithm>
#include <array>
#include <cmath>
#include <string>
#include <string_view>

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
inline io::Json to_json(Recompute r) { return {{"attention", r.attention}, {"ffn", r.ffn}}; }
inline io::Json to_json(const Allocation& a) {
  io::Json j = {{"groups", a.groups},
                {"attention_gpus_per_node", a.attention_gpus_per_node},
                {"ffn_gpus_per_node", a.ffn_gpus_per_node},
                {"attention_nics_per_node", a.attention_nics_per_node},
                {"ffn_nics_per_node", a.ffn_nics_per_node},
                {"recompute", to_json(a.recompute)},
                {"fuse", a.fuse},
                {"context_parallel", a.context_parallel},
                {"group_factor", a.group_factor}};
  if (a.mixed_nodes > 0) j["mixed_nodes"] = a.mixed_nodes;  // uniform plans read as before
  return j;
}
}  // namespace detail

/// The plan as one JSON object (see the file comment for the keys). O(layers).
inline io::Json to_json(const Plan& p) {
  const StepEstimate& e = p.predicted;
  io::Json j;
  j["model"] = p.model.name;
  j["cluster"] = p.cluster.name;
  j["model_spec"] = io::to_json(p.model);  // what allocation_from_json checks a run against
  j["cluster_spec"] = io::to_json(p.cluster);
  j["seq_len"] = p.seq_len;
  j["micro_batch"] = p.micro_batch;
  j["global_batch"] = p.global_batch;
  j["optimizer_bytes"] = p.optimizer_bytes;
  j["embedding_head"] = p.embedding_head;
  j["attention"] = {{"gpus", p.attention_gpus},
                    {"nics", p.attention_nics},
                    {"group_size", p.attention_group_size},
                    {"bandwidth_per_gpu", p.attention_bandwidth_per_gpu}};
  j["ffn"] = {{"gpus", p.ffn_gpus},
              {"nics", p.ffn_nics},
              {"group_size", p.ffn_group_size},
              {"bandwidth_per_gpu", p.ffn_bandwidth_per_gpu}};
  j["groups"] = p.allocation.groups;
  j["recompute"] = detail::to_json(p.allocation.recompute);
  j["fuse"] = p.allocation.fuse;
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
                    {"ffn_network_seconds", e.ffn_network_seconds},
                    {"attention_sm_slowdown", e.attention_sm_slowdown},
                    {"ffn_sm_slowdown", e.ffn_sm_slowdown},
                    {"attention_link_seconds", e.attention_link_seconds},
                    {"ffn_link_seconds", e.ffn_link_seconds},
                    {"attention_compute_seconds", e.attention_compute_seconds},
                    {"ffn_compute_seconds", e.ffn_compute_seconds},
                    {"bottleneck_pair", e.bottleneck_pair}};
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
  if (const Refinement& r = p.refinement; r.ran) {
    const auto seconds = [](double t) { return std::isfinite(t) ? io::Json(t) : io::Json(nullptr); };
    j["refinement"] = {{"from", detail::to_json(r.from)},
                       {"from_step_seconds", seconds(r.from_step_seconds)},
                       {"step_seconds", seconds(r.step_seconds)},
                       {"evaluations", r.evaluations},
                       {"gain", seconds(r.gain())},
                       {"budget_exhausted", r.budget_exhausted}};
  } else if (!r.skipped.empty()) {
    j["refinement"] = {{"skipped", r.skipped}};
  }
  j["explanation"] = p.explanation();
  j["idle_gpus"] = p.idle_gpus;
  j["binding"] = {{"kind", p.binding.kind}, {"text", p.binding.text}};
  return j;
}

namespace detail {
/// Recompute from {"attention": bool, "ffn": bool} (either key may be missing: off), or
/// from one bool for both sides (plans written before the choice was per side).
inline Recompute recompute_from_json(const io::Json& j, const std::string& path) {
  using io::detail::brief;
  using io::detail::read_value;
  Recompute r;
  if (j.is_boolean()) return Recompute::both(j.get<bool>());
  expect<IoError>(j.is_object(), path, brief(j), R"(a bool or an object {"attention": bool, "ffn": bool})");
  for (const auto& [key, value] : j.items())
    expect<IoError>(key == "attention" || key == "ffn", path + "." + key, "(unknown key)",
                    "attention or ffn");
  if (j.contains("attention")) read_value(j.at("attention"), path + ".attention", r.attention);
  if (j.contains("ffn")) read_value(j.at("ffn"), path + ".ffn", r.ffn);
  return r;
}

/// `theirs` (a plan's value at `at`) is `ours` (the run's, as io::to_json writes it),
/// object by object down to the first value that differs, which the error names; a
/// value of another type (a seq_len of "4096" or 4096.0) never equals, while a number
/// the spec holds as a double may be written as an integer. A key `skip` of an object
/// is a run setting, not compared.
inline void expect_same(const io::Json& theirs, const io::Json& ours, const std::string& at, const char* what,
                        std::string_view skip = {}) {
  using io::detail::brief;
  if (!ours.is_object()) {
    // nlohmann compares 4096.0 equal to 4096: an integer of the spec must be one here too.
    const bool same_kind = !ours.is_number_integer() || theirs.is_number_integer();
    expect<IoError>(same_kind && theirs == ours, at, brief(theirs),
                    std::string("the ") + what + " of this run (" +
                        (ours.is_string() ? ours.get<std::string>() : brief(ours).text) +
                        "): plan again for it");
    return;
  }
  expect<IoError>(theirs.is_object(), at, brief(theirs), "a JSON object, as io::to_json writes it");
  for (const auto& [key, value] : theirs.items())
    expect<IoError>(ours.contains(key), at + "." + key, "(unknown key)", "a key that io::to_json writes");
  for (const auto& [key, value] : ours.items()) {
    if (key == skip) continue;
    expect<IoError>(theirs.contains(key), at + "." + key, "(missing)",
                    std::string("the ") + what + "'s " + key);
    expect_same(theirs.at(key), value, at + "." + key, what);
  }
}
}  // namespace detail

/// The Allocation of a plan for model `m` on cluster `c`: a whole plan as `to_json`
/// writes it (the split under "allocation") or just the Allocation fields. Strict, as
/// a plan is only valid for what it was made for: unknown keys, integers that do not
/// fit 32 bits, counts outside the cluster, and a plan whose model, cluster or
/// sequence length differ from `m` and `c` (by name, and field by field where the plan
/// saved the specs) are IoErrors naming the path under `path`.
inline Allocation allocation_from_json(const io::Json& j, const ModelSpec& m, const ClusterSpec& c,
                                       const std::string& path = "$") {
  using io::detail::brief;
  using io::detail::read_value;
  auto known = [](const auto& keys, const std::string& key) {
    return std::find(keys.begin(), keys.end(), key) != keys.end();
  };
  expect<IoError>(j.is_object(), path, brief(j), "a JSON object (disagmoe-plan --json)");
  const bool full = j.contains("allocation");
  if (full) {
    static constexpr std::array<std::string_view, 25> kPlanKeys = {
        "model",         "cluster",         "model_spec",   "cluster_spec", "seq_len",      "micro_batch",
        "global_batch",  "optimizer_bytes", "attention",    "ffn",          "groups",       "recompute",
        "fuse",          "allocation",      "layer_groups", "predicted",    "memory_bytes", "roofline",
        "search",        "refinement",      "explanation",  "idle_gpus",    "binding",      "recommendation",
        "embedding_head"};
    for (const auto& [key, value] : j.items())
      expect<IoError>(known(kPlanKeys, key), path + "." + key, "(unknown key)", "a key that disagmoe-plan --json writes");
    const io::Json model = io::to_json(m), cluster = io::to_json(c);
    auto same = [&](const char* key, const io::Json& ours, const char* what, std::string_view skip = {}) {
      if (j.contains(key)) detail::expect_same(j.at(key), ours, path + "." + key, what, skip);
    };
    same("model", model.at("name"), "model");
    same("cluster", cluster.at("name"), "cluster");
    same("seq_len", model.at("seq_len"), "sequence length");
    // Plans written before the specs were saved are checked by name and length only.
    same("model_spec", model, "model", "micro_batch");  // the micro-batch is the plan's own key
    same("cluster_spec", cluster, "cluster");
  }
  const io::Json& a = full ? j.at("allocation") : j;
  const std::string base = full ? path + ".allocation" : path;
  expect<IoError>(a.is_object(), base, brief(a), "a JSON object of plan::Allocation fields");
  static constexpr std::array<std::string_view, 10> kFields = {"groups",
                                                               "attention_gpus_per_node",
                                                               "ffn_gpus_per_node",
                                                               "attention_nics_per_node",
                                                               "ffn_nics_per_node",
                                                               "recompute",
                                                               "fuse",
                                                               "context_parallel",
                                                               "group_factor",
                                                               "mixed_nodes"};
  for (const auto& [key, value] : a.items())
    expect<IoError>(known(kFields, key), base + "." + key, "(unknown key)",
                    "a plan::Allocation field (groups, attention_gpus_per_node, ffn_gpus_per_node, "
                    "attention_nics_per_node, ffn_nics_per_node, recompute, fuse, context_parallel, "
                    "group_factor, mixed_nodes)");
  auto count = [&](const char* name, int lo, int hi) {
    const std::string at = base + "." + name;
    expect<IoError>(a.contains(name), at, "(missing)", "an integer (plan::Allocation field)");
    int v = 0;
    read_value(a.at(name), at, v);  // an integer that fits: no narrowing
    expect<IoError>(v >= lo && v <= hi, at, v,
                    "an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) + "] on this cluster");
    return v;
  };
  Allocation r;
  r.groups = count("groups", 1, c.gpus());
  r.attention_gpus_per_node = count("attention_gpus_per_node", 1, c.gpus_per_node);
  r.ffn_gpus_per_node = count("ffn_gpus_per_node", 1, c.gpus_per_node);
  r.attention_nics_per_node = count("attention_nics_per_node", 0, c.nics_per_node);
  r.ffn_nics_per_node = count("ffn_nics_per_node", 0, c.nics_per_node);
  if (a.contains("recompute"))
    r.recompute = detail::recompute_from_json(a.at("recompute"), base + ".recompute");
  if (a.contains("fuse")) read_value(a.at("fuse"), base + ".fuse", r.fuse);  // plans before the choice: fused
  // Plans written before context parallelism have none.
  if (a.contains("context_parallel")) r.context_parallel = count("context_parallel", 1, c.gpus_per_node);
  if (a.contains("group_factor")) r.group_factor = count("group_factor", 1, 2);  // else the default, 2
  if (a.contains("mixed_nodes"))
    r.mixed_nodes = count("mixed_nodes", 0, c.nodes - 1);  // else every node alike
  return r;
}

}  // namespace disagmoe::plan
