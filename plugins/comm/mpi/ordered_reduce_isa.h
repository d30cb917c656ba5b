// sdk::reduce_chunks (ordered_reduce.hpp) compiled for the widest vector
// ISA the CPU has (AVX-512, AVX2; DSCORE_CPU_ISA lowers it), picked once at
// run time: the same loops and association order, so the same bits, with
// bf16 and fp16 converted 16 or 8 lanes at a time instead of on x86-64's
// baseline SSE2. The local half of every reduce and reduce-scatter.
#pragma once

#include <dscore/comm.h>
#include <dscore/cpp/cpu_isa.hpp>

#include <cstdint>
#include <vector>

namespace dscore::mpi_comm {

// On the ISA picked at start.
void reduce_chunks_widest(const void* chunks, int world, int64_t n, dscore_dtype dtype,
                          dscore_reduce_op op, void* out, std::vector<double>* scratch);
// On `isa` (one the CPU has): for tests.
void reduce_chunks_on(sdk::CpuIsa isa, const void* chunks, int world, int64_t n, dscore_dtype dtype,
                      dscore_reduce_op op, void* out, std::vector<double>* scratch);
// The ISA reduce_chunks_widest takes.
sdk::CpuIsa reduce_isa();

}  // namespace dscore::mpi_comm
