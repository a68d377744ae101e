// SPDX-License-Identifier: Apache-2.0
// Trainer checkpoints: resuming equals the uninterrupted run bit for bit, the tensors
// carry Hugging Face's Mixtral names and shapes, and a corrupt or foreign checkpoint is
// one IoError that leaves the trainer as it was.
#include <disagmoe/model/reference_attention.hpp>
#include <disagmoe/model/reference_experts.hpp>
#include <disagmoe/runtime/checkpoint.hpp>
#include <disagmoe/runtime/colocated_trainer.hpp>

#include "temp_dir.hpp"

#include <doctest/doctest.h>

#include <filesystem>
#include <cmath>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <vector>

namespace dm = disagmoe;
namespace rt = disagmoe::runtime;
namespace mo = disagmoe::model;
namespace fs = std::filesystem;
using disagmoe::test::TempDir;

namespace {

using FloatTrainer = rt::ColocatedTrainer<mo::ReferenceAttention<float>, mo::ReferenceExperts<float>>;

dm::ModelSpec spec_of(int hidden) {
  dm::ModelSpec m;
  m.layers = 2;
  m.hidden = hidden;
  m.heads = 2;
  m.kv_heads = 1;
  m.head_dim = hidden / 2;
  m.experts = 3;
  m.top_k = 2;
  m.expert_ffn = 10;
  m.vocab = 256;
  m.seq_len = 6;
  return m;
}

FloatTrainer make(const dm::ModelSpec& m) {
  mo::DecoderOptions o;
  o.aux_loss_coef = 0.01;
  o.z_loss_coef = 0.001;
  rt::TrainOptions t;
  t.micro_batches = 2;
  t.lr = {1e-2, 1e-3, 1, 6};
  return FloatTrainer(mo::ReferenceAttention<float>(m, o), mo::ReferenceExperts<float>(m, o), m, t, {5, {}});
}

// A random batch drawn from `rng` (the data position a checkpoint must carry).
double train_step(FloatTrainer& tr, mo::Rng& rng) {
  std::vector<int> in, tg;
  for (int i = 0; i < 4 * tr.spec().seq_len; ++i) {
    in.push_back(static_cast<int>(rng.below(256)));
    tg.push_back(static_cast<int>(rng.below(256)));
  }
  return tr.step({in, tg, 4}).loss;
}

std::vector<float> all_values(FloatTrainer& tr) {
  std::vector<float> v;
  for (auto* set : {&tr.attention().parameters(), &tr.experts().parameters()})
    for (auto& s : set->slots()) v.insert(v.end(), s.value->data(), s.value->data() + s.value->size());
  return v;
}

}  // namespace

TEST_CASE("resume continues bit for bit") {
  TempDir dir;
  const auto m = spec_of(8);
  auto straight = make(m);
  mo::Rng rng(3);
  for (int s = 0; s < 2; ++s) train_step(straight, rng);
  rt::save_checkpoint(dir.path, straight, "{}", {rng.state()});
  std::vector<double> expected;
  for (int s = 0; s < 3; ++s) expected.push_back(train_step(straight, rng));

  auto resumed = make(m);
  mo::Rng rng2(999);
  rng2.set_state(rt::load_checkpoint(dir.path, resumed).data_rng);
  CHECK(resumed.steps() == 2);
  for (int s = 0; s < 3; ++s) CHECK(train_step(resumed, rng2) == expected[static_cast<std::size_t>(s)]);
  CHECK(all_values(resumed) == all_values(straight));
}

TEST_CASE("model.safetensors has Mixtral's tensor names and shapes") {
  TempDir dir;
  const auto m = spec_of(8);
  auto tr = make(m);
  rt::save_checkpoint(dir.path, tr, "{\"model_type\": \"mixtral\"}", {});
  const auto tensors = rt::read_safetensors(dir.path / "model.safetensors");
  std::set<std::string> expected{"model.embed_tokens.weight", "model.norm.weight", "lm_head.weight"};
  for (int l = 0; l < m.layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    for (const char* n : {"self_attn.q_proj.weight", "self_attn.k_proj.weight", "self_attn.v_proj.weight",
                          "self_attn.o_proj.weight", "block_sparse_moe.gate.weight", "input_layernorm.weight",
                          "post_attention_layernorm.weight"})
      expected.insert(p + n);
    for (int e = 0; e < m.experts; ++e)
      for (const char* w : {"w1", "w2", "w3"})
        expected.insert(p + "block_sparse_moe.experts." + std::to_string(e) + "." + w + ".weight");
  }
  std::set<std::string> found;
  for (const auto& [name, t] : tensors) found.insert(name);
  CHECK(found == expected);
  using Shape = std::vector<std::int64_t>;
  CHECK(tensors.at("model.embed_tokens.weight").shape == Shape{256, 8});
  CHECK(tensors.at("model.layers.1.self_attn.k_proj.weight").shape == Shape{4, 8});  // kv_heads * head_dim
  CHECK(tensors.at("model.layers.0.block_sparse_moe.experts.2.w2.weight").shape == Shape{8, 10});
  CHECK(tensors.at("model.layers.0.input_layernorm.weight").shape == Shape{8});
  std::ifstream cfg(dir.path / "config.json");
  std::string text((std::istreambuf_iterator<char>(cfg)), {});
  CHECK(text.find("mixtral") != std::string::npos);
}

TEST_CASE("a corrupt or foreign checkpoint is one IoError and changes nothing") {
  TempDir dir;
  auto tr = make(spec_of(8));
  mo::Rng rng(1);
  train_step(tr, rng);
  rt::save_checkpoint(dir.path, tr, "{}", {rng.state()});
  SUBCASE("another shape") {
    auto other = make(spec_of(12));
    const auto before = all_values(other);
    CHECK_THROWS_WITH_AS(rt::load_checkpoint(dir.path, other),
                         doctest::Contains("model.embed_tokens.weight\" shape = [256, 8]: expected [256, 12]"),
                         dm::IoError);
    CHECK(all_values(other) == before);
    CHECK(other.steps() == 0);
  }
  SUBCASE("truncated model file") {
    const auto f = dir.path / "model.safetensors";
    fs::resize_file(f, fs::file_size(f) - 5);
    auto fresh = make(spec_of(8));
    CHECK_THROWS_AS(rt::load_checkpoint(dir.path, fresh), dm::IoError);
  }
  SUBCASE("a flipped byte in the state file") {
    const auto f = dir.path / "trainer_state.bin";
    std::fstream io(f, std::ios::in | std::ios::out | std::ios::binary);
    io.seekp(40);
    io.put('\x7f');
    io.close();
    auto fresh = make(spec_of(8));
    CHECK_THROWS_WITH_AS(rt::load_checkpoint(dir.path, fresh), doctest::Contains("checksum"), dm::IoError);
  }
  SUBCASE("a model file from another save") {
    const auto other_dir = dir.path / "other";
    train_step(tr, rng);
    rt::save_checkpoint(other_dir, tr, "{}", {rng.state()});
    fs::copy_file(other_dir / "model.safetensors", dir.path / "model.safetensors", fs::copy_options::overwrite_existing);
    auto fresh = make(spec_of(8));
    const auto before = all_values(fresh);
    CHECK_THROWS_WITH_AS(rt::load_checkpoint(dir.path, fresh), doctest::Contains("come from different saves"),
                         dm::IoError);
    CHECK(all_values(fresh) == before);
  }
  SUBCASE("a diverged model") {
    tr.attention().parameters().slots()[1].value->data()[0] = std::nanf("");
    rt::save_checkpoint(dir.path / "nan", tr, "{}", {});
    auto fresh = make(spec_of(8));
    CHECK_THROWS_WITH_AS(rt::load_checkpoint(dir.path / "nan", fresh), doctest::Contains("expected finite values"),
                         dm::IoError);
  }
  SUBCASE("run settings travel with the checkpoint") {
    rt::save_checkpoint(dir.path / "s", tr, "{}", {rng.state(), {{"lr", "0.003"}, {"seed", "5"}}});
    auto fresh = make(spec_of(8));
    const auto st = rt::load_checkpoint(dir.path / "s", fresh);
    CHECK(st.settings == std::map<std::string, std::string>{{"lr", "0.003"}, {"seed", "5"}});
    CHECK(st.data_rng == rng.state());
  }
  SUBCASE("missing directory") {
    auto fresh = make(spec_of(8));
    CHECK_THROWS_AS(rt::load_checkpoint(dir.path / "nope", fresh), dm::IoError);
  }
}
