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

// drafter_standin_capture is how the stand-in cuBLAS takes part in a stream
// capture (graph.h): capturing reports whether stream is capturing; record
// records run(arg) as a node of the stream's capture, to run at each replay
// of the graph (drop(arg) frees it with the last graph), and returns 1, or 0
// when the stream is not capturing (the caller runs the work now), or minus
// the CUresult of an invalidated capture.
struct drafter_standin_capture {
  int version;  // DRAFTER_STANDIN_CAPTURE_VERSION
  int (*capturing)(void* stream);
  int (*record)(void* stream, void (*run)(void*), void* arg, void (*drop)(void*));
};

#define DRAFTER_STANDIN_CAPTURE_VERSION 1

const struct drafter_standin_capture* drafter_standin_get_capture(void);

#ifdef __cplusplus
}
#endif

#endif  // DRAFTER_STANDIN_H
