// SPDX-License-Identifier: Apache-2.0
// disagmoe-afpipe-quickstart: the README's disaggregated training example, built and run
// by ctest so it stays true. The pipeline is one type composed from the schedule policy,
// the two computes and the transport; four worker threads (attention A0, A1 and FFN F0, F1: p = 2 pairs) train
// under AF-Pipe, and the result is compared with the colocated trainer on the same data.
#include <disagmoe/disagmoe.hpp>

#include "../common/cli_main.hpp"

#include <iostream>
#include <mutex>
#include <string>
#include <vector>

namespace rt = disagmoe::runtime;
namespace mo = disagmoe::model;
using Attention = mo::ReferenceAttention<float>;
using Experts = mo::ReferenceExperts<float>;
// The pipeline: AF-Pipe over worker threads. Swap the policy for disagmoe::schedule::OneFOneB
// or A2AOverlap to run colocated expert parallelism instead, the transport for
// disagmoe::mpi::Transport to run the workers as MPI ranks, or the computes for your own.
using Pipeline = rt::Pipeline<disagmoe::schedule::AFPipe, Attention, Experts, disagmoe::host::LoopbackTransport>;

int main(int argc, char** argv) {
  CLI::App app{"The README's AF-Pipe example: four worker threads train what one worker trains.",
               "disagmoe-afpipe-quickstart"};
  int steps = 30;
  app.add_option("--steps", steps, "optimizer steps")->capture_default_str();
  return disagmoe::cli::run_main(app, argc, argv, [&] {
    disagmoe::ModelSpec spec = mo::train_preset("tiny");
    spec.layers = 4;
    spec.hidden = 64;
    spec.expert_ffn = 64;
    spec.head_dim = spec.hidden / spec.heads;
    const mo::DecoderOptions opt{.aux_loss_coef = 0.01, .z_loss_coef = 1e-3};
    const rt::TrainOptions train{.micro_batches = 4, .lr = {1e-2, 1e-3, 10, steps}};
    rt::DisaggregatedOptions layout;
    layout.pairs = 2;  // A0, A1 hold attention of layers {0, 2}, {1, 3}; F0, F1 their experts

    std::vector<std::uint8_t> bytes;
    const std::string sentence = "the quick brown fox jumps over the lazy dog. ";
    while (bytes.size() < 8000) bytes.insert(bytes.end(), sentence.begin(), sentence.end());
    const rt::ByteCorpus corpus(std::move(bytes), spec.seq_len);

    std::vector<float> losses;
    disagmoe::host::LoopbackWorld world(2 * layout.pairs);  // one thread per worker
    disagmoe::host::run_ranks(world, [&](disagmoe::host::LoopbackTransport& t) {
      Pipeline trainer(disagmoe::schedule::AFPipe{}, Attention(spec, opt), Experts(spec, opt), spec, train, layout, t);
      mo::Rng rng(1);  // every worker draws the same batches
      for (int step = 0; step < steps; ++step) {
        const rt::Batch b = corpus.sample_train(8, rng);
        const rt::StepStats st = trainer.step({b.inputs, b.targets, b.sequences});  // collective
        if (t.rank() == 0) losses.push_back(static_cast<float>(st.loss));
      }
    });

    rt::ColocatedTrainer<Attention, Experts> colocated(Attention(spec, opt), Experts(spec, opt), spec, train);
    mo::Rng rng(1);
    bool same = true;
    for (int step = 0; step < steps; ++step) {
      const rt::Batch b = corpus.sample_train(8, rng);
      same = same && static_cast<float>(colocated.step({b.inputs, b.targets, b.sequences}).loss) == losses[step];
      if (step % 10 == 0 || step + 1 == steps) std::cout << "step " << step << " loss " << losses[step] << '\n';
    }
    std::cout << "AF-Pipe losses equal the colocated trainer's: " << (same ? "yes" : "no") << '\n';
    return same ? 0 : 1;
  });
}
