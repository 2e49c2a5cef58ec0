// sample.cu: small kernels that exercise every simulator feature, the example
// to copy for a new kernel group (test_sample.cc tests them; the stand-in
// driver registers them too, so its own test can launch one from PTX).
#include "../compat.h"

// c = a + b, one thread per element.
extern "C" __global__ void drafter_sample_vadd(float* c, const float* __restrict__ a, const float* __restrict__ b, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) c[i] = a[i] + b[i];
}

// *out += sum(x): each block reduces a blockDim.x-strided slice in static
// shared memory (a tree with __syncthreads; blockDim.x a power of two <= 1024)
// and adds its partial sum atomically.
extern "C" __global__ void drafter_sample_block_sum(float* out, const float* __restrict__ x, int n) {
  __shared__ float part[1024];
  float s = 0;
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) s += x[i];
  part[threadIdx.x] = s;
  __syncthreads();
  for (unsigned h = blockDim.x / 2; h > 0; h /= 2) {
    if (threadIdx.x < h) part[threadIdx.x] += part[threadIdx.x + h];
    __syncthreads();
  }
  if (threadIdx.x == 0) atomicAdd(out, part[0]);
}

// *out += sum(x) with warp shuffles: every warp reduces its values in
// registers and lane 0 adds the warp's sum atomically.
extern "C" __global__ void drafter_sample_warp_sum(float* out, const float* __restrict__ x, int n) {
  float s = 0;
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) s += x[i];
  for (int o = 16; o > 0; o /= 2) s += __shfl_xor_sync(0xffffffffu, s, o);
  if ((threadIdx.x & 31) == 0) atomicAdd(out, s);
}

// Block-wide sum of a double: warp shuffles, then one value per warp in
// dynamic shared memory (blockDim.x / 32 doubles), then warp 0 again. Every
// thread gets the total. The leading __syncthreads lets a caller use it in a
// loop (the previous call's readers are done before the slots are rewritten).
static __device__ double sample_block_sum_d(double v, double* warpSums) {
  for (int o = 16; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
  __syncthreads();
  if ((threadIdx.x & 31) == 0) warpSums[threadIdx.x / 32] = v;
  __syncthreads();
  unsigned nw = blockDim.x / 32;
  v = threadIdx.x < nw ? warpSums[threadIdx.x] : 0.0;
  if (threadIdx.x < 32)
    for (int o = 16; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
  if (threadIdx.x == 0) warpSums[0] = v;
  __syncthreads();
  return warpSums[0];
}

// y = x / sqrt(mean(x^2) + eps) * w for bf16 rows: one block per row, the
// mean accumulated in double, bf16 values widened in registers. Dynamic
// shared memory: blockDim.x / 32 doubles.
extern "C" __global__ void drafter_sample_rmsnorm_bf16(uint16_t* y, const uint16_t* __restrict__ x,
                                                       const uint16_t* __restrict__ w, int cols, float eps) {
  DYNAMIC_SHARED(double, warpSums);
  const uint16_t* xr = x + (long long)blockIdx.x * cols;
  uint16_t* yr = y + (long long)blockIdx.x * cols;
  double ss = 0;
  for (int j = threadIdx.x; j < cols; j += blockDim.x) {
    float v = bf16_to_f32(xr[j]);
    ss += (double)v * v;
  }
  ss = sample_block_sum_d(ss, warpSums);
  float r = rsqrtf((float)(ss / cols) + eps);
  for (int j = threadIdx.x; j < cols; j += blockDim.x) yr[j] = f32_to_bf16(bf16_to_f32(xr[j]) * r * bf16_to_f32(w[j]));
}
