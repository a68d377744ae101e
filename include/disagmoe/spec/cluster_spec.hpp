// SPDX-License-Identifier: Apache-2.0
/// @file cluster_spec.hpp
/// ClusterSpec: identical nodes of identical GPUs joined by NICs.
#pragma once

#include <disagmoe/error.hpp>
#include <disagmoe/limits.hpp>
#include <disagmoe/spec/dtype.hpp>

#include <cmath>
#include <string>

namespace disagmoe {

/// One accelerator. FLOP/s are dense (no structured sparsity) peaks.
struct GpuSpec {
  std::string name = "gpu";
  double peak_flops_fp32 = 0;  ///< FLOP/s
  double peak_flops_bf16 = 0;  ///< FLOP/s; also used for fp16
  double peak_flops_fp8 = 0;   ///< FLOP/s; 0 when the chip has no fp8 path
  double hbm_bytes = 0;        ///< device memory, bytes
  double hbm_bandwidth = 0;    ///< bytes/s

  /// Peak dense FLOP/s for `t`; fp8 falls back to bf16 where the chip has no fp8 path.
  [[nodiscard]] constexpr double peak_flops(DType t) const {
    switch (t) {
      case DType::kFp32: return peak_flops_fp32;
      case DType::kFp8: return peak_flops_fp8 > 0 ? peak_flops_fp8 : peak_flops_bf16;
      default: return peak_flops_bf16;
    }
  }
};

/// `nodes` identical nodes, each with `gpus_per_node` GPUs on an intra-node fabric
/// (NVLink / Infinity Fabric) and `nics_per_node` NICs to the inter-node network.
/// Bandwidths are per direction.
struct ClusterSpec {
  std::string name = "custom";
  int nodes = 1;
  int gpus_per_node = 8;
  GpuSpec gpu;
  double intra_node_bandwidth = 0;  ///< bytes/s one GPU can send inside its node
  double intra_node_latency = 0;    ///< seconds per message inside a node
  int nics_per_node = 0;            ///< inter-node NICs per node
  double nic_bandwidth = 0;         ///< bytes/s of one NIC, one direction
  double nic_latency = 0;           ///< seconds per message across nodes
  /// Share of a GPU's SMs that a kernel-driven communication library holds while one of
  /// its transfers touches the GPU, on the sender and on the receiver (NCCL collectives
  /// and send/recv, NVSHMEM / DeepEP all-to-all: the kernels are persistent thread blocks
  /// that copy and poll). Default 24 of an H800's 132 SMs: DeepEP reserves a configurable
  /// number of SMs for its normal kernels, 24 in its README's examples
  /// (`Buffer.set_num_sms(24)`); DeepSeek-V3 (arXiv 2412.19437 §3.2.2) dedicates 20.
  double kernel_comm_sm_fraction = 24.0 / 132.0;
  /// The same for an RDMA engine transport (M2N over GPUDirect RDMA posted by a CPU proxy
  /// or the NIC, as MegaScale-Infer's M2N library and StepMesh do): the NIC moves the
  /// bytes, so compute keeps (nearly) every SM. Default 0.
  double rdma_comm_sm_fraction = 0;

  /// GPUs in the whole cluster.
  [[nodiscard]] constexpr int gpus() const { return nodes * gpus_per_node; }
  /// NICs in the whole cluster.
  [[nodiscard]] constexpr int nics() const { return nodes * nics_per_node; }
};

/// The same cluster with `nodes` nodes; the name records the change ("h100:4").
inline ClusterSpec scaled_to_nodes(ClusterSpec c, int nodes, std::string_view field = "nodes") {
  expect_in(field, nodes, 1, max_size::kNodes);
  if (nodes != c.nodes) c.name += ":" + std::to_string(nodes);
  c.nodes = nodes;
  return c;
}

/// Throws ConfigError naming `prefix.field`, its value and the valid range.
inline void validate(const ClusterSpec& c, std::string_view prefix = "ClusterSpec") {
  const std::string p(prefix);
  namespace mx = max_size;
  // Finite, and inside limits.hpp's ranges: products of these stay finite and the
  // planner's per-node work bounded.
  auto positive = [&](const std::string& f, double v, double lo, double hi) {
    expect_finite_in(p + "." + f, v, lo, hi);
  };
  auto non_negative = [&](const std::string& f, double v, double hi) {
    expect_finite_in(p + "." + f, v, 0, hi);
  };
  expect_in(p + ".nodes", c.nodes, 1, mx::kNodes);
  expect_in(p + ".gpus_per_node", c.gpus_per_node, 1, mx::kGpusPerNode);
  positive("gpu.peak_flops_fp32", c.gpu.peak_flops_fp32, 1, mx::kFlops);
  positive("gpu.peak_flops_bf16", c.gpu.peak_flops_bf16, 1, mx::kFlops);
  non_negative("gpu.peak_flops_fp8", c.gpu.peak_flops_fp8, mx::kFlops);
  positive("gpu.hbm_bytes", c.gpu.hbm_bytes, mx::kMinHbmBytes, mx::kBytes);
  positive("gpu.hbm_bandwidth", c.gpu.hbm_bandwidth, mx::kMinBandwidth, mx::kBandwidth);
  if (c.gpus_per_node > 1) positive("intra_node_bandwidth", c.intra_node_bandwidth, mx::kMinBandwidth, mx::kBandwidth);
  else non_negative("intra_node_bandwidth", c.intra_node_bandwidth, mx::kBandwidth);
  non_negative("intra_node_latency", c.intra_node_latency, mx::kLatency);
  expect_in(p + ".nics_per_node", c.nics_per_node, 0, mx::kNicsPerNode);
  if (c.nodes > 1) {
    expect(c.nics_per_node > 0, p + ".nics_per_node", c.nics_per_node,
           "at least 1 NIC per node when nodes > 1 (" + std::to_string(c.nodes) + ")");
  }
  if (c.nics_per_node > 0) positive("nic_bandwidth", c.nic_bandwidth, mx::kMinBandwidth, mx::kBandwidth);
  else non_negative("nic_bandwidth", c.nic_bandwidth, mx::kBandwidth);
  non_negative("nic_latency", c.nic_latency, mx::kLatency);
  // Below 1: compute on a GPU whose comm kernels held every SM would never finish.
  expect(std::isfinite(c.kernel_comm_sm_fraction) && c.kernel_comm_sm_fraction >= 0 && c.kernel_comm_sm_fraction < 1,
         p + ".kernel_comm_sm_fraction", c.kernel_comm_sm_fraction, "a fraction in [0, 1)");
  expect(std::isfinite(c.rdma_comm_sm_fraction) && c.rdma_comm_sm_fraction >= 0 && c.rdma_comm_sm_fraction < 1,
         p + ".rdma_comm_sm_fraction", c.rdma_comm_sm_fraction, "a fraction in [0, 1)");
}

}  // namespace disagmoe
