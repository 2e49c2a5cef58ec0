#include "compat.h"

// Decoding's sampling step (Device.SampleRows; tensor.SampleRow in
// pkg/tensor/sample.go is the reference): one block per row of logits picks
// the row's token, so that only the ids, not the logits, go back to the
// host.
//
// blockDim.x is a power of two from 32 to 1024 (the caller picks it from the
// row's width). The argmax and the float64 sums combine the threads' values
// by a fixed tree over shared memory, so a row's result is a function of the
// row, the block size and u: the same bits on every run. At temperature 0 the
// token is the reference's exactly (the first of equal largest values); above,
// the exponentials are decode_exp's (within an ulp or two of Go's math.Exp)
// and the sums are the tree's, so a draw can differ from the reference's when
// u falls within rounding of a boundary between two tokens.

#define DECODE_MAX_BLOCK 1024

// decode_exp returns e^x in float64 for x <= 0 (a logit minus the row's
// maximum, over the temperature): x = k·ln2 + r with |r| <= ln2/2 (Cody and
// Waite's two-part ln 2, so r is exact to the last bits), e^r by its Taylor
// series to r^13 (the next term is below 2^-60 of the sum), times 2^k built
// from its bits (in two factors below 2^-1022, where the result is
// subnormal). compat.h has no double exp: there is no libdevice.
static __device__ double decode_exp(double x) {
  if (x < -745.2) {
    return 0.0;  // below the smallest subnormal
  }
  const double log2e = 1.4426950408889634;
  const double ln2hi = 6.93147180369123816490e-01;
  const double ln2lo = 1.90821492927058770002e-10;
  long long k = -(long long)(0.5 - x * log2e);  // round(x·log2 e) for x <= 0
  double r = (x - (double)k * ln2hi) - (double)k * ln2lo;
  double p = 1.0 / 6227020800.0;  // 1/13!
  p = p * r + 1.0 / 479001600.0;
  p = p * r + 1.0 / 39916800.0;
  p = p * r + 1.0 / 3628800.0;
  p = p * r + 1.0 / 362880.0;
  p = p * r + 1.0 / 40320.0;
  p = p * r + 1.0 / 5040.0;
  p = p * r + 1.0 / 720.0;
  p = p * r + 1.0 / 120.0;
  p = p * r + 1.0 / 24.0;
  p = p * r + 1.0 / 6.0;
  p = p * r + 0.5;
  p = p * r + 1.0;
  p = p * r + 1.0;
  int shift = 0;
  if (k < -1022) {
    shift = 60;
    k += 60;
  }
  unsigned long long b = (unsigned long long)(k + 1023) << 52;
  double s;
  __builtin_memcpy(&s, &b, 8);
  p *= s;
  if (shift) {
    p *= 8.6736173798840355e-19;  // 2^-60
  }
  return p;
}

// decode_prob is a token's probability as the reference rounds it: the
// float32 exponential times 1/Σe, rounded to float32, widened; 0 for -Inf.
static __device__ __forceinline__ double decode_prob(float v, float mx, double invT, double inv) {
  if (v < -FLT_MAX) {
    return 0.0;
  }
  float e = (float)decode_exp(((double)v - (double)mx) * invT);
  return (double)(float)((double)e * inv);
}

// decode_sum_tree sums the block's values in sh (one per thread) by a fixed
// tree; every thread gets the sum. The barriers let the caller refill sh.
static __device__ double decode_sum_tree(double v, double* sh) {
  int t = threadIdx.x;
  sh[t] = v;
  __syncthreads();
  for (int s = blockDim.x / 2; s > 0; s >>= 1) {
    if (t < s) {
      sh[t] += sh[t + s];
    }
    __syncthreads();
  }
  double out = sh[0];
  __syncthreads();
  return out;
}

// drafter_decode_sample writes into ids[r] row r's token of logits [rows, n]
// (n >= 1): -1 for a row with a NaN or +Inf value or only -Inf values; the
// first largest value's column at temperature 0; else the inverse transform
// of u[r] over softmax(row/temperature) (u is not read at temperature 0).
// Thread t owns the contiguous columns [t·c, (t+1)·c), c = ceil(n/B), so
// that the draw's running sum visits the columns in order: thread 0 turns
// the threads' sums into prefix sums and picks the thread whose columns hold
// u·total, which walks them. Grid: one block per row.
extern "C" __global__ void drafter_decode_sample(int* ids, const float* logits, int n, double temperature,
                                                 const double* u) {
  __shared__ double shd[DECODE_MAX_BLOCK];
  __shared__ double pre[DECODE_MAX_BLOCK + 1];
  __shared__ float shv[DECODE_MAX_BLOCK];
  __shared__ int shi[DECODE_MAX_BLOCK];
  __shared__ int shbad[DECODE_MAX_BLOCK];
  __shared__ int pick;
  __shared__ double target;
  const float* row = logits + (long long)blockIdx.x * n;
  int t = threadIdx.x, B = blockDim.x;
  int c = (n + B - 1) / B;
  int lo = min(n, t * c), hi = min(n, lo + c);

  // The row's validity, maximum and first argmax.
  float bv = -INFINITY;
  int bi = 0x7fffffff, bad = 0;
  for (int i = lo; i < hi; i++) {
    float v = row[i];
    if (v != v || v > FLT_MAX) {
      bad = 1;
    }
    if (v > bv || (v == bv && bi == 0x7fffffff)) {
      bv = v;
      bi = i;
    }
  }
  shv[t] = bv;
  shi[t] = bi;
  shbad[t] = bad;
  __syncthreads();
  for (int s = B / 2; s > 0; s >>= 1) {
    if (t < s) {
      float ov = shv[t + s];
      int oi = shi[t + s];
      if (ov > shv[t] || (ov == shv[t] && oi < shi[t])) {
        shv[t] = ov;
        shi[t] = oi;
      }
      shbad[t] |= shbad[t + s];
    }
    __syncthreads();
  }
  float mx = shv[0];
  int best = shi[0];
  bad = shbad[0] || !(mx >= -FLT_MAX);
  __syncthreads();
  if (bad || temperature == 0.0) {  // uniform over the block: no barrier is skipped by some threads only
    if (t == 0) {
      ids[blockIdx.x] = bad ? -1 : best;
    }
    return;
  }

  // Σe in float64, then each thread's share of the rounded probabilities.
  double invT = 1.0 / temperature;
  double e = 0.0;
  for (int i = lo; i < hi; i++) {
    float v = row[i];
    if (v >= -FLT_MAX) {
      e += decode_exp(((double)v - (double)mx) * invT);
    }
  }
  double inv = 1.0 / decode_sum_tree(e, shd);
  double mine = 0.0;
  for (int i = lo; i < hi; i++) {
    mine += decode_prob(row[i], mx, invT, inv);
  }
  shd[t] = mine;
  __syncthreads();
  if (t == 0) {
    pre[0] = 0.0;
    for (int k = 0; k < B; k++) {
      pre[k + 1] = pre[k] + shd[k];
    }
    double x = u[blockIdx.x] * pre[B];
    int w = -1, lastNonzero = 0;
    for (int k = 0; k < B; k++) {
      if (shd[k] > 0.0) {
        lastNonzero = k;
        if (w < 0 && x < pre[k + 1]) {
          w = k;
        }
      }
    }
    pick = w >= 0 ? w : lastNonzero;  // u·total rounded past the end: the last token with mass
    target = x;
  }
  __syncthreads();
  if (t == pick) {
    double cum = pre[t];
    int last = -1, id = -1;
    for (int i = lo; i < hi; i++) {
      double p = decode_prob(row[i], mx, invT, inv);
      if (p == 0.0) {
        continue;
      }
      cum += p;
      if (target < cum) {
        id = i;
        break;
      }
      last = i;
    }
    ids[blockIdx.x] = id >= 0 ? id : last;
  }
}
