// test_math.cc: compat.h's device math (the expf, logf, ... kernels get on
// the GPU, where there is no libdevice) against double-precision libm. The
// simulator's kernels call libm itself, so this is where the GPU versions'
// range reduction and polynomials are checked; on the CPU the hardware
// ex2.approx they build on is exp2f, so expf/tanhf errors on the GPU run up
// to 2 ulp higher than measured here.
#include "../compat.h"
#include "testutil.h"

#include <cfloat>
#include <functional>

using testutil::Rng;

// ulps is |got - want| in units of want's float ulp.
static double ulps(float got, double want) {
  if (std::isnan(want)) return std::isnan(got) ? 0 : 1e30;
  if (std::fabs(want) > FLT_MAX) want = want > 0 ? INFINITY : -INFINITY;  // float overflow
  if (std::isinf(want)) return (double)got == want ? 0 : 1e30;
  int e;
  std::frexp(want, &e);
  double ulp = std::ldexp(1.0, std::max(e - 24, -149));
  return std::fabs((double)got - want) / ulp;
}

// sweep checks f against ref at n log-uniform and uniform points of [lo, hi]
// and returns the worst error in ulps.
static double sweep(const char* name, const std::function<float(float)>& f, const std::function<double(double)>& ref,
                    float lo, float hi, double maxUlps, Rng& r) {
  double worst = 0;
  float at = 0;
  for (int i = 0; i < 200000; i++) {
    float x = r.uniform(lo, hi);
    if (i % 2 && lo > 0) x = (float)std::exp(r.uniform(std::log(lo), std::log(hi)));
    double u = ulps(f(x), ref((double)x));
    if (u > worst) worst = u, at = x;
  }
  char n[96];
  std::snprintf(n, sizeof n, "%s on [%g, %g]: worst %.2f ulp at %.9g (limit %.1f)", name, lo, hi, worst, at, maxUlps);
  testutil::report(n, worst <= maxUlps);
  return worst;
}

int main() {
  Rng r(7);
  sweep("expf", drafter_expf, [](double x) { return std::exp(x); }, -87, 88, 2, r);
  sweep("expf (subnormal results)", drafter_expf, [](double x) { return std::exp(x); }, -103, -87, 2, r);
  sweep("logf", drafter_logf, [](double x) { return std::log(x); }, 1e-30f, 1e30f, 1, r);
  sweep("logf near 1", drafter_logf, [](double x) { return std::log(x); }, 0.9f, 1.1f, 1, r);
  sweep("rsqrtf", drafter_rsqrtf, [](double x) { return 1 / std::sqrt(x); }, 1e-30f, 1e30f, 1.5, r);
  sweep("tanhf", drafter_tanhf, [](double x) { return std::tanh(x); }, -10, 10, 3, r);
  sweep("tanhf small", drafter_tanhf, [](double x) { return std::tanh(x); }, -0.4f, 0.4f, 2, r);
  sweep("sinf", drafter_sinf, [](double x) { return std::sin(x); }, -1e5f, 1e5f, 1, r);
  sweep("cosf", drafter_cosf, [](double x) { return std::cos(x); }, -1e5f, 1e5f, 1, r);
  sweep("sinf small", drafter_sinf, [](double x) { return std::sin(x); }, -4, 4, 1, r);
  sweep("cosf small", drafter_cosf, [](double x) { return std::cos(x); }, -4, 4, 1, r);
  for (float y : {-2.0f, -0.5f, 0.3f, 1.5f, 7.0f}) {
    char n[32];
    std::snprintf(n, sizeof n, "powf(x, %g)", y);
    sweep(n, [y](float x) { return drafter_powf(x, y); }, [y](double x) { return std::pow(x, (double)y); }, 1e-6f, 1e6f,
          1, r);
  }
  // Rotary frequencies: theta^(-2i/d), the use powf has in drafter.
  sweep("powf(500000, -y)", [](float y) { return drafter_powf(500000.0f, -y); },
        [](double y) { return std::pow(500000.0, -(double)(float)y); }, 0, 1, 1, r);

  const float inf = INFINITY, nan = NAN;
  bool ok = drafter_expf(-inf) == 0 && drafter_expf(inf) == inf && std::isnan(drafter_expf(nan)) &&
            drafter_expf(0) == 1 && drafter_expf(89) == inf && drafter_expf(-104) == 0;
  ok = ok && drafter_logf(0) == -inf && std::isnan(drafter_logf(-1)) && drafter_logf(inf) == inf && drafter_logf(1) == 0 &&
       std::isnan(drafter_logf(nan));
  ok = ok && drafter_tanhf(inf) == 1 && drafter_tanhf(-inf) == -1 && std::isnan(drafter_tanhf(nan)) && drafter_tanhf(0) == 0;
  ok = ok && std::isnan(drafter_sinf(inf)) && std::isnan(drafter_cosf(nan)) && drafter_sinf(0) == 0 && drafter_cosf(0) == 1;
  ok = ok && drafter_powf(2, 10) == 1024 && drafter_powf(-2, 3) == -8 && drafter_powf(-2, 2) == 4 &&
       std::isnan(drafter_powf(-2, 0.5f)) && drafter_powf(0, -1) == inf && drafter_powf(0, 2) == 0 &&
       drafter_powf(nan, 0) == 1 && drafter_powf(1, nan) == 1 && drafter_powf(10, 40) == inf && drafter_powf(10, -50) == 0;
  testutil::report("special values", ok);
  return testutil::exitCode();
}
