// SPDX-License-Identifier: Apache-2.0
// disagmoe-train: trains a byte-level Mixtral-style MoE language model on CPU workers with
// the library's stages, AdamW and checkpoints: colocated on one worker (the reference),
// or disaggregated under AF-Pipe on p attention and p FFN workers (threads with an
// emulated network, or MPI ranks), or the colocated expert-parallel baselines (1F1B,
// A2A overlap) on the same workers, optionally checked against the colocated reference.
//
//   disagmoe-train [--model tiny|small] [--layers L --hidden D ...] [--steps N]
//                  [--corpus FILE] [--save DIR] [--resume DIR] [--sample N] [--json]
//   disagmoe-train --schedule afpipe --pairs 2 --net-bandwidth 1e9 --check-reference
//   disagmoe-train --schedule 1f1b --pairs 2 --attention-ranks 2 --net-bandwidth 1e9
//   mpirun -np 4 disagmoe-train --schedule afpipe --transport mpi
//   disagmoe-train --resume DIR --steps 0 --eval-text FILE
//   disagmoe-train --device cuda --precision bf16 --check-reference    (cuda preset; the GPU)
//   disagmoe-train --device cuda --schedule afpipe --check-reference  (AF-Pipe's workers, GPU)
//
// Copy it: the trainers are ColocatedTrainer<ReferenceAttention<float>, ReferenceExperts<float>>
// and DisaggregatedTrainer<..., ..., Transport>; swap in your own `attention_compute` /
// `expert_compute` models to train other math.
#include <disagmoe/backend/host/keep_freed_memory.hpp>
#include <disagmoe/io/hf_config.hpp>
#include <disagmoe/limits.hpp>
#include <disagmoe/model/presets.hpp>
#include <disagmoe/model/reference_attention.hpp>
#include <disagmoe/model/reference_experts.hpp>
#include <disagmoe/runtime/byte_corpus.hpp>
#include <disagmoe/runtime/checkpoint.hpp>
#include <disagmoe/runtime/colocated_trainer.hpp>
#include <disagmoe/spec/model_size.hpp>

#include <Eigen/Core>
#include <nlohmann/json.hpp>

#include "../common/cli_main.hpp"
#include "device.hpp"
#include "disaggregated.hpp"
#include "progress.hpp"

#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <iomanip>
#include <iostream>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

namespace {

namespace dm = disagmoe;
namespace rt = disagmoe::runtime;
namespace mo = disagmoe::model;
using nlohmann::json;
template <class Attention, class Experts>
using TrainerOf = rt::ColocatedTrainer<Attention, Experts>;
using Trainer = TrainerOf<mo::ReferenceAttention<float>, mo::ReferenceExperts<float>>;
using Clock = std::chrono::steady_clock;

struct Args {
  std::string preset = "tiny";
  std::optional<int> layers, hidden, heads, kv_heads, experts, top_k, expert_ffn, seq_len, shared_experts,
      shared_expert_ffn, sliding_window, dense_layers, dense_ffn;
  int micro_batch = 8, batch = 16;  // sequences per micro-batch and per step
  std::int64_t steps = 600;
  double lr = 3e-3, min_lr = 3e-4, weight_decay = 0.1, clip = 1.0, aux_loss = 0.01, z_loss = 1e-3;
  std::int64_t warmup = 20;
  std::uint64_t seed = 1;
  int threads = 1;
  std::string corpus = rt::kDefaultCorpus, save, resume, eval_text;
  double val_fraction = 0.1;
  int val_every = 100, val_windows = 256, sample = 0, save_every = 0;
  bool json_out = false, recompute = false, recompute_attention = false, recompute_ffn = false;
  std::string device = "cpu", precision = "fp32";
  disagmoe::train_cli::DisaggregatedArgs d;
  /// The stages' seed and recomputation: --recompute for both sides, or one side alone.
  [[nodiscard]] rt::StageOptions stage_options() const {
    return {seed, {recompute || recompute_attention, recompute || recompute_ffn}};
  }
};

dm::ModelSpec model_spec(const Args& a) {
  dm::ModelSpec m = mo::train_preset(a.preset);
  auto set = [](int& field, const std::optional<int>& v) {
    if (v) field = *v;
  };
  set(m.layers, a.layers);
  set(m.hidden, a.hidden);
  set(m.heads, a.heads);
  set(m.kv_heads, a.kv_heads);
  set(m.experts, a.experts);
  set(m.top_k, a.top_k);
  set(m.expert_ffn, a.expert_ffn);
  set(m.seq_len, a.seq_len);
  set(m.shared_experts, a.shared_experts);
  set(m.shared_expert_ffn, a.shared_expert_ffn);
  set(m.sliding_window, a.sliding_window);
  set(m.first_dense_layers, a.dense_layers);
  set(m.dense_ffn, a.dense_ffn);
  // A width for layers the model does not have would be ignored: refuse it instead.
  if (a.dense_ffn)
    dm::expect(m.first_dense_layers > 0, "--dense-ffn", *a.dense_ffn,
               "given only with --dense-layers 1 or more");
  if (a.shared_expert_ffn)
    dm::expect(m.shared_experts > 0, "--shared-expert-ffn", *a.shared_expert_ffn,
               "given only with --shared-experts 1 or more");
  if (m.first_dense_layers > 0 && m.dense_ffn == 0) m.dense_ffn = 4 * m.hidden;
  if (m.shared_experts > 0 && m.shared_expert_ffn == 0) m.shared_expert_ffn = m.expert_ffn;
  dm::expect(m.heads >= 1, "--heads", m.heads, "a positive integer");
  dm::expect(m.hidden % m.heads == 0, "--hidden", m.hidden,
             "a multiple of --heads (" + std::to_string(m.heads) + ")");
  m.head_dim = m.hidden / m.heads;
  m.micro_batch = a.micro_batch;
  const dm::ModelSpec preset = mo::train_preset(a.preset);
  if (m.layers != preset.layers || m.hidden != preset.hidden || m.heads != preset.heads ||
      m.kv_heads != preset.kv_heads || m.experts != preset.experts || m.top_k != preset.top_k ||
      m.expert_ffn != preset.expert_ffn || m.seq_len != preset.seq_len || m.shared_experts != 0 ||
      m.first_dense_layers != 0 || m.sliding_window != 0)
    m.name = "custom (from " + a.preset + ")";
  dm::validate(m, "model");
  return m;
}

rt::TrainOptions train_options(const Args& a) {
  dm::expect(a.micro_batch >= 1, "--micro-batch", a.micro_batch, "a positive integer");
  dm::expect_in("--micro-batch", a.micro_batch, 1, dm::max_size::kMicroBatch);
  dm::expect_in("--batch", a.batch, a.micro_batch, dm::max_size::kMicroBatch);
  // Each option by its own name (the option structs would name their fields instead).
  // No upper bound on the rates: a rate that diverges is reported at its step.
  dm::expect(std::isfinite(a.lr) && a.lr > 0, "--lr", a.lr, "a positive finite learning rate");
  dm::expect(std::isfinite(a.min_lr) && a.min_lr >= 0, "--min-lr", a.min_lr, "a finite learning rate >= 0");
  dm::expect_finite_in("--weight-decay", a.weight_decay, 0, 1e3);
  dm::expect_finite_in("--clip", a.clip, 0, 1e30);
  dm::expect_finite_in("--aux-loss", a.aux_loss, 0, 1e6);
  dm::expect_finite_in("--z-loss", a.z_loss, 0, 1e6);
  dm::expect_finite_in("--val-fraction", a.val_fraction, 0, 0.5);
  dm::expect(a.batch >= a.micro_batch && a.batch % a.micro_batch == 0, "--batch", a.batch,
             "a positive multiple of --micro-batch (" + std::to_string(a.micro_batch) + ")");
  dm::expect(a.steps >= 0, "--steps", a.steps, "an integer >= 0");
  dm::expect(a.warmup >= 0, "--warmup", a.warmup, "an integer >= 0");
  rt::TrainOptions o;
  o.micro_batches = a.batch / a.micro_batch;
  o.adamw.weight_decay = a.weight_decay;
  dm::expect(a.min_lr <= a.lr || !(a.min_lr == a.min_lr), "--min-lr", a.min_lr,
             "a value in [0, --lr] (" + std::to_string(a.lr) + ")");
  o.lr = {a.lr, a.min_lr, a.warmup, a.steps};
  o.clip_norm = a.clip;
  rt::validate(o);
  return o;
}

// Bytes a run needs, roughly: value, gradient and two AdamW moments per parameter, plus
// the activations one micro-batch keeps (about 16 rows of width hidden and 4 of width
// expert_ffn per token, slot and layer; a generous bound of what the stages save).
double memory_needed(const dm::ModelSpec& m, int micro_batch) {
  const double tokens = static_cast<double>(micro_batch) * m.seq_len;
  const double per_layer = tokens * (16.0 * m.hidden + 4.0 * (m.top_k + m.shared_experts) * m.expert_ffn +
                                     4.0 * m.experts + 2.0 * m.heads * std::min(m.seq_len, 128));
  return 4.0 * (4.0 * static_cast<double>(dm::total_params(m)) + m.layers * per_layer + 4.0 * tokens * m.vocab);
}

// The memory budget (--max-memory), and at most 80% of this machine's memory.
void check_memory(const dm::ModelSpec& m, int micro_batch) {
  const double pages = static_cast<double>(sysconf(_SC_PHYS_PAGES)), page = static_cast<double>(sysconf(_SC_PAGESIZE));
  const double have = pages > 0 && page > 0 ? pages * page : 0;
  const double budget = static_cast<double>(dm::limits().max_memory_bytes);
  const double limit = have > 0 ? std::min(budget, 0.8 * have) : budget;
  const double need = memory_needed(m, micro_batch);
  if (need > limit) {
    constexpr double kGiB = 1 << 30, kMiB = 1 << 20;
    std::ostringstream os;
    os.precision(3);
    os << "a run that fits " << limit / kGiB << " GiB (the budget --max-memory, " << budget / kGiB
       << " GiB, and 80% of this machine's " << have / kGiB << " GiB; parameters, gradients, AdamW moments and "
       << "one micro-batch's activations; lower --experts, --hidden, --layers or --micro-batch)";
    const std::string needed = need >= kGiB ? std::to_string(static_cast<long long>(need / kGiB)) + " GiB"
                                            : std::to_string(static_cast<long long>(need / kMiB)) + " MiB";
    dm::fail("model", dm::Verbatim{needed + " needed"}, os.str());
  }
}

// The settings that decide a run's trajectory: a resumed run must use the same ones to
// continue it bit for bit (the total --steps may grow; the cosine decay follows it).
std::map<std::string, std::string> run_settings(const Args& a, const dm::ModelSpec& m, std::uint64_t corpus_hash) {
  auto num = [](double v) {
    std::ostringstream os;
    os.precision(17);
    os << v;
    return os.str();
  };
  return {{"--seed", std::to_string(a.seed)},        {"--lr", num(a.lr)},
          {"--min-lr", num(a.min_lr)},               {"--warmup", std::to_string(a.warmup)},
          {"--batch", std::to_string(a.batch)},      {"--micro-batch", std::to_string(a.micro_batch)},
          {"--weight-decay", num(a.weight_decay)},   {"--clip", num(a.clip)},
          {"--aux-loss", num(a.aux_loss)},           {"--z-loss", num(a.z_loss)},
          {"--seq-len", std::to_string(m.seq_len)},  {"--top-k", std::to_string(m.top_k)},
          {"--sliding-window", std::to_string(m.sliding_window)}, {"--threads", std::to_string(a.threads)},
          {"--val-fraction", num(a.val_fraction)},   {"--corpus (FNV-1a of its bytes)", std::to_string(corpus_hash)}};
}

void check_resume_settings(const std::map<std::string, std::string>& saved, const std::map<std::string, std::string>& now) {
  for (const auto& [key, value] : now) {
    const auto it = saved.find(key);
    if (it == saved.end()) continue;  // a checkpoint written by another program
    dm::expect(it->second == value, key, dm::Verbatim{value},
               "the checkpoint's " + it->second + " (a resumed run keeps its settings, so that it continues bit for bit)");
  }
}

std::uint64_t fnv1a(std::span<const std::uint8_t> bytes) {
  std::uint64_t h = 0xcbf29ce484222325ull;
  for (const std::uint8_t b : bytes) h = (h ^ b) * 0x100000001b3ull;
  return h;
}

// Bytes for a terminal: control bytes other than newline and tab as \xHH (they could
// drive the terminal); the rest as is, so the corpus' UTF-8 stays readable.
std::string printable(const std::string& bytes) {
  std::string out;
  for (const char c : bytes) {
    const auto u = static_cast<unsigned char>(c);
    if (u == '\n' || u == '\t' || (u >= 0x20 && u != 0x7f)) {
      out.push_back(c);
    } else {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", u);
      out += buf;
    }
  }
  return out;
}

// Samples `n` bytes after a context of the validation text, at temperature 0.8.
template <class Tr>
std::string sample_text(Tr& tr, const rt::ByteCorpus& corpus, int n, mo::Rng& rng) {
  const int s = tr.spec().seq_len;
  const auto val = corpus.validation_split().empty() ? corpus.train_split() : corpus.validation_split();
  std::vector<int> ctx(val.begin(), val.begin() + s);
  std::string out;
  for (int i = 0; i < n; ++i) {
    const auto logits = tr.logits(ctx);
    const auto last = logits.row(s - 1);
    std::vector<double> p(static_cast<std::size_t>(last.size()));
    double mx = -1e300, z = 0;
    for (Eigen::Index v = 0; v < last.size(); ++v) mx = std::max(mx, static_cast<double>(last(v)) / 0.8);
    for (Eigen::Index v = 0; v < last.size(); ++v) z += p[static_cast<std::size_t>(v)] = std::exp(last(v) / 0.8 - mx);
    double u = rng.uniform() * z;
    int next = 0;
    while (next + 1 < static_cast<int>(p.size()) && u >= p[static_cast<std::size_t>(next)]) u -= p[static_cast<std::size_t>(next++)];
    out.push_back(static_cast<char>(next));
    ctx.erase(ctx.begin());
    ctx.push_back(next);
  }
  return out;
}

template <class Tr>
double batch_loss(Tr& tr, const rt::Batch& b) {
  return b.sequences > 0 ? tr.evaluate({b.inputs, b.targets, b.sequences}) : std::nan("");
}

// "n/a" for a loss that was not measured (no validation split), else the value.
std::string loss_text(double v) {
  if (std::isnan(v)) return "n/a";
  std::ostringstream os;
  os << std::fixed << std::setprecision(4) << v;
  return os.str();
}

// Checks what the run will need after training (paths, options) before it starts, so a
// typo is not found after the training it would have saved.
void check_outputs(const Args& a) {
  dm::expect(a.val_windows >= 1, "--val-windows", a.val_windows, "a positive integer");
  dm::expect(a.save_every >= 0, "--save-every", a.save_every, "an integer >= 0 (0: only at the end)");
  dm::expect(a.save_every == 0 || !a.save.empty(), "--save-every", a.save_every, "0 unless --save DIR is given");
  if (!a.d.trace.empty()) {  // the trace is written after training: its path is checked before
    std::error_code ec;
    const auto parent = std::filesystem::path(a.d.trace).parent_path();
    if (!parent.empty()) std::filesystem::create_directories(parent, ec);
    std::ofstream probe(a.d.trace, std::ios::app);
    dm::expect<dm::IoError>(!ec && probe.good(), "--trace", a.d.trace, "a file path that can be created and written");
  }
  if (!a.save.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(a.save, ec);
    dm::expect<dm::IoError>(!ec && std::filesystem::is_directory(a.save) && access(a.save.c_str(), W_OK) == 0,
                            "--save", a.save, "a directory that can be created and written");
  }
}

template <class Attention, class Experts>
int run_job(const Args& a, const dm::ModelSpec& spec, const rt::TrainOptions& topt, bool lead);

int run(const Args& a) {
  disagmoe::host::keep_freed_memory();  // no page faults on the blocks each step reuses
  Eigen::setNbThreads(a.threads);  // effective in an OpenMP build (Eigen would take every core)
  const dm::ModelSpec spec = model_spec(a);
  const rt::TrainOptions topt = train_options(a);
  dm::train_cli::check_device(a.device, a.d.transport, a.precision);
  auto d = a.d;
  // --device cuda: a colocated run compares with a host run itself (run_job).
  if (a.device == "cuda" && a.d.schedule == "colocated") d.check_reference = false;
  dm::train_cli::check_disaggregated_args(d, spec, a.micro_batch, topt.micro_batches);
  dm::expect(a.d.replace_every < std::max<std::int64_t>(a.steps, 1), "--replace-every", a.d.replace_every,
             "less than --steps (" + std::to_string(a.steps) + "): a refit's move applies from the next step");
  dm::expect(a.d.schedule == "colocated" || a.save_every == 0, "--save-every", a.save_every,
             "0 with --schedule " + a.d.schedule + " (the model is saved at the end)");
  bool lead = true;  // the rank that prints and writes files
#ifdef DISAGMOE_TRAIN_WITH_MPI
  std::optional<dm::mpi::Environment> mpi_env;
  if (a.d.transport == "mpi") {
    int argc0 = 0;
    char** argv0 = nullptr;
    dm::mpi::collective_timeout() = std::chrono::milliseconds(a.d.timeout_ms);
    mpi_env.emplace(argc0, argv0);
    lead = dm::mpi::Transport::world().rank() == 0;
    // An error on one rank (a peer's TimeoutError included) ends the whole job after
    // this rank reported it: the others would otherwise wait in MPI_Finalize.
    try {
      return run_job<mo::ReferenceAttention<float>, mo::ReferenceExperts<float>>(a, spec, topt, lead);
    } catch (...) {
      const int rc = dm::cli::report_exception("disagmoe-train");
      mpi_env->fail_job(rc);
      return rc;
    }
  }
#endif
#ifdef DISAGMOE_TRAIN_WITH_CUDA
  if (a.device == "cuda") return run_job<dm::cuda::Attention, dm::cuda::Experts>(a, spec, topt, lead);
#endif
  return run_job<mo::ReferenceAttention<float>, mo::ReferenceExperts<float>>(a, spec, topt, lead);
}

template <class Attention, class Experts>
int run_job(const Args& a, const dm::ModelSpec& spec, const rt::TrainOptions& topt, bool lead) {
  constexpr bool on_host = std::is_same_v<TrainerOf<Attention, Experts>, Trainer>;
  check_outputs(a);
  check_memory(spec, a.micro_batch);
  mo::DecoderOptions dopt;
  dopt.aux_loss_coef = a.aux_loss;
  dopt.z_loss_coef = a.z_loss;
  // Read every input first: a bad file is reported before any training.
  std::optional<std::vector<std::uint8_t>> eval_bytes;
  if (!a.eval_text.empty()) {
    try {
      eval_bytes = rt::read_corpus(a.eval_text);
    } catch (const dm::IoError& e) {
      throw dm::IoError(std::string("--eval-text: ") + e.what());
    }
  }
  const bool need_corpus = a.steps > 0 || a.sample > 0 || a.eval_text.empty();
  std::vector<std::uint8_t> corpus_bytes;
  if (need_corpus) corpus_bytes = rt::read_corpus(a.corpus);
  const auto settings = run_settings(a, spec, fnv1a(corpus_bytes));

  TrainerOf<Attention, Experts> tr(dm::train_cli::make_compute<Attention>(spec, dopt, a.precision),
                                   dm::train_cli::make_compute<Experts>(spec, dopt, a.precision), spec, topt,
                                   a.stage_options());
  mo::Rng data_rng(mo::derive_seed(a.seed, 0xDA7A));
  if (!a.resume.empty()) {
    const rt::CheckpointState st = rt::load_checkpoint(a.resume, tr);
    if (a.steps > tr.steps()) check_resume_settings(st.settings, settings);  // evaluation needs only the shape
    data_rng.set_state(st.data_rng);
    dm::expect(a.steps == 0 || a.steps >= tr.steps(), "--steps", a.steps,
               "0 (evaluate only) or at least the checkpoint's step (" + std::to_string(tr.steps()) + ")");
  }
  const std::string config_json = disagmoe::io::mixtral_config(spec, dopt).dump(2);
  auto save = [&](const std::filesystem::path& dir) {
    rt::save_checkpoint(dir, tr, config_json, {data_rng.state(), settings});
  };

  json result{{"parameters", tr.parameter_count()}, {"model", disagmoe::io::mixtral_config(spec, dopt)}};
  const bool train = a.steps > tr.steps();
  std::optional<rt::ByteCorpus> corpus;
  if (need_corpus) {
    corpus.emplace(std::move(corpus_bytes), spec.seq_len, a.val_fraction);
    const auto h = rt::entropy_baselines(corpus->train_split());
    result["corpus"] = {{"file", a.corpus}, {"train_bytes", corpus->train_bytes()},
                        {"validation_bytes", corpus->validation_bytes()}, {"unigram_entropy", h.unigram},
                        {"bigram_entropy", h.bigram}};
    if (!a.json_out && lead)
      std::cout << "disagmoe-train: " << spec.name << " model, " << tr.parameter_count() << " parameters; corpus "
                << a.corpus << " (" << corpus->train_bytes() << " train / " << corpus->validation_bytes()
                << " validation bytes, unigram " << std::setprecision(3) << h.unigram << ", bigram " << h.bigram
                << " nats/byte)\n" << std::defaultfloat;
  }
  std::optional<rt::Batch> val;
  if (corpus && corpus->validation_bytes() > 0) val = corpus->validation(a.val_windows);

  json curve = json::array();
  double initial = std::nan(""), final_loss = std::nan("");
  std::int64_t tokens = 0;
  const std::int64_t first = tr.steps();
  const auto t0 = Clock::now();
  double secs = 0;
  if (a.d.schedule != "colocated") {  // workers run the same computes (--device)
    // The reference starts from the same state and sees the same batches.
    std::optional<TrainerOf<Attention, Experts>> ref;
    mo::Rng ref_rng = data_rng;
    if (a.d.check_reference && train) {
      // M A-ranks split every micro-batch: the reference takes their shares as micro-batches.
      rt::TrainOptions ref_opt = topt;
      ref_opt.micro_batches *= a.d.attention_ranks;
      ref.emplace(dm::train_cli::make_compute<Attention>(spec, dopt, a.precision),
                  dm::train_cli::make_compute<Experts>(spec, dopt, a.precision), spec, ref_opt,
                  a.stage_options());
      if (!a.resume.empty()) rt::load_checkpoint(a.resume, *ref);
    }
    std::optional<json> placement, replicas;
    dm::train_cli::DisaggregatedArgs d = a.d;
    if (train) {
      const auto fitted = dm::train_cli::fit_placement(d, tr, *corpus, a.batch, a.seed);
      const std::int64_t fit_tokens = static_cast<std::int64_t>(a.d.placement_batches) * a.batch * spec.seq_len;
      if (const auto& p = fitted.placement) {
        placement = json{{"method", a.d.placement},
                         {"fit_tokens", fit_tokens},
                         {"rows_per_token_contiguous", p->rows_per_token_contiguous},
                         {"rows_per_token", p->rows_per_token_fitted},
                         {"expert_rank", p->expert_rank}};
        if (!a.json_out && lead)
          std::cout << "placement: correlated, fitted to the starting model's routing of " << fit_tokens
                    << " tokens: " << std::setprecision(3) << p->rows_per_token_fitted
                    << " send-once rows per token and MoE layer (contiguous: " << p->rows_per_token_contiguous
                    << ")\n" << std::defaultfloat;
      }
      if (const auto& r = fitted.replicas) {
        replicas = json{{"slots_per_rank", a.d.replicas},
                        {"fit_tokens", fit_tokens},
                        {"max_load_over_mean_without", r->max_load_over_mean_without},
                        {"max_load_over_mean", r->max_load_over_mean},
                        {"expert_replicas", r->expert_replicas}};
        if (!a.json_out && lead)
          std::cout << "replicas: " << a.d.replicas << " per expert rank and MoE layer, fitted to the starting model's "
                    << "routing of " << fit_tokens << " tokens: the busiest rank serves " << std::setprecision(3)
                    << r->max_load_over_mean << " x the mean token-expert pairs (without replicas: "
                    << r->max_load_over_mean_without << ")\n" << std::defaultfloat;
      }
    }
    const dm::train_cli::RunInputs in{spec,    topt,    dopt,       a.stage_options(), *corpus,
                                      a.batch, a.steps, a.json_out, a.precision};
    auto out = train ? dm::train_cli::train_disaggregated(d, in, tr, data_rng) : dm::train_cli::RunOutcome{};
    if (!out.rank0) return 0;  // MPI: rank 0 reports and saves
    curve = std::move(out.curve);
    tokens = out.tokens;
    initial = out.initial;
    final_loss = out.final_loss;
    secs = out.seconds;
    // The first step also builds the schedule: left out (so is a moved trainer's first, in rank_loop).
    auto mean = [](const std::vector<double>& v) {
      if (v.size() < 2) return v.empty() ? 0.0 : v[0];
      double s = 0;
      for (std::size_t i = 1; i < v.size(); ++i) s += v[i];
      return s / static_cast<double>(v.size() - 1);
    };
    json dis{{"schedule", a.d.schedule}, {"transport", a.d.transport}, {"ranks", out.ranks},
             {"step_seconds", mean(out.step_seconds)}, {"schedule_seconds", mean(out.schedule_seconds)},
             {"exposed_comm_seconds", mean(out.exposed_comm_seconds)},
             {"predicted_step_seconds", out.predicted_step_seconds},
             {"predicted_exposed_comm_seconds", out.simulated_exposed_comm_seconds},
             {"bottleneck_exposed_comm_seconds", mean(out.bottleneck_exposed_comm_seconds)},
             {"predicted_bottleneck_exposed_comm_seconds", out.simulated_bottleneck_exposed_comm_seconds},
             {"expert_rows_max_over_mean", mean(out.expert_rows_max_over_mean)}};
    // The floor is at the schedule's bandwidth: the emulated network's only on loopback.
    if (a.d.transport == "loopback" && a.d.net_bandwidth > 0)
      dis["bottleneck_exposed_comm_floor_seconds"] = mean(out.bottleneck_exposed_comm_floor_seconds);
    // Where each rank's last step went (runtime/rank_timelines.hpp), [worker][rank].
    json rank_times = json::array();
    for (const auto& worker : out.rank_times) {
      json ranks = json::array();
      for (const auto& r : worker)
        ranks.push_back({{"compute_seconds", r.compute_wall}, {"off_core_seconds", r.off_core()},
                         {"rank_wait_seconds", r.wait_for_ranks}, {"all_to_all_tail_seconds", r.after_last_entry}});
      rank_times.push_back(std::move(ranks));
    }
    dis["rank_times"] = std::move(rank_times);
    if (placement) dis["placement"] = *placement;
    if (replicas) dis["replicas"] = *replicas;
    if (a.d.replace_every > 0) {
      json refits = json::array();
      std::int64_t moves = 0, experts_moved = 0;
      for (const auto& r : out.replacements) {
        refits.push_back({{"at_token", r.at_token}, {"rows_current", r.rows_current},
                          {"rows_candidate", r.rows_candidate}, {"experts_moved", r.experts_moved},
                          {"saving_bytes", r.saving_bytes}, {"migration_bytes", r.migration_bytes}, {"moved", r.moved}});
        moves += r.moved;
        experts_moved += r.moved ? r.experts_moved : 0;
      }
      // saving_bytes and migration_bytes are the replacer's model (forward dispatch rows,
      // the moved experts' weights and moments); a move itself all-gathers the whole model.
      dis["replacement"] = {{"every_steps", a.d.replace_every}, {"horizon_windows", a.d.replace_horizon},
                            {"refits", refits}, {"moves_applied", out.moves_applied},
                            {"migration_seconds", out.migration_seconds}, {"expert_rank", out.expert_rank}};
      if (!a.json_out)
        std::cout << "online re-placement every " << a.d.replace_every << " steps: " << out.replacements.size()
                  << " refits, " << moves << " of them moved experts (" << experts_moved
                  << " (layer, expert) pairs in all; " << std::setprecision(3) << out.migration_seconds
                  << " s rebuilding)\n" << std::defaultfloat;
    }
    if (ref) {
      std::vector<double> losses, ref_losses;
      while (ref->steps() < a.steps) {
        const rt::Batch b = corpus->sample_train(a.batch, ref_rng);
        ref_losses.push_back(ref->step({b.inputs, b.targets, b.sequences}).loss);
      }
      for (const auto& p : curve) losses.push_back(p["loss"].get<double>());
      const double dl = dm::train_cli::max_rel_diff(losses, ref_losses);
      const double dp = dm::train_cli::max_rel_diff(dm::train_cli::flat_parameters(tr), dm::train_cli::flat_parameters(*ref));
      dis["reference"] = {{"max_rel_diff_loss", dl}, {"max_rel_diff_parameters", dp}, {"bit_identical", dl == 0 && dp == 0}};
      if (!a.json_out)
        std::cout << "reference check: max_rel_diff loss " << dl << ", parameters " << dp
                  << (dl == 0 && dp == 0 ? " (bit-identical to the colocated trainer)" : "") << '\n';
    }
    if (!a.json_out && train)
      std::cout << a.d.schedule << " on " << out.ranks << " ranks (" << a.d.transport
                << "): step " << std::setprecision(3) << dis["step_seconds"].get<double>() << " s, its schedule "
                << dis["schedule_seconds"].get<double>() << " s measured, "
                << dis["predicted_step_seconds"].get<double>() << " s predicted; exposed communication "
                << dis["exposed_comm_seconds"].get<double>() << " s measured, "
                << dis["predicted_exposed_comm_seconds"].get<double>() << " s predicted; the busiest expert rank "
                << "computed " << dis["expert_rows_max_over_mean"].get<double>() << " x its worker's mean rows\n"
                << std::defaultfloat;
    result["disaggregated"] = dis;
  }
  // --device cuda --check-reference: the host run from the same state on the same batches.
  std::optional<Trainer> host_ref;
  std::vector<double> host_losses;
  if (!on_host && a.d.check_reference && train && a.d.schedule == "colocated") {
    host_ref.emplace(mo::ReferenceAttention<float>(spec, dopt), mo::ReferenceExperts<float>(spec, dopt), spec,
                     topt, a.stage_options());
    if (!a.resume.empty()) rt::load_checkpoint(a.resume, *host_ref);
  }
  dm::cli::ProgressBar bar(a.steps);
  while (a.d.schedule == "colocated" && train && tr.steps() < a.steps) {
    const rt::Batch b = corpus->sample_train(a.batch, data_rng);
    const rt::StepStats st = tr.step({b.inputs, b.targets, b.sequences});
    if (host_ref) host_losses.push_back(host_ref->step({b.inputs, b.targets, b.sequences}).loss);
    tokens += static_cast<std::int64_t>(b.inputs.size());
    if (std::isnan(initial)) initial = st.loss;
    final_loss = st.loss;
    secs = std::chrono::duration<double>(Clock::now() - t0).count();
    const auto done = tr.steps() - first;
    bar.update(tr.steps(), st.loss, tokens / secs, secs / static_cast<double>(done) * static_cast<double>(a.steps - tr.steps()));
    json point{{"step", tr.steps()}, {"loss", st.loss}, {"aux_loss", st.aux_loss}, {"z_loss", st.z_loss},
               {"grad_norm", st.grad_norm}, {"lr", st.lr}};
    if (val && (tr.steps() % a.val_every == 0 || tr.steps() == a.steps)) {
      point["val_loss"] = batch_loss(tr, *val);
      if (!a.json_out) {
        bar.clear();
        std::cout << "step " << tr.steps() << ": loss " << loss_text(st.loss) << ", val_loss "
                  << loss_text(point["val_loss"].get<double>()) << ", " << static_cast<long long>(tokens / secs)
                  << " tokens/s\n";
      }
    }
    curve.push_back(point);
    if (a.save_every > 0 && tr.steps() % a.save_every == 0 && tr.steps() < a.steps)
      save(std::filesystem::path(a.save) / ("step_" + std::to_string(tr.steps())));
  }
  bar.clear();
  if (host_ref) {
    std::vector<double> losses;
    for (const auto& p : curve) losses.push_back(p["loss"].get<double>());
    const double dl = dm::train_cli::max_rel_diff(losses, host_losses);
    const double dp = dm::train_cli::max_rel_diff(dm::train_cli::flat_parameters(tr), dm::train_cli::flat_parameters(*host_ref));
    result["reference"] = {{"device", a.device}, {"precision", a.precision}, {"max_rel_diff_loss", dl}, {"max_rel_diff_parameters", dp}};
    if (!a.json_out)
      std::cout << "reference check (" << a.device << ", " << a.precision << " GEMMs, against the host run): max_rel_diff loss " << dl
                << ", parameters " << dp << '\n';
  }
  result["device"] = a.device;
  result["precision"] = a.precision;
  result["steps"] = tr.steps();
  result["tokens"] = tokens;
  result["seconds"] = secs;
  result["tokens_per_second"] = secs > 0 ? tokens / secs : 0.0;
  result["initial_loss"] = initial;
  result["final_loss"] = final_loss;
  result["val_loss"] = val ? batch_loss(tr, *val) : std::nan("");
  result["curve"] = curve;
  if (eval_bytes) {
    const rt::Batch b = rt::ByteCorpus::windows(*eval_bytes, spec.seq_len);
    result["eval_loss"] = batch_loss(tr, b);
    result["eval_windows"] = b.sequences;
    if (!a.json_out)
      std::cout << "eval_loss " << loss_text(result["eval_loss"].get<double>()) << " over " << b.sequences
                << " windows of " << a.eval_text << '\n';
  }
  if (!a.save.empty()) {
    save(a.save);
    if (!a.json_out) std::cout << "saved " << a.save << "/model.safetensors, config.json, trainer_state.bin\n";
  }
  if (a.sample > 0) {
    mo::Rng rng(mo::derive_seed(a.seed, 0x5A3B));
    const std::string text = sample_text(tr, *corpus, a.sample, rng);
    // Bytes need not be UTF-8: JSON gets each byte as the code point of the same value
    // (Latin-1), so they can be recovered; the terminal gets escapes for unprintable ones.
    std::string latin1;
    for (const char c : text) {
      const auto u = static_cast<unsigned char>(c);
      if (u < 0x80) latin1.push_back(c);
      else latin1 += {static_cast<char>(0xC0 | (u >> 6)), static_cast<char>(0x80 | (u & 0x3F))};
    }
    result["sample"] = latin1;
    if (!a.json_out) std::cout << "sample: " << printable(text) << '\n';
  }
  if (a.json_out) {
    std::cout << result.dump(2) << '\n';
  } else if (train) {
    std::cout << "trained " << tr.steps() - first << " steps, " << tokens << " tokens in " << std::setprecision(3)
              << secs << " s: loss " << initial << " -> " << final_loss << ", val_loss "
              << loss_text(result["val_loss"].get<double>()) << '\n';
  } else if (val) {
    std::cout << "val_loss " << loss_text(result["val_loss"].get<double>()) << " at step " << tr.steps() << '\n';
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  using disagmoe::cli::kPath;
  CLI::App app{"Train a byte-level Mixtral-style MoE language model on CPU (the colocated reference)",
               "disagmoe-train"};
  // A later option overrides an earlier one (so a script can append to a base command).
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  app.add_option("--model", a.preset, "training preset: tiny (the demo) or small")->capture_default_str();
  app.add_option("--layers", a.layers, "transformer layers (overrides the preset)");
  app.add_option("--hidden", a.hidden, "model width");
  app.add_option("--heads", a.heads, "query heads (head_dim = hidden / heads)");
  app.add_option("--kv-heads", a.kv_heads, "key/value heads (a divisor of heads)");
  app.add_option("--experts", a.experts, "routed experts per layer");
  app.add_option("--top-k", a.top_k, "experts per token");
  app.add_option("--expert-ffn", a.expert_ffn, "intermediate width of an expert");
  app.add_option("--shared-experts", a.shared_experts, "always-active experts per layer");
  app.add_option("--shared-expert-ffn", a.shared_expert_ffn, "intermediate width of a shared expert (default: --expert-ffn)");
  app.add_option("--sliding-window", a.sliding_window, "attention window in tokens (0: full causal)");
  app.add_option("--dense-layers", a.dense_layers, "leading dense (non-MoE) layers, as DeepSeek-MoE's first");
  app.add_option("--dense-ffn", a.dense_ffn, "intermediate width of a dense layer (default 4 x hidden)");
  app.add_option("--seq-len", a.seq_len, "bytes per training sequence");
  app.add_option("--micro-batch", a.micro_batch, "sequences per micro-batch")->capture_default_str();
  app.add_option("--batch", a.batch, "sequences per step (a multiple of --micro-batch)")->capture_default_str();
  app.add_option("--steps", a.steps, "total optimizer steps (a resumed run continues up to it; the cosine decay ends there)")->capture_default_str();
  app.add_option("--lr", a.lr, "peak learning rate")->capture_default_str();
  app.add_option("--min-lr", a.min_lr, "final learning rate of the cosine decay")->capture_default_str();
  app.add_option("--warmup", a.warmup, "linear warm-up steps")->capture_default_str();
  app.add_option("--weight-decay", a.weight_decay, "AdamW decoupled weight decay")->capture_default_str();
  app.add_option("--clip", a.clip, "global gradient-norm clip (0: off)")->capture_default_str();
  app.add_option("--aux-loss", a.aux_loss, "load-balancing loss coefficient")->capture_default_str();
  app.add_option("--z-loss", a.z_loss, "router z-loss coefficient")->capture_default_str();
  app.add_option("--seed", a.seed, "seed of the weights and the data sampling")->capture_default_str();
  app.add_option("--threads", a.threads, "Eigen threads (results are deterministic per thread count)")->capture_default_str();
  app.add_flag("--recompute", a.recompute, "recompute activations in backward on both sides (less memory)");
  app.add_flag("--recompute-attention", a.recompute_attention,
               "recompute the attention stages' activations only (a plan's recompute.attention)");
  app.add_flag("--recompute-ffn", a.recompute_ffn,
               "recompute the expert stages' activations only (a plan's recompute.ffn)");
  app.add_option("--corpus", a.corpus, "training text, plain or .gz")->capture_default_str()->check(kPath);
  app.add_option("--val-fraction", a.val_fraction, "share of the corpus held out for validation")->capture_default_str();
  app.add_option("--val-every", a.val_every, "validation loss every N steps")->capture_default_str();
  app.add_option("--val-windows", a.val_windows, "validation windows evaluated")->capture_default_str();
  app.add_option("--save", a.save, "write model.safetensors, config.json and trainer_state.bin to DIR")->check(kPath);
  app.add_option("--save-every", a.save_every, "also save DIR/step_N every N steps (resume from one to continue the run bit for bit)");
  app.add_option("--resume", a.resume,
                 "continue from a checkpoint DIR, bit for bit: the run's settings must match the checkpoint's")
      ->check(kPath);
  app.add_option("--eval-text", a.eval_text, "mean next-byte loss of the model over the windows of FILE")->check(kPath);
  app.add_option("--sample", a.sample, "print N bytes generated by the model (at most 65536)");
  app.add_flag("--json", a.json_out, "print one JSON object on stdout");
  auto* dis = app.add_option_group("training on workers (AF-Pipe and the colocated expert-parallel baselines)");
  dis->add_option("--schedule", a.d.schedule,
                  "colocated (one worker), afpipe (p attention + p FFN workers), or the colocated-EP baselines on p "
                  "pipeline stages: 1f1b, a2a-overlap (Megatron's all-to-all overlap)")
      ->capture_default_str();
  dis->add_option("--pairs", a.d.pairs,
                  "AF-Pipe pairs p, layer l on pair l mod p; baselines: pipeline stages (default 2; under MPI: from "
                  "the world size)");
  dis->add_option("--attention-ranks", a.d.attention_ranks,
                  "ranks per attention worker (data parallel); baselines: ranks per stage (attention data parallel, "
                  "experts expert parallel)")
      ->capture_default_str();
  dis->add_option("--ffn-ranks", a.d.ffn_ranks, "ranks per FFN worker (experts split over them)")->capture_default_str();
  dis->add_option("--virtual-stages", a.d.virtual_stages, "a2a-overlap: model chunks per stage (interleaving)")
      ->capture_default_str();
  dis->add_option("--exchange", a.d.exchange,
                  "auto, direct (one message per transfer; one rank per worker) or channel (M2NChannel)")
      ->capture_default_str();
  dis->add_option("--transport", a.d.transport, "loopback (worker threads) or mpi (run under mpirun -np 2p)")
      ->capture_default_str();
  dis->add_option("--group-size", a.d.group_size, "micro-batches per ping-pong group (0: min(micro-batches, 4p))");
  dis->add_option("--max-in-flight", a.d.max_in_flight, "micro-batches alive at once (0: 2 x group size)");
  dis->add_flag("--no-fuse", a.d.no_fuse, "no stage alignment: F returns to A_l, which hands on to A_{l+1}");
  dis->add_option("--net-bandwidth", a.d.net_bandwidth, "emulated NIC bandwidth between workers, bytes/s (0: unlimited; loopback)");
  dis->add_option("--net-latency", a.d.net_latency, "emulated one-way latency between workers, s (loopback)");
  dis->add_option("--timeout", a.d.timeout_ms, "ms a worker may go without progress before it reports a fault")
      ->capture_default_str();
  dis->add_flag("--check-reference", a.d.check_reference,
                "also train the colocated reference on the same data and report max_rel_diff of losses and parameters");
  dis->add_option("--placement", a.d.placement,
                  "expert -> FFN rank per layer: contiguous blocks, or correlated (Expert Coupling: fitted to how the "
                  "starting model routes --placement-batches training batches, co-selected experts together)")
      ->capture_default_str();
  dis->add_option("--placement-batches", a.d.placement_batches,
                  "batches of routing --placement correlated and --replicas fit")
      ->capture_default_str();
  dis->add_option("--replicas", a.d.replicas,
                  "redundant expert slots per FFN rank (baselines: per rank) and MoE layer, filled as DeepSeek's EPLB "
                  "does (hot experts copied, placed by co-selection) from the starting model's routing; each "
                  "token-expert pair is served by one copy and the copies' gradients are summed")
      ->capture_default_str();
  dis->add_option("--replace-every", a.d.replace_every,
                  "online re-placement (Expert Coupling): every N steps refit the placement to the routers' own "
                  "routing and move experts between ranks when the modelled saving in forward dispatch rows over "
                  "--replace-horizon windows beats the moved experts' weights and moments (0: off; a move itself "
                  "all-gathers the whole model)")
      ->capture_default_str();
  dis->add_option("--replace-horizon", a.d.replace_horizon,
                  "windows of --replace-every steps over which a refit's predicted saving is credited")
      ->capture_default_str();
  dis->add_option("--trace", a.d.trace, "Chrome trace of the last step: measured and simulated side by side")->check(kPath);
  app.add_option(
         "--device", a.device,
         "cpu, or cuda: attention and experts on the GPU (a cuda-preset build; with --check-reference, also "
         "the host run on the same batches, reporting max_rel_diff of losses and parameters; with a worker "
         "--schedule on loopback threads, every worker's attention and experts run on the one GPU, the token "
         "exchange between workers stays on the host, and --check-reference compares with the colocated GPU "
         "run)")
      ->capture_default_str();
  app.add_option("--precision", a.precision,
                 "what the GPU's GEMMs multiply in: fp32, or bf16 (bf16 operands, fp32 accumulation; the weights stay "
                 "fp32 masters); --device cuda only")
      ->capture_default_str();
  disagmoe::cli::add_max_memory(app);
  return disagmoe::cli::run_main(app, argc, argv, [&] {
    disagmoe::expect_in("--threads", a.threads, 1, 1024);
    disagmoe::expect(a.val_every >= 1, "--val-every", a.val_every, "a positive integer");
    // Each sampled byte runs the model once (about 10 ms for the tiny model on one core).
    disagmoe::expect(a.sample >= 0 && a.sample <= 65536, "--sample", a.sample,
                     "bytes in [0, 65536] (each one runs the model once)");
    // Options of one schedule or placement are errors with the others (not ignored).
    using disagmoe::cli::expect_applies;
    const std::string& s = a.d.schedule;
    for (const char* o : {"--group-size", "--max-in-flight", "--no-fuse"})
      expect_applies(app, o, s == "afpipe", "given only with --schedule afpipe");
    expect_applies(app, "--virtual-stages", s == "a2a-overlap", "given only with --schedule a2a-overlap");
    for (const char* o : {"--net-latency", "--timeout"})
      expect_applies(app, o, s != "colocated", "given only with --schedule afpipe, 1f1b or a2a-overlap");
    expect_applies(app, "--replace-horizon", a.d.replace_every > 0, "given only with --replace-every");
    expect_applies(app, "--val-every", a.val_fraction > 0, "given only with --val-fraction above 0");
    expect_applies(app, "--placement-batches", a.d.placement == "correlated" || a.d.replicas > 0,
                   "given only with --placement correlated or --replicas");
    return run(a);
  });
}
