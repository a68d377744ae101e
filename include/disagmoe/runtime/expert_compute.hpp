// SPDX-License-Identifier: Apache-2.0
/// @file expert_compute.hpp
/// The `expert_compute` concept: the math of the expert side (DisagMoE's FFN workers).
/// Experts take grouped rows: the rows of all local experts sorted by expert, expert e
/// owning rows [offsets[e], offsets[e + 1]) (the layout MegaBlocks and Megatron-Core's
/// grouped GEMM use). An expert with zero rows is legal and gets a zero gradient.
///
/// Forward, backward-input and backward-weight are separate calls, as the schedules'
/// `kExpertForward`, `kExpertBackwardInput` and `kExpertBackwardWeight` ops are. Gates
/// are applied outside the compute, by the combine (see comm/m2n_channel.hpp): the
/// backward receives dL/d(expert output) already multiplied by the gate.
/// A disaggregated run calls one compute object from its worker's forward and backward
/// streams at once (runtime/worker_executor.hpp): the const member functions must be
/// safe to call concurrently (no shared mutable scratch).
#pragma once

#include <disagmoe/model/random.hpp>
#include <disagmoe/model/tensor.hpp>
#include <disagmoe/runtime/parameter.hpp>

#include <concepts>
#include <cstdint>
#include <span>
#include <vector>

namespace disagmoe::runtime {

/// Opt-in tag: a compute declares `using expert_compute_concept = expert_compute_tag;`.
struct expert_compute_tag {};

/// True when `C` opted in with an `expert_compute_concept` tag.
template <class C>
inline constexpr bool enable_expert_compute = requires {
  typename C::expert_compute_concept;
  requires std::derived_from<typename C::expert_compute_concept, expert_compute_tag>;
};

/// A compute `C` for the experts of one layer, on scalar `C::scalar_type`:
///  - `Weights` (one expert) and `Saved` (what a layer's experts keep for one micro-batch);
///  - `init(layer, expert, rng)` initialises expert `expert` of `layer` (ids at and
///    above the routed count are shared experts); `parameters(w)` lists its tensors;
///  - `forward(experts, offsets, rows, out, saved)`,
///    `backward_input(experts, d_out, saved, d_rows)`,
///    `backward_weight(saved, grads)` (accumulates into grads).
template <class C>
concept expert_compute =
    enable_expert_compute<C> && std::copy_constructible<C> &&
    requires(const C& c, typename C::Weights& w, std::span<const typename C::Weights> ws,
             std::span<typename C::Weights> gs, typename C::Saved& s,
             std::span<const std::int64_t> offsets, int layer, int expert, model::Rng& rng,
             const model::Matrix<typename C::scalar_type>& x, model::Matrix<typename C::scalar_type>& y) {
      requires std::floating_point<typename C::scalar_type>;
      requires std::default_initializable<typename C::Saved>;
      { c.init(layer, expert, rng) } -> std::same_as<typename C::Weights>;
      { c.parameters(w) } -> std::same_as<std::vector<NamedParameter<typename C::scalar_type>>>;
      c.forward(ws, offsets, x, y, s);
      c.backward_input(ws, x, s, y);
      c.backward_weight(s, gs);
    };

}  // namespace disagmoe::runtime
