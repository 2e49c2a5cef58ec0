// table.h: turns a kernel into an entry of the stand-in's kernel table (used
// by the generated kernels.cc only).
#ifndef DRAFTER_STANDIN_TABLE_H
#define DRAFTER_STANDIN_TABLE_H

#include <cstring>
#include <type_traits>

#include "kernels.h"

namespace standin {

// Params<P...>::bytes holds sizeof each parameter (never an empty array: a
// kernel without parameters gets one unused 0).
template <class... P>
struct Params {
  static constexpr int bytes[sizeof...(P) + 1] = {(int)sizeof(std::decay_t<P>)..., 0};
};

template <class... P>
constexpr int arity(void (*)(P...)) {
  return sizeof...(P);
}

template <class... P>
const int* paramBytes(void (*)(P...)) {
  return Params<P...>::bytes;
}

// launch<K> runs kernel K from cuLaunchKernel's arguments; sim::launchPacked
// unpacks params with the types deduced from K's signature.
template <auto K>
void launch(unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz, unsigned shared,
            void** params) {
  sim::launchPacked(K, dim3(gx, gy, gz), dim3(bx, by, bz), shared, params);
}

inline const drafter_standin_kernel* find(const drafter_standin_kernel* t, size_t n, const char* name) {
  for (size_t i = 0; i < n; i++)
    if (std::strcmp(t[i].name, name) == 0) return &t[i];
  return nullptr;
}

}  // namespace standin

// STANDIN_ENTRY(k) is kernel k's table entry.
#define STANDIN_ENTRY(name, k) \
  drafter_standin_kernel { name, standin::arity(&k), standin::paramBytes(&k), &standin::launch<&k> }

#endif  // DRAFTER_STANDIN_TABLE_H
