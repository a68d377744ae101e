// SPDX-License-Identifier: Apache-2.0
/// @file svg_gantt.hpp
/// Writes a simulated step as a self-contained SVG Gantt chart: one row per worker and
/// stream, one bar per op coloured by kind (with a <title> tooltip), a time axis and a
/// legend. Bars less than half a pixel apart merge when they are of the same kind, or
/// of any kind while the merged bar is narrower than SvgOptions::merge_px; a merged bar
/// takes the colour of its busiest kind and an opacity of its busy share, and every bar
/// carries its busy seconds (`data-busy`: the union of its ops' intervals), so a
/// 10^5–10^6-op step stays under 2 MB and what it draws adds up to the timeline.
/// (The Chrome trace, io/chrome_trace.hpp, keeps every op.)
#pragma once

#include <disagmoe/error.hpp>
#include <disagmoe/schedule/op.hpp>
#include <disagmoe/schedule/simulator.hpp>

#include <algorithm>
#include <array>
#include <cmath>
#include <fstream>
#include <ostream>
#include <string>
#include <vector>

namespace disagmoe::io {

/// Layout of the chart.
struct SvgOptions {
  double width = 1600;      ///< pixels of the time axis
  double row_height = 14;   ///< pixels per stream row
  double label_width = 150; ///< pixels for row labels
  double merge_px = 4;      ///< bars narrower than this merge with neighbours of any kind
};

namespace detail {
inline const char* kind_colour(schedule::OpKind k) {
  using K = schedule::OpKind;
  switch (k) {
    case K::kAttentionForward: return "#4e79a7";
    case K::kAttentionBackwardInput: return "#f28e2b";
    case K::kAttentionBackwardWeight: return "#ffbe7d";
    case K::kExpertForward: return "#59a14f";
    case K::kExpertBackwardInput: return "#e15759";
    case K::kExpertBackwardWeight: return "#ff9d9a";
    case K::kEmbeddingForward: return "#86bcb6";
    case K::kEmbeddingBackwardWeight: return "#c9e3df";
    case K::kHeadForward: return "#8cd17d";
    case K::kHeadBackwardInput: return "#f1ce63";
    case K::kHeadBackwardWeight: return "#f9e4a7";
    case K::kDispatch: return "#76b7b2";
    case K::kReturn: return "#b07aa1";
    case K::kCombineDispatch: return "#9c755f";
    case K::kAllToAll: return "#edc948";
    case K::kSend: return "#bab0ac";
    case K::kAllReduce: return "#d37295";
  }
  return "#000000";
}
}  // namespace detail

/// Writes the Gantt chart of `s` as simulated in `r` to `os`. O(ops).
inline void write_svg_gantt(std::ostream& os, const schedule::Schedule& s, const schedule::SimResult& r,
                            const SvgOptions& opt = {}) {
  expect(r.timings.size() == s.ops.size(), "SimResult.timings.size()", r.timings.size(),
         "one timing per op of the schedule (" + std::to_string(s.ops.size()) + ")");
  expect(opt.width > 0 && opt.row_height > 0 && opt.label_width >= 0 && opt.merge_px >= 0, "SvgOptions.width",
         opt.width, "positive sizes");
  const double step = r.step_seconds > 0 ? r.step_seconds : 1;
  const double x0 = opt.label_width, top = 30, sx = opt.width / step;
  const int rows = static_cast<int>(s.workers.size()) * schedule::kStreams;
  const double height = top + rows * opt.row_height + 60;
  os.precision(6);
  os << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << x0 + opt.width + 20 << "\" height=\"" << height
     << "\" font-family=\"sans-serif\" font-size=\"10\">\n";
  os << "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  os << "<text x=\"4\" y=\"16\" font-size=\"13\">" << s.name << ": step " << r.step_seconds * 1e3
     << " ms, bubble " << r.bubble_fraction * 100 << "%, exposed comm " << r.exposed_comm_seconds * 1e3
     << " ms</text>\n";
  for (int row = 0; row < rows; ++row) {
    const auto w = static_cast<std::size_t>(row / schedule::kStreams);
    const auto st = static_cast<schedule::Stream>(row % schedule::kStreams);
    const double y = top + row * opt.row_height;
    if (row % 2 == 0)
      os << "<rect x=\"" << x0 << "\" y=\"" << y << "\" width=\"" << opt.width << "\" height=\"" << opt.row_height
         << "\" fill=\"#f4f4f4\"/>\n";
    os << "<text x=\"4\" y=\"" << y + opt.row_height - 3 << "\">" << s.workers[w].name << " "
       << schedule::to_string(st) << "</text>\n";
  }
  // Bars, merged per row (see the file comment).
  constexpr int kKinds = static_cast<int>(schedule::OpKind::kAllReduce) + 1;
  struct Bar {
    double a = -1, b = -1, busy = 0;
    std::array<double, kKinds> kind_busy{};
    int op = -1, n = 0;
  };
  std::vector<Bar> open(static_cast<std::size_t>(rows));
  auto flush = [&](int row) {
    Bar& bar = open[static_cast<std::size_t>(row)];
    if (bar.op < 0) return;
    const double y = top + row * opt.row_height + 1;
    const auto kind = static_cast<schedule::OpKind>(
        std::max_element(bar.kind_busy.begin(), bar.kind_busy.end()) - bar.kind_busy.begin());
    const double span = bar.b - bar.a;
    os << "<rect x=\"" << x0 + bar.a * sx << "\" y=\"" << y << "\" width=\"" << std::max(0.5, span * sx)
       << "\" height=\"" << opt.row_height - 2 << "\" fill=\"" << detail::kind_colour(kind) << "\"";
    if (bar.busy < span * 0.999) os << " fill-opacity=\"" << std::max(0.15, bar.busy / span) << "\"";
    os << " data-busy=\"" << bar.busy << "\">";
    if (bar.n == 1) {
      const auto& op = s.ops[static_cast<std::size_t>(bar.op)];
      os << "<title>" << schedule::to_string(op.kind) << " mb " << op.micro_batch << " layer " << op.layer << " "
         << bar.a * 1e3 << "-" << bar.b * 1e3 << " ms</title>";
    } else if (span * sx >= 20) {  // wide enough to hover: say what it stands for
      os << "<title>" << bar.n << " ops, mostly " << schedule::to_string(kind) << ", " << bar.a * 1e3 << "-"
         << bar.b * 1e3 << " ms</title>";
    }
    os << "</rect>\n";
    bar = Bar{};
  };
  std::vector<int> ids(s.ops.size());
  for (std::size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int>(i);
  std::sort(ids.begin(), ids.end(), [&](int x, int y) {
    return r.timings[static_cast<std::size_t>(x)].start < r.timings[static_cast<std::size_t>(y)].start;
  });
  for (int i : ids) {
    const auto& t = r.timings[static_cast<std::size_t>(i)];
    if (t.start < 0 || t.end <= t.start) continue;
    const auto& op = s.ops[static_cast<std::size_t>(i)];
    const int row = op.worker * schedule::kStreams + static_cast<int>(op.stream);
    Bar& bar = open[static_cast<std::size_t>(row)];
    const auto k = static_cast<std::size_t>(op.kind);
    const bool same = bar.op >= 0 && bar.kind_busy[k] == bar.busy;  // every op so far of this kind
    if (bar.op < 0 || (t.start - bar.b) * sx >= 0.5 || (!same && (bar.b - bar.a) * sx >= opt.merge_px)) {
      flush(row);
      bar.a = bar.b = t.start;
      bar.op = i;
    }
    // Ops of one row may overlap (unordered comm): count only time not yet covered.
    const double added = std::max(0.0, t.end - std::max(t.start, bar.b));
    bar.busy += added;
    bar.kind_busy[k] += added;
    bar.b = std::max(bar.b, t.end);
    ++bar.n;
  }
  for (int row = 0; row < rows; ++row) flush(row);
  // Axis with ~10 ticks.
  const double ya = top + rows * opt.row_height + 4;
  os << "<line x1=\"" << x0 << "\" y1=\"" << ya << "\" x2=\"" << x0 + opt.width << "\" y2=\"" << ya
     << "\" stroke=\"black\"/>\n";
  const double raw = step / 10, mag = std::pow(10.0, std::floor(std::log10(raw)));
  const double tick = raw / mag < 2 ? 2 * mag : raw / mag < 5 ? 5 * mag : 10 * mag;
  for (double t = 0; t <= step * 1.0001; t += tick)
    os << "<text x=\"" << x0 + t * sx << "\" y=\"" << ya + 12 << "\" text-anchor=\"middle\">" << t * 1e3
       << " ms</text>\n";
  double lx = x0;
  for (int k = 0; k <= static_cast<int>(schedule::OpKind::kAllReduce); ++k) {
    const auto kind = static_cast<schedule::OpKind>(k);
    os << "<rect x=\"" << lx << "\" y=\"" << ya + 22 << "\" width=\"10\" height=\"10\" fill=\""
       << detail::kind_colour(kind) << "\"/><text x=\"" << lx + 13 << "\" y=\"" << ya + 31 << "\">"
       << schedule::to_string(kind) << "</text>\n";
    lx += 105;
  }
  os << "</svg>\n";
}

/// Writes the chart to `path`; IoError naming the path when it cannot be written.
inline void write_svg_gantt(const std::string& path, const schedule::Schedule& s, const schedule::SimResult& r,
                            const SvgOptions& opt = {}) {
  std::ofstream f(path);
  expect<IoError>(f.good(), "svg", path, "a writable file path");
  write_svg_gantt(f, s, r, opt);
  f.flush();  // the tail still in the buffer fails only here (a full disk, /dev/full)
  expect<IoError>(f.good(), "svg", path, "a file that could be written completely");
}

}  // namespace disagmoe::io
