#include "core/zero/rank_chunks.h"

#include <cstring>

namespace dscore::zero {

int64_t chunk_elements(const std::vector<ShardedRun>& runs) {
  int64_t elements = 0;
  for (const ShardedRun& run : runs) elements += run.shard;
  return elements;
}

void pack_rank_chunks(const std::vector<ShardedRun>& runs, int world, size_t element_size,
                      char* chunks) {
  const int64_t es = static_cast<int64_t>(element_size), chunk = chunk_elements(runs);
  for (int r = 0; r < world; ++r) {
    int64_t in_chunk = 0;
    for (const ShardedRun& run : runs) {
      if (run.shard == 0) continue;  // an empty shard may have no buffer at all
      std::memcpy(chunks + (r * chunk + in_chunk) * es, run.full + r * run.shard * es,
                  static_cast<size_t>(run.shard * es));
      in_chunk += run.shard;
    }
  }
}

void unpack_rank_chunks(const char* chunks, const std::vector<ShardedRun>& runs, int world,
                        size_t element_size) {
  const int64_t es = static_cast<int64_t>(element_size), chunk = chunk_elements(runs);
  for (int r = 0; r < world; ++r) {
    int64_t in_chunk = 0;
    for (const ShardedRun& run : runs) {
      if (run.shard == 0) continue;  // an empty shard may have no buffer at all
      std::memcpy(run.full + r * run.shard * es, chunks + (r * chunk + in_chunk) * es,
                  static_cast<size_t>(run.shard * es));
      in_chunk += run.shard;
    }
  }
}

}  // namespace dscore::zero
