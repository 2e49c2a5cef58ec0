// test_sample.cc: the sample kernels against double-precision references,
// run through the simulator. The pattern for every kernel test: include the
// .cu (compiled with -DDRAFTER_CUDA_SIM), make inputs with testutil::Rng
// (sizes that are not multiples of the block included), launch with
// sim::launch, compare with testutil::expectClose, report each case.
#include "sample.cu"
#include "testutil.h"

#include <chrono>
#include <cstring>

using testutil::Rng;

// Warp operations of every kind, each lane writing what it received, for
// checking the simulator's semantics (segments, out-of-segment lanes, votes).
extern "C" __global__ void drafter_sample_warp_ops(int* out, int width) {
  int lane = threadIdx.x & 31, base = blockIdx.x * blockDim.x * 8 + threadIdx.x * 8;
  out[base + 0] = __shfl_sync(0xffffffffu, lane * 10, 3, width);
  out[base + 1] = __shfl_xor_sync(0xffffffffu, lane * 10, 12, width);
  out[base + 2] = __shfl_down_sync(0xffffffffu, lane * 10, 3u, width);
  out[base + 3] = __shfl_up_sync(0xffffffffu, lane * 10, 3u, width);
  out[base + 4] = (int)__ballot_sync(0xffffffffu, lane % 3 == 0);
  out[base + 5] = __any_sync(0xffffffffu, lane == 7) + 2 * __all_sync(0xffffffffu, lane < 32);
  __syncwarp();
  double d = __shfl_xor_sync(0xffffffffu, 0.5 + lane, 1);
  out[base + 6] = (int)(d * 2);
  long long big = __shfl_sync(0xffffffffu, (long long)lane << 40, 0);
  out[base + 7] = (int)(big >> 40);
}

// The thread index of a 3-D block, linearised, and which warp it is in.
extern "C" __global__ void drafter_sample_index3d(int* out) {
  int i = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
  int b = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
  out[b * blockDim.x * blockDim.y * blockDim.z + i] = b * 10000 + i;
}

static void testWarpOps() {
  for (int width : {32, 16, 8}) {
    const int threads = 64, blocks = 2;
    std::vector<int> out(blocks * threads * 8, -1);
    sim::launch(dim3(blocks), dim3(threads), 0, drafter_sample_warp_ops, out.data(), width);
    bool ok = true;
    for (int t = 0; t < blocks * threads; t++) {
      // PTX's rule for shfl.sync: lanes past the segment's end (or, for up,
      // before its start) keep their own value.
      int lane = t % 32, seg = lane & ~(width - 1), in = lane - seg;
      const int* o = &out[t * 8];
      unsigned ballot = 0;
      for (int l = 0; l < 32; l++) ballot |= (l % 3 == 0 ? 1u : 0u) << l;
      ok = ok && o[0] == (seg + 3) * 10;
      ok = ok && o[1] == ((lane ^ 12) <= seg + width - 1 ? (lane ^ 12) * 10 : lane * 10);  // may reach back
      ok = ok && o[2] == (in + 3 < width ? (lane + 3) * 10 : lane * 10);
      ok = ok && o[3] == (in >= 3 ? (lane - 3) * 10 : lane * 10);
      ok = ok && (unsigned)o[4] == ballot && o[5] == 3;
      ok = ok && o[6] == 2 * (lane ^ 1) + 1 && o[7] == 0;
    }
    char name[48];
    std::snprintf(name, sizeof name, "warp_ops/width=%d", width);
    testutil::report(name, ok);
  }
}

static void testIndex3D() {
  const dim3 grid(3, 2, 2), block(8, 4, 2);
  const int per = 8 * 4 * 2, n = 12 * per;
  std::vector<int> out(n, -1);
  sim::launch(grid, block, 0, drafter_sample_index3d, out.data());
  bool ok = true;
  for (int i = 0; i < n; i++) ok = ok && out[i] == (i / per) * 10000 + i % per;
  testutil::report("index3d", ok);
}

static void testVadd(Rng& r) {
  for (int n : {1, 31, 256, 1000, 4099}) {
    std::vector<float> a = r.floats(n), b = r.floats(n), c(n, NAN), want(n);
    for (int i = 0; i < n; i++) want[i] = a[i] + b[i];
    sim::launch(dim3((n + 127) / 128), dim3(128), 0, drafter_sample_vadd, c.data(), a.data(), b.data(), n);
    char name[64];
    std::snprintf(name, sizeof name, "vadd/n=%d", n);
    testutil::report(name, testutil::expectClose("c", c, want, n, 0, 0));
  }
}

static void testSums(Rng& r) {
  for (int n : {1, 33, 1000, 70001}) {
    for (int threads : {32, 256, 1024}) {
      std::vector<float> x = r.floats(n);
      double want = 0;
      for (float v : x) want += v;
      float blockSum = 0, warpSum = 0;
      sim::launch(dim3(3), dim3(threads), 0, drafter_sample_block_sum, &blockSum, x.data(), n);
      sim::launch(dim3(2, 1, 1), dim3(threads), 0, drafter_sample_warp_sum, &warpSum, x.data(), n);
      char name[64];
      std::snprintf(name, sizeof name, "sums/n=%d/threads=%d", n, threads);
      double tol = 1e-6 * n;
      testutil::report(name, testutil::close(blockSum, want, tol, 0) && testutil::close(warpSum, want, tol, 0));
    }
  }
}

static void testRMSNorm(Rng& r) {
  for (int cols : {1, 64, 300, 4096}) {
    for (int threads : {32, 128}) {
      const int rows = 3;
      const float eps = 1e-5f;
      std::vector<uint16_t> x(rows * cols), w(cols), y(rows * cols, 0xffff);
      for (auto& v : x) v = f32_to_bf16(r.uniform(-2, 2));
      for (auto& v : w) v = f32_to_bf16(r.uniform(0.5f, 1.5f));
      std::vector<double> want(rows * cols), got(rows * cols);
      for (int i = 0; i < rows; i++) {
        double ss = 0;
        for (int j = 0; j < cols; j++) ss += std::pow(bf16_to_f32(x[i * cols + j]), 2);
        double s = 1 / std::sqrt(ss / cols + eps);
        for (int j = 0; j < cols; j++) want[i * cols + j] = bf16_to_f32(x[i * cols + j]) * s * bf16_to_f32(w[j]);
      }
      sim::launch(dim3(rows), dim3(threads), threads / 32 * sizeof(double), drafter_sample_rmsnorm_bf16, y.data(), x.data(),
                  w.data(), cols, eps);
      for (int i = 0; i < rows * cols; i++) got[i] = bf16_to_f32(y[i]);
      char name[64];
      std::snprintf(name, sizeof name, "rmsnorm_bf16/cols=%d/threads=%d", cols, threads);
      testutil::report(name, testutil::expectClose("y", got, want, rows * cols, 0, 1.0 / 128));  // one bf16 rounding
    }
  }
}

// The bit conversions against exhaustive or structured inputs: every bf16
// and f16 value round-trips, and rounding is to nearest even.
static void testConversions() {
  bool ok = true;
  for (uint32_t h = 0; h < 0x10000; h++) {
    uint16_t b = (uint16_t)h;
    float f = bf16_to_f32(b);
    if (f == f && f32_to_bf16(f) != b) ok = false;
    float g = f16_to_f32(b);
    if (g == g && f32_to_f16(g) != b) ok = false;
  }
  ok = ok && f32_to_bf16(1.0f + 0x1p-8f) == 0x3f80 && f32_to_bf16(1.0f + 3 * 0x1p-8f) == 0x3f82;  // ties to even
  ok = ok && f32_to_f16(65520.0f) == 0x7c00 && f32_to_f16(65519.0f) == 0x7bff && f32_to_f16(0x1p-25f) == 0;
  ok = ok && f32_to_f16(0x1.8p-25f) == 1 && f16_to_f32(1) == 0x1p-24f;
  testutil::report("conversions", ok);
}

// Launch cost: the stand-in runs whole models through the simulator, so a
// small launch must stay cheap. Reported, and a generous bound checked.
static void testLaunchCost() {
  const int n = 4 * 256;
  std::vector<float> a(n, 1), b(n, 2), c(n);
  float sum = 0;
  auto t0 = std::chrono::steady_clock::now();
  #if defined(__SANITIZE_THREAD__)
  const int reps = 2;
#else
  const int reps = 200;
#endif
  for (int i = 0; i < reps; i++) {
    sim::launch(dim3(4), dim3(256), 0, drafter_sample_vadd, c.data(), a.data(), b.data(), n);
    sim::launch(dim3(4), dim3(256), 0, drafter_sample_block_sum, &sum, a.data(), n);
  }
  double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() / (2 * reps);
  std::printf("   launch of 4 blocks x 256 threads: %.1f us\n", us);
#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
  us = 0;  // sanitizers make fiber switches orders of magnitude slower
#endif
  testutil::report("launch_cost", sum == reps * n && us < 20000);
}

int main() {
  Rng r(1);
  testVadd(r);
  testSums(r);
  testRMSNorm(r);
  testConversions();
  testWarpOps();
  testIndex3D();
  testLaunchCost();
  return testutil::exitCode();
}
