#include "core/zero/flat_storage.h"

#include <dscore/cpp/dtype.hpp>

#include <algorithm>
#include <string>

#include "core/tensor/dtype_ops.h"
#include "core/tensor/host_buffer.h"
#include "core/zero/zero_memory.h"

namespace dscore::zero {

using tensor::element_at;

FlatStorage::FlatStorage(const ParamLayout& layout, dscore_dtype model_dtype,
                         dscore_dtype grad_dtype, int rank, int world, Ownership ownership,
                         bool master_elsewhere)
    : layout_(&layout),
      model_dtype_(model_dtype),
      grad_dtype_(grad_dtype),
      rank_(rank),
      ownership_(ownership),
      master_elsewhere_(master_elsewhere && model_dtype != DSCORE_DTYPE_F32) {
  partition_ = make_flat_partition(layout.total_numel(), world);
  owned_begin_ = replicated() ? 0 : partition_.begin(rank_);
  owned_end_ = replicated() ? partition_.padded_numel : partition_.end(rank_);
  const auto& params = layout.params();
  for (size_t i = 0; i < params.size(); ++i) {
    const int64_t a = std::max(params[i].offset, owned_begin_);
    const int64_t b = std::min(params[i].offset + params[i].numel, owned_end_);
    if (a < b) segments_.push_back({i, a - owned_begin_, b - a, a - params[i].offset});
  }
}

Status FlatStorage::allocate(device::Device* device) {
  const dscore_dtype md = model_dtype_;
  DSCORE_ASSIGN_OR_RETURN(
      params_, allocate_buffer(device, partition_.padded_numel, md, MemoryUse::kParameters,
                               std::string("parameters ") + sdk::dtype_name(md)));
  if (md != DSCORE_DTYPE_F32 && !master_elsewhere_) {
    DSCORE_ASSIGN_OR_RETURN(master_, allocate_buffer(device, owned_numel(), DSCORE_DTYPE_F32,
                                                     MemoryUse::kMaster, "master weights fp32"));
  }
  const auto& params = layout_->params();
  param_views_.clear();
  grad_views_.clear();
  for (const ParamEntry& p : params) {
    param_views_.push_back(param_view(element_at(params_.data(), md, p.offset), md, p));
    grad_views_.push_back(param_view(nullptr, grad_dtype_, p));
    // Both point into buffers of `device` (the reductions' gradient memory too).
    place_view(&param_views_.back(), device);
    place_view(&grad_views_.back(), device);
  }
  param_ptrs_.clear();
  grad_ptrs_.clear();
  for (size_t i = 0; i < params.size(); ++i) {
    param_ptrs_.push_back(&param_views_[i]);
    grad_ptrs_.push_back(&grad_views_[i]);
  }
  return Status::Ok();
}

Status FlatStorage::initialise_owned(const Model& model, device::Device* device,
                                     device::Stream* stream) {
  const auto& params = layout_->params();
  float* master = owned_master();
  for (const OwnedSegment& s : segments_) {
    const ParamEntry& p = params[s.param];
    const int64_t offset_in_param = owned_begin_ + s.offset - p.offset;
    DSCORE_RETURN_IF_ERROR(init_owned(
        model, s.param, offset_in_param, s.numel, master == nullptr ? nullptr : master + s.offset,
        element_at(params_.data(), model_dtype_, owned_begin_ + s.offset), model_dtype_, device,
        stream));
  }
  return Status::Ok();
}

std::vector<OwnedSegment> FlatStorage::checkpoint_segments() const {
  if (!replicated()) return segments_;
  // Owned space is the flat space here: clip to this rank's partition.
  std::vector<OwnedSegment> mine;
  const int64_t lo = partition_.begin(rank_), hi = partition_.end(rank_);
  for (const OwnedSegment& s : segments_) {
    const int64_t a = std::max(s.offset, lo), b = std::min(s.offset + s.numel, hi);
    if (a < b) mine.push_back({s.param, a, b - a, s.element + (a - s.offset)});
  }
  return mine;
}

std::pair<int64_t, int64_t> FlatStorage::norm_range() const {
  // A replicated rank holds every gradient; it counts only its partition's
  // share, exactly as the partitioned stages split them.
  if (replicated()) return {partition_.begin(rank_), partition_.end(rank_)};
  return {0, owned_numel()};
}

float* FlatStorage::owned_master() {
  if (master_elsewhere_) return nullptr;
  return model_dtype_ == DSCORE_DTYPE_F32
             ? reinterpret_cast<float*>(element_at(params_.data(), DSCORE_DTYPE_F32, owned_begin_))
             : static_cast<float*>(master_.data());
}

void* FlatStorage::owned_params16() {
  return model_dtype_ == DSCORE_DTYPE_F32 ? nullptr
                                          : element_at(params_.data(), model_dtype_, owned_begin_);
}

const float* FlatStorage::full_master() const {
  if (model_dtype_ == DSCORE_DTYPE_F32) return static_cast<const float*>(params_.data());
  return replicated() && !master_elsewhere_ ? static_cast<const float*>(master_.data()) : nullptr;
}

void FlatStorage::point_grads(size_t first, size_t end, void* memory, int64_t window) {
  const auto& params = layout_->params();
  for (size_t p = first; p < end; ++p)
    grad_views_[p].data =
        memory == nullptr ? nullptr : element_at(memory, grad_dtype_, params[p].offset - window);
}

std::pair<int64_t, int64_t> FlatStorage::layer_range(size_t layer) const {
  const auto& params = layout_->params();
  const size_t first = layout_->layer_first(layer), end = layout_->layer_end(layer);
  return {params[first].offset, params[end - 1].offset + params[end - 1].numel};
}

}  // namespace dscore::zero
