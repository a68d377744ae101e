// SPDX-License-Identifier: Apache-2.0
#include <disagmoe/limits.hpp>
#include <disagmoe/spec/model_size.hpp>
#include <disagmoe/spec/presets.hpp>

#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <limits>

using namespace disagmoe;

namespace {
constexpr std::int64_t kMax = std::numeric_limits<std::int64_t>::max();
}  // namespace

TEST_CASE("checked arithmetic returns exact results and names the field on overflow") {
  CHECK(checked_mul(3037000499, 3037000499, "n") == 9223372030926249001);  // largest square below 2^63
  CHECK(checked_mul(-4, 5, "n") == -20);
  CHECK(checked_add(kMax - 1, 1, "n") == kMax);
  CHECK_THROWS_WITH(checked_mul(3037000500, 3037000500, "tokens"),
                    "tokens = 3037000500 * 3037000500: expected a size that fits 64 bits");
  CHECK_THROWS_WITH(checked_add(kMax, 1, "bytes"), "bytes = 9223372036854775807 + 1: expected a size that fits 64 bits");
  CHECK_THROWS_AS(checked_mul(std::numeric_limits<std::int64_t>::min(), -1, "x"), ConfigError);
}

TEST_CASE("floating-point checks reject NaN, infinities and values out of range") {
  CHECK_NOTHROW(expect_finite_in("f", 0.5, 0, 1, true));
  CHECK_NOTHROW(expect_finite_in("f", 0, 0, 1, true));
  CHECK_THROWS_WITH(expect_finite_in("--sm-fraction", 1, 0, 1, true),
                    "--sm-fraction = 1: expected a finite number in [0, 1)");
  CHECK_THROWS_WITH(expect_finite_in("f", std::nan(""), 0, 1), "f = nan: expected a finite number in [0, 1]");
  CHECK_THROWS_AS(expect_finite_in("f", std::numeric_limits<double>::infinity(), 0, 1e308), ConfigError);
  CHECK_THROWS_AS(expect_finite_in("f", -0.5, 0, 1), ConfigError);
  CHECK_NOTHROW(expect_in("n", 7, 1, 7));
  CHECK_THROWS_WITH(expect_in("n", 8, 1, 7), "n = 8: expected an integer in [1, 7]");
}

TEST_CASE("budgets: memory and output estimates above the limit are errors, the limit is overridable") {
  const Limits saved = limits();
  limits().max_memory_bytes = std::int64_t{1} << 30;
  CHECK_NOTHROW(expect_memory("--experts", 8, double(1 << 30), "stats"));
  CHECK_THROWS_WITH(expect_memory("--experts", 9, double(std::int64_t{2} << 30), "stats"),
                    "--experts = 9: expected a size whose stats (2 GiB) fits the budget (1 GiB; raise it with --max-memory)");
  limits().max_memory_bytes = std::int64_t{4} << 30;
  CHECK_NOTHROW(expect_memory("--experts", 9, double(std::int64_t{2} << 30), "stats"));
  CHECK_THROWS_AS(expect_output("--tokens", 1, 1e30, "trace"), ConfigError);
  limits().max_ops = 100;
  CHECK_NOTHROW(expect_work("--chunks", 4, 100, "timeline"));
  CHECK_THROWS_WITH(expect_work("--chunks", 5, 101, "timeline"),
                    "--chunks = 5: expected a size whose timeline (101 ops) fits the work budget (100 ops; raise it "
                    "with --max-ops)");
  // gzip: a total limit and, above ratio_check_bytes, a ratio limit.
  limits().max_decompressed_bytes = 1000;
  limits().ratio_check_bytes = 100;
  CHECK_NOTHROW(expect_decompressed("corpus", "a.gz", 10, 100));   // 10x, at the ratio threshold
  CHECK_THROWS_AS(expect_decompressed("corpus", "a.gz", 1, 500), IoError);   // 500x
  CHECK_NOTHROW(expect_decompressed("corpus", "a.gz", 500, 1000));
  CHECK_THROWS_AS(expect_decompressed("corpus", "a.gz", 900, 1001), IoError);  // over the total
  limits() = saved;
}

TEST_CASE("spec limits: every preset passes, sizes past them name the field, counts never go negative") {
  for (const auto& n : model_preset_names()) {
    const ModelSpec m = model_preset(n);
    CHECK_NOTHROW(validate(m));
    CHECK(total_params(m) > 0);
  }
  for (const auto& n : cluster_preset_names()) CHECK_NOTHROW(validate(cluster_preset(n)));
  ModelSpec m = model_preset("olmoe-1b-7b");
  m.hidden = 2000000000;
  CHECK_THROWS_WITH(validate(m), "ModelSpec.hidden = 2000000000: expected an integer in [1, 1048576]");
  // Inside every per-field limit the product can still pass 64 bits: an error, not a wrap.
  m = model_preset("olmoe-1b-7b");
  m.hidden = max_size::kHidden;
  m.experts = max_size::kExperts;
  m.expert_ffn = max_size::kFfn;
  m.layers = max_size::kLayers;
  m.first_dense_layers = 0;
  CHECK_NOTHROW(validate(m));
  CHECK_THROWS_WITH((void)total_params(m), doctest::Contains("ModelSpec parameter count = "));
  ClusterSpec c = cluster_preset("h100");
  c.gpu.peak_flops_bf16 = std::nan("");
  CHECK_THROWS_WITH(validate(c), "ClusterSpec.gpu.peak_flops_bf16 = nan: expected a finite number in [1, 1e+21]");
  c = cluster_preset("h100");
  CHECK_THROWS_WITH(scaled_to_nodes(c, 1 << 20), "nodes = 1048576: expected an integer in [1, 65536]");
}
