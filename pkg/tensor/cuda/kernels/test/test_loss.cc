// Kernel tests of loss.cu (Softmax, ArgMax, GatherCols, the cross-entropies,
// the LK losses, their row-loss sum, CrossEntropyEval and TopK) through the
// CPU-thread simulator, against double-precision C++ references on random
// inputs: widths that are not multiples of the block, -Inf entries, ties,
// negative targets, zero weights. The tolerances are the conformance suite's
// (pkg/tensor/tensortest: 1e-6 on probabilities and gradients, 1e-6
// relative on losses), so a kernel that passes here can pass there.
// Prints "ok <case>" per case; exits 1 on the first failure.

#include "../loss.cu"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <vector>

namespace {

std::mt19937_64 rng(20261206);

const float kNegInf = -std::numeric_limits<float>::infinity();

// TSan multiplies the simulator's cost per thread and barrier: its run
// checks the same paths on fewer random rows.
#if defined(__SANITIZE_THREAD__)
const bool kTSan = true;
#else
const bool kTSan = false;
#endif

[[noreturn]] void fail(const std::string& what) {
  std::fprintf(stderr, "FAIL %s\n", what.c_str());
  std::exit(1);
}

void ok(const std::string& what) { std::printf("ok %s\n", what.c_str()); }

std::vector<float> randn(size_t n, double scale) {
  std::normal_distribution<double> d(0, scale);
  std::vector<float> v(n);
  for (auto& x : v) {
    x = (float)d(rng);
  }
  return v;
}

int randint(int lo, int hi) {  // [lo, hi]
  return std::uniform_int_distribution<int>(lo, hi)(rng);
}

bool same_bits(float a, float b) {
  uint32_t x, y;
  std::memcpy(&x, &a, 4);
  std::memcpy(&y, &b, 4);
  return x == y;
}

bool same_bits(double a, double b) {
  uint64_t x, y;
  std::memcpy(&x, &a, 8);
  std::memcpy(&y, &b, 8);
  return x == y;
}

// log_softmax returns log(softmax(x)) in double.
std::vector<double> log_softmax(const float* x, int n) {
  double m = -INFINITY;
  for (int i = 0; i < n; i++) {
    m = std::max(m, (double)x[i]);
  }
  double s = 0;
  for (int i = 0; i < n; i++) {
    s += std::exp((double)x[i] - m);
  }
  std::vector<double> out(n);
  for (int i = 0; i < n; i++) {
    out[i] = (double)x[i] - m - std::log(s);
  }
  return out;
}

// near fails unless |got - want| <= tol·max(1, |want|): the conformance
// suite's absolute 1e-6 for probabilities and gradients within [-1, 1], and
// relative beyond (a distribution that sums to more than 1 scales its
// gradient, and float32's ulp with it).
void near(const std::string& what, const std::vector<float>& got, const std::vector<double>& want, double tol) {
  for (size_t i = 0; i < want.size(); i++) {
    double d = std::fabs((double)got[i] - want[i]);
    if (!(d <= tol * std::max(1.0, std::fabs(want[i])))) {
      fail(what + ": value " + std::to_string(i) + " is " + std::to_string(got[i]) + ", want " +
           std::to_string(want[i]));
    }
  }
}

void close_to(const std::string& what, double got, double want, double rel) {
  double d = std::fabs(got - want);
  if (!(d <= rel * std::max(1.0, std::fabs(want)))) {
    char buf[256];
    std::snprintf(buf, sizeof buf, "%s: %.15g, want %.15g (difference %.3g)", what.c_str(), got, want, d);
    fail(buf);
  }
}

// The device's scalar helpers against libm.
void test_math() {
  // cpu_expf: kernel.Expf's few ulp over the shifted range (arguments <= 0).
  for (int i = 0; i < 200000; i++) {
    float x = -(float)std::uniform_real_distribution<double>(0, 88)(rng);
    double want = std::exp((double)x);
    double got = cpu_expf(x);
    if (want > 1e-37 && !(std::fabs(got - want) <= 4e-7 * want)) {
      fail("cpu_expf(" + std::to_string(x) + ")");
    }
  }
  if (cpu_expf(kNegInf) != 0 || cpu_expf(-100) != 0 || cpu_expf(0) != 1 || !std::isnan(cpu_expf(NAN))) {
    fail("cpu_expf edge values");
  }
  // loss_log: within 2 ulp of log over many scales.
  for (int i = 0; i < 200000; i++) {
    double x = std::exp(std::uniform_real_distribution<double>(-700, 700)(rng));
    double want = std::log(x), got = loss_log(x);
    if (!(std::fabs(got - want) <= 2 * std::numeric_limits<double>::epsilon() * std::max(1.0, std::fabs(want)))) {
      char buf[128];
      std::snprintf(buf, sizeof buf, "loss_log(%.17g) = %.17g, want %.17g", x, got, want);
      fail(buf);
    }
  }
  for (double x : {1.0, 2.0, 0.5, 1.4142135623730951, 1.4142135623730954, 4.9e-324, 1e-310, 1.7e308}) {
    if (!(std::fabs(loss_log(x) - std::log(x)) <= 2e-16 * std::max(1.0, std::fabs(std::log(x))))) {
      fail("loss_log(" + std::to_string(x) + ")");
    }
  }
  if (loss_log(1.0) != 0 || loss_log(0.0) != -INFINITY || !std::isnan(loss_log(-1.0)) || loss_log(INFINITY) != INFINITY) {
    fail("loss_log edge values");
  }
  ok("math");
}

void test_softmax() {
  struct Shape {
    int rows, n, block;
  };
  for (Shape sh : {Shape{4, 9, 32}, Shape{37, 70, 64}, Shape{5, 1000, 96}, Shape{3, 4099, 256}}) {
    for (float scale : {1.0f, 1.0f / 0.7f}) {
      int rows = sh.rows, n = sh.n;
      std::vector<float> v = randn((size_t)rows * n, 3);
      v[std::min(n + 2, rows * n - 1)] = kNegInf;  // a masked value: probability 0
      v[0] = kNegInf;
      std::vector<float> x = v;
      sim::launch(dim3(rows), dim3(sh.block), 0, drafter_loss_softmax, x.data(), n, scale);
      std::vector<double> want((size_t)rows * n);
      std::vector<float> scaled(n);
      for (int r = 0; r < rows; r++) {
        for (int i = 0; i < n; i++) {
          scaled[i] = (float)((double)v[(size_t)r * n + i] * scale);
        }
        auto ls = log_softmax(scaled.data(), n);
        for (int i = 0; i < n; i++) {
          want[(size_t)r * n + i] = std::exp(ls[i]);
        }
      }
      if (x[std::min(n + 2, rows * n - 1)] != 0 || x[0] != 0) {
        fail("softmax of -Inf is not 0");
      }
      near("softmax " + std::to_string(rows) + "x" + std::to_string(n), x, want, 1e-6);
    }
  }
  ok("softmax");
}

int argmax_ref(const float* row, int n) {
  int best = 0;
  for (int i = 0; i < n; i++) {
    if (row[i] > row[best]) {
      best = i;
    }
  }
  return best;
}

void test_argmax() {
  struct Shape {
    int rows, n, block;
  };
  for (Shape sh : {Shape{40, 40, 32}, Shape{12, 333, 64}, Shape{11, 2000, 96}}) {
    int rows = sh.rows, n = sh.n;
    std::vector<float> v = randn((size_t)rows * n, 1);
    for (int r = 0; r < rows / 2; r++) {  // few distinct values: ties
      for (int i = 0; i < n; i++) {
        v[(size_t)r * n + i] = std::round(v[(size_t)r * n + i] * 2);
      }
    }
    v[(size_t)5 * n + 7] = v[(size_t)5 * n + n - 3] = 9;  // a tie: the lower column
    for (int i = 0; i < n; i++) {
      v[(size_t)6 * n + i] = kNegInf;  // every value -Inf: column 0
      v[(size_t)7 * n + i] = 0.25f;    // every value equal: column 0
    }
    v[(size_t)8 * n] = NAN;  // a NaN first: column 0, as the CPU's scan
    v[(size_t)9 * n + 3] = NAN;  // a NaN elsewhere is never chosen
    std::vector<int> idx(rows, -5);
    sim::launch(dim3(rows), dim3(sh.block), 0, drafter_loss_argmax, idx.data(), v.data(), n);
    for (int r = 0; r < rows; r++) {
      int want = argmax_ref(&v[(size_t)r * n], n);
      if (idx[r] != want) {
        fail("argmax row " + std::to_string(r) + ": " + std::to_string(idx[r]) + ", want " + std::to_string(want));
      }
    }
    if (idx[5] != 7) {
      fail("argmax tie");
    }
  }
  ok("argmax");
}

void test_gather_cols() {
  int rows = 45, n = 40;
  std::vector<float> src = randn((size_t)rows * n, 1);
  std::vector<int> cols = {39, 0, 7, 7, 12, 40, -1};
  int w = (int)cols.size();
  std::vector<float> out((size_t)rows * w, 123);
  // A grid smaller than the work: the grid-stride loop.
  sim::launch(dim3(2), dim3(64), 0, drafter_loss_gather_cols, out.data(), src.data(), cols.data(), rows, n, w);
  for (int r = 0; r < rows; r++) {
    for (int i = 0; i < w; i++) {
      float got = out[(size_t)r * w + i];
      int c = cols[i];
      if (c < 0 || c >= n) {
        if (!std::isnan(got)) {
          fail("gather_cols out of range is not NaN");
        }
      } else if (!same_bits(got, src[(size_t)r * n + c])) {
        fail("gather_cols row " + std::to_string(r) + " column " + std::to_string(i));
      }
    }
  }
  ok("gather_cols");
}

// ce_ref returns the weighted cross-entropy and its gradient in double.
double ce_ref(const std::vector<float>& x, int rows, int n, const std::vector<int>& t, const float* w,
              std::vector<double>& grad) {
  double loss = 0;
  grad.assign((size_t)rows * n, 0);
  for (int r = 0; r < rows; r++) {
    double wr = w ? w[r] : 1.0;
    if (wr == 0 || t[r] < 0) {
      continue;
    }
    auto ls = log_softmax(&x[(size_t)r * n], n);
    loss -= wr * ls[t[r]];
    for (int j = 0; j < n; j++) {
      grad[(size_t)r * n + j] = wr * std::exp(ls[j]);
    }
    grad[(size_t)r * n + t[r]] -= wr;
  }
  return loss;
}

double loss_sum(const std::vector<double>& rowLoss, int block) {
  double total = -9;
  sim::launch(dim3(1), dim3(block), 0, drafter_loss_sum, &total, rowLoss.data(), (int)rowLoss.size());
  return total;
}

void test_cross_entropy() {
  struct Case {
    int rows, n, block;
    bool weighted;
  };
  for (Case c : {Case{5, 11, 32, true}, Case{130, 300, 64, false}, Case{7, 1500, 96, true}}) {
    int rows = c.rows, n = c.n;
    std::vector<float> x = randn((size_t)rows * n, 2);
    x[3] = kNegInf;  // a masked logit
    std::vector<int> t(rows);
    std::vector<float> w(rows);
    for (int r = 0; r < rows; r++) {
      t[r] = std::max(randint(-5, n - 1), -1);
      w[r] = c.weighted ? (float)std::uniform_real_distribution<double>(0.1, 1)(rng) : 1.0f;
    }
    t[0] = 3 == n ? 0 : 4;
    if (rows > 2) {
      t[1] = -1;
      w[2] = c.weighted ? 0.0f : 1.0f;
    }
    const float* wp = c.weighted ? w.data() : nullptr;
    std::vector<double> wantGrad;
    double want = ce_ref(x, rows, n, t, wp, wantGrad);

    std::vector<float> d = randn((size_t)rows * n, 1);  // overwritten, skipped rows included
    std::vector<float> x0 = x;
    std::vector<double> rl(rows, -7);
    sim::launch(dim3(rows), dim3(c.block), 0, drafter_loss_ce, d.data(), (const float*)x.data(),
                (const int*)t.data(), wp, rl.data(), n);
    double got = loss_sum(rl, 128);
    std::string name = "cross_entropy " + std::to_string(rows) + "x" + std::to_string(n);
    close_to(name, got, want, 1e-6);
    near(name + " dlogits", d, wantGrad, 1e-6);
    for (size_t i = 0; i < x.size(); i++) {
      if (!same_bits(x[i], x0[i])) {
        fail(name + ": logits changed");
      }
    }
    for (int r = 0; r < rows; r++) {
      bool skipped = t[r] < 0 || (wp && w[r] == 0);
      if (skipped && rl[r] != 0) {
        fail(name + ": skipped row's loss");
      }
    }
    // Without a gradient: the same loss, bit for bit.
    std::vector<double> rl2(rows, -7);
    sim::launch(dim3(rows), dim3(c.block), 0, drafter_loss_ce, (float*)nullptr, (const float*)x.data(),
                (const int*)t.data(), wp, rl2.data(), n);
    if (!same_bits(loss_sum(rl2, 128), got)) {
      fail(name + ": loss without dlogits differs");
    }
    // In place: the same loss and gradient, bit for bit.
    std::vector<double> rl3(rows, -7);
    sim::launch(dim3(rows), dim3(c.block), 0, drafter_loss_ce, x.data(), (const float*)x.data(),
                (const int*)t.data(), wp, rl3.data(), n);
    if (!same_bits(loss_sum(rl3, 128), got)) {
      fail(name + ": loss in place differs");
    }
    for (size_t i = 0; i < x.size(); i++) {
      if (!same_bits(x[i], d[i])) {
        fail(name + ": gradient in place differs at " + std::to_string(i));
      }
    }
    // Repeated: the same bits (no atomics in the sums).
    std::vector<double> rl4(rows, -7);
    sim::launch(dim3(rows), dim3(c.block), 0, drafter_loss_ce, (float*)nullptr, (const float*)x0.data(),
                (const int*)t.data(), wp, rl4.data(), n);
    if (!same_bits(loss_sum(rl4, 128), got)) {
      fail(name + ": not deterministic");
    }
    ok(name);
  }
  // A target past the row: a NaN loss (the CPU panics), the gradient zero.
  {
    int n = 10;
    std::vector<float> x = randn(n, 1), d(n, 5);
    std::vector<int> t = {n};
    std::vector<double> rl(1);
    sim::launch(dim3(1), dim3(32), 0, drafter_loss_ce, d.data(), (const float*)x.data(), (const int*)t.data(),
                (const float*)nullptr, rl.data(), n);
    if (!std::isnan(rl[0]) || std::any_of(d.begin(), d.end(), [](float v) { return v != 0; })) {
      fail("cross_entropy target past the row");
    }
  }
  ok("cross_entropy bad target");
}

double soft_ref(const std::vector<float>& x, const std::vector<float>& p, int rows, int n, const float* w,
                std::vector<double>& grad) {
  double loss = 0;
  grad.assign((size_t)rows * n, 0);
  for (int r = 0; r < rows; r++) {
    double wr = w ? w[r] : 1.0;
    if (wr == 0) {
      continue;
    }
    auto ls = log_softmax(&x[(size_t)r * n], n);
    double psum = 0;
    for (int j = 0; j < n; j++) {
      double pj = p[(size_t)r * n + j];
      psum += pj;
      loss -= wr * pj * ls[j];
    }
    for (int j = 0; j < n; j++) {
      grad[(size_t)r * n + j] = wr * (std::exp(ls[j]) * psum - (double)p[(size_t)r * n + j]);
    }
  }
  return loss;
}

void test_soft_cross_entropy() {
  struct Case {
    int rows, n, block;
    bool weighted;
  };
  for (Case c : {Case{5, 11, 32, true}, Case{70, 90, 64, true}, Case{6, 1234, 96, false}}) {
    int rows = c.rows, n = c.n;
    std::vector<float> x = randn((size_t)rows * n, 2);
    std::vector<float> p((size_t)rows * n);
    std::uniform_real_distribution<float> u(0, 1);
    for (int r = 0; r < rows; r++) {
      float s = 0;
      for (int j = 0; j < n; j++) {
        p[(size_t)r * n + j] = u(rng);
        s += p[(size_t)r * n + j];
      }
      if (r != 2) {  // row 2's distribution does not sum to 1
        for (int j = 0; j < n; j++) {
          p[(size_t)r * n + j] /= s;
        }
      }
    }
    p[n + 4] = 0;
    std::vector<float> w(rows);
    for (auto& wr : w) {
      wr = u(rng);
    }
    w[3] = 0;
    const float* wp = c.weighted ? w.data() : nullptr;
    std::vector<double> wantGrad;
    double want = soft_ref(x, p, rows, n, wp, wantGrad);
    std::vector<float> d = randn((size_t)rows * n, 1);
    std::vector<float> x0 = x;
    std::vector<double> rl(rows, -7);
    sim::launch(dim3(rows), dim3(c.block), 0, drafter_loss_soft_ce, d.data(), (const float*)x.data(),
                (const float*)p.data(), wp, rl.data(), n);
    double got = loss_sum(rl, 64);
    std::string name = "soft_cross_entropy " + std::to_string(rows) + "x" + std::to_string(n);
    close_to(name, got, want, 1e-6);
    near(name + " dlogits", d, wantGrad, 1e-6);
    std::vector<double> rl2(rows, -7);
    sim::launch(dim3(rows), dim3(c.block), 0, drafter_loss_soft_ce, (float*)nullptr, (const float*)x.data(),
                (const float*)p.data(), wp, rl2.data(), n);
    if (!same_bits(loss_sum(rl2, 64), got)) {
      fail(name + ": loss without dlogits differs");
    }
    std::vector<double> rl3(rows, -7);
    sim::launch(dim3(rows), dim3(c.block), 0, drafter_loss_soft_ce, x.data(), (const float*)x.data(),
                (const float*)p.data(), wp, rl3.data(), n);
    if (!same_bits(loss_sum(rl3, 64), got)) {
      fail(name + ": loss in place differs");
    }
    for (size_t i = 0; i < x.size(); i++) {
      if (!same_bits(x[i], d[i])) {
        fail(name + ": gradient in place differs");
      }
    }
    (void)x0;
    ok(name);
  }
}

void test_loss_sum() {
  // Many rows: every thread sums several; the same bits twice, close to
  // the exact sum.
  for (int rows : {1, 31, 1000, 5003}) {
    std::vector<double> v(rows);
    double want = 0;
    for (auto& x : v) {
      x = std::uniform_real_distribution<double>(0, 10)(rng);
      want += x;
    }
    double a = loss_sum(v, 256), b = loss_sum(v, 256);
    if (!same_bits(a, b)) {
      fail("loss_sum not deterministic");
    }
    close_to("loss_sum", a, want, 1e-13);
  }
  ok("loss_sum");
}

void test_cross_entropy_eval() {
  struct Case {
    int rows, n, block;
  };
  for (Case c : {Case{40, 13, 32}, Case{60, 64, 64}, Case{8, 2100, 96}}) {
    int rows = c.rows, n = c.n;
    std::vector<float> x = randn((size_t)rows * n, 2);
    for (size_t i = 0; i < x.size() / 2; i++) {  // a few values each: many ties
      x[i] = std::round(x[i]);
    }
    for (int j = 0; j < n; j++) {
      x[(size_t)5 * n + j] = 0.5f;  // a row of ties
    }
    x[(size_t)6 * n + 1] = kNegInf;
    std::vector<int> t(rows);
    for (auto& tr : t) {
      tr = randint(0, n - 1);
    }
    t[7] = -1;
    t[6] = 1;  // a -Inf target: loss +Inf, ranked last
    std::vector<float> x0 = x;
    std::vector<double> loss(rows, -3);
    std::vector<int> rank(rows, -3);
    sim::launch(dim3(rows), dim3(c.block), 0, drafter_loss_ce_eval, loss.data(), rank.data(),
                (const float*)x.data(), (const int*)t.data(), n);
    for (size_t i = 0; i < x.size(); i++) {
      if (!same_bits(x[i], x0[i])) {
        fail("cross_entropy_eval changed the logits");
      }
    }
    for (int r = 0; r < rows; r++) {
      if (t[r] < 0) {
        if (loss[r] != 0 || rank[r] != -1) {
          fail("cross_entropy_eval row without target");
        }
        continue;
      }
      const float* row = &x[(size_t)r * n];
      int above = 0;
      for (int j = 0; j < n; j++) {
        above += row[j] > row[t[r]];
      }
      double want = -log_softmax(row, n)[t[r]];
      if (std::isinf(want)) {
        if (loss[r] != want) {
          fail("cross_entropy_eval -Inf target's loss");
        }
      } else {
        close_to("cross_entropy_eval loss row " + std::to_string(r), loss[r], want, 1e-6);
      }
      if (rank[r] != above) {
        fail("cross_entropy_eval rank row " + std::to_string(r));
      }
    }
    if (rank[5] != 0 || rank[6] != n - 1) {
      fail("cross_entropy_eval tied / last ranks");
    }
    ok("cross_entropy_eval " + std::to_string(rows) + "x" + std::to_string(n));
  }
}

// topk_ref is a stable sort, larger first (NaN after every number), then the
// first k: ties to the lower index.
std::vector<int> topk_ref(const std::vector<float>& v, int k) {
  std::vector<int> idx(v.size());
  std::iota(idx.begin(), idx.end(), 0);
  std::stable_sort(idx.begin(), idx.end(), [&](int a, int b) {
    float x = v[a], y = v[b];
    if (std::isnan(y)) {
      return !std::isnan(x);
    }
    return !std::isnan(x) && x > y;
  });
  idx.resize(std::min<size_t>(k, v.size()));
  return idx;
}

int pow2(int k) {
  int p = 1;
  while (p < k) {
    p <<= 1;
  }
  return p;
}

// topk_run runs the kernel as the device does (TopK in loss.go), with cap
// shared slots (default: the device's choice, up to 4096; a small cap forces
// the radix-select path).
std::vector<int> topk_run(const std::vector<float>& v, int k, int block, int cap = 0) {
  int n = (int)v.size();
  k = std::min(k, n);
  int p2 = pow2(k);
  if (cap == 0) {
    cap = std::min(4096, pow2(n));
  }
  std::vector<unsigned long long> cand(p2, 0xdeadbeefULL);
  std::vector<int> out(k, -9);
  sim::launch(dim3(1), dim3(block), 8 * (size_t)cap, drafter_loss_topk, out.data(), cand.data(), v.data(), n, k, p2,
              cap);
  return out;
}

void test_topk() {
  std::vector<float> x = {0.5f, 2, -1, 2, 0.5f, 3};
  struct Want {
    int k;
    std::vector<int> idx;
  };
  for (const Want& w : {Want{1, {5}}, Want{3, {5, 1, 3}}, Want{5, {5, 1, 3, 0, 4}}, Want{6, {5, 1, 3, 0, 4, 2}}}) {
    if (topk_run(x, w.k, 32) != w.idx) {
      fail("topk of the small row, k " + std::to_string(w.k));
    }
  }
  const int trials = kTSan ? 24 : 60, wide = trials - trials / 6;
  for (int trial = 0; trial < trials; trial++) {
    int n = trial < wide ? randint(1, 3000) : randint(20000, 70000);
    std::vector<float> v = randn(n, 1);
    if (trial % 2 == 0) {  // few distinct values: many ties
      for (auto& y : v) {
        y = std::round(y * 2);
      }
    }
    if (trial % 3 == 0) {  // signed zeros tie; -Inf; NaN last
      v[randint(0, n - 1)] = -0.0f;
      v[randint(0, n - 1)] = 0.0f;
      v[randint(0, n - 1)] = kNegInf;
      if (trial % 6 == 0) {
        v[randint(0, n - 1)] = NAN;
      }
    }
    int block = trial % 4 == 0 ? 32 : trial % 4 == 1 ? 96 : trial % 4 == 2 ? 128 : 256;
    for (int k : {1, 2, 7, 100, 333, n, n + 3}) {
      if (k > n + 3 || (trial >= wide && k > 400)) {
        continue;
      }
      std::vector<int> want = topk_ref(v, k);
      // The device's shared slots, and few enough that the radix select
      // runs, sorting in shared memory (p2 <= cap) or in cand.
      for (int cap : {0, 512, 16}) {
        if (topk_run(v, k, block, cap) != want) {
          fail("topk " + std::to_string(k) + " of " + std::to_string(n) + " (trial " + std::to_string(trial) +
               ", cap " + std::to_string(cap) + ")");
        }
      }
    }
  }
  // Every value equal: the first k columns; a vocabulary-sized row.
  {
    std::vector<float> v(262144, 1.5f);
    std::vector<int> want(300);
    std::iota(want.begin(), want.end(), 0);
    if (topk_run(v, 300, 256) != want) {
      fail("topk of equal values");
    }
    v = randn(262144, 4);
    if (topk_run(v, 250, 256) != topk_ref(v, 250) || (!kTSan && topk_run(v, 1000, 1024) != topk_ref(v, 1000))) {
      fail("topk of a vocabulary-sized row");
    }
    // k beyond the block (no T0 filter), sorted in shared memory and in
    // cand; a -Inf mask over most of the row (every value >= T0).
    v = randn(70000, 1);
    if (topk_run(v, 2000, 256) != topk_ref(v, 2000) || topk_run(v, 5000, 256) != topk_ref(v, 5000)) {
      fail("topk of more values than threads");
    }
    for (size_t i = 0; i < v.size(); i++) {
      if (i % 1000 != 3) {
        v[i] = kNegInf;
      }
    }
    if (topk_run(v, 100, 256) != topk_ref(v, 100)) {
      fail("topk of a masked row");
    }
  }
  ok("topk");
}

}  // namespace

// LK is tensor.LK: the forms' weights and Hybrid's η.
struct LK {
  double kl, tv, nla, hyb, eta;
};

// lk_row_ref returns one row's LK loss and α in double (p any non-negative
// values), writing dL/dz into grad; λ = exp(-η·α) with α detached.
double lk_row_ref(const float* x, const double* p, int n, LK l, double* alpha, double* grad) {
  std::vector<double> ls = log_softmax(x, n), q(n), s(n);
  double a = 0, kl = 0, psum = 0, S = 0;
  for (int j = 0; j < n; j++) {
    q[j] = std::exp(ls[j]);
    a += std::min(p[j], q[j]);
    psum += p[j];
    if (p[j] > 0) {
      kl += p[j] * (std::log(p[j]) - ls[j]);
    }
  }
  for (int j = 0; j < n; j++) {
    s[j] = q[j] < p[j] ? 1.0 : (q[j] > p[j] ? 0.0 : 0.5);
    S += q[j] * s[j];
  }
  double lam = std::exp(-l.eta * a), tv = 1 - a, loss = 0, cK = 0, cT = 0;
  if (l.kl != 0) {
    loss += l.kl * kl;
    cK += l.kl;
  }
  if (l.tv != 0) {
    loss += l.tv * tv;
    cT += l.tv;
  }
  if (l.nla != 0) {
    loss -= l.nla * std::log(std::max(a, 1e-5));
    if (a >= 1e-5) {
      cT += l.nla / a;
    }
  }
  if (l.hyb != 0) {
    loss += l.hyb * (lam * kl + (1 - lam) * tv);
    cK += l.hyb * lam;
    cT += l.hyb * (1 - lam);
  }
  for (int j = 0; j < n; j++) {
    grad[j] = cK * (q[j] * psum - p[j]) + cT * q[j] * (S - s[j]);
  }
  *alpha = a;
  return loss;
}

// test_lk checks drafter_loss_lk against lk_row_ref for every form, with
// distributions (one not summing to 1, zeros, a masked logit where p is 0)
// and with one-hot targets (negative ones skipped, a row whose α is below
// NLA's floor), and the loss's bits the same without a gradient, in place
// and repeated.
void test_lk() {
  const LK forms[] = {{1, 0, 0, 0, 0}, {0, 1, 0, 0, 0}, {0, 0, 1, 0, 0}, {0, 0, 0, 1, 3}, {0.1, 0.9, 0.3, 0.5, 1.5}};
  struct Case {
    int rows, n, block;
    bool weighted, hard;
  };
  int nc = 0;
  for (Case c : {Case{6, 11, 32, true, false}, Case{40, 90, 64, true, false}, Case{5, 1234, 96, false, false},
                 Case{7, 13, 32, true, true}, Case{30, 300, 64, false, true}}) {
    if (kTSan && c.rows > 10) {
      c.rows = 10;
    }
    int rows = c.rows, n = c.n;
    std::vector<float> x = randn((size_t)rows * n, 2);
    std::vector<float> p((size_t)rows * n);
    std::vector<int> t(rows);
    std::uniform_real_distribution<float> u(0, 1);
    for (int r = 0; r < rows; r++) {
      float sum = 0;
      for (int j = 0; j < n; j++) {
        p[(size_t)r * n + j] = u(rng);
        sum += p[(size_t)r * n + j];
      }
      float total = r == 2 ? 0.7f : 1.0f;  // row 2: a draft vocabulary's share
      for (int j = 0; j < n; j++) {
        p[(size_t)r * n + j] *= total / sum;
      }
      t[r] = std::max(randint(-3, n - 1), -1);
    }
    p[n + 4] = 0;
    x[n + 4] = kNegInf;  // masked where p is 0
    t[0] = 5;
    t[1] = -1;
    t[2] = 6;
    x[2 * n + 6] = -40;  // α = q_t below NLA's floor
    std::vector<float> w(rows);
    for (auto& wr : w) {
      wr = 0.2f + u(rng);
    }
    w[3] = 0;
    const float* wp = c.weighted ? w.data() : nullptr;
    const float* pp = c.hard ? nullptr : p.data();
    std::vector<double> prow(n), grow(n);
    for (const LK& l : forms) {
      double want = 0, wantAlpha = 0;
      std::vector<double> wantGrad((size_t)rows * n, 0);
      std::vector<double> scale((size_t)rows * n, 1);
      for (int r = 0; r < rows; r++) {
        double wr = wp ? wp[r] : 1.0;
        if (wr == 0 || (c.hard && t[r] < 0)) {
          continue;
        }
        for (int j = 0; j < n; j++) {
          prow[j] = c.hard ? (j == t[r] ? 1.0 : 0.0) : (double)p[(size_t)r * n + j];
        }
        double a;
        want += wr * lk_row_ref(&x[(size_t)r * n], prow.data(), n, l, &a, grow.data());
        wantAlpha += wr * a;
        // NLA's gradient is TV's over α, and so is its rounding.
        double sc = std::max(1.0, wr * (l.kl + l.tv + l.hyb + l.nla / std::max(a, 1e-5)));
        for (int j = 0; j < n; j++) {
          wantGrad[(size_t)r * n + j] = wr * grow[j];
          scale[(size_t)r * n + j] = sc;
        }
      }
      std::vector<float> d = randn((size_t)rows * n, 1);
      std::vector<float> x0 = x;
      std::vector<double> rl(rows, -7), ra(rows, -7);
      sim::launch(dim3(rows), dim3(c.block), 0, drafter_loss_lk, d.data(), (const float*)x.data(), pp,
                  (const int*)t.data(), wp, rl.data(), ra.data(), n, l.kl, l.tv, l.nla, l.hyb, l.eta);
      double got = loss_sum(rl, 64), gotAlpha = loss_sum(ra, 64);
      std::string name = std::string(c.hard ? "lk hard " : "lk ") + std::to_string(rows) + "x" + std::to_string(n) +
                         " form " + std::to_string(nc++ % 5);
      close_to(name, got, want, 1e-6);
      close_to(name + " alpha", gotAlpha, wantAlpha, 1e-6);
      for (size_t i = 0; i < wantGrad.size(); i++) {
        double diff = std::fabs((double)d[i] - wantGrad[i]);
        if (!(diff <= 1e-6 * scale[i])) {
          fail(name + " dlogits: value " + std::to_string(i) + " is " + std::to_string(d[i]) + ", want " +
               std::to_string(wantGrad[i]));
        }
      }
      for (size_t i = 0; i < x.size(); i++) {
        if (!same_bits(x[i], x0[i])) {
          fail(name + ": logits changed");
        }
      }
      for (int r = 0; r < rows; r++) {
        bool skipped = (wp && w[r] == 0) || (c.hard && t[r] < 0);
        if (skipped && (rl[r] != 0 || ra[r] != 0)) {
          fail(name + ": skipped row's loss");
        }
      }
      // Without a gradient, and in place: the same bits.
      std::vector<double> rl2(rows, -7), ra2(rows, -7);
      sim::launch(dim3(rows), dim3(c.block), 0, drafter_loss_lk, (float*)nullptr, (const float*)x.data(), pp,
                  (const int*)t.data(), wp, rl2.data(), ra2.data(), n, l.kl, l.tv, l.nla, l.hyb, l.eta);
      if (!same_bits(loss_sum(rl2, 64), got) || !same_bits(loss_sum(ra2, 64), gotAlpha)) {
        fail(name + ": loss without dlogits differs");
      }
      std::vector<float> xi = x;
      sim::launch(dim3(rows), dim3(c.block), 0, drafter_loss_lk, xi.data(), (const float*)xi.data(), pp,
                  (const int*)t.data(), wp, rl2.data(), ra2.data(), n, l.kl, l.tv, l.nla, l.hyb, l.eta);
      if (!same_bits(loss_sum(rl2, 64), got) || !same_bits(loss_sum(ra2, 64), gotAlpha)) {
        fail(name + ": loss in place differs");
      }
      for (size_t i = 0; i < x.size(); i++) {
        if (!same_bits(xi[i], d[i])) {
          fail(name + ": gradient in place differs at " + std::to_string(i));
        }
      }
      ok(name);
    }
  }
  // A target past the row: a NaN loss (the CPU panics), the gradient zero.
  {
    int n = 10;
    std::vector<float> x = randn(n, 1), d(n, 5);
    std::vector<int> t = {n};
    std::vector<double> rl(1), ra(1, -7);
    sim::launch(dim3(1), dim3(32), 0, drafter_loss_lk, d.data(), (const float*)x.data(), (const float*)nullptr,
                (const int*)t.data(), (const float*)nullptr, rl.data(), ra.data(), n, 0.0, 0.0, 0.0, 1.0, 3.0);
    if (!std::isnan(rl[0]) || ra[0] != 0 || std::any_of(d.begin(), d.end(), [](float v) { return v != 0; })) {
      fail("lk target past the row");
    }
  }
  ok("lk bad target");
}

int main() {
  test_math();
  test_softmax();
  test_argmax();
  test_gather_cols();
  test_loss_sum();
  test_cross_entropy();
  test_soft_cross_entropy();
  test_lk();
  test_cross_entropy_eval();
  test_topk();
  std::printf("ok all\n");
  return 0;
}
