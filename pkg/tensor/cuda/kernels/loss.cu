#include "compat.h"
#include "cpuexp.h"

// Losses and selection: Softmax, ArgMax, GatherCols, CrossEntropy,
// SoftCrossEntropy, the LK losses, CrossEntropyEval and TopK
// (pkg/tensor/cpu/cpu_loss.go and cpu_lk.go are the references every kernel
// here follows).
//
// The row kernels run one block per row, blockDim.x any multiple of 32 up to
// 1024 (the caller picks it from the row's width only). Each thread walks
// the columns tid, tid+B, tid+2B, ... in order and the block's partial
// results are combined by a fixed butterfly within warps and a fixed order
// over the warps, so a row's float64 sums, and with them the losses, are
// the same bits on every run with the same inputs and block size: no
// atomics touch a floating-point value anywhere in this file.

// The CPU's cut-off below which an exponential is 0 (kernel.Expf): the
// arguments here are shifted by the row's maximum, so only underflow and
// -Inf (or NaN) reach it.
#define LOSS_EXP_MIN (-87.33654f)

// loss_exp_shift is ExpShift's value for one element: e^(v) of an argument
// already shifted by the row's maximum, 0 below the cut-off or for NaN.
static __device__ __forceinline__ float loss_exp_shift(float v) {
  return v > LOSS_EXP_MIN ? cpu_expf(v) : 0.0f;
}

// loss_log is the natural logarithm in float64 (compat.h has only logf,
// and a loss's log-sum-exp must be as exact as the CPU's math.Log): x =
// m·2^e with m in [√½, √2), log m = 2·atanh(s) with s = (m-1)/(m+1),
// |s| < 0.1716, by its series to s^23 (the next term is below 2^-56 of the
// sum), and e·ln 2 added in two parts. Within a few ulp of math.Log.
static __device__ double loss_log(double x) {
  if (!(x > 0.0)) {
    return x == 0.0 ? -(double)INFINITY : (x - x) / (x - x);  // -Inf, or NaN for x < 0 and NaN
  }
  if (x == (double)INFINITY) {
    return x;
  }
  unsigned long long b;
  __builtin_memcpy(&b, &x, 8);
  int e = (int)((b >> 52) & 0x7ff);
  if (e == 0) {  // subnormal: normalise by 2^54 first
    x *= 18014398509481984.0;
    __builtin_memcpy(&b, &x, 8);
    e = (int)((b >> 52) & 0x7ff) - 54;
  }
  e -= 1023;
  b = (b & 0x000fffffffffffffULL) | 0x3ff0000000000000ULL;
  double m;
  __builtin_memcpy(&m, &b, 8);
  if (m > 1.4142135623730951) {
    m *= 0.5;
    e++;
  }
  double s = (m - 1.0) / (m + 1.0);
  double s2 = s * s;
  double p = 1.0 / 23;
  p = p * s2 + 1.0 / 21;
  p = p * s2 + 1.0 / 19;
  p = p * s2 + 1.0 / 17;
  p = p * s2 + 1.0 / 15;
  p = p * s2 + 1.0 / 13;
  p = p * s2 + 1.0 / 11;
  p = p * s2 + 1.0 / 9;
  p = p * s2 + 1.0 / 7;
  p = p * s2 + 1.0 / 5;
  p = p * s2 + 1.0 / 3;
  // log m = 2s + 2s·s²·p: the small correction added last keeps 2s exact.
  double lm = 2.0 * s + 2.0 * s * s2 * p;
  const double ln2hi = 6.93147180369123816490e-01;  // ln 2's upper 32 bits: e·ln2hi is exact
  const double ln2lo = 1.90821492927058770002e-10;
  return (double)e * ln2hi + (lm + (double)e * ln2lo);
}

// loss_shfl_f64 is __shfl_xor_sync for a double, as two 32-bit halves
// (compat.h's shuffles move 32-bit values).
static __device__ __forceinline__ double loss_shfl_f64(double v, int mask) {
  unsigned long long b;
  __builtin_memcpy(&b, &v, 8);
  int lo = (int)(unsigned int)b, hi = (int)(unsigned int)(b >> 32);
  lo = __shfl_xor_sync(0xffffffff, lo, mask);
  hi = __shfl_xor_sync(0xffffffff, hi, mask);
  b = (unsigned long long)(unsigned int)lo | ((unsigned long long)(unsigned int)hi << 32);
  __builtin_memcpy(&v, &b, 8);
  return v;
}

// Block reductions. Every thread of the block calls them (they hold
// barriers) with a 32-slot shared array that no other reduction in flight
// uses; every thread gets the result. A butterfly within each warp gives
// all its lanes the same bits (a+b is b+a), then warp 0 combines the warps'
// values in the same butterfly, so the order is a function of the block
// size only. The trailing barrier lets the caller reuse the slots at once.

// loss_shfl is the warp butterfly's exchange for each reduced type.
static __device__ __forceinline__ double loss_shfl(double v, int o) { return loss_shfl_f64(v, o); }
static __device__ __forceinline__ float loss_shfl(float v, int o) { return __shfl_xor_sync(0xffffffff, v, o); }
static __device__ __forceinline__ int loss_shfl(int v, int o) { return __shfl_xor_sync(0xffffffff, v, o); }

// LossAdd and LossMax are the reductions' combining functions.
struct LossAdd {
  template <typename T>
  __device__ __forceinline__ T operator()(T a, T b) const { return a + b; }
};
struct LossMax {
  __device__ __forceinline__ float operator()(float a, float b) const { return fmaxf(a, b); }
};

// loss_block_reduce combines every thread's v with op (identity fills the
// slots of missing warps), as the comment above says.
template <typename T, typename Op>
static __device__ __forceinline__ T loss_block_reduce(T v, T* sh, T identity, Op op) {
  for (int o = 16; o > 0; o >>= 1) {
    v = op(v, loss_shfl(v, o));
  }
  int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, nw = blockDim.x >> 5;
  if (lane == 0) {
    sh[warp] = v;
  }
  __syncthreads();
  if (warp == 0) {
    v = lane < nw ? sh[lane] : identity;
    for (int o = 16; o > 0; o >>= 1) {
      v = op(v, loss_shfl(v, o));
    }
    if (lane == 0) {
      sh[0] = v;
    }
  }
  __syncthreads();
  v = sh[0];
  __syncthreads();
  return v;
}

static __device__ __forceinline__ double loss_block_sum(double v, double* sh) {
  return loss_block_reduce(v, sh, 0.0, LossAdd());
}

// loss_block_max is the block's largest value (NaN ignored, as fmaxf does;
// -INFINITY for an empty block).
static __device__ __forceinline__ float loss_block_max(float v, float* sh) {
  return loss_block_reduce(v, sh, -INFINITY, LossMax());
}

static __device__ __forceinline__ int loss_block_sum_i32(int v, int* sh) {
  return loss_block_reduce(v, sh, 0, LossAdd());
}

// loss_row_max is the largest value of row[0..n) over the block.
static __device__ __forceinline__ float loss_row_max(const float* row, int n, float* sh) {
  float m = -INFINITY;
  for (int i = threadIdx.x; i < n; i += blockDim.x) {
    m = fmaxf(m, row[i]);
  }
  return loss_block_max(m, sh);
}

// loss_exp_sum returns Σ e^(row[i]-mx) in float64 (the exponentials
// float32, ExpShift's), storing the exponentials in e when it is not null.
// e may be row itself: each thread reads and writes only its own columns.
static __device__ __forceinline__ double loss_exp_sum(const float* row, float* e, int n, float mx, double* sh) {
  double s = 0.0;
  for (int i = threadIdx.x; i < n; i += blockDim.x) {
    float y = loss_exp_shift(row[i] - mx);
    if (e) {
      e[i] = y;
    }
    s += (double)y;
  }
  return loss_block_sum(s, sh);
}

// drafter_loss_softmax replaces each row of x [rows, n] with softmax(x·scale):
// the float32 exponentials of (x - max)·scale over their float64 sum, the
// row scaled by the sum's float32 inverse (the CPU's steps). Grid: one
// block per row.
extern "C" __global__ void drafter_loss_softmax(float* x, int n, float scale) {
  __shared__ float shf[32];
  __shared__ double shd[32];
  float* row = x + (long long)blockIdx.x * n;
  float mx = loss_row_max(row, n, shf);
  double s = 0.0;
  for (int i = threadIdx.x; i < n; i += blockDim.x) {
    float y = loss_exp_shift((row[i] - mx) * scale);
    row[i] = y;
    s += (double)y;
  }
  s = loss_block_sum(s, shd);
  float inv = (float)(1.0 / s);
  for (int i = threadIdx.x; i < n; i += blockDim.x) {
    row[i] *= inv;
  }
}

// drafter_loss_argmax writes into idx[r] the column of row r's first largest
// value: each thread keeps its own first maximum, and the block keeps the
// larger value, or of equal ones the lower column. NaN values are never
// chosen, but a row starting with NaN gives 0, as the CPU's scan (nothing
// compares greater than its NaN start) does. Grid: one block per row.
extern "C" __global__ void drafter_loss_argmax(int* idx, const float* x, int n) {
  __shared__ float shv[32];
  __shared__ int shi[32];
  const float* row = x + (long long)blockIdx.x * n;
  float bv = -INFINITY;
  int bi = 0x7fffffff;
  for (int i = threadIdx.x; i < n; i += blockDim.x) {
    float v = row[i];
    if (v > bv || (v == bv && bi == 0x7fffffff)) {
      bv = v;
      bi = i;
    }
  }
  for (int o = 16; o > 0; o >>= 1) {
    float ov = __shfl_xor_sync(0xffffffff, bv, o);
    int oi = __shfl_xor_sync(0xffffffff, bi, o);
    if (ov > bv || (ov == bv && oi < bi)) {
      bv = ov;
      bi = oi;
    }
  }
  int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, nw = blockDim.x >> 5;
  if (lane == 0) {
    shv[warp] = bv;
    shi[warp] = bi;
  }
  __syncthreads();
  if (warp == 0) {
    bv = lane < nw ? shv[lane] : -INFINITY;
    bi = lane < nw ? shi[lane] : 0x7fffffff;
    for (int o = 16; o > 0; o >>= 1) {
      float ov = __shfl_xor_sync(0xffffffff, bv, o);
      int oi = __shfl_xor_sync(0xffffffff, bi, o);
      if (ov > bv || (ov == bv && oi < bi)) {
        bv = ov;
        bi = oi;
      }
    }
    if (lane == 0) {
      float first = n > 0 ? row[0] : 0.0f;
      idx[blockIdx.x] = (bi == 0x7fffffff || first != first) ? 0 : bi;
    }
  }
}

// drafter_loss_gather_cols writes out[r, i] = src[r, cols[i]] for out [rows, w]
// and src [rows, n], one thread per output value over a grid-stride loop.
// A column outside src (the CPU panics on it; a kernel cannot) gives NaN
// rather than a read outside the row.
extern "C" __global__ void drafter_loss_gather_cols(float* out, const float* src, const int* cols, int rows, int n, int w) {
  long long total = (long long)rows * w;
  long long stride = (long long)gridDim.x * blockDim.x;
  for (long long j = (long long)blockIdx.x * blockDim.x + threadIdx.x; j < total; j += stride) {
    long long r = j / w;
    int i = (int)(j - r * w);
    int c = cols[i];
    out[j] = (c >= 0 && c < n) ? src[r * n + c] : __builtin_nanf("");
  }
}

// loss_skip_row zeroes row r of dlogits (when wanted) and its loss: a row
// the loss leaves out.
static __device__ __forceinline__ void loss_skip_row(float* d, double* rowLoss, int n) {
  if (d) {
    float* dr = d + (long long)blockIdx.x * n;
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
      dr[i] = 0.0f;
    }
  }
  if (threadIdx.x == 0) {
    rowLoss[blockIdx.x] = 0.0;
  }
}

// drafter_loss_ce computes row r's weighted loss w·(log Σ e^(x-max)
// - (x_t - max)) into rowLoss[r] (float64) and, when d is not null, the
// gradient w·(softmax - onehot(t)) into d's row: the exponentials stored
// there, then scaled by w/sum (the CPU's steps). d may be x: the target's
// logit is read before the first barrier, and each thread rewrites only
// the columns it read. A row of zero weight or negative target gets loss 0
// and a zero gradient; a target past the row (the CPU panics) a NaN loss.
// weights may be null (every weight 1). Grid: one block per row; the rows'
// losses are summed by drafter_loss_sum.
extern "C" __global__ void drafter_loss_ce(float* d, const float* x, const int* targets, const float* weights,
                                                 double* rowLoss, int n) {
  __shared__ float shf[32];
  __shared__ double shd[32];
  int r = blockIdx.x;
  float w = weights ? weights[r] : 1.0f;
  int t = targets[r];
  if (w == 0.0f || t < 0) {
    loss_skip_row(d, rowLoss, n);
    return;
  }
  if (t >= n) {
    loss_skip_row(d, rowLoss, n);
    if (threadIdx.x == 0) {
      rowLoss[r] = __builtin_nan("");
    }
    return;
  }
  const float* row = x + (long long)r * n;
  float* dr = d ? d + (long long)r * n : 0;
  float xt = row[t];  // before any thread's exponentials may overwrite it
  float mx = loss_row_max(row, n, shf);
  double sum = loss_exp_sum(row, dr, n, mx, shd);
  if (threadIdx.x == 0) {
    rowLoss[r] = (double)w * (loss_log(sum) - (double)(xt - mx));
  }
  if (dr) {
    float scale = (float)((double)w / sum);
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
      float g = dr[i] * scale;
      if (i == t) {
        g -= w;
      }
      dr[i] = g;
    }
  }
}

// drafter_loss_soft_ce computes row r's weighted loss
// w·(Σp·logZ - Σp·x) with logZ = log Σ e^(x-max) + max into rowLoss[r] and,
// when d is not null, the gradient w·(softmax·Σp - p) into d's row. Σp and
// Σp·x (float64) are taken with the maximum in a first pass, before the
// exponentials may overwrite the logits (d may be x). A row of zero weight
// gets loss 0 and a zero gradient; weights may be null. Grid: one block
// per row.
extern "C" __global__ void drafter_loss_soft_ce(float* d, const float* x, const float* p, const float* weights,
                                                      double* rowLoss, int n) {
  __shared__ float shf[32];
  __shared__ double shd[32];
  int r = blockIdx.x;
  float w = weights ? weights[r] : 1.0f;
  if (w == 0.0f) {
    loss_skip_row(d, rowLoss, n);
    return;
  }
  const float* row = x + (long long)r * n;
  const float* pr = p + (long long)r * n;
  float* dr = d ? d + (long long)r * n : 0;
  double ps = 0.0, px = 0.0;
  float m = -INFINITY;
  for (int i = threadIdx.x; i < n; i += blockDim.x) {
    float xi = row[i];
    double pj = (double)pr[i];
    ps += pj;
    px += pj * (double)xi;
    m = fmaxf(m, xi);
  }
  float mx = loss_block_max(m, shf);
  double psum = loss_block_sum(ps, shd);
  double pxs = loss_block_sum(px, shd);
  double sum = loss_exp_sum(row, dr, n, mx, shd);
  if (threadIdx.x == 0) {
    double logZ = loss_log(sum) + (double)mx;
    rowLoss[r] = (double)w * (psum * logZ - pxs);
  }
  if (dr) {
    float scale = (float)((double)w * psum / sum);
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
      dr[i] = dr[i] * scale - w * pr[i];
    }
  }
}

// lk_share is TV's gradient share s_j of a column (dα/dq_j): 1 where q < p,
// 0 where q > p, and half on a tie (tensor.LKTie, torch.minimum's
// subgradient).
static __device__ __forceinline__ double lk_share(double p, double q) {
  return q < p ? 1.0 : (q > p ? 0.0 : 0.5);
}

// LK_EPSILON is NLA's floor on α (tensor.LKEpsilon).
#define LK_EPSILON 1e-5

// drafter_loss_lk computes row r's weighted LK loss (tensor.LK: the weights
// wkl, wtv, wnla and whyb of KL, TV, NLA and Hybrid, Hybrid's eta) into
// rowLoss[r] and its weighted α = Σ min(p, q) into rowAlpha[r] (float64),
// and, when d is not null, the gradient into d's row, as the CPU's lkRow:
// with q = e/Σe (ExpShift's float32 exponentials, stored in d's row) and
// the TV share s_j (lk_share), S = Σ q·s, the gradient is
// w·(cK·(q·Σp - p) + cT·q·(S - s)), where cK weighs KL and cT -α (NLA's
// 1/α while α >= LK_EPSILON), and λ = exp(-eta·α) is the float32
// exponential of a detached α. p is the rows' target distributions, or
// null for one-hot targets (targets[r], a negative one skipping the row; a
// target past the row gives a NaN loss, as drafter_loss_ce). The first pass
// reads the logits (Σp, Σp·log p, Σp·x and the maximum) before the
// exponentials may overwrite them (d may be x; each thread rewrites only
// the columns it read). A row of zero weight gets loss and α 0 and a zero
// gradient; weights may be null. Grid: one block per row; each of
// rowLoss and rowAlpha is summed by drafter_loss_sum.
extern "C" __global__ void drafter_loss_lk(float* d, const float* x, const float* p, const int* targets,
                                           const float* weights, double* rowLoss, double* rowAlpha, int n, double wkl,
                                           double wtv, double wnla, double whyb, double eta) {
  __shared__ float shf[32];
  __shared__ double shd[32];
  int r = blockIdx.x;
  float w = weights ? weights[r] : 1.0f;
  int t = p ? -1 : targets[r];
  if (w == 0.0f || (!p && t < 0) || (!p && t >= n)) {
    loss_skip_row(d, rowLoss, n);
    if (threadIdx.x == 0) {
      rowAlpha[r] = 0.0;
      if (!p && t >= n) {
        rowLoss[r] = __builtin_nan("");
      }
    }
    return;
  }
  const float* row = x + (long long)r * n;
  const float* pr = p ? p + (long long)r * n : 0;
  float* dr = d ? d + (long long)r * n : 0;
  double ps = 0.0, plp = 0.0, px = 0.0;
  float m = -INFINITY;
  if (pr) {
    // Σp·log p is KL's constant, which only the loss's value needs: TV and
    // NLA skip its logarithms.
    bool needKL = wkl != 0.0 || whyb != 0.0;
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
      float xi = row[i];
      double pj = (double)pr[i];
      if (pj != 0.0) {  // leaves out a masked (-Inf) logit's 0·-Inf
        ps += pj;
        px += pj * (double)xi;
        if (needKL) {
          plp += pj * loss_log(pj);
        }
      }
      m = fmaxf(m, xi);
    }
  } else {
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
      m = fmaxf(m, row[i]);
    }
    if (threadIdx.x == 0) {
      ps = 1.0;
      px = (double)row[t];  // before any thread's exponentials may overwrite it
    }
  }
  float mx = loss_block_max(m, shf);
  double psum = loss_block_sum(ps, shd);
  double plogp = loss_block_sum(plp, shd);
  double pxs = loss_block_sum(px, shd);
  double sum = loss_exp_sum(row, dr, n, mx, shd);
  double inv = 1.0 / sum;
  double a = 0.0, s = 0.0;
  for (int i = threadIdx.x; i < n; i += blockDim.x) {
    float e = dr ? dr[i] : loss_exp_shift(row[i] - mx);
    double q = (double)e * inv;
    double pj = pr ? (double)pr[i] : (i == t ? 1.0 : 0.0);
    a += pj < q ? pj : q;
    s += q * lk_share(pj, q);
  }
  double alpha = loss_block_sum(a, shd);
  double share = loss_block_sum(s, shd);
  double kl = plogp - pxs + psum * (loss_log(sum) + (double)mx);
  double tv = 1.0 - alpha;
  double lam = whyb != 0.0 ? (double)cpu_expf((float)(-eta * alpha)) : 0.0;
  // A form of weight 0 adds nothing, not 0·Inf (KL of a masked column).
  double loss = 0.0, cK = 0.0, cT = 0.0;
  if (wkl != 0.0) {
    loss += wkl * kl;
    cK += wkl;
  }
  if (wtv != 0.0) {
    loss += wtv * tv;
    cT += wtv;
  }
  if (wnla != 0.0) {
    loss -= wnla * loss_log(alpha > LK_EPSILON ? alpha : LK_EPSILON);
    if (alpha >= LK_EPSILON) {
      cT += wnla / alpha;
    }
  }
  if (whyb != 0.0) {
    if (lam != 0.0) {
      loss += whyb * lam * kl;
    }
    loss += whyb * (1.0 - lam) * tv;
    cK += whyb * lam;
    cT += whyb * (1.0 - lam);
  }
  if (threadIdx.x == 0) {
    rowLoss[r] = (double)w * loss;
    rowAlpha[r] = (double)w * alpha;
  }
  if (dr) {
    // w·(cK·(q·Σp - p) + cT·q·(S - s)) = q·(c0 - cb·s) - ca·p.
    double ca = (double)w * cK, cb = (double)w * cT;
    double c0 = ca * psum + cb * share;
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
      double q = (double)dr[i] * inv;
      double pj = pr ? (double)pr[i] : (i == t ? 1.0 : 0.0);
      dr[i] = (float)(q * (c0 - cb * lk_share(pj, q)) - ca * pj);
    }
  }
}

// drafter_loss_sum writes into out[0] the sum of rowLoss[0..rows) in
// float64, in a fixed order (each thread's strided share in column order,
// then the block's butterfly), so that a loss is the same bits on every
// run. One block.
extern "C" __global__ void drafter_loss_sum(double* out, const double* rowLoss, int rows) {
  __shared__ double shd[32];
  double s = 0.0;
  for (int i = threadIdx.x; i < rows; i += blockDim.x) {
    s += rowLoss[i];
  }
  s = loss_block_sum(s, shd);
  if (threadIdx.x == 0) {
    out[0] = s;
  }
}

// drafter_loss_ce_eval writes row r's loss -log softmax(x)[t] into
// rowLoss[r] (float64) and the number of logits strictly above the
// target's into rank[r]; a row whose target is negative gets loss 0 and
// rank -1 (a target past the row: NaN and -1). The logits are only read.
// Grid: one block per row.
extern "C" __global__ void drafter_loss_ce_eval(double* rowLoss, int* rank, const float* x, const int* targets,
                                                      int n) {
  __shared__ float shf[32];
  __shared__ double shd[32];
  __shared__ int shi[32];
  int r = blockIdx.x;
  int t = targets[r];
  if (t < 0 || t >= n) {
    if (threadIdx.x == 0) {
      rowLoss[r] = t < 0 ? 0.0 : __builtin_nan("");
      rank[r] = -1;
    }
    return;
  }
  const float* row = x + (long long)r * n;
  float xt = row[t];
  float m = -INFINITY;
  int above = 0;
  for (int i = threadIdx.x; i < n; i += blockDim.x) {
    float v = row[i];
    m = fmaxf(m, v);
    above += v > xt ? 1 : 0;
  }
  float mx = loss_block_max(m, shf);
  above = loss_block_sum_i32(above, shi);
  double sum = loss_exp_sum(row, 0, n, mx, shd);
  if (threadIdx.x == 0) {
    rowLoss[r] = loss_log(sum) - (double)(xt - mx);
    rank[r] = above;
  }
}

// topk_key maps a float to an unsigned key of the same order: -0 as +0
// (they tie, as the CPU's comparisons have it), and NaN to 0, below -Inf,
// so that NaN is chosen only after every number.
static __device__ __forceinline__ unsigned int topk_key(float x) {
  if (x != x) {
    return 0u;
  }
  unsigned int u = x == 0.0f ? 0u : f32_bits(x);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

// topk_composite is the sort key of column i with value key: larger keys
// first, then lower columns (~i), unique per column so that a sort needs no
// tie rule. 0 is below every column's composite (the sorts' padding).
static __device__ __forceinline__ unsigned long long topk_composite(unsigned int key, int i) {
  return ((unsigned long long)key << 32) | (unsigned long long)(0xffffffffu - (unsigned int)i);
}

// topk_sort sorts buf[0..p) (p a power of two) in descending order by a
// bitonic network over the block, and writes the columns of its first k
// entries into out. buf is shared memory when it fits, else global.
static __device__ __forceinline__ void topk_sort(unsigned long long* buf, int p, int k, int* out) {
  int tid = threadIdx.x, B = blockDim.x;
  for (int size = 2; size <= p; size <<= 1) {
    for (int stride = size >> 1; stride > 0; stride >>= 1) {
      for (int i = tid; i < p; i += B) {
        int l = i ^ stride;
        if (l > i) {
          unsigned long long a = buf[i], b = buf[l];
          bool desc = (i & size) == 0;
          if (desc ? a < b : a > b) {
            buf[i] = b;
            buf[l] = a;
          }
        }
      }
      __syncthreads();
    }
  }
  for (int j = tid; j < k; j += B) {
    out[j] = (int)(0xffffffffu - (unsigned int)(buf[j] & 0xffffffffULL));
  }
}

// drafter_loss_topk writes into out[0..k) the columns of the k largest values
// of x[0..n), best first, ties to the lower column; 1 <= k <= n. One block of
// at most 1024 threads, with cap (a power of two) 8-byte slots of dynamic
// shared memory, and cand (global, p2 >= k slots, p2 a power of two) for the
// rare selection whose k values do not fit there.
//
// The usual path reads x twice. Each thread's largest key is a value of x,
// so when k <= blockDim.x the k-th largest of the threads' maxima, T0, has
// at least k values of x at or above it: the k-th largest value is >= T0,
// and only the values >= T0 (for a vocabulary-wide row and k in the
// hundreds, a few hundred) can be chosen. They are gathered into shared
// memory and, when they fit in cap, sorted there by (key, column).
//
// Otherwise (k > blockDim.x, or more than cap values >= T0: ties or -Inf
// masks at the top) a radix select over all of x:
//  1. 8 bits of the key a pass from the top find the k-th largest key T and
//     how many values equal to T are needed (need);
//  2. when fewer than all the values equal to T are needed, a second radix
//     select over their columns finds the need-th lowest column C;
//  3. the k values above T, or equal to T at a column up to C, are gathered
//     (their slots from a shared counter: the sort undoes the order) and
//     sorted, in shared memory when p2 <= cap, else in cand.
// Every step's result is the same whatever order the atomics run in, so the
// output is exact.
extern "C" __global__ void drafter_loss_topk(int* out, unsigned long long* cand, const float* x, int n, int k, int p2,
                                             int cap) {
  DYNAMIC_SHARED(unsigned long long, sbuf);
  __shared__ unsigned int smax[1024];
  __shared__ int hist[256];
  __shared__ unsigned int s_prefix, s_t0;
  __shared__ int s_rem, s_eq, s_cnt;
  int tid = threadIdx.x, B = blockDim.x;

  // The threads' maxima, and T0 from them: the one thread holding the k-th
  // largest (the first of equal ones) publishes it.
  unsigned int mk = 0;
  for (int i = tid; i < n; i += B) {
    unsigned int key = topk_key(x[i]);
    mk = key > mk ? key : mk;
  }
  smax[tid] = mk;
  if (tid == 0) {
    s_t0 = 0;
    s_cnt = 0;
  }
  __syncthreads();
  unsigned int t0 = 0;
  if (k <= B) {
    int gt = 0, ge = 0;
    bool first = true;
    for (int j = 0; j < B; j++) {
      unsigned int o = smax[j];
      gt += o > mk ? 1 : 0;
      ge += o >= mk ? 1 : 0;
      first = first && !(j < tid && o == mk);
    }
    if (gt < k && ge >= k && first) {
      s_t0 = mk;
    }
    __syncthreads();
    t0 = s_t0;
  }

  // The candidates >= T0, sorted in shared memory when they fit.
  for (int i = tid; i < n; i += B) {
    unsigned int key = topk_key(x[i]);
    if (key >= t0) {
      int slot = atomicAdd(&s_cnt, 1);
      if (slot < cap) {
        sbuf[slot] = topk_composite(key, i);
      }
    }
  }
  __syncthreads();
  int m = s_cnt;
  if (m <= cap) {
    int p = 1;
    while (p < m) {
      p <<= 1;
    }
    for (int i = m + tid; i < p; i += B) {
      sbuf[i] = 0ULL;
    }
    __syncthreads();
    topk_sort(sbuf, p, k, out);
    return;
  }

  // 1. The k-th largest key, 8 bits at a time.
  unsigned int prefix = 0, mask = 0;
  int rem = k;
  for (int shift = 24; shift >= 0; shift -= 8) {
    for (int b = tid; b < 256; b += B) {
      hist[b] = 0;
    }
    __syncthreads();
    for (int i = tid; i < n; i += B) {
      unsigned int key = topk_key(x[i]);
      if ((key & mask) == prefix) {
        atomicAdd(&hist[(key >> shift) & 255], 1);
      }
    }
    __syncthreads();
    if (tid == 0) {
      int cum = 0;
      for (int b = 255; b >= 0; b--) {
        if (cum + hist[b] >= rem) {
          s_prefix = prefix | ((unsigned int)b << shift);
          s_rem = rem - cum;
          s_eq = hist[b];
          break;
        }
        cum += hist[b];
      }
    }
    __syncthreads();
    prefix = s_prefix;
    rem = s_rem;
    mask |= 255u << shift;
  }
  unsigned int T = prefix;
  int need = rem;  // values equal to T to take, the lowest columns first

  // 2. The need-th lowest column among the values equal to T.
  int C = 0x7fffffff;
  if (need < s_eq) {
    int top = 0;
    while (((unsigned int)(n - 1) >> top) > 255u) {
      top += 8;
    }
    unsigned int cprefix = 0, cmask = 0;
    for (int shift = top; shift >= 0; shift -= 8) {
      for (int b = tid; b < 256; b += B) {
        hist[b] = 0;
      }
      __syncthreads();
      for (int i = tid; i < n; i += B) {
        if (((unsigned int)i & cmask) == cprefix && topk_key(x[i]) == T) {
          atomicAdd(&hist[((unsigned int)i >> shift) & 255], 1);
        }
      }
      __syncthreads();
      if (tid == 0) {
        int cum = 0;
        for (int b = 0; b < 256; b++) {
          if (cum + hist[b] >= rem) {
            s_prefix = cprefix | ((unsigned int)b << shift);
            s_rem = rem - cum;
            break;
          }
          cum += hist[b];
        }
      }
      __syncthreads();
      cprefix = s_prefix;
      rem = s_rem;
      cmask |= 255u << shift;
    }
    C = (int)cprefix;
  }

  // 3. The k values, padded to p2, and their sort.
  unsigned long long* buf = p2 <= cap ? sbuf : cand;
  if (tid == 0) {
    s_cnt = 0;
  }
  __syncthreads();
  for (int i = tid; i < n; i += B) {
    unsigned int key = topk_key(x[i]);
    if (key > T || (key == T && i <= C)) {
      buf[atomicAdd(&s_cnt, 1)] = topk_composite(key, i);
    }
  }
  for (int i = k + tid; i < p2; i += B) {
    buf[i] = 0ULL;
  }
  __syncthreads();
  topk_sort(buf, p2, k, out);
}
