// test_core.cc: kernels/core.cu through the simulator against double-precision
// references written here from the ops' definitions: the few-row product
// (every weight dtype, k on and off the vector path, rows across the tiles,
// accumulation, and each row alone giving the same bits), the few-row
// product over MXFP4 weights (against the reference and bit for bit against
// the float32 kernel over the same values) and their widening, the float32 ->
// bf16/f16 rounding (nearest, ties to even, specials), and the KV move.
#include "../core.cu"
#include "testutil.h"

#include <cstring>

using testutil::Rng;

namespace {

// The launch shape cuda/core.go uses (fewWarps, fewTile).
const int kWarps = 8, kTile = 8;

uint32_t bitsOf(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

float fromBits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// A reference rounding to a format of mant explicit mantissa bits and
// exponent range [emin, emax] (normal exponents), written from the
// definition: the two neighbours on the format's grid, the nearer, ties to
// the even one, overflow to infinity past the largest finite value plus half
// an ulp. Returns the rounded value as a double.
double roundRef(double x, int mant, int emin, int emax) {
  if (std::isnan(x) || std::isinf(x) || x == 0) return x;
  double a = std::fabs(x);
  int e = std::ilogb(a);
  if (e < emin) e = emin;  // subnormals share the smallest exponent's grid
  double ulp = std::ldexp(1.0, e - mant);
  double lo = std::floor(a / ulp) * ulp, hi = lo + ulp;
  double r;
  if (a - lo < hi - a) {
    r = lo;
  } else if (a - lo > hi - a) {
    r = hi;
  } else {
    r = std::fmod(lo / ulp, 2.0) == 0 ? lo : hi;
  }
  double maxFinite = std::ldexp(2.0 - std::ldexp(1.0, -mant), emax);
  if (r > maxFinite) r = INFINITY;
  return std::copysign(r, x);
}

double bf16Value(uint16_t h) { return fromBits((uint32_t)h << 16); }

double f16Value(uint16_t h) {
  int e = (h >> 10) & 31, m = h & 1023;
  double s = (h & 0x8000) ? -1 : 1;
  if (e == 31) return m ? NAN : s * INFINITY;
  if (e == 0) return s * std::ldexp((double)m, -24);
  return s * std::ldexp(1024.0 + m, e - 25);
}

// encode returns v in dtype dt (1 bf16, 2 f16) through the reference
// rounding, as bits, and the values widened back.
void encode(int dt, const std::vector<float>& v, std::vector<uint16_t>& h, std::vector<float>& back) {
  h.resize(v.size());
  back.resize(v.size());
  for (size_t i = 0; i < v.size(); i++) {
    if (dt == 1) {
      double r = roundRef(v[i], 7, -126, 127);
      h[i] = (uint16_t)(bitsOf((float)r) >> 16);
      back[i] = (float)bf16Value(h[i]);
    } else {
      double r = roundRef(v[i], 10, -14, 15);
      // The bits of the rounded value, from its exponent and mantissa.
      uint16_t best = std::signbit(r) ? 0x8000 : 0;
      double a = std::fabs(r);
      if (std::isinf(a)) {
        best |= 0x7c00;
      } else if (a < 0x1p-14) {
        best |= (uint16_t)(a / 0x1p-24);
      } else {
        int e = std::ilogb(a);
        best |= (uint16_t)(((e + 15) << 10) | (int)(a / std::ldexp(1.0, e - 10) - 1024));
      }
      h[i] = best;
      back[i] = (float)f16Value(best);
    }
  }
}

// few launches the few-row kernel of weight dtype dt as cuda/core.go does.
void few(int dt, float* out, const float* x, const void* w, int rows, int n, int k, int acc) {
  dim3 grid((n + kWarps - 1) / kWarps, (rows + kTile - 1) / kTile), block(32 * kWarps);
  switch (dt) {
    case 0: sim::launch(grid, block, 0, drafter_core_mult_few_f32, out, x, (const float*)w, rows, n, k, acc); break;
    case 1: sim::launch(grid, block, 0, drafter_core_mult_few_bf16, out, x, (const uint16_t*)w, rows, n, k, acc); break;
    default: sim::launch(grid, block, 0, drafter_core_mult_few_f16, out, x, (const uint16_t*)w, rows, n, k, acc); break;
  }
}

void testFewRows(Rng& r) {
  const char* names[] = {"f32", "bf16", "f16"};
  for (int dt = 0; dt < 3; dt++) {
    for (int k : {1, 45, 64, 264}) {
      for (int rows : {1, 7, 9, 48}) {
        for (int acc = 0; acc < 2; acc++) {
          int n = dt == 2 ? 13 : 37;
          std::vector<float> wv = r.floats((size_t)n * k), x = r.floats((size_t)rows * k, -2, 2);
          std::vector<float> out0 = r.floats((size_t)rows * n), out = out0, wide = wv;
          std::vector<uint16_t> h;
          const void* w = wv.data();
          if (dt != 0) {
            encode(dt, wv, h, wide);
            w = h.data();
          }
          few(dt, out.data(), x.data(), w, rows, n, k, acc);
          bool ok = true;
          for (int i = 0; i < rows && ok; i++) {
            for (int j = 0; j < n && ok; j++) {
              double s = acc ? out0[i * n + j] : 0, a = acc ? std::fabs(out0[i * n + j]) : 0;
              for (int c = 0; c < k; c++) {
                double p = (double)x[(size_t)i * k + c] * wide[(size_t)j * k + c];
                s += p;
                a += std::fabs(p);
              }
              if (!testutil::close(out[i * n + j], s, 2e-5 * a + 1e-30, 0)) {
                std::fprintf(stderr, "  out[%d,%d] = %.9g, want %.9g\n", i, j, out[i * n + j], s);
                ok = false;
              }
            }
          }
          // Each row alone (its own launch, its own tile) gives the same bits.
          for (int i = 0; i < rows && ok; i += std::max(1, rows / 3)) {
            std::vector<float> one(out0.begin() + (size_t)i * n, out0.begin() + (size_t)(i + 1) * n);
            few(dt, one.data(), x.data() + (size_t)i * k, w, 1, n, k, acc);
            for (int j = 0; j < n; j++) {
              if (bitsOf(one[j]) != bitsOf(out[(size_t)i * n + j])) {
                std::fprintf(stderr, "  row %d alone: %.9g at %d, with the others %.9g\n", i, one[j], j, out[i * n + j]);
                ok = false;
                break;
              }
            }
          }
          char name[96];
          std::snprintf(name, sizeof name, "mult_few/%s/k=%d/rows=%d/acc=%d", names[dt], k, rows, acc);
          testutil::report(name, ok);
        }
      }
    }
  }
}

// fp4Ref is the e2m1 nibble's value from the format: sign bit 3, exponent
// bits 2-1 (bias 1, 0 subnormal), mantissa bit 0.
double fp4Ref(unsigned b) {
  double e = (b >> 1) & 3, m = b & 1;
  double v = e > 0 ? (1 + m / 2) * std::ldexp(1.0, (int)e - 1) : m / 2;
  return (b & 8) ? -v : v;
}

// mxfp4Ref is value i of an MXFP4 matrix's row-major values (low nibble
// first, one scale per 32 values, biased by 127).
double mxfp4Ref(const std::vector<uint8_t>& blocks, const std::vector<uint8_t>& scales, size_t i) {
  unsigned b = blocks[i / 2];
  return fp4Ref(i % 2 ? b >> 4 : b & 15) * std::ldexp(1.0, (int)scales[i / 32] - 127);
}

// testMXFP4 checks the widening kernel exactly against mxfp4Ref over every
// byte and scales from 0 to 252 (127 ± 10 among them), and the few-row
// product over MXFP4 weights: within the reference's bound, bit for bit the
// float32 kernel over the widened values, on and off the vector path (x
// 16-byte aligned or not), each row alone giving the same bits.
void testMXFP4(Rng& r) {
  const uint8_t someScales[] = {0, 1, 2, 117, 120, 126, 127, 128, 131, 137, 200, 252};
  {
    const int n = 24, k = 512;  // every byte value in every row
    std::vector<uint8_t> blocks((size_t)n * k / 2), scales((size_t)n * k / 32);
    for (size_t i = 0; i < blocks.size(); i++) blocks[i] = (uint8_t)(i * 7 + i / 256);
    for (size_t i = 0; i < scales.size(); i++) scales[i] = someScales[(i * 5) % sizeof someScales];
    std::vector<float> out((size_t)n * k, -7.0f);
    sim::launch(dim3(5), dim3(256), 0, drafter_core_mxfp4_f32, out.data(), blocks.data(), scales.data(),
                (long long)blocks.size());
    bool ok = true;
    for (size_t i = 0; i < out.size() && ok; i++) {
      double want = mxfp4Ref(blocks, scales, i);
      ok = out[i] == want && std::signbit(out[i]) == std::signbit(want);
      if (!ok) std::fprintf(stderr, "  value %zu is %a, want %a\n", i, out[i], want);
    }
    testutil::report("mxfp4_f32", ok);
  }
  for (int k : {32, 64, 288, 544}) {
    for (int rows : {1, 9, 48}) {
      for (int shift = 0; shift < 2; shift++) {
        for (int acc = 0; acc < 2; acc++) {
          const int n = 21;
          std::vector<uint8_t> blocks((size_t)n * k / 2), scales((size_t)n * k / 32);
          for (auto& b : blocks) b = (uint8_t)r.next();
          for (auto& s : scales) s = (uint8_t)(117 + r.next() % 21);
          scales[0] = 0;
          scales[1] = 1;  // subnormal values (252 would overflow the sums: the widening test has it)
          std::vector<float> wide((size_t)n * k);
          for (size_t i = 0; i < wide.size(); i++) wide[i] = (float)mxfp4Ref(blocks, scales, i);
          // shift 1 moves x off 16-byte alignment: the scalar path.
          std::vector<float> xs = r.floats((size_t)rows * k + 4, -2, 2);
          const float* x = xs.data() + shift;
          std::vector<float> out0 = r.floats((size_t)rows * n), out = out0, ref = out0;
          dim3 grid((n + kWarps - 1) / kWarps, (rows + kTile - 1) / kTile), block(32 * kWarps);
          sim::launch(grid, block, 0, drafter_core_mult_few_mxfp4, out.data(), x, (const uint8_t*)blocks.data(),
                      (const uint8_t*)scales.data(), rows, n, k, acc);
          few(0, ref.data(), x, wide.data(), rows, n, k, acc);
          bool ok = true;
          for (int i = 0; i < rows && ok; i++) {
            for (int j = 0; j < n && ok; j++) {
              double s = acc ? out0[i * n + j] : 0, a = acc ? std::fabs(out0[i * n + j]) : 0;
              for (int c = 0; c < k; c++) {
                double p = (double)x[(size_t)i * k + c] * mxfp4Ref(blocks, scales, (size_t)j * k + c);
                s += p;
                a += std::fabs(p);
              }
              if (!testutil::close(out[i * n + j], s, 2e-5 * a + 1e-30, 0)) {
                std::fprintf(stderr, "  out[%d,%d] = %.9g, want %.9g\n", i, j, out[i * n + j], s);
                ok = false;
              }
              if (ok && bitsOf(out[i * n + j]) != bitsOf(ref[i * n + j])) {
                std::fprintf(stderr, "  out[%d,%d] = %.9g, the float32 kernel's %.9g\n", i, j, out[i * n + j],
                             ref[i * n + j]);
                ok = false;
              }
            }
          }
          for (int i = 0; i < rows && ok; i += std::max(1, rows / 3)) {
            std::vector<float> one(out0.begin() + (size_t)i * n, out0.begin() + (size_t)(i + 1) * n);
            sim::launch(dim3((n + kWarps - 1) / kWarps, 1), block, 0, drafter_core_mult_few_mxfp4, one.data(),
                        x + (size_t)i * k, (const uint8_t*)blocks.data(), (const uint8_t*)scales.data(), 1, n, k, acc);
            for (int j = 0; j < n && ok; j++) {
              if (bitsOf(one[j]) != bitsOf(out[(size_t)i * n + j])) {
                std::fprintf(stderr, "  row %d alone: %.9g at %d, with the others %.9g\n", i, one[j], j, out[i * n + j]);
                ok = false;
              }
            }
          }
          char name[96];
          std::snprintf(name, sizeof name, "mult_few/mxfp4/k=%d/rows=%d/shift=%d/acc=%d", k, rows, shift, acc);
          testutil::report(name, ok);
        }
      }
    }
  }
}

void testRound(Rng& r) {
  std::vector<float> v = r.floats(5000, -3, 3);
  // Specials and edges: zeros, infinities, NaN, ties, overflow, subnormals.
  float extra[] = {0.0f, -0.0f, INFINITY, -INFINITY, 1.0f + 0x1p-8f, 1.0f + 3 * 0x1p-8f, 1.0f + 0x1p-11f,
                   1.0f + 3 * 0x1p-11f, 65504.0f, 65519.0f, 65520.0f, 1e6f, -1e6f, 3e38f, 0x1p-14f, 0x1p-24f,
                   0x1p-25f, 0x1.8p-25f, 1e-30f, 0x1p-126f, 0x1p-133f, 0x1.fep127f};
  for (float e : extra) v.push_back(e);
  for (int i = 0; i < 200; i++) v.push_back(fromBits((uint32_t)r.next()));  // any bits, NaNs included
  long long n = (long long)v.size();
  for (int dt = 1; dt <= 2; dt++) {
    std::vector<uint16_t> got(v.size(), 0xdead);
    // A grid smaller than the work: the grid-stride loop wraps.
    if (dt == 1)
      sim::launch(dim3(3), dim3(256), 0, drafter_core_round_bf16, got.data(), v.data(), n);
    else
      sim::launch(dim3(3), dim3(256), 0, drafter_core_round_f16, got.data(), v.data(), n);
    bool ok = true;
    for (size_t i = 0; i < v.size() && ok; i++) {
      double x = v[i];
      double g = dt == 1 ? bf16Value(got[i]) : f16Value(got[i]);
      if (std::isnan(x)) {
        ok = std::isnan(g);
      } else {
        double want = dt == 1 ? roundRef(x, 7, -126, 127) : roundRef(x, 10, -14, 15);
        ok = g == want && std::signbit(g) == std::signbit(want);
        if (!ok) std::fprintf(stderr, "  %a rounds to %a, want %a\n", x, g, want);
      }
    }
    testutil::report(dt == 1 ? "round/bf16" : "round/f16", ok);
  }
}

void testKVMove(Rng& r) {
  for (int kvDim : {20, 256, 300}) {
    const int layers = 3, cap = 7;
    long long plane = (long long)cap * kvDim;
    std::vector<float> kv = r.floats((size_t)(2 * layers * plane)), want = kv;
    int dst = 5, src = 2;
    for (int p = 0; p < 2 * layers; p++)
      for (int i = 0; i < kvDim; i++) want[p * plane + (long long)dst * kvDim + i] = want[p * plane + (long long)src * kvDim + i];
    sim::launch(dim3((kvDim + 255) / 256, 2 * layers), dim3(256), 0, drafter_core_kv_move, kv.data(), 2 * layers, plane,
                kvDim, dst, src);
    char name[64];
    std::snprintf(name, sizeof name, "kv_move/kvDim=%d", kvDim);
    testutil::report(name, testutil::expectClose("kv", kv, want, kv.size(), 0, 0));
  }
}

// kv_write copies k and v to the two addresses its table holds, over a
// grid smaller than the values (the grid-stride loop) and larger.
void testKVWrite(Rng& r) {
  for (long long n : {1LL, 300LL, 5000LL}) {
    std::vector<float> k = r.floats((size_t)n), v = r.floats((size_t)n);
    std::vector<float> cache = r.floats((size_t)(4 * n + 8)), want = cache;
    float* kd = cache.data() + 3;
    float* vd = cache.data() + 2 * n + 5;
    for (long long i = 0; i < n; i++) want[3 + i] = k[i], want[2 * n + 5 + i] = v[i];
    std::vector<unsigned long long> tab = {(unsigned long long)(uintptr_t)kd, (unsigned long long)(uintptr_t)vd};
    for (unsigned blocks : {1u, 3u, 64u}) {
      std::vector<float> got = cache;
      tab[0] = (unsigned long long)(uintptr_t)(got.data() + 3);
      tab[1] = (unsigned long long)(uintptr_t)(got.data() + 2 * n + 5);
      sim::launch(dim3(blocks, 2), dim3(256), 0, drafter_core_kv_write, tab.data(), k.data(), v.data(), n);
      char name[64];
      std::snprintf(name, sizeof name, "kv_write/n=%lld/blocks=%u", n, blocks);
      testutil::report(name, testutil::expectClose("cache", got, want, got.size(), 0, 0));
    }
  }
}

}  // namespace

int main() {
  Rng r(2);
  testFewRows(r);
  testMXFP4(r);
  testRound(r);
  testKVMove(r);
  testKVWrite(r);
  return testutil::exitCode();
}
