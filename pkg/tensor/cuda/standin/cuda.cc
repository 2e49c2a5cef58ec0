// cuda.cc: the stand-in libcuda.so.1, a CUDA driver that runs drafter's
// kernels on the CPU (kernels/sim), for testing the Go device without a GPU.
//
// It implements the driver entry points drafter uses with the real ABI and
// error codes, and checks its arguments at least as strictly as the driver:
//   - device memory is one mmap'ed arena kept PROT_NONE except inside the
//     stand-in's own calls, so a host read of a device pointer segfaults;
//     copies and memsets must lie inside one live allocation; fresh
//     allocations are filled with 0xff bytes (NaN) so code that relies on
//     zeroed memory fails here too;
//   - cuModuleLoadDataEx reads the .entry names (and parameter sizes) of the
//     PTX it is given; cuModuleGetFunction finds a kernel only if it is in the
//     PTX and compiled in (the generated table), and fails when the PTX's
//     parameters differ from the compiled kernel's (stale PTX);
//   - launches check grid, block and shared memory limits as an sm_80 GPU
//     does (dynamic shared memory over 48 KiB needs cuFuncSetAttribute);
//   - streams and events run everything synchronously, at enqueue;
//   - stream capture records instead, and graphs replay (graph.h), with the
//     driver's errors for what a capture forbids.
// Built with -DSTANDIN_INITFAIL, cuInit returns CUDA_ERROR_NO_DEVICE.
#include "standin.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <malloc.h>

#include "kernels.h"

#define API extern "C" __attribute__((visibility("default")))

typedef int CUresult;
typedef int CUdevice;
typedef unsigned long long CUdeviceptr;

enum : CUresult {
  CUDA_SUCCESS = 0,
  CUDA_ERROR_INVALID_VALUE = 1,
  CUDA_ERROR_OUT_OF_MEMORY = 2,
  CUDA_ERROR_NOT_INITIALIZED = 3,
  CUDA_ERROR_NO_DEVICE = 100,
  CUDA_ERROR_INVALID_DEVICE = 101,
  CUDA_ERROR_INVALID_CONTEXT = 201,
  CUDA_ERROR_INVALID_PTX = 218,
  CUDA_ERROR_INVALID_HANDLE = 400,
  CUDA_ERROR_ILLEGAL_STATE = 401,
  CUDA_ERROR_NOT_FOUND = 500,
};

namespace {

// ---- the device's facts: an A100-like sm_80 part.
constexpr int kCCMajor = 8, kCCMinor = 0, kSMs = 108;
constexpr int kSharedOptin = 166912;  // 163 KiB: an A100's opt-in maximum per block
constexpr int kSharedDefault = 48 * 1024;
constexpr int kDriverVersion = 12080;
constexpr size_t kAlign = 256;  // cuMemAlloc's alignment
constexpr size_t kHuge = size_t(2) << 20;

std::mutex mu;  // guards everything below; held while the arena is open
bool initialized = false;
int primaryRefs = 0;
thread_local void* currentCtx = nullptr;
char primaryCtx;  // the primary context's handle is its address

// ---- the arena
char* arenaBase = nullptr;
size_t arenaSize = 0;
size_t arenaHigh = 0;               // bytes from the base ever handed out (the part mprotect must cover)
std::map<size_t, size_t> freeList;  // offset -> size, coalesced
struct Block {
  size_t bytes;    // as asked for: copies and GEMM operands must stay inside
  size_t rounded;  // as taken from the free list
};
std::map<size_t, Block> live;  // offset -> live allocation
size_t liveBytes = 0;
int openDepth = 0;

size_t arenaBytes() {
  // DRAFTER_STANDIN_MEMORY (bytes, or with a K/M/G suffix) sets the size of
  // the device; 8 GiB by default. Only address space is reserved.
  size_t n = size_t(8) << 30;
  if (const char* s = getenv("DRAFTER_STANDIN_MEMORY")) {
    char* end;
    unsigned long long v = strtoull(s, &end, 10);
    if (*end == 'K' || *end == 'k') v <<= 10;
    if (*end == 'M' || *end == 'm') v <<= 20;
    if (*end == 'G' || *end == 'g') v <<= 30;
    if (v >= (1u << 20)) n = (size_t)v;
  }
  return n;
}

[[maybe_unused]] bool arenaInit() {  // unused in the initfail build
  if (arenaBase) return true;
  // Every call opens and closes the arena with mprotect, whose cost grows
  // with the number of page table entries: 2 MiB transparent huge pages
  // (aligned base, MADV_HUGEPAGE, protection changes in whole huge pages)
  // keep that to microseconds where 4 KiB pages took milliseconds.
  size_t n = arenaBytes();
  void* p = mmap(nullptr, n + kHuge, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) return false;
  arenaBase = reinterpret_cast<char*>((reinterpret_cast<uintptr_t>(p) + kHuge - 1) & ~(uintptr_t)(kHuge - 1));
  arenaSize = n;
  madvise(arenaBase, n, MADV_HUGEPAGE);  // a hint: without THP it is only slower
  freeList[0] = n;
  return true;
}

void protect(int prot) {
  size_t n = std::min(arenaSize, (arenaHigh + kHuge - 1) / kHuge * kHuge);
  if (n && mprotect(arenaBase, n, prot) != 0) {
    perror("stand-in libcuda: mprotect");
    abort();
  }
}

// open/close bracket every access to device memory (mu held).
void arenaOpen() {
  if (openDepth++ == 0) protect(PROT_READ | PROT_WRITE);
}
void arenaClose() {
  if (--openDepth == 0) protect(PROT_NONE);
}

bool inArena(CUdeviceptr p) {
  return arenaBase && p >= (CUdeviceptr)(uintptr_t)arenaBase && p < (CUdeviceptr)(uintptr_t)(arenaBase + arenaSize);
}

// inAllocation reports whether [p, p+n) lies in one live allocation.
bool inAllocation(CUdeviceptr p, size_t n) {
  if (!inArena(p)) return false;
  size_t off = (size_t)(p - (CUdeviceptr)(uintptr_t)arenaBase);
  auto it = live.upper_bound(off);
  if (it == live.begin()) return false;
  --it;
  return off - it->first <= it->second.bytes && n <= it->second.bytes - (off - it->first);
}

size_t allocate(size_t bytes) {  // first fit; returns SIZE_MAX when full
  size_t need = (bytes + kAlign - 1) / kAlign * kAlign;
  for (auto it = freeList.begin(); it != freeList.end(); ++it) {
    if (it->second < need) continue;
    size_t off = it->first, rest = it->second - need;
    freeList.erase(it);
    if (rest) freeList[off + need] = rest;
    live[off] = Block{bytes, need};
    liveBytes += need;
    if (off + need > arenaHigh) arenaHigh = off + need;
    return off;
  }
  return SIZE_MAX;
}

void release(size_t off) {
  size_t n = live[off].rounded;
  live.erase(off);
  liveBytes -= n;
  auto next = freeList.lower_bound(off);
  if (next != freeList.end() && next->first == off + n) {
    n += next->second;
    freeList.erase(next);
  }
  auto prev = freeList.lower_bound(off);
  if (prev != freeList.begin()) {
    --prev;
    if (prev->first + prev->second == off) {
      prev->second += n;
      return;
    }
  }
  freeList[off] = n;
}

// ---- handles
struct Module {
  struct Entry {
    std::vector<int> paramBytes;
  };
  std::map<std::string, Entry> entries;
};
struct Function {
  const drafter_standin_kernel* kernel;
  Module* module;
  int maxDynamicShared = kSharedDefault;
};
// ---- cross-stream ordering
//
// The stand-in runs the work of every stream at once, in call order, so two
// streams never actually overlap; what it checks instead is that the caller
// ORDERED them as a GPU needs: a copy's device bytes, read or written on one
// stream, must not have been written (for a read) or read or written (for a
// write) by a copy on another stream unless this stream is ordered after
// that access, by cuStreamWaitEvent on an event recorded after it, or by the
// host having synchronized with it (cuStreamSynchronize, cuEventSynchronize,
// cuCtxSynchronize) before the call. A violation fails the call with
// CUDA_ERROR_ILLEGAL_STATE and says what raced on stderr: a copy that reads
// before the event it should wait for was recorded, or that overwrites what
// another stream's copy has not yet been ordered to finish reading. Only
// copies are tracked (kernels' accesses are not known here), each stream's
// last kRecent of them; the NULL stream, which a real driver synchronizes
// with every blocking stream, is exempt.
constexpr size_t kRecent = 256;
struct Stream;
using Order = std::map<const Stream*, uint64_t>;  // per other stream: the last of its accesses this one follows
struct Access {
  CUdeviceptr lo, hi;
  uint64_t seq;
  bool write;
};
struct Stream {
  unsigned flags;
  Order after;
  uint64_t last = 0;  // the sequence number of its last access
  std::deque<Access> recent;
};
struct Event {
  bool recorded = false;
  std::chrono::steady_clock::time_point at;
  const Stream* stream = nullptr;  // where it was last recorded, with the order it carries
  uint64_t seq = 0;
  Order after;
};
std::set<Module*> modules;
std::set<Function*> functions;
std::set<Stream*> streams;
std::set<Event*> events;
std::set<void*> hostAllocs;

// Guards shared by the entry points (mu held).
CUresult ready() {
  if (!initialized) return CUDA_ERROR_NOT_INITIALIZED;
  if (currentCtx != &primaryCtx || primaryRefs == 0) return CUDA_ERROR_INVALID_CONTEXT;
  return CUDA_SUCCESS;
}
bool validStream(void* s) { return s == nullptr || streams.count(static_cast<Stream*>(s)); }

uint64_t accessSeq = 0;
Order hostAfter;  // what the host has synchronized with

void orderAfter(Order& dst, const Order& src) {
  for (const auto& [st, q] : src) dst[st] = std::max(dst[st], q);
}

// ordered checks (and records) a copy's access to device bytes [p, p+n) on
// stream sp, as the comment above says; false on a race.
bool ordered(const char* call, void* sp, CUdeviceptr p, size_t n, bool write) {
  if (!sp || n == 0) return true;
  Stream* s = static_cast<Stream*>(sp);
  orderAfter(s->after, hostAfter);
  for (Stream* o : streams) {
    if (o == s) continue;
    auto it = s->after.find(o);
    uint64_t seen = it == s->after.end() ? 0 : it->second;
    for (const Access& a : o->recent) {
      if (a.seq <= seen || a.hi <= p || p + n <= a.lo || (!write && !a.write)) continue;
      fprintf(stderr,
              "stand-in libcuda: %s on stream %p %s device bytes [%#llx, %#llx) that a copy on stream %p %s, "
              "with no event ordering the two (cuEventRecord after that copy, then cuStreamWaitEvent)\n",
              call, (void*)s, write ? "writes" : "reads", (unsigned long long)p, (unsigned long long)(p + n), (void*)o,
              a.write ? "wrote" : "reads");
      return false;
    }
  }
  s->last = ++accessSeq;
  s->recent.push_back(Access{p, p + n, s->last, write});
  if (s->recent.size() > kRecent) s->recent.pop_front();
  return true;
}

// The primary context's last release destroys what lived in it, as the driver does.
void destroyContext() {
  live.clear();
  freeList.clear();
  freeList[0] = arenaSize;
  liveBytes = 0;
  for (Function* f : functions) delete f;
  for (Module* m : modules) delete m;
  for (Stream* s : streams) delete s;
  for (Event* e : events) delete e;
  functions.clear();
  modules.clear();
  streams.clear();
  events.clear();
  hostAfter.clear();
}

// parsePTX fills m with the .entry names of ptx and their parameter sizes.
bool parsePTX(const char* ptx, Module* m) {
  if (!strstr(ptx, ".version") || !strstr(ptx, ".target")) return false;
  for (const char* p = strstr(ptx, ".entry"); p; p = strstr(p + 6, ".entry")) {
    const char* q = p + 6;
    while (*q == ' ' || *q == '\t') q++;
    const char* name = q;
    while (*q == '_' || *q == '$' || (*q >= '0' && *q <= '9') || (*q >= 'a' && *q <= 'z') || (*q >= 'A' && *q <= 'Z')) q++;
    if (q == name) return false;
    Module::Entry e;
    const char* open = q;
    while (*open == ' ' || *open == '\t' || *open == '\n' || *open == '\r') open++;
    if (*open == '(') {
      const char* close = strchr(open, ')');
      if (!close) return false;
      std::string params(open + 1, close);
      // Each parameter reads ".param [.align N] [.ptr ...] .TYPE name[...]";
      // its size is the type's bits (times an array length, for aggregates).
      for (size_t at = params.find(".param"); at != std::string::npos; at = params.find(".param", at + 6)) {
        size_t end = params.find(',', at);
        std::string one = params.substr(at + 6, end == std::string::npos ? std::string::npos : end - at - 6);
        int bytes = 0;
        for (size_t t = one.find('.'); t != std::string::npos && !bytes; t = one.find('.', t + 1)) {
          char kind = one[t + 1];
          int bits = atoi(one.c_str() + t + 2);
          if ((kind == 'u' || kind == 's' || kind == 'f' || kind == 'b') && bits >= 8) bytes = bits / 8;
        }
        size_t br = one.find('[');
        if (br != std::string::npos) bytes *= atoi(one.c_str() + br + 1);
        e.paramBytes.push_back(bytes);
      }
    }
    m->entries[std::string(name, q)] = e;
  }
  return true;
}

CUresult copy(void* dst, const void* src, size_t n) {
  arenaOpen();
  memmove(dst, src, n);
  arenaClose();
  return CUDA_SUCCESS;
}

void* host(CUdeviceptr p) { return reinterpret_cast<void*>((uintptr_t)p); }

}  // namespace

#include "graph.h"  // stream capture and graphs: the hooks the entry points below call

// ---------------------------------------------------------------- the bridge for cuBLAS

static int bridgeContains(unsigned long long p) {
  std::lock_guard<std::mutex> l(mu);
  return inArena(p);
}
static void bridgeEnter() {
  mu.lock();
  arenaOpen();
}
static int bridgeCheck(unsigned long long p, size_t n) { return inAllocation(p, n) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE; }
static void bridgeLeave() {
  arenaClose();
  mu.unlock();
}

API const struct drafter_standin_bridge* drafter_standin_get_bridge(void) {
  static const struct drafter_standin_bridge b = {DRAFTER_STANDIN_BRIDGE_VERSION, bridgeContains, bridgeEnter, bridgeCheck,
                                           bridgeLeave};
  return &b;
}

// ---------------------------------------------------------------- initialisation, errors, device

API CUresult cuInit(unsigned flags) {
  if (flags != 0) return CUDA_ERROR_INVALID_VALUE;
#ifdef STANDIN_INITFAIL
  return CUDA_ERROR_NO_DEVICE;
#else
  std::lock_guard<std::mutex> l(mu);
  if (!arenaInit()) return CUDA_ERROR_OUT_OF_MEMORY;
  initialized = true;
  return CUDA_SUCCESS;
#endif
}

API CUresult cuDriverGetVersion(int* v) {
  if (!v) return CUDA_ERROR_INVALID_VALUE;
  *v = kDriverVersion;
  return CUDA_SUCCESS;
}

namespace {
struct ErrorText {
  int code;
  const char* name;
  const char* text;
};
// The driver's names and texts for the codes the stand-ins return.
const ErrorText errorTexts[] = {
    {0, "CUDA_SUCCESS", "no error"},
    {1, "CUDA_ERROR_INVALID_VALUE", "invalid argument"},
    {2, "CUDA_ERROR_OUT_OF_MEMORY", "out of memory"},
    {3, "CUDA_ERROR_NOT_INITIALIZED", "initialization error"},
    {4, "CUDA_ERROR_DEINITIALIZED", "driver shutting down"},
    {100, "CUDA_ERROR_NO_DEVICE", "no CUDA-capable device is detected"},
    {101, "CUDA_ERROR_INVALID_DEVICE", "invalid device ordinal"},
    {200, "CUDA_ERROR_INVALID_IMAGE", "device kernel image is invalid"},
    {201, "CUDA_ERROR_INVALID_CONTEXT", "invalid device context"},
    {218, "CUDA_ERROR_INVALID_PTX", "a PTX JIT compilation failed"},
    {400, "CUDA_ERROR_INVALID_HANDLE", "invalid resource handle"},
    {401, "CUDA_ERROR_ILLEGAL_STATE", "the operation is not permitted in the current state"},
    {500, "CUDA_ERROR_NOT_FOUND", "named symbol not found"},
    {600, "CUDA_ERROR_NOT_READY", "device not ready"},
    {700, "CUDA_ERROR_ILLEGAL_ADDRESS", "an illegal memory access was encountered"},
    {701, "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES", "too many resources requested for launch"},
    {900, "CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED", "operation not permitted when stream is capturing"},
    {901, "CUDA_ERROR_STREAM_CAPTURE_INVALIDATED", "operation failed due to a previous error during capture"},
    {999, "CUDA_ERROR_UNKNOWN", "unknown error"},
};
const ErrorText* findError(int code) {
  for (const ErrorText& e : errorTexts)
    if (e.code == code) return &e;
  return nullptr;
}
}  // namespace

API CUresult cuGetErrorName(CUresult code, const char** s) {
  if (!s) return CUDA_ERROR_INVALID_VALUE;
  const ErrorText* e = findError(code);
  *s = e ? e->name : nullptr;
  return e ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

API CUresult cuGetErrorString(CUresult code, const char** s) {
  if (!s) return CUDA_ERROR_INVALID_VALUE;
  const ErrorText* e = findError(code);
  *s = e ? e->text : nullptr;
  return e ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

API CUresult cuDeviceGetCount(int* n) {
  std::lock_guard<std::mutex> l(mu);
  if (!initialized) return CUDA_ERROR_NOT_INITIALIZED;
  if (!n) return CUDA_ERROR_INVALID_VALUE;
  *n = 1;
  return CUDA_SUCCESS;
}

API CUresult cuDeviceGet(CUdevice* d, int ordinal) {
  std::lock_guard<std::mutex> l(mu);
  if (!initialized) return CUDA_ERROR_NOT_INITIALIZED;
  if (!d) return CUDA_ERROR_INVALID_VALUE;
  if (ordinal != 0) return CUDA_ERROR_INVALID_DEVICE;
  *d = 0;
  return CUDA_SUCCESS;
}

API CUresult cuDeviceGetName(char* name, int len, CUdevice d) {
  std::lock_guard<std::mutex> l(mu);
  if (!initialized) return CUDA_ERROR_NOT_INITIALIZED;
  if (d != 0) return CUDA_ERROR_INVALID_DEVICE;
  if (!name || len <= 0) return CUDA_ERROR_INVALID_VALUE;
  snprintf(name, (size_t)len, "%s", "drafter stand-in (CPU simulator)");
  return CUDA_SUCCESS;
}

API CUresult cuDeviceGetAttribute(int* v, int attr, CUdevice d) {
  std::lock_guard<std::mutex> l(mu);
  if (!initialized) return CUDA_ERROR_NOT_INITIALIZED;
  if (d != 0) return CUDA_ERROR_INVALID_DEVICE;
  if (!v) return CUDA_ERROR_INVALID_VALUE;
  switch (attr) {
    case 1: *v = 1024; break;         // MAX_THREADS_PER_BLOCK
    case 2: case 3: *v = 1024; break;  // MAX_BLOCK_DIM_X, _Y
    case 4: *v = 64; break;           // MAX_BLOCK_DIM_Z
    case 5: *v = 2147483647; break;   // MAX_GRID_DIM_X
    case 6: case 7: *v = 65535; break;  // MAX_GRID_DIM_Y, _Z
    case 8: *v = kSharedDefault; break;  // MAX_SHARED_MEMORY_PER_BLOCK
    case 10: *v = 32; break;          // WARP_SIZE
    case 12: *v = 65536; break;       // MAX_REGISTERS_PER_BLOCK
    case 16: *v = kSMs; break;        // MULTIPROCESSOR_COUNT
    case 39: *v = 2048; break;        // MAX_THREADS_PER_MULTIPROCESSOR
    case 75: *v = kCCMajor; break;    // COMPUTE_CAPABILITY_MAJOR
    case 76: *v = kCCMinor; break;    // COMPUTE_CAPABILITY_MINOR
    case 81: *v = 167936; break;      // MAX_SHARED_MEMORY_PER_MULTIPROCESSOR
    case 97: *v = kSharedOptin; break;  // MAX_SHARED_MEMORY_PER_BLOCK_OPTIN
    default: return CUDA_ERROR_INVALID_VALUE;
  }
  return CUDA_SUCCESS;
}

API CUresult cuDeviceTotalMem_v2(size_t* bytes, CUdevice d) {
  std::lock_guard<std::mutex> l(mu);
  if (!initialized) return CUDA_ERROR_NOT_INITIALIZED;
  if (d != 0) return CUDA_ERROR_INVALID_DEVICE;
  if (!bytes) return CUDA_ERROR_INVALID_VALUE;
  *bytes = arenaSize;
  return CUDA_SUCCESS;
}

// ---------------------------------------------------------------- contexts

API CUresult cuDevicePrimaryCtxRetain(void** ctx, CUdevice d) {
  std::lock_guard<std::mutex> l(mu);
  if (!initialized) return CUDA_ERROR_NOT_INITIALIZED;
  if (d != 0) return CUDA_ERROR_INVALID_DEVICE;
  if (!ctx) return CUDA_ERROR_INVALID_VALUE;
  primaryRefs++;
  *ctx = &primaryCtx;
  return CUDA_SUCCESS;
}

API CUresult cuDevicePrimaryCtxRelease_v2(CUdevice d) {
  std::lock_guard<std::mutex> l(mu);
  if (!initialized) return CUDA_ERROR_NOT_INITIALIZED;
  if (d != 0) return CUDA_ERROR_INVALID_DEVICE;
  if (primaryRefs == 0) return CUDA_ERROR_INVALID_CONTEXT;
  if (--primaryRefs == 0) destroyContext();
  return CUDA_SUCCESS;
}

API CUresult cuCtxSetCurrent(void* ctx) {
  std::lock_guard<std::mutex> l(mu);
  if (!initialized) return CUDA_ERROR_NOT_INITIALIZED;
  if (ctx != nullptr && (ctx != &primaryCtx || primaryRefs == 0)) return CUDA_ERROR_INVALID_CONTEXT;
  currentCtx = ctx;
  return CUDA_SUCCESS;
}

API CUresult cuCtxSynchronize(void) {
  std::lock_guard<std::mutex> l(mu);
  if (CUresult r = ready()) return r;
  if (!captures.empty()) {  // it would wait for a capturing stream
    for (auto& c : captures) c.second.invalid = true;
    return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
  }
  for (Stream* st : streams) hostAfter[st] = std::max(hostAfter[st], st->last);
  return CUDA_SUCCESS;
}

// ---------------------------------------------------------------- memory

API CUresult cuMemGetInfo_v2(size_t* freeBytes, size_t* total) {
  std::lock_guard<std::mutex> l(mu);
  if (CUresult r = ready()) return r;
  if (!freeBytes || !total) return CUDA_ERROR_INVALID_VALUE;
  *freeBytes = arenaSize - liveBytes;
  *total = arenaSize;
  return CUDA_SUCCESS;
}

API CUresult cuMemAlloc_v2(CUdeviceptr* p, size_t bytes) {
  std::lock_guard<std::mutex> l(mu);
  if (CUresult r = ready()) return r;
  if (unsafeDuringCapture()) return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
  if (!p || bytes == 0) return CUDA_ERROR_INVALID_VALUE;
  size_t off = allocate(bytes);
  if (off == SIZE_MAX) return CUDA_ERROR_OUT_OF_MEMORY;
  *p = (CUdeviceptr)(uintptr_t)(arenaBase + off);
  // NaN-fill what a test could plausibly read; huge buffers (KV caches sized
  // from free memory) are left alone rather than committed page by page.
  if (bytes <= (size_t(64) << 20)) {
    arenaOpen();
    memset(arenaBase + off, 0xff, bytes);
    arenaClose();
  }
  return CUDA_SUCCESS;
}

API CUresult cuMemFree_v2(CUdeviceptr p) {
  std::lock_guard<std::mutex> l(mu);
  if (CUresult r = ready()) return r;
  if (unsafeDuringCapture()) return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
  if (p == 0) return CUDA_SUCCESS;
  if (!inArena(p) || !live.count((size_t)(p - (CUdeviceptr)(uintptr_t)arenaBase))) return CUDA_ERROR_INVALID_VALUE;
  release((size_t)(p - (CUdeviceptr)(uintptr_t)arenaBase));
  return CUDA_SUCCESS;
}

API CUresult cuMemHostAlloc(void** p, size_t bytes, unsigned flags) {
  std::lock_guard<std::mutex> l(mu);
  if (CUresult r = ready()) return r;
  if (unsafeDuringCapture()) return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
  if (!p || bytes == 0 || flags > 7) return CUDA_ERROR_INVALID_VALUE;
  void* m = aligned_alloc(4096, (bytes + 4095) / 4096 * 4096);
  if (!m) return CUDA_ERROR_OUT_OF_MEMORY;
  hostAllocs.insert(m);
  *p = m;
  return CUDA_SUCCESS;
}

API CUresult cuMemFreeHost(void* p) {
  std::lock_guard<std::mutex> l(mu);
  if (CUresult r = ready()) return r;
  if (unsafeDuringCapture()) return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
  if (!hostAllocs.erase(p)) return CUDA_ERROR_INVALID_VALUE;
  free(p);
  return CUDA_SUCCESS;
}

// The copies: the device side must lie in one allocation, the host side must
// not be device memory (the driver would take a device pointer passed as a
// host pointer as an unregistered host address and fault).
API CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dst, const void* src, size_t n, void* stream) {
  std::lock_guard<std::mutex> l(mu);
  if (CUresult r = ready()) return r;
  if (!validStream(stream)) return CUDA_ERROR_INVALID_HANDLE;
  if (n == 0) return CUDA_SUCCESS;
  if (!src || !inAllocation(dst, n) || inArena((CUdeviceptr)(uintptr_t)src)) return CUDA_ERROR_INVALID_VALUE;
  if (Capture* c = capturing(stream)) {
    if (c->invalid) return CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
    if (!pinned(src)) return c->invalid = true, CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    return record(c, copyNode(Node::HTOD, dst, 0, nullptr, src, n, 0));
  }
  if (!ordered("cuMemcpyHtoDAsync_v2", stream, dst, n, true)) return CUDA_ERROR_ILLEGAL_STATE;
  return copy(host(dst), src, n);
}

API CUresult cuMemcpyDtoHAsync_v2(void* dst, CUdeviceptr src, size_t n, void* stream) {
  std::lock_guard<std::mutex> l(mu);
  if (CUresult r = ready()) return r;
  if (!validStream(stream)) return CUDA_ERROR_INVALID_HANDLE;
  if (n == 0) return CUDA_SUCCESS;
  if (!dst || !inAllocation(src, n) || inArena((CUdeviceptr)(uintptr_t)dst)) return CUDA_ERROR_INVALID_VALUE;
  if (Capture* c = capturing(stream)) {
    if (c->invalid) return CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
    if (!pinned(dst)) return c->invalid = true, CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    return record(c, copyNode(Node::DTOH, 0, src, dst, nullptr, n, 0));
  }
  if (!ordered("cuMemcpyDtoHAsync_v2", stream, src, n, false)) return CUDA_ERROR_ILLEGAL_STATE;
  return copy(dst, host(src), n);
}

API CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr dst, CUdeviceptr src, size_t n, void* stream) {
  std::lock_guard<std::mutex> l(mu);
  if (CUresult r = ready()) return r;
  if (!validStream(stream)) return CUDA_ERROR_INVALID_HANDLE;
  if (n == 0) return CUDA_SUCCESS;
  if (!inAllocation(dst, n) || !inAllocation(src, n)) return CUDA_ERROR_INVALID_VALUE;
  if (Capture* c = capturing(stream)) return record(c, copyNode(Node::DTOD, dst, src, nullptr, nullptr, n, 0));
  if (!ordered("cuMemcpyDtoDAsync_v2", stream, src, n, false) || !ordered("cuMemcpyDtoDAsync_v2", stream, dst, n, true))
    return CUDA_ERROR_ILLEGAL_STATE;
  return copy(host(dst), host(src), n);
}

API CUresult cuMemcpyHtoD_v2(CUdeviceptr dst, const void* src, size_t n) { return cuMemcpyHtoDAsync_v2(dst, src, n, nullptr); }
API CUresult cuMemcpyDtoH_v2(void* dst, CUdeviceptr src, size_t n) { return cuMemcpyDtoHAsync_v2(dst, src, n, nullptr); }
API CUresult cuMemcpyDtoD_v2(CUdeviceptr dst, CUdeviceptr src, size_t n) { return cuMemcpyDtoDAsync_v2(dst, src, n, nullptr); }

API CUresult cuMemsetD8Async(CUdeviceptr dst, unsigned char v, size_t n, void* stream) {
  std::lock_guard<std::mutex> l(mu);
  if (CUresult r = ready()) return r;
  if (!validStream(stream)) return CUDA_ERROR_INVALID_HANDLE;
  if (n == 0) return CUDA_SUCCESS;
  if (!inAllocation(dst, n)) return CUDA_ERROR_INVALID_VALUE;
  if (Capture* c = capturing(stream)) return record(c, copyNode(Node::MEMSET8, dst, 0, nullptr, nullptr, n, v));
  arenaOpen();
  memset(host(dst), v, n);
  arenaClose();
  return CUDA_SUCCESS;
}

API CUresult cuMemsetD32Async(CUdeviceptr dst, unsigned v, size_t n, void* stream) {
  std::lock_guard<std::mutex> l(mu);
  if (CUresult r = ready()) return r;
  if (!validStream(stream)) return CUDA_ERROR_INVALID_HANDLE;
  if (n == 0) return CUDA_SUCCESS;
  if (dst % 4 != 0 || n > SIZE_MAX / 4 || !inAllocation(dst, n * 4)) return CUDA_ERROR_INVALID_VALUE;
  if (Capture* c = capturing(stream)) return record(c, copyNode(Node::MEMSET32, dst, 0, nullptr, nullptr, n, v));
  arenaOpen();
  unsigned* p = static_cast<unsigned*>(host(dst));
  for (size_t i = 0; i < n; i++) p[i] = v;
  arenaClose();
  return CUDA_SUCCESS;
}

API CUresult cuMemsetD8_v2(CUdeviceptr dst, unsigned char v, size_t n) { return cuMemsetD8Async(dst, v, n, nullptr); }
API CUresult cuMemsetD32_v2(CUdeviceptr dst, unsigned v, size_t n) { return cuMemsetD32Async(dst, v, n, nullptr); }

// ---------------------------------------------------------------- modules and launches

API CUresult cuModuleLoadDataEx(void** mod, const void* image, unsigned nopts, int* opts, void** vals) {
  std::lock_guard<std::mutex> l(mu);
  if (CUresult r = ready()) return r;
  if (!mod || !image || (nopts && (!opts || !vals))) return CUDA_ERROR_INVALID_VALUE;
  Module* m = new Module;
  if (!parsePTX(static_cast<const char*>(image), m)) {
    delete m;
    return CUDA_ERROR_INVALID_PTX;
  }
  modules.insert(m);
  *mod = m;
  return CUDA_SUCCESS;
}

API CUresult cuModuleUnload(void* mod) {
  std::lock_guard<std::mutex> l(mu);
  if (CUresult r = ready()) return r;
  Module* m = static_cast<Module*>(mod);
  if (!modules.erase(m)) return CUDA_ERROR_INVALID_HANDLE;
  for (auto it = functions.begin(); it != functions.end();) {
    if ((*it)->module == m) {
      delete *it;
      it = functions.erase(it);
    } else {
      ++it;
    }
  }
  delete m;
  return CUDA_SUCCESS;
}

API CUresult cuModuleGetFunction(void** fn, void* mod, const char* name) {
  std::lock_guard<std::mutex> l(mu);
  if (CUresult r = ready()) return r;
  Module* m = static_cast<Module*>(mod);
  if (!fn || !name) return CUDA_ERROR_INVALID_VALUE;
  if (!modules.count(m)) return CUDA_ERROR_INVALID_HANDLE;
  auto e = m->entries.find(name);
  if (e == m->entries.end()) return CUDA_ERROR_NOT_FOUND;
  const drafter_standin_kernel* k = drafter_standin_find_kernel(name);
  if (!k) {
    fprintf(stderr, "stand-in libcuda: %s is in the PTX but not compiled into the stand-in (rebuild it: make cuda-standin)\n", name);
    return CUDA_ERROR_NOT_FOUND;
  }
  // The PTX's parameters must be the compiled kernel's: a difference means
  // the committed PTX is stale (make ptx).
  bool same = (int)e->second.paramBytes.size() == k->nparams;
  for (int i = 0; same && i < k->nparams; i++) same = e->second.paramBytes[i] == k->paramBytes[i];
  if (!same) {
    fprintf(stderr, "stand-in libcuda: %s: the PTX's parameters differ from the compiled kernel's (stale PTX? make ptx)\n", name);
    return CUDA_ERROR_INVALID_PTX;
  }
  Function* f = new Function{k, m};
  functions.insert(f);
  *fn = f;
  return CUDA_SUCCESS;
}

API CUresult cuFuncSetAttribute(void* fn, int attr, int value) {
  std::lock_guard<std::mutex> l(mu);
  if (CUresult r = ready()) return r;
  Function* f = static_cast<Function*>(fn);
  if (!functions.count(f)) return CUDA_ERROR_INVALID_HANDLE;
  switch (attr) {
    case 8:  // MAX_DYNAMIC_SHARED_SIZE_BYTES
      if (value < 0 || value > kSharedOptin) return CUDA_ERROR_INVALID_VALUE;
      f->maxDynamicShared = value;
      return CUDA_SUCCESS;
    case 9:  // PREFERRED_SHARED_MEMORY_CARVEOUT
      if (value < -1 || value > 100) return CUDA_ERROR_INVALID_VALUE;
      return CUDA_SUCCESS;
    default:
      return CUDA_ERROR_INVALID_VALUE;
  }
}

API CUresult cuLaunchKernel(void* fn, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                            unsigned shared, void* stream, void** params, void** extra) {
  std::lock_guard<std::mutex> l(mu);
  if (CUresult r = ready()) return r;
  Function* f = static_cast<Function*>(fn);
  if (!functions.count(f) || !validStream(stream)) return CUDA_ERROR_INVALID_HANDLE;
  if (extra || (!params && f->kernel->nparams > 0)) return CUDA_ERROR_INVALID_VALUE;
  if (gx == 0 || gy == 0 || gz == 0 || gx > 2147483647u || gy > 65535 || gz > 65535) return CUDA_ERROR_INVALID_VALUE;
  if (bx == 0 || by == 0 || bz == 0 || bx > 1024 || by > 1024 || bz > 64 || (unsigned long long)bx * by * bz > 1024)
    return CUDA_ERROR_INVALID_VALUE;
  if ((int)shared > f->maxDynamicShared) return CUDA_ERROR_INVALID_VALUE;
  if (Capture* c = capturing(stream)) return recordKernel(c, f, gx, gy, gz, bx, by, bz, shared, params);
  arenaOpen();
  f->kernel->launch(gx, gy, gz, bx, by, bz, shared, params);
  arenaClose();
  return CUDA_SUCCESS;
}

// ---------------------------------------------------------------- streams and events (synchronous)

API CUresult cuStreamCreate(void** s, unsigned flags) {
  std::lock_guard<std::mutex> l(mu);
  if (CUresult r = ready()) return r;
  if (!s || flags > 1) return CUDA_ERROR_INVALID_VALUE;
  Stream* st = new Stream;
  st->flags = flags;
  streams.insert(st);
  *s = st;
  return CUDA_SUCCESS;
}

API CUresult cuStreamDestroy_v2(void* s) {
  std::lock_guard<std::mutex> l(mu);
  if (CUresult r = ready()) return r;
  Stream* st = static_cast<Stream*>(s);
  if (!streams.erase(st)) return CUDA_ERROR_INVALID_HANDLE;
  if (Capture* c = capturing(s)) {  // the capture ends with the stream
    delete c->graph;
    captures.erase(st);
  }
  // Forget it everywhere: a later stream may reuse its address.
  hostAfter.erase(st);
  for (Stream* o : streams) o->after.erase(st);
  for (Event* ev : events) {
    ev->after.erase(st);
    if (ev->stream == st) ev->stream = nullptr;
  }
  delete st;
  return CUDA_SUCCESS;
}

API CUresult cuStreamSynchronize(void* s) {
  std::lock_guard<std::mutex> l(mu);
  if (CUresult r = ready()) return r;
  if (!validStream(s)) return CUDA_ERROR_INVALID_HANDLE;
  if (Capture* c = capturing(s)) return c->invalid = true, CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
  if (Stream* st = static_cast<Stream*>(s)) {
    hostAfter[st] = std::max(hostAfter[st], st->last);
    orderAfter(hostAfter, st->after);
  }
  return CUDA_SUCCESS;
}

API CUresult cuEventCreate(void** e, unsigned flags) {
  std::lock_guard<std::mutex> l(mu);
  if (CUresult r = ready()) return r;
  if (!e || flags > 0xf) return CUDA_ERROR_INVALID_VALUE;
  Event* ev = new Event;
  events.insert(ev);
  *e = ev;
  return CUDA_SUCCESS;
}

API CUresult cuEventRecord(void* e, void* s) {
  std::lock_guard<std::mutex> l(mu);
  if (CUresult r = ready()) return r;
  Event* ev = static_cast<Event*>(e);
  if (!events.count(ev) || !validStream(s)) return CUDA_ERROR_INVALID_HANDLE;
  ev->recorded = true;
  ev->at = std::chrono::steady_clock::now();
  ev->stream = static_cast<Stream*>(s);
  ev->seq = ev->stream ? ev->stream->last : 0;
  ev->after = ev->stream ? ev->stream->after : Order{};
  return CUDA_SUCCESS;
}

API CUresult cuEventSynchronize(void* e) {
  std::lock_guard<std::mutex> l(mu);
  if (CUresult r = ready()) return r;
  Event* ev = static_cast<Event*>(e);
  if (!events.count(ev)) return CUDA_ERROR_INVALID_HANDLE;
  if (ev->stream) {
    hostAfter[ev->stream] = std::max(hostAfter[ev->stream], ev->seq);
    orderAfter(hostAfter, ev->after);
  }
  return CUDA_SUCCESS;
}

// cuStreamWaitEvent orders the stream's later work after the event's last
// record (nothing, as on a GPU, for an event never recorded: the copies
// that follow are then unordered, which ordered() reports).
API CUresult cuStreamWaitEvent(void* s, void* e, unsigned flags) {
  std::lock_guard<std::mutex> l(mu);
  if (CUresult r = ready()) return r;
  Event* ev = static_cast<Event*>(e);
  if (!events.count(ev) || !validStream(s)) return CUDA_ERROR_INVALID_HANDLE;
  if (flags != 0) return CUDA_ERROR_INVALID_VALUE;
  Stream* st = static_cast<Stream*>(s);
  if (st && ev->stream && ev->stream != st) {
    st->after[ev->stream] = std::max(st->after[ev->stream], ev->seq);
    orderAfter(st->after, ev->after);
  }
  return CUDA_SUCCESS;
}

API CUresult cuEventElapsedTime(float* ms, void* start, void* end) {
  std::lock_guard<std::mutex> l(mu);
  if (CUresult r = ready()) return r;
  Event *a = static_cast<Event*>(start), *b = static_cast<Event*>(end);
  if (!ms) return CUDA_ERROR_INVALID_VALUE;
  if (!events.count(a) || !events.count(b) || !a->recorded || !b->recorded) return CUDA_ERROR_INVALID_HANDLE;
  *ms = std::chrono::duration<float, std::milli>(b->at - a->at).count();
  return CUDA_SUCCESS;
}

API CUresult cuEventDestroy_v2(void* e) {
  std::lock_guard<std::mutex> l(mu);
  if (CUresult r = ready()) return r;
  if (!events.erase(static_cast<Event*>(e))) return CUDA_ERROR_INVALID_HANDLE;
  delete static_cast<Event*>(e);
  return CUDA_SUCCESS;
}
