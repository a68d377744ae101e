// SPDX-License-Identifier: Apache-2.0
// disagmoe-train-quickstart: the README's training example, built and run by ctest so it
// stays true. Trains the "tiny" preset, narrowed to a test's budget, on a text of
// `--text FILE` (default: a generated repeating sentence) and prints the loss as it falls.
#include <disagmoe/disagmoe.hpp>

#include "../common/cli_main.hpp"

#include <iostream>
#include <string>
#include <vector>

int main(int argc, char** argv) {
  CLI::App app{"The README's training example: a small MoE learns a text.", "disagmoe-train-quickstart"};
  std::string text;
  int steps = 60;
  app.add_option("--text", text, "training text (default: a repeating sentence)");
  app.add_option("--steps", steps, "optimizer steps")->capture_default_str();
  return disagmoe::cli::run_main(app, argc, argv, [&] {
    namespace rt = disagmoe::runtime;
    namespace mo = disagmoe::model;
    disagmoe::ModelSpec spec = mo::train_preset("tiny");  // shapes, as the planner reads them
    spec.layers = 2;                                      // a test's budget
    spec.hidden = 64;
    spec.expert_ffn = 64;
    spec.head_dim = spec.hidden / spec.heads;
    mo::DecoderOptions opt{.aux_loss_coef = 0.01, .z_loss_coef = 1e-3};
    rt::TrainOptions train{.micro_batches = 2, .lr = {1e-2, 1e-3, 10, steps}};
    rt::ColocatedTrainer<mo::ReferenceAttention<float>, mo::ReferenceExperts<float>> trainer(
        mo::ReferenceAttention<float>(spec, opt), mo::ReferenceExperts<float>(spec, opt), spec, train);
    std::vector<std::uint8_t> bytes;
    if (text.empty()) {
      const std::string sentence = "the quick brown fox jumps over the lazy dog. ";
      while (bytes.size() < 8000) bytes.insert(bytes.end(), sentence.begin(), sentence.end());
    } else {
      bytes = rt::read_corpus(text);
    }
    rt::ByteCorpus corpus(std::move(bytes), spec.seq_len);
    mo::Rng rng(1);
    for (int step = 0; step < steps; ++step) {
      rt::Batch b = corpus.sample_train(8, rng);
      rt::StepStats st = trainer.step({b.inputs, b.targets, b.sequences});  // st.loss, st.grad_norm, st.lr
      if (step % 10 == 0 || step + 1 == steps) std::cout << "step " << step << " loss " << st.loss << '\n';
    }
    const rt::Batch val = corpus.validation(64);
    std::cout << "validation loss " << trainer.evaluate({val.inputs, val.targets, val.sequences}) << '\n';
    return 0;
  });
}
