// SPDX-License-Identifier: Apache-2.0
// The colocated trainer: whole-model gradients against central finite differences (in
// double), recomputation and micro-batching against the plain run, and a model that
// learns a repeating text to near-zero loss.
#include <disagmoe/model/presets.hpp>
#include <disagmoe/model/reference_attention.hpp>
#include <disagmoe/model/reference_experts.hpp>
#include <disagmoe/runtime/colocated_trainer.hpp>

#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

namespace dm = disagmoe;
namespace rt = disagmoe::runtime;
namespace mo = disagmoe::model;

namespace {

dm::ModelSpec small_spec() {
  dm::ModelSpec m;
  m.layers = 3;
  m.hidden = 8;
  m.heads = 4;
  m.kv_heads = 2;
  m.head_dim = 4;
  m.experts = 4;
  m.top_k = 2;
  m.expert_ffn = 6;
  m.vocab = 256;
  m.seq_len = 5;
  return m;
}

template <class T>
using Trainer = rt::ColocatedTrainer<mo::ReferenceAttention<T>, mo::ReferenceExperts<T>>;

template <class T>
Trainer<T> make_trainer(const dm::ModelSpec& spec, mo::DecoderOptions o, int micro_batches,
                        disagmoe::plan::Recompute recompute = {}, std::uint64_t seed = 7) {
  rt::TrainOptions t;
  t.micro_batches = micro_batches;
  t.lr = {1e-2, 1e-3, 2, 50};
  return Trainer<T>(mo::ReferenceAttention<T>(spec, o), mo::ReferenceExperts<T>(spec, o), spec, t,
                    rt::StageOptions{seed, recompute});
}

struct Tokens {
  std::vector<int> in, tg;
  int sequences;
  rt::TokenBatch batch() const { return {in, tg, sequences}; }
};

Tokens random_tokens(int sequences, int seq_len, std::uint64_t seed) {
  mo::Rng rng(seed);
  Tokens t{{}, {}, sequences};
  for (int i = 0; i < sequences * seq_len; ++i) {
    t.in.push_back(static_cast<int>(rng.below(256)));
    t.tg.push_back(static_cast<int>(rng.below(256)));
  }
  return t;
}

// The step objective whose gradient compute_gradients() leaves in the stages.
template <class T>
double objective(Trainer<T>& tr, const Tokens& tok) {
  const auto st = tr.compute_gradients(tok.batch());
  return st.loss + st.aux_loss + st.z_loss;
}

// Every gradient entry of every parameter against a central difference.
void check_gradients(const dm::ModelSpec& spec, const mo::DecoderOptions& o, int micro_batches, std::uint64_t seed) {
  CAPTURE(seed);
  auto tr = make_trainer<double>(spec, o, micro_batches, {}, seed);
  const Tokens tok = random_tokens(2 * micro_batches, spec.seq_len, seed + 100);
  objective(tr, tok);
  std::vector<std::vector<double>> analytic;
  auto collect = [&](auto& set) {
    for (auto& s : set.slots()) analytic.emplace_back(s.grad->data(), s.grad->data() + s.grad->size());
  };
  collect(tr.attention().parameters());
  collect(tr.experts().parameters());
  std::size_t which = 0;
  double worst = 0;
  auto probe = [&](auto& set) {
    for (auto& s : set.slots()) {
      CAPTURE(s.name);
      const auto& g = analytic[which++];
      double scale = 1e-8;
      for (double v : g) scale = std::max(scale, std::abs(v));
      for (Eigen::Index i = 0; i < s.value->size(); ++i) {
        double& p = s.value->data()[i];
        const double keep = p, h = 1e-5;
        p = keep + h;
        const double up = objective(tr, tok);
        p = keep - h;
        const double down = objective(tr, tok);
        p = keep;
        const double fd = (up - down) / (2 * h);
        const double err = std::abs(fd - g[static_cast<std::size_t>(i)]) / scale;
        worst = std::max(worst, err);
        CAPTURE(i);
        REQUIRE(err < 1e-5);
      }
    }
  };
  probe(tr.attention().parameters());
  probe(tr.experts().parameters());
  MESSAGE("worst relative gradient error " << worst);
}

}  // namespace

TEST_CASE("whole-model gradients equal central finite differences (MoE, dense, shared, aux and z-loss)") {
  auto spec = small_spec();
  mo::DecoderOptions o;
  o.init_std = 0.3;  // larger weights: gradients well above rounding noise
  SUBCASE("all MoE, no router losses") { check_gradients(spec, o, 1, 1); }
  SUBCASE("aux and z-loss, two micro-batches") {
    o.aux_loss_coef = 0.05;
    o.z_loss_coef = 0.01;
    check_gradients(spec, o, 2, 2);
  }
  SUBCASE("dense first layer, shared expert, window, top-1") {
    spec.first_dense_layers = 1;
    spec.dense_ffn = 7;
    spec.shared_experts = 1;
    spec.shared_expert_ffn = 5;
    spec.sliding_window = 3;
    spec.top_k = 1;
    o.aux_loss_coef = 0.1;
    check_gradients(spec, o, 1, 3);
  }
}

TEST_CASE("recomputation and micro-batching reproduce the plain run") {
  const auto spec = small_spec();
  mo::DecoderOptions o;
  o.aux_loss_coef = 0.01;
  const Tokens tok = random_tokens(4, spec.seq_len, 11);
  auto plain = make_trainer<float>(spec, o, 2);
  auto recompute = make_trainer<float>(spec, o, 2, disagmoe::plan::Recompute::both(true));
  auto attention_only = make_trainer<float>(spec, o, 2, {true, false});  // a per-side plan's stages
  auto ffn_only = make_trainer<float>(spec, o, 2, {false, true});
  // The load-balancing loss is per micro-batch (as in Megatron-Core), so only without it
  // is the mean over micro-batches the full batch's loss.
  o.aux_loss_coef = 0;
  auto single = make_trainer<double>(spec, o, 1);
  auto split = make_trainer<double>(spec, o, 4);
  for (int s = 0; s < 3; ++s) {
    const auto a = plain.step(tok.batch());
    const auto b = recompute.step(tok.batch());
    CHECK(a.loss == b.loss);  // bitwise: the same computation, run again
    CHECK(a.grad_norm == b.grad_norm);
    for (auto* one_side : {&attention_only, &ffn_only}) {
      const auto e = one_side->step(tok.batch());
      CHECK(a.loss == e.loss);
      CHECK(a.grad_norm == e.grad_norm);
    }
    const auto c = single.step(tok.batch());
    const auto d = split.step(tok.batch());
    CHECK(c.loss == doctest::Approx(d.loss).epsilon(1e-9));  // the mean over micro-batches
  }
  auto& pa = plain.attention().parameters().slots();
  auto& pb = recompute.attention().parameters().slots();
  for (std::size_t i = 0; i < pa.size(); ++i) CHECK((*pa[i].value - *pb[i].value).norm() == 0.0f);
  auto& pe = plain.experts().parameters().slots();
  for (auto* one_side : {&attention_only, &ffn_only}) {
    auto& qa = one_side->attention().parameters().slots();
    auto& qe = one_side->experts().parameters().slots();
    for (std::size_t i = 0; i < pa.size(); ++i) CHECK((*pa[i].value - *qa[i].value).norm() == 0.0f);
    for (std::size_t i = 0; i < pe.size(); ++i) CHECK((*pe[i].value - *qe[i].value).norm() == 0.0f);
  }
  CHECK(plain.attention().in_flight() == 0);
  CHECK(plain.experts().in_flight() == 0);
}

TEST_CASE("the same seed gives the same run; another seed another model") {
  const auto spec = small_spec();
  const Tokens tok = random_tokens(2, spec.seq_len, 5);
  auto a = make_trainer<float>(spec, {}, 1, {}, 3);
  auto b = make_trainer<float>(spec, {}, 1, {}, 3);
  auto c = make_trainer<float>(spec, {}, 1, {}, 4);
  for (int s = 0; s < 2; ++s) {
    const double la = a.step(tok.batch()).loss, lb = b.step(tok.batch()).loss, lc = c.step(tok.batch()).loss;
    CHECK(la == lb);
    CHECK(la != lc);
  }
}

TEST_CASE("loss falls to near zero on a repeating text") {
  auto spec = small_spec();
  spec.hidden = 32;
  spec.heads = 4;
  spec.kv_heads = 2;
  spec.head_dim = 8;
  spec.expert_ffn = 32;
  spec.layers = 2;
  spec.seq_len = 16;
  const std::string text = "the quick brown fox. ";  // period 21: needs context beyond one byte
  std::string corpus;
  while (corpus.size() < 4000) corpus += text;
  rt::TrainOptions t;
  t.lr = {1e-2, 1e-3, 10, 300};
  auto tr = Trainer<float>(mo::ReferenceAttention<float>(spec, {}), mo::ReferenceExperts<float>(spec, {}), spec, t);
  mo::Rng rng(9);
  double first = 0, last = 0;
  for (int s = 0; s < 300; ++s) {
    Tokens tok{{}, {}, 8};
    for (int q = 0; q < 8; ++q) {
      const auto start = rng.below(corpus.size() - static_cast<std::size_t>(spec.seq_len) - 1);
      for (int i = 0; i < spec.seq_len; ++i) {
        tok.in.push_back(static_cast<unsigned char>(corpus[start + static_cast<std::size_t>(i)]));
        tok.tg.push_back(static_cast<unsigned char>(corpus[start + static_cast<std::size_t>(i) + 1]));
      }
    }
    const double loss = tr.step(tok.batch()).loss;
    if (s == 0) first = loss;
    last = loss;
  }
  MESSAGE("loss " << first << " -> " << last);
  CHECK(first > 5.0);  // about ln 256 = 5.55 at initialisation
  CHECK(last < 0.1);
}

TEST_CASE("bad batches and options are one clear error") {
  const auto spec = small_spec();
  auto tr = make_trainer<float>(spec, {}, 2);
  const Tokens odd = random_tokens(3, spec.seq_len, 1);
  CHECK_THROWS_WITH_AS(tr.step(odd.batch()), doctest::Contains("batch.sequences = 3"), dm::ConfigError);
  Tokens bad = random_tokens(2, spec.seq_len, 1);
  bad.in[3] = 300;
  CHECK_THROWS_WITH_AS(tr.step(bad.batch()), doctest::Contains("ids"), dm::ConfigError);
  Tokens bad_target = random_tokens(2, spec.seq_len, 1);
  bad_target.tg[7] = -1;  // fails in the head, after every layer's forward saved its state
  CHECK_THROWS_WITH_AS(tr.step(bad_target.batch()), doctest::Contains("targets"), dm::ConfigError);
  CHECK(tr.attention().in_flight() == 0);
  CHECK(tr.experts().in_flight() == 0);
  const Tokens good = random_tokens(2, spec.seq_len, 1);
  CHECK(std::isfinite(tr.step(good.batch()).loss));  // the trainer is usable again
  auto diverged = make_trainer<float>(spec, {}, 1);
  diverged.attention().parameters().slots()[3].value->setConstant(std::numeric_limits<float>::infinity());
  const auto before = *diverged.experts().parameters().slots()[0].value;
  CHECK_THROWS_WITH_AS(diverged.step(good.batch()), doctest::Contains("step 1 gradient norm = "), dm::ConfigError);
  CHECK((*diverged.experts().parameters().slots()[0].value - before).norm() == 0.0f);  // no update
  CHECK(diverged.steps() == 0);
  rt::TrainOptions t;
  t.micro_batches = 0;
  CHECK_THROWS_WITH_AS(rt::validate(t), doctest::Contains("TrainOptions.micro_batches = 0"), dm::ConfigError);
  auto heads = spec;
  heads.kv_heads = 3;
  CHECK_THROWS_WITH_AS(mo::ReferenceAttention<float>(heads, {}), doctest::Contains("kv_heads = 3"), dm::ConfigError);
  auto topk = spec;
  topk.top_k = 5;
  CHECK_THROWS_WITH_AS(mo::ReferenceAttention<float>(topk, {}), doctest::Contains("top_k = 5"), dm::ConfigError);
}

TEST_CASE("stages reject bad layouts and calls out of order, naming them") {
  auto spec = small_spec();
  spec.first_dense_layers = 1;
  spec.dense_ffn = 4;
  const mo::ReferenceAttention<float> attn(spec, {});
  const mo::ReferenceExperts<float> experts(spec, {});
  CHECK_THROWS_WITH_AS(rt::AttentionStage(attn, spec, {{1, 0}, false, false}),
                       doctest::Contains("AttentionStageLayout.layers[1] = 0: expected ascending"), dm::ConfigError);
  CHECK_THROWS_WITH_AS(rt::AttentionStage(attn, spec, {{3}, false, false}),
                       doctest::Contains("AttentionStageLayout.layers[0] = 3: expected a layer in [0, 3)"), dm::ConfigError);
  CHECK_THROWS_WITH_AS(rt::ExpertStage(experts, spec, {{0}, {{0, 1}}}),
                       doctest::Contains("ExpertStageLayout.layers[0] = 0: expected an MoE layer"), dm::ConfigError);
  CHECK_THROWS_WITH_AS(rt::ExpertStage(experts, spec, {{1}, {{1, 0}}}),
                       doctest::Contains("ExpertStageLayout.experts[0][1] = 0"), dm::ConfigError);

  rt::AttentionStage stage(attn, spec, {{1, 2}, false, false});
  mo::Rng rng(1);
  const auto h = mo::normal_matrix<float>(spec.seq_len, spec.hidden, 1.0, rng);
  stage.forward(1, 0, h);
  CHECK_THROWS_WITH_AS(stage.forward(1, 0, h), doctest::Contains("forward(layer 1, micro-batch 0) = \"already in flight\""),
                       dm::ConfigError);
  CHECK_THROWS_WITH_AS(stage.backward_weight(1, 0), doctest::Contains("backward_weight(layer 1, micro-batch 0)"),
                       dm::ConfigError);
  CHECK_THROWS_WITH_AS(stage.forward(0, 0, h), doctest::Contains("AttentionStage layer = 0"), dm::ConfigError);
  CHECK_THROWS_WITH_AS(stage.embed(0, std::vector<int>{1}, const_cast<mo::Matrix<float>&>(h)),
                       doctest::Contains("AttentionStage.embed"), dm::ConfigError);
  CHECK(stage.in_flight() == 1);
  stage.release(1, 0);
  CHECK(stage.in_flight() == 0);
}

TEST_CASE("an expert stage holding some experts computes what the full stage computes for them") {
  const auto spec = small_spec();
  const mo::ReferenceExperts<double> compute(spec, {});
  rt::ExpertStage<mo::ReferenceExperts<double>> full(compute, spec, rt::all_experts(spec));
  rt::ExpertStage<mo::ReferenceExperts<double>> part(compute, spec, {{0, 1, 2}, {{1, 3}, {1, 3}, {1, 3}}});
  mo::Rng rng(4);
  // Full stage: 4 experts with 2, 0, 3, 1 rows; the part holds experts 1 (0 rows) and 3 (1 row).
  const auto rows = mo::normal_matrix<double>(6, spec.hidden, 1.0, rng);
  const std::vector<std::int64_t> full_off{0, 2, 2, 5, 6}, part_off{0, 0, 1};
  mo::Matrix<double> y_full, y_part;
  full.forward(2, 0, full_off, rows, y_full);
  part.forward(2, 0, part_off, mo::Matrix<double>(rows.bottomRows(1)), y_part);
  CHECK((y_full.bottomRows(1) - y_part).norm() == 0.0);  // same weights: the seed stream is per (layer, expert)
  const auto dy = mo::normal_matrix<double>(6, spec.hidden, 1.0, rng);
  mo::Matrix<double> dx_full, dx_part;
  full.backward_input(2, 0, dy, dx_full);
  part.backward_input(2, 0, mo::Matrix<double>(dy.bottomRows(1)), dx_part);
  CHECK((dx_full.bottomRows(1) - dx_part).norm() == 0.0);
  full.backward_weight(2, 0);
  part.backward_weight(2, 0);
  const auto& fs = full.parameters().slots();
  const auto& ps = part.parameters().slots();
  auto find = [](const auto& slots, const std::string& name) {
    for (const auto& s : slots)
      if (s.name == name) return s.grad;
    FAIL("no slot " << name);
    return slots.front().grad;
  };
  for (const char* w : {"w1", "w2", "w3"}) {
    const std::string e1 = std::string("model.layers.2.block_sparse_moe.experts.1.") + w + ".weight";
    const std::string e3 = std::string("model.layers.2.block_sparse_moe.experts.3.") + w + ".weight";
    CHECK(find(ps, e1)->norm() == 0.0);  // zero rows: a zero gradient
    CHECK((*find(fs, e3) - *find(ps, e3)).norm() == 0.0);
  }
}

namespace {
// A compute that counts its forward calls (copies share the count): a recomputing stage
// calls forward twice per layer and micro-batch, once in forward and once in backward.
template <class Base>
struct CountingForward : Base {
  explicit CountingForward(Base b) : Base(std::move(b)) {}
  std::shared_ptr<long> forwards = std::make_shared<long>(0);
  template <class... A>
  void forward(A&&... a) const {
    ++*forwards;
    Base::forward(std::forward<A>(a)...);
  }
};
}  // namespace

TEST_CASE("recomputation per side: each stage recomputes by its own flag only") {
  const auto spec = small_spec();
  const Tokens tok = random_tokens(4, spec.seq_len, 13);
  using A = CountingForward<mo::ReferenceAttention<float>>;
  using E = CountingForward<mo::ReferenceExperts<float>>;
  static_assert(rt::attention_compute<A> && rt::expert_compute<E>);
  const auto run = [&](disagmoe::plan::Recompute rc) {
    rt::TrainOptions t;
    t.micro_batches = 2;
    t.lr = {1e-2, 1e-3, 2, 50};
    A a(mo::ReferenceAttention<float>(spec, {}));
    E e(mo::ReferenceExperts<float>(spec, {}));
    rt::ColocatedTrainer<A, E> trainer(a, e, spec, t, rt::StageOptions{7, rc});
    const double loss = trainer.step(tok.batch()).loss;
    return std::tuple{*a.forwards, *e.forwards, loss};
  };
  const auto [a0, e0, l0] = run({false, false});
  REQUIRE(a0 > 0);
  REQUIRE(e0 > 0);
  for (const disagmoe::plan::Recompute rc :
       {disagmoe::plan::Recompute{true, false}, {false, true}, {true, true}}) {
    const auto [a1, e1, l1] = run(rc);
    CAPTURE(disagmoe::plan::to_string(rc));
    CHECK(a1 == (rc.attention ? 2 * a0 : a0));
    CHECK(e1 == (rc.ffn ? 2 * e0 : e0));
    CHECK(l1 == l0);  // bitwise: the same computation, run again
  }
}
