// standin.h: what the stand-in libcuda.so.1 shares with the stand-in cuBLAS.
//
// Device memory is one PROT_NONE arena owned by libcuda, opened (made
// read-write) only inside the stand-ins' own calls. cuBLAS finds the libcuda
// instance that owns its operands through the exported drafter_standin_get_bridge
// (drafter dlopens both libraries RTLD_LOCAL, so cuBLAS looks through the
// loaded objects rather than the global symbol scope; see cublas.cc).
#ifndef DRAFTER_STANDIN_H
#define DRAFTER_STANDIN_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

struct drafter_standin_bridge {
  int version;  // DRAFTER_STANDIN_BRIDGE_VERSION
  // contains reports whether ptr lies in this instance's arena.
  int (*contains)(unsigned long long ptr);
  // enter takes the stand-in's lock and opens the arena; leave closes it and
  // unlocks. Between the two, check reports whether [ptr, ptr+bytes) lies in
  // one live allocation (0) or not (CUDA_ERROR_INVALID_VALUE).
  void (*enter)(void);
  int (*check)(unsigned long long ptr, size_t bytes);
  void (*leave)(void);
};

#define DRAFTER_STANDIN_BRIDGE_VERSION 1

const struct drafter_standin_bridge* drafter_standin_get_bridge(void);

#ifdef __cplusplus
}
#endif

#endif  // DRAFTER_STANDIN_H
