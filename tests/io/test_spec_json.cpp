// SPDX-License-Identifier: Apache-2.0
#include <disagmoe/io/spec_json.hpp>
#include <disagmoe/plan/adaptive_allocator.hpp>
#include <disagmoe/plan/plan_json.hpp>
#include <disagmoe/spec/presets.hpp>

#include <doctest/doctest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

using namespace disagmoe;
using io::Json;

namespace {
template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// A value of the wrong JSON type for `v`: a string for numbers/bools, a number for strings.
Json wrong_type(const Json& v) { return v.is_string() ? Json(3) : Json("x"); }
}  // namespace

TEST_CASE("every preset survives a JSON round trip") {
  for (const auto& name : model_preset_names()) {
    const ModelSpec m = model_preset(name);
    const Json j = io::to_json(m);
    CHECK(io::to_json(io::model_from_json(Json::parse(j.dump()))) == j);
  }
  for (const auto& name : cluster_preset_names()) {
    const ClusterSpec c = cluster_preset(name);
    const Json j = io::to_json(c);
    CHECK(io::to_json(io::cluster_from_json(Json::parse(j.dump()))) == j);
  }
}

TEST_CASE("a preset with overrides, and scaling a cluster from JSON") {
  const ClusterSpec c = io::cluster_from_json(Json::parse(R"({"preset": "h100", "nodes": 4})"));
  CHECK(c.nodes == 4);
  CHECK(c.gpu.name == "H100-SXM5");
  const ModelSpec m = io::model_from_json(Json::parse(R"({"preset": "mixtral-8x7b", "seq_len": 32768})"));
  CHECK(m.seq_len == 32768);
  CHECK(m.experts == 8);
}

TEST_CASE("each field with a wrong type is an error naming its JSON path") {
  const Json model = io::to_json(model_preset("deepseek-moe-16b"));
  for (const auto& [key, value] : model.items()) {
    Json bad = model;
    bad[key] = wrong_type(value);
    CAPTURE(key);
    CHECK(error_of([&] { io::model_from_json(bad); }).starts_with("$." + key + " = "));
  }
  const Json cluster = io::to_json(cluster_preset("h800x128"));
  for (const auto& [key, value] : cluster.items()) {
    Json bad = cluster;
    bad[key] = wrong_type(value);
    CAPTURE(key);
    CHECK(error_of([&] { io::cluster_from_json(bad); }).starts_with("$." + key + " = "));
  }
  for (const auto& [key, value] : cluster["gpu"].items()) {
    Json bad = cluster;
    bad["gpu"][key] = wrong_type(value);
    CAPTURE(key);
    CHECK(error_of([&] { io::cluster_from_json(bad); }).starts_with("$.gpu." + key + " = "));
  }
}

TEST_CASE("unknown keys, fractional integers, overflow and range errors name the path") {
  Json m = io::to_json(model_preset("olmoe-1b-7b"));
  m["hiden"] = 5;
  CHECK(error_of([&] { io::model_from_json(m); }).starts_with("$.hiden = \"(unknown key)\": expected one of: preset, name"));
  m.erase("hiden");
  m["layers"] = 2.5;
  CHECK(error_of([&] { io::model_from_json(m); }) == "$.layers = 2.5: expected an integer, not number");
  m["layers"] = 1LL << 40;
  CHECK(error_of([&] { io::model_from_json(m); }).starts_with("$.layers = 1099511627776: expected an integer that fits 32 bits"));
  m["layers"] = 16;
  m["top_k"] = 65;
  CHECK(error_of([&] { io::model_from_json(m); }) == "$.top_k = 65: expected 1 <= top_k <= experts (64)");
  m["top_k"] = 8;
  m["dtype"] = "int4";
  CHECK(error_of([&] { io::model_from_json(m); }) == "$.dtype = \"int4\": expected one of fp32, bf16, fp16, fp8");
  CHECK(error_of([&] { io::model_from_json(Json::array()); }) == "$ = [...]: expected a JSON object, not array");
  CHECK(error_of([&] { io::cluster_from_json(Json::parse(R"({"gpu": {"hbm": 1}})")); })
            .starts_with("$.gpu.hbm = \"(unknown key)\": expected one of: name, peak_flops_fp32"));
  CHECK(error_of([&] { io::cluster_from_json(Json::parse(R"({"preset": "tpu"})")); })
            .starts_with("$.preset = \"tpu\": expected a preset name"));
  CHECK(error_of([&] { io::cluster_from_json(Json::parse(R"({"preset": "h100", "nodes": 0})")); })
            .starts_with("$.nodes = 0: expected an integer in [1, 65536]"));
}

TEST_CASE("loading by name or from files") {
  CHECK(io::load_model("qwen3-30b-a3b").layers == 48);
  CHECK(io::load_cluster("h200:2").gpus() == 16);
  const auto dir = std::filesystem::temp_directory_path();
  const auto good = dir / "disagmoe_test_cluster.json";
  std::ofstream(good) << R"({"preset": "mi300x", "nodes": 2})";
  CHECK(io::load_cluster(good.string()).gpus() == 16);
  const auto broken = dir / "disagmoe_test_broken.json";
  std::ofstream(broken) << R"({"preset": )";
  CHECK(error_of([&] { io::load_cluster(broken.string()); }).starts_with("file = \"" + broken.string() + "\": expected valid JSON"));
  CHECK(error_of([&] { io::load_model((dir / "disagmoe_missing.json").string()); }).find("a readable JSON file") != std::string::npos);
  std::ofstream(broken) << R"({"layers": "many"})";
  CHECK(error_of([&] { io::load_model(broken.string()); }).starts_with(broken.string() + ":$.layers = "));
  std::filesystem::remove(good);
  std::filesystem::remove(broken);
}

TEST_CASE("hostile JSON files: depth, huge values, overflowing numbers and non-files are clear IoErrors") {
  const auto dir = std::filesystem::temp_directory_path() / "disagmoe_test_hostile_json";
  std::filesystem::create_directories(dir);
  const auto file = dir / "x.json";
  auto write = [&](const std::string& text) { std::ofstream(file, std::ios::trunc) << text; };
  // 100000 levels: dump() or a recursive reader would overflow the stack.
  write(std::string(100000, '[') + std::string(100000, ']'));
  CHECK(error_of([&] { io::load_model(file.string()); }).find("nesting depth limit") != std::string::npos);
  // Brackets inside strings do not count.
  write(R"({"preset": "olmoe-1b-7b", "name": ")" + std::string(1000, '[') + R"("})");
  CHECK(io::load_model(file.string()).name.size() == 1000);
  // A huge array as a field is named briefly, not printed.
  std::string big = R"({"name": [)";
  for (int i = 0; i < 100000; ++i) big += "1,";
  big += "1]}";
  write(big);
  CHECK(error_of([&] { io::load_model(file.string()); }) == file.string() + ":$.name = [...]: expected a string, not array");
  write(R"({"preset": "olmoe-1b-7b", "layers": 1e999})");
  CHECK(error_of([&] { io::load_model(file.string()); }).find("number overflow") != std::string::npos);
  const auto sub = dir / "sub.json";
  std::filesystem::create_directories(sub);
  CHECK(error_of([&] { io::load_cluster(sub.string()); }) ==
        "file = \"" + sub.string() + "\": expected a regular file (JSON)");
  CHECK_THROWS_AS(io::read_json_file("/dev/null"), IoError);  // a device: never read
  std::filesystem::remove_all(dir);
}

TEST_CASE("a key given twice in one object is an error naming its path; the same key in two objects is not") {
  const auto parse = [](const std::string& text) { return io::parse_json_text(text, "t.json"); };
  const std::string twice =
      "t.json:$.layers = \"(a key given twice)\": expected each key at most once in an object";
  CHECK(error_of([&] { parse(R"({"preset": "olmoe-1b-7b", "layers": 2000000000, "layers": 4})"); }) == twice);
  CHECK(error_of([&] { parse(R"({"gpu": {"hbm_bytes": 1, "hbm_bytes": 2}})"); }) ==
        "t.json:$.gpu.hbm_bytes = \"(a key given twice)\": expected each key at most once in an object");
  // Paths through arrays count elements of every kind: scalars, arrays and objects.
  CHECK(error_of([&] { parse(R"({"a": [1, [2], {"b": 1}, {"c": 1, "c": 2}]})"); }) ==
        "t.json:$.a[3].c = \"(a key given twice)\": expected each key at most once in an object");
  CHECK(error_of([&] { parse(R"([{"x": {"y": [0]}, "z": 1, "x": 2}])"); }) ==
        "t.json:$[0].x = \"(a key given twice)\": expected each key at most once in an object");
  // One key in sibling or nested objects, and a key equal to a value, are fine.
  const Json ok =
      parse(R"({"a": {"k": 1}, "b": {"k": 2, "a": {"k": 3}}, "k": "k", "l": [{"k": 1}, {"k": 2}]})");
  CHECK(ok["b"]["a"]["k"] == 3);
  CHECK(ok["l"][1]["k"] == 2);
}

TEST_CASE("a plan read back is the planner's allocation; anything else is a named error") {
  const ModelSpec m = model_preset("olmoe-1b-7b");
  const ClusterSpec c = parse_cluster_name("h800x128:2");
  plan::PlanOptions o;
  o.memory.optimizer_bytes = 8;
  const plan::Plan p = plan::AdaptiveAllocator(m, c, o).plan();
  const Json j = plan::to_json(p);
  CHECK(j.at("optimizer_bytes").get<double>() == 8);  // the state the memory model assumed
  CHECK(plan::allocation_from_json(j, m, c) == p.allocation);
  CHECK(plan::allocation_from_json(j.at("allocation"), m, c) == p.allocation);  // the fields alone
  Json bad = j;
  bad["colour"] = "red";
  CHECK(error_of([&] { plan::allocation_from_json(bad, m, c); }) ==
        "$.colour = \"(unknown key)\": expected a key that disagmoe-plan --json writes");
  bad = j;
  bad["allocation"]["groups"] = (std::int64_t{1} << 32) + 16;  // must not become 16
  CHECK(error_of([&] { plan::allocation_from_json(bad, m, c); }) ==
        "$.allocation.groups = 4294967312: expected an integer that fits 32 bits");
  bad = j;
  bad["allocation"]["ffn_nics_per_node"] = 9;
  CHECK(error_of([&] { plan::allocation_from_json(bad, m, c); }) ==
        "$.allocation.ffn_nics_per_node = 9: expected an integer in [0, 8] on this cluster");
  CHECK(error_of([&] { plan::allocation_from_json(j, model_preset("mixtral-8x7b"), c); }) ==
        "$.model = \"olmoe-1b-7b\": expected the model of this run (mixtral-8x7b): plan again for it");
  CHECK(error_of([&] { plan::allocation_from_json(j, m, parse_cluster_name("h800x128")); })
            .starts_with("$.cluster = \"h800x128:2\": expected the cluster of this run (h800x128)"));
  ModelSpec longer = m;
  longer.seq_len *= 2;
  CHECK(error_of([&] { plan::allocation_from_json(j, longer, c); }).starts_with("$.seq_len = "));
  // A model or cluster that keeps the name but not the plan's values is named field by
  // field (the plan saves both specs); the micro-batch is a run setting.
  ModelSpec dense = m;
  dense.first_dense_layers = m.layers;
  CHECK(error_of([&] { plan::allocation_from_json(j, dense, c); }) ==
        "$.model_spec.first_dense_layers = " + std::to_string(m.first_dense_layers) +
            ": expected the model of this run (" + std::to_string(m.layers) + "): plan again for it");
  ModelSpec other_batch = m;
  other_batch.micro_batch += 1;
  CHECK(plan::allocation_from_json(j, other_batch, c) == p.allocation);
  ClusterSpec small_hbm = c;
  small_hbm.gpu.hbm_bytes /= 2;
  CHECK(error_of([&] {
          plan::allocation_from_json(j, m, small_hbm);
        }).starts_with("$.cluster_spec.gpu.hbm_bytes = "));
  Json edited = j;
  edited["seq_len"] = std::to_string(m.seq_len);  // the right number as a string is not the run's
  CHECK(error_of([&] { plan::allocation_from_json(edited, m, c); }) ==
        "$.seq_len = \"" + std::to_string(m.seq_len) + "\": expected the sequence length of this run (" +
            std::to_string(m.seq_len) + "): plan again for it");
  edited["seq_len"] = static_cast<double>(m.seq_len);  // nor as a float
  CHECK(error_of([&] { plan::allocation_from_json(edited, m, c); }).starts_with("$.seq_len = "));
  edited = j;  // a double of the spec written as an integer is the same value
  edited["cluster_spec"]["nic_bandwidth"] = static_cast<std::int64_t>(c.nic_bandwidth);
  CHECK(plan::allocation_from_json(edited, m, c) == p.allocation);
  edited = j;
  edited["model_spec"].erase("top_k");
  CHECK(error_of([&] { plan::allocation_from_json(edited, m, c); }) ==
        "$.model_spec.top_k = \"(missing)\": expected the model's top_k");
  edited["model_spec"] = 3;
  CHECK(error_of([&] { plan::allocation_from_json(edited, m, c); }) ==
        "$.model_spec = 3: expected a JSON object, as io::to_json writes it");
  edited.erase("model_spec");  // a plan written before the specs were saved: by name only
  edited.erase("cluster_spec");
  CHECK(plan::allocation_from_json(edited, dense, small_hbm) == p.allocation);
  // Recomputation per side, and the one bool of plans written before it was per side.
  Json a = j.at("allocation");
  a["recompute"] = {{"attention", false}, {"ffn", true}};
  CHECK(plan::allocation_from_json(a, m, c).recompute == plan::Recompute{false, true});
  a["recompute"] = Json::object({{"ffn", true}});  // a missing side does not recompute
  CHECK(plan::allocation_from_json(a, m, c).recompute == plan::Recompute{false, true});
  a["recompute"] = true;
  CHECK(plan::allocation_from_json(a, m, c).recompute == plan::Recompute{true, true});
  plan::Allocation mixed = p.allocation;
  mixed.recompute = {true, false};
  CHECK(plan::allocation_from_json(plan::detail::to_json(mixed), m, c) == mixed);
  a["recompute"] = {{"attention", true}, {"experts", true}};
  CHECK(error_of([&] { plan::allocation_from_json(a, m, c); }) ==
        "$.recompute.experts = \"(unknown key)\": expected attention or ffn");
  a["recompute"] = "yes";
  CHECK(error_of([&] { plan::allocation_from_json(a, m, c); }).starts_with("$.recompute = "));
}
