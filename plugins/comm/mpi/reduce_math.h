// Ordered reductions for the MPI backend: combine W chunks that arrived in
// rank order, always as ((c0 op c1) op c2) ..., computing in fp32 for 16-bit
// data, so a result never depends on timing or on MPI's algorithm choice.
// That is what makes ZeRO stages bitwise comparable at a fixed world size.
#pragma once

#include <dscore/comm.h>

#include <cstdint>
#include <vector>

namespace dscore::mpi_comm {

// chunks: world x n elements of `dtype`, chunk r from rank r. out: n
// elements. `scratch` is fp32/fp64 working space the function may resize.
// Throws sdk::Error for a dtype/op it cannot reduce.
void reduce_chunks(const void* chunks, int world, int64_t n, dscore_dtype dtype,
                   dscore_reduce_op op, void* out, std::vector<double>* scratch);

}  // namespace dscore::mpi_comm
