// cudasim.cc: the fiber scheduler behind cudasim.h.
//
// One launch at a time (a mutex): static __shared__ variables exist once, and
// the pool's fibers serve one block at a time. A block's threads start in a
// FIFO run queue. A thread runs until it waits at a barrier (block or warp)
// or finishes, and then switches straight to the thread at the head of the
// queue (no trip through the scheduler: one context switch per thread and
// barrier). A waiting thread is recorded by its barrier; the last live
// participant to arrive opens the barrier, queues the waiters and simply
// continues. When the queue is empty control returns to the scheduler: the
// block is done, or it deadlocked. Threads that exit leave the barriers'
// counts, as on the GPU.
#include "cudasim.h"

#include <dlfcn.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <new>

#if defined(__SANITIZE_ADDRESS__)
#define SIM_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define SIM_ASAN 1
#endif
#endif
#if defined(__SANITIZE_THREAD__)
#define SIM_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define SIM_TSAN 1
#endif
#endif

#ifdef SIM_ASAN
#include <sanitizer/common_interface_defs.h>
#endif
#ifdef SIM_TSAN
#include <sanitizer/tsan_interface.h>
#endif

// The context switch: hand-written for x86-64 (a few instructions), else
// swapcontext (portable, but a system call per switch for the signal mask).
// -DSIM_UCONTEXT forces the portable one, to test it.
#if defined(__x86_64__) && !defined(SIM_UCONTEXT)
#define SIM_ASM_SWITCH 1
#else
#include <ucontext.h>
#endif

namespace sim {
namespace detail {

std::atomic<ThreadVars*> current{nullptr};

namespace {

// ---- happens-before annotations (no-ops without TSan)
#ifdef SIM_TSAN
inline void hbRelease(void* a) { __tsan_release(a); }
inline void hbAcquire(void* a) { __tsan_acquire(a); }
#else
inline void hbRelease(void*) {}
inline void hbAcquire(void*) {}
#endif

enum State { kReady, kWaitBlock, kWaitWarp, kDone };
constexpr int kMaxThreads = 1024;
constexpr int kMaxWarps = kMaxThreads / 32;
constexpr size_t kStack = size_t(1) << 18;  // per fiber
constexpr size_t kGuard = size_t(1) << 16;  // PROT_NONE below each stack: a multiple of any page size
constexpr size_t kRegionBytes = (kStack + kGuard) * kMaxThreads;

// Scheduler bookkeeping is touched by fibers and by the scheduler, which TSan
// sees as different threads: relaxed atomics (plain moves on one OS thread).
typedef std::atomic<int> Count;
typedef std::atomic<unsigned> Gen;

struct Fiber {
  ThreadVars vars;
  void* sp = nullptr;  // saved stack pointer while suspended (x86-64)
#if !defined(SIM_ASM_SWITCH)
  ucontext_t uc;
#endif
  int index = 0, lane = 0, warp = 0;
  std::atomic<int> state{kDone};  // for the deadlock report
  unsigned shflParity = 0;  // which of the warp's two slot rows the next warp op uses
  void* stackLo = nullptr;
  size_t stackSize = 0;
  void* tsan = nullptr;
};

struct Barrier {
  Count arrived{0}, expected{0};
  Gen gen{0};
  Count* waiters = nullptr;  // the threads (indices) that wait, in arrival order
  char hb[2];                // TSan sync addresses, one per generation parity
};

struct Warp {
  Barrier bar;
  int size = 0;
  uint64_t slots[2][32];
  unsigned tags[2][32];  // the barrier generation each slot was written for
};

struct Pool {
  char* region = nullptr;  // the stacks
  Fiber fibers[kMaxThreads];
  int created = 0;
  Barrier block;
  Warp warps[kMaxWarps];
  Count blockWaiters[kMaxThreads];
  Count warpWaiters[kMaxWarps][32];
  // The run queue: a ring of thread indices; a thread is in it at most once.
  Count queue[kMaxThreads];
  Count head{0}, tail{0};
  Body body = nullptr;
  void* arg = nullptr;
  const void* kernel = nullptr;
  char startHB, doneHB;
  // The scheduler's side: its saved context and, for the sanitizers, stack and fiber.
  void* schedSp = nullptr;
#if !defined(SIM_ASM_SWITCH)
  ucontext_t schedUc;
#endif
  const void* schedStackLo = nullptr;
  size_t schedStackSize = 0;
  std::atomic<void*> schedTsan{nullptr};  // set per launch, read by fibers after the block's last release
};

Pool* newPool() {
  Pool* p = new Pool;
  p->block.waiters = p->blockWaiters;
  for (int w = 0; w < kMaxWarps; w++) p->warps[w].bar.waiters = p->warpWaiters[w];
  return p;
}

// The pool, made by the first launch (under launchMu) and never destroyed:
// fibers may be parked in it at exit. A plain pointer rather than a function
// static: the fibers read it on every barrier and shuffle.
std::mutex launchMu;  // one launch at a time
Pool* thePool = nullptr;
inline Pool& pool() { return *thePool; }

// ---- the run queue
void push(Pool& p, int i) {
  int t = p.tail.load(std::memory_order_relaxed);
  p.queue[t % kMaxThreads].store(i, std::memory_order_relaxed);
  p.tail.store(t + 1, std::memory_order_relaxed);
}

Fiber* pop(Pool& p) {
  int h = p.head.load(std::memory_order_relaxed);
  if (h == p.tail.load(std::memory_order_relaxed)) return nullptr;
  p.head.store(h + 1, std::memory_order_relaxed);
  return &p.fibers[p.queue[h % kMaxThreads].load(std::memory_order_relaxed)];
}

// open queues the first `waiting` recorded waiters of b and starts b's next generation.
void open(Pool& p, Barrier& b, int waiting) {
  for (int i = 0; i < waiting; i++) push(p, b.waiters[i].load(std::memory_order_relaxed));
  b.arrived.store(0, std::memory_order_relaxed);
  b.gen.store(b.gen.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
}

// ---- context switch
#if defined(SIM_ASM_SWITCH)
// Saves the callee-saved registers on the current stack, stores the stack
// pointer in *save, loads `to` and pops the target's registers. A new fiber's
// stack is prepared to "return" into fiberStart.
extern "C" void drafter_sim_switch(void** save, void* to);
asm(R"(
  .text
  .p2align 4
  .type drafter_sim_switch,@function
drafter_sim_switch:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
  .size drafter_sim_switch, .-drafter_sim_switch
)");
#endif

#ifdef SIM_ASAN
// noteSchedulerStack records the stack a fiber was resumed from when that was
// the scheduler's (not one of the fiber stacks), for switching back to it.
void noteSchedulerStack(const void* lo, size_t size) {
  Pool& p = pool();
  const char* c = static_cast<const char*>(lo);
  if (c >= p.region && c < p.region + kRegionBytes) return;
  p.schedStackLo = lo;
  p.schedStackSize = size;
}
#endif

// Switch from the running context to another, telling the sanitizers.
// fromFiber is null for the scheduler.
void switchTo(Fiber* from, Fiber* to) {
  Pool& p = pool();
#ifdef SIM_ASAN
  void* fake = nullptr;
  if (to) __sanitizer_start_switch_fiber(&fake, to->stackLo, to->stackSize);
  else __sanitizer_start_switch_fiber(&fake, p.schedStackLo, p.schedStackSize);
#endif
#ifdef SIM_TSAN
  __tsan_switch_to_fiber(to ? to->tsan : p.schedTsan.load(std::memory_order_relaxed), __tsan_switch_to_fiber_no_sync);
#endif
#if defined(SIM_ASM_SWITCH)
  drafter_sim_switch(from ? &from->sp : &p.schedSp, to ? to->sp : p.schedSp);
#else
  swapcontext(from ? &from->uc : &p.schedUc, to ? &to->uc : &p.schedUc);
#endif
#ifdef SIM_ASAN
  // Back in `from`. When it came from the scheduler, a fiber learns the
  // scheduler's stack here (the launching OS thread can change).
  const void* lo;
  size_t size;
  __sanitizer_finish_switch_fiber(fake, &lo, &size);
  noteSchedulerStack(lo, size);
#endif
}

// yield passes control from f (waiting, or done for this block) to the
// thread at the head of the run queue, or to the scheduler when it is empty.
// A finished thread's last reads of block state are the ones here: only then
// does it release what the scheduler acquires before rewriting that state.
void yield(Fiber* f, bool finished) {
  Pool& p = pool();
  Fiber* next = pop(p);
  if (next) {
    next->state.store(kReady, std::memory_order_relaxed);
    current.store(&next->vars, std::memory_order_relaxed);
  }
  if (finished) hbRelease(&p.doneHB);
  switchTo(f, next);
}

Fiber* running() { return reinterpret_cast<Fiber*>(self()); }

void arrive(Barrier& b, Fiber* f, State wait);

// A thread's kernel returned: it leaves the barriers' counts (completing any
// barrier the others already wait at) and parks until the next block.
void finish(Fiber* f) {
  Pool& p = pool();
  f->state.store(kDone, std::memory_order_relaxed);
  Barrier* bars[2] = {&p.block, &p.warps[f->warp].bar};
  for (Barrier* b : bars) {
    int e = b->expected.load(std::memory_order_relaxed) - 1;
    b->expected.store(e, std::memory_order_relaxed);
    int a = b->arrived.load(std::memory_order_relaxed);
    if (a > 0 && a == e) {  // everyone else waits here: open it
      hbRelease(&b->hb[b->gen.load(std::memory_order_relaxed) & 1]);
      open(p, *b, a);
    }
  }
  yield(f, true);
}

[[noreturn]] void fiberStart() {
  Pool& p = pool();
  Fiber* f = running();
#ifdef SIM_ASAN
  const void* lo;
  size_t size;
  __sanitizer_finish_switch_fiber(nullptr, &lo, &size);
  noteSchedulerStack(lo, size);
#endif
  for (;;) {
    hbAcquire(&p.startHB);
    p.body(p.arg);
    finish(f);
  }
}

#if !defined(SIM_ASM_SWITCH)
void fiberStartUc() { fiberStart(); }
#endif

// Each fiber's stack is kStack bytes of one reserved region, above a
// PROT_NONE guard (an overflow faults instead of corrupting a
// neighbour). Stack tops are staggered by 576 bytes (9 cache lines) per fiber:
// aligned tops would put every fiber's hot frames in the same cache sets, and
// the switch from fiber to fiber would miss the cache every time.
Fiber* newFiber(Pool& p, int i) {
  if (!p.region) {
    void* r = mmap(nullptr, kRegionBytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (r == MAP_FAILED) fail("cannot reserve fiber stacks");
    p.region = static_cast<char*>(r);
  }
  char* lo = p.region + (size_t)i * (kStack + kGuard) + kGuard;
  if (mprotect(lo, kStack, PROT_READ | PROT_WRITE) != 0) fail("cannot map a fiber stack");
  Fiber* f = &p.fibers[i];
  f->stackLo = lo;
  f->stackSize = kStack;
  char* top = lo + kStack - (size_t)(i * 576) % 65536;
#if defined(SIM_ASM_SWITCH)
  // drafter_sim_switch pops six registers and returns: the return address
  // sits at a 16-byte boundary so fiberStart starts with the ABI's alignment.
  void** sp = reinterpret_cast<void**>(top - 16);
  sp[1] = nullptr;  // fiberStart's own (never used) return address
  sp[0] = reinterpret_cast<void*>(&fiberStart);
  sp -= 6;
  for (int r = 0; r < 6; r++) sp[r] = nullptr;
  f->sp = sp;
#else
  getcontext(&f->uc);
  f->uc.uc_stack.ss_sp = f->stackLo;
  f->uc.uc_stack.ss_size = (size_t)(top - lo);
  f->uc.uc_link = nullptr;
  makecontext(&f->uc, fiberStartUc, 0);
#endif
#ifdef SIM_TSAN
  f->tsan = __tsan_create_fiber(0);
#endif
  return f;
}

// Waits until every live participant of b has arrived. The last to arrive
// opens the barrier (queueing the others) and continues; the others record
// themselves and yield. TSan: each arrival releases into the generation's
// sync address and each departure acquires from it.
void arrive(Barrier& b, Fiber* f, State wait) {
  Pool& p = pool();
  unsigned g = b.gen.load(std::memory_order_relaxed);
  hbRelease(&b.hb[g & 1]);
  int a = b.arrived.load(std::memory_order_relaxed) + 1;
  if (a == b.expected.load(std::memory_order_relaxed)) {
    open(p, b, a - 1);
  } else {
    b.waiters[a - 1].store(f->index, std::memory_order_relaxed);
    b.arrived.store(a, std::memory_order_relaxed);
    f->state.store(wait, std::memory_order_relaxed);
    yield(f, false);
  }
  hbAcquire(&b.hb[g & 1]);
}

const char* kernelName(const void* k) {
  Dl_info info;
  if (k && dladdr(k, &info) && info.dli_sname) return info.dli_sname;
  return "a kernel";
}

Warp& warpOf(Fiber* f, unsigned mask, const char* op) {
  Warp& w = pool().warps[f->warp];
  if (mask != 0xffffffffu) {
    std::fprintf(stderr, "cudasim: %s with mask %#x: only the full mask 0xffffffff is supported\n", op, mask);
    std::abort();
  }
  if (w.size != 32) {
    std::fprintf(stderr, "cudasim: %s in a warp of %d threads (blockDim must be a multiple of 32)\n", op, w.size);
    std::abort();
  }
  return w;
}

}  // namespace

void fail(const char* what) {
  std::fprintf(stderr, "cudasim: %s\n", what);
  std::abort();
}

void syncthreads() {
  Fiber* f = running();
  arrive(pool().block, f, kWaitBlock);
}

void syncwarp(unsigned mask) {
  Fiber* f = running();
  arrive(warpOf(f, mask, "__syncwarp").bar, f, kWaitWarp);
}

uint64_t shfl(unsigned mask, uint64_t bits, int mode, int arg, int width) {
  Fiber* f = running();
  Warp& w = warpOf(f, mask, "a shuffle");
  if (width <= 0 || width > 32 || (width & (width - 1))) fail("shuffle width must be a power of two up to 32");
  // Two rows of slots used alternately: a lane can only overwrite a row after
  // every lane passed the next warp op's barrier, so after everyone read it.
  unsigned row = f->shflParity, g = w.bar.gen.load(std::memory_order_relaxed);
  f->shflParity ^= 1;
  w.slots[row][f->lane] = bits;
  w.tags[row][f->lane] = g;
  arrive(w.bar, f, kWaitWarp);
  // PTX shfl.sync's rule: segments of width lanes; idx wraps within the
  // segment, bfly and down may not go past its last lane, up not before its
  // first (bfly may reach an earlier segment). Otherwise a lane keeps its value.
  int lane = f->lane, seg = lane & ~(width - 1), last = seg + width - 1, src = lane;
  switch (mode) {
    case 0: src = seg | (arg & (width - 1)); break;
    case 1: src = lane ^ arg; if (src < 0 || src > last) src = lane; break;
    case 2: src = lane + arg; if (src > last) src = lane; break;
    default: src = lane - arg; if (src < seg) src = lane; break;
  }
  if (w.tags[row][src] != g) fail("a shuffle reads a lane that did not take part (it exited)");
  return w.slots[row][src];
}

unsigned ballot(unsigned mask, int pred) {
  Fiber* f = running();
  Warp& w = warpOf(f, mask, "a vote");
  unsigned row = f->shflParity, g = w.bar.gen.load(std::memory_order_relaxed);
  f->shflParity ^= 1;
  w.slots[row][f->lane] = pred != 0;
  w.tags[row][f->lane] = g;
  arrive(w.bar, f, kWaitWarp);
  unsigned r = 0;  // lanes that exited vote 0, as inactive lanes do on the GPU
  for (int l = 0; l < 32; l++)
    if (w.tags[row][l] == g && w.slots[row][l]) r |= 1u << l;
  return r;
}

void run(dim3 grid, dim3 block, size_t dynamicSharedBytes, Body body, void* arg, const void* kernel) {
  unsigned long long nt = (unsigned long long)block.x * block.y * block.z;
  if (nt == 0 || nt > kMaxThreads || grid.x == 0 || grid.y == 0 || grid.z == 0) {
    std::fprintf(stderr, "cudasim: %s: bad launch grid (%u,%u,%u) block (%u,%u,%u)\n", kernelName(kernel), grid.x, grid.y,
                 grid.z, block.x, block.y, block.z);
    std::abort();
  }
  const int n = (int)nt;
  std::lock_guard<std::mutex> lock(launchMu);
  if (!thePool) thePool = newPool();
  Pool& p = *thePool;
  for (; p.created < n; p.created++) newFiber(p, p.created);
  p.body = body;
  p.arg = arg;
  p.kernel = kernel;
#ifdef SIM_TSAN
  p.schedTsan.store(__tsan_get_current_fiber(), std::memory_order_relaxed);
#endif
  // Dynamic shared memory: exactly the bytes asked for (ASan catches an
  // overrun), filled with NaN bytes so a read before a write shows.
  unsigned char* dyn = nullptr;
  if (dynamicSharedBytes) {
    dyn = static_cast<unsigned char*>(::operator new[](dynamicSharedBytes, std::align_val_t(16)));
    std::memset(dyn, 0xff, dynamicSharedBytes);
  }
  const int nwarps = (n + 31) / 32;
  for (unsigned bz = 0; bz < grid.z; bz++)
    for (unsigned by = 0; by < grid.y; by++)
      for (unsigned bx = 0; bx < grid.x; bx++) {
        p.block.arrived.store(0, std::memory_order_relaxed);
        p.block.expected.store(n, std::memory_order_relaxed);
        for (int w = 0; w < nwarps; w++) {
          Warp& wp = p.warps[w];
          wp.size = n - 32 * w < 32 ? n - 32 * w : 32;
          std::memset(wp.tags, 0xff, sizeof wp.tags);
          wp.bar.arrived.store(0, std::memory_order_relaxed);
          wp.bar.expected.store(wp.size, std::memory_order_relaxed);
        }
        for (int i = 0; i < n; i++) {
          Fiber* f = &p.fibers[i];
          f->vars.tid = uint3{(unsigned)i % block.x, (unsigned)i / block.x % block.y, (unsigned)i / (block.x * block.y)};
          f->vars.bid = uint3{bx, by, bz};
          f->vars.bdim = block;
          f->vars.gdim = grid;
          f->vars.dynamicShared = dyn;
          f->index = i;
          f->lane = i % 32;
          f->warp = i / 32;
          f->shflParity = 0;
          f->state.store(kReady, std::memory_order_relaxed);
        }
        p.head.store(0, std::memory_order_relaxed);
        p.tail.store(0, std::memory_order_relaxed);
        for (int i = 1; i < n; i++) push(p, i);
        hbRelease(&p.startHB);
        // Thread 0 starts; the threads pass control among themselves and
        // return here when none can run.
        current.store(&p.fibers[0].vars, std::memory_order_relaxed);
        switchTo(nullptr, &p.fibers[0]);
        int atBlock = 0, atWarp = 0, done = 0;
        for (int i = 0; i < n; i++) {
          int s = p.fibers[i].state.load(std::memory_order_relaxed);
          atBlock += s == kWaitBlock;
          atWarp += s == kWaitWarp;
          done += s == kDone;
        }
        if (done != n) {
          std::fprintf(stderr,
                       "cudasim: %s deadlocked in block (%u,%u,%u): %d threads wait at __syncthreads, %d at warp "
                       "operations, %d have exited (divergent barrier or shuffle?)\n",
                       kernelName(kernel), bx, by, bz, atBlock, atWarp, done);
          std::abort();
        }
        hbAcquire(&p.doneHB);
      }
  ::operator delete[](dyn, std::align_val_t(16));
}

}  // namespace detail
}  // namespace sim
