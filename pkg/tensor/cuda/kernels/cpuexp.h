// cpuexp.h: the CPU device's exponential on the GPU. Kernels whose results
// must stay within a rounding or two of the CPU device's (SwiGLU, SiLU, the
// softmaxes and cross-entropies) use it instead of compat.h's expf, which
// is the GPU's ex2.approx (a different function, a few ulp away).
//
// No include guard: the stand-in compiles every .cu into one translation
// unit, each in a namespace of its own, and each needs its own copy of this
// static function. Include it once per .cu.

#include "compat.h"

// cpu_expf is the CPU device's Expf (pkg/tensor/internal/kernel/exp.go)
// operation for operation: Cody-Waite range reduction by ln 2, the Cephes
// degree-6 polynomial, 2^k built in the exponent bits. The GPU's own expf
// (ex2.approx) is a different function; using the CPU's keeps SwiGLU and SiLU
// within a rounding or two of the CPU's values.
static __device__ __forceinline__ float cpu_expf(float x) {
    if (!(x > -87.33654f)) {  // also NaN, which stays NaN
        if (x != x) {
            return x;
        }
        return 0.0f;
    }
    if (x > 88.72283f) {
        return INFINITY;
    }
    // k = round(x / ln2), by truncating x/ln2 +- 0.5.
    float t = x * 1.44269504088896341f;
    if (t < 0.0f) {
        t -= 0.5f;
    } else {
        t += 0.5f;
    }
    int ki = (int)t;
    float k = (float)ki;
    float r = x - k * 0.693359375f;
    r -= k * -2.12194440e-4f;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    float y = p * r * r + r + 1.0f;
    if (ki < -126) {  // subnormal result: scale in two steps
        return y * bits_f32((unsigned int)(ki + 126 + 127) << 23) * bits_f32(1u << 23);
    }
    if (ki > 127) {  // 2^128 is not a float32: scale in two steps
        return y * bits_f32((unsigned int)(ki - 1 + 127) << 23) * 2.0f;
    }
    return y * bits_f32((unsigned int)(ki + 127) << 23);
}
