// SPDX-License-Identifier: Apache-2.0
/// @file allocation_milp.hpp
/// The GPU/NIC split between attention and FFN groups and the number of group pairs
/// as a mixed-integer linear program (MISSION.md, "Adaptive worker allocation"),
/// solved by the library's branch and bound (milp/, see adaptive_allocator.hpp).
///
/// For one recompute setting, with N nodes of G GPUs and K NICs:
///
///     min S                                                      (ms per micro-batch)
///     Σ_p y_p = 1;  Σ_a s_pa = y_p;  Σ_f t_pf = y_p              (one p, one A and F size)
///     Σ a·s_pa + Σ f·t_pf <= G                                  (GPUs per node)
///     Σ_c u_c = 1;  Σ_c v_c = 1;  Σ c·u_c + Σ c·v_c <= K        (NICs per node; N > 1)
///     S >= Σ s_pa · CA_pa                                        (A compute)
///     S >= Σ t_pf · CF_pf                                        (F compute)
///     S >= B / (N·c·B_nic) − M(1 − u_c)  for every c             (A links; N > 1)
///     S >= B / (N·c·B_nic) − M(1 − v_c)  for every c             (F links; N > 1)
///     Σ s_pa · MA_pa <= cap                                      (A memory)
///     MF⁰_pfi + MF¹_pfi · X <= cap + M(1 − t_pf)  ∀ p, f, pair i (F memory)
///
/// with B = Σ t_pf · p · bytes_pf (GB) and X = Σ s_pa · min(micro-batches, 2Na).
/// The 1/x terms (group sizes Na/p and Nf/p in denominators, link capacities Nc/p)
/// are linearised by selecting among candidate sizes with binary variables; every
/// constant is computed by AnalyticModel, so the MILP optimum is the smallest
/// `StepEstimate::bound_seconds` over all valid allocations that fit (the exhaustive
/// oracle `enumerate_best_bound`). On one node the link capacity is a·B_intra/p
/// instead, selected by σ_a = Σ_p s_pa (and τ_f for F) in the same big-M rows.
#pragma once

#include <disagmoe/milp/problem.hpp>
#include <disagmoe/plan/allocation.hpp>

#include <algorithm>
#include <cmath>
#include <map>
#include <span>
#include <tuple>
#include <vector>

namespace disagmoe::plan {

/// The MILP of one recompute setting and how its variables map to allocations.
struct AllocationMilp {
  milp::Problem problem;                ///< the program (objective: ms per micro-batch)
  bool recompute = false;               ///< setting it was built for
  int stage_var = -1;                   ///< S
  std::map<int, int> group_var;         ///< p → y_p
  std::map<std::pair<int, int>, int> attention_var;  ///< (p, a) → s_pa
  std::map<std::pair<int, int>, int> ffn_var;        ///< (p, f) → t_pf
  std::map<int, int> attention_nic_var;              ///< c → u_c (multi-node only)
  std::map<int, int> ffn_nic_var;                    ///< c → v_c (multi-node only)

  /// Scale of the objective: S [ms] = bound_seconds × kMs.
  static constexpr double kMs = 1e3;

  /// The allocation a solution vector selects (binaries read as > 0.5).
  [[nodiscard]] Allocation decode(std::span<const double> x) const {
    Allocation a;
    a.recompute = recompute;
    for (const auto& [k, j] : attention_var)
      if (x[j] > 0.5) std::tie(a.groups, a.attention_gpus_per_node) = k;
    for (const auto& [k, j] : ffn_var)
      if (x[j] > 0.5) a.ffn_gpus_per_node = k.second;
    for (const auto& [n, j] : attention_nic_var)
      if (x[j] > 0.5) a.attention_nics_per_node = n;
    for (const auto& [n, j] : ffn_nic_var)
      if (x[j] > 0.5) a.ffn_nics_per_node = n;
    return a;
  }

  /// The solution vector of allocation `a` with S = `stage_ms` (for checking the
  /// formulation against the analytic model). Precondition: a's combos are in the maps.
  [[nodiscard]] std::vector<double> encode(const Allocation& a, double stage_ms) const {
    std::vector<double> x(static_cast<std::size_t>(problem.num_vars()), 0.0);
    x[stage_var] = stage_ms;
    auto set = [&](const auto& map, const auto& key) {
      if (auto it = map.find(key); it != map.end()) x[it->second] = 1.0;
    };
    set(group_var, a.groups);
    set(attention_var, std::pair{a.groups, a.attention_gpus_per_node});
    set(ffn_var, std::pair{a.groups, a.ffn_gpus_per_node});
    set(attention_nic_var, a.attention_nics_per_node);
    set(ffn_nic_var, a.ffn_nics_per_node);
    return x;
  }
};

/// Builds the MILP for `model` with recomputation `rc`. Variables exist only for
/// structurally valid candidates (AnalyticModel::valid_attention / valid_ffn).
/// O(p_max · (G + K) · layers) to compute the constants.
inline AllocationMilp build_allocation_milp(const AnalyticModel& model, bool rc) {
  using milp::kInf;
  using milp::VarType;
  const ClusterSpec& c = model.cluster();
  const double ms = AllocationMilp::kMs, gb = 1e-9;
  AllocationMilp f;
  f.recompute = rc;
  milp::Problem& P = f.problem;
  P.set_name("disagmoe_allocation");
  f.stage_var = P.add_var(0, kInf, 1.0, VarType::kContinuous, "S");

  // Candidate sizes and their constants.
  std::vector<int> gpu_idx;
  std::vector<double> gpu_val, mem_a_val;
  std::vector<int> mem_a_idx;
  std::vector<int> ca_idx, cf_idx, b_idx;
  std::vector<double> ca_val, cf_val, b_val;
  std::vector<int> x_idx;
  std::vector<double> x_val;
  double b_max = 0;
  struct FfnMem {
    int var;
    std::vector<std::pair<double, double>> terms;
  };
  std::vector<FfnMem> ffn_mem;
  for (int p = 1; p <= model.max_groups(); ++p) {
    std::vector<int> as, fs;
    for (int a = 1; a < c.gpus_per_node; ++a)
      if (model.valid_attention(p, a)) as.push_back(a);
    for (int ff = 1; ff < c.gpus_per_node; ++ff)
      if (model.valid_ffn(p, ff)) fs.push_back(ff);
    if (as.empty() || fs.empty() || as.front() + fs.front() > c.gpus_per_node) continue;
    const int y = P.add_var(0, 1, 0, VarType::kBinary, "y_" + std::to_string(p));
    f.group_var[p] = y;
    std::vector<int> link_a{y}, link_f{y};
    std::vector<double> one_a{-1.0}, one_f{-1.0};
    for (int a : as) {
      const int v = P.add_var(0, 1, 0, VarType::kBinary, "s_" + std::to_string(p) + "_" + std::to_string(a));
      f.attention_var[{p, a}] = v;
      link_a.push_back(v);
      one_a.push_back(1.0);
      gpu_idx.push_back(v);
      gpu_val.push_back(a);
      ca_idx.push_back(v);
      ca_val.push_back(-ms * model.attention_pair_seconds(p, rc) / model.group_size(p, a));
      mem_a_idx.push_back(v);
      mem_a_val.push_back(gb * model.attention_memory(p, a, rc).total());
      x_idx.push_back(v);
      x_val.push_back(model.pair_in_flight(a));
    }
    for (int ff : fs) {
      const int v = P.add_var(0, 1, 0, VarType::kBinary, "t_" + std::to_string(p) + "_" + std::to_string(ff));
      const int g = model.group_size(p, ff);
      f.ffn_var[{p, ff}] = v;
      link_f.push_back(v);
      one_f.push_back(1.0);
      gpu_idx.push_back(v);
      gpu_val.push_back(ff);
      cf_idx.push_back(v);
      cf_val.push_back(-ms * model.ffn_pair_seconds(p, g, rc));
      const double bytes = gb * p * model.pair_bytes(p, g);
      b_idx.push_back(v);
      b_val.push_back(bytes);
      b_max = std::max(b_max, bytes);
      ffn_mem.push_back({v, model.ffn_memory_terms(p, ff, rc)});
    }
    P.add_row(link_a, one_a, 0, 0, "one_a_" + std::to_string(p));
    P.add_row(link_f, one_f, 0, 0, "one_f_" + std::to_string(p));
  }
  {
    std::vector<int> idx;
    std::vector<double> one;
    for (const auto& [p, v] : f.group_var) {
      idx.push_back(v);
      one.push_back(1.0);
    }
    P.add_row(idx, one, 1, 1, "one_p");  // infeasible (0 = 1) when no p is valid
  }
  P.add_row(gpu_idx, gpu_val, -kInf, c.gpus_per_node, "gpus_per_node");
  auto with_stage = [&](std::vector<int> idx, std::vector<double> val) {
    idx.push_back(f.stage_var);
    val.push_back(1.0);
    return std::pair{idx, val};
  };
  {
    auto [i1, v1] = with_stage(ca_idx, ca_val);
    P.add_row(i1, v1, 0, kInf, "attention_compute");
    auto [i2, v2] = with_stage(cf_idx, cf_val);
    P.add_row(i2, v2, 0, kInf, "ffn_compute");
  }
  P.add_row(mem_a_idx, mem_a_val, -kInf, gb * model.capacity(), "attention_memory");
  // F memory: one big-M row per (p, f) and distinct pair profile.
  double x_max = 0;
  for (double v : x_val) x_max = std::max(x_max, v);
  for (const FfnMem& fm : ffn_mem) {
    std::vector<std::pair<double, double>> terms = fm.terms;
    std::sort(terms.begin(), terms.end());
    terms.erase(std::unique(terms.begin(), terms.end()), terms.end());
    for (const auto& [fixed, per] : terms) {
      const double big = std::max(0.0, gb * (fixed + per * x_max - model.capacity()));
      std::vector<int> idx = x_idx;
      std::vector<double> val;
      for (double v : x_val) val.push_back(gb * per * v);
      idx.push_back(fm.var);
      val.push_back(big);
      P.add_row(idx, val, -kInf, gb * (model.capacity() - fixed) + big, "ffn_memory");
    }
  }
  // Links: S >= B / cap(sel) − M (1 − sel) for each capacity selector sel.
  auto link_rows = [&](const std::vector<std::pair<std::vector<int>, double>>& selectors, const char* name) {
    for (const auto& [sel, cap_gb] : selectors) {
      const double k = ms / cap_gb, big = k * b_max;
      std::vector<int> idx{f.stage_var};
      std::vector<double> val{1.0};
      for (std::size_t q = 0; q < b_idx.size(); ++q) {
        idx.push_back(b_idx[q]);
        val.push_back(-k * b_val[q]);
      }
      for (int v : sel) {
        auto it = std::find(idx.begin(), idx.end(), v);
        if (it != idx.end()) val[static_cast<std::size_t>(it - idx.begin())] -= big;
        else {
          idx.push_back(v);
          val.push_back(-big);
        }
      }
      P.add_row(idx, val, -big, kInf, name);
    }
  };
  const double eff = model.options().efficiency.network;
  if (c.nodes == 1) {
    // Capacity a · intra / p; B carries the factor p, so select on a (or f) alone.
    std::vector<std::pair<std::vector<int>, double>> sel_a, sel_f;
    std::map<int, std::vector<int>> by_a, by_f;
    for (const auto& [k, v] : f.attention_var) by_a[k.second].push_back(v);
    for (const auto& [k, v] : f.ffn_var) by_f[k.second].push_back(v);
    for (const auto& [a, vs] : by_a) sel_a.emplace_back(vs, gb * a * c.intra_node_bandwidth * eff);
    for (const auto& [ff, vs] : by_f) sel_f.emplace_back(vs, gb * ff * c.intra_node_bandwidth * eff);
    link_rows(sel_a, "attention_links");
    link_rows(sel_f, "ffn_links");
  } else {
    // Across nodes the capacity N·c·B_nic/p depends on the NICs per node c alone
    // (B carries the p): one binary per c and side, S >= B/cap(c) − M(1 − u_c).
    // (A binary per (p, f, c) would make the product exact without big-M; measured,
    // it makes the LPs 5× larger and the solve slower, not faster.)
    std::vector<std::pair<std::vector<int>, double>> sel_a, sel_f;
    std::vector<int> ui, vi, all;
    std::vector<double> ones, cs;
    for (int n = 1; n < c.nics_per_node; ++n) {
      const int u = P.add_var(0, 1, 0, VarType::kBinary, "u_" + std::to_string(n));
      const int v = P.add_var(0, 1, 0, VarType::kBinary, "v_" + std::to_string(n));
      f.attention_nic_var[n] = u;
      f.ffn_nic_var[n] = v;
      ui.push_back(u);
      vi.push_back(v);
      ones.push_back(1);
      all.insert(all.end(), {u, v});
      cs.insert(cs.end(), {double(n), double(n)});
      const double cap = gb * c.nodes * n * c.nic_bandwidth * eff;
      sel_a.push_back({{u}, cap});
      sel_f.push_back({{v}, cap});
    }
    P.add_row(ui, ones, 1, 1, "one_u");
    P.add_row(vi, ones, 1, 1, "one_v");
    P.add_row(all, cs, -kInf, c.nics_per_node, "nics_per_node");
    link_rows(sel_a, "attention_links");
    link_rows(sel_f, "ffn_links");
  }
  return f;
}

}  // namespace disagmoe::plan
