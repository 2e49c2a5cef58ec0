// cudasim.h: run CUDA C kernels on the CPU (compat.h includes it under -DDRAFTER_CUDA_SIM).
//
// A launch runs its blocks one after the other on the calling OS thread. The
// threads of a block are fibers (user-level threads with stacks of their own,
// kept in a persistent pool, so a launch costs microseconds): a fiber runs
// until it reaches __syncthreads or a warp operation and then passes control
// to the next runnable thread; it runs again once every live thread of its
// block (or warp) has arrived. OS threads would be the literal model, but a
// block of 256 CUDA threads on a 2-core machine would then pay hundreds of
// kernel context switches per barrier, milliseconds per launch.
//
// Checks a GPU would not make: warp operations need the full mask and whole
// warps; a shuffle reading a lane that exited, or a deadlock (a divergent
// __syncthreads or shuffle), aborts with a message naming the kernel.
//
// Under -fsanitize=thread each fiber is a TSan fiber switched without implied
// synchronisation, and the barriers say which accesses they order, so a
// missing __syncthreads between two threads' accesses to shared memory is
// reported as a data race, as it would be a race on the GPU.
//
// Static __shared__ variables become function statics: one copy, which is
// right because blocks run one at a time and launches are serialised. Their
// contents persist from block to block (on a GPU they start undefined).
//
// Usage (kernel tests):
//   sim::launch(dim3(gx), dim3(256), dynamicSharedBytes, drafter_kernel, args...);
#ifndef DRAFTER_CUDA_SIM_H
#define DRAFTER_CUDA_SIM_H

#include <atomic>
#include <cfloat>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <tuple>
#include <type_traits>
#include <utility>

#define __host__
#define __device__
#define __global__
#define __shared__ static
#define __constant__ static
#define __forceinline__ inline
#define __noinline__ __attribute__((noinline))
#define __align__(n) __attribute__((aligned(n)))
#define __launch_bounds__(...)
// __restrict__ is a keyword of g++ and clang++ already.

struct uint3 {
  unsigned x, y, z;
};
struct dim3 {
  unsigned x, y, z;
  constexpr dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
};
constexpr int warpSize = 32;

namespace sim {
namespace detail {

// The part of a fiber's state that kernel code reads. current points at the
// running thread's: one launch runs at a time, on one OS thread, and the
// scheduler sets it before resuming a fiber (relaxed atomic: TSan sees the
// scheduler and the fibers as different threads).
struct ThreadVars {
  uint3 tid;  // threadIdx
  uint3 bid;  // blockIdx
  dim3 bdim;  // blockDim
  dim3 gdim;  // gridDim
  unsigned char* dynamicShared;
};
extern std::atomic<ThreadVars*> current;
inline ThreadVars* self() { return current.load(std::memory_order_relaxed); }

typedef void (*Body)(void* arg);
void run(dim3 grid, dim3 block, size_t dynamicSharedBytes, Body body, void* arg, const void* kernel);
void syncthreads();
void syncwarp(unsigned mask);
// Warp exchange: every lane of the warp publishes bits and gets the bits of
// lane src(lane) (mode: 0 idx, 1 xor, 2 down, 3 up; width a power of two <= 32).
uint64_t shfl(unsigned mask, uint64_t bits, int mode, int arg, int width);
unsigned ballot(unsigned mask, int pred);
[[noreturn]] void fail(const char* what);

template <class T>
T shflT(unsigned mask, T v, int mode, int arg, int width) {
  static_assert(sizeof(T) <= 8 && std::is_trivially_copyable<T>::value, "shuffle of an unsupported type");
  uint64_t bits = 0;
  std::memcpy(&bits, &v, sizeof(T));
  bits = shfl(mask, bits, mode, arg, width);
  T r;
  std::memcpy(&r, &bits, sizeof(T));
  return r;
}

template <class... P, size_t... I>
void launchPacked(void (*kernel)(P...), dim3 grid, dim3 block, size_t shared, void** params,
                  std::index_sequence<I...>);

}  // namespace detail

// launch runs kernel over grid x block on the CPU and returns when every block
// has finished. args convert to the kernel's parameter types as in a call.
template <class... P, class... A>
void launch(dim3 grid, dim3 block, size_t dynamicSharedBytes, void (*kernel)(P...), A&&... args) {
  static_assert(sizeof...(P) == sizeof...(A), "sim::launch: wrong number of kernel arguments");
  struct Job {
    void (*kernel)(P...);
    std::tuple<std::decay_t<P>...> params;
  } job{kernel, std::tuple<std::decay_t<P>...>(static_cast<std::decay_t<P>>(std::forward<A>(args))...)};
  detail::run(
      grid, block, dynamicSharedBytes, [](void* j) { std::apply(static_cast<Job*>(j)->kernel, static_cast<Job*>(j)->params); },
      &job, reinterpret_cast<const void*>(kernel));
}

// launchPacked is cuLaunchKernel's form: params[i] points at the i-th
// argument, whose type is the kernel's i-th parameter type.
template <class... P>
void launchPacked(void (*kernel)(P...), dim3 grid, dim3 block, size_t dynamicSharedBytes, void** params) {
  detail::launchPacked(kernel, grid, block, dynamicSharedBytes, params, std::index_sequence_for<P...>());
}

template <class... P, size_t... I>
void detail::launchPacked(void (*kernel)(P...), dim3 grid, dim3 block, size_t shared, void** params,
                          std::index_sequence<I...>) {
  (void)params;  // unused for a kernel without parameters
  launch(grid, block, shared, kernel, *static_cast<std::decay_t<P>*>(params[I])...);
}

}  // namespace sim

#define threadIdx (::sim::detail::self()->tid)
#define blockIdx (::sim::detail::self()->bid)
#define blockDim (::sim::detail::self()->bdim)
#define gridDim (::sim::detail::self()->gdim)
#define DYNAMIC_SHARED(type, name) type* name = reinterpret_cast<type*>(::sim::detail::self()->dynamicShared)

inline void __syncthreads() { sim::detail::syncthreads(); }
inline void __syncwarp(unsigned mask = 0xffffffffu) { sim::detail::syncwarp(mask); }
inline void __threadfence() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
inline void __threadfence_block() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }

template <class T>
inline T __shfl_sync(unsigned mask, T v, int src, int width = 32) { return sim::detail::shflT(mask, v, 0, src, width); }
template <class T>
inline T __shfl_xor_sync(unsigned mask, T v, int laneMask, int width = 32) { return sim::detail::shflT(mask, v, 1, laneMask, width); }
template <class T>
inline T __shfl_down_sync(unsigned mask, T v, unsigned delta, int width = 32) { return sim::detail::shflT(mask, v, 2, (int)delta, width); }
template <class T>
inline T __shfl_up_sync(unsigned mask, T v, unsigned delta, int width = 32) { return sim::detail::shflT(mask, v, 3, (int)delta, width); }
inline unsigned __ballot_sync(unsigned mask, int pred) { return sim::detail::ballot(mask, pred); }
inline int __any_sync(unsigned mask, int pred) { return sim::detail::ballot(mask, pred) != 0; }
inline int __all_sync(unsigned mask, int pred) { return sim::detail::ballot(mask, pred) == mask; }

// Atomics: every fiber runs on one OS thread, but the __atomic builtins keep
// TSan informed (and the code right should the simulator ever run blocks in parallel).
template <class T>
inline T simAtomicUpdate_(T* p, T (*op)(T, T), T v) {
  T old;
  __atomic_load(p, &old, __ATOMIC_RELAXED);
  T next = op(old, v);
  while (!__atomic_compare_exchange(p, &old, &next, false, __ATOMIC_SEQ_CST, __ATOMIC_RELAXED)) next = op(old, v);
  return old;
}
inline float atomicAdd(float* p, float v) { return simAtomicUpdate_<float>(p, [](float a, float b) { return a + b; }, v); }
inline double atomicAdd(double* p, double v) { return simAtomicUpdate_<double>(p, [](double a, double b) { return a + b; }, v); }
inline int atomicAdd(int* p, int v) { return __atomic_fetch_add(p, v, __ATOMIC_SEQ_CST); }
inline unsigned atomicAdd(unsigned* p, unsigned v) { return __atomic_fetch_add(p, v, __ATOMIC_SEQ_CST); }
inline unsigned long long atomicAdd(unsigned long long* p, unsigned long long v) { return __atomic_fetch_add(p, v, __ATOMIC_SEQ_CST); }
inline int atomicMax(int* p, int v) { return simAtomicUpdate_<int>(p, [](int a, int b) { return a > b ? a : b; }, v); }
inline int atomicMin(int* p, int v) { return simAtomicUpdate_<int>(p, [](int a, int b) { return a < b ? a : b; }, v); }
inline int atomicExch(int* p, int v) { return __atomic_exchange_n(p, v, __ATOMIC_SEQ_CST); }
inline int atomicCAS(int* p, int cmp, int v) {
  __atomic_compare_exchange_n(p, &cmp, v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
  return cmp;
}

// CUDA math that libm lacks; the rest (expf, logf, ...) is libm's.
inline float rsqrtf(float x) { return 1.0f / std::sqrt(x); }
using std::isinf;
using std::isnan;

#endif  // DRAFTER_CUDA_SIM_H
