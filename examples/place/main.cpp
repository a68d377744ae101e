// SPDX-License-Identifier: Apache-2.0
// disagmoe-place: fit an expert placement (and a token-shuffle predictor) on one routing
// trace, evaluate it on another, and report the send-once dispatch savings.
//
//   disagmoe-place --fit FIT.npy [--eval EVAL.npy] --experts E --gpus G [--gpus-per-node K]
//                  [--method correlated|multilevel|contiguous|random|load-balanced|exact] [--shuffle]
//                  [--shuffle-method fast|auction]
//                  [--json] [--out FILE]
//   disagmoe-place --generate OUT.npy --experts E --top-k K --layers L --tokens T [...]
#include <disagmoe/placement/correlated.hpp>
#include <disagmoe/placement/exact.hpp>
#include <disagmoe/placement/metrics.hpp>
#include <disagmoe/placement/multilevel.hpp>
#include <disagmoe/placement/milp_placement.hpp>
#include <disagmoe/placement/token_shuffle.hpp>

#include <nlohmann/json.hpp>

#include "../common/cli_main.hpp"

#include <fstream>
#include <iomanip>
#include <iostream>
#include <limits>
#include <string>
#include <vector>

namespace {

using namespace disagmoe::placement;
using nlohmann::json;

struct Args {
  std::string fit, eval, method = "correlated", out, generate, exact_solver = "milp", shuffle_method = "fast";
  double time_limit = 60;
  json exact_info;  // solver verdict of --method exact
  int experts = 0, gpus = 0, gpus_per_node = 0;
  bool shuffle = false, json_out = false;
  std::uint64_t seed = 1;
  double load_tolerance = 0.25, cross_layer = 1.0, node_weight = 1.0;
  int starts = 4;
  std::int64_t batch_tokens = 0;
  std::int64_t first_token = 0;
  SyntheticTraceSpec synth;
};

CouplingStats stream_stats(const std::string& path, int experts) {
  TraceReader reader(path, experts);
  CouplingStats stats(reader.layers(), experts, reader.top_k());
  reader.for_each_chunk(1 << 16, [&](const RoutingTrace& chunk, std::int64_t) { stats.add(chunk); });
  return stats;
}

Placement fit_placement(Args& a, const CouplingStats& stats, Topology topo) {
  if (a.method == "correlated" || a.method == "multilevel") {
    CorrelatedPlacementOptions o;
    o.weights = {a.cross_layer, a.node_weight};
    o.load_tolerance = a.load_tolerance;
    o.starts = a.starts;
    o.seed = a.seed;
    if (a.method == "multilevel") return MultilevelPlacement({.start = o}).fit(stats, topo);
    return CorrelatedPlacement(o).fit(stats, topo);
  }
  if (a.method == "contiguous") return contiguous_placement(stats.layers(), stats.num_experts(), topo);
  if (a.method == "random") return random_placement(stats.layers(), stats.num_experts(), topo, a.seed);
  if (a.method == "load-balanced") return load_balanced_placement(stats, topo);
  // "exact": the MILP of milp_placement.hpp, or the dynamic program over balanced maps
  // (exact.hpp); both reject instances too large for them with a clear error.
  const auto w = CouplingWeights::from(stats, a.cross_layer);
  if (a.exact_solver == "dp") {
    Placement p = exact_placement(w, topo, a.node_weight, a.load_tolerance);
    a.exact_info = json{{"solver", "dp"}, {"status", "optimal"}, {"objective", coupling_objective(w, p, a.node_weight)}};
    return p;
  }
  disagmoe::milp::Options o;
  o.time_limit = a.time_limit;
  MilpPlacement m = milp_placement(w, topo, a.node_weight, a.load_tolerance, o);
  a.exact_info = json{{"solver", "milp"}, {"status", std::string(disagmoe::milp::to_string(m.status))},
                      {"objective", m.objective}, {"bound", m.bound}, {"gap", m.gap}};
  return std::move(m.placement);
}

// The generator's fields as this program's options (cli::in_option_terms).
constexpr disagmoe::cli::OptionName kSyntheticOptionNames[] = {
    {"SyntheticTraceSpec.transition_prob", "--transition-prob"},
    {"SyntheticTraceSpec.popularity_skew", "--skew"},
    {"SyntheticTraceSpec.num_experts", "--experts"},
    {"SyntheticTraceSpec.group_prob", "--group-prob"},
    {"SyntheticTraceSpec.group_size", "--group-size"},
    {"SyntheticTraceSpec.layers", "--layers"},
    {"SyntheticTraceSpec.tokens", "--tokens"},
    {"SyntheticTraceSpec.top_k", "--top-k"},
    {"RoutingTrace.num_experts", "--experts"},
    {"RoutingTrace.layers", "--layers"},
    {"RoutingTrace.tokens", "--tokens"},
    {"RoutingTrace.top_k", "--top-k"},
    {"num_experts", "--experts"},
    {"group_size", "--group-size"},
    {"top_k", "--top-k"}};

int generate(const Args& a) {
  SyntheticTraceSpec s = a.synth;
  s.num_experts = a.experts;
  s.seed = a.seed;
  const SyntheticTraceGenerator gen =
      disagmoe::cli::in_option_terms(kSyntheticOptionNames, [&] { return SyntheticTraceGenerator(s); });
  std::ofstream out(a.generate, std::ios::binary);
  if (!out) throw disagmoe::IoError("file '" + a.generate + "': cannot be opened for writing");
  const std::int64_t shape[3] = {s.tokens, s.layers, s.top_k};
  write_npy_header<ExpertId>(out, shape);
  // Streamed in chunks of at most 64 MiB of ids (and gates), a quarter of --max-memory
  // where that is less: any trace size fits.
  const std::int64_t per_token = std::int64_t{s.layers} * s.top_k * 8;
  const std::int64_t chunk_bytes = std::min<std::int64_t>(std::int64_t{64} << 20, disagmoe::limits().max_memory_bytes / 4);
  const std::int64_t chunk_tokens = std::max<std::int64_t>(1, chunk_bytes / per_token);
  for (std::int64_t first = 0; first < s.tokens; first += chunk_tokens) {
    const auto chunk = gen.generate(a.first_token + first, std::min(chunk_tokens, s.tokens - first));
    write_npy_data<ExpertId>(out, chunk.ids());
  }
  out.flush();  // a write error of the buffered tail shows only here
  if (!out) throw disagmoe::IoError("file '" + a.generate + "': write failed");
  std::cerr << "wrote " << s.tokens << " x " << s.layers << " x " << s.top_k << " expert ids to " << a.generate << '\n';
  return disagmoe::cli::kExitOk;
}

json metrics_json(const PlacementMetrics& m) {
  return json{{"rows_naive", m.rows_naive},
              {"rows_dedup", m.rows_dedup},
              {"rows_removed_fraction", m.rows_removed_fraction},
              {"local_share", m.local_share},
              {"cross_node_rows", m.cross_node_rows},
              {"max_load_over_mean", m.max_load_over_mean},
              {"local_share_per_layer", m.local_share_per_layer},
              {"rows_removed_per_layer", m.rows_removed_per_layer}};
}

int run(Args& a) {
  if (!a.generate.empty()) return generate(a);
  disagmoe::expect(!a.fit.empty(), "--fit", "", "a routing trace .npy file (or --generate)");
  const int per_node = a.gpus_per_node > 0 ? a.gpus_per_node : (a.gpus % 8 == 0 ? 8 : a.gpus);
  const Topology topo{a.gpus, per_node};
  topo.validate(a.experts);
  const CouplingStats stats = stream_stats(a.fit, a.experts);
  // An empty trace has nothing to fit or measure: every ratio would be 0 / 0.
  disagmoe::expect(stats.tokens() > 0, "--fit tokens", stats.tokens(), "at least 1 token in the trace");
  const Placement placement = fit_placement(a, stats, topo);
  const RoutingTrace eval = load_trace(a.eval.empty() ? a.fit : a.eval, a.experts);
  disagmoe::expect(eval.tokens() > 0, "--eval tokens", eval.tokens(), "at least 1 token in the trace");
  disagmoe::expect(eval.layers() == stats.layers(), "--eval layers", eval.layers(),
                   "the layers of --fit (" + std::to_string(stats.layers()) + ")");
  std::vector<std::int32_t> home;
  if (a.shuffle) {
    TokenShuffleOptions o{.batch_tokens = a.batch_tokens};
    o.method = a.shuffle_method == "auction" ? ShuffleMethod::kAuction : ShuffleMethod::kFast;
    home = TokenShuffle(stats, placement, o).assign(eval).home;
  } else {
    home = contiguous_homes(eval.tokens(), eval.layers(), a.gpus, a.batch_tokens);
  }
  const PlacementMetrics m = evaluate_placement(eval, placement, home);

  json placement_json = json::array();
  for (int l = 0; l < placement.layers(); ++l) {
    const auto row = placement.layer(l);
    placement_json.push_back(std::vector<std::int32_t>(row.begin(), row.end()));
  }
  json result{{"method", a.method}, {"experts", a.experts}, {"gpus", a.gpus}, {"gpus_per_node", per_node},
              {"shuffle", a.shuffle}, {"placement", placement_json}, {"metrics", metrics_json(m)}};
  if (!a.exact_info.is_null()) result["exact"] = a.exact_info;
  if (a.shuffle) result["shuffle_method"] = a.shuffle_method;
  if (!a.out.empty()) {
    json full = result;
    json homes = json::array();
    for (int l = 0; l < eval.layers(); ++l)
      homes.push_back(std::vector<std::int32_t>(home.begin() + static_cast<std::ptrdiff_t>(l) * eval.tokens(),
                                                home.begin() + static_cast<std::ptrdiff_t>(l + 1) * eval.tokens()));
    full["home"] = std::move(homes);
    std::ofstream out(a.out);
    if (!out) throw disagmoe::IoError("file '" + a.out + "': cannot be opened for writing");
    out << full.dump() << '\n';
    out.flush();
    if (!out) throw disagmoe::IoError("file '" + a.out + "': write failed");
  }
  if (a.json_out) {
    std::cout << result.dump(2) << '\n';
  } else {
    std::cout << std::fixed << std::setprecision(4) << "method " << a.method << (a.shuffle ? " + shuffle" : "")
              << ", " << a.experts << " experts on " << a.gpus << " GPUs (" << per_node << " per node), "
              << eval.tokens() << " tokens x " << eval.layers() << " layers x top-" << eval.top_k() << '\n'
              << "rows per-expert " << m.rows_naive << ", send-once " << m.rows_dedup << " (removed "
              << 100 * m.rows_removed_fraction << "%)\n"
              << "local share " << 100 * m.local_share << "%, cross-node rows " << m.cross_node_rows
              << ", max/mean GPU load " << m.max_load_over_mean << '\n';
  }
  return disagmoe::cli::kExitOk;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Fit an expert placement to a routing trace and report send-once dispatch savings", "disagmoe-place"};
  Args a;
  using disagmoe::cli::kPath;
  app.add_option("--fit", a.fit, "routing trace .npy [tokens, layers, top_k] (any integer dtype) to fit on")
      ->check(kPath);
  app.add_option("--eval", a.eval, "trace to evaluate on (default: the --fit trace)")->check(kPath);
  app.add_option("--experts", a.experts, "experts per MoE layer")->required()->check(CLI::Range(1, kMaxExperts));
  app.add_option("--gpus", a.gpus, "GPUs in the expert-parallel group")->check(CLI::Range(1, 65536));
  app.add_option("--gpus-per-node", a.gpus_per_node, "GPUs per node (default 8 if it divides --gpus, else --gpus)")
      ->check(CLI::Range(1, 65536));
  app.add_option("--method", a.method, "placement method")
      ->check(CLI::IsMember({"correlated", "multilevel", "contiguous", "random", "load-balanced", "exact"}));
  app.add_option("--exact-solver", a.exact_solver, "--method exact: milp (branch and bound) or dp (enumeration)")
      ->check(CLI::IsMember({"milp", "dp"}));
  app.add_option("--time-limit", a.time_limit,
                 "--method exact with milp: seconds before the best placement so far is kept")
      ->capture_default_str();
  app.add_flag("--shuffle", a.shuffle, "home tokens on the GPU predicted from the previous layer (token shuffling)");
  app.add_option("--shuffle-method", a.shuffle_method,
                 "--shuffle: fast (greedy + cycle repair to the optimum, default) or auction (epsilon-scaling reference)")
      ->check(CLI::IsMember({"fast", "auction"}));
  app.add_flag("--json", a.json_out, "print one JSON object: placement and metrics");
  app.add_option("--out", a.out, "write the JSON plus `home` ([layer][token] -> GPU on the eval trace) to FILE")
      ->check(kPath);
  app.add_option("--seed", a.seed, "seed of the heuristic, the random baseline and --generate");
  app.add_option("--load-tolerance", a.load_tolerance, "max GPU token load over mean minus 1 (correlated, multilevel, exact)");
  app.add_option("--cross-layer", a.cross_layer, "weight of cross-layer alignment vs co-selection");
  app.add_option("--node-weight", a.node_weight, "weight of keeping co-selected experts on one node");
  app.add_option("--starts", a.starts, "starts of the correlated heuristic (also the multilevel start)")->check(CLI::Range(1, 1024));
  app.add_option("--batch-tokens", a.batch_tokens, "tokens sharded together per micro-batch (0: the whole trace)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--generate", a.generate, "write a synthetic trace to this .npy file instead of fitting")
      ->check(kPath);
  app.add_option("--tokens", a.synth.tokens, "--generate: tokens")->check(CLI::Range(std::int64_t{1}, std::int64_t{1} << 40));
  app.add_option("--first-token", a.first_token,
                 "--generate: index of the first token (same --seed, disjoint ranges: independent traces of one model)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--layers", a.synth.layers, "--generate: MoE layers")->check(CLI::Range(1, 4096));
  app.add_option("--top-k", a.synth.top_k, "--generate: experts per token")->check(CLI::Range(1, kMaxExperts));
  app.add_option("--skew", a.synth.popularity_skew, "--generate: Zipf exponent of expert popularity");
  app.add_option("--group-size", a.synth.group_size, "--generate: experts per co-selection group (0: top-k)");
  app.add_option("--group-prob", a.synth.group_prob, "--generate: probability a token picks inside its group");
  app.add_option("--transition-prob", a.synth.transition_prob, "--generate: probability the group follows its successor");
  disagmoe::cli::add_max_memory(app);
  disagmoe::cli::add_max_output(app);
  return disagmoe::cli::run_main(app, argc, argv, [&] {
    namespace dz = disagmoe;
    // Each mode's options are errors in the other (a silently ignored option hides a mistake).
    const bool gen = !a.generate.empty();
    for (const char* o : {"--fit", "--eval", "--gpus", "--gpus-per-node", "--method", "--exact-solver", "--time-limit",
                          "--shuffle", "--shuffle-method", "--json", "--out", "--load-tolerance", "--cross-layer", "--node-weight",
                          "--starts", "--batch-tokens"})
      dz::cli::expect_applies(app, o, !gen, "no such option with --generate (it only writes a trace)");
    for (const char* o : {"--tokens", "--first-token", "--layers", "--top-k", "--skew", "--group-size", "--group-prob",
                          "--transition-prob"})
      dz::cli::expect_applies(app, o, gen, "given only with --generate");
    dz::cli::expect_applies(app, "--shuffle-method", a.shuffle, "given only with --shuffle");
    // Options of one placement method are errors with the others.
    const bool exact = a.method == "exact", correlated = a.method == "correlated" || a.method == "multilevel";
    for (const char* o : {"--exact-solver", "--time-limit"})
      dz::cli::expect_applies(app, o, exact, "given only with --method exact");
    dz::cli::expect_applies(app, "--starts", correlated, "given only with --method correlated or multilevel");
    for (const char* o : {"--load-tolerance", "--cross-layer", "--node-weight"})
      dz::cli::expect_applies(app, o, exact || correlated, "given only with --method correlated, multilevel or exact");
    if (!gen) dz::expect(a.gpus >= 1, "--gpus", a.gpus, "a GPU count >= 1 (required with --fit)");
    dz::expect_finite_in("--time-limit", a.time_limit, 1e-6, 1e9);
    dz::expect_finite_in("--load-tolerance", a.load_tolerance, 0, 1e6);
    dz::expect_finite_in("--cross-layer", a.cross_layer, 0, 1e6);
    dz::expect_finite_in("--node-weight", a.node_weight, 0, 1e6);
    if (gen) {  // the trace file's size before a byte is written
      dz::expect_finite_in("--skew", a.synth.popularity_skew, 0, 10);
      dz::expect_finite_in("--group-prob", a.synth.group_prob, 0, 1);
      dz::expect_finite_in("--transition-prob", a.synth.transition_prob, 0, 1);
      dz::expect(a.first_token <= std::numeric_limits<std::int64_t>::max() - a.synth.tokens, "--first-token",
                 a.first_token, "an index whose last token (--first-token + --tokens) fits 64 bits");
      const double bytes = static_cast<double>(a.synth.tokens) * a.synth.layers * a.synth.top_k * sizeof(ExpertId);
      dz::expect_output("--tokens", a.synth.tokens, bytes, "trace (tokens x layers x top-k x 2 bytes)");
    }
    return run(a);
  });
}
