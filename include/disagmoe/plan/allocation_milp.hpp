// SPDX-License-Identifier: Apache-2.0
/// @file allocation_milp.hpp
/// The GPU/NIC split between attention and FFN groups, the number of group pairs and
/// each side's recomputation as one mixed-integer linear program (DisagMoE, arXiv 2605.11005, "Adaptive
/// worker allocation"), solved by the library's branch and bound (milp/, see adaptive_allocator.hpp).
///
/// The 1/x terms of the stage time (group sizes Na/p and Nf/p and link capacities in
/// denominators) are linearised by selecting among candidate sizes with binaries, one
/// per side, each indexed by its own size and recompute setting (r_a, r_f: each side
/// recomputes only for its own memory and pays only its own extra forward) and by the
/// choices both sides share: p and k, which fixes both sides' links. Across nodes k is the F
/// NICs per node and the A side gets the other K − k (a NIC left idle only lengthens a
/// link time, so every NIC is used); on one node, where each side's links are its
/// GPUs' own, k is the A GPUs per node. With N nodes of G GPUs and K NICs:
///
///     s_{p,a,k,ra}: A side, a GPUs per node     t_{p,f,k,rf}: F side, f GPUs per node
///     Σ s = 1;  Σ_{a,ra} s_{p,a,k,ra} = Σ_{f,rf} t_{p,f,k,rf}     ∀ (p, k)   (one consistent choice)
///     Σ_{a >= θ} s_{p,a,k,ra} <= Σ_{ρ_{f,rf} >= θ} t_{p,f,k,rf}   ∀ (p, k), θ (compatible sizes)
///     S >= Σ CA_{p,a,ra} · s                                               (A compute)
///     S >= Σ TF_{p,f,k,rf} · t                                             (F compute, F links)
///     S >= Σ LA^i_{p,f,k} · t + Σ RA^i_{p,a,k} · s          ∀ pair i       (A links)
///     min S                                                                (ms per micro-batch)
///
/// Every coefficient depends on one side's size and recompute setting and the shared
/// (p, k) only, and is
/// the slowest pair's (AnalyticModel::pair_sums): CA = max_i A compute of pair i; TF =
/// max_i of F compute and F link time (A↔F bytes, which depend on the F group through
/// the deduplicated rows and its busiest GPU's share of them, + the F group's gradient
/// all-reduce); the A side's link time
/// is A↔F bytes (an F-side quantity, LA^i) plus its own all-reduce and the output head's
/// ring between A groups (RA^i, PlanOptions::embedding_head), summed per
/// pair so the rows take the max over pairs of the sum exactly. Only pairs that can be
/// the largest get a row (detail::link_pairs: usually the pair with the embedding, the
/// one with the head and one with the most MoE layers); row i holds the i-th of them
/// for every p. No big-M anywhere.
///
/// Compatibility: an F size f (recompute rf) admits the A sizes 1..ρ_{f,rf}, ρ = min(G − f, â)
/// (GPUs per node; F memory, whose bytes are static + per micro-batch in flight,
/// min(micro-batches, 4Na), growing with a, so â is a prefix bound). Nested neighbourhoods make the
/// cumulative rows the exact, integral description of the compatible pairs (Hall's
/// condition); aggregated rows (Σ a·s + Σ f·t <= G, Σ a·s <= Σ â·t) let the LP pair sizes
/// across groups — measured on DeepSeek-MoE-16B and GPT-OSS-120B at 16K on h800x128, the
/// root gap was 22–28% with them and 11–17% with the cumulative rows (2–5% with a stage
/// variable per group as well, but twice the rows made each solve slower). A workers are
/// checked per (p, a, ra): a size that does not fit has no binary.
///
/// The optimum is the smallest StepEstimate::bound_seconds over all valid allocations
/// that split every node alike and fit (tests check it against the exhaustive oracle enumerate_best_bound,
/// which prices every allocation with AnalyticModel::estimate). With `prune`, the builder first takes the
/// best compatible pair of the groups with the NICs split evenly as a cutoff (a primal heuristic over 1/(K−1)
/// of the shared choices), bounds S by it and leaves out the binaries whose own term exceeds it: fewer
/// binaries, same optimum.
#pragma once

#include <disagmoe/milp/problem.hpp>
#include <disagmoe/plan/analytic_model.hpp>

#include <algorithm>
#include <map>
#include <span>
#include <string>
#include <tuple>
#include <vector>

namespace disagmoe::plan {

namespace detail {
/// Pairs whose A link time (A↔F bytes + A-side all-reduce) can be the largest of the
/// p pairs in `sums`: pair i is dropped when another pair has at least its A↔F bytes
/// for every row count in [1, top_k] (bytes are linear in the rows, so both ends
/// decide) and at least its replicated A parameters; of equal pairs the first stays.
/// O(p²).
inline std::vector<int> link_pairs(const std::vector<AnalyticModel::PairSums>& sums, double top_k) {
  const auto at = [](const AnalyticModel::PairSums& u, double rows) { return u.dense_row_bytes + rows * u.moe_row_bytes; };
  std::vector<int> kept;
  for (std::size_t i = 0; i < sums.size(); ++i) {
    bool dominated = false;
    for (std::size_t j = 0; j < sums.size() && !dominated; ++j) {
      const AnalyticModel::PairSums &u = sums[i], &v = sums[j];
      const bool ge = at(v, 1) >= at(u, 1) && at(v, top_k) >= at(u, top_k) && v.attention_params >= u.attention_params;
      const bool gt = at(v, 1) > at(u, 1) || at(v, top_k) > at(u, top_k) || v.attention_params > u.attention_params;
      dominated = j != i && ge && (gt || j < i);
    }
    if (!dominated) kept.push_back(int(i));
  }
  return kept;
}
}  // namespace detail

/// The allocation MILP and how its variables map to allocations.
struct AllocationMilp {
  using Key = std::tuple<int, int, int, bool>;  ///< (p, side size per node, k, that side recomputes)
  using GroupKey = std::tuple<int, int>;        ///< (p, k)
  milp::Problem problem;                        ///< the program (objective: ms per micro-batch)
  int stage_var = -1;                           ///< S
  bool multi_node = false;                      ///< k = F NICs per node (else A GPUs per node)
  int nics_per_node = 0;                        ///< K
  int context_parallel = 1;                     ///< the model's, copied into every decoded allocation
  int group_factor = 2;                         ///< the model's, likewise
  std::map<Key, int> attention_var;             ///< (p, a, k, ra) → s
  std::map<Key, int> ffn_var;                   ///< (p, f, k, rf) → t

  /// Scale of the objective: S [ms] = bound_seconds × kMs.
  static constexpr double kMs = 1e3;

  /// The shared index k of allocation `a`: F NICs per node across nodes, else A GPUs.
  [[nodiscard]] int shared_index(const Allocation& a) const {
    return multi_node ? a.ffn_nics_per_node : a.attention_gpus_per_node;
  }

  /// The allocation a solution vector selects (binaries read as > 0.5).
  [[nodiscard]] Allocation decode(std::span<const double> x) const {
    Allocation a;
    a.context_parallel = context_parallel;
    a.group_factor = group_factor;
    int k = 0;
    for (const auto& [key, j] : attention_var)
      if (x[static_cast<std::size_t>(j)] > 0.5)
        std::tie(a.groups, a.attention_gpus_per_node, k, a.recompute.attention) = key;
    for (const auto& [key, j] : ffn_var)
      if (x[static_cast<std::size_t>(j)] > 0.5) {
        a.ffn_gpus_per_node = std::get<1>(key);
        a.recompute.ffn = std::get<3>(key);
      }
    if (multi_node) {
      a.attention_nics_per_node = nics_per_node - k;
      a.ffn_nics_per_node = k;
    }
    return a;
  }

  /// True when allocation `a` has both binaries: valid, every node split alike (mixed
  /// splits are the local search's), its A worker fits, some A size fits with its F
  /// worker, and (across nodes) it uses every NIC. Whether this `a` fits is then up to
  /// the memory row.
  [[nodiscard]] bool represents(const Allocation& a) const {
    if (a.context_parallel != context_parallel || a.group_factor != group_factor || a.mixed_nodes != 0)
      return false;
    if (multi_node && a.attention_nics_per_node + a.ffn_nics_per_node != nics_per_node) return false;
    const int k = shared_index(a);
    return attention_var.count({a.groups, a.attention_gpus_per_node, k, a.recompute.attention}) &&
           ffn_var.count({a.groups, a.ffn_gpus_per_node, k, a.recompute.ffn});
  }

  /// The solution vector of allocation `a` with S = `stage` ms (for checking the
  /// formulation against the analytic model); all binaries 0 unless represents(a).
  [[nodiscard]] std::vector<double> encode(const Allocation& a, double stage) const {
    std::vector<double> x(static_cast<std::size_t>(problem.num_vars()), 0.0);
    x[static_cast<std::size_t>(stage_var)] = stage;
    if (!represents(a)) return x;
    const int k = shared_index(a);
    x[static_cast<std::size_t>(
        attention_var.at({a.groups, a.attention_gpus_per_node, k, a.recompute.attention}))] = 1;
    x[static_cast<std::size_t>(ffn_var.at({a.groups, a.ffn_gpus_per_node, k, a.recompute.ffn}))] = 1;
    return x;
  }
};

/// Builds the allocation MILP of `model` over the recompute settings its policy allows
/// on each side, with the cutoff of the file comment when `prune`. Coefficients come
/// from AnalyticModel::pair_sums (once per p) and its memory terms (once per (p, a, ra)
/// and (p, f, rf)). O(p_max · layers + binaries · p_max).
inline AllocationMilp build_allocation_milp(const AnalyticModel& model, bool prune = false) {
  using milp::kInf;
  using milp::VarType;
  const ClusterSpec& c = model.cluster();
  const int gpn = c.gpus_per_node;
  const bool multi = c.nodes > 1;
  const int nics = multi ? c.nics_per_node : 0;
  const double cap = model.capacity(), ms = AllocationMilp::kMs, mb = model.micro_batches();
  const double gb = model.options().memory.grad_bytes > 0 ? model.options().memory.grad_bytes
                                                          : bytes_of(model.model().dtype);
  const double tokens = model.tokens_per_micro_batch();
  AllocationMilp f;
  f.multi_node = multi;
  f.nics_per_node = nics;
  f.context_parallel = model.context_parallel();
  f.group_factor = model.group_factor();
  milp::Problem& P = f.problem;
  P.set_name("disagmoe_allocation");
  f.stage_var = P.add_var(0, kInf, 1.0, VarType::kContinuous, "S");

  // Candidates of each choice group (p, k) with their coefficients (ms), collected
  // first so that a cutoff can drop those that cannot be optimal before the program is built.
  struct Side {
    int size = 0;               // a or f, GPUs per node
    bool rc = false;            // this side recomputes
    int reach = 0;              // F: largest A size it admits (GPUs and F memory)
    double stage = 0;           // CA (A) or TF (F)
    std::vector<double> link;   // per pair slot: RA (A) or LA (F)
    int var = -1;
  };
  struct Group {
    std::vector<Side> s, t;
  };
  std::map<AllocationMilp::GroupKey, Group> groups;
  // The A side's link bandwidth for shared index k (p pairs).
  const auto a_bandwidth = [&](int p, int k) {
    return multi ? model.side_bandwidth(p, 0, nics - k) : model.side_bandwidth(p, k, 0);
  };

  const std::vector<bool> choices = model.recompute_choices();
  for (int p = 1; p <= model.max_groups(); ++p) {
    struct Size {
      int size;
      bool rc;
      int reach;  // F: largest A size whose micro-batches in flight its memory holds
    };
    std::vector<Size> as, fs;
    int smallest_a = gpn;
    for (bool rc : choices)
      for (int a = 1; a < gpn; ++a)
        if (model.valid_attention(p, a) && model.attention_memory(p, a, rc).total() <= cap) {
          as.push_back({a, rc, 0});
          smallest_a = std::min(smallest_a, a);
        }
    for (bool rc : choices)
      for (int ff = 1; ff < gpn; ++ff) {
        if (!model.valid_ffn(p, ff) || smallest_a + ff > gpn) continue;
        // Largest A size whose micro-batches in flight the F workers can hold (a prefix:
        // the bytes grow with min(micro-batches, 4Na)).
        int top = 0;
        const auto terms = model.ffn_memory_terms(p, ff, rc);
        for (int a = 1; a < gpn; ++a) {
          bool fits = true;
          for (const auto& [fixed, per] : terms) fits = fits && fixed + per * model.pair_in_flight(a) <= cap;
          if (!fits) break;
          top = a;
        }
        if (top >= smallest_a) fs.push_back({ff, rc, top});
      }
    if (fs.empty()) continue;
    int smallest_f = gpn;
    for (const Size& y : fs) smallest_f = std::min(smallest_f, y.size);
    const std::vector<AnalyticModel::PairSums> sums = model.pair_sums(p);
    const std::vector<int> link_pairs = detail::link_pairs(sums, model.model().top_k);
    std::vector<int> ks;
    if (multi)
      for (int k = 1; k < nics; ++k) ks.push_back(k);
    else
      for (const Size& x : as) ks.push_back(x.size);
    std::sort(ks.begin(), ks.end());
    ks.erase(std::unique(ks.begin(), ks.end()), ks.end());
    for (int k : ks) {
      Group& g = groups[{p, k}];
      const double bw_a = a_bandwidth(p, k);
      for (const Size& c_a : as) {
        const int a = c_a.size;
        if (a + smallest_f > gpn || (!multi && a != k)) continue;
        const int ga = model.group_size(p, a);
        Side x{a, c_a.rc, 0, 0, {}, -1};
        for (const AnalyticModel::PairSums& q : sums)
          x.stage = std::max(x.stage, ms * q.attention_s[c_a.rc] / ga);
        const double edges = model.all_reduce_edges(ga) / bw_a / mb;
        for (int i : link_pairs) {  // the A side's all-reduce and the head's ring (its own bytes)
          const AnalyticModel::PairSums& u = sums[static_cast<std::size_t>(i)];
          x.link.push_back(ms * (edges * ring_all_reduce_bytes(u.attention_params * gb, ga) +
                                 2 * tokens * u.head_row_bytes / bw_a));
        }
        g.s.push_back(std::move(x));
      }
      for (const Size& c_f : fs) {
        const int ff = c_f.size, gf = model.group_size(p, ff);
        const bool rc = c_f.rc;
        if (!multi && k + ff > gpn) continue;
        const double bw_f = multi ? model.side_bandwidth(p, 0, k) : model.side_bandwidth(p, ff, 0);
        const double rows = model.moe_rows(gf), imb = model.ffn_link_imbalance(gf);
        const double share = double((model.model().experts + gf - 1) / gf) / model.model().experts;
        const double edges = model.all_reduce_edges(gf) / bw_f / mb;
        // A↔F bytes per micro-batch; the F side's busiest GPU moves `busiest` times the mean rows.
        const auto bytes = [&](const AnalyticModel::PairSums& u, double busiest) {
          return 2 * tokens * (u.dense_row_bytes + u.moe_row_bytes * rows * busiest);
        };
        Side x{ff, rc, std::min(c_f.reach, gpn - ff), 0, {}, -1};
        for (const AnalyticModel::PairSums& u : sums)
          x.stage =
              std::max({x.stage, ms * (u.routed_s[rc] * share + u.other_s[rc] / gf),
                        ms * (bytes(u, imb) / bw_f + edges * ring_all_reduce_bytes(u.ffn_params * gb, gf))});
        for (int i : link_pairs) x.link.push_back(ms * bytes(sums[static_cast<std::size_t>(i)], 1.0) / bw_a);
        g.t.push_back(std::move(x));
      }
    }
  }
  // A side without a partner in its group cannot be chosen.
  for (auto it = groups.begin(); it != groups.end();)
    it = (it->second.s.empty() || it->second.t.empty()) ? groups.erase(it) : std::next(it);

  // Cutoff: the best compatible pair of the groups with the NICs split evenly (a cheap
  // primal heuristic, O(those pairs · slots)); candidates whose own term exceeds it
  // cannot be optimal and are left out, and S is bounded by it.
  if (prune && multi) {
    double best = kInf;
    for (const auto& [key, g] : groups) {
      if (std::get<1>(key) != nics / 2) continue;
      for (const Side& x : g.s)
        for (const Side& y : g.t) {
          if (x.size > y.reach) continue;
          double v = std::max(x.stage, y.stage);
          for (std::size_t i = 0; i < x.link.size(); ++i) v = std::max(v, x.link[i] + y.link[i]);
          best = std::min(best, v);
        }
    }
    if (best < kInf) {
      const double cut = best * (1 + 1e-9);
      P.set_bounds(f.stage_var, 0, cut);
      const auto over = [&](const Side& x) {
        return x.stage > cut || std::any_of(x.link.begin(), x.link.end(), [&](double v) { return v > cut; });
      };
      for (auto it = groups.begin(); it != groups.end();) {
        Group& g = it->second;
        std::erase_if(g.s, over);
        std::erase_if(g.t, over);
        it = (g.s.empty() || g.t.empty()) ? groups.erase(it) : std::next(it);
      }
    }
  }

  std::vector<int> all_s;
  for (auto& [key, g] : groups) {
    const auto [p, k] = key;
    for (Side& x : g.s) {
      x.var = P.add_var(0, 1, 0, VarType::kBinary);
      f.attention_var[{p, x.size, k, x.rc}] = x.var;
      all_s.push_back(x.var);
    }
    for (Side& y : g.t) {
      y.var = P.add_var(0, 1, 0, VarType::kBinary);
      f.ffn_var[{p, y.size, k, y.rc}] = y.var;
    }
  }
  // Σ s = 1 is infeasible (0 = 1) when no candidate fits: the solver reports it.
  P.add_row(all_s, std::vector<double>(all_s.size(), 1.0), 1, 1, "one_allocation");
  // Stage rows S − Σ coef · x >= 0, gathered over all groups (one row per term).
  const auto concat_sides = [](const std::vector<Side>& a, const std::vector<Side>& b) {
    std::vector<Side> v = a;
    v.insert(v.end(), b.begin(), b.end());
    return v;
  };
  std::vector<int> ca_idx, tf_idx;
  std::vector<double> ca_val, tf_val;
  std::vector<std::vector<int>> link_idx;
  std::vector<std::vector<double>> link_val;
  for (const auto& [key, g] : groups) {
    // One A size iff one F size, and only compatible pairs (below).
    std::vector<int> idx;
    std::vector<double> val;
    for (const Side& x : g.s) {
      idx.push_back(x.var);
      val.push_back(1.0);
    }
    for (const Side& y : g.t) {
      idx.push_back(y.var);
      val.push_back(-1.0);
    }
    P.add_row(idx, val, 0, 0, "consistent");
    // An F size admits the A sizes 1..reach (GPUs per node: a <= G − f; F memory:
    // a <= â). With nested reaches, "Σ_{a >= θ} s <= Σ_{reach >= θ} t for every θ"
    // describes the compatible pairs exactly and integrally (Hall's condition on a
    // bipartite graph whose neighbourhoods are nested).
    for (int theta = 2; theta < gpn; ++theta) {
      std::vector<int> ri;
      std::vector<double> rv;
      for (const Side& x : g.s)
        if (x.size >= theta) {
          ri.push_back(x.var);
          rv.push_back(1.0);
        }
      if (ri.empty()) continue;
      bool excludes = false;
      for (const Side& y : g.t) {
        if (y.reach >= theta) {
          ri.push_back(y.var);
          rv.push_back(-1.0);
        } else {
          excludes = true;
        }
      }
      if (excludes) P.add_row(ri, rv, -kInf, 0, "compatible");
    }
    for (const Side& x : g.s) {
      ca_idx.push_back(x.var);
      ca_val.push_back(-x.stage);
    }
    for (const Side& y : g.t) {
      tf_idx.push_back(y.var);
      tf_val.push_back(-y.stage);
    }
    for (const Side& x : concat_sides(g.s, g.t)) {
      if (link_idx.size() < x.link.size()) {
        link_idx.resize(x.link.size());
        link_val.resize(x.link.size());
      }
      for (std::size_t slot = 0; slot < x.link.size(); ++slot)
        if (x.link[slot] != 0) {
          link_idx[slot].push_back(x.var);
          link_val[slot].push_back(-x.link[slot]);
        }
    }
  }
  const auto stage_row = [&](std::vector<int> idx, std::vector<double> val, const char* name) {
    idx.push_back(f.stage_var);
    val.push_back(1.0);
    P.add_row(idx, val, 0, kInf, name);
  };
  stage_row(ca_idx, ca_val, "attention_compute");
  stage_row(tf_idx, tf_val, "ffn_side");
  for (std::size_t slot = 0; slot < link_idx.size(); ++slot) stage_row(link_idx[slot], link_val[slot], "attention_links");
  return f;
}

}  // namespace disagmoe::plan
