// Kernel test of decode.cu (SampleRows) through the CPU-thread simulator,
// against a C++ port of tensor.SampleRow (pkg/tensor/sample.go) with libm's
// exp: decode_exp within 2 ulp of exp over its range (subnormal results
// included), then the sampling kernel on rows of several widths and block
// sizes at temperature 0 (the reference's ids exactly: first of equal
// largest values, -1 for NaN, +Inf or only -Inf) and above (equal ids but
// where u·total lies within 1e-6 of the total from a boundary between the
// reference's token and the kernel's). Plain, TSan and ASan builds
// (Makefile): a missing barrier shows as a race. Exits 1 on the first
// failure.

#include "../decode.cu"

#include <cfloat>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

namespace {

std::mt19937_64 rng(20261207);

[[noreturn]] void fail(const std::string& what) {
  std::fprintf(stderr, "FAIL %s\n", what.c_str());
  std::exit(1);
}

void ok(const std::string& what) { std::printf("ok %s\n", what.c_str()); }

double ulps(double a, double b) {
  if (a == b) return 0;
  long long x, y;
  std::memcpy(&x, &a, 8);
  std::memcpy(&y, &b, 8);
  return (double)std::llabs(x - y);
}

void test_exp() {
  std::uniform_real_distribution<double> d(-745, 0);
  double worst = 0;
  for (int i = 0; i < 200000; i++) {
    double x = i < 1000 ? -i * 0.745 : d(rng);
    worst = std::max(worst, ulps(decode_exp(x), std::exp(x)));
  }
  if (worst > 2) fail("decode_exp: " + std::to_string(worst) + " ulp from exp");
  if (decode_exp(-746) != 0 || decode_exp(0) != 1) fail("decode_exp at its ends");
  ok("decode_exp (worst " + std::to_string((int)worst) + " ulp)");
}

// prob is the reference's rounded probability.
double prob(float v, float mx, double invT, double inv) {
  if (v < -FLT_MAX) return 0;
  return (double)(float)((double)(float)std::exp(((double)v - (double)mx) * invT) * inv);
}

// sample_ref is tensor.SampleRow.
int sample_ref(const float* row, int n, double temp, double u, std::vector<double>* cdf) {
  int best = 0;
  float mx = row[0];
  for (int i = 0; i < n; i++) {
    if (row[i] != row[i] || row[i] > FLT_MAX) return -1;
    if (row[i] > mx) {
      best = i;
      mx = row[i];
    }
  }
  if (mx < -FLT_MAX) return -1;
  if (temp == 0) return best;
  double invT = 1 / temp, sum = 0;
  for (int i = 0; i < n; i++) {
    if (row[i] >= -FLT_MAX) sum += std::exp(((double)row[i] - (double)mx) * invT);
  }
  double inv = 1 / sum, total = 0;
  for (int i = 0; i < n; i++) total += prob(row[i], mx, invT, inv);
  double target = u * total, cum = 0;
  int last = -1, id = -1;
  cdf->assign(n, 0);
  for (int i = 0; i < n; i++) {
    double p = prob(row[i], mx, invT, inv);
    cum += p;
    (*cdf)[i] = cum / total;
    if (p == 0 || id >= 0) continue;
    if (target < cum) id = i;
    last = i;
  }
  return id >= 0 ? id : last;
}

void test_sample() {
  struct Shape {
    int rows, n, block;
  };
  std::normal_distribution<double> nd(0, 3);
  std::uniform_real_distribution<double> ud(0, 1);
  for (Shape sh : {Shape{12, 1, 32}, Shape{12, 37, 32}, Shape{12, 1000, 128}, Shape{10, 5000, 1024}}) {
    int rows = sh.rows, n = sh.n;
    std::vector<float> v((size_t)rows * n);
    for (auto& x : v) x = (float)nd(rng);
    if (n > 1) {
      for (int i = 0; i < n; i += 3) v[(size_t)2 * n + i] = -INFINITY;
      v[(size_t)3 * n + n / 2] = v[(size_t)3 * n + n - 1] = 50;
    }
    v[(size_t)4 * n + n - 1] = NAN;
    v[(size_t)5 * n] = INFINITY;
    for (int i = 0; i < n; i++) v[(size_t)6 * n + i] = -INFINITY;
    std::vector<double> u(rows);
    for (auto& x : u) x = ud(rng);
    u[7] = 0;
    u[8] = std::nextafter(1.0, 0.0);
    for (double temp : {0.0, 1e-3, 0.7, 2.5}) {
      std::vector<int> ids(rows, -5);
      sim::launch(dim3(rows), dim3(sh.block), 0, drafter_decode_sample, ids.data(), (const float*)v.data(), n, temp,
                  (const double*)u.data());
      std::vector<double> cdf;
      for (int r = 0; r < rows; r++) {
        int want = sample_ref(&v[(size_t)r * n], n, temp, u[r], &cdf);
        if (ids[r] == want) continue;
        std::string what = std::to_string(n) + " columns, temperature " + std::to_string(temp) + ", row " +
                           std::to_string(r) + ": " + std::to_string(ids[r]) + ", want " + std::to_string(want);
        if (temp == 0 || want < 0 || ids[r] < 0) fail(what);
        int a = std::min(want, ids[r]);
        if (std::fabs(cdf[a] - u[r]) > 1e-6) fail(what + " away from a boundary");
      }
    }
  }
  ok("sample");
}

}  // namespace

int main() {
  test_exp();
  test_sample();
  std::printf("ok all\n");
  return 0;
}
