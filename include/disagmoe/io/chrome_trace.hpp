// SPDX-License-Identifier: Apache-2.0
/// @file chrome_trace.hpp
/// Writes a simulated or measured step, or several side by side, as Chrome trace JSON
/// (the Trace Event Format read by Perfetto and chrome://tracing, and used by
/// deepseek-ai/profile-data): one process per worker and run, one thread per stream,
/// one complete ("X") event per op, in microseconds.
/// Hand-written JSON (no library needed); names are escaped.
#pragma once

#include <disagmoe/error.hpp>
#include <disagmoe/schedule/op.hpp>
#include <disagmoe/schedule/simulator.hpp>

#include <algorithm>
#include <fstream>
#include <ostream>
#include <span>
#include <string>
#include <string_view>
#include <vector>

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

/// One op's interval on one worker's stream in a traced run (seconds). A transfer shows
/// on its sender's comm stream and, when `receive`, on its receiver's.
struct TraceEvent {
  int worker = 0;
  int op = 0;
  schedule::Stream stream = schedule::Stream::kForward;
  double start = 0, end = 0;
  bool receive = false;
};

/// A run of a schedule to trace: a label ("measured", "simulated"; empty: none) and its
/// events.
struct TraceRun {
  std::string label;
  double step_seconds = 0;
  std::vector<TraceEvent> events;
};

/// The simulated run `r` of `s` as a TraceRun (ops that never ran are left out).
inline TraceRun simulated_run(const schedule::Schedule& s, const schedule::SimResult& r, std::string label = "") {
  expect(r.timings.size() == s.ops.size(), "SimResult.timings.size()", r.timings.size(),
         "one timing per op of the schedule (" + std::to_string(s.ops.size()) + ")");
  TraceRun run{std::move(label), r.step_seconds, {}};
  for (std::size_t i = 0; i < s.ops.size(); ++i) {
    const auto& t = r.timings[i];
    if (t.start >= 0 && t.end >= 0)
      run.events.push_back({s.ops[i].worker, static_cast<int>(i), s.ops[i].stream, t.start, t.end, false});
  }
  return run;
}

/// Writes `runs` of `s` to `os` as one Chrome trace: per run one process per worker that
/// has an event in it (named "<label> <worker>"; a per-rank run leaves out the workers
/// without that rank), one thread per stream, one complete ("X") event per event with
/// the same op names in every run, so runs open side by side. O(events + runs · workers).
inline void write_chrome_trace(std::ostream& os, const schedule::Schedule& s, std::span<const TraceRun> runs) {
  os.precision(15);
  os << "{\"displayTimeUnit\":\"ms\",\"otherData\":{\"schedule\":";
  detail::json_string(os, s.name);
  for (const auto& run : runs) {
    os << ",";
    detail::json_string(os, run.label.empty() ? std::string("step_seconds") : run.label + "_step_seconds");
    os << ":" << run.step_seconds;
  }
  os << "},\"traceEvents\":[";
  bool first = true;
  auto sep = [&] {
    if (!first) os << ",\n";
    first = false;
  };
  const std::size_t nw = s.workers.size();
  std::vector<char> present(nw);
  for (std::size_t k = 0; k < runs.size(); ++k) {
    std::fill(present.begin(), present.end(), 0);
    for (const auto& e : runs[k].events) present.at(static_cast<std::size_t>(e.worker)) = 1;
    for (std::size_t w = 0; w < nw; ++w) {
      if (!present[w]) continue;
      const auto& wk = s.workers[w];
      const std::size_t pid = k * nw + w;
      sep();
      os << "{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":" << pid << ",\"args\":{\"name\":";
      detail::json_string(os, (runs[k].label.empty() ? "" : runs[k].label + " ") + wk.name + " (" +
                                  std::string(schedule::to_string(wk.role)) + ", " + std::to_string(wk.gpus) + " GPUs)");
      os << "}}";
      sep();
      os << "{\"name\":\"process_sort_index\",\"ph\":\"M\",\"pid\":" << pid << ",\"args\":{\"sort_index\":" << pid
         << "}}";
      for (int t = 0; t < schedule::kStreams; ++t) {
        sep();
        os << "{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":" << pid << ",\"tid\":" << t
           << ",\"args\":{\"name\":\"" << schedule::to_string(static_cast<schedule::Stream>(t)) << "\"}}";
      }
    }
  }
  for (std::size_t k = 0; k < runs.size(); ++k)
    for (const auto& e : runs[k].events) {
      const auto& op = s.ops.at(static_cast<std::size_t>(e.op));
      sep();
      os << "{\"name\":\"" << (e.receive ? "recv " : "") << schedule::to_string(op.kind) << "\",\"cat\":\""
         << (schedule::is_comm(op.kind) ? "comm" : "compute") << "\",\"ph\":\"X\",\"ts\":" << e.start * 1e6
         << ",\"dur\":" << (e.end - e.start) * 1e6 << ",\"pid\":" << k * nw + static_cast<std::size_t>(e.worker)
         << ",\"tid\":" << static_cast<int>(e.stream) << ",\"args\":{\"op\":" << e.op << ",\"mb\":" << op.micro_batch
         << ",\"layer\":" << op.layer;
      if (op.chunk >= 0) os << ",\"chunk\":" << op.chunk;
      if (schedule::is_comm(op.kind)) os << ",\"peer\":" << op.peer << ",\"bytes\":" << op.bytes;
      os << "}}";
    }
  os << "]}\n";
}

/// Writes `s` as simulated in `r` to `os` as a Chrome trace. Ops that never ran (a
/// deadlocked step) are left out. O(ops).
inline void write_chrome_trace(std::ostream& os, const schedule::Schedule& s, const schedule::SimResult& r) {
  const TraceRun run = simulated_run(s, r);
  write_chrome_trace(os, s, std::span<const TraceRun>(&run, 1));
}

/// Writes the trace to `path`; IoError naming the path when it cannot be written.
template <class Runs>
void write_chrome_trace(const std::string& path, const schedule::Schedule& s, const Runs& runs) {
  std::ofstream f(path);
  expect<IoError>(f.good(), "trace", path, "a writable file path");
  write_chrome_trace(f, s, runs);
  f.flush();  // the tail still in the buffer fails only here (a full disk, /dev/full)
  expect<IoError>(f.good(), "trace", path, "a file that could be written completely");
}

}  // namespace disagmoe::io
