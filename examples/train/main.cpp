// SPDX-License-Identifier: Apache-2.0
// disagmoe-train: trains a byte-level Mixtral-style MoE language model on one CPU worker
// (the colocated reference) with the library's stages, AdamW and checkpoints.
//
//   disagmoe-train [--model tiny|small] [--layers L --hidden D ...] [--steps N]
//                  [--corpus FILE] [--save DIR] [--resume DIR] [--sample N] [--json]
//   disagmoe-train --resume DIR --steps 0 --eval-text FILE
//
// Copy it: the trainer is ColocatedTrainer<ReferenceAttention<float>, ReferenceExperts<float>>;
// swap in your own `attention_compute` / `expert_compute` models to train other math.
#include <disagmoe/backend/host/keep_freed_memory.hpp>
#include <disagmoe/io/hf_config.hpp>
#include <disagmoe/model/presets.hpp>
#include <disagmoe/model/reference_attention.hpp>
#include <disagmoe/model/reference_experts.hpp>
#include <disagmoe/runtime/byte_corpus.hpp>
#include <disagmoe/runtime/checkpoint.hpp>
#include <disagmoe/runtime/colocated_trainer.hpp>

#include <Eigen/Core>
#include <nlohmann/json.hpp>

#include "../common/cli_main.hpp"
#include "progress.hpp"

#include <chrono>
#include <cmath>
#include <iomanip>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

namespace {

namespace dm = disagmoe;
namespace rt = disagmoe::runtime;
namespace mo = disagmoe::model;
using nlohmann::json;
using Trainer = rt::ColocatedTrainer<mo::ReferenceAttention<float>, mo::ReferenceExperts<float>>;
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
  int val_every = 100, val_windows = 256, sample = 0;
  bool json_out = false, recompute = false;
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
  if (m.first_dense_layers > 0 && m.dense_ffn == 0) m.dense_ffn = 4 * m.hidden;
  if (m.shared_experts > 0 && m.shared_expert_ffn == 0) m.shared_expert_ffn = m.expert_ffn;
  dm::expect(m.heads > 0 && m.hidden % m.heads == 0, "--hidden", m.hidden,
             "a multiple of --heads (" + std::to_string(m.heads) + ")");
  m.head_dim = m.hidden / m.heads;
  m.micro_batch = a.micro_batch;
  dm::validate(m, "model");
  return m;
}

rt::TrainOptions train_options(const Args& a) {
  dm::expect(a.micro_batch >= 1, "--micro-batch", a.micro_batch, "a positive integer");
  dm::expect(a.batch >= a.micro_batch && a.batch % a.micro_batch == 0, "--batch", a.batch,
             "a positive multiple of --micro-batch (" + std::to_string(a.micro_batch) + ")");
  dm::expect(a.steps >= 0, "--steps", a.steps, "an integer >= 0");
  rt::TrainOptions o;
  o.micro_batches = a.batch / a.micro_batch;
  o.adamw.weight_decay = a.weight_decay;
  o.lr = {a.lr, std::min(a.min_lr, a.lr), a.warmup, a.steps};
  o.clip_norm = a.clip;
  rt::validate(o);
  return o;
}

// Samples `n` bytes after a context of the validation text, at temperature 0.8.
std::string sample_text(Trainer& tr, const rt::ByteCorpus& corpus, int n, mo::Rng& rng) {
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

double batch_loss(Trainer& tr, const rt::Batch& b) {
  return b.sequences > 0 ? tr.evaluate({b.inputs, b.targets, b.sequences}) : std::nan("");
}

int run(const Args& a) {
  disagmoe::host::keep_freed_memory();  // no page faults on the blocks each step reuses
  Eigen::setNbThreads(a.threads);  // effective in an OpenMP build (Eigen would take every core)
  const dm::ModelSpec spec = model_spec(a);
  const rt::TrainOptions topt = train_options(a);
  mo::DecoderOptions dopt;
  dopt.aux_loss_coef = a.aux_loss;
  dopt.z_loss_coef = a.z_loss;
  Trainer tr(mo::ReferenceAttention<float>(spec, dopt), mo::ReferenceExperts<float>(spec, dopt), spec, topt,
             rt::StageOptions{a.seed, a.recompute});
  mo::Rng data_rng(mo::derive_seed(a.seed, 0xDA7A));
  if (!a.resume.empty()) data_rng.set_state(rt::load_checkpoint(a.resume, tr).data_rng);

  json result{{"parameters", tr.parameter_count()}, {"model", disagmoe::io::mixtral_config(spec, dopt)}};
  const bool train = a.steps > tr.steps();
  std::optional<rt::ByteCorpus> corpus;
  if (train || a.sample > 0 || a.eval_text.empty()) {
    corpus.emplace(rt::read_corpus(a.corpus), spec.seq_len, a.val_fraction);
    const auto h = rt::entropy_baselines(corpus->train_split());
    result["corpus"] = {{"file", a.corpus}, {"train_bytes", corpus->train_bytes()},
                        {"validation_bytes", corpus->validation_bytes()}, {"unigram_entropy", h.unigram},
                        {"bigram_entropy", h.bigram}};
    if (!a.json_out)
      std::cout << "disagmoe-train: " << spec.name << " model, " << tr.parameter_count() << " parameters; corpus "
                << a.corpus << " (" << corpus->train_bytes() << " train / " << corpus->validation_bytes()
                << " validation bytes, unigram " << std::setprecision(3) << h.unigram << ", bigram " << h.bigram
                << " nats/byte)\n";
  }
  std::optional<rt::Batch> val;
  if (corpus && corpus->validation_bytes() > 0) val = corpus->validation(a.val_windows);

  json curve = json::array();
  double initial = std::nan(""), final_loss = std::nan("");
  std::int64_t tokens = 0;
  const std::int64_t first = tr.steps();
  const auto t0 = Clock::now();
  dm::cli::ProgressBar bar(a.steps);
  while (train && tr.steps() < a.steps) {
    const rt::Batch b = corpus->sample_train(a.batch, data_rng);
    const rt::StepStats st = tr.step({b.inputs, b.targets, b.sequences});
    tokens += static_cast<std::int64_t>(b.inputs.size());
    if (std::isnan(initial)) initial = st.loss;
    final_loss = st.loss;
    const double secs = std::chrono::duration<double>(Clock::now() - t0).count();
    const auto done = tr.steps() - first;
    bar.update(tr.steps(), st.loss, tokens / secs, secs / static_cast<double>(done) * static_cast<double>(a.steps - tr.steps()));
    json point{{"step", tr.steps()}, {"loss", st.loss}, {"aux_loss", st.aux_loss}, {"z_loss", st.z_loss},
               {"grad_norm", st.grad_norm}, {"lr", st.lr}};
    if (val && (tr.steps() % a.val_every == 0 || tr.steps() == a.steps)) {
      point["val_loss"] = batch_loss(tr, *val);
      if (!a.json_out) {
        bar.clear();
        std::cout << "step " << tr.steps() << ": loss " << std::fixed << std::setprecision(4) << st.loss
                  << ", val_loss " << point["val_loss"].get<double>() << ", " << std::setprecision(0)
                  << tokens / secs << " tokens/s\n" << std::defaultfloat;
      }
    }
    curve.push_back(point);
  }
  bar.clear();
  const double secs = std::chrono::duration<double>(Clock::now() - t0).count();
  result["steps"] = tr.steps();
  result["tokens"] = tokens;
  result["seconds"] = secs;
  result["tokens_per_second"] = secs > 0 ? tokens / secs : 0.0;
  result["initial_loss"] = initial;
  result["final_loss"] = final_loss;
  result["val_loss"] = val ? batch_loss(tr, *val) : std::nan("");
  result["curve"] = curve;
  if (!a.eval_text.empty()) {
    const auto bytes = rt::read_corpus(a.eval_text);
    const rt::Batch b = rt::ByteCorpus::windows(bytes, spec.seq_len);
    result["eval_loss"] = batch_loss(tr, b);
    result["eval_windows"] = b.sequences;
    if (!a.json_out) std::cout << "eval_loss " << result["eval_loss"].get<double>() << " over " << b.sequences
                               << " windows of " << a.eval_text << '\n';
  }
  if (!a.save.empty()) {
    rt::save_checkpoint(a.save, tr, disagmoe::io::mixtral_config(spec, dopt).dump(2), {data_rng.state()});
    if (!a.json_out) std::cout << "saved " << a.save << "/model.safetensors, config.json, trainer_state.bin\n";
  }
  if (a.sample > 0) {
    mo::Rng rng(mo::derive_seed(a.seed, 0x5A3B));
    result["sample"] = sample_text(tr, *corpus, a.sample, rng);
    if (!a.json_out) std::cout << "sample: " << result["sample"].get<std::string>() << '\n';
  }
  if (a.json_out) {
    // Sampled bytes need not be UTF-8: replace what is not, rather than fail.
    std::cout << result.dump(2, ' ', false, json::error_handler_t::replace) << '\n';
  } else if (train) {
    std::cout << "trained " << tr.steps() - first << " steps, " << tokens << " tokens in " << std::setprecision(3)
              << secs << " s: loss " << initial << " -> " << final_loss << ", val_loss "
              << result["val_loss"].get<double>() << '\n';
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
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
  app.add_option("--shared-expert-ffn", a.shared_expert_ffn, "intermediate width of a shared expert");
  app.add_option("--sliding-window", a.sliding_window, "attention window in tokens (0: full causal)");
  app.add_option("--dense-layers", a.dense_layers, "leading dense (non-MoE) layers, as DeepSeek-MoE's first");
  app.add_option("--dense-ffn", a.dense_ffn, "intermediate width of a dense layer (default 4 x hidden)");
  app.add_option("--seq-len", a.seq_len, "bytes per training sequence");
  app.add_option("--micro-batch", a.micro_batch, "sequences per micro-batch")->capture_default_str();
  app.add_option("--batch", a.batch, "sequences per step (a multiple of --micro-batch)")->capture_default_str();
  app.add_option("--steps", a.steps, "total optimizer steps (a resumed run continues up to it)")->capture_default_str();
  app.add_option("--lr", a.lr, "peak learning rate")->capture_default_str();
  app.add_option("--min-lr", a.min_lr, "final learning rate of the cosine decay")->capture_default_str();
  app.add_option("--warmup", a.warmup, "linear warm-up steps")->capture_default_str();
  app.add_option("--weight-decay", a.weight_decay, "AdamW decoupled weight decay")->capture_default_str();
  app.add_option("--clip", a.clip, "global gradient-norm clip (0: off)")->capture_default_str();
  app.add_option("--aux-loss", a.aux_loss, "load-balancing loss coefficient")->capture_default_str();
  app.add_option("--z-loss", a.z_loss, "router z-loss coefficient")->capture_default_str();
  app.add_option("--seed", a.seed, "seed of the weights and the data sampling")->capture_default_str();
  app.add_option("--threads", a.threads, "Eigen threads (results are deterministic per thread count)")->capture_default_str();
  app.add_flag("--recompute", a.recompute, "recompute activations in backward (less memory)");
  app.add_option("--corpus", a.corpus, "training text, plain or .gz")->capture_default_str();
  app.add_option("--val-fraction", a.val_fraction, "share of the corpus held out for validation")->capture_default_str();
  app.add_option("--val-every", a.val_every, "validation loss every N steps")->capture_default_str();
  app.add_option("--val-windows", a.val_windows, "validation windows evaluated")->capture_default_str();
  app.add_option("--save", a.save, "write model.safetensors, config.json and trainer_state.bin to DIR");
  app.add_option("--resume", a.resume, "continue from a checkpoint DIR (bit-for-bit)");
  app.add_option("--eval-text", a.eval_text, "mean next-byte loss of the model over the windows of FILE");
  app.add_option("--sample", a.sample, "print N bytes generated by the model");
  app.add_flag("--json", a.json_out, "print one JSON object on stdout");
  return disagmoe::cli::run_main(app, argc, argv, [&] {
    disagmoe::expect(a.threads >= 1, "--threads", a.threads, "a positive integer");
    disagmoe::expect(a.val_every >= 1, "--val-every", a.val_every, "a positive integer");
    disagmoe::expect(a.sample >= 0, "--sample", a.sample, "an integer >= 0");
    return run(a);
  });
}
