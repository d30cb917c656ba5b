#include "core/engine/preconditioner.h"

#include <dscore/cpp/dtype.hpp>

#include <algorithm>
#include <cmath>
#include <string>

#include "core/tensor/dtype_ops.h"
#include "core/tensor/host_buffer.h"
#include "core/tensor/tensor_view.h"

namespace dscore {
namespace {

// Gradient elements per bucket (its buffer holds as many slot values too):
// 64 MiB of fp32 in all. A larger parameter has a bucket of its own.
constexpr int64_t kBucketElements = int64_t{1} << 23;

bool all_finite(const float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i)
    if (!std::isfinite(x[i])) return false;
  return true;
}

}  // namespace

Result<std::unique_ptr<Preconditioner>> Preconditioner::create(
    OptimizerRunner* runner, zero::ZeroStrategy* strategy, const ParamLayout& layout,
    comm::Communicator* group, bool partitioned, dscore_dtype grad_dtype, bool host_memory) {
  if (runner->preconditioned().empty()) return std::unique_ptr<Preconditioner>();
  const std::string who = runner->instance().info().display();
  auto refuse = [&](const std::string& why) {
    return failed_precondition(who + " updates whole weight matrices (preconditioning), which " +
                               why);
  };
  if (!host_memory)
    return refuse("runs on the host for now: this engine computes on a GPU (docs/gpu.md)");
  if (runner->state().parts().size() != 1 || runner->state().on_host())
    return refuse(
        "needs the optimizer state in memory: remove "
        "\"zero_optimization.offload_optimizer\" (ZeRO-Offload is not supported with it yet)");
  if (strategy->domains().size() != 1)
    return refuse(
        "is not supported with expert parallelism yet: remove \"moe\" or "
        "\"expert_parallel_size\", or use another optimizer");
  const auto& slots = runner->instance().slots();
  if (slots.empty() || slots[0].dtype != DSCORE_DTYPE_F32 || slots[0].elements_per_param != 1)
    return internal_error(who +
                          " preconditions parameters but its slot 0 is not F32 with one "
                          "element per parameter element (optimizer.h)");
  std::unique_ptr<Preconditioner> p(new Preconditioner());
  p->runner_ = runner;
  p->strategy_ = strategy;
  p->layout_ = &layout;
  p->group_ = group;
  p->partitioned_ = partitioned;
  p->grad_dtype_ = grad_dtype;
  std::vector<size_t> index(layout.params().size(), SIZE_MAX);
  for (size_t param : runner->preconditioned()) {
    index[param] = p->wholes_.size();
    p->wholes_.push_back({param, {}});
  }
  for (const zero::OwnedSegment& s : strategy->owned_segments())
    if (index[s.param] != SIZE_MAX) p->wholes_[index[s.param]].owned.push_back(s);
  return p;
}

Status Preconditioner::run(const dscore_schedule_point& point, int64_t step, double in_scale,
                           double out_scale) {
  dscore_optimizer_hparams hparams = OptimizerRunner::hparams_at(point, step, 1.0);
  hparams.group_flags = DSCORE_OPTIMIZER_GROUP_PRECONDITIONED;
  return runner_->state().for_each_tile(TileAccess::kUpdate, [&](const StateTile& tile) -> Status {
    if (tile.begin != 0 || tile.end != strategy_->owned_numel())
      return internal_error("preconditioning expects the optimizer state as one tile");
    void* grads = tile.grads != nullptr ? tile.grads : strategy_->owned_grads();
    float* slot = static_cast<float*>(tile.slots[0]);
    size_t first = 0;
    while (first < wholes_.size()) {
      // Whole parameters until the bucket is full (at least one).
      size_t end = first;
      int64_t numel = 0;
      do {
        numel += layout_->params()[wholes_[end].param].numel;
        ++end;
      } while (end < wholes_.size() &&
               numel + layout_->params()[wholes_[end].param].numel <= kBucketElements);
      DSCORE_RETURN_IF_ERROR(run_bucket(first, end, hparams, in_scale, out_scale, grads, slot));
      first = end;
    }
    return Status::Ok();
  });
}

Status Preconditioner::run_bucket(size_t first, size_t end, const dscore_optimizer_hparams& hparams,
                                  double in_scale, double out_scale, void* grads, float* slot) {
  const auto& params = layout_->params();
  int64_t total = 0;
  for (size_t w = first; w < end; ++w) total += params[wholes_[w].param].numel;
  buffer_.assign(static_cast<size_t>(2 * total), 0.0f);
  float* g = buffer_.data();
  float* m = g + total;
  const float in = static_cast<float>(in_scale);
  // This rank's parts, at their places in the whole parameters.
  int64_t base = 0;
  for (size_t w = first; w < end; ++w) {
    for (const zero::OwnedSegment& s : wholes_[w].owned) {
      float* dst = g + base + s.element;
      tensor::convert(tensor::element_at(grads, grad_dtype_, s.offset), grad_dtype_, dst,
                      DSCORE_DTYPE_F32, s.numel);
      if (in != 1.0f)
        for (int64_t i = 0; i < s.numel; ++i) dst[i] *= in;
      std::copy_n(slot + s.offset, s.numel, m + base + s.element);
    }
    base += params[wholes_[w].param].numel;
  }
  const comm::CommBuffer all{buffer_.data(), DSCORE_DTYPE_F32, 2 * total};
  if (partitioned_) DSCORE_RETURN_IF_ERROR(group_->allreduce(all, all, DSCORE_REDUCE_SUM));
  // Each matrix is transformed by one rank (round-robin) and shared by a
  // second sum, the others holding zeros for it. Every rank holds every
  // gathered gradient, so all decide alike which are finite.
  const int world = group_->world_size();
  std::vector<bool> finite(end - first);
  base = 0;
  for (size_t w = first; w < end; ++w) {
    const ParamEntry& p = params[wholes_[w].param];
    float* pg = g + base;
    float* pm = m + base;
    base += p.numel;
    finite[w - first] = all_finite(pg, p.numel);
    if (static_cast<int>(w % static_cast<size_t>(world)) != group_->rank()) {
      std::fill(pg, pg + p.numel, 0.0f);
      std::fill(pm, pm + p.numel, 0.0f);
      continue;
    }
    if (!finite[w - first]) continue;  // kept as gathered
    dscore_tensor grad = tensor::host_view(pg, DSCORE_DTYPE_F32, p.shape, p.numel, p.name.c_str());
    dscore_tensor state = tensor::host_view(pm, DSCORE_DTYPE_F32, p.shape, p.numel, p.name.c_str());
    const dscore_model_param desc = p.descriptor();
    dscore_optimizer_precondition_args args{};
    args.struct_size = sizeof args;
    args.hparams = &hparams;
    args.param = &desc;
    args.grad = &grad;
    args.state = &state;
    DSCORE_RETURN_IF_ERROR(runner_->instance().precondition(args));
  }
  if (world > 1) DSCORE_RETURN_IF_ERROR(group_->allreduce(all, all, DSCORE_REDUCE_SUM));
  // This rank's parts of the results.
  const float out = static_cast<float>(out_scale);
  base = 0;
  for (size_t w = first; w < end; ++w) {
    const Whole& whole = wholes_[w];
    float* pg = g + base;
    float* pm = m + base;
    base += params[whole.param].numel;
    if (!finite[w - first]) continue;
    for (const zero::OwnedSegment& s : whole.owned) {
      float* src = pg + s.element;
      if (out != 1.0f)
        for (int64_t i = 0; i < s.numel; ++i) src[i] *= out;
      tensor::convert(src, DSCORE_DTYPE_F32, tensor::element_at(grads, grad_dtype_, s.offset),
                      grad_dtype_, s.numel);
      std::copy_n(pm + s.element, s.numel, slot + s.offset);
    }
  }
  return Status::Ok();
}

}  // namespace dscore
