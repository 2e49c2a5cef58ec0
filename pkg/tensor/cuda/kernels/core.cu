// Core kernels of the CUDA device (group H2): the few-row weight product
// (decode steps, drafts and their verification, up to tensor.FewRows rows),
// the float32 -> bf16/f16 cast of a large product's input before
// cublasGemmEx, the widening of an MXFP4 weight's panel to float32 before
// a large product's cublasGemmEx, and the KV cache's position move.
//
// The few-row product computes each output value as one warp's dot product
// of an input row (float32) and a weight row (float32, or bf16/f16 widened in
// registers, and MXFP4 widened there exactly from its nibbles and block
// scales), accumulated in float32: lane l sums the products of columns
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

// MXFP4 (tensor.MXFP4Matrix, gpt-oss's experts): a weight [n, k] is
// n·k/2 bytes of e2m1 nibbles, the low nibble of byte b value 2b, the high
// one value 2b+1, and n·k/32 scale bytes, value = fp4(nibble)·2^(scale-127).
// Every value with a scale of at most tensor.MXFP4MaxScale is a float32, and
// the product below of two float32s is exact (subnormals kept: the PTX has
// no .ftz), so a weight widens to the bits the CPU's tensor.MXFP4ToF32 gives.

// core_mxfp4_scale returns 2^(s-127) from its bits: the normal powers for
// s ≥ 1, the subnormal 2^-127 for s = 0.
static __device__ __forceinline__ float core_mxfp4_scale(uint32_t s) {
  return bits_f32(s ? s << 23 : 1u << 22);
}

// core_fp4 returns the e2m1 nibble b's value, its bits assembled from the
// format (sign bit 3, exponent bits 2-1 with bias 1, mantissa bit 0):
// (1 + m/2)·2^(e-1) for e ≥ 1, the subnormal m/2 for e = 0.
static __device__ __forceinline__ float core_fp4(uint32_t b) {
  uint32_t e = (b >> 1) & 3u, m = b & 1u;
  uint32_t bits = e ? ((126u + e) << 23) | (m << 22) : m * 0x3f000000u;
  return bits_f32(bits | (b & 8u) << 28);
}

// core_widen returns value i of a weight row of dtype DT (0 f32, 1 bf16, 2
// f16, 3 MXFP4 with its scales sc) as float32.
template <int DT>
static __device__ __forceinline__ float core_widen(const void* w, const uint8_t* sc, long long i) {
  if (DT == 0) return ((const float*)w)[i];
  if (DT == 3) {
    uint32_t b = ((const uint8_t*)w)[i >> 1];
    return core_fp4((i & 1) ? b >> 4 : b & 15u) * core_mxfp4_scale(sc[i >> 5]);
  }
  uint16_t h = ((const uint16_t*)w)[i];
  return DT == 1 ? bf16_to_f32(h) : f16_to_f32(h);
}

// core_widen8 loads weights i..i+7 (16-byte aligned) as float32: one 16-byte
// load whatever the dtype (16-bit values two to a 32-bit word, the lower
// one first: the host and the GPU are little-endian), one 4-byte load and
// the block's scale for MXFP4 (i a multiple of 8: the eight share a block).
template <int DT>
static __device__ __forceinline__ void core_widen8(const void* w, const uint8_t* sc, long long i, float* v) {
  if (DT == 3) {
    uint32_t q = *(const uint32_t*)((const uint8_t*)w + (i >> 1));
    float f = core_mxfp4_scale(sc[i >> 5]);
    for (int j = 0; j < 8; j++) v[j] = core_fp4((q >> (4 * j)) & 15u) * f;
    return;
  }
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
static __device__ __forceinline__ void core_mult_few(float* out, const float* x, const void* w, const uint8_t* sc,
                                                     int rows, int n, int k, int acc) {
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
      core_widen8<DT>(w, sc, wrow + c, wa);
      core_widen8<DT>(w, sc, wrow + (two ? c + 256 : c), wb);  // unconditional: wb stays in registers
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
      float wv = core_widen<DT>(w, sc, wrow + c);
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
  core_mult_few<0>(out, x, w, nullptr, rows, n, k, acc);
}

extern "C" __global__ void drafter_core_mult_few_bf16(float* out, const float* x, const uint16_t* w, int rows, int n,
                                                      int k, int acc) {
  core_mult_few<1>(out, x, w, nullptr, rows, n, k, acc);
}

extern "C" __global__ void drafter_core_mult_few_f16(float* out, const float* x, const uint16_t* w, int rows, int n,
                                                     int k, int acc) {
  core_mult_few<2>(out, x, w, nullptr, rows, n, k, acc);
}

// drafter_core_mult_few_mxfp4 is the few-row product over an MXFP4 weight
// (blocks w, scales sc; k a multiple of 32): the float32 kernel's lanes and
// order of sums over the widened values, so a row gets the bits the float32
// weight of the same values gives it.
extern "C" __global__ void drafter_core_mult_few_mxfp4(float* out, const float* x, const uint8_t* w, const uint8_t* sc,
                                                       int rows, int n, int k, int acc) {
  core_mult_few<3>(out, x, w, sc, rows, n, k, acc);
}

// drafter_core_mxfp4_f32 widens the MXFP4 values of bytes bytes of blocks
// (two values each) with their scales into out (2·bytes float32s), exactly:
// a panel of an MXFP4 weight before a large product's float32
// cublasGemmEx. Grid-stride over 64-bit byte indices.
extern "C" __global__ void drafter_core_mxfp4_f32(float* out, const uint8_t* blocks, const uint8_t* scales,
                                                  long long bytes) {
  long long stride = (long long)gridDim.x * blockDim.x;
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < bytes; i += stride) {
    uint32_t b = blocks[i];
    float f = core_mxfp4_scale(scales[i >> 4]);
    out[2 * i] = core_fp4(b & 15u) * f;
    out[2 * i + 1] = core_fp4(b >> 4) * f;
  }
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

// drafter_core_kv_write copies n values of k to the address dst[0] and n of
// v to dst[1] (blockIdx.y picks the pair; grid-stride over the values): a
// KV cache write whose destination rows are read from device memory, so
// that a decode step replayed as a CUDA graph writes at the step's own
// position (the plain path's two device-to-device copies bake the position
// into the copy).
extern "C" __global__ void drafter_core_kv_write(const unsigned long long* __restrict__ dst, const float* __restrict__ k,
                                                 const float* __restrict__ v, long long n) {
  const float* src = blockIdx.y == 0 ? k : v;
  float* out = (float*)dst[blockIdx.y];
  long long stride = (long long)gridDim.x * blockDim.x;
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) out[i] = src[i];
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
