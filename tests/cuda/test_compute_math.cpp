// SPDX-License-Identifier: Apache-2.0
// The row arithmetic of the CUDA attention-side compute and optimizer (norm_math.hpp,
// softmax_math.hpp, router_math.hpp, adamw_math.hpp), run on the host, against the
// reference stages of model/ and runtime/adamw.hpp on random inputs: bit for bit where
// the operations are the same (RMSNorm given its inverse RMS, the gain gradient, rotary,
// the cross-entropy gradient, AdamW), within a few ulps where the reference's Eigen
// vectorises a sum or an exp. Host compiler only: this runs without a GPU.
#include <disagmoe/backend/cuda/adamw_math.hpp>
#include <disagmoe/backend/cuda/norm_math.hpp>
#include <disagmoe/backend/cuda/router_math.hpp>
#include <disagmoe/backend/cuda/softmax_math.hpp>
#include <disagmoe/model/attention.hpp>
#include <disagmoe/model/cross_entropy.hpp>
#include <disagmoe/model/init.hpp>
#include <disagmoe/model/rms_norm.hpp>
#include <disagmoe/model/rotary.hpp>
#include <disagmoe/model/router.hpp>
#include <disagmoe/runtime/adamw.hpp>

#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

using namespace disagmoe;
using Mat = model::Matrix<float>;

namespace {

/// |a - b| <= ulps * eps * max(|a|, |b|, floor): relative, with an absolute floor for
/// values that cancel towards 0.
bool close(float a, float b, float ulps = 16, float floor = 1e-6f) {
  const float scale = std::max({std::abs(a), std::abs(b), floor});
  return std::abs(a - b) <= ulps * std::numeric_limits<float>::epsilon() * scale;
}

bool same_bits(const float* a, const float* b, std::size_t n) { return std::memcmp(a, b, n * sizeof(float)) == 0; }

Mat random(Eigen::Index rows, Eigen::Index cols, double std_dev, model::Rng& rng) {
  return model::normal_matrix<float>(rows, cols, std_dev, rng);
}

}  // namespace

TEST_CASE("RMSNorm rows: forward and gain gradient bit for bit given the inverse RMS, input gradient within ulps") {
  for (std::uint64_t seed = 1; seed <= 20; ++seed) {
    INFO("seed = " << seed);
    model::Rng rng(seed);
    const int rows = 1 + static_cast<int>(seed % 7), d = 1 + static_cast<int>(seed * 5 % 37);
    const Mat x = random(rows, d, 0.5 + static_cast<double>(seed % 4), rng);
    const Mat w = random(1, d, 1.0, rng);
    const Mat dy = random(rows, d, 1.0, rng);
    const Mat add = random(rows, d, 1.0, rng);
    const float eps = 1e-5f;
    model::RmsNormSaved<float> saved;
    Mat y, dx;
    model::rms_norm_forward<float>(w, eps, x, y, saved);
    model::rms_norm_backward_input<float>(w, saved, dy, dx);
    Mat dw = random(1, d, 1.0, rng), dw_ref = dw;
    model::rms_norm_backward_weight<float>(saved, dy, dw_ref);
    std::vector<float> row(static_cast<std::size_t>(d)), with_add(static_cast<std::size_t>(d));
    for (int r = 0; r < rows; ++r) {
      const float inv = saved.inv_rms(r, 0);
      CHECK(close(cuda::rms_inverse(&x(r, 0), d, eps), inv, 4));
      cuda::rms_norm_row(&x(r, 0), w.data(), inv, d, row.data());
      CHECK(same_bits(row.data(), &y(r, 0), row.size()));
      cuda::rms_norm_backward_row(&x(r, 0), w.data(), inv, &dy(r, 0), nullptr, d, row.data());
      const float mag = dx.row(r).cwiseAbs().maxCoeff();
      for (int c = 0; c < d; ++c) CHECK(close(row[static_cast<std::size_t>(c)], dx(r, c), 64, mag));
      cuda::rms_norm_backward_row(&x(r, 0), w.data(), inv, &dy(r, 0), &add(r, 0), d, with_add.data());
      for (int c = 0; c < d; ++c) CHECK(with_add[static_cast<std::size_t>(c)] == row[static_cast<std::size_t>(c)] + add(r, c));
    }
    for (int c = 0; c < d; ++c)
      dw(0, c) = cuda::rms_norm_weight_column(x.data(), saved.inv_rms.data(), dy.data(), rows, d, c, dw(0, c));
    CHECK(same_bits(dw.data(), dw_ref.data(), static_cast<std::size_t>(d)));
  }
}

TEST_CASE("rotary pairs equal model::rotary_apply bit for bit, forward and inverse") {
  for (std::uint64_t seed = 1; seed <= 12; ++seed) {
    INFO("seed = " << seed);
    model::Rng rng(seed);
    const int seq = 3 + static_cast<int>(seed % 6), heads = 1 + static_cast<int>(seed % 3);
    const int dim = 2 * (1 + static_cast<int>(seed % 5)), half = dim / 2, rows = 2 * seq;
    const auto table = model::make_rotary_table<float>(seq, dim, 10000.0 + 37.0 * static_cast<double>(seed));
    for (const auto dir : {model::RotaryDirection::kForward, model::RotaryDirection::kInverse}) {
      Mat x = random(rows, heads * dim, 1.0, rng), ref = x;
      model::rotary_apply(table, ref, heads, dir);
      const float sign = dir == model::RotaryDirection::kForward ? 1.0f : -1.0f;
      for (int r = 0; r < rows; ++r)
        for (int h = 0; h < heads; ++h)
          for (int i = 0; i < half; ++i)
            cuda::rotate_pair(x(r, h * dim + i), x(r, h * dim + i + half), table.cos(r % seq, i),
                              sign * table.sin(r % seq, i));
      CHECK(same_bits(x.data(), ref.data(), static_cast<std::size_t>(x.size())));
    }
  }
}

TEST_CASE("attention softmax rows: the reference's masked probabilities and lse, its recompute, the softmax backward") {
  for (std::uint64_t seed = 1; seed <= 16; ++seed) {
    INFO("seed = " << seed);
    model::Rng rng(seed);
    const int len = 1 + static_cast<int>(seed * 3 % 23), window = static_cast<int>(seed % 3) * 2;  // 0: full causal
    const float scale = 1.0f / std::sqrt(static_cast<float>(2 + seed % 7));
    const Mat scores = random(len, len, 2.0 + static_cast<double>(seed % 5), rng);
    Mat ref = scores, recompute = scores;
    std::vector<float> lse_ref(static_cast<std::size_t>(len));
    model::detail::softmax_tile<false>(ref, 0, 0, window, scale, [&](Eigen::Index r) -> float& {
      return lse_ref[static_cast<std::size_t>(r)];
    });
    model::detail::softmax_tile<true>(recompute, 0, 0, window, scale, [&](Eigen::Index r) -> float& {
      return lse_ref[static_cast<std::size_t>(r)];
    });
    const Mat dp_in = random(len, len, 1.0, rng);
    for (int i = 0; i < len; ++i) {
      INFO("row " << i << " of " << len << ", window " << window);
      std::vector<float> row(scores.row(i).data(), scores.row(i).data() + len), again = row;
      const float lse = cuda::attention_softmax_row(row.data(), len, i, window, scale);
      CHECK(close(lse, lse_ref[static_cast<std::size_t>(i)], 8));
      cuda::attention_probs_row(again.data(), len, i, window, scale, lse_ref[static_cast<std::size_t>(i)]);
      for (int j = 0; j < len; ++j) {
        const bool masked = j > i || j < cuda::attention_first_key(i, window);
        CHECK(masked == (j > i || (window > 0 && j <= i - window)));
        if (masked) {
          CHECK(row[static_cast<std::size_t>(j)] == 0.0f);
          CHECK(again[static_cast<std::size_t>(j)] == 0.0f);
        }
        CHECK(close(row[static_cast<std::size_t>(j)], ref(i, j), 16));
        CHECK(close(again[static_cast<std::size_t>(j)], recompute(i, j), 16));
      }
      // Softmax backward against the formula in double.
      std::vector<float> dp(dp_in.row(i).data(), dp_in.row(i).data() + len);
      double dot = 0;
      for (int j = 0; j < len; ++j) dot += static_cast<double>(ref(i, j)) * dp[static_cast<std::size_t>(j)];
      std::vector<float> ds = dp;
      cuda::attention_softmax_backward_row(&ref(i, 0), ds.data(), len, scale);
      for (int j = 0; j < len; ++j) {
        const double want = static_cast<double>(ref(i, j)) * (dp[static_cast<std::size_t>(j)] - dot) * scale;
        CHECK(std::abs(ds[static_cast<std::size_t>(j)] - want) <= 1e-6 * (1 + std::abs(want)) * len);
      }
    }
  }
}

TEST_CASE("router rows: probabilities, top-k ids and renormalised gates, lse; the backward's dlogits") {
  for (std::uint64_t seed = 1; seed <= 20; ++seed) {
    INFO("seed = " << seed);
    model::Rng rng(seed);
    const int experts = 2 + static_cast<int>(seed % 9), k = 1 + static_cast<int>(seed % static_cast<std::uint64_t>(experts));
    const int tokens = 1 + static_cast<int>(seed % 6), hidden = 3 + static_cast<int>(seed % 4);
    const model::RouterOptions opt{experts, k, 0.01 * static_cast<double>(seed % 3), 0.001 * static_cast<double>(seed % 2 + 1)};
    const Mat wg = random(experts, hidden, 1.0, rng), x = random(tokens, hidden, 1.0, rng);
    model::RouterOutput<float> out;
    model::RouterSaved<float> saved;
    model::router_forward(opt, wg, x, out, saved);
    Mat logits;
    model::linear_forward(x, wg, logits);
    std::vector<int> ids(static_cast<std::size_t>(k));
    std::vector<float> gates(static_cast<std::size_t>(k));
    for (int t = 0; t < tokens; ++t) {
      float lse = 0;
      const float sel = cuda::router_row(&logits(t, 0), experts, k, ids.data(), gates.data(), lse);
      CHECK(close(sel, saved.selected_sum[static_cast<std::size_t>(t)], 16));
      CHECK(close(lse, saved.lse[static_cast<std::size_t>(t)], 8));
      for (int i = 0; i < experts; ++i) CHECK(close(logits(t, i), saved.probs(t, i), 16));
      for (int j = 0; j < k; ++j) {
        CHECK(ids[static_cast<std::size_t>(j)] == out.topk_ids(t, j));
        CHECK(close(gates[static_cast<std::size_t>(j)], out.gates(t, j), 32));
      }
    }
    // Backward from the reference's saved state: only the row arithmetic differs.
    const Mat d_gates = random(tokens, k, 1.0, rng);
    const float scale = 0.5f + static_cast<float>(seed % 3);
    Mat dx = Mat::Zero(tokens, hidden);
    model::router_backward_input(opt, wg, d_gates, scale, saved, dx);
    const float aux_scale = scale * static_cast<float>(opt.aux_loss_coef) * static_cast<float>(experts) / static_cast<float>(tokens);
    const float z_scale = scale * static_cast<float>(opt.z_loss_coef) * 2.0f / static_cast<float>(tokens);
    std::vector<float> aux_row(static_cast<std::size_t>(experts)), dl(static_cast<std::size_t>(experts));
    for (int i = 0; i < experts; ++i) aux_row[static_cast<std::size_t>(i)] = aux_scale * saved.expert_fraction[static_cast<std::size_t>(i)];
    for (int t = 0; t < tokens; ++t) {
      cuda::router_backward_row(&saved.probs(t, 0), &saved.topk_ids(t, 0), &saved.gates(t, 0), &d_gates(t, 0),
                                saved.selected_sum[static_cast<std::size_t>(t)], saved.lse[static_cast<std::size_t>(t)],
                                aux_row.data(), z_scale, experts, k, dl.data());
      const float mag = saved.dlogits.row(t).cwiseAbs().maxCoeff();
      for (int i = 0; i < experts; ++i) CHECK(close(dl[static_cast<std::size_t>(i)], saved.dlogits(t, i), 64, mag));
    }
  }
}

TEST_CASE("router rows: ties keep the lower expert id, as the reference's insertion does") {
  std::vector<float> row{0.5f, 0.5f, 0.5f, 0.5f, 0.5f};
  std::vector<int> ids(3);
  std::vector<float> gates(3);
  float lse = 0;
  cuda::router_row(row.data(), 5, 3, ids.data(), gates.data(), lse);
  CHECK(ids == std::vector<int>{0, 1, 2});
  for (const float g : gates) CHECK(close(g, 1.0f / 3.0f, 4));
  CHECK(close(lse, 0.5f + std::log(5.0f), 4));
}

TEST_CASE("cross-entropy rows: the reference's loss and softmax; its gradient bit for bit") {
  for (std::uint64_t seed = 1; seed <= 12; ++seed) {
    INFO("seed = " << seed);
    model::Rng rng(seed);
    const int rows = 1 + static_cast<int>(seed % 5), vocab = 2 + static_cast<int>(seed * 7 % 40), d = 4;
    const Mat w = random(vocab, d, 1.0 + static_cast<double>(seed % 3), rng), x = random(rows, d, 1.0, rng);
    std::vector<int> targets(static_cast<std::size_t>(rows));
    for (auto& t : targets) t = static_cast<int>(rng.next() % static_cast<std::uint64_t>(vocab));
    model::LmHeadSaved<float> saved;
    const float loss = model::lm_head_forward(w, x, targets, saved);
    Mat logits;
    model::linear_forward(x, w, logits);
    float total = 0;
    for (int r = 0; r < rows; ++r) {
      total += cuda::cross_entropy_row(&logits(r, 0), vocab, targets[static_cast<std::size_t>(r)], true);
      for (int j = 0; j < vocab; ++j) CHECK(close(logits(r, j), saved.probs(r, j), 16, 1e-6f));
    }
    CHECK(close(total / static_cast<float>(rows), loss, 16));
    const float scale = 0.25f * static_cast<float>(1 + seed % 4);
    Mat dx;
    model::lm_head_backward_input(w, scale, saved, dx);
    Mat dl(rows, vocab);
    for (int r = 0; r < rows; ++r)
      cuda::cross_entropy_backward_row(&saved.probs(r, 0), vocab, targets[static_cast<std::size_t>(r)],
                                       scale / static_cast<float>(rows), &dl(r, 0));
    CHECK(same_bits(dl.data(), saved.dlogits.data(), static_cast<std::size_t>(dl.size())));
  }
}

TEST_CASE("AdamW elements equal runtime::adamw_update bit for bit over steps, with and without decay") {
  for (std::uint64_t seed = 1; seed <= 8; ++seed) {
    INFO("seed = " << seed);
    model::Rng rng(seed);
    const runtime::AdamWOptions o{0.9, 0.95 + 0.004 * static_cast<double>(seed % 5), 1e-8, 0.1};
    const bool decay = seed % 2 == 0;
    Mat p = random(3, 5, 1.0, rng), m = Mat::Zero(3, 5), v = Mat::Zero(3, 5);
    Mat p2 = p, m2 = m, v2 = v;
    for (std::int64_t step = 1; step <= 5; ++step) {
      const Mat g = random(3, 5, 1e-3 * static_cast<double>(step * seed), rng);
      const double lr = 1e-3 * static_cast<double>(step), gs = 1.0 / static_cast<double>(step);
      runtime::adamw_update(o, lr, gs, step, decay, p, g, m, v);
      const auto k = runtime::adamw_coefficients<float>(o, lr, gs, step, decay);
      for (Eigen::Index i = 0; i < p2.size(); ++i) cuda::adamw_element(k, g.data()[i], p2.data()[i], m2.data()[i], v2.data()[i]);
      CHECK(same_bits(p2.data(), p.data(), static_cast<std::size_t>(p.size())));
      CHECK(same_bits(m2.data(), m.data(), static_cast<std::size_t>(m.size())));
      CHECK(same_bits(v2.data(), v.data(), static_cast<std::size_t>(v.size())));
    }
  }
}
