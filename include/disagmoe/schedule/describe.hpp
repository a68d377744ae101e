// SPDX-License-Identifier: Apache-2.0
/// @file describe.hpp
/// Compact text forms of a schedule's per-worker order, in the spirit of PyTorch's
/// `_format_pipeline_order`: used by golden tests
/// and `disagmoe-sim --print-order`.
#pragma once

#include <disagmoe/schedule/op.hpp>

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

namespace disagmoe::schedule {

namespace detail {
inline char pass_letter(OpKind k) {
  switch (k) {
    case OpKind::kAttentionForward:
    case OpKind::kExpertForward:
    case OpKind::kEmbeddingForward:
    case OpKind::kHeadForward: return 'F';
    case OpKind::kAttentionBackwardWeight:
    case OpKind::kExpertBackwardWeight:
    case OpKind::kEmbeddingBackwardWeight:
    case OpKind::kHeadBackwardWeight: return 'W';
    default: return 'B';
  }
}
}  // namespace detail

/// The compute actions of `worker` in issue order, one token per pipeline action:
/// "F3" forward of micro-batch 3, "B3" its backward (weight grads inline), "W3" a
/// deferred weight-gradient chunk, "F3+B0" an overlapped pair. Ops without a `step`
/// (AF-Pipe) are listed per op as in `stream_string`. O(ops).
inline std::string action_string(const Schedule& s, int worker) {
  std::string out;
  int cur = -2;
  std::vector<std::pair<char, int>> tok;
  auto flush = [&] {
    if (tok.empty()) return;
    if (!out.empty()) out += ' ';
    // F before B before W inside an overlapped pair, whatever the emission order.
    std::stable_sort(tok.begin(), tok.end(), [](const auto& x, const auto& y) {
      auto rank = [](char c) { return c == 'F' ? 0 : c == 'B' ? 1 : 2; };
      return rank(x.first) < rank(y.first);
    });
    for (std::size_t i = 0; i < tok.size(); ++i) {
      if (i) out += '+';
      out += tok[i].first + std::to_string(tok[i].second);
    }
    tok.clear();
  };
  for (const Op& op : s.ops) {
    if (op.worker != worker || is_comm(op.kind)) continue;
    if (op.step != cur || op.step < 0) {
      flush();
      cur = op.step;
    }
    char c = detail::pass_letter(op.kind);
    bool merged = false;
    for (auto& t : tok) {
      if (t.second != op.micro_batch) continue;
      if (t.first == c || (t.first == 'B' && c == 'W')) merged = true;
      else if (t.first == 'W' && c == 'B') { t.first = 'B'; merged = true; }
    }
    if (!merged) tok.emplace_back(c, op.micro_batch);
  }
  flush();
  return out;
}

/// The ops of one stream of `worker` in issue order as "<kind>:<mb>.<layer>" tokens,
/// e.g. "attn_fwd:0.2 attn_fwd:1.2". O(ops on that stream).
inline std::string stream_string(const Schedule& s, int worker, Stream stream) {
  std::string out;
  for (int id : s.order.at(static_cast<std::size_t>(worker))[static_cast<std::size_t>(stream)]) {
    const Op& op = s.ops[static_cast<std::size_t>(id)];
    if (!out.empty()) out += ' ';
    out += std::string(to_string(op.kind)) + ":" + std::to_string(op.micro_batch) + "." + std::to_string(op.layer);
  }
  return out;
}

}  // namespace disagmoe::schedule
