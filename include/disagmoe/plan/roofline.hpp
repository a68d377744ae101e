// SPDX-License-Identifier: Apache-2.0
/// @file roofline.hpp
/// The compute–communication roofline of DisagMoE's allocator (DisagMoE, arXiv 2605.11005, "Adaptive
/// worker allocation"): the roofline model of Williams, Waterman and Patterson
/// (CACM 52(4), 2009) with the network in place of DRAM. For a component on its
/// resources, achieved FLOP/s per GPU = min(compute ceiling, intensity × bandwidth),
/// intensity = FLOPs per byte crossing the network, and the turning point Î =
/// ceiling / bandwidth separates network-bound (I < Î) from compute-bound (I ≥ Î).
/// Attention's intensity grows with sequence length (its FLOPs per token grow, its
/// bytes per token do not); the FFN's does not.
#pragma once

#include <disagmoe/plan/analytic_model.hpp>
#include <disagmoe/plan/cost_model.hpp>

#include <algorithm>
#include <cmath>
#include <sstream>
#include <string>
#include <vector>

namespace disagmoe::plan {

/// One component on one roofline. Units: FLOP/s per GPU, bytes/s per GPU, FLOP/byte.
struct RooflinePoint {
  std::string name;       ///< "attention" or "ffn"
  double intensity = 0;   ///< FLOPs per byte crossing the network
  double ceiling = 0;     ///< achievable FLOP/s per GPU (peak × efficiency)
  double bandwidth = 0;   ///< achievable network bytes/s per GPU of the component
  /// Î = ceiling / bandwidth (FLOP/byte).
  [[nodiscard]] double turning_point() const { return ceiling / bandwidth; }
  /// min(ceiling, intensity × bandwidth), FLOP/s per GPU.
  [[nodiscard]] double achieved() const { return std::min(ceiling, intensity * bandwidth); }
  /// True when intensity < turning point.
  [[nodiscard]] bool network_bound() const { return intensity < turning_point(); }
};

/// FLOPs (forward + backward) of the A side per byte its links carry (dispatch +
/// return of every layer), for the whole model, F groups of `d.ep_size`. O(layers · k).
inline double attention_intensity(const ModelSpec& m, const DispatchOptions& d) {
  double flops = 0, bytes = 0;
  for (int l = 0; l < m.layers; ++l) {
    const LayerCost c = layer_cost(m, l, d);
    flops += c.attention_side().total();
    bytes += c.dispatch_bytes + c.return_bytes;
  }
  return flops / bytes;
}

/// FLOPs (forward + backward) of the F side per byte its links carry. O(layers · k).
inline double ffn_intensity(const ModelSpec& m, const DispatchOptions& d) {
  double flops = 0, bytes = 0;
  for (int l = 0; l < m.layers; ++l) {
    const LayerCost c = layer_cost(m, l, d);
    flops += c.ffn_side().total();
    bytes += c.dispatch_bytes + c.return_bytes;
  }
  return flops / bytes;
}

/// The roofline of one allocation: an attention and an FFN point, each on its own
/// roof (its ceiling and its per-GPU share of its side's links), plus the cluster's
/// hardware turning point. Efficiency factors come from the model's PlanOptions.
class RooflineModel {
 public:
  /// Precondition: model.valid(x) (ConfigError otherwise). O(layers · k).
  RooflineModel(const AnalyticModel& model, const Allocation& x) {
    expect(model.valid(x), "allocation", model.describe_allocation(x), "a valid allocation");
    const ModelSpec& m = model.model();
    const ClusterSpec& c = model.cluster();
    const Efficiency& e = model.options().efficiency;
    const int ga = model.attention_group_size(x), gf = model.ffn_group_size(x);
    const DispatchOptions d{gf, model.options().dedup, 0};
    peak_ = c.gpu.peak_flops(m.dtype);
    gpu_bandwidth_ = c.nodes == 1 ? c.intra_node_bandwidth
                                  : double(c.nics_per_node) * c.nic_bandwidth / c.gpus_per_node;
    attention_ = {"attention", attention_intensity(m, d), peak_ * e.attention,
                  model.attention_bandwidth(x) / ga};
    ffn_ = {"ffn", ffn_intensity(m, d), peak_ * e.ffn, model.ffn_bandwidth(x) / gf};
  }

  /// The attention component.
  [[nodiscard]] const RooflinePoint& attention() const { return attention_; }
  /// The FFN component.
  [[nodiscard]] const RooflinePoint& ffn() const { return ffn_; }
  /// Hardware turning point of the cluster, FLOP/byte: peak FLOP/s of one GPU over its
  /// even share of the node's NIC bandwidth (intra-node link on one node), no
  /// efficiency factors.
  [[nodiscard]] double turning_point() const { return peak_ / gpu_bandwidth_; }
  /// Peak FLOP/s of one GPU.
  [[nodiscard]] double peak() const { return peak_; }
  /// Even per-GPU share of network bytes/s.
  [[nodiscard]] double gpu_bandwidth() const { return gpu_bandwidth_; }

  /// A self-contained SVG (log–log) of the hardware roof and the two components'
  /// roofs with their points. `title` is escaped. O(1).
  [[nodiscard]] std::string svg(std::string_view title = "") const {
    const double w = 640, h = 420, left = 70, right = 20, top = 40, bottom = 50;
    const double xmin = std::pow(10, std::floor(std::log10(std::min({attention_.intensity, ffn_.intensity,
                                                                       turning_point()}) / 4)));
    const double xmax = std::pow(10, std::ceil(std::log10(std::max({attention_.intensity, ffn_.intensity,
                                                                      turning_point()}) * 4)));
    const double ymax = std::pow(10, std::ceil(std::log10(peak_ * 1.5)));
    const double ymin = std::pow(10, std::floor(std::log10(std::min({attention_.achieved(), ffn_.achieved(),
                                                                       xmin * gpu_bandwidth_}) / 2)));
    auto px = [&](double v) { return left + (std::log10(v) - std::log10(xmin)) / (std::log10(xmax / xmin)) * (w - left - right); };
    auto py = [&](double v) { return h - bottom - (std::log10(v) - std::log10(ymin)) / (std::log10(ymax / ymin)) * (h - top - bottom); };
    std::ostringstream s;
    s.precision(5);
    s << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << w << "\" height=\"" << h
      << "\" font-family=\"sans-serif\" font-size=\"12\">\n"
      << "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
      << "<text x=\"" << w / 2 << "\" y=\"20\" text-anchor=\"middle\" font-size=\"14\">" << escape(title) << "</text>\n";
    // Decade grid and labels.
    for (double v = xmin; v <= xmax * 1.001; v *= 10)
      s << "<line x1=\"" << px(v) << "\" y1=\"" << top << "\" x2=\"" << px(v) << "\" y2=\"" << h - bottom
        << "\" stroke=\"#ddd\"/><text x=\"" << px(v) << "\" y=\"" << h - bottom + 16 << "\" text-anchor=\"middle\">"
        << v << "</text>\n";
    for (double v = ymin; v <= ymax * 1.001; v *= 10)
      s << "<line x1=\"" << left << "\" y1=\"" << py(v) << "\" x2=\"" << w - right << "\" y2=\"" << py(v)
        << "\" stroke=\"#ddd\"/><text x=\"" << left - 4 << "\" y=\"" << py(v) + 4 << "\" text-anchor=\"end\">"
        << v / 1e12 << "T</text>\n";
    s << "<text x=\"" << (left + w - right) / 2 << "\" y=\"" << h - 12
      << "\" text-anchor=\"middle\">intensity (FLOP per network byte)</text>\n"
      << "<text x=\"16\" y=\"" << (top + h - bottom) / 2 << "\" transform=\"rotate(-90 16 " << (top + h - bottom) / 2
      << ")\" text-anchor=\"middle\">FLOP/s per GPU</text>\n";
    auto roof = [&](double ceiling, double bw, const char* colour, const char* dash) {
      const double knee = ceiling / bw, x0 = std::max(xmin, ymin / bw);
      s << "<polyline fill=\"none\" stroke=\"" << colour << "\" stroke-width=\"2\" stroke-dasharray=\"" << dash
        << "\" points=\"" << px(x0) << "," << py(x0 * bw) << " " << px(std::min(knee, xmax)) << ","
        << py(std::min(knee, xmax) * bw) << " " << px(xmax) << "," << py(ceiling) << "\"/>\n";
    };
    roof(peak_, gpu_bandwidth_, "#555", "6 3");
    s << "<line x1=\"" << px(turning_point()) << "\" y1=\"" << top << "\" x2=\"" << px(turning_point()) << "\" y2=\""
      << h - bottom << "\" stroke=\"#555\" stroke-dasharray=\"2 3\"/><text x=\"" << px(turning_point()) + 4
      << "\" y=\"" << top + 12 << "\">Î=" << turning_point() << "</text>\n";
    const char* colours[2] = {"#1f77b4", "#d62728"};
    int k = 0;  // attention's label above its point, FFN's below, so the two never overlap
    for (const RooflinePoint* r : {&attention_, &ffn_}) {
      roof(r->ceiling, r->bandwidth, colours[k], "none");
      s << "<circle cx=\"" << px(r->intensity) << "\" cy=\"" << py(r->achieved()) << "\" r=\"6\" fill=\""
        << colours[k] << "\"/><text x=\"" << px(r->intensity) + 9 << "\" y=\"" << py(r->achieved()) + (k == 0 ? -8 : 18)
        << "\" fill=\"" << colours[k] << "\">" << r->name << " I=" << r->intensity << " ("
        << (r->network_bound() ? "network" : "compute") << "-bound)</text>\n";
      ++k;
    }
    s << "<text x=\"" << w - right - 4 << "\" y=\"" << h - bottom - 8
      << "\" text-anchor=\"end\" fill=\"#555\">dashed: hardware roof (peak, even NIC share)</text>\n</svg>\n";
    return s.str();
  }

 private:
  static std::string escape(std::string_view t) {
    std::string o;
    for (char ch : t) {
      switch (ch) {
        case '<': o += "&lt;"; break;
        case '>': o += "&gt;"; break;
        case '&': o += "&amp;"; break;
        case '"': o += "&quot;"; break;
        default: o += ch;
      }
    }
    return o;
  }

  RooflinePoint attention_, ffn_;
  double peak_ = 0, gpu_bandwidth_ = 0;
};

}  // namespace disagmoe::plan
