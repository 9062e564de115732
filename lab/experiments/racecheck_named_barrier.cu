// Does compute-sanitizer's racecheck report a hazard for a correctly ordered shared-memory write and
// read when the writers also met on a named barrier of a subset of warps?  The pattern of
// route_one_block_kernel: warps [0, kSub) meet on `bar.sync 1, kSub*32`, then write; the whole block
// meets on barrier 0 (or a named barrier over the warps involved); then another warp reads.
//   nvcc -arch=sm_90a -lineinfo -o /tmp/rc lab/experiments/racecheck_named_barrier.cu
//   compute-sanitizer --tool racecheck /tmp/rc <mode>     mode 0: no subset barrier, 1: with it,
//   2: with it, and the block barrier a named one (bar.sync 2, 256) over warps 0-7 only
#include <cstdio>
#include <cstdlib>

__global__ void kernel(int mode, int* out) {
  __shared__ int v[256];
  __shared__ int totals[8];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (warp < 4) {
    int before = 0;
    if (mode >= 1) {  // as schedule_block: warp totals through shared memory, over a subset barrier
      if (lane == 31) totals[warp] = warp;
      asm volatile("bar.sync 1, 128;" ::: "memory");
      before = totals[(warp + 1) % 4];
    }
    v[threadIdx.x] = threadIdx.x + before;
  }
  if (mode == 2) {
    if (warp < 8) asm volatile("bar.sync 2, 256;" ::: "memory");
  } else {
    __syncthreads();
  }
  if (warp == 7 || (mode != 2 && warp == 28)) out[threadIdx.x] = v[lane * 4 % 128];
}

int main(int argc, char** argv) {
  const int mode = argc > 1 ? atoi(argv[1]) : 1;
  int* out;
  cudaMalloc(&out, 1024 * sizeof(int));
  kernel<<<1, 1024>>>(mode, out);
  const cudaError_t e = cudaDeviceSynchronize();
  printf("mode %d: %s\n", mode, cudaGetErrorString(e));
  return e != cudaSuccess;
}
