// cublas.cc: the stand-in libcublas.so.12 (installed as .13 and .11 too): the
// handful of cuBLAS entry points drafter uses, computing on the stand-in
// libcuda's device memory on the CPU.
//
// GEMMs follow cuBLAS's documentation exactly: column-major, op(A) is m x k,
// op(B) is k x n, C is m x n; lda >= max(1, rows of A as stored), and so on;
// a bad argument returns CUBLAS_STATUS_INVALID_VALUE before anything is
// touched. A and B may be 32F, 16F or 16BF; C is 32F; compute is 32F (the
// products are accumulated in double, so the stand-in is at least as
// accurate as any GPU order). beta == 0 means C is not read (NaNs in it
// vanish), as in cuBLAS. CUBLAS_COMPUTE_32F_FAST_16BF takes 32F A and B only
// (cuBLAS's table for it) and rounds every value of them to bfloat16 (to
// nearest, ties to even, NaN kept quiet: the tensor cores' automatic
// down-conversion) before multiplying; the products of the rounded values are
// exact in float and accumulated as for 32F, so its result differs from
// 32F's by the input rounding alone, which is the whole of what the compute
// type changes.
//
// The operands live in the stand-in libcuda's arena. drafter dlopens both
// libraries RTLD_LOCAL, so the libcuda is found by walking the loaded objects
// (dl_iterate_phdr) for ones exporting drafter_standin_get_bridge, and the
// one whose arena holds the operands is used.
#include <dlfcn.h>
#include <link.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <set>
#include <vector>

#include "standin.h"

#define API extern "C" __attribute__((visibility("default")))

typedef int cublasStatus_t;
enum : cublasStatus_t {
  CUBLAS_STATUS_SUCCESS = 0,
  CUBLAS_STATUS_NOT_INITIALIZED = 1,
  CUBLAS_STATUS_INVALID_VALUE = 7,
  CUBLAS_STATUS_EXECUTION_FAILED = 13,
  CUBLAS_STATUS_NOT_SUPPORTED = 15,
};
enum { CUDA_R_32F = 0, CUDA_R_16F = 2, CUDA_R_16BF = 14 };
enum { CUBLAS_OP_N = 0, CUBLAS_OP_T = 1, CUBLAS_OP_C = 2 };
enum { CUBLAS_COMPUTE_32F = 68, CUBLAS_COMPUTE_32F_FAST_16BF = 75 };

namespace {

typedef std::vector<const drafter_standin_bridge*> Bridges;
typedef std::vector<const drafter_standin_capture*> Captures;

struct Handle {
  void* stream = nullptr;
  int mathMode = 0;
  Bridges bridges;  // the stand-in libcudas loaded when the handle was made
  Captures captures;  // and their stream-capture tables
  void* workspace = nullptr;  // cublasSetWorkspace's (null: none set)
  size_t workspaceBytes = 0;
};

std::mutex mu;  // guards handles
std::set<Handle*> handles;

struct Found {
  Bridges bridges;
  Captures captures;
};

int collect(struct dl_phdr_info* info, size_t, void* out) {
  if (!info->dlpi_name || !info->dlpi_name[0]) return 0;
  void* h = dlopen(info->dlpi_name, RTLD_NOW | RTLD_NOLOAD);
  if (!h) return 0;
  auto get = reinterpret_cast<const drafter_standin_bridge* (*)()>(dlsym(h, "drafter_standin_get_bridge"));
  if (get && get()->version == DRAFTER_STANDIN_BRIDGE_VERSION)
    static_cast<Found*>(out)->bridges.push_back(get());
  auto cap = reinterpret_cast<const drafter_standin_capture* (*)()>(dlsym(h, "drafter_standin_get_capture"));
  if (cap && cap()->version == DRAFTER_STANDIN_CAPTURE_VERSION)
    static_cast<Found*>(out)->captures.push_back(cap());
  dlclose(h);  // the library stays loaded: drafter holds it, and it is nodelete
  return 0;
}

// bridgeFor returns the stand-in libcuda whose arena holds p, or null.
const drafter_standin_bridge* bridgeFor(const Bridges& all, unsigned long long p) {
  for (const drafter_standin_bridge* b : all)
    if (b->contains(p)) return b;
  return nullptr;
}

// The 16-bit formats, widened exactly as compat.h does.
float bf16(uint16_t h) {
  uint32_t u = (uint32_t)h << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
float f16(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16, mag = (uint32_t)(h & 0x7fffu) << 13, u;
  if (mag >= (0x7c00u << 13)) {
    u = sign | 0x7f800000u | (mag > (0x7c00u << 13) ? 0x400000u | mag : 0);
  } else {
    float m;
    std::memcpy(&m, &mag, 4);
    m *= 0x1p112f;
    std::memcpy(&u, &m, 4);
    u |= sign;
  }
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// roundBF16 is f rounded to bfloat16 and widened back, as compat.h's
// f32_to_bf16 rounds (nearest, ties to even; a NaN stays a quiet NaN).
float roundBF16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  uint16_t h = (u & 0x7fffffffu) > 0x7f800000u ? (uint16_t)((u >> 16) | 0x40)
                                                : (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
  return bf16(h);
}

double load(const void* base, int type, size_t i) {
  switch (type) {
    case CUDA_R_32F: return static_cast<const float*>(base)[i];
    case CUDA_R_16F: return f16(static_cast<const uint16_t*>(base)[i]);
    default: return bf16(static_cast<const uint16_t*>(base)[i]);
  }
}
size_t typeBytes(int type) { return type == CUDA_R_32F ? 4 : 2; }

struct Gemm {
  int transa, transb, m, n, k;
  float alpha, beta;
  const void* A;
  int Atype, lda;
  const void* B;
  int Btype, ldb;
  float* C;
  int ldc;
  // fast16bf: A and B are rounded to bfloat16 as they are read
  // (CUBLAS_COMPUTE_32F_FAST_16BF).
  bool fast16bf = false;
};

// check validates g's arguments as cuBLAS does (before any operand is read).
cublasStatus_t check(const Gemm& g, int Ctype, int computeType, int algo) {
  bool ta = g.transa != CUBLAS_OP_N, tb = g.transb != CUBLAS_OP_N;
  if (g.transa < 0 || g.transa > 2 || g.transb < 0 || g.transb > 2) return CUBLAS_STATUS_INVALID_VALUE;
  if (g.m < 0 || g.n < 0 || g.k < 0) return CUBLAS_STATUS_INVALID_VALUE;
  if (g.lda < (ta ? std::max(1, g.k) : std::max(1, g.m))) return CUBLAS_STATUS_INVALID_VALUE;
  if (g.ldb < (tb ? std::max(1, g.n) : std::max(1, g.k))) return CUBLAS_STATUS_INVALID_VALUE;
  if (g.ldc < std::max(1, g.m)) return CUBLAS_STATUS_INVALID_VALUE;
  if (algo < -1 || (algo > 23 && (algo < 99 || algo > 115))) return CUBLAS_STATUS_INVALID_VALUE;
  auto ok = [](int t) { return t == CUDA_R_32F || t == CUDA_R_16F || t == CUDA_R_16BF; };
  if (!ok(g.Atype) || g.Atype != g.Btype || Ctype != CUDA_R_32F) return CUBLAS_STATUS_NOT_SUPPORTED;
  if (computeType != CUBLAS_COMPUTE_32F && !(computeType == CUBLAS_COMPUTE_32F_FAST_16BF && g.Atype == CUDA_R_32F))
    return CUBLAS_STATUS_NOT_SUPPORTED;
  return CUBLAS_STATUS_SUCCESS;
}

// extent is the number of elements a rows x cols column-major operand with
// leading dimension ld spans.
size_t extent(int rows, int cols, int ld) { return rows == 0 || cols == 0 ? 0 : (size_t)ld * (cols - 1) + rows; }

// run computes C = alpha op(A) op(B) + beta C; op(A)[i][l] is A[i + l*lda]
// (N) or A[l + i*lda] (T).
void run(const Gemm& g) {
  bool ta = g.transa != CUBLAS_OP_N, tb = g.transb != CUBLAS_OP_N;
  const bool product = g.k > 0 && g.alpha != 0;
  std::vector<double> a, b;
  if (product) {  // op(A) rows and op(B) columns, contiguous
    a.resize((size_t)g.m * g.k);
    b.resize((size_t)g.n * g.k);
    for (int i = 0; i < g.m; i++)
      for (int l = 0; l < g.k; l++)
        a[(size_t)i * g.k + l] = load(g.A, g.Atype, ta ? l + (size_t)i * g.lda : i + (size_t)l * g.lda);
    for (int j = 0; j < g.n; j++)
      for (int l = 0; l < g.k; l++)
        b[(size_t)j * g.k + l] = load(g.B, g.Btype, tb ? j + (size_t)l * g.ldb : l + (size_t)j * g.ldb);
    if (g.fast16bf) {  // the operands are 32F (check): each value is a float
      for (double& v : a) v = roundBF16((float)v);
      for (double& v : b) v = roundBF16((float)v);
    }
  }
  for (int j = 0; j < g.n; j++)
    for (int i = 0; i < g.m; i++) {
      double s = 0;
      if (product) {
        const double *x = &a[(size_t)i * g.k], *y = &b[(size_t)j * g.k];
        for (int l = 0; l < g.k; l++) s += x[l] * y[l];
      }
      float& c = g.C[i + (size_t)j * g.ldc];
      double v = (double)g.alpha * s;
      if (g.beta != 0) v += (double)g.beta * c;
      c = (float)v;
    }
}

// Batched is a checked GEMM call: what gemmBatched runs now, or records in
// a stream capture to run at each replay of the graph.
struct Batched {
  Gemm g;
  long long sA, sB, sC;
  int batch;
  Bridges bridges;
};

cublasStatus_t execute(const Batched& x);

void runRecorded(void* arg) {
  if (execute(*static_cast<Batched*>(arg)) != CUBLAS_STATUS_SUCCESS)
    fprintf(stderr, "stand-in cuBLAS: a GEMM replayed from a CUDA graph failed\n");
}
void dropRecorded(void* arg) { delete static_cast<Batched*>(arg); }

cublasStatus_t gemmBatched(Handle* h, Gemm g, int Ctype, int computeType, int algo, long long sA, long long sB,
                           long long sC, int batch) {
  Bridges bridges;
  Captures captures;
  void* stream;
  bool workspace;
  {
    std::lock_guard<std::mutex> l(mu);
    if (!handles.count(h)) return CUBLAS_STATUS_NOT_INITIALIZED;
    bridges = h->bridges;
    captures = h->captures;
    stream = h->stream;
    workspace = h->workspace != nullptr;
  }
  if (batch < 0) return CUBLAS_STATUS_INVALID_VALUE;
  if (cublasStatus_t s = check(g, Ctype, computeType, algo)) return s;
  g.fast16bf = computeType == CUBLAS_COMPUTE_32F_FAST_16BF;
  if (g.m == 0 || g.n == 0 || batch == 0) return CUBLAS_STATUS_SUCCESS;
  for (const drafter_standin_capture* c : captures) {
    if (!c->capturing(stream)) continue;
    // In a capture cuBLAS may not allocate its workspace itself (it would
    // be a cudaMalloc in the capture): the handle must have one set with
    // cublasSetWorkspace, as NVIDIA's documentation asks for graphs.
    if (!workspace) {
      fprintf(stderr, "stand-in cuBLAS: a GEMM in a stream capture on a handle without cublasSetWorkspace\n");
      return CUBLAS_STATUS_NOT_SUPPORTED;
    }
    Batched* x = new Batched{g, sA, sB, sC, batch, bridges};
    int r = c->record(stream, runRecorded, x, dropRecorded);
    if (r == 1) return CUBLAS_STATUS_SUCCESS;
    if (r == 0) delete x;  // the capture ended meanwhile: run now
    else return CUBLAS_STATUS_EXECUTION_FAILED;  // an invalidated capture (record dropped x)
  }
  return execute(Batched{g, sA, sB, sC, batch, bridges});
}

// execute runs a checked GEMM call on the device memory it names.
cublasStatus_t execute(const Batched& x) {
  const Gemm& g = x.g;
  const long long sA = x.sA, sB = x.sB, sC = x.sC;
  const int batch = x.batch;
  const Bridges& bridges = x.bridges;
  bool ta = g.transa != CUBLAS_OP_N, tb = g.transb != CUBLAS_OP_N;
  const bool readAB = g.k > 0 && g.alpha != 0;
  size_t ea = extent(ta ? g.k : g.m, ta ? g.m : g.k, g.lda), eb = extent(tb ? g.n : g.k, tb ? g.k : g.n, g.ldb),
         ec = extent(g.m, g.n, g.ldc);
  const drafter_standin_bridge* br = bridgeFor(bridges, (unsigned long long)(uintptr_t)g.C);
  if (!br) {
    fprintf(stderr, "stand-in cuBLAS: C %p is not device memory of a stand-in libcuda\n", (void*)g.C);
    return CUBLAS_STATUS_EXECUTION_FAILED;
  }
  br->enter();
  // Every batch's operands must lie inside allocations: a bad stride or
  // leading dimension fails here instead of corrupting memory.
  bool inside = true;
  for (int i = 0; i < batch && inside; i++) {
    auto at = [&](const void* p, long long stride, int type) {
      return (unsigned long long)(uintptr_t)p + (unsigned long long)(stride * i) * typeBytes(type);
    };
    inside = br->check(at(g.C, sC, CUDA_R_32F), ec * 4) == 0;
    if (readAB)
      inside = inside && br->check(at(g.A, sA, g.Atype), ea * typeBytes(g.Atype)) == 0 &&
               br->check(at(g.B, sB, g.Btype), eb * typeBytes(g.Btype)) == 0;
  }
  if (!inside) {
    br->leave();
    fprintf(stderr, "stand-in cuBLAS: a GEMM operand reaches outside its device allocation\n");
    return CUBLAS_STATUS_EXECUTION_FAILED;
  }
  for (int i = 0; i < batch; i++) {
    Gemm b = g;
    b.A = static_cast<const char*>(g.A) + (ptrdiff_t)(sA * i) * (ptrdiff_t)typeBytes(g.Atype);
    b.B = static_cast<const char*>(g.B) + (ptrdiff_t)(sB * i) * (ptrdiff_t)typeBytes(g.Btype);
    b.C = g.C + (ptrdiff_t)(sC * i);
    run(b);
  }
  br->leave();
  return CUBLAS_STATUS_SUCCESS;
}

}  // namespace

API cublasStatus_t cublasCreate_v2(void** handle) {
  if (!handle) return CUBLAS_STATUS_INVALID_VALUE;
  // cuBLAS needs a working driver: some stand-in libcuda must be loaded.
  Found all;
  dl_iterate_phdr(collect, &all);
  if (all.bridges.empty()) return CUBLAS_STATUS_NOT_INITIALIZED;
  std::lock_guard<std::mutex> l(mu);
  Handle* h = new Handle;
  h->bridges = all.bridges;
  h->captures = all.captures;
  handles.insert(h);
  *handle = h;
  return CUBLAS_STATUS_SUCCESS;
}

API cublasStatus_t cublasDestroy_v2(void* handle) {
  std::lock_guard<std::mutex> l(mu);
  if (!handles.erase(static_cast<Handle*>(handle))) return CUBLAS_STATUS_NOT_INITIALIZED;
  delete static_cast<Handle*>(handle);
  return CUBLAS_STATUS_SUCCESS;
}

API cublasStatus_t cublasSetStream_v2(void* handle, void* stream) {
  std::lock_guard<std::mutex> l(mu);
  if (!handles.count(static_cast<Handle*>(handle))) return CUBLAS_STATUS_NOT_INITIALIZED;
  static_cast<Handle*>(handle)->stream = stream;
  return CUBLAS_STATUS_SUCCESS;
}

// cublasSetWorkspace_v2 gives the handle its workspace (device memory of a
// stand-in libcuda, 256-byte aligned, as cuBLAS requires); the stand-in's
// GEMMs need none, but a GEMM in a stream capture is refused without one.
API cublasStatus_t cublasSetWorkspace_v2(void* handle, void* workspace, size_t bytes) {
  std::lock_guard<std::mutex> l(mu);
  Handle* h = static_cast<Handle*>(handle);
  if (!handles.count(h)) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (workspace == nullptr || bytes == 0) {
    h->workspace = nullptr, h->workspaceBytes = 0;
    return CUBLAS_STATUS_SUCCESS;
  }
  unsigned long long p = (unsigned long long)(uintptr_t)workspace;
  if (p % 256 != 0) return CUBLAS_STATUS_INVALID_VALUE;
  const drafter_standin_bridge* br = bridgeFor(h->bridges, p);
  if (!br) return CUBLAS_STATUS_INVALID_VALUE;
  br->enter();
  int bad = br->check(p, bytes);
  br->leave();
  if (bad) return CUBLAS_STATUS_INVALID_VALUE;
  h->workspace = workspace, h->workspaceBytes = bytes;
  return CUBLAS_STATUS_SUCCESS;
}

API cublasStatus_t cublasSetMathMode(void* handle, int mode) {
  std::lock_guard<std::mutex> l(mu);
  if (!handles.count(static_cast<Handle*>(handle))) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (mode < 0 || mode > 0x1f) return CUBLAS_STATUS_INVALID_VALUE;
  static_cast<Handle*>(handle)->mathMode = mode;
  return CUBLAS_STATUS_SUCCESS;
}

API cublasStatus_t cublasGetVersion_v2(void* handle, int* version) {
  std::lock_guard<std::mutex> l(mu);
  if (!handles.count(static_cast<Handle*>(handle))) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (!version) return CUBLAS_STATUS_INVALID_VALUE;
  *version = 120904;  // cuBLAS 12.9.4's encoding: major*10000 + minor*100 + patch
  return CUBLAS_STATUS_SUCCESS;
}

API cublasStatus_t cublasGemmEx(void* handle, int transa, int transb, int m, int n, int k, const void* alpha,
                                const void* A, int Atype, int lda, const void* B, int Btype, int ldb, const void* beta,
                                void* C, int Ctype, int ldc, int computeType, int algo) {
  if (!alpha || !beta) return CUBLAS_STATUS_INVALID_VALUE;
  Gemm g{transa, transb, m, n, k, *static_cast<const float*>(alpha), *static_cast<const float*>(beta),
         A, Atype, lda, B, Btype, ldb, static_cast<float*>(C), ldc};
  return gemmBatched(static_cast<Handle*>(handle), g, Ctype, computeType, algo, 0, 0, 0, 1);
}

API cublasStatus_t cublasGemmStridedBatchedEx(void* handle, int transa, int transb, int m, int n, int k,
                                              const void* alpha, const void* A, int Atype, int lda, long long strideA,
                                              const void* B, int Btype, int ldb, long long strideB, const void* beta,
                                              void* C, int Ctype, int ldc, long long strideC, int batchCount,
                                              int computeType, int algo) {
  if (!alpha || !beta) return CUBLAS_STATUS_INVALID_VALUE;
  Gemm g{transa, transb, m, n, k, *static_cast<const float*>(alpha), *static_cast<const float*>(beta),
         A, Atype, lda, B, Btype, ldb, static_cast<float*>(C), ldc};
  return gemmBatched(static_cast<Handle*>(handle), g, Ctype, computeType, algo, strideA, strideB, strideC, batchCount);
}
