#include "ordered_reduce_isa.h"

#include <dscore/cpp/cpu_isa.hpp>
#include <dscore/cpp/ordered_reduce.hpp>

namespace dscore::mpi_comm {
namespace {

// flatten: everything reduce_chunks calls is inlined here and compiled for
// the function's ISA.
__attribute__((target("avx512f"), flatten)) void reduce_avx512(const void* chunks, int world,
                                                               int64_t n, dscore_dtype dtype,
                                                               dscore_reduce_op op, void* out,
                                                               std::vector<double>* scratch) {
  sdk::reduce_chunks(chunks, world, n, dtype, op, out, scratch);
}

__attribute__((target("avx2"), flatten)) void reduce_avx2(const void* chunks, int world, int64_t n,
                                                          dscore_dtype dtype, dscore_reduce_op op,
                                                          void* out, std::vector<double>* scratch) {
  sdk::reduce_chunks(chunks, world, n, dtype, op, out, scratch);
}

}  // namespace

sdk::CpuIsa reduce_isa() {
  static const sdk::CpuIsa isa = sdk::detected_cpu_isa("mpi reductions");
  return isa;
}

void reduce_chunks_widest(const void* chunks, int world, int64_t n, dscore_dtype dtype,
                          dscore_reduce_op op, void* out, std::vector<double>* scratch) {
  reduce_chunks_on(reduce_isa(), chunks, world, n, dtype, op, out, scratch);
}

void reduce_chunks_on(sdk::CpuIsa isa, const void* chunks, int world, int64_t n, dscore_dtype dtype,
                      dscore_reduce_op op, void* out, std::vector<double>* scratch) {
  switch (isa) {
    case sdk::CpuIsa::kAvx512:
      return reduce_avx512(chunks, world, n, dtype, op, out, scratch);
    case sdk::CpuIsa::kAvx2:
      return reduce_avx2(chunks, world, n, dtype, op, out, scratch);
    case sdk::CpuIsa::kScalar:
      break;
  }
  sdk::reduce_chunks(chunks, world, n, dtype, op, out, scratch);
}

}  // namespace dscore::mpi_comm
