// SPDX-License-Identifier: Apache-2.0
/// @file correlated.hpp
/// `CorrelatedPlacement`: the fast heuristic for the coupling objective of
/// objective.hpp. Per start: greedy seeding layer by layer (each GPU grows from one
/// expert by the strongest co-selection plus alignment with the previous layer), a
/// load repair, then Kernighan–Lin style pairwise swap refinement over all layers
/// (Kernighan & Lin 1970: gain of swapping a and b = D_a + D_b - 2 w_ab) until no
/// swap improves. Multi-start keeps the best start; deterministic per seed whatever
/// the thread count. Hierarchical on multi-node groups: partition onto nodes first,
/// then onto each node's GPUs (only intra-node swaps in the second stage).
#pragma once

#include <disagmoe/error.hpp>
#include <disagmoe/placement/objective.hpp>
#include <disagmoe/placement/placement.hpp>
#include <disagmoe/placement/synthetic.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <thread>
#include <vector>

namespace disagmoe::placement {

/// Knobs of the correlated placement heuristic.
struct CorrelatedPlacementOptions {
  ObjectiveWeights weights{};    ///< lambda (cross-layer) and nu (node) of the objective
  double load_tolerance = 0.25;  ///< every GPU's fitted token load <= (1 + tol) * mean, when reachable
  int starts = 4;                ///< independent starts (start 0 deterministic greedy, others randomised)
  int max_passes = 50;           ///< refinement sweeps over all layers per stage
  int kicks = 8;                 ///< iterated-local-search perturbations per start and stage
  bool hierarchical = true;      ///< node level first on multi-node topologies
  std::uint64_t seed = 1;        ///< seed of the randomised starts
  int threads = 0;               ///< threads for the starts (0: hardware concurrency)

  /// Throws ConfigError naming the first invalid field.
  void validate() const {
    weights.validate();
    expect(load_tolerance >= 0, "load_tolerance", load_tolerance, ">= 0 (use a large value to disable)");
    expect(starts >= 1 && starts <= 1024, "starts", starts, "1 <= starts <= 1024");
    expect(max_passes >= 0 && max_passes <= 100000, "max_passes", max_passes, "0 <= max_passes <= 100000");
    expect(kicks >= 0 && kicks <= 100000, "kicks", kicks, "0 <= kicks <= 100000");
    expect(threads >= 0, "threads", threads, ">= 0");
  }
};

namespace detail {

/// Balanced partition of every layer's experts into `bins` bins of equal size with a
/// gain table for O(1) swap evaluation. `bin_group` restricts swaps (and seeding) to
/// bins of the same group: all zero for a flat partition, the node for stage 2.
class SwapPartitioner {
 public:
  SwapPartitioner(const CouplingWeights& w, int bins, std::vector<int> bin_group, std::vector<int> expert_group,
                  double load_tolerance)
      : w_(w), L_(w.layers), E_(w.experts), B_(bins), cap_(w.experts / bins), bin_group_(std::move(bin_group)),
        expert_group_(std::move(expert_group)) {
    bin_.assign(static_cast<std::size_t>(L_) * E_, -1);
    bin_load_.assign(static_cast<std::size_t>(L_) * B_, 0.0);
    load_cap_.resize(static_cast<std::size_t>(L_));
    for (int l = 0; l < L_; ++l) {
      double total = 0;
      for (int e = 0; e < E_; ++e) total += load(l, e);
      load_cap_[static_cast<std::size_t>(l)] = (1.0 + load_tolerance) * total / B_ + 1e-9 * total;
    }
  }

  /// Greedy seeding of all layers, then the gain table. `randomised` perturbs choices.
  void seed(SplitMix64& rng, bool randomised) {
    std::vector<double> score(static_cast<std::size_t>(E_));
    std::vector<char> placed(static_cast<std::size_t>(E_));
    for (int l = 0; l < L_; ++l) {
      std::fill(placed.begin(), placed.end(), 0);
      for (int b = 0; b < B_; ++b) {
        const int grp = bin_group_[static_cast<std::size_t>(b)];
        // Alignment with the previous layer: experts whose predecessors sit on b.
        std::fill(score.begin(), score.end(), 0.0);
        if (l > 0)
          for (int y = 0; y < E_; ++y)
            if (bin(l - 1, y) == b) {
              const double* tr = w_.trans_row(l - 1, y);
              for (int x = 0; x < E_; ++x) score[static_cast<std::size_t>(x)] += tr[x];
            }
        for (int n = 0; n < cap_; ++n) {
          int best = -1;
          double best_score = -1, lightest = std::numeric_limits<double>::infinity();
          int light = -1;
          for (int x = 0; x < E_; ++x) {
            if (placed[static_cast<std::size_t>(x)] || expert_group_[idx(l, x)] != grp) continue;
            if (load(l, x) < lightest) lightest = load(l, x), light = x;
            if (bin_load(l, b) + load(l, x) > load_cap_[static_cast<std::size_t>(l)]) continue;
            double s = score[static_cast<std::size_t>(x)] + 1e-9 * load(l, x);
            if (randomised) s *= 1.0 + 0.2 * rng.uniform();
            if (n == 0 && randomised) s = rng.uniform();  // random first expert per bin
            if (s > best_score) best_score = s, best = x;
          }
          if (best < 0) best = light;  // nothing fits the load cap: lightest, repaired later
          placed[static_cast<std::size_t>(best)] = 1;
          bin_[idx(l, best)] = b;
          bin_load_[static_cast<std::size_t>(l) * B_ + static_cast<std::size_t>(b)] += load(l, best);
          const double* co = w_.co_row(l, best);
          for (int x = 0; x < E_; ++x) score[static_cast<std::size_t>(x)] += co[x];
        }
      }
    }
    build_gains();
  }

  /// Swaps that lower the heaviest bin until every bin meets the load cap (or no swap
  /// helps). O(iterations * E^2 / B) per layer.
  void repair_loads() {
    for (int l = 0; l < L_; ++l) {
      for (int iter = 0; iter < 4 * E_; ++iter) {
        int p = 0;
        for (int b = 1; b < B_; ++b)
          if (bin_load(l, b) > bin_load(l, p)) p = b;
        if (bin_load(l, p) <= load_cap_[static_cast<std::size_t>(l)]) break;
        int ba = -1, bb = -1;
        double best = bin_load(l, p);
        for (int a = 0; a < E_; ++a) {
          if (bin(l, a) != p) continue;
          for (int b = 0; b < E_; ++b) {
            const int q = bin(l, b);
            if (q == p || bin_group_[static_cast<std::size_t>(q)] != bin_group_[static_cast<std::size_t>(p)]) continue;
            const double d = load(l, a) - load(l, b);
            const double worst = std::max(bin_load(l, p) - d, bin_load(l, q) + d);
            if (worst < best - 1e-12) best = worst, ba = a, bb = b;
          }
        }
        if (ba < 0) break;
        apply_swap(l, ba, bb);
      }
    }
  }

  /// Best-improvement swap sweeps until a sweep improves nothing. Returns the sweeps run.
  int refine(SplitMix64& rng, int max_passes) {
    std::vector<int> order(static_cast<std::size_t>(E_));
    int pass = 0;
    for (; pass < max_passes; ++pass) {
      bool improved = false;
      for (int i = 0; i < L_; ++i) {
        const int l = pass % 2 == 0 ? i : L_ - 1 - i;
        std::iota(order.begin(), order.end(), 0);
        for (std::size_t j = order.size(); j > 1; --j) std::swap(order[j - 1], order[rng.below(j)]);
        for (const int a : order) {
          const int p = bin(l, a);
          int best_b = -1;
          double best = kEpsilon * scale_;
          const double* ga = gain_row(l, a);
          const double* co = w_.co_row(l, a);
          for (int b = 0; b < E_; ++b) {
            const int q = bin(l, b);
            if (q == p || bin_group_[static_cast<std::size_t>(q)] != bin_group_[static_cast<std::size_t>(p)]) continue;
            const double* gb = gain_row(l, b);
            const double delta = ga[q] - ga[p] + gb[p] - gb[q] - 2 * co[b];
            if (delta > best && load_ok(l, a, b)) best = delta, best_b = b;
          }
          if (best_b >= 0) {
            apply_swap(l, a, best_b);
            improved = true;
          }
        }
      }
      improved = relabel() || improved;
      if (!improved) break;
    }
    return pass;
  }

  /// Exchanges the whole contents of two bins of one layer when that raises the
  /// cross-layer terms (within-layer terms are unchanged). Single swaps cannot make
  /// this move: it takes E/B swaps whose intermediate steps lose co-selection.
  /// Returns whether anything changed. O(L * (E^2 + moves * B^2)).
  bool relabel() {
    if (L_ < 2) return false;
    bool changed = false;
    const auto B = static_cast<std::size_t>(B_);
    std::vector<double> a(B * B);
    for (int l = 0; l < L_; ++l) {
      // a[p][q] = cross-layer weight of bin p's experts if they sat on bin q. After an
      // exchange of p and q the rows swap: neighbouring layers are untouched.
      std::fill(a.begin(), a.end(), 0.0);
      for (int x = 0; x < E_; ++x) {
        double* row = a.data() + static_cast<std::size_t>(bin(l, x)) * B;
        if (l > 0)
          for (int y = 0; y < E_; ++y) row[bin(l - 1, y)] += w_.trans_row(l - 1, y)[x];
        if (l + 1 < L_) {
          const double* tr = w_.trans_row(l, x);
          for (int y = 0; y < E_; ++y) row[bin(l + 1, y)] += tr[y];
        }
      }
      for (std::size_t moves = 0; moves < B * B; ++moves) {
        int bp = -1, bq = -1;
        double best = kEpsilon * scale_;
        for (std::size_t p = 0; p < B; ++p)
          for (std::size_t q = p + 1; q < B; ++q) {
            if (bin_group_[p] != bin_group_[q]) continue;
            const double delta = a[p * B + q] + a[q * B + p] - a[p * B + p] - a[q * B + q];
            if (delta > best) best = delta, bp = static_cast<int>(p), bq = static_cast<int>(q);
          }
        if (bp < 0) break;
        std::swap_ranges(a.begin() + static_cast<std::ptrdiff_t>(static_cast<std::size_t>(bp) * B),
                         a.begin() + static_cast<std::ptrdiff_t>(static_cast<std::size_t>(bp + 1) * B),
                         a.begin() + static_cast<std::ptrdiff_t>(static_cast<std::size_t>(bq) * B));
        for (int x = 0; x < E_; ++x) {
          int& b = bin_[idx(l, x)];
          b = b == bp ? bq : b == bq ? bp : b;
        }
        std::swap(bin_load_[static_cast<std::size_t>(l) * B + static_cast<std::size_t>(bp)],
                  bin_load_[static_cast<std::size_t>(l) * B + static_cast<std::size_t>(bq)]);
        changed = true;
      }
    }
    if (changed) build_gains();
    return changed;
  }

  /// Iterated local search (Lourenco, Martin, Stutzle 2003): `kicks` times, perturb one
  /// random layer by a few random feasible swaps, refine, and keep the result only if
  /// the objective rose. Escapes the local optima of pure swap descent.
  void iterate(SplitMix64& rng, int kicks, int max_passes) {
    double current = value();
    for (int k = 0; k < kicks; ++k) {
      const auto saved_bin = bin_;
      const auto saved_load = bin_load_;
      const auto saved_gain = gain_;
      const int l = static_cast<int>(rng.below(static_cast<std::size_t>(L_)));
      const int swaps = std::max(2, E_ / 8);
      for (int s = 0; s < swaps; ++s) {
        const int a = static_cast<int>(rng.below(static_cast<std::size_t>(E_)));
        const int b = static_cast<int>(rng.below(static_cast<std::size_t>(E_)));
        const int p = bin(l, a), q = bin(l, b);
        if (p != q && bin_group_[static_cast<std::size_t>(p)] == bin_group_[static_cast<std::size_t>(q)] && load_ok(l, a, b))
          apply_swap(l, a, b);
      }
      refine(rng, max_passes);
      const double v = value();
      if (v > current + kEpsilon * scale_) {
        current = v;
      } else {
        bin_ = saved_bin;
        bin_load_ = saved_load;
        gain_ = saved_gain;
      }
    }
  }

  /// The objective at bin level (co-selection inside bins + cross-layer on equal bins).
  double value() const {
    double v = 0;
    for (int l = 0; l < L_; ++l)
      for (int a = 0; a < E_; ++a) {
        const double* co = w_.co_row(l, a);
        for (int b = a + 1; b < E_; ++b) v += co[b] * (bin(l, a) == bin(l, b));
        if (l + 1 < L_) {
          const double* tr = w_.trans_row(l, a);
          for (int b = 0; b < E_; ++b) v += tr[b] * (bin(l, a) == bin(l + 1, b));
        }
      }
    return v;
  }

  int bin(int l, int e) const noexcept { return bin_[idx(l, e)]; }
  const std::vector<int>& bins() const noexcept { return bin_; }

 private:
  static constexpr double kEpsilon = 1e-12;

  std::size_t idx(int l, int e) const noexcept { return static_cast<std::size_t>(l) * static_cast<std::size_t>(E_) + static_cast<std::size_t>(e); }
  double load(int l, int e) const noexcept { return w_.load[idx(l, e)]; }
  double bin_load(int l, int b) const noexcept { return bin_load_[static_cast<std::size_t>(l) * static_cast<std::size_t>(B_) + static_cast<std::size_t>(b)]; }
  double* gain_row(int l, int e) noexcept { return gain_.data() + idx(l, e) * static_cast<std::size_t>(B_); }

  // A swap may not push either bin above max(cap, its pair's current maximum): feasible
  // placements stay feasible, infeasible ones never get worse.
  bool load_ok(int l, int a, int b) const noexcept {
    const int p = bin(l, a), q = bin(l, b);
    const double d = load(l, a) - load(l, b);
    const double limit = std::max(load_cap_[static_cast<std::size_t>(l)], std::max(bin_load(l, p), bin_load(l, q)));
    return bin_load(l, p) - d <= limit && bin_load(l, q) + d <= limit;
  }

  void build_gains() {
    gain_.assign(static_cast<std::size_t>(L_) * E_ * B_, 0.0);
    scale_ = 1.0;
    for (int l = 0; l < L_; ++l)
      for (int e = 0; e < E_; ++e) {
        double* g = gain_row(l, e);
        const double* co = w_.co_row(l, e);
        for (int y = 0; y < E_; ++y) g[bin(l, y)] += co[y], scale_ += co[y];
        if (l > 0)
          for (int y = 0; y < E_; ++y) g[bin(l - 1, y)] += w_.trans_row(l - 1, y)[e];
        if (l + 1 < L_) {
          const double* tr = w_.trans_row(l, e);
          for (int y = 0; y < E_; ++y) g[bin(l + 1, y)] += tr[y], scale_ += tr[y];
        }
      }
  }

  // Moves a (on p) to q and b (on q) to p, updating the gains of this layer and of the
  // neighbouring layers, whose cross-layer terms refer to these bins. O(E).
  void apply_swap(int l, int a, int b) {
    const int p = bin(l, a), q = bin(l, b);
    const double* ca = w_.co_row(l, a);
    const double* cb = w_.co_row(l, b);
    for (int x = 0; x < E_; ++x) {
      double* g = gain_row(l, x);
      g[p] += cb[x] - ca[x];
      g[q] += ca[x] - cb[x];
    }
    if (l + 1 < L_) {
      const double* ta = w_.trans_row(l, a);
      const double* tb = w_.trans_row(l, b);
      for (int x = 0; x < E_; ++x) {
        double* g = gain_row(l + 1, x);
        g[p] += tb[x] - ta[x];
        g[q] += ta[x] - tb[x];
      }
    }
    if (l > 0)
      for (int x = 0; x < E_; ++x) {
        const double* tx = w_.trans_row(l - 1, x);
        double* g = gain_row(l - 1, x);
        g[p] += tx[b] - tx[a];
        g[q] += tx[a] - tx[b];
      }
    const double d = load(l, a) - load(l, b);
    bin_load_[static_cast<std::size_t>(l) * B_ + static_cast<std::size_t>(p)] -= d;
    bin_load_[static_cast<std::size_t>(l) * B_ + static_cast<std::size_t>(q)] += d;
    bin_[idx(l, a)] = q;
    bin_[idx(l, b)] = p;
  }

  const CouplingWeights& w_;
  int L_, E_, B_, cap_;
  std::vector<int> bin_group_;
  std::vector<int> expert_group_;
  std::vector<int> bin_;
  std::vector<double> bin_load_;
  std::vector<double> load_cap_;
  std::vector<double> gain_;
  double scale_ = 1.0;
};

}  // namespace detail

/// Correlated expert placement (paper §4.1): co-selected experts on one GPU, aligned
/// with the next layer's likely experts, equal expert count per GPU, token load within
/// a tolerance. Time per start: O(passes * L * E^2) plus O(L * E^2) seeding; memory
/// O(L * E * G) per running start.
class CorrelatedPlacement {
 public:
  explicit CorrelatedPlacement(CorrelatedPlacementOptions options = {}) : options_(options) { options_.validate(); }

  const CorrelatedPlacementOptions& options() const noexcept { return options_; }

  /// Fits a placement for `topo` to the statistics. Throws ConfigError on a bad topology.
  Placement fit(const CouplingStats& stats, Topology topo) const {
    return fit(CouplingWeights::from(stats, options_.weights.cross_layer), topo);
  }

  /// Fits to prebuilt weights (whose trans already carries lambda).
  Placement fit(const CouplingWeights& w, Topology topo) const {
    topo.validate(w.experts);
    const int starts = options_.starts;
    std::vector<Placement> result(static_cast<std::size_t>(starts));
    std::vector<double> value(static_cast<std::size_t>(starts));
    auto run = [&](int s) {
      result[static_cast<std::size_t>(s)] = one_start(w, topo, s);
      value[static_cast<std::size_t>(s)] = coupling_objective(w, result[static_cast<std::size_t>(s)], options_.weights.node);
    };
    int threads = options_.threads > 0 ? options_.threads : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    threads = std::min(threads, starts);
    if (threads <= 1) {
      for (int s = 0; s < starts; ++s) run(s);
    } else {
      std::vector<std::thread> pool;
      for (int t = 0; t < threads; ++t)
        pool.emplace_back([&, t] {
          for (int s = t; s < starts; s += threads) run(s);
        });
      for (auto& th : pool) th.join();
    }
    // Lowest start index among the best keeps the result independent of threading.
    const auto best = std::max_element(value.begin(), value.end()) - value.begin();
    return std::move(result[static_cast<std::size_t>(best)]);
  }

 private:
  Placement one_start(const CouplingWeights& w, Topology topo, int start) const {
    detail::SplitMix64 rng{detail::mix_seed(options_.seed, static_cast<std::uint64_t>(start))};
    const bool randomised = start > 0;
    const int L = w.layers, E = w.experts, G = topo.gpus, K = topo.gpus_per_node, N = topo.nodes();
    std::vector<int> node_of_expert(static_cast<std::size_t>(L) * static_cast<std::size_t>(E), 0);
    std::vector<int> gpu_group(static_cast<std::size_t>(G), 0);
    if (options_.hierarchical && N > 1) {
      detail::SwapPartitioner nodes(w, N, std::vector<int>(static_cast<std::size_t>(N), 0), node_of_expert, options_.load_tolerance);
      nodes.seed(rng, randomised);
      nodes.repair_loads();
      nodes.refine(rng, options_.max_passes);
      nodes.iterate(rng, options_.kicks, options_.max_passes);
      node_of_expert = nodes.bins();
      for (int g = 0; g < G; ++g) gpu_group[static_cast<std::size_t>(g)] = g / K;
    }
    detail::SwapPartitioner gpus(w, G, gpu_group, node_of_expert, options_.load_tolerance);
    gpus.seed(rng, randomised);
    gpus.repair_loads();
    gpus.refine(rng, options_.max_passes);
    gpus.iterate(rng, options_.kicks, options_.max_passes);
    std::vector<std::int32_t> map(gpus.bins().begin(), gpus.bins().end());
    return Placement(L, E, topo, std::move(map));
  }

  CorrelatedPlacementOptions options_;
};

}  // namespace disagmoe::placement
