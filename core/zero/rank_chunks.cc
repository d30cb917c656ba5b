#include "core/zero/rank_chunks.h"

#include <dscore/cpp/dtype.hpp>

namespace dscore::zero {

int64_t chunk_elements(const std::vector<ShardedRun>& runs) {
  int64_t elements = 0;
  for (const ShardedRun& run : runs) elements += run.shard;
  return elements;
}

void pack_rank_chunks(device::ops::Target target, const std::vector<ShardedRun>& runs, int world,
                      dscore_dtype dtype, char* chunks) {
  const int64_t es = static_cast<int64_t>(sdk::dtype_size(dtype)), chunk = chunk_elements(runs);
  for (int r = 0; r < world; ++r) {
    int64_t in_chunk = 0;
    for (const ShardedRun& run : runs) {
      if (run.shard == 0) continue;  // an empty shard may have no buffer at all
      device::ops::copy(target, chunks + (r * chunk + in_chunk) * es, run.full + r * run.shard * es,
                        dtype, run.shard);
      in_chunk += run.shard;
    }
  }
}

void unpack_rank_chunks(device::ops::Target target, const char* chunks,
                        const std::vector<ShardedRun>& runs, int world, dscore_dtype dtype) {
  const int64_t es = static_cast<int64_t>(sdk::dtype_size(dtype)), chunk = chunk_elements(runs);
  for (int r = 0; r < world; ++r) {
    int64_t in_chunk = 0;
    for (const ShardedRun& run : runs) {
      if (run.shard == 0) continue;  // an empty shard may have no buffer at all
      device::ops::copy(target, run.full + r * run.shard * es, chunks + (r * chunk + in_chunk) * es,
                        dtype, run.shard);
      in_chunk += run.shard;
    }
  }
}

}  // namespace dscore::zero
