// SPDX-License-Identifier: Apache-2.0
/// @file multilevel.hpp
/// `MultilevelPlacement`: multilevel refinement of a placement for the coupling
/// objective of objective.hpp, for sparse coupling where pairwise swap descent stalls
/// (a co-selected group split over two GPUs needs several swaps that each lose).
/// Starts from the correlated heuristic (correlated.hpp; node-first and flat on several
/// nodes), then runs V-cycles in the
/// style of iterated multilevel partitioning (METIS, Karypis & Kumar 1998; KaHIP's
/// V-cycles, Sanders & Schulz 2011): per layer, coarsen by heavy-edge matching on the
/// co-selection counts, matching only experts on one GPU of the current placement (so
/// it is a coarse partition) and clusters of equal size whose doubled size divides E/G
/// (so clusters pack exactly E/G per GPU); then, coarsest level first, Fiduccia–
/// Mattheyses passes (Fiduccia & Mattheyses 1982) whose moves swap two equal-size
/// clusters between GPUs: best swap first even when it loses, each cluster moved once
/// per pass, and the pass rolled back to its best prefix. Each V-cycle first renames
/// the GPUs of every suffix of layers by the topology symmetry that best aligns it with
/// the layer before (a move no swap inside a layer makes). Gains are exact for the whole
/// objective (co-selection, cross-layer alignment, node level), so a pass never lowers
/// it, and a swap keeps every GPU's expert count and never lifts a GPU above the load
/// rule of the correlated heuristic.
#pragma once

#include <disagmoe/error.hpp>
#include <disagmoe/placement/correlated.hpp>
#include <disagmoe/placement/objective.hpp>
#include <disagmoe/placement/placement.hpp>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <numeric>
#include <utility>
#include <vector>

namespace disagmoe::placement {

/// Knobs of the multilevel placement.
struct MultilevelPlacementOptions {
  /// The start (correlated heuristic); its weights and load tolerance are also the
  /// refinement's.
  CorrelatedPlacementOptions start{};
  int max_cycles = 4;   ///< V-cycles (re-coarsening around the current placement); stops early without gain
  int max_passes = 4;   ///< FM passes per level and layer; stops early without gain

  /// Throws ConfigError naming the first invalid field.
  void validate() const {
    start.validate();
    expect(max_cycles >= 0 && max_cycles <= 1000, "max_cycles", max_cycles, "0 <= max_cycles <= 1000");
    expect(max_passes >= 0 && max_passes <= 1000, "max_passes", max_passes, "0 <= max_passes <= 1000");
  }
};

namespace detail {

/// Exact objective deltas of cluster swaps and the V-cycle around them. Keeps, per
/// layer l, expert e and GPU g, D[l][e][g] = sum over experts y on g of the weights
/// joining e to y (co-selection at l, transitions with l-1 and l+1), and the same per
/// node; a swap updates them in O(E) per moved expert.
class ClusterRefiner {
 public:
  ClusterRefiner(const CouplingWeights& w, const Placement& start, double node_weight, double load_tolerance)
      : w_(w), topo_(start.topology()), nu_(node_weight), L_(w.layers), E_(w.experts), G_(topo_.gpus),
        N_(topo_.nodes()), cap_(w.experts / topo_.gpus), gpu_(start.map().begin(), start.map().end()) {
    load_cap_.resize(static_cast<std::size_t>(L_));
    for (int l = 0; l < L_; ++l) {
      double total = 0;
      for (int e = 0; e < E_; ++e) total += w_.load[idx(l, e)];
      load_cap_[static_cast<std::size_t>(l)] = (1.0 + load_tolerance) * total / G_ + 1e-9 * total;
    }
    rebuild();
  }

  /// V-cycles until one gains nothing or `max_cycles` ran.
  void run(SplitMix64& rng, int max_cycles, int max_passes) {
    for (int c = 0; c < max_cycles; ++c) {
      bool gained = relabel_suffixes();
      for (int l = 0; l < L_; ++l) {
        const auto levels = coarsen(l, rng);
        for (auto it = levels.rbegin(); it != levels.rend(); ++it)
          for (int p = 0; p < max_passes; ++p)
            if (fm_pass(l, *it)) gained = true;
            else break;
      }
      if (!gained) break;
    }
  }

  /// Renames the GPUs of layers k..L-1, for each k >= 1, by the symmetry of the
  /// topology (GPUs permuted within nodes, whole nodes exchanged) that a local search
  /// finds best for the (k-1) -> k alignment. Every other term, and the load rule, is
  /// invariant under one symmetry applied to whole layers, so this is a move no swap
  /// inside a layer can make. Returns whether anything changed. O(L * (E^2 + moves * G^4)).
  bool relabel_suffixes() {
    const auto G = static_cast<std::size_t>(G_);
    const int K = topo_.gpus_per_node;
    bool changed = false;
    std::vector<double> m(G * G);
    std::vector<int> sigma(G), trial(G);
    // Alignment at the boundary if layer k's GPU h were renamed sigma[h].
    auto value = [&](const std::vector<int>& s) {
      double v = 0;
      for (std::size_t g = 0; g < G; ++g)
        for (std::size_t h = 0; h < G; ++h) {
          const int sh = s[h];
          v += m[g * G + h] * ((static_cast<int>(g) == sh) + nu_ * (topo_.node_of(static_cast<int>(g)) == topo_.node_of(sh)));
        }
      return v;
    };
    for (int k = 1; k < L_; ++k) {
      std::fill(m.begin(), m.end(), 0.0);
      for (int a = 0; a < E_; ++a) {
        const double* tr = w_.trans_row(k - 1, a);
        for (int b = 0; b < E_; ++b) m[static_cast<std::size_t>(gpu(k - 1, a)) * G + static_cast<std::size_t>(gpu(k, b))] += tr[b];
      }
      std::iota(sigma.begin(), sigma.end(), 0);
      double current = value(sigma);
      for (int step = 0; step < 4 * G_; ++step) {
        double best = current + kEpsilon * scale_;
        std::vector<int> pick;
        auto consider = [&] {
          const double v = value(trial);
          if (v > best) best = v, pick = trial;
        };
        for (std::size_t h1 = 0; h1 < G; ++h1)
          for (std::size_t h2 = h1 + 1; h2 < G; ++h2)
            if (topo_.node_of(sigma[h1]) == topo_.node_of(sigma[h2])) {
              trial = sigma;
              std::swap(trial[h1], trial[h2]);
              consider();
            }
        for (int n1 = 0; n1 < N_; ++n1)
          for (int n2 = n1 + 1; n2 < N_; ++n2) {
            trial = sigma;
            for (auto& x : trial)
              if (topo_.node_of(x) == n1) x += (n2 - n1) * K;
              else if (topo_.node_of(x) == n2) x -= (n2 - n1) * K;
            consider();
          }
        if (pick.empty()) break;
        sigma = pick;
        current = best;
      }
      bool identity = true;
      for (std::size_t g = 0; g < G; ++g) identity = identity && sigma[g] == static_cast<int>(g);
      if (identity) continue;
      for (int l = k; l < L_; ++l)
        for (int e = 0; e < E_; ++e) gpu_[idx(l, e)] = sigma[static_cast<std::size_t>(gpu(l, e))];
      changed = true;
    }
    if (changed) rebuild();
    return changed;
  }

  /// Change of the objective if clusters `a` (on one GPU) and `b` (on another) of layer
  /// l trade GPUs. Moved pairs inside a cluster or across a and b keep their relation
  /// (s(p,p) = s(q,q), s(p,q) = s(q,p)); the D sums count them as if they changed, by
  /// c = s(p,p) - s(p,q) per unit weight, which the last terms take back. O((|a|+|b|)^2).
  double swap_gain(int l, const std::vector<int>& a, const std::vector<int>& b) const {
    const int p = gpu(l, a[0]), q = gpu(l, b[0]);
    const double c = 1.0 + nu_ - nu_ * (topo_.node_of(p) == topo_.node_of(q));
    double gain = 0;
    for (const int x : a) gain += pull(l, x, q) - pull(l, x, p);
    for (const int x : b) gain += pull(l, x, p) - pull(l, x, q);
    return gain + 2 * c * (internal(l, a) + internal(l, b) - between(l, a, b));
  }

  /// Whether the swap keeps both GPUs within max(load cap, the larger of their loads):
  /// feasible placements stay feasible, infeasible ones never get worse.
  bool load_ok(int l, const std::vector<int>& a, const std::vector<int>& b) const {
    const int p = gpu(l, a[0]), q = gpu(l, b[0]);
    double d = 0;
    for (const int x : a) d += w_.load[idx(l, x)];
    for (const int x : b) d -= w_.load[idx(l, x)];
    const double lp = load_[lg(l, p)], lq = load_[lg(l, q)];
    const double limit = std::max(load_cap_[static_cast<std::size_t>(l)], std::max(lp, lq));
    return lp - d <= limit && lq + d <= limit;
  }

  /// Trades the GPUs of clusters `a` and `b` of layer l.
  void swap(int l, const std::vector<int>& a, const std::vector<int>& b) {
    const int p = gpu(l, a[0]), q = gpu(l, b[0]);
    for (const int x : a) move(l, x, q);
    for (const int x : b) move(l, x, p);
  }

  int gpu(int l, int e) const noexcept { return gpu_[idx(l, e)]; }
  const std::vector<std::int32_t>& map() const noexcept { return gpu_; }

 private:
  using Clusters = std::vector<std::vector<int>>;
  static constexpr double kEpsilon = 1e-12;

  // The D tables and GPU loads from the map (after a relabelling). O(L * E^2).
  void rebuild() {
    d_.assign(static_cast<std::size_t>(L_) * E_ * G_, 0.0);
    node_.assign(static_cast<std::size_t>(L_) * E_ * N_, 0.0);
    load_.assign(static_cast<std::size_t>(L_) * G_, 0.0);
    scale_ = 1.0;
    for (int l = 0; l < L_; ++l) {
      for (int e = 0; e < E_; ++e) load_[lg(l, gpu(l, e))] += w_.load[idx(l, e)];
      for (int e = 0; e < E_; ++e) {
        const double* co = w_.co_row(l, e);
        for (int y = 0; y < E_; ++y) add(l, y, gpu(l, e), co[y]), scale_ += co[y];
        if (l + 1 < L_) {
          const double* tr = w_.trans_row(l, e);
          for (int y = 0; y < E_; ++y) add(l + 1, y, gpu(l, e), tr[y]), add(l, e, gpu(l + 1, y), tr[y]), scale_ += tr[y];
        }
      }
    }
  }

  std::size_t idx(int l, int e) const noexcept { return static_cast<std::size_t>(l) * static_cast<std::size_t>(E_) + static_cast<std::size_t>(e); }
  std::size_t lg(int l, int g) const noexcept { return static_cast<std::size_t>(l) * static_cast<std::size_t>(G_) + static_cast<std::size_t>(g); }
  void add(int l, int e, int g, double x) noexcept {
    d_[idx(l, e) * static_cast<std::size_t>(G_) + static_cast<std::size_t>(g)] += x;
    node_[idx(l, e) * static_cast<std::size_t>(N_) + static_cast<std::size_t>(topo_.node_of(g))] += x;
  }
  // Objective terms of e if it sat on g (the others where they are): sum_y w(e,y) s(g, g_y).
  double pull(int l, int e, int g) const noexcept {
    return d_[idx(l, e) * static_cast<std::size_t>(G_) + static_cast<std::size_t>(g)] +
           nu_ * node_[idx(l, e) * static_cast<std::size_t>(N_) + static_cast<std::size_t>(topo_.node_of(g))];
  }
  double internal(int l, const std::vector<int>& a) const noexcept {
    double s = 0;
    for (std::size_t i = 0; i < a.size(); ++i)
      for (std::size_t j = i + 1; j < a.size(); ++j) s += w_.co_row(l, a[i])[a[j]];
    return s;
  }
  double between(int l, const std::vector<int>& a, const std::vector<int>& b) const noexcept {
    double s = 0;
    for (const int x : a)
      for (const int y : b) s += w_.co_row(l, x)[y];
    return s;
  }

  // Moves expert e of layer l to GPU g: the D rows of every expert joined to e change.
  void move(int l, int e, int g) {
    const int from = gpu(l, e);
    const double* co = w_.co_row(l, e);
    for (int y = 0; y < E_; ++y) add(l, y, from, -co[y]), add(l, y, g, co[y]);
    if (l + 1 < L_) {
      const double* tr = w_.trans_row(l, e);
      for (int y = 0; y < E_; ++y) add(l + 1, y, from, -tr[y]), add(l + 1, y, g, tr[y]);
    }
    if (l > 0)
      for (int y = 0; y < E_; ++y) {
        const double t = w_.trans_row(l - 1, y)[e];
        add(l - 1, y, from, -t), add(l - 1, y, g, t);
      }
    load_[lg(l, from)] -= w_.load[idx(l, e)];
    load_[lg(l, g)] += w_.load[idx(l, e)];
    gpu_[idx(l, e)] = g;
  }

  // Levels of layer l, finest (singletons) first: heavy-edge matching, in a random
  // order, of clusters on one GPU with equal size s and 2s dividing E/G. Sizes are then
  // powers of two dividing E/G, so any E/G-sized GPU content splits into them.
  std::vector<Clusters> coarsen(int l, SplitMix64& rng) const {
    std::vector<Clusters> levels(1);
    for (int e = 0; e < E_; ++e) levels[0].push_back({e});
    for (;;) {
      const Clusters& fine = levels.back();
      const std::size_t n = fine.size();
      std::vector<std::size_t> order(n);
      std::iota(order.begin(), order.end(), std::size_t{0});
      for (std::size_t j = n; j > 1; --j) std::swap(order[j - 1], order[rng.below(j)]);
      std::vector<char> matched(n, 0);
      Clusters coarse;
      bool merged = false;
      for (const std::size_t i : order) {
        if (matched[i]) continue;
        matched[i] = 1;
        const std::size_t s = fine[i].size();
        std::size_t best = n;
        double heaviest = 0;
        if (static_cast<std::size_t>(cap_) % (2 * s) == 0)
          for (std::size_t j = 0; j < n; ++j) {
            if (matched[j] || fine[j].size() != s || gpu(l, fine[j][0]) != gpu(l, fine[i][0])) continue;
            const double wt = between(l, fine[i], fine[j]);
            if (wt > heaviest) heaviest = wt, best = j;
          }
        coarse.push_back(fine[i]);
        if (best < n) {
          matched[best] = 1;
          coarse.back().insert(coarse.back().end(), fine[best].begin(), fine[best].end());
          merged = true;
        }
      }
      if (!merged) return levels;
      levels.push_back(std::move(coarse));
    }
  }

  // One FM pass over the clusters of layer l: returns whether it kept a gain.
  bool fm_pass(int l, const Clusters& cl) {
    const std::size_t n = cl.size();
    std::vector<char> locked(n, 0);
    std::vector<std::pair<std::size_t, std::size_t>> done;
    double sum = 0, best = kEpsilon * scale_;
    std::size_t keep = 0;
    for (;;) {
      std::size_t bi = n, bj = n;
      double top = -std::numeric_limits<double>::infinity();
      for (std::size_t i = 0; i < n; ++i) {
        if (locked[i]) continue;
        for (std::size_t j = i + 1; j < n; ++j) {
          if (locked[j] || cl[j].size() != cl[i].size() || gpu(l, cl[j][0]) == gpu(l, cl[i][0])) continue;
          if (!load_ok(l, cl[i], cl[j])) continue;
          const double g = swap_gain(l, cl[i], cl[j]);
          if (g > top) top = g, bi = i, bj = j;
        }
      }
      if (bi == n) break;
      swap(l, cl[bi], cl[bj]);
      locked[bi] = locked[bj] = 1;
      done.emplace_back(bi, bj);
      sum += top;
      if (sum > best) best = sum, keep = done.size();
    }
    // Undo the swaps after the best prefix, last first (a swap is its own inverse).
    while (done.size() > keep) {
      swap(l, cl[done.back().first], cl[done.back().second]);
      done.pop_back();
    }
    return keep > 0;
  }

  const CouplingWeights& w_;
  Topology topo_;
  double nu_;
  int L_, E_, G_, N_, cap_;
  std::vector<std::int32_t> gpu_;
  std::vector<double> d_, node_, load_, load_cap_;
  double scale_ = 1.0;
};

}  // namespace detail

/// Multilevel expert placement: the correlated heuristic's placement refined by
/// V-cycles of cluster-swap FM passes (file comment). Time per V-cycle and layer:
/// O(passes * sum over levels of n_c * (E^2 + n_c * E)) for n_c clusters at a level.
class MultilevelPlacement {
 public:
  explicit MultilevelPlacement(MultilevelPlacementOptions options = {}) : options_(options) { options_.validate(); }

  const MultilevelPlacementOptions& options() const noexcept { return options_; }

  /// Fits a placement for `topo` to the statistics. Throws ConfigError on a bad topology.
  Placement fit(const CouplingStats& stats, Topology topo) const {
    return fit(CouplingWeights::from(stats, options_.start.weights.cross_layer), topo);
  }

  /// Fits to prebuilt weights (whose trans already carries lambda). On multi-node
  /// topologies a hierarchical start is refined next to a flat one and the better kept:
  /// the node-first start fixes which experts share a node, which moves between GPUs
  /// rarely undo (3-4% below the exact optimum on 8 experts over two nodes, where the
  /// refined flat start is within 1.2%).
  Placement fit(const CouplingWeights& w, Topology topo) const {
    Placement best = refine(w, CorrelatedPlacement(options_.start).fit(w, topo));
    if (options_.start.hierarchical && topo.nodes() > 1) {
      CorrelatedPlacementOptions flat = options_.start;
      flat.hierarchical = false;
      Placement other = refine(w, CorrelatedPlacement(flat).fit(w, topo));
      const double nu = options_.start.weights.node;
      if (coupling_objective(w, other, nu) > coupling_objective(w, best, nu)) best = std::move(other);
    }
    return best;
  }

  /// Refines a balanced placement `start`: the objective does not fall, every GPU keeps
  /// E/G experts, and no GPU's load rises above max(the load rule, its pair's peak).
  /// Throws ConfigError on a shape mismatch or an unbalanced start.
  Placement refine(const CouplingWeights& w, const Placement& start) const {
    expect(start.layers() == w.layers && start.num_experts() == w.experts, "start placement layers", start.layers(),
           "the statistics' layers (" + std::to_string(w.layers) + ") and experts (" + std::to_string(w.experts) + ")");
    expect(start.balanced(), "start placement balanced", 0, "E/G experts on every GPU at every layer");
    detail::ClusterRefiner r(w, start, options_.start.weights.node, options_.start.load_tolerance);
    detail::SplitMix64 rng{detail::mix_seed(options_.start.seed, 0x6d6c)};
    r.run(rng, options_.max_cycles, options_.max_passes);
    return Placement(w.layers, w.experts, start.topology(), r.map());
  }

 private:
  MultilevelPlacementOptions options_;
};

}  // namespace disagmoe::placement
