// A model runner's backend that counts what the runner allocates instead of
// allocating it, keeping for attention what the CPU kernels keep (or
// another backend's state_elements, the CUDA backend's): running
// a runner's allocate() over it gives the bytes a real pass allocates, so
// a model's declared activation memory (model.h activation_bytes) comes
// from the same code as the allocation.
#pragma once

#include <cstdint>

#include "cpu/attention.h"

namespace dscore::transformer {

// What a backend's attention keeps for backward, in scalar elements.
using StateElements = int64_t (*)(int64_t B, int64_t Tn, int64_t NH);

template <class Scalar_, class Stat_>
struct CountingBackend {
  using Scalar = Scalar_;
  using Stat = Stat_;
  int64_t attention_state_elements(int64_t B, int64_t Tn, int64_t NH) const {
    return state_elements(B, Tn, NH);
  }
  template <typename X>
  struct Buffer {
    X* get() const { return nullptr; }
  };
  template <typename X>
  Buffer<X> alloc(int64_t n) {
    bytes += static_cast<uint64_t>(n) * sizeof(X);
    return {};
  }
  uint64_t bytes = 0;
  StateElements state_elements = &cpu::attention_state_elements;
};

// Bytes Runner<Counter>::allocate(batch, bf16_operands) takes over a backend
// of these types (Runner: the gpt or llama runner template), made for
// blocks [lo, hi) (all of them by default; a pipeline stage's runner its
// own): the model's declared activation memory, from the same code path as
// its allocation.
template <template <class> class Runner, class Scalar, class Stat, class Config, class Params>
uint64_t runner_allocation_bytes(const Config& config, const Params& params, int64_t batch,
                                 bool bf16_operands, StateElements state_elements, int64_t lo = 0,
                                 int64_t hi = -1) {
  using Counter = CountingBackend<Scalar, Stat>;
  Counter counter;
  counter.state_elements = state_elements;
  Runner<Counter>(config, params, counter, lo, hi).allocate(batch, bf16_operands);
  return counter.bytes;
}

}  // namespace dscore::transformer
