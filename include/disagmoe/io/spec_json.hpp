// SPDX-License-Identifier: Apache-2.0
/// @file spec_json.hpp
/// ModelSpec and ClusterSpec to and from JSON (needs `disagmoe::io`). Reading is
/// strict: unknown keys, wrong types and out-of-range values are errors naming the
/// JSON path ("$.gpu.hbm_bytes"). A document may start from a preset and override
/// fields: {"preset": "h800x128", "nodes": 4}.
#pragma once

#include <disagmoe/error.hpp>
#include <disagmoe/limits.hpp>
#include <disagmoe/spec/cluster_spec.hpp>
#include <disagmoe/spec/model_spec.hpp>
#include <disagmoe/spec/presets.hpp>

#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <set>
#include <string>
#include <string_view>
#include <system_error>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

namespace disagmoe::io {

using Json = nlohmann::json;

namespace detail {

template <class S, class T>
struct Field {
  std::string_view name;
  T S::*member;
};
template <class S, class T>
Field(std::string_view, T S::*) -> Field<S, T>;

// The serialised fields of each spec, in output order. One table drives reading,
// writing and the list of valid keys, so they cannot drift apart.
template <class S>
constexpr auto fields();

template <>
constexpr auto fields<ModelSpec>() {
  using M = ModelSpec;
  return std::tuple{Field{"name", &M::name}, Field{"layers", &M::layers}, Field{"hidden", &M::hidden},
                    Field{"heads", &M::heads}, Field{"kv_heads", &M::kv_heads}, Field{"head_dim", &M::head_dim},
                    Field{"first_dense_layers", &M::first_dense_layers},
                    Field{"moe_layer_interval", &M::moe_layer_interval}, Field{"experts", &M::experts},
                    Field{"shared_experts", &M::shared_experts}, Field{"top_k", &M::top_k},
                    Field{"expert_ffn", &M::expert_ffn}, Field{"shared_expert_ffn", &M::shared_expert_ffn},
                    Field{"dense_ffn", &M::dense_ffn}, Field{"vocab", &M::vocab},
                    Field{"tied_embeddings", &M::tied_embeddings}, Field{"qk_norm", &M::qk_norm},
                    Field{"attention_bias", &M::attention_bias}, Field{"sliding_window", &M::sliding_window},
                    Field{"sliding_window_interval", &M::sliding_window_interval},
                    Field{"seq_len", &M::seq_len}, Field{"micro_batch", &M::micro_batch},
                    Field{"dtype", &M::dtype}};
}

template <>
constexpr auto fields<GpuSpec>() {
  using G = GpuSpec;
  return std::tuple{Field{"name", &G::name}, Field{"peak_flops_fp32", &G::peak_flops_fp32},
                    Field{"peak_flops_bf16", &G::peak_flops_bf16}, Field{"peak_flops_fp8", &G::peak_flops_fp8},
                    Field{"hbm_bytes", &G::hbm_bytes}, Field{"hbm_bandwidth", &G::hbm_bandwidth}};
}

template <>
constexpr auto fields<ClusterSpec>() {
  using C = ClusterSpec;
  return std::tuple{Field{"name", &C::name}, Field{"nodes", &C::nodes}, Field{"gpus_per_node", &C::gpus_per_node},
                    Field{"gpu", &C::gpu}, Field{"intra_node_bandwidth", &C::intra_node_bandwidth},
                    Field{"intra_node_latency", &C::intra_node_latency},
                    Field{"nics_per_node", &C::nics_per_node}, Field{"nic_bandwidth", &C::nic_bandwidth},
                    Field{"nic_latency", &C::nic_latency},
                    Field{"kernel_comm_sm_fraction", &C::kernel_comm_sm_fraction},
                    Field{"rdma_comm_sm_fraction", &C::rdma_comm_sm_fraction}};
}

inline std::string type_name(const Json& j) { return j.type_name(); }

// A JSON value as an error message shows it: scalars as written (long strings cut),
// arrays and objects as [...] and {...}. Never dump(): it recurses and prints the
// whole value, so a deep or huge input would overflow the stack or flood the line.
inline Verbatim brief(const Json& j) {
  if (j.is_array()) return {"[...]"};
  if (j.is_object()) return {"{...}"};
  if (j.is_string() && j.get_ref<const std::string&>().size() > 64)
    return {Json(j.get_ref<const std::string&>().substr(0, 64)).dump(-1, ' ', false, Json::error_handler_t::replace) + "..."};
  return {j.dump(-1, ' ', false, Json::error_handler_t::replace)};
}

// Top-level specs may name a preset to start from; nested objects (the GPU) may not.
template <class S>
inline constexpr bool kHasPresets = std::is_same_v<S, ModelSpec> || std::is_same_v<S, ClusterSpec>;

template <class S>
void read_object(const Json& j, const std::string& path, S& out);

inline void read_value(const Json& j, const std::string& path, int& out) {
  if (!j.is_number_integer())
    fail<IoError>(path, brief(j), "an integer, not " + type_name(j));
  // Beyond 2^63 the value is unsigned in the document: named as written, not wrapped.
  if (j.is_number_unsigned() &&
      j.get<unsigned long long>() > static_cast<unsigned long long>(std::numeric_limits<int>::max()))
    fail<IoError>(path, j.get<unsigned long long>(), "an integer that fits 32 bits");
  const auto v = j.get<long long>();
  if (v < std::numeric_limits<int>::min() || v > std::numeric_limits<int>::max())
    fail<IoError>(path, v, "an integer that fits 32 bits");
  out = static_cast<int>(v);
}
inline void read_value(const Json& j, const std::string& path, double& out) {
  if (!j.is_number()) fail<IoError>(path, brief(j), "a number, not " + type_name(j));
  out = j.get<double>();
}
inline void read_value(const Json& j, const std::string& path, bool& out) {
  if (!j.is_boolean()) fail<IoError>(path, brief(j), "true or false, not " + type_name(j));
  out = j.get<bool>();
}
inline void read_value(const Json& j, const std::string& path, std::string& out) {
  if (!j.is_string()) fail<IoError>(path, brief(j), "a string, not " + type_name(j));
  out = j.get<std::string>();
}
inline void read_value(const Json& j, const std::string& path, DType& out) {
  if (!j.is_string()) fail<IoError>(path, brief(j), "a string (fp32, bf16, fp16, fp8), not " + type_name(j));
  try {
    out = parse_dtype(j.get<std::string>(), path);
  } catch (const ConfigError& e) {
    throw IoError(e.what());
  }
}
inline void read_value(const Json& j, const std::string& path, GpuSpec& out) { read_object(j, path, out); }

inline void write_value(Json& j, const GpuSpec& g);
template <class T>
void write_value(Json& j, const T& v) {
  if constexpr (std::is_same_v<T, DType>) j = std::string(to_string(v));
  else j = v;
}
inline void write_value(Json& j, const GpuSpec& g) {
  j = Json::object();
  std::apply([&](auto... f) { (write_value(j[std::string(f.name)], g.*f.member), ...); }, fields<GpuSpec>());
}

template <class S>
std::string key_list(bool allow_preset) {
  std::string s = allow_preset ? "preset" : "";
  std::apply([&](auto... f) { ((s += (s.empty() ? "" : ", ") + std::string(f.name)), ...); }, fields<S>());
  return s;
}

inline void load_preset(const std::string& name, ModelSpec& out) { out = model_preset(name); }
inline void load_preset(const std::string& name, ClusterSpec& out) { out = cluster_preset(name); }

template <class S>
void read_object(const Json& j, const std::string& path, S& out) {
  constexpr bool allow_preset = kHasPresets<S>;
  if (!j.is_object()) fail<IoError>(path, brief(j), "a JSON object, not " + type_name(j));
  if constexpr (allow_preset) {
    if (j.contains("preset")) {  // the base first, then the overrides
      std::string name;
      read_value(j.at("preset"), path + ".preset", name);
      try {
        load_preset(name, out);
      } catch (const ConfigError& e) {
        fail<IoError>(path + ".preset", name, std::string("a preset name; ") + e.what());
      }
    }
  }
  for (const auto& [key, value] : j.items()) {
    if (allow_preset && key == "preset") continue;
    bool known = false;
    std::apply([&, &key = key, &value = value](auto... f) {
      ((f.name == key ? (read_value(value, path + "." + key, out.*f.member), known = true) : false), ...);
    }, fields<S>());
    if (!known) fail<IoError>(path + "." + key, "(unknown key)", "one of: " + key_list<S>(allow_preset));
  }
}

template <class S>
Json write_object(const S& s) {
  Json j = Json::object();
  std::apply([&](auto... f) { (write_value(j[std::string(f.name)], s.*f.member), ...); }, fields<S>());
  return j;
}

}  // namespace detail

/// JSON object with every ModelSpec field.
inline Json to_json(const ModelSpec& m) { return detail::write_object(m); }
/// JSON object with every ClusterSpec field (the GPU nested under "gpu").
inline Json to_json(const ClusterSpec& c) { return detail::write_object(c); }

/// Reads a ModelSpec; missing fields keep their defaults (or the preset's); the result
/// is validated. Errors name the JSON path below `path`.
inline ModelSpec model_from_json(const Json& j, const std::string& path = "$") {
  ModelSpec m;
  detail::read_object(j, path, m);
  validate(m, path);
  return m;
}

/// Reads a ClusterSpec like model_from_json.
inline ClusterSpec cluster_from_json(const Json& j, const std::string& path = "$") {
  ClusterSpec c;
  detail::read_object(j, path, c);
  validate(c, path);
  return c;
}

namespace detail {

// A parser callback that refuses a key given twice in one object. RFC 8259 leaves such
// a document's meaning to the reader, and nlohmann keeps the last value: a plan or a
// model with "layers" twice would be read without a word about the first.
class DuplicateKeyCheck {
 public:
  explicit DuplicateKeyCheck(std::string name) : name_(std::move(name)) {}
  bool operator()(int /*depth*/, Json::parse_event_t event, Json& parsed) {
    using E = Json::parse_event_t;
    if ((event == E::object_start || event == E::array_start || event == E::value) && !frames_.empty() &&
        !frames_.back().object)
      ++frames_.back().index;  // the next element of the enclosing array begins
    if (event == E::object_start)
      frames_.push_back({true});
    else if (event == E::array_start)
      frames_.push_back({false});
    else if (event == E::object_end || event == E::array_end)
      frames_.pop_back();
    else if (event == E::key) {
      Frame& f = frames_.back();
      f.key = parsed.get<std::string>();
      if (!f.keys.insert(f.key).second)
        fail<IoError>(path(), "(a key given twice)", "each key at most once in an object");
    }
    return true;
  }

 private:
  struct Frame {
    bool object;
    std::set<std::string> keys{};
    std::string key{};     // an object's last key
    long long index = -1;  // an array's current element
  };
  std::string path() const {
    std::string p = name_ + ":$";
    for (const Frame& f : frames_) p += f.object ? "." + f.key : "[" + std::to_string(f.index) + "]";
    return p;
  }
  std::string name_;
  std::vector<Frame> frames_;
};

}  // namespace detail

/// Parses JSON text; IoError naming `name` for malformed text, a key given twice in
/// one object (naming its path), a number that overflows a double, or nesting deeper
/// than limits().max_json_depth (checked on the text first, so nothing deep is ever
/// built or printed).
inline Json parse_json_text(std::string_view text, const std::string& name) {
  int depth = 0;
  bool in_string = false, escaped = false;
  for (const char ch : text) {
    if (in_string) {
      if (escaped) escaped = false;
      else if (ch == '\\') escaped = true;
      else if (ch == '"') in_string = false;
    } else if (ch == '"') {
      in_string = true;
    } else if (ch == '[' || ch == '{') {
      if (++depth > limits().max_json_depth)
        fail<IoError>("file", name, "JSON nested at most " + std::to_string(limits().max_json_depth) +
                                        " levels deep (nesting depth limit)");
    } else if (ch == ']' || ch == '}') {
      --depth;
    }
  }
  detail::DuplicateKeyCheck duplicates(name);
  try {
    return Json::parse(text, std::ref(duplicates));
  } catch (const Json::exception& e) {  // parse_error, and out_of_range 406 for 1e999
    fail<IoError>("file", name, std::string("valid JSON (") + e.what() + ")");
  }
}

/// Parses the JSON file at `file`: a regular file (not a directory or device) of at
/// most limits().max_json_file_bytes. IoError names the file (and the parser's position).
inline Json read_json_file(const std::filesystem::path& file) {
  std::error_code ec;
  const auto st = std::filesystem::status(file, ec);
  if (ec || !std::filesystem::exists(st)) fail<IoError>("file", file.string(), "a readable JSON file (it does not exist)");
  if (!std::filesystem::is_regular_file(st)) fail<IoError>("file", file.string(), "a regular file (JSON)");
  const auto size = std::filesystem::file_size(file, ec);
  if (ec || size > static_cast<std::uintmax_t>(limits().max_json_file_bytes))
    fail<IoError>("file", file.string(),
                  "a JSON file of at most " + std::to_string(limits().max_json_file_bytes) + " bytes");
  std::ifstream in(file, std::ios::binary);
  if (!in) fail<IoError>("file", file.string(), "a readable JSON file");
  std::string text(static_cast<std::size_t>(size), '\0');
  in.read(text.data(), static_cast<std::streamsize>(size));
  if (in.gcount() != static_cast<std::streamsize>(size)) fail<IoError>("file", file.string(), "a readable JSON file");
  return parse_json_text(text, file.string());
}

/// A model from a preset name or a JSON file path (anything ending in ".json").
inline ModelSpec load_model(const std::string& name_or_file) {
  if (name_or_file.ends_with(".json")) return model_from_json(read_json_file(name_or_file), name_or_file + ":$");
  return model_preset(name_or_file);
}

/// A cluster from "NAME", "NAME:NODES" or a JSON file path.
inline ClusterSpec load_cluster(const std::string& name_or_file) {
  if (name_or_file.ends_with(".json")) return cluster_from_json(read_json_file(name_or_file), name_or_file + ":$");
  return parse_cluster_name(name_or_file);
}

}  // namespace disagmoe::io
