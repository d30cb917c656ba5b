#include "core/zero/sharded_storage.h"

#include <dscore/cpp/dtype.hpp>

#include <algorithm>

#include "core/base/logging.h"
#include "core/base/strings.h"
#include "core/tensor/dtype_ops.h"
#include "core/tensor/host_buffer.h"
#include "core/zero/plan.h"
#include "core/zero/zero_memory.h"

namespace dscore::zero {

using tensor::element_at;

ShardedStorage::ShardedStorage(const ZeroContext& context)
    : ctx_(context), rank_(context.comm->rank()), world_(context.comm->world_size()) {
  const auto& params = ctx_.layout->params();
  std::vector<int64_t> numels;
  for (const ParamEntry& p : params) numels.push_back(p.numel);
  shards_ = make_sharded_layout(numels, world_);
  for (size_t i = 0; i < params.size(); ++i) {
    const int64_t real = shards_.params[i].real_elements(rank_);
    if (real > 0)
      segments_.push_back(
          {i, shards_.params[i].local_offset, real, shards_.params[i].first_element(rank_)});
  }
  // Persistence (docs/deepspeed-reference.md#stage-3-layout): small params,
  // while the running total of persistent elements stays within the model
  // threshold.
  const config::ZeroConfig& z = *ctx_.zero;
  persistent_.assign(params.size(), 0);
  int64_t persistent_total = 0;
  for (size_t i = 0; i < params.size(); ++i) {
    if (params[i].numel <= z.param_persistence_threshold &&
        persistent_total + params[i].numel <= z.model_persistence_threshold) {
      persistent_[i] = 1;
      persistent_total += params[i].numel;
    }
  }
  const dscore_dtype md = ctx_.model_dtype();
  for (const ParamEntry& p : params) {
    param_views_.push_back(dscore::param_view(nullptr, md, p));
    grad_views_.push_back(dscore::param_view(nullptr, ctx_.grad_dtype(), p));
    place_view(&param_views_.back(), ctx_.device);
    place_view(&grad_views_.back(), ctx_.device);
  }
  for (size_t i = 0; i < params.size(); ++i) {
    param_ptrs_.push_back(&param_views_[i]);
    grad_ptrs_.push_back(&grad_views_[i]);
  }
}

int64_t ShardedStorage::padded(size_t param) const {
  return shards_.params[param].shard_size * world_;
}

int64_t ShardedStorage::padded_layer_elements(size_t layer) const {
  int64_t elements = 0;
  for (size_t p = ctx_.layout->layer_first(layer); p < ctx_.layout->layer_end(layer); ++p)
    elements += padded(p);
  return elements;
}

float* ShardedStorage::owned_master() {
  if (ctx_.master_elsewhere() && ctx_.model_dtype() != DSCORE_DTYPE_F32) return nullptr;
  return ctx_.model_dtype() == DSCORE_DTYPE_F32 ? static_cast<float*>(param_part_.data())
                                                : static_cast<float*>(master_.data());
}

void* ShardedStorage::owned_params16() {
  // null when swapped
  return ctx_.model_dtype() == DSCORE_DTYPE_F32 ? nullptr : param_part_.data();
}

Status ShardedStorage::allocate() {
  const dscore_dtype md = ctx_.model_dtype();
  const int64_t local = shards_.local_numel;
  if (ctx_.param_swapper != nullptr) {
    if (md == DSCORE_DTYPE_F32)
      return invalid_argument(
          "parameters on NVMe need a 16-bit model (bf16 or fp16): an fp32 model's parameters are "
          "its master weights");
    const bool staged = ctx_.device != nullptr && !ctx_.device->memory_is_host();
    const config::OffloadConfig& offload = ctx_.placement->param_offload;
    DSCORE_ASSIGN_OR_RETURN(param_swap_,
                            ParamSwap::create(ctx_.param_swapper, ctx_.param_swap_folder, local, md,
                                              offload.max_in_cpu, staged ? ctx_.device : nullptr));
    const int64_t on_disk = local - param_swap_->resident_elements();
    if (staged) {
      const int64_t ring =
          on_disk > 0 ? param_swap_ring_elements(offload.buffer_count, offload.buffer_size, on_disk)
                      : 0;
      DSCORE_ASSIGN_OR_RETURN(
          swapped_,
          SwappedGathers::create(*param_swap_, *ctx_.device, *ctx_.stream, ctx_.comm_target, md,
                                 static_cast<size_t>(ring) * sdk::dtype_size(md)));
    }
  } else {
    const bool pinned = ctx_.placement->params_pinned_on_host();
    DSCORE_ASSIGN_OR_RETURN(
        param_part_,
        allocate_buffer(ctx_.device, local, md, MemoryUse::kParameters,
                        std::string("parameters ") + sdk::dtype_name(md), tensor::Fill::kZero,
                        pinned ? device::Placement::kPinned : device::Placement::kDevice));
    if (pinned)
      log_info("rank " + std::to_string(rank_) + ": parameters " +
               format_bytes(static_cast<uint64_t>(param_part_.bytes())) +
               " in pinned host memory (offload_param cpu), copied to the device by each gather");
  }
  if (md != DSCORE_DTYPE_F32 && !ctx_.master_elsewhere()) {
    DSCORE_ASSIGN_OR_RETURN(master_, allocate_buffer(ctx_.device, local, DSCORE_DTYPE_F32,
                                                     MemoryUse::kMaster, "master weights fp32"));
  }
  return Status::Ok();
}

Status ShardedStorage::initialise_owned(const Model& model) {
  if (param_swap_) return initialise_swapped(model);
  const dscore_dtype md = ctx_.model_dtype();
  float* master = owned_master();
  for (const OwnedSegment& s : segments_) {
    const ParamShard& shard = shards_.params[s.param];
    DSCORE_RETURN_IF_ERROR(init_owned(model, s.param, shard.first_element(rank_), s.numel,
                                      master == nullptr ? nullptr : master + s.offset,
                                      element_at(param_part_.data(), md, s.offset), md, ctx_.device,
                                      ctx_.stream));
  }
  return Status::Ok();
}

Status ShardedStorage::initialise_swapped(const Model& model) {
  // Piece by piece of the local space (whole granules), front to back, so
  // the file gets every granule once.
  const dscore_dtype md = ctx_.model_dtype();
  const int64_t local = shards_.local_numel;
  const int64_t piece = 1 << 22;  // a multiple of kTileGranularity
  float* master = owned_master();
  DSCORE_ASSIGN_OR_RETURN(
      CountedBuffer staging,
      tensor::allocate_elements(std::min(piece, std::max<int64_t>(local, 1)), md,
                                MemoryUse::kBuffers, "nvme parameter staging"));
  for (int64_t a = 0; a < local; a += piece) {
    const int64_t b = std::min(a + piece, local);
    tensor::fill_zero(staging.get(), md, b - a);  // shard padding
    for (const OwnedSegment& s : segments_) {
      const int64_t lo = std::max(s.offset, a), hi = std::min(s.offset + s.numel, b);
      if (lo >= hi) continue;
      const ParamShard& shard = shards_.params[s.param];
      DSCORE_RETURN_IF_ERROR(
          init_owned(model, s.param, shard.first_element(rank_) + (lo - s.offset), hi - lo,
                     master == nullptr ? nullptr : master + lo,
                     element_at(staging.get(), md, lo - a), md, ctx_.device, ctx_.stream));
    }
    DSCORE_RETURN_IF_ERROR(param_swap_->store(a, b - a, staging.get()));
  }
  std::string how;
  if (swapped_ && param_swap_->resident_elements() > 0)
    how += "; the resident part is pinned and copied to the device from there";
  if (swapped_ && swapped_->ring_bytes() > 0)
    how += "; gathers read the rest through a " + format_bytes(swapped_->ring_bytes()) +
           " pinned staging ring (offload_param buffer_count x buffer_size)";
  log_info("rank " + std::to_string(rank_) + ": parameters " + param_swap_->describe() + how);
  return Status::Ok();
}

Status ShardedStorage::for_each_local_run(
    const std::vector<size_t>& params,
    const std::function<Status(int64_t begin, int64_t at, int64_t count)>& run) const {
  int64_t at = 0;
  for (size_t i = 0; i < params.size();) {
    // A run of params whose shards follow each other in the local space.
    const ParamShard& first = shards_.params[params[i]];
    int64_t count = first.shard_size;
    size_t j = i + 1;
    while (j < params.size() &&
           shards_.params[params[j]].local_offset == first.local_offset + count) {
      count += shards_.params[params[j]].shard_size;
      ++j;
    }
    DSCORE_RETURN_IF_ERROR(run(first.local_offset, at, count));
    at += count;
    i = j;
  }
  return Status::Ok();
}

Status ShardedStorage::pack_shards(const std::vector<size_t>& params, char* packed) {
  const dscore_dtype md = ctx_.model_dtype();
  return for_each_local_run(params, [&](int64_t begin, int64_t at, int64_t count) {
    if (param_swap_) return param_swap_->load(begin, count, element_at(packed, md, at));
    device::ops::copy(ctx_.comm_target, element_at(packed, md, at),
                      element_at(param_part_.data(), md, begin), md, count);
    return Status::Ok();
  });
}

std::vector<ParamRun> ShardedStorage::checkpoint_params() {
  std::vector<ParamRun> runs;
  for (const OwnedSegment& s : segments_) {
    if (!param_swap_) {
      runs.push_back(buffer_run(ctx_, s.param, s.element, s.numel,
                                element_at(param_part_.data(), ctx_.model_dtype(), s.offset)));
      continue;
    }
    ParamSwap* swap = param_swap_.get();
    const int64_t at = s.offset;
    runs.push_back(
        {s.param, s.element, s.numel, nullptr, [swap, at](int64_t first, int64_t count, void* dst) {
           return swap->load(at + first, count, dst);
         }});
  }
  return runs;
}

}  // namespace dscore::zero
