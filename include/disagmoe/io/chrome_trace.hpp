// SPDX-License-Identifier: Apache-2.0
/// @file chrome_trace.hpp
/// Writes a simulated step as Chrome trace JSON (the Trace Event Format read by
/// Perfetto and chrome://tracing, and used by deepseek-ai/profile-data): one process
/// per worker, one thread per stream, one complete ("X") event per op, in microseconds.
/// Hand-written JSON (no library needed); names are escaped.
#pragma once

#include <disagmoe/error.hpp>
#include <disagmoe/schedule/op.hpp>
#include <disagmoe/schedule/simulator.hpp>

#include <fstream>
#include <ostream>
#include <string>
#include <string_view>

namespace disagmoe::io {

namespace detail {
inline void json_string(std::ostream& os, std::string_view s) {
  os << '"';
  for (const char c : s) {
    switch (c) {
      case '"': os << "\\\""; break;
      case '\\': os << "\\\\"; break;
      case '\n': os << "\\n"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          const char* hex = "0123456789abcdef";
          os << "\\u00" << hex[(c >> 4) & 0xf] << hex[c & 0xf];
        } else {
          os << c;
        }
    }
  }
  os << '"';
}
}  // namespace detail

/// Writes `s` as simulated in `r` to `os` as a Chrome trace. Ops that never ran (a
/// deadlocked step) are left out. O(ops).
inline void write_chrome_trace(std::ostream& os, const schedule::Schedule& s, const schedule::SimResult& r) {
  expect(r.timings.size() == s.ops.size(), "SimResult.timings.size()", r.timings.size(),
         "one timing per op of the schedule (" + std::to_string(s.ops.size()) + ")");
  os.precision(15);
  os << "{\"displayTimeUnit\":\"ms\",\"otherData\":{\"schedule\":";
  detail::json_string(os, s.name);
  os << ",\"step_seconds\":" << r.step_seconds << "},\"traceEvents\":[";
  bool first = true;
  auto sep = [&] {
    if (!first) os << ",\n";
    first = false;
  };
  for (std::size_t w = 0; w < s.workers.size(); ++w) {
    const auto& k = s.workers[w];
    sep();
    os << "{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":" << w << ",\"args\":{\"name\":";
    detail::json_string(os, k.name + " (" + std::string(schedule::to_string(k.role)) + ", " +
                                std::to_string(k.gpus) + " GPUs)");
    os << "}}";
    sep();
    os << "{\"name\":\"process_sort_index\",\"ph\":\"M\",\"pid\":" << w << ",\"args\":{\"sort_index\":" << w << "}}";
    for (int t = 0; t < schedule::kStreams; ++t) {
      sep();
      os << "{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":" << w << ",\"tid\":" << t << ",\"args\":{\"name\":\""
         << schedule::to_string(static_cast<schedule::Stream>(t)) << "\"}}";
    }
  }
  for (std::size_t i = 0; i < s.ops.size(); ++i) {
    const auto& op = s.ops[i];
    const auto& t = r.timings[i];
    if (t.start < 0 || t.end < 0) continue;
    sep();
    os << "{\"name\":\"" << schedule::to_string(op.kind) << "\",\"cat\":\""
       << (schedule::is_comm(op.kind) ? "comm" : "compute") << "\",\"ph\":\"X\",\"ts\":" << t.start * 1e6
       << ",\"dur\":" << (t.end - t.start) * 1e6 << ",\"pid\":" << op.worker
       << ",\"tid\":" << static_cast<int>(op.stream) << ",\"args\":{\"op\":" << i << ",\"mb\":" << op.micro_batch
       << ",\"layer\":" << op.layer;
    if (op.chunk >= 0) os << ",\"chunk\":" << op.chunk;
    if (schedule::is_comm(op.kind)) os << ",\"peer\":" << op.peer << ",\"bytes\":" << op.bytes;
    os << "}}";
  }
  os << "]}\n";
}

/// Writes the trace to `path`; IoError naming the path when it cannot be written.
inline void write_chrome_trace(const std::string& path, const schedule::Schedule& s, const schedule::SimResult& r) {
  std::ofstream f(path);
  expect<IoError>(f.good(), "trace", path, "a writable file path");
  write_chrome_trace(f, s, r);
  expect<IoError>(f.good(), "trace", path, "a file that could be written completely");
}

}  // namespace disagmoe::io
