// SPDX-License-Identifier: Apache-2.0
/// @file keep_freed_memory.hpp
/// A process-wide allocator setting for host training loops.
#pragma once

#include <cstdlib>  // first: it defines __GLIBC__ (via <features.h>) for the test below

#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace disagmoe::host {

/// Tells glibc's malloc to keep freed blocks of up to 1 GiB in the process instead of
/// returning them to the kernel. A training step frees and reallocates the same
/// activation sizes every step; by default each large block is unmapped and faulted back
/// in, which took half of a small model's step on a 2-core VM (bench/RESULTS.md,
/// training). Call once at start-up; a no-op without glibc. Never called implicitly.
inline void keep_freed_memory() {
#if defined(__GLIBC__)
  mallopt(M_MMAP_THRESHOLD, 1 << 30);
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
#endif
}

}  // namespace disagmoe::host
