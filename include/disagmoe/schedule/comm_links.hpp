// SPDX-License-Identifier: Apache-2.0
/// @file comm_links.hpp
/// The network model of the simulator: which link resources a comm op loads, with how
/// many bytes, and what each resource carries per second. Shared by the event engine
/// (simulator.hpp) and the reference simulator the tests keep as its oracle, so both
/// charge the same links.
#pragma once

#include <disagmoe/plan/group_placement.hpp>
#include <disagmoe/schedule/op.hpp>

#include <algorithm>
#include <array>
#include <cstddef>

namespace disagmoe::schedule::detail {

struct CommUse {
  int resource;
  double bytes;
};

// At most four resources per comm op (NIC and NVLink, each direction), in one cache
// line: unused entries have resource -1, so no count is stored beside them. The event
// engine reads an op's entry when its flow begins, far from the op's other data; a
// 72-byte entry straddled two lines, and that load was a fifth of the engine's time on
// AF-Pipe's million-op step.
struct alignas(64) CommUses {
  std::array<CommUse, 4> use{CommUse{-1, 0}, CommUse{-1, 0}, CommUse{-1, 0}, CommUse{-1, 0}};
  void push_back(CommUse u) { use[static_cast<std::size_t>(size())] = u; }
  [[nodiscard]] int size() const {
    int n = 0;
    while (n < 4 && use[static_cast<std::size_t>(n)].resource >= 0) ++n;
    return n;
  }
  [[nodiscard]] bool empty() const { return use[0].resource < 0; }
  [[nodiscard]] const CommUse* begin() const { return use.data(); }
  [[nodiscard]] const CommUse* end() const { return use.data() + size(); }
};
static_assert(sizeof(CommUses) == 64);

// Bytes a comm op moves over each resource. Resources per worker w:
// 4w + 0 NIC tx, +1 NIC rx, +2 NVLink tx, +3 NVLink rx.
inline CommUses comm_uses(const Schedule& s, const Op& op) {
  const Worker& a = s.workers[static_cast<std::size_t>(op.worker)];
  const Worker& b = s.workers[static_cast<std::size_t>(op.peer)];
  double nic = 0, nvl = 0;
  if (op.worker == op.peer && op.kind == OpKind::kAllToAll && a.a2a_nic_share >= 0) {
    nic = op.bytes * a.a2a_nic_share;
    nvl = op.bytes * a.a2a_nvlink_share;
  } else if (op.worker == op.peer && a.mixed_nodes > 0) {
    const plan::OwnGroupShares own = plan::own_group_shares(a.placement());
    nic = op.bytes * own.nic;
    nvl = op.bytes * own.nvlink;
  } else if (op.worker == op.peer) {
    // Uniform destinations over the group: own GPU stays, same-node peers use NVLink.
    nic = op.bytes * (a.gpus - a.gpus_per_node()) / a.gpus;
    nvl = op.bytes * (a.gpus_per_node() - 1) / a.gpus;
  } else {
    nvl = op.bytes * plan::same_node_share(a.placement(), b.placement());
    nic = op.bytes - nvl;
  }
  // Receiver GPUs get the sender's bytes spread out (times the op's imbalance factor).
  const double scale = double(a.gpus) / b.gpus * op.rx_scale;
  CommUses u;
  if (nic > 0) {
    u.push_back({4 * op.worker + 0, nic});
    u.push_back({4 * op.peer + 1, nic * scale});
  }
  if (nvl > 0) {
    u.push_back({4 * op.worker + 2, nvl});
    u.push_back({4 * op.peer + 3, nvl * scale});
  }
  return u;
}

inline double capacity(const Schedule& s, int resource) {
  const Worker& w = s.workers[static_cast<std::size_t>(resource / 4)];
  return resource % 4 < 2 ? w.nic_bandwidth : w.nvlink_bandwidth;
}

}  // namespace disagmoe::schedule::detail
