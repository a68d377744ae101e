// SPDX-License-Identifier: Apache-2.0
// The model's own routing (ColocatedTrainer::routing) against the stages' forward, and an
// expert placement fitted to it (runtime/expert_placement.hpp) against a planted routing
// whose best placement and row counts are known in closed form.
#include "disaggregated_cases.hpp"

#include <disagmoe/model/reference_attention.hpp>
#include <disagmoe/model/reference_experts.hpp>
#include <disagmoe/runtime/colocated_trainer.hpp>
#include <disagmoe/runtime/expert_placement.hpp>

#include <doctest/doctest.h>

#include <cstdint>
#include <set>
#include <vector>

namespace dm = disagmoe;
namespace rt = disagmoe::runtime;
namespace mo = disagmoe::model;

namespace {

// The shared small model (disaggregated_cases.hpp) with a dense first layer, then two MoE.
dm::ModelSpec spec_with_dense_first() { return disaggregated_test::spec_of(3, 2, 1, 0); }

}  // namespace

TEST_CASE("routing: the top-k of every MoE layer, [token][MoE layer][slot], as the stages' forward chooses it") {
  const auto spec = spec_with_dense_first();
  using Trainer = rt::ColocatedTrainer<mo::ReferenceAttention<float>, mo::ReferenceExperts<float>>;
  Trainer tr(mo::ReferenceAttention<float>(spec, {}), mo::ReferenceExperts<float>(spec, {}), spec, rt::TrainOptions{});
  mo::Rng rng(3);
  const int sequences = 3;
  std::vector<int> in, tg;
  for (int i = 0; i < sequences * spec.seq_len; ++i) {
    in.push_back(static_cast<int>(rng.below(256)));
    tg.push_back(0);
  }
  const auto routing = tr.routing({in, tg, sequences});
  const std::size_t k = 2, moe = 2, s = static_cast<std::size_t>(spec.seq_len);
  REQUIRE(routing.size() == static_cast<std::size_t>(sequences) * s * moe * k);
  // Oracle for the first MoE layer (layer 1, after the dense layer 0), one sequence at a
  // time through the attention stage's own calls.
  for (int q = 0; q < sequences; ++q) {
    CAPTURE(q);
    const std::span<const int> ids(in.data() + static_cast<std::size_t>(q) * s, s);
    mo::Matrix<float> h;
    tr.attention().embed(7, ids, h);
    h = tr.attention().forward(0, 7, h).residual;
    const auto& top = tr.attention().forward(1, 7, h).topk_ids;
    for (std::size_t t = 0; t < s; ++t)
      for (std::size_t j = 0; j < k; ++j)
        CHECK(routing[((static_cast<std::size_t>(q) * s + t) * moe + 0) * k + j] ==
              top(static_cast<Eigen::Index>(t), static_cast<Eigen::Index>(j)));
    tr.attention().release_all();
  }
  for (std::size_t i = 0; i < routing.size(); i += k) {  // the second MoE layer: k distinct experts
    CHECK(routing[i] != routing[i + 1]);
    CHECK((routing[i] >= 0 && routing[i] < spec.experts));
  }
}

TEST_CASE("fit_expert_placement: planted pairs are placed together and every token needs one row") {
  // 8 experts, top-2, 2 F-ranks: every token picks one of the pairs {e, e + 4}. Contiguous
  // blocks (0-3 | 4-7) split every pair (2 rows per token); a placement that keeps the
  // pairs together needs 1 row per token, the least possible.
  dm::ModelSpec spec = spec_with_dense_first();
  spec.experts = 8;
  spec.layers = 3;  // layer 0 dense, layers 1 and 2 MoE
  mo::Rng rng(5);
  std::vector<std::int32_t> routing;
  const int tokens = 400;
  for (int t = 0; t < tokens; ++t)
    for (int layer = 0; layer < 2; ++layer) {
      const int e = static_cast<int>(rng.below(4));
      routing.push_back(e);
      routing.push_back(e + 4);
    }
  const auto fitted = rt::fit_expert_placement(spec, routing, 2);
  CHECK(fitted.rows_per_token_contiguous == doctest::Approx(2.0));
  CHECK(fitted.rows_per_token_fitted == doctest::Approx(1.0));
  REQUIRE(fitted.expert_rank.size() == 3 * 8u);
  for (int e = 0; e < 8; ++e) CHECK(fitted.expert_rank[static_cast<std::size_t>(e)] == e / 4);  // dense: contiguous
  for (int l = 1; l < 3; ++l) {
    std::set<int> per_rank[2];
    for (int e = 0; e < 4; ++e) {
      const auto at = [&](int x) { return fitted.expert_rank[static_cast<std::size_t>(l * 8 + x)]; };
      CHECK(at(e) == at(e + 4));
      per_rank[at(e)].insert(e);
    }
    CHECK(per_rank[0].size() == 2);  // balanced: two pairs per F-rank
    CHECK(per_rank[1].size() == 2);
  }
  CHECK_THROWS_WITH_AS((void)rt::fit_expert_placement(spec, routing, 3),
                       doctest::Contains("ffn ranks = 3: expected a divisor of the routed experts (8)"),
                       dm::ConfigError);
  routing.pop_back();
  CHECK_THROWS_WITH_AS((void)rt::fit_expert_placement(spec, routing, 2), doctest::Contains("routing.size()"),
                       dm::ConfigError);
}

TEST_CASE("fit_expert_replicas: the hot expert gets a copy where the load is low, and the load evens out") {
  // 8 experts, top-2, 2 F-ranks with contiguous primaries (0-3 | 4-7): every token picks
  // expert 0 and one other, so F-rank 0 serves 1 + 3/7 of the mean (10/7). With one
  // replica slot per rank, expert 0 (the largest load per copy) gets a copy on F-rank 1;
  // a token then takes expert 0 where its other expert is (send-once: no extra row), and
  // the load follows the other expert: 8/7 of the mean at most.
  dm::ModelSpec spec = spec_with_dense_first();
  spec.experts = 8;
  mo::Rng rng(9);
  std::vector<std::int32_t> routing;
  for (int t = 0; t < 2800; ++t)
    for (int layer = 0; layer < 2; ++layer) {
      routing.push_back(0);
      routing.push_back(1 + static_cast<int>(rng.below(7)));
    }
  std::vector<int> contiguous;
  for (int l = 0; l < spec.layers; ++l)
    for (int e = 0; e < 8; ++e) contiguous.push_back(e / 4);
  const auto fitted = rt::fit_expert_replicas(spec, routing, contiguous, 2, 1);
  REQUIRE(fitted.expert_replicas.size() == 3 * 8u);
  for (int e = 0; e < 8; ++e) CHECK(fitted.expert_replicas[static_cast<std::size_t>(e)].empty());  // dense layer 0
  for (int l = 1; l < 3; ++l) {
    CAPTURE(l);
    CHECK(fitted.expert_replicas[static_cast<std::size_t>(l * 8)] == std::vector<int>{1});
    int copies[2] = {0, 0};
    for (int e = 0; e < 8; ++e)
      for (const int r : fitted.expert_replicas[static_cast<std::size_t>(l * 8 + e)]) {
        CHECK(r != contiguous[static_cast<std::size_t>(l * 8 + e)]);
        ++copies[r];
      }
    CHECK(copies[0] <= 1);
    CHECK(copies[1] <= 1);
  }
  CHECK(fitted.max_load_over_mean_without == doctest::Approx(10.0 / 7).epsilon(0.03));
  CHECK(fitted.max_load_over_mean <= 8.0 / 7 * 1.03);
  const auto none = rt::fit_expert_replicas(spec, routing, contiguous, 2, 0);
  CHECK(none.max_load_over_mean == none.max_load_over_mean_without);
  CHECK_THROWS_WITH_AS((void)rt::fit_expert_replicas(spec, routing, contiguous, 2, 5), doctest::Contains("slots_per_gpu = 5"),
                       dm::ConfigError);
  CHECK_THROWS_WITH_AS((void)rt::fit_expert_replicas(spec, routing, contiguous, 3, 1), doctest::Contains("ffn ranks = 3"),
                       dm::ConfigError);
}
