// SPDX-License-Identifier: Apache-2.0
// bench_place: quality and cost of expert placement + token shuffling.
//
//   bench_place [--quality] [--sweep] [--scale] [--shuffle] [--stats] [--planted] [--replicas] [--online] [--exact] [--multilevel] [--tokens N] [--layers L] [--scale-tokens N] [--scale-layers L]
//
// Quality: synthetic traces shaped like DeepSeek-V3 (256 experts, top-8), Qwen3-30B-A3B
// (128, top-8), OLMoE (64, top-8) and the paper's top-2 case (128, top-2), at 8/16/32/64
// GPUs with 8 per node. Every method is fitted on one trace and evaluated on a disjoint
// trace of the same model; rows removed against per-expert dispatch, local share without
// and with token shuffling, cross-node share of rows, max/mean GPU load, and how far from
// a bound (the in-sample placement, the ceil(k/(E/G)) bound, the best-home bound).
// Scale: time and peak memory of statistics, placement and shuffling at 1M tokens.
// Shuffle: per-micro-batch StepShuffle (fast assignment) against the auction on the same
// micro-batches, tokens per CPU-second and objective ratio. Stats: coupling statistics
// at 1M tokens against the previous counting loop and a plain read of the ids.
// Planted: correlated and multilevel placement against the planted placement on dense and sparse kinds.
// Replicas: max/mean load and rows with 0..2 redundant expert slots per GPU. Online:
// refits and migrations on a stream whose coupling changes midway. Exact: the exact DP's
// CPU time on Mixtral-sized layers (8 experts) against the heuristic's, and their objectives.
// Multilevel: its CPU time and objective against the heuristic's at 256 experts, G = 8, 64.
#include <disagmoe/placement/correlated.hpp>
#include <disagmoe/placement/exact.hpp>
#include <disagmoe/placement/metrics.hpp>
#include <disagmoe/placement/multilevel.hpp>
#include <disagmoe/placement/online.hpp>
#include <disagmoe/placement/replication.hpp>
#include <disagmoe/placement/step_shuffle.hpp>
#include <disagmoe/placement/token_shuffle.hpp>

#include <bench_args.hpp>

#include <chrono>
#include <ctime>
#include <cstdio>
#include <cstring>
#include <utility>
#include <fstream>
#include <string>
#include <vector>

using namespace disagmoe::placement;

namespace {

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// CPU seconds of the whole process (all threads): on a shared, loaded machine wall time
// overstates the cost; both are printed.
double thread_cpu_s() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

double cpu_s() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

// Peak resident set (VmHWM) in MiB, from /proc (Linux).
double peak_rss_mib() {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("VmHWM:", 0) == 0) return std::stod(line.substr(6)) / 1024.0;
  return 0;
}

struct Model {
  const char* name;
  SyntheticTraceSpec spec;
};

std::vector<Model> models(int layers) {
  // Parameters are assumptions, not measurements (no open per-token trace exists; see
  // shared research notes): groups of k co-selected experts, half the tokens routed
  // inside their group, 60% following the planted successor; skew from OLMoE's
  // measured layer-0 max/mean (3-8x) for OLMoE, milder for the load-balanced models.
  auto spec = [&](int e, int k, double skew, double gp) {
    SyntheticTraceSpec s;
    s.layers = layers;
    s.num_experts = e;
    s.top_k = k;
    s.popularity_skew = skew;
    s.group_size = k;
    s.group_prob = gp;
    s.transition_prob = 0.6;
    s.seed = 2026;
    return s;
  };
  return {{"DeepSeek-V3 E256 k8", spec(256, 8, 0.5, 0.5)},
          {"Qwen3-30B-A3B E128 k8", spec(128, 8, 0.7, 0.5)},
          {"OLMoE E64 k8", spec(64, 8, 1.0, 0.5)},
          {"top-2 E128 k2 (paper)", spec(128, 2, 0.3, 0.42)}};
}

void quality(std::int64_t tokens, int layers) {
  std::printf("## Quality: fit on tokens [0,%lld), evaluate on [%lld,%lld); %d layers; shuffle batches of 4096 tokens\n\n",
              static_cast<long long>(tokens), static_cast<long long>(tokens), static_cast<long long>(2 * tokens), layers);
  std::printf("| model | G | method | rows removed | local share | local share + shuffle | cross-node rows / token-layer (+ shuffle) | max/mean load | fit s |\n");
  std::printf("|---|---:|---|---:|---:|---:|---:|---:|---:|\n");
  for (const auto& m : models(layers)) {
    const SyntheticTraceGenerator gen(m.spec);
    const RoutingTrace fit = gen.generate(0, tokens), eval = gen.generate(tokens, tokens);
    const CouplingStats fs = CouplingStats::of(fit), es = CouplingStats::of(eval);
    std::printf("| %s: top 1%% pairs cover %.1f%% of co-selections; next-layer predictability %.1f%% |||||||||\n", m.name,
                100 * fs.pair_coverage(0, 0.01), 100 * fs.next_layer_predictability(0));
    for (const int G : {8, 16, 32, 64}) {
      const Topology topo{G, 8};
      const int E = m.spec.num_experts, k = m.spec.top_k;
      const auto contiguous = contiguous_homes(eval.tokens(), layers, G, 4096);
      auto row = [&](const char* name, const Placement& p, double fit_s) {
        const auto plain = evaluate_placement(eval, p, contiguous);
        const auto homes = TokenShuffle(fs, p, {.batch_tokens = 4096}).assign(eval);
        const auto shuffled = evaluate_placement(eval, p, homes.home);
        const double token_layers = static_cast<double>(eval.tokens()) * layers;
        std::printf("| %s | %d | %s | %.1f%% | %.1f%% | %.1f%% | %.2f (%.2f) | %.2f | %.2f |\n", m.name, G, name,
                    100 * plain.rows_removed_fraction, 100 * plain.local_share, 100 * shuffled.local_share,
                    static_cast<double>(plain.cross_node_rows) / token_layers,
                    static_cast<double>(shuffled.cross_node_rows) / token_layers, plain.max_load_over_mean, fit_s);
        return shuffled;
      };
      row("contiguous", contiguous_placement(layers, E, topo), 0);
      row("random", random_placement(layers, E, topo, 1), 0);
      double t0 = now_s();
      const auto lb = load_balanced_placement(fs, topo);
      row("load-balanced (EPLB)", lb, now_s() - t0);
      t0 = now_s();
      const auto corr = CorrelatedPlacement({.seed = 1}).fit(fs, topo);
      const double corr_s = now_s() - t0;
      const auto corr_shuffled = row("correlated", corr, corr_s);
      // Bounds: the same heuristic fitted on the evaluation trace itself (in-sample,
      // a reference, not a proof), the ceil(k/(E/G)) rows bound, and the best-home
      // local-share bound of the correlated placement (no balance, no causality).
      const auto insample = CorrelatedPlacement({.seed = 1}).fit(es, topo);
      const auto ins = evaluate_placement(eval, insample, contiguous);
      const auto ins_shuffled = evaluate_placement(eval, insample, TokenShuffle(es, insample, {.batch_tokens = 4096}).assign(eval).home);
      std::printf("| %s | %d | *in-sample / bound* | %.1f%% / %.1f%% | | %.1f%% / %.1f%% | | %.2f | |\n", m.name, G,
                  100 * ins.rows_removed_fraction, 100 * rows_removed_bound(E, G, k), 100 * ins_shuffled.local_share,
                  100 * local_share_bound(eval, corr), ins.max_load_over_mean);
      (void)corr_shuffled;
    }
  }
}

// How the gains depend on the coupling strength the trace has (unknown for real
// models without per-token traces): DeepSeek-V3 shape on one 8-GPU node.
void sweep(std::int64_t tokens, int layers) {
  std::printf("\n## Coupling strength sweep: DeepSeek-V3 shape (E=256, k=8), one node of 8 GPUs\n\n");
  std::printf("| group_prob | transition_prob | top 1%% pairs cover | next-layer predictability | rows removed: contiguous / correlated | local share + shuffle: contiguous / correlated | best-home bound |\n");
  std::printf("|---:|---:|---:|---:|---:|---:|---:|\n");
  for (const auto& [gp, tp] : {std::pair{0.3, 0.4}, std::pair{0.5, 0.6}, std::pair{0.7, 0.8}, std::pair{0.8, 0.9}, std::pair{0.9, 0.95}}) {
    SyntheticTraceSpec s = models(layers)[0].spec;
    s.group_prob = gp;
    s.transition_prob = tp;
    const SyntheticTraceGenerator gen(s);
    const RoutingTrace fit = gen.generate(0, tokens), eval = gen.generate(tokens, tokens);
    const CouplingStats fs = CouplingStats::of(fit);
    const Topology topo{8, 8};
    const auto contiguous = contiguous_placement(layers, 256, topo);
    const auto corr = CorrelatedPlacement({.seed = 1}).fit(fs, topo);
    const auto home = contiguous_homes(eval.tokens(), layers, 8, 4096);
    const auto c0 = evaluate_placement(eval, contiguous, home), c1 = evaluate_placement(eval, corr, home);
    const auto s0 = evaluate_placement(eval, contiguous, TokenShuffle(fs, contiguous, {.batch_tokens = 4096}).assign(eval).home);
    const auto s1 = evaluate_placement(eval, corr, TokenShuffle(fs, corr, {.batch_tokens = 4096}).assign(eval).home);
    std::printf("| %.2f | %.2f | %.1f%% | %.1f%% | %.1f%% / %.1f%% | %.1f%% / %.1f%% | %.1f%% |\n", gp, tp,
                100 * fs.pair_coverage(1, 0.01), 100 * fs.next_layer_predictability(1), 100 * c0.rows_removed_fraction,
                100 * c1.rows_removed_fraction, 100 * s0.local_share, 100 * s1.local_share, 100 * local_share_bound(eval, corr));
  }
}

void scale(std::int64_t tokens, int layers) {
  std::printf("\n## Scale: %lld tokens x %d layers x top-8, 256 experts (DeepSeek-V3 shape)\n\n",
              static_cast<long long>(tokens), layers);
  SyntheticTraceSpec s = models(layers)[0].spec;
  const SyntheticTraceGenerator gen(s);
  constexpr std::int64_t kChunk = 1 << 16;
  std::printf("| step | wall s | CPU s | peak RSS MiB after |\n|---|---:|---:|---:|\n");
  auto report = [](const std::string& what, double wall, double cpu) {
    std::printf("| %s | %.2f | %.2f | %.0f |\n", what.c_str(), wall, cpu, peak_rss_mib());
  };
  // Streaming statistics: the trace never exists whole; generation time is the peer.
  double gen_w = 0, gen_c = 0, s1_w = 0, s1_c = 0, s2_w = 0, s2_c = 0;
  CouplingStats one(layers, 256, 8), two(layers, 256, 8);
  for (std::int64_t first = 0; first < tokens; first += kChunk) {
    double w0 = now_s(), c0 = cpu_s();
    const auto chunk = gen.generate(first, std::min(kChunk, tokens - first));
    gen_w += now_s() - w0, gen_c += cpu_s() - c0;
    w0 = now_s(), c0 = cpu_s();
    one.add(chunk, 1);
    s1_w += now_s() - w0, s1_c += cpu_s() - c0;
    w0 = now_s(), c0 = cpu_s();
    two.add(chunk, 2);
    s2_w += now_s() - w0, s2_c += cpu_s() - c0;
  }
  report("generate trace in 64K-token chunks (peer)", gen_w, gen_c);
  report("coupling statistics, 1 thread (streamed)", s1_w, s1_c);
  report("coupling statistics, 2 threads (streamed)", s2_w, s2_c);
  for (const int G : {8, 64}) {
    const Topology topo{G, 8};
    double w0 = now_s(), c0 = cpu_s();
    const auto lb = load_balanced_placement(two, topo);
    report("load-balanced placement G=" + std::to_string(G) + " (peer)", now_s() - w0, cpu_s() - c0);
    w0 = now_s(), c0 = cpu_s();
    const auto corr = CorrelatedPlacement({.seed = 1}).fit(two, topo);
    report("correlated placement G=" + std::to_string(G) + " (4 starts, 2 threads)", now_s() - w0, cpu_s() - c0);
    const auto w = CouplingWeights::from(two, 1.0);
    std::printf("|   objective per token: correlated %.4g, load-balanced %.4g | | | |\n",
                coupling_objective(w, corr, 1.0) / static_cast<double>(tokens),
                coupling_objective(w, lb, 1.0) / static_cast<double>(tokens));
    if (G == 8) {
      w0 = now_s(), c0 = cpu_s();
      const RoutingTrace whole = gen.generate(0, tokens);
      report("materialise the whole trace in memory (ids: " +
                 std::to_string(whole.ids().size_bytes() >> 20) + " MiB)", now_s() - w0, cpu_s() - c0);
      w0 = now_s(), c0 = cpu_s();
      const auto homes = TokenShuffle(two, corr, {.batch_tokens = 4096}).assign(whole);
      char what[160];
      std::snprintf(what, sizeof what, "token shuffle, all layers, 4096-token batches, G=8 (gap to dual bound %.1e)",
                    (homes.score_bound - homes.score) / homes.score_bound);
      report(what, now_s() - w0, cpu_s() - c0);
      w0 = now_s(), c0 = cpu_s();
      const auto m = evaluate_placement(whole, corr, homes.home);
      report("metrics (send-once rows, local share)", now_s() - w0, cpu_s() - c0);
      std::printf("|   rows removed %.1f%%, local share with shuffle %.1f%% | | | |\n", 100 * m.rows_removed_fraction,
                  100 * m.local_share);
    }
  }
}

// Per-micro-batch shuffle speed and quality: DeepSeek-V3 shape (E=256, k=8), 4 layers,
// correlated placement; micro-batches of 4096 tokens at layers 1..3. Both methods see
// the same micro-batches (the auction only the first `auction_tokens`, it is ~1000x
// slower); tokens/s counts one token at one layer, scoring included, on one thread.
void shuffle_speed(std::int64_t tokens, std::int64_t auction_tokens) {
  std::printf("\n## Per-micro-batch token shuffle: fast (greedy by regret + cycle repair) vs auction, E=256 k=8, 4096-token micro-batches\n\n");
  std::printf("| G | method | token-layers | CPU s | wall s | tokens/s per core | objective / auction's | objective / optimum, all tokens | gap to own bound | cycles per batch | optimal batches |\n");
  std::printf("|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
  const int layers = 4;
  constexpr std::int64_t kBatch = 4096;
  SyntheticTraceSpec s = models(layers)[0].spec;
  const SyntheticTraceGenerator gen(s);
  const RoutingTrace fit = gen.generate(0, 65536), eval = gen.generate(65536, tokens);
  const CouplingStats fs = CouplingStats::of(fit);
  for (const int G : {8, 64}) {
    const Topology topo{G, 8};
    const auto corr = CorrelatedPlacement({.seed = 1}).fit(fs, topo);
    const TokenShuffle predictor(fs, corr, {.batch_tokens = kBatch});
    auto run_fast = [&](std::int64_t upto, double& score, double& bound, std::int64_t& cycles, std::int64_t& optimal, std::int64_t& batches,
                        FastAssignmentOptions fo, bool warm) {
      StepShuffle step(predictor, fo, warm);
      std::vector<ExpertId> prev;
      std::vector<std::int32_t> home(static_cast<std::size_t>(kBatch));
      score = bound = 0;
      cycles = optimal = batches = 0;
      for (int l = 1; l < layers; ++l)
        for (std::int64_t first = 0; first < upto; first += kBatch) {
          const std::int64_t n = std::min(kBatch, upto - first);
          // The runtime hands over the micro-batch's ids contiguously: gather them first
          // (outside the timed region would flatter; it is inside, and cheap).
          prev.clear();
          for (std::int64_t t = first; t < first + n; ++t)
            for (const auto e : eval.experts(t, l - 1)) prev.push_back(e);
          const auto r = step.homes(l, prev, 8, std::span<std::int32_t>(home.data(), static_cast<std::size_t>(n)));
          score += r.score, bound += r.score_bound, cycles += r.report.cycles, optimal += r.report.optimal, ++batches;
        }
    };
    const RoutingTrace head = gen.generate(65536, auction_tokens);
    double w0 = now_s(), c0 = thread_cpu_s();
    const auto auction = TokenShuffle(fs, corr, {.batch_tokens = kBatch}).assign(head);
    const double auc_cpu = thread_cpu_s() - c0, auc_wall = now_s() - w0;
    const double fast_tl = static_cast<double>(tokens) * (layers - 1), auc_tl = static_cast<double>(auction_tokens) * (layers - 1);
    double fast_rate = 0, optimum = 0;
    for (const auto& [max_cycles, warm] : {std::pair{std::int64_t{-1}, true}, std::pair{std::int64_t{-1}, false}, std::pair{std::int64_t{0}, true},
                                           std::pair{std::int64_t{0}, false},
                                           std::pair{std::int64_t{G}, false}, std::pair{std::int64_t{2 * G}, false}, std::pair{std::int64_t{4 * G}, false}}) {
      double fs_score = 0, fs_bound = 0, fa_score = 0, fa_bound = 0;
      std::int64_t cyc = 0, opt = 0, nb = 0, c2 = 0, o2 = 0, n2 = 0;
      const FastAssignmentOptions fo{.max_cycles = max_cycles, .certify = max_cycles < 0};
      // Fast on the auction's tokens (objective ratio), then on all tokens (speed).
      run_fast(auction_tokens, fa_score, fa_bound, c2, o2, n2, fo, warm);
      w0 = now_s(), c0 = thread_cpu_s();
      run_fast(tokens, fs_score, fs_bound, cyc, opt, nb, fo, warm);
      const double fast_cpu = thread_cpu_s() - c0, fast_wall = now_s() - w0;
      if (max_cycles < 0 && warm) fast_rate = fast_tl / fast_cpu, optimum = fs_score;
      char name[96];
      if (max_cycles < 0) std::snprintf(name, sizeof name, "fast, repair to optimum, %s", warm ? "warm prices" : "cold");
      else std::snprintf(name, sizeof name, "fast, %s, at most %lld repair cycles", warm ? "warm" : "cold", static_cast<long long>(max_cycles));
      std::printf("| %d | %s | %.0f | %.3f | %.3f | %.3g | %.6f | %.6f | %.1e | %.1f | %lld/%lld |\n", G, name, fast_tl, fast_cpu, fast_wall,
                  fast_tl / fast_cpu, fa_score / auction.score, fs_score / optimum, max_cycles < 0 ? (fs_bound - fs_score) / fs_bound : 0.0,
                  static_cast<double>(cyc) / static_cast<double>(nb), static_cast<long long>(opt), static_cast<long long>(nb));
    }
    std::printf("| %d | auction (TokenShuffle, eps 1e-4) | %.0f | %.3f | %.3f | %.3g | 1 | | %.1e | | |\n", G, auc_tl, auc_cpu, auc_wall,
                auc_tl / auc_cpu, (auction.score_bound - auction.score) / auction.score_bound);
    std::printf("|   fast (to optimum, warm) / auction speed: %.1fx (CPU) | | | | | | | | | | |\n", fast_rate / (auc_tl / auc_cpu));
  }
}

// Quality against the planted placement on planted traces, dense (64 experts top-8,
// groups of 8) and sparse (128 experts top-2, groups of 2), one node of 8 GPUs; peers:
// contiguous and EPLB-style packing. The fit objective of each placement shows whether
// a gap is the optimiser's (lower fit objective than planted) or not.
void planted_quality(std::int64_t tokens, int layers) {
  std::printf("\n## Planted traces: correlated and multilevel placement vs the planted placement, 8 GPUs, fit %lld + eval %lld tokens, %d layers\n\n",
              static_cast<long long>(tokens), static_cast<long long>(tokens), layers);
  std::printf("| trace | method | rows removed | of planted's | fit objective / planted's | max/mean load (fit) | fit CPU s |\n|---|---|---:|---:|---:|---:|---:|\n");
  struct Kind {
    const char* name;
    int experts, k;
    double group_prob, skew;
  };
  for (const auto& kind : {Kind{"dense E64 k8 skew 1.0", 64, 8, 0.5, 1.0}, Kind{"dense E64 k8 skew 0.3", 64, 8, 0.5, 0.3},
                           Kind{"sparse E128 k2 gp 0.42 skew 0.3", 128, 2, 0.42, 0.3}, Kind{"sparse E128 k2 gp 0.6 skew 0.5", 128, 2, 0.6, 0.5}}) {
    SyntheticTraceSpec spec{.layers = layers, .num_experts = kind.experts, .top_k = kind.k, .popularity_skew = kind.skew,
                            .group_size = kind.k, .group_prob = kind.group_prob, .transition_prob = 0.6, .seed = 2026};
    const SyntheticTraceGenerator gen(spec);
    const RoutingTrace fit = gen.generate(0, tokens), eval = gen.generate(tokens, tokens);
    const CouplingStats fs = CouplingStats::of(fit);
    const auto w = CouplingWeights::from(fs, 1.0);
    const Topology topo{8, 8};
    const auto home = contiguous_homes(eval.tokens(), layers, 8, 4096);
    const auto planted = planted_placement(gen.planted(), topo);
    const double pr = evaluate_placement(eval, planted, home).rows_removed_fraction, po = coupling_objective(w, planted, 1.0);
    // Fits are timed in CPU seconds of the process (every thread of the starts).
    auto row = [&](const char* name, auto&& fit_placement) {
      const double c0 = cpu_s();
      const Placement p = fit_placement();
      const double fit_s = cpu_s() - c0;
      const double r = evaluate_placement(eval, p, home).rows_removed_fraction;
      std::printf("| %s | %s | %.1f%% | %.1f%% | %.3f | %.2f | %.2f |\n", kind.name, name, 100 * r, 100 * r / pr, coupling_objective(w, p, 1.0) / po,
                  placement_load_ratio(w, p), fit_s);
    };
    row("planted", [&] { return planted; });
    row("contiguous", [&] { return contiguous_placement(layers, kind.experts, topo); });
    row("load-balanced (EPLB)", [&] { return load_balanced_placement(fs, topo); });
    row("correlated (tolerance 0.25)", [&] { return CorrelatedPlacement({.seed = 1}).fit(fs, topo); });
    row("multilevel (tolerance 0.25)", [&] { return MultilevelPlacement({.start = {.seed = 1}}).fit(fs, topo); });
    // The refinement alone: V-cycles from a random placement instead of the correlated start.
    row("multilevel from random (tolerance 0.25)",
        [&] { return MultilevelPlacement({.start = {.seed = 1}}).refine(w, random_placement(layers, kind.experts, topo, 1)); });
    CorrelatedPlacementOptions loose{.seed = 1};
    loose.load_tolerance = 1e9;
    row("correlated (no load limit)", [&] { return CorrelatedPlacement(loose).fit(fs, topo); });
    row("multilevel (no load limit)", [&] { return MultilevelPlacement({.start = loose}).fit(fs, topo); });
  }
}

// The counting loop statistics used before (token blocks of 1024, every owned layer
// per block, upper triangle by min/max), kept here as the in-run peer of --stats.
void count_token_blocked(const RoutingTrace& chunk, std::vector<std::uint32_t>& co, std::vector<std::uint32_t>& tr,
                         std::vector<std::uint64_t>& load) {
  const int L = chunk.layers(), k = chunk.top_k();
  const std::size_t E = static_cast<std::size_t>(chunk.num_experts());
  for (std::int64_t t0 = 0; t0 < chunk.tokens(); t0 += 1024) {
    const std::int64_t t1 = std::min(chunk.tokens(), t0 + 1024);
    for (int l = 0; l < L; ++l) {
      std::uint64_t* ld = load.data() + static_cast<std::size_t>(l) * E;
      std::uint32_t* c = co.data() + static_cast<std::size_t>(l) * E * E;
      std::uint32_t* r = l + 1 < L ? tr.data() + static_cast<std::size_t>(l) * E * E : nullptr;
      for (std::int64_t t = t0; t < t1; ++t) {
        const ExpertId* e = chunk.experts(t, l).data();
        for (int i = 0; i < k; ++i) {
          ++ld[e[i]];
          for (int j = i + 1; j < k; ++j) ++c[std::min(e[i], e[j]) * E + std::max(e[i], e[j])];
        }
        if (r != nullptr) {
          const ExpertId* n = chunk.experts(t, l + 1).data();
          for (int i = 0; i < k; ++i)
            for (int j = 0; j < k; ++j) ++r[e[i] * E + n[j]];
        }
      }
    }
  }
}

// Coupling statistics at 1M tokens x 32 layers x top-8 (E=256), streamed in 64K-token
// chunks as the CLI does; peers in the same run: the old token-blocked loop and one
// read of every id (the memory-traffic floor of any counting method).
void stats_speed(std::int64_t tokens, int layers) {
  std::printf("\n## Coupling statistics: %lld tokens x %d layers x top-8, E=256, 64K-token chunks\n\n", static_cast<long long>(tokens), layers);
  SyntheticTraceSpec s = models(layers)[0].spec;
  const SyntheticTraceGenerator gen(s);
  constexpr std::int64_t kChunk = 1 << 16;
  const std::size_t E = 256;
  CouplingStats one(layers, 256, 8), two(layers, 256, 8);
  std::vector<std::uint32_t> co(static_cast<std::size_t>(layers) * E * E), tr(co.size());
  std::vector<std::uint64_t> load(static_cast<std::size_t>(layers) * E);
  double t[4][2] = {};
  std::uint64_t sum = 0;
  auto timed = [&](int which, auto&& f) {
    const double w0 = now_s(), c0 = cpu_s();
    f();
    t[which][0] += now_s() - w0, t[which][1] += cpu_s() - c0;
  };
  for (std::int64_t first = 0; first < tokens; first += kChunk) {
    const auto chunk = gen.generate(first, std::min(kChunk, tokens - first));
    timed(0, [&] { for (const auto id : chunk.ids()) sum += id; });
    timed(1, [&] { count_token_blocked(chunk, co, tr, load); });
    timed(2, [&] { one.add(chunk, 1); });
    timed(3, [&] { two.add(chunk, 2); });
  }
  bool same = true;
  for (int l = 0; l + 1 < layers; ++l)
    for (int a = 0; a < 256; ++a)
      for (int b = 0; b < 256; ++b)
        same = same && two.transition(l, a, b) == tr[(static_cast<std::size_t>(l) * E + static_cast<std::size_t>(a)) * E + static_cast<std::size_t>(b)] &&
               one.transition(l, a, b) == two.transition(l, a, b) && one.co_selection(l, a, b) == two.co_selection(l, a, b);
  std::printf("| step | wall s | CPU s | CPU s / old loop's |\n|---|---:|---:|---:|\n");
  const char* names[4] = {"read every id once (memory floor, peer)", "old token-blocked loop, 1 thread (peer)",
                          "CouplingStats::add, 1 thread", "CouplingStats::add, 2 threads"};
  for (int i = 0; i < 4; ++i) std::printf("| %s | %.2f | %.2f | %.2f |\n", names[i], t[i][0], t[i][1], t[i][1] / t[1][1]);
  std::printf("\ncounts identical across the three counters: %s (id checksum %llu)\n", same ? "yes" : "NO", static_cast<unsigned long long>(sum));
}

}  // namespace

// Redundant experts: load and rows with 0..2 replica slots per GPU and layer
// (replication.hpp), correlated placement, contiguous homes, fit and eval disjoint.
void replicas_load(std::int64_t tokens, int layers) {
  std::printf("\n## Redundant experts: correlated placement + replicas, fit %lld + eval %lld tokens, %d layers, contiguous homes\n\n",
              static_cast<long long>(tokens), static_cast<long long>(tokens), layers);
  std::printf("| model | G | replica slots per GPU | max/mean load | rows removed | fit + replicate s |\n|---|---:|---:|---:|---:|---:|\n");
  for (const auto& m : models(layers)) {
    if (m.spec.top_k < 8) continue;
    const SyntheticTraceGenerator gen(m.spec);
    const RoutingTrace fit = gen.generate(0, tokens), eval = gen.generate(tokens, tokens);
    const CouplingStats fs = CouplingStats::of(fit);
    for (const int G : {8, 32}) {
      const double w0 = now_s();
      const auto corr = CorrelatedPlacement({.seed = 1}).fit(fs, Topology{G, 8});
      const double fit_s = now_s() - w0;
      const auto home = contiguous_homes(tokens, layers, G);
      for (const int slots : {0, 1, 2}) {
        const double w1 = now_s();
        const auto rp = replicate_experts(corr, fs, slots);
        const double rep_s = now_s() - w1;
        const auto d = dispatch_replicas(eval, rp, home);
        std::printf("| %s | %d | %d | %.2f | %.1f%% | %.2f |\n", m.name, G, slots, d.max_load_over_mean,
                    100 * (1 - static_cast<double>(d.rows_dedup) / static_cast<double>(d.rows_naive)), fit_s + rep_s);
      }
    }
  }
}

// Online re-placement on a stream whose coupling changes midway (a second generator
// seed plants other groups): every refit's predicted saving, migration and decision,
// with DeepSeek-V3-like bytes (a row is hidden 7168 in bf16; an expert, 44M parameters,
// moved with its optimizer state: the defaults of OnlineOptions, 14336 and 88e6 bytes).
void online_replacement(int layers) {
  std::printf("\n## Online re-placement: E256 k8, G=32, %d layers, windows of 32768 tokens, routing changes after 131072 tokens\n\n", layers);
  std::printf("| horizon (windows) | refit at token | rows current | rows candidate | experts moved | saving GB over horizon | migration GB | moved | refit s |\n|---:|---:|---:|---:|---:|---:|---:|---|---:|\n");
  SyntheticTraceSpec sa = models(layers)[0].spec, sb = sa;
  sb.seed = sa.seed + 1;
  const SyntheticTraceGenerator a(sa), b(sb);
  const Topology topo{32, 8};
  const auto initial = CorrelatedPlacement({.seed = 1}).fit(CouplingStats::of(a.generate(0, 65536)), topo);
  for (const double horizon : {1.0, 16.0}) {
    OnlineReplacer r(initial, {.window_tokens = 32768, .horizon_windows = horizon});
    const std::int64_t chunk = 8192, change = 131072, total = 262144;
    std::size_t shown = 0;
    for (std::int64_t t = 0; t < total; t += chunk) {
      const double w0 = now_s();
      r.observe(t < change ? a.generate(65536 + t, chunk) : b.generate(t, chunk));
      const double dt = now_s() - w0;
      for (; shown < r.decisions().size(); ++shown) {
        const auto& d = r.decisions()[shown];
        std::printf("| %.0f | %lld | %lld | %lld | %lld | %.1f | %.1f | %s | %.2f |\n", horizon, static_cast<long long>(d.at_token),
                    static_cast<long long>(d.rows_current), static_cast<long long>(d.rows_candidate), static_cast<long long>(d.experts_moved),
                    d.saving_bytes / 1e9, d.migration_bytes / 1e9, d.moved ? "yes" : "no", dt);
      }
    }
  }
}

// The exact DP on 8 experts per layer (Mixtral-8x7B's width, top-2) over `layers`
// layers, 65536 fit tokens; peers in the same run: the correlated heuristic (4 starts)
// (4 starts), the multilevel refinement of its result and EPLB-style packing, by CPU
// time and objective.
void exact_cost(int layers) {
  std::printf("\n## Exact DP: 8 experts, top-2, %d layers, 65536 fit tokens\n\n", layers);
  std::printf("| G | GPUs per node | maps per layer / orbits | exact CPU s | correlated CPU s | multilevel CPU s | correlated / exact objective | multilevel / exact | load-balanced / exact |\n|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
  SyntheticTraceSpec s;
  s.layers = layers;
  s.num_experts = 8;
  s.top_k = 2;
  s.group_size = 2;
  s.group_prob = 0.5;
  s.transition_prob = 0.6;
  s.popularity_skew = 0.3;  // Mixtral's measured max/mean expert load is 1.11-1.30
  const CouplingStats stats = CouplingStats::of(SyntheticTraceGenerator(s).generate(0, 65536));
  const auto w = CouplingWeights::from(stats, 1.0);
  for (const Topology topo : {Topology{2, 2}, Topology{4, 4}, Topology{4, 2}, Topology{8, 8}, Topology{8, 4}}) {
    const double c0 = thread_cpu_s();
    Placement exact;
    try {
      exact = exact_placement(w, topo, 1.0, 0.25);
    } catch (const disagmoe::ConfigError& e) {
      std::printf("| %d | %d | %.0f | rejected: %s | | | | | |\n", topo.gpus, topo.gpus_per_node, balanced_map_count(8, topo.gpus), e.what());
      continue;
    }
    const double c1 = thread_cpu_s();
    const auto corr = CorrelatedPlacement({.seed = 1, .threads = 1}).fit(w, topo);
    const double c2 = thread_cpu_s();
    const auto ml = MultilevelPlacement({.start = {.seed = 1, .threads = 1}}).fit(w, topo);  // includes its correlated start
    const double c3 = thread_cpu_s();
    const double fe = coupling_objective(w, exact, 1.0);
    std::printf("| %d | %d | %.0f / %.0f | %.3f | %.3f | %.3f | %.4f | %.4f | %.4f |\n", topo.gpus, topo.gpus_per_node,
                balanced_map_count(8, topo.gpus), balanced_map_orbits(8, topo), c1 - c0, c2 - c1, c3 - c2,
                coupling_objective(w, corr, 1.0) / fe, coupling_objective(w, ml, 1.0) / fe,
                coupling_objective(w, load_balanced_placement(stats, topo), 1.0) / fe);
  }
}

// Cost of the multilevel refinement at DeepSeek-V3's width (256 experts, top-8) against
// the correlated heuristic in the same run: one thread each, CPU seconds and objective.
void multilevel_cost(int layers) {
  std::printf("\n## Multilevel vs correlated: 256 experts, top-8, %d layers, 16384 fit tokens, one thread\n\n", layers);
  std::printf("| G | correlated CPU s | multilevel CPU s (with its starts) | multilevel / correlated objective |\n|---:|---:|---:|---:|\n");
  SyntheticTraceSpec s{.layers = layers, .num_experts = 256, .top_k = 8, .popularity_skew = 0.5, .group_size = 8, .group_prob = 0.5,
                       .transition_prob = 0.6, .seed = 2026};
  const auto w = CouplingWeights::from(CouplingStats::of(SyntheticTraceGenerator(s).generate(0, 16384), 1), 1.0);
  for (const int G : {8, 64}) {
    const Topology topo{G, 8};
    const double c0 = thread_cpu_s();
    const auto corr = CorrelatedPlacement({.seed = 1, .threads = 1}).fit(w, topo);
    const double c1 = thread_cpu_s();
    const auto ml = MultilevelPlacement({.start = {.seed = 1, .threads = 1}}).fit(w, topo);
    const double c2 = thread_cpu_s();
    std::printf("| %d | %.2f | %.2f | %.4f |\n", G, c1 - c0, c2 - c1, coupling_objective(w, ml, 1.0) / coupling_objective(w, corr, 1.0));
  }
}

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);  // rows appear as they are measured
  bool q = false, sc = false, sw = false, sh = false, st = false, pl = false, rp = false, on = false, ex = false, ml = false;
  std::int64_t tokens = 16384, scale_tokens = 1 << 20;
  int layers = 8, scale_layers = 32;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&](long lo, long hi) {
      return bench::integer_value(argv[0], a, bench::option_value(argc, argv, i), lo, hi);
    };
    if (a == "--quality") q = true;
    else if (a == "--scale") sc = true;
    else if (a == "--sweep") sw = true;
    else if (a == "--shuffle") sh = true;
    else if (a == "--stats") st = true;
    else if (a == "--planted") pl = true;
    else if (a == "--replicas") rp = true;
    else if (a == "--online") on = true;
    else if (a == "--exact") ex = true;
    else if (a == "--multilevel") ml = true;
    else if (a == "--tokens") tokens = next(1, 1L << 26);
    else if (a == "--layers") layers = static_cast<int>(next(2, 1024));
    else if (a == "--scale-tokens") scale_tokens = next(1, 1L << 26);
    else if (a == "--scale-layers") scale_layers = static_cast<int>(next(2, 1024));
    else if (a == "--help" || a == "-h") {
      std::printf(
          "usage: %s [--quality] [--sweep] [--scale] [--shuffle] [--stats] [--planted] [--replicas] "
          "[--online] [--exact] [--multilevel] [--tokens N] [--layers L] [--scale-tokens N]\n"
          "       [--scale-layers L]\n"
          "Expert placement and token shuffling: quality, speed and memory (every section when none is "
          "named). See bench/RESULTS.md.\n",
          argv[0]);
      return 0;
    } else {
      bench::bad_argument(argv[0], "argument", a, "an option of --help");
    }
  }
  if (!q && !sc && !sw && !sh && !st && !pl && !rp && !on && !ex && !ml)
    q = sc = sw = sh = st = pl = rp = on = ex = ml = true;
  if (q) quality(tokens, layers);
  if (sw) sweep(tokens, layers);
  if (sh) shuffle_speed(1 << 16, 8192);
  if (st) stats_speed(scale_tokens, scale_layers);
  if (pl) planted_quality(tokens, layers);
  if (rp) replicas_load(tokens, layers);
  if (on) online_replacement(layers);
  if (ex) exact_cost(32);
  if (ml) multilevel_cost(8);
  if (sc) scale(scale_tokens, scale_layers);
  return 0;
}
