// test_standin.c: checks the stand-in libcuda.so.1 and libcublas.so.12 the way
// drafter uses them: dlopen'ed RTLD_LOCAL, entry points found with dlsym.
//
//   test_standin DIR    (DIR holds libcuda.so.1, libcublas.so.12 and initfail/libcuda.so.1)
//
// Prints "ok <name>" per check and exits non-zero on a failure.
#include <dlfcn.h>
#include <math.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

typedef int CUresult;
typedef unsigned long long CUdeviceptr;

static int failures;

static void report(const char* name, int ok) {
  printf("%s %s\n", ok ? "ok" : "FAIL", name);
  fflush(stdout);
  if (!ok) failures++;
}

static void* lib;
static void* sym(void* h, const char* name) {
  void* p = dlsym(h, name);
  if (!p) {
    fprintf(stderr, "missing %s\n", name);
    exit(1);
  }
  return p;
}
#define FN(ret, name, args) ret(*name) args = (ret(*) args)sym(lib, #name)

// Values k/8 with |k| <= 16 are exact in float, f16 and bf16, so every
// product and sum of the GEMM tests is exact in double.
static uint16_t to_bf16(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return (uint16_t)(u >> 16);
}
// rne_bf16 rounds a finite f to bf16 to nearest, ties to even, by comparing
// the dropped half with 0x8000 (the stand-in adds a bias instead).
static float rne_bf16(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  uint32_t hi = u >> 16, rest = u & 0xffffu;
  if (rest > 0x8000u || (rest == 0x8000u && (hi & 1u))) hi++;
  u = hi << 16;
  memcpy(&f, &u, 4);
  return f;
}
static uint16_t to_f16(float f) {  // exact for the test's values only
  if (f == 0) return 0;
  uint16_t sign = f < 0 ? 0x8000 : 0;
  float a = fabsf(f);
  int e = 0;
  while (a >= 2) a /= 2, e++;
  while (a < 1) a *= 2, e--;
  return (uint16_t)(sign | (uint16_t)((e + 15) << 10) | (uint16_t)((a - 1) * 1024));
}

int main(int argc, char** argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: test_standin DIR\n");
    return 2;
  }
  char path[4096];

  // The initfail build: cuInit fails with CUDA_ERROR_NO_DEVICE, nothing works before cuInit.
  snprintf(path, sizeof path, "%s/initfail/libcuda.so.1", argv[1]);
  lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    fprintf(stderr, "%s\n", dlerror());
    return 1;
  }
  {
    FN(CUresult, cuInit, (unsigned));
    FN(CUresult, cuGetErrorName, (CUresult, const char**));
    FN(CUresult, cuGetErrorString, (CUresult, const char**));
    FN(CUresult, cuDeviceGetCount, (int*));
    const char *name = 0, *text = 0;
    int n = -1;
    report("initfail/cuInit", cuInit(0) == 100 && cuGetErrorName(100, &name) == 0 &&
                                  strcmp(name, "CUDA_ERROR_NO_DEVICE") == 0 && cuGetErrorString(100, &text) == 0 &&
                                  strcmp(text, "no CUDA-capable device is detected") == 0);
    report("initfail/not_initialized", cuDeviceGetCount(&n) == 3 && cuGetErrorName(12345, &name) == 1 && name == 0);
  }

  snprintf(path, sizeof path, "%s/libcuda.so.1", argv[1]);
  lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    fprintf(stderr, "%s\n", dlerror());
    return 1;
  }
  FN(CUresult, cuInit, (unsigned));
  FN(CUresult, cuDriverGetVersion, (int*));
  FN(CUresult, cuDeviceGet, (int*, int));
  FN(CUresult, cuDeviceGetAttribute, (int*, int, int));
  FN(CUresult, cuDeviceGetName, (char*, int, int));
  FN(CUresult, cuDeviceTotalMem_v2, (size_t*, int));
  FN(CUresult, cuDevicePrimaryCtxRetain, (void**, int));
  FN(CUresult, cuDevicePrimaryCtxRelease_v2, (int));
  FN(CUresult, cuCtxSetCurrent, (void*));
  FN(CUresult, cuMemGetInfo_v2, (size_t*, size_t*));
  FN(CUresult, cuMemAlloc_v2, (CUdeviceptr*, size_t));
  FN(CUresult, cuMemFree_v2, (CUdeviceptr));
  FN(CUresult, cuMemHostAlloc, (void**, size_t, unsigned));
  FN(CUresult, cuMemFreeHost, (void*));
  FN(CUresult, cuMemcpyHtoD_v2, (CUdeviceptr, const void*, size_t));
  FN(CUresult, cuMemcpyDtoH_v2, (void*, CUdeviceptr, size_t));
  FN(CUresult, cuMemcpyDtoDAsync_v2, (CUdeviceptr, CUdeviceptr, size_t, void*));
  FN(CUresult, cuMemsetD32Async, (CUdeviceptr, unsigned, size_t, void*));
  FN(CUresult, cuMemsetD8_v2, (CUdeviceptr, unsigned char, size_t));
  FN(CUresult, cuModuleLoadDataEx, (void**, const void*, unsigned, int*, void**));
  FN(CUresult, cuModuleGetFunction, (void**, void*, const char*));
  FN(CUresult, cuModuleUnload, (void*));
  FN(CUresult, cuFuncSetAttribute, (void*, int, int));
  FN(CUresult, cuLaunchKernel, (void*, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, void*,
                                void**, void**));
  FN(CUresult, cuStreamCreate, (void**, unsigned));
  FN(CUresult, cuStreamSynchronize, (void*));
  FN(CUresult, cuStreamDestroy_v2, (void*));
  FN(CUresult, cuEventCreate, (void**, unsigned));
  FN(CUresult, cuEventRecord, (void*, void*));
  FN(CUresult, cuEventSynchronize, (void*));
  FN(CUresult, cuEventElapsedTime, (float*, void*, void*));
  FN(CUresult, cuEventDestroy_v2, (void*));
  FN(CUresult, cuStreamWaitEvent, (void*, void*, unsigned));
  FN(CUresult, cuMemcpyDtoHAsync_v2, (void*, CUdeviceptr, size_t, void*));

  int dev = -1, major = 0, minor = -1, sms = 0, optin = 0, version = 0;
  char name[128];
  size_t total = 0;
  void* ctx = 0;
  report("device", cuInit(0) == 0 && cuDriverGetVersion(&version) == 0 && version >= 12000 && cuDeviceGet(&dev, 0) == 0 &&
                       cuDeviceGetAttribute(&major, 75, dev) == 0 && major == 8 &&
                       cuDeviceGetAttribute(&minor, 76, dev) == 0 && minor == 0 &&
                       cuDeviceGetAttribute(&sms, 16, dev) == 0 && sms == 108 &&
                       cuDeviceGetAttribute(&optin, 97, dev) == 0 && optin >= 160 * 1024 &&
                       cuDeviceGetName(name, sizeof name, dev) == 0 && cuDeviceTotalMem_v2(&total, dev) == 0 &&
                       total >= ((size_t)1 << 30) && cuDeviceGet(&dev, 1) == 101);
  CUdeviceptr early = 0;
  report("context_required", cuMemAlloc_v2(&early, 64) == 201);
  report("context", cuDevicePrimaryCtxRetain(&ctx, 0) == 0 && cuCtxSetCurrent(ctx) == 0);

  // Memory: a host read of device memory must crash.
  size_t free0 = 0, free1 = 0, tot = 0;
  CUdeviceptr d = 0, d2 = 0;
  enum { N = 1000 };
  float h[N], back[N];
  for (int i = 0; i < N; i++) h[i] = (float)i * 0.5f - 7;
  report("alloc", cuMemGetInfo_v2(&free0, &tot) == 0 && cuMemAlloc_v2(&d, N * 4) == 0 && d % 256 == 0 &&
                      cuMemAlloc_v2(&d2, N * 4) == 0 && cuMemGetInfo_v2(&free1, &tot) == 0 && free1 < free0 &&
                      tot == total);
  pid_t pid = fork();
  if (pid == 0) {
    volatile float x = *(volatile float*)(uintptr_t)d;  // must fault
    (void)x;
    _exit(0);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  report("host_read_faults", WIFSIGNALED(status) && WTERMSIG(status) == SIGSEGV);

  // Copies round-trip; a fresh allocation reads as NaN; ranges are checked.
  memset(back, 0, sizeof back);
  cuMemcpyDtoH_v2(back, d2, 4);
  int nanfill = isnan(back[0]);
  void* pinned = 0;
  int ok = cuMemHostAlloc(&pinned, N * 4, 0) == 0 && cuMemcpyHtoD_v2(d, h, N * 4) == 0 &&
           cuMemcpyDtoDAsync_v2(d2, d, N * 4, 0) == 0 && cuMemcpyDtoH_v2(pinned, d2, N * 4) == 0 &&
           memcmp(pinned, h, N * 4) == 0 && cuMemFreeHost(pinned) == 0;
  report("copies", ok && nanfill);
  report("copy_bounds", cuMemcpyHtoD_v2(d + 8, h, N * 4) == 1 && cuMemcpyDtoH_v2(back, d - 256, 4) == 1 &&
                            cuMemFree_v2(d + 4) == 1);
  ok = cuMemsetD32Async(d, 0x3f800000u, N, 0) == 0 && cuMemsetD8_v2(d2, 0, N * 4) == 0 &&
       cuMemcpyDtoH_v2(back, d, N * 4) == 0;
  for (int i = 0; i < N; i++) ok = ok && back[i] == 1.0f;
  ok = ok && cuMemcpyDtoH_v2(back, d2, N * 4) == 0;
  for (int i = 0; i < N; i++) ok = ok && back[i] == 0.0f;
  report("memset", ok && cuMemsetD32Async(d + 2, 0, 1, 0) == 1);

  // Streams and events run synchronously.
  void *stream = 0, *e0 = 0, *e1 = 0;
  float ms = -1;
  report("streams_events", cuStreamCreate(&stream, 1) == 0 && cuEventCreate(&e0, 0) == 0 && cuEventCreate(&e1, 0) == 0 &&
                               cuEventElapsedTime(&ms, e0, e1) == 400 && cuEventRecord(e0, stream) == 0 &&
                               cuEventRecord(e1, stream) == 0 && cuEventSynchronize(e1) == 0 &&
                               cuEventElapsedTime(&ms, e0, e1) == 0 && ms >= 0 && cuStreamSynchronize(stream) == 0 &&
                               cuEventDestroy_v2(e0) == 0 && cuEventDestroy_v2(e1) == 0);

  // Two streams (a second one copying to pinned memory, as distill's
  // asynchronous capture does): a copy on one stream of bytes another
  // stream's copy wrote is refused (CUDA_ERROR_ILLEGAL_STATE, 401) until an
  // event recorded after that write is waited on; waiting on an event not
  // yet recorded orders nothing; an overwrite of bytes the other stream
  // reads needs the reverse wait; a host synchronization orders too.
  {
    void *compute = 0, *copier = 0, *step = 0, *done = 0, *pin = 0;
    CUdeviceptr stage = 0;
    int race = cuStreamCreate(&compute, 1) == 0 && cuStreamCreate(&copier, 1) == 0 && cuEventCreate(&step, 2) == 0 &&
               cuEventCreate(&done, 2) == 0 && cuMemHostAlloc(&pin, N * 4, 0) == 0 && cuMemAlloc_v2(&stage, N * 4) == 0 &&
               cuMemcpyDtoDAsync_v2(stage, d, N * 4, compute) == 0 &&
               cuStreamWaitEvent(copier, step, 0) == 0 &&                  // not yet recorded: no order
               cuMemcpyDtoHAsync_v2(pin, stage, N * 4, copier) == 401 &&   // reads before the write is ordered
               cuEventRecord(step, compute) == 0 && cuStreamWaitEvent(copier, step, 0) == 0 &&
               cuMemcpyDtoHAsync_v2(pin, stage, N * 4, copier) == 0 &&     // ordered after the write
               cuMemcpyDtoHAsync_v2(pin, stage + 4, 8, compute) == 0 &&    // two reads never race
               cuMemcpyDtoDAsync_v2(stage, d2, N * 4, compute) == 401 &&  // overwrites what the copier reads
               cuEventRecord(done, copier) == 0 && cuStreamWaitEvent(compute, done, 0) == 0 &&
               cuMemcpyDtoDAsync_v2(stage, d2, N * 4, compute) == 0 &&    // after the copier's read
               cuMemcpyDtoHAsync_v2(pin, stage, N * 4, copier) == 401 &&  // the new write is not ordered yet
               cuStreamSynchronize(compute) == 0 &&                       // the host waited for it
               cuMemcpyDtoHAsync_v2(pin, stage, N * 4, copier) == 0 && cuStreamWaitEvent(copier, done, 1) == 1;
    cuMemcpyDtoH_v2(back, d2, N * 4);
    for (int i = 0; i < N; i++) race = race && ((float*)pin)[i] == back[i];
    report("stream_order", race && cuStreamDestroy_v2(copier) == 0 && cuStreamDestroy_v2(compute) == 0 &&
                               cuEventDestroy_v2(step) == 0 && cuEventDestroy_v2(done) == 0 && cuMemFreeHost(pin) == 0 &&
                               cuMemFree_v2(stage) == 0);
  }

  // A kernel from PTX text: only the .entry lines matter to the stand-in.
  const char* ptx =
      ".version 7.0\n.target sm_80\n.address_size 64\n"
      ".visible .entry drafter_sample_vadd(\n\t.param .u64 drafter_sample_vadd_param_0,\n"
      "\t.param .u64 drafter_sample_vadd_param_1,\n\t.param .u64 drafter_sample_vadd_param_2,\n"
      "\t.param .u32 drafter_sample_vadd_param_3\n)\n{\n\tret;\n}\n"
      ".visible .entry drafter_sample_block_sum(\n\t.param .u64 a,\n\t.param .u64 b,\n\t.param .u64 c\n)\n{\n\tret;\n}\n"
      ".visible .entry drafter_not_compiled_in(\n)\n{\n\tret;\n}\n";
  void *mod = 0, *fn = 0, *missing = 0;
  CUdeviceptr dc = 0;
  int n = N;
  void* params[] = {&dc, &d, &d2, &n};
  ok = cuMemAlloc_v2(&dc, N * 4) == 0 && cuMemcpyHtoD_v2(d, h, N * 4) == 0 && cuMemcpyHtoD_v2(d2, h, N * 4) == 0 &&
       cuModuleLoadDataEx(&mod, ptx, 0, 0, 0) == 0 && cuModuleGetFunction(&fn, mod, "drafter_sample_vadd") == 0 &&
       cuLaunchKernel(fn, (N + 127) / 128, 1, 1, 128, 1, 1, 0, stream, params, 0) == 0 &&
       cuMemcpyDtoH_v2(back, dc, N * 4) == 0;
  for (int i = 0; i < N; i++) ok = ok && back[i] == 2 * h[i];
  report("launch", ok);
  printf("   (the stand-in's messages below, on a name missing from the stand-in, a stale PTX\n"
         "    and a GEMM outside its allocation, are expected)\n");
  fflush(stdout);
  report("function_lookup", cuModuleGetFunction(&missing, mod, "drafter_sample_warp_sum") == 500 &&
                                cuModuleGetFunction(&missing, mod, "drafter_not_compiled_in") == 500 &&
                                cuModuleGetFunction(&missing, mod, "drafter_sample_block_sum") == 218 &&
                                cuModuleLoadDataEx(&missing, "not ptx", 0, 0, 0) == 218);
  report("launch_limits", cuLaunchKernel(fn, 1, 1, 1, 1025, 1, 1, 0, 0, params, 0) == 1 &&
                              cuLaunchKernel(fn, 1, 1, 1, 32, 1, 1, 64 * 1024, 0, params, 0) == 1 &&
                              cuFuncSetAttribute(fn, 8, 64 * 1024) == 0 &&
                              cuLaunchKernel(fn, 1, 1, 1, 32, 1, 1, 64 * 1024, 0, params, 0) == 0 &&
                              cuFuncSetAttribute(fn, 8, 200 * 1024) == 1 &&
                              cuLaunchKernel(fn, 0, 1, 1, 32, 1, 1, 0, 0, params, 0) == 1);

  // Stream capture and graphs: launches, copies and memsets are recorded, not
  // run; a replay runs them in order with the parameter values captured,
  // reading what device pointers point to at the replay.
  FN(CUresult, cuStreamBeginCapture_v2, (void*, int));
  FN(CUresult, cuStreamEndCapture, (void*, void**));
  FN(CUresult, cuStreamIsCapturing, (void*, int*));
  FN(CUresult, cuGraphGetNodes, (void*, void**, size_t*));
  FN(CUresult, cuGraphInstantiateWithFlags, (void**, void*, unsigned long long));
  FN(CUresult, cuGraphLaunch, (void*, void*));
  FN(CUresult, cuGraphExecDestroy, (void*));
  FN(CUresult, cuGraphDestroy, (void*));
  FN(CUresult, cuMemcpyHtoDAsync_v2, (CUdeviceptr, const void*, size_t, void*));
  FN(CUresult, cuCtxSynchronize, (void));
  {
    void *graph = 0, *exec = 0, *pin = 0;
    size_t nodes = 0;
    int st = -1;
    float zeros[N], h2[N];
    memset(zeros, 0, sizeof zeros);
    for (int i = 0; i < N; i++) h2[i] = (float)i;
    int half = N / 2;
    void* gparams[] = {&dc, &d, &d2, &half};
    ok = cuMemcpyHtoD_v2(dc, zeros, N * 4) == 0 && cuMemHostAlloc(&pin, N * 4, 0) == 0;
    memcpy(pin, h2, N * 4);
    ok = ok && cuStreamBeginCapture_v2(stream, 0) == 0 && cuStreamIsCapturing(stream, &st) == 0 && st == 1 &&
         cuMemcpyHtoDAsync_v2(d, pin, N * 4, stream) == 0 && cuMemsetD32Async(d2, 0x40000000u, N, stream) == 0 &&
         cuLaunchKernel(fn, (N + 127) / 128, 1, 1, 128, 1, 1, 0, stream, gparams, 0) == 0;
    half = 3;  // after the launch: the graph keeps the value it had
    ok = ok && cuStreamEndCapture(stream, &graph) == 0 && graph != 0 && cuStreamIsCapturing(stream, &st) == 0 &&
         st == 0 && cuGraphGetNodes(graph, 0, &nodes) == 0 && nodes == 3;
    // Nothing ran during the capture.
    ok = ok && cuMemcpyDtoH_v2(back, dc, N * 4) == 0;
    for (int i = 0; i < N; i++) ok = ok && back[i] == 0;
    report("capture_records", ok);
    // Two replays, the pinned source changed in between: each reads it anew.
    ok = cuGraphInstantiateWithFlags(&exec, graph, 0) == 0 && cuGraphLaunch(exec, stream) == 0 &&
         cuStreamSynchronize(stream) == 0 && cuMemcpyDtoH_v2(back, dc, N * 4) == 0;
    for (int i = 0; i < N; i++) ok = ok && back[i] == (i < N / 2 ? h2[i] + 2 : 0);
    for (int i = 0; i < N; i++) ((float*)pin)[i] = -h2[i];
    ok = ok && cuGraphLaunch(exec, stream) == 0 && cuMemcpyDtoH_v2(back, dc, N * 4) == 0;
    for (int i = 0; i < N; i++) ok = ok && back[i] == (i < N / 2 ? 2 - h2[i] : 0);
    report("graph_replay", ok);
    // What a capture forbids fails as on a GPU and invalidates it: a
    // synchronize, an allocation, a pageable copy; then every further call
    // on the stream and the end of the capture fail with INVALIDATED.
    void* g2 = (void*)1;
    CUdeviceptr tmp = 0;
    report("capture_sync_fails",
           cuStreamBeginCapture_v2(stream, 0) == 0 && cuStreamSynchronize(stream) == 900 &&
               cuStreamIsCapturing(stream, &st) == 0 && st == 2 &&
               cuLaunchKernel(fn, 1, 1, 1, 32, 1, 1, 0, stream, gparams, 0) == 901 &&
               cuStreamEndCapture(stream, &g2) == 901 && g2 == 0 && cuStreamSynchronize(stream) == 0);
    report("capture_alloc_fails", cuStreamBeginCapture_v2(stream, 0) == 0 && cuMemAlloc_v2(&tmp, 64) == 900 &&
                                      cuStreamEndCapture(stream, &g2) == 901 && g2 == 0);
    report("capture_relaxed_alloc", cuStreamBeginCapture_v2(stream, 2) == 0 && cuMemAlloc_v2(&tmp, 64) == 0 &&
                                        cuStreamEndCapture(stream, &g2) == 0 && g2 != 0 && cuGraphDestroy(g2) == 0 &&
                                        cuMemFree_v2(tmp) == 0);
    report("capture_pageable_copy_fails", cuStreamBeginCapture_v2(stream, 0) == 0 &&
                                              cuMemcpyHtoDAsync_v2(d, h2, N * 4, stream) == 900 &&
                                              cuStreamEndCapture(stream, &g2) == 901);
    report("capture_ctx_sync_fails", cuStreamBeginCapture_v2(stream, 0) == 0 && cuCtxSynchronize() == 900 &&
                                         cuStreamEndCapture(stream, &g2) == 901);
    report("capture_states", cuStreamBeginCapture_v2(0, 0) == 900 && cuStreamEndCapture(stream, &g2) == 401 &&
                                 cuStreamBeginCapture_v2(stream, 0) == 0 && cuStreamBeginCapture_v2(stream, 0) == 401 &&
                                 cuGraphLaunch(exec, stream) == 900 && cuStreamEndCapture(stream, &g2) == 901);
    // A replay after an operand was freed faults instead of writing freed memory.
    CUdeviceptr gone = 0;
    void *g3 = 0, *e3 = 0;
    ok = cuMemAlloc_v2(&gone, 64) == 0 && cuStreamBeginCapture_v2(stream, 2) == 0 &&
         cuMemsetD32Async(gone, 0, 16, stream) == 0 && cuStreamEndCapture(stream, &g3) == 0 &&
         cuGraphInstantiateWithFlags(&e3, g3, 0) == 0 && cuMemFree_v2(gone) == 0 && cuGraphLaunch(e3, stream) == 700;
    report("replay_checks_memory", ok && cuGraphExecDestroy(e3) == 0 && cuGraphDestroy(g3) == 0);
    report("graph_destroy", cuGraphExecDestroy(exec) == 0 && cuGraphDestroy(graph) == 0 &&
                                cuGraphDestroy(graph) == 400 && cuMemFreeHost(pin) == 0);
  }

  // cuBLAS.
  snprintf(path, sizeof path, "%s/libcublas.so.12", argv[1]);
  void* blas = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!blas) {
    fprintf(stderr, "%s\n", dlerror());
    return 1;
  }
  lib = blas;
  FN(int, cublasCreate_v2, (void**));
  FN(int, cublasDestroy_v2, (void*));
  FN(int, cublasSetStream_v2, (void*, void*));
  FN(int, cublasSetMathMode, (void*, int));
  FN(int, cublasGetVersion_v2, (void*, int*));
  FN(int, cublasGemmEx, (void*, int, int, int, int, int, const void*, const void*, int, int, const void*, int, int,
                         const void*, void*, int, int, int, int));
  FN(int, cublasGemmStridedBatchedEx, (void*, int, int, int, int, int, const void*, const void*, int, int, long long,
                                       const void*, int, int, long long, const void*, void*, int, int, long long, int,
                                       int, int));
  void* hb = 0;
  int bv = 0;
  report("cublas_handle", cublasCreate_v2(&hb) == 0 && cublasSetStream_v2(hb, stream) == 0 &&
                              cublasSetMathMode(hb, 0) == 0 && cublasGetVersion_v2(hb, &bv) == 0 && bv >= 120000);

  // GemmEx: every A/B type, every transpose pair, padded leading dimensions,
  // against a naive column-major reference; alpha and beta both used.
  enum { M = 13, K = 7, NN = 9, LD = 17, BATCH = 3 };
  const int types[3] = {0, 2, 14};
  const char* typeNames[3] = {"32F", "16F", "16BF"};
  float A[LD * LD * BATCH], B[LD * LD * BATCH], C0[LD * NN * BATCH], C[LD * NN * BATCH];
  uint16_t A16[LD * LD * BATCH], B16[LD * LD * BATCH];
  srand(1);
  for (int i = 0; i < LD * LD * BATCH; i++) {
    A[i] = (float)(rand() % 33 - 16) / 8;
    B[i] = (float)(rand() % 33 - 16) / 8;
  }
  for (int i = 0; i < LD * NN * BATCH; i++) C0[i] = (float)(rand() % 33 - 16) / 8;
  CUdeviceptr dA = 0, dB = 0, dC = 0;
  cuMemAlloc_v2(&dA, sizeof A);
  cuMemAlloc_v2(&dB, sizeof B);
  cuMemAlloc_v2(&dC, sizeof C);
  const float alpha = 1.5f, beta = -0.5f;
  for (int t = 0; t < 3; t++) {
    for (int i = 0; i < LD * LD * BATCH; i++) {
      A16[i] = types[t] == 2 ? to_f16(A[i]) : to_bf16(A[i]);
      B16[i] = types[t] == 2 ? to_f16(B[i]) : to_bf16(B[i]);
    }
    cuMemcpyHtoD_v2(dA, types[t] ? (const void*)A16 : (const void*)A, types[t] ? sizeof A16 : sizeof A);
    cuMemcpyHtoD_v2(dB, types[t] ? (const void*)B16 : (const void*)B, types[t] ? sizeof B16 : sizeof B);
    for (int ta = 0; ta < 2; ta++)
      for (int tb = 0; tb < 2; tb++)
        for (int batched = 0; batched < 2; batched++) {
          int batch = batched ? BATCH : 1;
          long long sA = LD * LD, sB = LD * LD, sC = LD * NN;
          cuMemcpyHtoD_v2(dC, C0, sizeof C0);
          int st = batched ? cublasGemmStridedBatchedEx(hb, ta, tb, M, NN, K, &alpha, (void*)(uintptr_t)dA, types[t],
                                                         LD, sA, (void*)(uintptr_t)dB, types[t], LD, sB, &beta,
                                                         (void*)(uintptr_t)dC, 0, LD, sC, batch, 68, -1)
                           : cublasGemmEx(hb, ta, tb, M, NN, K, &alpha, (void*)(uintptr_t)dA, types[t], LD,
                                          (void*)(uintptr_t)dB, types[t], LD, &beta, (void*)(uintptr_t)dC, 0, LD, 68, -1);
          cuMemcpyDtoH_v2(C, dC, sizeof C);
          ok = st == 0;
          for (int b = 0; b < batch; b++)
            for (int j = 0; j < NN; j++)
              for (int i = 0; i < M; i++) {
                double s = 0;
                for (int l = 0; l < K; l++) {
                  double a = ta ? A[b * sA + l + i * LD] : A[b * sA + i + l * LD];
                  double bb = tb ? B[b * sB + j + l * LD] : B[b * sB + l + j * LD];
                  s += a * bb;
                }
                double want = alpha * s + beta * C0[b * sC + i + j * LD];
                ok = ok && fabs(C[b * sC + i + j * LD] - want) <= 1e-5 * (1 + fabs(want));
              }
          // Padding rows (i >= M) of C are untouched.
          ok = ok && C[M] == C0[M] && C[LD - 1] == C0[LD - 1];
          char nm[64];
          snprintf(nm, sizeof nm, "gemm/%s/%c%c%s", typeNames[t], ta ? 'T' : 'N', tb ? 'T' : 'N',
                   batched ? "/strided_batched" : "");
          report(nm, ok);
        }
  }
  // beta == 0 ignores NaNs in C; argument checks.
  float nan = NAN;
  for (int i = 0; i < LD * NN; i++) C[i] = nan;
  cuMemcpyHtoD_v2(dA, A, sizeof A);
  cuMemcpyHtoD_v2(dB, B, sizeof B);
  cuMemcpyHtoD_v2(dC, C, sizeof C);
  const float zero = 0;
  ok = cublasGemmEx(hb, 0, 0, M, NN, K, &alpha, (void*)(uintptr_t)dA, 0, LD, (void*)(uintptr_t)dB, 0, LD, &zero,
                    (void*)(uintptr_t)dC, 0, LD, 68, -1) == 0 &&
       cuMemcpyDtoH_v2(C, dC, sizeof C) == 0;
  for (int j = 0; j < NN; j++)
    for (int i = 0; i < M; i++) ok = ok && !isnan(C[i + j * LD]);
  report("gemm/beta0_ignores_C", ok);
  // CUBLAS_COMPUTE_32F_FAST_16BF (75): 32F A and B, each value rounded to
  // bf16 (nearest even) before the float products. Values of 9 significant
  // bits (a 1/3 scaled) are not bf16: the result must be the product of the
  // rounded values, which is not the 32F product; 16BF operands are refused.
  {
    float Af[LD * LD], Bf[LD * LD];
    for (int i = 0; i < LD * LD; i++) {
      Af[i] = (float)((i % 37) - 18) / 3.0f;
      Bf[i] = (float)((i % 23) - 11) / 7.0f;
    }
    cuMemcpyHtoD_v2(dA, Af, sizeof Af);
    cuMemcpyHtoD_v2(dB, Bf, sizeof Bf);
    ok = cublasGemmEx(hb, 0, 1, M, NN, K, &alpha, (void*)(uintptr_t)dA, 0, LD, (void*)(uintptr_t)dB, 0, LD, &zero,
                      (void*)(uintptr_t)dC, 0, LD, 75, -1) == 0 &&
         cuMemcpyDtoH_v2(C, dC, sizeof C) == 0;
    int differs = 0;
    for (int j = 0; j < NN; j++)
      for (int i = 0; i < M; i++) {
        double s = 0, s32 = 0;
        for (int l = 0; l < K; l++) {
          s += (double)rne_bf16(Af[i + l * LD]) * rne_bf16(Bf[j + l * LD]);
          s32 += (double)Af[i + l * LD] * Bf[j + l * LD];
        }
        float want = (float)(alpha * s);
        ok = ok && C[i + j * LD] == want;
        differs += C[i + j * LD] != (float)(alpha * s32);
      }
    report("gemm/fast_16bf_rounds_inputs", ok && differs > 0);
    report("gemm/fast_16bf_needs_32F",
           cublasGemmEx(hb, 0, 0, M, NN, K, &alpha, (void*)(uintptr_t)dA, 14, LD, (void*)(uintptr_t)dB, 14, LD,
                        &zero, (void*)(uintptr_t)dC, 0, LD, 75, -1) == 15 &&
               cublasGemmEx(hb, 0, 0, M, NN, K, &alpha, (void*)(uintptr_t)dA, 0, LD, (void*)(uintptr_t)dB, 0, LD,
                            &zero, (void*)(uintptr_t)dC, 0, LD, 77, -1) == 15);
    // The cases below multiply A and B again.
    cuMemcpyHtoD_v2(dA, A, sizeof A);
    cuMemcpyHtoD_v2(dB, B, sizeof B);
  }
  void* pA = (void*)(uintptr_t)dA;
  void* pB = (void*)(uintptr_t)dB;
  void* pC = (void*)(uintptr_t)dC;
  report("gemm/argument_checks",
         cublasGemmEx(hb, 0, 0, M, NN, K, &alpha, pA, 0, M - 1, pB, 0, LD, &beta, pC, 0, LD, 68, -1) == 7 &&
             cublasGemmEx(hb, 1, 0, M, NN, K, &alpha, pA, 0, K - 1, pB, 0, LD, &beta, pC, 0, LD, 68, -1) == 7 &&
             cublasGemmEx(hb, 0, 0, M, NN, K, &alpha, pA, 0, LD, pB, 0, K - 1, &beta, pC, 0, LD, 68, -1) == 7 &&
             cublasGemmEx(hb, 0, 1, M, NN, K, &alpha, pA, 0, LD, pB, 0, NN - 1, &beta, pC, 0, LD, 68, -1) == 7 &&
             cublasGemmEx(hb, 0, 0, M, NN, K, &alpha, pA, 0, LD, pB, 0, LD, &beta, pC, 0, M - 1, 68, -1) == 7 &&
             cublasGemmEx(hb, 0, 0, -1, NN, K, &alpha, pA, 0, LD, pB, 0, LD, &beta, pC, 0, LD, 68, -1) == 7 &&
             cublasGemmEx(hb, 3, 0, M, NN, K, &alpha, pA, 0, LD, pB, 0, LD, &beta, pC, 0, LD, 68, -1) == 7 &&
             cublasGemmStridedBatchedEx(hb, 0, 0, M, NN, K, &alpha, pA, 0, LD, 0, pB, 0, LD, 0, &beta, pC, 0, LD, 0, -1,
                                        68, -1) == 7 &&
             // A batch past the end of C's allocation is refused, not written.
             cublasGemmStridedBatchedEx(hb, 0, 0, M, NN, K, &alpha, pA, 0, LD, 0, pB, 0, LD, 0, &beta, pC, 0, LD,
                                        LD * NN, BATCH + 1, 68, -1) == 13 &&
             cublasGemmEx(hb, 0, 0, M, NN, K, &alpha, pA, 2, LD, pB, 0, LD, &beta, pC, 0, LD, 68, -1) == 15);

  // cuBLAS in a capture: refused without a workspace (cublasSetWorkspace),
  // recorded with one, and run at each replay.
  {
    FN(int, cublasSetWorkspace_v2, (void*, void*, size_t));
    snprintf(path, sizeof path, "%s/libcuda.so.1", argv[1]);
    lib = dlopen(path, RTLD_NOW | RTLD_NOLOAD);
    FN(CUresult, cuStreamBeginCapture_v2, (void*, int));
    FN(CUresult, cuStreamEndCapture, (void*, void**));
    FN(CUresult, cuGraphInstantiateWithFlags, (void**, void*, unsigned long long));
    FN(CUresult, cuGraphLaunch, (void*, void*));
    FN(CUresult, cuGraphExecDestroy, (void*));
    FN(CUresult, cuGraphDestroy, (void*));
    void *g = 0, *e = 0;
    CUdeviceptr ws = 0;
    float Cb[LD * NN];
    for (int i = 0; i < LD * NN; i++) C[i] = 0;
    cuMemcpyHtoD_v2(dC, C, sizeof C);
    ok = cuStreamBeginCapture_v2(stream, 0) == 0 &&
         cublasGemmEx(hb, 0, 0, M, NN, K, &alpha, pA, 0, LD, pB, 0, LD, &zero, pC, 0, LD, 68, -1) == 15 &&
         cuStreamEndCapture(stream, &g) == 0 && cuGraphDestroy(g) == 0;
    report("cublas_capture_needs_workspace", ok);
    ok = cuMemAlloc_v2(&ws, 1 << 20) == 0 && cublasSetWorkspace_v2(hb, (void*)(uintptr_t)(ws + 8), 1024) == 7 &&
         cublasSetWorkspace_v2(hb, (void*)(uintptr_t)ws, 1 << 20) == 0 && cuStreamBeginCapture_v2(stream, 0) == 0 &&
         cublasGemmEx(hb, 0, 0, M, NN, K, &alpha, pA, 0, LD, pB, 0, LD, &zero, pC, 0, LD, 68, -1) == 0 &&
         cuStreamEndCapture(stream, &g) == 0 && cuMemcpyDtoH_v2(Cb, dC, sizeof Cb) == 0;
    for (int i = 0; i < LD * NN; i++) ok = ok && Cb[i] == 0;  // recorded, not run
    ok = ok && cuGraphInstantiateWithFlags(&e, g, 0) == 0 && cuGraphLaunch(e, stream) == 0 &&
         cuMemcpyDtoH_v2(Cb, dC, sizeof Cb) == 0;
    for (int j = 0; j < NN; j++)
      for (int i = 0; i < M; i++) {
        double sum = 0;
        for (int l = 0; l < K; l++) sum += (double)A[i + l * LD] * B[l + j * LD];
        ok = ok && fabs(Cb[i + j * LD] - alpha * sum) <= 1e-5 * (1 + fabs(alpha * sum));
      }
    report("cublas_capture_replay", ok && cuGraphExecDestroy(e) == 0 && cuGraphDestroy(g) == 0 &&
                                        cublasSetWorkspace_v2(hb, 0, 0) == 0 && cuMemFree_v2(ws) == 0);
    lib = blas;
  }

  report("teardown", cublasDestroy_v2(hb) == 0 && cuModuleUnload(mod) == 0 && cuStreamDestroy_v2(stream) == 0 &&
                         cuMemFree_v2(d) == 0 && cuMemFree_v2(d2) == 0 && cuMemFree_v2(dc) == 0 &&
                         cuMemFree_v2(dA) == 0 && cuMemFree_v2(dB) == 0 && cuMemFree_v2(dC) == 0 &&
                         cuMemGetInfo_v2(&free1, &tot) == 0 && free1 == free0 && cuDevicePrimaryCtxRelease_v2(0) == 0);
  return failures ? 1 : 0;
}
