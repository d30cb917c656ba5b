// Where a rank's part of a tensor split over the tensor-parallel group lies
// in the whole tensor (model.h: DSCORE_PARAM_TP_SPLIT and the tp_* fields).
// Header-only, for models that declare their parts and for the host that
// reads and writes whole tensors (checkpoints, Hugging Face folders).
#pragma once

#include <dscore/model.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

namespace dscore::sdk {

struct TensorSplit {
  int32_t dim = -1;  // -1: not split (every rank holds the whole tensor)
  int32_t blocks = 1;
  int64_t full_extent = 0;
  int64_t offset = 0;

  bool split() const { return dim >= 0; }

  // What `param` declares (replicated where it predates the fields or has
  // no DSCORE_PARAM_TP_SPLIT flag).
  static TensorSplit of(const dscore_model_param& param) {
    TensorSplit s;
    if (param.struct_size < offsetof(dscore_model_param, tp_offset) + sizeof(param.tp_offset) ||
        (param.flags & DSCORE_PARAM_TP_SPLIT) == 0)
      return s;
    s.dim = param.tp_dim;
    s.blocks = param.tp_blocks;
    s.full_extent = param.tp_full_extent;
    s.offset = param.tp_offset;
    return s;
  }
  // Writes this split into `param`'s fields (and its flag).
  void declare(dscore_model_param* param) const {
    param->tp_dim = dim;
    param->tp_blocks = blocks;
    param->tp_full_extent = full_extent;
    param->tp_offset = offset;
    if (split())
      param->flags |= DSCORE_PARAM_TP_SPLIT;
    else
      param->flags &= ~static_cast<uint32_t>(DSCORE_PARAM_TP_SPLIT);
  }
};

// Entries [first, first + count) of `extent` split over `parts` ranks as
// evenly as can be (the first extent % parts ranks hold one more): part
// `part`'s.
inline std::pair<int64_t, int64_t> even_part(int64_t extent, int parts, int part) {
  const int64_t base = extent / parts, extra = extent % parts;
  return {part * base + std::min<int64_t>(part, extra), base + (part < extra ? 1 : 0)};
}

// The whole tensor's shape (the local one where not split).
inline std::vector<int64_t> whole_shape(const dscore_model_param& param) {
  std::vector<int64_t> shape(param.shape, param.shape + param.ndim);
  const TensorSplit s = TensorSplit::of(param);
  if (s.split()) shape[static_cast<size_t>(s.dim)] = s.full_extent;
  return shape;
}

// fn(local, whole, n) for each run of the local elements [offset, offset +
// count) that lie consecutively in the whole tensor: local element local + i
// is whole element whole + i for i < n. One run when not split.
template <class Fn>
void for_each_whole_run(const dscore_model_param& param, int64_t offset, int64_t count, Fn&& fn) {
  const TensorSplit s = TensorSplit::of(param);
  if (!s.split()) {
    if (count > 0) fn(offset, offset, count);
    return;
  }
  int64_t inner = 1;
  for (int32_t d = s.dim + 1; d < param.ndim; ++d) inner *= param.shape[d];
  const int64_t local_block = param.shape[s.dim] / s.blocks;
  const int64_t whole_block = s.full_extent / s.blocks;
  // A segment: one block's part of one outer row, contiguous both ways.
  const int64_t segment = local_block * inner;
  if (segment == 0) return;
  for (int64_t at = offset, end = offset + count; at < end;) {
    const int64_t index = at / segment, within = at % segment;
    const int64_t outer = index / s.blocks, block = index % s.blocks;
    const int64_t whole = (outer * s.full_extent + block * whole_block + s.offset) * inner + within;
    const int64_t n = std::min(segment - within, end - at);
    fn(at, whole, n);
    at += n;
  }
}

}  // namespace dscore::sdk
