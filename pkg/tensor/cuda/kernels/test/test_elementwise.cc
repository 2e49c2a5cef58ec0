// Tests of kernels/elementwise.cu through the CPU-thread simulator: every
// kernel on random inputs, with sizes that are not multiples of the block
// and grids smaller than the work (so the grid-stride loops wrap), against
// a double-precision reference written here from the ops' definitions (not
// from the kernels' code). Prints "ok <case>" per case; exits 1 on the first
// failure.
#include "../elementwise.cu"

#include <cmath>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

namespace {

std::mt19937_64 rng(20261206);

// fail prints what went wrong and exits: the first failure is the one to
// look at.
[[noreturn]] void fail(const char* fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "FAIL ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    exit(1);
}

void ok(const char* name) {
    printf("ok %s\n", name);
    fflush(stdout);
}

std::vector<float> randn(size_t n, double scale) {
    std::normal_distribution<double> d(0, scale);
    std::vector<float> v(n);
    for (auto& x : v) x = (float)d(rng);
    return v;
}

int randint(int n) { return (int)(rng() % (uint64_t)n); }

uint32_t bits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

float fromBits(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}

// near fails unless got is within tol·scale of want (scale: max(1, |want|)
// when not given).
const double tol = 2e-5;
void near(const char* what, size_t i, double got, double want, double scale = -1) {
    if (scale < 0) scale = std::max(1.0, std::fabs(want));
    double d = std::fabs(got - want);
    if (!(d <= tol * scale)) fail("%s: value %zu is %.9g, want %.9g (difference %.3g, allowed %.3g)", what, i, got, want, d, tol * scale);
}

// grid1 is a 1-D grid of at most cap blocks of b threads for n values.
dim3 grid1(long long n, int b, int cap) {
    long long g = (n + b - 1) / b;
    if (g > cap) g = cap;
    if (g < 1) g = 1;
    return dim3((unsigned)g);
}

// Reference 16-bit formats: p significand bits (implicit one included),
// normal exponents emin..emax; decode and round in double from the formats'
// definitions.
struct Half {
    int p, emin, emax;
    double decode(uint16_t h) const {
        int mant = p - 1, ebits = 15 - mant;
        int e = (h >> mant) & ((1 << ebits) - 1);
        double m = h & ((1 << mant) - 1);
        double v;
        if (e == (1 << ebits) - 1) {
            v = m != 0 ? NAN : INFINITY;
        } else if (e == 0) {
            v = std::ldexp(m, emin - mant);
        } else {
            v = std::ldexp(1 + m / (double)(1 << mant), e + emin - 1);
        }
        return (h & 0x8000) ? -v : v;
    }
    double round(double x) const {
        if (x == 0 || std::isnan(x) || std::isinf(x)) return x;
        double a = std::fabs(x);
        int ex = std::max(std::ilogb(a), emin);
        double ulp = std::ldexp(1, ex - (p - 1));
        double y = std::nearbyint(a / ulp) * ulp;  // ties to even in the default mode
        if (y > std::ldexp(2 - std::ldexp(1, 1 - p), emax)) y = INFINITY;
        return std::copysign(y, x);
    }
};
const Half BF16{8, -126, 127}, F16{11, -14, 15};

// sameValue reports whether got is want: NaN for NaN, zeros by sign.
bool sameValue(double got, double want) {
    if (std::isnan(want)) return std::isnan(got);
    return got == want && std::signbit(got) == std::signbit(want);
}

void testExp() {
    // cpu_expf against exp in double over the range the activations use, and
    // the edges (underflow to subnormals and zero, overflow, NaN).
    for (int i = 0; i <= 400000; i++) {
        float x = (float)(-104.0 + 193.0 * i / 400000);
        double want = std::exp((double)x);
        double got = cpu_expf(x);
        if (want > 3.4028234663852886e38) {
            if (!std::isinf(got)) fail("expf(%g) = %g, want +Inf", x, got);
            continue;
        }
        // Within 3 ulp of float32 (relative 3·2^-23) for normal results, and
        // within 1 ulp of the smallest subnormal below; 0 below the CPU's
        // cut-off.
        double allowed = std::max(3 * std::ldexp(want, -23), std::ldexp(1.0, -149));
        if (!(x > -87.33654f)) allowed = 0, want = 0;
        double err = std::fabs(got - want);
        if (!(err <= allowed)) fail("expf(%.9g) = %.9g, want %.9g", x, got, want);
    }
    if (!std::isnan(cpu_expf(NAN))) fail("expf(NaN) is not NaN");
    if (cpu_expf(-INFINITY) != 0) fail("expf(-Inf) is not 0");
    if (!std::isinf(cpu_expf(INFINITY))) fail("expf(+Inf) is not +Inf");
    ok("expf");
}

void testGather() {
    const int rows = 37, cols = 300, n = 29;
    std::vector<int> ids(n);
    for (auto& id : ids) id = randint(rows);
    ids[0] = rows - 1, ids[1] = 0, ids[2] = rows - 1;
    std::vector<float> out(n * cols);
    {
        auto tab = randn(rows * cols, 1);
        sim::launch(dim3(1, 7), dim3(128), 0, drafter_ew_gather_f32, out.data(), (const float*)tab.data(), (const int*)ids.data(), n, cols);
        for (int i = 0; i < n; i++)
            for (int c = 0; c < cols; c++)
                if (bits(out[i * cols + c]) != bits(tab[ids[i] * cols + c])) fail("gather f32: row %d value %d", i, c);
        ok("gather f32");
    }
    for (int f16 = 0; f16 < 2; f16++) {
        const Half& h = f16 ? F16 : BF16;
        std::vector<uint16_t> tab(rows * cols);
        for (auto& v : tab) v = (uint16_t)rng();
        std::fill(out.begin(), out.end(), 0.0f);
        sim::launch(dim3(2, 5), dim3(64), 0, drafter_ew_gather_u16, out.data(), (const unsigned short*)tab.data(), (const int*)ids.data(), n, cols, f16);
        for (int i = 0; i < n; i++)
            for (int c = 0; c < cols; c++) {
                uint16_t pat = tab[ids[i] * cols + c];
                if (!sameValue(out[i * cols + c], h.decode(pat))) fail("gather %s: pattern %#x is %g", f16 ? "f16" : "bf16", pat, out[i * cols + c]);
            }
        ok(f16 ? "gather f16" : "gather bf16");
    }
}

// addScaledRowsRef is AddScaledRows' definition in float32: for i in order,
// dst[rows[i]] += scale[i]·src[i], the product rounded before the sum (the
// test builds with -std=c++17: no contraction into an fma).
void addScaledRowsRef(std::vector<float>& dst, const std::vector<float>& src, const std::vector<int>& rows, const std::vector<float>& scale, int cols) {
    for (size_t i = 0; i < rows.size(); i++)
        for (int c = 0; c < cols; c++) {
            float p = scale[i] * src[i * cols + c];
            dst[(size_t)rows[i] * cols + c] = dst[(size_t)rows[i] * cols + c] + p;
        }
}

// testAddScaledRows checks drafter_ew_add_scaled_rows bit for bit against
// the sequential float32 definition: distinct rows out of order with grid y
// taking indices in parallel, then repeated rows (1000+ indices into a few
// rows, wide rows) with the one block row the host launches for them, grids
// smaller than the columns so the column loop wraps.
void testAddScaledRows() {
    struct Case {
        const char* name;
        int R, n, cols;
        bool repeat;
        dim3 grid, block;
    } cases[] = {
        {"add scaled rows, distinct", 50, 37, 301, false, dim3(2, 5), dim3(64)},
        {"add scaled rows, distinct, one block row", 50, 37, 301, false, dim3(1, 1), dim3(128)},
        {"add scaled rows, repeated", 9, 1200, 77, true, dim3(1, 1), dim3(32)},
        {"add scaled rows, repeated, wide", 5, 300, 1030, true, dim3(3, 1), dim3(128)},
    };
    for (const Case& k : cases) {
        std::vector<int> rows(k.n);
        if (k.repeat) {
            for (auto& r : rows) r = randint(k.R);
            rows[0] = rows[1] = rows[2] = k.R - 1;  // a repeat for certain
        } else {
            std::vector<int> perm(k.R);
            for (int r = 0; r < k.R; r++) perm[r] = r;
            for (int r = k.R - 1; r > 0; r--) std::swap(perm[r], perm[randint(r + 1)]);
            for (int i = 0; i < k.n; i++) rows[i] = perm[i];
        }
        auto src = randn((size_t)k.n * k.cols, 1), scale = randn(k.n, 0.5);
        auto dst = randn((size_t)k.R * k.cols, 2);
        auto want = dst;
        addScaledRowsRef(want, src, rows, scale, k.cols);
        sim::launch(k.grid, k.block, 0, drafter_ew_add_scaled_rows, dst.data(), (const float*)src.data(), (const int*)rows.data(),
                    (const float*)scale.data(), k.n, k.cols);
        for (size_t i = 0; i < dst.size(); i++)
            if (bits(dst[i]) != bits(want[i])) fail("%s: value %zu (row %zu) is %.9g, want %.9g", k.name, i, i / k.cols, dst[i], want[i]);
        ok(k.name);
    }
}

void testCopyCols() {
    // Split [rows, 37] into widths 5, 31, 1, then concatenate them back.
    const int rows = 45, widths[3] = {5, 31, 1}, w = 37;
    auto src = randn(rows * w, 1);
    std::vector<std::vector<float>> parts(3);
    int off = 0;
    for (int p = 0; p < 3; p++) {
        parts[p].assign(rows * widths[p], 0);
        sim::launch(dim3(1, 4), dim3(32), 0, drafter_ew_copy_cols, parts[p].data(), widths[p], (const float*)src.data() + off, w, rows, widths[p]);
        for (int r = 0; r < rows; r++)
            for (int c = 0; c < widths[p]; c++)
                if (bits(parts[p][r * widths[p] + c]) != bits(src[r * w + off + c])) fail("split: part %d row %d col %d", p, r, c);
        off += widths[p];
    }
    std::vector<float> back(rows * w);
    off = 0;
    for (int p = 0; p < 3; p++) {
        sim::launch(dim3(1, 3), dim3(32), 0, drafter_ew_copy_cols, back.data() + off, w, (const float*)parts[p].data(), widths[p], rows, widths[p]);
        off += widths[p];
    }
    if (memcmp(back.data(), src.data(), src.size() * 4) != 0) fail("concat does not undo split");
    ok("copy cols (split, concat)");
}

// rmsScale64 is 1/sqrt(mean(x²)+eps) of a row in double.
double rmsScale64(const float* x, int n, float eps) {
    double ss = 0;
    for (int i = 0; i < n; i++) ss += (double)x[i] * x[i];
    return 1 / std::sqrt(ss / n + eps);
}

void testRMSNorm() {
    const float eps = 1e-5f;
    struct {
        int rows, cols, block;
    } shapes[] = {{7, 1000, 256}, {9, 5, 32}, {3, 70, 64}, {2, 2049, 1024}};
    for (auto s : shapes) {
        auto x = randn(s.rows * s.cols, 2), w = randn(s.cols, 1);
        std::vector<float> out(x.size());
        sim::launch(dim3(s.rows), dim3(s.block), 0, drafter_ew_rmsnorm, out.data(), (const float*)x.data(), (const float*)w.data(), s.cols, eps);
        for (int r = 0; r < s.rows; r++) {
            double rs = rmsScale64(&x[r * s.cols], s.cols, eps);
            for (int i = 0; i < s.cols; i++) near("rmsnorm", r * s.cols + i, out[r * s.cols + i], x[r * s.cols + i] * rs * w[i]);
        }
        auto inplace = x;
        sim::launch(dim3(s.rows), dim3(s.block), 0, drafter_ew_rmsnorm, inplace.data(), (const float*)inplace.data(), (const float*)w.data(), s.cols, eps);
        if (memcmp(inplace.data(), out.data(), out.size() * 4) != 0) fail("rmsnorm in place differs (%dx%d)", s.rows, s.cols);
    }
    ok("rmsnorm (and in place)");

    // Backward, against the analytic gradient in double.
    for (auto s : shapes) {
        int rows = s.rows, n = s.cols;
        auto x = randn(rows * n, 2), w = randn(n, 1), dout = randn(rows * n, 1);
        auto dx = randn(rows * n, 1), dw = randn(n, 1);
        auto dx0 = dx, dw0 = dw;
        std::vector<float> rs(rows);
        sim::launch(dim3(rows), dim3(s.block), 0, drafter_ew_rms_scales, rs.data(), (const float*)x.data(), n, eps);
        for (int r = 0; r < rows; r++) near("rms scales", r, rs[r], rmsScale64(&x[r * n], n, eps), std::fabs(rmsScale64(&x[r * n], n, eps)));
        sim::launch(dim3(rows), dim3(s.block), 0, drafter_ew_rmsnorm_backward_dx, dx.data(), (const float*)dout.data(), (const float*)x.data(), (const float*)w.data(),
                    (const float*)rs.data(), n);
        sim::launch(dim3((n + 31) / 32), dim3(32 * EW_COL_LANES), 0, drafter_ew_rmsnorm_backward_dw, dw.data(), (const float*)dout.data(), (const float*)x.data(),
                    (const float*)rs.data(), rows, n);
        std::vector<double> wantDW(n), scaleDW(n);
        for (int i = 0; i < n; i++) wantDW[i] = dw0[i], scaleDW[i] = std::fabs(dw0[i]);
        for (int r = 0; r < rows; r++) {
            const float *xr = &x[r * n], *dr = &dout[r * n];
            double q = rmsScale64(xr, n, eps), dot = 0, adot = 0;
            for (int i = 0; i < n; i++) dot += (double)w[i] * dr[i] * xr[i], adot += std::fabs((double)w[i] * dr[i] * xr[i]);
            for (int i = 0; i < n; i++) {
                double a = q * w[i] * dr[i], b = q * q * q / n * xr[i] * dot;
                double scale = std::fabs(dx0[r * n + i]) + std::fabs(a) + q * q * q / n * std::fabs(xr[i]) * adot;
                near("rmsnorm backward dx", r * n + i, dx[r * n + i], dx0[r * n + i] + a - b, std::max(scale, 1e-3));
                wantDW[i] += dr[i] * xr[i] * q;
                scaleDW[i] += std::fabs(dr[i] * xr[i] * q);
            }
        }
        for (int i = 0; i < n; i++) near("rmsnorm backward dw", i, dw[i], wantDW[i], std::max(scaleDW[i], 1e-3));
    }
    ok("rmsnorm backward");
}

void testRoPE() {
    const int hd = 12, half = hd / 2, heads = 3, maxPos = 10;
    std::vector<float> inv(half), cosT(maxPos * half), sinT(maxPos * half);
    for (int i = 0; i < half; i++) {
        inv[i] = (float)(1 / std::pow(10000.0, 2.0 * i / hd));
        for (int p = 0; p < maxPos; p++) {
            double a = (double)((float)p * inv[i]);
            cosT[p * half + i] = (float)std::cos(a), sinT[p * half + i] = (float)std::sin(a);
        }
    }
    std::vector<int> pos = {0, 9, 10, 40, 3, 1000, 123456, 7, 2047, 5000000, 65535};
    int rows = (int)pos.size(), w = heads * hd;
    auto x0 = randn(rows * w, 1);
    auto x = x0;
    sim::launch(dim3(1, 4), dim3(32), 0, drafter_ew_rope, x.data(), (const int*)pos.data(), (const float*)cosT.data(), (const float*)sinT.data(), (const float*)inv.data(), rows,
                heads, hd, half, maxPos, 1.0f, 1.0f);
    for (int r = 0; r < rows; r++)
        for (int h = 0; h < heads; h++) {
            int o = r * w + h * hd;
            for (int i = 0; i < half; i++) {
                double a = (double)((float)pos[r] * inv[i]);
                double c = std::cos(a), s = std::sin(a), x1 = x0[o + i], x2 = x0[o + i + half];
                near("rope", o + i, x[o + i], x1 * c - x2 * s);
                near("rope", o + i + half, x[o + i + half], x2 * c + x1 * s);
            }
        }
    // The computed angles are the table's: a row past the table rotates as a
    // table row would, to the float32 rounding of cos and sin.
    for (int r = 0; r < rows; r++)
        for (int i = 0; i < half; i++) {
            double a = (double)((float)pos[r] * inv[i]);
            double cd, sd;
            ew_sincos(a, &cd, &sd);
            if ((float)cd != (float)std::cos(a) || (float)sd != (float)std::sin(a)) {
                // A double-rounding tie is possible but should be vanishingly rare.
                if (std::fabs(cd - std::cos(a)) > 1e-15 || std::fabs(sd - std::sin(a)) > 1e-15)
                    fail("sincos(%.17g) = %.17g, %.17g; want %.17g, %.17g", a, cd, sd, std::cos(a), std::sin(a));
            }
        }
    sim::launch(dim3(2, 3), dim3(32), 0, drafter_ew_rope, x.data(), (const int*)pos.data(), (const float*)cosT.data(), (const float*)sinT.data(), (const float*)inv.data(), rows,
                heads, hd, half, maxPos, 1.0f, -1.0f);
    for (size_t i = 0; i < x.size(); i++) near("rope backward undoes rope", i, x[i], x0[i]);
    ok("rope and backward");
}

// testPartialRoPE checks a partial rotary (the first dims of each head of hd
// values turn, the others stay bit for bit) with an attention factor, at
// positions inside and past the tables, forward and backward.
void testPartialRoPE() {
    const int hd = 14, dims = 8, half = dims / 2, heads = 3, maxPos = 10;
    const float factor = 0.8f;
    std::vector<float> inv(half), cosT(maxPos * half), sinT(maxPos * half);
    for (int i = 0; i < half; i++) {
        inv[i] = (float)(1 / std::pow(10000.0, 2.0 * i / dims));
        for (int p = 0; p < maxPos; p++) {
            double a = (double)((float)p * inv[i]);
            cosT[p * half + i] = (float)std::cos(a), sinT[p * half + i] = (float)std::sin(a);
        }
    }
    std::vector<int> pos = {0, 9, 10, 40, 3, 1000, 7};
    int rows = (int)pos.size(), w = heads * hd;
    for (float sign : {1.0f, -1.0f}) {
        auto x0 = randn(rows * w, 1);
        auto x = x0;
        sim::launch(dim3(2, 3), dim3(32), 0, drafter_ew_rope, x.data(), (const int*)pos.data(), (const float*)cosT.data(),
                    (const float*)sinT.data(), (const float*)inv.data(), rows, heads, hd, half, maxPos, factor, sign);
        for (int r = 0; r < rows; r++)
            for (int h = 0; h < heads; h++) {
                int o = r * w + h * hd;
                for (int i = 0; i < half; i++) {
                    double a = (double)((float)pos[r] * inv[i]);
                    double c = factor * std::cos(a), s = sign * factor * std::sin(a), x1 = x0[o + i], x2 = x0[o + i + half];
                    near("partial rope", o + i, x[o + i], x1 * c - x2 * s);
                    near("partial rope", o + i + half, x[o + i + half], x2 * c + x1 * s);
                }
                for (int i = dims; i < hd; i++)
                    if (bits(x[o + i]) != bits(x0[o + i])) fail("partial rope: row %d head %d value %d changed", r, h, i);
            }
    }
    ok("partial rope with an attention factor");
}

double geluTanh64(double x) { return 0.5 * x * (1 + std::tanh(std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x))); }

// testGemma checks GELUTanhGLU's kernel (separate, fused, in place) and
// Softcap's, with values large enough that tanh saturates.
void testGemma() {
    const int rows = 13, I = 301;
    auto g = randn(rows * I, 3), u = randn(rows * I, 1);
    std::vector<float> out(rows * I), out2(rows * I);
    sim::launch(dim3(1, 5), dim3(128), 0, drafter_ew_gelu_glu, out.data(), (const float*)g.data(), (const float*)u.data(), rows, I, I, I);
    for (int i = 0; i < rows * I; i++) near("gelu glu", i, out[i], geluTanh64(g[i]) * u[i]);
    std::vector<float> fused(2 * rows * I);
    for (int r = 0; r < rows; r++) {
        memcpy(&fused[2 * r * I], &g[r * I], I * 4);
        memcpy(&fused[(2 * r + 1) * I], &u[r * I], I * 4);
    }
    sim::launch(dim3(2, 3), dim3(64), 0, drafter_ew_gelu_glu, out2.data(), (const float*)fused.data(), (const float*)fused.data() + I, rows, I, 2 * I, 2 * I);
    if (memcmp(out.data(), out2.data(), out.size() * 4) != 0) fail("gelu glu fused differs from separate");
    auto inplace = g;
    sim::launch(dim3(1, 5), dim3(128), 0, drafter_ew_gelu_glu, inplace.data(), (const float*)inplace.data(), (const float*)u.data(), rows, I, I, I);
    if (memcmp(out.data(), inplace.data(), out.size() * 4) != 0) fail("gelu glu into gate differs");
    ok("gelu glu (separate, fused, in place)");

    long long n = 70001;
    const float c = 5;
    auto x0 = randn(n, 20);
    auto x = x0;
    sim::launch(grid1(n, 128, 7), dim3(128), 0, drafter_ew_softcap, x.data(), n, c);
    for (long long i = 0; i < n; i++) near("softcap", i, x[i], c * std::tanh((double)x0[i] / c));
    ok("softcap");
}

double clampedSwiGLU64(double g, double u, double alpha, double limit) {
    g = std::min(g, limit);
    u = std::max(std::min(u, limit), -limit);
    return (u + 1) * g / (1 + std::exp(-alpha * g));
}

// testGptOss checks ClampedSwiGLU's kernel (separate, fused, in place)
// against its float64 definition, with gate and up values beyond +-limit on
// both sides and gates far enough below 0 that the sigmoid underflows.
void testGptOss() {
    const int rows = 13, I = 301;
    const float alpha = 1.702f, limit = 7.f;
    auto g = randn(rows * I, 8), u = randn(rows * I, 8);
    const float eg[] = {-200, 200, 7, -7, 7.5f, -7.5f, 0}, eu[] = {-200, 200, -7, 7, -7.5f, 7.5f, -1};
    memcpy(g.data(), eg, sizeof eg);
    memcpy(u.data(), eu, sizeof eu);
    int beyond[4] = {0, 0, 0, 0};
    for (int i = 0; i < rows * I; i++) {
        beyond[0] += g[i] > limit;
        beyond[1] += g[i] < -limit;
        beyond[2] += u[i] > limit;
        beyond[3] += u[i] < -limit;
    }
    if (!beyond[0] || !beyond[1] || !beyond[2] || !beyond[3]) fail("clamped swiglu's inputs do not pass +-limit on every side");
    std::vector<float> out(rows * I), out2(rows * I);
    sim::launch(dim3(1, 5), dim3(128), 0, drafter_ew_clamped_swiglu, out.data(), (const float*)g.data(), (const float*)u.data(), rows, I, I, I, alpha, limit);
    for (int i = 0; i < rows * I; i++) near("clamped swiglu", i, out[i], clampedSwiGLU64(g[i], u[i], alpha, limit));
    std::vector<float> fused(2 * rows * I);
    for (int r = 0; r < rows; r++) {
        memcpy(&fused[2 * r * I], &g[r * I], I * 4);
        memcpy(&fused[(2 * r + 1) * I], &u[r * I], I * 4);
    }
    sim::launch(dim3(2, 3), dim3(64), 0, drafter_ew_clamped_swiglu, out2.data(), (const float*)fused.data(), (const float*)fused.data() + I, rows, I, 2 * I, 2 * I, alpha, limit);
    if (memcmp(out.data(), out2.data(), out.size() * 4) != 0) fail("clamped swiglu fused differs from separate");
    auto inplace = g;
    sim::launch(dim3(1, 5), dim3(128), 0, drafter_ew_clamped_swiglu, inplace.data(), (const float*)inplace.data(), (const float*)u.data(), rows, I, I, I, alpha, limit);
    if (memcmp(out.data(), inplace.data(), out.size() * 4) != 0) fail("clamped swiglu into gate differs");
    ok("clamped swiglu (separate, fused, in place)");
}

double silu64(double g) { return g / (1 + std::exp(-g)); }

void testActivations() {
    const int rows = 13, I = 301;
    auto g = randn(rows * I, 2), u = randn(rows * I, 1);
    std::vector<float> out(rows * I), out2(rows * I);
    sim::launch(dim3(1, 5), dim3(128), 0, drafter_ew_swiglu, out.data(), (const float*)g.data(), (const float*)u.data(), rows, I, I, I);
    for (int i = 0; i < rows * I; i++) near("swiglu", i, out[i], silu64(g[i]) * u[i]);
    std::vector<float> fused(2 * rows * I);
    for (int r = 0; r < rows; r++) {
        memcpy(&fused[2 * r * I], &g[r * I], I * 4);
        memcpy(&fused[(2 * r + 1) * I], &u[r * I], I * 4);
    }
    sim::launch(dim3(2, 3), dim3(64), 0, drafter_ew_swiglu, out2.data(), (const float*)fused.data(), (const float*)fused.data() + I, rows, I, 2 * I, 2 * I);
    if (memcmp(out.data(), out2.data(), out.size() * 4) != 0) fail("swiglu fused differs from separate");
    auto inplace = g;
    sim::launch(dim3(1, 5), dim3(128), 0, drafter_ew_swiglu, inplace.data(), (const float*)inplace.data(), (const float*)u.data(), rows, I, I, I);
    if (memcmp(out.data(), inplace.data(), out.size() * 4) != 0) fail("swiglu into gate differs");
    ok("swiglu (separate, fused, in place)");

    long long n = rows * I;
    auto dout = randn(n, 1), dg = randn(n, 1), du = randn(n, 1);
    auto dg0 = dg, du0 = du;
    sim::launch(grid1(n, 128, 7), dim3(128), 0, drafter_ew_swiglu_backward, dg.data(), du.data(), (const float*)dout.data(), (const float*)g.data(), (const float*)u.data(), n);
    for (long long i = 0; i < n; i++) {
        double gi = g[i], s = 1 / (1 + std::exp(-gi));
        near("swiglu backward dgate", i, dg[i], dg0[i] + dout[i] * u[i] * s * (1 + gi * (1 - s)));
        near("swiglu backward dup", i, du[i], du0[i] + dout[i] * silu64(gi));
    }
    auto duOnly = du0, dgOnly = dg0;
    sim::launch(grid1(n, 128, 7), dim3(128), 0, drafter_ew_swiglu_backward, (float*)nullptr, duOnly.data(), (const float*)dout.data(), (const float*)g.data(), (const float*)u.data(), n);
    sim::launch(grid1(n, 128, 7), dim3(128), 0, drafter_ew_swiglu_backward, dgOnly.data(), (float*)nullptr, (const float*)dout.data(), (const float*)g.data(), (const float*)u.data(), n);
    if (memcmp(duOnly.data(), du.data(), n * 4) != 0 || memcmp(dgOnly.data(), dg.data(), n * 4) != 0) fail("swiglu backward: one gradient alone differs");
    ok("swiglu backward");

    auto o = randn(n, 1);
    auto o0 = o;
    sim::launch(grid1(n, 96, 5), dim3(96), 0, drafter_ew_add_silu, o.data(), (const float*)g.data(), n);
    for (long long i = 0; i < n; i++) near("add silu", i, o[i], o0[i] + silu64(g[i]));
    ok("add silu");
    auto dz = randn(n, 1);
    auto dz0 = dz;
    sim::launch(grid1(n, 96, 5), dim3(96), 0, drafter_ew_silu_backward, dz.data(), (const float*)dout.data(), (const float*)g.data(), n);
    for (long long i = 0; i < n; i++) {
        double gi = g[i], s = 1 / (1 + std::exp(-gi));
        near("silu backward", i, dz[i], dz0[i] + dout[i] * s * (1 + gi * (1 - s)));
    }
    ok("silu backward");
    // Extreme arguments: no NaN where the function is finite.
    std::vector<float> ext = {-200, -100, -88, -87.3f, 88.7f, 89, 100, 1e30f, -1e30f, 0, -0.0f};
    std::vector<float> one(ext.size(), 1.0f), r(ext.size());
    long long m = (long long)ext.size();
    sim::launch(dim3(1), dim3(32), 0, drafter_ew_add_silu, r.data(), (const float*)ext.data(), m);
    for (long long i = 0; i < m; i++) {
        double want = ext[i] < -88 ? (double)ext[i] * std::exp((double)ext[i]) : silu64(ext[i]);
        if (std::isnan(r[i]) || std::fabs(r[i] - want) > tol * std::max(1.0, std::fabs(want))) fail("silu(%g) = %g, want %g", ext[i], r[i], want);
    }
    ok("silu extremes");
}

void testArithmetic() {
    long long n = 10007;
    auto x = randn(n, 1), y = randn(n, 1);
    auto x0 = x;
    sim::launch(grid1(n, 64, 9), dim3(64), 0, drafter_ew_scale, x.data(), n, -0.37f);
    for (long long i = 0; i < n; i++)
        if (x[i] != x0[i] * -0.37f) fail("scale: value %lld", i);
    ok("scale");
    x = x0;
    sim::launch(grid1(n, 64, 9), dim3(64), 0, drafter_ew_add, x.data(), (const float*)y.data(), n);
    for (long long i = 0; i < n; i++)
        if (x[i] != x0[i] + y[i]) fail("add: value %lld", i);
    ok("add");
    const int rows = 23, cols = 435;
    auto a = randn(rows * cols, 1), b = randn(cols, 1);
    auto a0 = a;
    sim::launch(dim3(2, 4), dim3(128), 0, drafter_ew_add_bias, a.data(), (const float*)b.data(), rows, cols);
    for (int i = 0; i < rows * cols; i++)
        if (a[i] != a0[i] + b[i % cols]) fail("add bias: value %d", i);
    ok("add bias");
    for (int rr : {1, 5, 8, 9, 1000}) {
        int c2 = 70;
        auto m = randn(rr * c2, 1), d = randn(c2, 1);
        auto d0 = d;
        sim::launch(dim3((c2 + 31) / 32), dim3(32 * EW_COL_LANES), 0, drafter_ew_sum_rows, d.data(), (const float*)m.data(), rr, c2);
        for (int j = 0; j < c2; j++) {
            double s = d0[j], sa = std::fabs(d0[j]);
            for (int r = 0; r < rr; r++) s += m[r * c2 + j], sa += std::fabs(m[r * c2 + j]);
            near("sum rows", j, d[j], s, std::max(sa, 1.0));
        }
    }
    ok("sum rows");
}

void testOptimizer() {
    for (long long n : {1LL, 31LL, 30011LL}) {
        auto g = randn(n, 1e-2);
        const int blocks = 40;
        std::vector<double> part(blocks), out(1);
        sim::launch(dim3(blocks), dim3(256), 0, drafter_ew_sum_squares_partial, part.data(), (const float*)g.data(), n);
        sim::launch(dim3(1), dim3(64), 0, drafter_ew_sum_doubles, out.data(), (const double*)part.data(), blocks);
        long double want = 0;
        for (auto v : g) want += (long double)v * v;
        if (std::fabs(out[0] - (double)want) > 1e-12 * (double)want) fail("sum squares of %lld: %.17g, want %.17Lg", n, out[0], want);
    }
    ok("sum squares");

    long long n = 5003;
    auto p = randn(n, 1);
    std::vector<float> m(n), v(n);
    std::vector<double> p64(p.begin(), p.end()), m64(n), v64(n);
    const double lr = 1e-2, b1 = 0.9, b2 = 0.999, eps = 1e-8, wd = 0.1;
    for (int step = 1; step <= 3; step++) {
        auto g = randn(n, 1);
        double bc1 = 1 - std::pow(b1, step), bc2 = 1 - std::pow(b2, step);
        sim::launch(grid1(n, 128, 11), dim3(128), 0, drafter_ew_adamw, p.data(), (const float*)g.data(), m.data(), v.data(), n, (float)(1 - lr * wd), (float)b1, (float)b2,
                    (float)(1 - b1), (float)(1 - b2), (float)(lr / bc1), (float)std::sqrt(bc2), (float)eps);
        for (long long i = 0; i < n; i++) {
            double gx = g[i];
            p64[i] *= 1 - lr * wd;
            m64[i] = b1 * m64[i] + (1 - b1) * gx;
            v64[i] = b2 * v64[i] + (1 - b2) * gx * gx;
            p64[i] -= lr / bc1 * m64[i] / (std::sqrt(v64[i]) / std::sqrt(bc2) + eps);
        }
    }
    for (long long i = 0; i < n; i++) {
        near("adamw p", i, p[i], p64[i]);
        near("adamw m", i, m[i], m64[i]);
        near("adamw v", i, v[i], v64[i]);
    }
    ok("adamw");
}

void testCast() {
    const long long all = 1 << 16;
    std::vector<uint16_t> pat(all);
    for (long long i = 0; i < all; i++) pat[i] = (uint16_t)i;
    std::vector<float> wide(all), back(all);
    std::vector<uint16_t> narrow(all);
    for (int f = 0; f < 2; f++) {
        const Half& h = f ? F16 : BF16;
        const Half& o = f ? BF16 : F16;
        auto widen = f ? drafter_ew_cast_f16_f32 : drafter_ew_cast_bf16_f32;
        auto widenO = f ? drafter_ew_cast_bf16_f32 : drafter_ew_cast_f16_f32;
        auto across = f ? drafter_ew_cast_f16_bf16 : drafter_ew_cast_bf16_f16;
        sim::launch(dim3(16), dim3(256), 0, widen, wide.data(), (const unsigned short*)pat.data(), all);
        for (long long i = 0; i < all; i++)
            if (!sameValue(wide[i], h.decode((uint16_t)i))) fail("cast %s to f32: pattern %#llx is %g", f ? "f16" : "bf16", i, wide[i]);
        // A NaN stays a NaN of the same sign, quiet, with its payload's upper bits.
        for (long long i = 0; i < all; i++)
            if (std::isnan(wide[i]) && (bits(wide[i]) >> 31) != (uint32_t)(i >> 15)) fail("cast to f32: NaN %#llx lost its sign", i);
        sim::launch(dim3(16), dim3(256), 0, across, narrow.data(), (const unsigned short*)pat.data(), all);
        sim::launch(dim3(16), dim3(256), 0, widenO, back.data(), (const unsigned short*)narrow.data(), all);
        for (long long i = 0; i < all; i++)
            if (!sameValue(back[i], o.round(h.decode((uint16_t)i)))) fail("cast %s across: pattern %#llx (%g) is %g", f ? "f16" : "bf16", i, wide[i], back[i]);
    }
    ok("cast widening (all patterns), across");

    // Narrowing: random values over many scales, ties and their neighbours,
    // subnormal ties, the overflow threshold, the specials.
    for (int f = 0; f < 2; f++) {
        const Half& h = f ? F16 : BF16;
        std::vector<float> v;
        for (double s : {1e-9, 1e-6, 1e-3, 1.0, 300.0, 3e4, 1e30}) {
            auto r = randn(3000, s);
            v.insert(v.end(), r.begin(), r.end());
        }
        double emaxV = std::ldexp(2 - std::ldexp(1, 1 - h.p), h.emax), top = std::ldexp(1, h.emax - (h.p - 1)), sub = std::ldexp(1, h.emin - (h.p - 1));
        for (int i = 0; i < 2000; i++) {
            int ex = h.emin + randint(h.emax - h.emin + 1);
            double ulp = std::ldexp(1, ex - (h.p - 1));
            double m = (double)((1 << (h.p - 1)) + randint(1 << (h.p - 1)));
            double tie = (m + 0.5) * ulp;
            float t32 = (float)tie;
            if ((double)t32 == tie) v.insert(v.end(), {t32, std::nextafter(t32, 0.0f), std::nextafter(t32, INFINITY), -t32});
            double st = (randint(1 << (h.p - 1)) + 0.5) * sub;
            float s32 = (float)st;
            if ((double)s32 == st) v.insert(v.end(), {s32, std::nextafter(s32, 1.0f), -s32});
        }
        for (double x : {emaxV, emaxV + top / 2, emaxV + top / 4, emaxV + 3 * top / 4, 2 * emaxV, sub / 2, sub / 4, sub * 0.75, 3.4028234663852886e38, 1.0, -0.0}) {
            float x32 = (float)x;
            v.insert(v.end(), {x32, -x32, std::nextafter(x32, 0.0f), std::nextafter(x32, INFINITY)});
        }
        v.insert(v.end(), {INFINITY, -INFINITY, NAN, -NAN, fromBits(1), fromBits(0x80000001), fromBits(0x7f800001), fromBits(0x7fffffff), fromBits(0xff80ffff)});
        long long n = (long long)v.size();
        std::vector<uint16_t> hv(n);
        std::vector<float> bk(n);
        sim::launch(grid1(n, 256, 24), dim3(256), 0, f ? drafter_ew_cast_f32_f16 : drafter_ew_cast_f32_bf16, hv.data(), (const float*)v.data(), n);
        sim::launch(grid1(n, 256, 24), dim3(256), 0, f ? drafter_ew_cast_f16_f32 : drafter_ew_cast_bf16_f32, bk.data(), (const unsigned short*)hv.data(), n);
        for (long long i = 0; i < n; i++) {
            if (!sameValue(bk[i], h.round(v[i]))) fail("cast f32 to %s: value %lld (%.9g, %#x) is %.9g, want %.9g", f ? "f16" : "bf16", i, v[i], bits(v[i]), bk[i], h.round(v[i]));
            if (std::isnan(v[i]) && (hv[i] >> 15) != (bits(v[i]) >> 31)) fail("cast f32 to %s: NaN lost its sign", f ? "f16" : "bf16");
        }
    }
    ok("cast narrowing");
}

}  // namespace

int main() {
    testExp();
    testGather();
    testAddScaledRows();
    testCopyCols();
    testRMSNorm();
    testRoPE();
    testPartialRoPE();
    testGemma();
    testGptOss();
    testActivations();
    testArithmetic();
    testOptimizer();
    testCast();
    return 0;
}
