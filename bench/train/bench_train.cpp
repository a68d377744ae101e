// SPDX-License-Identifier: Apache-2.0
// bench/train: throughput of the colocated trainer against two peers measured in the same
// run: (1) plain Eigen GEMMs of the model's own shapes (the work a step cannot avoid), and
// (2) the same model trained by PyTorch on this CPU (tests/runtime/torch_reference.py),
// where Debian's python3-torch is installed. Also each op kind's share of a step.
//
//   bench_train [--models tiny,small] [--steps N] [--threads N] [--no-torch]
#include "timed_compute.hpp"

#include <disagmoe/backend/host/keep_freed_memory.hpp>
#include <disagmoe/model/presets.hpp>
#include <disagmoe/model/reference_attention.hpp>
#include <disagmoe/model/reference_experts.hpp>
#include <disagmoe/runtime/colocated_trainer.hpp>

#include <bench_args.hpp>

#include <Eigen/Core>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

namespace {

namespace dm = disagmoe;
namespace rt = disagmoe::runtime;
namespace mo = disagmoe::model;
using Clock = std::chrono::steady_clock;
using Mat = mo::Matrix<float>;

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

/// One linear layer of a step: `rows` tokens through [in -> out].
struct Linear {
  long rows, in, out;
};

/// The linear layers of one step of `m` on `tokens` tokens (experts at their mean load).
std::vector<Linear> step_linears(const dm::ModelSpec& m, long tokens) {
  std::vector<Linear> v;
  const long q = m.heads * m.head_dim, kv = m.kv_heads * m.head_dim;
  for (int l = 0; l < m.layers; ++l) {
    v.push_back({tokens, m.hidden, q});
    v.push_back({tokens, m.hidden, kv});
    v.push_back({tokens, m.hidden, kv});
    v.push_back({tokens, q, m.hidden});
    v.push_back({tokens, m.hidden, m.experts});
    const long per_expert = tokens * m.top_k / m.experts;
    for (int e = 0; e < m.experts; ++e) {
      v.push_back({per_expert, m.hidden, m.expert_ffn});
      v.push_back({per_expert, m.hidden, m.expert_ffn});
      v.push_back({per_expert, m.expert_ffn, m.hidden});
    }
  }
  v.push_back({tokens, m.hidden, m.vocab});
  return v;
}

/// Model FLOPs of one training step: 6 per weight per token for every linear layer
/// (forward 2, backward 4: Kaplan et al. 2020, eq. 2.1), plus causal attention scores
/// and values: 4 S(S+1)/2 head_dim FLOPs per head and sequence forward, 3x that in all.
double step_flops(const dm::ModelSpec& m, long sequences) {
  double f = 0;
  for (const auto& l : step_linears(m, sequences * m.seq_len)) f += 6.0 * l.rows * l.in * l.out;
  const double s = m.seq_len;
  f += 3.0 * m.layers * sequences * m.heads * 4.0 * (s * (s + 1) / 2) * m.head_dim;
  return f;
}

/// FLOP/s of Eigen GEMMs on exactly the step's linear shapes: y = x W^T, dx = dy W, dW += dy^T x.
double gemm_flops_per_second(const dm::ModelSpec& m, long sequences, int reps) {
  const auto linears = step_linears(m, sequences * m.seq_len);
  std::vector<Mat> x, w, y, dx, dw;
  for (const auto& l : linears) {
    x.push_back(Mat::Random(l.rows, l.in));
    w.push_back(Mat::Random(l.out, l.in));
    y.push_back(Mat::Zero(l.rows, l.out));
    dx.push_back(Mat::Zero(l.rows, l.in));
    dw.push_back(Mat::Zero(l.out, l.in));
  }
  double best = 1e300, flops = 0;
  for (const auto& l : linears) flops += 6.0 * l.rows * l.in * l.out;
  for (int r = 0; r < reps; ++r) {
    const auto t = Clock::now();
    for (std::size_t i = 0; i < linears.size(); ++i) {
      y[i].noalias() = x[i] * w[i].transpose();
      dx[i].noalias() = y[i] * w[i];
      dw[i].noalias() += y[i].transpose() * x[i];
    }
    best = std::min(best, seconds_since(t));
  }
  return flops / best;
}

/// tokens/s of the PyTorch peer, or a negative value when it cannot run.
double torch_tokens_per_second(const dm::ModelSpec& m, int batch, int steps, int threads) {
  std::ostringstream cmd;
  cmd << "/usr/bin/python3 '" << DISAGMOE_SOURCE_DIR << "/tests/runtime/torch_reference.py' bench --layers " << m.layers
      << " --hidden " << m.hidden << " --heads " << m.heads << " --kv-heads " << m.kv_heads << " --experts " << m.experts
      << " --top-k " << m.top_k << " --expert-ffn " << m.expert_ffn << " --seq-len " << m.seq_len << " --batch " << batch
      << " --steps " << steps << " --threads " << threads << " 2>/dev/null";
  FILE* p = popen(cmd.str().c_str(), "r");
  if (!p) return -1;
  std::string out;
  char buf[512];
  while (std::fgets(buf, sizeof buf, p)) out += buf;
  if (pclose(p) != 0) return -1;
  const auto at = out.find("\"tokens_per_second\":");
  return at == std::string::npos ? -1 : std::stod(out.substr(at + 20));
}

struct Result {
  double tokens_per_second = 0, gflops = 0, gemm_gflops = 0, torch_tokens_per_second = -1, final_loss = 0;
  bench::Times share{};
  double rest_share = 0;
};

Result run_model(const dm::ModelSpec& m, int batch, int micro_batch, int steps, bool torch, int threads) {
  auto times = std::make_shared<bench::Times>();
  mo::DecoderOptions o;
  o.aux_loss_coef = 0.01;
  o.z_loss_coef = 1e-3;
  rt::TrainOptions t;
  t.micro_batches = batch / micro_batch;
  using A = bench::TimedAttention<mo::ReferenceAttention<float>>;
  using E = bench::TimedExperts<mo::ReferenceExperts<float>>;
  rt::ColocatedTrainer<A, E> tr(A(mo::ReferenceAttention<float>(m, o), times), E(mo::ReferenceExperts<float>(m, o), times),
                                m, t);
  mo::Rng rng(1);
  std::vector<int> in(static_cast<std::size_t>(batch * m.seq_len)), tg(in.size());
  auto fill = [&] {
    for (auto* v : {&in, &tg})
      for (auto& x : *v) x = static_cast<int>(rng.below(256));
  };
  for (int s = 0; s < 2; ++s) fill(), tr.step({in, tg, batch});  // warm-up: allocator, caches
  *times = {};
  Result r;
  const auto t0 = Clock::now();
  for (int s = 0; s < steps; ++s) {
    fill();
    r.final_loss = tr.step({in, tg, batch}).loss;
  }
  const double secs = seconds_since(t0);
  r.tokens_per_second = static_cast<double>(steps) * batch * m.seq_len / secs;
  r.gflops = step_flops(m, batch) * steps / secs / 1e9;
  r.gemm_gflops = gemm_flops_per_second(m, batch, 3) / 1e9;
  double timed = 0;
  for (std::size_t k = 0; k < r.share.size(); ++k) timed += (*times)[k], r.share[k] = (*times)[k] / secs;
  r.rest_share = 1.0 - timed / secs;
  if (torch) r.torch_tokens_per_second = torch_tokens_per_second(m, batch, steps, threads);
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> models{"tiny", "small"};
  int steps = 10, threads = 1;
  bool torch = true;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--help" || a == "-h") {
      std::cout << "usage: bench_train [--models tiny,small] [--steps N] [--threads N] [--no-torch]\n"
                   "Colocated trainer tokens/s and GFLOP/s against Eigen GEMMs of the same shapes and\n"
                   "against PyTorch (tests/runtime/torch_reference.py) in the same run.\n";
      return 0;
    } else if (a == "--models") {
      models.clear();
      std::stringstream ss(bench::option_value(argc, argv, i));
      for (std::string s; std::getline(ss, s, ',');) {
        const auto presets = mo::train_presets();
        if (std::none_of(presets.begin(), presets.end(), [&](const dm::ModelSpec& m) { return m.name == s; }))
          bench::bad_argument(argv[0], a, s, "training presets, e.g. tiny,small");
        models.push_back(s);
      }
      if (models.empty()) bench::bad_argument(argv[0], a, "", "training presets, e.g. tiny,small");
    } else if (a == "--steps") {
      steps =
          static_cast<int>(bench::integer_value(argv[0], a, bench::option_value(argc, argv, i), 1, 100000));
    } else if (a == "--threads") {
      threads =
          static_cast<int>(bench::integer_value(argv[0], a, bench::option_value(argc, argv, i), 1, 1024));
    } else if (a == "--no-torch") {
      torch = false;
    } else {
      bench::bad_argument(argv[0], "argument", a, "an option of --help");
    }
  }
  disagmoe::host::keep_freed_memory();  // as disagmoe-train
  Eigen::setNbThreads(threads);
  std::printf("| model | params | tokens/step | tokens/s | GFLOP/s | GEMM GFLOP/s | step/GEMM | torch tokens/s | ours/torch |\n");
  std::printf("|---|---|---|---|---|---|---|---|---|\n");
  std::vector<std::pair<std::string, Result>> all;
  for (const auto& name : models) {
    dm::ModelSpec m = mo::train_preset(name);
    const int batch = 16, micro = 8;
    const Result r = run_model(m, batch, micro, steps, torch, threads);
    long params = 0;
    {
      rt::ColocatedTrainer<mo::ReferenceAttention<float>, mo::ReferenceExperts<float>> count(
          mo::ReferenceAttention<float>(m, {}), mo::ReferenceExperts<float>(m, {}), m, {});
      params = count.parameter_count();
    }
    char torch_col[64] = "n/a", ratio_col[64] = "n/a";
    if (r.torch_tokens_per_second > 0) {
      std::snprintf(torch_col, sizeof torch_col, "%.0f", r.torch_tokens_per_second);
      std::snprintf(ratio_col, sizeof ratio_col, "%.2fx", r.tokens_per_second / r.torch_tokens_per_second);
    }
    std::printf("| %s | %ld | %d | %.0f | %.1f | %.1f | %.0f%% | %s | %s |\n", name.c_str(), params, batch * m.seq_len,
                r.tokens_per_second, r.gflops, r.gemm_gflops, 100 * r.gflops / r.gemm_gflops, torch_col, ratio_col);
    all.emplace_back(name, r);
  }
  std::printf("\nShare of step time per op kind\n\n| model |");
  for (auto n : bench::kKindNames) std::printf(" %.*s |", static_cast<int>(n.size()), n.data());
  std::printf(" dispatch, combine, optimizer |\n|---|");
  for (std::size_t k = 0; k <= bench::kKindNames.size(); ++k) std::printf("---|");
  std::printf("\n");
  for (const auto& [name, r] : all) {
    std::printf("| %s |", name.c_str());
    for (double s : r.share) std::printf(" %.1f%% |", 100 * s);
    std::printf(" %.1f%% |\n", 100 * r.rest_share);
  }
  return 0;
}
