// Per-expert progress counters between the layer's kernels: a kernel starts on an expert's rows once
// the kernel before it has finished them, rather than when that kernel's whole grid ends (at decode
// its CTAs end over a long tail).  Arch-neutral PTX (sm_70 and later).
#pragma once
#include "moegen/pdl.cuh"

namespace moegen {

// The producer's stores, ordered before the release by a barrier of the threads that made them, are
// visible to whoever acquires the sum.
__device__ __forceinline__ void progress_release_add(unsigned long long* counter, unsigned long long value) {
  asm volatile("red.release.gpu.global.add.u64 [%0], %1;\n" ::"l"(counter), "l"(value) : "memory");
}
__device__ __forceinline__ unsigned long long progress_acquire(const unsigned long long* counter) {
  unsigned long long v;
  asm volatile("ld.acquire.gpu.global.u64 %0, [%1];\n" : "=l"(v) : "l"(counter) : "memory");
  return v;
}

// Waits until *counter reaches target.  Every CTA of the producing grid started before this grid
// launched (PDL), so the sum arrives; a bounded spin falls back to waiting for that whole grid
// (pdl_wait), which is always enough.
__device__ __forceinline__ void progress_wait_until(const unsigned long long* counter, unsigned long long target) {
  int spins = 0;
  while (progress_acquire(counter) < target) {
    if (++spins == (1 << 16)) {
      pdl_wait();
      break;
    }
    __nanosleep(64);
  }
}

}  // namespace moegen
