// SPDX-License-Identifier: Apache-2.0
/// @file checkpoint.hpp
/// Checkpoints of a trainer, in a directory:
///  - `model.safetensors`: every parameter under its Hugging Face name (safetensors.hpp),
///    so that `MixtralForCausalLM` loads a model of Mixtral's shape;
///  - `config.json`: the model's configuration, written as given by the caller, for
///    Hugging Face tools; loading never reads it (the shapes and settings it needs are
///    checked from the other two files);
///  - `trainer_state.bin`: the AdamW moments of every parameter ("m:" / "v:" + name), the
///    step, the data sampler's RNG state, a fingerprint of the parameter names and
///    shapes and a hash of the weights, in the checksummed state file of state_file.hpp.
/// Loading checks every tensor's presence, shape and finiteness and that the two files
/// come from one save before it changes anything: a checkpoint of another model, a
/// model file from another save or a diverged one is one IoError naming what differs.
/// The caller's run settings travel as string metadata of model.safetensors.
#pragma once

#include <disagmoe/error.hpp>
#include <disagmoe/model/random.hpp>
#include <disagmoe/runtime/safetensors.hpp>
#include <disagmoe/runtime/state_file.hpp>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <map>
#include <ostream>
#include <span>
#include <sstream>
#include <string>
#include <type_traits>
#include <vector>

namespace disagmoe::runtime {

/// What a checkpoint carries besides parameters, moments and the step.
struct CheckpointState {
  model::Rng::State data_rng{};  ///< the training-data sampler's position
  /// The caller's run settings (hyper-parameters, data identity), stored as metadata of
  /// model.safetensors so a resume can insist on the same run.
  std::map<std::string, std::string> settings;
};

namespace detail {

inline std::string shape_string(std::span<const std::int64_t> shape) {
  std::string s = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

/// Every parameter slot of a trainer, attention stage first, in the stages' order.
template <class Trainer>
auto checkpoint_slots(Trainer& tr) {
  std::vector<std::remove_reference_t<decltype(tr.attention().parameters().slots()[0])>*> all;
  for (auto& s : tr.attention().parameters().slots()) all.push_back(&s);
  for (auto& s : tr.experts().parameters().slots()) all.push_back(&s);
  return all;
}

/// FNV-1a 64 over every weight's bytes: the state file matches only its own model file.
template <class Slots>
std::uint64_t weights_hash(const Slots& slots) {
  std::uint64_t h = 0xcbf29ce484222325ull;
  for (const auto* s : slots) h = fnv1a64(h, s->value->data(), static_cast<std::size_t>(s->value->size()) * sizeof(float));
  return h;
}

/// FNV-1a 64 over the names and shapes: a state file matches only its own model.
template <class Slots>
std::uint64_t layout_fingerprint(const Slots& slots) {
  std::uint64_t h = 0xcbf29ce484222325ull;
  for (const auto* s : slots) {
    h = fnv1a64(h, s->name.data(), s->name.size() + 1);
    h = fnv1a64(h, s->shape.data(), s->shape.size() * sizeof(std::int64_t));
  }
  return h;
}

}  // namespace detail

/// Writes `tr`'s checkpoint to `dir` (created if needed); each file is written
/// atomically. `config_json` is the text of config.json. Float parameters only.
template <class Trainer>
void save_checkpoint(const std::filesystem::path& dir, Trainer& tr, const std::string& config_json,
                     const CheckpointState& state) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) fail<IoError>("checkpoint directory", dir.string(), "a directory that can be created (" + ec.message() + ")");
  const auto slots = detail::checkpoint_slots(tr);
  static_assert(std::is_same_v<std::remove_reference_t<decltype(*slots[0]->value->data())>, float>,
                "checkpoints hold float32 parameters");
  std::vector<TensorView> views;
  StateWriter st;
  for (const auto* s : slots) {
    const std::size_t n = static_cast<std::size_t>(s->value->size());
    views.push_back({s->name, s->shape, {s->value->data(), n}});
    st.put("m:" + s->name, std::span<const float>(s->m.data(), n));
    st.put("v:" + s->name, std::span<const float>(s->v.data(), n));
  }
  std::map<std::string, std::string> meta = state.settings;
  meta["format"] = "pt";  // what transformers' loader expects
  write_safetensors(dir / "model.safetensors", views, meta);
  detail::write_file_atomically(dir / "config.json", [&](std::ostream& out) { out << config_json << '\n'; });
  const std::array<std::uint64_t, 1> step{static_cast<std::uint64_t>(tr.steps())};
  const std::array<std::uint64_t, 1> fp{detail::layout_fingerprint(slots)}, wh{detail::weights_hash(slots)};
  st.put("step", step);
  st.put("weights_hash", wh);
  st.put("data_rng", state.data_rng);
  st.put("layout_fingerprint", fp);
  st.write(dir / "trainer_state.bin");
}

/// Restores `tr` (parameters, moments, step) from `dir` and returns the data state.
/// IoError naming the file and tensor for a missing, corrupt or mismatched checkpoint;
/// `tr` is unchanged unless every check passes.
template <class Trainer>
CheckpointState load_checkpoint(const std::filesystem::path& dir, Trainer& tr) {
  const auto slots = detail::checkpoint_slots(tr);
  const auto model_file = dir / "model.safetensors";
  const auto contents = read_safetensors_with_metadata(model_file);
  const auto& tensors = contents.tensors;
  const StateReader st(dir / "trainer_state.bin");
  const std::string where = model_file.string() + ": tensor ";
  for (const auto* s : slots) {
    const auto it = tensors.find(s->name);
    if (it == tensors.end())
      fail<IoError>(where + '"' + s->name + '"', Verbatim{"missing"},
                    "present (a checkpoint of another model shape?)");
    if (it->second.shape != s->shape)
      fail<IoError>(where + '"' + s->name + "\" shape", Verbatim{detail::shape_string(it->second.shape)},
                    detail::shape_string(s->shape) + " (a checkpoint of another model shape?)");
  }
  if (tensors.size() != slots.size())
    fail<IoError>(model_file.string() + ": tensors", tensors.size(),
                  std::to_string(slots.size()) + ", this model's count (a checkpoint of another model shape?)");
  const std::uint64_t fp = st.u64("layout_fingerprint", 1)[0];
  if (fp != detail::layout_fingerprint(slots))
    fail<IoError>((dir / "trainer_state.bin").string() + ": layout_fingerprint", fp,
                  "the fingerprint of this model's parameters (state of another model?)");
  for (const auto* s : slots)
    for (const float v : tensors.at(s->name).data)
      if (!std::isfinite(v))
        fail<IoError>(where + '"' + s->name + '"', v, "finite values (a checkpoint of a diverged run?)");
  std::uint64_t file_hash = 0xcbf29ce484222325ull;  // as weights_hash, over the file's tensors
  for (const auto* s : slots) {
    const auto& data = tensors.at(s->name).data;
    file_hash = detail::fnv1a64(file_hash, data.data(), data.size() * sizeof(float));
  }
  if (const std::uint64_t h = st.u64("weights_hash", 1)[0]; h != file_hash)
    fail<IoError>((dir / "trainer_state.bin").string() + ": weights_hash", h,
                  "the hash of " + model_file.string() + " (the two files come from different saves)");
  const std::uint64_t step = st.u64("step", 1)[0];
  CheckpointState out;
  out.settings = contents.metadata;
  out.settings.erase("format");
  const auto rng = st.u64("data_rng", out.data_rng.size());
  for (const auto* s : slots) {  // read every moment before writing anything
    st.f32("m:" + s->name, static_cast<std::size_t>(s->value->size()));
    st.f32("v:" + s->name, static_cast<std::size_t>(s->value->size()));
  }
  for (auto* s : slots) {
    const auto n = static_cast<std::size_t>(s->value->size());
    const auto& data = tensors.at(s->name).data;
    std::copy(data.begin(), data.end(), s->value->data());
    const auto m = st.f32("m:" + s->name, n), v = st.f32("v:" + s->name, n);
    std::copy(m.begin(), m.end(), s->m.data());
    std::copy(v.begin(), v.end(), s->v.data());
  }
  tr.set_steps(static_cast<std::int64_t>(step));
  std::copy(rng.begin(), rng.end(), out.data_rng.begin());
  return out;
}

}  // namespace disagmoe::runtime
