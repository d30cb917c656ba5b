#include "core/engine/step_statistics.h"

#include <algorithm>

#include "core/tensor/host_buffer.h"

namespace dscore {

using device::Placement;

Result<std::unique_ptr<StepStatistics>> StepStatistics::create(device::Device& device, int world) {
  std::unique_ptr<StepStatistics> s(new StepStatistics(device, world));
  const size_t records = sizeof(Record) * static_cast<size_t>(world);
  const device::ops::Backend backend = device.type() == device::DeviceType::kCuda
                                           ? device::ops::Backend::kCuda
                                           : device::ops::Backend::kCpu;
  DSCORE_ASSIGN_OR_RETURN(s->mine_, device.allocate(sizeof(Record), Placement::kDevice,
                                                    MemoryUse::kBuffers, "step statistics"));
  DSCORE_ASSIGN_OR_RETURN(s->gathered_,
                          device.allocate(records, Placement::kDevice, MemoryUse::kBuffers,
                                          "step statistics of every rank"));
  DSCORE_ASSIGN_OR_RETURN(
      s->workspace_,
      device.allocate(std::max<size_t>(1, device::ops::sum_squares_workspace_bytes(backend)),
                      Placement::kDevice, MemoryUse::kBuffers, "step statistics scratch"));
  DSCORE_ASSIGN_OR_RETURN(
      s->host_, device.allocate(records + sizeof(Record), Placement::kPinned, MemoryUse::kBuffers,
                                "step statistics read back"));
  return s;
}

Result<StepStatistics::Totals> StepStatistics::gather(
    const std::vector<zero::GradientShare>& shares, dscore_dtype grad_dtype, double loss,
    device::Stream& compute, device::ops::Target target, device::Stream& comm,
    comm::Communicator& communicator) {
  auto* mine = static_cast<Record*>(mine_.data());
  auto* gathered = static_cast<Record*>(gathered_.data());
  auto* host = static_cast<Record*>(host_.data());
  // The loss travels from the host through the pinned slot after the records.
  Record* staged = host + world_;
  staged->loss = loss;
  void* workspace = workspace_.data();

  compute.wait(comm.record());  // the reduced gradients
  const bool whole = shares.size() == 1 && shares.front().counted.empty();
  if (!whole && target.backend != device::ops::Backend::kCpu)
    return unimplemented(
        "a gradient norm over part of a rank's share (tensor parallelism's replicated "
        "parameters) or over several shares (expert parallelism) is summed on the CPU only");
  compute.enqueue([=] {
    if (whole) {
      const zero::GradientShare& share = shares.front();
      device::ops::sum_squares(target, share.data, grad_dtype, share.numel, &mine->squares,
                               workspace);
      return Status::Ok();
    }
    // Each share's counted ranges in order, merged as the ranks' shares are.
    tensor::SquareSum total;
    for (const zero::GradientShare& share : shares) {
      const std::vector<std::pair<int64_t, int64_t>> all = {{0, share.numel}};
      for (const auto& [first, end] : share.counted.empty() ? all : share.counted)
        total.merge(tensor::sum_squares(
            tensor::element_at(const_cast<void*>(share.data), grad_dtype, first), grad_dtype,
            end - first));
    }
    mine->squares = {total.hi, total.lo, total.non_finite ? 1 : 0, 0};
    return Status::Ok();
  });
  device_.copy(&mine->loss, &staged->loss, sizeof(double), compute);
  comm.wait(compute.record());
  const int64_t bytes = static_cast<int64_t>(sizeof(Record));
  const dscore_device_type type = device_.tensor_device_type();
  const int32_t id = device_.index();
  comm.enqueue([&communicator, mine, gathered, bytes, type, id, world = world_] {
    return communicator.allgather({mine, DSCORE_DTYPE_U8, bytes, type, id},
                                  {gathered, DSCORE_DTYPE_U8, bytes * world, type, id});
  });
  device_.copy(host, gathered, sizeof(Record) * static_cast<size_t>(world_), comm);
  DSCORE_RETURN_IF_ERROR(comm.synchronize());

  Totals totals;
  for (int r = 0; r < world_; ++r) {
    totals.squares.merge(device::ops::to_square_sum(host[r].squares));
    totals.loss_sum += host[r].loss;
  }
  return totals;
}

}  // namespace dscore
