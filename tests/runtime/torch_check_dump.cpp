// SPDX-License-Identifier: Apache-2.0
// Writes what tests/runtime/torch_reference.py checks against an independent PyTorch
// implementation: a Mixtral-shaped checkpoint (model.safetensors + config.json), one
// batch, and this library's loss terms and gradients on it.
//
//   torch_check_dump DIR
#include <disagmoe/io/hf_config.hpp>
#include <disagmoe/model/reference_attention.hpp>
#include <disagmoe/model/reference_experts.hpp>
#include <disagmoe/runtime/checkpoint.hpp>
#include <disagmoe/runtime/colocated_trainer.hpp>

#include <iostream>
#include <string>
#include <vector>

namespace dm = disagmoe;
namespace rt = disagmoe::runtime;
namespace mo = disagmoe::model;

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: torch_check_dump DIR\n";
    return 2;
  }
  const std::filesystem::path dir = argv[1];
  dm::ModelSpec m;
  m.layers = 2;
  m.hidden = 16;
  m.heads = 4;
  m.kv_heads = 2;
  m.head_dim = 4;
  m.experts = 4;
  m.top_k = 2;
  m.expert_ffn = 12;
  m.vocab = 256;
  m.seq_len = 8;
  m.sliding_window = 5;
  mo::DecoderOptions o;
  o.aux_loss_coef = 0.02;
  o.z_loss_coef = 0.001;
  o.init_std = 0.2;  // gradients well above float rounding
  rt::ColocatedTrainer<mo::ReferenceAttention<float>, mo::ReferenceExperts<float>> tr(
      mo::ReferenceAttention<float>(m, o), mo::ReferenceExperts<float>(m, o), m, rt::TrainOptions{},
      {11, {}});
  const int sequences = 3;
  mo::Rng rng(5);
  std::vector<int> in, tg;
  std::vector<float> fin, ftg;
  for (int i = 0; i < sequences * m.seq_len; ++i) {
    in.push_back(static_cast<int>(rng.below(256)));
    tg.push_back(static_cast<int>(rng.below(256)));
    fin.push_back(static_cast<float>(in.back()));
    ftg.push_back(static_cast<float>(tg.back()));
  }
  const rt::StepStats st = tr.compute_gradients({in, tg, sequences});
  rt::save_checkpoint(dir, tr, dm::io::mixtral_config(m, o).dump(2), {});
  const std::vector<std::int64_t> shape{sequences, m.seq_len};
  const std::vector<rt::TensorView> batch{{"inputs", shape, fin}, {"targets", shape, ftg}};
  rt::write_safetensors(dir / "batch.safetensors", batch);
  const std::vector<float> loss{static_cast<float>(st.loss)}, aux{static_cast<float>(st.aux_loss)},
      z{static_cast<float>(st.z_loss)};
  std::vector<rt::TensorView> expected{{"loss", {1}, loss}, {"aux_loss", {1}, aux}, {"z_loss", {1}, z}};
  for (auto* set : {&tr.attention().parameters(), &tr.experts().parameters()})
    for (auto& s : set->slots())
      expected.push_back({"grad:" + s.name, s.shape, {s.grad->data(), static_cast<std::size_t>(s.grad->size())}});
  rt::write_safetensors(dir / "expected.safetensors", expected);
  std::cout << "wrote " << dir.string() << ": loss " << st.loss << ", aux " << st.aux_loss << ", z " << st.z_loss << '\n';
  return 0;
}
