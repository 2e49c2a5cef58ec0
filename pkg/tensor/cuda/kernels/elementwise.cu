// Element-wise, row-wise and small reduction kernels of the CUDA device
// (group H3): embedding gathers, a mixture-of-experts combine (scaled rows
// added into indexed rows), column splits and concatenations, RMSNorm
// and its backward, RoPE and its backward, the activations (SwiGLU, SiLU)
// and their backwards, residual adds, bias sums, the optimizer's sum of
// squares and AdamW step, and dtype casts.
//
// Each kernel computes what the CPU device (pkg/tensor/cpu*.go) computes,
// in the same order of float32 operations where that order is visible
// (the exponential is the CPU's Expf, step for step; RMSNorm's mean and the
// sum of squares accumulate in float64 as the CPU's do), so that the
// conformance suite's tolerances, written for the CPU, hold here too.
//
// Conventions: element-wise kernels run grid-stride loops over 64-bit
// indices (a tensor may pass 2^31 values); row kernels run one block per
// row, reducing with warp shuffles and a shared-memory slot per warp. Every
// block size is a multiple of 32 and at most 1024, and every lane of a warp
// reaches every shuffle. Helpers are static so that the stand-in, which
// links every group's kernels into one library, sees no duplicate symbols.
#include "compat.h"
#include "cpuexp.h"

// ---------------------------------------------------------------------------
// The CPU's float arithmetic.


// ---------------------------------------------------------------------------
// binary16, as plain integer arithmetic so that the results do not depend on
// the GPU's denormal mode: the CPU's f16ToF32 and f32ToF16 (and compat.h's
// copies of them) normalise and round subnormals with a float multiply and
// add, which a unit flushing denormals to zero (-fgpu-flush-denormals-to-zero,
// fast-math builds) would get wrong. bfloat16 needs no float arithmetic:
// compat.h's bf16_to_f32 and f32_to_bf16 serve.

// ew_f16_to_f32 widens a binary16 exactly: subnormals normalised by shifts,
// infinities kept, a NaN keeping its sign and payload and made quiet (the
// CPU's f16ToF32).
static __device__ __forceinline__ float ew_f16_to_f32(unsigned short h) {
    unsigned int sign = (unsigned int)(h & 0x8000u) << 16;
    unsigned int e = (h >> 10) & 0x1fu;
    unsigned int m = h & 0x3ffu;
    if (e == 0x1fu) {
        if (m == 0) {
            return bits_f32(sign | 0x7f800000u);
        }
        return bits_f32(sign | 0x7fc00000u | (m << 13));
    }
    if (e == 0) {
        if (m == 0) {
            return bits_f32(sign);
        }
        // m·2^-24: shift the leading one up to the implicit bit's place.
        unsigned int ex = 113;  // 127 - 14, lowered once per shift
        while (!(m & 0x400u)) {
            m <<= 1;
            ex--;
        }
        return bits_f32(sign | (ex << 23) | ((m & 0x3ffu) << 13));
    }
    return bits_f32(sign | ((e + 112u) << 23) | (m << 13));
}

// ew_f32_to_f16 rounds to the nearest binary16, ties to even, as the CPU's
// f32ToF16: normal results by adding 0xfff plus the lowest kept bit before
// dropping 13 bits, subnormal results by an integer shift with the same
// rounding, past 65520 an infinity, a NaN quiet with its upper payload.
static __device__ __forceinline__ unsigned short ew_f32_to_f16(float v) {
    unsigned int u = f32_bits(v);
    unsigned short sign = (unsigned short)((u >> 16) & 0x8000u);
    u &= 0x7fffffffu;
    if (u > 0x7f800000u) {
        return (unsigned short)(sign | 0x7e00u | ((u >> 13) & 0x3ffu));
    }
    if (u >= 0x477ff000u) {  // 65520: the smallest magnitude that rounds to infinity
        return (unsigned short)(sign | 0x7c00u);
    }
    if (u < (113u << 23)) {  // below 2^-14: a binary16 subnormal (or zero)
        unsigned int e = u >> 23;
        if (e < 102) {  // below 2^-25: rounds to zero (float32 subnormals too)
            return sign;
        }
        // The value in units of 2^-24 is M·2^(e-126), M the 24-bit significand.
        unsigned int M = (u & 0x7fffffu) | 0x800000u;
        unsigned int shift = 126 - e;  // 14..24
        unsigned int q = M >> shift;
        unsigned int rem = M & ((1u << shift) - 1);
        unsigned int half = 1u << (shift - 1);
        if (rem > half || (rem == half && (q & 1u))) {
            q++;  // may carry into 0x400, the smallest normal: still right
        }
        return (unsigned short)(sign | q);
    }
    return (unsigned short)(sign | ((u - ((112u << 23) - 0xfffu) + ((u >> 13) & 1u)) >> 13));
}

// ---------------------------------------------------------------------------
// Reductions.

// ew_block_sum_f64 returns the sum of every thread's v to every thread of the
// block: a butterfly within each warp, then the warps' sums through shared
// memory, summed by every thread in warp order (so that all threads get the
// same bits). red must hold 32 doubles; the block's threads must all call it.
static __device__ __forceinline__ double ew_block_sum_f64(double v, double* red) {
    for (int o = 16; o > 0; o >>= 1) {
        v += __shfl_xor_sync(0xffffffffu, v, o);
    }
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    int warps = (blockDim.x + 31) >> 5;
    __syncthreads();  // red may still be read by an earlier call's threads
    if (lane == 0) {
        red[warp] = v;
    }
    __syncthreads();
    double s = 0.0;
    for (int w = 0; w < warps; w++) {
        s += red[w];
    }
    return s;
}

// ---------------------------------------------------------------------------
// Gathers and column arrangements.

// drafter_ew_gather_f32 writes row ids[i] of the float32 table [*, cols] into
// row i of out [n, cols] (GatherRows, and Gather of an F32 weight). One
// block row per output row (grid-stride over blockIdx.y), threads over the
// columns.
extern "C" __global__ void drafter_ew_gather_f32(float* out, const float* table, const int* ids, int n, int cols) {
    for (int i = blockIdx.y; i < n; i += gridDim.y) {
        const float* src = table + (long long)ids[i] * cols;
        float* dst = out + (long long)i * cols;
        for (int c = blockIdx.x * blockDim.x + threadIdx.x; c < cols; c += gridDim.x * blockDim.x) {
            dst[c] = src[c];
        }
    }
}

// drafter_ew_gather_u16 is Gather of a BF16 (f16 0) or F16 (f16 1) table,
// widened exactly to float32.
extern "C" __global__ void drafter_ew_gather_u16(float* out, const unsigned short* table, const int* ids, int n, int cols, int f16) {
    for (int i = blockIdx.y; i < n; i += gridDim.y) {
        const unsigned short* src = table + (long long)ids[i] * cols;
        float* dst = out + (long long)i * cols;
        for (int c = blockIdx.x * blockDim.x + threadIdx.x; c < cols; c += gridDim.x * blockDim.x) {
            dst[c] = f16 ? ew_f16_to_f32(src[c]) : bf16_to_f32(src[c]);
        }
    }
}

// drafter_ew_add_scaled_rows adds scale[i]·src's row i to dst's row rows[i]
// (src [n, cols], dst [*, cols]) for i in order: AddScaledRows, a
// mixture-of-experts combine. Each value is dst + (scale·src) with the
// product and the sum rounded separately (__fmul_rn, __fadd_rn: never an
// fma), as the CPU device computes it. Grid y strides over i, threads over
// the columns. With gridDim.y == 1 every index passes through the one block
// row and a column is always the same thread's (its block x and thread x
// follow from the column), so each thread runs i = 0, 1, ... in order over
// its columns: the host launches that when rows repeat, making a repeated
// row's additions sequential and deterministic. With distinct rows every
// (i, column) is written once and grid y takes the indices in parallel, for
// the same bits. src must not overlap dst.
extern "C" __global__ void drafter_ew_add_scaled_rows(float* dst, const float* src, const int* rows, const float* scale, int n, int cols) {
    for (int i = blockIdx.y; i < n; i += gridDim.y) {
        float* d = dst + (long long)rows[i] * cols;
        const float* x = src + (long long)i * cols;
        float s = scale[i];
        for (int c = blockIdx.x * blockDim.x + threadIdx.x; c < cols; c += gridDim.x * blockDim.x) {
            d[c] = __fadd_rn(d[c], __fmul_rn(s, x[c]));
        }
    }
}

// drafter_ew_copy_cols copies a [rows, cols] block between two row-major
// arrays of leading dimensions ldd and lds (one part of SplitCols or
// ConcatCols: the host offsets the pointers to the part's first column).
extern "C" __global__ void drafter_ew_copy_cols(float* dst, int ldd, const float* src, int lds, int rows, int cols) {
    for (int r = blockIdx.y; r < rows; r += gridDim.y) {
        float* d = dst + (long long)r * ldd;
        const float* s = src + (long long)r * lds;
        for (int c = blockIdx.x * blockDim.x + threadIdx.x; c < cols; c += gridDim.x * blockDim.x) {
            d[c] = s[c];
        }
    }
}

// ---------------------------------------------------------------------------
// RMSNorm.

// ew_rms_scale returns 1/sqrt(mean(x²)+eps) of the row x to every thread of
// the block, the squares summed in float64 and the result rounded to float32
// as the CPU's rmsScale does.
static __device__ __forceinline__ float ew_rms_scale(const float* x, int cols, float eps, double* red) {
    double ss = 0.0;
    for (int c = threadIdx.x; c < cols; c += blockDim.x) {
        double v = (double)x[c];
        ss += v * v;
    }
    ss = ew_block_sum_f64(ss, red);
    return (float)(1.0 / __builtin_sqrt(ss / (double)cols + (double)eps));
}

// drafter_ew_rmsnorm computes out[r] = x[r]·rs·w for each row r (block r),
// rs the row's ew_rms_scale. out may be x: each thread reads and writes only
// its own columns, and every read of x (the sum) precedes the block's
// barrier in ew_block_sum_f64.
extern "C" __global__ void drafter_ew_rmsnorm(float* out, const float* x, const float* w, int cols, float eps) {
    __shared__ double red[32];
    const float* xr = x + (long long)blockIdx.x * cols;
    float* o = out + (long long)blockIdx.x * cols;
    float rs = ew_rms_scale(xr, cols, eps, red);
    for (int c = threadIdx.x; c < cols; c += blockDim.x) {
        o[c] = xr[c] * rs * w[c];
    }
}

// drafter_ew_rms_scales writes each row's ew_rms_scale into rs (block r for
// row r): RMSNormBackward's dw reads them, and its dx reuses them so that dx
// and dw see the very scale the CPU recomputes.
extern "C" __global__ void drafter_ew_rms_scales(float* rs, const float* x, int cols, float eps) {
    __shared__ double red[32];
    float s = ew_rms_scale(x + (long long)blockIdx.x * cols, cols, eps, red);
    if (threadIdx.x == 0) {
        rs[blockIdx.x] = s;
    }
}

// drafter_ew_rmsnorm_backward_dx accumulates RMSNorm's input gradient into dx
// (block r for row r), in float64 as the CPU does: with rs the row's scale,
// dx_i += rs·w_i·dout_i - rs³/n·x_i·Σ_j w_j·dout_j·x_j.
extern "C" __global__ void drafter_ew_rmsnorm_backward_dx(float* dx, const float* dout, const float* x, const float* w, const float* rs, int cols) {
    __shared__ double red[32];
    long long off = (long long)blockIdx.x * cols;
    const float* xr = x + off;
    const float* dr = dout + off;
    float* d = dx + off;
    double s = (double)rs[blockIdx.x];
    double dot = 0.0;
    for (int c = threadIdx.x; c < cols; c += blockDim.x) {
        dot += (double)w[c] * (double)dr[c] * (double)xr[c];
    }
    dot = ew_block_sum_f64(dot, red);
    double k = s * s * s * dot / (double)cols;
    for (int c = threadIdx.x; c < cols; c += blockDim.x) {
        d[c] += (float)(s * (double)w[c] * (double)dr[c] - k * (double)xr[c]);
    }
}

// EW_COL_LANES is how many row lanes a column-sum block runs: a block of 256
// threads covers 32 columns (one warp's width, so that the loads of a row
// lane are coalesced) by 8 lanes of rows.
#define EW_COL_LANES 8

// drafter_ew_rmsnorm_backward_dw accumulates RMSNorm's weight gradient,
// dw_i += Σ_r dout[r,i]·x[r,i]·rs_r, into dw [cols]. Block b sums columns
// 32b..32b+31: thread lane l of row lane y sums rows y, y+8, ... in float32,
// and the 8 partial sums are added in order through shared memory. Launched
// with 32·EW_COL_LANES threads.
extern "C" __global__ void drafter_ew_rmsnorm_backward_dw(float* dw, const float* dout, const float* x, const float* rs, int rows, int cols) {
    __shared__ float part[EW_COL_LANES][32];
    int lane = threadIdx.x & 31, y = threadIdx.x >> 5;
    int c = blockIdx.x * 32 + lane;
    float s = 0.0f;
    if (c < cols) {
        for (int r = y; r < rows; r += EW_COL_LANES) {
            long long i = (long long)r * cols + c;
            s += dout[i] * x[i] * rs[r];
        }
    }
    part[y][lane] = s;
    __syncthreads();
    if (y == 0 && c < cols) {
        float t = dw[c];
        for (int k = 0; k < EW_COL_LANES; k++) {
            t += part[k][lane];
        }
        dw[c] = t;
    }
}

// drafter_ew_sum_rows adds the sum of x's rows [rows, cols] to dst [cols]
// (a bias's gradient), with drafter_ew_rmsnorm_backward_dw's layout: 32
// columns per block, EW_COL_LANES row lanes summed in float32.
extern "C" __global__ void drafter_ew_sum_rows(float* dst, const float* x, int rows, int cols) {
    __shared__ float part[EW_COL_LANES][32];
    int lane = threadIdx.x & 31, y = threadIdx.x >> 5;
    int c = blockIdx.x * 32 + lane;
    float s = 0.0f;
    if (c < cols) {
        for (int r = y; r < rows; r += EW_COL_LANES) {
            s += x[(long long)r * cols + c];
        }
    }
    part[y][lane] = s;
    __syncthreads();
    if (y == 0 && c < cols) {
        float t = dst[c];
        for (int k = 0; k < EW_COL_LANES; k++) {
            t += part[k][lane];
        }
        dst[c] = t;
    }
}

// ---------------------------------------------------------------------------
// RoPE.

// ew_sincos computes the cosine and sine of a (a float32 angle widened, so
// |a| is modest) in float64 to within a few double ulp: reduction by π/2 in
// three parts (fdlibm's 33-bit splits, exact products for |k| < 2^20) and
// fdlibm's kernel polynomials on |r| <= π/4. compat.h has only float32 sinf
// and cosf (approximate on the GPU); the CPU rounds math.Cos and math.Sin of
// the float64 angle to float32, which this matches but for the rare value
// within a double rounding of a float32 tie.
static __device__ __forceinline__ void ew_sincos(double a, double* cs, double* sn) {
    const double invpio2 = 6.36619772367581382433e-01;
    const double pio2_1 = 1.57079632673412561417e+00;
    const double pio2_2 = 6.07710050630396597660e-11;
    const double pio2_3 = 2.02226624871116645580e-21;
    double kd = a * invpio2;
    kd = kd < 0 ? kd - 0.5 : kd + 0.5;
    long long k = (long long)kd;  // round to nearest
    double fk = (double)k;
    double r = a - fk * pio2_1;
    r -= fk * pio2_2;
    r -= fk * pio2_3;
    double z = r * r;
    double s = r + r * z * (-1.66666666666666324348e-01 + z * (8.33333333332248946124e-03 + z * (-1.98412698298579493134e-04 + z * (2.75573137070700676789e-06 + z * (-2.50507602534068634195e-08 + z * 1.58969099521155010221e-10)))));
    double c = 1.0 - 0.5 * z + z * z * (4.16666666666666019037e-02 + z * (-1.38888888888741095749e-03 + z * (2.48015872894767294178e-05 + z * (-2.75573143513906633035e-07 + z * (2.08757232129817482790e-09 + z * -1.13596475577881948265e-11)))));
    switch (k & 3) {
        case 0:
            *cs = c;
            *sn = s;
            break;
        case 1:
            *cs = -s;
            *sn = c;
            break;
        case 2:
            *cs = -c;
            *sn = -s;
            break;
        default:
            *cs = s;
            *sn = -c;
            break;
    }
}

// drafter_ew_rope rotates x [rows, heads·hd] in place, rotate_half style:
// in each head of hd values, value i < half pairs with i+half and turns by
// the angle of the row's position pos[r] (the tables cos/sin [maxPos, half]
// below maxPos, else computed from invFreq as the CPU's RoPEAngle does), and
// values 2·half..hd-1 stay as they are (a partial rotary); cos and sin are
// multiplied by factor (a rotary's attention factor: 1 changes nothing);
// sign -1 turns by the opposite angle (the backward). Block rows over the
// rows (grid-stride in y), one thread per pair of a row's heads·half pairs.
extern "C" __global__ void drafter_ew_rope(float* x, const int* pos, const float* cosT, const float* sinT, const float* invFreq,
                                           int rows, int heads, int hd, int half, int maxPos, float factor, float sign) {
    int pairs = heads * half;
    for (int r = blockIdx.y; r < rows; r += gridDim.y) {
        int p = pos[r];
        float* xr = x + (long long)r * heads * hd;
        for (int t = blockIdx.x * blockDim.x + threadIdx.x; t < pairs; t += gridDim.x * blockDim.x) {
            int h = t / half, i = t - h * half;
            float c, s;
            if (p >= 0 && p < maxPos) {
                c = cosT[(long long)p * half + i];
                s = sinT[(long long)p * half + i];
            } else {
                double cd, sd;
                ew_sincos((double)((float)p * invFreq[i]), &cd, &sd);
                c = (float)cd;
                s = (float)sd;
            }
            c *= factor;
            s *= factor;
            s *= sign;
            float* v = xr + h * hd;
            float a = v[i], b = v[i + half];
            v[i] = a * c - b * s;
            v[i + half] = b * c + a * s;
        }
    }
}

// ---------------------------------------------------------------------------
// Element-wise arithmetic.

// drafter_ew_scale multiplies x [n] by s in place.
extern "C" __global__ void drafter_ew_scale(float* x, long long n, float s) {
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
        x[i] *= s;
    }
}

// drafter_ew_add adds src [n] to dst [n] (a residual).
extern "C" __global__ void drafter_ew_add(float* dst, const float* src, long long n) {
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
        dst[i] += src[i];
    }
}

// drafter_ew_add_bias adds b [cols] to each of x's rows [rows, cols]: block
// rows over the rows (grid-stride in y), threads over the columns.
extern "C" __global__ void drafter_ew_add_bias(float* x, const float* b, int rows, int cols) {
    for (int r = blockIdx.y; r < rows; r += gridDim.y) {
        float* o = x + (long long)r * cols;
        for (int c = blockIdx.x * blockDim.x + threadIdx.x; c < cols; c += gridDim.x * blockDim.x) {
            o[c] += b[c];
        }
    }
}

// drafter_ew_swiglu computes out[r,c] = silu(gate[r,c])·up[r,c] for out [rows,
// cols], gate and up read with leading dimensions ldg and ldu (a fused
// product: up = gate + cols, ldg = ldu = 2·cols), silu(g) = g/(1+Expf(-g))
// in the CPU's order. out may be gate.
extern "C" __global__ void drafter_ew_swiglu(float* out, const float* gate, const float* up, int rows, int cols, int ldg, int ldu) {
    for (int r = blockIdx.y; r < rows; r += gridDim.y) {
        float* o = out + (long long)r * cols;
        const float* g = gate + (long long)r * ldg;
        const float* u = up + (long long)r * ldu;
        for (int c = blockIdx.x * blockDim.x + threadIdx.x; c < cols; c += gridDim.x * blockDim.x) {
            float gv = g[c];
            float e = cpu_expf(-gv);
            o[c] = gv / (1.0f + e) * u[c];
        }
    }
}

// drafter_ew_clamped_swiglu computes gpt-oss's expert activation with
// drafter_ew_swiglu's layout (ldg, ldu; a fused product has up = gate +
// cols): g = min(gate, limit), u = clamp(up, -limit, limit), out =
// (u+1)·(g·sigmoid(alpha·g)), sigmoid(x) = 1/(1+Expf(-x)), each step rounded
// to float32 in that order, as the CPU device computes it (forward only).
// The clamps compare rather than call fminf, so that a NaN stays NaN as
// torch.clamp keeps it. out may be gate.
extern "C" __global__ void drafter_ew_clamped_swiglu(float* out, const float* gate, const float* up, int rows, int cols,
                                                     int ldg, int ldu, float alpha, float limit) {
    for (int r = blockIdx.y; r < rows; r += gridDim.y) {
        float* o = out + (long long)r * cols;
        const float* g = gate + (long long)r * ldg;
        const float* u = up + (long long)r * ldu;
        for (int c = blockIdx.x * blockDim.x + threadIdx.x; c < cols; c += gridDim.x * blockDim.x) {
            float gv = g[c];
            if (gv > limit) gv = limit;
            float uv = u[c];
            if (uv > limit) uv = limit;
            else if (uv < -limit) uv = -limit;
            const float ag = alpha * gv;
            const float sig = 1.0f / (1.0f + cpu_expf(-ag));
            const float glu = gv * sig;
            o[c] = (uv + 1.0f) * glu;
        }
    }
}

// EW_GELU_BETA and EW_GELU_KAPPA are PyTorch's constants of
// gelu(approximate='tanh'): sqrt(2/pi) (M_SQRT2·M_2_SQRTPI·0.5) and 0.044715,
// rounded to float32.
#define EW_GELU_BETA 0.7978845608028654f
#define EW_GELU_KAPPA 0.044715f

// drafter_ew_gelu_glu computes out[r,c] = gelu_tanh(gate[r,c])·up[r,c] with
// drafter_ew_swiglu's layout (ldg, ldu; a fused product has up = gate + cols),
// gelu_tanh(g) = 0.5·g·(1+tanh(beta·(g+kappa·g³))) in PyTorch's order of
// operations: the gated MLP of Gemma's targets (forward only).
extern "C" __global__ void drafter_ew_gelu_glu(float* out, const float* gate, const float* up, int rows, int cols, int ldg, int ldu) {
    for (int r = blockIdx.y; r < rows; r += gridDim.y) {
        float* o = out + (long long)r * cols;
        const float* g = gate + (long long)r * ldg;
        const float* u = up + (long long)r * ldu;
        for (int c = blockIdx.x * blockDim.x + threadIdx.x; c < cols; c += gridDim.x * blockDim.x) {
            float gv = g[c];
            float cube = gv * gv * gv;
            float inner = EW_GELU_BETA * (gv + EW_GELU_KAPPA * cube);
            o[c] = 0.5f * gv * (1.0f + tanhf(inner)) * u[c];
        }
    }
}

// drafter_ew_softcap replaces x [n] by c·tanh(x/c) in place, in Hugging
// Face's order (divide, tanh, multiply): Gemma-2's final logit soft-capping.
extern "C" __global__ void drafter_ew_softcap(float* x, long long n, float c) {
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
        x[i] = tanhf(x[i] / c) * c;
    }
}

// drafter_ew_swiglu_backward accumulates SwiGLU's gradients over n values:
// dgate += dout·up·s·(1+g·(1-s)) with s = 1/(1+e), and dup += dout·(g/(1+e)),
// e = Expf(-g) (the forward's very silu). Either gradient may be null (not
// needed).
extern "C" __global__ void drafter_ew_swiglu_backward(float* dgate, float* dup, const float* dout, const float* gate, const float* up, long long n) {
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
        float g = gate[i];
        float e = cpu_expf(-g);
        float s = 1.0f / (1.0f + e);
        float d = dout[i];
        if (dgate) {
            dgate[i] += d * up[i] * s * (1.0f + g * (1.0f - s));
        }
        if (dup) {
            dup[i] += d * (g / (1.0f + e));
        }
    }
}

// drafter_ew_add_silu adds silu(z) = z/(1+Expf(-z)) to out over n values.
extern "C" __global__ void drafter_ew_add_silu(float* out, const float* z, long long n) {
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
        float v = z[i];
        out[i] += v / (1.0f + cpu_expf(-v));
    }
}

// drafter_ew_silu_backward accumulates dz += dout·s·(1+z·(1-s)), s =
// 1/(1+Expf(-z)), over n values.
extern "C" __global__ void drafter_ew_silu_backward(float* dz, const float* dout, const float* z, long long n) {
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
        float v = z[i];
        float s = 1.0f / (1.0f + cpu_expf(-v));
        dz[i] += dout[i] * s * (1.0f + v * (1.0f - s));
    }
}

// ---------------------------------------------------------------------------
// Optimizer.

// drafter_ew_sum_squares_partial writes block b's float64 sum of the squares
// of its grid-stride share of x [n] into partial[b]. The grid size is fixed
// by the host for a given n, so the result does not depend on scheduling.
extern "C" __global__ void drafter_ew_sum_squares_partial(double* partial, const float* x, long long n) {
    __shared__ double red[32];
    double s = 0.0;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
        double v = (double)x[i];
        s += v * v;
    }
    s = ew_block_sum_f64(s, red);
    if (threadIdx.x == 0) {
        partial[blockIdx.x] = s;
    }
}

// drafter_ew_sum_doubles writes the sum of partial [count] into out[0] (one
// block): the second stage of SumSquares, so that one double comes back to
// the host.
extern "C" __global__ void drafter_ew_sum_doubles(double* out, const double* partial, int count) {
    __shared__ double red[32];
    double s = 0.0;
    for (int i = threadIdx.x; i < count; i += blockDim.x) {
        s += partial[i];
    }
    s = ew_block_sum_f64(s, red);
    if (threadIdx.x == 0) {
        out[0] = s;
    }
}

// drafter_ew_adamw applies one AdamW step to n values in torch's float32
// order (tensor.AdamWStep): m = β1·m + (1-β1)·g, v = β2·v + (1-β2)·g², p =
// p·decay - stepSize·m / (√v/sqrtBC2 + eps), √ correctly rounded as the CPU's
// float32(math.Sqrt).
extern "C" __global__ void drafter_ew_adamw(float* p, const float* g, float* m, float* v, long long n, float decay, float beta1,
                                            float beta2, float omb1, float omb2, float stepSize, float sqrtBC2, float eps) {
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
        float gi = g[i];
        float mi = beta1 * m[i] + omb1 * gi;
        float vi = beta2 * v[i] + omb2 * gi * gi;
        m[i] = mi;
        v[i] = vi;
        float den = sqrtf(vi) / sqrtBC2 + eps;
        p[i] = p[i] * decay - stepSize * mi / den;
    }
}

// ---------------------------------------------------------------------------
// Casts between F32, BF16 and F16 (n values; widening exact, narrowing to
// the nearest, ties to even, with the CPU's handling of NaN, infinities and
// subnormals). A cast between the two 16-bit formats widens and rounds once;
// a cast within a format is a copy (no kernel).

// drafter_ew_cast_f32_bf16 rounds float32 to bfloat16.
extern "C" __global__ void drafter_ew_cast_f32_bf16(unsigned short* dst, const float* src, long long n) {
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
        dst[i] = f32_to_bf16(src[i]);
    }
}

// drafter_ew_cast_f32_f16 rounds float32 to binary16.
extern "C" __global__ void drafter_ew_cast_f32_f16(unsigned short* dst, const float* src, long long n) {
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
        dst[i] = ew_f32_to_f16(src[i]);
    }
}

// drafter_ew_cast_bf16_f32 widens bfloat16 to float32.
extern "C" __global__ void drafter_ew_cast_bf16_f32(float* dst, const unsigned short* src, long long n) {
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
        dst[i] = bf16_to_f32(src[i]);
    }
}

// drafter_ew_cast_f16_f32 widens binary16 to float32.
extern "C" __global__ void drafter_ew_cast_f16_f32(float* dst, const unsigned short* src, long long n) {
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
        dst[i] = ew_f16_to_f32(src[i]);
    }
}

// drafter_ew_cast_bf16_f16 rounds bfloat16 to binary16 (through float32).
extern "C" __global__ void drafter_ew_cast_bf16_f16(unsigned short* dst, const unsigned short* src, long long n) {
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
        dst[i] = ew_f32_to_f16(bf16_to_f32(src[i]));
    }
}

// drafter_ew_cast_f16_bf16 rounds binary16 to bfloat16 (through float32).
extern "C" __global__ void drafter_ew_cast_f16_bf16(unsigned short* dst, const unsigned short* src, long long n) {
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
        dst[i] = f32_to_bf16(ew_f16_to_f32(src[i]));
    }
}
