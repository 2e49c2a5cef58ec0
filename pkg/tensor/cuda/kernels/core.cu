// Core kernels of the CUDA device (group H2): the few-row weight product
// (decode steps, drafts and their verification, up to tensor.FewRows rows),
// the float32 -> bf16/f16 cast of a large product's input before
// cublasGemmEx, and the KV cache's position move.
//
// The few-row product computes each output value as one warp's dot product
// of an input row (float32) and a weight row (float32, or bf16/f16 widened in
// registers), accumulated in float32: lane l sums the products of columns
// l·8..l·8+7, l·8+256.. (or l, l+32, ... when k is not a multiple of 8 or the
// rows are not 16-byte aligned), then the warp adds the 32 partial sums by a
// butterfly. A row's result therefore depends only on its own values, never
// on how many rows the call has or where its tile starts: the row
// independence tensor.Device promises up to FewRows rows (a verification
// scores each draft token exactly as a decode step would).
#include "compat.h"

// Vector loads of 16 bytes: GCC and clang both know vector_size, so the
// simulator runs the same code the GPU does (ld.global.v4).
typedef float core_f4 __attribute__((vector_size(16)));
typedef unsigned int core_u4 __attribute__((vector_size(16)));

// core_widen returns value i of a weight row of dtype DT (0 f32, 1 bf16, 2
// f16) as float32.
template <int DT>
static __device__ __forceinline__ float core_widen(const void* w, long long i) {
  if (DT == 0) return ((const float*)w)[i];
  uint16_t h = ((const uint16_t*)w)[i];
  return DT == 1 ? bf16_to_f32(h) : f16_to_f32(h);
}

// core_widen8 loads weights i..i+7 (16-byte aligned) as float32: one 16-byte
// load whatever the dtype (16-bit values two to a 32-bit word, the lower
// one first: the host and the GPU are little-endian).
template <int DT>
static __device__ __forceinline__ void core_widen8(const void* w, long long i, float* v) {
  if (DT == 0) {
    core_f4 a = *(const core_f4*)((const float*)w + i), b = *(const core_f4*)((const float*)w + i + 4);
    for (int j = 0; j < 4; j++) {
      v[j] = a[j];
      v[j + 4] = b[j];
    }
    return;
  }
  core_u4 h = *(const core_u4*)((const uint16_t*)w + i);
  for (int j = 0; j < 4; j++) {
    uint16_t lo = (uint16_t)(h[j] & 0xffffu), hi = (uint16_t)(h[j] >> 16);
    v[2 * j] = DT == 1 ? bf16_to_f32(lo) : f16_to_f32(lo);
    v[2 * j + 1] = DT == 1 ? bf16_to_f32(hi) : f16_to_f32(hi);
  }
}

// core_dot8 returns x[0..7]·w[0..7] (x 16-byte aligned) in a fixed order.
static __device__ __forceinline__ float core_dot8(const float* x, const float* w) {
  core_f4 a = *(const core_f4*)x, b = *(const core_f4*)(x + 4);
  float p = a[0] * w[0];
  p = fmaf(a[1], w[1], p);
  p = fmaf(a[2], w[2], p);
  p = fmaf(a[3], w[3], p);
  p = fmaf(b[0], w[4], p);
  p = fmaf(b[1], w[5], p);
  p = fmaf(b[2], w[6], p);
  p = fmaf(b[3], w[7], p);
  return p;
}

// The tiling (cuda/core.go's fewWarps and fewTile): blockDim.x = 32·warps,
// each warp one output column j = blockIdx.x·warps + warp, for the rows
// blockIdx.y·CORE_TILE .. +CORE_TILE-1.
#define CORE_TILE 8

// CORE_UNROLL unrolls the loops over a tile's rows fully on the GPU, so that
// the per-row sums stay in registers (indexed in a loop, they would go to
// local memory). g++ in the simulator has its own pragma; it needs none.
#if defined(__CUDA_ARCH__)
#define CORE_UNROLL _Pragma("unroll")
#else
#define CORE_UNROLL
#endif

// core_mult_few computes out[r, j] (+)= x[r, :]·w[j, :] for the tile's rows.
template <int DT>
static __device__ __forceinline__ void core_mult_few(float* out, const float* x, const void* w, int rows, int n,
                                                     int k, int acc) {
  const int lane = threadIdx.x & 31;
  const int j = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
  const int r0 = blockIdx.y * CORE_TILE;
  if (j >= n) return;  // the whole warp: j is the warp's
  const int nr = min(CORE_TILE, rows - r0);
  const long long wrow = (long long)j * k;
  const float* xt = x + (long long)r0 * k;
  float s[CORE_TILE];
  CORE_UNROLL
  for (int i = 0; i < CORE_TILE; i++) s[i] = 0.0f;
  const bool vec = (k & 7) == 0 && (((unsigned long long)x | (unsigned long long)w) & 15) == 0;
  if (vec) {
    // Two chunks of 256 columns per step, both loads issued before the
    // arithmetic: more bytes in flight per warp, which a memory-bound
    // decode step needs.
    for (int c = lane * 8; c < k; c += 512) {
      const bool two = c + 256 < k;
      float wa[8], wb[8];
      core_widen8<DT>(w, wrow + c, wa);
      core_widen8<DT>(w, wrow + (two ? c + 256 : c), wb);  // unconditional: wb stays in registers
      CORE_UNROLL
      for (int i = 0; i < CORE_TILE; i++) {
        if (i < nr) {
          const float* xr = xt + (long long)i * k + c;
          s[i] += core_dot8(xr, wa);
          if (two) s[i] += core_dot8(xr + 256, wb);
        }
      }
    }
  } else {
    for (int c = lane; c < k; c += 32) {
      float wv = core_widen<DT>(w, wrow + c);
      CORE_UNROLL
      for (int i = 0; i < CORE_TILE; i++)
        if (i < nr) s[i] = fmaf(xt[(long long)i * k + c], wv, s[i]);
    }
  }
  CORE_UNROLL
  for (int i = 0; i < CORE_TILE; i++)
    for (int o = 16; o > 0; o >>= 1) s[i] += __shfl_xor_sync(0xffffffffu, s[i], o);
  if (lane == 0) {
    CORE_UNROLL
    for (int i = 0; i < CORE_TILE; i++) {
      if (i < nr) {
        float* o = out + (long long)(r0 + i) * n + j;
        *o = acc ? *o + s[i] : s[i];
      }
    }
  }
}

extern "C" __global__ void drafter_core_mult_few_f32(float* out, const float* x, const float* w, int rows, int n,
                                                     int k, int acc) {
  core_mult_few<0>(out, x, w, rows, n, k, acc);
}

extern "C" __global__ void drafter_core_mult_few_bf16(float* out, const float* x, const uint16_t* w, int rows, int n,
                                                      int k, int acc) {
  core_mult_few<1>(out, x, w, rows, n, k, acc);
}

extern "C" __global__ void drafter_core_mult_few_f16(float* out, const float* x, const uint16_t* w, int rows, int n,
                                                     int k, int acc) {
  core_mult_few<2>(out, x, w, rows, n, k, acc);
}

// drafter_core_round_bf16 and _f16 round n float32 values to the 16-bit
// format (nearest, ties to even: the CPU's F32ToBF16 and F32ToF16), the
// input of a 16-bit cublasGemmEx. Grid-stride over 64-bit indices.
extern "C" __global__ void drafter_core_round_bf16(uint16_t* out, const float* x, long long n) {
  long long stride = (long long)gridDim.x * blockDim.x;
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) out[i] = f32_to_bf16(x[i]);
}

extern "C" __global__ void drafter_core_round_f16(uint16_t* out, const float* x, long long n) {
  long long stride = (long long)gridDim.x * blockDim.x;
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) out[i] = f32_to_f16(x[i]);
}

// drafter_core_kv_move copies position src to position dst in each of the
// cache's planes (a layer's keys, then its values: planes of plane values
// each, kvDim per position): blockIdx.y is the plane, threads the values.
extern "C" __global__ void drafter_core_kv_move(float* base, int planes, long long plane, int kvDim, int dst, int src) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= kvDim || (int)blockIdx.y >= planes) return;
  float* p = base + (long long)blockIdx.y * plane;
  p[(long long)dst * kvDim + i] = p[(long long)src * kvDim + i];
}
