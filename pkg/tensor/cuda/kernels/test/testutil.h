// testutil.h: the little the kernel tests share (random inputs, tolerant
// comparison, the "ok <name>" protocol of make cuda-kernel-test: a test prints
// one line per case and exits non-zero if any case failed).
#ifndef DRAFTER_CUDA_TESTUTIL_H
#define DRAFTER_CUDA_TESTUTIL_H

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

namespace testutil {

// Rng is splitmix64: deterministic across platforms, so a failure reproduces.
struct Rng {
  uint64_t s;
  explicit Rng(uint64_t seed) : s(seed) {}
  uint64_t next() {
    uint64_t z = (s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  float uniform(float lo, float hi) { return lo + (hi - lo) * (float)((next() >> 40) * 0x1p-24); }
  int intn(int n) { return (int)(next() % (uint64_t)n); }
  std::vector<float> floats(size_t n, float lo = -1, float hi = 1) {
    std::vector<float> v(n);
    for (float& x : v) x = uniform(lo, hi);
    return v;
  }
};

inline int& failures() {
  static int n = 0;
  return n;
}

// close reports |got - want| <= atol + rtol*|want| (NaN never close).
inline bool close(double got, double want, double atol, double rtol) {
  return std::fabs(got - want) <= atol + rtol * std::fabs(want);
}

// expectClose checks n values and prints the first few mismatches; it
// returns whether all matched.
template <class Got, class Want>
bool expectClose(const char* what, const Got& got, const Want& want, size_t n, double atol, double rtol) {
  int bad = 0;
  for (size_t i = 0; i < n; i++)
    if (!close((double)got[i], (double)want[i], atol, rtol) && bad++ < 5)
      std::fprintf(stderr, "  %s[%zu]: got %.9g, want %.9g\n", what, i, (double)got[i], (double)want[i]);
  if (bad) std::fprintf(stderr, "  %s: %d of %zu values differ\n", what, bad, n);
  return bad == 0;
}

// report prints "ok name" or "FAIL name" and counts failures.
inline void report(const char* name, bool ok) {
  std::printf("%s %s\n", ok ? "ok" : "FAIL", name);
  std::fflush(stdout);
  if (!ok) failures()++;
}

inline int exitCode() { return failures() ? 1 : 0; }

}  // namespace testutil

#endif  // DRAFTER_CUDA_TESTUTIL_H
