// compat.h: the one header every kernel source includes.
//
// The same .cu file is compiled two ways:
//   - by clang-16 for the GPU (`-x cuda --cuda-device-only -nocudainc -nocudalib`,
//     __CUDA_ARCH__ defined): no CUDA headers and no libdevice, so everything a
//     kernel uses is defined here from clang's NVVM builtins, and every math
//     function is written out below (a call to libm's expf would be an
//     unresolved symbol in the PTX);
//   - by g++ or clang++ for the CPU with -DDRAFTER_CUDA_SIM: sim/cudasim.h runs
//     each CUDA thread as a CPU fiber and provides the same names.
// Kernels therefore use only what this file provides (see the contract):
// threadIdx/blockIdx/blockDim/gridDim, __syncthreads, the *_sync shuffles and
// votes with the full mask, atomicAdd/atomicMax, __shared__ and
// DYNAMIC_SHARED, the float math below, __fmul_rn/__fadd_rn, the bf16/f16
// bit conversions.
#ifndef DRAFTER_CUDA_COMPAT_H
#define DRAFTER_CUDA_COMPAT_H

#if defined(__CUDA_ARCH__)
// ---------------------------------------------------------------- GPU (NVPTX)

// Fixed-width integers from the compiler's own macros: no host header is
// parsed for the device, so the PTX cannot depend on the build machine's libc.
typedef __INT8_TYPE__ int8_t;
typedef __UINT8_TYPE__ uint8_t;
typedef __INT16_TYPE__ int16_t;
typedef __UINT16_TYPE__ uint16_t;
typedef __INT32_TYPE__ int32_t;
typedef __UINT32_TYPE__ uint32_t;
typedef __INT64_TYPE__ int64_t;
typedef __UINT64_TYPE__ uint64_t;
typedef __SIZE_TYPE__ size_t;

#define __host__ __attribute__((host))
#define __device__ __attribute__((device))
#define __global__ __attribute__((global))
#define __shared__ __attribute__((shared))
#define __constant__ __attribute__((constant))
#define __forceinline__ __inline__ __attribute__((always_inline))
#define __noinline__ __attribute__((noinline))
#define __align__(n) __attribute__((aligned(n)))
#define __launch_bounds__(...) __attribute__((launch_bounds(__VA_ARGS__)))

#include <__clang_cuda_builtin_vars.h>  // threadIdx & co. as %tid/%ctaid reads

// Dynamic shared memory: one untyped extern array for the whole module (two
// kernels declaring `extern __shared__ T name[]` with different T would clash).
extern __shared__ __align__(16) unsigned char drafter_dynamic_smem_[];
#define DYNAMIC_SHARED(type, name) type* name = reinterpret_cast<type*>(drafter_dynamic_smem_)

#define DRAFTER_DEV static __device__ __forceinline__

DRAFTER_DEV void __threadfence() { __nvvm_membar_gl(); }
DRAFTER_DEV void __threadfence_block() { __nvvm_membar_cta(); }
// __syncthreads is a clang builtin (bar.sync 0).

// Shuffles. c packs the segment mask and clamp as CUDA's own headers do:
// ((32-width)<<8) | 0x1f, and without the 0x1f for shfl.up.
#define DRAFTER_SHFL_C(width) (((32 - (width)) << 8) | 0x1f)
DRAFTER_DEV int __shfl_xor_sync(unsigned m, int v, int lm, int w = 32) { return __nvvm_shfl_sync_bfly_i32(m, v, lm, DRAFTER_SHFL_C(w)); }
DRAFTER_DEV float __shfl_xor_sync(unsigned m, float v, int lm, int w = 32) { return __nvvm_shfl_sync_bfly_f32(m, v, lm, DRAFTER_SHFL_C(w)); }
DRAFTER_DEV int __shfl_sync(unsigned m, int v, int src, int w = 32) { return __nvvm_shfl_sync_idx_i32(m, v, src, DRAFTER_SHFL_C(w)); }
DRAFTER_DEV float __shfl_sync(unsigned m, float v, int src, int w = 32) { return __nvvm_shfl_sync_idx_f32(m, v, src, DRAFTER_SHFL_C(w)); }
DRAFTER_DEV int __shfl_down_sync(unsigned m, int v, unsigned d, int w = 32) { return __nvvm_shfl_sync_down_i32(m, v, d, DRAFTER_SHFL_C(w)); }
DRAFTER_DEV float __shfl_down_sync(unsigned m, float v, unsigned d, int w = 32) { return __nvvm_shfl_sync_down_f32(m, v, d, DRAFTER_SHFL_C(w)); }
DRAFTER_DEV int __shfl_up_sync(unsigned m, int v, unsigned d, int w = 32) { return __nvvm_shfl_sync_up_i32(m, v, d, (32 - w) << 8); }
DRAFTER_DEV float __shfl_up_sync(unsigned m, float v, unsigned d, int w = 32) { return __nvvm_shfl_sync_up_f32(m, v, d, (32 - w) << 8); }
// unsigned and the 64-bit types go through int halves, as in CUDA's headers.
#define DRAFTER_SHFL_U32(NAME, ARG)                                                   \
  DRAFTER_DEV unsigned NAME(unsigned m, unsigned v, ARG a, int w = 32) { return (unsigned)NAME(m, (int)v, a, w); }
#define DRAFTER_SHFL_64(NAME, T, ARG)                                                   \
  DRAFTER_DEV T NAME(unsigned m, T v, ARG a, int w = 32) {                              \
    unsigned long long u = __builtin_bit_cast(unsigned long long, v);                   \
    int lo = NAME(m, (int)(unsigned)u, a, w), hi = NAME(m, (int)(unsigned)(u >> 32), a, w); \
    return __builtin_bit_cast(T, ((unsigned long long)(unsigned)hi << 32) | (unsigned)lo); \
  }
#define DRAFTER_SHFL_WIDE(NAME, ARG)                                                    \
  DRAFTER_SHFL_U32(NAME, ARG)                                                           \
  DRAFTER_SHFL_64(NAME, double, ARG)                                                    \
  DRAFTER_SHFL_64(NAME, long long, ARG)                                                 \
  DRAFTER_SHFL_64(NAME, unsigned long long, ARG)
DRAFTER_SHFL_WIDE(__shfl_xor_sync, int)
DRAFTER_SHFL_WIDE(__shfl_sync, int)
DRAFTER_SHFL_WIDE(__shfl_down_sync, unsigned)
DRAFTER_SHFL_WIDE(__shfl_up_sync, unsigned)
#undef DRAFTER_SHFL_U32
#undef DRAFTER_SHFL_64
#undef DRAFTER_SHFL_WIDE

DRAFTER_DEV unsigned __ballot_sync(unsigned m, int p) { return __nvvm_vote_ballot_sync(m, p); }
DRAFTER_DEV int __any_sync(unsigned m, int p) { return __nvvm_vote_any_sync(m, p); }
DRAFTER_DEV int __all_sync(unsigned m, int p) { return __nvvm_vote_all_sync(m, p); }

// Atomics (generic address space, relaxed, device scope: CUDA's semantics).
DRAFTER_DEV float atomicAdd(float* p, float v) { return __nvvm_atom_add_gen_f(p, v); }
DRAFTER_DEV double atomicAdd(double* p, double v) { return __nvvm_atom_add_gen_d(p, v); }
DRAFTER_DEV int atomicAdd(int* p, int v) { return __nvvm_atom_add_gen_i(p, v); }
DRAFTER_DEV unsigned atomicAdd(unsigned* p, unsigned v) { return (unsigned)__nvvm_atom_add_gen_i((int*)p, (int)v); }
DRAFTER_DEV unsigned long long atomicAdd(unsigned long long* p, unsigned long long v) {
  return (unsigned long long)__nvvm_atom_add_gen_ll((long long*)p, (long long)v);
}
DRAFTER_DEV int atomicMax(int* p, int v) { return __nvvm_atom_max_gen_i(p, v); }
DRAFTER_DEV int atomicMin(int* p, int v) { return __nvvm_atom_min_gen_i(p, v); }
DRAFTER_DEV int atomicCAS(int* p, int cmp, int v) { return __nvvm_atom_cas_gen_i(p, cmp, v); }
DRAFTER_DEV int atomicExch(int* p, int v) { return __nvvm_atom_xchg_gen_i(p, v); }

// The hardware approximations the math below builds on.
DRAFTER_DEV float drafter_ex2_approx_(float x) { return __nvvm_ex2_approx_f(x); }

// __fmul_rn and __fadd_rn: a float32 product and sum, each rounded to
// nearest, that are never fused into an fma (CUDA's own guarantee for these
// names). ptx.sh's clang contracts a*b+c into fma.rn whatever the source
// says (the NVPTX backend fuses by a global option that neither
// #pragma clang fp contract nor __nvvm_mul_rn_f, which instcombine turns back
// into a plain fmul, overrides), so the instructions are written out: ptxas
// contracts no .rn instruction. A kernel whose result must equal the CPU's
// separately rounded a*b + c bit for bit uses them.
DRAFTER_DEV float __fmul_rn(float a, float b) {
  float r;
  asm("mul.rn.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b));
  return r;
}
DRAFTER_DEV float __fadd_rn(float a, float b) {
  float r;
  asm("add.rn.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b));
  return r;
}

#elif defined(DRAFTER_CUDA_SIM)
// ---------------------------------------------------------------- CPU simulator
#include "sim/cudasim.h"
#define DRAFTER_DEV static inline
DRAFTER_DEV float drafter_ex2_approx_(float x) { return exp2f(x); }
// The simulator's float32 product and sum, each rounded: the simulator builds
// with -std=c++17 (g++ then contracts nothing; clang++ contracts only within
// one expression, and these are separate functions) for a target without fma
// instructions unless -march asks for them.
DRAFTER_DEV float __fmul_rn(float a, float b) { return a * b; }
DRAFTER_DEV float __fadd_rn(float a, float b) { return a + b; }

#else
#error "compat.h: compile with clang -x cuda (device) or with -DDRAFTER_CUDA_SIM (CPU simulator)"
#endif

// ---------------------------------------------------------------- common to both

#ifndef INFINITY
#define INFINITY (__builtin_inff())
#endif
#ifndef NAN
#define NAN (__builtin_nanf(""))
#endif
#ifndef FLT_MAX
#define FLT_MAX __FLT_MAX__
#endif

DRAFTER_DEV uint32_t f32_bits(float f) { return __builtin_bit_cast(uint32_t, f); }
DRAFTER_DEV float bits_f32(uint32_t u) { return __builtin_bit_cast(float, u); }
DRAFTER_DEV uint64_t f64_bits(double f) { return __builtin_bit_cast(uint64_t, f); }
DRAFTER_DEV double bits_f64(uint64_t u) { return __builtin_bit_cast(double, u); }

// bf16/f16 as uint16_t bits, converted exactly as pkg/tensor/internal/kernel/half.go
// does (round to nearest even, NaN kept quiet), so the GPU, the simulator and
// the CPU device round every value identically.
DRAFTER_DEV float bf16_to_f32(uint16_t h) { return bits_f32((uint32_t)h << 16); }

DRAFTER_DEV uint16_t f32_to_bf16(float f) {
  uint32_t b = f32_bits(f);
  if ((b & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((b >> 16) | 0x40);  // NaN: no carry into inf
  return (uint16_t)((b + 0x7fffu + ((b >> 16) & 1u)) >> 16);
}

// The magnitude bits shifted into float position read as a float with an
// exponent 112 too small; multiplying by 2^112 fixes it and normalises subnormals.
DRAFTER_DEV float f16_to_f32(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
  uint32_t mag = (uint32_t)(h & 0x7fffu) << 13;
  if (mag == (0x7c00u << 13)) return bits_f32(sign | 0x7f800000u);
  if (mag > (0x7c00u << 13)) return bits_f32(sign | 0x7fc00000u | mag);
  return bits_f32(sign | f32_bits(bits_f32(mag) * 0x1p112f));
}

DRAFTER_DEV uint16_t f32_to_f16(float v) {
  const uint32_t overflow = 0x477ff000u;                           // 65520 rounds to inf
  const uint32_t minNorm = (127u - 14u) << 23;                     // 2^-14
  const uint32_t denormMagic = ((127u - 15u) + (23u - 10u) + 1u) << 23;  // 0.5
  uint32_t u = f32_bits(v);
  uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
  u &= 0x7fffffffu;
  if (u > 0x7f800000u) return (uint16_t)(sign | 0x7e00u | ((u >> 13) & 0x3ffu));
  if (u >= overflow) return (uint16_t)(sign | 0x7c00u);
  if (u < minNorm) {  // the float adder rounds the binary16 subnormal for us
    float f = bits_f32(u) + bits_f32(denormMagic);
    return (uint16_t)(sign | (uint16_t)(f32_bits(f) - denormMagic));
  }
  return (uint16_t)(sign | (uint16_t)((u - (((127u - 15u) << 23) - 0xfffu) + ((u >> 13) & 1u)) >> 13));
}

// min/max as CUDA provides them for device code.
DRAFTER_DEV int min(int a, int b) { return a < b ? a : b; }
DRAFTER_DEV int max(int a, int b) { return a > b ? a : b; }
DRAFTER_DEV unsigned min(unsigned a, unsigned b) { return a < b ? a : b; }
DRAFTER_DEV unsigned max(unsigned a, unsigned b) { return a > b ? a : b; }
DRAFTER_DEV long long min(long long a, long long b) { return a < b ? a : b; }
DRAFTER_DEV long long max(long long a, long long b) { return a > b ? a : b; }

// ---------------------------------------------------------------- math
// Written once, used on the GPU (where the names expf, logf, ... are macros
// for these) and compiled for the CPU as drafter_* so the math test checks
// them against libm. The simulator's kernels call libm directly.
// Only __builtin_* operations that both LLVM's NVPTX backend and g++ turn
// into single instructions appear here (sqrt.rn, fma.rn, cvt.rni, abs, min/max).

// expf: exp(x) = 2^j * 2^(r/ln2) with r = x - j*ln2 by a two-part ln2, so the
// argument of the ~2 ulp hardware ex2 stays in [-0.5, 0.5]; about 2 ulp overall.
DRAFTER_DEV float drafter_expf(float x) {
  if (!(x == x)) return x;
  if (x > 88.72283935546875f) return INFINITY;
  if (x < -103.97208404541015625f) return 0.0f;
  float j = __builtin_rintf(x * 1.44269502162933349609375f);
  float r = __builtin_fmaf(j, -0.693145751953125f, x);  // ln2 high part, exact product
  r = __builtin_fmaf(j, -1.428606765330187045e-06f, r);   // ln2 low part
  float e = drafter_ex2_approx_(r * 1.44269502162933349609375f);
  // 2^j in two factors: j can reach -150 or 128, outside one float's exponent.
  int ji = (int)j;
  int j1 = ji / 2, j2 = ji - j1;
  return e * bits_f32((uint32_t)(j1 + 127) << 23) * bits_f32((uint32_t)(j2 + 127) << 23);
}

// logf: musl/FreeBSD's logf (reduce to [sqrt(2)/2, sqrt(2)], a degree-8
// polynomial in s = f/(2+f)); under 1 ulp.
DRAFTER_DEV float drafter_logf(float x) {
  const float ln2_hi = 6.9313812256e-01f, ln2_lo = 9.0580006145e-06f;
  const float Lg1 = 0xaaaaaa.0p-24f, Lg2 = 0xccce13.0p-25f, Lg3 = 0x91e9ee.0p-25f, Lg4 = 0xf89e26.0p-26f;
  uint32_t ix = f32_bits(x);
  int k = 0;
  if (ix < 0x00800000u || (ix >> 31)) {
    if ((ix << 1) == 0) return -INFINITY;
    if (ix >> 31) return NAN;
    k -= 25;  // subnormal: scale up
    x *= 0x1p25f;
    ix = f32_bits(x);
  } else if (ix >= 0x7f800000u) {
    return x;
  } else if (ix == 0x3f800000u) {
    return 0.0f;
  }
  ix += 0x3f800000u - 0x3f3504f3u;
  k += (int)(ix >> 23) - 0x7f;
  ix = (ix & 0x007fffffu) + 0x3f3504f3u;
  x = bits_f32(ix);
  float f = x - 1.0f;
  float s = f / (2.0f + f);
  float z = s * s, w = z * z;
  float t1 = w * (Lg2 + w * Lg4), t2 = z * (Lg1 + w * Lg3);
  float R = t2 + t1, hfsq = 0.5f * f * f, dk = (float)k;
  return s * (hfsq + R) + dk * ln2_lo - hfsq + f + dk * ln2_hi;
}

DRAFTER_DEV float drafter_sqrtf(float x) { return __builtin_sqrtf(x); }  // sqrt.rn: correctly rounded
// 1/sqrt(x) with two correctly rounded operations (under 1.5 ulp), the CPU's
// own formula, rather than rsqrt.approx; one per row where it is used.
DRAFTER_DEV float drafter_rsqrtf(float x) { return 1.0f / __builtin_sqrtf(x); }
DRAFTER_DEV float drafter_fabsf(float x) { return __builtin_fabsf(x); }
DRAFTER_DEV float drafter_fmaxf(float a, float b) { return __builtin_fmaxf(a, b); }
DRAFTER_DEV float drafter_fminf(float a, float b) { return __builtin_fminf(a, b); }

// tanhf: odd Taylor polynomial near 0 (where 1 - e^-2|x| would cancel), else
// (1 - t)/(1 + t) with t = e^-2|x|; a few ulp.
DRAFTER_DEV float drafter_tanhf(float x) {
  float a = __builtin_fabsf(x);
  if (a < 0.3f) {
    float z = x * x;
    return x + x * z * (-1.0f / 3 + z * (2.0f / 15 + z * (-17.0f / 315 + z * (62.0f / 2835))));
  }
  if (a > 9.01f) return __builtin_copysignf(1.0f, x);
  float t = drafter_expf(-2.0f * a);
  return __builtin_copysignf((1.0f - t) / (1.0f + t), x);
}

// sinf/cosf: musl's kernels, in double: x - n*pi/2 by a two-part pi/2 (exact
// for |x| below 2^28, which covers every rotary angle), then a polynomial on
// [-pi/4, pi/4]. Double arithmetic is plain fma/add/mul on the GPU.
DRAFTER_DEV double drafter_sindf_(double x) {
  const double S1 = -0x15555554cbac77.0p-55, S2 = 0x111110896efbb2.0p-59, S3 = -0x1a00f9e2cae774.0p-65,
               S4 = 0x16cd878c3b46a7.0p-71;
  double z = x * x, w = z * z, r = S3 + z * S4, s = z * x;
  return (x + s * (S1 + z * S2)) + s * w * r;
}
DRAFTER_DEV double drafter_cosdf_(double x) {
  const double C0 = -0x1ffffffd0c5e81.0p-54, C1 = 0x155553e1053a42.0p-57, C2 = -0x16c087e80f1e27.0p-62,
               C3 = 0x199342e0ee5069.0p-68;
  double z = x * x, w = z * z, r = C2 + z * C3;
  return ((1.0 + z * C0) + w * C1) + (w * z) * r;
}
DRAFTER_DEV double drafter_rem_pio2f_(float x, int* n) {
  const double invpio2 = 6.36619772367581382433e-01, pio2_1 = 1.57079631090164184570e+00,
               pio2_1t = 1.58932547735281966916e-08;
  double fn = __builtin_rint((double)x * invpio2);
  *n = (int)(long long)fn;
  return ((double)x - fn * pio2_1) - fn * pio2_1t;
}
DRAFTER_DEV float drafter_sinf(float x) {
  if (!(__builtin_fabsf(x) <= __FLT_MAX__)) return x - x;  // inf or NaN -> NaN
  int n;
  double y = drafter_rem_pio2f_(x, &n);
  switch (n & 3) {
    case 0: return (float)drafter_sindf_(y);
    case 1: return (float)drafter_cosdf_(y);
    case 2: return (float)-drafter_sindf_(y);
    default: return (float)-drafter_cosdf_(y);
  }
}
DRAFTER_DEV float drafter_cosf(float x) {
  if (!(__builtin_fabsf(x) <= __FLT_MAX__)) return x - x;
  int n;
  double y = drafter_rem_pio2f_(x, &n);
  switch (n & 3) {
    case 0: return (float)drafter_cosdf_(y);
    case 1: return (float)-drafter_sindf_(y);
    case 2: return (float)-drafter_cosdf_(y);
    default: return (float)drafter_sindf_(y);
  }
}

// powf for x > 0 (and the usual special cases): exp(y*ln x) evaluated in
// double with series that are exact to about 1e-14, then rounded once.
DRAFTER_DEV float drafter_powf(float x, float y) {
  if (y == 0.0f || x == 1.0f) return 1.0f;
  if (!(x == x) || !(y == y)) return NAN;
  float ay = __builtin_fabsf(y);
  bool yint = ay < 0x1p24f ? __builtin_rintf(y) == y : ay <= __FLT_MAX__;
  bool yodd = yint && ay < 0x1p24f && ((long long)ay & 1);
  if (x < 0.0f) {
    if (!yint) return NAN;
    float r = drafter_powf(-x, y);
    return yodd ? -r : r;
  }
  if (x == 0.0f) return y > 0.0f ? 0.0f : INFINITY;
  if (x > __FLT_MAX__) return y > 0.0f ? INFINITY : 0.0f;
  // ln x: x = m * 2^k with m in [sqrt(1/2), sqrt(2)), ln m = 2 atanh(s), s = (m-1)/(m+1).
  uint32_t ix = f32_bits(x);
  int k = 0;
  if (ix < 0x00800000u) {
    x *= 0x1p25f;
    ix = f32_bits(x);
    k = -25;
  }
  ix += 0x3f800000u - 0x3f3504f3u;
  k += (int)(ix >> 23) - 0x7f;
  double m = (double)bits_f32((ix & 0x007fffffu) + 0x3f3504f3u);
  double s = (m - 1.0) / (m + 1.0), s2 = s * s;
  double series = 1.0 / 15;
  for (int i = 13; i >= 1; i -= 2) series = 1.0 / i + s2 * series;
  double lnx = (double)k * 0.693147180559945286 + 2.0 * s * series;
  double t = (double)y * lnx;
  if (t > 89.0) return INFINITY;
  if (t < -104.0) return 0.0f;
  // e^t = 2^n e^r, |r| <= ln2/2; Taylor to degree 13.
  double n = __builtin_rint(t * 1.44269504088896338700);
  double r = (t - n * 0.693147180369123816490) - n * 1.90821492927058770002e-10;
  double e = 1.0;  // 1 + r/1 (1 + r/2 (1 + r/3 (...)))
  for (int i = 13; i >= 1; i--) e = 1.0 + r * e / i;
  return (float)(e * bits_f64((uint64_t)((long long)n + 1023) << 52));
}

#if defined(__CUDA_ARCH__)
#define expf(x) drafter_expf(x)
#define logf(x) drafter_logf(x)
#define sqrtf(x) drafter_sqrtf(x)
#define rsqrtf(x) drafter_rsqrtf(x)
#define fabsf(x) drafter_fabsf(x)
#define fmaxf(a, b) drafter_fmaxf(a, b)
#define fminf(a, b) drafter_fminf(a, b)
#define tanhf(x) drafter_tanhf(x)
#define sinf(x) drafter_sinf(x)
#define cosf(x) drafter_cosf(x)
#define powf(x, y) drafter_powf(x, y)
#define fmaf(a, b, c) __builtin_fmaf(a, b, c)
#define floorf(x) __builtin_floorf(x)
#define ceilf(x) __builtin_ceilf(x)
#define sqrt(x) __builtin_sqrt(x)
#define fabs(x) __builtin_fabs(x)
#define isnan(x) __builtin_isnan(x)
#define isinf(x) __builtin_isinf(x)
#endif

#undef DRAFTER_DEV
#endif  // DRAFTER_CUDA_COMPAT_H
